"""The demand tree's one-liner forms expanded (no solve)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetplan.purchase.schema import Fan, GrowthPaths
from fleetplan.purchase.tree import expand_demand

LABELS = ["2027Q1", "2027Q2", "2027Q3", "2027Q4"]


def test_fan_is_seeded_and_mean_preserving_per_step():
    fan = Fan(kind="fan", start={"a": 2.0, "b": 1.0}, paths=4, growth_per_quarter=0.1, volatility_per_quarter=0.2, seed=7)
    t1, p1 = expand_demand(fan, LABELS, ["a", "b"])
    t2, _ = expand_demand(fan, LABELS, ["a", "b"])
    assert not p1 and t1 == t2
    assert sorted(t1.scenarios) == ["path1", "path2", "path3", "path4"]
    assert all(math.isclose(t1.scenario_probability(s), 0.25) for s in t1.scenarios)
    assert len(t1.nodes) == 1 + 4 * 3 and t1.nodes[0].demand == {"a": 2.0, "b": 1.0}
    # the same draws as numpy's generator: m_i = m_{i-1} (1 + g) exp(sigma z - sigma^2 / 2), both regions together
    z = np.random.default_rng(7).standard_normal((4, 3))
    ids = t1.scenarios["path2"]
    want = 2.0 * np.cumprod(1.1 * np.exp(0.2 * z[1] - 0.02))
    assert [t1.nodes[n].demand["a"] for n in ids[1:]] == pytest.approx(list(want), rel=1e-12)
    assert [t1.nodes[n].demand["b"] for n in ids[1:]] == pytest.approx(list(want / 2.0), rel=1e-12)


def test_growth_paths_branching_twice():
    g = GrowthPaths(kind="growth_paths", start=1.0, branch_at=["2027Q2", "2027Q4"], paths=[
        {"name": "lo", "probability": 0.25, "growth_per_quarter": 0.0}, {"name": "hi", "probability": 0.75, "growth_per_quarter": 0.2}])
    t, problems = expand_demand(g, LABELS, ["a"])
    assert not problems
    assert sorted(t.scenarios) == ["hi/hi", "hi/lo", "lo/hi", "lo/lo"]
    assert len(t.nodes) == 1 + 2 + 2 + 4
    assert t.scenario_probability("hi/lo") == pytest.approx(0.75 * 0.25)
    d = [t.nodes[n].demand["a"] for n in t.scenarios["hi/lo"]]
    assert d == pytest.approx([1.0, 1.2, 1.44, 1.44])
    # nodes before the second branching are shared: hi/lo and hi/hi see the same 2027Q2 and 2027Q3
    assert t.scenarios["hi/lo"][:3] == t.scenarios["hi/hi"][:3]


def test_branching_quarters_must_be_in_the_horizon_and_ascend():
    g = GrowthPaths(kind="growth_paths", branch_at=["2027Q3", "2027Q2", "2029Q1"], paths=[{"name": "x", "probability": 1.0, "growth_per_quarter": 0.0}])
    _, problems = expand_demand(g, LABELS, ["a"])
    assert [p.path for p in problems] == ["demand.branch_at.1", "demand.branch_at.2"]
