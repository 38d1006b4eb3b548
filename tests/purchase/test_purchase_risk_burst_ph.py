"""Issue 18: the CVaR objective, burst capacity and progressive hedging (mpi-sppy) on the
tiny two-path tree of tests/purchase/helpers.py (one region, one chip, three quarters)."""

from __future__ import annotations

from dataclasses import replace

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleetplan.errors import OptionError
from fleetplan.purchase.io import HOURS_PER_QUARTER, PurchaseError, parse_purchase, with_risk
from fleetplan.purchase.model import cvar
from fleetplan.purchase.solve import solve_purchase
from fleetplan.solvers.base import SolveOptions
from tests.purchase.helpers import two_paths, write_base

EXACT = SolveOptions(mip_gap=0.0)


def test_cvar_of_a_discrete_distribution():
    # four equally likely costs: the worst 25% is the 10 alone; the worst 50% the mean of 3 and 10;
    # alpha between atoms takes a fraction of the next atom: worst 40% = (0.25 x 10 + 0.15 x 3) / 0.4
    costs, probs = [1.0, 2.0, 3.0, 10.0], [0.25] * 4
    assert cvar(costs, probs, 0.75) == pytest.approx(10.0)
    assert cvar(costs, probs, 0.5) == pytest.approx((3 + 10) / 2)
    assert cvar(costs, probs, 0.6) == pytest.approx((0.25 * 10 + 0.15 * 3) / 0.4)
    assert cvar(costs, probs, 0.0) == pytest.approx(sum(costs) / 4)


def test_cvar_trades_expectation_for_the_tail(tmp_path):
    # the root pod at 13,000 against 30,000 later on the high path (p 0.4): in expectation waiting
    # is cheaper (0.4 x 30,000 = 12,000 < 13,000); the worst half of the outcomes is mostly the high
    # path, so CVaR_0.5 buys now
    doc = two_paths(write_base(tmp_path))
    doc["supply"][0]["price"] = {"kind": "capital", "usd_per_pod": 13000}
    neutral = solve_purchase(parse_purchase(doc), EXACT, value=False)
    averse = solve_purchase(with_risk(parse_purchase(doc), "cvar:0.5:1"), EXACT, value=False)
    assert [o.pods for o in neutral.order_sheet] == [] and [o.pods for o in averse.order_sheet] == [1]
    probs = [s.probability for s in neutral.scenarios]
    neutral_cvar = cvar([s.cost_usd for s in neutral.scenarios], probs, 0.5)
    r = averse.risk
    assert r.cvar_usd < neutral_cvar - 1.0  # the tail is cheaper ...
    assert r.expected_cost_usd > neutral.expected_cost_usd + 1.0  # ... for a higher expectation
    # weight 1: the model's Rockafellar-Uryasev linearisation equals the plan's CVaR computed from its scenarios
    assert r.objective_usd == pytest.approx(r.cvar_usd, rel=1e-6)
    assert r.expected_cost_usd == pytest.approx(sum(s.probability * s.cost_usd for s in averse.scenarios), rel=1e-6)
    assert averse.status == "verified"


def test_risk_option_is_checked():
    with pytest.raises(OptionError, match="--risk"):
        with_risk(None, "cvar:1.0:0.5")  # alpha must be below 1
    with pytest.raises(OptionError, match="--risk"):
        with_risk(None, "var:0.9")


def test_burst_replaces_the_hedge_and_is_verified(tmp_path):
    # a burst pod costs 2 chips x 2,191.5 h x 1 USD premium = 4,383 USD for a quarter: on the high path
    # renting one in 2027Q3 beats both the root's pod (10,000 for sure) and the 30,000 order in 2027Q2
    base = write_base(tmp_path)
    ref = solve_purchase(parse_purchase(two_paths(base)), EXACT, value=False)
    doc = two_paths(base, policy={"burst": [{"chip": "acc", "premium_usd_per_chip_hour": 1.0, "max_pods_per_quarter": 2}]})
    got = solve_purchase(parse_purchase(doc), EXACT, value=False)
    assert got.order_sheet == [] and got.contingency == []
    used = {(s.name, q.quarter): (sum(b.pods for b in q.burst), q.burst_cost_usd) for s in got.scenarios for q in s.quarters}
    premium = 2 * HOURS_PER_QUARTER * 1.0
    assert used[("high", "2027Q3")] == (1, pytest.approx(premium))
    assert all(v == (0, 0.0) for k, v in used.items() if k != ("high", "2027Q3"))
    # the chip-hours are the same fleet's: only the root pod's price and the premium differ
    assert got.expected_cost_usd == pytest.approx(ref.expected_cost_usd - 10000 + 0.4 * premium, rel=1e-6)
    assert got.status == "verified"  # the verifier saw the burst pod as in service


