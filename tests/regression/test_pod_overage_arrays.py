"""The pod stage's overage start on HiGHS's arrays (fleetplan.sizing.pods.overage_start):
for the regions with no placed fleet among the restricted kits, the least KV over the DCN
ceilings and then the cost, on the pod model written once -- where it went through the
sizing's backend, which wrote the whole model for each of its two solves, and the capped
solve after it wrote the model a third time (the generated 10-region instance: 1.1-1.4 s of
CPU per write). The plan must be the one the backend's path gives (its code kept here as
the reference)."""

from __future__ import annotations

import pytest

import fleetplan.sizing.driver as sizing
import fleetplan.sizing.pod_stage as pod_stage
import fleetplan.sizing.pods as sizing_pods
import fleetplan.solvers.highs as highs
import fleetplan.solvers.persistent as persistent
from fleetplan.results.verify import verify
from fleetplan.solvers.base import SolveOptions
from tests.families.test_pods import _instance
from tests.regression.test_issue41_pod_stage import _fills_a_pod, no_kit_kept


def _backend_overage_start(m, mb, d, failed_vars, mine, opts, run, deadline):
    """The overage start as it was: the placed start's prefill fixings on the Pyomo model, the
    two lexicographic solves through the backend (each writes the model), no arrays kept (the
    capped solve writes the model again)."""
    fixed, raised = sizing_pods.fix_start(m, mb, d)
    found = pod_stage._overage_start_backend(mb, d, failed_vars, mine, opts, run, deadline)
    for v in fixed:
        v.unfix()
    for v, lb in raised:
        v.setlb(lb)
    return None, found


def _cases():
    return {"fills-a-pod": (_fills_a_pod, False), "no-kit-kept": (lambda: _instance(60.0, 3, 1, 0.05), True)}


def test_the_overage_start_writes_the_pod_model_once_and_solves_nothing_through_the_backend(monkeypatch):
    """Where regions keep an overage (every slice fills a pod), the pod stage writes its model
    twice (the placed start's arrays, the overage start's, which the capped solve reuses)
    and sends no solve through the backend; before, the overage start's two solves went
    through it and the capped solve wrote the model again."""
    inst = _fills_a_pod()
    writes, backend, ran = [], [], []
    real_start = pod_stage.overage_start
    monkeypatch.setattr(pod_stage, "overage_start", lambda *a, **k: ran.append(1) or real_start(*a, **k))
    real_arrays, real_backend = persistent.model_arrays, sizing._backend("highs")
    for module in (persistent, highs):  # the arrays' writes and the backend's
        monkeypatch.setattr(module, "model_arrays", lambda m, *a, **k: writes.append(m.name) or real_arrays(m, *a, **k))
    monkeypatch.setattr(sizing, "_backend", lambda name: lambda m, opts, **k: backend.append(opts.separable) or real_backend(m, opts, **k))
    out = sizing.solve(inst, SolveOptions(mip_gap=0.01))
    plan = out.plan
    assert plan is not None and plan.status == "verified" and verify(inst, plan) == [] and plan.pods is not None
    assert ran, "the overage start did not run"
    assert len(writes) == 3, writes  # the plain sizing's, the placed start's, the overage start's
    assert not any(backend), "a separable (pod stage) solve went through the backend"


@pytest.mark.parametrize("case", sorted(_cases()))
def test_the_overage_start_on_the_arrays_gives_the_backends_plan(case, monkeypatch):
    """The same fleet as the backend's overage start (the reference above), to HiGHS's noise
    on its continuous values: the same chips, the same cost."""
    make, restrict = _cases()[case]
    if restrict:
        monkeypatch.setattr(sizing_pods, "restrict_kits", no_kit_kept)
    inst = make()
    new = sizing.solve(inst, SolveOptions(mip_gap=0.01)).plan
    monkeypatch.setattr(pod_stage, "overage_start", _backend_overage_start)
    old = sizing.solve(inst, SolveOptions(mip_gap=0.01)).plan
    assert new.status == old.status == "verified"
    assert new.cost.chips == old.cost.chips
    assert new.solver.objective == pytest.approx(old.solver.objective, rel=1e-9)
    assert [(p.region, p.tier, p.role, p.slice, p.slices) for p in new.pools] == [(p.region, p.tier, p.role, p.slice, p.slices) for p in old.pools]
