"""fleetplan.solvers.give_up: a MIP solve without a solution after N branch-and-bound nodes
stops there; one that has a solution is left alone; the next solve on the same HiGHS runs
in full (issue 41: the purchase decomposition's node fleets)."""

from __future__ import annotations

import pyomo.environ as pyo

from fleetplan.solvers import persistent
from fleetplan.solvers.base import SolveOptions
from fleetplan.solvers.give_up import GiveUp

W = [1031, 1523, 2011, 2503, 3001, 3511, 4001, 4513, 1103, 1709, 2111, 2707]


def _subset_sum(target: int) -> persistent.PersistentHighs:
    """Fewest of the weights W summing to ``target`` exactly: 14862 has a solution (6 weights),
    14863 none (HiGHS proves it in ~250 nodes, finding nothing on the way)."""
    m = pyo.ConcreteModel()
    m.x = pyo.Var(range(len(W)), domain=pyo.Binary)
    m.c = pyo.Constraint(expr=sum(w * m.x[i] for i, w in enumerate(W)) == target)
    m.o = pyo.Objective(expr=sum(m.x[i] for i in range(len(W))))
    return persistent.PersistentHighs(m)


def _nodes(h: persistent.PersistentHighs) -> int:
    return int(h.h.getInfo().mip_node_count)


def test_no_solution_in_n_nodes_stops_the_solve_near_n():
    h = _subset_sum(14863)
    full = h.solve(SolveOptions(mip_gap=0.0))
    assert full.termination == "infeasible" and _nodes(h) > 100
    g = GiveUp(h.h)
    g.start(5)
    res = h.solve(SolveOptions(mip_gap=0.0))
    assert g.fired and not res.has_incumbent
    assert 5 <= _nodes(h) < 50


def test_the_solve_after_a_given_up_one_runs_in_full():
    # HiGHS keeps the callback's interrupt flag between runs: without the reset, every later solve on the same
    # HiGHS (the block's next fleet or floor) ended at once, 'interrupted by user', with nothing
    h = _subset_sum(14863)
    g = GiveUp(h.h)
    g.start(5)
    h.solve(SolveOptions(mip_gap=0.0))
    assert g.fired
    g.start(None)
    res = h.solve(SolveOptions(mip_gap=0.0))
    assert not g.fired and res.termination == "infeasible" and _nodes(h) > 100


def test_a_solve_with_a_solution_is_untouched():
    h = _subset_sum(14862)
    plain = h.solve(SolveOptions(mip_gap=0.0))
    nodes = _nodes(h)
    g = GiveUp(h.h)
    g.start(3)
    res = h.solve(SolveOptions(mip_gap=0.0))
    assert not g.fired
    assert (res.termination, res.objective, _nodes(h)) == (plain.termination, plain.objective, nodes) == ("optimal", 6.0, nodes)


def test_a_stalled_search_stops_with_its_solution():
    # 14862: the fewest weights (6) are found early and the bound (5) then sits below them for ~50 nodes; a
    # stall of 10 nodes without the gap closing by 1% of itself ends the search there, its solution kept
    h = _subset_sum(14862)
    plain = h.solve(SolveOptions(mip_gap=0.0))
    nodes = _nodes(h)
    g = GiveUp(h.h)
    g.start(None, 10)
    res = h.solve(SolveOptions(mip_gap=0.0))
    assert g.fired and res.has_incumbent and res.objective == plain.objective == 6.0
    assert 10 <= _nodes(h) < nodes
