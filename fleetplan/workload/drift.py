"""A running deployment set beside its plan (``fleetplan drift PLAN --metrics FILE``).

1. **Measured**, per pool of the plan (the metrics' ``fleetplan_region`` / ``_tier`` /
   ``_role`` labels, :mod:`fleetplan.workload.prometheus`): the arrival rate and per replica,
   the engines serving, the mean requests running (``vllm:num_requests_running``), the mean
   prompt and answer, and the p99 TTFT, TPOT and ITL as PromQL's ``histogram_quantile``
   reads them from the histograms (with the bucket they fall in: the bound on what a
   histogram can say).
2. **Predicted at the measured load**: the plan's physics (its priors; for a plan of an
   instance with a ``physics:`` block, the priors of the held source that binds the measured
   pools, ``plan.physics.binding``: the step times the plan was sized to, and its recorded
   margins are under, :func:`plan_priors_instance`) run at the measured
   rate, mix and engine count through the pool models the evaluator uses
   (:class:`fleetplan.workload.loadfit.PoolModel`: :func:`fleetplan.perf.colocated.replica_rates`
   and ``colocated_latency`` as :meth:`fleetplan.results.evaluate.Context.replica` runs them,
   the prefill profile and M/G/c wait, :func:`fleetplan.perf.pools.decode_at_load`) -- not at
   the plan's sizing load -- engine-side (no path latency, as vLLM measures).
3. **Which prior moved**: the phase multipliers refitted to the measured statistics from the
   plan's priors (:func:`fleetplan.workload.loadfit.fit_phase_scales`), and per pool the
   fitted over the plan's step times (decode step at the fitted occupancy, the mean prompt's
   prefill). A phase *moved* when its ratio is off 1 by more than :data:`MOVED` and by more
   than two standard errors.
4. **Does the plan still hold**: the independent verifier (:func:`fleetplan.results.verify.verify`)
   re-run on the plan with the refitted priors, at the plan's own sizing loads and
   scenarios (the instance's hash updated to the refitted one). Its SLO findings (TTFT,
   TPOT, ITL, decode capacity, operating points, KV fit) mean the plan no longer holds; a
   replica pool past the plan's utilisation headroom but within its SLOs has spent that
   headroom and still holds. Beside them, whatever the fit says: a measured pool whose
   percentile of an SLO lies wholly over its limit (the histogram bucket's lower bound,
   engine-side) breaks that SLO now (``measured_slo``). Beside them, each pool's **step-time margins**: per SLO, the
   largest multiplier m on every step time (:func:`~fleetplan.workload.loadfit.phase_scaled_priors`
   with both phases at m) at which that SLO still holds at the pool's sizing load (the plan's
   margin search: four significant digits rounded down); a margin is *spent* when the SLO
   fails under the refitted priors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fleetplan.errors import InputError, Problem
from fleetplan.instance.schema import Instance, Priors
from fleetplan.results.plan import Plan
from fleetplan.workload.loadfit import LoadFit, MAX_MULTIPLIER, ObservedPool, PoolModel, fit_phase_scales, phase_scaled_priors
from fleetplan.workload.prometheus import ITL, TPOT, TTFT, PoolMetrics, no_latency_problem, observed_pool, read_metrics

__all__ = ["MOVED", "PoolDrift", "SLOMargin", "DriftReport", "drift", "plan_priors_instance", "step_time_margin", "SLO_CHECKS"]

#: A phase's step time has moved when fitted / plan is off 1 by more than this (and by more
#: than two standard errors of its multiplier).
MOVED = 0.03
#: the verifier's checks that mean an SLO (or the capacity behind one) no longer holds
SLO_CHECKS = ("prefill_ttft", "replica_slo", "decode_capacity", "operating_point", "kv_fit", "handoff_reserve")
#: drift's own finding beside the verifier's: a measured percentile wholly over its SLO (:func:`_measured_over_slo`)
_HIST = {"ttft": TTFT, "tpot": TPOT, "itl": ITL}
_ROLE_METRICS = {"replica": ("ttft", "tpot", "itl"), "prefill": ("ttft",), "decode": ("tpot", "itl")}


@dataclass(frozen=True)
class PoolDrift:
    """One pool, measured and predicted at the measured load.

    name (region/tier/role), role, slice; replicas_plan / replicas (the plan's slices, the
    engines measured); rate_rps (measured arrivals), plan_rps (the plan's normal-peak
    arrivals); running (measured mean per engine), running_plan / running_fit (predicted:
    decode residents plus the prompt in prefill); prompt_tokens / prompt_tokens_plan,
    output_tokens / output_tokens_plan (means, tokens); p99: metric -> (measured ms,
    bucket low, bucket high, plan ms, refit ms); mean: metric -> (measured, plan, refit) ms;
    ratios: phase -> fitted / plan step time."""

    name: str
    role: str
    slice: str
    replicas_plan: int
    replicas: int
    rate_rps: float
    plan_rps: float
    running: float | None
    running_plan: float
    running_fit: float
    prompt_tokens: float | None
    prompt_tokens_plan: float
    output_tokens: float | None
    output_tokens_plan: float
    p99: dict[str, tuple[float, float, float, float, float]]
    mean: dict[str, tuple[float, float, float]]
    ratios: dict[str, float]


@dataclass(frozen=True)
class SLOMargin:
    """One SLO of one pool at its sizing scenario: the percentile value under the plan's and
    the refitted priors (ms), the limit, whether it holds under the refit, and the step-time
    margin (the largest multiplier on every step time at which it holds, under the plan's
    priors; None when it fails at 1x already, ``MAX_MULTIPLIER`` when it holds there)."""

    pool: str
    scenario: str
    metric: str
    percentile: float
    limit_ms: float
    plan_ms: float
    refit_ms: float
    holds: bool
    margin: float | None

    @property
    def spent(self) -> bool:
        return not self.holds


@dataclass(frozen=True)
class DriftReport:
    """The result of :func:`drift`: ``pools`` (:class:`PoolDrift`), ``fit`` (the refit),
    ``margins`` (:class:`SLOMargin`), ``violations`` (the verifier's findings under the
    refit: (check, where, message)), ``headroom`` (the headroom findings among them),
    ``holds``; ``unmeasured`` plan pools without metrics; ``notes``; ``source``."""

    plan_name: str
    instance_hash: str
    source: dict
    pools: tuple[PoolDrift, ...]
    fit: LoadFit
    margins: tuple[SLOMargin, ...]
    violations: tuple[tuple[str, str, str], ...]
    headroom: tuple[tuple[str, str, str], ...]
    unmeasured: tuple[str, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def holds(self) -> bool:
        return not self.violations

    def moved(self) -> list[tuple[str, float, bool]]:
        """(phase, worst fitted / plan step-time ratio over the measured pools, moved)."""
        out = []
        for ph in ("prefill", "decode"):
            m = self.fit.multiplier(ph)
            rs = [p.ratios[ph] for p in self.pools if math.isfinite(p.ratios.get(ph, math.nan))]
            if not rs or not m.identified:
                continue
            r = max(rs, key=lambda x: abs(x - 1.0))
            big = abs(r - 1.0) > MOVED and (m.stderr is None or abs(m.value - 1.0) > 2.0 * m.stderr)
            out.append((ph, r, big))
        return out

    def document(self) -> dict[str, Any]:
        def r(x):  # an unstable pool's infinite p99 stays infinite (the JSON's "inf"): null is "not computed"
            return None if x is None or math.isnan(x) else x if math.isinf(x) else float(f"{x:.4g}")
        fit_doc = self.fit.document(self.source)
        return {
            "plan": {"name": self.plan_name, "instance_hash": self.instance_hash},
            "metrics": self.source,
            "verdict": {"holds": self.holds, "exit_code": 0 if self.holds else 3,
                        "moved": [{"phase": ph, "step_time_ratio": r(x), "moved": mv} for ph, x, mv in self.moved()],
                        "violations": [{"check": c, "where": w, "message": m} for c, w, m in self.violations],
                        "headroom_spent": [{"check": c, "where": w, "message": m} for c, w, m in self.headroom]},
            "pools": [{"pool": p.name, "role": p.role, "slice": p.slice, "replicas": {"plan": p.replicas_plan, "measured": p.replicas},
                       "rate_rps": {"measured": r(p.rate_rps), "per_replica": r(p.rate_rps / p.replicas), "plan_normal_peak": r(p.plan_rps)},
                       "running_per_replica": {"measured": r(p.running), "plan": r(p.running_plan), "refit": r(p.running_fit)},
                       "prompt_tokens": {"measured": r(p.prompt_tokens), "plan": r(p.prompt_tokens_plan)},
                       "output_tokens": {"measured": r(p.output_tokens), "plan": r(p.output_tokens_plan)},
                       "p99_ms": {m: {"measured": r(v[0]), "bucket": [r(v[1]), r(v[2])], "plan": r(v[3]), "refit": r(v[4])} for m, v in p.p99.items()},
                       "mean_ms": {m: {"measured": r(v[0]), "plan": r(v[1]), "refit": r(v[2])} for m, v in p.mean.items()},
                       "step_time_ratio": {k: r(v) for k, v in p.ratios.items()}} for p in self.pools],
            "slos": [{"pool": s.pool, "scenario": s.scenario, "metric": s.metric, "percentile": s.percentile, "limit_ms": s.limit_ms,
                      "plan_ms": r(s.plan_ms), "refit_ms": r(s.refit_ms), "holds": s.holds, "step_time_margin": r(s.margin),
                      "spent": s.spent} for s in self.margins],
            "unmeasured_pools": list(self.unmeasured),
            "priors": fit_doc["priors"],
            "fit": fit_doc["fit"],
            "notes": list(self.notes),
        }


def _with_priors(inst: Instance, priors: Priors) -> Instance:
    """``inst`` with ``priors`` as its one physics: a physics: block's sources would lay their
    own priors over them (:func:`fleetplan.instance.physics.with_priors`)."""
    from fleetplan.instance.physics import with_priors

    return with_priors(inst, priors)


def plan_priors_instance(plan: Plan, inst: Instance, pools: list[str]) -> tuple[Instance, str | None]:
    """(``inst`` with the priors the plan's ``pools`` (region/tier/role names) were sized under
    as its one physics, that source's name). Without a ``physics:`` block: ``inst`` and None.
    With one: the held source binding the most of ``pools`` in ``plan.physics.binding`` (the
    instance's source order on a tie; every pool's binding source when none of ``pools`` is
    recorded) -- under ``hold: all`` the bundled priors are the fastest source, and a
    deployment's step times are "the plan's" only against the source the plan was sized to."""
    from fleetplan.instance.physics import sources

    if inst.physics is None or plan.physics is None:
        return inst, None
    bound = [f"{b.region}/{b.tier}/{b.role}" for b in plan.physics.binding]
    names = [b.source for b, n in zip(plan.physics.binding, bound) if n in pools] or [b.source for b in plan.physics.binding]
    srcs = [s for s in sources(inst) if s.held]
    if names:
        srcs = [s for s in srcs if s.name in names] or srcs
        src = max(srcs, key=lambda s: (names.count(s.name), -srcs.index(s)))
    else:
        src = srcs[0]
    return _with_priors(inst, src.priors), src.name


def _match(plan: Plan, measured: list[PoolMetrics], path: str) -> list[tuple[Any, PoolMetrics]]:
    """(plan pool, its metrics) for every measured pool. Raises InputError when a measured pool
    names none of the plan's (or, unlabelled, the plan has more than one pool), or when the
    plan has several shapes of one region/tier/role (the labels cannot tell them apart)."""
    by_key: dict = {}
    for p in plan.pools:
        by_key.setdefault((p.region, p.tier, p.role), []).append(p)
    names = ", ".join("/".join(k) for k in sorted(by_key))
    out = []
    for pm in measured:
        if pm.key is None:
            if len(plan.pools) != 1:
                raise InputError(path, [Problem("(labels)", "series without the fleetplan_region, fleetplan_tier and fleetplan_role labels "
                                                            f"cannot be mapped to one of the plan's pools ({names}); scrape through fleetplan's "
                                                            "Kubernetes export, whose PodMonitor copies them (docs/calibration.md).")])
            out.append((plan.pools[0], pm))
            continue
        hits = by_key.get(pm.key)
        if not hits:
            raise InputError(path, [Problem("(labels)", f"metrics for pool {pm.name}, which the plan does not have; its pools: {names}.")])
        if len(hits) > 1:
            raise InputError(path, [Problem("(labels)", f"the plan runs {pm.name} on {len(hits)} slice shapes "
                                                        f"({', '.join(h.slice for h in hits)}): the pool labels cannot tell their engines apart.")])
        out.append((hits[0], pm))
    return out


def _sizing(plan: Plan, pool) -> tuple[str, Any, bool]:
    """(scenario name, PoolLoad, whether a region loss) of the scenario that loads ``pool`` most (its highest pressure)."""
    best = None
    for sc in plan.scenarios:
        for pl in sc.pools:
            if (pl.region, pl.tier, pl.role, pl.slice) == (pool.region, pool.tier, pool.role, pool.slice):
                key = pl.pressure if pl.pressure is not None else -1.0
                if best is None or key > best[0]:
                    best = (key, sc.name, pl, sc.kind == "loss")
    if best is None:
        raise InputError("plan", [Problem("scenarios", f"no scenario loads pool {pool.region}/{pool.tier}/{pool.role}.")])
    return best[1], best[2], best[3]


def _slo_values(inst: Instance, pool, pl, failover: bool) -> dict[tuple[str, float], tuple[float, float]]:
    """(metric, percentile) -> (value ms, limit ms) of every SLO of ``pool``'s tier at the
    admitted load of ``pl`` (a scenario's PoolLoad: its slices, warm ones included) with the
    instance's priors (the evaluator: :class:`fleetplan.results.evaluate.Context`; a prefill
    pool's TTFT the percentile of the sum, :meth:`~fleetplan.results.evaluate.Context.ttft_estimate`). A decode
    pool's are its operating point's (the batch cap at full occupancy, as the plan sizes it)."""
    from fleetplan.perf.pools import tier_slos
    from fleetplan.results.evaluate import Context

    ctx = Context(inst)
    slos = tier_slos(inst, pool.tier)
    # the admitted load, as the verifier takes it: the arrivals less what the scenario sheds
    # (the sheddable class in a region loss), own and diverted apart
    own = max(pl.arrivals_rps - pl.diverted_rps - (pl.shed_rps - pl.shed_diverted_rps), 0.0)
    div = max(pl.diverted_rps - pl.shed_diverted_rps, 0.0)
    out = {}
    if pool.role == "replica":
        ev = ctx.replica(pool.tier, pool.slice, pl.slices, own, div, failover, pool.schedule)
        for s in slos:
            out[(s.metric, s.percentile)] = ({"ttft": ev.ttft_ms, "tpot": ev.tpot_ms, "itl": ev.itl_ms}[s.metric].get(s.percentile, math.inf)
                                             if ev.stable else math.inf, s.limit_ms)
    elif pool.role == "prefill":
        # the percentile of the TTFT sum, what the pool is sized and verified against
        # (perf.ttft_tail; the plan's ttft_estimate_ms) -- not ttft_ms, the sum of the
        # components' percentiles, a bound above a verified pool's SLO
        ttft = [s for s in slos if s.metric == "ttft"]
        est = ctx.ttft_estimate(pool.tier, pool.slice, pl.slices, own, div, failover, [s.percentile for s in ttft], pl.dcn_share or 0.0) if ttft else {}
        for s in ttft:
            out[(s.metric, s.percentile)] = (est.get(s.percentile, math.inf), s.limit_ms)
    else:
        op = pool.decode_failover if failover else pool.decode_normal
        o = ctx.decode_op(pool.tier, pool.slice, op.batch_cap, op.draft_tokens)
        for s in slos:
            if s.metric in ("tpot", "itl"):
                src = o.tpot_ms if s.metric == "tpot" else o.itl_ms
                out[(s.metric, s.percentile)] = (src.get(s.percentile, math.inf), s.limit_ms)
    return out


def step_time_margin(inst: Instance, pool, pl, failover: bool, metric: str, percentile: float) -> float | None:
    """The largest multiplier m on every step time (both phases, :func:`phase_scaled_priors`)
    at which ``pool``'s SLO (metric, percentile) still holds at load ``pl`` (dimensionless; the
    plan's own margin search, :func:`fleetplan.results.margins.margin_search`: to 1e-4 relative,
    four significant digits rounded down, so it reads as the plan's recorded margin). None
    when it fails at m = 1 already; :data:`MAX_MULTIPLIER` when it holds there."""
    from fleetplan.results.margins import margin_search

    def ok(m: float) -> bool:
        v, lim = _slo_values(_with_priors(inst, phase_scaled_priors(inst.priors, m, m)), pool, pl, failover)[(metric, percentile)]
        return v <= lim * (1 + 1e-6)
    if not ok(1.0):
        return None
    return margin_search(ok, 1.0, MAX_MULTIPLIER)


def _measured_over_slo(inst: Instance, pairs) -> tuple[tuple[str, str, str], ...]:
    """("measured_slo", pool, message) for every SLO of a measured pool's tier whose measured
    percentile (the histogram's bucket at that rank, engine-side: the path adds to it) lies
    wholly above its limit: the deployment breaks that SLO now, whatever the fit says."""
    from fleetplan.perf.pools import tier_slos

    out = []
    for pool, pm in pairs:
        for s in tier_slos(inst, pool.tier):
            if s.metric not in _ROLE_METRICS[pool.role]:
                continue
            h = pm.histograms.get(_HIST[s.metric])
            if h is None or h.count <= 0:
                continue
            v, lo, hi = h.quantile(s.percentile / 100.0)
            if 1e3 * lo > s.limit_ms:
                out.append(("measured_slo", pm.name, f"measured {s.metric.upper()} p{s.percentile:g} {1e3 * v:,.4g} ms (bucket "
                                                     f"{1e3 * lo:,.4g}-{1e3 * hi:,.4g} ms, engine-side) is over the SLO's "
                                                     f"{s.limit_ms:g} ms: the deployment breaks it now."))
    return tuple(out)


def drift(plan: Plan, inst: Instance, metrics: str, baseline: str | None = None, window_s: float | None = None) -> DriftReport:
    """Set the deployment's metrics (``metrics``, ``baseline``, ``window_s``: as
    :func:`fleetplan.workload.prometheus.read_metrics`) beside ``plan`` (solved for ``inst``);
    the module docstring says what is computed.

    Raises: :class:`~fleetplan.errors.InputError` for unreadable metrics, pools the plan does
    not have, a pool without statistics; :class:`~fleetplan.workload.prometheus.MetricsError`."""
    from fleetplan.instance.io import instance_hash
    from fleetplan.perf.pools import tier_mixes
    from fleetplan.results.verify import verify

    measured, source = read_metrics(metrics, baseline, window_s)
    pairs = _match(plan, [m for m in measured if m.requests > 0], metrics)
    inst, binding = plan_priors_instance(plan, inst, [f"{p.region}/{p.tier}/{p.role}" for p, _ in pairs])
    tms = {t.name: t for t in tier_mixes(inst)}
    observed: list[ObservedPool] = []
    notes: list[str] = []
    if binding is not None:
        notes.append(f"the plan's priors here are physics source {binding}'s, the held source that binds the measured pools "
                     "(the plan's margins are under it): step-time ratios and margins are against its step times.")
    for pool, pm in pairs:
        op = pool.decode_normal
        try:
            obs = observed_pool(pm, pool.role, pool.tier, pool.slice, pool.schedule, None, None,
                                op.batch_cap if op else None, op.draft_tokens if op else 0)
        except ValueError as e:
            raise InputError(metrics, [Problem(pm.name, f"{e}.")]) from None
        observed.append(obs)
        notes += [f"{pm.name}: {n}" for n in obs.notes]
        if len(pm.models) > 1:
            notes.append(f"{pm.name}: several model_name labels ({', '.join(sorted(pm.models))}) are summed as one pool.")
    if not any(o.quantities for o in observed):
        raise InputError(metrics, [no_latency_problem("no pool has")])
    try:
        fit = fit_phase_scales(inst, [o for o in observed if o.quantities])
    except ValueError as e:
        raise InputError(metrics, [Problem("(statistics)", f"{e}.")]) from None
    pools_out = []
    for (pool, pm), obs in zip(pairs, observed):
        model = PoolModel(inst, obs)
        stats = [(m, "p99") for m in _ROLE_METRICS[pool.role]] + [(m, "mean") for m in _ROLE_METRICS[pool.role]]
        base, refit = model.predict(inst.priors, stats), model.predict(fit.fitted, stats)
        p99, mean = {}, {}
        for m in _ROLE_METRICS[pool.role]:
            h = pm.histograms.get(_HIST[m])
            if h is None or h.count <= 0:
                continue
            v, lo, hi = h.quantile(0.99)
            p99[m] = (1e3 * v, 1e3 * lo, 1e3 * hi, base.stats[(m, "p99")], refit.stats[(m, "p99")])
            mean[m] = (1e3 * h.mean, base.stats[(m, "mean")], refit.stats[(m, "mean")])
        normal = next((pl for sc in plan.scenarios if sc.kind == "normal" for pl in sc.pools
                       if (pl.region, pl.tier, pl.role, pl.slice) == (pool.region, pool.tier, pool.role, pool.slice)), None)
        tm = tms[pool.tier]
        ratios = fit.ratios.get(obs.name, {"prefill": math.nan, "decode": math.nan})
        pools_out.append(PoolDrift(obs.name, pool.role, pool.slice, pool.slices, obs.replicas, obs.rate_rps,
                                   normal.arrivals_rps if normal else math.nan, obs.running, base.running, refit.running,
                                   obs.prompt_tokens, tm.mean_tokens, obs.output_tokens, tm.output_tokens, p99, mean, dict(ratios)))
        if obs.prompt_tokens is not None and abs(obs.prompt_tokens / tm.mean_tokens - 1.0) > 0.05:
            notes.append(f"{obs.name}: the traffic moved -- mean prompt {obs.prompt_tokens:.0f} tokens against the plan's {tm.mean_tokens:.0f}; "
                         "the fit ran at the measured mix, so this is not booked as a step time; the verdict is at the plan's mix.")
    # the verdict: the verifier on the plan with the refitted priors, at the plan's loads
    inst_fit = _with_priors(inst, fit.fitted)
    plan_fit = plan.model_copy(update={"instance_hash": instance_hash(inst_fit)})
    found = [(v.check, v.where, v.message) for v in verify(inst_fit, plan_fit)
             if not (v.check == "operating_point" and " claims " in v.message) and v.check != "status"]
    violations = tuple(v for v in found if v[0] in SLO_CHECKS) + _measured_over_slo(inst, pairs)
    headroom = tuple(v for v in found if v[0] == "replica_headroom")
    margins = []
    for pool in plan.pools:
        sc_name, pl, failover = _sizing(plan, pool)
        before, after = _slo_values(inst, pool, pl, failover), _slo_values(inst_fit, pool, pl, failover)
        for (metric, pct), (v0, lim) in sorted(before.items()):
            v1 = after[(metric, pct)][0]
            margins.append(SLOMargin(f"{pool.region}/{pool.tier}/{pool.role}", sc_name, metric, pct, lim, v0, v1,
                                     v1 <= lim * (1 + 1e-6), step_time_margin(inst, pool, pl, failover, metric, pct)))
    measured_names = {o.name for o in observed}
    unmeasured = tuple(n for n in (f"{p.region}/{p.tier}/{p.role}" for p in plan.pools) if n not in measured_names and len(plan.pools) > 1)
    if unmeasured:
        notes.append(f"no metrics for {', '.join(unmeasured)}: the refitted priors (one set for the deployment) are applied to them too.")
    return DriftReport(plan.instance_name, plan.instance_hash, source, tuple(pools_out), fit, tuple(margins), violations, headroom,
                       unmeasured, tuple(notes))
