"""Issue 41: the pod stage fast enough to stay the default, and `solve` deterministic by
default.

`fleetplan solve`'s pod stage stopped its proof at a wall-clock budget of its own
(max(10 s, the start's time)), so under load `solve` could write another plan for the same
input; only the sweeps (``SolveOptions.deterministic``) ran it to the gap. Now no stage has
a budget of its own: gaps and work limits decide every stage, ``--time-limit`` is a guard,
and a plan it stopped says it is not reproducible. The placed start is solved on HiGHS's
arrays (``fleetplan.sizing.pods``) and is the plan, with no proof, when it is within the
gap asked for of the plain sizing's bound (a bound of the joint problem).
"""

from __future__ import annotations

import json
import time

import pytest

import fleetplan.sizing.driver as sizing
import fleetplan.sizing.pod_stage as pod_stage
from fleetplan.instance.io import parse_instance
from fleetplan.results.verify import verify
from fleetplan.solvers.base import SolveOptions
from tests.conftest import tiny_data
from tests.families.test_pods import _instance, brute_force

try:  # new in issue 41 (the tests run against the code before it too, to see them fail)
    import fleetplan.sizing.pods as sizing_pods
except ImportError:
    sizing_pods = None

#: the tiny instance with N-1 failover, sized with its pods (tests/regression/test_pod_stage_deadline.py)
DATA = tiny_data(failover={"n_minus_1": True})


@pytest.fixture(scope="module")
def inst():
    return parse_instance(DATA, "pods-issue41")


def _record(monkeypatch, name: str, seen: list, arg: int):
    """Record the deadline (argument ``arg``) of every call of ``fleetplan.sizing.pods.<name>``
    (when it exists: before issue 41 the proof went through the backend)."""
    real = getattr(sizing_pods, name, None) if sizing_pods is not None else None
    if real is None:
        return

    def wrapped(*a, **k):
        seen.append((name, a[arg]))
        return real(*a, **k)

    monkeypatch.setattr(sizing_pods, name, wrapped)


def test_the_pod_stage_has_no_wall_clock_budget_of_its_own(monkeypatch):
    """Every solve of the pod stage ends by the --time-limit guard (here 600 s), none at a
    budget of its own -- the proof used to get max(10 s, the start's time). On this
    instance the DCN ceiling costs slices, so the placed start is not within the gap of
    the plain sizing's bound and a proof runs."""
    seen: list = []
    real_backend = sizing._backend("highs")

    def backend(m, opts, **kw):
        if opts.separable:  # the pod stage's solves through the backend (before issue 41: its start and its proof)
            seen.append(("backend", opts.deadline))
        return real_backend(m, opts, **kw)

    monkeypatch.setattr(sizing, "_backend", lambda name: backend)
    _record(monkeypatch, "prove", seen, 2)
    began = time.monotonic()
    inst = _instance(40.0, 2, 1, 0.05)
    out = sizing.solve(inst, SolveOptions(time_limit_s=600))
    assert out.plan is not None and out.plan.status == "verified" and out.plan.pods is not None
    proofs = [d for what, d in seen if what in ("prove", "backend")]
    assert proofs, seen
    assert all(d is not None and d > began + 100 for d in proofs), (began, seen)
    assert not out.time_limited
    assert not any(n.startswith(sizing.NOT_REPRODUCIBLE) for n in out.plan.diagnostics)


def test_a_plan_the_time_limit_stopped_a_stage_of_says_it_is_not_reproducible(inst, monkeypatch):
    """The guard stops the pod stage's placed start (its deadline already past, as on a
    machine too loaded to do anything in its share of the time): the plan is still written
    and verified, and says it depends on the machine's speed and load."""
    real = pod_stage.placed_start

    def late(m, mb, d, opts, deadline):
        return real(m, mb, d, opts, time.monotonic() - 1.0)

    monkeypatch.setattr(pod_stage, "placed_start", late)
    out = sizing.solve(inst, SolveOptions(time_limit_s=600))
    assert out.time_limited
    assert out.plan is not None and out.plan.status == "verified" and verify(inst, out.plan) == []
    assert any(n.startswith(sizing.NOT_REPRODUCIBLE) and "--time-limit" in n for n in out.plan.diagnostics), out.plan.diagnostics


