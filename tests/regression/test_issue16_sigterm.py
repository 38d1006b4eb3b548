"""Issue 16: SIGTERM -- what ``timeout``, Kubernetes and systemd send -- took none of
Ctrl-C's paths. Python's default action killed the process on the spot: exit -15 with no
message, the process's temporary directory (MPS exports, HiGHS logs) left under $TMPDIR,
and a HiGHS solve was never told to stop. (Ctrl-C did not stop a HiGHS solve either: it
ran in the main thread, so the KeyboardInterrupt waited for HiGHS's own time limit.)

Now SIGTERM raises the KeyboardInterrupt Ctrl-C raises (fleetplan.interrupts), the
native solves run in a thread that is told to stop (run_interruptible: cancelSolve for
HiGHS, stop_search for CP-SAT), and the command exits 143 with one line.

The CLI signal is sent at a known point whatever the machine's load: the child pauses
with an output's temporary file written and not yet renamed (FLEETPLAN_DEBUG_PAUSE,
docs/cli.md) and says so on stderr; the test waits for that line. The HiGHS solve is
interrupted in-process, on a MIP no machine solves in the time it is given.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import tiny_data

ROOT = Path(__file__).resolve().parents[2]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".fleetplan-" in p.name)


def run_until_paused(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """Run ``fleetplan ARGS`` paused before its output's rename, SIGTERM it there, and
    return its exit code and output. $TMPDIR is the test's, to see what it leaves there."""
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "FLEETPLAN_DEBUG_PAUSE": "before-rename", "TMPDIR": str(tmpdir)}
    err = (tmp_path / "stderr.txt").open("w+")
    p = subprocess.Popen([sys.executable, "-m", "fleetplan", *args], stdout=subprocess.PIPE, stderr=err, env=env, text=True)
    try:
        end = time.monotonic() + 300  # a hang guard, not the verdict
        while "fleetplan: paused at before-rename" not in (tmp_path / "stderr.txt").read_text():
            if p.poll() is not None:
                pytest.fail(f"the command ended (exit {p.returncode}) before its write: {(tmp_path / 'stderr.txt').read_text()[-2000:]}")
            if time.monotonic() > end:
                pytest.fail("the command never reached its write")
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err.seek(0)
    return subprocess.CompletedProcess(args, p.returncode, out, err.read())


def test_sigterm_while_solve_writes_its_plan_exits_143_and_keeps_the_earlier_one(tmp_path):
    inst = tmp_path / "tiny.yaml"
    inst.write_text(yaml.safe_dump(tiny_data()))
    plan = tmp_path / "plan.json"
    plan.write_text("earlier plan\n")
    r = run_until_paused(["solve", str(inst), "-o", str(plan)], tmp_path)
    assert r.returncode == 143, r.stderr
    # besides the pause, the one interrupt line (and solve's progress lines and its note on the table cache, printed before the write)
    lines = [x for x in r.stderr.splitlines() if not x.startswith(("fleetplan: paused", "candidate tables: ", "solve: "))]
    assert len(lines) == 1 and lines[0].startswith("interrupted (SIGTERM)"), r.stderr
    assert "Traceback" not in r.stderr
    assert plan.read_text() == "earlier plan\n"  # the earlier output intact
    assert _leftovers(tmp_path) == []  # the plan's temporary file removed
    assert list((tmp_path / "tmpdir").iterdir()) == []  # the solver's MPS/log directory removed


@pytest.fixture
def sigterm_handler():
    """The command line's SIGTERM handler installed in this (main) thread for one test."""
    from fleetplan import interrupts

    old = signal.getsignal(signal.SIGTERM)
    assert interrupts.install()
    interrupts._received.clear()
    yield interrupts
    signal.signal(signal.SIGTERM, old)
    interrupts._received.clear()


