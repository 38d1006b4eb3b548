"""The bundled instances' plans, pinned (refreshed deliberately: tests/regression/pins.py)."""

from __future__ import annotations

import json

import pytest

from fleetplan.instance.io import bundled_instances, load_instance
from fleetplan.sizing import solve
from tests.regression.pins import PINS

PINNED = json.loads(PINS.read_text())


def test_every_bundled_instance_is_pinned():
    assert sorted(PINNED) == bundled_instances()


@pytest.mark.parametrize("name", sorted(PINNED))
def test_bundled_plan_matches_its_pin(name):
    plan = solve(load_instance(name)).plan
    pin = PINNED[name]
    assert plan.status == pin["status"] == "verified"
    assert plan.solver.objective == pytest.approx(pin["objective"], rel=1e-9)
    assert plan.cost.chips == pin["chips"]
    assert {f"{p.region}/{p.tier}/{p.role}/{p.slice}": p.slices for p in plan.pools} == pin["slices"]
