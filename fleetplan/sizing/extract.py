"""Turn a solved sizing model into a :class:`Plan`: round the integers (3.9999996 is 4),
read the continuous decisions, and fill every prediction with the independent evaluator
(:mod:`fleetplan.results.evaluate` via :mod:`fleetplan.results.loads`), not with the
model's linearised view."""

from __future__ import annotations

from typing import NamedTuple

import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan import __version__
from fleetplan.deadline import phase
from fleetplan.instance.derived import FAILOVER, NORMAL, ModelData, normal_peak_slices
from fleetplan.instance.modes import COLOCATED, DISAGGREGATED, ROLES_OF
from fleetplan.instance.io import instance_document, instance_hash
from fleetplan.models.sizing.constraints.replica import chosen_schedule
from fleetplan.results.evaluate import Context
from fleetplan.results.margins import pool_margins
from fleetplan.results.loads import physics_record
from fleetplan.results.loads import (Decisions, as_recorded, binding, cost_summary, fleet_rows, make_pool, pod_dcn_records, r6,
                                    scenario_results, slice_price)
from fleetplan.results.loads import rate_text as _rate
from fleetplan.results.plan import PodContent, Plan, PoolLoad, Route, ScenarioResult, ServingModeChoice, SolverInfo, WarmPoolSlices, recorded_router
from fleetplan.solvers.base import SolveResult

__all__ = ["extract_plan", "r6", "margin_note", "loss_prefill_out_of_reach", "chosen_modes", "mode_estimates", "mode_choices", "pod_contents", "sized_for"]


def _iv(v) -> int:
    val = pyo.value(v, exception=False)
    return int(round(val)) if val is not None else 0


def _fv(v) -> float:
    val = pyo.value(v, exception=False)
    return float(val) if val is not None else 0.0


def _nn(v) -> float:
    """The value of a variable bounded below by 0, with the solver's feasibility noise below
    the bound (HiGHS returns e.g. -2.3e-8 within its 1e-7 tolerance) snapped to 0: a plan
    recording a shortfall of -2.29e-08 req/s was refused by every reader as edited."""
    return max(_fv(v), 0.0)


def _op_pair(d: ModelData, t: str, c: str, regime: str) -> tuple[int, int] | None:
    o = d.decode[(t, c, regime)].op
    return (o.batch, o.draft_tokens) if o is not None else None


def extract_plan(d: ModelData, m: pyo.ConcreteModel, res: SolveResult, options: dict, iterations: int, predict: bool = True) -> Plan:
    """Build the Plan from the model's loaded solution (violations empty; see verify).

    ``predict=False``: the scenarios hold the loads and decisions only, without the latency
    and capacity predictions (:func:`fleetplan.results.loads.scenario_results`): enough for
    :func:`fleetplan.results.verify.verify` and a purchase quarter's check; not a plan to write.
    Raises :class:`~fleetplan.deadline.TimeLimitReached` ('extracting the plan ...') once a
    deadline scope's deadline has passed."""
    with phase("extracting the plan (each scenario's loads and predictions)"):  # names a deadline passed inside the physics (fleetplan.deadline)
        return _extract_plan(d, m, res, options, iterations, predict)