def test_burst_names_unknown_chips(tmp_path):
    doc = two_paths(write_base(tmp_path), policy={"burst": [{"chip": "nope", "premium_usd_per_chip_hour": 1.0, "max_pods_per_quarter": 1}]})
    with pytest.raises(PurchaseError, match="policy.burst.0.chip"):
        parse_purchase(doc)


@pytest.mark.skipif(importlib.util.find_spec("mpisppy") is None, reason="mpi-sppy not installed (the 'stochastic' extra)")
def test_progressive_hedging_matches_the_deterministic_equivalent(tmp_path):
    # in this process (no mpiexec): PH hub alone, its bound the trivial (wait-and-see) bound
    from fleetplan.purchase.ph import solve_tree_ph

    p = parse_purchase(two_paths(write_base(tmp_path)))
    ef = solve_purchase(p, EXACT, value=False)
    ph = solve_purchase(p, EXACT, value=False, tree_solver=solve_tree_ph)
    assert ph.expected_cost_usd == pytest.approx(ef.expected_cost_usd, rel=1e-6)
    assert ph.order_sheet == ef.order_sheet and ph.contingency == ef.contingency
    d = ph.decomposition
    # the trivial bound is the wait-and-see value: RP - EVPI (6,000 USD: test_vss_and_evpi_worked_by_hand)
    assert d.outer_bound_usd == pytest.approx(ef.expected_cost_usd - 6000.0, rel=1e-6)
    assert d.gap == pytest.approx(6000.0 / ef.expected_cost_usd, rel=1e-4)
    assert d.processes == 1 and ph.status == "verified"
    # a 10.6% gap above --mip-gap 0 is not 'optimal' (the fixed-orders tree's termination was reported); PH converged here
    assert ph.solve.termination == "ph_converged" and d.convergence < d.convthresh
    # with no time limit nothing is cut by the clock; with one, PH's subproblem solves each get a share of the time
    # left (a plan that depends on the machine's speed), and the plan says so (issue 41)
    assert ph.solve.clock_limited is None
    timed = solve_purchase(p, replace(EXACT, time_limit_s=600.0), value=False, tree_solver=solve_tree_ph)
    assert "progressive hedging" in (timed.solve.clock_limited or "") and any(n.startswith("NOT REPRODUCIBLE") for n in timed.notes)


