"""Newcomer trial (issue 15 follow-up): a shortfall solve stopped by the time limit before
the cost stage proved a bound printed "stopped at the time limit, 0.00% above the best
bound ... best bound inf $/h", which contradicts itself. The line now says no bound was
proved and that the plan's cost is an upper bound only."""

from __future__ import annotations

import math

from typer.testing import CliRunner

import yaml

from fleetplan.cli.app import app
from fleetplan.cli.solve import console, render_plan
from fleetplan.results.plan import Plan
from tests.conftest import tiny_data


def _plan(tmp_path) -> Plan:
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(tiny_data()))
    r = CliRunner().invoke(app, ["solve", str(tmp_path / "t.yaml"), "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 0, r.output
    return Plan.model_validate_json((tmp_path / "p.json").read_text())


def _line(plan: Plan) -> str:
    with console.capture() as cap:
        render_plan(plan)
    text = cap.get()
    head = text[text.index("solver "):]
    return " ".join(head[:head.index("constraints")].split())  # the status line, unwrapped


def test_time_limit_without_a_proved_bound_says_so(tmp_path):
    plan = _plan(tmp_path)
    unproved = plan.model_copy(update={"solver": plan.solver.model_copy(update={"termination": "time_limit", "bound": math.inf, "gap": 0.0})})
    line = _line(unproved)
    assert "before a bound on the cost was proved" in line and "best bound none proved" in line
    assert "0.00% above" not in line and "inf" not in line
    # a proved bound still prints as before
    proved = plan.model_copy(update={"solver": plan.solver.model_copy(update={"termination": "time_limit", "gap": 0.004,
                                                                              "pod_stage_termination": None, "pod_stage_gap": None})})
    line = _line(proved)
    assert "stopped at the time limit, a gap of 0.40% (its cost 0.40% above the best bound)" in line and "$/h;" in line
    # sized with its pods: the pod stage's own gap and the gap against the plain sizing's bound
    placed = plan.model_copy(update={"solver": plan.solver.model_copy(update={"termination": "time_limit", "gap": 0.004,
                                                                              "pod_stage_termination": "time_limit", "pod_stage_gap": 0.002})})
    line = _line(placed)
    assert "placed fleet at a gap of 0.20% (its cost 0.20% above its own bound)" in line
    assert "a gap of 0.40% (its cost 0.40% above the plain sizing's bound)" in line
