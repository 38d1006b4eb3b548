"""A plan that was found was lost to the time limit (newcomer trial): `fleetplan solve
gemini-ironwood --time-limit 6` on a loaded machine ended with exit 3 "a plan was found but its
extraction and verification did not finish within --time-limit 6 s". The solver's deadline was
max(end - reserve, t2 + half of what was left): when the reserve (the time to extract and verify
the plan) was more than half of what was left, the half rule won and the solver -- holding a
fleet already -- ran into the time the extraction needed. Now a solve stops where the reserve
begins once it holds an incumbent (``SolveOptions.incumbent_deadline``, HiGHS's MIP interrupt
callback); only a solve without one may still run into the reserve.

Deterministic: the reserve is made to begin in the past (a recorded post-solve cost larger than
the limit), the HiGHS tests hand it a deadline already past; no assertion depends on the
machine's speed or load."""

from __future__ import annotations

import time

import numpy as np
import pyomo.core as pyo
import pytest

import fleetplan.sizing.post_solve_cost as cost
import fleetplan.sizing.driver as sizing
from fleetplan.instance.io import parse_instance
from fleetplan.solvers.base import SolveOptions
from fleetplan.solvers.highs import solve_highs
from tests.conftest import tiny_data


def _market_split(rows: int = 4, n: int = 30, seed: int = 1) -> pyo.ConcreteModel:
    """A market-split MIP (Cornuejols-Dawande): binary x with A x + s+ - s- = b, min sum(s);
    branch and bound needs many nodes (seconds to minutes), so a solve cut at once is seen
    by its status. Every variable holds a feasible start (x = 0, s+ = b)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 100, size=(rows, n))
    b = a.sum(axis=1) // 2
    m = pyo.ConcreteModel()
    m.x = pyo.Var(range(n), domain=pyo.Binary, initialize=0)
    m.sp = pyo.Var(range(rows), domain=pyo.NonNegativeReals, initialize=lambda m, i: float(b[i]))
    m.sm = pyo.Var(range(rows), domain=pyo.NonNegativeReals, initialize=0.0)
    m.c = pyo.Constraint(range(rows), rule=lambda m, i: sum(int(a[i, j]) * m.x[j] for j in range(n)) + m.sp[i] - m.sm[i] == int(b[i]))
    m.obj = pyo.Objective(expr=sum(m.sp[i] + m.sm[i] for i in range(rows)))
    return m


def test_highs_holding_a_start_stops_at_the_incumbent_deadline():
    m = _market_split()
    start = float(pyo.value(m.obj))
    now = time.monotonic()
    res = solve_highs(m, SolveOptions(deadline=now + 60.0, incumbent_deadline=now - 1.0))
    # stopped by the callback (HiGHS's 'Interrupted by user'), not at its 60 s time limit nor at the optimum
    assert res.solution_status == "Interrupted by user" and res.termination == "time_limit"
    assert res.has_incumbent and res.objective <= start + 1e-9


def test_highs_without_an_incumbent_runs_until_it_has_one():
    m = _market_split()
    for v in m.component_data_objects(pyo.Var):
        v.set_value(None, skip_validation=True)  # no warm start
    now = time.monotonic()
    res = solve_highs(m, SolveOptions(deadline=now + 60.0, incumbent_deadline=now - 1.0), warm_start=False)
    assert res.has_incumbent and res.solution_status == "Interrupted by user"


@pytest.fixture
def fresh_records(monkeypatch):
    monkeypatch.setattr(cost, "_MEMORY", {})
    monkeypatch.setattr(cost, "_disk", lambda: None)


@pytest.mark.parametrize("pods", [False, True])
def test_a_solve_holding_an_incumbent_stops_where_the_reserve_begins(fresh_records, monkeypatch, pods):
    """The reserve (1.2 x 1000 s of recorded extraction and verification + 0.2 s) is longer than
    the 600 s limit: the half rule gives the solves ~300 s, but every solve stops at once when it
    holds an incumbent, and the plan is extracted and verified."""
    inst = parse_instance(tiny_data(failover={"n_minus_1": True}) if pods else tiny_data(), f"incumbent-reserve-{pods}")
    cost.record(inst, False, 1000.0)
    monkeypatch.setattr(cost, "slowdown", lambda wall, cpu: 1.0)
    real = sizing._backend("highs")
    seen: list[SolveOptions] = []

    def backend(m, opts, **kw):
        seen.append(opts)
        return real(m, opts, **kw)

    monkeypatch.setattr(sizing, "_backend", lambda name: backend)
    began = time.monotonic()
    out = sizing.solve(inst, SolveOptions(solver="highs", time_limit_s=600))
    assert out.plan is not None and out.plan.status == "verified" and seen
    if pods:  # no time for the pod stage after the reserve: the plain sizing's plan, saying so
        assert any(n.startswith("NOT SIZED WITH ITS PODS") for n in out.plan.diagnostics)
    reserve_starts = began + 600 - (sizing.POST_SOLVE_RESERVE * out.timings_s["reserve_basis"] + 0.2)
    assert reserve_starts < began  # the reserve is the whole limit ...
    assert seen[0].deadline > began + 100  # ... so a solve without an incumbent keeps half of it (with pods, 40% of that)
    for o in seen:  # ... and one with an incumbent stops at once (before the fix: at its deadline)
        assert o.incumbent_deadline is not None and o.incumbent_deadline <= reserve_starts + 0.5  # (solve starts its clock after `began`)
