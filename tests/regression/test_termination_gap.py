"""Issue 15, item 8: the plan said ``"termination": "optimal"`` for a solve that stopped at
the MIP gap asked for (HiGHS calls both 'Optimal'). The plan now records what happened:
'gap_reached' (stopped within --mip-gap, not proved) or 'optimal' (the bound meets the
incumbent), and the table says which."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from fleetplan.cli.app import app


def test_the_brief_plan_stopped_at_its_gap_and_says_so(plan_file):
    plan = json.loads(plan_file("gemini-ironwood").read_text())
    s = plan["solver"]
    assert 0 < s["gap"] <= plan["options"]["mip_gap"]  # a real gap, within the 1% asked for
    assert s["termination"] == "gap_reached"


def test_a_proved_optimum_is_optimal_and_the_table_tells_them_apart(tmp_path):
    import yaml

    from tests.conftest import tiny_data

    f = tmp_path / "tiny.yaml"
    f.write_text(yaml.safe_dump(tiny_data()))
    r = CliRunner().invoke(app, ["solve", str(f), "--mip-gap", "0", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)["solver"]
    assert s["termination"] == "optimal" and s["gap"] == 0
    r = CliRunner().invoke(app, ["solve", str(f), "--mip-gap", "0"])
    assert "proved optimal" in r.stdout and "stopped at the MIP gap" not in r.stdout


def test_the_rule():
    from fleetplan.solvers.base import TERMINATIONS, optimal_or_gap_reached

    assert "gap_reached" in TERMINATIONS
    assert optimal_or_gap_reached(100.0, 100.0) == "optimal"
    assert optimal_or_gap_reached(29684.5, 29684.5 * (1 - 1e-12)) == "optimal"  # round-off
    assert optimal_or_gap_reached(29684.5, 29418.0) == "gap_reached"  # 0.9%
    assert optimal_or_gap_reached(1e-3, 0.0) == "gap_reached"  # an absolute gap above HiGHS's 1e-6 tolerance
    assert optimal_or_gap_reached(5e-7, 0.0) == "optimal"
    assert optimal_or_gap_reached(10.0, None) == "optimal"  # an LP: no bound to compare
