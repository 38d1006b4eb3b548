"""Prefill shapes whose KV always crosses the DCN (issue 41; docs/formulation.md, the prefill
family's "Prefill shapes whose KV always crosses the DCN"): a prefill slice that no decode
slice of its tier can share a pod with sends every request's KV over the DCN in every
placement, so the plain sizing sizes it with that TTFT composition too. Valid (it cuts off
no placed plan: the brute force over every pod content agrees) and binding (without it the
plain fleet is not placeable and the plan's bound is below every placed plan)."""

from __future__ import annotations

import pytest

from fleetplan.tables.derived import build_model_data
from fleetplan.instance.io import parse_instance
from fleetplan.tables.pods import crossing_shapes
from fleetplan.perf.pools import slice_specs, tier_mixes
from fleetplan.results.verify import verify
from fleetplan.sizing import solve
from fleetplan.solvers.base import SolveOptions
from tests.conftest import tiny_data
from tests.families.test_pods import _ttft_ok, brute_force

EXACT = SolveOptions(mip_gap=0.0)


def _fills_a_pod(dcn_gbytes_per_s: float, size_with_pods: bool = True):
    """One region, 2-chip pods and only 2-chip slices (every prefill slice fills its pod), 8,000-token
    prompts at 40 req/s, TTFT p99 300 ms, the DCN ceiling 100% (no overage: the plan may send it all)."""
    data = tiny_data(chips={"acc": {"chips_per_pod": 2, "slice_shapes": [2]}},
                     network={"dcn_gbytes_per_s_per_slice": dcn_gbytes_per_s},
                     regions={"a": {"peak_rps": 40, "pods": {"acc": {"installed": 0, "available_new": 20}}, "failover_to": []}},
                     workload={"input_mix": [{"share": 1.0, "tokens": 8000}],
                               "classes": {"std": {"slos": [{"metric": "ttft", "percentile": 99, "limit_ms": 300},
                                                            {"metric": "tpot", "percentile": 99, "limit_ms": 50}]}}},
                     placement={"dcn_share_max": 1.0, "size_with_pods": size_with_pods})
    del data["regions"]["b"]
    return parse_instance(data, "fills-a-pod")


def _prefill(plan) -> int:
    return sum(p.slices for p in plan.pools if p.role == "prefill")


def test_a_prefill_shape_that_fills_a_pod_is_one_whose_kv_always_crosses():
    d = build_model_data(_fills_a_pod(10.0))
    assert set(crossing_shapes(d)) == {("all", "accx2")}
    assert crossing_shapes(build_model_data(parse_instance(tiny_data(), "tiny"))) == {}  # 8-chip pods: 2 + 1 chips fit


def test_the_plain_sizing_holds_the_dcn_transfer_of_a_shape_that_fills_a_pod():
    """DCN 10 GB/s per slice: the KV transfer of every request costs TTFT budget. Sized without
    its pods the fleet has 11 prefill slices (52 $/h), which miss the TTFT once every request's KV
    crosses -- no placement serves it. Before issue 41 the plan (13 prefill slices, 60 $/h) had the
    plain sizing's 52 $/h as its bound, a 13% gap no search closes; with the crossing shape sized
    for every request crossing, the plain sizing's bound is the placed plan's cost: gap 0, and the
    brute force over every pod content finds no cheaper placed fleet (the rows cut none off)."""
    inst = _fills_a_pod(10.0)
    plan = solve(inst, EXACT).plan
    assert plan.status == "verified" and verify(inst, plan) == []
    assert plan.solver.objective == pytest.approx(60.0) and _prefill(plan) == 13
    assert plan.solver.bound == pytest.approx(plan.solver.objective, abs=1e-6)
    assert brute_force(inst) == pytest.approx(plan.solver.objective)  # valid: no placed fleet is cheaper

    plain = solve(_fills_a_pod(10.0, size_with_pods=False), EXACT).plan  # no pods: the shape's KV is not known to cross
    assert plain.solver.objective == pytest.approx(52.0) and _prefill(plain) == 11
    tm = next(tm for tm in tier_mixes(inst) if tm.name == "all")
    sl = next(s for s in slice_specs(inst) if s.chips == 2)
    assert not _ttft_ok(inst, tm, sl, 11, 40.0, 1.0) and _ttft_ok(inst, tm, sl, 13, 40.0, 1.0)


def test_a_shape_whose_crossing_kv_cannot_meet_the_ttft_is_a_shortfall_not_a_plan_that_fails_verification():
    """Regression (issue 41): at 5 GB/s the DCN transfer of an 8,000-token prompt's KV leaves no
    TTFT budget, so no fleet of 2-chip slices in 2-chip pods serves the tier. The plain sizing
    (TTFT with the KV on the ICI) found one, the pod stage none, and the plan fell back to the
    plain fleet, which the verifier refused (status 'violations'). Now the plain sizing knows the
    KV crosses: a verified shortfall plan that names the cause."""
    inst = _fills_a_pod(5.0)
    plan = solve(inst, EXACT).plan
    assert plan.status == "shortfall" and verify(inst, plan) == []
    assert any("every request's KV crosses the DCN on its prefill shape accx2" in n for n in plan.diagnostics)
