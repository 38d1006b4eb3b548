"""A region-tier with no decode pool whose failover is carried by warm slices alone.

Found by a newcomer applying Llama/A100-fitted priors to the Gemini instance: no decode
slice of the long tier was bought in some regions, warm slices joined in a region loss,
and the plan recorded them without a slice shape, so the verifier credited them with no
capacity and called the (honest) shortfall plan a bug. The plan now names the warm
slices' shape and the verifier finds their best legal operating point itself.

Since the sizing minimises the requests not served end to end (issue 15 item 3) that
instance no longer produces such a plan (a region-tier with no decode serves none of its
requests, so it gets no prefill either); the verifier's handling is checked here on a
plan with that structure built from a solved tiny one.
"""

from __future__ import annotations

from fleetplan.instance.io import parse_instance
from fleetplan.results.plan import WarmPoolSlices
from fleetplan.results.verify import verify
from fleetplan.sizing import solve
from tests.conftest import tiny_data


def _warm_only(slice_named: bool = True, warm: int = 2):
    # sized without pods: the plan below is edited by hand (a pool removed), which its pods would not follow
    inst = parse_instance(tiny_data(failover={"n_minus_1": True, "warm_pool": {"max_slices_per_region": 2}}, placement={"size_with_pods": False}))
    plan = solve(inst).plan
    assert plan.status == "verified"
    dec_b = next(p for p in plan.pools if (p.region, p.role) == ("b", "decode"))
    scenarios = []
    for s in plan.scenarios:
        pools = []
        for q in s.pools:
            if (q.region, q.role) == ("b", "decode"):
                if s.kind == "normal":  # no decode pool in b: its own decode demand goes unserved
                    q = q.model_copy(update={"slices": 0, "slice": None, "shortfall": q.arrivals_rps * inst.workload.output_tokens})
                else:  # in the loss of a, b's warm slices alone decode a's and b's traffic
                    q = q.model_copy(update={"slices": warm, "warm_slices": warm, "slice": dec_b.slice if slice_named else None})
            pools.append(q)
        scenarios.append(s.model_copy(update={"pools": pools}))
    edited = plan.model_copy(update={
        "pools": [p for p in plan.pools if p is not dec_b], "scenarios": scenarios, "status": "shortfall",
        "warm_pool": [WarmPoolSlices(region="b", slice=dec_b.slice, slices=2, chips=2 * dec_b.chips_per_slice, cost_per_hour_usd=0.0)]})
    return inst, edited


def test_warm_only_decode_is_checked_with_its_shape():
    inst, plan = _warm_only()
    assert verify(inst, plan) == []


def test_warm_slices_are_credited_no_more_than_they_carry():
    inst, plan = _warm_only(warm=0)
    v = [x for x in verify(inst, plan) if x.check == "decode_capacity"]
    assert v and all(x.where.startswith("lose:a@") and "decode[b,all]" in x.where for x in v)
