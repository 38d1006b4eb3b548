"""The purchase plan's parts written from a solved tree (:func:`fleetplan.purchase.solve.solve_purchase`):
each scenario's quarters (pods in service, pools, costs, the check's verdict), the order
sheet and the contingent and fixed orders, and the notes that say how the plan was found.

``sol``/``rp``/``first`` are :class:`fleetplan.purchase.solve.TreeSolution` (a solved tree:
its model, orders, pods in service and per-node costs in USD); every figure is rounded by
:func:`fleetplan.results.precision.r6`.
"""

from __future__ import annotations

import pyomo.environ as pyo

from fleetplan.purchase.floors import COST_MAX_NODES, FLEET_GIVE_UP_NODES
from fleetplan.purchase.io import HOURS_PER_QUARTER, PurchaseProblem
from fleetplan.purchase.replan import Replan, service_until
from fleetplan.purchase.result import BurstUse, ContingentOrder, Order, PodsInService, QuarterResult, ScenarioPlan
from fleetplan.purchase.sheet import nothing_to_order_why, order_need
from fleetplan.purchase.tree import Tree
from fleetplan.results.precision import r6


def order_doc(p: PurchaseProblem, sol, key, cls=Order, **extra) -> Order:
    """The order ``key`` = (node, region, chip) of ``sol`` as a document of class ``cls``
    (pods, chips, price and discounted cost in USD, quarters of order, delivery and last service)."""
    n, r, k = key
    t = sol.model.terms[key]
    pods = sol.orders[key]
    labels = p.labels
    until = service_until(labels, t)
    return cls(region=r, chip=k, order_quarter=labels[t.quarter], delivery_quarter=labels[t.delivery], in_service_until=until, pods=pods,
               chips=pods * p.base.chips[k].chips_per_pod, price_usd=r6(pods * t.price_usd_per_pod), cost_usd=r6(pods * t.cost_usd_per_pod), **extra)


def shed_per_hour(blk) -> float:
    """The node block's event-weighted shed cost (USD/h; 0 without shed or its price)."""
    return float(pyo.value(blk.e_shed_cost_per_hour_usd)) if hasattr(blk, "e_shed_cost_per_hour_usd") else 0.0


def scenario_plans(p: PurchaseProblem, tree: Tree, rp, checks: dict, ws_cost: dict[str, float]) -> list[ScenarioPlan]:
    """Each scenario of the plan ``rp``: its probability, discounted cost, wait-and-see cost
    and regret (USD) and its quarters; ``checks[n]`` is node n's check
    (:func:`fleetplan.purchase.solve._check_node`), ``ws_cost`` the wait-and-see costs found."""
    scenarios = []
    for s, ids in tree.scenarios.items():
        qs = [_quarter_result(p, tree, rp, n, checks[n]) for n in ids]
        cost = rp.scenario_cost(ids)
        ws = ws_cost.get(s)
        scenarios.append(ScenarioPlan(name=s, probability=r6(tree.scenario_probability(s)), cost_usd=r6(cost), wait_and_see_usd=r6(ws),
                                      regret_usd=r6(cost - ws) if ws is not None else None, quarters=qs))
    return scenarios


