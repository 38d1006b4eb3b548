"""Build the parts of a Plan that describe a fleet at work -- operating points, the
speculation switch, every scenario's pool loads and predictions, the fleet rows and the
cost summary -- from the instance and the fleet alone (no optimisation model). Used by
:mod:`extract` (an optimised plan) and :mod:`baseline` (the hand plan)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fleetplan.deadline import check
from fleetplan.instance.scenarios import Scenario
from fleetplan.instance.schema import Instance
from fleetplan.perf.speculation import class_acceptance_rate, switch_off_batch
from fleetplan.results.evaluate import GROWTH_SEARCH_MAX, Context
from fleetplan.results.modes import roles_at
from fleetplan.results.precision import r6, stored_error
from fleetplan.results.plan import (
    CostSummary,
    PodContent,
    TierDcn,
    OperatingPoint,
    Pool,
    PoolLoad,
    RegionFleet,
    ScenarioResult,
    SpeculationPolicy,
    WarmPoolSlices,
)

if TYPE_CHECKING:
    from fleetplan.results.dcn import DcnFlow

__all__ = ["dcn_of", "record_flow", "served_rps", "pod_dcn_records", "r6", "slice_price", "operating_point", "speculation_policy", "Decisions", "scenario_results",
           "fleet_rows", "cost_summary", "as_recorded", "recorded_decisions", "per_1m_withheld", "over_capacity", "make_pool", "binding", "sizing_records", "pct_text", "rate_text"]


def slice_price(inst: Instance, region: str, label: str, ctx: Context) -> float:
    """USD per slice-hour of shape ``label`` in ``region``."""
    sl = ctx.slice(label)
    per_chip = inst.regions[region].price_per_chip_hour_usd.get(sl.chip, inst.chips[sl.chip].price_per_chip_hour_usd)
    return per_chip * sl.chips


def operating_point(ctx: Context, t: str, label: str, batch: int, k: int) -> OperatingPoint:
    o = ctx.decode_op(t, label, batch, k)
    return OperatingPoint(
        batch_cap=o.batch, draft_tokens=o.draft_tokens, step_ms=r6(o.step_ms), tokens_per_s_per_slice=r6(o.tokens_per_s),
        tpot_p50_ms=r6(o.tpot_p50_ms), tpot_ms={f"p{p:g}": r6(v) for p, v in o.tpot_ms.items()},
        itl_ms={f"p{p:g}": r6(v) for p, v in o.itl_ms.items()}, knee_batch=ctx.decode_knee(t, label, o.draft_tokens),
        handoff_reserve_requests=o.handoff_requests, handoff_reserve_gb=r6(o.handoff_gb),
    )


def speculation_policy(inst: Instance, ctx: Context, t: str, label: str, op: OperatingPoint | None) -> SpeculationPolicy | None:
    """The pool's load-aware switch: which classes draft, and the occupancy from which
    speculation stops raising tokens/s (computed for the speculating classes' mean alpha at
    the pool's draft length, :func:`fleetplan.perf.speculation.class_acceptance_rate`)."""
    if op is None or op.draft_tokens == 0:
        return None
    classes = inst.workload.classes
    k = op.draft_tokens
    rate = {q: class_acceptance_rate(cl.spec_acceptance, cl.spec_acceptance_kind, cl.spec_acceptance_at_k, k) for q, cl in classes.items()}
    on = sorted(q for q in classes if rate[q] >= inst.speculation.alpha_threshold)
    off = sorted(q for q in classes if q not in on)
    kv, _ = ctx.tiers[t].resident_kv(inst)
    share = sum(classes[q].share for q in on)
    alpha = sum(classes[q].share * rate[q] for q in on) / share
    sw = switch_off_batch(inst.model, ctx.slice(label), inst.priors, kv, op.draft_tokens, alpha, inst.speculation.draft_step_ms,
                          max_batch=max(inst.serving.batch_caps))
    return SpeculationPolicy(draft_tokens=op.draft_tokens, speculating_classes=on, off_classes=off,
                             alpha_threshold=inst.speculation.alpha_threshold, switch_off_batch=sw)


def make_pool(inst: Instance, ctx: Context, r: str, t: str, role: str, label: str, n: int,
              normal: tuple[int, int] | None = None, failover: tuple[int, int] | None = None, schedule: str | None = None) -> Pool:
    """A Pool row; ``normal``/``failover`` are decode (batch cap, draft length) pairs;
    ``schedule`` a replica pool's engine schedule label (default prefill-first)."""
    sl = ctx.slice(label)
    op_n = operating_point(ctx, t, label, *normal) if normal else None
    op_f = operating_point(ctx, t, label, *failover) if failover else None
    return Pool(region=r, tier=t, role=role, slice=label, chip=sl.chip, chips_per_slice=sl.chips, slices=n, chips=n * sl.chips,
                cost_per_hour_usd=r6(n * slice_price(inst, r, label, ctx)), decode_normal=op_n, decode_failover=op_f,
                speculation=speculation_policy(inst, ctx, t, label, op_f) if role == "decode" else None,
                schedule=(schedule or "prefill-first") if role == "replica" else None)


@dataclass
class Decisions:
    """Operational decisions of one region-tier in one scenario (requests/s, slices,
    shortfall in each role's unit)."""

    shed_own: float = 0.0
    shed_div: float = 0.0
    warm: dict[str, int] = field(default_factory=dict)  # role -> warm slices joined
    warm_shape: dict[str, str] = field(default_factory=dict)  # role -> shape of the warm slices joined (the most used)
    short: dict[str, float] = field(default_factory=dict)  # role -> shortfall


def as_recorded(dc: Decisions) -> Decisions:
    """``dc`` as a plan records it and a reader rebuilds it from the file
    (:func:`fleetplan.results.records.check_plan_records`): the shed total and its diverted
    part, and each role's shortfall, at :func:`r6`; the own shed is their difference.

    The plan's loads are computed from these, not from the solver's raw values, so a
    reader rebuilding them from the records gets the same numbers. A pool whose load is
    all shed or short (served = arrivals - shed - shortfall, about 0) otherwise came out
    0 in the writer and ~1e-6 from the rounded records, with another traffic mix for its
    capacity, and every reader refused the plan as edited."""
    tot, div = r6(dc.shed_own + dc.shed_div), r6(dc.shed_div)
    return Decisions(shed_own=tot - div, shed_div=div, warm=dict(dc.warm), warm_shape=dict(dc.warm_shape),
                     short={k: r6(v) for k, v in dc.short.items()})


def recorded_decisions(scenarios) -> dict[tuple[str, str, str], Decisions]:
    """(scenario, region, tier) -> the decisions a plan's ``scenarios`` (ScenarioResult
    records) hold: shed (own = shed_rps - shed_diverted_rps) from the prefill or replica
    pool, warm slices and shortfall per role -- what a reader rebuilds the loads from."""
    decisions: dict[tuple[str, str, str], Decisions] = {}
    for s in scenarios:
        for pl in s.pools:
            dc = decisions.setdefault((s.name, pl.region, pl.tier), Decisions())
            if pl.role in ("prefill", "replica"):
                dc.shed_own, dc.shed_div = pl.shed_rps - pl.shed_diverted_rps, pl.shed_diverted_rps
            dc.warm[pl.role] = pl.warm_slices
            if pl.warm_slices and pl.slice:
                dc.warm_shape[pl.role] = pl.slice
            dc.short[pl.role] = pl.shortfall
    return decisions


def _prefill_capacity_erlangs(ctx: Context, t: str, label: str, n: int, own: float, div: float, failover: bool,
                              dcn_share: float = 0.0) -> float:
    """Most work (Erlangs) n slices carry at this traffic mix with every TTFT percentile --
    of the sum of path, queue wait, compute and exposed KV (``dcn_share`` of it over the
    DCN) -- within its limit (:meth:`Context.prefill_capacity_erlangs`)."""
    return ctx.prefill_capacity_erlangs(t, label, n, own, div, failover, dcn_share)


#: ``PoolLoad.withheld`` of a record built by ``scenario_results(..., predict=False)``.
NOT_PREDICTED = "not computed: the decisions only (predict=False)"


def scenario_results(inst: Instance, ctx: Context, scenarios: list[Scenario], pools: list[Pool],
                     routing: dict[tuple[str, str, str], float], decisions: dict[tuple[str, str, str], Decisions],
                     modes: dict[tuple[str, str], str] | None = None, predict: bool = True,
                     pods: list[PodContent] | None = None) -> list[ScenarioResult]:
    """Per scenario and active region x tier x role: load, mitigations, capacity and the
    predicted TTFT/TPOT percentiles (independent evaluator). ``modes``: (region, tier) ->
    serving mode (:func:`fleetplan.results.modes.plan_modes`; None: the instance's fixed mode).
    ``pods``: a plan sized with its pods (``Plan.pods``): each prefill pool's DCN share in the
    scenario (:mod:`fleetplan.results.dcn`) is recorded and its TTFT pays it.

    ``predict=False`` records the loads and the decisions (sheds, warm slices, shortfall,
    unserved requests/s and the shed and clamp costs) without the capacity and latency
    predictions (utilisation, capacity, TTFT/TPOT, occupancy, pressure, growth absorbed are
    null, ``withheld`` says so): what :func:`fleetplan.results.verify.verify` and a purchase
    quarter's check read, at a quarter of the time. Such records are not a plan's to write."""
    if modes is None:
        modes = {(r, t): inst.serving.mode for r in inst.regions for t in ctx.tiers}
    o = inst.workload.output_tokens
    out = []
    for s in scenarios:
        fail = s.kind == "loss"
        loads: list[PoolLoad] = []
        for r in s.active:
            for t, tm in ctx.tiers.items():
                check()  # under a command's deadline (solve's extraction, a reader's plan check: the caller's phase); a no-op outside one
                own = inst.sized_peak_rps(r) * s.load[r] * tm.tier_share  # the sized demand: forecast x (1 + margin)
                lost = inst.sized_peak_rps(s.lost) * s.load[s.lost] * tm.tier_share if fail else 0.0
                share = routing.get((s.lost, r, t), 0.0) if fail else 0.0
                div = share * lost * (1 - ctx.clamped_share[t])
                clamped = share * lost * ctx.clamped_share[t]
                dec = decisions.get((s.name, r, t), Decisions())
                a_own, a_div = own - dec.shed_own, div - dec.shed_div
                # the same admitted loads at the forecast, without the demand margin: growth is measured from them
                f_own = a_own / (1.0 + inst.demand_margin_of(r))
                f_div = a_div / (1.0 + inst.demand_margin_of(s.lost)) if fail else 0.0
                for ro in roles_at(modes, r, t):
                    pp = [p for p in pools if p.region == r and p.tier == t and p.role == ro]
                    wu = dec.warm.get(ro, 0) if fail else 0
                    # a mixed pool (serving.mixed_shapes) is one record per role: its slice is the warm slices' shape, else the first pool's
                    label = (dec.warm_shape.get(ro) if wu else None) or (pp[0].slice if pp else None)
                    n = sum(p.slices for p in pp) + wu
                    short = dec.short.get(ro, 0.0)
                    base = dict(region=r, tier=t, role=ro, slice=label, slices=n, warm_slices=wu, arrivals_rps=r6(own + div),
                                diverted_rps=r6(div), clamped_rps=r6(clamped), shed_rps=r6(dec.shed_own + dec.shed_div),
                                shed_diverted_rps=r6(dec.shed_div), shortfall=r6(short))
                    # the served fraction; none when what is left after the shed and the shortfall is
                    # within their stored precision (six digits: the records cannot tell it from 0)
                    frac = 1.0 - short / max(a_own + a_div, 1e-12) if (short > 0 and ro != "decode") else 1.0
                    if frac < 1.0 and a_own + a_div - short <= stored_error(dec.shed_own + dec.shed_div, short):
                        frac = 0.0
                    if not predict:
                        loads.append(PoolLoad(**base, shortfall_unit="output tokens/s" if ro == "decode" else "requests/s", utilisation=None,
                                              capacity=None, capacity_unit="not computed", withheld=NOT_PREDICTED))
                        continue
                    if label is None or n == 0:
                        unit = "output tokens/s" if ro == "decode" else "requests/s"
                        why = f"no {ro} slices: none of its {a_own + a_div:,.4g} requests/s is served" if a_own + a_div > 0 else None
                        loads.append(PoolLoad(**base, shortfall_unit=unit, utilisation=None, capacity=None,
                                              capacity_unit="output tokens/s" if ro == "decode" else "requests/s", withheld=why))
                        continue
                    if ro == "prefill":
                        ds = dcn_of(ctx, pods, pools, r, t, fail, a_own * frac, a_div * frac, n, wu, label).share if pods is not None else None
                        dd = ds or 0.0
                        ev = ctx.prefill(t, label, n, a_own * frac, a_div * frac, fail, dd)
                        cap = _prefill_capacity_erlangs(ctx, t, label, n, a_own * frac, a_div * frac, fail, dd)
                        # the pressure is of the load offered, before the shortfall is taken off
                        work = (ev if frac >= 1.0 else ctx.prefill(t, label, n, a_own, a_div, fail, dd)).utilisation * n
                        est = ctx.ttft_estimate(t, label, n, a_own * frac, a_div * frac, fail, dcn_share=dd)
                        loads.append(_withhold(PoolLoad(**base, shortfall_unit="requests/s", utilisation=r6(ev.utilisation), capacity=r6(cap),
                                                        capacity_unit="Erlangs (work the TTFT budget allows)", ttft_p50_ms=r6(ev.ttft_p50_ms),
                                                        ttft_ms={f"p{p:g}": r6(v) for p, v in ev.ttft_ms.items()},
                                                        ttft_estimate_ms={f"p{p:g}": r6(v) for p, v in est.items()},
                                                        pressure=r6(work / cap) if cap > 0 else None,
                                                        growth_absorbed=_growth(ctx.prefill_growth(t, label, n, f_own, f_div, fail, dcn_share=dd)),
                                                        dcn_share=r6(ds) if ds is not None else None, source=ev.source or None)))
                    elif ro == "decode":
                        cap = 0.0
                        op = None
                        parts = []
                        src = None
                        for i, p in enumerate(pp):
                            op = p.decode_failover if fail else p.decode_normal
                            if op is not None:
                                k_sl = p.slices + (wu if p.slice == label else 0)  # warm slices join the pool of their shape
                                o_i = ctx.decode_op(t, p.slice, op.batch_cap, op.draft_tokens)
                                c_i = o_i.tokens_per_s * k_sl
                                cap += c_i
                                parts.append((p.slice, op, k_sl, c_i))
                                src = src or o_i.source or None
                        demand = o * (a_own + a_div)
                        occ, tpot_est = _occupancy(ctx, t, parts, a_own + a_div, cap) if (op and cap > 0) else (None, {})
                        loads.append(_withhold(PoolLoad(**base, shortfall_unit="output tokens/s", utilisation=r6(demand / cap) if cap > 0 else None,
                                                        capacity=r6(cap), capacity_unit="output tokens/s",
                                                        tpot_ms=dict(op.tpot_ms) if op else {}, occupancy=r6(occ),
                                                        tpot_estimate_ms={k: r6(v) for k, v in tpot_est.items()},
                                                        pressure=r6(demand / cap) if cap > 0 else None,
                                                        # capacity at the operating points is linear in the load
                                                        growth_absorbed=_growth(cap / (o * (f_own + f_div)) if demand > 0 else math.inf),
                                                        source=src)))
                    elif len({p.slice for p in pp} | ({label} if wu else set())) > 1:
                        loads.append(_withhold(_mixed_replicas(ctx, t, pp, wu, label, a_own, a_div, f_own, f_div, frac, fail, base)))
                    else:
                        sch = pp[0].schedule if pp else None
                        ev = ctx.replica(t, label, n, a_own * frac, a_div * frac, fail, sch)
                        theta = ctx.replica_max_scale(t, label, n, a_own * frac, a_div * frac, fail, hi=None, schedule=sch)
                        # the pressure is of the load offered, before the shortfall is taken off
                        offered = theta if frac >= 1.0 else ctx.replica_max_scale(t, label, n, a_own, a_div, fail, hi=None, schedule=sch)
                        lam = (a_own + a_div) * frac
                        est = ev.ttft_estimate_ms
                        loads.append(_withhold(PoolLoad(**base, shortfall_unit="requests/s", utilisation=r6(1 / theta) if theta > 0 else None,
                                                        capacity=r6(lam * theta) if math.isfinite(theta) else None, capacity_unit="requests/s within the SLOs",
                                                        ttft_ms={f"p{p:g}": r6(v) for p, v in ev.ttft_ms.items()},
                                                        ttft_estimate_ms={f"p{p:g}": r6(v) for p, v in est.items()},
                                                        tpot_ms={f"p{p:g}": r6(v) for p, v in ev.tpot_ms.items()},
                                                        pressure=r6(1 / offered) if offered > 0 else None,
                                                        occupancy=r6(ev.occupancy) if math.isfinite(ev.occupancy) else None,
                                                        growth_absorbed=_growth(offered if (f_own, f_div) == (a_own, a_div) else
                                                                                ctx.replica_max_scale(t, label, n, f_own, f_div, fail, hi=None,
                                                                                                      schedule=sch)),
                                                        source=ev.source or None)))
        first = [p for p in loads if p.role in ("prefill", "replica")]  # the role that meets a request first
        # a request is served only when every role serves it: per region-tier the largest shortfall, in requests
        unserved = 0.0
        for r in s.active:
            for t in ctx.tiers:
                dec = decisions.get((s.name, r, t), Decisions())
                unserved += max([dec.short.get(ro, 0.0) / (o if ro == "decode" else 1.0) for ro in roles_at(modes, r, t)] + [0.0])
        fo = inst.failover
        shed_cost = sum(p.shed_rps * (ctx.tiers[p.tier].mean_tokens + o) for p in first) * 3600 / 1e6 * fo.batch_shed_cost_per_1m_tokens_usd
        clamp_cost = sum(p.clamped_rps for p in first) * 3600 / 1e3 * fo.clamp_cost_per_1k_requests_usd
        out.append(ScenarioResult(
            name=s.name, kind=s.kind, lost_region=s.lost, hour=s.hour, pools=loads,
            shed_rps=r6(sum(p.shed_rps for p in first)), clamped_rps=r6(sum(p.clamped_rps for p in first)),
            warm_slices_used=sum(p.warm_slices for p in loads),
            prefill_shortfall_rps=r6(sum(p.shortfall for p in loads if p.role in ("prefill", "replica"))),
            decode_shortfall_tokens_per_s=r6(sum(p.shortfall for p in loads if p.role == "decode")),
            unserved_rps=r6(unserved), shed_cost_per_hour_usd=r6(shed_cost), clamp_cost_per_hour_usd=r6(clamp_cost)))
    return out


def dcn_of(ctx: Context, pods: list[PodContent], pools: list[Pool], r: str, t: str, failover: bool, own: float, div: float,
           slices: int, warm_prefill: int, warm_shape: str | None) -> "DcnFlow":
    """Region r's tier-t DCN flow in a scenario (:func:`fleetplan.results.dcn.tier_flow`):
    ``own``/``div`` the requests/s its prefill pool serves, ``slices`` its slices with the
    ``warm_prefill`` warm slices of ``warm_shape`` that joined it."""
    from fleetplan.results.dcn import decode_rates, kv_gbytes, pod_rows, region_pods, tier_flow

    # the region's pods as the flow reads them and its decode slices' rates do not change between the scenarios and hours
    # the extraction and the verifier ask for (~3,000 flows of the generated 10-region instance): once per context,
    # keyed by the lists' identities (the memo holds them, so an id is not reused)
    key = ("dcn_of", id(pods), id(pools), r, t, failover)
    got = ctx._memo.get(key)
    if got is None:
        rates = decode_rates(ctx, [p for p in pools if p.region == r], t, failover)
        got = ctx._memo[key] = (pods, pools, rates, pod_rows(region_pods(pods, r), t, rates))
    return tier_flow([], t, own + div, slices, warm_prefill, warm_shape if warm_prefill else None, got[2], kv_gbytes(ctx, t, own, div), got[3])


def served_rps(pl: PoolLoad) -> tuple[float, float]:
    """Own and diverted requests/s a prefill pool's scenario record ``pl`` serves: arrivals
    less diverted, less the shed, times the fraction its shortfall leaves (each >= 0)."""
    own = (pl.arrivals_rps - pl.diverted_rps) - (pl.shed_rps - pl.shed_diverted_rps)
    div = pl.diverted_rps - pl.shed_diverted_rps
    lam = own + div
    frac = max(0.0, 1.0 - pl.shortfall / lam) if lam > 0 else 1.0
    return max(own, 0.0) * frac, max(div, 0.0) * frac


def record_flow(ctx: Context, pods: list[PodContent], pools: list[Pool], pl: PoolLoad, failover: bool) -> "DcnFlow":
    """The DCN flow of a prefill pool's scenario record ``pl`` (its served own and diverted
    requests/s, :func:`served_rps`, slices and warm slices as recorded; :func:`dcn_of`)."""
    own, div = served_rps(pl)
    return dcn_of(ctx, pods, pools, pl.region, pl.tier, failover, own, div, pl.slices, pl.warm_slices, pl.slice)


def pod_dcn_records(inst: Instance, ctx: Context, pods: list[PodContent], pools: list[Pool], scenarios: list[ScenarioResult],
                    sized: dict[tuple[str, str], float]) -> tuple[list[PodContent], list[TierDcn]]:
    """A plan's pods with their largest DCN egress over the scenarios (GB/s, every tier's
    KV leaving the pod summed), and per region x tier its DCN ceiling, the share its TTFT
    was sized for (``sized``) and the shares at the normal peak and in the worst region loss."""
    egress: dict[tuple[str, str, int], float] = {}
    shares: dict[tuple[str, str], list[tuple[float, str, str]]] = {}
    region: dict[str, tuple[float, str]] = {}  # region -> its largest share over all tiers, and the scenario
    for sc in scenarios:
        here: dict[tuple[str, str, int], float] = {}
        tot: dict[str, list[float]] = {}
        for pl in sc.pools:
            if pl.role != "prefill" or pl.slices <= 0:
                continue
            fl = record_flow(ctx, pods, pools, pl, sc.kind == "loss")
            shares.setdefault((pl.region, pl.tier), []).append((fl.share, sc.kind, sc.name))
            acc = tot.setdefault(pl.region, [0.0, 0.0])
            acc[0] += fl.kv_out_rps
            acc[1] += fl.rps
            for (chip, i), g in fl.egress_gbytes_per_s.items():
                here[(pl.region, chip, i)] = here.get((pl.region, chip, i), 0.0) + g
        for r, (x, n) in tot.items():
            if n > 0 and x / n > region.get(r, (-1.0, ""))[0]:
                region[r] = (x / n, sc.name)
        for k, g in here.items():
            egress[k] = max(egress.get(k, 0.0), g)
    pods = [p.model_copy(update={"dcn_egress_gbytes_per_s": r6(egress.get((p.region, p.chip, p.pod), 0.0))}) for p in pods]
    recs = []
    for (r, t), rows in sorted(shares.items()):
        normal = max((x for x, kind, _ in rows if kind == "normal"), default=0.0)
        loss = [(x, name) for x, kind, name in rows if kind == "loss"]
        worst = max(loss, default=None)
        ceiling = inst.dcn_share_max_of(t)
        over = max(normal, worst[0] if worst else 0.0) > ceiling + 1e-6
        why = overage_why(inst, pods, pools, r, t) if over else None
        limit = inst.placement.dcn_share_max
        most, where = region.get(r, (0.0, ""))
        if ceiling > limit + 1e-12 and most > limit + 1e-6:
            # the region over its overall ceiling: declared on the tiers whose own ceiling lets them pass it
            why = ((why + "; ") if why else "") + (
                f"this tier's own ceiling ({ceiling:.1%}, workload.tiers[].dcn_share_max) is above the overall one "
                f"({limit:.1%}, placement.dcn_share_max), and with its KV crossing the region's share over all tiers reaches "
                f"{most:.2%} (in {where}): declared over the overall ceiling (no placement within the pods keeps both); lower the "
                "tier's ceiling or raise the overall one to make them agree")
        level = sized.get((r, t), ceiling)
        if level > ceiling and not over:
            # the overage level where the pods keep every share within the ceiling declares nothing: its TTFT holds at
            # the ceiling's share too (the composition only grows with the share), so the record says the ceiling and
            # a declared overage is one the plan's pods make (an edit to 1 elsewhere is refused)
            level = ceiling
        recs.append(TierDcn(region=r, tier=t, dcn_share_max=ceiling, sized_for=r6(level),
                            normal=r6(normal), worst_loss=r6(worst[0]) if worst else None, worst_loss_scenario=worst[1] if worst else None,
                            why=why))
    return pods, recs


def overage_why(inst: Instance, pods: list[PodContent], pools: list[Pool], r: str, t: str) -> str:
    """Why region r's tier t sends more of its KV over the DCN than its ceiling, from the
    plan's pools and pods: its prefill slice cannot sit beside a decode slice of its shapes
    in any pod (every request crosses), or its pods hold too little decode beside its prefill."""
    pre = sorted({p.slice for p in pools if p.region == r and p.tier == t and p.role == "prefill" and p.slices > 0})
    dec = sorted({p.slice for p in pools if p.region == r and p.tier == t and p.role == "decode" and p.slices > 0})

    def chips(label: str) -> tuple[str, int]:
        chip, _, n = label.rpartition("x")
        return chip, int(n)

    together = [(a, b) for a in pre for b in dec if chips(a)[0] == chips(b)[0]
                and chips(a)[1] + chips(b)[1] <= inst.chips[chips(a)[0]].chips_per_pod]
    if not together:
        sizes = ", ".join(f"{chips(a)[1]}-chip {a} prefill" for a in pre) + " and " + ", ".join(f"{chips(b)[1]}-chip {b} decode" for b in dec)
        pod = ", ".join(sorted({f"{inst.chips[chips(a)[0]].chips_per_pod} chips ({chips(a)[0]})" for a in pre}))
        # any two shapes of one chip type the region has pods of that fit one pod together
        other = sorted((x + y, k, x, y) for k in inst.regions[r].pods if k in inst.chips
                       for x in inst.chips[k].slice_shapes for y in inst.chips[k].slice_shapes if x + y <= inst.chips[k].chips_per_pod)
        head = (f"no pod holds a prefill slice beside a decode slice of this tier's shapes ({sizes}; a pod has {pod}), so every "
                "request's KV crosses the DCN")
        if not other:
            return head + ("; no two slice shapes of the region's chips fit one pod together, so no fleet of this instance keeps "
                           "the share within the ceiling: an ICI domain that holds both is what it takes")
        _, k, x, y = other[0]
        return head + (f"; only other shapes of the region's chips fit beside each other in one pod (the smallest pair: {k}x{x} "
                       f"prefill with {k}x{y} decode), and whether any such pair meets this tier's TTFT and memory -- the plan's notes "
                       "name the shapes the tier cannot use -- and what it would cost, the plan does not say: a solve with the tier's "
                       "current prefill shape removed from chips.*.slice_shapes answers it")
    used = len({(p.chip, p.pod) for p in pods if p.region == r})
    most = sum(inst.regions[r].pods[k].installed + inst.regions[r].pods[k].available_new for k in inst.regions[r].pods)
    return (f"its pods ({used} in use of the {most} the inventory allows in {r}) hold too little decode beside its prefill slices to keep "
            "the share within the ceiling in the plan found; more pods in the region (regions." + r + ".pods.*.available_new) or a "
            "larger ICI domain may reach it -- re-solve with them to see the cost")


def _mixed_replicas(ctx: Context, t: str, pp: list[Pool], wu: int, warm_shape: str | None, a_own: float, a_div: float,
                    f_own: float, f_div: float, frac: float, fail: bool, base: dict) -> PoolLoad:
    """The load record of a replica role that mixes slice shapes (``serving.mixed_shapes``):
    each shape is its own least-work pool of its replicas (warm slices join the pool of
    their shape) and the router splits the arrivals between them in proportion to their
    capacities theta_c x load (:meth:`Context.replica_max_scale`, unbounded), so every
    sub-pool runs at the same share 1 / sum theta_c of what it carries. Latencies are the
    slowest sub-pool's at its share (the tier's SLO must hold on each); occupancy the
    replica-weighted mean. Units as :class:`PoolLoad`."""
    subs = [[p.slice, p.slices, p.schedule] for p in pp]
    if wu:
        at = next((x for x in subs if x[0] == warm_shape), None)
        if at is None:
            subs.append([warm_shape, wu, None])
        else:
            at[1] += wu
    subs = [x for x in subs if x[1] > 0]

    def theta(own: float, div: float) -> float:
        return sum(ctx.replica_max_scale(t, c, n, own, div, fail, hi=None, schedule=sch) for c, n, sch in subs)

    offered = theta(a_own, a_div)  # of the load offered, before the shortfall is taken off
    th = offered / frac if frac > 0 else math.inf
    lam = (a_own + a_div) * frac
    evs = []
    for c, n, sch in subs:
        share = ctx.replica_max_scale(t, c, n, a_own, a_div, fail, hi=None, schedule=sch) / offered if offered > 0 else 1.0 / len(subs)
        evs.append((n, ctx.replica(t, c, n, a_own * frac * share, a_div * frac * share, fail, sch)))

    def worst(attr: str) -> dict:
        keys = sorted({k for _, ev in evs for k in getattr(ev, attr)})
        return {f"p{k:g}": r6(max(getattr(ev, attr).get(k, 0.0) for _, ev in evs)) for k in keys}

    occ = sum(n * ev.occupancy for n, ev in evs) / max(sum(n for n, _ in evs), 1)
    growth = offered if (f_own, f_div) == (a_own, a_div) else theta(f_own, f_div)
    return PoolLoad(**base, shortfall_unit="requests/s", utilisation=r6(1 / th) if th > 0 else None,
                    capacity=r6(lam * th) if math.isfinite(th) else None, capacity_unit="requests/s within the SLOs",
                    ttft_ms=worst("ttft_ms"), ttft_estimate_ms=worst("ttft_estimate_ms"), tpot_ms=worst("tpot_ms"),
                    pressure=r6(1 / offered) if offered > 0 else None, occupancy=r6(occ) if math.isfinite(occ) else None,
                    growth_absorbed=_growth(growth), source=evs[0][1].source or None if evs else None)


def _growth(g: float) -> float | None:
    """Growth absorbed (g - 1, fraction) from the largest load multiplier g within the
    SLOs, searched to :data:`~fleetplan.results.evaluate.GROWTH_SEARCH_MAX`; None below 1
    (the pool is over 100% load) or without load."""
    if not math.isfinite(g):
        return None
    g = min(g, GROWTH_SEARCH_MAX)
    return r6(max(g - 1.0, 0.0)) if g >= 1.0 - stored_error(1.0) else None


def over_capacity(pressure: float | None) -> bool:
    """A pool offered more than it carries within its SLOs (above 1 beyond the stored precision)."""
    return pressure is not None and pressure > 1.0 + stored_error(1.0)


def _withhold(p: PoolLoad) -> PoolLoad:
    """``p`` without its latency predictions when its load is over 100% of what it carries
    within its SLOs: queues grow without bound there, so no TTFT or TPOT figure holds."""
    if not over_capacity(p.pressure):
        return p
    why = f"load at {pct_text(p.pressure)} of what the pool carries within its SLOs: queues grow without bound, no latency figure holds"
    return p.model_copy(update={"ttft_p50_ms": None, "ttft_ms": {}, "ttft_estimate_ms": {}, "tpot_ms": {}, "tpot_estimate_ms": {},
                                "occupancy": None, "withheld": why})


def _occupancy(ctx: Context, t: str, parts, rps: float, cap: float) -> tuple[float, dict[str, float]]:
    """Mean residents per decode slice at ``rps`` (requests/s) spread over the pools
    ``parts`` (shape, operating point, slices, tokens/s) in proportion to their capacity
    -- Little's law at the step each occupancy gives (:func:`perf.pools.decode_at_load`),
    slice-weighted -- and the TPOT percentiles there ('p50', 'p99': ms; the slowest pool's)."""
    tot_b = tot_n = 0.0
    tpot: dict[str, float] = {}
    for label, op, n, c_i in parts:
        if n <= 0:
            continue
        at = ctx.decode_at_load(t, label, op.batch_cap, op.draft_tokens, rps * c_i / cap / n)
        tot_b += at.occupancy * n
        tot_n += n
        for k, v in [("p50", at.tpot_p50_ms)] + [(f"p{p:g}", x) for p, x in at.tpot_ms.items()]:
            tpot[k] = max(tpot.get(k, 0.0), v)
    return (tot_b / tot_n if tot_n else 0.0), tpot


def binding(inst: Instance, ctx: Context, scenarios: list[ScenarioResult], fleet: list[RegionFleet]) -> list[str]:
    """Plain-words binding constraints, from the independent evaluation: the scenario that
    sizes each pool (highest load over what its SLOs allow) and the pods at their limit."""
    out = []
    for f in fleet:
        inv = inst.regions[f.region].pods.get(f.chip)
        can = (inv.installed + inv.available_new) if inv else 0
        smallest = min(inst.chips[f.chip].slice_shapes)
        if f.pods_total >= can and f.chips_in_slices + f.chips_in_warm_pool > f.chips_in_pods - smallest:
            out.append(f"pods[{f.region},{f.chip}] at the inventory limit: {can} pods, {f.chips_in_slices + f.chips_in_warm_pool:,} "
                       f"of {f.chips_in_pods:,} chips used (c_fleet_pod_chips)")
    best = sizing_records(scenarios)
    head = inst.serving.utilisation_headroom
    what = {"prefill": "of the work its TTFT budget allows", "decode": "of its tokens/s at the operating point",
            "replica": "of the load its SLOs allow" + (f" (sized to run at most {pct_text(head)} of it: the utilisation headroom)" if head < 1.0 else "")}
    for (r, t, ro), (sn, p) in sorted(best.items()):
        under = f" under physics source '{p.source}'" if p.source else ""
        out.append(f"{ro}[{r},{t}] sized by {sn}{under}: load at {pct_text(p.pressure)} {what[ro]}")
    return out


def sizing_records(scenarios: list[ScenarioResult]) -> dict[tuple[str, str, str], tuple[str, PoolLoad]]:
    """(region, tier, role) -> (the scenario that sizes the pool, its record there): the
    highest pressure (load over what its SLOs allow), the first of a tie."""
    best: dict[tuple, tuple[str, PoolLoad]] = {}
    for sc in scenarios:
        for p in sc.pools:
            if p.pressure is None:
                continue
            key = (p.region, p.tier, p.role)
            # two scenarios within 1e-5 of each other are a tie, kept by scenario order: the
            # plan's routing shares are stored to 6 significant digits, so a rebuild from the
            # plan file must not flip a tie the solve saw (shares move pressures by ~1e-6; the Gemini plan
            # has two failovers at 99.73%)
            if key not in best or p.pressure > best[key][1].pressure * (1 + 1e-5) + 1e-12:
                best[key] = (sc.name, p)
    return best


def rate_text(x: float) -> str:
    """A rate (requests/s) with the digits that matter: whole numbers from 100 up, 4 significant digits below."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.4g}"


def pct_text(x: float) -> str:
    """A fraction as a percentage with the precision that matters near the limit: 1
    decimal, 2 from 99% and 3 from 99.9%, and as many more (up to 9) as it takes for a
    value under 100% never to read 100% (0.9999996 -> 99.99996%), nor one over it;
    thousands separated (252.921 -> 25,292.1%)."""
    nd = 3 if 0.999 <= x < 1.0 else 2 if 0.99 <= x < 1.0 else 1
    text = f"{x:,.{nd}%}"
    while 0.99 < x < 1.01 and x != 1.0 and nd < 9 and (float(text[:-1]) >= 100 if x < 1.0 else float(text[:-1]) <= 100):
        nd += 1
        text = f"{x:.{nd}%}"
    return text


def fleet_rows(inst: Instance, ctx: Context, pools: list[Pool], warm: list[WarmPoolSlices],
               pods_used: dict[tuple[str, str], int] | None = None) -> list[RegionFleet]:
    """Pods per region and chip: the installed ones plus the fewest new pods that hold the
    slices and warm pool (pods only bound chips) -- or, for a plan sized with its pods, that
    hold the ``pods_used`` ((region, chip) -> pods its slices occupy, ``Plan.pods``)."""
    out = []
    for r in sorted(inst.regions):
        for k in sorted(inst.chips):
            inv = inst.regions[r].pods.get(k)
            installed = inv.installed if inv else 0
            in_slices = sum(p.chips for p in pools if p.region == r and p.chip == k)
            in_warm = sum(w.chips for w in warm if w.region == r and ctx.slice(w.slice).chip == k)
            if installed + in_slices + in_warm == 0:
                continue
            pod_chips = inst.chips[k].chips_per_pod
            new = max(0, max(math.ceil((in_slices + in_warm) / pod_chips), (pods_used or {}).get((r, k), 0)) - installed)
            cost = sum(p.cost_per_hour_usd for p in pools if p.region == r and p.chip == k) + \
                sum(w.cost_per_hour_usd for w in warm if w.region == r and ctx.slice(w.slice).chip == k) + \
                new * inst.chips[k].new_pod_cost_per_hour_usd
            out.append(RegionFleet(region=r, chip=k, pods_installed=installed, pods_new=new, pods_total=installed + new,
                                   chips_in_pods=(installed + new) * pod_chips, chips_in_slices=in_slices,
                                   chips_in_warm_pool=in_warm, cost_per_hour_usd=r6(cost)))
    return out


def per_1m_withheld(scenarios: list[ScenarioResult] | None) -> str | None:
    """Why the $ per 1M tokens figures must not be given, or None: the normal scenario
    (every region at its peak) leaves requests unserved end to end or has a pool over
    100% load -- a cost over tokens the fleet does not serve would be understated."""
    normal = next((sc for sc in scenarios or [] if sc.kind == "normal"), None)
    if normal is None:
        return None
    over = [p for p in normal.pools if over_capacity(p.pressure) or (p.slices == 0 and p.arrivals_rps > 0)]
    if normal.unserved_rps <= 0 and not over:
        return None
    first = {p.role for p in normal.pools} & {"prefill", "replica"}
    demand = sum(p.arrivals_rps - p.shed_rps for p in normal.pools if p.role in first)
    where = ", ".join(f"{p.role}[{p.region},{p.tier}] " + (f"at {pct_text(p.pressure)} load" if p.pressure is not None else "without slices")
                      for p in over[:6]) + (f" and {len(over) - 6} more" if len(over) > 6 else "")
    return (f"in normal operation the fleet does not serve {rate_text(normal.unserved_rps)} of the {rate_text(demand)} requests/s at the regions' peaks"
            + (f" ({where})" if where else "") + ": a cost per 1M tokens over tokens it does not serve would be understated")


def cost_summary(inst: Instance, ctx: Context, pools: list[Pool], warm: list[WarmPoolSlices], fleet: list[RegionFleet],
                 scenarios: list[ScenarioResult] | None = None) -> CostSummary:
    """Fleet cost and $ per 1M tokens, split by role; batch infill of the trough. With the
    plan's ``scenarios``, the $ per 1M figures are None (and ``per_1m_withheld`` says why)
    when the normal scenario does not serve all the demand (:func:`per_1m_withheld`)."""
    pre = sum(p.cost_per_hour_usd for p in pools if p.role == "prefill")
    dec = sum(p.cost_per_hour_usd for p in pools if p.role == "decode")
    rep = sum(p.cost_per_hour_usd for p in pools if p.role == "replica")
    wc = sum(w.cost_per_hour_usd for w in warm)
    pods = sum(f.pods_new * inst.chips[f.chip].new_pod_cost_per_hour_usd for f in fleet)
    total = pre + dec + rep + wc + pods
    chips = sum(p.chips for p in pools) + sum(w.chips for w in warm)
    o = inst.workload.output_tokens
    mean_in = sum(b.share * b.tokens for b in inst.workload.input_mix)
    peak_rps = sum(r.peak_rps for r in inst.regions.values())
    mean_rps = sum(r.peak_rps * sum(r.hourly_load) / 24 for r in inst.regions.values())
    out_mean, in_mean = mean_rps * o, mean_rps * mean_in
    rep_prefill = 0.0
    for p in pools:
        if p.role == "replica":
            lam = inst.sized_peak_rps(p.region) * ctx.tiers[p.tier].tier_share
            same = [q for q in pools if (q.region, q.tier, q.role) == (p.region, p.tier, "replica")]
            if len(same) > 1:  # a mixed pool: this shape's share of the load (serving.mixed_shapes)
                th = [ctx.replica_max_scale(q.tier, q.slice, q.slices, lam, 0.0, False, hi=None, schedule=q.schedule) for q in same]
                lam *= th[same.index(p)] / sum(th) if sum(th) > 0 else 1.0 / len(same)
            ev = ctx.replica(p.tier, p.slice, p.slices, lam, 0.0, False, p.schedule)
            # the prefill share of a replica's busy time, a fraction: past 100% load the evaluator's
            # ratio exceeds 1, and the decode side went negative
            u = min(max(ev.prefill_share, 0.0), 1.0) if math.isfinite(ev.prefill_share) else 0.0
            rep_prefill += p.cost_per_hour_usd * u
    pre_side, dec_side = pre + rep_prefill, dec + (rep - rep_prefill)
    side_total = max(pre_side + dec_side, 1e-12)
    shared = wc + pods
    pre_side += shared * pre_side / side_total
    dec_side += shared * dec_side / side_total
    infill = batch_infill_tokens_per_day(inst, ctx, pools)

    withheld = per_1m_withheld(scenarios)

    def per_m(cost_h, tok_s):
        if withheld:
            return None
        return r6(cost_h / (tok_s * 3600) * 1e6) if tok_s > 0 else 0.0

    return CostSummary(
        fleet_cost_per_hour_usd=r6(total), chips=chips, prefill_cost_per_hour_usd=r6(pre), decode_cost_per_hour_usd=r6(dec),
        replica_cost_per_hour_usd=r6(rep), warm_pool_cost_per_hour_usd=r6(wc), pods_cost_per_hour_usd=r6(pods),
        peak_output_tokens_per_s=r6(peak_rps * o), mean_output_tokens_per_s=r6(out_mean), mean_input_tokens_per_s=r6(in_mean),
        cost_per_1m_output_tokens_usd=per_m(total, out_mean), cost_per_1m_output_tokens_at_peak_usd=per_m(total, peak_rps * o),
        cost_per_1m_input_tokens_usd=per_m(pre_side, in_mean), cost_per_1m_output_tokens_decode_usd=per_m(dec_side, out_mean),
        cost_per_1m_tokens_blended_usd=per_m(total, in_mean + out_mean), batch_infill_output_tokens_per_day=r6(infill),
        cost_per_1m_output_tokens_with_infill_usd=None if withheld else (r6(total * 24 / (out_mean * 86400 + infill) * 1e6) if out_mean > 0 else 0.0),
        per_1m_withheld=withheld,
    )


def batch_infill_tokens_per_day(inst: Instance, ctx: Context, pools: list[Pool]) -> float:
    """Output tokens/day the idle capacity could serve to the batch class, hour by hour and
    region by region: batch requests (same length mix) fill the smaller of the prefill work
    the TTFT budget still allows and the decode tokens/s left, per tier (replicas: their
    spare requests/s within the SLOs)."""
    o = inst.workload.output_tokens
    total = 0.0
    for r, reg in inst.regions.items():
        for t, tm in ctx.tiers.items():
            check("extracting the plan (the batch infill of the trough)")
            pp = [p for p in pools if p.region == r and p.tier == t]
            peak = inst.sized_peak_rps(r) * tm.tier_share  # the demand margin is held in reserve, not sold as infill
            if any(p.role == "prefill" for p in pp):
                pre = [p for p in pp if p.role == "prefill"]
                dec_cap = sum(p.slices * p.decode_normal.tokens_per_s_per_slice for p in pp if p.role == "decode" and p.decode_normal)
                if not pre or dec_cap <= 0:
                    continue
                p0 = pre[0]
                n = sum(p.slices for p in pre)
                cap_work = _prefill_capacity_erlangs(ctx, t, p0.slice, n, peak, 0.0, False)
                es = ctx.prefill(t, p0.slice, n, peak, 0.0, False).mean_service_ms / 1e3
                for h in range(24):
                    lam = peak * reg.hourly_load[h]
                    spare = min(max(dec_cap - lam * o, 0.0) / o, max(cap_work - lam * es, 0.0) / es)
                    total += spare * o * 3600
            else:
                rep = [p for p in pp if p.role == "replica"]
                if not rep:
                    continue
                n = sum(p.slices for p in rep)
                lo, hi = peak, peak * 10 + 1.0
                if len(rep) > 1:  # a mixed pool: the sum of its shapes' capacities (serving.mixed_shapes)
                    cap = peak * sum(ctx.replica_max_scale(t, p.slice, p.slices, peak, 0.0, False, hi=None, schedule=p.schedule) for p in rep)
                    cap = cap * inst.serving.utilisation_headroom if cap >= peak else peak
                # the most requests/s these replicas carry within the SLOs (bisection on the load)
                elif not ctx.replica_meets_slo(t, rep[0].slice, n, lo, 0.0, False, rep[0].schedule):
                    cap = peak
                else:
                    for _ in range(40):
                        mid = 0.5 * (lo + hi)
                        if ctx.replica_meets_slo(t, rep[0].slice, n, mid, 0.0, False, rep[0].schedule):
                            lo = mid
                        else:
                            hi = mid
                    cap = lo * inst.serving.utilisation_headroom
                for h in range(24):
                    total += max(cap - peak * reg.hourly_load[h], 0.0) * o * 3600
    return total


def physics_record(inst: Instance, scenarios) -> "PlanPhysics | None":
    """The plan's ``physics`` record (:class:`fleetplan.results.plan.PlanPhysics`): the hold,
    every source (held or not, its priors' hash and reference step), and per pool the held
    source it is bound by -- the source of its record in its sizing scenario
    (:func:`sizing_records`), else the only held one. None for an
    instance without a physics block."""
    from fleetplan.instance.physics import held_sources, priors_hash, reference_time_ms, sources
    from fleetplan.results.plan import PlanPhysics, PoolSource, SourceRecord

    if inst.physics is None:
        return None
    recs = [SourceRecord(name=s.name, held=s.held, description=s.description, origin=s.origin, priors_hash=priors_hash(s.priors),
                         reference_step_ms=r6(reference_time_ms(inst, s.priors))) for s in sources(inst)]
    only = held_sources(inst)[0].name
    sized = sizing_records(scenarios)
    normal = next((sc for sc in scenarios if sc.kind == "normal"), None)
    keys = sorted({(p.region, p.tier, p.role) for sc in scenarios for p in sc.pools})
    binding = []
    for key in keys:
        sn, rec = sized.get(key, ("normal", next((p for p in (normal.pools if normal else []) if (p.region, p.tier, p.role) == key), None)))
        binding.append(PoolSource(region=key[0], tier=key[1], role=key[2], scenario=sn, source=(rec.source if rec is not None else None) or only))
    return PlanPhysics(hold=inst.physics.hold, sources=recs, binding=binding)
