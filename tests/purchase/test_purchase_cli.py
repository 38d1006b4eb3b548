"""``fleetplan purchase`` on the command line: bad input is exit 2 naming the field, an
unservable hard tree is exit 3, -o is atomic and byte-identical (issue 18)."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from tests.purchase.helpers import two_paths, write_base


def _run(tmp_path, doc, *args):
    f = tmp_path / "purchase.yaml"
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    return CliRunner().invoke(app, ["purchase", str(f), *args])


def _bad(doc):
    doc["demand"]["paths"][0]["probability"] = 0.5
    return "demand.paths", "sum to 1"


def _lead(doc):
    doc["supply"][0]["lead_time_quarters"] = 3
    return "supply.0.lead_time_quarters", "past the horizon"


def _quarter_lead(doc):
    # issue 39 item 14: a per-quarter lead time past the horizon was accepted (exit 0) where the same value at the
    # supply level is exit 2; an order placed in 2027Q2 with a lead time of 9 quarters arrives in 2029Q3
    doc["supply"][0]["by_quarter"]["2027Q2"]["lead_time_quarters"] = 9
    return "supply.0.by_quarter.2027Q2.lead_time_quarters", "past the horizon"


def _orderable_late(doc):
    doc["supply"][0]["orderable"] = ["2027Q1", "2027Q3"]
    return "supply.0.orderable", "past the horizon"


def _chip(doc):
    doc["supply"][0]["chip"] = "tpu9"
    return "supply.0.chip", "unknown chip type"


def _region(doc):
    doc["installed"][0]["region"] = "mars"
    return "installed.0.region", "unknown region"


def _retire(doc):
    doc["installed"][0]["retires"] = "2026Q4"
    return "installed.0.retires", "before the start"


def _negative(doc):
    doc["demand"] = {"kind": "tree", "root": {"demand": 1.0, "children": [{"demand": -0.5, "children": [{"demand": 1.0}]}]}}
    return "demand.root.children.0.demand", "must be between 0 and 1e6"


def _short_branch(doc):
    doc["demand"] = {"kind": "tree", "root": {"demand": 1.0, "children": [
        {"name": "a", "probability": 0.5, "demand": 1.0, "children": [{"demand": 1.0}]},
        {"name": "b", "probability": 0.5, "demand": 1.2}]}}
    return "demand.root.children.1", "disagree on the quarters"


def _wrong_quarter(doc):
    doc["demand"] = {"kind": "tree", "root": {"demand": 1.0, "children": [{"quarter": "2027Q3", "demand": 1.0, "children": [{"demand": 1.0}]}]}}
    return "demand.root.children.0.quarter", "disagree on the quarters"


def _tree_probabilities(doc):
    doc["demand"] = {"kind": "tree", "root": {"demand": 1.0, "children": [
        {"name": "a", "probability": 0.5, "demand": 1.0, "children": [{"demand": 1.0}]},
        {"name": "b", "probability": 0.6, "demand": 1.2, "children": [{"demand": 1.0}]}]}}
    return "demand.root.children", "sum to 1 at each branching"


def _huge_growth(doc):
    # compounds to 2.4e9 requests/s, past the instance's peak_rps bound: was a traceback at the build, exit 1
    doc["demand"] = {"kind": "growth_paths", "start": 1e6, "paths": [{"name": "x", "probability": 1.0, "growth_per_quarter": 10.0}]}
    return "demand: the tree's largest demand", "is not a valid peak_rps"


def _no_traffic(doc):
    # a quarter without traffic anywhere: was a 1-chip fleet the verifier refused, exit 3 with the reason only in the JSON
    doc["demand"] = {"kind": "tree", "root": {"demand": 1.0, "children": [{"demand": 0.0, "children": [{"demand": 1.0}]}]}}
    return "demand: node b1 (2027Q2) has no demand in any region", "needs some traffic"


@pytest.mark.parametrize("edit", [_bad, _lead, _quarter_lead, _orderable_late, _chip, _region, _retire, _negative, _short_branch, _wrong_quarter, _tree_probabilities,
                                  _huge_growth, _no_traffic])
def test_bad_input_is_exit_2_naming_the_field(tmp_path, edit):
    doc = two_paths(write_base(tmp_path))
    field, words = edit(doc)
    out = tmp_path / "purchase.json"
    out.write_text("earlier")
    r = _run(tmp_path, doc, "-o", str(out))
    assert r.exit_code == 2, r.output
    assert field in r.output and words in r.output, r.output
    assert out.read_text() == "earlier"


def test_unservable_hard_tree_is_exit_3_and_leaves_the_output(tmp_path):
    doc = two_paths(write_base(tmp_path))
    doc["supply"][0]["max_pods_delivered_per_quarter"] = 0  # the high path's 45 requests/s need a third pod
    out = tmp_path / "purchase.json"
    out.write_text("earlier")
    r = _run(tmp_path, doc, "-o", str(out), "--no-value")
    assert r.exit_code == 3, r.output
    assert "no purchase plan" in r.output
    # where, and the order that would have fixed it: the root's pod, which the cap of 0 forbids
    assert "scenario high cannot be served in 2027Q3" in r.output
    assert "ordering 1 pod of acc in a ordered in 2027Q1 at node root (delivered 2027Q2; supply.0 delivers at most 0 then)" in r.output
    assert out.read_text() == "earlier"


def test_plan_written_atomically_and_byte_identical(tmp_path):
    doc = two_paths(write_base(tmp_path))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    r1 = _run(tmp_path, doc, "-o", str(a))
    assert r1.exit_code == 0, r1.output
    assert "Order sheet" in r1.output and "VSS" in r1.output
    r2 = _run(tmp_path, doc, "-o", str(b), "--json")
    assert r2.exit_code == 0, r2.output
    assert a.read_bytes() == b.read_bytes()
    plan = json.loads(a.read_text())
    assert plan["status"] == "verified" and plan["order_sheet"][0]["pods"] == 1
    assert json.loads(r2.stdout) == plan


def test_schema_purchase(tmp_path):
    r = CliRunner().invoke(app, ["schema", "purchase"])
    assert r.exit_code == 0
    s = json.loads(r.stdout)
    assert {"base", "quarters", "installed", "supply", "demand", "policy"} <= set(s["properties"])


def test_purchase_doc_is_current():
    from pathlib import Path

    from fleetplan.purchase.docgen import render

    assert (Path(__file__).parents[2] / "docs" / "purchase.md").read_text() == render(), (
        "docs/purchase.md is stale: run `python -m fleetplan.purchase.docgen > docs/purchase.md`")


def test_a_copied_bundled_purchase_file_finds_its_base_and_a_missing_base_is_named(tmp_path):
    # newcomer trial: the bundled example copied elsewhere did not load (its base is relative to the bundled
    # directory), and the error listed the bundled instance names but not the bundled purchase base
    from fleetplan.instance.io import bundled_instance_path
    from fleetplan.purchase.io import load_purchase

    text = bundled_instance_path("gemini-ironwood-2027").read_text()
    copy = tmp_path / "copy.yaml"
    copy.write_text(text)
    p = load_purchase(copy)
    assert p.base.name == load_purchase("gemini-ironwood-2027").base.name
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("base: purchase/gemini-2027-base.yaml", "base: elsewhere/base.yaml"))
    r = CliRunner().invoke(app, ["purchase", str(bad), "--no-value"])
    assert r.exit_code == 2
    assert "base: no such base instance: 'elsewhere/base.yaml'" in r.stderr and str(tmp_path) in r.stderr
    assert "purchase/gemini-2027-base.yaml" in r.stderr and "gemini-ironwood" in r.stderr


def test_newcomer_nits_of_the_fourth_trial(tmp_path):
    # a bad --risk is an invalid option, not an invalid purchase file; a -o that never existed is "not written",
    # not "left as it was"; a term past the horizon ends at a quarter label
    from types import SimpleNamespace

    from fleetplan.purchase.replan import service_until

    doc = two_paths(write_base(tmp_path))
    r = _run(tmp_path, doc, "--risk", "cvar:1.2:0.5", "--no-value")
    assert r.exit_code == 2 and "invalid option --risk" in r.stderr and "purchase file" not in r.stderr
    doc["supply"][0]["max_pods_delivered_per_quarter"] = 0
    out = tmp_path / "never.json"
    r = _run(tmp_path, doc, "-o", str(out), "--no-value")
    assert r.exit_code == 3 and f"{out} not written." in " ".join(r.stderr.split()) and not out.exists()
    labels = [f"{y}Q{q}" for y in (2027, 2028) for q in (1, 2, 3, 4)]
    assert service_until(labels, SimpleNamespace(delivery=7, service_quarters=8)) == "2030Q3"  # 2028Q4 + 7 quarters
    assert service_until(labels, SimpleNamespace(delivery=0, service_quarters=4)) == "2027Q4"
    assert service_until(labels, SimpleNamespace(delivery=0, service_quarters=None)) is None


def test_the_scenario_table_sums_the_chips_per_role(tmp_path):
    # newcomer trial: listing every pool in the scenarios x quarters table made the bundled example's output
    # ~2,600 lines; the table sums the chips per role (the pools one by one are in --json and --report)
    from fleetplan.cli.purchase import _roles_text
    from fleetplan.purchase.result import QuarterPool, QuarterWarmPool

    pools = [QuarterPool(region=r, tier="short", role=ro, slice="accx2", slices=n, chips=2 * n, cost_per_hour_usd=1.0)
             for r, ro, n in (("a", "prefill", 3), ("b", "prefill", 2), ("a", "decode", 4))]
    warm = [QuarterWarmPool(region="a", slice="accx2", slices=1, chips=2, cost_per_hour_usd=1.0)]
    assert _roles_text(pools, warm) == "prefill 10, decode 8, warm 2" and _roles_text([], []) == "-"
    r = _run(tmp_path, two_paths(write_base(tmp_path)), "--no-value", "--scenarios")  # the full table (issue 39: behind --scenarios)
    assert r.exit_code == 0 and "chips by role" in r.stdout


@pytest.fixture
def no_purchase_solve(monkeypatch):
    """The purchase solve replaced by one that fails the test: the options below are refused before any work."""
    import fleetplan.purchase.solve

    def no_solve(*a, **k):
        raise AssertionError("the purchase solve started before the outputs were checked")

    monkeypatch.setattr(fleetplan.purchase.solve, "solve_purchase", no_solve)


def test_csv_and_o_naming_one_new_file_are_refused(tmp_path, no_purchase_solve):
    """issue 39 newcomer trial 2: `purchase -o same.json --csv same.json` (a new file) was exit 0 and
    same.json held only the CSV (the check compared only existing files). Exit 2 naming --csv."""
    import shutil
    from pathlib import Path

    d = Path(__file__).resolve().parents[2] / "benchmarks" / "purchase"
    for name in ("worked-example.yaml", "tiny-base.yaml"):
        shutil.copy(d / name, tmp_path / name)
    same = tmp_path / "same.json"
    r = CliRunner().invoke(app, ["purchase", str(tmp_path / "worked-example.yaml"), "--no-value", "-o", str(same), "--csv", str(same)])
    assert r.exit_code == 2 and "--csv" in r.output and "-o" in r.output, r.output
    assert not same.exists()


@pytest.mark.parametrize("target", ["tiny-base.yaml", "wl.yaml", "worked-example.yaml"])
@pytest.mark.parametrize("option", ["-o", "--csv"])
def test_outputs_may_not_replace_the_base_instance_or_its_includes(tmp_path, no_purchase_solve, target, option):
    """issue 39 newcomer trial 3: `purchase worked-example.yaml -o tiny-base.yaml` replaced the base
    instance with exit 0. The purchase file, its base instance and every file the base includes
    are inputs: exit 2 naming the option, the file left as it was."""
    import shutil
    from pathlib import Path

    d = Path(__file__).resolve().parents[2] / "benchmarks" / "purchase"
    shutil.copy(d / "worked-example.yaml", tmp_path / "worked-example.yaml")
    base = yaml.safe_load((d / "tiny-base.yaml").read_text())
    base["include"] = {"workload": "wl.yaml"}
    (tmp_path / "tiny-base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump({"workload": {"output_tokens": base["workload"]["output_tokens"]}}))
    before = (tmp_path / target).read_bytes()
    r = CliRunner().invoke(app, ["purchase", str(tmp_path / "worked-example.yaml"), "--no-value", option, str(tmp_path / target)])
    assert r.exit_code == 2 and option in r.output and "is the input file" in r.output, r.output
    assert (tmp_path / target).read_bytes() == before


def test_o_inside_the_report_directory_is_refused(tmp_path, no_purchase_solve):
    """-o (or --csv) naming a file --report DIR writes (DIR/report.md, DIR/figures/*.png) would be
    overwritten by it: exit 2 naming the option and --report."""
    import shutil
    from pathlib import Path

    d = Path(__file__).resolve().parents[2] / "benchmarks" / "purchase"
    for name in ("worked-example.yaml", "tiny-base.yaml"):
        shutil.copy(d / name, tmp_path / name)
    for option, target in (("-o", tmp_path / "rep" / "report.md"), ("--csv", tmp_path / "rep" / "figures" / "fan.png")):
        target.parent.mkdir(parents=True, exist_ok=True)
        r = CliRunner().invoke(app, ["purchase", str(tmp_path / "worked-example.yaml"), "--no-value", "--report", str(tmp_path / "rep"),
                                     option, str(target)])
        assert r.exit_code == 2 and option in r.output and "--report" in r.output, r.output
