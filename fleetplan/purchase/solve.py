"""``solve_purchase(problem, options)``: the recourse problem, the value of the stochastic
solution and of perfect information, and the independent check of every quarter's fleet.

Solves (each the deterministic equivalent of :mod:`fleetplan.purchase.model` by HiGHS,
prefill TTFT chords refined between runs as in :func:`fleetplan.sizing.solve`):

* RP, the scenario tree: the plan;
* the mean forecast (one path, each quarter's demand the probability-weighted mean of
  the tree's nodes in that quarter), whose first-quarter (root) orders are then fixed in
  the tree: EEV, and VSS = EEV - RP;
* wait-and-see: each scenario alone (perfect foresight), WS = sum_s p_s WS_s, EVPI = RP - WS,
  and each scenario's regret (its cost under the plan minus its wait-and-see cost).

Every (scenario, quarter) fleet of the plan is rebuilt as a snapshot plan for the base
instance at that quarter's demand with the pods in service as its installed pods, and
re-proved by :func:`fleetplan.results.verify.verify` (which never sees the model); a
fleet that needs more pods than are in service is a violation too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

import pyomo.environ as pyo

from fleetplan import __version__
from fleetplan.deadline import TimeLimitReached, seconds_left
from fleetplan.instance.io import instance_hash
from fleetplan.models.sizing.constraints.prefill import move_chords, violated_pools
from fleetplan.purchase.document import model_size, order_doc, order_sheets, plan_notes, scenario_plans
from fleetplan.purchase.io import HOURS_PER_QUARTER, PurchaseProblem
from fleetplan.purchase.model import PurchaseModel, build_purchase_model, node_instance
from fleetplan.purchase.result import (
    clock_note, DecompositionFigures, PodFloorFigures, PurchasePlan, QuarterPool, QuarterWarmPool,
    SolveFigure,
    ValueOfInformation,
)
from fleetplan.purchase.replan import Replan
from fleetplan.purchase.schema import CVaRRisk, PricedUnserved
from fleetplan.purchase.floors import FloorReport, applies, floor_decomposition
from fleetplan.purchase.hardstart import START_SHARE, copy_plan, restricted
from fleetplan.purchase.risk import NEUTRAL_SHARE, neutral_problem, plan_seed, risk_figures
from fleetplan.purchase.start import StartReport, snapshot_start
from fleetplan.purchase.tree import Tree, mean_tree, mean_workload, path_tree  # noqa: F401  (mean_workload re-exported)
from fleetplan.sizing.extract import extract_plan
from fleetplan.results.precision import r6
from fleetplan.results.verify import verify
from fleetplan.sizing import MAX_REFINEMENTS
from fleetplan.solvers.base import SolveOptions, SolveResult, optimal_or_gap_reached, relative_gap
from fleetplan.solvers.highs import solve_highs

__all__ = ["TreeSolution", "solve_tree", "solve_purchase", "mean_tree", "path_tree", "NoPurchasePlan"]


class NoPurchasePlan(Exception):
    """The recourse problem has no feasible plan (hard policy) or no incumbent in the time limit."""

    def __init__(self, message: str, result: SolveResult):
        super().__init__(message)
        self.result = result


@dataclass
class TreeSolution:
    """A solved tree: ``orders[(n, r, k)]`` pods, ``pods[(n, r, k)]`` in service, per-node
    discounted costs (USD, not probability-weighted) and the last solve's result."""

    model: PurchaseModel  # None when the deadline cut the build (result: 'time_limit', where it was cut)
    result: SolveResult
    solves: int
    orders: dict[tuple[int, str, str], int] = field(default_factory=dict)
    pods: dict[tuple[int, str, str], int] = field(default_factory=dict)
    order_cost: dict[int, float] = field(default_factory=dict)
    run_cost: dict[int, float] = field(default_factory=dict)
    unserved_cost: dict[int, float] = field(default_factory=dict)
    start: StartReport | None = None
    floor: FloorReport | None = None  # the pod-floor decomposition's report, when it ran
    burst: dict[tuple[int, str, str], int] = field(default_factory=dict)
    burst_cost: dict[int, float] = field(default_factory=dict)
    method: dict | None = None  # the decomposition's figures (--method ph), None for the deterministic equivalent
    restricted_usd: float | None = None  # the start's objective when HiGHS was offered a plan as its start: the restricted tree's (hardstart.py) or the risk-neutral plan's
    start_from: str = "restricted"  # which: 'restricted' or 'neutral'
    #: what the wall clock (the deadline) cut on the way to this solution, in words (empty: every solve ended by
    #: its own gap, proof or work limit, so the same input gives the same solution on any machine and under any load)
    clock: list = field(default_factory=list)

    @property
    def unservable(self) -> dict:
        """Nodes no fleet serves even with the most pods they can have (node -> those pod
        bounds), as the snapshot start or the pod-floor decomposition found them."""
        return (self.start.infeasible if self.start is not None else {}) or (self.floor.infeasible if self.floor is not None else {})

    @property
    def ok(self) -> bool:
        return self.result.has_incumbent

    def figure(self) -> SolveFigure:
        r = self.result
        fl = self.floor
        floors = None if fl is None else PodFloorFigures(
            complete=fl.complete, upper_usd=r6(fl.upper_usd), lower_usd=r6(fl.lower_usd), gap=r6(fl.gap), proven=fl.proven,
            node_solves=fl.snapshots, master_solves=fl.rounds, nogood_cuts=fl.nogoods, cost_cuts=fl.optimality_cuts, floors=fl.floors, stopped=fl.why or None)
        return SolveFigure(objective_usd=r6(r.objective), bound_usd=r6(r.bound), gap=r6(r.gap), termination=r.termination, solves=self.solves,
                           pod_floors=floors, clock_limited="; ".join(self.clock) or None)

    def scenario_cost(self, ids: list[int]) -> float:
        return sum(self.order_cost[n] + self.run_cost[n] + self.unserved_cost[n] + self.burst_cost.get(n, 0.0) for n in ids)


