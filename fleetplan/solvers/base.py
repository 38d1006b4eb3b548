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
#: (with or without an incumbent); 'work_limit' = stopped at a work limit it was given (HiGHS's
#: branch-and-bound nodes, :meth:`fleetplan.solvers.persistent.PersistentHighs.solve`): like a time
#: limit, but the same on any machine and under any load
TERMINATIONS = ("optimal", "gap_reached", "time_limit", "work_limit", "infeasible", "unbounded", "infeasible_or_unbounded", "error", "unknown")
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
    (HiGHS threads / CP-SAT workers; 1 keeps runs deterministic); seed (random seed);
    rounding_start (offer HiGHS an LP-guided rounded fleet first, sizing only);
    component_start (the sizing model's first HiGHS solve starts from the routing-fixed
    component MIPs, :mod:`fleetplan.solvers.components`: True, False, or None = by the
    model's size, ``fleetplan.sizing.COMPONENT_START_MIN_INTEGERS``); separable (the
    model's rows split into independent blocks -- the pod stage, its routing fixed: HiGHS
    solves each block's MIP on its own, :func:`fleetplan.solvers.components.solve_blocks`;
    CP-SAT solves the whole); max_nodes (a separable HiGHS solve: each block's
    branch-and-bound nodes at most, a work limit -- termination 'work_limit' -- the same on
    any machine; None: none); incumbent_deadline (a :func:`time.monotonic` timestamp, s, None
    = none: once the solve holds a feasible solution -- found, or a warm start it accepted --
    it stops at this time, earlier than ``deadline``, termination 'time_limit': the sizing
    sets it to the deadline less the time kept to extract and verify the plan, and lets a
    solve without an incumbent run to ``deadline``; HiGHS only). No stage of the sizing stops at a wall-clock budget of its
    own: gaps and work limits decide every stage, so with one thread the plan does not
    depend on the machine's speed or load; ``time_limit_s`` / ``deadline`` are a guard,
    and a stage they stop makes the plan not reproducible (its diagnostics say so;
    :attr:`fleetplan.sizing.SolveOutcome.time_limited`).
    """

    solver: str = "highs"
    time_limit_s: float | None = None
    mip_gap: float = 0.01
    threads: int = 1
    seed: int = 0
    rounding_start: bool = False
    deadline: float | None = None
    component_start: bool | None = None
    separable: bool = False
    max_nodes: int | None = None
    incumbent_deadline: float | None = None


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
    # placement-aware sizing: how the pod stage's own solve ended and its gap against its own bound (the failover
    # routing fixed at the plain sizing's), where ``bound``/``gap`` are against the plain sizing's bound
    stage_termination: str | None = None
    stage_gap: float | None = None
    # a separable solve (``SolveOptions.separable``) where some blocks found no solution: each such block's
    # variables (the other blocks' values are loaded; ``has_incumbent`` is False), and beside it how each ended
    # ('infeasible': proved to have none; 'time_limit': out of time, or 'unknown')
    failed_blocks: list = field(default_factory=list)
    failed_terminations: list = field(default_factory=list)

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


def above_bound(gap: float) -> float:
    """How far a cost is above its bound, as a fraction of the bound, from HiGHS's relative gap
    ``gap`` = (cost - bound) / cost: gap / (1 - gap) (inf at a gap of 1). A gap of 26.49% is a
    cost 36.03% above the bound -- what "the plan may cost up to X% more than the cheapest
    fleet" must say."""
    return gap / (1.0 - gap) if gap < 1.0 else math.inf


def gap_words(gap: float, bound: str = "its best bound") -> str:
    """'a gap of 26.49% (its cost 36.03% above its best bound)': the relative gap --mip-gap
    is measured in, and the cost above the bound it means."""
    return f"a gap of {gap:.2%} (its cost {above_bound(gap):.2%} above {bound})"


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


def run_interruptible(run: Callable[[], T], stop: Callable[[], None], poll_s: float = 0.1, deadline: float | None = None) -> T:
    """Run a native solve, ``run()``, so that Ctrl-C or SIGTERM stops it and reaches the
    caller as KeyboardInterrupt once the solver has returned -- never abandoned mid-solve (a
    process that exits while a solver thread runs aborts in C++), never mistaken for a
    time limit -- and so that the wall clock ``deadline`` is enforced from outside the solver.

    In the main thread, with Python's default SIGINT handler or the command line's SIGTERM
    handler (:func:`fleetplan.interrupts.on_sigterm`) in place: ``run`` goes to a worker
    thread, those signals are caught by a handler that only records them, and while the
    solve runs after one, ``stop()`` (the solver's asynchronous stop) is called every
    ``poll_s`` seconds, so a stop the solver had not yet polled for is not lost. When
    ``run`` returns the handlers are restored and KeyboardInterrupt raised if SIGINT came
    (:class:`fleetplan.interrupts.Terminated` if SIGTERM came; the signal is recorded,
    :func:`fleetplan.interrupts.received`). (A handler, not KeyboardInterrupt while
    joining: a join broken by one can leave the thread reported finished while it still
    runs, CPython gh-90882, and ``Thread.start`` itself can be interrupted.)

    ``deadline`` (a :func:`time.monotonic` timestamp, s; None = none): the watchdog. Once
    it has passed, ``stop()`` is called every ``poll_s`` seconds until ``run`` returns --
    a solver that overruns the time limit it was given (it checks its clock only between
    iterations or nodes) is told to stop; what ``run`` then returns is the solver's
    (HiGHS: 'interrupted', mapped to a time limit). Signals are intercepted only in the
    main thread (the only one Python delivers them to); the watchdog runs in any thread.
    With neither -- another thread and no deadline, or the signals handled by the caller
    and no deadline -- ``run`` is just called.

    Returns what ``run`` returns; an exception in ``run`` is re-raised.
    """
    import signal

    from fleetplan import interrupts

    catch = []
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            catch.append(signal.SIGINT)
        if signal.getsignal(signal.SIGTERM) is interrupts.on_sigterm:
            catch.append(signal.SIGTERM)
    if not catch and deadline is None:
        return run()
    out: dict = {}
    done = threading.Event()
    came: list[int] = []

    def work() -> None:
        try:
            out["value"] = run()
        except BaseException as e:  # re-raised in the caller's thread
            out["error"] = e
        finally:
            done.set()

    old = {s: signal.signal(s, lambda signum, _frame: came.append(signum)) for s in catch}
    try:
        threading.Thread(target=work, name="fleetplan-solver", daemon=True).start()
        while not done.wait(poll_s):
            if came or (deadline is not None and time.monotonic() >= deadline):
                stop()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if came:
        for signum in came:
            interrupts.note(signum)
        if signal.SIGTERM in came:
            raise interrupts.Terminated
        raise KeyboardInterrupt
    if "error" in out:
        raise out["error"]
    return out["value"]
