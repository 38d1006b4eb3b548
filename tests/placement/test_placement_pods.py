"""Placing a plan sized with its pods (issue 20): the plan's per-pod counts kept (or
improved without raising any DCN share), the normal routing equal to the plan's
prediction, the region-loss routing (warm slices by id) never worse than it, and the
independent checker refusing routings that send too much over the DCN. The Gemini plan
is the session's (solved once per run); the small cases are the tiny instance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetplan.errors import InputError
from fleetplan.instance.io import parse_instance
from fleetplan.placement import place
from fleetplan.placement_pods import map_to_current
from fleetplan.results.evaluate import Context
from fleetplan.results.loads import record_flow
from fleetplan.results.placement import Placement, verify_placement
from tests.conftest import tiny_data

DOCS = Path(__file__).resolve().parents[2] / "docs"

#: two regions absorbing each other's traffic, three pods each, two warm slices each
TINY_N1 = {"failover": {"n_minus_1": True, "warm_pool": {"min_slices_per_region": 2, "max_slices_per_region": 4}},
           "regions": {"a": {"peak_rps": 60}, "b": {"peak_rps": 60}}}


@pytest.fixture(scope="module")
def gemini(solved):
    inst, plan = solved("gemini-ironwood")
    return inst, plan, place(inst, plan), place(inst, plan, improve=False)


@pytest.fixture(scope="module")
def tiny_n1():
    import pyomo.environ  # noqa: F401 -- before SciPy, as the CLI does

    from fleetplan.sizing import solve

    inst = parse_instance(tiny_data(**TINY_N1), "tiny")
    plan = solve(inst).plan
    assert plan.status == "verified" and plan.pods is not None and any(w.slices for w in plan.warm_pool)
    return inst, plan


def _record(plan, name, region, tier, role="prefill"):
    sc = next(s for s in plan.scenarios if s.name == name)
    return sc, next(p for p in sc.pools if (p.region, p.tier, p.role) == (region, tier, role))


def test_gemini_every_tier_within_its_ceiling_in_every_scenario(gemini):
    inst, plan, pl, _ = gemini
    assert verify_placement(inst, plan, pl) == []
    assert [s.scenario for s in pl.scenarios] == [s.name for s in plan.scenarios]
    for s in pl.scenarios:
        regions = {p.region for p in next(x for x in plan.scenarios if x.name == s.scenario).pools}
        assert {(x.region, x.tier) for x in s.tiers} == {(r, t) for r in regions for t in ("short", "long")}
        for x in s.tiers:
            assert x.dcn_share <= inst.dcn_share_max_of(x.tier) + 1e-12, (s.scenario, x)
    assert {(x.region, x.tier) for x in pl.dcn} == {(r, t) for r in inst.regions for t in ("short", "long")}
    assert all(x.worst_loss is not None and x.worst_loss <= x.dcn_share_max for x in pl.dcn)


def test_gemini_normal_share_is_the_plans_prediction(gemini):
    """Placed as the plan's pods say (no improvement), the DCN share per tier at the normal
    peak is results.dcn.tier_flow on the plan's pods; improved, it is never above it."""
    inst, plan, improved, as_sized = gemini
    ctx = Context(inst)
    for pl, equal in ((as_sized, True), (improved, False)):
        normal = next(s for s in pl.scenarios if s.kind == "normal")
        assert normal.routing == pl.routing and normal.warm == []
        for x in normal.tiers:
            sc, rec = _record(plan, "normal", x.region, x.tier)
            want = record_flow(ctx, plan.pods, plan.pools, rec, False).share
            assert x.dcn_share == pytest.approx(want, abs=1e-9) if equal else x.dcn_share <= want + 1e-9
            assert pl.dcn_share_by_tier[f"{x.region}/{x.tier}"] == x.dcn_share
    # the sizing left one short prefill slice alone in a us-west pod (0.26% crossing): emptied
    assert max(x.dcn_share for x in next(s for s in as_sized.scenarios if s.kind == "normal").tiers) > 0
    assert improved.dcn_share == 0.0 and improved.pods_used < as_sized.pods_used


def test_gemini_loss_routing_never_worse_than_the_plan(gemini):
    """In every region loss each tier's share is at most the plan's PoolLoad.dcn_share (the
    plan counts every warm prefill slice as crossing; the placement places them), and the
    warm slices that join are the plan's: as many per pool, of its shape, each once, in the
    pod stated, of a surviving region."""
    inst, plan, pl, as_sized = gemini
    ids = {s.id: s for s in pl.slices}
    lower = 0
    for s in pl.scenarios:
        if s.kind != "loss":
            continue
        for x in s.tiers:
            _, rec = _record(plan, s.scenario, x.region, x.tier)
            assert x.plan_dcn_share == rec.dcn_share and x.dcn_share <= rec.dcn_share + 1e-6
            lower += x.dcn_share < rec.dcn_share - 1e-4
        sc = next(x for x in plan.scenarios if x.name == s.scenario)
        assert len({w.slice_id for w in s.warm}) == len(s.warm) == sc.warm_slices_used
        for p in sc.pools:
            got = [w for w in s.warm if (w.region, w.tier, w.role) == (p.region, p.tier, p.role)]
            assert len(got) == p.warm_slices and all(ids[w.slice_id].slice == p.slice and ids[w.slice_id].pod == w.pod for w in got)
            assert all(w.region != s.lost_region and ids[w.slice_id].role == "warm" for w in got)
    assert lower > 0  # placing the warm prefill slices beats counting them as crossing somewhere
    # the improvement raised no share in any scenario
    before = {(s.scenario, x.region, x.tier): x.dcn_share for s in as_sized.scenarios for x in s.tiers}
    assert all(x.dcn_share <= before[(s.scenario, x.region, x.tier)] + 1e-9 for s in pl.scenarios for x in s.tiers)


