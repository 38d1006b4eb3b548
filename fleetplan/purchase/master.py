"""The orders master of the pod-floor decomposition (:mod:`fleetplan.purchase.floors`, whose
module docstring gives the method): the floors put on the tree as rows, the tree turned into
the master and back, the master's objective and a plan's, one round's no-good and cost cuts,
and, for an infeasible master, the first quarter that cannot be served (:class:`Short`).

``blocks`` is the decomposition's ``{node id: node block}`` (each with ``bound``, ``floor``,
``run_floor`` and ``fleets``) and ``rep`` its :class:`~fleetplan.purchase.floors.FloorReport`;
``m`` is the tree's Pyomo model (:func:`fleetplan.purchase.model.build_purchase_model`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import pyomo.environ as pyo

from fleetplan.purchase.io import HOURS_PER_QUARTER, PurchaseProblem
from fleetplan.purchase.model import risk_objective
from fleetplan.purchase.schema import CVaRRisk
from fleetplan.purchase.tree import Tree
from fleetplan.solvers.base import SolveOptions
from fleetplan.solvers.highs import solve_highs


@dataclass(frozen=True)
class Short:
    """A floor no orders can reach: node ``node`` (tree index) needs at least ``floor`` pods of
    ``chip`` in ``regions`` together (its snapshot's proven fewest), and the supply lets at most
    ``most`` be in service there then (the master's maximum with no floor or cut: the starting
    fleet still in service plus every delivery the caps, lead times and minimum orders allow).
    ``chip`` None: the node's floors are each reachable but not all of them together with the
    earlier quarters' (``floor``/``most`` 0)."""

    node: int
    chip: str | None
    regions: tuple
    floor: int
    most: int


def add_floor_rows(m, blocks: dict, rep) -> list:
    """Put the floors on the tree as ``m.c_purchase_floor`` (valid inequalities, kept for
    HiGHS); returns (constraint, node, chip, regions, floor) per row, for the first-quarter
    search of an infeasible master."""
    if hasattr(m, "c_purchase_floor"):
        m.del_component(m.c_purchase_floor)
    m.c_purchase_floor = pyo.ConstraintList()
    floor_rows = []
    for n, b in blocks.items():
        for (k, sub), v in sorted(b.floor.items()):
            if v > 0:
                floor_rows.append((m.c_purchase_floor.add(sum(m.v_pods_in_service[n, r, k] for r in sub) >= v), n, k, sub, v))
                rep.floors += 1
    return floor_rows


def open_master(p: PurchaseProblem, m, tree: Tree, blocks: dict) -> None:
    """Turn the tree into the orders master: node blocks, pod rows, objective (and CVaR rows)
    off; each node's run cost theta_n (USD/h, at least its run-cost floor), the master's
    objective and its cut rows added (``fl_*``, taken off again by :func:`close_master`)."""
    for n in m.NODES:
        m.node[n].deactivate()
    m.c_purchase_pods.deactivate()
    m.obj_expected_cost_usd.deactivate()
    if hasattr(m, "c_purchase_cvar"):  # the tree's CVaR rows read the blocks' costs: the master has its own (fl_cvar)
        m.c_purchase_cvar.deactivate()
    m.fl_theta = pyo.Var(m.NODES, bounds=lambda _m, n: (blocks[n].run_floor, None))  # USD/h
    m.fl_obj = pyo.Objective(expr=master_objective(p, m, tree), sense=pyo.minimize)
    m.fl_z = pyo.VarList(domain=pyo.Binary)
    m.fl_cuts = pyo.ConstraintList()


def close_master(m) -> None:
    """Undo :func:`open_master`: the master's components removed, the tree's rows on again."""
    for c in ("fl_obj", "fl_cuts", "fl_z", "fl_theta", "fl_eta", "fl_excess", "fl_cvar"):
        if hasattr(m, c):
            m.del_component(c)
    for n in m.NODES:
        m.node[n].activate()
    m.c_purchase_pods.activate()
    m.obj_expected_cost_usd.activate()
    if hasattr(m, "c_purchase_cvar"):
        m.c_purchase_cvar.activate()


def master_objective(p: PurchaseProblem, m, tree: Tree):
    """The master's objective (USD): each node's discounted orders plus its run cost theta_n
    (USD/h) x delta_q H, weighed by ``policy.risk`` -- the expectation, or (1 - w) E + w (eta +
    sum_s p_s z_s / (1 - alpha)) with z_s >= C_s - eta (Rockafellar-Uryasev, as the tree's own
    objective, :mod:`fleetplan.purchase.model`); the CVaR's variables and rows are added to ``m``
    (``fl_eta``, ``fl_excess``, ``fl_cvar``). Each scenario's objective is non-decreasing in every
    node's run cost, so the floors and the cost cuts bound it as they bound the expectation."""
    cost = {n.id: m.e_order_cost_usd[n.id] + p.discount(n.quarter) * HOURS_PER_QUARTER * m.fl_theta[n.id] for n in tree.nodes}
    expected = sum(n.probability * cost[n.id] for n in tree.nodes)
    risk = p.spec.policy.risk
    if not isinstance(risk, CVaRRisk):
        return expected
    names = sorted(tree.scenarios)
    m.fl_eta = pyo.Var(domain=pyo.NonNegativeReals)
    m.fl_excess = pyo.Var(names, domain=pyo.NonNegativeReals)
    m.fl_cvar = pyo.Constraint(names, rule=lambda _m, s: m.fl_excess[s] >= sum(cost[n] for n in tree.scenarios[s]) - m.fl_eta)
    tail = m.fl_eta + sum(tree.scenario_probability(s) * m.fl_excess[s] for s in names) / (1.0 - risk.alpha)
    return (1.0 - risk.weight) * expected + risk.weight * tail


def plan_objective(p: PurchaseProblem, tree: Tree, order_usd: dict, fleets: dict) -> float:
    """A plan's objective (USD) from its nodes' discounted order costs ``order_usd[n]`` and
    fleets (``fleets[n][0]`` USD/h): each scenario's discounted cost, weighed by ``policy.risk``."""
    node = {n.id: order_usd[n.id] + p.discount(n.quarter) * HOURS_PER_QUARTER * fleets[n.id][0] for n in tree.nodes}
    names = list(tree.scenarios)
    costs = [sum(node[n] for n in tree.scenarios[s]) for s in names]
    return risk_objective(costs, [tree.scenario_probability(s) for s in names], p.spec.policy.risk)


def cut_round(m, tree: Tree, blocks: dict, keys: list, orderable: list, pods: dict, seen: set, nogood_rows: list, late: bool,
              rep) -> tuple[list, dict, int]:
    """One round's cuts from the node fleets at the master's ``pods``: a no-good cut (more pods
    somewhere) for a node with no fleet, a cost cut for a node whose fleet costs more than its
    run-cost floor; each (node, pods) cut once (``seen``). Returns the nodes with no fleet, the
    fleets found (by node) and the number of cost cuts added."""
    bad, fleets, cut = [], {}, 0
    for node in tree.nodes:
        b = blocks[node.id]
        x = tuple(pods[(node.id, r, k)] for (r, k) in keys)
        got = b.fleets[x]
        xs = dict(zip(keys, x))
        if x in b.clocked:
            rep.clocked(f"the fleet of node {node.label} at the master's pods of round {rep.rounds} (its solve stopped by the time limit)")
        if got is None or got == "unknown":
            bad.append(node.id)
            if (node.id, x) not in seen and not (late and got == "unknown"):
                nogood_rows.append((m.fl_cuts.add(sum(grow_vars(m, blocks, orderable, node.id, xs)) >= 1), node.id))  # no-good: more pods somewhere
                rep.nogoods += 1
                if got == "unknown" and rep.proven:
                    # no fleet found in COST_MAX_NODES nodes and no proof there is none: the cut is a heuristic's;
                    # the master's bounds from here on are not bounds of the tree (the last one is kept)
                    rep.proven = False
                    rep.unproven_nodes += 1
                elif got == "unknown":
                    rep.unproven_nodes += 1
        else:
            fleets[node.id] = got
            beta = got[3]
            if (node.id, x) not in seen and beta > b.run_floor + 1e-6:
                # cost cut: with no more pods than x anywhere, the node runs at no less than beta
                zs = grow_vars(m, blocks, orderable, node.id, xs)
                m.fl_cuts.add(m.fl_theta[node.id] >= beta - (beta - b.run_floor) * sum(zs))
                rep.optimality_cuts += 1
                cut += 1
        seen.add((node.id, x))
    return bad, fleets, cut


def grow_vars(m, blocks: dict, orderable: list, n: int, xs: dict) -> list:
    """Binaries z_j, one per orderable (region, chip) of node n that can exceed xs: z_j = 1 only with more pods."""
    zs = []
    for (r, k) in orderable:
        if xs[(r, k)] < blocks[n].bound[(r, k)]:
            z = m.fl_z.add()
            m.fl_cuts.add(m.v_pods_in_service[n, r, k] >= (xs[(r, k)] + 1) * z)
            zs.append(z)
    return zs


def first_short(m, tree: Tree, floor_rows: list, nogood_rows: list, opts: SolveOptions, deadline: float | None) -> list[Short]:
    """The first quarter q whose nodes cannot meet their floors and no-good cuts together with
    every earlier node's (the master with the rows of the nodes up to q, for q = 0, 1, ...),
    and at q each floor the supply alone cannot reach (:class:`Short`; one with ``chip`` None
    per node of q when none alone is out of reach). Runs on the master of
    :func:`~fleetplan.purchase.floors.floor_decomposition` (node blocks off) and leaves every row active again. Empty
    when a master solve ends without a verdict (the time limit)."""
    rows = [(c, n) for c, n, *_ in floor_rows] + list(nogood_rows)
    quarter = {nd.id: nd.quarter for nd in tree.nodes}

    def solve(on) -> object:
        for c, n in rows:
            (c.activate if on(n) else c.deactivate)()
        left = None if deadline is None else max(0.5, deadline - time.perf_counter())
        return solve_highs(m, replace(opts, mip_gap=1e-9, time_limit_s=left), warm_start=False)

    def infeasible(res) -> bool:
        return res.termination in ("infeasible", "infeasible_or_unbounded")

    out: list[Short] = []
    try:
        first = None
        for q in sorted(set(quarter.values())):
            res = solve(lambda n, q=q: quarter[n] <= q)
            if infeasible(res):
                first = q
                break
            if not res.has_incumbent:
                return []
        if first is None:
            return []
        at = sorted(n for n, q in quarter.items() if q == first)
        # the nodes of that quarter that cannot be served even alone (with the earlier quarters'); all of them when none alone
        alone = [n for n in at if infeasible(solve(lambda nn, n=n: quarter[nn] < first or nn == n))] or at
        m.fl_obj.deactivate()
        for n in alone:
            found = False
            for _c, nn, k, sub, v in floor_rows:
                if nn != n:
                    continue
                m.fl_most = pyo.Objective(expr=sum(m.v_pods_in_service[n, r, k] for r in sub), sense=pyo.maximize)
                try:
                    res = solve(lambda _n: False)  # no floor or cut: the supply alone
                finally:
                    m.del_component(m.fl_most)
                if res.termination == "optimal" and res.objective is not None and v > res.objective + 1e-6:
                    out.append(Short(n, k, tuple(sub), int(v), int(round(res.objective))))
                    found = True
            if not found:
                out.append(Short(n, None, (), 0, 0))
        return out
    finally:
        if hasattr(m, "fl_most"):
            m.del_component(m.fl_most)
        m.fl_obj.activate()
        for c, _n in rows:
            c.activate()
