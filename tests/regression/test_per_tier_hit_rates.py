"""Issue 15, item 5: ``workload fit`` measured each tier's prefix hit rate but wrote only
the pooled one, so ``solve --workload`` planned a long tier that hardly hits its cache at
the pooled rate (under-sizing its prefill). The fit now writes every tier's own rate, an
overlay sets it on the instance's tier of the same bound, and the fit says when a tier's
rate moves its prefill work materially away from the pooled figure.

The trace is built here so every rate is worked out by hand: 300 short prompts of 4
blocks (2,048 tokens) share a 3-block prefix; 50 long prompts of 40 blocks (20,480 tokens)
share only block 0, the system prompt, with everyone."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.instance.io import load_instance_overlaid
from fleetplan.perf.pools import tier_mixes
from fleetplan.workload.fit import fit_trace

N_SHORT, N_LONG, BLOCK = 300, 50, 512
# short: the first request misses all 4 blocks, each later one hits its 3 shared blocks
SHORT_RATE = (N_SHORT - 1) * 3 * BLOCK / (N_SHORT * 4 * BLOCK)  # 0.7475
# long: block 0 was seen (the short requests came first), then 39 new blocks
LONG_RATE = N_LONG * BLOCK / (N_LONG * 40 * BLOCK)  # 0.025
POOLED = ((N_SHORT - 1) * 3 * BLOCK + N_LONG * BLOCK) / (N_SHORT * 4 * BLOCK + N_LONG * 40 * BLOCK)


@pytest.fixture
def trace(tmp_path):
    lines, nid = [], 1000
    for i in range(N_SHORT):
        lines.append({"timestamp": i * 100, "input_length": 4 * BLOCK, "output_length": 100, "hash_ids": [0, 1, 2, nid]})
        nid += 1
    for j in range(N_LONG):
        lines.append({"timestamp": (N_SHORT + j) * 100, "input_length": 40 * BLOCK, "output_length": 300,
                      "hash_ids": [0] + list(range(nid, nid + 39))})
        nid += 39
    p = tmp_path / "tiers.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return p


def test_fit_writes_each_tiers_rate_and_flags_the_gap(trace):
    fit = fit_trace(trace, "mooncake", [16384, None], 131072.0, tier_names=["short", "long"])
    assert fit.prefix_cache[0].hit_rate_tokens == pytest.approx(POOLED)
    block = fit.workload_block()
    assert block["prefix_hit_rate"] == round(POOLED, 4)
    assert block["tiers"] == [{"max_input_tokens": 16384, "prefix_hit_rate": round(SHORT_RATE, 4)},
                              {"max_input_tokens": None, "prefix_hit_rate": round(LONG_RATE, 4)}]
    # every cache row carries the per-tier rates (here the cache holds everything: the same)
    assert fit.prefix_cache[0].tier_hit_rate_tokens == pytest.approx([SHORT_RATE, LONG_RATE])
    notes = " ".join(fit.notes)
    # pooled 0.2959; long: (1 - 0.025) / (1 - 0.2959) - 1 = +38% prefill work; short: 0.2525 / 0.7041 - 1 = -64%
    assert "tier long: prefix hit rate 2.5% against 29.6% pooled" in notes and "38% more" in notes
    assert "tier short: prefix hit rate 74.8% against 29.6% pooled" in notes and "64% fewer" in notes


def test_an_lru_cache_writes_its_own_per_tier_rates(trace):
    # 4 blocks of LRU: the short prompts (all first) keep their 3 shared blocks, as unbounded;
    # the first long prompt hits block 0 and its 39 new blocks evict it, so no later one hits
    kv = 131072.0
    gb = 4.5 * BLOCK * kv / 1e9  # holds 4 blocks
    fit = fit_trace(trace, "mooncake", [16384, None], kv, tier_names=["short", "long"], cache_gb=(gb,), hit_rate_cache_gb=gb)
    row = fit.hit_rate_row()
    assert row.cache_gb == gb
    short, long_ = fit.tiers
    assert short.hit_rate_tokens == pytest.approx(SHORT_RATE)
    assert row.blocks == 4
    assert long_.hit_rate_tokens == pytest.approx(BLOCK / (N_LONG * 40 * BLOCK))  # only the first long prompt finds block 0
    assert fit.workload_block()["tiers"][1]["prefix_hit_rate"] == round(long_.hit_rate_tokens, 4)
    assert row.tier_hit_rate_tokens == pytest.approx([short.hit_rate_tokens, long_.hit_rate_tokens])


def test_solve_workload_plans_each_tier_at_its_own_rate(trace, tmp_path):
    out = tmp_path / "w.yaml"
    r = CliRunner().invoke(app, ["workload", "fit", str(trace), "--instance", "gemini-ironwood", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "workload.tiers[].prefix_hit_rate" in r.output and "short 0.7475, long 0.0250" in r.output
    assert yaml.safe_load(out.read_text())["workload"]["tiers"][1] == {"max_input_tokens": None, "prefix_hit_rate": 0.025}
    inst, overlays = load_instance_overlaid("gemini-ironwood", workload=out)
    # the instance keeps its tiers (names, SLO overrides) and takes each tier's measured rate
    assert [(t.name, t.max_input_tokens, t.prefix_hit_rate) for t in inst.workload.tiers] == [("short", 16384, 0.7475), ("long", None, 0.025)]
    hit = {tm.name: tm.hit_rate for tm in tier_mixes(inst)}
    assert hit == {"short": 0.7475, "long": 0.025}  # what the sizing plans prefill with, not the pooled 0.2959


def test_tier_entries_match_by_bound_and_the_rest_is_refused(tmp_path):
    from fleetplan.errors import InstanceError

    w = tmp_path / "w.yaml"
    w.write_text(yaml.safe_dump({"workload": {"prefix_hit_rate": 0.3, "tiers": [{"max_input_tokens": 8192, "prefix_hit_rate": 0.5},
                                                                                {"max_input_tokens": None, "prefix_hit_rate": 0.1}]}}))
    inst, overlays = load_instance_overlaid("gemini-ironwood", workload=w)
    assert [t.prefix_hit_rate for t in inst.workload.tiers] == [None, 0.1]  # short takes the pooled 0.3
    assert any("bounded at 8192 matches no tier" in n for n in overlays[0].notes)
    w.write_text(yaml.safe_dump({"workload": {"tiers": [{"name": "x", "max_input_tokens": None, "prefix_hit_rate": 0.1}]}}))
    with pytest.raises(InstanceError, match="workload.tiers.0.name"):
        load_instance_overlaid("gemini-ironwood", workload=w)
    w.write_text(yaml.safe_dump({"workload": {"tiers": [{"prefix_hit_rate": 0.1}]}}))
    with pytest.raises(InstanceError, match="names no max_input_tokens"):
        load_instance_overlaid("gemini-ironwood", workload=w)


def test_compare_attributes_tier_rates_to_the_hit_rate():
    from fleetplan.instance.io import load_instance, parse_instance
    from fleetplan.workload.compare import changed_inputs, input_groups

    base = load_instance("gemini-ironwood")
    d = base.model_dump(mode="json")
    d["workload"]["prefix_hit_rate"] = 0.4
    d["workload"]["tiers"][1]["prefix_hit_rate"] = 0.1
    groups = input_groups(changed_inputs(base, parse_instance(d, "t")))
    assert groups == {"workload.prefix_hit_rate": ["workload.prefix_hit_rate", "workload.tiers.1.prefix_hit_rate"]}
