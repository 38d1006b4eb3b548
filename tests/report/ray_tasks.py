"""Task functions the Ray tests run in their workers (a module of their own, light to
import in a fresh worker process; module-level so Ray ships them by reference)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def crash_once(task: dict) -> dict:
    """The first attempt kills its own worker process (a lost worker, as when a node dies
    or is preempted); a retry finds the marker and answers."""
    marker = Path(task["marker"])
    if not marker.exists():
        marker.touch()
        os._exit(1)
    return {"key": task["key"], "attempts": 2}


def stubborn(task: dict) -> dict:
    """Like a solve deep in HiGHS: ignores interrupts and runs for two minutes; writes
    its pid to ``task['pid_dir']`` when it starts."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    (Path(task["pid_dir"]) / f"{os.getpid()}").touch()
    time.sleep(120)
    return {"key": task["key"]}


def echo(task: dict) -> dict:
    return {"key": task["key"], "pid": os.getpid()}


def crash_first_then_solve(task: dict, marker_dir: str) -> dict:
    """A sweep's solve (:func:`fleetplan.report.sweep.solve_task`) whose first task to start
    kills its own worker once (as ``kill -9`` of a ``ray::`` worker mid-sweep does); its
    retry waits until ``marker_dir/release`` exists (the test creates it once the driver
    has printed Ray's message about the retry, so the message surely comes before the
    sweep's output) and then solves."""
    from fleetplan.report.sweep import solve_task

    d = Path(marker_dir)
    try:
        fd = os.open(d / "crashed", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        if (d / "crashed").read_text() == task["key"]:
            deadline = time.monotonic() + 60
            while not (d / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
    else:
        os.write(fd, task["key"].encode())
        os.close(fd)
        os._exit(1)
    return solve_task(task)


def stubborn_solve(task: dict, pid_dir: str) -> dict:
    """A sweep's solve that is :func:`stubborn` (two minutes, deaf to interrupts; its pid in ``pid_dir``)."""
    return stubborn({**task, "pid_dir": pid_dir})
