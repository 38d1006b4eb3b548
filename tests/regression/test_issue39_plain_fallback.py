"""Issue 39 item 21: the generated 20-region instance under ``solve --time-limit 60`` wrote no
plan ("a plan was found but its extraction and verification did not finish within
--time-limit 60 s"), although the plain sizing (without pods) had a fleet long before.
When the pod stage, or the extraction and verification of its plan, cannot finish in time,
``solve`` degrades to the plain sizing's plan -- extracted and verified in the time it
reserves for it -- with a note saying so; never to nothing.

The time limit is made to pass deterministically (a deadline already past around the pod
plan's extraction, its verification or the pod stage's build; the reserves read from the
outcome's own timings): no assertion depends on the machine's speed or load.
"""

from __future__ import annotations

import time

import pytest
import yaml
from typer.testing import CliRunner

import fleetplan.deadline as deadline
import fleetplan.instance.pods as pods_module
import fleetplan.sizing.driver as sizing
from fleetplan.cli.app import app
from fleetplan.deadline import deadline_scope
from fleetplan.instance.io import parse_instance
from fleetplan.results.verify import check_plan_contents, check_plan_records, verify
from fleetplan.solvers.base import SolveOptions
from tests.conftest import tiny_data

#: the tiny instance with N-1 failover, sized with its pods (tests/regression/test_pod_stage_deadline.py)
DATA = tiny_data(failover={"n_minus_1": True})


@pytest.fixture(scope="module")
def inst():
    return parse_instance(DATA, "pods-fallback")


def _past():
    return time.monotonic() - 1.0


def _late_for_pod_plans(real, arg):
    """``real`` run with a deadline already past when its argument ``arg`` (index) is, or
    belongs to, a plan sized with its pods; as itself otherwise."""

    def run(*args, **kwargs):
        x = args[arg]
        with_pods = getattr(x, "pods", None) is not None
        if with_pods:
            with deadline_scope(_past()):
                return real(*args, **kwargs)
        return real(*args, **kwargs)

    return run


def _is_plain_fallback(inst, out) -> None:
    plan = out.plan
    assert plan is not None and out.cut_after_solve is None
    assert plan.status == "verified" and plan.violations == [] and plan.pods is None and plan.dcn is None
    assert plan.solver.pod_stage_termination == "time_limit"
    assert any(n.startswith("NOT SIZED WITH ITS PODS") and "--time-limit" in n for n in plan.diagnostics), plan.diagnostics
    # the independent checks agree: the plain plan holds, and a reader accepts it as written
    assert verify(inst, plan) == []
    check_plan_contents(inst, plan)
    assert check_plan_records(inst, plan) == []


def test_the_reference_solve_is_sized_with_its_pods(inst):
    out = sizing.solve(inst, SolveOptions(time_limit_s=600))
    assert out.plan is not None and out.plan.status == "verified" and out.plan.pods is not None
    assert out.plan.solver.pod_stage_termination in ("optimal", "gap_reached")


def test_a_pod_plan_whose_extraction_is_cut_gives_the_verified_plain_plan(inst, monkeypatch):
    monkeypatch.setattr(sizing, "extract_plan", _late_for_pod_plans(sizing.extract_plan, 0))  # d: its pods set
    _is_plain_fallback(inst, sizing.solve(inst, SolveOptions(time_limit_s=600)))


def test_a_pod_plan_whose_verification_is_cut_gives_the_verified_plain_plan(inst, monkeypatch):
    monkeypatch.setattr(sizing, "verify", _late_for_pod_plans(sizing.verify, 1))  # the plan
    _is_plain_fallback(inst, sizing.solve(inst, SolveOptions(time_limit_s=600)))


def test_a_pod_stage_cut_before_it_found_a_plan_gives_the_verified_plain_plan(inst, monkeypatch):
    real = pods_module.build_pod_data

    def late(*a, **k):
        with deadline_scope(_past()):
            return real(*a, **k)

    monkeypatch.setattr(pods_module, "build_pod_data", late)
    out = sizing.solve(inst, SolveOptions(time_limit_s=600))
    _is_plain_fallback(inst, out)  # was status 'violations': "the instance sizes with its pods but the plan has none"


def test_the_pod_stage_leaves_time_to_extract_and_verify_the_plain_plan(inst, monkeypatch):
    """The pod stage's build and solves end before the deadline less both post-solve reserves
    (its own plan's and the plain plan's; with 600 s, half the time left is more than that),
    and its plan's extraction and verification before the deadline less the plain plan's:
    whatever happens there, the plain plan can still be extracted and verified by the deadline."""
    seen = {}
    real_build = pods_module.build_pod_data

    def build(*a, **k):
        seen["pod build"] = deadline.current()
        return real_build(*a, **k)

    real_extract = sizing.extract_plan

    def extract(d, *a, **k):
        if d.pods is not None:
            seen["pod extraction"] = deadline.current()
        return real_extract(d, *a, **k)

    monkeypatch.setattr(pods_module, "build_pod_data", build)
    monkeypatch.setattr(sizing, "extract_plan", extract)
    began = time.monotonic()
    out = sizing.solve(inst, SolveOptions(time_limit_s=600))
    end = began + 600
    assert out.plan is not None and out.plan.pods is not None
    tables = out.timings_s["reserve_basis"]  # the table time, or a recorded post-solve cost (fleetplan.sizing.post_solve_cost) when more
    plain = sizing.POST_SOLVE_RESERVE * tables + 0.2
    pod = sizing.POD_POST_SOLVE_RESERVE * tables + 0.2
    assert seen["pod build"] is not None and seen["pod build"] <= end - plain - pod + 0.05, (seen, end, plain, pod)
    assert seen["pod extraction"] is not None and end - plain - 0.05 <= seen["pod extraction"] <= end - plain + 0.05, (seen, end, plain)


def test_solve_writes_the_plain_plan_and_says_so(tmp_path, monkeypatch):
    (tmp_path / "inst.yaml").write_text(yaml.safe_dump(DATA), encoding="utf-8")
    monkeypatch.setattr(sizing, "extract_plan", _late_for_pod_plans(sizing.extract_plan, 0))
    r = CliRunner().invoke(app, ["solve", str(tmp_path / "inst.yaml"), "--time-limit", "600", "-o", str(tmp_path / "p.json")])
    text = " ".join(r.output.split())
    assert r.exit_code == 0, r.output
    assert (tmp_path / "p.json").exists() and "plan written to" in text
    assert "not sized with its pods" in text and "--time-limit" in text, text
