"""Fit the roofline's efficiency priors to measured prefill and decode times (``fleetplan calibrate``).

The model fitted is fleetplan's own roofline (:mod:`fleetplan.perf.roofline`), so the
fitted priors reproduce the measured times when an instance is planned with them:

* prefill of a batch of B prompts of s tokens each on a slice of ``tp`` chips::

      t = B x prefill_time_ms(s) = B x [ (2 A s + 2 L d s^2) / (tp x peak x prefill_mfu) + H_p(s) + prefill_overhead_ms ]

  H_p is what this fit holds at the base priors (the tensor-parallel all-reduces of
  :func:`fleetplan.perf.roofline.step_comm_ms`, the per-layer overhead; attention too
  when the base gives it an ``attention_mfu`` of its own). The weight-read floor of
  very short prompts is in the predictions, not in this linear fit (prefill is taken as
  FLOP-bound).

  ``prefill_time_ms`` is per request (fleetplan's prefill queues serve requests one at a
  time), so a batch of B prompts is B requests' work and B overheads. Linear in
  (1 / prefill_mfu, prefill_overhead_ms): bounded linear least squares
  (``scipy.optimize.lsq_linear``).
* one decode step with B residents each holding c tokens of KV::

      t = decode_step(B, kv_bytes_per_request(c)).step_ms
        = max( W / (tp x hbm x hbm_bw_fraction), 2 A B / (tp x peak x decode_mfu) ) + B KV(c) / (tp x hbm x hbm_bw_fraction)
          + H_d(B) + decode_step_overhead_ms

  (GEMMs, then attention's KV reads -- at hbm_bw_fraction while attention_bw_fraction is
  null; H_d the collectives and per-layer overhead held at the base priors)

  fitted by bounded nonlinear least squares (``scipy.optimize.least_squares``, several
  starts). ``decode_mfu`` is kept only if the points compute-bound at the best fit span
  at least two compute/memory ratios (one ratio -- one point, or the same batch and
  context at several TPs -- would be interpolated, not fitted; a point whose compute
  term ties its memory term sits on the kink and counts for neither side); otherwise it
  is held at the base priors' value and not written. The bandwidth needs two
  memory-bound points likewise.

Both fits minimise the squared *relative* errors, sum((predicted - measured) /
measured)^2, over the medians of the repeated measurements (the times span 40 ms to
11 s; absolute errors would let the largest batches decide everything). Bounds keep
every efficiency in [0.001, 1] (the schema's range) and every overhead >= 0 ms.
A point faster than the roofline allows at 100% efficiency and zero overhead did not do
the stated work (e.g. a batch that was not run as one batch); it is excluded, with the
other points of its grid point, and listed in the report.

Formats (read by :mod:`fleetplan.workload.profiles`, re-exported here; sources: /work/shared/data/README.md sections 4 and 5; docs/calibration.md):

* ``splitwise``: Splitwise's ``perf_model.csv`` (Patel et al., ISCA'24).
* ``vidur``: Vidur's per-layer ``mlp.csv`` operator profiles (Agrawal et al., MLSys'24):
  the four GEMMs of a layer (QKV, O, up/gate, down) against num_tokens; no attention,
  no all-reduce. Fits the GEMM efficiency (written as ``prefill_mfu``) and the
  weight-read bandwidth (``hbm_bw_fraction``) with one roofline over all token counts.
* ``csv``: a generic format defined here (:data:`CSV_COLUMNS`).

``terms="physics"`` (``--terms physics``) replaces both fits by one joint fit of every step
prior the points identify -- attention's own bandwidth and efficiency, the collectives'
bandwidth and latencies, the per-layer overhead too -- with
:func:`fleetplan.workload.stepfit.fit_step_priors` on the same perf functions.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import yaml

from fleetplan.errors import Problem
from fleetplan.instance.schema import ModelSpec, Priors
from fleetplan.perf.roofline import decode_step, kv_bytes_per_request, prefill_time_ms
from fleetplan.workload.profiles import (  # noqa: F401 -- the readers, re-exported: fleetplan.workload.profiles
    CSV_COLUMNS,
    CSV_OPTIONAL,
    FORMATS,
    MAX_PROBLEMS,
    MAX_PROFILE_BYTES,
    MAX_PROFILE_VALUE,
    SPLITWISE_COLUMNS,
    SPLITWISE_OPTIONAL,
    VIDUR_COLUMNS,
    VIDUR_GEMMS,
    ProfileError,
    RawProfile,
    load_profile,
)
from fleetplan.workload.calibrate_target import (  # noqa: F401 -- re-exported
    CatalogueModel,
    ChipPeaks,
    Point,
    Target,
    catalogue,
    resolve_target,
    select_points,
)
from fleetplan.workload.calibration_report import (  # noqa: F401 -- re-exported
    Calibration,
    Excluded,
    FittedValue,
    PhaseStats,
    PointFit,
    TPStats,
    _pf_dict,
    _sig,
    _UNITS,
    phase_stats,
)

__all__ = [
    "ProfileError",
    "FORMATS",
    "CSV_COLUMNS",
    "ChipPeaks",
    "CatalogueModel",
    "catalogue",
    "RawProfile",
    "load_profile",
    "Point",
    "Target",
    "resolve_target",
    "select_points",
    "predict_ms",
    "FittedValue",
    "PhaseStats",
    "Calibration",
    "calibrate",
    "dump_priors_yaml",
    "step_fit_values",
    "phase_stats",
    "FITTABLE",
    "TERMS",
]

MIN_EFF = 0.001  # the Priors schema's lower bound for every efficiency (fraction)
FITTABLE = ("prefill_mfu", "prefill_overhead_ms", "hbm_bw_fraction", "decode_mfu", "decode_step_overhead_ms",
            # the step physics beyond the roofline (``--terms physics``; fleetplan.workload.stepfit)
            "attention_bw_fraction", "attention_mfu", "collective_bw_fraction", "collective_latency_us",
            "collective_hop_latency_us", "all_to_all_bw_fraction", "all_to_all_latency_us", "layer_overhead_us")
#: what ``--terms`` may name: ``roofline`` fits the first five with every other step term held
#: at the base priors; ``physics`` fits every prior of :data:`FITTABLE` the data identify.
TERMS = ("roofline", "physics")


# --------------------------------------------------------------------------- catalogue


# --------------------------------------------------------------------------- selection


# --------------------------------------------------------------------------- model columns


def _layer_gemm_model(raw: RawProfile, m: ModelSpec) -> ModelSpec:
    """The model Vidur's mlp.csv measures: only the four GEMMs of each layer, 16-bit weights.

    Parameters per layer: QKV d (h + 2 kv) d/h + O d^2 + up (2 if gated) d f + down f d,
    times the model's layers (shapes from the file's columns).
    """
    d = raw.dims
    h, kv, dm, f, gated = d["n_head"], d["n_kv_head"], d["n_embd"], d["n_expanded_embd"], d["use_gated_mlp"]
    per_layer = dm * (h + 2 * kv) * (dm // h) + dm * dm + (2 if gated else 1) * dm * f + f * dm
    total_b = m.layers * per_layer / 1e9
    return m.model_copy(update={"name": f"{m.name}.layer-gemms", "total_params_b": total_b, "active_params_b": total_b,
                                "bytes_per_weight": 2.0, "moe": None})


def _unit_columns(points: Sequence[Point], model: ModelSpec, chip: ChipPeaks, base: Priors) -> dict[str, np.ndarray]:
    """Per point, the step model's terms at 100% efficiency and zero overhead, from fleetplan's perf functions.

    Returns arrays (shape (n,)): ``prefill_ms`` = batch x the prefill FLOP time at
    prefill_mfu 1 (attention too while attention_mfu is null); ``mem_ms`` the weight reads
    at hbm_bw_fraction 1, ``kv_ms`` the KV reads (decode; at hbm_bw_fraction 1 while
    attention_bw_fraction is null), ``comp_ms`` the FLOPs at decode_mfu 1 (decode and gemm
    points; gemm points hold no KV); ``offset_ms`` what the fit holds at the base priors:
    collectives, per-layer overheads and any attention term with its own prior (prefill:
    batch x per request). Zeros where a term does not apply.
    """
    from fleetplan.perf.roofline import prefill_breakdown

    unit = base.model_copy(update={"prefill_mfu": 1.0, "prefill_overhead_ms": 0.0, "hbm_bw_fraction": 1.0,
                                   "decode_mfu": 1.0, "decode_step_overhead_ms": 0.0, "context_parallel_min_tokens": None})
    held_attn = base.model_copy(update={"context_parallel_min_tokens": None})
    n = len(points)
    pre, mem, kvc, comp, off = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    for i, p in enumerate(points):
        sl = chip.slice(p.tp)
        if p.phase == "prefill":
            pb = prefill_breakdown(model, sl, unit, p.prompt_tokens)
            att_tied = base.attention_mfu is None
            pre[i] = p.batch * float(pb.compute_ms if att_tied else pb.compute_ms - pb.attention_ms)
            fixed = float(pb.comm_ms) + pb.overhead_ms + (0.0 if att_tied else float(prefill_breakdown(model, sl, held_attn, p.prompt_tokens).attention_ms))
            off[i] = p.batch * fixed
        else:
            kv = float(kv_bytes_per_request(model, p.context_tokens)) if p.phase == "decode" else 0.0
            ds = decode_step(model, sl, unit, p.batch, kv)
            d0 = decode_step(model, sl, unit, p.batch, 0.0)
            mem[i], comp[i] = float(d0.memory_ms), float(d0.compute_ms)
            kv_unit = float(ds.memory_ms - d0.memory_ms)
            held = decode_step(model, sl, held_attn, p.batch, kv)  # attention at the base priors when they are its own
            if base.attention_bw_fraction is None and base.attention_mfu is None:
                # tied to hbm_bw_fraction as the perf functions tie them; the fit takes decode
                # attention as KV-bound (its FLOPs are a few % of the KV time for GQA; the
                # predictions below are the perf functions' own max)
                kvc[i] = kv_unit
                att_fixed = 0.0
            else:
                att_fixed = float(held.attention_ms)
            # Vidur's gemm points time the layer GEMMs alone: no collectives, no overheads held
            off[i] = 0.0 if p.phase == "gemm" else float(ds.comm_ms) + ds.overhead_ms + att_fixed
    return {"prefill_ms": pre, "mem_ms": mem, "kv_ms": kvc, "comp_ms": comp, "offset_ms": off}


def predict_ms(points: Sequence[Point], model: ModelSpec, chip: ChipPeaks, priors: Priors) -> np.ndarray:
    """Predicted times of ``points`` (ms, shape (n,)) with fleetplan's roofline at ``priors``:
    prefill = batch x prefill_time_ms(prompt); decode = decode_step(batch, KV(context)).step_ms; gemm
    (Vidur's layer GEMMs, no collectives) = decode_step's gemm_ms + decode_step_overhead_ms."""
    out = np.zeros(len(points))
    for i, p in enumerate(points):
        sl = chip.slice(p.tp)
        if p.phase == "prefill":
            out[i] = p.batch * float(prefill_time_ms(model, sl, priors, p.prompt_tokens))
        else:
            kv = float(kv_bytes_per_request(model, p.context_tokens)) if p.phase == "decode" else 0.0
            ds = decode_step(model, sl, priors, p.batch, kv)
            # gemm (Vidur): the layer GEMMs alone, max(weights, FLOPs) + their fixed cost
            out[i] = float(ds.gemm_ms) + priors.decode_step_overhead_ms if p.phase == "gemm" else float(ds.step_ms)
    return out


# --------------------------------------------------------------------------- fits

INV_MAX = 1.0 / MIN_EFF  # 1/efficiency <= 1000


@dataclass(frozen=True)
class _Solved:
    x: np.ndarray            # fitted (1/eff or ms) values
    free: tuple[bool, ...]   # which were fitted
    stderr: np.ndarray       # standard errors (nan: not fitted, at a bound or singular)


def _stderr(J: np.ndarray, resid: np.ndarray, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, free: Sequence[bool]) -> np.ndarray:
    """Asymptotic standard errors of the free, interior parameters: sqrt(diag((J'J)^-1) SSR/(n-p))."""
    se = np.full(len(x), np.nan)
    inner = [i for i in range(len(x)) if free[i] and not _at(x[i], lo[i], hi[i])]
    n, k = len(resid), len(inner)
    if k == 0 or n <= k:
        return se
    Jf = J[:, inner]
    try:
        cov = np.linalg.inv(Jf.T @ Jf) * float(resid @ resid) / (n - k)
    except np.linalg.LinAlgError:
        return se
    d = np.diag(cov)
    for j, i in enumerate(inner):
        se[i] = math.sqrt(d[j]) if d[j] >= 0 else math.nan
    return se


def _at(v: float, lo: float, hi: float) -> bool:
    return abs(v - lo) <= 1e-7 * max(1.0, abs(lo)) or (math.isfinite(hi) and abs(v - hi) <= 1e-7 * max(1.0, abs(hi)))


def _round_prior(name: str, v: float) -> float:
    """Fractions to 4 decimals (within [0.001, 1]); milliseconds to 3 decimals (1 us)."""
    if name.endswith("_ms"):
        return round(max(float(v), 0.0), 3)
    return min(1.0, max(MIN_EFF, round(float(v), 4)))


def _bound_text(name: str, inv_or_ms: float, lo: float, hi: float) -> str | None:
    if not _at(inv_or_ms, lo, hi):
        return None
    if name.endswith("_ms"):
        return "lower (0 ms)" if abs(inv_or_ms - lo) <= 1e-7 * max(1.0, lo) else f"upper ({hi:.4g} ms, the largest measured time)"
    # u = 1/eff: u at its lower bound 1 is the efficiency's upper bound 1
    return "upper (1.0: the data want more than the peak)" if abs(inv_or_ms - 1.0) <= 1e-7 else f"lower ({MIN_EFF})"


#: Relative tolerance within which a point's compute and memory terms are a tie: the
#: point sits on the kink of the max and is on neither side.
KINK_RTOL = 1e-6


def _sides(mem_ms: np.ndarray, comp_ms: np.ndarray) -> np.ndarray:
    """Which side of the roofline's kink each point is on at a fit: +1 compute-bound, -1
    memory-bound, 0 on the kink (the two terms within :data:`KINK_RTOL` of each other).
    A fit that slides decode_mfu until a point's compute term meets its memory term has
    only learnt a bound on it there (any smaller MFU leaves the point memory-bound at the
    same cost), so a tie counts for neither side."""
    d = comp_ms - mem_ms
    tie = np.abs(d) <= KINK_RTOL * np.maximum(comp_ms, mem_ms)
    return np.where(tie, 0, np.sign(d)).astype(int)


def _distinct(ratios: np.ndarray, rtol: float = KINK_RTOL) -> int:
    """Number of distinct values in ``ratios`` (values within ``rtol`` of the previous
    distinct one are the same)."""
    out, last = 0, None
    for r in np.sort(ratios):
        if last is None or r > last * (1 + rtol):
            out, last = out + 1, r
    return out


def _fit_prefill(pre_ms: np.ndarray, batch: np.ndarray, t: np.ndarray, offset: np.ndarray | None = None) -> _Solved:
    """min sum((B F u + B o + H)/t - 1)^2 over u = 1/prefill_mfu in [1, 1000], o >= 0 (ms): lsq_linear.
    H (``offset``, ms) is what the fit holds: collectives and per-layer overheads at the base priors."""
    from scipy.optimize import lsq_linear

    h = np.zeros(len(t)) if offset is None else offset
    X = np.column_stack([pre_ms, batch]) / t[:, None]
    lo, hi = np.array([1.0, 0.0]), np.array([INV_MAX, np.inf])
    res = lsq_linear(X, 1.0 - h / t, bounds=(lo, hi), method="bvls")
    r = X @ res.x + h / t - 1.0
    return _Solved(res.x, (True, True), _stderr(X, r, res.x, lo, hi, (True, True)))


def _fit_roofline_max(mem: np.ndarray, comp: np.ndarray, t: np.ndarray, hold: dict[int, float],
                      kv: np.ndarray | None = None, offset: np.ndarray | None = None) -> _Solved:
    """min sum((max(M u, C v) + K u + H + o)/t - 1)^2 over u = 1/bw, v = 1/mfu in [1, 1000], o in [0, max t] (ms).

    K (``kv``) is the KV reads at bandwidth 1 (attention's, outside the GEMMs' max) and H
    (``offset``) what the fit holds (collectives, per-layer overheads), both ms; zeros by default.

    ``hold``: parameter index (0 u, 1 v, 2 o) -> fixed value. The max makes the problem
    piecewise linear: a point is compute-bound iff C/M > u/v, so the compute-bound points
    are always those with the largest ratio C/M. Every split of the points sorted by C/M
    is solved as a bounded linear least-squares problem (``scipy.optimize.lsq_linear``),
    the split with the lowest true cost is polished with ``scipy.optimize.least_squares``
    (trf, analytic Jacobian) on the max model itself. A global search over the splits:
    no starting point to choose, the same answer every run.
    """
    from scipy.optimize import least_squares, lsq_linear

    kv = np.zeros(len(t)) if kv is None else kv
    h = np.zeros(len(t)) if offset is None else offset
    lo, hi = np.array([1.0, 1.0, 0.0]), np.array([INV_MAX, INV_MAX, float(t.max())])
    free = [i not in hold for i in range(3)]
    fi = [i for i in range(3) if free[i]]

    def full(z):
        x = np.empty(3)
        for i, v in hold.items():
            x[i] = v
        x[fi] = z
        return x

    def resid(z):
        u, v, o = full(z)
        return (np.maximum(mem * u, comp * v) + kv * u + h + o) / t - 1.0

    def jac(z):
        u, v, o = full(z)
        membound = mem * u >= comp * v
        J = np.column_stack([(np.where(membound, mem, 0.0) + kv) / t, np.where(membound, 0.0, comp) / t, 1.0 / t])
        return J[:, fi]

    ratio = comp / np.where(mem > 0, mem, np.finfo(float).tiny)
    cuts = np.unique(ratio)
    best_z, best_cost = None, math.inf
    for cut in np.concatenate([cuts, [np.inf]]):
        cb = ratio >= cut  # compute-bound: the largest ratios
        X = np.column_stack([np.where(cb, 0.0, mem) + kv, np.where(cb, comp, 0.0), np.ones_like(t)]) / t[:, None]
        rhs = np.ones(len(t)) - h / t - sum(X[:, i] * v for i, v in hold.items())
        res = lsq_linear(X[:, fi], rhs, bounds=(lo[fi], hi[fi]), method="bvls")
        cost = float(resid(res.x) @ resid(res.x))
        if cost < best_cost - 1e-15:
            best_z, best_cost = res.x, cost
    z0 = np.clip(best_z, lo[fi], hi[fi])
    pol = least_squares(resid, z0, jac=jac, bounds=(lo[fi], hi[fi]), method="trf", x_scale="jac", ftol=1e-12, xtol=1e-12, gtol=1e-12)
    z = pol.x if 2 * pol.cost <= best_cost else best_z
    x = full(z)
    J = np.zeros((len(t), 3))
    J[:, fi] = jac(z)
    return _Solved(x, tuple(free), _stderr(J, resid(z), x, lo, hi, free))


# --------------------------------------------------------------------------- report


#: the order in which --terms physics keeps collinear priors (earlier names win): a single
#: model's layer count is a constant, so the step overheads keep it and layer_overhead_us,
#: which needs two models, goes; without one-chip points every step pays the same number of
#: collectives, so the overheads keep that constant and collective_latency_us is held.
_PHYSICS_ORDER = ("hbm_bw_fraction", "decode_mfu", "prefill_mfu", "attention_bw_fraction", "attention_mfu", "decode_step_overhead_ms",
                  "prefill_overhead_ms", "collective_bw_fraction", "collective_latency_us", "layer_overhead_us",
                  "collective_hop_latency_us", "all_to_all_bw_fraction", "all_to_all_latency_us")


def step_fit_values(fit, free: Sequence[str], base: Priors) -> tuple[list[FittedValue], dict[str, float]]:
    """The report's rows of a :func:`fleetplan.workload.stepfit.fit_step_priors` result and
    the fitted values (name -> value) for the priors block: each name of ``free`` fitted
    (with its standard error and whether it sits at a bound of its range) or held at
    ``base`` (not identified, not written)."""
    values, upd = [], {}
    for name in free:
        unit = _UNITS.get(name, "us" if name.endswith("_us") else "fraction")
        if name in fit.values:
            v = float(fit.values[name])
            upd[name] = v
            at = v in (0.001, 1.0) or (name.endswith(("_us", "_ms")) and v == 0.0)
            values.append(FittedValue(name, v, unit, _sig(fit.stderr.get(name)), "at a bound of its range" if at else None, True))
        else:
            base_v = getattr(base, name)
            values.append(FittedValue(name, float(base_v) if base_v is not None else math.nan, unit, None, None, False, "held, not identified"))
    return values, upd


def _physics_fit(raw: RawProfile, points: Sequence[Point], target: Target, fit_model: ModelSpec):
    """``--terms physics``: every prior of :data:`FITTABLE` the points identify, jointly, by
    :func:`fleetplan.workload.stepfit.fit_step_priors`. Returns (values, upd, not_identified, notes)."""
    from fleetplan.workload.stepfit import StepPoint, fit_step_priors

    if raw.format == "vidur":
        raise ProfileError(raw.path, [Problem("--terms", "physics needs whole prefill and decode steps; a Vidur mlp.csv times the "
                                                         "layer GEMMs alone: use --terms roofline.")])
    sp = [StepPoint(p.phase, p.tp, p.batch, p.prompt_tokens if p.phase == "prefill" else p.context_tokens, p.time_ms) for p in points]
    free = [n for n in _PHYSICS_ORDER if n in FITTABLE]
    try:
        fit = fit_step_priors(sp, fit_model, target.chip.slice, target.base, free)
    except ValueError as e:
        raise ProfileError(raw.path, [Problem("(selection)", f"{e}.")]) from None
    values, upd = step_fit_values(fit, free, target.base)
    nid, notes = dict(fit.not_identified), []
    notes.append("--terms physics: one joint least-squares fit of every step term (fleetplan.workload.stepfit) over both phases; "
                 "the collective terms are identified only by points on several chips.")
    return values, upd, nid, notes


def calibrate(raw: RawProfile, target: Target, tps: Sequence[int] | None = None, terms: str = "roofline") -> Calibration:
    """Fit the efficiency priors of ``target`` to the selected points of ``raw``.

    Args:
        raw: a validated profile (:func:`load_profile`).
        target: model, chip and base priors (:func:`resolve_target`).
        tps: tensor-parallel sizes to use (default: all the selection has); several are
            fitted jointly (one set of priors for every slice shape, as an instance has)
            and the residuals are reported per size.
        terms: ``roofline`` (the five roofline priors, every other step term -- collectives,
            per-layer overhead, attention priors of its own -- held at the base priors) or
            ``physics`` (every prior of :data:`FITTABLE` the points identify, jointly).
    Returns: :class:`Calibration`.
    Raises: :class:`ProfileError` when nothing is left to fit (no rows, every point beyond
        the roofline, or fewer points than parameters in a phase), or ``terms`` physics on a
        Vidur profile.
    The model and the objective: see the module docstring and docs/calibration.md.
    """
    if terms not in TERMS:
        raise ProfileError(raw.path, [Problem("--terms", f"unknown terms {terms!r}; expected {' or '.join(TERMS)}.")])
    spec = target.model.spec
    fit_model = _layer_gemm_model(raw, spec) if raw.format == "vidur" else spec
    points, t, cols, excluded = _screened_points(raw, target, tps, fit_model)
    batch = np.array([float(p.batch) for p in points])
    phase = np.array([p.phase for p in points])
    values: list[FittedValue] = []
    upd: dict[str, float] = {}
    not_identified: dict[str, str] = {}
    notes: list[str] = []
    extra_upd: dict[str, float] = {}

    if terms == "physics":
        values, upd, not_identified, notes = _physics_fit(raw, points, target, fit_model)

    # ---- prefill
    sp = phase == "prefill"
    if sp.any() and terms == "roofline":
        _fit_prefill_priors(raw, cols, batch[sp], t[sp], sp, upd, values)

    # ---- decode (Splitwise, csv) or the GEMM roofline (Vidur)
    for ph in ("decode", "gemm") if terms == "roofline" else ():
        sd = phase == ph
        if not sd.any():
            continue
        if sd.sum() < 3:
            raise ProfileError(raw.path, [Problem("(selection)", f"{int(sd.sum())} {ph} point(s); the fit needs at least 3.")])
        _fit_step_priors(target, ph, cols, t, sd, upd, extra_upd, values, not_identified)

    notes += _profile_notes(raw, target, fit_model, points, excluded, upd, not_identified)
    # ---- predictions with the rounded priors, exactly as fleetplan will compute them
    fitted = Priors.model_validate({**target.base.model_dump(), **upd, **extra_upd})
    pfs, phases = _point_fits(points, fit_model, target, fitted, cols)
    block = {k: upd[k] for k in FITTABLE if k in upd}
    Priors.model_validate({**target.base.model_dump(), **block})  # the block is valid as a partial Priors
    used = sorted({ln for p in points for ln in p.lines})
    return Calibration(
        path=raw.path, format=raw.format, sha256=raw.sha256, model=spec.name, chip=target.chip.name, target_source=target.source,
        profile_model=target.profile_model, profile_chip=target.profile_chip, tps=tuple(sorted({p.tp for p in points})),
        rows_used=len(used), values=tuple(values), phases=tuple(phases), points=tuple(pfs), excluded=tuple(excluded),
        not_identified=not_identified, notes=tuple(notes), priors=block, fitted=fitted,
    )


def _screened_points(raw: RawProfile, target: Target, tps: Sequence[int] | None, fit_model: ModelSpec) -> tuple[list[Point], np.ndarray, dict, list[Excluded]]:
    """The selected points less every run (group) one of whose measurements beats the
    roofline at 100% efficiency with zero overhead (the stated work was not done): (the kept
    points, their times (ms), their unit columns (:func:`_unit_columns`), the excluded points
    with the reason). Raises :class:`ProfileError` when none is left."""
    points = select_points(raw, target, tps)
    cols = _unit_columns(points, fit_model, target.chip, target.base)
    t = np.array([p.time_ms for p in points])
    floor = np.where([p.phase == "prefill" for p in points], cols["prefill_ms"], np.maximum(cols["mem_ms"], cols["comp_ms"]) + cols["kv_ms"])
    bad_groups = {p.group for p, f_, tm in zip(points, floor, t) if tm < f_}
    excluded = []
    for p, f_ in zip(points, floor):
        if p.group in bad_groups:
            beat = p.time_ms < f_
            reason = ("measured faster than the roofline at 100% efficiency with zero overhead: the stated work was not done "
                      "(e.g. the batch did not run as one batch)" if beat else
                      "another measurement of the same run beat the roofline floor; the run is excluded whole")
            excluded.append(Excluded(p.phase, p.tp, p.batch, p.prompt_tokens, p.context_tokens, p.time_ms, float(f_), p.lines[0], reason))
    keep = [i for i, p in enumerate(points) if p.group not in bad_groups]
    points = [points[i] for i in keep]
    t = t[keep]
    cols = {k: v[keep] for k, v in cols.items()}
    if not points:
        raise ProfileError(raw.path, [Problem("(selection)", "every point is faster than the roofline at 100% efficiency; "
                                                             "check the model and chip (peaks, bytes per weight) match the profile.")])
    return points, t, cols, excluded


def _fit_prefill_priors(raw: RawProfile, cols: dict, batch: np.ndarray, t: np.ndarray, sp: np.ndarray, upd: dict, values: list) -> None:
    """prefill_mfu and prefill_overhead_ms from the prefill points ``sp`` (:func:`_fit_prefill`),
    rounded into ``upd`` and reported in ``values``. Raises :class:`ProfileError` under 3 points."""
    if sp.sum() < 3:
        raise ProfileError(raw.path, [Problem("(selection)", f"{int(sp.sum())} prefill point(s); fitting prefill_mfu and prefill_overhead_ms needs at least 3.")])
    s = _fit_prefill(cols["prefill_ms"][sp], batch, t, cols["offset_ms"][sp])
    u, o = s.x
    upd["prefill_mfu"] = _round_prior("prefill_mfu", 1.0 / u)
    upd["prefill_overhead_ms"] = _round_prior("prefill_overhead_ms", o)
    values.append(FittedValue("prefill_mfu", upd["prefill_mfu"], _UNITS["prefill_mfu"], _sig(s.stderr[0] / u**2) if math.isfinite(s.stderr[0]) else None,
                              _bound_text("prefill_mfu", u, 1.0, INV_MAX), True))
    values.append(FittedValue("prefill_overhead_ms", upd["prefill_overhead_ms"], _UNITS["prefill_overhead_ms"],
                              _sig(s.stderr[1]) if math.isfinite(s.stderr[1]) else None, _bound_text("prefill_overhead_ms", o, 0.0, math.inf), True))


def _fit_step_priors(target: Target, ph: str, cols: dict, t: np.ndarray, sd: np.ndarray, upd: dict, extra_upd: dict, values: list,
                     not_identified: dict) -> None:
    """The step roofline max(memory / bw, compute / mfu) + overhead of phase ``ph`` (decode
    steps, or Vidur's GEMMs) fitted to the points ``sd`` (:func:`_fit_roofline_max`); a side
    with too few points (memory-bound: 2; compute-bound: 2 distinct compute/memory ratios) is
    held at the base prior and said in ``not_identified``. Fitted priors land in ``upd`` (the
    GEMMs' overhead and decode MFU in ``extra_upd``: used for the predictions, not written)."""
    mem, comp, td = cols["mem_ms"][sd], cols["comp_ms"][sd], t[sd]
    kvd, offd = cols["kv_ms"][sd], cols["offset_ms"][sd]
    s = _fit_roofline_max(mem, comp, td, {}, kvd, offd)
    u, v, o = s.x
    side = _sides(mem * u, comp * v)
    n_comp, n_mem, n_kink = int(np.sum(side > 0)), int(np.sum(side < 0)), int(np.sum(side == 0))
    k_comp = _distinct(comp[side > 0] / mem[side > 0])
    past = float(np.max(comp[side > 0] * v / (mem[side > 0] * u)) - 1.0) if n_comp else 0.0
    hold: dict[int, float] = {}
    if k_comp < 2:
        hold[1] = 1.0 / target.base.decode_mfu
    if n_mem < 2:
        hold[0] = 1.0 / target.base.hbm_bw_fraction
    if hold:
        s = _fit_roofline_max(mem, comp, td, hold, kvd, offd)
        u, v, o = s.x
    se = s.stderr
    bw_name, mfu_name = "hbm_bw_fraction", ("prefill_mfu" if ph == "gemm" else "decode_mfu")
    o_name = "gemm_launch_overhead_ms" if ph == "gemm" else "decode_step_overhead_ms"
    kink = (f"; {n_kink} point(s) sit on the kink (compute term equal to the memory term: the fit slid {mfu_name} until they met, "
            "which bounds it from one side but does not fix it)") if n_kink else ""
    why = {0: f"{n_mem} point(s) memory-bound at the best 3-parameter fit{kink}; at least 2 are needed to fit it",
           1: f"{n_comp} point(s) compute-bound at the best 3-parameter fit, at {k_comp} distinct compute/memory ratio(s)"
              + (f" (their compute term at most {past * 100:.2g}% above their memory term)" if n_comp else "") + f"{kink}; "
              "compute-bound points at 2 ratios are needed to fit it (the same batch and context at another TP has the same "
              "ratio, so it tells no more than one point where the kink lies)"}
    for idx, name, val, side_name, n_side in ((0, bw_name, u, "memory", n_mem), (1, mfu_name, v, "compute", n_comp)):
        if idx in hold:
            not_identified[name] = (f"{why[idx]}, so it is held at the base value {1.0 / val:.4g} "
                                    f"({target.source if target.source != 'catalogue' else 'the roofline at peak'}) and not written.")
            values.append(FittedValue(name, _round_prior(name, 1.0 / val), _UNITS[name], None, None, False, "held, not identified"))
            continue
        upd[name] = _round_prior(name, 1.0 / val)
        values.append(FittedValue(name, upd[name], _UNITS[name], _sig(se[idx] / val**2) if math.isfinite(se[idx]) else None,
                                  _bound_text(name, val, 1.0, INV_MAX), True,
                                  "GEMM efficiency of the layer's linear ops (no attention, no all-reduce)" if ph == "gemm" and idx == 1 else
                                  "achieved weight-read bandwidth of the GEMMs at few tokens" if ph == "gemm" else ""))
    if ph == "gemm":
        extra_upd["decode_step_overhead_ms"] = _round_prior("x_ms", o)
        extra_upd["decode_mfu"] = upd["prefill_mfu"] if "prefill_mfu" in upd else 1.0 / v
        values.append(FittedValue(o_name, _round_prior("x_ms", o), _UNITS[o_name], _sig(se[2]) if math.isfinite(se[2]) else None,
                                  _bound_text(o_name, o, 0.0, float(td.max())), False,
                                  "kernel-level fixed cost of the profiled GEMMs; not a serving step's overhead"))
    else:
        upd[o_name] = _round_prior(o_name, o)
        values.append(FittedValue(o_name, upd[o_name], _UNITS[o_name], _sig(se[2]) if math.isfinite(se[2]) else None,
                                  _bound_text(o_name, o, 0.0, float(td.max())), True))


def _profile_notes(raw: RawProfile, target: Target, fit_model: ModelSpec, points: list[Point], excluded: list, upd: dict,
                   not_identified: dict) -> list[str]:
    """The notes on what the profile can and cannot say (Vidur's GEMM-only rows, whose
    priors are then also added to ``not_identified``; 16-bit profiles against another
    precision; power-capped rows; excluded points; an implausible decode MFU; several TPs)."""
    spec = target.model.spec
    notes = []
    if raw.format == "vidur":
        not_identified["prefill_overhead_ms"] = "mlp.csv times single GEMM kernels: no request or step overhead is in the data."
        not_identified["decode_step_overhead_ms"] = ("mlp.csv holds no serving step (no attention, all-reduce, sampling or scheduling); "
                                                     "the fitted intercept is the GEMM kernels' fixed cost, reported but not written.")
        not_identified["decode_mfu"] = ("not written: the same GEMM efficiency bounds decode's compute term from above, but a "
                                        "decode step also runs attention over the KV, which mlp.csv does not profile.")
        notes.append("Vidur mlp.csv profiles only the linear layers, so prefill_mfu here is the GEMM efficiency: an upper bound on "
                     "a serving prefill's MFU (which also pays attention kernels, all-reduce and scheduling).")
        notes.append(f"the fitted model is {fit_model.name}: {fit_model.total_params_b:.4g} B parameters in the profiled GEMMs "
                     f"({spec.layers} layers), 2 bytes per weight (the profiles are FP16).")
    if spec.bytes_per_weight != 2 or (raw.format != "vidur" and spec.bytes_per_kv_element != 2):
        notes.append(f"the profile was measured with 16-bit weights and KV; {spec.name} is at {spec.bytes_per_weight:g} byte(s) per "
                     f"weight and {spec.bytes_per_kv_element:g} per KV element, so the fitted efficiencies are relative to peaks and "
                     "bytes that differ from what was measured.")
    if raw.format == "splitwise" and (target.profile_chip or "").endswith("-pcap"):
        notes.append("Splitwise's power-capped rows carry the same token_time as the uncapped H100 (data README section 4): "
                     "the decode fit equals h100-80gb's.")
    if excluded:
        notes.append(f"{len(excluded)} point(s) excluded (listed): faster than the roofline allows, or from the same run as one.")
    if "decode_mfu" in upd and upd["decode_mfu"] < 0.2:
        top_b = max((p.batch for p in points if p.phase == "decode"), default=0)
        notes.append(f"decode_mfu {upd['decode_mfu']:.3g} is far below any real compute efficiency: the measured step time grows with "
                     "the batch much faster than the roofline's compute term, and the fit books that growth as compute. It "
                     f"reproduces the profile up to batch {top_b}; a plan riding larger batches extrapolates it (decode turns "
                     "compute-bound early), so check the decode knee before adopting it.")
    if len({p.tp for p in points}) > 1:
        notes.append("one set of priors was fitted across several tensor-parallel degrees; the per-TP rows show how well it holds. "
                     "For the slice size you plan, fit that degree alone with --tp N.")
    return notes


def _point_fits(points: list[Point], fit_model: ModelSpec, target: Target, fitted: Priors, cols: dict) -> tuple[list[PointFit], list]:
    """Each point's prediction with the ``fitted`` priors (ms; Vidur's GEMMs labelled memory-
    or compute-bound) and the statistics per phase (:func:`phase_stats`)."""
    pred = predict_ms(points, fit_model, target.chip, fitted)
    pfs = [PointFit("memory-bound" if p.phase == "gemm" and c_ * (1 / fitted.decode_mfu) <= m_ * (1 / fitted.hbm_bw_fraction) else
                    "compute-bound" if p.phase == "gemm" else p.phase,
                    p.tp, p.batch, p.prompt_tokens, p.context_tokens, p.time_ms, float(pr), float(pr / p.time_ms - 1.0), p.lines[0])
           for p, pr, m_, c_ in zip(points, pred, cols["mem_ms"], cols["comp_ms"])]
    phases = []
    for ph in ("prefill", "decode", "memory-bound", "compute-bound"):
        sel = [q for q in pfs if q.phase == ph]
        if sel:
            phases.append(phase_stats(ph, sel))
    return pfs, phases


def dump_priors_yaml(cal: Calibration) -> str:
    """The document of :meth:`Calibration.document` as YAML (``yaml.safe_dump``, keys in
    order), with a comment header naming the command. Deterministic for the same input."""
    head = (f"# fleetplan calibrate: priors fitted to {cal.path} ({cal.format}, sha256 {cal.sha256[:12]}...)\n"
            f"# for {cal.model} on {cal.chip} x {', '.join(map(str, cal.tps))}. Overlay with: fleetplan solve INSTANCE --priors FILE\n")
    bounded = [v for v in cal.values if v.written and v.bound]
    for v in bounded:
        head += f"# {v.name} = {v.value:g} sits at a bound of its fit ({v.bound}): the data do not pin it; treat it as a limit, not a measurement.\n"
    buf = io.StringIO()
    yaml.safe_dump(cal.document(), buf, sort_keys=False, default_flow_style=False, allow_unicode=True, width=120)
    return head + buf.getvalue()