def _extract_plan(d: ModelData, m: pyo.ConcreteModel, res: SolveResult, options: dict, iterations: int, predict: bool) -> Plan:
    inst = d.inst
    ctx = Context(inst)
    slices = {k: _iv(m.v_slices[k]) for k in m.v_slices}
    modes = chosen_modes(d, m)
    pools = []
    for (r, t, ro, c), n in slices.items():
        if n <= 0:
            continue
        dec = ro == "decode"
        sch = chosen_schedule(m, d, r, t, c) if ro == "replica" else None  # the pool's own (region x tier x shape)
        pools.append(make_pool(inst, ctx, r, t, ro, c, n, _op_pair(d, t, c, NORMAL) if dec else None,
                               _op_pair(d, t, c, FAILOVER) if dec else None, sch))
    pools.sort(key=lambda p: (p.region, p.tier, p.role, p.slice))
    warm = [WarmPoolSlices(region=r, slice=c, slices=n, chips=n * d.slices[c].chips, cost_per_hour_usd=r6(n * slice_price(inst, r, c, ctx)))
            for (r, c) in m.v_warm for n in [_iv(m.v_warm[r, c])] if n > 0]
    pods = pod_contents(d, m) if d.pods is not None else None
    used = {}
    for pc in pods or []:
        used[(pc.region, pc.chip)] = used.get((pc.region, pc.chip), 0) + 1
    fleet = fleet_rows(inst, ctx, pools, warm, used)
    routing = {(x, a, t): r6(_fv(m.e_route_share[x, a, t])) for (x, a, t) in m.ROUTES}
    decisions = {}
    for (r, t, sn) in m.ACTIVE:
        dc = Decisions()
        if (r, t, "own", sn) in m.SHED:
            dc.shed_own = _nn(m.v_shed_rps[r, t, "own", sn])
        if (r, t, "div", sn) in m.SHED:
            dc.shed_div = _nn(m.v_shed_rps[r, t, "div", sn])
        for ro in d.ROLES:
            used = {c: _iv(m.v_warm_use[r, t, ro, c, sn]) for c in d.CONFIGS if (r, t, ro, c, sn) in m.WARM_USE}
            dc.warm[ro] = sum(used.values())
            if dc.warm[ro]:
                dc.warm_shape[ro] = max(used, key=lambda c: (used[c], c))
        if d.disaggregated and modes[(r, t)] == DISAGGREGATED:
            dc.short["prefill"] = sum(_nn(m.v_short_prefill[r, t, q, sn]) for q in ("own", "div") if (r, t, q, sn) in m.SOURCES)
            dc.short["decode"] = _nn(m.v_short_decode[r, t, sn])
        if d.colocated and modes[(r, t)] == COLOCATED:
            dc.short["replica"] = _nn(m.v_short_replica[r, t, sn])
        decisions[(sn, r, t)] = as_recorded(dc)  # what a reader rebuilds from the file (so the plan reads back the same)
    scenarios = scenario_results(inst, ctx, d.SCENARIOS, pools, routing, decisions, modes, predict=predict, pods=pods)
    dcn = None
    if pods is not None:
        pods, dcn = pod_dcn_records(inst, ctx, pods, pools, scenarios, sized_for(d, m))
    cost = cost_summary(inst, ctx, pools, warm, fleet, scenarios)
    physics = physics_record(inst, scenarios) if predict else None
    margins = pool_margins(inst, pools, scenarios) if (physics is not None and predict) else None
    solver = SolverInfo(solver=res.solver, termination=res.termination, objective=r6(res.objective), bound=r6(res.bound),
                        gap=r6(res.gap), iterations=iterations, pod_stage_termination=res.stage_termination,
                        pod_stage_gap=r6(res.stage_gap) if res.stage_termination is not None else None, **_model_size(m))
    return Plan(fleetplan_version=__version__, instance_name=inst.name, instance_hash=instance_hash(inst), instance=instance_document(inst),
                options=options,
                status="verified", fleet=fleet, pools=pools, warm_pool=warm,
                routing=[Route(lost=x, to=a, tier=t, share=v) for (x, a, t), v in routing.items()],
                scenarios=scenarios, cost=cost, solver=solver, binding=binding(inst, ctx, scenarios, fleet),
                diagnostics=_certain(d) + _diagnostics(d, scenarios, fleet) + [n for n in d.notes if n not in _certain(d)],
                violations=[], serving_modes=mode_choices(d, modes, pools) if d.auto else None, pods=pods, dcn=dcn,
                physics=physics, margins=margins, router=recorded_router(inst.serving.router))


