"""Issue 39 item 5: a CVaR objective is compared with the risk-neutral plan. ``--risk
cvar:0.9:0.5`` on the bundled tree ran 10 minutes and returned the risk-neutral orders without
saying so; the plan now says whether the risk term changed any order and what CVaR the
risk-neutral plan already has, and the pod-floor decomposition solves a CVaR tree (the master
minimises the risk objective; the floors and cuts are the same) instead of HiGHS searching the
whole tree until the time limit."""

from __future__ import annotations

import copy

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.purchase import solve as purchase_solve
from fleetplan.purchase.floors import applies
from fleetplan.purchase.io import parse_purchase, with_risk
from fleetplan.purchase.model import cvar
from fleetplan.purchase.sheet import neutral_words
from fleetplan.purchase.solve import solve_purchase, solve_tree
from fleetplan.solvers.base import SolveOptions
from tests.purchase.helpers import two_paths, write_base
from tests.purchase.test_purchase_floors import two_region_base, tree_doc

EXACT = SolveOptions(mip_gap=0.0)
TIGHT = SolveOptions(mip_gap=1e-6)


def _cvar_of(plan, alpha: float) -> float:
    return cvar([s.cost_usd for s in plan.scenarios], [s.probability for s in plan.scenarios], alpha)


def test_a_risk_term_that_changes_no_order_says_so(tmp_path):
    # the worked example: the expectation plan already buys the root's pod, which also serves the high
    # path's tail; the CVaR term changes nothing, and the plan says so with the neutral plan's CVaR
    doc = two_paths(write_base(tmp_path))
    neutral = solve_purchase(parse_purchase(copy.deepcopy(doc)), EXACT, value=False)
    averse = solve_purchase(with_risk(parse_purchase(copy.deepcopy(doc)), "cvar:0.9:0.5"), EXACT, value=False)
    n = averse.risk.neutral
    assert n is not None and n.same_orders and n.orders_changed == 0
    assert n.expected_cost_usd == pytest.approx(neutral.expected_cost_usd, rel=1e-9)
    assert n.cvar_usd == pytest.approx(_cvar_of(neutral, 0.9), rel=1e-9)
    assert n.objective_usd == pytest.approx(0.5 * neutral.expected_cost_usd + 0.5 * _cvar_of(neutral, 0.9), rel=1e-9)
    assert averse.risk.objective_usd == pytest.approx(n.objective_usd, rel=1e-9)
    assert "changed no order" in neutral_words(averse.risk)
    # and on the command line, in the headline
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(app, ["purchase", str(f), "--no-value", "--risk", "cvar:0.9:0.5"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "the CVaR term changed no order" in text and f"{n.cvar_usd:,.0f}" in text, text


def test_a_risk_term_that_changes_orders_says_what_it_bought(tmp_path):
    # the root pod at 13,000: the expectation waits (0.4 x 30,000 = 12,000 < 13,000), CVaR_0.5 buys now
    doc = two_paths(write_base(tmp_path))
    doc["supply"][0]["price"] = {"kind": "capital", "usd_per_pod": 13000}
    neutral = solve_purchase(parse_purchase(copy.deepcopy(doc)), EXACT, value=False)
    averse = solve_purchase(with_risk(parse_purchase(copy.deepcopy(doc)), "cvar:0.5:1"), EXACT, value=False)
    n = averse.risk.neutral
    assert not n.same_orders and n.orders_changed >= 1
    assert n.cvar_usd == pytest.approx(_cvar_of(neutral, 0.5), rel=1e-9)
    assert n.expected_cost_usd == pytest.approx(neutral.expected_cost_usd, rel=1e-9)
    assert averse.risk.cvar_usd < n.cvar_usd - 1.0 and averse.risk.expected_cost_usd > n.expected_cost_usd + 1.0
    words = neutral_words(averse.risk)
    assert f"changed {n.orders_changed} order" in words and f"CVaR_0.5 {n.cvar_usd:,.0f} -> {averse.risk.cvar_usd:,.0f} USD" in words


def test_the_decomposition_applies_to_a_cvar_objective(tmp_path):
    doc = {**tree_doc(two_region_base(tmp_path)), "policy": {"risk": {"kind": "cvar", "alpha": 0.9, "weight": 0.5}}}
    assert applies(parse_purchase(doc)) is None


@pytest.mark.parametrize("risk,base_over,over", [
    ("cvar:0.9:0.5", {}, {}),
    ("cvar:0.5:1", {}, {"prices": (13000, 30000)}),  # the tail pays for the root's pods
    ("cvar:0.6:0.7", {"old_usd_per_chip_hour": 8.0}, {"prices": (3000, 6000)}),  # with cost cuts (the run-cost trade)
])
def test_the_decomposition_finds_the_exact_cvar_optimum(tmp_path, risk, base_over, over):
    p = with_risk(parse_purchase(tree_doc(two_region_base(tmp_path, **base_over), **over)), risk)
    ef = solve_tree(p, p.tree, SolveOptions(mip_gap=1e-9), None, start_from_snapshots=False)
    fl = solve_tree(p, p.tree, TIGHT, None, start_from_snapshots=True)
    assert fl.floor is not None and fl.floor.complete, fl.floor
    opt = ef.result.objective
    assert fl.result.objective == pytest.approx(opt, rel=1e-6)
    assert fl.floor.lower_usd <= opt * (1 + 1e-9) <= fl.floor.upper_usd * (1 + 2e-9)
    # the plan's risk objective recomputed from its scenario costs is the objective reported
    tree = p.tree
    costs = [fl.scenario_cost(ids) for ids in tree.scenarios.values()]
    probs = [tree.scenario_probability(s) for s in tree.scenarios]
    r = p.spec.policy.risk
    mine = (1 - r.weight) * sum(c * q for c, q in zip(costs, probs)) + r.weight * cvar(costs, probs, r.alpha)
    assert fl.result.objective == pytest.approx(mine, rel=1e-6)


@pytest.mark.parametrize("risk,over", [("cvar:0.9:0.5", {}), ("cvar:0.5:1", {"prices": (13000, 30000)})])
def test_a_large_cvar_tree_is_solved_by_the_decomposition_from_the_neutral_plan(tmp_path, monkeypatch, risk, over):
    # the bundled tree's path (a tree past SNAPSHOT_START_INTEGERS): the neutral plan by the decomposition,
    # then the risk objective's decomposition from it, its floors and fleets cached, no HiGHS solve of the tree
    monkeypatch.setattr(purchase_solve, "SNAPSHOT_START_INTEGERS", 0)
    doc = tree_doc(two_region_base(tmp_path), **over)
    p = with_risk(parse_purchase(doc), risk)
    plan = solve_purchase(p, TIGHT, value=False)
    ef = solve_purchase(p, EXACT, value=False, tree_solver=lambda *a, **k: solve_tree(*a, **{**k, "start_from_snapshots": False}))
    assert plan.status == "verified" and plan.solve.solves == 0
    assert plan.risk.objective_usd == pytest.approx(ef.risk.objective_usd, rel=1e-6)
    assert plan.risk.neutral is not None and plan.risk.neutral.same_orders == (plan.risk.neutral.orders_changed == 0)
    assert any(x.startswith("pod-floor decomposition (from the risk-neutral plan") for x in plan.notes)
