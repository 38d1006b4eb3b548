"""The notes a simulation prints beside its table: a window too short for the decode
batches (warm-up and drain), the TPOT tail prior the simulator does not model, and no
ratio between two sub-millisecond waits."""

from __future__ import annotations

import pytest

from fleetplan.sim.run import MIN_RATIO_MS, _row, simulate


@pytest.fixture(scope="module")
def llama(solved):
    return solved("llama70b-h100")


def test_a_short_window_says_the_batches_fill_and_drain(llama):
    inst, plan = llama
    short = simulate(inst, plan, "us-central", duration_s=5, warmup_s=0, seed=0)
    notes = " ".join(short.tiers[0].notes)
    assert "warm-up (0.0 s) is shorter than two decode residences" in notes
    assert "window (5.0 s) is under ten decode residences" in notes and "read low" in notes
    # a residence is ~(output - 1) x TPOT: 399 tokens at the plan's ~30.7 ms p95 TPOT, about 12 s
    from fleetplan.sim.run import _secs

    res = (inst.workload.output_tokens - 1) * min(plan.scenarios[0].pools[0].tpot_ms.values()) / 1e3
    assert f"~{_secs(res)} each" in notes
    long = simulate(inst, plan, "us-central", duration_s=150, warmup_s=30, seed=0)  # >= 10 residences of ~12 s
    assert not any("residence" in n for n in long.tiers[0].notes)


def test_the_tpot_prior_is_named_when_the_plan_estimate_is_far_above(llama, solved):
    """The Gemini decode pools: the plan's TPOT p99 carries the 1.6x tail prior, the
    simulation only the physics (docs/validation.md); the note says which."""
    inst, plan = solved("gemini-ironwood")
    rep = simulate(inst, plan, "us-east", ["long"], duration_s=30, warmup_s=20, seed=0, scale=0.3)
    t = rep.tiers[0]
    dec = next(p for p in t.pools if p.role == "decode")
    tpot99 = next(m for m in dec.metrics if m.key.startswith("tpot_p99") and "physics" not in m.key)
    assert tpot99.ratio_plan < 0.8
    assert any("tpot_p99_inflation" in n and f"{tpot99.ratio_plan:.2f} of the plan's estimate" in n for n in t.notes)


def test_no_ratio_between_two_sub_millisecond_waits():
    assert _row("w", "wait", "ms", 0.0, 0.98).ratio_plan is None
    assert _row("w", "wait", "ms", 0.5, MIN_RATIO_MS * 2).ratio_plan == pytest.approx(0.25)
    assert _row("u", "busy", "fraction", 0.001, 0.002).ratio_plan == pytest.approx(0.5)  # not a time: kept


def test_a_run_unlike_the_plans_workload_says_so(llama):
    """Issue-17 trial: simulating a plan sized for arrivals of index 13.2 with Poisson
    arrivals printed ratios of 0.6 with no word why; and geometric answers against a plan
    sized for fixed ones. Both now carry a note naming the instance field."""
    inst, plan = llama
    rep = simulate(inst, plan, "us-central", duration_s=5, warmup_s=1, seed=0, output_lengths="geometric")
    notes = " ".join(rep.notes + [n for t in rep.tiers for n in t.notes])
    assert "geometric lengths but the plan was sized for fixed ones" in notes and "output_length_distribution" in notes
    bursty = inst.model_copy(update={"workload": inst.workload.model_copy(update={"arrival_scv": 13.2})})
    rep = simulate(bursty, plan, "us-central", duration_s=5, warmup_s=1, seed=0)
    notes = " ".join(rep.notes + [n for t in rep.tiers for n in t.notes])
    assert "index of dispersion 13.2" in notes and "--arrivals trace:" in notes
    plain = simulate(inst, plan, "us-central", duration_s=5, warmup_s=1, seed=0)
    assert not any("output_length_distribution" in n or "index of dispersion" in n for n in plain.notes)
