"""Build the measured-step-time fixture from NVIDIA AIConfigurator's kernel database.

    python -m venv /work/venvs/aic && /work/venvs/aic/bin/pip install aiconfigurator==0.12.0
    /work/venvs/aic/bin/python benchmarks/aic_step_fixture.py            # ~30 min on 2 cores
    /work/venvs/aic/bin/python benchmarks/aic_step_fixture.py --quick    # a few cells, to try it

AIConfigurator (Apache-2.0, github.com/ai-dynamo/aiconfigurator; Xu et al., "AIConfigurator:
Lightning-Fast Configuration Optimization for Multi-Framework LLM Serving", arXiv 2601.06288)
ships a database of kernels measured on each GPU (GEMM, attention, NCCL/custom all-reduce,
elementwise ops; here the TensorRT-LLM 1.3.0rc20 tables for h100_sxm and h200_sxm) and sums
them per operation into a step time. ``cli_estimate(mode="static_gen")`` with osl = 2 gives one
decode step of ``batch`` residents at ``isl`` tokens of context; ``mode="static_ctx"`` the prefill
of one ``isl``-token prompt. It runs offline (the database is inside the wheel).

aiconfigurator is **not** a fleetplan dependency: this script runs in its own venv and writes two
CSV files that fleetplan's tests and benchmarks read without it:

* ``tests/data/aic_step_times.csv`` -- fleetplan calibrate's generic ``csv`` format (phase, chips,
  batch_size, prompt_tokens, context_tokens, time_ms, model, chip), one row per cell;
* ``tests/data/aic_step_breakdown.csv`` -- the same cells with AIConfigurator's per-operation
  split (GEMMs, attention, all-reduce, other), in the same order.

Cells AIConfigurator flags as out of memory (weights + KV + activations over the GPU's HBM)
are left out: no engine can run them. The grid: Llama-3.1-8B and -70B, BF16 and FP8 (GEMM,
KV cache and attention in the same format), TP 1/2/4/8; decode batch 1/8/32/64/128/256 x
context 512/2K/8K/32K; prefill of one prompt of 512..32K tokens.
"""

from __future__ import annotations

import argparse
import csv
import logging
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "tests" / "data"
MODELS = {"meta-llama/Meta-Llama-3.1-70B": "llama3.1-70b", "meta-llama/Meta-Llama-3.1-8B": "llama3.1-8b"}
SYSTEMS = {"h100_sxm": "h100", "h200_sxm": "h200"}
PRECISIONS = {"bfloat16": "bf16", "fp8": "fp8"}
TPS = (1, 2, 4, 8)
DECODE_BATCH = (1, 8, 32, 64, 128, 256)
DECODE_CONTEXT = (512, 2048, 8192, 32768)
PREFILL_TOKENS = (512, 1024, 2048, 4096, 8192, 16384, 32768)

GROUPS = {
    "gemm": ("qkv_gemm", "proj_gemm", "gate_ffn1_gemm", "ffn2_gemm", "logits_gemm"),
    "attention": ("attention",),
    "allreduce": ("ar_1", "ar_2", "embedding_ar"),
}


def _split(d: dict, prefix: str) -> dict:
    out = {k: 0.0 for k in (*GROUPS, "other")}
    for op, ms in d.items():
        name = op[len(prefix):] if op.startswith(prefix) else op
        g = next((g for g, ops in GROUPS.items() if name in ops), "other")
        out[g] += float(ms)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a handful of cells (to try the script)")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import aiconfigurator
    from aiconfigurator.cli.api import cli_estimate

    cells = []
    for sysname, chip in SYSTEMS.items():
        for mpath, mname in MODELS.items():
            for q, qn in PRECISIONS.items():
                for tp in TPS:
                    for s in PREFILL_TOKENS:
                        cells.append(("prefill", sysname, chip, mpath, mname, q, qn, tp, 1, s))
                    for b in DECODE_BATCH:
                        for c in DECODE_CONTEXT:
                            cells.append(("decode", sysname, chip, mpath, mname, q, qn, tp, b, c))
    if args.quick:
        cells = [c for c in cells if c[7] == 8 and c[8] in (1, 64) and c[9] in (2048,) and c[5] == "bfloat16"]
    rows, brk = [], []
    t0 = time.perf_counter()
    version = None
    for i, (phase, sysname, chip, mpath, mname, q, qn, tp, b, s) in enumerate(cells):
        mode, osl = ("static_ctx", 1) if phase == "prefill" else ("static_gen", 2)
        r = cli_estimate(mpath, sysname, mode=mode, batch_size=b, isl=s, osl=osl, tp_size=tp,
                         gemm_quant_mode=q, kvcache_quant_mode=q, fmha_quant_mode=q)
        version = r.backend_version
        if r.summary.check_oom():
            continue
        t = r.ttft if phase == "prefill" else r.tpot
        d = r.summary.get_context_latency_dict() if phase == "prefill" else r.summary.get_generation_latency_dict()
        parts = _split(d, "context_" if phase == "prefill" else "generation_")
        model = f"{mname}-{qn}"
        chipq = f"{chip}-{qn}"
        rows.append({"phase": phase, "chips": tp, "batch_size": b, "prompt_tokens": s if phase == "prefill" else "",
                     "context_tokens": s if phase == "decode" else "", "time_ms": f"{t:.6g}", "model": model, "chip": chipq})
        brk.append({"phase": phase, "model": model, "chip": chipq, "chips": tp, "batch_size": b, "tokens": s, "time_ms": f"{t:.6g}",
                    **{f"{k}_ms": f"{v:.6g}" for k, v in parts.items()}, "memory_gb_per_gpu": f"{float(r.raw.get('memory', 0.0)):.4g}"})
        if i % 25 == 0:
            print(f"{i + 1}/{len(cells)} cells, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    head = (f"# Step times estimated by NVIDIA AIConfigurator {aiconfigurator.__version__} (database: TensorRT-LLM {version}, "
            "systems h100_sxm and h200_sxm) from its measured kernel tables.\n"
            "# Source: github.com/ai-dynamo/aiconfigurator, Apache-2.0 (the database and the code); derived by "
            "benchmarks/aic_step_fixture.py; fleetplan calibrate's csv format.\n"
            "# decode: one step of batch_size residents at context_tokens each (static_gen, osl 2); prefill: one prompt "
            "(static_ctx). Out-of-memory cells left out.\n")
    for name, data in (("aic_step_times.csv", rows), ("aic_step_breakdown.csv", brk)):
        tmp = OUT / (name + ".tmp")
        with tmp.open("w", newline="", encoding="utf-8") as f:
            f.write(head)
            w = csv.DictWriter(f, fieldnames=list(data[0]), lineterminator="\n")
            w.writeheader()
            w.writerows(data)
        tmp.replace(OUT / name)
    print(f"{len(rows)} rows of {len(cells)} cells in {time.perf_counter() - t0:.0f} s -> {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
