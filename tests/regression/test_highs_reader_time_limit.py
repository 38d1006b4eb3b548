"""A time limit shorter than HiGHS takes to read the model crashed the solve (issue 17's
re-pinned Trillium made it visible: its candidate tables take seconds, so
``solve gemini-trillium --time-limit 0.5`` left HiGHS the 0.05 s floor). HiGHS's MPS
reader honours ``time_limit`` too; when it runs out it leaves an empty model, ``run()``
then reports 'Empty', which the driver took for a solved model without variables: it
reported an incumbent and evaluated the objective over variables that had no values
(``ValueError: No value for uninitialized VarData``, exit 1 instead of 3). The model is
now read before the limit is set, and 'Empty' is a solution only when the model has no
columns."""

from __future__ import annotations

import pyomo.environ as pyo

from fleetplan.solvers.base import SolveOptions
from fleetplan.solvers.highs import solve_highs

#: columns enough that reading them takes well over the 10 ms floor of the time limit on
#: any machine (0.14 s here, 2 cores at a load of 6)
N = 10_000


def test_a_time_limit_shorter_than_the_read_is_a_time_limit_not_a_crash():
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(N)
    m.x = pyo.Var(m.I, domain=pyo.NonNegativeIntegers, bounds=(0, 10))
    m.c = pyo.Constraint(expr=sum((i % 7 + 3) * m.x[i] for i in m.I) >= 10 * N + 1)
    m.obj = pyo.Objective(expr=sum((i % 5 + 1) * m.x[i] for i in m.I))
    r = solve_highs(m, SolveOptions(time_limit_s=0.001, mip_gap=0.0))
    if r.has_incumbent:  # HiGHS found a fleet within the limit: then every variable has its value
        assert all(m.x[i].value is not None for i in m.I)
        assert r.objective == pyo.value(m.obj)
    else:
        assert r.termination == "time_limit" and r.objective is None


def test_a_model_with_every_variable_fixed_is_still_solved():
    m = pyo.ConcreteModel()
    m.x = pyo.Var(domain=pyo.NonNegativeIntegers)
    m.x.fix(3)
    m.c = pyo.Constraint(expr=m.x >= 1)
    m.obj = pyo.Objective(expr=2 * m.x)
    r = solve_highs(m, SolveOptions(time_limit_s=10.0))
    assert r.has_incumbent and r.termination == "optimal" and r.objective == 6.0
