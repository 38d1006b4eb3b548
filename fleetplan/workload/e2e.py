"""End-to-end static-batch benchmark results as calibration data (``fleetplan calibrate
--format llm-inference-bench``).

LLM-Inference-Bench (Chitty-Venkata et al., arXiv 2411.00136; BSD-3-Clause; data README
section 6) times whole static batches: ``Latency`` (s) is the time to prefill ``Batch Size``
prompts of ``Input Output Length`` tokens and generate as many tokens for each of them. Its
TTFT file times the prefill of such a batch alone. Neither is a step time, so the fit does
not take them as points: each measurement is a *sum* of the steps fleetplan's roofline
prices, fitted through :func:`fleetplan.workload.stepfit.fit_step_priors` with its
``combine`` matrix.

For a static batch of B prompts of s tokens that each generate n tokens (the first by
the prefill, then n - 1 decode steps with all B resident, the KV growing from s + 1 to
s + n - 1 tokens):

    latency = B x prefill_time_ms(s) + (n - 1) x decode_step(B, KV(s + n/2)).step_ms

The decode step is exact at the mean context s + n/2: every term of
:func:`fleetplan.perf.roofline.decode_step` is either independent of the context (the
GEMMs, the collectives, the overheads) or proportional to it (KV reads and attention
FLOPs, both linear in the KV bytes), so the sum of n - 1 steps is n - 1 steps at the mean.
The prefill is per request (B requests' work and B overheads), as the rest of
``calibrate`` prices a batch of prompts. A TTFT row is B x prefill_time_ms(s).

What static batches identify and what they cannot: the decode step at B = 1 is the weight
read (``hbm_bw_fraction``) plus every per-step constant; its growth with B x context is the
KV read (``attention_bw_fraction``). They cannot identify the prefill from latencies alone
(at input = output length it is a few % of each row, and a fit books there whatever per-row
constant the roofline lacks: it is held unless TTFT rows measure it, :func:`fit_e2e`),
queueing (a static batch never waits), the per-step constant apart from the weight read
when every row runs one model (one weight size: ``decode_step_overhead_ms`` and
``hbm_bw_fraction`` trade, told apart only by the short prompts' weight-read floor, so one of
them often sits at a bound), ``decode_mfu`` (every decode step up to batch 64 is
memory-bound) or the collectives (one TP per engine). The report lists each.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from fleetplan.errors import Problem
from fleetplan.instance.schema import Priors
from fleetplan.workload.calibrate import FITTABLE, Calibration, Excluded, PointFit, Target, phase_stats, step_fit_values
from fleetplan.workload.profiles import MAX_PROFILE_BYTES, ProfileError, Problems, RawProfile, comment_filter, parse_number, text_lines
from fleetplan.workload.stepfit import StepPoint, fit_step_priors, predict_points, step_columns
from fleetplan.workload.traces import file_sha256

__all__ = ["FORMAT", "E2E_FREE", "E2E_PREFILL_FREE", "is_llm_inference_bench", "load_llm_inference_bench", "E2ERow", "select_rows", "fit_e2e",
           "static_batch_ms"]

FORMAT = "llm-inference-bench"
_COMMON = ("Hardware", "Num of Hardware", "Framework", "Model", "Batch Size")
#: All_results.csv (and TP_PP_Results.csv, which adds ``Parallelism Type``): Latency in s for the whole batch
E2E_COLUMNS = _COMMON + ("Input Output Length", "Latency")
#: all_results_TTFT_ITL.csv: TTFT Latency in s (the batch's prefill); ``end_latency`` is read as text and not used
TTFT_COLUMNS = _COMMON + ("Input Length", "Output Length", "TTFT Latency")
_OPTIONAL = ("Throughput", "Parallelism Type", "end_latency")

#: The priors an end-to-end fit frees by default, in the order collinear ones are kept
#: (:func:`fit_step_priors` holds a later name that an earlier one already explains): the
#: decode's always, the prefill's (:data:`E2E_PREFILL_FREE`) only when TTFT rows measure it.
E2E_FREE = ("hbm_bw_fraction", "attention_bw_fraction", "decode_mfu", "decode_step_overhead_ms")
E2E_PREFILL_FREE = ("prefill_mfu", "prefill_overhead_ms")


def is_llm_inference_bench(header: Sequence[str]) -> bool:
    """Whether a CSV header is one of LLM-Inference-Bench's (both files name ``Num of Hardware``)."""
    cols = {c.strip() for c in header}
    return "Num of Hardware" in cols and ("Input Output Length" in cols or "TTFT Latency" in cols)


