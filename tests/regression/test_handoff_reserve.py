"""Issue 39 item 20: a decode batch cap that leaves no KV for the handoffs in flight.

vLLM's NIXL connector and SGLang's pre-allocation queue hold a request's whole prompt KV on
the decode slice while it arrives, from the same page pool as the running batch
(fleetplan.perf.handoff). A cap whose residents fill the pool leaves no room, so the next
handoff waits and prefill stalls; the verifier passed such a cap without a word. Here: the
tiny instance with 32,000-token prompts on a 64 GB KV pool, where 30 residents fit alone
and only 29 beside one handoff in flight (tests/unit/test_handoff_reserve.py works it out).
"""

from __future__ import annotations

import pytest

from fleetplan.perf.pools import tier_mixes
from fleetplan.perf.roofline import slice_memory_map
from fleetplan.results.evaluate import Context
from fleetplan.results.loads import operating_point
from fleetplan.results.verify import verify
from fleetplan.sizing import solve

LONG_PROMPTS = {"input_mix": [{"share": 1.0, "tokens": 32000}],
                "classes": {"std": {"share": 1.0, "spec_acceptance": 0.5,
                                    "slos": [{"metric": "ttft", "percentile": 99, "limit_ms": 3000},
                                             {"metric": "tpot", "percentile": 99, "limit_ms": 200}]}}}


@pytest.fixture(scope="module")
def case():
    from fleetplan.instance.io import parse_instance
    from tests.conftest import tiny_data

    inst = parse_instance(tiny_data(workload=LONG_PROMPTS), "tiny")
    return inst, solve(inst).plan


def test_a_cap_that_leaves_no_room_for_handoffs_is_flagged(case):
    inst, plan = case
    assert plan.status == "verified" and verify(inst, plan) == []
    ctx = Context(inst)
    i, pool = next((i, p) for i, p in enumerate(plan.pools) if p.role == "decode")
    tm = tier_mixes(inst)[0]
    mm = slice_memory_map(inst.model, ctx.slice(pool.slice), inst.priors)
    # the largest cap whose residents alone fit the page pool (what the verifier used to accept)
    full = mm.resident_capacity(tm.resident_kv(inst)[0], inst.priors.kv_paging_slack)
    op = operating_point(ctx, pool.tier, pool.slice, full, pool.decode_failover.draft_tokens)  # the record rebuilt at that cap
    pools = list(plan.pools)
    pools[i] = pool.model_copy(update={"decode_failover": op})
    got = verify(inst, plan.model_copy(update={"pools": pools}))
    where = f"decode[{pool.region},{pool.tier},{pool.slice}]"
    hits = [v for v in got if v.check == "handoff_reserve"]
    assert hits and all(v.where == where for v in hits), got
    assert f"failover point B={full}" in hits[0].message and "handoffs in flight" in hits[0].message
    assert "prefill would stall" in hits[0].message


def test_the_plan_records_the_reserve_beside_its_operating_points(case):
    inst, plan = case
    for p in plan.pools:
        if p.role != "decode":
            continue
        for op in (p.decode_normal, p.decode_failover):
            # the chosen point leaves room: batch x resident KV + the reserve <= the KV pool
            mm = slice_memory_map(inst.model, Context(inst).slice(p.slice), inst.priors)
            resident = tier_mixes(inst)[0].resident_kv(inst)[0] * (1 + inst.priors.kv_paging_slack)
            assert op.handoff_reserve_requests >= 1
            assert op.handoff_reserve_gb == pytest.approx(op.handoff_reserve_requests * 32000 * 65536 / 1e9, rel=1e-5)
            assert op.batch_cap * resident / 1e9 + op.handoff_reserve_gb <= mm.kv_pool_gb
