"""Issue 39 items 1-2: a sweep's base is the plan `fleetplan solve` writes for the
instance; every point records how its solve ended and the gap it reached, a point the
--time-limit guard stopped is flagged, and differences within the solves' gaps are marked
as not resolved; a point does not depend on the machine's load (no wall-clock budget
inside a solve)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.instance.io import parse_instance
from fleetplan.report.executor import SerialExecutor
from fleetplan.report.levers import run_levers
from fleetplan.report.sensitivity import SWEEP_OPTIONS, parse_params, run_sensitivity
from fleetplan.report.sweep import SolveSummary, make_task, solve_task, summarise
from tests.report import cut_executor

#: What a summary takes from the plan (the sweep's own bookkeeping aside).
PLAN_FIELDS = {"status", "chips", "prefill_slices", "prefill_chips", "decode_slices", "decode_chips", "replicas", "replica_chips",
               "warm_slices", "warm_chips", "fleet_cost_per_hour_usd", "cost_per_1m_output_tokens_usd",
               "cost_per_1m_output_tokens_at_peak_usd", "cost_per_1m_output_tokens_with_infill_usd", "cost_per_1m_input_tokens_usd",
               "mip_gap", "shortfall_rps", "shortfall_tokens_per_s", "termination", "pods"}


# ----------------------------------------------------------------------------- item 1: the base is the plan


def test_the_sweeps_base_is_the_plan_fleetplan_solve_writes(sweep_yaml, tmp_path):
    """`fleetplan solve` and the base of `sensitivity` and `levers` on the same instance:
    the same plan. The sweeps solved their base with the pod inventory lifted 4x, which
    on this instance commits 5 pods in region a where the plan commits 4 (the Gemini
    instance: 22,744 chips from solve, 22,784 and 22,848 from the two sweeps)."""
    from fleetplan.cli.common import load_plan

    runner = CliRunner()
    r = runner.invoke(app, ["solve", str(sweep_yaml), "-o", str(tmp_path / "plan.json")])
    assert r.exit_code == 0, r.output
    want = summarise("base", load_plan(str(tmp_path / "plan.json"))).model_dump(include=PLAN_FIELDS)
    sens = runner.invoke(app, ["sensitivity", str(sweep_yaml), "-p", "mfu=0.3:0.5", "--json", "--executor", "serial"])
    lev = runner.invoke(app, ["levers", str(sweep_yaml), "--json", "--executor", "serial"])
    for out in (sens, lev):
        assert out.exit_code == 0, out.output
        base = SolveSummary.model_validate(json.loads(out.stdout)["base"])
        assert base.model_dump(include=PLAN_FIELDS) == want
        assert base.inventory == "instance"
    # and the table says what the base is
    t = runner.invoke(app, ["sensitivity", str(sweep_yaml), "-p", "mfu=0.3:0.5", "--executor", "serial"])
    assert "base: the plan `fleetplan solve` writes" in " ".join(t.stdout.split())


def test_a_point_the_inventory_cannot_serve_is_lifted_and_flagged(sweep_data):
    """With 2 pods (16 chips) per region the instance is served; at a prefill MFU of 0.1
    it is not, and every pod of a region is committed: that point is re-solved with the
    inventory lifted and flagged as beyond it. The base is never lifted."""
    for r in sweep_data["regions"].values():
        r["pods"]["acc"]["available_new"] = 3
    inst = parse_instance(sweep_data, "tight")
    rep = run_sensitivity(inst, parse_params(["mfu=0.1:0.5"], sweep_data), SerialExecutor())
    assert rep.base.status == "verified" and rep.base.inventory == "instance" and not rep.base.beyond_inventory
    low = rep.rows[0].low
    assert low.status == "verified" and low.inventory == "lifted x4" and low.beyond_inventory, low
    assert any("beyond the instance's pod inventory" in n and "prefill_mfu=0.1" in n for n in rep.notes), rep.notes
    kept = run_sensitivity(inst, parse_params(["mfu=0.1:0.5"], sweep_data), SerialExecutor(), keep_inventory=True)
    assert kept.rows[0].low.status == "shortfall" and kept.rows[0].low.inventory == "instance"


# ----------------------------------------------------------------------------- item 2: reproducible points


def test_a_point_the_time_limit_guard_stopped_is_marked(sweep_data, monkeypatch):
    """A sweep's solve has no wall-clock budget of its own (nor has `fleetplan solve`
    since issue 41: tests/regression/test_issue41_pod_stage.py); the --time-limit guard is
    the only clock, and a point it stopped -- here the pod stage's placed start, its
    deadline already past -- is marked time-limited (not reproducible), the same point
    without it is not."""
    import time

    import fleetplan.sizing.pod_stage as pod_stage

    task = make_task("base", sweep_data, SWEEP_OPTIONS)
    ref = solve_task(task)
    assert ref["termination"] in ("optimal", "gap_reached") and not ref["time_limited"]
    real = pod_stage.placed_start
    monkeypatch.setattr(pod_stage, "placed_start", lambda m, mb, d, opts, deadline: real(m, mb, d, opts, time.monotonic() - 1.0))
    assert solve_task(task)["time_limited"]


def test_a_point_cut_by_the_time_limit_is_flagged_and_not_compared(sweep_instance, sweep_data):
    """A point the --time-limit guard stopped above the requested gap (simulated: the
    issue's `hbm_bw_fraction=0.7`, 8.96% from its bound and 5% dearer than the base with
    more bandwidth): marked cut, its gap kept, the row's difference from the base not
    resolved, and the notes no longer say every point is solved to 1%."""
    ex = cut_executor.CutExecutor({"prefill_mfu=0.5": 0.0896})
    rep = run_sensitivity(sweep_instance, parse_params(["mfu=0.3:0.5"], sweep_data), ex)
    row = rep.rows[0]
    assert row.high.time_limited and row.high.termination == "time_limit" and row.high.mip_gap == pytest.approx(0.0896)
    assert row.high_vs_base == "not_comparable"  # cut: not reproducible, the sign of this end's move is not known
    assert row.low_vs_base == "resolved"  # MFU 0.3 needs more prefill than the base's 0.4: a move well beyond two 1% gaps
    text = " ".join(rep.notes)
    assert "prefill_mfu=0.5" in text and "--time-limit" in text and "8.96%" in text, rep.notes
    assert not any(n.startswith("each point is one solve to a 1.00% MIP gap:") for n in rep.notes), rep.notes


def test_the_table_shows_each_points_gap_and_a_cut_point(sweep_yaml):
    """The table: a gap column (each end's distance from its bound), a cut point marked as
    such, unresolved ends marked, and a footnote that says which points are not at 1%."""
    runner = CliRunner()
    args = ["sensitivity", str(sweep_yaml), "-p", "mfu=0.3:0.5", "--executor", "tests.report.cut_executor:factory"]
    r = runner.invoke(app, args, env={cut_executor.ENV: "prefill_mfu=0.5:0.0896"})
    assert r.exit_code == 0, r.output
    out = _text(r.stdout)
    assert "gap: low / high" in out and "0.00% / 8.96%" in out
    assert "verified / verified, cut at the time limit" in out
    assert "0.270*" in out and "prefill_mfu=0.5 (stopped by the time limit: not comparable)" in out
    lev = runner.invoke(app, ["levers", str(sweep_yaml), "--executor", "tests.report.cut_executor:factory"],
                        env={cut_executor.ENV: "kv_fp8:off:0.0896"})
    assert lev.exit_code == 0, lev.output
    out = _text(lev.stdout)
    assert "gap: off / on" in out and "8.96% / 0.00%" in out
    assert "not ranked" in out and "kv_fp8:off (8.96% from its bound)" in out


def _text(table: str) -> str:
    """A rich table's text without its borders and line breaks (cells wrap at 160 columns)."""
    import re

    return " ".join(re.sub(r"[│┃┏┓┗┛┡┩━─┳┻╇└┘┴┬]+", " ", table).split())


def test_levers_do_not_rank_a_lever_whose_side_was_cut(sweep_instance):
    ex = cut_executor.CutExecutor({"kv_fp8:off": 0.0896})
    rep = run_levers(sweep_instance, ex)
    row = next(r for r in rep.rows if r.id == "kv_fp8")
    assert row.rank is None and "time limit" in row.note and not row.comparable
    assert any("kv_fp8" in n and "--time-limit" in n for n in rep.notes), rep.notes