def pod_contents(d: ModelData, m) -> list[PodContent]:
    """Every pod of the loaded solution and its slices: each pod group's arc flow
    (:mod:`fleetplan.models.sizing.constraints.pods`) decomposed into paths -- from the first
    layer's node 0, the largest block with flow left at each layer -- and each kit block given
    a kit of its size. Pods are numbered per region and chip, fullest first (then by content),
    so the same solution always gives the same numbering. Egress is filled in later
    (:func:`fleetplan.results.loads.pod_dcn_records`)."""
    out = []
    for gi, g in enumerate(d.pods.groups):
        rem = {(li, u, b): _iv(m.v_pod_flow[gi, li, u, b]) for (gg, li, u, b) in m.POD_ARCS if gg == gi}
        kits = {(li, ki): _iv(m.v_pod_kits[gi, li, ki]) for (gg, li, ki) in m.POD_KITS if gg == gi}
        made = []
        out_of: dict[tuple[int, int], list[int]] = {}
        for (li, u, b) in rem:
            out_of.setdefault((li, u), []).append(b)
        for _ in range(_iv(m.v_pods_placed[gi])):
            u, li, content = 0, 0, {}
            while li < len(g.layers):
                layer = g.layers[li]
                b = max((bb for bb in out_of.get((li, u), []) if rem[(li, u, bb)] > 0), default=None)
                if b is None:
                    raise RuntimeError(f"pods of {g.name}: the arc flow does not decompose at layer {li}, node {u} (a bug)")
                rem[(li, u, b)] -= 1
                here = li
                li, u = g.arc_head(li, u, b)
                if b == 0:
                    continue
                if layer.kind == "kit":
                    ki = next(k for k, kt in enumerate(layer.kits) if kt.chips == b and kits.get((here, k), 0) > 0)
                    kits[(here, ki)] -= 1
                    kt = layer.kits[ki]
                    for role, shape, n in (("prefill", kt.prefill, kt.P), ("decode", kt.decode, kt.D)):
                        if n:
                            key = f"{kt.tier}/{role}/{shape}"
                            content[key] = content.get(key, 0) + n
                else:
                    key = f"warm/{layer.shape}" if layer.kind == "warm" else f"{layer.tier}/{layer.kind}/{layer.shape}"
                    content[key] = content.get(key, 0) + b // layer.slice_chips
            if content:
                made.append((u, dict(sorted(content.items()))))
        made.sort(key=lambda x: (-x[0], sorted(x[1].items())))
        out += [PodContent(region=g.region, chip=g.chip, pod=i, slices=c, chips_used=u, dcn_egress_gbytes_per_s=0.0)
                for i, (u, c) in enumerate(made)]
    return out


def sized_for(d: ModelData, m) -> dict[tuple[str, str], float]:
    """(region, tier) -> the DCN share its TTFT composition was sized for: the level the
    solution picked (``v_dcn_level``), or the tier's only level."""
    out = {}
    for (r, t) in d.pods.tiers:
        levels = d.pods.levels.get(t, [0.0])
        picked = [li for li in range(len(levels)) if (r, t, li) in getattr(m, "DCN_LEVELS", ()) and _iv(m.v_dcn_level[r, t, li]) == 1]
        out[(r, t)] = levels[picked[0]] if picked else levels[0]  # the overage level's share is 1: every request may cross
    return out


def chosen_modes(d: ModelData, m) -> dict[tuple[str, str], str]:
    """(region, tier) -> the serving mode of the loaded solution: the instance's when it is
    fixed, else ``v_mode_disagg`` (mode.py)."""
    if not d.auto:
        return {(r, t): d.MODES[0] for r in d.REGIONS for t in d.TIERS}
    return {(r, t): DISAGGREGATED if _iv(m.v_mode_disagg[r, t]) == 1 else COLOCATED for r in d.REGIONS for t in d.TIERS}


def mode_estimates(d: ModelData, r: str, t: str) -> dict[str, float | None]:
    """Per mode, the cost (USD/h) of the fewest slices of the cheapest shape of each of the
    mode's roles that carry (r, t)'s own normal peak (:func:`normal_peak_slices`, from the
    candidate tables): no failover, warm pool or pod rounding. None when no shape of a
    role can serve the tier."""
    out: dict[str, float | None] = {}
    lam = d.own_rps(d.SCENARIOS[0], r, t)
    for mode in (DISAGGREGATED, COLOCATED):
        if mode not in d.MODES:
            continue
        tot: float | None = 0.0
        for ro in ROLES_OF[mode]:
            opts = [normal_peak_slices(d, lam, t, ro, c, r) * d.p_price_per_slice_hour_usd[(r, c)] for c in d.CONFIGS
                    if d.p_max_slices.get((r, t, ro, c), 0) > 0]
            tot = None if (tot is None or not opts) else tot + min(opts)
        out[mode] = r6(tot) if tot is not None else None
    return out


def mode_choices(d: ModelData, modes: dict[tuple[str, str], str], pools) -> list[ServingModeChoice]:
    """The plan's record of each region x tier's serving mode with its cost and why
    (auto mode): the slices it runs in the plan, and both modes' normal-peak estimates
    from the candidate tables (:func:`mode_estimates`)."""
    out = []
    for r in d.REGIONS:
        for t in d.TIERS:
            mode = modes[(r, t)]
            other = COLOCATED if mode == DISAGGREGATED else DISAGGREGATED
            cost = sum(p.cost_per_hour_usd for p in pools if p.region == r and p.tier == t)
            est = mode_estimates(d, r, t)
            if est.get(other) is None:
                why = f"no slice shape can serve tier {t} {other}"
            elif est.get(mode) is None:
                why = f"no slice shape can serve tier {t} {mode} either; the plan reports its shortfall"
            elif est.get(mode) is not None and est[mode] < est[other] - 1e-9:
                why = (f"cheaper at the normal peak: {mode} ${est[mode]:,.2f}/h vs {other} ${est[other]:,.2f}/h "
                       f"(fewest slices of the cheapest shapes, candidate tables)")
            elif est.get(mode) is not None and est[mode] > est[other] + 1e-9:
                why = (f"cheaper for the whole plan (failover, pods shared with the other tiers), although {other} is cheaper "
                       f"at the normal peak alone: ${est[other]:,.2f}/h vs ${est[mode]:,.2f}/h")
            else:
                why = f"as cheap as {other} at the normal peak (${est[mode]:,.2f}/h); the whole plan's cost decided"
            out.append(ServingModeChoice(region=r, tier=t, mode=mode, cost_per_hour_usd=r6(cost), estimate_per_hour_usd=est, reason=why))
    return out