#: A tree model with at least this many integer variables gets the snapshot-built start
#: (a Gemini-scale node holds ~500; the tests' tiny trees a few dozen).
SNAPSHOT_START_INTEGERS = 2000

#: of the time limit, kept for what follows the tree's solve: the quarter checks (seconds per tree
#: node; 0.15-0.2 s measured on the bundled example) and the end of the command (writing the plan,
#: freeing the models: 2.5-3 s there), at most RESERVE_SHARE of the time left
CHECK_RESERVE_S_PER_NODE = 0.3
FINISH_RESERVE_S = 3.0
RESERVE_SHARE = 0.2


def _integers(m) -> int:
    return sum(1 for v in m.component_data_objects(pyo.Var) if not v.fixed and (v.is_integer() or v.is_binary()))


def _restricted_start(p: PurchaseProblem, tree: Tree, pm: PurchaseModel, opts: SolveOptions, deadline: float | None, fixed_orders, cache,
                      fixed_node_orders, progress, clock: list) -> tuple[float, list] | None:
    """For a tree the pod-floor decomposition does not solve (priced demand, burst, CVaR):
    the plan of its restricted tree (:mod:`fleetplan.purchase.hardstart`) by the
    decomposition, within ``START_SHARE`` of the time left, set as ``pm``'s values (HiGHS's
    start). Returns (its objective in ``pm``, USD; the values) or None (the restricted tree
    has no plan in the time, or the decomposition does not apply to it either). What the wall
    clock cut on the way is appended to ``clock``."""
    q = restricted(p)
    if applies(q) is not None:
        return None
    sub = None if deadline is None else time.perf_counter() + START_SHARE * max(deadline - time.perf_counter(), 0.0)
    if progress is not None:
        progress("a first plan: the tree with every request served, by the pod-floor decomposition")
    try:
        pq = build_purchase_model(q, tree, fixed_orders, cache, deadline=sub)
    except TimeLimitReached:
        clock.append("the first plan's build (the restricted tree's; its share of the time passed)")
        return None
    if fixed_node_orders:
        fix_node_orders(pq, fixed_node_orders)
    rep = floor_decomposition(q, pq, opts, sub, cache, progress)
    clock += [f"the first plan's decomposition: {c}" for c in rep.clock]
    if not rep.complete:
        return None
    obj = copy_plan(p, pq, pm)
    return obj, [(v, v.value) for v in pm.m.component_data_objects(pyo.Var)]


def fix_node_orders(pm: PurchaseModel, fixed: dict[tuple[int, str, str], int]) -> None:
    """Fix order variables ``fixed[(n, r, k)]`` (pods) of a built model, with their
    minimum-order binaries. Raises ValueError for an order of pods on a variable the model
    does not have, or past its delivery cap."""
    m = pm.m
    for key, pods in fixed.items():
        if key not in pm.terms:
            if pods:
                raise ValueError(f"cannot fix an order of {pods} {key[2]} pods in {key[1]} at node {pm.tree.nodes[key[0]].label}: not offered there")
            continue
        lo, hi = m.v_order_pods[key].bounds
        if pods > (hi if hi is not None else pods) or (key in m.SEMI and 0 < pods < pm.terms[key].min_order_pods):
            raise ValueError(f"cannot fix an order of {pods} {key[2]} pods in {key[1]} at node {pm.tree.nodes[key[0]].label}: the supply "
                             f"allows 0 or {pm.terms[key].min_order_pods}..{hi}")
        m.v_order_pods[key].fix(pods)
        if key in m.SEMI:
            m.v_order_on[key].fix(1 if pods > 0 else 0)


