"""Erlang B/C and the wait-time machinery against direct formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetplan.perf.queueing import (
    erlang_b,
    erlang_c,
    max_arrival_rate,
    min_servers,
    path_latency_ms,
    wait_mean_ms,
    wait_percentile_ms,
    wait_probability_exceeds,
)


def erlang_c_direct(c: int, a: float) -> float:
    """Textbook Erlang C by direct summation (small c only)."""
    rho = a / c
    top = a**c / math.factorial(c) / (1 - rho)
    bottom = sum(a**k / math.factorial(k) for k in range(c)) + top
    return top / bottom


@pytest.mark.parametrize("c", [1, 2, 3, 5, 8, 13, 20, 40])
@pytest.mark.parametrize("rho", [0.05, 0.3, 0.6, 0.85, 0.95, 0.99])
def test_erlang_c_matches_direct_summation(c, rho):
    a = rho * c
    assert float(erlang_c(c, a)) == pytest.approx(erlang_c_direct(c, a), rel=1e-10, abs=1e-300)


def test_erlang_c_mm1_is_rho():
    for rho in (0.1, 0.5, 0.9):
        assert float(erlang_c(1, rho)) == pytest.approx(rho)


def test_erlang_b_recursion():
    # B(c, a) = a B(c-1, a) / (c + a B(c-1, a)), B(0, a) = 1
    for a in (0.5, 7.3, 55.0):
        b = 1.0
        for c in range(1, 80):
            b = a * b / (c + a * b)
            assert float(erlang_b(c, a)) == pytest.approx(b, rel=1e-10)


@pytest.mark.parametrize("c", [10_000, 100_000])
def test_large_c_is_finite_and_monotone(c):
    rho = np.linspace(0.5, 0.9999, 400)
    vals = erlang_c(c, rho * c)
    assert np.all(np.isfinite(vals))
    assert np.all((vals >= 0) & (vals <= 1))
    assert np.all(np.diff(vals) >= -1e-15)  # monotone in the load
    # with c fixed load, more servers never wait more
    a = 0.99 * c
    assert float(erlang_c(c + 100, a)) <= float(erlang_c(c, a))
    # square-root staffing (Halfin-Whitt): c = a + beta sqrt(a) gives C ~ [1 + beta Phi(beta)/phi(beta)]^-1
    beta = 1.0
    a = (math.sqrt(beta**2 + 4 * c) - beta) ** 2 / 4  # c = a + sqrt(a)
    from scipy.stats import norm

    hw = 1.0 / (1.0 + beta * norm.cdf(beta) / norm.pdf(beta))
    assert float(erlang_c(c, a)) == pytest.approx(hw, rel=0.02)


def test_erlang_c_unstable_is_one():
    assert float(erlang_c(10, 10.0)) == 1.0
    assert float(erlang_c(10, 12.0)) == 1.0


def test_erlang_rejects_bad_input():
    with pytest.raises(ValueError):
        erlang_c(0, 1.0)
    with pytest.raises(ValueError):
        erlang_c(3, -1.0)


def test_wait_percentile_inverts_tail_probability():
    c, lam, es = 20, 150.0, 100.0  # 20 servers, 150 req/s, 100 ms service -> rho 0.75
    for p in (90.0, 99.0, 99.9):
        t = float(wait_percentile_ms(c, lam, es, p))
        if t > 0:
            assert float(wait_probability_exceeds(c, lam, es, t)) == pytest.approx(1 - p / 100, rel=1e-9)


def test_mm1_wait_percentile_closed_form():
    # M/M/1: P(W > t) = rho exp(-(mu - lam) t)
    lam, es = 8.0, 100.0
    mu = 10.0
    rho = lam / mu
    t = float(wait_percentile_ms(1, lam, es, 99.0))
    assert t == pytest.approx(math.log(rho / 0.01) / (mu - lam) * 1e3)
    assert float(wait_mean_ms(1, lam, es)) == pytest.approx(rho / (mu - lam) * 1e3)


def test_mgc_scaling():
    base = float(wait_mean_ms(4, 30.0, 100.0, 1.0))
    assert float(wait_mean_ms(4, 30.0, 100.0, 3.0)) == pytest.approx(2 * base)  # (1 + 3)/2
    assert float(wait_mean_ms(4, 30.0, 100.0, 0.0)) == pytest.approx(0.5 * base)  # M/D/c ~ half


def test_unstable_wait_is_infinite():
    assert math.isinf(float(wait_percentile_ms(2, 25.0, 100.0, 99.0)))


def test_max_rate_and_min_servers_agree():
    es, budget, p = 80.0, 150.0, 99.0
    caps = max_arrival_rate(np.arange(1, 200), es, budget, p, 1.4)
    assert np.all(np.diff(caps) > 0)
    for lam in (3.0, 47.0, 611.0, 1800.0):
        n = min_servers(lam, es, budget, p, 1.4)
        assert n is not None
        assert float(wait_percentile_ms(n, lam, es, p, 1.4)) <= budget
        assert float(wait_percentile_ms(n - 1, lam, es, p, 1.4)) > budget or n == max(1, int(lam * es / 1e3))
        if n < 199:
            assert caps[n - 1] >= lam * (1 - 1e-9)
            assert n == 1 or caps[n - 2] < lam * (1 + 1e-9)


def test_min_servers_edge_cases():
    assert min_servers(0.0, 10.0, 100.0, 99.0) == 0
    assert min_servers(10.0, 10.0, -1.0, 99.0) is None
    assert max_arrival_rate(np.array([4]), 10.0, -5.0, 99.0)[0] == 0.0


def test_path_latency_interpolation():
    assert float(path_latency_ms(25, 60, 50)) == 25
    assert float(path_latency_ms(25, 60, 99)) == pytest.approx(60)
    p95 = float(path_latency_ms(25, 60, 95))
    assert 25 < p95 < 60
