"""Issue 41: the per-token acceptance probability behind an acceptance rate (a 60-step
bisection, ~0.35 ms) is memoised per (alpha, k): the decode tables, the extraction's decode
points and the margins asked the same few classes' values 2,021 times in a solve of the
generated 10-region instance. The same floats as the bisection (kept here as the
reference), computed once per (alpha, k)."""

from __future__ import annotations

import numpy as np
import pytest

import fleetplan.perf.speculation as speculation
from fleetplan.perf.speculation import token_probability_from_acceptance_rate


def _reference(alpha: float, k: int) -> float:
    lo, hi = 0.0, 1.0
    powers = np.arange(1, k + 1)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if float(np.sum(np.power(mid, powers))) / k < alpha:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def test_the_same_floats_as_the_bisection():
    for alpha in (0.0, 1e-9, 0.3, 0.55, 0.7, 0.8125, 0.99, 1.0):
        for k in (1, 2, 3, 4, 7, 16):
            for a in (alpha, np.float64(alpha)):
                for kk in (k, np.int64(k)):
                    got = token_probability_from_acceptance_rate(a, kk)
                    assert got == _reference(alpha, k) and type(got) is float


def test_each_alpha_and_k_is_bisected_once():
    speculation._token_probability.cache_clear()
    for _ in range(5):
        token_probability_from_acceptance_rate(0.6180339887, 5)
        token_probability_from_acceptance_rate(np.float64(0.6180339887), np.int64(5))
    info = speculation._token_probability.cache_info()
    assert info.misses == 1 and info.hits == 9


@pytest.mark.parametrize("alpha, k", [(-0.1, 2), (1.1, 2), (0.5, 0)])
def test_out_of_range_is_refused_before_the_memo(alpha, k):
    with pytest.raises(ValueError, match="need 0 <= alpha <= 1"):
        token_probability_from_acceptance_rate(alpha, k)
