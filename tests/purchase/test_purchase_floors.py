"""The pod-floor decomposition (fleetplan/purchase/floors.py) against the deterministic
equivalent solved exactly: the same optimum, a lower bound that holds, a verified plan."""

from __future__ import annotations

import copy
from dataclasses import replace

import pyomo.environ as pyo
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetplan.purchase import floors
from fleetplan.purchase import solve as purchase_solve
from fleetplan.purchase.floors import applies
from fleetplan.purchase.io import parse_purchase
from fleetplan.purchase.solve import solve_purchase, solve_tree
from fleetplan.solvers.base import SolveOptions
from tests.conftest import tiny_data

FLAT = [1.0] * 24
EXACT = SolveOptions(mip_gap=1e-9)
TIGHT = SolveOptions(mip_gap=1e-6)


def two_region_base(tmp_path, rps=(8.0, 8.0), old_usd_per_chip_hour: float | None = None) -> str:
    """Regions a and b (N-1: each takes the other's traffic), pods of 2 chips of 'acc'. With
    ``old_usd_per_chip_hour``, also a slower installed chip 'old' at that price: buying
    'acc' early then saves chip-hours (the trade the cost cuts price)."""
    pods = {"acc": {"installed": 1, "available_new": 0}}
    chips = {"acc": {"chips_per_pod": 2}}
    if old_usd_per_chip_hour is not None:
        pods["old"] = {"installed": 2, "available_new": 0}
        chips["old"] = {"hbm_gb": 80, "hbm_tbps": 1.5, "peak_tflops": 500, "ici_gbytes_per_s": 200, "chips_per_vm": 1, "chips_per_pod": 2,
                        "slice_shapes": [1, 2], "price_per_chip_hour_usd": old_usd_per_chip_hour}
    d = tiny_data(regions={r: {"peak_rps": x, "hourly_load": FLAT, "pods": pods, "failover_to": [o]} for r, o, x in (("a", "b", rps[0]), ("b", "a", rps[1]))},
                  chips=chips, failover={"n_minus_1": True})
    path = tmp_path / f"base-{rps[0]}-{rps[1]}-{old_usd_per_chip_hour}.yaml"
    path.write_text(yaml.safe_dump(d))
    return str(path)


def tree_doc(base: str, growth=(0.0, 0.5), probs=(0.6, 0.4), start: float = 1.0, prices=(10000, 30000), cap: int = 4,
             min_order: int = 1, lead: int = 1) -> dict:
    """Three quarters; capital pods at prices[0] in 2027Q1 and prices[1] later; the delivery
    cap shared by both regions; two growth paths branching in 2027Q2. Installed: 2 'acc' pods a
    region, or 1 and 2 'old' where the base has that chip."""
    with open(base) as f:
        old = "old" in yaml.safe_load(f)["chips"]
    return {
        "base": base,
        "quarters": {"labels": ["2027Q1", "2027Q2", "2027Q3"], "discount_rate_per_year": 0.08},
        "installed": ([{"region": r, "chip": k, "pods": n} for r in ("a", "b") for k, n in (("acc", 1), ("old", 2))] if old
                      else [{"region": r, "chip": "acc", "pods": 2} for r in ("a", "b")]),
        "supply": [{"chip": "acc", "price": {"kind": "capital", "usd_per_pod": prices[0]}, "lead_time_quarters": lead,
                    "max_pods_delivered_per_quarter": cap, "min_order_pods": min_order,
                    "by_quarter": {"2027Q2": {"price": {"kind": "capital", "usd_per_pod": prices[1]}}}}],
        "demand": {"kind": "growth_paths", "start": start,
                   "paths": [{"name": "low", "probability": probs[0], "growth_per_quarter": growth[0]},
                             {"name": "high", "probability": probs[1], "growth_per_quarter": growth[1]}]},
    }


def late_clock():
    """A stand-in for the ``time`` module whose perf_counter jumps 1e6 s ahead once ``late["on"]`` is set."""
    import time as real_time

    late = {"on": False}

    class Clock:
        @staticmethod
        def perf_counter():
            return real_time.perf_counter() + (1e6 if late["on"] else 0.0)

    return late, Clock