def _header(path: str) -> tuple[int, list[str]]:
    p = Path(path)
    for n, line in enumerate(comment_filter(text_lines(p)), start=1):
        if line.strip():
            return n, [c.strip() for c in next(csv.reader([line]))]
    raise ProfileError(path, [Problem("line 1", "the file is empty; expected an LLM-Inference-Bench CSV header "
                                                f"({','.join(E2E_COLUMNS)} or {','.join(TTFT_COLUMNS)}).")])


def load_llm_inference_bench(path: str) -> RawProfile:
    """Read and validate an LLM-Inference-Bench CSV (All_results.csv, TP_PP_Results.csv or
    all_results_TTFT_ITL.csv; blank separator lines and '#' comments skipped).

    Returns: :class:`RawProfile` with format ``llm-inference-bench``; records are
    ``(line, model, hardware, chips, framework, kind, input_tokens, output_tokens, batch,
    time_ms)``, kind ``e2e`` (the batch's latency) or ``ttft`` (its prefill). Pipeline-parallel
    rows of TP_PP_Results.csv are left out (fleetplan's slices are tensor parallel): a
    model without any other row is an empty selection later.
    Raises: :class:`ProfileError` naming the line, the column and the unit for a missing
    file, an empty file, missing columns, or a bad value (up to 20, then a count).
    """
    p = Path(path)
    if not p.is_file():
        raise ProfileError(path, [Problem("(file)", "no such file (or not a regular file); give an LLM-Inference-Bench CSV.")])
    if p.stat().st_size > MAX_PROFILE_BYTES:
        raise ProfileError(path, [Problem("(file)", f"file is {p.stat().st_size} bytes; a profile is at most {MAX_PROFILE_BYTES} bytes.")])
    try:
        header_line, header = _header(path)
    except UnicodeDecodeError:
        raise ProfileError(path, [Problem("(file)", "not UTF-8 text: an LLM-Inference-Bench file is a CSV text file.")]) from None
    kind = "e2e" if "Input Output Length" in header else "ttft"
    required = E2E_COLUMNS if kind == "e2e" else TTFT_COLUMNS
    probs = Problems()
    missing = [c for c in required if c not in header]
    if missing:
        probs.add(header_line, None, f"missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}; the LLM-Inference-Bench "
                                     f"{'All_results' if kind == 'e2e' else 'TTFT'} header has {','.join(required)}.")
    unknown = [c for c in header if c and c not in required and c not in _OPTIONAL]
    if unknown:
        probs.add(header_line, None, f"unknown column{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}.")
    probs.raise_if_any(path)
    idx = {c: i for i, c in enumerate(header)}
    recs = []
    pipeline = 0
    with p.open("r", encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(comment_filter(f))
        try:
            for fields in reader:
                line = reader.line_num
                if line <= header_line or not any(x.strip() for x in fields):
                    continue
                if len(fields) < len(required) or len(fields) > len(header):
                    probs.add(line, None, f"{len(fields)} fields; the header has {len(header)}.")
                    continue
                get = lambda c: fields[idx[c]] if idx[c] < len(fields) else ""  # noqa: E731 (a short TTFT row lacks end_latency)
                if "Parallelism Type" in idx and "pipeline" in get("Parallelism Type").lower():
                    pipeline += 1
                    continue
                names = [get(c).strip() for c in ("Hardware", "Framework", "Model")]
                for c, v in zip(("Hardware", "Framework", "Model"), names):
                    if not v:
                        probs.add(line, c, "missing name.")
                chips = parse_number(get("Num of Hardware"), line, "Num of Hardware", "accelerators (tensor parallel), a whole number > 0", probs, integer=True)
                batch = parse_number(get("Batch Size"), line, "Batch Size", "prompts in the static batch, a whole number > 0", probs, integer=True)
                if kind == "e2e":
                    s = parse_number(get("Input Output Length"), line, "Input Output Length", "tokens in and out per request, a whole number > 0", probs, integer=True)
                    n = s
                    t = parse_number(get("Latency"), line, "Latency", "seconds for the whole batch, > 0", probs)
                else:
                    s = parse_number(get("Input Length"), line, "Input Length", "prompt tokens per request, a whole number > 0", probs, integer=True)
                    n = parse_number(get("Output Length"), line, "Output Length", "output tokens per request, a whole number > 0", probs, integer=True)
                    t = parse_number(get("TTFT Latency"), line, "TTFT Latency", "seconds to the batch's first tokens, > 0", probs)
                if not all(names) or any(v is None for v in (chips, batch, s, n, t)):
                    continue
                model = names[2]
                recs.append((line, model, names[0], int(chips), names[1], kind, int(s), int(n), int(batch), float(t) * 1e3))
        except csv.Error as e:
            raise ProfileError(path, [Problem(f"line {reader.line_num}", f"not readable as CSV: {e}.")]) from None
        except UnicodeDecodeError:
            raise ProfileError(path, [Problem("(file)", "not UTF-8 text: an LLM-Inference-Bench file is a CSV text file.")]) from None
    probs.raise_if_any(path)
    if not recs:
        raise ProfileError(path, [Problem(f"line {header_line + 1}", "no data rows after the header"
                                          + (f" ({pipeline} pipeline-parallel rows left out)." if pipeline else "."))])
    return RawProfile(path=path, format=FORMAT, sha256=file_sha256(p), rows=len(recs) + pipeline, records=tuple(recs),
                      models=tuple(sorted({r[1] for r in recs})), chips=tuple(sorted({r[2] for r in recs})),
                      tps=tuple(sorted({r[3] for r in recs})), dims={"pipeline_rows_left_out": pipeline})


@dataclass(frozen=True)
class E2ERow:
    """One fitted measurement: the median of the repeats of one configuration.

    kind ``e2e`` (time_ms = the static batch's latency) or ``ttft`` (its prefill); chips
    (tensor parallel), batch (prompts), input_tokens, output_tokens (per request), time_ms
    (ms), lines (the file lines merged)."""

    kind: str
    chips: int
    batch: int
    input_tokens: int
    output_tokens: int
    time_ms: float
    lines: tuple[int, ...]

    @property
    def mean_context(self) -> float:
        """The decode steps' mean KV context, input + output / 2 (tokens); 0 for a TTFT row."""
        return self.input_tokens + self.output_tokens / 2.0 if self.kind == "e2e" else 0.0


def select_rows(raw: RawProfile, target: Target, tps: Sequence[int] | None, framework: str | None) -> tuple[list[E2ERow], str]:
    """The rows of ``target``'s model and chip, the chosen tensor-parallel sizes and the
    framework (``framework`` None: the selection's only one), medians of repeated rows.
    Returns (rows, framework). Raises :class:`ProfileError` naming the option to choose with."""
    recs = [r for r in raw.records if (target.profile_model is None or r[1] == target.profile_model)
            and (target.profile_chip is None or r[2] == target.profile_chip)]
    present = sorted({r[3] for r in recs})
    if tps:
        missing = [t for t in tps if t not in present]
        if missing:
            raise ProfileError(raw.path, [Problem("--tp", f"no rows with {', '.join(map(str, missing))} accelerators for "
                                                          f"{target.profile_model} on {target.profile_chip}; the file has {', '.join(map(str, present)) or 'none'}.")])
        recs = [r for r in recs if r[3] in set(tps)]
    frameworks = sorted({r[4] for r in recs})
    if framework is None:
        if len(frameworks) > 1:
            raise ProfileError(raw.path, [Problem("--framework", f"the selection holds several engines ({', '.join(frameworks)}); each is its "
                                                                 "own physics: choose one with --framework.")])
    else:
        hit = [f for f in frameworks if f.lower() == framework.lower()]
        if not hit:
            raise ProfileError(raw.path, [Problem("--framework", f"no rows for framework {framework!r} in the selection; it holds: "
                                                                 f"{', '.join(frameworks) or 'none'}.")])
        recs = [r for r in recs if r[4] == hit[0]]
    if not recs:
        raise ProfileError(raw.path, [Problem("(selection)", f"no rows selected for {target.profile_model} on {target.profile_chip}.")])
    groups: dict[tuple, list] = {}
    for (line, _m, _h, chips, _f, kind, s, n, b, t) in recs:
        groups.setdefault((kind, chips, b, s, n), []).append((line, t))
    rows = [E2ERow(kind, chips, b, s, n, statistics.median(x[1] for x in v), tuple(sorted(x[0] for x in v)))
            for (kind, chips, b, s, n), v in sorted(groups.items())]
    return rows, recs[0][4]


def _elementary(rows: Sequence[E2ERow]) -> tuple[list[StepPoint], np.ndarray]:
    """The steps each row sums (a prefill of the batch; for e2e rows, the decode steps at the
    mean context) and the (rows, steps) count matrix."""
    pts: list[StepPoint] = []
    C = np.zeros((len(rows), 2 * len(rows)))
    for i, r in enumerate(rows):
        C[i, len(pts)] = 1.0
        pts.append(StepPoint("prefill", r.chips, r.batch, float(r.input_tokens), math.nan))
        if r.kind == "e2e":
            C[i, len(pts)] = r.output_tokens - 1.0
            pts.append(StepPoint("decode", r.chips, r.batch, r.mean_context, math.nan))
    return pts, C[:, : len(pts)]


def static_batch_ms(model, chip, priors: Priors, rows: Sequence[E2ERow]) -> np.ndarray:
    """Predicted times (ms, shape (rows,)) of ``rows`` with the roofline at ``priors``:
    B x prefill_time_ms(s) (+ (n - 1) decode steps at the mean context for e2e rows)."""
    pts, C = _elementary(rows)
    return C @ predict_points(step_columns(pts, model, chip.slice, priors), pts, priors)


def _floor_priors(base: Priors) -> Priors:
    """``base`` at 100% of every efficiency and zero latencies and overheads: the fastest
    the roofline allows (a measurement below it did not do the stated work)."""
    return base.model_copy(update=dict(hbm_bw_fraction=1.0, decode_mfu=1.0, prefill_mfu=1.0, attention_bw_fraction=1.0, attention_mfu=1.0,
                                       collective_bw_fraction=1.0, all_to_all_bw_fraction=1.0, collective_latency_us=0.0,
                                       collective_hop_latency_us=0.0, all_to_all_latency_us=0.0, layer_overhead_us=0.0,
                                       decode_step_overhead_ms=0.0, prefill_overhead_ms=0.0))


#: The slowest plausible decode step (s; a static batch's Latency over its output tokens) and
#: prefill (s per prompt token; a TTFT Latency over the batch's prompt tokens): a file's
#: seconds written as milliseconds read 1,000x long and land past them.
PLAUSIBLE_STEP_S = 10.0
PLAUSIBLE_PREFILL_S_PER_TOKEN = 0.01


def _check_seconds(path: str, rows: Sequence[E2ERow]) -> None:
    """Refuse (:class:`ProfileError`, naming the line and column) rows whose time per decode
    step or per prompt token is past :data:`PLAUSIBLE_STEP_S` /
    :data:`PLAUSIBLE_PREFILL_S_PER_TOKEN`: the file's Latency columns are seconds."""
    bad = []
    for r in rows:
        if r.kind == "e2e" and r.time_ms / 1e3 / r.output_tokens > PLAUSIBLE_STEP_S:
            bad.append(Problem(f"line {r.lines[0]}: Latency", f"{r.time_ms / 1e3:,.6g} s for {r.output_tokens} tokens out is "
                                                             f"{r.time_ms / 1e3 / r.output_tokens:,.4g} s a decode step, past the "
                                                             f"{PLAUSIBLE_STEP_S:g} s any engine takes: Latency is seconds for the whole "
                                                             "batch (a file in milliseconds reads 1,000x long)."))
        elif r.kind == "ttft" and r.time_ms / 1e3 / (r.batch * r.input_tokens) > PLAUSIBLE_PREFILL_S_PER_TOKEN:
            bad.append(Problem(f"line {r.lines[0]}: TTFT Latency", f"{r.time_ms / 1e3:,.6g} s for {r.batch} x {r.input_tokens} prompt "
                                                                  f"tokens is past {PLAUSIBLE_PREFILL_S_PER_TOKEN:g} s a token: TTFT "
                                                                  "Latency is seconds (a file in milliseconds reads 1,000x long)."))
    if bad:
        raise ProfileError(path, bad[:3] + ([Problem("(file)", f"... and {len(bad) - 3} more rows alike.")] if len(bad) > 3 else []))


def fit_e2e(raw: RawProfile, target: Target, tps: Sequence[int] | None = None, framework: str | None = None,
            free: Sequence[str] | None = None) -> Calibration:
    """Fit the step priors named in ``free`` to the end-to-end rows of ``raw`` (least squares on
    relative errors through :func:`static_batch_ms`; module docstring for the model). ``free``
    None: :data:`E2E_FREE`, and :data:`E2E_PREFILL_FREE` when the selection has TTFT rows --
    latencies alone leave the prefill to a few % of each row, where any per-row constant the
    roofline lacks is booked as prefill (freed on the Llama-3-70B rows, ``prefill_mfu`` comes
    out at 0.29-0.35, half what the file's own TTFT rows measure on 8B models: 0.6); without
    TTFT rows the prefill is held at the base priors and the report says so.

    Returns: :class:`~fleetplan.workload.calibrate.Calibration` (phases ``e2e`` and ``ttft``;
    a point's ``context_tokens`` is the decode steps' mean context). Raises
    :class:`ProfileError` for an empty selection, several frameworks without
    ``framework``, every row beyond the roofline, or fewer rows than free priors."""
    rows, fw = select_rows(raw, target, tps, framework)
    _check_seconds(raw.path, rows)
    spec = target.model.spec
    floor = static_batch_ms(spec, target.chip, _floor_priors(target.base), rows)
    excluded = [Excluded(r.kind, r.chips, r.batch, float(r.input_tokens), r.mean_context, r.time_ms, float(f), r.lines[0],
                         "measured faster than the roofline at 100% efficiency with zero overhead: the stated work was not done")
                for r, f in zip(rows, floor) if r.time_ms < f]
    rows = [r for r, f in zip(rows, floor) if r.time_ms >= f]
    if not rows:
        raise ProfileError(raw.path, [Problem("(selection)", "every row is faster than the roofline at 100% efficiency; check the model "
                                                             "and chip (peaks, bytes per weight) match the benchmark.")])
    has_ttft = any(r.kind == "ttft" for r in rows)
    if free is None:
        free = E2E_FREE + (E2E_PREFILL_FREE if has_ttft else ())
    pts, C = _elementary(rows)
    t = np.array([r.time_ms for r in rows])
    cols = step_columns(pts, spec, target.chip.slice, target.base)
    unknown = [f for f in free if f not in FITTABLE]
    if unknown:
        raise ProfileError(raw.path, [Problem("(free)", f"unknown prior(s) {', '.join(unknown)}; fittable: {', '.join(FITTABLE)}.")])
    try:
        fit = fit_step_priors(pts, spec, target.chip.slice, target.base, list(free), cols, C, t)
    except ValueError as e:
        raise ProfileError(raw.path, [Problem("(selection)", f"{e}.")]) from None
    values, upd = step_fit_values(fit, free, target.base)
    fitted = Priors.model_validate({**target.base.model_dump(), **upd})
    pred = static_batch_ms(spec, target.chip, fitted, rows)
    pfs = tuple(PointFit(r.kind, r.chips, r.batch, float(r.input_tokens), r.mean_context, r.time_ms, float(p), float(p / r.time_ms - 1.0),
                         r.lines[0]) for r, p in zip(rows, pred))
    phases = tuple(phase_stats(ph, [q for q in pfs if q.phase == ph]) for ph in ("e2e", "ttft") if any(q.phase == ph for q in pfs))
    notes = [f"framework {fw}: each row is a sum of steps (the batch's prefill, then output - 1 decode steps at the mean context); "
             "the fit is fleetplan.workload.stepfit's on those sums.",
             "static batches never queue: nothing here informs the queueing model (arrival burstiness, router, chunking).",
             f"Num of Hardware is read as the tensor-parallel size (the slice: {', '.join(str(x) for x in sorted({r.chips for r in rows}))} "
             "chips)."]
    not_identified = dict(fit.not_identified)
    if not has_ttft and not set(E2E_PREFILL_FREE) & set(free):
        for name in E2E_PREFILL_FREE:
            not_identified[name] = ("no TTFT rows: the prefill is a few % of each static batch's latency, and a fit books there any "
                                    "per-row constant the roofline lacks; held at the base priors "
                                    f"({target.source if target.source != 'catalogue' else 'the roofline at peak: give --instance to hold your own'}).")
    elif not has_ttft:
        notes.append("no TTFT rows: the prefill priors rest on the prefill's share of each latency (a few % at input = output length); "
                     "their standard errors say how loosely, and any per-row constant the roofline lacks lands in them.")
    if "decode_mfu" in upd and upd["decode_mfu"] < 0.3:
        notes.append(f"decode_mfu {upd['decode_mfu']:.3g} is far below a real GEMM efficiency: the step grows with the batch faster than "
                     "the KV reads explain and the fit books the rest as compute; it describes these batches (up to "
                     f"{max(r.batch for r in rows)}), not a decode that rides larger ones.")
    if raw.dims.get("pipeline_rows_left_out"):
        notes.append(f"{raw.dims['pipeline_rows_left_out']} pipeline-parallel row(s) of the file were left out.")
    block = {k: upd[k] for k in FITTABLE if k in upd}
    used = sorted({ln for r in rows for ln in r.lines})
    return Calibration(path=raw.path, format=raw.format, sha256=raw.sha256, model=spec.name, chip=target.chip.name, target_source=target.source,
                       profile_model=target.profile_model, profile_chip=target.profile_chip, tps=tuple(sorted({r.chips for r in rows})),
                       rows_used=len(used), values=tuple(values), phases=phases, points=pfs, excluded=tuple(excluded),
                       not_identified=not_identified, notes=tuple(notes), priors=block, fitted=fitted)
