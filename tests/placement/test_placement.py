"""Placement: the MIP on the bundled plan (checked independently), re-placement with
few moves, the greedy placer's invariants under random events (hypothesis state
machine), and the controller export against its published schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fleetplan.placement import allocate, place
from fleetplan.export.controller import ControllerExport, build_export
from fleetplan.results.placement import Placement, PodSlots, TierDemand, placement_diff, verify_placement
from fleetplan.solvers.online import OnlinePlacer, greedy_place

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def gemini_plan(solved):
    return solved("gemini-ironwood")


@pytest.fixture(scope="module")
def gemini_placement(gemini_plan):
    inst, plan = gemini_plan
    return place(inst, plan)


@pytest.fixture(scope="module")
def unpodded(gemini_plan):
    """The Gemini plan as a plan sized without its pods (plan.pods and plan.dcn dropped):
    what the placement model (method 'mip') places."""
    inst, plan = gemini_plan
    return plan.model_copy(update={"pods": None, "dcn": None})


@pytest.fixture(scope="module")
def mip_placement(gemini_plan, unpodded):
    return place(gemini_plan[0], unpodded)


def test_gemini_placement_is_complete_and_checked(gemini_plan, gemini_placement):
    inst, plan = gemini_plan
    pl = gemini_placement
    assert verify_placement(inst, plan, pl) == []
    assert pl.method == "pods" and pl.schema_version == 2
    assert len(pl.slices) == sum(p.slices for p in plan.pools) + sum(w.slices for w in plan.warm_pool)
    assert {p.id for p in pl.pods} == {f"{f.region}/{f.chip}/{n:02d}" for f in plan.fleet for n in range(f.pods_total)}
    # sized with its pods (issue 20): every tier's prefill and decode share pods, so its KV
    # crossing the DCN is within the 5% ceiling at the normal peak and in every region loss
    assert [s.scenario for s in pl.scenarios] == [s.name for s in plan.scenarios]
    assert all(x.dcn_share <= 0.05 for s in pl.scenarios for x in s.tiers)
    assert 0.0 <= pl.dcn_share <= 0.05


def test_mip_placement_of_a_plan_without_pods(gemini_plan, unpodded, mip_placement):
    """A plan sized without its pods is placed by the placement model as before: its
    KV crossing the DCN is not priced by the sizing, so whether the long tier's crosses
    depends on the slice shapes; a tier of which more than 5% crosses gets a note naming it
    and why."""
    inst, _ = gemini_plan
    pl = mip_placement
    assert verify_placement(inst, unpodded, pl) == []
    assert pl.method == "mip" and pl.schema_version == 1 and pl.scenarios is None
    assert "scenarios" not in pl.model_dump(mode="json") and "dcn" not in pl.model_dump(mode="json")
    crossing = [k for k, v in pl.dcn_share_by_tier.items() if v > 0.05]
    assert all(any(n.startswith(f"{k}: ") and "cross the DCN" in n and "does not price DCN traffic" in n for n in pl.notes) for k in crossing)
    assert 0.0 <= pl.dcn_share < 0.06


def test_checker_catches_broken_placements(gemini_plan, gemini_placement):
    inst, plan = gemini_plan
    pl = gemini_placement
    s0, s1 = pl.slices[0], pl.slices[1]
    # two slices on the same chips
    bad = pl.model_copy(update={"slices": [s0, s1.model_copy(update={"pod": s0.pod, "first_chip": s0.first_chip, "vms": s0.vms})] + pl.slices[2:]})
    assert {v.check for v in verify_placement(inst, plan, bad)} >= {"overlap"}
    # a slice lost
    assert any(v.check == "count" for v in verify_placement(inst, plan, pl.model_copy(update={"slices": pl.slices[1:]})))
    # a warm slice lost: named region/warm/shape, not "region/None/warm/shape"
    warm = next(s for s in pl.slices if s.role == "warm")
    lost = [v for v in verify_placement(inst, plan, pl.model_copy(update={"slices": [s for s in pl.slices if s.id != warm.id]}))
            if v.check == "count"]
    assert [v.where for v in lost] == [f"{warm.region}/warm/{warm.slice}"]
    # a slice spanning the pod's end
    end = s0.model_copy(update={"first_chip": 250})
    assert any(v.check == "span" for v in verify_placement(inst, plan, pl.model_copy(update={"slices": [end] + pl.slices[1:]})))


def test_replacing_moves_nothing_when_nothing_changed(gemini_plan, gemini_placement):
    inst, plan = gemini_plan
    again = place(inst, plan, current=gemini_placement)
    assert again.moves == 0
    assert verify_placement(inst, plan, again) == []
    d = placement_diff(gemini_placement, again)
    assert d["moved"] == [] and d["added"] == [] and d["removed"] == []


def test_replacing_after_a_small_plan_change_moves_few(gemini_plan, unpodded, mip_placement):
    inst, _ = gemini_plan
    pools = list(unpodded.pools)
    i = next(k for k, p in enumerate(pools) if p.role == "decode" and p.slice.endswith("x8"))
    pools[i] = pools[i].model_copy(update={"slices": pools[i].slices - 2})  # two slices fewer
    smaller = unpodded.model_copy(update={"pools": pools})
    again = place(inst, smaller, current=mip_placement)
    assert verify_placement(inst, smaller, again) == []
    d = placement_diff(mip_placement, again)
    assert len(d["removed"]) == 2 and d["added"] == []
    assert again.moves <= 2


def test_replacing_a_plan_with_pods_after_a_change_moves_nothing_else(gemini_plan, gemini_placement):
    """A plan with pods re-placed after its pods changed (two decode slices fewer in one of
    them): the new pod contents are the target, mapped onto the current pods with the
    fewest arrivals -- the two slices go, nothing moves."""
    inst, plan = gemini_plan
    pools = list(plan.pools)
    i = next(k for k, p in enumerate(pools) if p.role == "decode" and p.slice.endswith("x8") and p.region == "us-east")
    pools[i] = pools[i].model_copy(update={"slices": pools[i].slices - 2})
    key = f"{pools[i].tier}/decode/{pools[i].slice}"
    pods = list(plan.pods)
    k = next(j for j, pc in enumerate(pods) if pc.region == "us-east" and pc.slices.get(key, 0) >= 2)
    pods[k] = pods[k].model_copy(update={"slices": {**pods[k].slices, key: pods[k].slices[key] - 2},
                                         "chips_used": pods[k].chips_used - 2 * pools[i].chips_per_slice})
    smaller = plan.model_copy(update={"pools": pools, "pods": pods})
    again = place(inst, smaller, current=gemini_placement)
    d = placement_diff(gemini_placement, again)
    assert len(d["removed"]) == 2 and d["added"] == [] and again.moves == 0
    # the edited plan's scenario records still carry the load the two slices took: only what
    # the decode capacity it now lacks does (KV the pod cannot take, more of it crossing) may be named
    assert {v.check for v in verify_placement(inst, smaller, again)} <= {"decode_intake", "dcn_share", "dcn_egress"}


def test_aligned_first_fit_packs_power_of_two_shapes():
    assert allocate(256, 4, [8] * 16 + [32] * 4) is not None
    offs = allocate(256, 4, [32, 8, 16, 32])
    assert offs[0] % 32 == 0 and offs[1] % 8 == 0 and offs[2] % 16 == 0
    assert allocate(64, 4, [32, 32, 8]) is None


def test_greedy_places_the_plan_and_the_mip_is_no_worse(gemini_plan, unpodded, mip_placement):
    inst, _ = gemini_plan
    g, refused = greedy_place(unpodded, mip_placement)
    assert refused == []
    gp = g.to_placement()
    assert verify_placement(inst, unpodded, gp) == [] and g.check() == []
    assert mip_placement.dcn_share <= gp.dcn_share + 1e-9  # exact <= greedy


def test_a_greedy_placement_of_a_plan_with_pods_is_refused(gemini_plan, gemini_placement):
    """The online placer keeps no region-loss routing: its placement of a plan sized with
    its pods is version 1, and the checker asks for the placer's (everything else holds)."""
    inst, plan = gemini_plan
    g, refused = greedy_place(plan, gemini_placement)
    gp = g.to_placement()
    assert refused == [] and gp.schema_version == 1 and gp.scenarios is None and gp.dcn is None
    assert [v.check for v in verify_placement(inst, plan, gp)] == ["scenarios"]


