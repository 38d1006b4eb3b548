"""Levers: each lever's two sides are the instances it says, every lever that widens the
planner's options never costs more (at a zero MIP gap), the ranking follows the saving,
and levers that do not apply say why."""

from __future__ import annotations

import pytest

from fleetplan.instance.io import parse_instance
from fleetplan.report.executor import SerialExecutor
from fleetplan.report.levers import lever_variants, run_levers
from tests.conftest import tiny_data

EXACT = {"mip_gap": 0.0}


def _spec_instance():
    """The sweep instance with speculation on (alpha 0.7 above the 0.45 threshold),
    decode batch caps up to 512 and N-1 failover between the two regions."""
    return parse_instance(tiny_data(
        regions={"a": {"peak_rps": 200}, "b": {"peak_rps": 150}}, chips={"acc": {"slice_shapes": [1]}},
        workload={"classes": {"std": {"share": 1.0, "spec_acceptance": 0.7,
                                      "slos": [{"metric": "ttft", "percentile": 99, "limit_ms": 1000},
                                               {"metric": "tpot", "percentile": 99, "limit_ms": 50}]}},
                  "prefix_hit_rate": 0.3},
        speculation={"enabled": True, "draft_tokens": [2, 4]}, failover={"n_minus_1": True}), "levers")


@pytest.fixture(scope="module")
def report():
    return run_levers(_spec_instance(), SerialExecutor(), EXACT)


def test_each_lever_builds_the_instances_it_names():
    inst = _spec_instance()
    data, v = lever_variants(inst, safe_batch=64)
    off, on = v["decode_occupancy"][:2]
    assert off["serving"]["batch_caps"] == [64] and on is None
    assert v["speculation"][0]["speculation"]["enabled"] is False and v["speculation"][1] is None
    assert v["kv_fp8"][0]["model"]["bytes_per_kv_element"] == 2.0 and v["kv_fp8"][1] is None
    assert v["hit_rate_20"][1]["workload"]["prefix_hit_rate"] == pytest.approx(0.5)
    assert data["regions"]["a"]["pods"]["acc"]["available_new"] == 10  # the instance as given: the base is the plan `fleetplan solve` writes
    for side in (off, v["speculation"][0], v["kv_fp8"][0], v["hit_rate_20"][1]):
        parse_instance(side)  # every side validates


def test_wider_options_never_cost_more(report):
    """At a zero gap: more hit rate, FP8 KV (half the bytes), speculation (a superset of
    operating points) and riding to the knee (batch caps a superset of one safe batch)
    each cost no more than their 'off' side."""
    rows = {r.id: r for r in report.rows}
    for lid in ("hit_rate_10", "hit_rate_20", "kv_fp8", "speculation", "decode_occupancy"):
        r = rows[lid]
        assert r.off.status == r.on.status == "verified", lid
        assert r.on.fleet_cost_per_hour_usd <= r.off.fleet_cost_per_hour_usd + 1e-6, lid
    assert rows["hit_rate_20"].on.fleet_cost_per_hour_usd <= rows["hit_rate_10"].on.fleet_cost_per_hour_usd
    # batch infill: this instance has no batch (sheddable) class, so nothing can be sold
    # into the trough (issue 15: it used to be credited anyway)
    inf = rows["batch_infill"]
    assert not inf.applicable and inf.rank is None and "no batch class" in inf.note


def test_batch_infill_sells_the_trough_to_a_batch_class():
    """With a batch class: the same fleet (no re-solve) over more output tokens."""
    inst = parse_instance(tiny_data(workload={"classes": {"std": {"share": 0.9}, "batch": {"share": 0.1, "slos": [], "sheddable": True,
                                                                                           "spec_acceptance": 0.3}}}), "infill")
    data, v = lever_variants(inst, safe_batch=64)
    assert v["batch_infill"][:2] == (None, None)  # both sides are the instance's own plan
    from fleetplan.sizing import solve

    plan = solve(inst).plan
    assert plan.cost.batch_infill_output_tokens_per_day > 0
    assert plan.cost.cost_per_1m_output_tokens_with_infill_usd < plan.cost.cost_per_1m_output_tokens_usd


def test_ranked_by_the_saving(report):
    ranked = [r for r in report.rows if r.rank is not None]
    assert [r.rank for r in ranked] == list(range(1, len(ranked) + 1))
    deltas = [r.delta_usd_per_1m_output for r in ranked]
    assert deltas == sorted(deltas)
    for r in ranked:
        if r.id != "batch_infill":
            assert r.delta_usd_per_1m_output == pytest.approx(r.on.cost_per_1m_output_tokens_usd - r.off.cost_per_1m_output_tokens_usd, abs=1e-6)


def test_levers_that_do_not_apply_say_why():
    from fleetplan.instance.io import load_instance

    inst = load_instance("llama70b-h100")
    rep = run_levers(inst, SerialExecutor())
    rows = {r.id: r for r in rep.rows}
    assert not rows["decode_occupancy"].applicable and "colocated" in rows["decode_occupancy"].note
    assert not rows["speculation"].applicable and "colocated" in rows["speculation"].note
    assert rows["kv_fp8"].applicable and rows["kv_fp8"].rank is not None
    assert [r.id for r in rep.rows[-2:]] == ["decode_occupancy", "speculation"]  # not applicable: last
    # the hit-rate levers re-solve the colocated replicas too, and save
    assert rows["hit_rate_20"].delta_usd_per_1m_output <= 0  # never dearer (4 chunked replicas stay 4 at this size)


def test_a_hit_rate_past_one_is_not_applicable(sweep_data):
    sweep_data["workload"]["prefix_hit_rate"] = 0.85
    _, v = lever_variants(parse_instance(sweep_data))
    assert isinstance(v["hit_rate_20"], str) and "[0, 1)" in v["hit_rate_20"]
    assert not isinstance(v["hit_rate_10"], str)