def test_run_interruptible_takes_sigterm_as_ctrl_c(sigterm_handler):
    """SIGTERM while the native call runs asks it to stop and is re-raised as Terminated
    (a KeyboardInterrupt) once it has returned; the exit status is 143."""
    from fleetplan.solvers.base import run_interruptible

    stopped = threading.Event()

    def native():
        os.kill(os.getpid(), signal.SIGTERM)
        stopped.wait(60)  # a hang guard: stop() ends it
        return "stopped" if stopped.is_set() else "ran out"

    with pytest.raises(sigterm_handler.Terminated):
        run_interruptible(native, stopped.set)
    assert stopped.is_set()
    assert sigterm_handler.exit_status() == 143 and sigterm_handler.cause() == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is sigterm_handler.on_sigterm  # the handler is back


def test_run_interruptible_watchdog_stops_a_solver_past_its_deadline():
    """The wall clock is enforced from outside: a native call that ignores its own limit
    is told to stop once the deadline has passed, and what it returns is returned."""
    from fleetplan.solvers.base import run_interruptible

    stopped = threading.Event()
    deadline = time.monotonic() + 0.3
    at = []

    def native():
        stopped.wait(60)  # a hang guard: the watchdog ends it
        return "stopped" if stopped.is_set() else "ran out"

    def stop():
        at.append(time.monotonic())
        stopped.set()

    assert run_interruptible(native, stop, deadline=deadline) == "stopped"
    assert at and at[0] >= deadline  # never before the deadline


def _hard_mip():
    """A random general-integer multi-knapsack (60 variables, 40 rows): HiGHS 1.16 is far
    from proving it in 8 s (thousands of nodes), so a solve given 600 s is still running
    when it is interrupted."""
    import numpy as np
    import pyomo.environ as pyo

    rng = np.random.default_rng(0)
    n, k = 60, 40
    a = rng.integers(1, 50, (k, n))
    c = rng.integers(1, 100, n)
    m = pyo.ConcreteModel()
    m.x = pyo.Var(range(n), domain=pyo.NonNegativeIntegers, bounds=(0, 10))
    m.c = pyo.Constraint(range(k), rule=lambda m, i: sum(int(a[i, j]) * m.x[j] for j in range(n)) <= int(2 * a[i].sum()))
    m.obj = pyo.Objective(expr=-sum(int(c[j]) * m.x[j] for j in range(n)))
    return m


def test_sigterm_during_a_highs_solve_stops_it(sigterm_handler):
    """The HiGHS solve runs in a thread; SIGTERM stops it (cancelSolve) and solve_highs
    raises Terminated, leaving no solver thread and no temporary file. Before, h.run()
    held the main thread until HiGHS's own time limit (600 s here)."""
    from fleetplan.solvers.base import SolveOptions
    from fleetplan.solvers.highs import solve_highs
    from fleetplan.tempfiles import process_temp_dir

    m = _hard_mip()
    d = process_temp_dir()

    def send_when_solving():
        end = time.monotonic() + 120
        while time.monotonic() < end:  # HiGHS's log says it is solving the MIP
            for log in d.glob("*.highs.log"):  # HiGHS's log (beside the MPS export until issue 41)
                try:
                    if "Solving MIP model" in log.read_text() or "Nodes" in log.read_text():
                        os.kill(os.getpid(), signal.SIGTERM)
                        return
                except OSError:
                    pass
            time.sleep(0.02)

    t = threading.Thread(target=send_when_solving, daemon=True)
    t.start()
    t0 = time.monotonic()
    with pytest.raises(sigterm_handler.Terminated):
        solve_highs(m, SolveOptions(time_limit_s=600.0, mip_gap=0.0), warm_start=False)
    assert time.monotonic() - t0 < 300  # stopped, not run to its 600 s limit (a generous hang guard)
    t.join(5)
    assert not any(th.name == "fleetplan-solver" and th.is_alive() for th in threading.enumerate())
    assert list(d.iterdir()) == []