def solve_tree(p: PurchaseProblem, tree: Tree, opts: SolveOptions, deadline: float | None, fixed_orders: dict | None = None,
               cache: dict | None = None, fixed_node_orders: dict | None = None, start_from_snapshots: bool | None = None,
               progress: Callable[[str], None] | None = None, start_plan: TreeSolution | None = None) -> TreeSolution:
    """Build and solve the deterministic equivalent of ``tree``, refining every node's
    prefill chords (:func:`~fleetplan.models.sizing.constraints.prefill.move_chords`) until
    none moves, keeping the cheapest solve that meets the exact queueing curves.
    ``fixed_orders``: the root's (region, chip) -> pods, fixed; ``fixed_node_orders``:
    (node, region, chip) -> pods, fixed (the re-plan's earlier orders);
    ``start_from_snapshots``: offer HiGHS the snapshot-built first incumbent
    (:func:`fleetplan.purchase.start.snapshot_start`); None: when the model has at least
    :data:`SNAPSHOT_START_INTEGERS` integer variables. ``progress``: called with a status
    line per node built. ``start_plan``: a solved plan of the same tree (the risk-neutral
    plan of a CVaR tree, :mod:`fleetplan.purchase.risk`), the pod-floor decomposition's first
    incumbent, or on a large tree it does not solve HiGHS's start in place of the restricted
    tree's plan (kept when HiGHS finds nothing better). A build the deadline cuts is a solution without a model
    (``model`` None) whose result is a 'time_limit' saying where ("the time limit passed
    while building node k of N")."""
    try:
        pm = build_purchase_model(p, tree, fixed_orders, cache, deadline=deadline, progress=progress)
    except TimeLimitReached as e:
        return TreeSolution(None, SolveResult("time_limit", str(e), False, None, None, None, 0.0, "highs"), 0)  # type: ignore[arg-type]
    if fixed_node_orders:
        fix_node_orders(pm, fixed_node_orders)
    m = pm.m
    start = None
    floor = None
    fallback = None  # (objective USD, values) of the restricted tree's plan offered as the start (hardstart.py)
    clock: list = [] if start_plan is None else [f"the risk-neutral plan: {c}" for c in start_plan.clock]
    big = start_from_snapshots if start_from_snapshots is not None else _integers(m) >= SNAPSHOT_START_INTEGERS
    if big and applies(p) is None:
        floor = floor_decomposition(p, pm, opts, deadline, cache, progress, seed=plan_seed(start_plan))
        clock += floor.clock
        if floor.infeasible:
            res = SolveResult("infeasible", "a node's snapshot is infeasible at its pod bound", False, None, None, None, 0.0, "highs")
            return TreeSolution(pm, res, 0, floor=floor, clock=clock)
        if floor.short:  # the floors and valid cuts alone admit no orders: proven infeasible, no HiGHS solve of the tree
            res = SolveResult("infeasible", "no orders meet the nodes' pod floors", False, None, None, None, floor.seconds, "highs")
            return TreeSolution(pm, res, 0, floor=floor, clock=clock)
    elif big and start_plan is not None and start_plan.ok:
        obj = copy_plan(p, start_plan.model, pm)
        fallback = (obj, [(v, v.value) for v in m.component_data_objects(pyo.Var)])
    elif big:
        fallback = _restricted_start(p, tree, pm, opts, deadline, fixed_orders, cache, fixed_node_orders, progress, clock)
    if big and floor is None and fallback is None:
        start = snapshot_start(p, pm, opts, deadline)
        if start.clocked:
            clock.append("the snapshot start (a snapshot's share of the time, or the start's, passed)")
        if start.infeasible and not isinstance(p.spec.policy.unserved, PricedUnserved):
            # a node no fleet can serve with the most pods it can have: the tree is infeasible (HiGHS
            # may search the whole time limit on the tree without proving it)
            res = SolveResult("infeasible", "a node's snapshot is infeasible at its pod bound", False, None, None, None, 0.0, "highs")
            return TreeSolution(pm, res, 0, start=start, clock=clock)
    disagg = p.base.serving.mode != "colocated"  # disaggregated or auto: prefill chords to refine
    best = None
    it = 0
    skip = floor is not None and floor.complete and floor.gap is not None and floor.gap <= opts.mip_gap
    late = floor is not None and floor.complete and deadline is not None and deadline - time.perf_counter() < 0.5
    if skip:
        # the decomposition's plan is within the gap of its proven bound: no HiGHS solve of the whole tree
        res = SolveResult(optimal_or_gap_reached(floor.upper_usd, floor.lower_usd), f"within the MIP gap by the pod-floor decomposition ({floor.gap:.2%})",
                          True, floor.upper_usd, floor.lower_usd, floor.gap, floor.seconds, "highs")
    elif late:
        # the decomposition's plan, outside the gap, and no time for HiGHS to improve it: that plan with its gap
        skip = True
        clock.append("HiGHS's solve of the whole tree (no time was left after the decomposition)")
        res = SolveResult("time_limit", f"the time limit passed after the pod-floor decomposition's plan ({floor.gap:.2%} from its bound)"
                          if floor.gap is not None else "the time limit passed after the pod-floor decomposition's plan",
                          True, floor.upper_usd, floor.lower_usd, floor.gap, floor.seconds, "highs")
    # the decomposition's plan (in the model's variables) stands if HiGHS finds none in the time left
    floor_plan = [(v, v.value) for v in m.component_data_objects(pyo.Var)] if floor is not None and floor.complete and not skip else None
    while not skip:
        it += 1
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left < 0.5:
            # no time left for a solve: no incumbent (a HiGHS run cut in presolve can return a partial column vector)
            res = SolveResult("time_limit", "time limit reached before the solve", False, None, None, None, 0.0, "highs")
            clock.append(f"HiGHS's solve {it} of the whole tree (no time was left for it)")
            break
        res = solve_highs(m, replace(opts, time_limit_s=left))
        if res.termination == "time_limit":
            clock.append(f"HiGHS's solve {it} of the whole tree (stopped by the time limit)")
        if not res.has_incumbent:
            break
        if floor is not None and floor.lower_usd is not None and (res.bound is None or res.bound < floor.lower_usd):
            # the decomposition's bound is proven too (the floors are in the model as valid inequalities)
            bound = floor.lower_usd
            res = replace(res, bound=bound, gap=max(0.0, (res.objective - bound) / res.objective) if res.objective else None)
        exact = not disagg or not any(violated_pools(m.node[n], pm.data[n]) for n in m.NODES)
        if exact and (best is None or res.objective < best[0] - 1e-9):
            best = (res.objective, [(v, v.value) for v in m.component_data_objects(pyo.Var)], res)
        elif exact:
            break  # exact and no better: the chords have settled
        moved = sum(move_chords(m.node[n], pm.data[n]) for n in m.NODES) if disagg else 0
        if moved == 0 or it >= MAX_REFINEMENTS:
            break
        if deadline is not None and time.perf_counter() >= deadline:
            clock.append(f"the prefill chords' refinement after HiGHS's solve {it} of the whole tree (the time limit passed)")
            break
    if best is not None and res is not best[2]:
        for v, val in best[1]:
            v.set_value(val, skip_validation=True)
        res = best[2]
    if fallback is not None and (best is None or best[0] > fallback[0] * (1 + 1e-9)):
        # HiGHS ended without a plan as good as its start (the restricted tree's): that plan, with HiGHS's bound if it has one
        for v, val in fallback[1]:
            v.set_value(val, skip_validation=True)
        b = res.bound if res.bound is not None and res.bound <= fallback[0] else None
        res = SolveResult("time_limit" if b is None or relative_gap(fallback[0], b) > opts.mip_gap else optimal_or_gap_reached(fallback[0], b),
                          ("the risk-neutral plan" if start_plan is not None and start_plan.ok else
                           "the restricted tree's plan (every request served, no burst, expected cost; by the pod-floor decomposition)")
                          + f": HiGHS found none better ({res.termination})", True, fallback[0], b, relative_gap(fallback[0], b) if b is not None else None,
                          res.wall_time_s, "highs")
    elif best is None and floor_plan is not None:
        for v, val in floor_plan:
            v.set_value(val, skip_validation=True)
        res = SolveResult("time_limit", f"HiGHS found no plan of the tree in the time left ({res.termination}): the pod-floor decomposition's plan",
                          True, floor.upper_usd, floor.lower_usd, floor.gap, floor.seconds, "highs")
    sol = TreeSolution(pm, res, it, start=start, floor=floor, restricted_usd=None if fallback is None else fallback[0],
                       start_from="neutral" if start_plan is not None and start_plan.ok else "restricted", clock=list(dict.fromkeys(clock)))
    if not res.has_incumbent:
        return sol
    for key in m.ORDERS:
        sol.orders[key] = int(round(pyo.value(m.v_order_pods[key])))
    for key in m.STOCK:
        sol.pods[key] = int(round(pyo.value(m.v_pods_in_service[key])))
    for n in m.NODES:
        sol.order_cost[n] = float(pyo.value(m.e_order_cost_usd[n]))
        sol.run_cost[n] = float(pyo.value(m.e_run_cost_usd[n]))
        sol.unserved_cost[n] = float(pyo.value(m.e_unserved_cost_usd[n]))
        sol.burst_cost[n] = float(pyo.value(m.e_burst_cost_usd[n]))
    for key in m.BURST:
        sol.burst[key] = int(round(pyo.value(m.v_burst_pods[key])))
    return sol


