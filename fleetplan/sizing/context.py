"""What every stage of one sizing solve shares (:func:`fleetplan.sizing.driver.solve`): the
backend (recorded), the progress line, the deadlines, the post-solve reserve's basis and the
phase clocks.

The driver builds one :class:`SolveContext` once the candidate tables and the model exist;
the sizing loop, the pod stage, the DCN-overage stage and the extraction read it instead of
seven threaded parameters. A stage whose solves must end earlier (the pod stage keeps the
reserves of both plans) works on a copy with its own ``solver_end``
(``dataclasses.replace``); the per-solve options (gap, deadlines of one solve, starts) stay
a :class:`~fleetplan.solvers.base.SolveOptions` argument, since each stage changes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fleetplan.solvers.base import SolveOptions
from fleetplan.solvers.recorded import Recorded

__all__ = ["SolveContext"]


@dataclass
class SolveContext:
    """One solve's shared state. Times are ``time.monotonic()`` seconds.

    Attributes:
        asked: the options the caller passed (the plan records them; ``--mip-gap`` asked).
        run: the chosen backend (:func:`fleetplan.solvers.highs.solve_highs` or CP-SAT's)
            wrapped by :class:`~fleetplan.solvers.recorded.Recorded`, which notes whether
            the ``--time-limit`` guard stopped any solve.
        say: the progress callback (one short status line per phase).
        end: the whole call's deadline (None: no time limit).
        solver_end: where this stage's solves end -- before the time kept to extract and
            verify the plan (None: no time limit).
        basis: the post-solve reserve's basis, s
            (:func:`fleetplan.sizing.post_solve_cost.reserve_basis`); every reserve is a
            multiple of it.
        t0, t1, t2: the call's start, the candidate tables' end and the model build's end.
    """

    asked: SolveOptions
    run: Recorded
    say: Callable[[str], None]
    end: float | None
    solver_end: float | None
    basis: float
    t0: float
    t1: float
    t2: float

    def timings_s(self, t3: float) -> dict[str, float]:
        """Wall times (s) of the phases up to ``t3`` (the solves' end): tables, build, solve."""
        return {"tables": self.t1 - self.t0, "build": self.t2 - self.t1, "solve": t3 - self.t2}

    def options_doc(self) -> dict:
        """The options the plan records (``plan.solver.options``): those the caller asked for."""
        a = self.asked
        return {"solver": a.solver, "mip_gap": a.mip_gap, "time_limit_s": a.time_limit_s, "threads": a.threads, "seed": a.seed}
