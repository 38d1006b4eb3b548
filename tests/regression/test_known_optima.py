"""Known optima: small instances whose cheapest fleet the test finds by brute-force
enumeration, with its own feasibility check written from fleetplan.perf's functions
(never the model's tables), and the solver (mip_gap 0) must match it exactly."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fleetplan.instance.io import parse_instance
from fleetplan.perf.pools import PrefillSource, decode_table, path_ms, prefill_profile, slice_specs, tier_mixes, tier_slos
from fleetplan.perf.queueing import wait_percentile_ms
from fleetplan.sizing import solve
from fleetplan.solvers.base import SolveOptions
from tests.conftest import tiny_data

EXACT = SolveOptions(mip_gap=0.0)


def _decode_cap(inst, tm, sl) -> float:
    """Most tokens/s of a legal operating point (every batch up to 512, spec off)."""
    ops = decode_table(inst, tm, sl, np.arange(1, 513), [])
    legal = [o for o in ops if o.legal]
    return max(o.tokens_per_s for o in legal) if legal else 0.0


def _prefill_ok(inst, tm, sl, n: int, sources: list[tuple[float, float, int | None]]) -> bool:
    """TTFT p99 of n slices fed by (rps, hit rate, clamp) sources, summed percentiles."""
    lam = sum(r for r, _, _ in sources)
    if lam <= 0:
        return True
    if n <= 0:
        return False
    prof = prefill_profile(inst, tm, sl, [PrefillSource(r, h, c) for r, h, c in sources if r > 0], [99.0])
    slo = next(s for s in tier_slos(inst, tm.name) if s.metric == "ttft")
    w = float(wait_percentile_ms(n, lam * prof.kept_share, prof.mean_ms, 99.0, prof.cs2))
    return path_ms(inst, 99.0) + w + prof.pct_ms[99.0] + prof.kv_exposed_ms[99.0] <= slo.limit_ms + 1e-9


def _min_prefill(inst, tm, sl, sources, n_max=200) -> int | None:
    for n in range(1, n_max):
        if _prefill_ok(inst, tm, sl, n, sources):
            return n
    return None


def test_single_region_two_tiers_brute_force():
    """One region, two tiers, slice shapes {1, 2}: enumerate shape and count per pool."""
    data = tiny_data(
        regions={"a": {"peak_rps": 60}},
        workload={"input_mix": [{"share": 0.8, "tokens": 2000}, {"share": 0.2, "tokens": 16000}],
                  "tiers": [{"name": "short", "max_input_tokens": 4096}, {"name": "long", "max_input_tokens": None}]},
        placement={"size_with_pods": False},  # the plain sizing's optimum; with its pods: tests/families/test_pods.py
    )
    del data["regions"]["b"]
    data["regions"]["a"]["failover_to"] = []
    inst = parse_instance(data, "bf1")
    best = 0.0
    for tm in tier_mixes(inst):
        lam = 60 * tm.tier_share
        options = []
        for sl in slice_specs(inst):
            cap = _decode_cap(inst, tm, sl)
            n_dec = math.ceil(lam * 200 / cap) if cap > 0 else None
            n_pre = _min_prefill(inst, tm, sl, [(lam, 0.0, None)])
            options.append((sl.chips, n_dec, n_pre))
        # each role picks its cheapest shape independently (no coupling in one region)
        best += min(c * n for c, n, _ in options if n is not None) * 2.0
        best += min(c * n for c, _, n in options if n is not None) * 2.0
    plan = solve(inst, EXACT).plan
    assert plan.status == "verified", plan.violations
    assert plan.cost.fleet_cost_per_hour_usd == pytest.approx(best)


def _three_region_instance():
    data = tiny_data(
        regions={
            "a": {"peak_rps": 60, "failover_to": ["b", "c"]},
            "b": {"peak_rps": 60, "failover_to": ["a", "c"]},
            "c": {"peak_rps": 60, "failover_to": ["a", "b"], "hourly_load": [1.0] * 24,
                  "pods": {"acc": {"installed": 0, "available_new": 10}}},
        },
        chips={"acc": {"slice_shapes": [2]}},
        failover={"n_minus_1": True, "diverted_hit_rate": 0.0},
        workload={"prefix_hit_rate": 0.5},
    )
    return parse_instance(data, "bf3")


def test_three_regions_with_routing_brute_force():
    """Three equal regions, each absorbed by the other two, flat load: the test enumerates
    routing shares on a 5% grid for every lost region and, for each, every pool's smallest
    size over the normal and the loss scenarios; the solver must find the same cost."""
    inst = _three_region_instance()
    tm = tier_mixes(inst)[0]
    sl = slice_specs(inst)[0]
    cap = _decode_cap(inst, tm, sl)
    regions = ["a", "b", "c"]
    absorbers = {x: [r for r in regions if r != x] for x in regions}
    grid = [i / 20 for i in range(21)]
    pre_cache: dict = {}

    def n_pre(own, div):
        key = (round(own, 9), round(div, 9))
        if key not in pre_cache:
            src = [(own, 0.5, None)] + ([(div, 0.0, None)] if div > 0 else [])
            pre_cache[key] = _min_prefill(inst, tm, sl, src)
        return pre_cache[key]

    best = math.inf
    for shares in itertools.product(grid, repeat=3):  # share of x's traffic to its first absorber
        need_pre = {r: n_pre(60, 0) for r in regions}
        need_dec = {r: math.ceil(60 * 200 / cap) for r in regions}
        for x, phi in zip(regions, shares):
            for a, f in zip(absorbers[x], (phi, 1 - phi)):
                # in a loss the survivor's own traffic is at a 50% hit rate (no re-warm dip: factor 1)
                need_pre[a] = max(need_pre[a], n_pre(60, 60 * f))
                need_dec[a] = max(need_dec[a], math.ceil((60 + 60 * f) * 200 / cap - 1e-9))
        cost = sum(need_pre.values()) + sum(need_dec.values())
        best = min(best, cost)
    plan = solve(inst, EXACT).plan
    assert plan.status == "verified", plan.violations
    assert sum(p.slices for p in plan.pools) == best


def test_colocated_brute_force():
    from fleetplan.results.evaluate import Context

    data = tiny_data(serving={"mode": "colocated", "utilisation_headroom": 1.0}, regions={"a": {"peak_rps": 45}})
    del data["regions"]["b"]
    data["regions"]["a"]["failover_to"] = []
    inst = parse_instance(data, "bfc")
    tm = tier_mixes(inst)[0]
    best = math.inf
    from fleetplan.perf.colocated import replica_rates, schedules_of
    from fleetplan.perf.pools import tier_slos

    slos = tier_slos(inst, tm.name)
    pcts = sorted({s.percentile for s in slos})
    for sl in slice_specs(inst):
        # the replica model's SLO check at every pool size, straight from perf: n replicas of
        # each schedule at 45 / n req/s each, least-work routing (one M/G/n queue)
        for sch in schedules_of(inst):
            rr = replica_rates(inst, tm, sl, [PrefillSource(1.0, 0.0)], sch)
            for n in range(1, 60):
                st, lat = rr.latency(45 / n, n, pcts, estimate=False)
                got = {"ttft": lat.ttft_ms, "tpot": lat.tpot_ms, "itl": lat.itl_ms}
                if st.stable and all(got[s.metric][s.percentile] <= s.limit_ms for s in slos):
                    best = min(best, n * sl.chips * 2.0)
                    break
    plan = solve(inst, EXACT).plan
    assert plan.status == "verified", plan.violations
    assert plan.cost.fleet_cost_per_hour_usd == pytest.approx(best)
    assert Context(inst)  # the evaluator builds on the same instance