def _check_node(p: PurchaseProblem, sol: TreeSolution, n: int, options: dict) -> tuple[str, list[str], tuple[float, float], int, float, list[QuarterPool], list[QuarterWarmPool]]:
    """The independent check of node n's fleet: (status, violations, (unserved rps at the normal peak, the most unserved
    rps in one region loss), chips running, cost per hour, its pools, its warm pool)."""
    m, tree = sol.model.m, sol.model.tree
    node = tree.nodes[n]
    regions, chips = sorted(p.base.regions), sorted(p.base.chips)
    in_service = {(r, k): sol.pods[(n, r, k)] + sol.burst.get((n, r, k), 0) for r in regions for k in chips}  # burst pods serve too
    inst = node_instance(p.base, node.demand, {key: (v, 0) for key, v in in_service.items()}, node.workload)
    d = replace(sol.model.data[n], inst=inst, p_installed_pods=dict(in_service), p_available_pods={key: 0 for key in in_service})
    # the verifier re-derives every SLO from the counts and decisions; the sizing plan's predictions are not in a purchase plan
    plan = extract_plan(d, m.node[n], sol.result, options, sol.solves, predict=False)
    short = any(pl.shortfall > 1e-6 for s in plan.scenarios for pl in s.pools)
    plan = plan.model_copy(update={"status": "shortfall" if short else "verified"})  # what the plan claims, as sizing.solve sets it
    found = [f"{v.check} {v.where}: {v.message}" for v in verify(inst, plan)]
    for f in plan.fleet:
        if f.pods_new > 0:
            found.append(f"pods {f.region}/{f.chip}: the fleet needs {f.pods_total} pods, {in_service[(f.region, f.chip)]} are in service (burst included)")
    status = "violations" if found else ("shortfall" if short else "verified")
    # the normal peak's unserved, and apart the worst region loss's: the loss scenarios exclude one another, so their
    # shortfalls do not add (a sum over every sizing scenario reported 66.8 of 90 requests/s for a plan serving all 90)
    unserved = sum(s.unserved_rps for s in plan.scenarios if s.kind == "normal")
    unserved_loss = max((s.unserved_rps for s in plan.scenarios if s.kind == "loss"), default=0.0)
    running = sum(f.chips_in_slices + f.chips_in_warm_pool for f in plan.fleet)
    pools = [QuarterPool(region=q.region, tier=q.tier, role=q.role, slice=q.slice, slices=q.slices, chips=q.chips,
                         cost_per_hour_usd=q.cost_per_hour_usd) for q in plan.pools]
    warm = [QuarterWarmPool(region=w.region, slice=w.slice, slices=w.slices, chips=w.chips, cost_per_hour_usd=w.cost_per_hour_usd)
            for w in plan.warm_pool if w.slices > 0]
    return status, found, (unserved, unserved_loss), running, plan.cost.fleet_cost_per_hour_usd, pools, warm


