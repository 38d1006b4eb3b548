"""``scenario_results(..., predict=False)`` (the purchase quarter's check): the loads and
decisions without the latency predictions. The verifier must reach the same verdict on
such records as on the full ones -- it re-derives every SLO from the counts and the
decisions -- both on a verified plan and on one with a pool cut short, so the purchase
check (30 fleets: 12-19 s with the predictions, 4-6 s without) loses nothing."""

from __future__ import annotations

import pytest

from fleetplan.tables.derived import build_scenarios
from fleetplan.results.evaluate import Context
from fleetplan.results.loads import NOT_PREDICTED, make_pool, recorded_decisions, scenario_results
from fleetplan.results.modes import plan_modes
from fleetplan.results.verify import verify

DECISIONS = ("region", "tier", "role", "slice", "slices", "warm_slices", "arrivals_rps", "diverted_rps", "clamped_rps",
             "shed_rps", "shed_diverted_rps", "shortfall", "shortfall_unit")


def _rebuild(inst, plan, pools, predict: bool):
    known = {s.name: s for s in build_scenarios(inst)}
    routing = {(r.lost, r.to, r.tier): r.share for r in plan.routing}
    return scenario_results(inst, Context(inst), [known[s.name] for s in plan.scenarios], pools, routing,
                            recorded_decisions(plan.scenarios), plan_modes(inst, plan), predict=predict, pods=plan.pods)


def _verdict(inst, plan):
    return sorted((v.check, v.where, v.message) for v in verify(inst, plan))


def test_decisions_only_records_keep_every_decision_and_withhold_the_predictions(solved):
    inst, plan = solved("gemini-ironwood")
    full, light = _rebuild(inst, plan, plan.pools, True), _rebuild(inst, plan, plan.pools, False)
    assert [s.model_dump(mode="json") for s in full] == [s.model_dump(mode="json") for s in plan.scenarios]
    assert any(q.warm_slices > 0 for s in light for q in s.pools) and any(s.kind == "loss" for s in light)  # the case has decisions to keep
    for a, b in zip(full, light):
        assert (a.unserved_rps, a.shed_rps, a.clamped_rps, a.warm_slices_used, a.shed_cost_per_hour_usd, a.clamp_cost_per_hour_usd) == \
               (b.unserved_rps, b.shed_rps, b.clamped_rps, b.warm_slices_used, b.shed_cost_per_hour_usd, b.clamp_cost_per_hour_usd)
        for p, q in zip(a.pools, b.pools):
            assert {k: getattr(p, k) for k in DECISIONS} == {k: getattr(q, k) for k in DECISIONS}
            assert q.utilisation is None and q.capacity is None and q.ttft_ms == {} and q.pressure is None and q.withheld == NOT_PREDICTED


@pytest.mark.parametrize("cut", [None, "prefill", "decode"])
def test_the_verifier_gives_the_same_verdict_without_the_predictions(solved, cut):
    inst, plan = solved("gemini-ironwood")
    pools = list(plan.pools)
    if cut is not None:  # the largest pool of the role at a third of its slices: SLOs break in several scenarios
        i = max((i for i, p in enumerate(pools) if p.role == cut), key=lambda i: pools[i].slices)
        p, ctx = pools[i], Context(inst)
        pair = (lambda op: (op.batch_cap, op.draft_tokens) if op is not None else None)
        pools[i] = make_pool(inst, ctx, p.region, p.tier, p.role, p.slice, max(1, p.slices // 3), pair(p.decode_normal),
                             pair(p.decode_failover), p.schedule)
    full = plan.model_copy(update={"pools": pools, "scenarios": _rebuild(inst, plan, pools, True)})
    light = plan.model_copy(update={"pools": pools, "scenarios": _rebuild(inst, plan, pools, False)})
    want = _verdict(inst, full)
    assert (want == []) == (cut is None)
    assert _verdict(inst, light) == want