def _bytes(plan) -> str:
    return json.dumps(plan.model_dump(mode="json"), sort_keys=True)


def test_the_plan_does_not_depend_on_the_clock(inst, monkeypatch):
    """The same bytes on a machine as slow as you like: with a wall clock that moves 60 s at
    every read (every stage looks slow, each by another amount) and the --time-limit guard
    far away, the plan is the one the real clock gives, and it is not time-limited. Before
    issue 41 the pod stage's proof stopped at a budget of max(10 s, the start's time) of
    that clock."""
    ref = sizing.solve(inst, SolveOptions(time_limit_s=1e9))  # the options are in the plan: the same guard
    assert not ref.time_limited
    real, reads = time.monotonic, [0]

    def slow() -> float:
        reads[0] += 1
        return real() + 60.0 * reads[0]

    monkeypatch.setattr(time, "monotonic", slow)
    out = sizing.solve(inst, SolveOptions(time_limit_s=1e9))
    monkeypatch.undo()
    assert reads[0] > 10  # the clock was read (and moved) at every stage
    assert not out.time_limited
    assert _bytes(out.plan) == _bytes(ref.plan)


@pytest.mark.parametrize("rps,pods,tiers,ceiling,shortcut", [(60.0, 3, 1, 0.05, True), (30.0, 3, 1, 0.2, True), (40.0, 2, 1, 0.05, False),
                                                              (40.0, 3, 2, 0.05, False)])
def test_a_placed_start_within_the_gap_is_the_plan_and_within_the_gap_of_the_optimum(rps, pods, tiers, ceiling, shortcut, monkeypatch):
    """The shortcut: a placed start within the --mip-gap of the plain sizing's bound is the
    plan (no proof) -- here where the plain plan's pools fit the pods within the ceiling, so
    the start costs what the plain plan does. On instances whose optimum brute force knows
    (tests/families/test_pods.py) it is within the gap of that optimum, as the plan of the
    full pod stage (the shortcut turned off) is; where the start is not within the gap (the
    DCN ceiling costs slices) the proof runs."""
    inst = _instance(rps, pods, tiers, ceiling)
    best = brute_force(inst)
    out = sizing.solve(inst, SolveOptions(mip_gap=0.01))
    plan = out.plan
    assert plan is not None and plan.status == "verified" and verify(inst, plan) == []
    assert any("no proof run" in n for n in out.result.notes) == shortcut, out.result.notes
    assert best - 1e-6 <= plan.solver.objective <= best / (1 - 0.01) + 1e-6, (plan.solver.objective, best)
    assert plan.solver.pod_stage_gap <= 0.01 and (plan.solver.gap <= 0.01 or not shortcut)
    monkeypatch.setattr(sizing_pods, "within_gap", lambda *a: None)
    full = sizing.solve(inst, SolveOptions(mip_gap=0.01))
    assert not any("no proof run" in n for n in full.result.notes)
    assert full.plan.status == "verified" and best - 1e-6 <= full.plan.solver.objective <= best / (1 - 0.01) + 1e-6
    if shortcut:
        assert plan.solver.objective <= full.plan.solver.objective / (1 - 0.01) + 1e-6


def no_kit_kept(bm, mb, d, x_lp, lo, up, rays=False):
    """A restrict_kits that keeps no kit: every region of the placed start goes to the overage start."""
    up = up.copy()
    for key in mb.POD_KITS:
        j = bm.col(mb.v_pod_kits[key])
        if j is not None:
            up[j] = max(lo[j], 0.0)
    return up


def test_a_region_with_no_fleet_among_the_restricted_kits_is_placed_within_its_ceilings(monkeypatch):
    """The placed start restricts each region's kits to its LP's neighbourhood; a region with
    no fleet there goes to the overage start (every kit, its overage free) -- here every
    kit restricted away, so every region does. Where a placement within the ceilings exists
    the overage start finds it with zero overage: the plan stays within the ceilings, names
    no region as over them, and is within the gap of the optimum brute force knows."""
    inst = _instance(60.0, 3, 1, 0.05)
    best = brute_force(inst)
    monkeypatch.setattr(sizing_pods, "restrict_kits", no_kit_kept)
    plan = sizing.solve(inst, SolveOptions(mip_gap=0.01)).plan
    assert plan is not None and plan.status == "verified" and verify(inst, plan) == []
    assert all(x.sized_for <= x.dcn_share_max for x in plan.dcn)
    assert not any("no placement within the pods keeps every DCN share" in n for n in plan.diagnostics), plan.diagnostics
    assert best - 1e-6 <= plan.solver.objective <= best / (1 - 0.01) + 1e-6, (plan.solver.objective, best)


