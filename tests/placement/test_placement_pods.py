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
from fleetplan.placement.pods import map_to_current
from fleetplan.results.evaluate import Context
from fleetplan.results.loads import record_flow
from fleetplan.placement.check import verify_placement
from fleetplan.placement.document import Placement, RouteWeight
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


def _within(x, share: float) -> bool:
    """A share within its tier's ceiling, or the plan declares the overage (plan.dcn[].sized_for above it)."""
    return share <= x.dcn_share_max + 1e-12 or (x.sized_for is not None and x.sized_for > x.dcn_share_max)


def test_gemini_every_tier_within_its_ceiling_in_every_scenario(gemini):
    inst, plan, pl, _ = gemini
    assert verify_placement(inst, plan, pl) == []
    assert [s.scenario for s in pl.scenarios] == [s.name for s in plan.scenarios]
    summary = {(x.region, x.tier): x for x in pl.dcn}
    assert set(summary) == {(r, t) for r in inst.regions for t in ("short", "long")}
    for s in pl.scenarios:
        regions = {p.region for p in next(x for x in plan.scenarios if x.name == s.scenario).pools}
        assert {(x.region, x.tier) for x in s.tiers} == {(r, t) for r in regions for t in ("short", "long")}
        for x in s.tiers:
            assert _within(summary[(x.region, x.tier)], x.dcn_share), (s.scenario, x)
    assert all(x.worst_loss is not None and _within(x, x.worst_loss) and _within(x, x.normal) for x in pl.dcn)


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
    assert improved.dcn_share <= as_sized.dcn_share + 1e-9 and improved.pods_used <= as_sized.pods_used


def test_gemini_loss_routing_never_worse_than_the_plan(gemini):
    """In every region loss each tier's share is at most the plan's PoolLoad.dcn_share (the
    plan counts every warm prefill slice as crossing; the placement places them), and the
    warm slices that join are the plan's: as many per pool, of its shape, each once, in the
    pod stated, of a surviving region."""
    inst, plan, pl, as_sized = gemini
    ids = {s.id: s for s in pl.slices}
    for s in pl.scenarios:
        if s.kind != "loss":
            continue
        for x in s.tiers:
            _, rec = _record(plan, s.scenario, x.region, x.tier)
            assert x.plan_dcn_share == rec.dcn_share and x.dcn_share <= rec.dcn_share + 1e-6
        sc = next(x for x in plan.scenarios if x.name == s.scenario)
        assert len({w.slice_id for w in s.warm}) == len(s.warm) == sc.warm_slices_used
        for p in sc.pools:
            got = [w for w in s.warm if (w.region, w.tier, w.role) == (p.region, p.tier, p.role)]
            assert len(got) == p.warm_slices and all(ids[w.slice_id].slice == p.slice and ids[w.slice_id].pod == w.pod for w in got)
            assert all(w.region != s.lost_region and ids[w.slice_id].role == "warm" for w in got)
    # the improvement raised no share in any scenario
    before = {(s.scenario, x.region, x.tier): x.dcn_share for s in as_sized.scenarios for x in s.tiers}
    assert all(x.dcn_share <= before[(s.scenario, x.region, x.tier)] + 1e-9 for s in pl.scenarios for x in s.tiers)


def test_gemini_pod_egress_within_capacity(gemini):
    inst, plan, pl, _ = gemini
    cap = inst.chips["ironwood"].pod_egress_gbytes_per_s(inst.network.dcn_gbytes_per_s_per_slice)
    egress = [g for s in pl.scenarios for g in s.pod_dcn_egress_gbytes_per_s.values()]
    assert egress and max(egress) <= cap


