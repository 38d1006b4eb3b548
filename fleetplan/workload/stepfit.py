"""Joint least-squares fit of the step-physics priors to measured prefill and decode times.

The model is fleetplan's own (:func:`fleetplan.perf.roofline.decode_step`,
:func:`~fleetplan.perf.roofline.prefill_breakdown`): for a decode step of B residents with
KV(c) bytes each, on a slice of n chips,

    t = max(W u_w, G v_d) + max(KV u_a, A w) + AR + A2A_bw psi + A2A_n alpha_a + A2A_h h + L lambda + o_d,
    AR = AR_bw phi + AR_n alpha + AR_h h   (the smaller of its one-shot and ring columns when the algorithm is auto)

and for the prefill of B prompts of s tokens (B requests, fleetplan's queues serve one at a time)

    t = B x [ max(W u_w, F v_p) + A_p w + AR + A2A... + L lambda + o_p ]

where each capital letter is a *column* -- the perf functions' own term at unit priors
(efficiency 1, latency 1 us or 0): W the weight reads, G / F the GEMM FLOPs, KV the KV
reads, A / A_p the attention FLOPs, AR_bw the all-reduce bytes, AR_n and AR_h its
collective and step counts (us), A2A the MoE all-to-alls, L the layers (us). The
parameters are the priors' inverses (u_w = 1 / hbm_bw_fraction, v_d = 1 / decode_mfu,
v_p = 1 / prefill_mfu, u_a = 1 / attention_bw_fraction, w = 1 / attention_mfu, phi = 1 /
collective_bw_fraction, psi = 1 / all_to_all_bw_fraction) and the latencies / overheads
as they are (alpha = collective_latency_us, h = collective_hop_latency_us, lambda =
layer_overhead_us, o_d = decode_step_overhead_ms, o_p = prefill_overhead_ms). The model
is linear in them except for the two maxima (and the min of an auto all-reduce), so it is fitted by bounded nonlinear least
squares (``scipy.optimize.least_squares``, trf, analytic Jacobian) on the relative errors
from a fixed set of starts (deterministic), the best kept.

Parameters not freed are held at the base priors' values; ``attention_bw_fraction`` and
``attention_mfu`` held while null in the base follow hbm_bw_fraction and decode_mfu /
prefill_mfu as the perf functions do. A parameter whose column is zero on every point
(e.g. the collectives when every point is on one chip) is not identified: it is held and
reported so.

Used by ``fleetplan calibrate --terms physics`` and ``benchmarks/validate_physics.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from fleetplan.instance.schema import ModelSpec, Priors
from fleetplan.perf.roofline import SliceSpec, decode_step, kv_bytes_per_request, prefill_breakdown

__all__ = ["PARAMETERS", "StepPoint", "StepFit", "step_columns", "fit_step_priors", "predict_points"]

#: (prior, kind) in the order of the parameter vector. kind ``inv``: the prior is an
#: efficiency, the parameter its inverse in [1, 1000]; ``us`` / ``ms``: as it is, >= 0.
PARAMETERS: tuple[tuple[str, str], ...] = (
    ("hbm_bw_fraction", "inv"),
    ("decode_mfu", "inv"),
    ("prefill_mfu", "inv"),
    ("attention_bw_fraction", "inv"),
    ("attention_mfu", "inv"),
    ("collective_bw_fraction", "inv"),
    ("collective_latency_us", "us"),
    ("collective_hop_latency_us", "us"),
    ("all_to_all_bw_fraction", "inv"),
    ("all_to_all_latency_us", "us"),
    ("layer_overhead_us", "us"),
    ("decode_step_overhead_ms", "ms"),
    ("prefill_overhead_ms", "ms"),
)
_IDX = {name: i for i, (name, _) in enumerate(PARAMETERS)}
INV_MAX = 1000.0


@dataclass(frozen=True)
class StepPoint:
    """One measured time: ``phase`` prefill (``batch`` prompts of ``tokens`` tokens) or
    decode (one step, ``batch`` residents at ``tokens`` of context), on ``chips`` chips (ms)."""

    phase: str
    chips: int
    batch: int
    tokens: float
    time_ms: float


@dataclass(frozen=True)
class StepFit:
    """The fitted priors (``priors``: the full Priors the predictions use), the fitted values
    by name (efficiencies and latencies as the schema has them), their standard errors, the
    names held because the data cannot identify them, and the relative errors per point."""

    priors: Priors
    values: dict[str, float]
    stderr: dict[str, float | None]
    not_identified: dict[str, str]
    rel_errors: np.ndarray
    cost: float
    free: tuple[str, ...] = field(default_factory=tuple)


def _unit_priors(base: Priors, **kw) -> Priors:
    upd = dict(hbm_bw_fraction=1.0, decode_mfu=1.0, prefill_mfu=1.0, attention_bw_fraction=1.0, attention_mfu=1.0,
               collective_bw_fraction=1.0, all_to_all_bw_fraction=1.0, collective_latency_us=0.0, collective_hop_latency_us=0.0,
               all_to_all_latency_us=0.0, layer_overhead_us=0.0, decode_step_overhead_ms=0.0, prefill_overhead_ms=0.0,
               context_parallel_min_tokens=None)
    upd.update(kw)
    return base.model_copy(update=upd)


def step_columns(points: Sequence[StepPoint], model: ModelSpec, slice_of, base: Priors) -> dict[str, np.ndarray]:
    """The model's columns (ms, shape (n,)) for each point, from the perf functions at unit
    priors. ``slice_of(chips)`` returns the :class:`SliceSpec` of a slice of that many chips.
    Prefill columns are per request (the batch multiplies them in :func:`predict_points`)."""
    n = len(points)
    names = ("W", "G", "KV", "A", "ARbw", "ARn", "ARh", "ARbw2", "ARn2", "ARh2", "A2Abw", "A2An", "A2Ah", "L", "Od", "Op")
    cols = {k: np.zeros(n) for k in names}
    # "auto" all-reduces take the faster of one-shot and ring at each size: a min the fit keeps
    # exact with both algorithms' columns (ARxx one-shot, ARxx2 ring); any other algorithm
    # fills both sets alike
    alg = ("one_shot", "ring") if base.allreduce_algorithm == "auto" else (base.allreduce_algorithm,) * 2
    for a, suffix in zip(alg, ("", "2")):
        _ar_columns(points, model, slice_of, base.model_copy(update={"allreduce_algorithm": a}), cols, suffix)
    u0 = _unit_priors(base)
    u_lat = _unit_priors(base, collective_latency_us=1.0, all_to_all_latency_us=1.0)
    u_hop = _unit_priors(base, collective_hop_latency_us=1.0)
    u_lay = _unit_priors(base, layer_overhead_us=1.0)
    for i, p in enumerate(points):
        sl: SliceSpec = slice_of(p.chips)
        if p.phase == "decode":
            kv = float(kv_bytes_per_request(model, p.tokens))
            d = decode_step(model, sl, u0, p.batch, kv)
            d0 = decode_step(model, sl, u0, p.batch, 0.0)
            cols["W"][i] = float(d0.memory_ms)
            cols["G"][i] = float(d0.compute_ms)
            cols["KV"][i] = float(d.memory_ms - d0.memory_ms)
            cols["A"][i] = float(d.compute_ms - d0.compute_ms)
            cols["A2Abw"][i] = float(d.all_to_all_ms)
            dl = decode_step(model, sl, u_lat, p.batch, kv)
            dh = decode_step(model, sl, u_hop, p.batch, kv)
            cols["A2An"][i] = float(dl.all_to_all_ms - d.all_to_all_ms)
            cols["A2Ah"][i] = float(dh.all_to_all_ms - d.all_to_all_ms)
            cols["L"][i] = decode_step(model, sl, u_lay, p.batch, kv).overhead_ms
            cols["Od"][i] = 1.0
        else:
            tp = prefill_breakdown(model, sl, u0, p.tokens)
            cols["W"][i] = float(tp.memory_ms)
            cols["G"][i] = float(tp.compute_ms - tp.attention_ms)
            cols["A"][i] = float(tp.attention_ms)
            cols["A2Abw"][i] = float(tp.all_to_all_ms)
            tl = prefill_breakdown(model, sl, u_lat, p.tokens)
            th = prefill_breakdown(model, sl, u_hop, p.tokens)
            cols["A2An"][i] = float(tl.all_to_all_ms - tp.all_to_all_ms)
            cols["A2Ah"][i] = float(th.all_to_all_ms - tp.all_to_all_ms)
            cols["L"][i] = prefill_breakdown(model, sl, u_lay, p.tokens).overhead_ms
            cols["Op"][i] = 1.0
    return cols


def _ar_columns(points: Sequence[StepPoint], model: ModelSpec, slice_of, base: Priors, cols: dict, suffix: str) -> None:
    """The all-reduce columns of one algorithm (bytes at fraction 1, collectives x 1 us, steps x 1 us)."""
    u0 = _unit_priors(base)
    u_lat = _unit_priors(base, collective_latency_us=1.0)
    u_hop = _unit_priors(base, collective_hop_latency_us=1.0)
    for i, p in enumerate(points):
        sl: SliceSpec = slice_of(p.chips)
        if p.phase == "decode":
            kv = float(kv_bytes_per_request(model, p.tokens))
            a0, al, ah = (float(decode_step(model, sl, u, p.batch, kv).allreduce_ms) for u in (u0, u_lat, u_hop))
        else:
            a0, al, ah = (float(prefill_breakdown(model, sl, u, p.tokens).allreduce_ms) for u in (u0, u_lat, u_hop))
        cols["ARbw" + suffix][i], cols["ARn" + suffix][i], cols["ARh" + suffix][i] = a0, al - a0, ah - a0


def _x_of(base: Priors) -> np.ndarray:
    x = np.zeros(len(PARAMETERS))
    for i, (name, kind) in enumerate(PARAMETERS):
        v = getattr(base, name)
        if v is None:  # a null attention prior follows its roofline partner
            v = base.hbm_bw_fraction if name == "attention_bw_fraction" else base.decode_mfu
        x[i] = 1.0 / v if kind == "inv" else float(v)
    return x


def _model(x: np.ndarray, cols: dict[str, np.ndarray], is_pre: np.ndarray, batch: np.ndarray, tie_a: bool, tie_w: bool):
    """Predicted times and the Jacobian (n, p) at parameters ``x``."""
    uw, vd, vp, ua, wa, phi, al, hop, psi, ala, lam, od, op = x
    v = np.where(is_pre, vp, vd)
    ua_eff = uw if tie_a else ua
    wa_eff = np.where(is_pre, vp, vd) if tie_w else np.full(len(batch), wa)
    g_mem = cols["W"] * uw >= cols["G"] * v
    a_mem = cols["KV"] * ua_eff >= cols["A"] * wa_eff
    gemm = np.where(g_mem, cols["W"] * uw, cols["G"] * v)
    att = np.where(a_mem, cols["KV"] * ua_eff, cols["A"] * wa_eff)
    ar1 = cols["ARbw"] * phi + cols["ARn"] * al + cols["ARh"] * hop
    ar2 = cols["ARbw2"] * phi + cols["ARn2"] * al + cols["ARh2"] * hop
    first = ar1 <= ar2
    rest = (np.minimum(ar1, ar2) + cols["A2Abw"] * psi + cols["A2An"] * ala + cols["A2Ah"] * hop
            + cols["L"] * lam + cols["Od"] * od + cols["Op"] * op)
    mult = np.where(is_pre, batch, 1.0)
    pred = mult * (gemm + att + rest)
    J = np.zeros((len(batch), len(x)))
    J[:, 0] = np.where(g_mem, cols["W"], 0.0) + (np.where(a_mem, cols["KV"], 0.0) if tie_a else 0.0)
    gv = np.where(g_mem, 0.0, cols["G"])
    av = np.where(a_mem, 0.0, cols["A"]) if tie_w else 0.0
    J[:, 1] = np.where(is_pre, 0.0, gv + av)
    J[:, 2] = np.where(is_pre, gv + av, 0.0)
    if not tie_a:
        J[:, 3] = np.where(a_mem, cols["KV"], 0.0)
    if not tie_w:
        J[:, 4] = np.where(a_mem, 0.0, cols["A"])
    for j, k in ((5, "ARbw"), (6, "ARn"), (7, "ARh")):
        J[:, j] = np.where(first, cols[k], cols[k + "2"])
    J[:, 7] += cols["A2Ah"]
    for j, k in ((8, "A2Abw"), (9, "A2An"), (10, "L"), (11, "Od"), (12, "Op")):
        J[:, j] = cols[k]
    return pred, J * mult[:, None]


def predict_points(cols: dict[str, np.ndarray], points: Sequence[StepPoint], priors: Priors) -> np.ndarray:
    """Times (ms) of ``points`` at ``priors`` from the columns (equal to the perf functions)."""
    is_pre = np.array([p.phase == "prefill" for p in points])
    batch = np.array([float(p.batch) for p in points])
    pred, _ = _model(_x_of(priors), cols, is_pre, batch, priors.attention_bw_fraction is None, priors.attention_mfu is None)
    return pred


def _to_priors(x: np.ndarray, base: Priors, free: Sequence[str], tie_a: bool, tie_w: bool) -> tuple[Priors, dict[str, float]]:
    vals: dict[str, float] = {}
    for name in free:
        i = _IDX[name]
        kind = PARAMETERS[i][1]
        v = 1.0 / x[i] if kind == "inv" else float(x[i])
        vals[name] = round(min(1.0, max(0.001, v)), 4) if kind == "inv" else round(max(v, 0.0), 4 if kind == "us" else 4)
    upd = dict(vals)
    if tie_a:
        upd.pop("attention_bw_fraction", None)
    if tie_w:
        upd.pop("attention_mfu", None)
    return base.model_copy(update=upd), vals


def fit_step_priors(points: Sequence[StepPoint], model: ModelSpec, slice_of, base: Priors, free: Sequence[str],
                    cols: dict[str, np.ndarray] | None = None, combine: np.ndarray | None = None,
                    observed_ms: np.ndarray | None = None) -> StepFit:
    """Fit the priors named in ``free`` (a subset of :data:`PARAMETERS`) to ``points``.

    Args:
        points: the measured times. model: the model measured. slice_of: chips -> SliceSpec.
        base: the priors held for every name not in ``free``. cols: precomputed
        :func:`step_columns` (computed when None). combine, observed_ms: measurements that
        are sums of steps (an end-to-end static batch: its prefill plus its decode steps,
        :mod:`fleetplan.workload.e2e`): observation i is ``combine[i] @ t(points)`` (shape
        (m, n), counts of each point's step in it) measured as ``observed_ms[i]`` (ms); the
        points' own ``time_ms`` are then not used. The Jacobian is combined the same way, so
        the identification checks below judge the observations, not the points.
    Returns: :class:`StepFit` (``rel_errors`` per observation). Raises ValueError for an
    unknown name, fewer observations than free parameters, or ``combine`` without
    ``observed_ms`` (or of the wrong shape).
    """
    from scipy.optimize import least_squares

    unknown = [f for f in free if f not in _IDX]
    if unknown:
        raise ValueError(f"unknown step prior(s) {', '.join(unknown)}; fittable: {', '.join(n for n, _ in PARAMETERS)}")
    if cols is None:
        cols = step_columns(points, model, slice_of, base)
    if (combine is None) != (observed_ms is None):
        raise ValueError("combine and observed_ms go together")
    t = np.array([p.time_ms for p in points]) if observed_ms is None else np.asarray(observed_ms, dtype=float)
    if combine is not None and np.shape(combine) != (len(t), len(points)):
        raise ValueError(f"combine has shape {np.shape(combine)}; expected ({len(t)}, {len(points)})")

    def C(a: np.ndarray) -> np.ndarray:  # the observations' sums of the points' steps (the points themselves without combine)
        return a if combine is None else np.asarray(combine, dtype=float) @ a
    is_pre = np.array([p.phase == "prefill" for p in points])
    batch = np.array([float(p.batch) for p in points])
    tie_a = "attention_bw_fraction" not in free and base.attention_bw_fraction is None
    tie_w = "attention_mfu" not in free and base.attention_mfu is None
    # what the data cannot see: a free parameter whose column is zero on every point
    colname = {"hbm_bw_fraction": "W", "decode_mfu": "G", "prefill_mfu": "G", "attention_bw_fraction": "KV", "attention_mfu": "A",
               "collective_bw_fraction": "ARbw2", "collective_latency_us": "ARn2", "collective_hop_latency_us": "ARh2",
               "all_to_all_bw_fraction": "A2Abw", "all_to_all_latency_us": "A2An", "layer_overhead_us": "L",
               "decode_step_overhead_ms": "Od", "prefill_overhead_ms": "Op"}
    not_identified: dict[str, str] = {}
    fr = []
    for name in free:
        c = cols[colname[name]]
        sel = (~is_pre) if name == "decode_mfu" else is_pre if name == "prefill_mfu" else np.ones(len(points), bool)
        if not np.any(np.abs(c[sel]) > 0):
            not_identified[name] = "no point exercises this term (its column is zero on every point); held at the base value."
        else:
            fr.append(name)
    if len(t) <= len(fr):
        raise ValueError(f"{len(t)} measurements for {len(fr)} free parameters: need more measurements than parameters")
    fi = [_IDX[n] for n in fr]
    x0 = _x_of(base)
    lo = np.array([1.0 if k == "inv" else 0.0 for _, k in PARAMETERS])
    hi = np.array([INV_MAX if k == "inv" else (1e5 if k == "us" else float(t.max())) for _, k in PARAMETERS])

    def full(z):
        x = x0.copy()
        x[fi] = z
        return x

    def resid(z):
        return C(_model(full(z), cols, is_pre, batch, tie_a, tie_w)[0]) / t - 1.0

    def jac(z):
        return (C(_model(full(z), cols, is_pre, batch, tie_a, tie_w)[1]) / t[:, None])[:, fi]

    best = None
    starts = [np.clip(x0[fi], lo[fi], hi[fi])]
    for scale in (1.0, 2.0):
        z = np.array([1.25 * scale if PARAMETERS[i][1] == "inv" else (5.0 * scale if PARAMETERS[i][1] == "us" else 0.5 * scale) for i in fi])
        starts.append(np.clip(z, lo[fi], hi[fi]))
    for z0 in starts:
        r = least_squares(resid, z0, jac=jac, bounds=(lo[fi], hi[fi]), method="trf", x_scale="jac", ftol=1e-12, xtol=1e-12, gtol=1e-12,
                          max_nfev=2000)
        if best is None or r.cost < best.cost - 1e-15:
            best = r
    # a parameter the others already explain (collinear columns at the solution: one model's
    # layer count is a constant, so layer_overhead_us and the step overheads trade) is not
    # identified: keep the earlier names of ``free``, hold the later ones and fit again
    Jn = jac(best.x)
    keep, basis = [], np.zeros((len(t), 0))
    for j, name in enumerate(fr):
        col = Jn[:, j]
        nrm = float(np.linalg.norm(col))
        if basis.shape[1]:
            col = col - basis @ (basis.T @ col)
        if nrm > 0 and float(np.linalg.norm(col)) > 1e-6 * nrm:
            keep.append(name)
            basis = np.column_stack([basis, col / np.linalg.norm(col)])
        elif nrm == 0:
            not_identified[name] = ("no measurement depends on it at the best fit (its term loses a max on every point: e.g. "
                                    "decode_mfu when every decode step is memory-bound); held at the base value.")
        else:
            not_identified[name] = ("collinear with " + ", ".join(keep) + " on these points (the data cannot tell them apart); "
                                    "held at the base value.")
    if len(keep) < len(fr):
        sub = fit_step_priors(points, model, slice_of, base, keep, cols, combine, observed_ms)
        return StepFit(sub.priors, sub.values, sub.stderr, {**sub.not_identified, **not_identified}, sub.rel_errors, sub.cost, sub.free)
    x = full(best.x)
    priors, vals = _to_priors(x, base, fr, tie_a, tie_w)
    # standard errors of the interior free parameters, in the schema's units
    se: dict[str, float | None] = {n: None for n in fr}
    Jf = jac(best.x)
    inner = [j for j, i in enumerate(fi) if not (abs(x[i] - lo[i]) <= 1e-7 * max(1, lo[i]) or abs(x[i] - hi[i]) <= 1e-7 * max(1, hi[i]))]
    res = resid(best.x)
    if inner and len(t) > len(inner):
        try:
            cov = np.linalg.inv(Jf[:, inner].T @ Jf[:, inner]) * float(res @ res) / (len(t) - len(inner))
            for k, j in enumerate(inner):
                i = fi[j]
                s_ = math.sqrt(max(cov[k, k], 0.0))
                se[fr[j]] = s_ / x[i] ** 2 if PARAMETERS[i][1] == "inv" else s_
        except np.linalg.LinAlgError:
            pass
    rel = C(predict_points(cols, points, priors)) / t - 1.0
    return StepFit(priors, vals, se, not_identified, rel, float(best.cost), tuple(fr))