# ----------------------------------------------------------------------------- online placer


def _small_fleet() -> Placement:
    pods = [PodSlots(id=f"{r}/acc/{k:02d}", region=r, chip="acc", chips=64, chips_per_vm=4, up=True, chips_used=0)
            for r in ("r0", "r1") for k in range(4)]
    demand = [TierDemand(region=r, tier=t, rps=100.0, decode_rps_per_slice={"accx8": 20.0, "accx16": 40.0}) for r in ("r0", "r1") for t in ("s", "l")]
    return Placement(fleetplan_version="test", instance_name="t", instance_hash="-", plan_hash="-", method="greedy", pods=pods, slices=[],
                     routing=[], demand=demand, dcn_share=0.0, dcn_share_by_tier={}, pods_used=0, fragmented_free_chips=0)


class PlacerMachine(RuleBasedStateMachine):
    """Random events; after every one the placer's invariants hold, the slices are the
    ones the test expects, and a refused event changed nothing."""

    def __init__(self):
        super().__init__()
        self.g = OnlinePlacer(_small_fleet())
        self.expected: set[str] = set()

    def snapshot(self):
        return ({i: (s.pod, s.first) for i, s in self.g.slices.items()}, {p.id: p.up for p in self.g.pods.values()})

    @rule(region=st.sampled_from(["r0", "r1"]), tier=st.sampled_from(["s", "l"]), role=st.sampled_from(["prefill", "decode", "warm"]),
          shape=st.sampled_from(["accx8", "accx16", "accx32"]))
    def add(self, region, tier, role, shape):
        before = self.snapshot()
        res = self.g.add_slice(region, tier if role != "warm" else None, role, shape)
        if res.ok:
            assert res.slice_id not in self.expected
            self.expected.add(res.slice_id)
        else:
            assert res.reason and self.snapshot() == before

    @precondition(lambda self: self.expected)
    @rule(data=st.data())
    def remove(self, data):
        sid = data.draw(st.sampled_from(sorted(self.expected)))
        assert self.g.remove_slice(sid).ok
        self.expected.discard(sid)

    @rule(pod=st.sampled_from([f"{r}/acc/{k:02d}" for r in ("r0", "r1") for k in range(4)]))
    def down(self, pod):
        before = self.snapshot()
        res = self.g.pod_down(pod)
        if not res.ok:
            assert res.reason and self.snapshot() == before
        else:
            assert all(self.g.slices[i].pod != pod for i in self.expected)

    @rule(pod=st.sampled_from([f"{r}/acc/{k:02d}" for r in ("r0", "r1") for k in range(4)]))
    def up(self, pod):
        self.g.pod_up(pod)

    @invariant()
    def holds(self):
        assert self.g.check() == []
        assert set(self.g.slices) == self.expected


