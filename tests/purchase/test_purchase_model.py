"""The purchase model on tiny trees: brute-force optima, VSS/EVPI worked by hand,
non-anticipativity on the solution, probability-0 branches, the snapshot reproduced,
lead-time monotonicity (issue 18)."""

from __future__ import annotations

import itertools
from functools import lru_cache

import pytest

from fleetplan.instance.io import parse_instance
from fleetplan.purchase.io import HOURS_PER_QUARTER, parse_purchase
from fleetplan.purchase.solve import solve_purchase
from fleetplan.sizing import solve
from fleetplan.solvers.base import SolveOptions
from tests.purchase.helpers import base_data, two_paths, write_base

EXACT = SolveOptions(mip_gap=0.0)


def _orders_by_scenario(plan) -> dict[tuple[str, str], dict]:
    """(scenario, order quarter) -> {(region, chip): pods}, read from the order sheet and the contingency table."""
    out: dict[tuple[str, str], dict] = {}
    for s in plan.scenarios:
        for o in plan.order_sheet:
            out.setdefault((s.name, o.order_quarter), {})[(o.region, o.chip)] = o.pods
    for o in plan.contingency:
        for s in o.scenarios:
            out.setdefault((s, o.order_quarter), {})[(o.region, o.chip)] = o.pods
    return out


@lru_cache(maxsize=None)
def _snapshot_cost_per_hour(mode: str, rps: float, pods: int) -> float | None:
    """The snapshot optimum (USD/h) with ``pods`` installed and none to buy; None when no fleet serves everything."""
    d = base_data(mode)
    d["regions"]["a"]["peak_rps"] = rps
    d["regions"]["a"]["pods"] = {"acc": {"installed": pods, "available_new": 0}}
    out = solve(parse_instance(d), SolveOptions(mip_gap=0.0))
    return out.plan.cost.fleet_cost_per_hour_usd if out.plan.status == "verified" else None


def test_brute_force_orders_match_the_solver(tmp_path):
    # lead time 1: orders at the root (arrive 2027Q2) and at each branch in 2027Q2 (arrive 2027Q3);
    # an order is 0 or 3 pods (minimum order 3, delivery cap 3): without the minimum the high path
    # would take a single pod
    doc = two_paths(write_base(tmp_path))
    doc["supply"][0].update(min_order_pods=3, max_pods_delivered_per_quarter=3)
    doc["quarters"]["discount_rate_per_year"] = 0.1
    p = parse_purchase(doc)
    plan = solve_purchase(p, EXACT, value=False)
    disc = [p.discount(q) for q in range(3)]
    demand = {"low": [20, 20, 20], "high": [20, 30, 45]}
    prob = {"low": 0.6, "high": 0.4}
    price = [10000, 30000]
    best = None
    for root, lo, hi in itertools.product((0, 3), repeat=3):
        total = root * price[0] * disc[0]
        ok = True
        for s, later in (("low", lo), ("high", hi)):
            pods = [2, 2 + root, 2 + root + later]
            cost = later * price[1] * disc[1]
            for q in range(3):
                per_h = _snapshot_cost_per_hour("disaggregated", demand[s][q], pods[q])
                if per_h is None:
                    ok = False
                    break
                cost += per_h * HOURS_PER_QUARTER * disc[q]
            total += prob[s] * cost
        if ok and (best is None or total < best[0] - 1e-6):
            best = (total, (root, lo, hi))
    assert best is not None
    assert plan.expected_cost_usd == pytest.approx(best[0], rel=1e-6)
    orders = _orders_by_scenario(plan)
    got = (orders.get(("low", "2027Q1"), {}).get(("a", "acc"), 0), orders.get(("low", "2027Q2"), {}).get(("a", "acc"), 0),
           orders.get(("high", "2027Q2"), {}).get(("a", "acc"), 0))
    assert got == best[1]
    assert plan.status == "verified"