def test_gemini_pod_egress_within_capacity(gemini):
    inst, plan, pl, _ = gemini
    cap = inst.chips["ironwood"].pod_egress_gbytes_per_s(inst.network.dcn_gbytes_per_s_per_slice)
    egress = [g for s in pl.scenarios for g in s.pod_dcn_egress_gbytes_per_s.values()]
    assert egress and max(egress) <= cap


def _swap_routes(pl: Placement, scenario: str, region: str, tier: str, pairs: int) -> Placement:
    """``pl`` with ``pairs`` pairs of pods holding the same slices of ``tier`` in ``region``
    sending each other the KV they kept (every decode pod takes as much as before: only the
    DCN share rises), the scenario's own records left as they were."""
    s = next(x for x in pl.scenarios if x.scenario == scenario)
    content: dict[str, tuple] = {}
    for sl in pl.slices:
        if sl.region == region and sl.tier == tier:
            content.setdefault(sl.pod, []).append((sl.role, sl.slice))
    local = [w for w in s.routing if (w.region, w.tier) == (region, tier) and w.from_pod == w.to_pod]
    by_kind: dict[tuple, list] = {}
    for w in local:
        by_kind.setdefault((tuple(sorted(content[w.from_pod])), w.rps), []).append(w)
    swap: dict[str, str] = {}
    for ws in by_kind.values():
        for a, b in zip(ws[0::2], ws[1::2]):
            if len(swap) < 2 * pairs:
                swap[a.from_pod], swap[b.from_pod] = b.from_pod, a.from_pod
    assert len(swap) == 2 * pairs
    routing = [w.model_copy(update={"to_pod": swap[w.from_pod]}) if w in local and w.from_pod in swap else w for w in s.routing]
    scen = [x.model_copy(update={"routing": routing}) if x.scenario == scenario else x for x in pl.scenarios]
    return pl.model_copy(update={"scenarios": scen})


def test_a_loss_routing_sending_too_much_over_the_dcn_is_refused(gemini):
    inst, plan, pl, _ = gemini
    # us-central's short tier in its worst region loss: enough pods exchanging their KV to
    # pass the 5% ceiling, every decode pod still taking what it took
    name = next(x.worst_loss_scenario for x in pl.dcn if (x.region, x.tier) == ("us-central", "short"))
    bad = _swap_routes(pl, name, "us-central", "short", 4)
    found = verify_placement(inst, plan, bad)
    assert any(v.check == "dcn_share" and v.where == f"{name} us-central/short" and "above its ceiling 5.00%" in v.message for v in found), found
    # every decode pod takes what it took; the short tier's p99 TTFT pays the DCN transfer of
    # its small KV within the SLO (the TTFT check: the slow-DCN case below)
    assert {v.check for v in found} == {"dcn_share", "dcn"}
    # a route to a pod whose decode slices cannot take it
    s = next(x for x in pl.scenarios if x.scenario == name)
    w0 = next(w for w in s.routing if w.region == "us-central" and w.tier == "short")
    over = next(w for w in s.routing if w.region == "us-central" and w.tier == "short" and w.to_pod != w0.to_pod)
    moved = [w.model_copy(update={"to_pod": w0.to_pod}) if w == over else w for w in s.routing]
    bad = pl.model_copy(update={"scenarios": [x.model_copy(update={"routing": moved}) if x.scenario == name else x for x in pl.scenarios]})
    assert "decode_intake" in {v.check for v in verify_placement(inst, plan, bad)}


def test_the_ttft_is_recomputed_at_the_placements_share(tiny_instance):
    """Over a slow DCN (0.1 GB/s per slice pair: 1.3 s for a request's KV, past the 1 s TTFT
    SLO) the plan keeps every share under 1% (its p99 request stays on the ICI); a routing
    that sends more over the DCN than the plan's prediction paid is refused for the TTFT
    it gives, besides the ceiling."""
    import pyomo.environ  # noqa: F401

    from fleetplan.sizing import solve

    inst = tiny_instance(**TINY_N1, network={"dcn_gbytes_per_s_per_slice": 0.1})
    plan = solve(inst).plan
    assert plan.status == "verified" and all(x.sized_for <= 0.01 for x in plan.dcn)
    pl = place(inst, plan, improve=False)
    assert verify_placement(inst, plan, pl) == []
    bad = _swap_routes(pl, "lose:b@00", "a", "all", 1)
    found = {v.check: v for v in verify_placement(inst, plan, bad)}
    assert {"dcn_share", "ttft"} <= set(found) and "decode_intake" not in found
    assert found["ttft"].where == "lose:b@00 a/all" and "ms > 1000 ms" in found["ttft"].message


