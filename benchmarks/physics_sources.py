"""The bundled physics sources (issue 40): one priors document per measured source of H100 step times.

    python benchmarks/physics_sources.py            # fit and write instances/sources/*.yaml (seconds)
    python benchmarks/physics_sources.py --table    # also: the side-by-side tables (docs/validation.md),
                                                    # benchmarks/results/physics_sources.json, docs/figures/physics-sources.png

Each document is what ``fleetplan calibrate -o`` writes -- ``priors:`` (a partial Priors, laid over
the bundled instance named in ``source.base_instance``: the fields it does not name stay the
instance's), ``source:`` (data, engine, cells, sha256 of every input) and ``fit:`` (the error per
phase and a few cells' step times at the written priors, which tests/unit/test_physics_sources.py
recomputes) -- for the Llama-3-70B-class model of ``instances/llama70b-h100-{bf16,fp8}-p99.yaml``:

* **aiconfigurator** (BF16 and FP8): NVIDIA AIConfigurator 0.12.0's TensorRT-LLM 1.3.0rc20 kernel
  database through ``tests/data/aic_step_times.csv`` (benchmarks/aic_step_fixture.py builds it with
  ``pip install aiconfigurator==0.12.0`` in its own venv). Its priors are the bundled instances' own
  -- benchmarks/validate_physics.py's joint fit, which this script re-runs and checks them against.
* **vidur** (BF16 only): the step Vidur's simulator composes from its measured H100 kernels
  (benchmarks/vidur_steps.py: Llama-2-70B layer GEMMs and small operations, NCCL all-reduces plus an
  eager launch cost per call, attention from the roofline), fitted by fleetplan.workload.stepfit in
  two stages: the all-reduce priors to the measured calls, then the rest to the composed steps.
* **llm-inference-bench-vllm / -trtllm** (BF16 only): LLM-Inference-Bench's end-to-end static-batch
  rows (Llama-3-70B on 4 x H100, vLLM and TensorRT-LLM, input = output = s tokens, batch B), fitted
  by ``fleetplan calibrate --format llm-inference-bench``'s own fit (fleetplan.workload.e2e.fit_e2e,
  with its identification rules): a row's latency is B prefills of s tokens and s - 1 decode steps
  at batch B over contexts s + 1 .. s + s - 1 (the first token comes from the prefill). The rows
  have no TTFT companion for a 70B model, so the prefill is not identified and stays the base
  instance's (AIConfigurator's); the file's ``fit:`` lists every prior held and why.

What does not exist, and why: no FP8 Vidur source (its H100 profiles are FP16/BF16 only) and no FP8
LLM-Inference-Bench source (its H100 rows carry no FP8 run); no 8 x H100 LLM-Inference-Bench rows for
a 70B model (its H100 70B rows are 4-GPU only), so those fits see TP 4 alone.

Inputs: tests/data/aic_step_times.csv (+ aic_step_breakdown.csv for the table) and, under
$FLEETPLAN_DATA (default ../shared/data), vidur-profiling/ and llm-inference-bench/All_results.csv.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import least_squares

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import validate_physics as vp  # noqa: E402  (benchmarks/validate_physics.py: the AIConfigurator fit)
from vidur_steps import VidurProfiles, sha256  # noqa: E402

from fleetplan.instance.io import load_instance  # noqa: E402
from fleetplan.instance.schema import Priors  # noqa: E402
from fleetplan.perf.comm import allreduce_ms  # noqa: E402
from fleetplan.perf.roofline import (SliceSpec, decode_step, kv_bytes_per_request, prefill_breakdown,  # noqa: E402
                                     prefill_time_ms, weight_bytes_resident)
from fleetplan.workload.calibrate import Target, resolve_target  # noqa: E402
from fleetplan.workload.e2e import fit_e2e, load_llm_inference_bench, select_rows, static_batch_ms  # noqa: E402
from fleetplan.workload.stepfit import StepPoint, fit_step_priors  # noqa: E402

#: the public data: $FLEETPLAN_DATA, else ../shared/data beside the checkout (or beside its worktree folder)
DATA = Path(os.environ.get("FLEETPLAN_DATA") or next((p for p in (ROOT.parent / "shared" / "data", ROOT.parent.parent / "shared" / "data")
                                                       if p.is_dir()), ROOT.parent / "shared" / "data"))
AIC = ROOT / "tests" / "data" / "aic_step_times.csv"
VIDUR_MLP = DATA / "vidur-profiling" / "compute" / "h100" / "meta-llama" / "Llama-2-70b-hf" / "mlp.csv"
VIDUR_AR = DATA / "vidur-profiling" / "network" / "h100_dgx" / "all_reduce.csv"
LIB = DATA / "llm-inference-bench" / "All_results.csv"
OUT = ROOT / "instances" / "sources"
BASE = {"bf16": "llama70b-h100-bf16-p99", "fp8": "llama70b-h100-fp8-p99"}
CHIP = "h100"
SCRIPT = "benchmarks/physics_sources.py"
#: the step priors a source may set (the Priors fields stepfit fits, and the all-reduce algorithm)
STEP_FIELDS = ("hbm_bw_fraction", "decode_mfu", "prefill_mfu", "attention_bw_fraction", "attention_mfu", "layer_overhead_us",
               "decode_step_overhead_ms", "prefill_overhead_ms", "allreduce_algorithm", "collective_bw_fraction",
               "collective_latency_us", "collective_hop_latency_us")
UNITS = {"hbm_bw_fraction": "fraction of hbm_tbps", "decode_mfu": "fraction of peak_tflops", "prefill_mfu": "fraction of peak_tflops",
         "attention_bw_fraction": "fraction of hbm_tbps", "attention_mfu": "fraction of peak_tflops",
         "layer_overhead_us": "us per layer per pass", "decode_step_overhead_ms": "ms per decode step",
         "prefill_overhead_ms": "ms per prefill request", "allreduce_algorithm": "-",
         "collective_bw_fraction": "fraction of ici_gbytes_per_s", "collective_latency_us": "us per all-reduce",
         "collective_hop_latency_us": "us per collective step"}
DECODE_BATCH = (1, 8, 32, 64, 128, 256)
DECODE_CONTEXT = (512, 2048, 8192, 32768)
PREFILL_TOKENS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
#: the cells every document records (recomputed by the test): the 70B scenario's neighbourhood
CHECK_CELLS = (("decode", 4, 1, 2048), ("decode", 4, 64, 2048), ("decode", 8, 128, 2048), ("decode", 8, 32, 8192),
               ("prefill", 4, 1, 2048), ("prefill", 8, 1, 8192))


def rounded(name: str, v):
    """A written prior: fractions to 4 decimals, us to 2, ms to 3 (1 us); text as it is."""
    if isinstance(v, str):
        return v
    if name.endswith("_ms"):
        return round(max(float(v), 0.0), 3)
    if name.endswith("_us"):
        return round(max(float(v), 0.0), 2)
    return min(1.0, max(0.001, round(float(v), 4)))


class Ctx:
    """A bundled instance: its model and H100 chip, and fleetplan's step times on it."""

    def __init__(self, precision: str):
        self.precision = precision
        self.inst = load_instance(BASE[precision])

    def slice(self, tp: int) -> SliceSpec:
        return SliceSpec.of(CHIP, self.inst.chips[CHIP], tp)

    def overlay(self, block: dict) -> Priors:
        """The instance's priors with ``block`` laid over (what ``--priors FILE`` does), validated."""
        return Priors.model_validate({**self.inst.priors.model_dump(), **block})

    def step_ms(self, priors: Priors, phase: str, tp: int, batch: int, tokens: float) -> float:
        """fleetplan's time of a cell (ms): one decode step of ``batch`` residents at ``tokens``
        of context, or the prefill of ``batch`` prompts of ``tokens`` (batch x prefill_time_ms)."""
        m, sl = self.inst.model, self.slice(tp)
        if phase == "decode":
            return float(decode_step(m, sl, priors, batch, kv_bytes_per_request(m, tokens)).step_ms)
        return batch * float(prefill_time_ms(m, sl, priors, tokens))

    def fits(self, tp: int, batch: int, context: float) -> bool:
        """The weights and ``batch`` residents' KV of ``context`` tokens fit the slice's HBM."""
        m = self.inst.model
        return weight_bytes_resident(m) + batch * float(kv_bytes_per_request(m, context)) <= self.slice(tp).hbm_gb * 1e9


