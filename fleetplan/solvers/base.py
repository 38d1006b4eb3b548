"""Solver-agnostic options and results (never None: a time limit with an incumbent is a
result, reported with its gap)."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

__all__ = ["SolveOptions", "SolveResult", "TERMINATIONS", "relative_gap", "optimal_or_gap_reached", "run_interruptible", "solver_seconds",
           "out_of_time"]

T = TypeVar("T")

#: termination values every backend maps to: 'optimal' = proved optimal (the bound meets
#: the incumbent); 'gap_reached' = stopped because the gap fell to the --mip-gap asked for
#: (HiGHS and CP-SAT both call this 'optimal'); 'time_limit' = stopped at the time limit
#: (with or without an incumbent)
TERMINATIONS = ("optimal", "gap_reached", "time_limit", "infeasible", "unbounded", "infeasible_or_unbounded", "error", "unknown")
#: A relative gap at or below this is a proved optimum (round-off, not a gap).
PROVED_REL_GAP = 1e-9
#: An absolute gap at or below this (objective units) is a proved optimum: HiGHS's default mip_abs_gap.
PROVED_ABS_GAP = 1e-6


@dataclass(frozen=True)
class SolveOptions:
    """Options every backend understands.

    Attributes: solver ('highs' or 'cpsat'); time_limit_s (wall seconds, None = no
    limit); deadline (a :func:`time.monotonic` timestamp, s, None = none: the solve ends
    by then whatever ``time_limit_s`` says -- the CLI sets it to the process start plus
    ``--time-limit``, :mod:`fleetplan.deadline`); mip_gap (relative, e.g. 1e-4); threads
    (HiGHS threads / CP-SAT workers; 1 keeps runs deterministic); seed (random seed).
    """

    solver: str = "highs"
    time_limit_s: float | None = None
    mip_gap: float = 0.01
    threads: int = 1
    seed: int = 0
    rounding_start: bool = False
    deadline: float | None = None


@dataclass
class SolveResult:
    """Outcome of one solve. ``objective`` is the incumbent's value (None without one),
    ``bound`` the best proven bound, ``gap`` relative (None when unknown); ``has_incumbent``
    says whether variable values were loaded into the model."""

    termination: str
    solution_status: str
    has_incumbent: bool
    objective: float | None
    bound: float | None
    gap: float | None
    wall_time_s: float
    solver: str
    log: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.has_incumbent


def solver_seconds(options: SolveOptions, started: float) -> float | None:
    """Seconds a backend may still give its solver (None = no limit): the least of
    ``time_limit_s`` counted from ``started`` (a :func:`time.monotonic` timestamp, when the
    backend was called) and what remains to ``options.deadline``. Read right before the
    solver runs, so writing and reading the MPS file count too. May be <= 0."""
    now = time.monotonic()
    left = [options.time_limit_s - (now - started)] if options.time_limit_s is not None else []
    if options.deadline is not None:
        left.append(options.deadline - now)
    return min(left) if left else None


def out_of_time(solver: str, started: float, log: str = "") -> SolveResult:
    """The result of a solve that had no time left to start: a time limit, no incumbent."""
    return SolveResult("time_limit", "noSolution", False, None, None, None, time.monotonic() - started, solver, log,
                       ["the time limit was reached before the solver could start"])


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    """|objective - bound| / max(|objective|, 1e-10), the convention HiGHS reports."""
    if objective is None or bound is None or not math.isfinite(bound) or not math.isfinite(objective):
        return None
    return abs(objective - bound) / max(abs(objective), 1e-10)


def optimal_or_gap_reached(objective: float | None, bound: float | None) -> str:
    """What a solver's 'optimal' means for this incumbent: 'optimal' when the bound meets
    it (relative gap <= PROVED_REL_GAP or absolute <= PROVED_ABS_GAP; also when either is
    unknown, an LP), else 'gap_reached' -- the solve stopped at the relative MIP gap it
    was given, a valid stop but not a proof (HiGHS's model status and CP-SAT's status
    are 'optimal' in both cases)."""
    if objective is None or bound is None or not (math.isfinite(objective) and math.isfinite(bound)):
        return "optimal"
    if abs(objective - bound) <= PROVED_ABS_GAP or (relative_gap(objective, bound) or 0.0) <= PROVED_REL_GAP:
        return "optimal"
    return "gap_reached"


def run_interruptible(run: Callable[[], T], stop: Callable[[], None], poll_s: float = 0.1) -> T:
    """Run a native solve, ``run()``, so that Ctrl-C stops it and reaches the caller as
    KeyboardInterrupt once the solver has returned -- never abandoned mid-solve (a
    process that exits while a solver thread runs aborts in C++), never mistaken for a
    time limit.

    In the main thread, with Python's default SIGINT handler in place: ``run`` goes to a
    worker thread, SIGINT is caught by a handler that only records it, and while the
    solve runs after a SIGINT, ``stop()`` (the solver's asynchronous stop) is called
    every ``poll_s`` seconds, so a stop the solver had not yet polled for is not lost.
    When ``run`` returns the handler is restored and KeyboardInterrupt raised if SIGINT
    came. (A handler, not KeyboardInterrupt while joining: a join broken by one can leave
    the thread reported finished while it still runs, CPython gh-90882, and
    ``Thread.start`` itself can be interrupted.) Elsewhere -- another thread, or SIGINT
    ignored or handled by the caller -- ``run`` is just called.

    Returns what ``run`` returns; an exception in ``run`` is re-raised.
    """
    import signal

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return run()
    out: dict = {}
    done, interrupted = threading.Event(), threading.Event()

    def work() -> None:
        try:
            out["value"] = run()
        except BaseException as e:  # re-raised in the caller's thread
            out["error"] = e
        finally:
            done.set()

    old = signal.signal(signal.SIGINT, lambda _signum, _frame: interrupted.set())
    try:
        threading.Thread(target=work, name="fleetplan-solver", daemon=True).start()
        while not done.wait(poll_s):
            if interrupted.is_set():
                stop()
    finally:
        signal.signal(signal.SIGINT, old)
    if interrupted.is_set():
        raise KeyboardInterrupt
    if "error" in out:
        raise out["error"]
    return out["value"]
