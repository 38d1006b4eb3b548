"""What every sweep executor is (:class:`SweepExecutor`: tasks and results are JSON-able
dicts, results in task order) and the default worker count -- the base the built-in
executors (:mod:`fleetplan.report.executor`) and the optional Ray one
(:mod:`fleetplan.report.ray_executor`) both build on."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any, Callable, Sequence

__all__ = ["SweepExecutor", "Task", "Result", "default_workers"]


Task = dict[str, Any]


Result = dict[str, Any]


class SweepExecutor(ABC):
    """Runs ``fn`` on every task and returns the results in task order.

    ``fn`` must be a module-level function (picklable by reference) taking one task
    dict and returning one result dict. ``on_done(i, result)`` is called in the
    calling process as each task finishes (in completion order), for a progress bar.
    An exception raised by ``fn`` (or Ctrl-C) propagates to the caller at once; tasks
    not yet started are dropped.
    """

    name: str = "executor"
    workers: int = 1

    @property
    def description(self) -> str:
        """Where the tasks run, for a progress line ('2 worker(s)', 'Ray at ray://head:10001 (64 CPUs)')."""
        return f"{self.workers} worker(s)"

    def open(self) -> None:
        """Acquire what :meth:`map` runs on (connect to a cluster) before any work, so a
        failure is reported first; optional (``map`` opens and closes by itself when it
        is not open). Raises InputError. Default: nothing to do."""

    def close(self) -> None:
        """Release what :meth:`open` acquired. Default: nothing to do."""

    def __enter__(self) -> "SweepExecutor":
        """``with get_executor('ray', ray_address=...) as ex:`` keeps one connection (or one
        local cluster) across several sweeps; each ``map`` outside it opens and closes."""
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @abstractmethod
    def map(self, fn: Callable[[Task], Result], tasks: Sequence[Task], on_done: Callable[[int, Result], None] | None = None) -> list[Result]:
        ...


def default_workers() -> int:
    """Two workers, or fewer on a machine with fewer cores (solves are single-threaded)."""
    return max(1, min(2, os.cpu_count() or 1))
