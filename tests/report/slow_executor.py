"""A plug-in executor for the interrupt test: a local process pool whose tasks, like a
HiGHS solve deep in C, do not notice SIGINT (blocked) and run for ten minutes. Each task
touches ``$FLEETPLAN_TEST_STARTED`` and writes ``$FLEETPLAN_TEST_STARTED.<pid>`` when it
starts, and touches ``$FLEETPLAN_TEST_STARTED.finished`` if it ever ends: the interrupt
test's verdict is that none ended and every worker is gone, never a wall-clock bound."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from fleetplan.report.executor import LocalPoolExecutor


def _stubborn(task: dict) -> dict:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    marker = os.environ.get("FLEETPLAN_TEST_STARTED")
    if marker:
        Path(f"{marker}.{os.getpid()}").touch()
        Path(marker).touch()
    time.sleep(600)
    if marker:
        Path(f"{marker}.finished").touch()
    return {"key": task["key"], "status": "no_solution"}


class Stubborn(LocalPoolExecutor):
    name = "stubborn"

    def map(self, fn, tasks, on_done=None):
        return super().map(_stubborn, tasks, on_done)


def make(workers: int = 2) -> Stubborn:
    return Stubborn(workers)