def stats(rel) -> dict:
    a = np.abs(np.asarray(rel, dtype=float))
    if not a.size:
        return {"cells": 0}
    return {"cells": int(a.size), "median_abs_rel_error": float(f"{np.median(a):.4g}"), "max_abs_rel_error": float(f"{a.max():.4g}"),
            "rms_rel_error": float(f"{np.sqrt(np.mean(a ** 2)):.4g}")}


def phase_stats(cells: list[dict]) -> dict:
    """Per phase: error statistics over ``cells`` (dicts with phase, tp, rel_error), and per TP."""
    out = {}
    for ph in ("decode", "prefill", "e2e"):
        mine = [c for c in cells if c["phase"] == ph]
        if mine:
            out[ph] = {**stats([c["rel_error"] for c in mine]),
                       "by_tp": {tp: stats([c["rel_error"] for c in mine if c["tp"] == tp]) for tp in sorted({c["tp"] for c in mine})}}
    return out


def covers(tps, batch: int, context: int, prompt: int) -> dict:
    """The cells a source's data reach: fleetplan's times elsewhere extrapolate its priors."""
    return {"tensor_parallel": [int(t) for t in tps], "decode_batch_max": int(batch), "decode_context_max_tokens": int(context),
            "prefill_tokens_max": int(prompt)}