@pytest.mark.parametrize("args, words", [(["--risk", "cvar:1.5:0.5"], "--risk"), (["--method", "bnb"], "--method")])
def test_bad_risk_or_method_is_exit_2(tmp_path, args, words):
    from typer.testing import CliRunner

    from fleetplan.cli.app import app

    f = tmp_path / "p.yaml"
    f.write_text(__import__("yaml").safe_dump(two_paths(write_base(tmp_path))))
    r = CliRunner().invoke(app, ["purchase", str(f), *args])
    assert r.exit_code == 2 and words in r.output, r.output


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or shutil.which("mpiexec") is None, reason="no mpi4py / mpiexec (the 'stochastic' extra)")
def test_ph_under_mpiexec_two_processes_closes_the_gap(tmp_path):
    # two processes: the PH hub and mpi-sppy's Lagrangian bound spoke; on the worked example the
    # Lagrangian bound reaches the optimum (the trivial bound alone is 6,000 USD below it)
    f = tmp_path / "p.yaml"
    f.write_text(__import__("yaml").safe_dump(two_paths(write_base(tmp_path))))
    out = tmp_path / "plan.json"
    r = subprocess.run(["mpiexec", "-n", "2", str(Path(sys.executable).parent / "fleetplan"), "purchase", str(f), "--method", "ph", "--no-value",
                        "--mip-gap", "0", "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    plan = json.loads(out.read_text())
    d = plan["decomposition"]
    assert d["processes"] == 2 and d["cylinders"] == ["PH hub", "Lagrangian bound"]
    assert d["outer_bound_usd"] == pytest.approx(plan["expected_cost_usd"], rel=1e-6) and d["gap"] == pytest.approx(0.0, abs=1e-6)


def test_replan_keeps_the_cvar_objective_and_burst(tmp_path):
    # merge of i18ex (--fix-orders) and i18ph (risk, burst): re-planning at 2027Q2 on the high branch
    # with the previous CVaR + burst plan's root orders fixed is that plan's recourse on the branch,
    # so it costs the high scenario's cost; one scenario left: its CVaR is its expectation
    from fleetplan.purchase.replan import plan_replan

    doc = two_paths(write_base(tmp_path), policy={"burst": [{"chip": "acc", "premium_usd_per_chip_hour": 1.0, "max_pods_per_quarter": 2}]})
    p = with_risk(parse_purchase(doc), "cvar:0.5:1")
    prev = solve_purchase(p, EXACT, value=False)
    again = solve_purchase(p, EXACT, replan=plan_replan(p, prev.model_dump(mode="json"), "2027Q2", "high", "prev.json"))
    high = next(s for s in prev.scenarios if s.name == "high")
    assert again.expected_cost_usd == pytest.approx(high.cost_usd, rel=1e-9)
    assert again.risk is not None and again.risk.cvar_usd == pytest.approx(again.expected_cost_usd, rel=1e-9)
    burst = {q.quarter: sum(b.pods for b in q.burst) for q in again.scenarios[0].quarters}
    assert burst == {q.quarter: sum(b.pods for b in q.burst) for q in high.quarters}
    assert again.status == "verified" and again.replan["path"] == "high"


@pytest.mark.skipif(importlib.util.find_spec("mpisppy") is None, reason="mpi-sppy not installed (the 'stochastic' extra)")
def test_ph_replan_fixes_the_earlier_orders_in_every_path(tmp_path):
    # a 4-quarter tree branching in 2027Q2 and 2027Q3; a previous plan that ordered nothing at the root,
    # re-planned at 2027Q2 on high (two scenarios below it): PH, with the root's order fixed at 0 in each
    # scenario's path model, reaches the EF re-plan's cost and orders
    from fleetplan.purchase.ph import solve_tree_ph
    from fleetplan.purchase.replan import plan_replan
    from fleetplan.purchase.result import integrity_record

    doc = two_paths(write_base(tmp_path), quarters={"labels": ["2027Q1", "2027Q2", "2027Q3", "2027Q4"], "discount_rate_per_year": 0.0},
                    demand={"kind": "growth_paths", "branch_at": ["2027Q2", "2027Q3"],
                            "paths": [{"name": "low", "probability": 0.6, "growth_per_quarter": 0.0},
                                      {"name": "high", "probability": 0.4, "growth_per_quarter": 0.5}]})
    doc["supply"][0]["max_pods_delivered_per_quarter"] = 8
    p = parse_purchase(doc)
    prev = solve_purchase(p, EXACT, value=False).model_dump(mode="json")
    assert prev["order_sheet"], "the root orders a pod: fixing none is a real constraint"
    prev["order_sheet"] = []
    prev["integrity"] = integrity_record(prev)  # re-sealed: an edited plan is refused by --fix-orders (issue 39)
    rp = plan_replan(p, prev, "2027Q2", "high", "prev.json")
    assert rp.fixed == {(0, "a", "acc"): 0} and len(rp.tree.scenarios) == 2
    ef = solve_purchase(p, EXACT, replan=rp)
    ph = solve_purchase(p, EXACT, replan=rp, tree_solver=solve_tree_ph)
    assert ph.decomposition is not None and ph.decomposition.processes == 1
    assert ph.expected_cost_usd == pytest.approx(ef.expected_cost_usd, rel=1e-6)
    assert ph.order_sheet == ef.order_sheet and ph.replan == ef.replan and ph.status == "verified"


def test_a_ph_bound_above_the_incumbent_claims_no_gap():
    """Merge review of i18ph: with --risk cvar under mpiexec -n 2 the Lagrangian bound came
    out above the incumbent (112,606 vs 83,667.6 USD) and the gap was clamped to a proved 0%."""
    from fleetplan.purchase.ph import ph_bound_and_gap

    bound, gap, note = ph_bound_and_gap(83_667.6, 112_606.0)
    assert bound is None and gap is None and "bounds nothing" in note
    bound, gap, note = ph_bound_and_gap(100.0, 90.0)
    assert bound == 90.0 and abs(gap - 0.1) < 1e-12 and note is None
    assert ph_bound_and_gap(100.0, float("inf")) == (None, None, None)
    assert ph_bound_and_gap(None, 90.0) == (90.0, None, None)
