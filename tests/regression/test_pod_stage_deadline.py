"""Placement-aware sizing under a time limit: the plain sizing (which fixes the failover
routing the pod stage keeps) has PODS_PLAIN_SHARE of the solver time and the pod stage the
rest; once the plain sizing finds no fleet serves everything, the pod stage will not run
(a shortfall plan is sized without its pods), so the least-shortfall and cost stages get
the whole solver time back (issue 16 row 4's reserve still left for the verification)."""

from __future__ import annotations

import time

from fleetplan.sizing import driver as sizing, pod_stage, pods as sizing_pods
from fleetplan.instance.io import parse_instance
from fleetplan.solvers.base import SolveOptions
from tests.conftest import tiny_data
from tests.regression.test_issue16_shortfall_stage_time import ONE_POD


def record_stops(monkeypatch) -> list:
    """Let solve run HiGHS as usual, recording when each solver run stops once it holds an
    incumbent (monotonic s): the earlier of its deadline and its incumbent deadline -- the plain
    sizing's share is the latter (a plain sizing without a fleet by then solves on)."""
    real = sizing._backend("highs")
    seen = []

    def backend(m, opts, **kw):
        seen.append(min(x for x in (opts.deadline, opts.incumbent_deadline) if x is not None))
        return real(m, opts, **kw)

    monkeypatch.setattr(sizing, "_backend", lambda name: backend)
    return seen


def test_the_plain_sizing_leaves_the_pod_stage_its_share_of_the_time(monkeypatch):
    seen = record_stops(monkeypatch)
    stage = []  # the pod stage's placed start and proof (solved on HiGHS's arrays, not through the backend)
    real_start, real_prove = pod_stage.placed_start, sizing_pods.prove

    def start(m, mb, d, opts, deadline):
        stage.append(("start", deadline))
        return real_start(m, mb, d, opts, deadline)

    def prove(st, opts, deadline):
        stage.append(("prove", deadline))
        return real_prove(st, opts, deadline)

    monkeypatch.setattr(pod_stage, "placed_start", start)
    monkeypatch.setattr(sizing_pods, "prove", prove)
    inst = parse_instance(tiny_data(failover={"n_minus_1": True}), "pods-deadline")
    began = time.monotonic()
    out = sizing.solve(inst, SolveOptions(solver="highs", time_limit_s=600))
    assert out.plan is not None and out.plan.status == "verified" and out.plan.pods is not None
    # the plain sizing's first solve, holding an incumbent, ends at PODS_PLAIN_SHARE of the solver time (600 s less a fraction of a second of
    # tables and model); the pod stage's placed start within its share of the time left
    assert began + 0.9 * sizing.PODS_PLAIN_SHARE * 600 < seen[0] < began + sizing.PODS_PLAIN_SHARE * 600 + 1, (began, seen)
    assert stage[0][0] == "start" and seen[0] < stage[0][1] < began + 600, (began, stage)
    # no wall-clock budget of the pod stage's own: a proof (when the start is not already within the gap of the plain
    # sizing's bound) has the rest of the pod stage's time, the --time-limit guard only
    assert all(d > stage[0][1] for what, d in stage[1:] if what == "prove"), stage
    assert all(x < began + 600 for x in seen)
    assert not out.time_limited


def test_a_shortfall_plan_gets_the_whole_solver_time_back(monkeypatch):
    seen = record_stops(monkeypatch)
    out = sizing.solve(parse_instance(tiny_data(regions=ONE_POD)), SolveOptions(solver="highs", time_limit_s=600))
    assert out.plan is not None and out.plan.status == "shortfall" and out.plan.pods is None
    assert any("not sized with its pods" in n for n in out.plan.diagnostics)
    # the first solve had the plain share; the least-shortfall and cost stages the rest of the solver time
    assert seen[1] > seen[0] + 100.0 and seen[2] > seen[0] + 100.0, seen


def test_a_plain_sizing_without_a_fleet_in_its_share_gets_the_rest_of_the_time(monkeypatch):
    """Issue 41: with the pods, the plain sizing has PODS_PLAIN_SHARE of the solver time; one
    that found no fleet in it (a loaded machine: the generated 20-region instance under
    --time-limit 60 ended with exit 3 after 29 s) gets the rest -- there is no pod stage
    without it. Here its share is none at all; the plan is still found and verified, in the
    same solve (a restart at the share's end did the component start over again, and the
    20-region plan's extraction was then cut), and says it is not reproducible when, and only
    when, the guard cut a stage (the tiny model's HiGHS solve ends before it checks its clock
    with an incumbent in hand)."""
    monkeypatch.setattr(sizing, "PODS_PLAIN_SHARE", 0.0)
    real = sizing._backend("highs")
    results = []
    monkeypatch.setattr(sizing, "_backend", lambda name: lambda m, opts, **kw: results.append(real(m, opts, **kw)) or results[-1])
    inst = parse_instance(tiny_data(failover={"n_minus_1": True}), "pods-plain-share")
    out = sizing.solve(inst, SolveOptions(solver="highs", time_limit_s=600))
    # no solve was cut without a fleet and started over (before: the first, at once, at the share's end)
    assert results and not any(r.termination == "time_limit" and not r.has_incumbent for r in results), results
    assert out.plan is not None and out.plan.status == "verified"
    assert out.time_limited == any(n.startswith(sizing.NOT_REPRODUCIBLE) for n in out.plan.diagnostics)