TestPlacerMachine = PlacerMachine.TestCase
TestPlacerMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


# ----------------------------------------------------------------------------- controller export


def test_controller_export_round_trips_with_the_published_schema(gemini_plan, gemini_placement):
    jsonschema = pytest.importorskip("jsonschema")
    inst, plan = gemini_plan
    doc = build_export(inst, plan, gemini_placement).model_dump(mode="json")
    published = json.loads((DOCS / "controller-schema.json").read_text())
    assert published == ControllerExport.model_json_schema(), "docs/controller-schema.json is stale: run `fleetplan schema controller -o docs/controller-schema.json`"
    jsonschema.validate(doc, published)
    again = ControllerExport.model_validate_json(json.dumps(doc)).model_dump(mode="json")
    assert again == doc
    r0 = doc["regions"][0]
    th = {t["tier"]: t for t in r0["thresholds"]}
    assert th["short"]["dcn_share_ceiling"] == 0.05 and th["short"]["prefix_hit_rate_baseline"] == 0.6
    assert 0 < th["short"]["prefill_queue_wait_share_of_ttft"] < 1
    assert r0["warm_pool_depth"] == sum(w.slices for w in plan.warm_pool if w.region == r0["region"])
    # every slice of the placement appears once in the document
    ids = [s["id"] for r in doc["regions"] for p in r["pods"] for s in p["slices"]]
    assert sorted(ids) == sorted(s.id for s in gemini_placement.slices)


def test_online_refuses_bad_shapes_and_forced_pod_down_drops_only_what_fits_nowhere():
    g = OnlinePlacer(_small_fleet())
    for shape in ("accx3", "accx0", "acc", "accx-8", "tpux8"):
        res = g.add_slice("r0", "s", "prefill", shape)
        assert not res.ok and res.reason
    assert not g.add_slice("r0", "medium", "prefill", "accx8").ok
    # fill region r0 (4 pods of 64 chips) with 32-chip slices, then lose a pod
    ids = [g.add_slice("r0", "s", "prefill", "accx32").slice_id for _ in range(8)]
    assert all(ids) and not g.add_slice("r0", "s", "prefill", "accx32").ok
    before = {i: (s.pod, s.first) for i, s in g.slices.items()}
    refused = g.pod_down("r0/acc/00")
    assert not refused.ok and {i: (s.pod, s.first) for i, s in g.slices.items()} == before
    forced = g.pod_down("r0/acc/00", force=True)
    assert forced.ok and len(forced.lost) == 2 and not g.pods["r0/acc/00"].up
    assert set(g.slices) == set(ids) - set(forced.lost) and g.check() == []


def test_online_refuses_shapes_the_instance_does_not_allow(gemini_placement):
    g = OnlinePlacer(gemini_placement)
    for shape in ("ironwoodx12", "ironwoodx08", "ironwoodx\u00b2"):
        res = g.add_slice("us-east", "short", "decode", shape)
        assert not res.ok and res.reason
