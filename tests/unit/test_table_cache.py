"""fleetplan.tables.cache: the prefix property the shared capacity curves rely on, the
curve store's growth and copies, and what the physics key leaves out (issue 18)."""

from __future__ import annotations

import numpy as np
import pytest

from fleetplan.tables.prefill import _CURVES, _capacity_curve, _capacity_curve_uncached, workload_capacity_curve
from fleetplan.instance.io import parse_instance
from fleetplan.tables.cache import TableCache, physics_key
from fleetplan.perf.ttft_tail import convex_minorant
from tests.conftest import tiny_data

pytestmark = pytest.mark.fresh_table_cache  # tests/conftest.py: its own empty table-cache folder


@pytest.mark.parametrize("tau", [0.05, 1.7, 26.216509855, 400.0])
@pytest.mark.parametrize("pct", [90.0, 99.0, 99.9])
def test_a_shorter_curve_is_a_prefix_of_a_longer_one_bit_for_bit(tau, pct):
    # max_arrival_rate bisects every server count on its own: A(0..n) computed alone equals
    # the first n + 1 points of A(0..N) exactly, on this numpy -- what TableCache.curve slices
    long = _capacity_curve_uncached(tau, pct, 1200)
    for n in (1, 2, 7, 64, 257, 811, 1199):
        assert np.array_equal(_capacity_curve_uncached(tau, pct, n), long[: n + 1]), n


@pytest.mark.parametrize("tau", [0.05, 26.216509855])
def test_the_module_curve_store_extends_a_curve_by_its_missing_points_only(tau, monkeypatch):
    # issue 19: the tables ask for each curve again, longer (extend_prefill); the store keeps
    # the longest and computes only the server counts past it -- the same numbers
    import fleetplan.tables.prefill as prefill

    want = {n: _capacity_curve_uncached(tau, 99.0, n) for n in (300, 120, 811, 5)}
    monkeypatch.setattr(prefill, "_CURVES", {})
    asked = []
    real = prefill.max_arrival_rate
    monkeypatch.setattr(prefill, "max_arrival_rate", lambda n, *a: asked.append((n[0], n[-1])) or real(n, *a))
    for n_max in (300, 120, 811, 811, 5):
        got = prefill._capacity_curve(tau, 99.0, n_max)
        assert np.array_equal(got, want[n_max]), n_max
        assert not got.flags.writeable
    assert asked == [(1.0, 300.0), (301.0, 811.0)]
    assert list(prefill._CURVES) == [(tau, 99.0)] and len(prefill._CURVES[(tau, 99.0)]) == 812
    assert _CURVES is not prefill._CURVES


def test_curve_store_grows_and_hands_out_copies():
    t = TableCache()
    sizes = []

    def compute(n, prefix=None):
        sizes.append(n)
        return _capacity_curve_uncached(3.0, 99.0, n)

    a = t.curve(3.0, 99.0, 10, compute)
    assert sizes == [10] and len(a) == 11
    a[:] = -1.0  # a copy: the store is untouched
    b = t.curve(3.0, 99.0, 5, compute)
    assert sizes == [10] and np.array_equal(b, _capacity_curve_uncached(3.0, 99.0, 5))
    c = t.curve(3.0, 99.0, 12, compute)  # too short: at least twice the stored length
    assert sizes == [10, 20] and np.array_equal(c, _capacity_curve_uncached(3.0, 99.0, 12))
    assert t.curve(3.0, 99.0, 20, compute).shape == (21,) and sizes == [10, 20]
    assert (t.hits, t.misses) == (2, 2)
    with pytest.raises(ValueError, match="points"):
        t.curve(1.0, 99.0, 4, lambda n: np.zeros(n))


def test_workload_capacity_curve_with_tables_is_the_same_curve():
    t = TableCache()
    for n in (40, 9, 300, 120):
        assert np.array_equal(workload_capacity_curve(80.0, 30.0, 0.7, 99.0, n, 1.4, t),
                              workload_capacity_curve(80.0, 30.0, 0.7, 99.0, n, 1.4))
    assert np.array_equal(workload_capacity_curve(-1.0, 30.0, 0.7, 99.0, 5, 1.0, t), np.zeros(6))


def test_physics_key_ignores_the_regions_only():
    base = parse_instance(tiny_data(), "t")
    data = base.model_dump(mode="python", round_trip=True)
    for reg in data["regions"].values():
        reg["peak_rps"] *= 3.0
        for inv in reg["pods"].values():
            inv["available_new"] += 5
    assert physics_key(parse_instance(data, "t")) == physics_key(base)
    data["workload"]["output_tokens"] = base.workload.output_tokens + 1.0
    assert physics_key(parse_instance(data, "t")) != physics_key(base)


def test_memo_computes_once():
    t, calls = TableCache(), []
    assert t.memo(("k", 1), lambda: calls.append(1) or "v") == "v"
    assert t.memo(("k", 1), lambda: calls.append(1) or "w") == "v"
    assert calls == [1] and (t.hits, t.misses) == (1, 1) and len(t) == 1


