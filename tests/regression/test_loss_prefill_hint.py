"""A shortfall no pool size can close gets its cause, not an inventory story.

gemini-ironwood at a 20% prefill MFU (a sensitivity point): in every region loss the long
tier's p99 prompt takes ~750 ms to prefill on ironwoodx32, the fastest shape, so with the
path latency no prefill pool of any size meets the 800 ms TTFT p99, and the plan leaves the
loss's long-tier requests unserved with 22 of 60 pods per region to spare. The diagnostics
said "the other pools' needs take the inventory first", which sent a planner to buy pods
that could not help."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import yaml

import fleetplan
from fleetplan.instance.derived import build_model_data
from fleetplan.instance.io import parse_instance
from fleetplan.sizing.extract import _diagnostics, loss_prefill_out_of_reach
from fleetplan.results.plan import PoolLoad, ScenarioResult

BUNDLED = Path(fleetplan.__file__).parent / "instances" / "gemini-ironwood.yaml"


def _data():
    doc = yaml.safe_load(BUNDLED.read_text())
    doc["priors"]["prefill_mfu"] = 0.2
    return build_model_data(parse_instance(doc, "gemini-ironwood at 20% prefill MFU"))


def _pool(role: str, unit: str, shortfall: float) -> PoolLoad:
    return PoolLoad.model_construct(region="us-east", tier="long", role=role, slice="ironwoodx32", slices=121, warm_slices=0,
                                    arrivals_rps=3000.0, diverted_rps=1000.0, clamped_rps=0.0, shed_rps=0.0, shortfall=shortfall,
                                    shortfall_unit=unit)


def test_a_loss_no_prefill_pool_can_serve_is_said_so():
    d = _data()
    reach = loss_prefill_out_of_reach(d, "long", "us-west", "us-east")
    assert reach is not None and reach.shape == "ironwoodx32"
    assert reach.prefill_ms > 700 and reach.ttft_limit_ms == 800 and reach.percentile == 99
    # normal hours are in reach (the plan serves them), and so is the short tier in a loss
    assert all(g.capacity_erlangs[-1] > 0 for (t, c, reg), g in d.prefill.items() if t == "long" and reg == ("normal",)
               and c == "ironwoodx32")
    assert loss_prefill_out_of_reach(d, "short", "us-west", "us-east") is None

    s = ScenarioResult.model_construct(name="lose:us-west@03", kind="loss", lost_region="us-west", hour=3,
                                       pools=[_pool("prefill", "requests/s", 1030.0), _pool("decode", "output tokens/s", 93372.0)],
                                       unserved_rps=0.0)
    notes = [n for n in _diagnostics(d, [s], fleet=[]) if n.startswith("shortfall in")]
    assert len(notes) == 2
    for n in notes:
        assert "other pools' needs take the inventory first" not in n
        assert "no prefill pool of any size meets it in this loss" in n
        assert "p99 prompt in us-east (128,000 tokens" in n and "on ironwoodx32, the fastest shape" in n
    assert "more slices or pods cannot" in notes[0]
    assert "decode slices for these requests would serve nobody" in notes[1]


def test_a_tier_out_of_reach_in_normal_hours_too_is_not_blamed_on_the_loss():
    """A TTFT of 250 ms that no shape meets for the long tier even in normal hours: the
    loss's shortfall notes must not say the loss is the cause (newcomer trial)."""
    doc = yaml.safe_load(BUNDLED.read_text())
    for c in ("interactive", "standard"):
        doc["workload"]["classes"][c]["slos"][0]["limit_ms"] = 250
    d = build_model_data(parse_instance(doc, "gemini-ironwood with a 250 ms TTFT"))
    assert not any(g.capacity_erlangs[-1] > 0 for (t, c, reg), g in d.prefill.items() if t == "long" and reg == ("normal",))
    assert loss_prefill_out_of_reach(d, "long", "us-west", "us-east") is None
    s = ScenarioResult.model_construct(name="lose:us-west@03", kind="loss", lost_region="us-west", hour=3,
                                       pools=[_pool("prefill", "requests/s", 1030.0)], unserved_rps=0.0)
    (note,) = [n for n in _diagnostics(d, [s], fleet=[]) if n.startswith("shortfall in")]
    assert "in this loss" not in note and "no slice shape meets this tier's SLOs" in note


def test_a_normal_hours_shortfall_on_full_pods_names_only_inventory():
    """With every pod a region may have in use, a shortfall in normal hours is closed by more
    inventory only: a warm pool and failover regions serve losses (newcomer trial)."""
    d = build_model_data(parse_instance(yaml.safe_load(BUNDLED.read_text()), "gemini-ironwood"))
    full = [SimpleNamespace(region="us-east", chip="ironwood", pods_total=10**6)]  # a fleet row: every pod in use
    normal = ScenarioResult.model_construct(name="normal", kind="normal", lost_region=None, hour=None,
                                            pools=[_pool("decode", "output tokens/s", 500.0)], unserved_rps=0.0)
    loss = ScenarioResult.model_construct(name="lose:us-west@03", kind="loss", lost_region="us-west", hour=3,
                                          pools=[_pool("decode", "output tokens/s", 500.0)], unserved_rps=0.0)
    n_note, l_note = [n for n in _diagnostics(d, [normal, loss], fleet=full) if n.startswith("shortfall in")]
    assert n_note.endswith("is in use: more inventory there would close it"), n_note
    assert "a larger warm pool or more regions to fail over to" in l_note