def solve_purchase(p: PurchaseProblem, options: SolveOptions | None = None, value: bool = True,
                   progress: Callable[[str], None] | None = None, replan: Replan | None = None,
                   tree_solver: Callable[..., TreeSolution] | None = None) -> PurchasePlan:
    """Solve the purchase problem ``p`` and check every quarter's fleet.

    Args:
        options: MIP gap (relative), time limit (wall seconds for every solve together),
            threads, seed.
        value: also compute EEV/VSS and wait-and-see/EVPI (1 + 1 + scenarios more solves).
        progress: called with a short status line before each phase.
        replan: a rolling re-plan (:func:`fleetplan.purchase.replan.plan_replan`): its
            re-rooted tree is solved with the earlier orders fixed; the order sheet is the
            realised node's orders; no EEV/WS (``value`` is ignored).
        tree_solver: solves the whole tree (the RP and the EEV; the re-plan's re-rooted tree), with the signature of
            :func:`solve_tree` (the default, the deterministic equivalent);
            :func:`fleetplan.purchase.ph.solve_tree_ph` decomposes it (--method ph).
            The mean forecast and the wait-and-see paths are always solved as EFs.
    Returns: :class:`PurchasePlan` (status 'violations' if the verifier refused a fleet).
    Raises: :class:`NoPurchasePlan` when the tree has no feasible plan (hard policy:
        some scenario's demand cannot be served by any orders) or none was found in time.
    """
    opts = options or SolveOptions()
    say = progress or (lambda _m: None)
    finish_at, solve_by = _deadlines(opts, (replan.tree if replan else p.tree))
    cache: dict = {}
    if replan is not None:
        p = replace(p, tree=replan.tree)
        value = False
    tree = p.tree
    now = replan.now_node if replan is not None else 0
    big = tree_solver or solve_tree
    rp, neutral = _solve_recourse(p, opts, solve_by, cache, replan, big, say)
    if not rp.ok:
        raise NoPurchasePlan(_no_plan_why(p, rp, opts, finish_at, cache, replan, say), rp.result)
    options_doc = {"mip_gap": opts.mip_gap, "time_limit_s": opts.time_limit_s, "threads": opts.threads, "seed": opts.seed}
    say("verifying every quarter's fleet")
    checks = {n.id: _check_node(p, rp, n.id, options_doc) for n in tree.nodes}
    vi = eev = adopted = None  # adopted: (the recourse solve's plan's cost, its bound) when the EEV's plan replaced it
    ws_cost: dict[str, float] = {}
    first = rp
    if value:
        val, ws_cost = _value_of_information(p, rp, opts, finish_at, cache, say, big)
        eev = val.eev
        rp, checks, adopted = _adopt_eev(p, rp, eev, checks, options_doc, finish_at, say)
        vi = val.figures(tree, rp, first)
    scenarios = scenario_plans(p, tree, rp, checks, ws_cost)
    order_sheet, contingency, fixed, why_none = order_sheets(p, tree, rp, now, scenarios)
    size = model_size(first.model.m, tree)
    bad = any(q.plan_status == "violations" for s in scenarios for q in s.quarters)
    pol = p.spec.policy.unserved
    notes = plan_notes(p, rp, first, adopted, eev, replan)
    solve_doc = _solve_figure(rp, first)
    notes += [n for n in [clock_note(solve_doc, vi)] if n]
    risk = p.spec.policy.risk
    expected = rp.result.objective
    risk_doc = None
    if isinstance(risk, CVaRRisk):
        risk_doc, risk_notes = risk_figures(risk, tree, rp, neutral)
        expected = risk_doc.expected_cost_usd
        notes += risk_notes
    method_doc = None
    if rp.method is not None:
        method_doc = DecompositionFigures(**{k: (r6(v) if isinstance(v, float) else v) for k, v in rp.method.items()})
    return PurchasePlan(
        risk=risk_doc, decomposition=method_doc,
        fleetplan_version=__version__, name=p.spec.name, purchase_hash=instance_hash(p.spec), base_instance=p.base.name,
        base_instance_hash=instance_hash(p.base), quarters=p.labels, hours_per_quarter=HOURS_PER_QUARTER,
        discount_rate_per_year=p.spec.quarters.discount_rate_per_year,
        unserved_policy=(f"priced at {pol.usd_per_1m_tokens:g} USD per 1M tokens" if isinstance(pol, PricedUnserved) else "hard"),
        status="violations" if bad else "verified", expected_cost_usd=r6(expected), solve=solve_doc, order_sheet=order_sheet,
        nothing_to_order_why=why_none,
        contingency=contingency, scenarios=scenarios, value=vi, fixed_orders=fixed,
        replan=None if replan is None else {"now": replan.now, "path": replan.path, "previous_purchase_hash": replan.previous_hash,
                                            "previous_plan_hash": replan.previous_plan_hash},
        model_size=size, options=options_doc, notes=notes).sealed()


def _deadlines(opts: SolveOptions, tree: Tree) -> tuple[float | None, float | None]:
    """(finish_at, solve_by): :func:`time.perf_counter` timestamps (None: no limit) by which the
    whole run must end, less a reserve for writing the plan, and by which the tree's solves must
    end, less a reserve for checking each node of ``tree`` too. The deadline is time_limit_s
    from now, or the options' monotonic deadline (the CLI's: the command's start +
    --time-limit, so reading the file and start-up count) when earlier."""
    ends = [] if opts.time_limit_s is None else [time.perf_counter() + opts.time_limit_s]
    if opts.deadline is not None:
        ends.append(time.perf_counter() + seconds_left(opts.deadline))
    deadline = min(ends) if ends else None
    finish_at = solve_by = deadline
    if deadline is not None:  # what follows the solves is inside the limit too
        left = max(deadline - time.perf_counter(), 0.0)
        finish_at = deadline - min(FINISH_RESERVE_S, RESERVE_SHARE * left)
        solve_by = deadline - min(FINISH_RESERVE_S + CHECK_RESERVE_S_PER_NODE * len(tree.nodes), RESERVE_SHARE * left)
    return finish_at, solve_by


def _solve_recourse(p: PurchaseProblem, opts: SolveOptions, solve_by: float | None, cache: dict, replan: Replan | None,
                    big: Callable[..., TreeSolution], say: Callable[[str], None]) -> tuple[TreeSolution, TreeSolution | None]:
    """The recourse problem (RP) on ``p.tree`` by ``big``, and with a CVaR objective the
    risk-neutral plan solved first (its plan is the RP's start; None otherwise).
    Raises: :class:`NoPurchasePlan` when a re-plan's fixed order is one the supply does not allow."""
    tree = p.tree
    head = f"solving the scenario tree ({len(tree.nodes)} nodes, {len(tree.scenarios)} scenarios)" + ("" if big is solve_tree else " by progressive hedging")
    say(head)
    extra = {"progress": lambda msg: say(f"{head}: {msg}")} if big is solve_tree else {}
    neutral = None  # with a CVaR objective: the risk-neutral plan, solved first (fleetplan/purchase/risk.py)
    try:
        if isinstance(p.spec.policy.risk, CVaRRisk):
            say("the risk-neutral plan first (the expected cost as the objective): the CVaR plan starts from it and is compared with it")
            by = None if solve_by is None else time.perf_counter() + NEUTRAL_SHARE * max(solve_by - time.perf_counter(), 0.0)
            neutral = solve_tree(neutral_problem(p), tree, opts, by, cache=cache, fixed_node_orders=replan.fixed if replan else None,
                                 progress=lambda msg: say(f"the risk-neutral plan: {msg}"))
            if big is solve_tree:
                extra["start_plan"] = neutral
        rp = big(p, tree, opts, solve_by, cache=cache, fixed_node_orders=replan.fixed if replan else None, **extra)
    except ValueError as e:  # a fixed order the supply does not allow
        raise NoPurchasePlan(f"the previous plan's orders cannot be fixed: {e}", SolveResult("error", str(e), False, None, None, None, 0.0, "highs")) from None
    return rp, neutral


