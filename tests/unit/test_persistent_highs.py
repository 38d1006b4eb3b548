"""PersistentHighs (fleetplan/solvers/persistent.py): a model written once gives what a fresh
write gives after an objective, a bound or a mutable parameter changes."""

from __future__ import annotations

import pyomo.environ as pyo
import pytest

from fleetplan.solvers.base import SolveOptions
from fleetplan.solvers.highs import solve_highs
from fleetplan.solvers.persistent import PersistentHighs

EXACT = SolveOptions(mip_gap=0.0)


def model():
    m = pyo.ConcreteModel()
    m.x = pyo.Var(range(3), domain=pyo.NonNegativeIntegers, bounds=(0, 10))
    m.y = pyo.Var(bounds=(0, 5))
    m.f = pyo.Var(domain=pyo.NonNegativeReals)
    m.f.fix(1.5)  # a fixed variable is a constant of the rows and the objective
    m.p = pyo.Param(mutable=True, initialize=2.0)
    m.cap = pyo.Constraint(expr=m.x[0] + m.p * m.x[1] + 3 * m.x[2] + m.y >= 7.5 + m.f)
    m.rng = pyo.Constraint(expr=pyo.inequality(1, m.x[0] - m.x[1] + m.y, 6))
    m.eq = pyo.Constraint(expr=m.x[2] == m.y - m.p + 2 + 0 * m.f)
    m.obj = pyo.Objective(expr=4 * m.x[0] + 5 * m.x[1] + 7 * m.x[2] + m.y + 3)
    return m


def fresh(m, expr):
    m.del_component(m.obj)
    m.obj = pyo.Objective(expr=expr)
    res = solve_highs(m, EXACT, warm_start=False)
    return res.objective, [pyo.value(v) for v in (m.x[0], m.x[1], m.x[2], m.y)]


def test_objective_bounds_and_rows_change_in_place():
    m = model()
    ph = PersistentHighs(m)
    steps = [
        (lambda: None, lambda: 4 * m.x[0] + 5 * m.x[1] + 7 * m.x[2] + m.y + 3),
        (lambda: None, lambda: m.x[0] + m.x[1] + m.x[2] + 2 * m.f),
        (lambda: ph.set_bounds(m.x[0], 0, 1), lambda: 2 * m.x[0] + 3 * m.x[1] + m.x[2]),
        (lambda: (m.p.set_value(0.5), ph.update_rows([m.cap, m.eq])), lambda: 2 * m.x[0] + 3 * m.x[1] + m.x[2]),
        (lambda: ph.set_bounds(m.y, 1, None), lambda: m.x[1] + 10 * m.y - m.x[0]),
    ]
    for change, objective in steps:
        change()
        ph.set_objective(objective())
        res = ph.solve(EXACT)
        got = (res.objective, [pyo.value(v) for v in (m.x[0], m.x[1], m.x[2], m.y)])
        want = fresh(m, objective())
        assert res.has_incumbent and res.termination == "optimal"
        assert got[0] == pytest.approx(want[0], abs=1e-9) and res.bound == pytest.approx(want[0], abs=1e-9)
        assert got[1] == pytest.approx(want[1], abs=1e-9)


def test_infeasible_after_a_bound_and_a_variable_outside_the_model():
    m = model()
    ph = PersistentHighs(m)
    for j in range(3):
        ph.set_bounds(m.x[j], 0, 0)
    ph.set_bounds(m.y, 0, 1)
    ph.set_objective(m.x[0])
    assert ph.solve(EXACT).termination == "infeasible"
    m.z = pyo.Var()
    with pytest.raises(ValueError, match="in no constraint"):
        ph.set_objective(m.z)
