"""When the mean-forecast plan re-optimised on the tree (EEV) is cheaper than the recourse solve's
plan (which stopped at its MIP gap: VSS came out at -537,260 USD on the bundled example), the
purchase plan is the EEV's, verified, with the recourse solve's bound, and VSS is 0."""

from __future__ import annotations

import copy

import pytest

from fleetplan.purchase.io import parse_purchase
from fleetplan.purchase.solve import solve_purchase, solve_tree
from tests.purchase.test_purchase_floors import EXACT, tree_doc, two_region_base


def test_a_cheaper_eev_plan_is_adopted_and_verified(tmp_path):
    doc = tree_doc(two_region_base(tmp_path))
    calls = []

    def wasteful(p, tree, opts, deadline, fixed_orders=None, cache=None, **k):
        # the recourse solve stands in for one that stopped at a poor incumbent: its root orders are forced wasteful
        if fixed_orders is None:
            calls.append("rp")
            fixed_orders = {("a", "acc"): 2, ("b", "acc"): 2}
        else:
            calls.append("eev")
        return solve_tree(p, tree, opts, deadline, fixed_orders, cache, fixed_node_orders=k.get("fixed_node_orders"))

    p = parse_purchase(copy.deepcopy(doc))
    bad = wasteful(p, p.tree, EXACT, None)
    best = solve_purchase(parse_purchase(copy.deepcopy(doc)), EXACT, value=True)
    plan = solve_purchase(parse_purchase(copy.deepcopy(doc)), EXACT, value=True, tree_solver=wasteful)
    assert calls[-2:] == ["rp", "eev"]
    assert bad.result.objective > best.expected_cost_usd * (1 + 1e-6), "the forced orders must cost more"
    # the EEV's plan (here the true optimum: the mean forecast's root orders are optimal on this tree) is the answer
    assert plan.expected_cost_usd == pytest.approx(best.value.eev.objective_usd, rel=1e-6)
    assert plan.expected_cost_usd < bad.result.objective
    assert plan.status == "verified" and all(q.plan_status == "verified" for s in plan.scenarios for q in s.quarters)
    assert [(o.region, o.pods) for o in plan.order_sheet] == [(o.region, o.pods) for o in best.value.mean_forecast_root_orders]
    assert plan.solve.bound_usd == pytest.approx(bad.result.bound, rel=1e-5)  # the recourse solve's bound, not the EEV's
    assert plan.value.vss_usd == 0 and plan.value.rp.objective_usd == pytest.approx(plan.expected_cost_usd)
    lo, hi = plan.value.vss_interval_usd  # (EEV's own bound - RP, EEV - the RP's bound): the true VSS lies in it
    assert lo <= 0 and hi == pytest.approx(plan.expected_cost_usd - bad.result.bound, abs=1.0)
    assert any("the plan is the mean-forecast plan's root orders" in n for n in plan.notes)
    # scenario costs are the adopted plan's
    total = sum(s.probability * s.cost_usd for s in plan.scenarios)
    assert total == pytest.approx(plan.expected_cost_usd, rel=1e-5)


def test_an_adopted_plans_solve_figures_are_the_recourse_solves(tmp_path, monkeypatch):
    # the bound is the recourse solve's, so the pod-floor figures beside it must be too (they described the EEV tree's
    # decomposition, with the root orders fixed, whose lower bound bounds nothing of the tree)
    from fleetplan.purchase import solve as purchase_solve

    monkeypatch.setattr(purchase_solve, "SNAPSHOT_START_INTEGERS", 0)  # through the decomposition
    doc = tree_doc(two_region_base(tmp_path))
    got = {}

    def wasteful(p, tree, opts, deadline, fixed_orders=None, cache=None, **k):
        kind = "eev" if fixed_orders is not None else "rp"
        if fixed_orders is None:
            fixed_orders = {("a", "acc"): 2, ("b", "acc"): 2}
        sol = solve_tree(p, tree, opts, deadline, fixed_orders, cache, fixed_node_orders=k.get("fixed_node_orders"))
        got.setdefault(kind, sol)
        return sol

    plan = solve_purchase(parse_purchase(copy.deepcopy(doc)), EXACT, value=True, tree_solver=wasteful)
    rp, eev = got["rp"], got["eev"]
    assert any("the plan is the mean-forecast plan's root orders" in n for n in plan.notes)
    assert rp.floor is not None and eev.floor is not None
    f = plan.solve.pod_floors
    assert f.lower_usd == pytest.approx(rp.floor.lower_usd, rel=1e-5) and f.upper_usd == pytest.approx(rp.floor.upper_usd, rel=1e-5)
    assert f.upper_usd > plan.solve.objective_usd  # the recourse plan, which the EEV's beat
    assert plan.solve.bound_usd == pytest.approx(f.lower_usd, rel=1e-5) and plan.solve.solves == rp.solves
    assert plan.value.rp == plan.solve  # the value of information's RP is the plan's solve, figure for figure
