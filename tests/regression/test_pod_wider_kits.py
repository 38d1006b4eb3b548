"""The placed start's second MIP (fleetplan.sizing.pods.placed_start), for a region whose
restricted fleet is not within the gap of its LP bound: its kits are the LP's and the
restricted fleet's, their neighbours and their rays (restrict_kits(rays=True)), not every
kit -- on the generated 10-region instance every kit cost 9.1-10.3 s of CPU for six regions
and the rays 6.1 s, for fleets as cheap or cheaper. The plan must stay within the gap of
what every kit gives, and of the optimum brute force knows."""

from __future__ import annotations

import pytest

import fleetplan.sizing.driver as sizing
import fleetplan.sizing.pods as sizing_pods
from fleetplan.results.verify import verify
from fleetplan.solvers.base import SolveOptions
from tests.families.test_pods import _instance, brute_force


def _force_the_second_mip(monkeypatch, every_kit: bool) -> list:
    """The first restriction keeps only the LP's own kits (no neighbours), so the restricted
    fleet misses the gap and the second MIP runs; with ``every_kit`` that MIP has every kit
    (the code before). Returns the calls' ``rays`` flags."""
    real, calls = sizing_pods.restrict_kits, []

    def restrict(bm, mb, d, x_lp, lo, up, rays=False):
        calls.append(rays)
        if rays:
            return up.copy() if every_kit else real(bm, mb, d, x_lp, lo, up, rays=True)
        up = up.copy()
        for key in mb.POD_KITS:
            j = bm.col(mb.v_pod_kits[key])
            if j is not None and (x_lp[j] is None or x_lp[j] <= 1e-6):
                up[j] = max(lo[j], 0.0)
        return up

    monkeypatch.setattr(sizing_pods, "restrict_kits", restrict)
    return calls


@pytest.mark.parametrize("rps,pods,tiers,ceiling", [(60.0, 3, 1, 0.05), (30.0, 3, 1, 0.2)])
def test_the_wider_kits_give_a_plan_within_the_gap_of_every_kits_and_of_the_optimum(rps, pods, tiers, ceiling, monkeypatch):
    inst = _instance(rps, pods, tiers, ceiling)
    best = brute_force(inst)
    calls = _force_the_second_mip(monkeypatch, every_kit=False)
    plan = sizing.solve(inst, SolveOptions(mip_gap=0.01)).plan
    assert True in calls, "the second MIP (the wider kits) did not run"
    assert plan is not None and plan.status == "verified" and verify(inst, plan) == []
    monkeypatch.undo()
    _force_the_second_mip(monkeypatch, every_kit=True)
    every = sizing.solve(inst, SolveOptions(mip_gap=0.01)).plan
    assert every.status == "verified"
    assert best - 1e-6 <= plan.solver.objective <= best / (1 - 0.01) + 1e-6, (plan.solver.objective, best)
    assert plan.solver.objective <= every.solver.objective / (1 - 0.01) + 1e-6, (plan.solver.objective, every.solver.objective)

