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


# ----------------------------------------------------------------------------- arrival SCV (G/G/c, Allen-Cunneen)


@pytest.mark.parametrize("c,rho,cs2", [(1, 0.5, 0.0), (4, 0.8, 0.3), (32, 0.9, 1.7)])
def test_ca2_one_is_todays_mgc_exactly(c, rho, cs2):
    """C_a^2 = 1 reproduces the M/G/c functions bit for bit (the bundled plans rest on it)."""
    mean, lam = 120.0, rho * c * 1e3 / 120.0
    for p in (50.0, 95.0, 99.0):
        assert float(wait_percentile_ms(c, lam, mean, p, cs2, 1.0)) == float(wait_percentile_ms(c, lam, mean, p, cs2))
    assert float(wait_mean_ms(c, lam, mean, cs2, 1.0)) == float(wait_mean_ms(c, lam, mean, cs2))
    assert float(max_arrival_rate(c, mean, 200.0, 99.0, cs2, ca2=1.0)[0]) == float(max_arrival_rate(c, mean, 200.0, 99.0, cs2)[0])


def test_allen_cunneen_mean_wait_by_hand():
    """M/M/1 at rho = 0.8, E[S] = 100 ms: W = rho / (mu - lambda) = 0.8 x 100 / 0.2 = 400 ms.
    G/G/1 with C_a^2 = 13.2^2 = 174.24 and C_s^2 = 0.25: W = 400 x (174.24 + 0.25) / 2 = 34,898 ms."""
    assert float(wait_mean_ms(1, 8.0, 100.0, 1.0, 1.0)) == pytest.approx(400.0, rel=1e-12)
    assert float(wait_mean_ms(1, 8.0, 100.0, 0.25, 174.24)) == pytest.approx(400.0 * (174.24 + 0.25) / 2.0, rel=1e-12)
    # c = 2, a = 1.2 Erlangs: C = 2 a^2 / (2 + a) / (2 - a)... by direct summation, W = C / (c mu - lambda)
    c, a, mean = 2, 1.2, 50.0
    cw = erlang_c_direct(c, a)
    lam = a * 1e3 / mean
    w_mmc = cw / (c / mean - lam / 1e3)
    assert float(wait_mean_ms(c, lam, mean, 0.5, 3.0)) == pytest.approx(w_mmc * (3.0 + 0.5) / 2.0, rel=1e-10)


def test_allen_cunneen_percentile_and_tail_consistent():
    """The percentile inverts the tail with C_a^2 in both: P(W > t_p) = 1 - p, and the
    exponential tail's mean given a wait, 1/theta, is the mean wait / C."""
    c, lam, mean, cs2, ca2 = 8, 70.0, 100.0, 0.4, 6.0
    t99 = float(wait_percentile_ms(c, lam, mean, 99.0, cs2, ca2))
    assert float(wait_probability_exceeds(c, lam, mean, t99, cs2, ca2)) == pytest.approx(0.01, rel=1e-9)
    cw = float(erlang_c(c, lam * mean / 1e3))
    theta = 2.0 * (c / mean - lam / 1e3) / (ca2 + cs2)
    assert t99 == pytest.approx(math.log(cw / 0.01) / theta, rel=1e-12)
    assert float(wait_mean_ms(c, lam, mean, cs2, ca2)) == pytest.approx(cw / theta, rel=1e-12)


def test_burstier_arrivals_carry_less():
    """More arrival variability never raises the rate a pool carries within a budget, and
    min_servers agrees with max_arrival_rate at the same C_a^2."""
    n = np.arange(1, 40)
    caps = [max_arrival_rate(n, 80.0, 150.0, 99.0, 0.3, ca2=ca2) for ca2 in (0.5, 1.0, 2.0, 10.0)]
    for lo, hi in zip(caps[1:], caps[:-1]):
        assert np.all(lo <= hi + 1e-12)
    lam = 0.9 * float(caps[3][20])
    m = min_servers(lam, 80.0, 150.0, 99.0, 0.3, ca2=10.0)
    assert m is not None and m <= 21 and float(max_arrival_rate(m, 80.0, 150.0, 99.0, 0.3, ca2=10.0)[0]) >= lam


def test_variability_factor_rejects_bad_scv():
    from fleetplan.perf.queueing import variability_factor

    assert float(variability_factor(0.5, 3.0)) == 1.75
    with pytest.raises(ValueError, match="ca2"):
        variability_factor(1.0, -0.1)
    with pytest.raises(ValueError, match="not both 0"):
        variability_factor(0.0, 0.0)


