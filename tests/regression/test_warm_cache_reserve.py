"""A warm table cache left --time-limit too little time to extract and verify the plan (found
this session): `fleetplan solve GEN20 --time-limit 60` on a loaded machine with the 20-region
tables cached built them in 2 s, kept 1.2 x that (+0.2 s) for the extraction and verification
of the plan -- which took 8+ s -- and ended with no plan at all. The reserve now keeps at
least what the last extraction and verification of the same instance took
(:mod:`fleetplan.sizing.post_solve_cost`), scaled by how much slower the process runs now.

Deterministic: the recorded costs are set, not measured, and the deadlines read from the
solver runs; no assertion depends on the machine's speed."""

from __future__ import annotations

import time

import pytest

import fleetplan.sizing.post_solve_cost as cost
import fleetplan.sizing.driver as sizing
from fleetplan.instance.io import parse_instance
from fleetplan.solvers.base import SolveOptions
from tests.conftest import tiny_data
from tests.regression.test_issue16_shortfall_stage_time import record_deadlines


@pytest.fixture
def fresh_records(monkeypatch):
    """No record from another test of this process, none written to the table cache's disk."""
    monkeypatch.setattr(cost, "_MEMORY", {})
    monkeypatch.setattr(cost, "_disk", lambda: None)


def test_a_recorded_post_solve_cost_is_kept_before_the_deadline(fresh_records, monkeypatch):
    inst = parse_instance(tiny_data(), "warm-reserve")
    cost.record(inst, False, 40.0)  # the last extraction and verification of this instance: 40 s of CPU
    monkeypatch.setattr(cost, "slowdown", lambda wall, cpu: 1.5)  # the process runs 1.5x slower than its CPU now
    seen = record_deadlines(monkeypatch)
    began = time.monotonic()
    out = sizing.solve(inst, SolveOptions(solver="highs", time_limit_s=600))
    assert out.plan is not None and seen
    # 1.2 x 40 s x 1.5 + 0.2 s before the end (before the fix: 1.2 x the table build's ~0.1 s)
    assert out.timings_s["reserve_basis"] == pytest.approx(60.0)
    assert seen[0] <= began + 600 - (sizing.POST_SOLVE_RESERVE * 60.0 + 0.2) + 0.5  # solve starts its clock after `began`


def test_a_completed_extraction_and_verification_is_recorded(fresh_records):
    inst = parse_instance(tiny_data(), "warm-reserve-record")
    assert cost.recorded(inst, False) is None
    out = sizing.solve(inst, SolveOptions(solver="highs", time_limit_s=600))
    assert out.plan is not None and out.plan.status == "verified"
    got = cost.recorded(inst, out.plan.pods is not None)
    assert got is not None and 0.0 < got < 600.0


def test_a_plan_with_pods_costs_at_least_as_much_for_the_plain_reserve(fresh_records):
    """Only the plan with pods recorded (the default solve): the plain plan's reserve assumes it
    costs as much (it costs less), and the pod plan's keeps 1.2 x its cost (3.0 x the basis)."""
    inst = parse_instance(tiny_data(), "warm-reserve-pods")
    cost.record(inst, True, 25.0)
    ratio = sizing.POD_POST_SOLVE_RESERVE / sizing.POST_SOLVE_RESERVE
    assert cost.reserve_basis(inst, 0.1, 1.0, 1.0, ratio) == pytest.approx(25.0)
    cost.record(inst, False, 4.0)
    assert cost.reserve_basis(inst, 0.1, 1.0, 1.0, ratio) == pytest.approx(10.0)  # 25 / 2.5: the pod reserve 3 x 10 = 1.2 x 25
    assert sizing.POD_POST_SOLVE_RESERVE * 10.0 == pytest.approx(1.2 * 25.0)


@pytest.mark.parametrize("wall, cpu, want", [(2.0, 1.0, 2.0), (0.5, 1.0, 1.0), (100.0, 1.0, cost.MAX_SLOWDOWN), (5.0, 0.01, 1.0)])
def test_slowdown_reads_wall_over_cpu_within_bounds(wall, cpu, want):
    assert cost.slowdown(wall, cpu) == want


def test_a_cut_extraction_records_twice_what_it_had_spent(fresh_records, monkeypatch):
    """A run whose extraction the deadline cut still leaves the next one a longer reserve (the
    20-region instance's cut runs recorded nothing, so every later run was cut the same way)."""
    from fleetplan.deadline import TimeLimitReached

    inst = parse_instance(tiny_data(), "warm-reserve-cut")
    real = sizing.extract_plan

    def slow_then_cut(*a, **k):
        real(*a, **k)  # the work done (CPU spent), then the deadline passes
        raise TimeLimitReached("extracting the plan")

    monkeypatch.setattr(sizing, "extract_plan", slow_then_cut)
    out = sizing.solve(inst, SolveOptions(solver="highs", time_limit_s=600))
    assert out.plan is None and out.cut_after_solve == "extracting the plan"
    got = [cost.recorded(inst, p) for p in (False, True)]
    assert any(g is not None and g > 0.0 for g in got), got


def test_the_cli_margins_are_work_within_the_time_limit(tmp_path, monkeypatch):
    """The solve table's margins (computed after the solve for a plan that does not record them)
    ran past --time-limit: the 20-region instance's took 5.7 s of CPU, 14-16 s of wall clock on a
    loaded machine, after a solve that had used the whole limit (76 s for --time-limit 60). They
    are computed within the limit now; when it passes the table leaves them out and says so, and
    the plan is written as before."""
    import yaml
    from typer.testing import CliRunner

    import fleetplan.cli.physics_view as view
    from fleetplan.cli.app import app
    from fleetplan.deadline import deadline_scope

    real = view.plan_margins

    def late(inst, plan):
        with deadline_scope(time.monotonic() - 1.0):  # the limit passes during the margins' search
            return real(inst, plan)

    monkeypatch.setattr(view, "plan_margins", late)
    (tmp_path / "i.yaml").write_text(yaml.safe_dump(tiny_data()), encoding="utf-8")
    r = CliRunner().invoke(app, ["solve", str(tmp_path / "i.yaml"), "-o", str(tmp_path / "p.json")])
    text = " ".join(r.output.split())
    assert r.exit_code == 0, r.output
    assert "margins (step time / load at which each SLO breaks): not shown -- computing them after the solve would have run past --time-limit 300 s" in text
    # under the latency table, before the notes that follow it
    assert text.index("margins (step time") < text.index("Demand margin")
    assert (tmp_path / "p.json").exists() and "plan written to" in text