def _no_plan_why(p: PurchaseProblem, rp: TreeSolution, opts: SolveOptions, finish_at: float | None, cache: dict, replan: Replan | None,
                 say: Callable[[str], None]) -> str:
    """Why the recourse solve ``rp`` has no plan, in words: the nodes or floors no orders can
    serve (with the orders that would fix it, searched when the time left allows), the
    re-plan's fixed orders, the time limit, or the solver's stop."""
    tree = p.tree
    if rp.result.termination in ("infeasible", "infeasible_or_unbounded") and replan is not None:
        return (f"no orders from {replan.now} on serve every scenario through {replan.path} within the SLOs, with the earlier orders of "
                "the previous plan fixed (the hard unserved policy): the realised demand outran them")
    if rp.unservable:
        return "no orders serve every scenario's demand within the SLOs (the hard unserved policy): " + _unservable_nodes(p, tree, rp.unservable)
    if rp.floor is not None and rp.floor.short:
        why = "no orders serve every scenario's demand within the SLOs (the hard unserved policy): " + _short_floors(p, tree, rp.floor.short)
        left = None if finish_at is None else finish_at - time.perf_counter()
        if left is None or left > 2 * rp.floor.seconds:
            say("no plan serves every scenario: finding the orders that would fix it")
            why += "; " + "; ".join(_lifted_fix(p, opts, finish_at, cache))
        else:  # the lifted tree is a decomposition as long as this one: not started when it cannot end in the time left
            why += (f"; the orders that would serve every scenario with the delivery caps lifted were not searched (a search as long as "
                    f"the decomposition's {rp.floor.seconds:.0f} s; {max(left, 0):.0f} s were left: raise --time-limit for them); raise the supply, "
                    "shorten lead times or price the unserved demand (policy.unserved: {kind: priced, usd_per_1m_tokens: ...})")
        return why
    if rp.result.termination in ("infeasible", "infeasible_or_unbounded"):
        say("no plan serves every scenario: finding where and what would fix it")
        return ("no orders serve every scenario's demand within the SLOs (the hard unserved policy): "
                + diagnose_infeasible(p, opts, finish_at, cache))
    if rp.model is None and rp.result.termination == "time_limit":  # the deadline cut the model build or PH: say where
        return f"{rp.result.solution_status} (--time-limit {opts.time_limit_s:g} s); raise --time-limit"
    if rp.model is None:  # PH failed without a model of the tree: its words
        return rp.result.solution_status
    why = f"the solver stopped ({rp.result.termination}) without a plan; raise --time-limit"
    if rp.floor is not None and rp.floor.why:
        why += f" (the pod-floor decomposition, {rp.floor.seconds:.0f} s: {rp.floor.why})"
    return why


def _adopt_eev(p: PurchaseProblem, rp: TreeSolution, eev: TreeSolution | None, checks: dict, options_doc: dict, finish_at: float | None,
               say: Callable[[str], None]) -> tuple[TreeSolution, dict, tuple | None]:
    """The plan, its checks and ``adopted``: when the EEV's plan (the mean forecast's root
    orders, re-optimised below the root on this tree) is cheaper than the recourse solve's
    (which stopped at its gap), it is a plan of the tree and becomes the plan, verified like
    the first, with the recourse solve's bound (the EEV's is a bound with the root orders
    fixed, not of the tree); ``adopted`` is then (the recourse plan's cost USD, its bound),
    or (that cost, None) when no time was left to verify it (not adopted); None otherwise."""
    tree = p.tree
    if eev is None or not eev.ok or rp.result.objective is None or not eev.result.objective < rp.result.objective * (1 - 1e-9):
        return rp, checks, None
    left = None if finish_at is None else finish_at - time.perf_counter()
    if not (left is None or left > CHECK_RESERVE_S_PER_NODE * len(tree.nodes)):
        return rp, checks, (rp.result.objective, None)  # cheaper, but no time to verify it: noted, not adopted
    say("verifying every quarter's fleet of the mean-forecast orders' plan (cheaper than the recourse solve's)")
    Rb = rp.result.bound
    E = eev.result.objective
    adopted = (rp.result.objective, Rb)
    rp = replace(eev, result=replace(eev.result, bound=Rb, gap=relative_gap(E, Rb) if Rb is not None else None,
                                     termination="gap_reached" if Rb is not None and E - Rb > 1e-9 * abs(E) else eev.result.termination))
    checks = {n.id: _check_node(p, rp, n.id, options_doc) for n in tree.nodes}
    return rp, checks, adopted


def _solve_figure(rp: TreeSolution, first: TreeSolution) -> SolveFigure:
    """The plan's solve figures: the objective is the plan's (``rp``), the bound, the HiGHS
    runs and the pod-floor decomposition the recourse solve's (``first``), which proved the
    bound -- when the EEV's plan was adopted, ``rp`` is the EEV tree's, whose decomposition
    ran with the root orders fixed and bounds nothing of the tree."""
    fig = rp.figure()
    if rp is first:
        return fig
    clock = "; ".join(dict.fromkeys(first.clock + rp.clock)) or None
    return fig.model_copy(update={"solves": first.solves, "pod_floors": first.figure().pod_floors, "clock_limited": clock})


def _unservable_nodes(p: PurchaseProblem, tree: Tree, infeasible: dict) -> str:
    """The (scenario, quarter) of each node whose snapshot no fleet serves even with the most
    pods it can have in service (``infeasible[n]`` = those bounds), in words."""
    parts = []
    for n, bound in sorted(infeasible.items(), key=lambda kv: (tree.nodes[kv[0]].quarter, kv[0])):
        node = tree.nodes[n]
        scen = sorted(s for s, ids in tree.scenarios.items() if n in ids)
        pods = ", ".join(f"{v} {k} in {r}" for (r, k), v in sorted(bound.items()) if v) or "none"
        parts.append(f"scenario {scen[0]}{' (and ' + str(len(scen) - 1) + ' more through node ' + node.label + ')' if len(scen) > 1 else ''} "
                     f"cannot be served in {p.labels[node.quarter]}: even the most pods that can be in service then ({pods}: the starting "
                     "fleet still in service and every delivery cap up to that quarter) serve no fleet within the SLOs")
    parts.append("more pods in service by then are needed: a larger starting fleet, a shorter lead time or a higher delivery cap "
                 "(or price the unserved demand: policy.unserved: {kind: priced, usd_per_1m_tokens: ...})")
    return "; ".join(parts)