def test_vss_and_evpi_worked_by_hand(tmp_path):
    # The mean forecast (Q3: 0.6 x 20 + 0.4 x 45 = 30 requests/s, 4 chips, held by the 2 installed pods)
    # orders nothing now, so on the high path it buys the third pod in 2027Q2 at 30,000 instead of
    # 10,000 now: VSS = 0.4 x 30,000 - 10,000 = 2,000 USD. Perfect foresight saves the low path's
    # idle pod: EVPI = 0.6 x 10,000 = 6,000 USD. Chip-hours are the same in every plan.
    plan = solve_purchase(parse_purchase(two_paths(write_base(tmp_path))), EXACT)
    v = plan.value
    assert [(o.order_quarter, o.pods) for o in plan.order_sheet] == [("2027Q1", 1)]
    assert v.mean_forecast_root_orders == []
    assert v.vss_usd == pytest.approx(2000.0, rel=1e-6)
    assert v.evpi_usd == pytest.approx(6000.0, rel=1e-6)
    regret = {s.name: s.regret_usd for s in plan.scenarios}
    assert regret["low"] == pytest.approx(10000.0, rel=1e-6) and regret["high"] == pytest.approx(0.0, abs=1e-6)
    assert v.vss_interval_usd[0] <= v.vss_usd <= v.vss_interval_usd[1]


def test_orders_never_depend_on_a_later_branch(tmp_path):
    # two branchings: 2027Q2 (lo/hi) and 2027Q3 (lo/hi below each): four scenarios; lead time 1
    def node(mult, children=(), name=None, p=None):
        out = {"demand": mult, "children": list(children)}
        if name:
            out["name"], out["probability"] = name, p
        return out

    leaves = lambda m: [node(m, name="lo", p=0.5), node(m * 1.5, name="hi", p=0.5)]  # noqa: E731
    tree = {"kind": "tree", "root": node(1.0, [node(1.0, leaves(1.0), "lo", 0.5), node(1.5, leaves(1.5), "hi", 0.5)])}
    doc = two_paths(write_base(tmp_path), demand=tree)
    doc["supply"][0]["by_quarter"] = {}
    plan = solve_purchase(parse_purchase(doc), SolveOptions(mip_gap=0.0), value=False)
    assert sorted(s.name for s in plan.scenarios) == ["hi/hi", "hi/lo", "lo/hi", "lo/lo"]
    orders = _orders_by_scenario(plan)
    pods = {(s.name, q.quarter): [(r.region, r.chip, r.pods) for r in q.pods_in_service] for s in plan.scenarios for q in s.quarters}
    for a, b in itertools.combinations([s.name for s in plan.scenarios], 2):
        shared = len(next(i for i, (x, y) in enumerate(itertools.zip_longest(a.split("/"), b.split("/"))) if x != y) and a.split("/")[:1] or [])
        # the scenarios have seen the same demand up to 2027Q1 always, and up to 2027Q2 when their first branch agrees
        seen = ["2027Q1"] + (["2027Q2"] if a.split("/")[0] == b.split("/")[0] else [])
        for q in seen:
            assert orders.get((a, q), {}) == orders.get((b, q), {}), (a, b, q)
            assert pods[(a, q)] == pods[(b, q)], (a, b, q)
        assert shared >= 0
    # the plan does adapt: hi/hi needs more pods in 2027Q3 than lo/lo
    assert sum(p for *_, p in pods[("hi/hi", "2027Q3")]) > sum(p for *_, p in pods[("lo/lo", "2027Q3")])


def test_a_probability_zero_branch_changes_nothing(tmp_path):
    base = write_base(tmp_path)
    ref = solve_purchase(parse_purchase(two_paths(base)), EXACT, value=False)
    doc = two_paths(base)
    doc["demand"]["paths"].append({"name": "boom", "probability": 0.0, "growth_per_quarter": 3.0})
    got = solve_purchase(parse_purchase(doc), EXACT, value=False)
    assert got.expected_cost_usd == ref.expected_cost_usd
    assert got.order_sheet == ref.order_sheet and got.contingency == ref.contingency
    assert [s.name for s in got.scenarios] == ["low", "high"]


