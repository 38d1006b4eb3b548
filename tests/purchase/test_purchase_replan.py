"""The rolling re-plan (--fix-orders), per-node workload shifts, the snapshot-built start and
the purchase report, on the tiny two-path tree (issue 18)."""

from __future__ import annotations

import copy
import json

import pyomo.environ as pyo
import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.errors import InputError
from fleetplan.instance.io import bundled_instances
from fleetplan.purchase.io import PurchaseError, load_purchase, parse_purchase
from fleetplan.purchase.model import build_purchase_model
from fleetplan.purchase.replan import plan_replan
from fleetplan.purchase.result import integrity_record, plan_digest
from fleetplan.purchase.solve import mean_workload, solve_purchase
from fleetplan.purchase.start import snapshot_start
from fleetplan.solvers.base import SolveOptions
from tests.purchase.helpers import two_paths, write_base

EXACT = SolveOptions(mip_gap=0.0)


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    """The two-path tree solved exactly once (no EEV/WS): (problem, plan document)."""
    p = parse_purchase(two_paths(write_base(tmp_path_factory.mktemp("replan"))))
    return p, solve_purchase(p, EXACT, value=False).model_dump(mode="json")


def test_fixing_the_root_optimum_reproduces_the_scenario_cost(solved):
    # re-planning at 2027Q2 on the high branch with the root's optimal orders fixed is the
    # recourse of the tree on that branch: the same cost as the plan's high scenario
    p, doc = solved
    rp = plan_replan(p, doc, "2027Q2", "high", "prev.json")
    assert rp.fixed == {(0, "a", "acc"): 1}
    plan = solve_purchase(p, EXACT, replan=rp)
    high = next(s for s in doc["scenarios"] if s["name"] == "high")
    assert plan.expected_cost_usd == pytest.approx(high["cost_usd"], rel=1e-9)
    assert [s.name for s in plan.scenarios] == ["high"]
    assert [(o.node, o.order_quarter, o.pods) for o in plan.fixed_orders] == [("root", "2027Q1", 1)]
    assert plan.replan == {"now": "2027Q2", "path": "high", "previous_purchase_hash": doc["purchase_hash"], "previous_plan_hash": plan_digest(doc)}


def test_fixing_a_suboptimal_order_costs_at_least_as_much(tmp_path, solved):
    # a previous plan that ordered nothing at the root (solved when the root's pod cost 13,000 USD: waiting was
    # cheaper in expectation), re-planned on the file at 10,000: on the high branch the third pod is bought in
    # 2027Q2 at 30,000 instead of 10,000 in 2027Q1 (this test emptied the plan's order sheet before issue 39, an
    # edit --fix-orders now refuses)
    p, doc = solved
    dear = two_paths(write_base(tmp_path))
    dear["supply"][0]["price"]["usd_per_pod"] = 13000
    waited = solve_purchase(parse_purchase(dear), EXACT, value=False).model_dump(mode="json")
    assert waited["order_sheet"] == []
    plan = solve_purchase(p, EXACT, replan=plan_replan(p, waited, "2027Q2", "high", "prev.json"))
    high = next(s for s in doc["scenarios"] if s["name"] == "high")
    assert plan.expected_cost_usd >= high["cost_usd"] - 1e-6
    assert [(o.order_quarter, o.pods) for o in plan.order_sheet] == [("2027Q2", 1)]
    assert plan.expected_cost_usd - high["cost_usd"] == pytest.approx(30000.0 - 10000.0, rel=1e-6)
    assert any("not the one the previous plan was solved for" in n for n in plan.notes)


@pytest.mark.parametrize("edit,args,field", [
    (lambda d: d, ("2027Q5", "high"), "--now"),
    (lambda d: d, ("2027Q2", "mid"), "--path"),
    (lambda d: d.update(quarters=d["quarters"][:2]), ("2027Q2", "high"), "--fix-orders"),
    (lambda d: d.pop("scenarios"), ("2027Q2", "high"), "--fix-orders"),
    (lambda d: [q.update(node="other") for s in d["scenarios"] for q in s["quarters"]], ("2027Q2", "high"), "--path"),
])
def test_inconsistent_replan_inputs_name_the_option(solved, edit, args, field):
    p, doc = solved
    d = copy.deepcopy(doc)
    edit(d)
    d["integrity"] = integrity_record(d)  # as if re-sealed after the edit: the checks behind the integrity record
    with pytest.raises(InputError) as e:
        plan_replan(p, d, *args, "prev.json")
    assert e.value.problems[0].path == field


def test_now_without_fix_orders_is_exit_2(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(two_paths(write_base(tmp_path))))
    r = CliRunner().invoke(app, ["purchase", str(f), "--now", "2027Q2"])
    assert r.exit_code == 2 and "--fix-orders" in r.output


