"""Issue 40: prefill pools are sized against the TTFT percentile of the sum of path, queue
wait, compute and exposed KV (fleetplan.perf.ttft_tail), and everything that re-checks a
pool uses the same test -- the margins first: a pool sized at the edge of the percentile of
the sum has every TTFT margin >= 1 (margins read from the sum of percentiles put pools the
plan verifies below 1, 'the SLO does not hold as planned')."""

from __future__ import annotations

from fleetplan.results.margins import pool_margins


def test_gemini_ttft_margins_hold_where_the_plan_verifies(solved):
    inst, plan = solved("gemini-ironwood")
    assert plan.status == "verified"
    ttft = [m for m in pool_margins(inst, plan.pools, plan.scenarios) if m.metric == "ttft"]
    assert {(m.region, m.tier) for m in ttft} == {(p.region, p.tier) for p in plan.pools if p.role == "prefill"}
    low = [(m.region, m.tier, m.scenario, m.step_time_margin, m.load_margin) for m in ttft
           if m.step_time_margin is not None and (m.step_time_margin < 1.0 or m.load_margin < 1.0)]
    assert not low, low