@pytest.mark.parametrize("mean,budget,p,cs2,ca2", [
    (1.0, 37.5, 99.0, 1.0, 1.0),  # the sizing's curves: E[S] = 1 ms, C_s^2 = 1, scaled budget
    (250.0, 180.0, 99.0, 0.4, 1.0),
    (80.0, 150.0, 95.0, 0.3, 10.0),  # bursty arrivals
    (12.0, 0.01, 50.0, 2.5, 0.5),  # a budget far below E[S]
    (600.0, 4000.0, 99.9, 0.0, 1.0),  # deterministic service
])
def test_fused_bisection_is_the_plain_one_bit_for_bit(mean, budget, p, cs2, ca2):
    """max_arrival_rate's fused loop (invariants hoisted, one pass per step) returns the
    very floats of the bisection on wait_percentile_ms it replaced, for every c at once."""
    from fleetplan.perf.queueing import _max_arrival_rate_reference

    c = np.concatenate([np.arange(1, 300), [512, 2048, 10_000]]).astype(float)
    got = max_arrival_rate(c, mean, budget, p, cs2, ca2=ca2)
    want = _max_arrival_rate_reference(c, mean, budget, p, cs2, ca2=ca2)
    assert got.tobytes() == want.tobytes()
    one = max_arrival_rate([7], mean, budget, p, cs2, ca2=ca2)
    assert one.tobytes() == _max_arrival_rate_reference([7], mean, budget, p, cs2, ca2=ca2).tobytes()


@pytest.mark.parametrize("iterations", [1, 4, 5, 7, 45, 52])
def test_batched_steps_for_few_servers_are_the_plain_bisection_bit_for_bit(iterations):
    """Up to _TREE_MAX_SERVERS server counts, max_arrival_rate evaluates the mids of
    several steps in one pass (the evaluator's one-pool calls); the floats are the plain
    bisection's for any step count, not only a multiple of the steps per pass."""
    from fleetplan.perf.queueing import _TREE_MAX_SERVERS, _max_arrival_rate_reference

    rng = np.random.default_rng(iterations)
    for size in (1, 2, _TREE_MAX_SERVERS):
        for mean, budget, p, cs2, ca2 in [(250.0, 180.0, 99.0, 0.4, 1.0), (80.0, 150.0, 95.0, 0.3, 10.0), (12.0, 0.01, 50.0, 2.5, 0.5)]:
            c = rng.integers(1, 3000, size=size).astype(float)
            got = max_arrival_rate(c, mean, budget, p, cs2, iterations=iterations, ca2=ca2)
            want = _max_arrival_rate_reference(c, mean, budget, p, cs2, iterations=iterations, ca2=ca2)
            assert got.tobytes() == want.tobytes()


def test_fused_bisection_refuses_what_the_plain_one_refuses():
    with pytest.raises(ValueError, match="servers c >= 1"):
        max_arrival_rate(np.array([0.0, 3.0]), 10.0, 5.0, 99.0)
    with pytest.raises(ValueError, match="percentile"):
        max_arrival_rate(np.array([3.0]), 10.0, 5.0, 100.0)
    with pytest.raises(ValueError, match="squared coefficients"):
        max_arrival_rate(np.array([3.0]), 10.0, 5.0, 99.0, cs2=-1.0)


def test_scalar_wait_percentile_is_the_array_one_bit_for_bit():
    """wait_percentile_ms and erlang_c of plain numbers take a path without numpy's array
    machinery (the what-if's min_servers, the colocated pools): the same floats as the
    array path (0-d arrays) at stable, saturated, unstable and degenerate points."""
    rng = np.random.default_rng(7)
    cases = [(1, 0.0, 10.0, 99.0, 1.0, 1.0), (3, 299.9, 10.0, 99.0, 1.0, 1.0), (3, 300.0, 10.0, 99.0, 1.0, 1.0),
             (5000, 4.9e5, 10.0, 99.9, 0.0, 1.0), (2, 1e-9, 1e4, 50.0, 2.0, 0.0), (1.5, 0.1, 0.0, 95.0, 1.0, 1.0)]
    for _ in range(400):
        c = float(rng.integers(1, 3000))
        mean = float(10 ** rng.uniform(-2, 4))
        cases.append((c, float(rng.uniform(0, 1.1)) * c * 1e3 / mean, mean, float(rng.uniform(1, 99.99)),
                      float(rng.uniform(0, 3)), float(rng.uniform(0, 5)) + 0.01))
    for c, lam, mean, p, cs2, ca2 in cases:
        with np.errstate(all="ignore"):
            got = wait_percentile_ms(c, lam, mean, p, cs2, ca2)
            want = wait_percentile_ms(*(np.asarray(x, dtype=float) for x in (c, lam, mean)), p, np.asarray(cs2), np.asarray(ca2))
        assert got.shape == want.shape == () and got.tobytes() == want.tobytes(), (c, lam, mean, p, cs2, ca2)
        a = lam * mean / 1e3
        assert erlang_c(c, a).tobytes() == erlang_c(np.asarray(float(c)), np.asarray(a)).tobytes()
    with pytest.raises(ValueError, match="servers c >= 1"):
        wait_percentile_ms(0, 1.0, 1.0, 99.0)
    with pytest.raises(ValueError, match="squared coefficients"):
        wait_percentile_ms(2, 1.0, 1.0, 99.0, 0.0, 0.0)