def _separable_solves(monkeypatch, what) -> list:
    """``what(options)`` of every separable solve (the pod stage's) through the sizing's backend, recorded."""
    seen: list = []
    real_backend = sizing._backend("highs")

    def backend(m, opts, **kw):
        if opts.separable:
            seen.append(what(opts))
        return real_backend(m, opts, **kw)

    monkeypatch.setattr(sizing, "_backend", lambda name: backend)
    return seen


def test_the_pod_stages_solves_after_its_start_stop_at_a_work_limit(monkeypatch):
    """Where the pod stage's solve after its start goes through the sizing loop (here forced:
    the chords would move), each block stops at POD_PROOF_NODES branch-and-bound nodes --
    work, not time: the generated 20-region instance's solve with its overage capped ran
    137 s of CPU with neither."""
    seen = _separable_solves(monkeypatch, lambda opts: opts.max_nodes)
    monkeypatch.setattr(pod_stage, "prove_from_start", lambda *a, **k: None)
    out = sizing.solve(_instance(40.0, 2, 1, 0.05), SolveOptions(time_limit_s=600))
    assert out.plan is not None and out.plan.status == "verified" and out.plan.pods is not None
    assert seen and all(n == sizing_pods.POD_PROOF_NODES for n in seen), seen


def _fills_a_pod():
    """Two regions whose every slice shape fills a pod: no prefill slice shares a pod with a decode slice,
    so every region has no placement within its DCN ceiling and gets the overage start, then the solve
    with its overage capped (tests/families/test_pods.py::test_a_tier_whose_slices_fill_a_pod_declares_its_overage_and_says_why)."""
    data = tiny_data(chips={"acc": {"chips_per_pod": 2, "slice_shapes": [2]}},
                     regions={"a": {"pods": {"acc": {"installed": 0, "available_new": 40}}},
                              "b": {"pods": {"acc": {"installed": 0, "available_new": 40}}}})
    return parse_instance(data, "fills-a-pod-41")


def test_the_overage_capped_solve_runs_on_the_arrays_with_work_limits_only(monkeypatch):
    """The pod stage's solve with the overage-capped regions' overage capped runs on HiGHS's
    arrays (sizing_pods.solve_capped: the LP, the kits restricted to the LP's and the start's
    neighbourhood, work limits), not through the Pyomo backend with every kit -- where the
    generated 20-region instance spent 130-139 s of CPU at HiGHS's root. The plan serves
    everything (the shortfall stays fixed at zero on the arrays), verifies, and costs no
    more than the old path's (the backend, forced by solve_capped finding nothing)."""
    inst = _fills_a_pod()
    seen = _separable_solves(monkeypatch, lambda opts: opts.mip_gap)
    calls: list = []
    real = getattr(pod_stage, "solve_capped", None)
    if real is not None:
        monkeypatch.setattr(pod_stage, "solve_capped", lambda *a, **k: calls.append(1) or real(*a, **k))
    out = sizing.solve(inst, SolveOptions(mip_gap=0.01))
    plan = out.plan
    assert plan is not None and plan.status == "verified" and verify(inst, plan) == []
    assert calls, "the overage-capped solve did not run on the arrays"
    assert any("restricted to the LP relaxation's and the start's neighbourhood" in n for n in out.result.notes), out.result.notes
    through_backend = len(seen)
    seen.clear()
    monkeypatch.setattr(pod_stage, "solve_capped", lambda *a, **k: None)
    old = sizing.solve(inst, SolveOptions(mip_gap=0.01))
    assert len(seen) > through_backend  # the old path solves the capped model through the backend
    assert plan.solver.objective <= old.plan.solver.objective / (1 - 0.01) + 1e-6
    assert not out.time_limited and not any(n.startswith(sizing.NOT_REPRODUCIBLE) for n in plan.diagnostics)
