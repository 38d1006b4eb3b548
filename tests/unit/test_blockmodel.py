"""fleetplan.solvers.blockmodel.BlockModel: a Pyomo model written to HiGHS's arrays once and
solved under other states -- columns fixed since (bounds_now), another objective (costs), a
row's bound moved (set_row_upper), fixed columns taken out as constants (drop_fixed). Each
checked against the answer worked out by hand on a two-block knapsack."""

from __future__ import annotations

import pyomo.core as pyo
import pytest

from fleetplan.solvers.blockmodel import BlockModel


def _model():
    """Two independent blocks: block a covers 7 units with items of size 3 (cost 4) and 2
    (cost 3); block b covers 5 with items of size 5 (cost 6) and 1 (cost 1)."""
    m = pyo.ConcreteModel(name="two-blocks")
    m.x = pyo.Var(["a3", "a2", "b5", "b1"], domain=pyo.NonNegativeIntegers, bounds=(0, 10))
    m.cover_a = pyo.Constraint(expr=3 * m.x["a3"] + 2 * m.x["a2"] >= 7)
    m.cover_b = pyo.Constraint(expr=5 * m.x["b5"] + m.x["b1"] >= 5)
    m.cap_b = pyo.Constraint(expr=m.x["b1"] <= 1e20)
    m.obj = pyo.Objective(expr=4 * m.x["a3"] + 3 * m.x["a2"] + 6 * m.x["b5"] + m.x["b1"])
    return m


@pytest.mark.parametrize("drop", [False, True])
def test_the_written_model_solves_to_its_optimum_under_each_state(drop):
    m = _model()
    bm = BlockModel(m)
    lo, up = bm.bounds()
    r = bm.solve(lo, up, 0.0, None, drop_fixed=drop)
    # a: 3+2+2 = 7 at 10 (or 3+3+... : 2 x 3 = 6 < 7, so 3 x a3 = 12; a3 + 2 a2 = 10 is the least); b: five b1 = 5
    assert r.objective == pytest.approx(15.0)
    m.x["a2"].fix(0)  # fixed since written: held by bounds_now, a must take three a3 (12)
    lo, up = bm.bounds_now()
    r = bm.solve(lo, up, 0.0, None, drop_fixed=drop)
    assert r.objective == pytest.approx(17.0) and r.values[bm.col(m.x["a2"])] == 0
    bm.set_row_upper(m.cap_b, 2.0)  # at most two b1: one b5 (6) beats 5 b1 now
    r = bm.solve(lo, up, 0.0, None, drop_fixed=drop)
    assert r.objective == pytest.approx(18.0) and r.values[bm.col(m.x["b5"])] == 1
    other = bm.costs(m.x["b1"] + 2 * m.x["a3"] + 5 * m.x["a2"])  # a2 is fixed now: a column, but no term
    r = bm.solve(lo, up, 0.0, None, cost=other, drop_fixed=drop)
    assert r.objective == pytest.approx(6.0) and r.values[bm.col(m.x["b1"])] == 0  # three a3, one b5
    assert r.values[bm.col(m.x["a2"])] == 0 and len(r.values) == bm.n
