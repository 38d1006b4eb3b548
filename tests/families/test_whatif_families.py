"""What-if on small instances with answers worked out by hand: routing to a single
absorber, N-2, traffic no survivor may take, pod loss, and the warm pool."""

from __future__ import annotations

import pytest

from fleetplan.errors import InputError
from fleetplan.sizing import solve
from fleetplan.whatif import fleet_after_loss, parse_event, whatif

FLAT = [1.0] * 24


@pytest.fixture(scope="module")
def three(request):
    from tests.conftest import tiny_data
    from fleetplan.instance.io import parse_instance

    pods = {"acc": {"installed": 0, "available_new": 40}}
    inst = parse_instance(tiny_data(
        regions={
            "a": {"peak_rps": 80, "hourly_load": FLAT, "pods": pods, "failover_to": ["b", "c"]},
            "b": {"peak_rps": 80, "hourly_load": FLAT, "pods": pods, "failover_to": ["a", "c"]},
            "c": {"peak_rps": 80, "hourly_load": FLAT, "pods": pods, "failover_to": ["a"]},
        },
        failover={"n_minus_1": True, "warm_pool": {"min_slices_per_region": 1, "max_slices_per_region": 4}},
    ), "three")
    out = solve(inst)
    assert out.plan.status == "verified"
    return inst, out.plan


def test_single_region_loss_is_absorbed_with_routing_that_sums_to_one(three):
    inst, plan = three
    ev = whatif(inst, plan, parse_event(inst, plan, ["c"], [], 0, "steady")).events[0]
    assert [(r.lost, r.to) for r in ev.routes] == [("c", "a")]  # c may only fail over to a
    assert ev.routes[0].share == pytest.approx(1.0)
    a = next(s for s in ev.survivors if s.region == "a")
    assert a.traffic.value == pytest.approx(2.0)  # own 80 + all of c's 80 req/s
    assert ev.residual_slices == 0  # the plan was sized for it (N-1)


def test_n2_routes_each_lost_region_to_what_survives(three):
    inst, plan = three
    ev = whatif(inst, plan, parse_event(inst, plan, ["a", "b"], [], 0, "steady")).events[0]
    assert {(r.lost, r.to) for r in ev.routes} == {("a", "c"), ("b", "c")}
    c = ev.survivors[0]
    assert c.region == "c" and c.traffic.value == pytest.approx(3.0)
    assert ev.dropped_rps == 0.0


def test_traffic_with_no_allowed_survivor_is_dropped_and_reported(three):
    inst, plan = three
    ev = whatif(inst, plan, parse_event(inst, plan, ["a", "c"], [], 0, "steady")).events[0]
    # c fails over only to a, which is lost too: c's 80 req/s are dropped; a's go to b
    assert ev.dropped_rps == pytest.approx(80.0)
    assert ev.model_residual_request_equivalents >= 80.0 - 1e-6
    assert any("dropped" in n for n in ev.notes)


def test_pod_loss_takes_chips_in_proportion(three):
    inst, plan = three
    pods_a = next(f for f in plan.fleet if f.region == "a").pods_total
    assert pods_a >= 2
    with pytest.raises(InputError, match="use --lose a"):
        parse_event(inst, plan, [], [f"a:{pods_a}"], 0, "transient")
    ev = parse_event(inst, plan, [], ["a:1"], 0, "transient")[0]
    pools, warm, lost = fleet_after_loss(inst, plan, ev)
    fleet = next(f for f in plan.fleet if f.region == "a")
    used = fleet.chips_in_slices + fleet.chips_in_warm_pool
    target = min(inst.chips["acc"].chips_per_pod, used)
    chips_lost = sum(n * int(pools[k][0].rpartition("x")[2]) for k, n in lost.items())
    chips_lost += sum((w.slices - warm[(w.region, w.slice)]) * w.chips // w.slices for w in plan.warm_pool if w.region == "a")
    assert target <= chips_lost < target + 2  # whole slices of at most 2 chips
    rep = whatif(inst, plan, [ev]).events[0]
    assert rep.routes == [] and {s.region for s in rep.survivors} == {"a", "b", "c"}
    a = next(s for s in rep.survivors if s.region == "a")
    assert sum(p.lost_to_pods for p in a.pools) == sum(lost.values())


@pytest.mark.parametrize("lose,pods,hour,phase,field", [
    (["x"], [], 0, "steady", "--lose"),
    (["a", "a"], [], 0, "steady", "--lose"),
    (["a", "b", "c"], [], 0, "steady", "--lose"),
    ([], [], 0, "steady", "--lose"),
    (["a"], [], 24, "steady", "--hour"),
    (["a"], [], "noon", "steady", "--hour"),
    (["a"], [], 0, "later", "--phase"),
    ([], ["a:0"], 0, "steady", "--lose-pods"),
    ([], ["a:999"], 0, "steady", "--lose-pods"),
    ([], ["a"], 0, "steady", "--lose-pods"),
    ([], ["a:acc:x"], 0, "steady", "--lose-pods"),
    ([], ["a:tpu:1"], 0, "steady", "--lose-pods"),
    (["a"], ["a:1"], 0, "steady", "--lose-pods"),
])
def test_bad_events_name_the_option(three, lose, pods, hour, phase, field):
    inst, plan = three
    with pytest.raises(InputError) as e:
        parse_event(inst, plan, lose, pods, hour, phase)
    assert any(p.path == field for p in e.value.problems), e.value.render()
