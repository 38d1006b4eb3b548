"""A first incumbent for the deterministic equivalent, built from per-node snapshot solves.

HiGHS alone may spend its whole time limit on a Gemini-scale tree without finding a plan.
This builds one, greedy first (the design's "greedy first, then exact"), and offers it to
HiGHS as a MIP start (``highspy.Highs.setSolution``, through
:func:`fleetplan.solvers.highs.solve_highs`'s warm start):

1. **Snapshots.** Every node's sizing block is solved alone: the same ModelData (so the
   same variables as in the tree), the pods of each (region, chip) at most what can be in
   service there (:func:`~fleetplan.purchase.model.pods_upper_bound`), the objective the
   block's fleet cost per hour plus, for a chip that can be ordered, each pod at its
   cheapest per-quarter order price spread over the hours of a quarter (so a snapshot does
   not take pods it would have to buy to save chip-hours). Its pods ``need[n, r, k]`` are
   the pods its fleet uses.
2. **Non-anticipative orders.** Nodes in breadth-first order; the order placed at node a
   (quarter q, lead time L) is the only one delivered in quarter q + L on a's subtree, so
   it is the largest shortfall over a's descendants at q + L of ``need`` against what is
   already in service there (the starting fleet, earlier deliveries, minus terms that have
   ended), raised to the minimum order and cut at the delivery cap.
3. **The start.** Order, inventory and binary values from 2, each block's values from its
   snapshot (its pods set to the inventory: more pods than it uses keep a fleet feasible).

The start is feasible when every snapshot found a fleet and no delivery cap cut an order;
otherwise HiGHS checks it, refuses it and searches as before. Raises nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import pyomo.environ as pyo

from fleetplan.models.sizing.build import add_sizing_families, shortfall_vars
from fleetplan.purchase.io import HOURS_PER_QUARTER, PurchaseProblem
from fleetplan.purchase.model import PurchaseModel, allow_partial_service, pods_needed, pods_upper_bound
from fleetplan.purchase.schema import PricedUnserved
from fleetplan.solvers.base import SolveOptions
from fleetplan.solvers.highs import solve_highs

__all__ = ["StartReport", "snapshot_start", "SNAPSHOT_GAP"]

#: Relative MIP gap of each snapshot solve (a start needs a fleet, not the best one).
SNAPSHOT_GAP = 0.05
#: At most this share of the time left goes to the snapshots; the tree's solve gets the rest.
START_SHARE = 0.5


@dataclass
class StartReport:
    """What the start found: ``need[(n, r, k)]`` pods per node from its snapshot, the
    orders it places, whether every snapshot solved and no cap cut an order, seconds."""

    need: dict
    orders: dict
    complete: bool
    seconds: float
    snapshots: int
    #: nodes whose snapshot is infeasible even with the most pods they can have (hard policy:
    #: then the tree is infeasible), with those pod bounds
    infeasible: dict = field(default_factory=dict)
    #: the wall clock cut it: a snapshot's share of the time (or the start's) passed before its solve ended
    clocked: bool = False


def _pod_price_per_hour(p: PurchaseProblem, r: str, k: str) -> float:
    """The cheapest order of chip k in region r, per pod per hour of service (USD/h):
    its discounted cost over the quarters it serves within the horizon (a committed term,
    or to the horizon's end for a capital buy), over 2,191.5 h a quarter."""
    nq = len(p.labels)
    best = None
    for t in p.orders:
        if t.region == r and t.chip == k:
            served = min(t.service_quarters or nq, nq - t.delivery)
            if served > 0:
                v = t.cost_usd_per_pod / (served * HOURS_PER_QUARTER)
                best = v if best is None else min(best, v)
    return best or 0.0


def snapshot_start(p: PurchaseProblem, pm: PurchaseModel, opts: SolveOptions, deadline: float | None) -> StartReport:
    """Set every variable of ``pm.m`` to the snapshot-built plan (see the module docstring)
    and return what was done. ``deadline`` (perf_counter seconds) bounds the snapshots."""
    t0 = time.perf_counter()
    budget = float("inf") if deadline is None else START_SHARE * max(deadline - t0, 0.0)
    m, tree = pm.m, pm.tree
    regions, chips = sorted(p.base.regions), sorted(p.base.chips)
    hard = not isinstance(p.spec.policy.unserved, PricedUnserved)
    price = {(r, k): _pod_price_per_hour(p, r, k) for r in regions for k in chips}
    need: dict = {}
    values: dict[int, dict[str, float]] = {}
    done: dict = {}
    infeasible: dict = {}
    complete = True
    clocked = False
    snaps = 0
    todo = [n.id for n in tree.nodes]
    for i, n in enumerate(todo):
        node = tree.nodes[n]
        bound = {(r, k): pods_upper_bound(p, tree, n, r, k) for r in regions for k in chips}
        key = (id(pm.data[n]), tuple(sorted(bound.items())))
        if key not in done:
            left = None if deadline is None else deadline - time.perf_counter()
            if left is not None and (left < 1.0 or time.perf_counter() - t0 >= budget):
                complete, clocked = False, True
                break
            s = pyo.ConcreteModel()
            s.b = pyo.Block()
            add_sizing_families(s.b, pm.data[n])
            for (r, k), ub in bound.items():
                s.b.v_new_pods[r, k].setub(ub)
            if hard:
                for v in shortfall_vars(s.b):
                    v.fix(0.0)
            else:
                allow_partial_service(s.b)
            s.obj = pyo.Objective(expr=sum(s.b.cost_terms) + sum(price[(r, k)] * s.b.v_new_pods[r, k] for r in regions for k in chips))
            # the snapshots together take at most START_SHARE of the time left when they begin: the tree's solve needs the rest
            share = None if left is None else max(1.0, (min(left, budget - (time.perf_counter() - t0))) / max(1, len(todo) - i))
            res = solve_highs(s, replace(opts, mip_gap=max(opts.mip_gap, SNAPSHOT_GAP), time_limit_s=share), warm_start=False)
            snaps += 1
            clocked = clocked or res.termination == "time_limit"
            if res.has_incumbent:
                vals = {v.getname(fully_qualified=True, relative_to=s.b): v.value for v in s.b.component_data_objects(pyo.Var)}
                done[key] = (vals, pods_needed(s.b, pm.data[n]))
            else:
                done[key] = None
                if res.termination == "infeasible":
                    done[key] = ("infeasible", bound)
        got = done[key]
        if got is None or got[0] == "infeasible":
            complete = False
            if got is not None:
                infeasible[n] = got[1]
                if hard:  # the tree is infeasible: no start to build
                    return StartReport(need, {}, False, time.perf_counter() - t0, snaps, infeasible, clocked)
            continue
        values[n] = got[0]
        for (r, k), v in got[1].items():
            need[(n, r, k)] = v
    # non-anticipative orders, breadth-first
    orders: dict = {key: 0 for key in pm.terms}
    in_service: dict = {}

    def stock(n: int, r: str, k: str) -> int:
        q = tree.nodes[n].quarter
        s = p.installed[(r, k)][q]
        for a in tree.ancestors_or_self(n):
            t = pm.terms.get((a, r, k))
            if t is not None and t.delivery <= q and (t.service_quarters is None or q < t.delivery + t.service_quarters):
                s += orders[(a, r, k)]
        return s

    desc: dict[int, list[int]] = {n.id: [] for n in tree.nodes}
    for n in tree.nodes:
        for a in tree.ancestors_or_self(n.id):
            desc[a].append(n.id)
    fixed = {key for key in pm.terms if m.v_order_pods[key].fixed}
    # what must have arrived by each node (cumulative, per region and chip), pulled earlier where
    # a delivery cap (shared by a supply entry's regions) cannot take the step in one quarter
    req: dict = {}
    for (n, r, k), v in need.items():
        req[(n, r, k)] = max(0, v - p.installed[(r, k)][tree.nodes[n].quarter])
    entries: dict = {}
    for t in pm.terms.values():
        entries.setdefault(t.entry, set()).add((t.region, t.chip))
    for n in sorted((x.id for x in tree.nodes), key=lambda x: -tree.nodes[x].quarter):
        par = tree.nodes[n].parent
        if par is None:
            continue
        for e, rk in entries.items():
            cap = p.delivery_cap.get((e, tree.nodes[n].quarter), 0)
            step = {key: req.get((n,) + key, 0) - req.get((par,) + key, 0) for key in rk}
            excess = sum(max(v, 0) for v in step.values()) - cap
            while excess > 0:
                key = max(sorted(step), key=lambda kk: step[kk])
                if step[key] <= 0:
                    break
                req[(par,) + key] = req.get((par,) + key, 0) + 1
                step[key] -= 1
                excess -= 1
    for key in sorted(pm.terms, key=lambda kk: (tree.nodes[kk[0]].quarter, kk)):
        a, r, k = key
        t = pm.terms[key]
        if key in fixed:
            orders[key] = int(round(m.v_order_pods[key].value))
            continue
        short = 0
        for dn in desc[a]:
            if tree.nodes[dn].quarter == t.delivery and (dn, r, k) in req:
                short = max(short, req[(dn, r, k)] + p.installed[(r, k)][t.delivery] - stock(dn, r, k))
        if short > 0:
            orders[key] = max(short, t.min_order_pods)
    # a delivery cap still exceeded (the requirement could not be pulled early enough): cut, and say so
    for n in tree.nodes:
        for e, rk in entries.items():
            keys = [(a, r, k) for a in tree.ancestors_or_self(n.id) for (r, k) in rk
                    if (a, r, k) in pm.terms and pm.terms[(a, r, k)].delivery == n.quarter and (a, r, k) not in fixed]
            cap = p.delivery_cap.get((e, n.quarter), 0)
            while sum(orders[kk] for kk in keys) > cap:
                kk = max(keys, key=lambda x: orders[x])
                orders[kk] = orders[kk] - 1 if orders[kk] - 1 >= pm.terms[kk].min_order_pods else 0
                complete = False
    # the start's values
    for key, v in orders.items():
        if not m.v_order_pods[key].fixed:
            m.v_order_pods[key].set_value(v)
        if key in m.SEMI and not m.v_order_on[key].fixed:
            m.v_order_on[key].set_value(1 if v > 0 else 0)
    for (n, r, k) in m.STOCK:
        in_service[(n, r, k)] = stock(n, r, k)
        m.v_pods_in_service[n, r, k].set_value(in_service[(n, r, k)])
    for n in m.NODES:
        b = m.node[n]
        vals = values.get(n)
        for v in b.component_data_objects(pyo.Var):
            if v.fixed:
                continue
            name = v.getname(fully_qualified=True, relative_to=b)
            if vals is not None and vals.get(name) is not None:
                v.set_value(vals[name], skip_validation=True)
            elif v.value is None:
                v.set_value(0.0 if v.lb is None or v.lb <= 0 else v.lb, skip_validation=True)
        for r in regions:
            for k in chips:
                b.v_new_pods[r, k].set_value(in_service[(n, r, k)], skip_validation=True)
                if vals is not None and (n, r, k) in need and in_service[(n, r, k)] < need[(n, r, k)]:
                    complete = False
    return StartReport(need, orders, complete, time.perf_counter() - t0, snaps, infeasible, clocked)
