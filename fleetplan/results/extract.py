"""Turn a solved sizing model into a :class:`Plan`: round the integers (3.9999996 is 4),
read the continuous decisions, and fill every prediction with the independent evaluator
(:mod:`fleetplan.results.evaluate` via :mod:`fleetplan.results.loads`), not with the
model's linearised view."""

from __future__ import annotations

import math

import pyomo.environ as pyo

from fleetplan import __version__
from fleetplan.instance.derived import FAILOVER, NORMAL, ModelData
from fleetplan.instance.io import instance_hash
from fleetplan.results.evaluate import Context
from fleetplan.results.loads import Decisions, cost_summary, fleet_rows, make_pool, r6, scenario_results, slice_price
from fleetplan.results.plan import Plan, PoolLoad, Route, ScenarioResult, SolverInfo, WarmPoolSlices
from fleetplan.solvers.base import SolveResult

__all__ = ["extract_plan", "r6"]


def _iv(v) -> int:
    val = pyo.value(v, exception=False)
    return int(round(val)) if val is not None else 0


def _fv(v) -> float:
    val = pyo.value(v, exception=False)
    return float(val) if val is not None else 0.0


def _op_pair(d: ModelData, t: str, c: str, regime: str) -> tuple[int, int] | None:
    o = d.decode[(t, c, regime)].op
    return (o.batch, o.draft_tokens) if o is not None else None


def extract_plan(d: ModelData, m: pyo.ConcreteModel, res: SolveResult, options: dict, iterations: int) -> Plan:
    """Build the Plan from the model's loaded solution (violations empty; see verify)."""
    inst = d.inst
    ctx = Context(inst)
    slices = {k: _iv(m.v_slices[k]) for k in m.v_slices}
    pools = []
    for (r, t, ro, c), n in slices.items():
        if n <= 0:
            continue
        dec = ro == "decode"
        pools.append(make_pool(inst, ctx, r, t, ro, c, n, _op_pair(d, t, c, NORMAL) if dec else None,
                               _op_pair(d, t, c, FAILOVER) if dec else None))
    pools.sort(key=lambda p: (p.region, p.tier, p.role, p.slice))
    warm = [WarmPoolSlices(region=r, slice=c, slices=n, chips=n * d.slices[c].chips, cost_per_hour_usd=r6(n * slice_price(inst, r, c, ctx)))
            for (r, c) in m.v_warm for n in [_iv(m.v_warm[r, c])] if n > 0]
    fleet = fleet_rows(inst, ctx, pools, warm)
    routing = {(x, a, t): r6(_fv(m.e_route_share[x, a, t])) for (x, a, t) in m.ROUTES}
    decisions = {}
    S = {s.name: s for s in d.SCENARIOS}
    for (r, t, sn) in m.ACTIVE:
        dc = Decisions()
        if (r, t, "own", sn) in m.SHED:
            dc.shed_own = _fv(m.v_shed_rps[r, t, "own", sn])
        if (r, t, "div", sn) in m.SHED:
            dc.shed_div = _fv(m.v_shed_rps[r, t, "div", sn])
        for ro in d.ROLES:
            dc.warm[ro] = sum(_iv(m.v_warm_use[r, t, ro, c, sn]) for c in d.CONFIGS if (r, t, ro, c, sn) in m.WARM_USE)
        if d.disaggregated:
            dc.short["prefill"] = sum(_fv(m.v_short_prefill[r, t, q, sn]) for q in ("own", "div") if (r, t, q, sn) in m.SOURCES)
            dc.short["decode"] = _fv(m.v_short_decode[r, t, sn])
        else:
            dc.short["replica"] = _fv(m.v_short_replica[r, t, sn])
        decisions[(sn, r, t)] = dc
    scenarios = scenario_results(inst, ctx, d.SCENARIOS, pools, routing, decisions)
    cost = cost_summary(inst, ctx, pools, warm, fleet)
    solver = SolverInfo(solver=res.solver, termination=res.termination, objective=r6(res.objective), bound=r6(res.bound),
                        gap=r6(res.gap), iterations=iterations, **_model_size(m))
    return Plan(fleetplan_version=__version__, instance_name=inst.name, instance_hash=instance_hash(inst), options=options,
                status="verified", fleet=fleet, pools=pools, warm_pool=warm,
                routing=[Route(lost=x, to=a, tier=t, share=v) for (x, a, t), v in routing.items()],
                scenarios=scenarios, cost=cost, solver=solver, binding=_binding(d, m, S), diagnostics=_diagnostics(d, scenarios) + list(d.notes),
                violations=[])


def _model_size(m) -> dict:
    nv = ni = 0
    for v in m.component_data_objects(pyo.Var, active=True):
        nv += 1
        if v.is_integer() or v.is_binary():
            ni += 1
    nc = sum(1 for _ in m.component_data_objects(pyo.Constraint, active=True))
    return {"variables": nv, "integer_variables": ni, "constraints": nc}


