"""Solver-agnostic options and results (never None: a time limit with an incumbent is a
result, reported with its gap)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["SolveOptions", "SolveResult", "TERMINATIONS", "relative_gap"]

#: termination values every backend maps to
TERMINATIONS = ("optimal", "time_limit", "infeasible", "unbounded", "infeasible_or_unbounded", "error", "unknown")


@dataclass(frozen=True)
class SolveOptions:
    """Options every backend understands.

    Attributes: solver ('highs' or 'cpsat'); time_limit_s (wall seconds, None = no
    limit); mip_gap (relative, e.g. 1e-4); threads (HiGHS threads / CP-SAT workers; 1
    keeps runs deterministic); seed (random seed).
    """

    solver: str = "highs"
    time_limit_s: float | None = None
    mip_gap: float = 0.01
    threads: int = 1
    seed: int = 0
    rounding_start: bool = False


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


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    """|objective - bound| / max(|objective|, 1e-10), the convention HiGHS reports."""
    if objective is None or bound is None or not math.isfinite(bound) or not math.isfinite(objective):
        return None
    return abs(objective - bound) / max(abs(objective), 1e-10)