def _model_size(m) -> dict:
    nv = ni = 0
    for v in m.component_data_objects(pyo.Var, active=True):
        nv += 1
        if v.is_integer() or v.is_binary():
            ni += 1
    nc = sum(1 for _ in m.component_data_objects(pyo.Constraint, active=True))
    return {"variables": nv, "integer_variables": ni, "constraints": nc}


def margin_note(inst) -> str:
    """What the plan holds for forecast error: the demand margin per region, or that there is none."""
    margins = {r: inst.demand_margin_of(r) for r in sorted(inst.regions)}
    if not any(margins.values()):
        return ("demand margin: none (workload.demand_margin 0, the default) -- every pool is sized to the forecast peak_rps exactly, "
                "so a forecast error larger than the load growth a pool absorbs (scenarios[].pools[].growth_absorbed) breaks an SLO")
    if len(set(margins.values())) == 1:
        m = next(iter(margins.values()))
        return f"demand margin: every region is sized and verified for {1 + m:.0%} of its forecast peak_rps (a forecast-error margin of {m:.0%})"
    return ("demand margin: regions are sized and verified for " + ", ".join(f"{r} {1 + m:.0%}" for r, m in margins.items())
            + " of their forecast peak_rps (forecast-error margins)")


def _certain(d: ModelData) -> list[str]:
    """The tables' 'SHORTFALL CERTAIN' notes (a region's own demand beyond its pods): the plan's first diagnostics."""
    return [n for n in d.notes if n.startswith("SHORTFALL CERTAIN")]


def _diagnostics(d: ModelData, scenarios: list[ScenarioResult], fleet) -> list[str]:
    out = [margin_note(d.inst)]
    out += [reason for _, reason in sorted(d.excluded.items())]  # shapes that cannot hold a tier's longest request
    for t in d.TIERS:
        for c in d.CONFIGS:
            cand = d.prefill.get((t, c, (NORMAL,)))
            if cand is not None and cand.budget_ms < 0:
                pct = cand.percentile
                s, cached = cand.profile.pct_tokens[pct]
                out.append(
                    f"the '{t}' tier's p{pct:g} prompt ({s:,.0f} tokens, {cached:,.0f} cached) takes {cand.profile.pct_ms[pct]:,.0f} ms "
                    f"to prefill on {c}; with the path latency that is over its {cand.ttft_limit_ms:g} ms TTFT p{pct:g}, so {c} is not "
                    f"used for this tier's prefill (a larger slice, context-parallel prefill or a stratified SLO would be needed)")
    full = {(f.region, f.chip) for f in fleet if f.pods_total >= d.p_installed_pods[(f.region, f.chip)] + d.p_available_pods[(f.region, f.chip)]}
    for s in scenarios:
        if s.unserved_rps > 1e-6:
            first = [p for p in s.pools if p.role in ("prefill", "replica")]
            demand = sum(p.arrivals_rps - p.shed_rps for p in first)
            out.append(f"in {s.name} {_rate(s.unserved_rps)} of {_rate(demand)} requests/s are not served end to end "
                       f"({s.unserved_rps / demand:.1%}; a request needs both its prefill and its decode)" if demand > 0 else
                       f"in {s.name} {_rate(s.unserved_rps)} requests/s are not served end to end")
        for p in s.pools:
            if p.shortfall > 1e-6:
                amount = f"{p.shortfall:,.0f}" if p.shortfall >= 100 else f"{p.shortfall:.3g}"
                head = d.inst.serving.utilisation_headroom
                within = (f"within the SLOs at the {head:.0%} utilisation headroom (replicas run at most that share of their SLO-limited rate)"
                          if p.role == "replica" and head < 1.0 else "within the SLOs")
                out.append(f"shortfall in {s.name}: {p.role}[{p.region},{p.tier}] cannot serve {amount} {p.shortfall_unit} "
                           f"{within}" + _fix_hint(d, p, full, s))
    return out