@pytest.mark.parametrize("router", ["least-work", "round-robin"])
def test_the_points_of_a_ttft_sum_curve_are_a_prefix_of_longer_ones_bit_for_bit(router):
    # issue 41: the table cache keeps the points of a capacity curve of the TTFT sum (before its
    # convex envelope) and extends them; every pool size is bisected on its own, so points
    # start..n computed alone are those of 0..n, and the envelope of the stored points is the curve
    from fleetplan.perf.ttft_tail import MixTail, capacity_curve_of_sum, sum_curve_points, ttft_tail

    path = (np.array([0.0, 20.0, 45.0]), np.array([0.5, 0.4, 0.1]))
    mixes = [MixTail(mean, cs2, 1.3, ttft_tail(900.0, path, [mean * 0.6, mean * 2.5], [0.8, 0.2])) for mean, cs2 in ((120.0, 1.1), (150.0, 0.9))]
    whole = sum_curve_points(mixes, 99.0, 400, router=router)
    assert whole[0] == 0.0 and whole[-1] > 0.0
    for start, n in ((0, 37), (38, 211), (212, 400), (5, 5)):
        assert np.array_equal(sum_curve_points(mixes, 99.0, n, router=router, start=start), whole[start: n + 1]), (start, n)
    t = TableCache()
    for n in (120, 400, 60):
        got = t.points(("k", router), n, lambda s, m: sum_curve_points(mixes, 99.0, m, router=router, start=s))
        assert np.array_equal(got, whole[: n + 1])
        assert np.array_equal(convex_minorant(got), capacity_curve_of_sum(mixes, 99.0, n, router=router))
    assert (t.hits, t.misses) == (1, 2)


def test_a_growing_sequence_of_points_requests_computes_few_extensions():
    # issue 41: the purchase tree's node tables ask a TTFT-sum curve's points again a little longer at each
    # node (derived._bounds -> prefill.extend_prefill): gemini-ironwood-2027 --no-value computed 968 pieces
    # of 273 curves, one curve 15 times (0..329, 330..393, 394..416, ...), each a ~3 ms bisection however
    # few its points (~8 us a point). An extension now computes up to twice the held length, as
    # TableCache.curve does: the same points (each pool size is bisected on its own), few computations.
    # Fails before: seven computations, one per request past the held length
    whole = np.arange(401, dtype=float) ** 1.5
    t, calls = TableCache(), []

    def compute(start, n):
        calls.append((start, n))
        return whole[start: n + 1]

    for n in (100, 101, 105, 120, 150, 180, 200, 130, 260):
        assert np.array_equal(t.points("k", n, compute), whole[: n + 1]), n
    assert calls == [(0, 100), (101, 200), (201, 400)]
    assert (t.hits, t.misses) == (6, 3)


def test_a_warm_table_cache_computes_no_prefill_curve_again(monkeypatch):
    # issue 41: the tables ask for most prefill curves again, longer (derived._bounds -> prefill.extend_prefill);
    # those were not memoised, so a build from a warm cache recomputed 29 curves of the TTFT sum on the
    # brief's instance (0.8 s of CPU of a 'fleetplan solve' whose every piece was reused). Now the
    # curves' points are kept and extended, and the second build computes none -- with the same curves
    # as a build without the cache
    import fleetplan.tables.derived as derived
    import fleetplan.tables.prefill as prefill
    from fleetplan.instance.io import load_instance
    import fleetplan.perf.ttft_tail as ttft_tail

    inst = load_instance("gemini-ironwood")
    plain = derived.build_model_data(inst, tables=False)
    t = TableCache()
    first = derived.build_model_data(inst, tables=t)
    calls = []
    for mod in (prefill, ttft_tail):
        for name in ("capacity_curve_of_sum", "sum_curve_points"):
            real = getattr(mod, name, None)
            if real is not None:
                monkeypatch.setattr(mod, name, lambda *a, _r=real, _n=name, **k: calls.append(_n) or _r(*a, **k))
    again = derived.build_model_data(inst, tables=t)
    assert calls == []
    assert sorted(plain.prefill) == sorted(first.prefill) == sorted(again.prefill)
    for key, cand in plain.prefill.items():
        assert np.array_equal(cand.capacity_erlangs, first.prefill[key].capacity_erlangs), key
        assert np.array_equal(cand.capacity_erlangs, again.prefill[key].capacity_erlangs), key


def test_a_warm_table_cache_evaluates_no_replica_state_under_several_sources(monkeypatch):
    # issue 41: under several held physics sources a replica pool's rate is the first source's
    # search, each other source checked at the rate found (perf.robust.MinRates); the checks were
    # not memoised, so a build from a warm cache evaluated 272 replica states again on the Azure
    # case with three sources (0.25 s of a warm solve whose every search was reused). Now each
    # check is kept in its source's RateMemo, and the second build evaluates none -- with the same
    # replica tables as a build without the cache
    import fleetplan.tables.derived as derived
    import fleetplan.perf.replica_rates as replica_rates
    from fleetplan.instance.io import load_instance

    inst = load_instance("llama70b-h100-bf16-p99")  # colocated, four held sources
    assert inst.physics is not None and len(inst.physics.sources) > 1
    plain = derived.build_model_data(inst, tables=False)
    t = TableCache()
    first = derived.build_model_data(inst, tables=t)
    calls = []
    real = replica_rates.colocated_states
    monkeypatch.setattr(replica_rates, "colocated_states", lambda *a, **k: calls.append(1) or real(*a, **k))
    again = derived.build_model_data(inst, tables=t)
    assert calls == []
    assert plain.replica and repr(first.replica) == repr(plain.replica) == repr(again.replica)
