"""The bundled instances' plans, pinned (refreshed deliberately: tests/regression/pins.py).

What is pinned is what the solver proves: the optimum lies in [bound, objective] of the
pinned solve, and in [bound, objective] of today's. A change to the physics or the
model that moves the optimum by more than the MIP gap separates the two intervals. The
incumbent itself (which slices, how many chips) is not pinned: within the 1% gap HiGHS
may stop at another fleet on another CPU or library build (it did: a Zen 3 machine ends
at 29,684.5 $/h where the pinning machine ended at 29,716.7, both proved within 1%), and
a test that fails on that would fail CI for no defect. Same machine, same bytes is
checked elsewhere (tests/cli/test_solve_cli.py)."""

from __future__ import annotations

import json

import pytest

from fleetplan.instance.io import bundled_instances
from tests.regression.pins import PINS

PINNED = json.loads(PINS.read_text())


def test_every_bundled_instance_is_pinned():
    assert sorted(PINNED) == bundled_instances()


@pytest.mark.parametrize("name", sorted(PINNED))
def test_bundled_plan_matches_its_pin(name, solved):
    _, plan = solved(name)  # solve(load_instance(name)).plan, once per run (tests/conftest.py)
    pin = PINNED[name]
    assert plan.status == pin["status"] == "verified"
    tol = 1e-6 * pin["objective"]
    # both intervals hold the optimum, so they overlap
    assert plan.solver.bound <= pin["objective"] + tol, (plan.solver.bound, pin)
    assert pin["bound"] <= plan.solver.objective + tol, (plan.solver.objective, pin)
    # sized with its pods: the pod stage proves its gap against its own bound (the failover routing fixed); the gap
    # against the plain sizing's bound (plan.solver.gap) holds the placement's cost too
    gap = plan.solver.pod_stage_gap if plan.solver.pod_stage_termination is not None else plan.solver.gap
    assert gap <= 0.01 + 1e-9, plan.solver


@pytest.mark.parametrize("name", sorted(n for n in PINNED if n.startswith("llama70b-h100")))
def test_bundled_gpu_plan_costs_no_more_than_its_pin_with_the_schedule_chosen_per_pool(name, solved):
    """Issue 17: the colocated schedule is chosen by the sizing model per replica pool; the
    bundled GPU plans (colocated, their schedule chosen per (tier, shape) in the tables when
    pinned) must cost no more than their pins, each pool with a schedule the instance allows."""
    from fleetplan.perf.colocated import schedules_of

    inst, plan = solved(name)
    assert plan.status == "verified"
    assert plan.cost.fleet_cost_per_hour_usd <= PINNED[name]["fleet_cost_per_hour_usd"] * (1 + 1e-9)
    allowed = {s.label for s in schedules_of(inst)}
    assert all(p.schedule in allowed for p in plan.pools if p.role == "replica") and any(p.role == "replica" for p in plan.pools)