def _shifted_tree(base: str, shift: dict) -> dict:
    return two_paths(base, demand={"kind": "tree", "root": {"demand": 1.0, "children": [
        {"name": "new", "probability": 0.5, "demand": 1.0, "workload": shift, "children": [{"demand": 1.0}]},
        {"name": "old", "probability": 0.5, "demand": 1.0, "children": [{"demand": 1.0}]}]}})


def test_a_node_shift_reaches_its_blocks_and_its_descendants(tmp_path):
    p = parse_purchase(_shifted_tree(write_base(tmp_path), {"output_tokens": 123.0, "prefix_hit_rate": 0.5}))
    pm = build_purchase_model(p)
    by_label = {(n.quarter, n.label): n.id for n in p.tree.nodes}
    base_out = p.base.workload.output_tokens
    assert pm.data[by_label[(1, "new")]].p_output_tokens == 123.0 and pm.data[by_label[(2, "new/b1")]].p_output_tokens == 123.0
    assert pm.data[by_label[(1, "old")]].p_output_tokens == base_out and pm.data[0].p_output_tokens == base_out
    # the mean forecast's quarter-1 workload: equal demand and probability, so the plain means
    at = [n for n in p.tree.nodes if n.quarter == 1]
    mw = mean_workload(at, p.base.workload)
    assert mw["output_tokens"] == pytest.approx((123.0 + base_out) / 2)
    assert mw["prefix_hit_rate"] == pytest.approx((0.5 + p.base.workload.prefix_hit_rate) / 2)
    assert sum(b["share"] for b in mw["input_mix"]) == pytest.approx(1.0)


def test_an_invalid_shift_is_named_at_the_node(tmp_path):
    with pytest.raises(PurchaseError) as e:
        parse_purchase(_shifted_tree(write_base(tmp_path), {"input_mix": [{"share": 0.5, "tokens": 100}]}))
    assert any(pr.path == "demand.root.children.0.workload" for pr in e.value.problems)


def test_the_snapshot_start_is_a_feasible_plan(tmp_path):
    # every constraint of the tree holds at the start's values, and its orders are non-anticipative
    # by construction (one value per node); HiGHS is offered a plan, not a guess
    p = parse_purchase(two_paths(write_base(tmp_path)))
    pm = build_purchase_model(p)
    st = snapshot_start(p, pm, EXACT, None)
    assert st.complete and st.snapshots >= 1
    m = pm.m
    for c in m.component_data_objects(pyo.Constraint, active=True):
        body = pyo.value(c.body)
        assert c.lower is None or body >= pyo.value(c.lower) - 1e-6, c.name
        assert c.upper is None or body <= pyo.value(c.upper) + 1e-6, c.name
    # the high path needs a third pod by 2027Q3: the start orders it (at the root or in 2027Q2 on the high branch)
    high = p.tree.scenarios["high"]
    assert sum(v for (n, _r, _k), v in st.orders.items() if n in high) >= 1


def test_purchase_report_files(solved, tmp_path):
    from fleetplan.cli.common import write_atomic
    from fleetplan.purchase.report import write_report
    from fleetplan.purchase.result import PurchasePlan

    _p, doc = solved
    page = write_report(PurchasePlan.model_validate(doc), tmp_path / "rep", write_atomic)
    text = page.read_text()
    assert "## Order sheet: commit now (2027Q1)" in text and "| 2027Q1 | 2027Q2 | a | acc | 1 |" in text
    for name in ("fan", "orders", "costs"):
        assert (tmp_path / "rep" / "figures" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_fan_charts_legend_hides_no_panel(solved):
    # the legend sat inside the first region's axes and covered its capacity lines (newcomer trial)
    from fleetplan.purchase.report import fig_fan
    from fleetplan.purchase.result import PurchasePlan
    from fleetplan.report.figures import _renderer

    from fleetplan.purchase.report import fig_costs, fig_orders

    plan = PurchasePlan.model_validate(solved[1])
    for draw in (fig_fan, fig_orders, fig_costs):  # trial 6: the orders' legend covered the last bars of a 40-quarter file
        fig = draw(plan)
        r = _renderer(fig)
        legends = [leg for leg in fig.legends] + [a.get_legend() for a in fig.axes if a.get_legend() is not None]
        assert legends, draw.__name__
        for leg in legends:
            box = leg.get_window_extent(r)
            assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1), draw.__name__  # on the page
            for ax in fig.axes:
                assert not box.overlaps(ax.get_window_extent(r)), f"{draw.__name__}: the legend overlaps a panel"


def test_the_bundled_purchase_example_loads_and_is_not_an_instance():
    assert "gemini-ironwood-2027" not in bundled_instances()
    p = load_purchase("gemini-ironwood-2027")
    assert len(p.labels) == 8 and len(p.tree.scenarios) == 9
    assert p.installed[("us-east", "trillium")][2] > 0 and p.installed[("us-east", "trillium")][3] == 0  # retires in 2027Q4
    assert {t.delivery - t.quarter for t in p.orders} == {2}