def _exchange(pl: Placement, scenario: str, region: str, tier: str, share: float) -> Placement:
    """``pl`` with pairs of ``region``'s pods sending each other KV they kept, until the
    tier's DCN share in ``scenario`` has risen by ``share``: every decode pod takes as much
    as before, only the crossing rises (the scenario's own records left as they were)."""
    s = next(x for x in pl.scenarios if x.scenario == scenario)
    mine = [w for w in s.routing if (w.region, w.tier) == (region, tier)]
    load: dict[str, float] = {}
    for w in mine:
        load[w.from_pod] = load.get(w.from_pod, 0.0) + w.rps
    need = share * sum(load.values())
    flows = {(w.from_pod, w.to_pod): w.rps for w in mine}
    local = sorted((p for p in load if flows.get((p, p), 0.0) > 0), key=lambda p: (-flows[(p, p)], p))
    for a, b in zip(local[0::2], local[1::2]):
        if need <= 0:
            break
        x = min(flows[(a, a)], flows[(b, b)], need / 2)
        for i, j in ((a, b), (b, a)):
            flows[(i, i)] -= x
            flows[(i, j)] = flows.get((i, j), 0.0) + x
        need -= 2 * x
    assert need <= 1e-9, "not enough KV kept in pods to exchange"
    rows = [RouteWeight(region=region, tier=tier, from_pod=i, to_pod=j, share=round(f / load[i], 9), rps=round(f, 6))
            for (i, j), f in sorted(flows.items()) if f > 1e-9]
    routing = [w for w in s.routing if (w.region, w.tier) != (region, tier)] + rows
    return pl.model_copy(update={"scenarios": [x.model_copy(update={"routing": routing}) if x is s else x for x in pl.scenarios]})


def test_a_loss_routing_sending_too_much_over_the_dcn_is_refused(gemini):
    inst, plan, pl, _ = gemini
    # us-central's short tier in its worst region loss: pairs of pods exchanging the KV they
    # kept until 6 more points of its requests cross, every decode pod taking what it took
    name = next(x.worst_loss_scenario for x in pl.dcn if (x.region, x.tier) == ("us-central", "short"))
    share = next(x.dcn_share for s in pl.scenarios if s.scenario == name for x in s.tiers if (x.region, x.tier) == ("us-central", "short"))
    bad = _exchange(pl, name, "us-central", "short", max(0.06 - share, 0.0) + 0.01)
    found = verify_placement(inst, plan, bad)
    assert any(v.check == "dcn_share" and v.where == f"{name} us-central/short" and "above its ceiling 5.00%" in v.message for v in found), found
    # no decode pod over its rate; the short tier's p99 TTFT pays the DCN transfer of its
    # small KV within the SLO (the TTFT check: the slow-DCN case below); the records
    # (scenarios[].tiers, dcn) no longer agree with the routing
    assert {v.check for v in found} <= {"dcn_share", "dcn", "dcn_egress"}
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
    name = next(s.scenario for s in pl.scenarios if s.kind == "loss" and s.lost_region == "b")
    bad = _exchange(pl, name, "a", "all", 0.2)
    found = {v.check: v for v in verify_placement(inst, plan, bad)}
    assert {"dcn_share", "ttft"} <= set(found) and "decode_intake" not in found
    assert found["ttft"].where == f"{name} a/all" and "ms > 1000 ms" in found["ttft"].message


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


def test_a_placement_stating_another_ceiling_or_egress_is_refused(gemini):
    """Regression (issue-20 newcomer trial, finding 3): a placement whose summary stated a
    ceiling of -100% (or 0.1%) or a pod's DCN egress of 0 was accepted, and the what-if and
    export quoted it. The ceiling, the share the plan sized for and every pod's egress are
    recomputed from the instance, the plan and the routing."""
    inst, plan, pl, _ = gemini
    x = pl.dcn[0]
    for upd in ({"dcn_share_max": -1.0}, {"dcn_share_max": 0.001}, {"sized_for": 0.5}):
        bad = pl.model_copy(update={"dcn": [x.model_copy(update=upd)] + pl.dcn[1:]})
        assert "dcn" in {v.check for v in verify_placement(inst, plan, bad)}, upd
    s = next(y for y in pl.scenarios if y.pod_dcn_egress_gbytes_per_s)
    pod = next(iter(s.pod_dcn_egress_gbytes_per_s))
    zeroed = {**s.pod_dcn_egress_gbytes_per_s, pod: 0.0}
    bad = pl.model_copy(update={"scenarios": [y.model_copy(update={"pod_dcn_egress_gbytes_per_s": zeroed}) if y is s else y
                                              for y in pl.scenarios]})
    assert "dcn_egress" in {v.check for v in verify_placement(inst, plan, bad)}
    assert verify_placement(inst, plan, pl) == []


