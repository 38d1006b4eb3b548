"""The Pyomo models (sizing, placement, what-if) and a helper they share."""

from __future__ import annotations

__all__ = ["fix_in_bounds"]


def fix_in_bounds(v, value: float) -> None:
    """Fix the Pyomo variable ``v`` at ``value`` clamped into its bounds.

    The values fixed are solver output of an earlier solve (routing shares of 0 and 1
    come back as -2.2e-16 and 1.0000000000000002, within HiGHS's feasibility tolerance);
    fixing one outside the bounds made Pyomo log its W1002 warning, which its logger
    printed on stdout in front of ``--json`` documents, which then did not parse."""
    lo, hi = v.lb, v.ub
    if lo is not None and value < lo:
        value = lo
    if hi is not None and value > hi:
        value = hi
    v.fix(value)
