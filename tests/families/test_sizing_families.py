"""Analytic micro-cases, one per constraint family, on ``tiny_instance``: the answer is
worked out in the test from the instance's numbers and closed-form queueing, then
compared with the solver's plan (solved to optimality, mip_gap 0)."""

from __future__ import annotations

import math

import pytest

from fleetplan.instance.io import parse_instance
from fleetplan.perf.queueing import min_servers
from fleetplan.sizing import solve
from fleetplan.solvers.base import SolveOptions

from tests.conftest import tiny_data

EXACT = SolveOptions(mip_gap=0.0)
KV_PER_TOKEN = 2 * 32 * 8 * 128  # tiny model: 65,536 bytes/token


def _allreduces_ms(chips: int, tokens: float) -> float:
    """The tiny model's tensor-parallel all-reduces of one pass over ``tokens`` tokens, by hand:
    none on one chip; on two, 2 x 32 layers of a ring all-reduce of tokens x 4096 x 2 bytes at the
    default collective priors (18.26 us + 2 steps x 0.789 us + the bytes over 400 GB/s x 0.730)."""
    if chips == 1:
        return 0.0
    return 2 * 32 * (18.26 + 2 * 0.789 + tokens * 4096 * 2 / (400e9 * 0.730) * 1e6) / 1e3


def _decode_tokens_per_s(chips: int, batch_cap_max: int = 512) -> float:
    """Best legal decode point of the tiny model on a slice of ``chips`` chips, by hand.

    Step = max(8 GB / (chips x 3 TB/s x 0.6), 2 A B / (chips x 1000 TFLOP/s x 0.4)) (the GEMMs:
    weight reads or FLOPs) + B x resident KV / the same bandwidth (attention) + the all-reduces
    (affine in B); p99 TPOT = 1.5 x step <= 50 ms, so step <= 33.3 ms; KV pool = chips x
    (80 - 4) GB - 5% - 8 GB.
    """
    kv = (2000 + 100.5) * KV_PER_TOKEN
    bw = chips * 3e12 * 0.6
    w, c, m1 = 8e9 / bw * 1e3, 2 * 8e9 / (chips * 1000e12 * 0.4) * 1e3, kv / bw * 1e3  # ms, ms per request, ms per request
    a0, a1 = _allreduces_ms(chips, 0.0), _allreduces_ms(chips, 1.0) - _allreduces_ms(chips, 0.0)
    limit = 50 / 1.5
    b_slo = math.floor((limit - w - a0) / (m1 + a1))  # weight-read-bound GEMMs
    if c * b_slo > w:  # the GEMMs' FLOPs bind before the SLO does
        b_slo = math.floor((limit - a0) / (c + m1 + a1))
    pool = chips * 80e9 - 8e9 - chips * 4e9 - 0.05 * chips * 80e9
    b_kv = math.floor(pool / kv)
    b = min(b_slo, b_kv, batch_cap_max)
    step = max(w, c * b) + m1 * b + _allreduces_ms(chips, b)
    return b / (step / 1e3)


def _prefill_service_ms(chips: int) -> float:
    flops = 2 * 8e9 * 2000 + 2 * 32 * 4096 * 2000**2
    return flops / (chips * 1000e12 * 0.4) * 1e3 + _allreduces_ms(chips, 2000)


def _prefill_slices(chips: int, rps: float, ttft_ms: float = 1000.0) -> int | None:
    es = _prefill_service_ms(chips)
    kv_ms = 2000 * KV_PER_TOKEN / 100e9 * 1e3  # over ICI, nothing hidden (overlap prior 0)
    budget = ttft_ms - es - kv_ms  # no path latency in the tiny instance
    # one prompt length: deterministic service, C_s^2 = 0
    return min_servers(rps, es, budget, 99.0, 0.0)


def _chips(plan, role: str, region: str | None = None) -> int:
    return sum(p.chips for p in plan.pools if p.role == role and (region is None or p.region == region))


def one_region(**overrides):
    """The tiny instance with region b removed and N-1 off."""
    data = tiny_data(**overrides)
    del data["regions"]["b"]
    data["regions"]["a"]["failover_to"] = []
    data["failover"]["n_minus_1"] = False
    return parse_instance(data, "one-region")


def test_decode_and_prefill_single_region():
    inst = one_region(regions={"a": {"peak_rps": 200}})
    out = solve(inst, EXACT)
    plan = out.plan
    assert plan.status == "verified", plan.violations
    dec = min(math.ceil(200 * 200 / _decode_tokens_per_s(c)) * c for c in (1, 2))
    pre = min(_prefill_slices(c, 200) * c for c in (1, 2))
    assert _chips(plan, "decode") == dec
    assert _chips(plan, "prefill") == pre
    assert plan.cost.fleet_cost_per_hour_usd == pytest.approx(2.0 * (dec + pre))


