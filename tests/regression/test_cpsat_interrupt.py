"""Issue 15, item 7: Ctrl-C during a CP-SAT solve was taken for a time limit. CP-SAT's own
SIGINT handler stopped the search and the status came back FEASIBLE ("stopped at the time
limit", exit 0, ``-o plan.json`` replaced) or UNKNOWN (exit 3, "a bug"). It must exit 130
and leave the output untouched, as the HiGHS path does.

The signal is sent at a known point *inside* the CP-SAT solve, whatever the machine's
load: the solver's log is let through to a pipe of one page (4 KiB) that the test stops
reading as soon as CP-SAT prints ``Starting CP-SAT solver``. From then on the solver can
write at most 4 KiB more before it blocks on the pipe -- still in its presolve (the
tiny instance's solve logs ~20 KiB after that line) -- so the SIGINT is always delivered
while CP-SAT is solving. The test then drains the pipe and waits."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import tiny_data

# capture_output would hold the solver's log in the child; let it reach fd 1 instead.
CHILD = """\
import sys
import pyomo.common.tee as tee


class _Passthrough:
    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


tee.capture_output = _Passthrough
from fleetplan.cli.app import main

sys.argv = ["fleetplan", *sys.argv[1:]]
main()
"""

MARK = b"Starting CP-SAT solver"


def _read_until(fd: int, mark: bytes, deadline_s: float) -> bytes:
    got = b""
    end = time.monotonic() + deadline_s
    while mark not in got:
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            pytest.fail(f"CP-SAT never started within {deadline_s:.0f} s; output so far: {got[-2000:]!r}")
        chunk = os.read(fd, 64)  # small reads: stop soon after the mark, leaving the pipe to fill
        if not chunk:
            pytest.fail(f"the solve ended before CP-SAT started; output: {got[-2000:]!r}")
        got += chunk
    return got


@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="needs Linux pipes (F_SETPIPE_SZ)")
def test_ctrl_c_during_cpsat_exits_130_and_leaves_the_plan(tmp_path):
    inst = tmp_path / "tiny.yaml"
    inst.write_text(yaml.safe_dump(tiny_data()))
    plan = tmp_path / "plan.json"
    plan.write_text("earlier plan\n")
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    r, w = os.pipe()
    fcntl.fcntl(r, fcntl.F_SETPIPE_SZ, 4096)
    err = (tmp_path / "stderr.txt").open("w+")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "COLUMNS": "200"}
    p = subprocess.Popen([sys.executable, str(child), "solve", str(inst), "--solver", "cpsat", "-o", str(plan)],
                         stdout=w, stderr=err, env=env)
    os.close(w)
    try:
        _read_until(r, MARK, 120.0)
        p.send_signal(signal.SIGINT)  # CP-SAT is at most 4 KiB of log past its start: solving
        while os.read(r, 65536):  # drain, so the solver can run on and see the stop
            pass
        rc = p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
        os.close(r)
    err.seek(0)
    stderr = err.read()
    assert rc == 130, stderr
    assert "interrupted" in stderr and "left as it was" in stderr
    assert "time limit" not in stderr and "a bug" not in stderr
    assert plan.read_text() == "earlier plan\n"


def test_run_interruptible_stops_the_solver_and_re_raises():
    """The helper itself: a KeyboardInterrupt while the native call runs asks it to stop
    (repeatedly, until it returns) and is re-raised; the native call is never abandoned."""
    import threading

    from fleetplan.solvers.base import run_interruptible

    stopped = threading.Event()
    calls = []

    def native():
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C arrives while the solver runs
        stopped.wait(30)
        return "stopped" if stopped.is_set() else "ran out"

    def stop():
        calls.append(1)
        stopped.set()

    with pytest.raises(KeyboardInterrupt):
        run_interruptible(native, stop)
    assert calls and stopped.is_set()
    assert run_interruptible(lambda: 42, stop) == 42
    with pytest.raises(ZeroDivisionError):
        run_interruptible(lambda: 1 / 0, stop)