def exact_and_floors(doc: dict):
    p = parse_purchase(copy.deepcopy(doc))
    ef = solve_tree(p, p.tree, EXACT, None, start_from_snapshots=False)
    fl = solve_tree(p, p.tree, TIGHT, None, start_from_snapshots=True)
    return p, ef, fl


CASES = [  # (base, tree, cost cuts expected): where the installed 'old' chip costs more to run, buying early pays
    ({}, {}, False),
    ({}, {"min_order": 2}, False),
    ({}, {"growth": (0.2, 0.8), "prices": (30000, 10000)}, False),
    ({"rps": (8.0, 3.0), "old_usd_per_chip_hour": 8.0}, {"prices": (3000, 6000)}, True),
    ({"old_usd_per_chip_hour": 8.0}, {}, True),
    ({"rps": (12.0, 8.0), "old_usd_per_chip_hour": 2.0}, {"prices": (3000, 6000)}, True),
    ({"old_usd_per_chip_hour": 8.0}, {"prices": (3000, 6000), "min_order": 2}, False),
]


@pytest.mark.parametrize("base_over, over, cuts", CASES)
def test_the_decomposition_finds_the_exact_optimum(tmp_path, base_over, over, cuts):
    p, ef, fl = exact_and_floors(tree_doc(two_region_base(tmp_path, **base_over), **over))
    assert applies(p) is None
    assert ef.result.has_incumbent and fl.result.has_incumbent
    assert fl.floor is not None and fl.floor.complete and fl.start is None
    opt = ef.result.objective
    assert fl.result.objective == pytest.approx(opt, rel=1e-6)
    # the bound is a lower bound of the true optimum, and the decomposition's plan is a plan of the tree
    assert fl.floor.lower_usd <= opt * (1 + 1e-9)
    assert fl.floor.upper_usd >= opt * (1 - 1e-9)
    if cuts:
        assert fl.floor.rounds > 1 and fl.floor.optimality_cuts > 0  # the run-cost trade took cost cuts
    m = fl.model.m
    for c in m.component_data_objects(pyo.Constraint, active=True):
        body = pyo.value(c.body)
        assert c.lower is None or body >= pyo.value(c.lower) - 1e-6, c.name
        assert c.upper is None or body <= pyo.value(c.upper) + 1e-6, c.name


def test_no_good_cuts_find_the_regions_split(tmp_path, monkeypatch):
    # with the total's floor alone the master first puts the pods where they do not serve; the
    # no-good cuts move them, and the optimum is the same
    monkeypatch.setattr(floors, "SUBSET_FLOORS", False)
    p, ef, fl = exact_and_floors(tree_doc(two_region_base(tmp_path, rps=(12.0, 3.0)), growth=(0.2, 0.6)))
    assert fl.floor.complete and fl.floor.nogoods > 0
    assert fl.result.objective == pytest.approx(ef.result.objective, rel=1e-6)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(g_low=st.sampled_from([0.0, 0.1, 0.3]), g_high=st.sampled_from([0.4, 0.7, 1.0]), p_low=st.sampled_from([0.2, 0.5, 0.8]),
       later=st.sampled_from([2000, 6000, 20000]))
def test_the_bounds_hold_on_random_trees(tmp_path, g_low, g_high, p_low, later):
    _p, ef, fl = exact_and_floors(tree_doc(two_region_base(tmp_path, old_usd_per_chip_hour=8.0), growth=(g_low, g_high),
                                           probs=(p_low, 1 - p_low), prices=(3000, later)))
    opt = ef.result.objective
    assert fl.floor.lower_usd <= opt * (1 + 1e-9) <= fl.floor.upper_usd * (1 + 2e-9)
    assert fl.result.objective == pytest.approx(opt, rel=1e-6)