def test_n_minus_1_with_one_absorber_doubles_the_survivor(tiny_instance):
    inst = tiny_instance(regions={"a": {"peak_rps": 100}, "b": {"peak_rps": 100}}, failover={"n_minus_1": True})
    plan = solve(inst, EXACT).plan
    assert plan.status == "verified", plan.violations
    for r in ("a", "b"):
        # losing the other region sends all of its traffic here: 200 req/s
        assert _chips(plan, "decode", r) == min(math.ceil(200 * 200 / _decode_tokens_per_s(c)) * c for c in (1, 2))
        assert _chips(plan, "prefill", r) == min(_prefill_slices(c, 200) * c for c in (1, 2))
    assert {(r.lost, r.to, r.share) for r in plan.routing} == {("a", "b", 1.0), ("b", "a", 1.0)}


def test_tight_ttft_forces_the_larger_slice(tiny_instance):
    # 82.6 ms of prefill on one chip cannot meet a 60 ms TTFT; two chips (41.3 ms + 4.9 ms of all-reduces) can
    inst = tiny_instance(workload={"classes": {"std": {"slos": [{"metric": "ttft", "percentile": 99, "limit_ms": 60},
                                                                {"metric": "tpot", "percentile": 99, "limit_ms": 50}]}}})
    plan = solve(inst, EXACT).plan
    pre = [p for p in plan.pools if p.role == "prefill"]
    assert pre and all(p.chips_per_slice == 2 for p in pre)
    assert plan.status == "verified"
    for p in pre:
        assert p.slices == _prefill_slices(2, 20, 60.0)


def test_impossible_ttft_is_reported_as_shortfall_with_a_reason(tiny_instance):
    inst = tiny_instance(workload={"classes": {"std": {"slos": [{"metric": "ttft", "percentile": 99, "limit_ms": 30},
                                                                {"metric": "tpot", "percentile": 99, "limit_ms": 50}]}}})
    plan = solve(inst, EXACT).plan
    assert plan.status == "shortfall"
    assert not plan.violations
    assert any("no slice shape meets" in d for d in plan.diagnostics)
    assert any("not used for this tier's prefill" in d for d in plan.diagnostics)
    normal = next(s for s in plan.scenarios if s.kind == "normal")
    assert normal.prefill_shortfall_rps == pytest.approx(40.0)  # both regions' 20 req/s


def test_inventory_limit_gives_shortfall_not_infeasibility(tiny_instance):
    inst = tiny_instance(regions={"a": {"peak_rps": 200, "pods": {"acc": {"installed": 0, "available_new": 1}}}})
    plan = solve(inst, EXACT).plan
    assert plan.status == "shortfall"
    assert any("every pod of acc that a can have is in use" in d for d in plan.diagnostics)
    assert any(b.startswith("pods[a,acc] at the inventory limit") for b in plan.binding)
    assert _chips(plan, "decode", "a") + _chips(plan, "prefill", "a") <= 8


def test_warm_pool_minimum_is_held(tiny_instance):
    inst = tiny_instance(failover={"n_minus_1": True, "warm_pool": {"min_slices_per_region": 2, "max_slices_per_region": 4}})
    plan = solve(inst, EXACT).plan
    assert plan.status == "verified", plan.violations
    for r in ("a", "b"):
        assert sum(w.slices for w in plan.warm_pool if w.region == r) >= 2


def test_new_pod_cost_and_installed_pods(tiny_instance):
    base = tiny_instance(chips={"acc": {"new_pod_cost_per_hour_usd": 100.0}})
    plan = solve(base, EXACT).plan
    new = sum(f.pods_new for f in plan.fleet)
    assert plan.cost.pods_cost_per_hour_usd == pytest.approx(100.0 * new)
    inst = tiny_instance(chips={"acc": {"new_pod_cost_per_hour_usd": 100.0}},
                         regions={"a": {"pods": {"acc": {"installed": 1, "available_new": 10}}}})
    plan2 = solve(inst, EXACT).plan
    assert plan2.cost.fleet_cost_per_hour_usd == pytest.approx(plan.cost.fleet_cost_per_hour_usd - 100.0)


def test_colocated_replicas_match_the_replica_formula(tiny_instance):
    from fleetplan.perf.colocated import replica_rates, schedules_of
    from fleetplan.perf.pools import PrefillSource, slice_specs, tier_mixes

    inst = tiny_instance(serving={"mode": "colocated", "utilisation_headroom": 0.8})
    plan = solve(inst, EXACT).plan
    assert plan.status == "verified", plan.violations
    tm = tier_mixes(inst)[0]
    best = math.inf
    for sl in slice_specs(inst):
        for sch in schedules_of(inst):
            # the fewest replicas n with n x rate(n) x headroom >= 20 req/s (least-work: one M/G/n queue)
            n = replica_rates(inst, tm, sl, [PrefillSource(1.0, 0.0)], sch).replicas_for(20.0, 0.8)
            if n is not None:
                best = min(best, n * sl.chips)
    assert _chips(plan, "replica", "a") == best