def _binding(d: ModelData, m, S) -> list[str]:
    """Which scenario sizes each pool, and which inventory limits bind."""
    out = []
    for r in d.REGIONS:
        for k in d.CHIPS:
            pods = d.p_installed_pods[(r, k)] + d.p_available_pods[(r, k)]
            used = sum(d.slices[c].chips * (_iv(m.v_slices[r, t, ro, c])) for (rr, t, ro, c) in m.POOLS if rr == r and d.config_chip(c) == k)
            used += sum(d.slices[c].chips * _iv(m.v_warm[r, c]) for c in d.CONFIGS if d.config_chip(c) == k)
            if pods and used > pods * d.p_pod_chips[k] - min(d.slices[c].chips for c in d.CONFIGS if d.config_chip(c) == k):
                out.append(f"c_fleet_pod_chips[{r},{k}] binding: {used} chips fill the {pods} pods that can be had")
    if hasattr(m, "c_decode_capacity"):
        for (r, t) in sorted({(r, t) for (r, t, sn) in m.ACTIVE}):
            best = None
            for (rr, tt, sn) in m.ACTIVE:
                if (rr, tt) != (r, t):
                    continue
                g = d.decode_regime(S[sn])
                cap = sum(d.decode[(t, c, g)].tokens_per_s * (_iv(m.v_slices[r, t, "decode", c]) + (
                    _iv(m.v_warm_use[r, t, "decode", c, sn]) if (r, t, "decode", c, sn) in m.WARM_USE else 0)) for c in d.CONFIGS)
                demand = d.p_output_tokens * _fv(m.e_admitted_rps[r, t, sn])
                if demand > 0 and cap > 0 and (best is None or demand / cap > best[0]):
                    best = (demand / cap, sn)
            if best:
                out.append(f"c_decode_capacity[{r},{t},{best[1]}]: decode[{r},{t}] sized by scenario {best[1]} ({best[0]:.1%} of its capacity)")
    if hasattr(m, "PREFILL_KEYS"):
        from fleetplan.models.sizing.constraints.prefill import curve, pool_slices_expr

        for (r, t) in sorted({(k[0], k[1]) for k in m.PREFILL_KEYS}):
            best = None
            for key in m.PREFILL_KEYS:
                if (key[0], key[1]) != (r, t):
                    continue
                w = _fv(m.e_prefill_work[key])
                if w <= 0:
                    continue
                n = int(round(_fv(pool_slices_expr(m, *key))))
                A = curve(d, key)
                cap = float(A[min(n, len(A) - 1)])
                util = w / cap if cap > 0 else math.inf
                if best is None or util > best[0]:
                    best = (util, key)
            if best:
                out.append(f"c_prefill_ttft[{r},{t},{best[1][2]},{best[1][3]}]: prefill[{r},{t}] sized by scenario {best[1][3]} "
                           f"({best[0]:.1%} of the work its TTFT budget allows)")
    if hasattr(m, "c_replica_capacity"):
        for (r, t) in sorted({(r, t) for (r, t, sn) in m.ACTIVE}):
            best = None
            for (rr, tt, sn) in m.ACTIVE:
                if (rr, tt) != (r, t):
                    continue
                g = d.regime(S[sn], r)
                cap = sum(d.replica[(t, c, g)].rps_per_replica * _iv(m.v_slices[r, t, "replica", c]) for c in d.CONFIGS)
                lam = _fv(m.e_admitted_rps[r, t, sn])
                if lam > 0 and cap > 0 and (best is None or lam / cap > best[0]):
                    best = (lam / cap, sn)
            if best:
                out.append(f"c_replica_capacity[{r},{t},{best[1]}]: replicas[{r},{t}] sized by scenario {best[1]} ({best[0]:.1%} of their capacity)")
    return out


def _diagnostics(d: ModelData, scenarios: list[ScenarioResult]) -> list[str]:
    out = []
    for t in d.TIERS:
        for c in d.CONFIGS:
            cand = d.prefill.get((t, c, (NORMAL,)))
            if cand is not None and cand.budget_ms < 0:
                pct = cand.percentile
                s, cached = cand.profile.pct_tokens[pct]
                out.append(
                    f"prefill of tier '{t}''s p{pct:g} request ({s:,.0f} tokens, {cached:,.0f} cached) takes "
                    f"{cand.profile.pct_ms[pct]:,.0f} ms on {c}; with the path latency it is over the {cand.ttft_limit_ms:g} ms "
                    f"TTFT p{pct:g}, so {c} is not used for this tier's prefill (a larger slice, context-parallel prefill or a "
                    f"stratified SLO would be needed)")
    for s in scenarios:
        for p in s.pools:
            if p.shortfall > 1e-6:
                out.append(f"shortfall in {s.name}: {p.role}[{p.region},{p.tier}] cannot serve {p.shortfall:,.4g} {p.shortfall_unit} "
                           f"within the SLOs" + _fix_hint(d, p))
    return out


def _fix_hint(d: ModelData, p: PoolLoad) -> str:
    if all(d.p_max_slices[(p.region, p.tier, p.role, c)] == 0 for c in d.CONFIGS):
        return (" -- no slice shape meets this tier's SLOs; allow a larger slice shape or relax the tier's SLO (slo_overrides)")
    inv = "; ".join(f"{k}: {d.p_available_pods[(p.region, k)]} new pods available" for k in d.CHIPS)
    return f" -- more pod inventory in {p.region} ({inv}), a larger warm pool, or more regions to fail over to would close it"