def test_warm_joins_are_checked(gemini):
    inst, plan, pl, _ = gemini
    s = next(x for x in pl.scenarios if x.warm)
    w = s.warm[0]
    not_warm = next(x for x in pl.slices if x.region == w.region and x.role == "prefill")
    for warm in ([w.model_copy(update={"pod": "x/y/00"})] + s.warm[1:],                       # not where the slice sits
                 s.warm[1:],                                                                 # one fewer than the plan's
                 s.warm + [w],                                                               # one slice joining twice
                 [w.model_copy(update={"slice_id": not_warm.id, "pod": not_warm.pod})] + s.warm[1:]):  # not a warm slice
        bad = pl.model_copy(update={"scenarios": [x.model_copy(update={"warm": warm}) if x is s else x for x in pl.scenarios]})
        assert "warm" in {v.check for v in verify_placement(inst, plan, bad)}


def test_tiny_loss_routing_places_warm_slices_next_to_their_pool(tiny_n1):
    """The tiny N-1 fleet: each region's pods hold prefill and decode kits and warm slices;
    in a region loss the survivor's warm slice joins its decode pool, in a pod where it
    takes KV its prefill slices would have sent over the DCN -- at most the plan's share."""
    inst, plan = tiny_n1
    pl = place(inst, plan)
    assert verify_placement(inst, plan, pl) == [] and pl.method == "pods"
    for s in pl.scenarios:
        if s.kind == "loss":
            _, dec = _record(plan, s.scenario, s.tiers[0].region, "all", "decode")
            assert len(s.warm) == dec.warm_slices > 0 and {w.role for w in s.warm} == {"decode"}
            assert s.tiers[0].dcn_share <= s.tiers[0].plan_dcn_share + 1e-9
    # as sized: the same checks hold without the improvement
    raw = place(inst, plan, improve=False)
    assert verify_placement(inst, plan, raw) == [] and raw.pods_used >= pl.pods_used
    # JSON round trip (schema_version 2 carries scenarios and dcn)
    again = Placement.model_validate_json(pl.model_dump_json())
    assert again == pl
    with pytest.raises(ValueError, match="schema_version 2 carries both"):
        Placement.model_validate({**json.loads(pl.model_dump_json()), "schema_version": 1})


def test_a_plan_whose_pods_do_not_hold_its_slices_is_refused(tiny_n1):
    inst, plan = tiny_n1
    pods = [plan.pods[0].model_copy(update={"slices": {**plan.pods[0].slices, "all/prefill/accx1": plan.pods[0].slices["all/prefill/accx1"] + 1}})]
    with pytest.raises(InputError, match="plan"):
        place(inst, plan.model_copy(update={"pods": pods + plan.pods[1:]}))


def test_an_old_plan_without_pods_places_as_before(tiny_instance):
    """placement.size_with_pods false: no plan.pods, the placement model (method 'mip'),
    schema_version 1 and none of the scenario fields in the file."""
    import pyomo.environ  # noqa: F401

    from fleetplan.sizing import solve

    inst = tiny_instance(placement={"size_with_pods": False})
    plan = solve(inst).plan
    assert plan.pods is None
    pl = place(inst, plan)
    doc = json.loads(pl.model_dump_json())
    assert pl.method == "mip" and doc["schema_version"] == 1 and "scenarios" not in doc and "dcn" not in doc
    assert verify_placement(inst, plan, pl) == []
    assert pl.dcn_share_by_tier == {"a/all": 0.0, "b/all": 0.0}
    # a placement carrying scenario routing for a plan without pods is refused
    podded = pl.model_copy(update={"schema_version": 2, "scenarios": [], "dcn": []})
    assert [v.check for v in verify_placement(inst, plan, podded)] == ["scenarios"]


def test_pods_map_onto_the_current_pods_with_fewest_arrivals():
    a, b = ("t", "prefill", "accx1"), ("t", "decode", "accx1")
    content = {"r/acc/00": {a: 3, b: 1}, "r/acc/01": {a: 1}}
    pods = [("r/acc/00", "acc", 8), ("r/acc/01", "acc", 8), ("r/acc/02", "acc", 8)]
    current = {"r/acc/01": {a: 3, b: 1}, "r/acc/02": {a: 1}}  # the same contents, one pod along
    assert map_to_current(content, pods, current) == {"r/acc/01": {a: 3, b: 1}, "r/acc/02": {a: 1}}
    from fleetplan.placement import PlacementInfeasible

    with pytest.raises(PlacementInfeasible, match="2 acc pods"):
        map_to_current(content, pods[:1], current)


def test_placement_schema_doc_is_current():
    published = json.loads((DOCS / "placement-schema.json").read_text())
    assert published == Placement.model_json_schema(), \
        "docs/placement-schema.json is stale: run `fleetplan schema placement -o docs/placement-schema.json`"

