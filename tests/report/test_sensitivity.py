"""Sensitivity: the instance modifications, --param parsing and its errors, the tornado
bars' physics (higher MFU or hit rate never needs more prefill, lower bandwidth never
needs less decode), infeasible and invalid points kept and marked."""

from __future__ import annotations

import math

import pytest

from fleetplan.errors import InputError
from fleetplan.instance.io import parse_instance
from fleetplan.perf.pools import tier_mixes
from fleetplan.report import modify
from fleetplan.report.executor import SerialExecutor
from fleetplan.report.sensitivity import DEFAULT_PARAMS, PARAMS, parse_params, run_sensitivity
from fleetplan.report.sweep import make_task, run_solves
from tests.conftest import tiny_data

EXACT = {"mip_gap": 0.0}


# ----------------------------------------------------------------------------- modifications


def test_hit_rate_moves_every_tier_by_the_same_points(gemini_data):
    d = dict(gemini_data)
    d["workload"] = {**d["workload"], "tiers": [{**d["workload"]["tiers"][0], "prefix_hit_rate": 0.3}, d["workload"]["tiers"][1]]}
    out = modify.set_hit_rate(d, 0.7)
    assert out["workload"]["prefix_hit_rate"] == pytest.approx(0.7)
    assert out["workload"]["tiers"][0]["prefix_hit_rate"] == pytest.approx(0.4)
    inst = parse_instance(out)
    assert [t.hit_rate for t in tier_mixes(inst)] == pytest.approx([0.4, 0.7])
    with pytest.raises(ValueError, match="prefix_hit_rate would be"):
        modify.shift_hit_rate(d, 0.45)


def test_alpha_scaling_reaches_the_mean_and_keeps_the_ratios(gemini_data):
    out = modify.scale_alpha(gemini_data, 0.40)
    assert modify.mean_alpha(out) == pytest.approx(0.40, abs=1e-9)
    a = {k: c["spec_acceptance"] for k, c in out["workload"]["classes"].items()}
    assert a["interactive"] / a["standard"] == pytest.approx(0.60 / 0.50)
    with pytest.raises(ValueError, match="alpha would be"):
        modify.scale_alpha(gemini_data, 0.95)  # interactive would pass 1


def test_mean_input_stretch_keeps_every_request_in_its_tier(gemini):
    from fleetplan.report.sweep import instance_data

    d = instance_data(gemini)
    for target in (7_890.0, 15_780.0):
        out = modify.set_mean_input(d, target)
        assert modify.mean_input_tokens(out) == pytest.approx(target, rel=1e-4)  # whole tokens per bucket
        inst = parse_instance(out)
        before, after = tier_mixes(gemini), tier_mixes(inst)
        assert [t.tier_share for t in after] == pytest.approx([t.tier_share for t in before])
        f = target / modify.mean_input_tokens(d)
        clamp = inst.failover.admission_clamp.min_input_tokens
        assert clamp == round(gemini.failover.admission_clamp.min_input_tokens * f)
        # the 128K bucket stays at the clamp's length, so the clamp still covers it
        assert max(b.tokens for b in inst.workload.input_mix) >= clamp


def test_lifted_inventory_and_the_flag(sweep_data):
    out = modify.lift_inventory(sweep_data, 4)
    assert out["regions"]["a"]["pods"]["acc"]["available_new"] == 40
    assert modify.pods_over_inventory(sweep_data, {"a/acc": 11, "b/acc": 10}) == ["a acc: 11 pods, the instance allows 10"]


# ----------------------------------------------------------------------------- --param


def test_default_params_and_ranges(gemini):
    from fleetplan.report.sweep import instance_data

    rs = parse_params(None, instance_data(gemini))
    assert tuple(r.param.name for r in rs) == DEFAULT_PARAMS
    got = {r.param.name: (r.low, r.high) for r in rs}
    assert got["prefill_mfu"] == pytest.approx((0.20, 0.50))
    assert got["hbm_bw_fraction"] == pytest.approx((0.50, 0.70))
    assert got["prefix_hit_rate"] == pytest.approx((0.50, 0.70))
    assert got["output_tokens"] == pytest.approx((150, 600))