def diagnose_infeasible(p: PurchaseProblem, opts: SolveOptions, deadline: float | None, cache: dict | None = None) -> str:
    """Why a hard-policy tree has no plan, in words: the (scenario, quarter, region) whose
    demand the fewest-unserved orders still cannot serve (requests/s at the peak), and
    the orders that would serve every scenario once the supply's delivery caps are lifted
    (or that none would: the lead times, not the caps, are the limit)."""
    from fleetplan.purchase.schema import Policy

    priced = replace(p, spec=p.spec.model_copy(update={"policy": Policy(unserved=PricedUnserved(kind="priced", usd_per_1m_tokens=1.0))}))
    try:
        pm = build_purchase_model(priced, cache=cache, deadline=deadline)
    except TimeLimitReached as e:
        return f"{e} of the diagnosis (the tree with its unserved demand priced); raise --time-limit for where and what would fix it"
    m, tree = pm.m, pm.tree
    m.obj_expected_cost_usd.deactivate()
    m.obj_unserved_rps = pyo.Objective(expr=sum(m.node[n].v_unserved_rps[k] for n in m.NODES for k in m.node[n].ACTIVE), sense=pyo.minimize)
    left = None if deadline is None else deadline - time.perf_counter()
    res = solve_highs(m, replace(opts, time_limit_s=left)) if left is None or left >= 0.5 else None
    parts = []
    if res is not None and res.has_incumbent:
        where: dict[tuple[int, str], float] = {}
        for n in m.NODES:
            b = m.node[n]
            for (r, t, sn) in b.ACTIVE:
                v = pyo.value(b.v_unserved_rps[r, t, sn])
                if v > 1e-6:
                    where[(n, r)] = max(where.get((n, r), 0.0), v)
        first: dict[str, tuple] = {}
        for (n, r), v in sorted(where.items(), key=lambda kv: (tree.nodes[kv[0][0]].quarter, kv[0][0], kv[0][1])):
            for s, ids in tree.scenarios.items():
                if n in ids and s not in first:
                    first[s] = (p.labels[tree.nodes[n].quarter], r, v)
        if res.termination in ("optimal", "gap_reached"):
            parts = [f"scenario {s} cannot be served in {q}: the orders that leave the least unserved still leave {v:.4g} requests/s of "
                     f"region {r} unserved at the peak (prefill capacity read at the model's conservative chords)"
                     for s, (q, r, v) in sorted(first.items(), key=lambda kv: (kv[1][0], kv[0]))]
        else:  # an incumbent cut by the clock: its unserved demand need not be the least, nor its quarters the ones that fail
            parts = [f"where is not proven: the search for the orders that leave the least demand unserved ended ({res.termination}) "
                     f"before its optimum (its best orders leave {sum(where.values()):.4g} requests/s unserved at the peaks, "
                     "first in " + ", ".join(sorted({q for q, _r, _v in first.values()})) + "); raise --time-limit for where"]
    elif res is not None:
        parts = [f"where is not proven: the search for the orders that leave the least demand unserved found none ({res.termination}); "
                 "raise --time-limit for where"]
    return "; ".join(parts + _lifted_fix(p, opts, deadline, cache))


def _lifted_fix(p: PurchaseProblem, opts: SolveOptions, deadline: float | None, cache: dict | None) -> list[str]:
    """The orders that serve every scenario once the supply's delivery caps are lifted, in
    words (or that none would, or that the time ran out), and the remedies."""
    tree = p.tree
    parts = []
    if deadline is not None and deadline - time.perf_counter() < 1.0:
        return ["the time limit ended before the search for the orders that would fix it (raise --time-limit)",
                "raise the supply, shorten lead times or price the unserved demand (policy.unserved: {kind: priced, usd_per_1m_tokens: ...})"]
    big = {key: 10_000 for key in p.delivery_cap}  # pods per delivery quarter: far past any tree here
    lifted = solve_tree(replace(p, delivery_cap=big), p.tree, opts, deadline, cache=cache)
    if lifted.ok:
        fixes = []
        by_delivery: dict[tuple[int, int], int] = {}
        for key, pods in lifted.orders.items():
            t = lifted.model.terms[key]
            by_delivery[(key[0], t.entry)] = by_delivery.get((key[0], t.entry), 0) + pods
        for key in sorted(lifted.orders, key=lambda k: (tree.nodes[k[0]].quarter, k)):
            pods = lifted.orders[key]
            t = lifted.model.terms[key]
            cap = p.delivery_cap[(t.entry, t.delivery)]
            if pods > 0 and pods > cap:
                fixes.append(f"{pods} pod{'s' if pods != 1 else ''} of {t.chip} in {t.region} ordered in {p.labels[t.quarter]} at node {tree.nodes[key[0]].label} "
                             f"(delivered {p.labels[t.delivery]}; supply.{t.entry} delivers at most {cap} then)")
        if fixes:
            parts.append("with the delivery caps lifted it is served by ordering " + "; ".join(fixes))
    elif lifted.result.termination in ("infeasible", "infeasible_or_unbounded"):
        parts.append("even with the delivery caps lifted no orders serve it: the lead times (or what is orderable) are the limit, "
                     "or no slice shape meets the SLOs")
    else:
        parts.append("the time limit ended the search for the orders that would fix it")
    parts.append("raise the supply, shorten lead times or price the unserved demand (policy.unserved: {kind: priced, usd_per_1m_tokens: ...})")
    return parts