class OutOfReach(NamedTuple):
    """The fastest prefill shape's figures for a prompt no shape prefills within its TTFT."""

    shape: str
    prefill_ms: float
    percentile: float
    prompt_tokens: float
    cached_tokens: float
    ttft_limit_ms: float


def loss_prefill_out_of_reach(d: ModelData, t: str, lost: str, r: str) -> OutOfReach | None:
    """Whether no prefill slice shape meets tier ``t``'s TTFT in region ``r`` while ``lost``
    is down, at any pool size: every shape's candidate for the regime ``("loss", lost, r)``
    has an all-zero capacity curve (``PrefillCandidate.capacity_erlangs``: too many of the
    regime's prompts miss the TTFT with no queue at all; a loss's prompts are colder than
    normal hours' by the diverted share and the cache re-warm).

    Returns the fastest shape's :class:`OutOfReach` (ms, tokens) when none is in reach,
    else ``None`` (also for colocated instances, when the regime has no candidate, and when
    no shape meets the TTFT in normal hours either: then the loss is not the cause)."""
    cands = [g for (tt, c, reg), g in d.prefill.items() if tt == t and reg == ("loss", lost, r)]
    if not cands or any(g.capacity_erlangs[-1] > 0 for g in cands):
        return None
    if not any(g.capacity_erlangs[-1] > 0 for (tt, c, reg), g in d.prefill.items() if tt == t and reg == (NORMAL,)):
        return None  # out of reach in normal hours too: the loss is not the cause
    g = min(cands, key=lambda g: g.profile.pct_ms[g.percentile])
    tokens, cached = g.profile.pct_tokens[g.percentile]
    return OutOfReach(g.config, g.profile.pct_ms[g.percentile], g.percentile, tokens, cached, g.ttft_limit_ms)


def _fix_hint(d: ModelData, p: PoolLoad, full: set, s: ScenarioResult) -> str:
    def no_shape(role: str) -> bool:
        return all(d.p_max_slices[(p.region, p.tier, role, c)] == 0 for c in d.CONFIGS)

    reach = (loss_prefill_out_of_reach(d, p.tier, s.lost_region, p.region)
             if s.kind == "loss" and s.lost_region and p.role in ("prefill", "decode") else None)
    if reach is not None:
        normal = d.prefill.get((p.tier, reach.shape, (NORMAL,)))
        usual = f", against {normal.profile.pct_tokens[normal.percentile][1]:,.0f} in normal hours" if normal is not None else ""
        cause = (f"with {s.lost_region} lost, the '{p.tier}' tier's p{reach.percentile:g} prompt in {p.region} "
                 f"({reach.prompt_tokens:,.0f} tokens, {reach.cached_tokens:,.0f} cached{usual}) takes {reach.prefill_ms:,.0f} ms to "
                 f"prefill on {reach.shape}, the fastest shape; with the path latency and KV transfer that is over its {reach.ttft_limit_ms:g} ms "
                 f"TTFT p{reach.percentile:g}, so no prefill pool of any size meets it in this loss")
        if p.role == "prefill":
            steady = ("; or sizing failover for the steady state (failover.size_for: steady), leaving the re-warm transient unsized"
                      if d.inst.failover.size_for == "transient" else "")
            return (f" -- {cause}: a faster or larger slice shape or a TTFT SLO stratified by prompt length could close it{steady}; "
                    f"more slices or pods cannot")
        return (f" -- {cause}, and a request needs both its prefill and its decode: decode slices for these requests would "
                f"serve nobody")
    if no_shape(p.role):
        return (" -- no slice shape meets this tier's SLOs; allow a larger slice shape or relax the tier's SLO (slo_overrides)")
    other = {"prefill": "decode", "decode": "prefill"}.get(p.role)
    if other and no_shape(other):
        return (f" -- no slice shape can serve this tier's {other}, so no request of it can be served end to end and "
                f"{p.role} slices would serve nobody")
    limited = sorted(k for (r, k) in full if r == p.region)
    if limited:
        if s.kind == "loss":
            return (f" -- every pod of {', '.join(limited)} that {p.region} can have is in use: more inventory there, a larger warm "
                    f"pool or more regions to fail over to would close it")
        return f" -- every pod of {', '.join(limited)} that {p.region} can have is in use: more inventory there would close it"
    return " -- the other pools' needs take the inventory first (the plan leaves the least load unserved overall)"
