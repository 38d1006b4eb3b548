"""The TTFT tail of the sum (fleetplan.perf.ttft_tail) against references: the closed form
of one request type behind a point-mass path, a Monte Carlo of path + G/G/c wait + own
compute with a fixed seed, and the percentile of the sum that plans print
(fleetplan.perf.queueing.ttft_percentile_of_sum_ms)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetplan.perf.queueing import erlang_c, path_sum_distribution, ttft_percentile_of_sum_ms, variability_factor
from fleetplan.perf.ttft_tail import (
    SLACK_BINS,
    MixTail,
    capacity_curve_of_sum,
    convex_minorant,
    max_arrival_rate_of_sum,
    meets_percentile_of_sum,
    min_servers_of_sum,
    tail_exceeds,
    ttft_tail,
)

# a Gemini-like short tier: three path components (p50, p99 ms), three prompt classes
PATH = path_sum_distribution([(5.0, 20.0), (8.0, 30.0), (2.0, 6.0)])
OWN_MS = np.array([12.0, 35.0, 90.0])
OWN_W = np.array([0.6, 0.3, 0.1])
MEAN_MS, CS2, CA2 = 28.0, 1.3, 1.0


def _theta(c, lam, mean_ms, cs2, ca2):
    return (c / mean_ms - lam / 1e3) / float(variability_factor(cs2, ca2))


def test_point_path_one_type_is_the_closed_form():
    # P = 0, X = s: P(T > L) = C(c, a) exp(-theta (L - s)); the slack floored to the grid
    # over-estimates by at most exp(theta L / SLACK_BINS)
    limit, s, c, lam = 400.0, 50.0, 16, 500.0
    tail = ttft_tail(limit, (np.array([0.0]), np.array([1.0])), [s], [1.0])
    exact = float(erlang_c(c, lam * MEAN_MS / 1e3)) * math.exp(-_theta(c, lam, MEAN_MS, CS2, CA2) * (limit - s))
    got = float(tail_exceeds(tail, c, lam, MEAN_MS, CS2, CA2))
    assert exact <= got <= exact * math.exp(_theta(c, lam, MEAN_MS, CS2, CA2) * limit / SLACK_BINS) * (1 + 1e-12)
    assert got == pytest.approx(exact, rel=0.02)


def test_tail_matches_monte_carlo():
    # T = P + W + X sampled independently (W: 0 with probability 1 - C, else exponential
    # with rate theta), 4e6 draws, seed 0; the formula is conservative by the grid only
    c, lam, limit = 24, 840.0, 260.0
    cw = float(erlang_c(c, lam * MEAN_MS / 1e3))
    th = _theta(c, lam, MEAN_MS, CS2, CA2)
    rng = np.random.default_rng(0)
    n = 4_000_000
    p = rng.choice(PATH[0], size=n, p=PATH[1])
    x = rng.choice(OWN_MS, size=n, p=OWN_W)
    w = np.where(rng.random(n) < cw, rng.exponential(1.0 / th, size=n), 0.0)
    mc = float(np.mean(p + x + w > limit))
    se = math.sqrt(mc * (1 - mc) / n)
    got = float(tail_exceeds(ttft_tail(limit, PATH, OWN_MS, OWN_W), c, lam, MEAN_MS, CS2, CA2))
    assert 0.005 < mc < 0.05  # the regime of a p99 SLO
    assert got == pytest.approx(mc, abs=4 * se + 0.01 * mc)
    assert got >= mc - 4 * se


def test_capacity_is_where_the_percentile_of_the_sum_reaches_the_limit():
    # at the largest rate the percentile of the sum (the plan's ttft_estimate_ms) is the limit
    limit, pct = 300.0, 99.0
    tail = ttft_tail(limit, PATH, OWN_MS, OWN_W)
    for c in (1, 4, 32, 200):
        lam = float(max_arrival_rate_of_sum([c], MEAN_MS, tail, pct, CS2, CA2)[0])
        assert 0 < lam < c * 1e3 / MEAN_MS
        est = ttft_percentile_of_sum_ms(pct, PATH, c, lam, MEAN_MS, CS2, OWN_MS, OWN_W, CA2)
        assert est == pytest.approx(limit, rel=0.01)
        assert meets_percentile_of_sum(tail, pct, c, lam, MEAN_MS, CS2, CA2)
        assert not meets_percentile_of_sum(tail, pct, c, lam * 1.01, MEAN_MS, CS2, CA2)


def test_one_server_count_is_the_array_bisection_bit_for_bit():
    """Issue 41: a pool's capacity (one server count: the extraction's, the verifier's) runs
    the bisection with Erlang C's scalar path, numpy's per-call cost gone (a third of the
    brief's extraction); every rate is the float the array bisection gives that count among
    others, at several limits, percentiles, SCVs and routers."""
    rng = np.random.default_rng(41)
    counts = np.array([1.0, 2.0, 3.0, 7.0, 32.0, 199.0, 1000.0, 4096.0])
    for limit in (60.0, 300.0, 2000.0):
        tail = ttft_tail(limit, PATH, OWN_MS, OWN_W)
        for pct in (50.0, 95.0, 99.0, 99.9):
            cs2, ca2 = float(rng.uniform(0.2, 3.0)), float(rng.uniform(0.5, 2.0))
            many = max_arrival_rate_of_sum(counts, MEAN_MS, tail, pct, cs2, ca2)
            for i, c in enumerate(counts):
                one = max_arrival_rate_of_sum([c], MEAN_MS, tail, pct, cs2, ca2)
                assert one.shape == (1,) and one.tobytes() == many[i:i + 1].tobytes(), (limit, pct, c)
                assert max_arrival_rate_of_sum([c], MEAN_MS, tail, pct, cs2, ca2, table=True).tobytes() == \
                    max_arrival_rate_of_sum(counts, MEAN_MS, tail, pct, cs2, ca2, table=True)[i:i + 1].tobytes()
            assert max_arrival_rate_of_sum([5.0], MEAN_MS, tail, pct, cs2, ca2, router="round-robin").tobytes() == \
                max_arrival_rate_of_sum([5.0, 6.0], MEAN_MS, tail, pct, cs2, ca2, router="round-robin")[:1].tobytes()


def test_table_never_promises_more_than_the_direct_sum():
    limit, pct = 300.0, 99.0
    tail = ttft_tail(limit, PATH, OWN_MS, OWN_W)
    th = np.geomspace(1e-6, 5.0, 400)
    direct, table = tail.phi(th), tail.phi_table(th)
    assert np.all(table >= direct * (1 - 1e-12))
    # within 0.1% wherever Phi can matter (C Phi ~ q = 1% needs Phi >= 1%; tested down to 1e-6)
    big = direct > 1e-6
    assert np.all(table[big] <= direct[big] * 1.001)
    c = np.arange(1, 301)
    a_direct = max_arrival_rate_of_sum(c, MEAN_MS, tail, pct, CS2, CA2)
    a_table = max_arrival_rate_of_sum(c, MEAN_MS, tail, pct, CS2, CA2, table=True)
    assert np.all(a_table <= a_direct * (1 + 1e-12))
    assert np.all(a_table >= a_direct * 0.999)
    curve = capacity_curve_of_sum([MixTail(MEAN_MS, CS2, CA2, tail)], pct, 300)
    assert curve[0] == 0.0
    assert np.all(curve[1:] <= a_table * MEAN_MS / 1e3 * (1 + 1e-12))
    assert np.all(np.diff(curve, 2) >= -1e-9)  # discretely convex, as the sizing model's chords need


def test_curve_of_several_mixes_is_at_most_each_mix():
    pct = 99.0
    a = MixTail(MEAN_MS, CS2, CA2, ttft_tail(300.0, PATH, OWN_MS, OWN_W))
    b = MixTail(40.0, 2.0, 1.0, ttft_tail(300.0, PATH, OWN_MS * 1.5, OWN_W))
    both = capacity_curve_of_sum([a, b], pct, 120)
    for m in (a, b):
        assert np.all(both <= capacity_curve_of_sum([m], pct, 120) + 1e-9)


def test_min_servers_is_the_first_count_whose_capacity_covers_the_rate():
    limit, pct = 300.0, 99.0
    tail = ttft_tail(limit, PATH, OWN_MS, OWN_W)
    caps = max_arrival_rate_of_sum(np.arange(1, 400), MEAN_MS, tail, pct, CS2, CA2)
    for lam in (5.0, 300.0, 2_000.0, 9_000.0):
        n = min_servers_of_sum(lam, MEAN_MS, tail, pct, CS2, CA2)
        assert n == int(np.argmax(caps >= lam)) + 1
    assert min_servers_of_sum(0.0, MEAN_MS, tail, pct) == 0
    # the compute alone is past the limit for more than 1% of requests: no pool size helps
    assert min_servers_of_sum(10.0, MEAN_MS, ttft_tail(80.0, PATH, OWN_MS, OWN_W), pct) is None


def test_convex_minorant():
    a = np.array([0.0, 0.5, 2.5, 3.0, 6.0])
    m = convex_minorant(a)
    assert np.all(m <= a + 1e-12) and np.all(np.diff(m, 2) >= -1e-12)
    assert m[0] == a[0] and m[-1] == a[-1]
    convex = np.array([0.0, 0.5, 1.5, 3.0])
    assert np.array_equal(convex_minorant(convex), convex)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="TTFT limit"):
        ttft_tail(0.0, PATH, OWN_MS, OWN_W)
    with pytest.raises(ValueError, match="weights"):
        ttft_tail(100.0, PATH, OWN_MS, [0.0, 0.0, 0.0])
    tail = ttft_tail(300.0, PATH, OWN_MS, OWN_W)
    with pytest.raises(ValueError, match="percentile"):
        max_arrival_rate_of_sum([4], MEAN_MS, tail, 100.0)
    with pytest.raises(ValueError, match="servers"):
        max_arrival_rate_of_sum([0], MEAN_MS, tail, 99.0)


@pytest.mark.parametrize("router", ["round-robin", "random"])
def test_load_blind_router_is_c_single_server_queues(router):
    # each slice a G/G/1 at lambda / c with its own arrival SCV (queueing.server_ca2)
    from fleetplan.perf.queueing import server_ca2

    tail = ttft_tail(300.0, PATH, OWN_MS, OWN_W)
    c, lam = 8, 220.0
    one = float(tail_exceeds(tail, 1, lam / c, MEAN_MS, CS2, float(server_ca2(router, c, 1.4))))
    assert float(tail_exceeds(tail, c, lam, MEAN_MS, CS2, 1.4, router)) == pytest.approx(one, rel=1e-12)
    single = max_arrival_rate_of_sum([1], MEAN_MS, tail, 99.0, CS2, float(server_ca2(router, c, 1.4)))[0]
    assert max_arrival_rate_of_sum([c], MEAN_MS, tail, 99.0, CS2, 1.4, router=router)[0] == pytest.approx(c * single, rel=1e-12)
    # a shared queue carries more than c separate ones
    assert max_arrival_rate_of_sum([c], MEAN_MS, tail, 99.0, CS2, 1.4)[0] > c * single
    curve = capacity_curve_of_sum([MixTail(MEAN_MS, CS2, 1.4, tail)], 99.0, 40, router=router)
    direct = max_arrival_rate_of_sum(np.arange(1, 41), MEAN_MS, tail, 99.0, CS2, 1.4, router=router) * MEAN_MS / 1e3
    assert np.all(curve[1:] <= direct * (1 + 1e-9)) and np.all(np.diff(curve, 2) >= -1e-9)
    assert curve[-1] >= direct[-1] * 0.999  # the table's chord costs at most 0.1%
    n = min_servers_of_sum(lam, MEAN_MS, tail, 99.0, CS2, 1.4, router=router)
    assert meets_percentile_of_sum(tail, 99.0, n, lam, MEAN_MS, CS2, 1.4, router)
    assert n == 1 or not meets_percentile_of_sum(tail, 99.0, n - 1, lam, MEAN_MS, CS2, 1.4, router)