def test_the_purchase_plan_through_the_decomposition_is_verified(tmp_path, monkeypatch):
    doc = tree_doc(two_region_base(tmp_path))
    ef = solve_purchase(parse_purchase(copy.deepcopy(doc)), EXACT, value=False)
    monkeypatch.setattr(purchase_solve, "SNAPSHOT_START_INTEGERS", 0)
    plan = solve_purchase(parse_purchase(copy.deepcopy(doc)), TIGHT, value=False)
    assert plan.status == "verified"
    assert any(n.startswith("pod-floor decomposition") for n in plan.notes)
    assert plan.expected_cost_usd == pytest.approx(ef.expected_cost_usd, rel=1e-6)
    assert plan.solve.bound_usd <= ef.expected_cost_usd * (1 + 1e-6)
    assert [(o.region, o.pods) for o in plan.order_sheet] == [(o.region, o.pods) for o in ef.order_sheet]


def test_an_unservable_root_is_named(tmp_path):
    # the installed pods cannot serve 2027Q1 and nothing arrives before 2027Q2: the floors prove it
    p = parse_purchase(tree_doc(two_region_base(tmp_path), start=6.0))
    sol = solve_tree(p, p.tree, TIGHT, None, start_from_snapshots=True)
    assert sol.result.termination == "infeasible" and 0 in sol.unservable
    assert "cannot be served in 2027Q1" in purchase_solve._unservable_nodes(p, p.tree, sol.unservable)


def test_it_does_not_apply_to_priced_demand_or_burst(tmp_path):
    # (a CVaR objective it does solve since issue 39: tests/purchase/test_purchase_risk_neutral.py)
    base = two_region_base(tmp_path)
    priced = parse_purchase({**tree_doc(base), "policy": {"unserved": {"kind": "priced", "usd_per_1m_tokens": 5.0}}})
    assert "priced" in applies(priced)
    burst = parse_purchase({**tree_doc(base), "policy": {"burst": [{"chip": "acc", "premium_usd_per_chip_hour": 1.0, "max_pods_per_quarter": 1}]}})
    assert "burst" in applies(burst)


def test_a_round_whose_fleets_all_came_is_kept_past_the_deadline(tmp_path, monkeypatch):
    # newcomer trial: with --time-limit 150 the 30 fleets of round 1 were all found just past the
    # decomposition's deadline, the round was dropped and HiGHS started cold (a plan 2.2x the cost)
    import time as real_time

    from fleetplan.purchase.model import build_purchase_model

    p = parse_purchase(tree_doc(two_region_base(tmp_path, old_usd_per_chip_hour=8.0)))
    pm = build_purchase_model(p)
    late, Clock = late_clock()

    fleet = floors._fleet

    def fleet_then_late(*a, **k):
        out = fleet(*a, **k)
        late["on"] = True  # the clock passes the deadline once the first fleet is in
        return out

    monkeypatch.setattr(floors, "time", Clock)
    monkeypatch.setattr(floors, "_fleet", fleet_then_late)
    rep = floors.floor_decomposition(p, pm, TIGHT, real_time.perf_counter() + 1000.0)
    assert rep.complete and rep.upper_usd is not None and rep.rounds == 1
    assert rep.why == "the time limit passed while solving the node fleets"


def test_a_node_fleet_the_run_floors_fleet_fits_in_is_taken_without_a_solve_and_is_the_exact_optimum(tmp_path, monkeypatch):
    # the run floor's fleet (at the most pods) that fits in the master's pods is that node's fleet: no
    # solve is made for it, and the decomposition still finds the deterministic equivalent's optimum
    free, solved = [], []
    orig = floors._fleet

    def fleet(b, pods, opts, deadline):
        fits = b.free_fleet is not None and all(v <= pods[k] for k, v in b.free_fleet[0].items())
        (free if fits else solved).append(pods)
        return orig(b, pods, opts, deadline)

    monkeypatch.setattr(floors, "_fleet", fleet)
    p, ef, fl = exact_and_floors(tree_doc(two_region_base(tmp_path, old_usd_per_chip_hour=8.0)))
    assert free, "the case must reach the shortcut"
    assert fl.result.objective == pytest.approx(ef.result.objective, rel=1e-6)
    assert fl.floor.lower_usd <= ef.result.objective * (1 + 1e-9)