def test_one_scenario_zero_lead_time_reproduces_the_snapshot_solves(tmp_path):
    # constant price, demand that never falls, orders in service the quarter they are placed:
    # each quarter is the snapshot solve with the previous quarter's pods installed (carried forward).
    # A positive discount rate makes buying later strictly cheaper (undiscounted, buying early ties).
    mode = "disaggregated"
    doc = two_paths(write_base(tmp_path, mode))
    doc["supply"][0].update(lead_time_quarters=0, by_quarter={})
    doc["quarters"]["discount_rate_per_year"] = 0.08
    doc["installed"] = [{"region": "a", "chip": "acc", "pods": 1}]
    doc["demand"] = {"kind": "growth_paths", "paths": [{"name": "only", "probability": 1.0, "growth_per_quarter": 0.5}]}
    p = parse_purchase(doc)
    plan = solve_purchase(p, EXACT, value=False)
    pods, total, bought = 1, 0.0, 0
    for i, (q, rps) in enumerate(zip(plan.scenarios[0].quarters, (20, 30, 45))):
        d = base_data(mode)
        d["regions"]["a"]["peak_rps"] = rps
        d["regions"]["a"]["pods"] = {"acc": {"installed": pods, "available_new": 4}}
        snap = solve(parse_instance(d), SolveOptions(mip_gap=0.0)).plan
        assert snap.status == "verified"
        new = snap.fleet[0].pods_new
        pods = snap.fleet[0].pods_total
        assert q.pods_in_service[0].pods == pods
        assert q.fleet_cost_per_hour_usd == pytest.approx(snap.cost.fleet_cost_per_hour_usd, rel=1e-6)
        total += p.discount(i) * (snap.cost.fleet_cost_per_hour_usd * HOURS_PER_QUARTER + new * 10000)
        bought += new
    assert plan.expected_cost_usd == pytest.approx(total, rel=1e-6)
    assert bought == 2  # one pod for 2027Q1's 20 requests/s, one for 2027Q3's 45


def test_a_longer_lead_time_never_lowers_cost(tmp_path):
    base = write_base(tmp_path)
    costs = []
    for lead in (0, 1):
        doc = two_paths(base)
        doc["supply"][0]["lead_time_quarters"] = lead
        costs.append(solve_purchase(parse_purchase(doc), EXACT, value=False).expected_cost_usd)
    # with lead time 0 the high path buys its third pod in 2027Q3 itself (at the base 10,000 price):
    # the low path never buys; with lead time 1 the hedge is the root's pod
    assert costs[0] < costs[1]


def test_more_supply_never_raises_cost(tmp_path):
    base = write_base(tmp_path)
    costs = []
    for cap in (1, 4):
        doc = two_paths(base)
        doc["supply"][0]["max_pods_delivered_per_quarter"] = cap
        doc["supply"][0]["min_order_pods"] = 0
        doc["demand"]["paths"][1]["growth_per_quarter"] = 1.0  # 80 requests/s in 2027Q3: five pods, two more than one delivery of 1
        doc["policy"] = {"unserved": {"kind": "priced", "usd_per_1m_tokens": 50.0}}
        costs.append(solve_purchase(parse_purchase(doc), EXACT, value=False).expected_cost_usd)
    assert costs[1] < costs[0]


def test_the_verifier_refuses_a_quarter_with_fewer_pods_than_it_runs(tmp_path):
    # the check is wired, not assumed: take the plan's node in 2027Q3 on the high path (3 pods,
    # 6 chips running) and claim one pod fewer in service
    from fleetplan.purchase.solve import _check_node, solve_tree

    p = parse_purchase(two_paths(write_base(tmp_path)))
    sol = solve_tree(p, p.tree, EXACT, None)
    n = p.tree.scenarios["high"][-1]
    assert _check_node(p, sol, n, {})[0] == "verified"
    sol.pods[(n, "a", "acc")] -= 1
    status, found, *_ = _check_node(p, sol, n, {})
    assert status == "violations"
    assert any("pods a/acc" in f for f in found), found


def test_priced_unserved_with_no_pods_costs_the_whole_demand(tmp_path):
    # one quarter, nothing installed, nothing orderable: every request is unserved, priced at
    # 1 USD per 1M tokens of its prompt + output: 20 req/s x 2,200 tokens x 3,600 s x 2,191.5 h / 1e6
    doc = two_paths(write_base(tmp_path), installed=[], supply=[], policy={"unserved": {"kind": "priced", "usd_per_1m_tokens": 1.0}})
    doc["quarters"]["labels"] = ["2027Q1"]
    plan = solve_purchase(parse_purchase(doc), EXACT, value=False)
    q = plan.scenarios[0].quarters[0]
    assert q.unserved_rps == pytest.approx(20.0, rel=1e-6)
    assert plan.expected_cost_usd == pytest.approx(20 * 2200 * 3600 * HOURS_PER_QUARTER / 1e6, rel=5e-6)  # six digits stored
    assert q.plan_status == "shortfall" and plan.status == "verified"
