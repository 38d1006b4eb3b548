"""Issue 39 items 3 and 18: nothing but the command's own output reaches stdout.

Item 3: ``report --json`` on a shortfall plan printed Pyomo's ``WARNING (W1002): Setting
Var 'v_route[...]' to a numeric value -2.22e-16 outside the bounds (0.0, 1.0)`` on stdout
before the JSON document: the what-if fixed its routing shares to the solver's values of
an earlier stage (noise around 0 and 1), and Pyomo's logger writes to stdout. The shares
are now clamped into their bounds before they are fixed, and the command line routes every
library logger to stderr at start-up.

Item 18: a Ctrl-C during the model build printed Pyomo's ``ERROR: Constructing component
'c_warm_use' ... KeyboardInterrupt`` on stdout. Records logged while an interrupt unwinds
are dropped (the command's one 'interrupted' line says what happened).

Pytest installs a handler on the root logger, which silences Pyomo's own stdout handler in
the test process; so each CLI check runs the command line in a process of its own.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.instance.io import bundled_instance_path
from tests.conftest import tiny_data

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _fleetplan(*args: str, script: str = "", timeout: float = 300) -> subprocess.CompletedProcess:
    """``fleetplan ARGS`` through the console entry point in a fresh interpreter, after ``script``."""
    code = textwrap.dedent(script) + f"\nimport sys\nsys.argv = ['fleetplan', *{list(args)!r}]\nfrom fleetplan.cli.entry import main\nmain()\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "160"})


def test_report_json_of_a_shortfall_plan_is_json_alone(tmp_path):
    """The issue's reproduction: the Gemini instance with one pod in us-east (a region that
    cannot hold its pools: a shortfall plan), written with --write-unverified, then
    ``report --json``: stdout parses as JSON."""
    data = yaml.safe_load(bundled_instance_path("gemini-ironwood").read_text())
    data["regions"]["us-east"]["pods"] = {"ironwood": {"installed": 0, "available_new": 1}}
    (tmp_path / "inst.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    r = runner.invoke(app, ["solve", str(tmp_path / "inst.yaml"), "--time-limit", "60", "--write-unverified", "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 3 and json.loads((tmp_path / "p.json").read_text())["status"] == "shortfall", r.output
    p = _fleetplan("report", str(tmp_path / "p.json"), "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # nothing before or after the document
    assert doc["plan_status"] == "shortfall"
    assert "W1002" not in p.stdout + p.stderr  # the shares were clamped into their bounds, not loaded out of them


def test_fixed_routing_shares_are_clamped_into_their_bounds(caplog):
    """The what-if's fixed routing shares carry the solver's noise (-2.2e-16, 1 + 2.2e-16):
    fixing them logged Pyomo's W1002 warning per share."""
    from fleetplan.instance.io import parse_instance
    from fleetplan.sizing import solve
    from fleetplan.whatif import decide, parse_event

    flat = [1.0] * 24
    pods = {"acc": {"installed": 0, "available_new": 40}}
    inst = parse_instance(tiny_data(regions={
        "a": {"peak_rps": 80, "hourly_load": flat, "pods": pods, "failover_to": ["b", "c"]},
        "b": {"peak_rps": 80, "hourly_load": flat, "pods": pods, "failover_to": ["a", "c"]},
        "c": {"peak_rps": 80, "hourly_load": flat, "pods": pods, "failover_to": ["a", "b"]},
    }, failover={"n_minus_1": True}), "three")
    plan = solve(inst).plan
    ev = parse_event(inst, plan, ["c"], [], 0, "steady")[0]
    noise = {("c", "a", "all"): 1.0000000000000002, ("c", "b", "all"): -2.220446049250313e-16}
    with caplog.at_level(logging.WARNING, logger="pyomo"):
        dec, _d = decide(inst, plan, ev, fixed_routes=noise)
    assert not [r for r in caplog.records if r.name.startswith("pyomo")], caplog.text
    assert dec.routes == {("c", "a", "all"): 1.0, ("c", "b", "all"): 0.0}


def test_a_library_warning_goes_to_stderr_not_stdout():
    """Any library logger (here Pyomo's, as W1002 was) writes to stderr once the command line
    has started: stdout carries only the command's output. The record is logged while the
    command runs (from the instance loader the command calls)."""
    p = _fleetplan("perf", "gemini-ironwood", "--json", script="""
        import logging
        import fleetplan.instance.io as io
        load = io.load_instance_overlaid  # what perf calls (it prints the loader's notes since issue 40)
        def noisy(*a, **k):
            import pyomo.environ  # noqa: F401 -- Pyomo's own stdout handler, as a command that builds a model has it
            logging.getLogger("pyomo.core").warning("a library warning")
            return load(*a, **k)
        io.load_instance_overlaid = noisy
    """)
    assert p.returncode == 0, p.stderr
    json.loads(p.stdout)
    assert "a library warning" in p.stderr and "a library warning" not in p.stdout


def test_ctrl_c_in_the_model_build_prints_nothing_on_stdout(tmp_path):
    """A KeyboardInterrupt raised inside Pyomo's construction of a component (a warm-pool
    bound rule, as the issue's Ctrl-C inside c_warm_use): exit 130, stdout empty, and
    Pyomo's 'Constructing component ... failed' record dropped from stderr too."""
    inst = tiny_data(failover={"n_minus_1": True, "warm_pool": {"min_slices_per_region": 1, "max_slices_per_region": 4}})
    (tmp_path / "inst.yaml").write_text(yaml.safe_dump(inst), encoding="utf-8")
    p = _fleetplan("solve", str(tmp_path / "inst.yaml"), "--json", script="""
        from fleetplan.tables.derived import ModelData
        def interrupted(self, *a, **k):
            raise KeyboardInterrupt  # Ctrl-C while Pyomo constructs v_warm_use / c_warm_use
        ModelData.warm_max = interrupted
    """)
    assert p.returncode == 130, p.stderr
    assert p.stdout == ""
    assert "interrupted" in p.stderr and "Constructing component" not in p.stderr and "KeyboardInterrupt" not in p.stderr, p.stderr
