"""Issue 16 (newcomer trial, S4b): `fleetplan purchase --time-limit 30` ran on for 300 s.

The model build (a sizing block per tree node) never looked at the deadline, and printed
nothing while it ran; only the solves after it did. The build now checks the deadline
before every node and inside each node's build (the candidate tables' and the sizing
families' own checks, under a deadline scope), shows a status line per node, and a build
the limit cuts ends with exit 3 "no purchase plan: the time limit passed while building
node k of N". The deadline is made to pass deterministically (one already in the past,
or a check inside a node's build that fires), so nothing depends on the machine's speed.
Each test fails before the change: the build had no deadline and no progress, the CLI said
"the solver stopped (time_limit) without a plan", and a deadline check that fired inside
a node's build escaped as a bare TimeLimitReached.
"""

from __future__ import annotations

import time
import types

import pytest
import yaml
from typer.testing import CliRunner

import fleetplan.purchase.model as model
import fleetplan.purchase.solve as solve
from fleetplan.cli.app import app
from fleetplan.deadline import TimeLimitReached, current
from fleetplan.purchase.io import load_purchase
from fleetplan.solvers.base import SolveOptions
from tests.purchase.helpers import two_paths, write_base


def _file(tmp_path):
    f = tmp_path / "purchase.yaml"
    f.write_text(yaml.safe_dump(two_paths(write_base(tmp_path)), sort_keys=False))  # 5 nodes, 2 scenarios
    return f


def test_a_deadline_already_passed_stops_the_build_at_node_1_exit_3(tmp_path, monkeypatch):
    real = time.perf_counter
    monkeypatch.setattr(solve, "time", types.SimpleNamespace(perf_counter=lambda: real() - 1000.0))  # its deadline is 1,000 s ago
    built = []
    families = model.add_sizing_families
    monkeypatch.setattr(model, "add_sizing_families", lambda *a: (built.append(a), families(*a)))
    out = tmp_path / "plan.json"
    out.write_text("earlier")
    r = CliRunner().invoke(app, ["purchase", str(_file(tmp_path)), "--no-value", "--time-limit", "60", "-o", str(out)])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    err = " ".join(r.stderr.split())
    assert r.exit_code == 3, r.output
    assert "no purchase plan: the time limit passed while building node 1 of 5 (--time-limit 60 s); raise --time-limit" in err, err
    assert "the solver stopped" not in err and not built and out.read_text() == "earlier"


def test_a_deadline_inside_a_nodes_build_names_that_node_and_progress_shows_each(tmp_path, monkeypatch):
    real = model.add_sizing_families
    calls = []

    def families(block, data):
        calls.append(current())
        if len(calls) == 3:  # what fleetplan.deadline.check in node 3's tables or families raises when the limit passes
            raise TimeLimitReached("building the candidate tables")
        real(block, data)

    monkeypatch.setattr(model, "add_sizing_families", families)
    said: list[str] = []
    with pytest.raises(solve.NoPurchasePlan) as e:
        solve.solve_purchase(load_purchase(_file(tmp_path)), SolveOptions(time_limit_s=600.0), value=False, progress=said.append)
    assert str(e.value) == "the time limit passed while building node 3 of 5 (--time-limit 600 s); raise --time-limit"
    assert all(at is not None for at in calls), "a node's build runs without the command's deadline in scope"
    steps = [m for m in said if "building node" in m]
    assert [m.split(": ", 1)[1].split(" (")[0] for m in steps] == [f"building node {k} of 5" for k in (1, 2, 3)], said
    assert steps[0].startswith("solving the scenario tree (5 nodes, 2 scenarios): building node 1 of 5 (root, 2027Q1)")


def test_sigterm_during_the_build_is_an_interrupt_not_a_time_limit(tmp_path):
    """The trial once saw "no purchase plan: the solver stopped (time_limit) without a plan"
    after a SIGTERM. A real SIGTERM at the build (the child paused there, so the signal
    lands at a known point whatever the load): exit 143, one 'interrupted' line."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    f = _file(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200", "FLEETPLAN_DEBUG_PAUSE": "purchase-build", "TMPDIR": str(tmp_path)}
    err = (tmp_path / "stderr.txt").open("w+")
    p = subprocess.Popen([sys.executable, "-m", "fleetplan", "purchase", str(f), "--no-value", "--time-limit", "600"],
                         stdout=subprocess.PIPE, stderr=err, env=env, text=True)
    try:
        end = time.monotonic() + 300  # a hang guard, not the verdict
        while "fleetplan: paused at purchase-build building node 1 of 5" not in (tmp_path / "stderr.txt").read_text():
            if p.poll() is not None:
                pytest.fail(f"the command ended (exit {p.returncode}) before its build: {(tmp_path / 'stderr.txt').read_text()[-2000:]}")
            if time.monotonic() > end:
                pytest.fail("the command never reached its build")
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err.seek(0)
    text = err.read()
    lines = [x for x in text.splitlines() if x.strip() and not x.startswith("fleetplan: paused")]
    assert p.returncode == 143, text
    assert lines == ["interrupted (SIGTERM): no purchase plan."], text


def test_the_infeasibility_diagnosis_build_honours_the_deadline_too(tmp_path):
    """The diagnosis of a hard tree with no plan builds the tree again (unserved priced):
    with the deadline passed it says so before building, rather than build it all."""
    why = solve.diagnose_infeasible(load_purchase(_file(tmp_path)), SolveOptions(time_limit_s=60.0), time.perf_counter() - 1.0)
    assert why.startswith("the time limit passed while building node 1 of 5 of the diagnosis"), why