def check_cells(ctx: Ctx, priors: Priors, measured: dict | None = None) -> list[dict]:
    """The recorded cells: fleetplan's step time at the written priors (10 significant digits)."""
    out = []
    for ph, tp, b, tok in CHECK_CELLS:
        c = {"phase": ph, "tp": tp, "batch": b, "tokens": tok, "fleetplan_ms": float(f"{ctx.step_ms(priors, ph, tp, b, tok):.10g}")}
        if measured and (ph, tp, b, tok) in measured:
            c["measured_ms"] = measured[(ph, tp, b, tok)]
        out.append(c)
    return out


def document(ctx: Ctx, name: str, description: str, block: dict, source: dict, fit: dict) -> dict:
    priors = ctx.overlay(block)
    measured = fit.pop("_measured", None)
    return {"priors": block,
            "source": {"name": name, "description": description, **source, "model": ctx.inst.model.name, "chip": CHIP,
                       "precision": ctx.precision, "base_instance": BASE[ctx.precision], "script": SCRIPT},
            "fit": {**fit, "cells": check_cells(ctx, priors, measured)}}


def render(doc: dict, name: str) -> str:
    """A document as YAML text with its header; the same input gives the same bytes."""
    head = (f"# fleetplan physics source '{doc['source']['name']}': {doc['source']['description']}\n"
            f"# Written by {SCRIPT} (do not edit by hand). Overlay: fleetplan solve {doc['source']['base_instance']} --priors {name}\n")
    return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True, width=120)


def write(doc: dict, path: Path) -> None:
    """Write a document, atomically (temp file + rename)."""
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(render(doc, path.name), encoding="utf-8")
    tmp.replace(path)


# --------------------------------------------------------------------------- AIConfigurator


def aic_rows(precision: str) -> list[dict]:
    return [r for r in vp.read_fixture(AIC) if r["chip"] == f"h100-{precision}"]


def aiconfigurator(precision: str) -> dict:
    """The AIConfigurator source: the bundled priors, checked against a re-run of their fit."""
    ctx = Ctx(precision)
    rows = aic_rows(precision)
    fit, res = vp.fit_group(rows, {"bf16": "h100-80gb", "fp8": "h100-80gb-fp8"}[precision])
    bundled = ctx.inst.priors
    block = {k: getattr(bundled, k) for k in STEP_FIELDS}  # as bundled, not re-rounded
    for k, v in fit.values.items():  # the bundled priors are this fit, to the digits the instance carries
        if abs(block[k] - v) > 5e-4 * max(abs(v), 1.0):
            raise SystemExit(f"the bundled {BASE[precision]} priors no longer match the AIConfigurator fit: {k} {block[k]} vs {v}")
    priors = ctx.overlay(block)
    cells, measured = [], {}
    for r in rows:
        if "70b" not in r["model"]:
            continue
        p = ctx.step_ms(priors, r["phase"], r["chips"], r["batch"], r["tokens"])
        cells.append({"phase": r["phase"], "tp": r["chips"], "batch": r["batch"], "tokens": r["tokens"], "rel_error": p / r["time_ms"] - 1})
        measured[(r["phase"], r["chips"], r["batch"], int(r["tokens"]))] = r["time_ms"]
    joint = {f"{ph}_{split}": vp._stats([e for r, _, e in res if r["phase"] == ph and vp.is_fit_cell(r) == (split == "fit")])
             for ph in ("decode", "prefill") for split in ("fit", "test")}
    source = {"engine": "TensorRT-LLM 1.3.0rc20 as AIConfigurator's database measures it: its custom all-reduce "
                        "(comm/trtllm/1.3.0rc20/custom_allreduce_perf, timed under CUDA graphs), not NCCL",
              "data": [{"path": "tests/data/aic_step_times.csv", "sha256": sha256(AIC), "rows_used": len(rows),
                        "origin": "NVIDIA AIConfigurator 0.12.0 (github.com/ai-dynamo/aiconfigurator, Apache-2.0), h100_sxm; "
                                  "built by benchmarks/aic_step_fixture.py"}],
              "profile_model": "Llama-3.1-8B and -70B", "profile_chip": "h100_sxm",
              "tensor_parallel": sorted({r["chips"] for r in rows}),
              "covers": covers(sorted({r["chips"] for r in rows if "70b" in r["model"]}), max(DECODE_BATCH), max(DECODE_CONTEXT),
                               max(PREFILL_TOKENS)),
              "cells": "decode: one step of batch 1/8/32/64/128/256 residents at context 512/2K/8K/32K; prefill: one prompt of "
                       "512-32K tokens; cells AIConfigurator flags out of memory left out"}
    fit_doc = {"objective": "the bundled priors: fleetplan.workload.stepfit's joint fit of both phases over both models and every TP "
                            "on the fit cells (decode contexts 512 and 8K, prompts 512/2K/8K/32K; benchmarks/validate_physics.py)",
               "phases": phase_stats(cells),
               "phases_note": "errors of the instance's model at these priors against AIConfigurator's Llama-3.1-70B cells (fit and "
                              "held-out cells together); joint_fit: the fit's own split over both models",
               "joint_fit": joint,
               "parameters": {k: {"value": block[k], "unit": UNITS[k], "status": "fitted" if k in fit.values else "set"} for k in STEP_FIELDS},
               "not_identified": dict(fit.not_identified), "_measured": measured}
    doc = document(ctx, "aiconfigurator-trtllm", f"AIConfigurator 0.12.0 TensorRT-LLM database, H100 SXM {precision.upper()}, "
                   f"TP {'/'.join(map(str, source['tensor_parallel']))} (the bundled priors)", block, source, fit_doc)
    return doc


