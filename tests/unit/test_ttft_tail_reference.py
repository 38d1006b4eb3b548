"""The capacity curves of the TTFT percentile of the sum (fleetplan.perf.ttft_tail.
sum_curve_points) and the fused Erlang C (fleetplan.perf.queueing.ErlangCOf) bit for bit
against the code they replaced (tests/unit/reference_ttft_tail.py): on synthetic tails
under each router and on every curve the bundled gemini-ironwood's candidate tables build
(1 and 11 traffic mixes per pool, several hundred slices)."""

from __future__ import annotations

import numpy as np
import pytest

from fleetplan.perf import ttft_tail as tt
from fleetplan.perf.queueing import ErlangCOf, erlang_c, path_sum_distribution, wait_percentile_ms, wait_percentiles_of
from fleetplan.perf.ttft_tail import MixTail, sum_curve_points, ttft_tail
from tests.unit import reference_ttft_tail as ref

PATH = path_sum_distribution([(5.0, 20.0), (8.0, 30.0), (2.0, 6.0)])
OWN_MS = np.array([12.0, 35.0, 90.0])
OWN_W = np.array([0.6, 0.3, 0.1])


def _mixes():
    return [MixTail(28.0, 1.3, 1.0, ttft_tail(300.0, PATH, OWN_MS, OWN_W)),
            MixTail(40.0, 2.0, 1.4, ttft_tail(300.0, PATH, OWN_MS * 1.5, OWN_W)),
            MixTail(22.0, 0.8, 1.0, ttft_tail(300.0, PATH, OWN_MS * 0.7, OWN_W[::-1] / OWN_W.sum()))]


def test_erlang_c_of_fixed_servers_is_erlang_c():
    c = np.arange(1, 700, dtype=float)
    erl = ErlangCOf(c)
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = c * rng.random(c.size)
        assert np.array_equal(erl(a), erlang_c(c, a))
    for a in (c * 1e-300, c * (1 - 2**-45), c * 0.5 + 1e-9, np.where(c > 5, c * 0.3, 0.0), c * 1.5):
        assert np.array_equal(erl(a), erlang_c(c, a))
    with pytest.raises(ValueError, match="servers"):
        ErlangCOf([0.0, 1.0])


@pytest.mark.parametrize("c", [1, 3, 40])
def test_wait_percentiles_of_fixed_servers_are_wait_percentile_ms(c):
    # a colocated pool's TTFT check: one server count, many arrival rates (some 0, some unstable)
    rng = np.random.default_rng(c)
    mean = 20.0 + 300.0 * rng.random(40)
    lam = c * 1e3 / mean * rng.random(40) * 1.2
    lam[:3] = 0.0
    cs2 = rng.random(40) * 2.0
    erl = ErlangCOf(c)
    assert erl.c.ndim == 0
    for p in (50.0, 99.0):
        with np.errstate(all="ignore"):
            got = wait_percentiles_of(erl, lam, mean, p, cs2, 1.3)
            want = wait_percentile_ms(c, lam, mean, p, cs2, 1.3)
        assert np.array_equal(got, want)
        assert np.array_equal(erl(lam[3:] * mean[3:] / 1e3), erlang_c(c, lam[3:] * mean[3:] / 1e3))
    with pytest.raises(ValueError, match="percentile"):
        wait_percentiles_of(erl, lam, mean, 100.0, cs2, 1.3)


def test_phi_table_without_the_clamp_is_the_clamped_table():
    tail = ttft_tail(300.0, PATH, OWN_MS, OWN_W)
    grid = (tail.phi_table(np.zeros(1)), tail._table[0][0])[1]
    th = np.concatenate([[-1.0, -0.0, 0.0, grid[1], grid[-1], grid[-1] * 2, np.inf, -np.inf], np.geomspace(1e-9, grid[-1] * 3, 2000)])
    assert np.array_equal(tail.phi_table(th), ref.phi_table(tail, th))


@pytest.mark.parametrize("router", ["least-work", "round-robin", "random"])
@pytest.mark.parametrize("start", [0, 37])
def test_curve_points_are_the_reference_bit_for_bit(router, start):
    for mixes in (_mixes(), _mixes()[:1], _mixes()[::-1]):
        got = sum_curve_points(mixes, 99.0, 260, router=router, start=start)
        assert np.array_equal(got, ref.sum_curve_points(mixes, 99.0, 260, router=router, start=start))
        assert np.array_equal(sum_curve_points(mixes, 95.0, 90, router=router), ref.sum_curve_points(mixes, 95.0, 90, router=router))


def test_bundled_instance_curves_are_the_reference_bit_for_bit(monkeypatch):
    from fleetplan.tables import derived, prefill
    from fleetplan.instance.io import load_instance

    seen = []

    def both(mixes, percentile, n_max, iterations=45, router="least-work", start=0):
        got = sum_curve_points(mixes, percentile, n_max, iterations, router, start)
        seen.append((len(mixes), n_max, np.array_equal(got, ref.sum_curve_points(mixes, percentile, n_max, iterations, router, start))))
        return got

    monkeypatch.setattr(tt, "sum_curve_points", both)
    monkeypatch.setattr(prefill, "sum_curve_points", both)
    derived.build_model_data(load_instance("gemini-ironwood"), tables=derived.TableCache())
    assert len(seen) >= 20 and {k for k, _, _ in seen} >= {1, 11} and max(n for _, n, _ in seen) > 200
    assert all(same for _, _, same in seen)


def test_mix_tail_computes_each_tail_once_whoever_asks(monkeypatch):
    # issue 41: the purchase tree's node tables and the verifier of every quarter's fleet (a Context each)
    # asked the TTFT tail of the same request types again -- the tables' profiles and the verifier's are
    # different objects (other percentiles) with the same types -- and each built its Phi table again
    # (mix_tail: 11,628 calls, ~1.2 s of purchase gemini-ironwood-2027 --no-value under the profiler). The
    # tail is now memoised on the limit, the path and the types: one TtftTail, the same values as computed
    # alone. Fails before: ttft_tail ran twice
    from fleetplan.instance.io import load_instance
    from fleetplan.perf.pools import PrefillProfile

    inst = load_instance("gemini-ironwood")
    calls = []
    real = tt.ttft_tail
    monkeypatch.setattr(tt, "ttft_tail", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    types = (tuple(float(x) for x in OWN_MS * 1.7), tuple(float(x) for x in OWN_W))
    a = PrefillProfile(30.0, 1.2, {99.0: 90.0}, {99.0: 1.0}, 1.0, 100.0, {}, *types, 1.0)
    b = PrefillProfile(30.0, 1.2, {99.0: 90.0, 50.0: 12.0}, {99.0: 1.0, 50.0: 0.5}, 1.0, 100.0, {}, *types, 1.0)
    first, second = tt.mix_tail(inst, a, 777.0), tt.mix_tail(inst, b, 777.0)
    assert calls == [777.0]
    assert second.tail is first.tail and (second.mean_ms, second.cs2, second.ca2) == (30.0, 1.2, 1.0)
    alone = real(777.0, tt.path_distribution(inst), types[0], types[1])
    assert first.tail.over == alone.over
    assert np.array_equal(first.tail.slack_ms, alone.slack_ms) and np.array_equal(first.tail.weight, alone.weight)
    tt.mix_tail(inst, a, 778.0)  # another limit: another tail
    assert calls == [777.0, 778.0]