def test_aliases_and_explicit_ranges(sweep_data):
    rs = parse_params(["mfu=0.2:0.4", "hit-rate=0.1:0.3", "bw"], sweep_data)
    assert [(r.param.name, r.low, r.high, r.from_default) for r in rs] == [
        ("prefill_mfu", 0.2, 0.4, False), ("prefix_hit_rate", 0.1, 0.3, False), ("hbm_bw_fraction", 0.5, 0.7, True)]


@pytest.mark.parametrize("spec,needle", [
    ("flops=0.2:0.4", "unknown parameter 'flops'"),
    ("mfu=0.4:0.2", "LO (0.4) must be below HI (0.2)"),
    ("mfu=0.3:0.3", "must be below"),
    ("mfu=abc", "the range must be NAME=LO:HI"),
    ("mfu=0.2:", "the range must be NAME=LO:HI"),
    ("mfu=40:60", "outside the physical range"),
    ("mfu=0:0.5", "outside the physical range"),
    ("hit_rate=0.5:1.0", "below 1"),
    ("output=0:100", "outside the physical range"),
    ("output=0.5:2", "not a multiplier"),  # a multiplier-looking range is tokens, and half a token is no output
    ("alpha=0.3:0.99", "alpha would be"),
    ("=0.2:0.4", "is not NAME or NAME=LO:HI"),
])
def test_bad_params_name_the_option_and_unit(gemini_data, spec, needle):
    with pytest.raises(InputError) as e:
        parse_params([spec], gemini_data)
    text = e.value.render()
    assert "--param" in text and needle in text, text
    if "physical" in needle:
        assert "fraction" in text or "tokens" in text  # the unit expected


def test_a_param_given_twice(sweep_data):
    with pytest.raises(InputError, match="given twice"):
        parse_params(["mfu", "prefill_mfu=0.2:0.3"], sweep_data)


# ----------------------------------------------------------------------------- physics of the bars


def _solve_points(data, name, values):
    p = PARAMS[name]
    tasks = [make_task(f"{name}={v}", p.apply(data, v), EXACT) for v in values]
    res = run_solves(tasks, SerialExecutor())
    return [res[f"{name}={v}"] for v in values]


def test_higher_mfu_never_needs_more_prefill(sweep_data):
    pts = _solve_points(sweep_data, "prefill_mfu", [0.2, 0.25, 0.3, 0.4, 0.5, 0.7])
    assert all(p.status == "verified" for p in pts)
    slices = [p.prefill_slices for p in pts]
    assert slices == sorted(slices, reverse=True) and slices[0] > slices[-1], slices
    assert len({p.decode_slices for p in pts}) == 1  # prefill MFU moves prefill only


def test_higher_hit_rate_never_needs_more_prefill(sweep_data):
    pts = _solve_points(sweep_data, "prefix_hit_rate", [0.0, 0.2, 0.4, 0.6, 0.8])
    slices = [p.prefill_slices for p in pts]
    assert slices == sorted(slices, reverse=True) and slices[0] > 2 * slices[-1], slices
    costs = [p.cost_per_1m_output_tokens_usd for p in pts]
    assert costs == sorted(costs, reverse=True)


def test_lower_bandwidth_never_needs_less_decode(sweep_data):
    pts = _solve_points(sweep_data, "hbm_bw_fraction", [0.3, 0.45, 0.6, 0.8])
    dec = [p.decode_slices for p in pts]
    assert dec == sorted(dec, reverse=True) and dec[0] > dec[-1], dec
    assert len({p.prefill_slices for p in pts}) == 1  # decode bandwidth does not move prefill