# --------------------------------------------------------------------------- Vidur


def vidur_profiles(ctx: Ctx) -> VidurProfiles:
    m = ctx.inst.model
    prof = VidurProfiles(VIDUR_MLP, VIDUR_AR, int(m.d_model), int(m.layers))
    kv_heads, head_dim = m.attention.kv_heads, m.attention.head_dim
    if prof.dims != [(m.d_model, m.d_model // head_dim, kv_heads, prof.dims[0][3])]:
        raise SystemExit(f"{VIDUR_MLP}: layer shapes {prof.dims} are not the instance model's")
    return prof


def vidur_grid(ctx: Ctx, prof: VidurProfiles) -> list[tuple[str, int, int, int]]:
    """The composed cells: decode at every TP the profiles have whose slice holds the weights and
    the batch's KV; prefill of one prompt up to 32K tokens (above the profiled 4,096: extrapolated)."""
    out = []
    for tp in prof.tensor_parallel:
        out += [("decode", tp, b, c) for b in DECODE_BATCH for c in DECODE_CONTEXT if ctx.fits(tp, b, c)]
        out += [("prefill", tp, 1, s) for s in PREFILL_TOKENS if ctx.fits(tp, 1, s)]
    return out


def vidur_step(ctx: Ctx, prof: VidurProfiles, phase: str, tp: int, batch: int, tokens: float):
    """The composed Vidur step of a cell; attention from the roofline at the instance's (AIConfigurator's) attention priors."""
    m, sl, pr = ctx.inst.model, ctx.slice(tp), ctx.inst.priors
    if phase == "decode":
        att = float(decode_step(m, sl, pr, batch, kv_bytes_per_request(m, tokens)).attention_ms)
        return prof.step(tp, batch, att, decode_batch=batch)
    return prof.step(tp, tokens, float(prefill_breakdown(m, sl, pr, tokens).attention_ms))


def fit_vidur_collectives(ctx: Ctx, prof: VidurProfiles, grid) -> tuple[dict, dict]:
    """Stage 1: ring all-reduce priors (latency, per-step latency, bandwidth) fitted to the calls
    the composed steps make (NCCL measured + launch), at the measured message sizes."""
    ici = ctx.inst.chips[CHIP].ici_gbytes_per_s
    pts = sorted({(tp, b if ph == "decode" else tok) for ph, tp, b, tok in grid if tp in VIDUR_FIT_TP and (ph == "decode" or tok <= prof.max_tokens)})
    n = np.array([p[0] for p in pts])
    tok = np.array([float(((p[1] + 7) // 8) * 8) for p in pts])
    t = np.array([prof.allreduce_call_ms(tp, k) for tp, k in pts])
    msg = tok * ctx.inst.model.d_model * 2.0

    def pri(x):
        return ctx.inst.priors.model_copy(update={"allreduce_algorithm": "ring", "collective_latency_us": float(x[0]),
                                                  "collective_hop_latency_us": float(x[1]), "collective_bw_fraction": float(1 / x[2])})

    def resid(x):
        return np.concatenate([allreduce_ms(msg[n == k], int(k), ici, pri(x)) for k in sorted(set(n))]) / np.concatenate(
            [t[n == k] for k in sorted(set(n))]) - 1

    best = min((least_squares(resid, x0, bounds=([0, 0, 1], [1e3, 1e2, 1e3]), method="trf", diff_step=1e-7) for x0 in
                ([20.0, 1.0, 1.5], [50.0, 0.1, 1.2], [5.0, 5.0, 3.0])), key=lambda r: r.cost)
    vals = {"collective_latency_us": rounded("collective_latency_us", best.x[0]),
            "collective_hop_latency_us": rounded("collective_hop_latency_us", best.x[1]),
            "collective_bw_fraction": rounded("collective_bw_fraction", 1 / best.x[2])}
    pr = ctx.inst.priors.model_copy(update={"allreduce_algorithm": "ring", **vals})
    cells = []
    for (tp, k), tk, tm in zip(pts, tok, t):
        p = float(allreduce_ms(tk * ctx.inst.model.d_model * 2.0, tp, ici, pr))
        cells.append({"phase": "allreduce", "tp": tp, "tokens": int(tk), "measured_ms": round(tm, 5), "rel_error": p / tm - 1})
    st = {tp: stats([c["rel_error"] for c in cells if c["tp"] == tp]) for tp in sorted({c["tp"] for c in cells})}
    return vals, {"calls": stats([c["rel_error"] for c in cells]), "by_tp": st,
                  "per_call_ms_measured": {f"tp{c['tp']}_tokens{c['tokens']}": c["measured_ms"] for c in cells if c["tokens"] in (8, 64, 128, 2048)}}


VIDUR_FREE = ("hbm_bw_fraction", "decode_mfu", "prefill_mfu", "layer_overhead_us")
#: the slice shapes the bundled instances plan (chips.h100.slice_shapes): the Vidur fit's cells;
#: TP 2 is composed and reported (it barely holds the BF16 weights), not fitted
VIDUR_FIT_TP = (4, 8)


def vidur() -> dict:
    ctx = Ctx("bf16")
    prof = vidur_profiles(ctx)
    grid = vidur_grid(ctx, prof)
    coll, coll_fit = fit_vidur_collectives(ctx, prof, grid)
    # Vidur's rule has no per-step or per-request CPU overhead (skip_cpu_overhead_modeling) and
    # NCCL's ring all-reduce: set, not fitted
    # NCCL's ring all-reduce: set, not fitted; attention is not in Vidur's data: the roofline stand-in's
    # bandwidth divided by Vidur's decode batching overhead (1.1), its FLOP efficiency left at the instance's
    held = {"decode_step_overhead_ms": 0.0, "prefill_overhead_ms": 0.0, "allreduce_algorithm": "ring", **coll,
            "attention_bw_fraction": rounded("attention_bw_fraction", ctx.inst.priors.attention_bw_fraction / 1.1)}
    base = ctx.inst.priors.model_copy(update=held)
    fit_cells = [g for g in grid if g[1] in VIDUR_FIT_TP and (g[0] == "decode" or g[3] <= prof.max_tokens)]
    composed = {g: vidur_step(ctx, prof, *g).total_ms for g in grid}
    pts = [StepPoint(ph, tp, b, float(tok), composed[(ph, tp, b, tok)]) for ph, tp, b, tok in fit_cells]
    f = fit_step_priors(pts, ctx.inst.model, ctx.slice, base, list(VIDUR_FREE))
    block = {**{k: rounded(k, f.values[k]) for k in VIDUR_FREE if k in f.values}, **held}
    block = {k: block[k] for k in STEP_FIELDS if k in block}
    priors = ctx.overlay(block)
    cells = [{"phase": ph, "tp": tp, "batch": b, "tokens": tok, "fitted": (ph, tp, b, tok) in fit_cells,
              "rel_error": ctx.step_ms(priors, ph, tp, b, tok) / composed[(ph, tp, b, tok)] - 1} for ph, tp, b, tok in grid]
    fitted = [c for c in cells if c["fitted"]]
    extra = [c for c in cells if not c["fitted"] and c["phase"] == "prefill" and c["tp"] in VIDUR_FIT_TP]
    other_tp = [c for c in cells if c["tp"] not in VIDUR_FIT_TP]
    params = {k: {"value": block[k], "unit": UNITS[k], "status": "fitted" if k in f.values else "set",
                  **({"stderr": float(f"{f.stderr[k]:.3g}")} if f.stderr.get(k) is not None else {})} for k in block}
    for k in coll:
        params[k]["status"] = "fitted (stage 1: the all-reduce calls)"
    params["attention_bw_fraction"]["status"] = "set: AIConfigurator's 0.8842 / Vidur's decode batching overhead 1.1 (not measured)"
    source = {"engine": "vLLM-era eager engine as Vidur simulates it: NCCL all-reduce (2 per layer per step) plus Vidur's "
                        "nccl_cpu_launch_overhead_ms 0.02 per call, no CUDA graphs, no custom all-reduce",
              "data": [{"path": "vidur-profiling/compute/h100/meta-llama/Llama-2-70b-hf/mlp.csv", "sha256": sha256(VIDUR_MLP),
                        "rows_used": prof.mlp_rows, "origin": "microsoft/vidur data/profiling (MIT), under $FLEETPLAN_DATA"},
                       {"path": "vidur-profiling/network/h100_dgx/all_reduce.csv", "sha256": sha256(VIDUR_AR), "rows_used": prof.ar_rows,
                        "origin": "microsoft/vidur data/profiling (MIT), under $FLEETPLAN_DATA"}],
              "profile_model": "Llama-2-70b-hf", "profile_chip": "h100 (DGX-H100, one node)",
              "tensor_parallel": list(VIDUR_FIT_TP),
              "covers": covers(list(VIDUR_FIT_TP), max(DECODE_BATCH), max(DECODE_CONTEXT), prof.max_tokens),
              "cells": f"composed (benchmarks/vidur_steps.py) at TP 2/4/8, fitted at TP 4 and 8 (the instance's slice shapes): decode "
                       f"batch {'/'.join(map(str, DECODE_BATCH))} x context 512-32K where the slice holds the weights and the KV; "
                       f"prefill of one prompt of 512-{prof.max_tokens} tokens (fitted) and 8K-32K (GEMMs extrapolated linearly "
                       f"beyond the profiled {prof.max_tokens} tokens: reported, not fitted)",
              "attention": "NOT measured: Vidur's attention profiles are not in the data set; decode attention is the roofline's KV "
                           f"read at attention_bw_fraction {ctx.inst.priors.attention_bw_fraction} and prefill attention its causal "
                           f"FLOPs at attention_mfu {ctx.inst.priors.attention_mfu} (AIConfigurator's fitted values), the decode "
                           "part times Vidur's batching overhead 1.1 above batch 1; in the priors: attention_bw_fraction = "
                           "0.8842 / 1.1, attention_mfu the base instance's",
              "model_differences": "Llama-2-70B's layers are Llama-3-70B's (d_model 8192, 64/8 heads, FFN 28,672, 80 layers); "
                                   "Llama-3 has a 128,256-token vocabulary (32,000) and another RoPE base. Vidur counts neither "
                                   "the embedding nor the LM head (nor sampling): a Llama-3-70B step also reads its 1.05 B-parameter "
                                   "LM head, about 0.2 ms at TP 4"}
    fit_doc = {"objective": "stage 1: ring all-reduce priors by least squares on the relative errors of the all-reduce calls the cells "
                            "make; stage 2: fleetplan.workload.stepfit (both phases jointly, relative errors) on the composed steps, "
                            "the stage-1 priors and the set ones held",
               "phases": phase_stats(fitted), "prefill_extrapolated": stats([c["rel_error"] for c in extra]),
               "other_tp": {"note": "TP " + "/".join(map(str, sorted({c["tp"] for c in other_tp}))) + " composed, not fitted",
                            **phase_stats(other_tp)},
               "allreduce": coll_fit, "parameters": params, "not_identified": dict(f.not_identified),
               "notes": ["The composed steps are Vidur's rule over its measured kernels; they are not a run of an engine.",
                         "decode_step_overhead_ms and prefill_overhead_ms are 0 by Vidur's rule (no CPU overheads); the per-layer "
                         "small operations (norms, RoPE, activation, residual add) and the GEMMs' fixed cost go to layer_overhead_us."],
               "_measured": {k: round(v, 6) for k, v in composed.items() if k in CHECK_CELLS}}
    return document(ctx, "vidur-vllm", "Vidur's measured H100 kernels (vLLM-era, eager NCCL all-reduce), Llama-2-70B layers, BF16, "
                    "TP 4/8; attention from the roofline", block, source, fit_doc)


# --------------------------------------------------------------------------- LLM-Inference-Bench

#: the rows fitted: the engine's Llama-3-70B rows on 4 x H100 (its only H100 count for a 70B model)
LIB_MODEL, LIB_CHIP, LIB_TP = "Meta-Llama-3-70B", "h100", 4
#: the held-out check: fitted on these lengths (tokens in = out), tested on the others
LIB_TRAIN = (128, 512, 2048)
#: why each step prior calibrate's end-to-end fit does not free is held (the ones it frees and
#: cannot identify say so themselves, in fit_e2e's not_identified)
LIB_NOT_FREED = {
    "attention_mfu": "the prefill's attention FLOPs: the prefill is held (no TTFT rows), and so is its attention",
    "layer_overhead_us": "one model: a per-layer cost is a per-step constant, carried by decode_step_overhead_ms",
    "collectives (allreduce_algorithm, collective_bw_fraction, collective_latency_us, collective_hop_latency_us)":
        "TP 4 only: every step pays the same all-reduces, a per-step constant and a per-token cost the other decode terms carry"}


def lib_target(raw) -> Target:
    """What `fleetplan calibrate --instance llama70b-h100-bf16-p99 --model Meta-Llama-3-70B --chip h100` fits against."""
    return resolve_target(raw, LIB_MODEL, LIB_CHIP, BASE["bf16"])


def llm_inference_bench(framework: str) -> dict:
    """An LLM-Inference-Bench source: `fleetplan calibrate --format llm-inference-bench`'s fit
    (:func:`fleetplan.workload.e2e.fit_e2e`, its identification rules: the prefill held at the
    base instance's unless TTFT rows measure it -- these rows have none) of the engine's
    Llama-3-70B rows on 4 x H100, on the BF16 instance's priors."""
    ctx = Ctx("bf16")
    raw = load_llm_inference_bench(str(LIB))
    target = lib_target(raw)
    spec, chip = target.model.spec, target.chip
    cal = fit_e2e(raw, target, [LIB_TP], framework)
    if cal.excluded:
        raise SystemExit(f"{LIB}: {len(cal.excluded)} {framework} row(s) faster than the roofline at 100% efficiency")
    block = dict(cal.priors)
    rows, _ = select_rows(raw, target, [LIB_TP], framework)
    cells = [{"phase": p.phase, "tp": p.tp, "batch": p.batch, "tokens": int(p.prompt_tokens), "measured_ms": round(p.measured_ms, 3),
              "fleetplan_ms": float(f"{p.predicted_ms:.10g}"), "rel_error": p.rel_error} for p in cal.points]
    # held-out lengths: the same fit on 128/512/2048 tokens, tested on 256/1024
    tr = fit_e2e(replace(raw, records=tuple(r for r in raw.records if r[6] in LIB_TRAIN)), target, [LIB_TP], framework)
    te = [r for r in rows if r.input_tokens not in LIB_TRAIN]
    cv = {"train_lengths": list(LIB_TRAIN), "test_lengths": sorted({r.input_tokens for r in te}), "priors": dict(tr.priors),
          "train": stats([p.rel_error for p in tr.points]),
          "test": stats(static_batch_ms(spec, chip, tr.fitted, te) / np.array([r.time_ms for r in te]) - 1)}
    l2, _ = select_rows(raw, replace(target, profile_model="meta-llama/Llama-2-70b-hf"), [LIB_TP], framework)
    l2_err = stats(static_batch_ms(spec, chip, cal.fitted, l2) / np.array([r.time_ms for r in l2]) - 1)
    shares = static_batch_ms(spec, chip, cal.fitted, [replace(r, kind="ttft") for r in rows]) / static_batch_ms(spec, chip, cal.fitted, rows)
    base = target.base
    params = {}
    for v in cal.values:
        status = ("fitted" + (f", {v.bound}" if v.bound else "")) if v.written else "held at the base instance's: not identified"
        params[v.name] = {"value": v.value, "unit": UNITS[v.name], "status": status, **({"stderr": v.stderr} if v.stderr is not None else {})}
    for k in STEP_FIELDS:
        if k not in params:
            params[k] = {"value": getattr(base, k), "unit": UNITS[k],
                         "status": "held at the base instance's: " + ("not identified" if k in cal.not_identified else "not freed")}
    params = {k: params[k] for k in STEP_FIELDS}
    ph = next(p for p in cal.phases if p.phase == "e2e")
    source = {"engine": f"{framework} (LLM-Inference-Bench, 2024: the engine's defaults, static batches)",
              "data": [{"path": "llm-inference-bench/All_results.csv", "sha256": cal.sha256, "rows_used": cal.rows_used,
                        "origin": "argonne-lcf/LLM-Inference-Bench Plots/All_results.csv (BSD-3-Clause; Chitty-Venkata et al., "
                                  "arXiv 2411.00136), under $FLEETPLAN_DATA"}],
              "profile_model": cal.profile_model, "profile_chip": f"{cal.profile_chip} x {LIB_TP}",
              "tensor_parallel": list(cal.tps),
              # no prefill cell is inside the data: the prefill priors are the base instance's, not this source's
              "covers": covers(cal.tps, max(r.batch for r in rows), max(r.input_tokens + r.output_tokens for r in rows), 0),
              "cells": f"end to end: static batches of B = {'/'.join(map(str, sorted({r.batch for r in rows})))} prompts of s = "
                       f"{'/'.join(map(str, sorted({r.input_tokens for r in rows})))} tokens, s output tokens each; latency of the whole batch"}
    fit_doc = {"objective": "fleetplan calibrate --format llm-inference-bench --instance llama70b-h100-bf16-p99 --model Meta-Llama-3-70B "
                            f"--chip h100 --tp {LIB_TP} --framework {framework} (fleetplan.workload.e2e.fit_e2e): least squares on "
                            "relative errors of the rows' latency, each B x prefill_time_ms(s) + (s - 1) x decode_step(B, context "
                            "1.5 s) (exactly the sum of the s - 1 decode steps at contexts s + 1 .. 2s - 1), fleetplan.perf.roofline; "
                            "the priors it does not free, and those it frees but the rows do not identify, held at the base instance's",
               "phases": phase_stats(cells), "r2": float(f"{ph.r2:.4g}"), "held_out_lengths": cv,
               "llama2_70b_rows": {"note": "the same priors against the Llama-2-70B rows of the same engine and GPUs (same layer "
                                           "shapes; 32,000-token vocabulary)", **l2_err},
               "prefill_share_of_latency": {"min": round(float(shares.min()), 4), "max": round(float(shares.max()), 4)},
               "parameters": params, "held_at_base": [k for k in STEP_FIELDS if k not in block],
               "not_identified": {**cal.not_identified, **LIB_NOT_FREED},
               "notes": [*cal.notes,
                         "hbm_bw_fraction and decode_step_overhead_ms trade (one model, one weight size: the weight read is a "
                         "constant per step, as the overhead is), told apart only by the short prompts' weight-read floor; at a "
                         "bound, read them together: the weights at the written rate plus the overhead per step.",
                         "A row times a whole static batch: per-step times are not measured; the decode step the fit implies "
                         "carries whatever the engine does per step (scheduling, sampling, detokenisation): a constant in "
                         "decode_step_overhead_ms and a per-resident part in attention_bw_fraction, the only term of fleetplan's "
                         "memory-bound decode step that grows with the batch (an absorbing parameter, not a measured attention "
                         "bandwidth; beyond the rows' 4,096 tokens of context it extrapolates steeply).",
                         f"The prefill is {shares.min():.1%}-{shares.max():.1%} of a row's latency at these priors: a plan under "
                         "this source prices its prefill at the base instance's priors (AIConfigurator's)."],
               "_measured": {}}
    slug = {"vLLM": "vllm", "TensorRT-LLM": "trtllm"}[framework]
    doc = document(ctx, f"llm-inference-bench-{slug}",
                   f"LLM-Inference-Bench end-to-end rows, {framework}, Llama-3-70B on 4 x H100, BF16, static batches", block, source, fit_doc)
    doc["fit"]["e2e_rows"] = [{**c, "rel_error": round(c["rel_error"], 4)} for c in cells]
    return doc


# --------------------------------------------------------------------------- main

FILES = {("bf16", "aiconfigurator"): "h100-bf16-aiconfigurator.yaml", ("fp8", "aiconfigurator"): "h100-fp8-aiconfigurator.yaml",
         ("bf16", "vidur"): "h100-bf16-vidur.yaml", ("bf16", "lib-vllm"): "h100-bf16-llm-inference-bench-vllm.yaml",
         ("bf16", "lib-trtllm"): "h100-bf16-llm-inference-bench-trtllm.yaml"}


def build() -> dict[str, dict]:
    docs = {FILES[("bf16", "aiconfigurator")]: aiconfigurator("bf16"), FILES[("fp8", "aiconfigurator")]: aiconfigurator("fp8"),
            FILES[("bf16", "vidur")]: vidur(), FILES[("bf16", "lib-vllm")]: llm_inference_bench("vLLM"),
            FILES[("bf16", "lib-trtllm")]: llm_inference_bench("TensorRT-LLM")}
    for d in docs.values():
        _tidy(d)
    return docs


def _tidy(node):
    """Plain Python floats and ints (numpy scalars do not dump as YAML scalars), floats to 10 significant digits."""
    if isinstance(node, dict):
        for k, v in list(node.items()):
            node[k] = _tidy(v)
        return node
    if isinstance(node, list):
        return [_tidy(v) for v in node]
    if isinstance(node, (np.floating, float)):
        return float(f"{float(node):.10g}")
    if isinstance(node, (np.integer,)):
        return int(node)
    return node


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", action="store_true", help="also write the side-by-side tables, JSON and figure")
    args = ap.parse_args(argv)
    missing = [str(p) for p in (AIC, VIDUR_MLP, VIDUR_AR, LIB) if not p.is_file()]
    if missing:
        print("error: input not found: " + ", ".join(missing) + " (set FLEETPLAN_DATA to the directory holding vidur-profiling/ "
              "and llm-inference-bench/)", file=sys.stderr)
        return 2
    t0 = time.process_time()
    docs = build()
    OUT.mkdir(parents=True, exist_ok=True)
    for name, d in docs.items():
        write(d, OUT / name)
        ph = d["fit"]["phases"]
        print(f"{name}: " + "; ".join(f"{k} {v['cells']} cells, median {v['median_abs_rel_error']:.1%}, max {v['max_abs_rel_error']:.1%}"
                                      for k, v in ph.items()))
    if args.table:
        import physics_sources_table as tbl

        tbl.main(docs)
    print(f"{time.process_time() - t0:.1f} s CPU", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