def test_a_root_no_fleet_can_serve_ends_the_solve_naming_it(tmp_path):
    # the root quarter at 3x demand with the 2 installed pods and nothing delivered before 2027Q2:
    # the root's snapshot is infeasible at its pod bound, so the tree is (the 2027 exploration
    # tree's failure: HiGHS searched 900 s on the tree without proving it)
    from fleetplan.purchase.solve import _unservable_nodes, solve_tree

    p = parse_purchase(two_paths(write_base(tmp_path), demand={"kind": "growth_paths", "start": 3.0, "paths": [
        {"name": "low", "probability": 0.6, "growth_per_quarter": 0.0}, {"name": "high", "probability": 0.4, "growth_per_quarter": 0.5}]}))
    sol = solve_tree(p, p.tree, EXACT, None, start_from_snapshots=True)
    assert sol.result.termination == "infeasible" and 0 in sol.unservable
    msg = _unservable_nodes(p, p.tree, sol.unservable)
    assert "cannot be served in 2027Q1" in msg and "2 acc in a" in msg


@pytest.mark.parametrize("file_edit,plan_edit,words", [
    # the file's lead time changed: the root's order (delivered 2027Q2) would have moved to 2027Q3
    (lambda f: f["supply"][0].update(lead_time_quarters=2), lambda d: d, "an order placed does not move"),
    # the file's delivery cap is below the order already placed
    (lambda f: f["supply"][0].update(max_pods_delivered_per_quarter=0), lambda d: d, "above this file's delivery cap"),
    # an edited plan: a negative order (was a Pyomo warning, then exit 3 'the realised demand outran them')
    (lambda f: f, lambda d: d["order_sheet"][0].update(pods=-3), "at least 0"),
    # trial 6: the file's price of the order already placed changed (it was charged the new price silently)
    (lambda f: f["supply"][0]["price"].update(usd_per_pod=50000), lambda d: d, "an order placed keeps its price"),
    # trial 6: edited to a fraction, a boolean or a string (taken as 1, 1 and 2 pods)
    (lambda f: f, lambda d: d["order_sheet"][0].update(pods=1.9), "whole number"),
    (lambda f: f, lambda d: d["order_sheet"][0].update(pods=True), "whole number"),
    (lambda f: f, lambda d: d["order_sheet"][0].update(pods="2"), "whole number"),
    # trial 7: a row given twice was merged silently
    (lambda f: f, lambda d: d["order_sheet"].append(dict(d["order_sheet"][0])), "appears in more than one row"),
    # trial 7: the same total on other terms -- the capital pod made a one-quarter commitment of 10,000 USD -- moved when it leaves
    (lambda f: f["supply"][0].update(price={"kind": "committed", "usd_per_chip_hour": 10000 / (2 * 2191.5), "term_quarters": 1}),
     lambda d: d, "an order placed keeps its terms"),
    # trial 7: a minimum order raised above the order placed (was exit 3)
    (lambda f: f["supply"][0].update(min_order_pods=2), lambda d: d, "below this file's minimum order"),
])
def test_earlier_orders_the_file_cannot_keep_are_exit_2_at_fix_orders(tmp_path, solved, file_edit, plan_edit, words):
    # newcomer trial 5: these were exit 3, or silently re-dated the delivery of orders already placed
    _p, doc = solved
    d = copy.deepcopy(doc)
    plan_edit(d)
    if json.dumps(d, sort_keys=True) != json.dumps(doc, sort_keys=True):  # an edited plan (true == 1 in Python, not in JSON) is refused by its integrity record first (issue 39) ...
        r = _replan_cli(tmp_path, d, two_paths(write_base(tmp_path)))
        assert r.exit_code == 2 and "does not match its integrity record" in " ".join(r.output.split()), r.output
        d["integrity"] = integrity_record(d)  # ... and, re-sealed, by the checks of the orders themselves
    f = two_paths(write_base(tmp_path))
    file_edit(f)
    r = _replan_cli(tmp_path, d, f)
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    assert "--fix-orders" in out and words in out, out


def _replan_cli(tmp_path, d: dict, f: dict):
    prev = tmp_path / "prev.json"
    prev.write_text(json.dumps(d))
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(f))
    return CliRunner().invoke(app, ["purchase", str(path), "--fix-orders", str(prev), "--now", "2027Q2", "--path", "high"])


def test_a_replan_before_the_previous_replans_now_is_exit_2(tmp_path, solved):
    # trial 6: a re-plan at 2027Q2 fixed the root's order; re-planning it again at 2027Q1 freed that order ('nothing to order now')
    p, doc = solved
    again = solve_purchase(p, EXACT, replan=plan_replan(p, doc, "2027Q2", "high", "prev.json")).model_dump(mode="json")
    with pytest.raises(InputError) as e:
        plan_replan(p, again, "2027Q1", None, "replan.json")
    assert e.value.problems[0].path == "--now" and "a re-plan at 2027Q2" in e.value.problems[0].message
    assert plan_replan(p, again, "2027Q3", "high", "replan.json").now == "2027Q3"  # at or after its now it goes on
