"""Margins on every pool: for each SLO of each pool, the multiplier on every step
time and the multiplier on the load at which it breaks, at the normal peak and in the pool's
sizing scenario. Computed by the evaluator (:mod:`fleetplan.results.evaluate`) from the
instance and the plan's recorded loads -- never from the model.

* **step-time margin** m: the largest multiplier on every step time -- prefill and decode
  together, through the priors' ``prefill_time_scale`` and ``decode_time_scale`` (each times
  m) -- at which the SLO still holds at the pool's load in that scenario, by the verifier's
  own test: a prefill pool's TTFT percentile of the sum of path, G/G/c wait, compute and
  exposed KV (:meth:`fleetplan.results.evaluate.Context.ttft_estimate`, asked only whether
  it is within the limit: :meth:`~fleetplan.results.evaluate.Context.ttft_within`); a
  decode pool's TPOT/ITL at its operating point's full batch, and its tokens/s carrying the
  load (a slower step lowers both); colocated replicas' steady state (stable, every
  percentile within its limit). m < 1 means the SLO does not hold as planned.
* **load margin** g: the largest multiplier on the pool's load (own and diverted alike) at
  which the SLO holds at the plan's physics. ``growth_absorbed`` (the plan's records) is
  g - 1 of the tightest SLO, measured from the forecast without the demand margin; the load
  margin is from the load the pool is sized for.

Both are searched geometrically on [0.1, 10] (step) and [0.01, 100] (load) to 1e-4 relative
and rounded down to the four significant digits that proves (:func:`floor_digits`; the
tables show three); a plan held under several physics sources gets the least margin over
them, and the source each is under (``source`` the step-time margin's, ``load_source`` the
load margin's when another). Mixed-shape
replica pools (``serving.mixed_shapes``) have no margins (null): their load splits by the
sub-pools' capacities, which the step scale moves.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from fleetplan.deadline import check
from fleetplan.instance.physics import held_instances, with_priors
from fleetplan.instance.schema import Instance
from fleetplan.results.evaluate import Context
from fleetplan.results.plan import Pool, PoolLoad, ScenarioResult, SloMargin
from fleetplan.results.precision import floor_digits

__all__ = ["STEP_RANGE", "LOAD_RANGE", "floor3", "floor_digits", "pool_margins", "scenario_margins", "margin_search", "scaled_instance", "admitted"]

#: the step-time multiplier's search range (the priors' time scales allow 0.1 to 10)
STEP_RANGE = (0.1, 10.0)
#: the load multiplier's search range
LOAD_RANGE = (0.01, 100.0)
#: the bisection's relative precision: 1e-4 proves the fourth significant digit, which the
#: margins keep (:func:`floor_digits`) -- at 1e-3 and three digits the floor dropped a unit
#: of the last digit shown (x1.08 beside growth absorbed +9.0%, the SLO holding to x1.0901)
_REL = 1e-4
#: the SLO metrics each role answers for
_METRICS = {"prefill": ("ttft",), "decode": ("tpot", "itl"), "replica": ("ttft", "tpot", "itl")}


def floor3(x: float) -> float:
    """``x`` rounded down to three significant digits (a margin is never overstated)."""
    return floor_digits(x, 3)


def margin_search(holds: Callable[[float], bool], lo: float, hi: float) -> float:
    """The largest x in [lo, hi] with ``holds(x)`` (``holds`` true below a point, false above),
    by a geometric bisection from x = 1 to 1e-4 relative, rounded down to the four significant
    digits that proves (:func:`floor_digits`): ``hi`` when it holds there, 0 when it fails at
    ``lo``."""
    if holds(1.0):
        a, b = 1.0, hi
        if holds(hi):
            return hi
    else:
        a, b = lo, 1.0
        if not holds(lo):
            return 0.0
    while b / a - 1.0 > _REL:
        check("computing the margins")  # a no-op without a deadline (solve's extraction and CLI table have one)
        mid = math.sqrt(a * b)
        if holds(mid):
            a = mid
        else:
            b = mid
    return floor_digits(a, 4)


def scaled_instance(inst: Instance, m: float) -> Instance:
    """``inst`` (one physics source's instance) with every step time multiplied by ``m``."""
    pr = inst.priors
    return with_priors(inst, pr.model_copy(update={"prefill_time_scale": pr.prefill_time_scale * m,
                                                   "decode_time_scale": pr.decode_time_scale * m}))


def admitted(pl: PoolLoad) -> tuple[float, float]:
    """(own, diverted) requests/s a pool's record says it serves: its arrivals less the sheds,
    less the shortfall in proportion (prefill and replicas; decode counts its shortfall in
    tokens/s and serves its arrivals' tokens)."""
    own = pl.arrivals_rps - pl.diverted_rps - (pl.shed_rps - pl.shed_diverted_rps)
    div = pl.diverted_rps - pl.shed_diverted_rps
    tot = own + div
    if pl.role != "decode" and pl.shortfall > 0 and tot > 0:
        f = max(0.0, 1.0 - pl.shortfall / tot)
        own, div = own * f, div * f
    return max(own, 0.0), max(div, 0.0)


class _Pool:
    """One pool's SLO values at a physics (a single-source Context) and a load multiplier."""

    def __init__(self, pools: list[Pool], pl: PoolLoad, failover: bool):
        self.pl, self.failover = pl, failover
        self.pools = [p for p in pools if (p.region, p.tier, p.role) == (pl.region, pl.tier, pl.role)]
        self.own, self.div = admitted(pl)

    def values(self, ctx: Context, g: float) -> dict[tuple[str, float], float] | None:
        """{(metric, percentile): ms} at ``g`` x the load (inf where the pool cannot carry it),
        None for a pool the margins do not cover."""
        pl, t = self.pl, self.pl.tier
        slos = [s for s in ctx.slos[t]]
        if pl.role == "prefill":
            # the percentile of the sum, what the pool is sized and verified against (perf.ttft_tail)
            pcts = [s.percentile for s in slos if s.metric == "ttft"]
            if not pcts:
                return {}
            est = ctx.ttft_estimate(t, pl.slice, pl.slices, self.own * g, self.div * g, self.failover, pcts, pl.dcn_share or 0.0)
            return {("ttft", p): est.get(p, 0.0) for p in pcts}
        if pl.role == "decode":
            cap, out = 0.0, {}
            for p in self.pools:
                op = p.decode_failover if self.failover else p.decode_normal
                if op is None:
                    continue
                o = ctx.decode_op(t, p.slice, op.batch_cap, op.draft_tokens)
                cap += o.tokens_per_s * (p.slices + (pl.warm_slices if p.slice == pl.slice else 0))
                for s in slos:
                    if s.metric in ("tpot", "itl"):
                        v = (o.tpot_ms if s.metric == "tpot" else o.itl_ms).get(s.percentile, math.inf)
                        out[(s.metric, s.percentile)] = max(out.get((s.metric, s.percentile), 0.0), v)
            demand = ctx.inst.workload.output_tokens * (self.own + self.div) * g
            if cap < demand * (1 - 1e-9) - 1e-9:
                out = {k: math.inf for k in out}
            return out
        if len({p.slice for p in self.pools}) > 1:
            return None
        ev = ctx.replica(t, pl.slice, pl.slices, self.own * g, self.div * g, self.failover, self.pools[0].schedule if self.pools else None)
        got = {"ttft": ev.ttft_ms, "tpot": ev.tpot_ms, "itl": ev.itl_ms}
        return {(s.metric, s.percentile): (got[s.metric].get(s.percentile, math.inf) if ev.stable else math.inf) for s in slos}

    def within(self, ctx: Context, g: float, metric: str, percentile: float, bound_ms: float) -> bool:
        """Whether the SLO value (metric, percentile) of :meth:`values` at ``g`` x the load is
        <= ``bound_ms`` (inf where the pool cannot carry it, absent: inf): the same answer; a
        prefill pool's TTFT asked as that question (:meth:`Context.ttft_within`, which stops
        its percentile's bisection once it is decided), not as the percentile."""
        if self.pl.role == "prefill":
            pl = self.pl
            return ctx.ttft_within(pl.tier, pl.slice, pl.slices, self.own * g, self.div * g, self.failover, percentile, bound_ms,
                                   pl.dcn_share or 0.0)
        return self.values(ctx, g).get((metric, percentile), math.inf) <= bound_ms


class _Searcher:
    """The held sources' contexts of ``inst`` and their step-scaled copies (memoised), and the
    SLO limits per tier: what every margin search of one plan shares."""

    def __init__(self, inst: Instance):
        self.srcs = held_instances(inst)
        self.many = len(self.srcs) > 1
        self.base = {name: Context(si) for name, si in self.srcs}
        self.limits = {t: {(s.metric, s.percentile): s.limit_ms for s in slos} for t, slos in next(iter(self.base.values())).slos.items()}
        self._scaled: dict[tuple[str, float], Context] = {}

    def ctx_at(self, name: str, m: float) -> Context:
        if m == 1.0:
            return self.base[name]
        if (name, m) not in self._scaled:
            self._scaled[(name, m)] = Context(scaled_instance(dict(self.srcs)[name], m))
        return self._scaled[(name, m)]

    def record_margins(self, pools: list[Pool], rec: PoolLoad, failover: bool, scenario: str) -> list[SloMargin]:
        """Every SLO margin of the pool ``rec`` describes (its slices and load in one scenario;
        ``pools`` the plan's pools, whose operating points a decode pool runs at), labelled
        ``scenario``: per source searched, the least kept, each with its source."""
        pool = _Pool(pools, rec, failover)
        out: list[SloMargin] = []
        for (metric, pct), lim in sorted(self.limits[rec.tier].items(), key=lambda kv: ("ttft", "tpot", "itl").index(kv[0][0])):
            if metric not in _METRICS[rec.role]:
                continue
            step = load = who = load_who = None
            if rec.slices > 0 and rec.slice is not None and pool.values(self.base[self.srcs[0][0]], 1.0) is not None:
                memo: dict = {}
                bound = lim * (1 + 1e-6) + 1e-6

                def ok(name: str, m: float, g: float) -> bool:
                    k = (name, m, g)
                    if k not in memo:
                        memo[k] = pool.within(self.ctx_at(name, m), g, metric, pct, bound)
                    return memo[k]

                each = []
                for name, _ in self.srcs:
                    ok_m = lambda m, name=name: ok(name, m, 1.0)  # noqa: E731
                    ok_g = lambda g, name=name: ok(name, 1.0, g)  # noqa: E731
                    has_load = pool.own + pool.div > 0
                    each.append((margin_search(ok_m, *STEP_RANGE), margin_search(ok_g, *LOAD_RANGE) if has_load else None, name))
                step, _, who = min(each, key=lambda e: e[0])
                loads = [(e[1], e[2]) for e in each if e[1] is not None]
                load, load_who = min(loads, key=lambda e: e[0]) if loads else (None, None)
            out.append(SloMargin(region=rec.region, tier=rec.tier, role=rec.role, scenario=scenario, metric=metric, percentile=pct,
                                 limit_ms=lim, step_time_margin=step, load_margin=load, source=who if self.many else None,
                                 load_source=load_who if self.many and load_who != who else None))
        return out


def pool_margins(inst: Instance, pools: list[Pool], scenarios: list[ScenarioResult]) -> list[SloMargin]:
    """Every pool's :class:`SloMargin` per SLO, at the normal peak and in its sizing scenario
    (:func:`fleetplan.results.loads.sizing_records`), from the plan's ``pools`` and records.
    A plan of several held sources: each margin the least over them, ``source`` naming it."""
    from fleetplan.results.loads import sizing_records

    search = _Searcher(inst)
    sized = sizing_records(scenarios)
    by_name = {sc.name: sc for sc in scenarios}
    out: list[SloMargin] = []
    normal = next((sc for sc in scenarios if sc.kind == "normal"), None)
    for pl in (normal.pools if normal else []):
        key = (pl.region, pl.tier, pl.role)
        names = ["normal"] + ([sized[key][0]] if key in sized and sized[key][0] != "normal" else [])
        for sn in names:
            sc = by_name[sn]
            rec = next((p for p in sc.pools if (p.region, p.tier, p.role) == key), None)
            if rec is not None:
                out += search.record_margins(pools, rec, sc.kind == "loss", sn)
    return out


def scenario_margins(inst: Instance, pools: list[Pool], loads: list[tuple[PoolLoad, bool]], scenario: str) -> list[SloMargin]:
    """The margins of pools at loads and slices of one's own making (``fleetplan whatif``: the
    survivors after an event, each ``(record, failover)``; a record's ``slices`` those in
    service with the warm ones joined, ``pools`` the plan's with the slices left), labelled
    ``scenario``. Same search and sources as :func:`pool_margins`."""
    search = _Searcher(inst)
    return [m for rec, failover in loads for m in search.record_margins(pools, rec, failover, scenario)]