def _quarter_result(p: PurchaseProblem, tree: Tree, rp, n: int, check: tuple) -> QuarterResult:
    """Node n's quarter: demand, pods in service and chips running per (region, chip), burst
    pods, utilisation, costs (USD/h, USD), unserved rps and the check's status and violations."""
    labels = p.labels
    node = tree.nodes[n]
    status, found, unserved, running, per_hour, qpools, qwarm = check
    rows = []
    total_chips = 0
    for r in sorted(p.base.regions):
        for k in sorted(p.base.chips):
            pods = rp.pods[(n, r, k)]
            blk = rp.model.m.node[n]
            used = sum(rp.model.data[n].slices[c].chips * int(round(pyo.value(blk.v_slices[rr, t, ro, c])))
                       for (rr, t, ro, c) in blk.POOLS if rr == r and rp.model.data[n].config_chip(c) == k)
            used += sum(rp.model.data[n].slices[c].chips * int(round(pyo.value(blk.v_warm[r, c])))
                        for c in rp.model.data[n].CONFIGS if rp.model.data[n].config_chip(c) == k)
            if pods or used:
                rows.append(PodsInService(region=r, chip=k, pods=pods, chips=pods * p.base.chips[k].chips_per_pod, chips_running=used))
            total_chips += pods * p.base.chips[k].chips_per_pod
    burst = [BurstUse(region=r, chip=k, pods=v, chips=v * p.base.chips[k].chips_per_pod)
             for (nn, r, k), v in sorted(rp.burst.items()) if nn == n and v > 0]
    return QuarterResult(
        quarter=labels[node.quarter], node=node.label, demand_multiplier={r: r6(v) for r, v in node.demand.items()},
        peak_rps={r: r6(p.base.regions[r].peak_rps * v) for r, v in node.demand.items()}, pods_in_service=rows, pools=qpools, warm_pool=qwarm,
        utilisation=r6(running / (total_chips + sum(b.chips for b in burst))) if total_chips + sum(b.chips for b in burst) else None, fleet_cost_per_hour_usd=r6(per_hour),
        shed_cost_per_hour_usd=r6(shed_per_hour(rp.model.m.node[n])),
        run_cost_usd=r6(rp.run_cost[n]), order_cost_usd=r6(rp.order_cost[n]), unserved_rps=r6(unserved[0]),
        unserved_in_region_loss_rps=r6(unserved[1]),
        unserved_cost_usd=r6(rp.unserved_cost[n]), burst=burst, burst_cost_usd=r6(rp.burst_cost.get(n, 0.0)),
        plan_status=status, violations=found)


def order_sheets(p: PurchaseProblem, tree: Tree, rp, now: int, scenarios: list[ScenarioPlan]) -> tuple[list, list, list, str | None]:
    """The orders of the plan ``rp`` from node ``now``: (the order sheet -- the orders to place
    now --, the contingent orders of later nodes, the fixed orders of earlier quarters, and why
    there is nothing to order now or None), each order with the scenarios' quarters that need it."""
    labels = p.labels
    everyone = list(tree.scenarios)
    order_sheet = [order_doc(p, rp, key) for key in sorted(rp.orders) if key[0] == now and rp.orders[key] > 0]
    order_sheet = [o.model_copy(update={"needed": order_need(o, everyone, scenarios, labels)}) for o in order_sheet]
    contingency, fixed = [], []
    for key in sorted(rp.orders, key=lambda k: (tree.nodes[k[0]].quarter, tree.nodes[k[0]].label, k[1], k[2])):
        n = key[0]
        if n == now or rp.orders[key] <= 0:
            continue
        through = sorted(s for s, ids in tree.scenarios.items() if n in ids)
        doc = order_doc(p, rp, key, ContingentOrder, node=tree.nodes[n].label, scenarios=through)
        doc = doc.model_copy(update={"needed": order_need(doc, through, scenarios, labels)})
        (fixed if tree.nodes[n].quarter < tree.nodes[now].quarter else contingency).append(doc)
    why_none = None if order_sheet else nothing_to_order_why(
        labels[tree.nodes[now].quarter], [(t.region, t.chip, labels[t.delivery]) for t in p.orders if t.quarter == tree.nodes[now].quarter],
        contingency, labels)
    return order_sheet, contingency, fixed, why_none


def model_size(m, tree: Tree) -> dict:
    """The deterministic equivalent's size: free variables, integer ones, active constraints, nodes and scenarios."""
    nv = sum(1 for v in m.component_data_objects(pyo.Var) if not v.fixed)
    ni = sum(1 for v in m.component_data_objects(pyo.Var) if not v.fixed and (v.is_integer() or v.is_binary()))
    nc = sum(1 for _ in m.component_data_objects(pyo.Constraint, active=True))
    return {"variables": nv, "integer_variables": ni, "constraints": nc, "nodes": len(tree.nodes), "scenarios": len(tree.scenarios)}


