"""Mixed pools (``serving.mixed_shapes``): a replica or decode pool may run several slice
shapes and chip types side by side (fleet.py drops one-shape for those roles).

The field case of issue 18 (tests/families/field_case.py): demand of 9 units, 1 newer chip
(worth 2 units, 1.8 USD/h) and 8 older ones (worth 1, 1 USD/h) available. The optimum,
found here by enumeration, is 1 newer + 7 older at 8.8 USD/h; one shape per pool has no
plan with that inventory and pays 9 USD/h without it. The solver must match the
enumeration and the independent verifier must accept the mixed plan.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetplan.results.verify import verify
from fleetplan.sizing import solve
from tests.families.field_case import brute_force, field_instance, replica_rates


@pytest.fixture(scope="module")
def rates():
    return replica_rates()


def _demand(rates) -> float:
    return 9 * rates["older"] * (1 - 1e-6)  # 9 units, less a hair so 9 older replicas carry it exactly


def test_the_newer_chip_is_worth_two_older_ones(rates):
    # the field case's premise, from the physics (SLO-limited rate per replica), not set by the test
    assert 2.0 <= rates["newer"] / rates["older"] < 3.0


def test_a_mixed_pool_finds_the_field_optimum_and_verifies(rates):
    lam = _demand(rates)
    cost, fleet = brute_force(rates, lam, {"newer": 1, "older": 8}, mixed=True)
    assert (round(cost, 9), fleet) == (8.8, {"newer": 1, "older": 7})
    inst = field_instance(lam)
    plan = solve(inst).plan
    assert plan.status == "verified"
    assert plan.cost.fleet_cost_per_hour_usd == pytest.approx(cost, rel=1e-6)
    assert {p.slice: p.slices for p in plan.pools} == {"newerx1": 1, "olderx1": 7}
    assert verify(inst, plan) == []
    # one load record for the role; each shape's sub-pool is within its SLOs at its share
    (rec,) = plan.scenarios[0].pools
    slo = {s.metric: s.limit_ms for s in inst.workload.classes["std"].slos}
    assert rec.ttft_ms["p99"] <= slo["ttft"] and rec.tpot_ms["p99"] <= slo["tpot"]
    assert rec.utilisation <= 1.0
    # without the newer replica the older ones do not carry the load, and the verifier says so
    cut = plan.model_copy(update={"pools": [p for p in plan.pools if p.slice != "newerx1"]})
    assert any(v.check == "replica_slo" for v in verify(inst, cut))


def test_one_shape_per_pool_has_no_plan_with_the_inventory_and_pays_more_without(rates):
    lam = _demand(rates)
    assert brute_force(rates, lam, {"newer": 1, "older": 8}, mixed=False) is None
    plan = solve(field_instance(lam, mixed=False)).plan
    assert plan.status == "shortfall" and plan.scenarios[0].unserved_rps > 0
    # without the inventory limit: one shape costs 9 USD/h (9 older, or 5 newer at the same price)
    cost, _ = brute_force(rates, lam, {"newer": 9, "older": 9}, mixed=False)
    assert round(cost, 9) == 9.0
    free = solve(field_instance(lam, newer=9, older=9, mixed=False)).plan
    assert free.status == "verified" and free.cost.fleet_cost_per_hour_usd == pytest.approx(cost, rel=1e-6)


@pytest.fixture(scope="module")
def field_data(rates):
    from fleetplan.tables.derived import build_model_data

    # built at the largest demand drawn below, so every bound from the data (slices, rates) holds for the smaller ones
    return build_model_data(field_instance(12 * rates["older"], newer=4, older=12))


@settings(max_examples=12, deadline=None)
@given(newer=st.integers(0, 4), older=st.integers(0, 12), units=st.integers(1, 12))
def test_mixing_never_raises_cost(field_data, rates, newer, older, units):
    """Property: on the same candidate tables, allowing mixed pools never raises the cost and
    never loses a plan; both optima equal the enumeration's. Model-level (one HiGHS solve
    each, no extraction) to stay cheap; the inventory and the demand vary on the data."""
    from fleetplan.models.sizing.build import build_sizing_model
    from fleetplan.solvers.base import SolveOptions
    from fleetplan.solvers.highs import solve_highs

    lam = units * rates["older"] * (1 - 1e-6)
    out = {}
    for mixed in (False, True):
        inst = field_data.inst
        inst = inst.model_copy(update={"serving": inst.serving.model_copy(update={"mixed_shapes": mixed})})
        d = dataclasses.replace(field_data, inst=inst, p_peak_rps={"a": lam}, p_min_slices={},
                                p_available_pods={("a", "newer"): newer, ("a", "older"): older})
        res = solve_highs(build_sizing_model(d), SolveOptions(mip_gap=0.0))
        out[mixed] = res.objective if res.has_incumbent else None
        want = brute_force(rates, lam, {"newer": newer, "older": older}, mixed)
        assert (out[mixed] is None) == (want is None)
        if want is not None:
            assert out[mixed] == pytest.approx(want[0], rel=1e-6, abs=1e-9)
    if out[False] is not None:
        assert out[True] is not None and out[True] <= out[False] + 1e-9


def test_a_mixed_decode_pool_beside_one_prefill_shape():
    """Disaggregated: the tiny model on its 'acc' chip (one 8-chip pod, 2 USD/chip-h) and an
    older chip at half the bandwidth (30 pods, 1.1 USD/chip-h). Decode outgrows the one
    'acc' pod, so the optimum fills it and adds older decode slices beside it; one shape per
    pool pays more. Prefill stays one shape. The decode part matches the enumeration over
    the candidate tables' tokens/s per slice, at the plan's own prefill pool."""
    from fleetplan.tables.derived import NORMAL, build_model_data
    from fleetplan.instance.io import parse_instance
    from tests.conftest import tiny_data

    def inst(mixed: bool):
        # sized without pods: with them, KV from the 'acc' pod's prefill to decode in 'old' pods crosses the DCN
        d = tiny_data(serving={"mode": "disaggregated", "mixed_shapes": mixed}, placement={"size_with_pods": False})
        d["chips"]["acc"]["slice_shapes"] = [1]
        d["chips"]["old"] = dict(d["chips"]["acc"], hbm_tbps=1.5, peak_tflops=500, price_per_chip_hour_usd=1.1)
        del d["regions"]["b"]
        d["regions"]["a"].update(peak_rps=400, failover_to=[], pods={"acc": {"installed": 0, "available_new": 1},
                                                                       "old": {"installed": 0, "available_new": 30}})
        return parse_instance(d, "mixed-decode")

    mixed, one = inst(True), inst(False)
    plan = solve(mixed).plan
    base = solve(one).plan
    assert plan.status == base.status == "verified" and verify(mixed, plan) == []
    dec = {p.slice: p.slices for p in plan.pools if p.role == "decode"}
    assert len(dec) == 2 and len({p.slice for p in plan.pools if p.role == "prefill"}) == 1
    assert plan.cost.fleet_cost_per_hour_usd < base.cost.fleet_cost_per_hour_usd
    d = build_model_data(mixed)
    cap = {c: d.decode[("all", c, NORMAL)].tokens_per_s for c in ("accx1", "oldx1")}
    need = 400 * mixed.workload.output_tokens
    pre = sum(p.slices for p in plan.pools if p.role == "prefill")
    best = min((2.0 * a + 1.1 * b, a, b) for a in range(9) for b in range(30 * 8 - pre + 1) if a * cap["accx1"] + b * cap["oldx1"] >= need)
    assert (dec["accx1"], dec["oldx1"]) == best[1:]
    # the decode record carries both shapes' capacity at their own operating points
    (rec,) = [q for q in plan.scenarios[0].pools if q.role == "decode"]
    assert rec.capacity == pytest.approx(sum(cap[c] * n for c, n in dec.items()), rel=1e-5)