def _cap_short_tree(tmp_path, cap: int = 1) -> dict:
    # one delivery cap shared by both regions: 1 pod a quarter (lead time 1) brings the 4 installed pods to
    # at most 6 by 2027Q3, and the high path (demand doubling a quarter) needs more there; the low path is served
    return tree_doc(two_region_base(tmp_path), growth=(0.0, 1.0), cap=cap)


def test_an_unservable_later_quarter_is_named_from_the_floors(tmp_path, monkeypatch):
    # newcomer trial (the bundled example with its delivery cap cut to 4): the diagnosis named 2027Q1, a quarter
    # the installed fleet serves, from the whole-tree least-unserved search cut by --time-limit. The floors
    # prove where: the first quarter whose floors the supply cannot reach, with no whole-tree search
    monkeypatch.setattr(purchase_solve, "SNAPSHOT_START_INTEGERS", 0)

    def no_search(*_a, **_k):
        raise AssertionError("the whole-tree least-unserved search ran")

    monkeypatch.setattr(purchase_solve, "diagnose_infeasible", no_search)
    p = parse_purchase(_cap_short_tree(tmp_path))
    sol = solve_tree(p, p.tree, TIGHT, None)
    high_q3 = next(n.id for n in p.tree.nodes if n.quarter == 2 and "high" in n.label)
    # 4 installed + 1 delivered in 2027Q2 + 1 in 2027Q3 = 6 pods at most, whatever the split between the regions
    assert sol.result.termination == "infeasible" and sol.solves == 0
    assert [(s.node, s.chip, s.regions, s.most) for s in sol.floor.short] == [(high_q3, "acc", ("a", "b"), 6)]
    need = sol.floor.short[0].floor
    assert need > 6
    with pytest.raises(purchase_solve.NoPurchasePlan) as e:
        solve_purchase(p, TIGHT, value=False)
    msg = str(e.value)
    assert "scenario high cannot be served in 2027Q3" in msg
    assert f"at least {need} pods of acc in a+b together" in msg and "at most 6 can be in service there then" in msg
    assert "cannot be served in 2027Q1" not in msg and "cannot be served in 2027Q2" not in msg and "scenario low" not in msg
    # the floor is not overstated: with a cap that reaches it, the tree is served
    wide = parse_purchase(tree_doc(two_region_base(tmp_path), growth=(0.0, 1.0), cap=(need - 4 + 1) // 2))
    assert solve_tree(wide, wide.tree, TIGHT, None).result.has_incumbent


def test_a_least_unserved_search_cut_by_the_clock_does_not_name_a_quarter(tmp_path, monkeypatch):
    # the fallback diagnosis (where the floors do not apply): an incumbent cut by the time limit is not the
    # least unserved, so its quarters are not the ones that fail (the defect named 2027Q1 from such an incumbent)
    real = purchase_solve.solve_highs

    def cut(m, opts, **k):
        res = real(m, opts, **k)
        return replace(res, termination="time_limit") if hasattr(m, "obj_unserved_rps") and m.obj_unserved_rps.active else res

    monkeypatch.setattr(purchase_solve, "solve_highs", cut)
    p = parse_purchase(_cap_short_tree(tmp_path))
    msg = purchase_solve.diagnose_infeasible(p, TIGHT, None, {})
    assert "where is not proven" in msg and "cannot be served in" not in msg
    assert "with the delivery caps lifted it is served by ordering" in msg


def test_the_decomposition_has_the_whole_time_limit(tmp_path, monkeypatch):
    # newcomer trial: --time-limit 90 ended without a plan though the default run takes ~70 s; the decomposition
    # had 60% of the time left, was cut while solving the node fleets, and HiGHS found no plan of the tree in the rest
    from fleetplan.purchase.model import build_purchase_model

    seen = []
    guard = floors._guard
    monkeypatch.setattr(floors, "_guard", lambda deadline: seen.append(deadline) or guard(deadline))
    p = parse_purchase(tree_doc(two_region_base(tmp_path)))
    deadline = floors.time.perf_counter() + 1000.0
    rep = floors.floor_decomposition(p, build_purchase_model(p), TIGHT, deadline)
    assert rep.complete and seen and set(seen) == {deadline}


def test_the_decompositions_plan_stands_when_no_time_is_left_for_highs(tmp_path, monkeypatch):
    # a plan outside the gap (the bound lowered here to make it so) and the clock past the deadline once the
    # decomposition ends: the tree's result is that plan with its gap, not 'no plan in the time'
    import time as real_time

    late, Clock = late_clock()

    real = purchase_solve.floor_decomposition

    def then_late(*a, **k):
        rep = real(*a, **k)
        rep.lower_usd *= 0.5
        late["on"] = True
        return rep

    p = parse_purchase(tree_doc(two_region_base(tmp_path)))
    ref = solve_tree(p, p.tree, TIGHT, None, start_from_snapshots=True)
    monkeypatch.setattr(purchase_solve, "floor_decomposition", then_late)
    monkeypatch.setattr(purchase_solve, "time", Clock)
    sol = solve_tree(p, p.tree, TIGHT, real_time.perf_counter() + 1000.0, start_from_snapshots=True)
    assert sol.ok and sol.result.termination == "time_limit" and sol.solves == 0
    assert sol.result.objective == pytest.approx(sol.floor.upper_usd) and sol.result.gap == pytest.approx(sol.floor.gap)
    assert sol.orders == ref.orders and sol.pods == ref.pods and sol.run_cost == pytest.approx(ref.run_cost)


def test_the_plans_notes_carry_no_wall_seconds(tmp_path, monkeypatch):
    # newcomer trial: two runs of the bundled example wrote plans that differed in the decomposition note's
    # seconds only, against docs/purchase.md's byte-identical output
    import re

    monkeypatch.setattr(purchase_solve, "SNAPSHOT_START_INTEGERS", 0)
    plan = solve_purchase(parse_purchase(tree_doc(two_region_base(tmp_path))), TIGHT, value=False)
    notes = [n for n in plan.notes if n.startswith("pod-floor decomposition")]
    assert notes and not any(re.search(r"\d+ s\b", n) for n in plan.notes)


@pytest.mark.parametrize("base_over, over", [(b, o) for b, o, cuts in CASES if cuts])
def test_a_node_fleet_started_from_an_earlier_fleet_of_its_block_is_the_exact_optimum(tmp_path, monkeypatch, base_over, over):
    # a node fleet solve at pods an earlier fleet of the same block fits in starts from that fleet
    # (floors._earlier_fleet, under its chords): the decomposition still finds the deterministic
    # equivalent's optimum, and each started solve's fleet is no dearer than its start
    started = []
    orig_earlier, orig_solve = floors._earlier_fleet, floors._Node.solve

    def earlier(b, pods):
        f = orig_earlier(b, pods)
        if f is not None:
            started.append(f[0])
        return f

    def solve(self, expr, opts, max_nodes, give_up=None, stall=None, highs=None, start=None):
        res = orig_solve(self, expr, opts, max_nodes, give_up, stall, highs, start)
        if start is not None:
            assert res.has_incumbent and res.objective <= started[-1] * (1 + 1e-9) + 1e-9, (res.objective, started[-1])
        return res

    monkeypatch.setattr(floors, "_earlier_fleet", earlier)
    monkeypatch.setattr(floors._Node, "solve", solve)
    p, ef, fl = exact_and_floors(tree_doc(two_region_base(tmp_path, **base_over), **over))
    assert started, "the case must reach a started fleet solve"
    assert fl.result.objective == pytest.approx(ef.result.objective, rel=1e-6)
    assert fl.floor.lower_usd <= ef.result.objective * (1 + 1e-9)
