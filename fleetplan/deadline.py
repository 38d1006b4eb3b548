"""Wall-clock deadlines: ``--time-limit`` bounds the whole command, from process start.

A deadline is a :func:`time.monotonic` timestamp (seconds). The CLI sets it to the
process's start plus ``--time-limit`` (:func:`process_start`), so imports, reading the
instance and building the candidate tables count against the limit, not only the
solver. Long loops that precede the solver (the candidate tables, the model build) call
:func:`check` at each step; inside :func:`deadline_scope` it raises
:class:`TimeLimitReached` once the deadline has passed, and outside one it does nothing.
The solvers read :func:`seconds_left` and hand what remains to HiGHS / CP-SAT.

Physics shared by several phases (the colocated replicas' rate searches of
:mod:`fleetplan.perf.colocated`, run by the candidate tables and by the verifier alike)
calls :func:`check` without a phase at each step of its searches; the exception then names
the enclosing :func:`phase` ('building the candidate tables', 'verifying the plan').
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

__all__ = ["TimeLimitReached", "process_start", "command_start", "mark_process_command", "deadline_scope", "phase", "check", "current", "seconds_left"]

#: :func:`time.monotonic` when this module was first imported: the fallback process
#: start where /proc is not readable (it misses only the interpreter's own start-up).
_IMPORTED = time.monotonic()

_CURRENT: ContextVar[float | None] = ContextVar("fleetplan_deadline", default=None)
#: What the command is doing, for a :func:`check` called without a phase (set by :func:`phase`).
_PHASE: ContextVar[str] = ContextVar("fleetplan_deadline_phase", default="computing the physics tables")
#: Set by the console entry point (:func:`mark_process_command`): the command is the process.
_PROCESS_COMMAND = False


class TimeLimitReached(Exception):
    """The deadline passed during ``phase`` (e.g. 'building the candidate tables'), before
    any incumbent existed."""

    def __init__(self, phase: str):
        super().__init__(f"the time limit passed while {phase}")
        self.phase = phase


def process_start() -> float:
    """The :func:`time.monotonic` timestamp (s) at which this process started.

    Linux: field 22 of ``/proc/self/stat`` (start time in clock ticks after boot, 10 ms
    resolution) against ``CLOCK_BOOTTIME``, the clock it is measured on (proc(5)).
    Elsewhere, or when /proc is unreadable: when fleetplan was first imported.
    """
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces
        start_ticks = int(fields[19])  # field 22 overall; fields[0] is field 3 (state)
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
        now = time.monotonic()
        if 0.0 <= age <= now - _IMPORTED + 3600.0:  # sane: not in the future, not before the import by hours
            return now - age
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    return _IMPORTED


def mark_process_command() -> None:
    """Called by the ``fleetplan`` console entry point: this process runs one command, so
    the command started when the process did (:func:`command_start`)."""
    global _PROCESS_COMMAND
    _PROCESS_COMMAND = True


def command_start() -> float:
    """When the running command started (monotonic s): the process start under the
    ``fleetplan`` console entry point (imports count), else now -- a command invoked in
    a longer-lived process (typer's CliRunner, a notebook) starts when it is called."""
    return process_start() if _PROCESS_COMMAND else time.monotonic()


def current() -> float | None:
    """The deadline of the enclosing :func:`deadline_scope` (monotonic s), or None."""
    return _CURRENT.get()


def seconds_left(deadline: float | None = None) -> float | None:
    """Seconds until ``deadline`` (default: the current scope's), negative once passed;
    None without a deadline."""
    at = current() if deadline is None else deadline
    return None if at is None else at - time.monotonic()


@contextmanager
def deadline_scope(at: float | None) -> Iterator[None]:
    """Within the block, :func:`check` raises once ``at`` (monotonic s) has passed; None
    keeps the enclosing scope's deadline."""
    token = _CURRENT.set(at if at is not None else _CURRENT.get())
    try:
        yield
    finally:
        _CURRENT.reset(token)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Within the block, :func:`check` called without a phase names ``name`` (e.g.
    'verifying the plan'); it does not set or change the deadline."""
    token = _PHASE.set(name)
    try:
        yield
    finally:
        _PHASE.reset(token)


def check(phase: str | None = None) -> None:
    """Raise :class:`TimeLimitReached` (naming ``phase``, default the enclosing
    :func:`phase`'s) when the current deadline has passed; a no-op without one. Cheap (one
    clock read and a context-variable lookup): call it once per loop step."""
    at = _CURRENT.get()
    if at is not None and time.monotonic() >= at:
        raise TimeLimitReached(phase if phase is not None else _PHASE.get())