def plan_notes(p: PurchaseProblem, rp, first, adopted: tuple | None, eev, replan: Replan | None) -> list[str]:
    """The plan's notes: the instance's, how costs count, which plan was adopted (``rp``, the
    recourse solve's ``first`` or the EEV's; ``adopted`` is (the recourse plan's cost USD, its
    bound) when the EEV's plan was cheaper, ``eev`` the EEV solve), how the pod-floor
    decomposition and HiGHS's starts went, and the re-plan's terms."""
    notes = list(p.notes)
    notes.append("costs are discounted to the first quarter; the fleet of a quarter is sized for its peak and its chip-hours are charged "
                 f"for all {HOURS_PER_QUARTER:g} hours of the quarter at the base instance's prices")
    notes.append("no salvage value: a capital pod's price and a committed term's payments count in full, also past the horizon")
    if rp is not first:
        notes.append(f"the plan is the mean-forecast plan's root orders with every later order re-optimised on the tree (the EEV solve): "
                     f"{rp.result.objective:,.0f} USD, {adopted[0] - rp.result.objective:,.0f} USD less than the recourse solve's plan "
                     f"({adopted[0]:,.0f} USD, which stopped at its MIP gap); the lower bound is the recourse solve's; VSS is then 0 "
                     "(the interval says by how much the true figure can differ)")
    elif adopted is not None:
        notes.append(f"the mean-forecast plan's root orders, re-optimised on the tree (EEV), cost {adopted[0] - eev.result.objective:,.0f} USD less "
                     "than this plan, which stopped at its MIP gap; not adopted: no time was left to verify it (raise --time-limit)")
    if first.floor is not None:
        notes.append(_floor_note(first))
    notes += _start_notes(first)
    if replan is not None:
        notes.append(f"a re-plan at {replan.now} after demand followed {replan.path}: the orders placed before {replan.now} are the previous plan's, "
                     "fixed; the expected cost includes the realised quarters; probabilities are conditional on the path seen; no EEV or "
                     "wait-and-see figures (run the file without --fix-orders for them)")
        if not replan.same_file:
            notes.append("the purchase file is not the one the previous plan was solved for (its purchase_hash differs: the file was edited since "
                         "-- a re-forecast demand tree, a new supply quote -- or --risk differs); the orders placed were checked against this file's supply")
    return notes


def _floor_note(first) -> str:
    """What the pod-floor decomposition of the recourse solve ``first`` did and proved."""
    fl = first.floor
    ph_fixed = first.method is not None  # under --method ph the decomposition evaluated PH's orders, fixed: its bound is of that tree
    return (("with PH's consensus orders fixed, " if ph_fixed else "") + f"pod-floor decomposition ("
            + ("from the risk-neutral plan, whose floors and node fleets it reused; " if fl.seeded else "")
            + f"{fl.snapshots} node solves, {fl.rounds} master solve(s), {fl.nogoods} no-good "
            f"and {fl.optimality_cuts} cost cut(s), {fl.floors} floors kept as valid inequalities): "
            + (f"a plan of {fl.upper_usd:,.0f} USD and a proven lower bound of {fl.lower_usd:,.0f} USD ({fl.gap:.2%})"
               + (" with those orders fixed (not a bound of the tree: PH's bound is the plan's)" if ph_fixed else "")
               + ("; HiGHS was not run on the whole tree" if first.solves == 0 else
                  "; offered to HiGHS as its first plan")
               + ("" if fl.proven else f"; {fl.unproven_nodes} node fleet solve(s) ended without a fleet or a proof there is none (no fleet in "
                  f"{FLEET_GIVE_UP_NODES:,} branch-and-bound nodes, or the {COST_MAX_NODES:,}-node work limit or the time limit): "
                  "their no-good cuts are a heuristic's, so the bound is the last one before them")
               if fl.complete else f"no plan ({fl.why}); HiGHS solved the tree"))


def _start_notes(first) -> list[str]:
    """The first plan HiGHS was offered on the recourse solve ``first``: the restricted tree's
    or the risk-neutral plan, and the per-node snapshot start."""
    notes = []
    if first.restricted_usd is not None:
        notes.append(f"HiGHS was offered a first plan of {first.restricted_usd:,.0f} USD: "
                     + ("the risk-neutral plan (the same tree, the expected cost as the objective; a plan of this tree too); "
                        if first.start_from == "neutral" else
                        "the plan of the same tree with every request served, no burst pod and the expected cost as the objective, by the "
                        "pod-floor decomposition (a plan of this tree too); ")
                     + ("HiGHS found none better, so it is the plan" if first.result.objective is None
                        or first.result.objective >= first.restricted_usd * (1 - 1e-7) - 1e-6
                        else f"HiGHS improved on it by {first.restricted_usd - first.result.objective:,.0f} USD"))
    if first.start is not None:
        st = first.start
        notes.append(f"HiGHS was offered a first plan built from {st.snapshots} per-node snapshot solves ("
                     + ("feasible as built" if st.complete else "incomplete: a snapshot found no fleet in its time or a delivery cap cut an order") + ")")
    return notes