def _short_floors(p: PurchaseProblem, tree: Tree, short: list) -> str:
    """The first quarter the pod floors prove cannot be served (``short``: the
    :class:`fleetplan.purchase.floors.Short` of its nodes), in words: per node, the floor
    furthest out of the supply's reach and how many more pods it needs at the least; the
    node short of the most pods first and in full, the others in brief."""
    by_node: dict[int, list] = {}
    for s in short:
        by_node.setdefault(s.node, []).append(s)
    worst = {n: max(rows, key=lambda s: (s.floor - s.most, s.floor)) for n, rows in by_node.items()}
    order = sorted(worst, key=lambda n: (-(worst[n].floor - worst[n].most), tree.nodes[n].label))
    parts = []
    for i, n in enumerate(order):
        node, w = tree.nodes[n], worst[n]
        q = node.quarter
        scen = sorted(s for s, ids in tree.scenarios.items() if n in ids)
        who = f"scenario {scen[0]}" + (f" (and {len(scen) - 1} more through node {node.label})" if len(scen) > 1 else "")
        if w.chip is None:
            parts.append(f"{who} cannot be served in {p.labels[q]}: each of its pod floors can be reached alone, but not all of them "
                         "together with the earlier quarters' (the supply's caps and lead times share the deliveries)")
            continue
        where = w.regions[0] if len(w.regions) == 1 else "+".join(w.regions) + " together"
        if i == 0:
            kept = sum(p.installed[(r, w.chip)][q] for r in w.regions)
            parts.append(f"{who} cannot be served in {p.labels[q]}: its fleet needs at least {w.floor} pods of {w.chip} in {where} (the fewest "
                         f"its demand can be served with within the SLOs, a proven bound), and at most {w.most} can be in service there then "
                         f"({kept} of the starting fleet still in service plus every delivery the supply's caps, lead times and minimum orders "
                         f"allow by then): at least {w.floor - w.most} more pods of {w.chip} delivered there by {p.labels[q]}")
        else:
            parts.append(f"{who} cannot be served then either: at least {w.floor} pods of {w.chip} in {where} needed, at most {w.most} "
                         f"possible: {w.floor - w.most} more")
    if parts:
        q0 = tree.nodes[short[0].node].quarter
        parts[-1] += f" (no earlier quarter is proven out of reach: the floors of the quarters before {p.labels[q0]} are met together)" if q0 > 0 else ""
    return "; ".join(parts)


def _value_of_information(p: PurchaseProblem, rp: TreeSolution, opts: SolveOptions, deadline, cache, say,
                          big: Callable[..., TreeSolution] = solve_tree) -> tuple[_Value, dict[str, float]]:
    tree = p.tree
    say("solving the mean forecast")
    mean = solve_tree(p, mean_tree(tree, p.base.workload), opts, deadline, cache=cache, progress=lambda msg: say(f"solving the mean forecast: {msg}"))
    root_orders: dict[tuple[str, str], int] = {}
    mean_docs = []
    eev = None
    if mean.ok:
        root_orders = {(r, k): v for (n, r, k), v in mean.orders.items() if n == 0}
        mean_docs = [order_doc(p, mean, key) for key in sorted(mean.orders) if key[0] == 0 and mean.orders[key] > 0]
        say("evaluating the mean-forecast orders on the tree (EEV)")
        eev = big(p, tree, opts, deadline, root_orders, cache)
    ws: dict[str, SolveFigure] = {}
    ws_cost: dict[str, float] = {}
    ws_bound: dict[str, float] = {}
    for s in tree.scenarios:
        say(f"wait-and-see: {s}")
        sol = solve_tree(p, path_tree(tree, s), opts, deadline, cache=cache, progress=lambda msg, s=s: say(f"wait-and-see: {s}: {msg}"))
        ws[s] = sol.figure()
        if sol.ok:
            ws_cost[s] = sol.result.objective
            ws_bound[s] = sol.result.bound if sol.result.bound is not None else sol.result.objective
    return _Value(mean, eev, ws, ws_cost, ws_bound, mean_docs), ws_cost


@dataclass
class _Value:
    """The value solves of one tree: the mean forecast, the EEV (None when the mean forecast
    had no plan), the wait-and-see figures per scenario and their costs and bounds (USD)."""

    mean: TreeSolution
    eev: TreeSolution | None
    ws: dict
    ws_cost: dict
    ws_bound: dict
    mean_docs: list

    def figures(self, tree: Tree, rp: TreeSolution, first: TreeSolution | None = None) -> ValueOfInformation:
        """VSS = EEV - RP and EVPI = RP - WS with the intervals their bounds allow. ``rp``
        is the plan's solution; ``first`` the recourse solve's when the EEV's plan was
        adopted (its bound and decomposition figures are the RP's, :func:`_solve_figure`)."""
        mean, eev, ws, ws_cost, ws_bound = self.mean, self.eev, self.ws, self.ws_cost, self.ws_bound
        R, Rb = rp.result.objective, (rp.result.bound if rp.result.bound is not None else rp.result.objective)
        vss = vss_iv = None
        eev_ok = eev is not None and eev.ok
        if eev_ok:
            E, Eb = eev.result.objective, (eev.result.bound if eev.result.bound is not None else eev.result.objective)
            vss = E - R
            vss_iv = (r6(Eb - R), r6(E - Rb))
        ws_total = evpi = evpi_iv = None
        if len(ws_cost) == len(tree.scenarios):
            ws_total = sum(tree.scenario_probability(s) * v for s, v in ws_cost.items())
            ws_lo = sum(tree.scenario_probability(s) * v for s, v in ws_bound.items())
            evpi = R - ws_total
            evpi_iv = (r6(Rb - ws_total), r6(R - ws_lo))
        return ValueOfInformation(
            rp=_solve_figure(rp, first or rp), mean_forecast=mean.figure(), eev=eev.figure() if eev is not None else None, eev_feasible=eev_ok,
            vss_usd=r6(vss), vss_interval_usd=vss_iv, wait_and_see=ws, ws_usd=r6(ws_total), evpi_usd=r6(evpi), evpi_interval_usd=evpi_iv,
            mean_forecast_root_orders=self.mean_docs)