def test_tornado_rows_and_the_hit_rate_row(sweep_instance):
    rs = parse_params(["mfu=0.2:0.5", "hit_rate=0.0:0.4", "output=100:400"], sweep_instance.model_dump(mode="json"))
    rep = run_sensitivity(sweep_instance, rs, SerialExecutor(), EXACT)
    rows = {r.param: r for r in rep.rows}
    base = rep.base
    for name in ("prefill_mfu", "prefix_hit_rate"):  # the tornado bar spans the base: low end needs more, high end less
        r = rows[name]
        assert r.low.prefill_chips >= base.prefill_chips >= r.high.prefill_chips
        assert r.low.prefill_chips > r.high.prefill_chips
    # more output tokens per request: more decode, and the fleet's cost spread over more output tokens
    assert rows["output_tokens"].high.decode_chips > rows["output_tokens"].low.decode_chips
    assert rows["output_tokens"].high.cost_per_1m_output_tokens_usd < rows["output_tokens"].low.cost_per_1m_output_tokens_usd
    # sorted by the $/1M swing
    swing = [abs(r.low.cost_per_1m_output_tokens_usd - r.high.cost_per_1m_output_tokens_usd) for r in rep.rows]
    assert swing == sorted(swing, reverse=True)
    h = rep.hit_rate_slices
    lo, hi = rows["prefix_hit_rate"].low, rows["prefix_hit_rate"].high
    assert h.prefill_slices_per_10_points == pytest.approx((lo.prefill_slices - hi.prefill_slices) / 4)
    assert h.smallest_shape_slices_per_10_points == pytest.approx(h.prefill_chips_per_10_points / 1)


def test_infeasible_and_invalid_points_are_kept_and_marked():
    data = tiny_data(**{"regions": {"a": {"peak_rps": 200}, "b": {"peak_rps": 150}}, "chips": {"acc": {"slice_shapes": [1]}}})
    inst = parse_instance(data)
    # MFU 0.01: the percentile prompt alone takes 3.2 s on a slice, over the 1 s TTFT SLO -- no fleet meets it;
    # a 1000x longer prompt no longer fits a slice's KV pool -- the instance does not validate
    rs = parse_params(["mfu=0.01:0.4", "input=2000:2000000"], data)
    rep = run_sensitivity(inst, rs, SerialExecutor(), EXACT, keep_inventory=True)
    rows = {r.param: r for r in rep.rows}
    assert rows["prefill_mfu"].low.status == "shortfall" and "unserved" in rows["prefill_mfu"].low.message
    assert rows["mean_input_tokens"].high.status == "invalid" and "does not validate" in rows["mean_input_tokens"].high.message
    assert rows["prefill_mfu"].high.status == "verified"
    assert any("do not meet their SLOs" in n for n in rep.notes)
    assert math.isfinite(rep.base.cost_per_1m_output_tokens_usd)


def test_a_shortfall_point_names_its_cause_not_the_pod_inventory():
    """A sweep point's shortfall message blamed the pod inventory ("no fleet the pod
    inventory allows serves all the load") whatever the cause; at a prefill MFU of 0.01
    no slice shape meets the TTFT SLO while pods are to spare (tiny_data's inventory is
    not exhausted), so the message names the plan's own diagnostic instead."""
    from fleetplan.report.sweep import solve_task

    data = tiny_data(**{"regions": {"a": {"peak_rps": 200}, "b": {"peak_rps": 150}}, "chips": {"acc": {"slice_shapes": [1]}}})
    low = modify.set_prior(data, "prefill_mfu", 0.01)
    for lift in (0, 4):
        s = solve_task(make_task("low", low, {**EXACT, "lift_inventory": lift}))
        assert s["status"] == "shortfall", s
        assert "pod inventory" not in s["message"] and "inventory allows" not in s["message"], s["message"]
        assert "no slice shape meets this tier's SLOs" in s["message"], s["message"]
        assert s.get("inventory", "instance") == "instance"  # pods were to spare: nothing to lift