def test_warm_slices_join_where_they_keep_kv_local():
    """Hand-built pods (no sizing): A holds 4 prefill slices and 1 decode slice (excess
    prefill), B 2 prefill and 2 decode (spare decode), C only warm slices; A and B hold one
    warm slice each. One warm slice joins decode, one prefill: decode goes to A (it takes
    A's excess), prefill to B (its decode has room) -- nothing crosses, where the plan's
    accounting (every warm prefill slice crossing, warm decode taking nothing in its pod)
    says A's 15 req/s of excess plus the warm prefill slice's 10, of 70."""
    from fleetplan.placement.pods import Join, ScenarioLoad, TierLoad, _Highs, route_scenario

    pre, dec, warm = ("t", "prefill", "accx1"), ("t", "decode", "accx1"), (None, "warm", "accx1")
    content = {"r/acc/00": {pre: 4, dec: 1, warm: 1}, "r/acc/01": {pre: 2, dec: 2, warm: 1}, "r/acc/02": {warm: 2}}
    # 7 prefill slices (one warm) at 10 req/s each; a decode slice takes 25 req/s
    tl = TierLoad("t", rps=70.0, own_rps=50.0, div_rps=20.0, slices=7, kv_gbytes=0.1, rates={"accx1": 25.0}, plan_share=None)
    sl = ScenarioLoad("lose:x@00", "loss", "x", 0, {"t": tl}, [Join("t", "prefill", "accx1", 1), Join("t", "decode", "accx1", 1)])
    fl = route_scenario(_Highs(), content, sl, {p: 1e9 for p in content}, "r")
    assert fl.joins == {("t", "decode", "accx1"): {"r/acc/00": 1}, ("t", "prefill", "accx1"): {"r/acc/01": 1}}
    assert fl.share("t", 70.0) == 0.0 and fl.egress == {}
    # two warm slices joining prefill: one beside B's spare decode (10 of its 20 req/s kept),
    # the other crosses wherever it sits -- 10 of 80 req/s (the plan's accounting: 15 + 20)
    tl2 = TierLoad("t", rps=80.0, own_rps=60.0, div_rps=20.0, slices=8, kv_gbytes=0.1, rates={"accx1": 25.0}, plan_share=None)
    sl2 = ScenarioLoad("lose:x@01", "loss", "x", 1, {"t": tl2}, [Join("t", "prefill", "accx1", 2)])
    fl = route_scenario(_Highs(), content, sl2, {p: 1e9 for p in content}, "r")
    assert fl.share("t", 80.0) == pytest.approx(25.0 / 80.0)
    assert sum(fl.joins[("t", "prefill", "accx1")].values()) == 2 and fl.joins[("t", "prefill", "accx1")].get("r/acc/01", 0) >= 1


def test_tiny_placement_of_a_plan_with_pods(tiny_n1):
    """The tiny N-1 fleet: each region's pods hold prefill and decode kits and warm slices;
    in a region loss the warm slices the plan adds join their pools, at most the plan's share."""
    inst, plan = tiny_n1
    pl = place(inst, plan)
    assert verify_placement(inst, plan, pl) == [] and pl.method == "pods"
    for s in pl.scenarios:
        if s.kind == "loss":
            sc = next(x for x in plan.scenarios if x.name == s.scenario)
            assert len(s.warm) == sc.warm_slices_used
            assert all(x.dcn_share <= x.plan_dcn_share + 1e-6 for x in s.tiers)  # the plan states six digits
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

