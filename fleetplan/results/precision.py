"""The precision a plan stores its numbers at, and the tolerance every check derives from it.

A plan keeps six significant digits (:func:`r6`: stable bytes, honest precision). A number
read back from a plan is therefore known only to half a unit in its sixth digit, at most
5e-6 of its magnitude; a number r6 stored as 0 was below 1e-9 in magnitude. The verifier
(:mod:`fleetplan.results.verify`) compares quantities the plan states, or computes from
the numbers it states, with :func:`stored_error` of each and of what it was computed from
-- one rule, so a plan correct to its stated precision is never refused and an error
above it is never let through.
"""

from __future__ import annotations

import math

__all__ = ["SIGNIFICANT_DIGITS", "ZERO_BELOW", "r6", "stored_error", "floor_digits"]

#: Significant digits of every float a plan stores.
SIGNIFICANT_DIGITS = 6
#: Magnitudes below this are stored as 0 (solver noise, never -0).
ZERO_BELOW = 1e-9


def r6(x: float | None) -> float | None:
    """Round to :data:`SIGNIFICANT_DIGITS` significant digits (stable bytes, honest
    precision); solver noise below :data:`ZERO_BELOW` in magnitude becomes 0 (never -0);
    inf/nan pass; None stays None."""
    if x is None:
        return None
    if not math.isfinite(x):
        return float(x)
    if abs(x) < ZERO_BELOW:
        return 0.0
    return float(f"{x:.{SIGNIFICANT_DIGITS}g}")


def stored_error(*values: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """The most the numbers ``values`` can be off by when each is known to ``digits``
    significant digits, summed: half a unit in the last digit is at most 0.5 x 10^(1 -
    digits) of the magnitude (5e-6 at six digits), plus :data:`ZERO_BELOW` each for a
    number stored as 0. Infinite values contribute nothing (they compare exactly).

    Use: a check ``a <= b`` on stored numbers, or on numbers computed from them, holds
    when ``a - b <= stored_error(a, b, *inputs)``; a sum or product of stored numbers
    carries the sum of their errors (their magnitudes, for a sum of positive terms).
    Returns the tolerance in the values' unit (>= 0).
    """
    rel = 0.5 * 10.0 ** (1 - digits)
    return sum(rel * abs(v) + ZERO_BELOW for v in values if math.isfinite(v))


def floor_digits(x: float, digits: int = 4) -> float:
    """``x`` rounded down to ``digits`` significant digits: how a margin is stored and shown,
    never overstated (:mod:`fleetplan.results.margins`). Non-positive and non-finite ``x``
    pass through."""
    if x <= 0 or not math.isfinite(x):
        return x
    e = math.floor(math.log10(x)) - (digits - 1)
    q = 10.0 ** e
    return float(f"{math.floor(x / q * (1 + 1e-12)) * q:.{digits}g}")
