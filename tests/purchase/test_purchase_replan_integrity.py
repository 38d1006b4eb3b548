"""Issue 39 item 9: ``purchase --fix-orders`` checks that the previous plan is the one
``fleetplan purchase -o`` wrote -- its schema_version, its base instance and its own
integrity record over what it was solved for, its orders per node and its fleets -- before
any of its orders is fixed. An emptied order sheet or an order moved to a later quarter was
accepted (the re-plan fixed nothing: 20,000 USD dearer on the worked example) and the new
plan recorded the unedited plan's hash."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.errors import InputError
from fleetplan.purchase.io import parse_purchase
from fleetplan.purchase.replan import plan_replan
from fleetplan.purchase.solve import solve_purchase
from fleetplan.solvers.base import SolveOptions
from tests.purchase.helpers import base_data, two_paths, write_base

EXACT = SolveOptions(mip_gap=0.0)


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    """The worked example's tree solved once: (problem, the plan as `-o` writes it, read back)."""
    p = parse_purchase(two_paths(write_base(tmp_path_factory.mktemp("integrity"))))
    return p, json.loads(json.dumps(solve_purchase(p, EXACT, value=False).model_dump(mode="json")))


def _refused(p, doc) -> str:
    with pytest.raises(InputError) as e:
        plan_replan(p, doc, "2027Q2", "high", "prev.json")
    assert all(pr.path == "--fix-orders" for pr in e.value.problems)
    return " ".join(pr.render() for pr in e.value.problems)


def test_the_written_plan_passes_and_the_replan_names_it(solved):
    from fleetplan.purchase.result import plan_digest

    p, doc = solved
    assert doc["schema_version"] == 2 and set(doc["integrity"]) >= {"order_sheet", "contingency", "scenarios", "purchase_hash"}
    rp = plan_replan(p, doc, "2027Q2", "high", "prev.json")
    assert rp.fixed == {(0, "a", "acc"): 1}
    again = solve_purchase(p, EXACT, replan=rp)
    # the new plan names the previous plan's content, not only the purchase file both were solved from
    assert again.replan["previous_plan_hash"] == plan_digest(doc) and again.replan["previous_purchase_hash"] == doc["purchase_hash"]


@pytest.mark.parametrize("edit,field", [
    (lambda d: d.update(order_sheet=[]), "order_sheet"),  # emptied: the re-plan fixed no order at the root
    (lambda d: d["order_sheet"][0].update(order_quarter="2027Q2", delivery_quarter="2027Q3"), "order_sheet"),  # moved a quarter later
    (lambda d: d["scenarios"][1]["quarters"][1]["pods_in_service"][0].update(pods=2), "scenarios"),
    (lambda d: d.update(purchase_hash="0" * 64), "purchase_hash"),
    (lambda d: d.update(base_instance_hash="0" * 64), "base_instance_hash"),
    (lambda d: d.pop("integrity"), "integrity"),
])
def test_an_edited_previous_plan_is_refused_naming_the_field(solved, edit, field):
    p, doc = solved
    d = copy.deepcopy(doc)
    edit(d)
    text = _refused(p, d)
    assert field in text and "edited" in text, text


def test_a_schema_version_this_code_does_not_write_is_refused(solved):
    p, doc = solved
    for v in (9, 1, "2"):
        d = copy.deepcopy(doc)
        d["schema_version"] = v
        text = _refused(p, d)
        assert "schema_version" in text and "2" in text, text


def test_a_plan_of_another_base_instance_is_refused(tmp_path, solved):
    # the same purchase file on a base instance whose region is priced otherwise: the previous plan's
    # fleets were sized for another instance
    _p, doc = solved
    base = base_data()
    base["chips"]["acc"]["price_per_chip_hour_usd"] = 2.5
    f = tmp_path / "other-base.yaml"
    f.write_text(yaml.safe_dump(base))
    other = parse_purchase(two_paths(str(f)))
    text = _refused(other, doc)
    assert "base_instance_hash" in text, text


def test_the_cli_refuses_an_emptied_order_sheet_with_exit_2(tmp_path, solved):
    # the reproduction: exit 0 and a plan 20,000 USD dearer that fixed nothing
    _p, doc = solved
    d = copy.deepcopy(doc)
    d["order_sheet"] = []
    prev = tmp_path / "prev.json"
    prev.write_text(json.dumps(d))
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(two_paths(write_base(tmp_path))))
    out = tmp_path / "replan.json"
    r = CliRunner().invoke(app, ["purchase", str(f), "--fix-orders", str(prev), "--now", "2027Q2", "--path", "high", "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert "order_sheet" in " ".join(r.output.split()) and not out.exists()