def test_decayed_cumsum_is_lfilter_bit_for_bit():
    """The TTFT-of-the-sum recurrence H_j = H_{j-1} e^{-theta h} + pm_j without
    scipy.signal (whose import loads scipy.stats and scipy.optimize, ~0.4 s of a solve's
    start-up) is scipy.signal.lfilter([1], [1, -r], pm) bit for bit: the plans rest on it --
    through lfilter's compiled routine loaded alone (issue 41) and in Python (the fallback),
    on a read-only path too (the memoised path's arrays are)."""
    from scipy.signal import lfilter

    from fleetplan.perf.queueing import _decayed_cumsum, _decayed_cumsum_py

    rng = np.random.default_rng(19)
    for n in (1, 2, 7, 300, 4000):
        for scale in (1e-300, 1e-12, 1.0, 1e12):
            for rate in (1e-9, 1e-3, 0.5, 7.0, 40.0):
                x = rng.random(n) * scale
                x[rng.random(n) < 0.2] = 0.0
                r = float(np.exp(-rate * rng.random()))
                want = lfilter([1.0], [1.0, -r], x)
                x.flags.writeable = False
                for got in (_decayed_cumsum(x, r), _decayed_cumsum_py(x, r)):
                    assert got.dtype == want.dtype and np.array_equal(got.view(np.int64), want.view(np.int64)), (n, scale, rate)


def _ttft_of_sum_one_point_at_a_time(percentile, path, c, lam, mean_service_ms, cs2, own_ms, own_weight, ca2=1.0):
    """ttft_percentile_of_sum_ms as it was before issue 19: the tail at one point per call,
    50 bisection steps one by one (the reference the batched bisection must equal)."""
    from fleetplan.perf.queueing import _decayed_cumsum, _rate_gap, erlang_c

    xs, pm = path
    s = np.asarray(own_ms, dtype=float)
    w = np.asarray(own_weight, dtype=float)
    w = w / w.sum()
    if lam > 0:
        cw = float(erlang_c(c, lam * mean_service_ms / 1e3))
        theta = float(_rate_gap(c, lam, mean_service_ms, cs2, ca2))
        if theta <= 0:
            return float("inf")
    else:
        cw, theta = 0.0, 1.0
    surv = 1.0 - np.cumsum(pm)
    h = float(xs[1] - xs[0]) if xs.size > 1 else 1.0
    hexp = _decayed_cumsum(pm, np.exp(-theta * h)) if cw > 0 else np.zeros_like(pm)

    def tail(t):
        x = t - s
        j = np.searchsorted(xs, x, side="right") - 1
        inside = j >= 0
        jj = np.maximum(j, 0)
        fbar = np.where(inside, surv[jj], 1.0)
        g = fbar + np.where(inside, hexp[jj] * np.exp(-theta * np.maximum(x - xs[jj], 0.0)), 0.0)
        return float(np.dot(w, (1.0 - cw) * fbar + cw * g))

    target = 1.0 - percentile / 100.0
    lo, hi = 0.0, float(xs[-1] + s.max() + (50.0 / theta if cw > 0 else 0.0) + 1.0)
    while tail(hi) > target:
        hi *= 2.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if tail(mid) > target:
            lo = mid
        else:
            hi = mid
    return hi


def test_ttft_of_the_sum_batched_bisection_is_the_one_point_bisection_bit_for_bit():
    """Issue 19: the bisection asks for six steps' points per call (the extraction spent a
    second in 50 one-point calls per pool) and every percentile of a pool shares one tail
    (ttft_percentiles_of_sum_ms); each percentile must be the same float."""
    from fleetplan.perf.queueing import path_sum_distribution, ttft_percentile_of_sum_ms, ttft_percentiles_of_sum_ms

    rng = np.random.default_rng(19)
    paths = [path_sum_distribution([(2.0, 9.0), (30.0, 80.0)]), path_sum_distribution([(0.5, 40.0)]), path_sum_distribution([]),
             path_sum_distribution([(5.0, 5.5), (1.0, 300.0), (12.0, 20.0)])]
    for path in paths:
        for c in (1, 3, 40, 700):
            for rho in (0.0, 0.2, 0.7, 0.95, 0.999, 1.2):
                for types in (1, 5, 60):
                    mean = float(rng.uniform(20.0, 900.0))
                    lam = rho * c * 1e3 / mean
                    own = rng.uniform(1.0, 3.0 * mean, types)
                    wt = rng.random(types) + 1e-3
                    cs2, ca2 = float(rng.uniform(0.1, 3.0)), float(rng.choice([1.0, 0.4, 2.5]))
                    pcts = [50.0, 90.0, 99.0, 99.9]
                    every = ttft_percentiles_of_sum_ms(pcts, path, c, lam, mean, cs2, own, wt, ca2)
                    assert list(every) == pcts
                    for pct in pcts:
                        want = _ttft_of_sum_one_point_at_a_time(pct, path, c, lam, mean, cs2, own, wt, ca2)
                        got = ttft_percentile_of_sum_ms(pct, path, c, lam, mean, cs2, own, wt, ca2)
                        assert got == want and every[pct] == want, (c, rho, types, pct, got, every[pct], want)
