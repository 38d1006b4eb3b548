"""A solver backend wrapped to record what a wall-clock limit stopped (the sizing's
``SolveOutcome.time_limited`` and its NOT REPRODUCIBLE note)."""

from __future__ import annotations

from fleetplan.solvers.base import SolveOptions, SolveResult

__all__ = ["Recorded"]


class Recorded:
    """A backend that records whether a wall-clock limit stopped any of its solves (a
    time limit, or a separable solve's block out of time): ``SolveOutcome.time_limited``."""

    def __init__(self, backend):
        self.backend, self.calls, self.stops, self.solver = backend, 0, 0, "highs"

    @property
    def stopped(self) -> bool:
        return self.stops > 0

    @stopped.setter
    def stopped(self, cut: bool) -> None:  # the pod stage's block solves report a cut here
        self.stops += bool(cut)

    def __call__(self, m, opts: SolveOptions, **kw) -> SolveResult:
        r = self.backend(m, opts, **kw)
        self.calls, self.solver = self.calls + 1, opts.solver
        if r.termination == "time_limit" or "time_limit" in r.failed_terminations:
            self.stops += 1
        return r

    def cut_text(self) -> str:
        """What the --time-limit guard stopped among the solves, for the NOT REPRODUCIBLE note."""
        name = {"highs": "HiGHS", "cpsat": "CP-SAT"}.get(self.solver, self.solver)
        return (f"{self.stops} of the {max(self.calls, self.stops)} {name} solve(s) on the clock, at its share of the time limit (the "
                "solver line gives the last solve's termination)")
