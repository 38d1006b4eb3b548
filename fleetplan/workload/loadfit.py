r"""Step-time priors fitted to a deployment under load, through the queueing model the plan uses.

A serving benchmark at a request rate (:mod:`fleetplan.workload.servebench`) or a running
deployment's Prometheus histograms (:mod:`fleetplan.workload.prometheus`) measure latency
*percentiles* at one load, not step times. So the fit runs fleetplan's own pool models at
the measured load -- a colocated replica pool through :mod:`fleetplan.perf.colocated`
(the steady state, the TTFT percentile of the sum of its components, the TPOT percentile
over the occupancy), a prefill pool through its service-time profile and M/G/c wait, a
decode pool through :func:`fleetplan.perf.pools.decode_at_load` -- and moves the priors
until the predicted statistics meet the measured ones, least squares in log space:

    min over (m_p, m_d) of  sum_q ( ln pred_q(m_p, m_d) - ln meas_q )^2

What one load can identify is one number per phase: how much slower (or faster) than the
base priors the prefill and the decode steps run. The parameters are two *phase
multipliers* (:func:`phase_scaled_priors`): m_d divides every decode-side efficiency
(``hbm_bw_fraction``, ``attention_bw_fraction``, ``decode_mfu``, the collectives'
bandwidth) and multiplies every decode-side latency (``decode_step_overhead_ms``,
``layer_overhead_us``, the collectives' latencies); m_p does the same to the prefill's own
(``prefill_mfu``, ``attention_mfu``, ``prefill_overhead_ms``). At m_p = m_d = m every step
time -- prefill, decode, mixed, verify -- is exactly m times the base's. Which prior inside
a phase moved (bandwidth or overhead), the queueing inputs (arrival burstiness, router)
and the path latency are not identified at one load: they are held and reported so.

Engine-side latencies: vLLM's TTFT starts when its API server has the request, so the
models here leave out ``priors.path_latency`` (the gateway and network the plan adds to
every TTFT). Statistics used: TTFT and TPOT means and percentiles, the ITL mean (the
time-average token gap, the replica's mean TPOT). ITL percentiles are not fitted: the
model's ITL distribution is a step function (a decode step, or a step with a prompt's
chunk or prefill in it), whose percentiles do not move smoothly with the priors.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from fleetplan.instance.schema import Instance, Priors

__all__ = ["DECODE_EFFICIENCIES", "DECODE_LATENCIES", "PREFILL_EFFICIENCIES", "PREFILL_LATENCIES", "phase_scaled_priors",
           "phase_scale_floor", "fit_scaled_priors", "Quantity", "ObservedPool", "PoolPrediction", "PoolModel", "Multiplier", "LoadFit", "fit_phase_scales",
           "MEAN_GRID", "MAX_MULTIPLIER"]

DECODE_EFFICIENCIES = ("hbm_bw_fraction", "attention_bw_fraction", "decode_mfu", "collective_bw_fraction", "all_to_all_bw_fraction")
DECODE_LATENCIES = ("decode_step_overhead_ms", "layer_overhead_us", "collective_latency_us", "collective_hop_latency_us", "all_to_all_latency_us")
PREFILL_EFFICIENCIES = ("prefill_mfu", "attention_mfu")
PREFILL_LATENCIES = ("prefill_overhead_ms",)
_TIME_SCALES = ("prefill_time_scale", "decode_time_scale")
#: The schema's least step-time scale (priors.prefill_time_scale, decode_time_scale: 0.1 to 10).
_MIN_TIME_SCALE = 0.1
#: Largest phase multiplier the fit may reach (10x slower than the base priors).
MAX_MULTIPLIER = 10.0
#: Percentiles whose model quantiles average to a distribution's mean (the midpoint rule on
#: the quantile function, 2% cells): the model gives percentiles, the histograms' exact means.
MEAN_GRID = tuple(float(p) for p in np.arange(1.0, 100.0, 2.0))
#: Residual of a statistic the model cannot produce at the measured load (the pool is
#: unstable at those priors): large enough to turn a least-squares step back.
_UNSTABLE_LOG = math.log(1e3)


def phase_scaled_priors(base: Priors, prefill: float = 1.0, decode: float = 1.0) -> Priors:
    """``base`` with its prefill step times times ``prefill`` and its decode step times times
    ``decode`` (dimensionless multipliers): the decode-side efficiencies
    (:data:`DECODE_EFFICIENCIES`, a null attention prior left null: it follows its partner)
    divided by ``decode``, the decode-side and shared latencies (:data:`DECODE_LATENCIES`)
    multiplied by it, and the prefill's own (:data:`PREFILL_EFFICIENCIES`,
    :data:`PREFILL_LATENCIES`) likewise by ``prefill``. The collectives and the per-layer
    overhead follow the decode multiplier (a prefill pays them too: with ``prefill`` !=
    ``decode`` the prefill's ratio lies between the two). Every term of
    :func:`fleetplan.perf.roofline.decode_step` and ``prefill_breakdown`` is one of these
    efficiencies' inverses or latencies, so equal multipliers scale every step time exactly.

    Not validated: a multiplier below :func:`phase_scale_floor` gives an efficiency above 1."""
    upd: dict[str, float] = {}
    for names, m, eff in ((DECODE_EFFICIENCIES, decode, True), (DECODE_LATENCIES, decode, False),
                          (PREFILL_EFFICIENCIES, prefill, True), (PREFILL_LATENCIES, prefill, False)):
        for n in names:
            v = getattr(base, n)
            if v is not None:
                upd[n] = v / m if eff else v * m
    return base.model_copy(update=upd)


def phase_scale_floor(base: Priors) -> tuple[float, float]:
    """(prefill, decode): the smallest multipliers that keep every scaled efficiency of
    ``base`` within the schema's 1 (a step cannot run faster than the peak allows)."""
    def top(names):
        return max(float(getattr(base, n)) for n in names if getattr(base, n) is not None)
    return top(PREFILL_EFFICIENCIES), top(DECODE_EFFICIENCIES)


def fit_scaled_priors(base: Priors, prefill: float = 1.0, decode: float = 1.0) -> Priors:
    """``base`` with its prefill step times times ``prefill`` and its decode step times times
    ``decode`` (dimensionless), as the fit moves them: through the phase's efficiencies and
    latencies (:func:`phase_scaled_priors`) down to :func:`phase_scale_floor` (an efficiency
    at 1), and below it through ``priors.prefill_time_scale`` / ``decode_time_scale`` (times
    multiplier / floor), which scale every step time of the phase and have no physical
    bound. So a source whose efficiency already sits at 1 (the LLM-Inference-Bench vLLM
    priors' ``hbm_bw_fraction``) can still be fitted to faster steps, rather than the fit
    stopping at 1x and pushing the misfit into the other phase. Continuous at the floor."""
    fp, fd = phase_scale_floor(base)
    out = phase_scaled_priors(base, max(prefill, fp), max(decode, fd))
    upd = {}
    if prefill < fp:
        upd["prefill_time_scale"] = base.prefill_time_scale * prefill / fp
    if decode < fd:
        upd["decode_time_scale"] = base.decode_time_scale * decode / fd
    return out.model_copy(update=upd) if upd else out


@dataclass(frozen=True)
class Quantity:
    """One measured latency statistic: ``metric`` ttft | tpot | itl, ``stat`` ``mean`` or
    ``pNN`` (a percentile, e.g. p99, p99.9), ``value_ms`` (ms), ``source`` (where it came
    from: a benchmark key, a histogram bucket)."""

    metric: str
    stat: str
    value_ms: float
    source: str = ""

    @property
    def percentile(self) -> float | None:
        return None if self.stat == "mean" else float(self.stat[1:])


@dataclass(frozen=True)
class ObservedPool:
    """What a pool was measured doing over a window, and its shape.

    Attributes: name (e.g. ``us-central/all/replica``), role (replica | prefill | decode),
    tier, slice (shape label, chip x chips), replicas (slices serving), rate_rps (requests/s
    reaching the whole pool), schedule (replica pools: ``prefill-first`` or
    ``chunked-<tokens>``), router (None: the instance's), prompt_tokens / output_tokens
    (measured means per request, tokens; None: the instance's tier mix), hit_rate
    (measured prefix-cache hit rate, fraction; None: the instance's), arrival_scv (None: the
    instance's), batch_cap / draft_tokens (decode pools: the operating point), running
    (measured mean requests running per replica; None when not measured), quantities (the
    statistics fitted), notes."""

    name: str
    role: str
    tier: str
    slice: str
    replicas: int
    rate_rps: float
    quantities: tuple[Quantity, ...]
    schedule: str | None = None
    router: str | None = None
    prompt_tokens: float | None = None
    output_tokens: float | None = None
    hit_rate: float | None = None
    arrival_scv: float | None = None
    batch_cap: int | None = None
    draft_tokens: int = 0
    running: float | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PoolPrediction:
    """The pool model's statistics at some priors: ``stats`` maps (metric, stat) to ms (inf
    when the pool is unstable at the measured load); ``running`` mean requests running per
    replica (decode residents plus the prompt in prefill); ``stable``; ``reason``;
    ``decode_step_ms`` the decode step at the predicted occupancy and the tier's mean
    resident KV; ``prefill_ms`` the mean prompt's prefill (its uncached tokens)."""

    stats: dict[tuple[str, str], float]
    running: float
    stable: bool
    reason: str
    decode_step_ms: float
    prefill_ms: float
    occupancy: float


class PoolModel:
    """fleetplan's model of one measured pool at its measured load (:class:`ObservedPool`)
    on ``inst`` (model, chips, SLOs, workload); its statistics at any priors by
    :meth:`predict`. The tier's mix is the instance's, rescaled to the measured mean prompt
    (shape kept), with the measured output length and hit rate where given."""

    def __init__(self, inst: Instance, pool: ObservedPool):
        from fleetplan.perf.pools import tier_mixes
        from fleetplan.perf.roofline import SliceSpec

        self.inst, self.pool = inst, pool
        tms = {t.name: t for t in tier_mixes(inst)}
        if pool.tier not in tms:
            raise ValueError(f"tier {pool.tier!r} is not one of the instance's ({', '.join(sorted(tms))})")
        tm = tms[pool.tier]
        upd: dict[str, Any] = {}
        if pool.prompt_tokens is not None:
            upd["tokens"] = tm.tokens * (pool.prompt_tokens / tm.mean_tokens)
        if pool.output_tokens is not None:
            upd["output_tokens"] = float(pool.output_tokens)
        if pool.hit_rate is not None:
            upd["hit_rate"] = float(pool.hit_rate)
        self.tm = dataclasses.replace(tm, **upd)
        chip, _, n = pool.slice.rpartition("x")
        if chip not in inst.chips:
            raise ValueError(f"slice {pool.slice!r}: no chip type {chip!r} in the instance ({', '.join(sorted(inst.chips))})")
        self.sl = SliceSpec.of(chip, inst.chips[chip], int(n))
        wl = inst.workload if pool.arrival_scv is None else inst.workload.model_copy(update={"arrival_scv": pool.arrival_scv})
        self._wl = wl

    def instance_at(self, priors: Priors) -> Instance:
        """The instance at ``priors`` with no path latency (engine-side) and the measured
        arrival burstiness."""
        # no physics: block -- its sources would lay their own priors over these
        return self.inst.model_copy(update={"priors": priors.model_copy(update={"path_latency": []}), "workload": self._wl, "physics": None})

    def predict(self, priors: Priors, stats: Sequence[tuple[str, str]]) -> PoolPrediction:
        """The statistics ``stats`` ((metric, stat) pairs as in :class:`Quantity`) at ``priors``."""
        inst = self.instance_at(priors)
        role = self.pool.role
        if role == "replica":
            return self._replica(inst, stats)
        if role == "prefill":
            return self._prefill(inst, stats)
        return self._decode(inst, stats)

    # ----------------------------------------------------------------- the roles
    def _percentiles(self, stats) -> list[float]:
        pcts = {float(s[1:]) for _, s in stats if s != "mean"} | {50.0}
        if any(s == "mean" and m == "ttft" for m, s in stats):
            pcts |= set(MEAN_GRID)
        return sorted(pcts)

    def _steps(self, inst: Instance, occupancy: float) -> tuple[float, float]:
        from fleetplan.perf.roofline import decode_step, prefill_time_ms

        kv, _ = self.tm.resident_kv(inst)
        s = self.tm.mean_tokens
        return (float(decode_step(inst.model, self.sl, inst.priors, max(occupancy, 1.0), kv).step_ms),
                float(prefill_time_ms(inst.model, self.sl, inst.priors, s, s * self.tm.hit_rate)))

    def mixed_ms(self, priors: Priors, occupancy: float, chunk: float) -> float:
        """One mixed step at ``priors`` (engine-side, ms) under a ``chunk``-token budget:
        ``occupancy`` residents' decode and the rest of the budget from the head of a prompt
        (:func:`fleetplan.perf.replica_steps.mixed_step`; vLLM's budget counts decode tokens first)."""
        from fleetplan.perf.replica_steps import mixed_step

        inst = self.instance_at(priors)
        kv, _ = self.tm.resident_kv(inst)
        return float(mixed_step(inst.model, self.sl, inst.priors, max(occupancy, 1.0), kv, max(chunk - occupancy, 1.0), 0.0).step_ms)

    def _unstable(self, inst, stats, reason: str) -> PoolPrediction:
        d, p = self._steps(inst, 1.0)
        return PoolPrediction({k: math.inf for k in stats}, math.inf, False, reason, d, p, math.inf)

    def _replica(self, inst: Instance, stats) -> PoolPrediction:
        from fleetplan.perf.colocated import Schedule, colocated_latency, replica_rates
        from fleetplan.perf.pools import PrefillSource

        pool = self.pool
        sched = Schedule.parse(pool.schedule or "prefill-first")
        rr = replica_rates(inst, self.tm, self.sl, [PrefillSource(max(pool.rate_rps, 1e-12), self.tm.hit_rate)], sched, pool.router)
        st = rr.state(pool.rate_rps / pool.replicas)
        if not st.stable:
            return self._unstable(inst, stats, st.reason)
        pcts = self._percentiles(stats)
        lat = colocated_latency(*rr.args, st, pool.replicas, rr.router, rr.o, rr.kv, pcts, [], {p: 0.0 for p in pcts}, rr.extra, True,
                                rr.ca2, rr.output_lengths, rr.tables)
        out = {}
        for m, s in stats:
            if m == "itl" and s == "mean":
                out[(m, s)] = st.tpot_ms  # the time-average token gap
            elif s == "mean":
                src = lat.ttft_estimate_ms if m == "ttft" else lat.tpot_ms
                out[(m, s)] = float(np.mean([src[p] for p in MEAN_GRID])) if m == "ttft" else src[50.0]  # TPOT is normal: mean = p50
            else:
                out[(m, s)] = {"ttft": lat.ttft_estimate_ms, "tpot": lat.tpot_ms, "itl": lat.itl_ms}[m][float(s[1:])]
        d, p = self._steps(inst, st.sequences_decoding)
        return PoolPrediction(out, st.sequences_decoding + min(st.prefill_share, 1.0), True, "", d, p, st.sequences_decoding)

    def _prefill(self, inst: Instance, stats) -> PoolPrediction:
        from fleetplan.perf.pools import PrefillSource, prefill_profile
        from fleetplan.perf.queueing import path_sum_distribution, ttft_percentiles_of_sum_ms

        pool = self.pool
        prof = prefill_profile(inst, self.tm, self.sl, [PrefillSource(max(pool.rate_rps, 1e-12), self.tm.hit_rate)], [50.0])
        util = pool.rate_rps * prof.mean_ms / 1e3 / pool.replicas
        if util >= 1.0:
            return self._unstable(inst, stats, f"prefill utilisation {util:.3f} >= 1")
        pcts = self._percentiles(stats)
        est = ttft_percentiles_of_sum_ms(pcts, path_sum_distribution([]), pool.replicas, pool.rate_rps, prof.mean_ms, prof.cs2,
                                         prof.type_ms, prof.type_weight, prof.ca2)
        out = {}
        for m, s in stats:
            if m != "ttft":
                raise ValueError(f"a prefill pool measures TTFT, not {m}")
            out[(m, s)] = float(np.mean([est[p] for p in MEAN_GRID])) if s == "mean" else est[float(s[1:])]
        d, p = self._steps(inst, 1.0)
        return PoolPrediction(out, util, True, "", d, p, 0.0)

    def _decode(self, inst: Instance, stats) -> PoolPrediction:
        from fleetplan.perf.pools import decode_at_load, decode_knee

        pool = self.pool
        cap = pool.batch_cap or decode_knee(inst, self.tm, self.sl, pool.draft_tokens)
        pcts = sorted({float(s[1:]) for _, s in stats if s != "mean"} | {50.0})
        dal = decode_at_load(inst, self.tm, self.sl, max(cap, 1), pool.draft_tokens, pool.rate_rps / pool.replicas, pcts)
        if dal.saturated:
            return self._unstable(inst, stats, f"the load needs more than the batch cap {cap} per slice")
        out = {}
        for m, s in stats:
            if m == "ttft":
                raise ValueError("a decode pool does not measure TTFT (its prefill ran elsewhere)")
            if s == "mean":
                out[(m, s)] = dal.step_ms if m == "itl" else dal.tpot_p50_ms
            else:
                out[(m, s)] = (dal.tpot_ms if m == "tpot" else dal.itl_ms)[float(s[1:])]
        d, p = self._steps(inst, dal.occupancy)
        return PoolPrediction(out, dal.occupancy, True, "", d, p, dal.occupancy)


@dataclass(frozen=True)
class Multiplier:
    """One fitted phase multiplier: ``value`` (dimensionless; 1 = the base priors' step times),
    ``stderr`` (one standard error, None when not estimable), ``bound`` (which bound is
    active, None if interior), ``identified`` (False: held at 1), ``why`` (when not)."""

    phase: str
    value: float
    stderr: float | None
    bound: str | None
    identified: bool
    why: str = ""


@dataclass(frozen=True)
class LoadFit:
    """The result of :func:`fit_phase_scales`.

    ``base`` the priors it started from; ``fitted`` the full priors at the fitted
    multipliers (rounded as written, validated); ``priors`` the block to write (the scaled
    fields, rounded); ``multipliers`` per phase; ``rows`` per measured statistic: (pool,
    quantity, predicted at the base ms, predicted at the fit ms); ``pools`` per pool:
    predictions at the base and at the fit (:class:`PoolPrediction`); ``not_identified``
    (name -> why) and ``notes``; ``rms_log_error`` / ``rms_log_error_base`` the RMS of
    ln(predicted / measured) at the fit and at the base; ``ratios`` per pool, the fitted over
    the base step times -- ``decode`` the decode step at the fitted occupancy, ``prefill``
    the mean prompt's prefill (dimensionless): what moved, and by how much."""

    base: Priors
    fitted: Priors
    priors: dict[str, float]
    multipliers: tuple[Multiplier, ...]
    rows: tuple[tuple[ObservedPool, Quantity, float, float], ...]
    pools: tuple[tuple[ObservedPool, PoolPrediction, PoolPrediction], ...]
    not_identified: dict[str, str]
    notes: tuple[str, ...]
    rms_log_error: float
    rms_log_error_base: float
    ratios: dict[str, dict[str, float]] = field(default_factory=dict)

    def multiplier(self, phase: str) -> Multiplier:
        return next(m for m in self.multipliers if m.phase == phase)

    def document(self, source: dict) -> dict[str, Any]:
        """The ``calibrate -o`` document: ``priors`` (overlay), ``source`` (given), ``fit``."""
        def r(x):
            return None if x is None or not math.isfinite(x) else float(f"{x:.4g}")
        return {
            "priors": dict(self.priors),
            "source": source,
            "fit": {
                "objective": "least squares of ln(predicted / measured) over the measured statistics; predictions by fleetplan's pool "
                             "models at the measured load (perf.colocated, perf.pools), engine-side (no path latency)",
                "multipliers": {m.phase: {"value": r(m.value), "stderr": r(m.stderr), "bound": m.bound, "identified": m.identified,
                                          **({"why": m.why} if m.why else {})} for m in self.multipliers},
                "step_time_ratio": {k: {ph: r(v) for ph, v in d.items()} for k, d in self.ratios.items()},
                "rms_log_error": {"base": r(self.rms_log_error_base), "fit": r(self.rms_log_error)},
                "statistics": [{"pool": p.name, "metric": q.metric, "stat": q.stat, "measured_ms": r(q.value_ms), "base_ms": r(b),
                                "fit_ms": r(f), "source": q.source} for p, q, b, f in self.rows],
                "pools": [{"pool": p.name, "role": p.role, "slice": p.slice, "replicas": p.replicas, "rate_rps": r(p.rate_rps),
                           "running_measured": r(p.running), "running_base": r(b.running), "running_fit": r(f.running)}
                          for p, b, f in self.pools],
                "not_identified": dict(self.not_identified),
                "notes": list(self.notes),
            },
        }


#: The largest RMS of ln(predicted / measured) a fit may end at (a factor e, 2.7x, on the
#: typical statistic). The synthetic fixtures fit to 0.001-0.05 and a deployment whose queueing
#: the model misreads to a few tenths; past this the model cannot describe the data at any
#: step time, and the usual cause is a unit (milliseconds for seconds or the reverse).
MAX_RMS_LOG_ERROR = 1.0


def _check_reach(rows, rms_fit: float, mults) -> None:
    """Raise ValueError when the fit ends with an RMS log error past :data:`MAX_RMS_LOG_ERROR`,
    naming the statistic furthest off (its source: a benchmark key, a histogram series), its
    measured and fitted values and the units the readers expect."""
    if not rms_fit > MAX_RMS_LOG_ERROR:
        return
    def off(row):
        _, q, _, f = row
        return abs(math.log(f / q.value_ms)) if f > 0 and math.isfinite(f) and q.value_ms > 0 else math.inf
    p, q, _, f = max(rows, key=off)
    side = "below" if q.value_ms < f else "above"
    bounds = "; ".join(f"the {m.phase} multiplier at its {m.bound.split(' ')[0]} bound" for m in mults if m.bound)
    raise ValueError(f"the model cannot come near the measurements at any step time (RMS |ln(predicted / measured)| "
                     f"{rms_fit:.3g} at the best fit{'; ' + bounds if bounds else ''}): {q.source or q.metric} of pool {p.name} "
                     f"reads {q.value_ms:,.4g} ms, {side} the nearest the model reaches ({f:,.4g} ms). Check its unit: a vLLM "
                     "benchmark's *_ms keys are milliseconds, vLLM's *_seconds histograms seconds")


def _round_block(fitted: Priors, base: Priors) -> dict[str, float]:
    """The scaled fields of ``fitted`` that differ from ``base``, rounded as written:
    fractions to 4 decimals (at most 1), ms to 4 decimals, us to 3."""
    out = {}
    for n in DECODE_EFFICIENCIES + DECODE_LATENCIES + PREFILL_EFFICIENCIES + PREFILL_LATENCIES + _TIME_SCALES:
        v = getattr(fitted, n)
        if v is None or v == getattr(base, n):
            continue
        out[n] = (min(round(float(v), 4), 1.0) if n in DECODE_EFFICIENCIES + PREFILL_EFFICIENCIES
                  else round(float(v), 4 if n.endswith("_ms") or n in _TIME_SCALES else 3))
    return out


def fit_phase_scales(inst: Instance, pools: Sequence[ObservedPool], base: Priors | None = None,
                     phases: Sequence[str] = ("prefill", "decode")) -> LoadFit:
    """Fit the phase multipliers (:func:`phase_scaled_priors`) of ``base`` (default: the
    instance's priors) to the measured statistics of ``pools``, jointly (one deployment has
    one set of priors): bounded least squares on ln(predicted / measured)
    (``scipy.optimize.least_squares``, trf, forward differences; from m = 1, deterministic).
    A phase no statistic responds to is held at 1 and reported; so is the prefill when the
    two move the statistics in proportion (only their combination is identified).

    Raises ValueError when no pool has a statistic, or a pool names a tier or slice the
    instance does not have."""
    from scipy.optimize import least_squares

    base = base or inst.priors
    obs = [(p, q) for p in pools for q in p.quantities]
    if not obs:
        raise ValueError("no measured statistic to fit (every pool lacks TTFT, TPOT and ITL measurements)")
    models = [PoolModel(inst, p) for p in pools]
    stats = [tuple(dict.fromkeys((q.metric, q.stat) for q in p.quantities)) for p in pools]
    meas = np.array([q.value_ms for _, q in obs])
    floor = phase_scale_floor(base)
    names = list(phases)
    # below the floor the phase's time scale carries the multiplier (fit_scaled_priors), down to the schema's 0.1
    lo_all = {"prefill": math.log(_MIN_TIME_SCALE * floor[0] / base.prefill_time_scale) + 1e-9,
              "decode": math.log(_MIN_TIME_SCALE * floor[1] / base.decode_time_scale) + 1e-9}

    def priors_at(x: Sequence[float]) -> Priors:
        m = dict(zip(names, np.exp(x)))
        return fit_scaled_priors(base, m.get("prefill", 1.0), m.get("decode", 1.0))

    def predict(pr: Priors) -> tuple[np.ndarray, list[PoolPrediction]]:
        preds = [mdl.predict(pr, st) for mdl, st in zip(models, stats)]
        vals = np.array([pd.stats[(q.metric, q.stat)] for (p, q) in obs for pd in [preds[pools.index(p)]]])
        return vals, preds

    def resid(x):
        v, _ = predict(priors_at(x))
        with np.errstate(divide="ignore"):
            r = np.log(v / meas)
        return np.where(np.isfinite(r), r, _UNSTABLE_LOG)

    not_identified: dict[str, str] = {}
    held: list[str] = []
    for _ in range(len(names) + 1):
        free = [n for n in names if n not in held]
        if not free:
            break
        lo = np.array([lo_all[n] for n in free])
        hi = np.full(len(free), math.log(MAX_MULTIPLIER))

        def r_free(z, free=free):
            return resid([z[free.index(n)] if n in free else 0.0 for n in names])

        sol = least_squares(r_free, np.clip(np.zeros(len(free)), lo, hi), bounds=(lo, hi), method="trf", diff_step=1e-4,
                            ftol=1e-10, xtol=1e-10, gtol=1e-10, max_nfev=200)
        J = sol.jac
        norms = np.linalg.norm(J, axis=0)
        drop = [n for n, c in zip(free, norms) if c < 1e-6]
        for n in drop:
            not_identified[f"{n} multiplier"] = (f"no measured statistic responds to the {n} step time (e.g. no TTFT measured for the "
                                                 "prefill); held at the base priors (1x).")
        sv = np.linalg.svd(J, compute_uv=False)
        if not drop and len(free) == 2 and (len(sv) < 2 or sv[-1] < 1e-6 * sv[0]):  # one statistic, or two that move in proportion
            drop = ["prefill"]
            not_identified["prefill multiplier"] = ("the statistics move with the prefill and decode step times in proportion: only "
                                                    "their combination is identified; the prefill is held at 1x and the decode "
                                                    "carries it.")
        if not drop:
            break
        held += drop
    x_full = np.array([sol.x[free.index(n)] if n in free else 0.0 for n in names])
    # standard errors of the interior parameters, in the multipliers' units
    res = sol.fun
    k = len(free)
    se = {n: None for n in names}
    at = {n: (abs(sol.x[i] - lo[i]) < 1e-6 and f"lower (priors.{n}_time_scale {_MIN_TIME_SCALE:g}: the data want steps over 10x "
                                                 "faster than the peak allows)")
          or (abs(sol.x[i] - hi[i]) < 1e-9 and f"upper ({MAX_MULTIPLIER:g}x)") or None for i, n in enumerate(free)}
    inner = [i for i, n in enumerate(free) if not at[n]]
    if inner and len(res) > k:
        try:
            cov = np.linalg.inv(J[:, inner].T @ J[:, inner]) * float(res @ res) / (len(res) - k)
            for j, i in enumerate(inner):
                se[free[i]] = math.exp(sol.x[i]) * math.sqrt(max(cov[j, j], 0.0))
        except np.linalg.LinAlgError:
            pass
    raw = priors_at(x_full)
    block = _round_block(raw, base)
    fitted = Priors.model_validate({**base.model_dump(), **block})
    mults = tuple(Multiplier(n, float(math.exp(x_full[i])), se.get(n), at.get(n), n in free,
                             not_identified.get(f"{n} multiplier", "")) for i, n in enumerate(names))
    vb, pb = predict(base)
    vf, pf = predict(fitted)
    rows = tuple((p, q, float(b), float(f)) for (p, q), b, f in zip(obs, vb, vf))

    def rms(v):
        with np.errstate(divide="ignore"):
            r = np.log(v / meas)
        return float(np.sqrt(np.mean(np.where(np.isfinite(r), r, _UNSTABLE_LOG) ** 2)))

    _check_reach(rows, rms(vf), mults)
    for ph in ("prefill", "decode"):
        if ph not in names:
            not_identified[f"{ph} multiplier"] = "not fitted (held at 1x)."
    not_identified["priors within a phase"] = ("which prior of a phase moved (bandwidth, MFU, overhead, collectives) is not identified at one "
                                               "load: the multiplier scales them together, in the base priors' proportions.")
    not_identified["queueing"] = ("the arrival burstiness (workload.arrival_scv), the router and the path latency are held at the "
                                  "instance's: one load cannot tell them from a step time.")
    notes = ["engine-side latencies: the model leaves out priors.path_latency (vLLM's TTFT starts at its API server)."]
    for i, n in enumerate(names):
        f, m = floor[0 if n == "prefill" else 1], math.exp(x_full[i])
        if m < f * (1 - 1e-6):
            notes.append(f"the {n} multiplier {m:.4g} is below {f:.4g}, where an efficiency of the base priors reaches 1 (the "
                         f"peak): the {n} steps ran faster than the base priors' roofline allows, so below {f:.4g} it is "
                         f"carried by priors.{n}_time_scale ({getattr(fitted, n + '_time_scale'):.4g}), not by an efficiency.")
    ratios = {}
    for p, mdl, b, f in zip(pools, models, pb, pf):
        d_fit = mdl._steps(mdl.instance_at(fitted), f.occupancy)[0] if f.stable else math.nan
        d_base = mdl._steps(mdl.instance_at(base), f.occupancy)[0] if f.stable else math.nan
        ratios[p.name] = {"prefill": f.prefill_ms / b.prefill_ms, "decode": d_fit / d_base}
        chunk = _chunk_tokens(p)
        if chunk and f.stable:  # a chunked replica never runs a whole prefill: its TTFT measures mixed steps
            ratios[p.name]["mixed"] = mdl.mixed_ms(fitted, f.occupancy, chunk) / mdl.mixed_ms(base, f.occupancy, chunk)
            notes.append(f"{p.name}: under {p.schedule} a prompt runs as {chunk:g}-token chunks in mixed steps with the residents' "
                         f"decode, so the TTFT measures those: a mixed step ({f.occupancy:.3g} residents' decode + the rest of the {chunk:g}-token budget) "
                         f"is {ratios[p.name]['mixed']:.3f}x the base's; the prefill ratio ({ratios[p.name]['prefill']:.3f}x, a whole "
                         f"{mdl.tm.mean_tokens:,.0f}-token prefill) is the model's extrapolation to a step the pool does not run.")
    return LoadFit(base, fitted, block, mults, rows, tuple(zip(pools, pb, pf)), not_identified, tuple(notes), rms(vf), rms(vb), ratios)


def _chunk_tokens(pool: ObservedPool) -> float | None:
    """The chunk (tokens) of a replica pool under chunked prefill, else None."""
    from fleetplan.perf.colocated import Schedule

    if pool.role != "replica" or not pool.schedule:
        return None
    return Schedule.parse(pool.schedule).chunk_tokens


def resolve_deployment(inst: Instance, slice_label: str | None, tier: str | None, schedule: str | None, role: str = "replica",
                       source: str = "--instance") -> tuple[str, str, str | None]:
    """(slice label, tier, schedule) of the measured engines on ``inst``: each as given, or the
    instance's only one (a replica pool's schedule: the only label of
    :func:`fleetplan.perf.colocated.schedules_of`). Raises
    :class:`~fleetplan.errors.InputError` naming the option to give, and what it may be."""
    from fleetplan.errors import InputError, Problem
    from fleetplan.perf.colocated import Schedule, schedules_of
    from fleetplan.perf.pools import slice_specs, tier_mixes

    shapes = [s.label for s in slice_specs(inst)]
    tiers = [t.name for t in tier_mixes(inst)]
    scheds = [s.label for s in schedules_of(inst)]
    bad = []
    if slice_label is None and len(shapes) == 1:
        slice_label = shapes[0]
    if slice_label not in shapes:
        what = "give the engines' slice shape" if slice_label is None else "not a slice shape of the instance"
        bad.append(Problem("--slice", f"{what}; the instance has {', '.join(shapes)} (chip x chips per engine).", slice_label or ""))
    if tier is None and len(tiers) == 1:
        tier = tiers[0]
    if tier not in tiers:
        what = "give the tier the traffic belongs to" if tier is None else "not a tier of the instance"
        bad.append(Problem("--tier", f"{what}; the instance has {', '.join(tiers)}.", tier or ""))
    if role == "replica":
        if schedule is None and len(scheds) == 1:
            schedule = scheds[0]
        if schedule is None:
            bad.append(Problem("--schedule", f"give the engines' schedule: prefill-first, or chunked-<tokens> for chunked prefill with "
                                             f"that --max-num-batched-tokens (the instance offers {', '.join(scheds)})."))
        else:
            try:
                Schedule.parse(schedule)
            except ValueError as e:
                bad.append(Problem("--schedule", f"{e}; e.g. prefill-first or chunked-512.", schedule))
    if bad:
        raise InputError(source, bad)
    return slice_label, tier, schedule


def fit_yaml(doc: dict, head: str) -> str:
    """A fit document (:meth:`LoadFit.document`) as YAML (``yaml.safe_dump``, keys in order)
    after the comment lines ``head``. Deterministic for the same input."""
    import io

    import yaml

    buf = io.StringIO()
    yaml.safe_dump(doc, buf, sort_keys=False, default_flow_style=False, allow_unicode=True, width=120)
    return "".join(f"# {ln}\n" for ln in head.splitlines()) + buf.getvalue()
