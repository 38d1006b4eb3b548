"""Issue 16 (newcomer trial, F4): `whatif` and `place` said nothing when the plan's status
is `unverified` (written with `solve --write-unverified` after the time limit cut the
verification); `report` printed only the status. Now all three print a warning on stderr
quoting what the plan records (its 'NOT VERIFIED' diagnostic), and carry it in their
documents: the what-if report's `plan_status` / `plan_note`, the placement's first note,
the report's notes. The verification is cut deterministically (a deadline already past
around the verifier), as in test_issue16_row4_post_solve_deadline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import fleetplan.sizing.driver as sizing
from fleetplan.cli.app import app
from tests.conftest import tiny_data
from tests.regression.test_issue16_row4_post_solve_deadline import _late

runner = CliRunner()


@pytest.fixture(scope="module")
def unverified_plan(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("i16unverified")
    (d / "inst.yaml").write_text(yaml.safe_dump(tiny_data(failover={"n_minus_1": True})), encoding="utf-8")
    out = d / "plan.json"
    mp = pytest.MonkeyPatch()
    mp.setattr(sizing, "verify", _late(sizing.verify))
    try:
        r = runner.invoke(app, ["solve", str(d / "inst.yaml"), "--write-unverified", "-o", str(out)])
    finally:
        mp.undo()
    assert r.exit_code == 3, r.output
    assert json.loads(out.read_text())["status"] == "unverified"
    return out


def _warned(stderr: str) -> str:
    text = " ".join(stderr.split())
    assert "warning: the plan's status is 'unverified'" in text, text
    assert "NOT VERIFIED: the time limit passed while verifying the plan" in text, text  # what the plan records
    return text


def test_whatif_warns_and_its_json_carries_the_status(unverified_plan):
    r = runner.invoke(app, ["whatif", str(unverified_plan), "--lose", "a", "--json"])
    assert r.exit_code == 0, r.output
    _warned(r.stderr)
    doc = json.loads(r.stdout)
    assert doc["plan_status"] == "unverified" and "NOT VERIFIED" in doc["plan_note"]
    r = runner.invoke(app, ["whatif", str(unverified_plan), "--lose", "a"])
    assert r.exit_code == 0, r.output
    _warned(r.stderr)


def test_place_warns_and_its_placement_says_so_first(unverified_plan):
    r = runner.invoke(app, ["place", str(unverified_plan), "--json"])
    assert r.exit_code == 0, r.output
    _warned(r.stderr)
    assert json.loads(r.stdout)["notes"][0].startswith("the plan's status is 'unverified'")


def test_report_says_the_same(unverified_plan):
    r = runner.invoke(app, ["report", str(unverified_plan), "--json"])
    assert r.exit_code == 0, r.output
    _warned(r.stderr)
    assert any(n.startswith("the plan's status is 'unverified'") and "NOT VERIFIED" in n for n in json.loads(r.stdout)["notes"])


def test_a_verified_plan_has_no_warning(tmp_path):
    (tmp_path / "inst.yaml").write_text(yaml.safe_dump(tiny_data(failover={"n_minus_1": True})), encoding="utf-8")
    assert runner.invoke(app, ["solve", str(tmp_path / "inst.yaml"), "-o", str(tmp_path / "p.json")]).exit_code == 0
    r = runner.invoke(app, ["whatif", str(tmp_path / "p.json"), "--lose", "a", "--json"])
    assert r.exit_code == 0 and "warning" not in r.stderr, r.output
    doc = json.loads(r.stdout)
    assert doc["plan_status"] == "verified" and doc["plan_note"] is None


def test_simulate_says_the_same(unverified_plan):
    """`simulate` had its own wording ('solve's time limit passed before its verifier had
    checked it'), without what the plan records; it now carries the readers' status note."""
    r = runner.invoke(app, ["simulate", str(unverified_plan), "-r", "a", "--duration", "20", "--warmup", "5", "--json"])
    assert r.exit_code == 0, r.output
    notes = json.loads(r.stdout)["notes"]
    assert any(n.startswith("the plan's status is 'unverified'") and "NOT VERIFIED" in n for n in notes), notes


def test_simulate_calls_a_shortfall_a_shortfall(tmp_path):
    """A shortfall plan was described by `simulate` as "its own verifier says not every SLO
    holds in every scenario" -- the verifier found no violation; the plan serves less than
    the demand, which `report`, `whatif` and `place` say in those words."""
    data = tiny_data(regions={"a": {"peak_rps": 400, "pods": {"acc": {"installed": 0, "available_new": 2}}},
                              "b": {"peak_rps": 20, "pods": {"acc": {"installed": 0, "available_new": 10}}}})
    (tmp_path / "inst.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    r = runner.invoke(app, ["solve", str(tmp_path / "inst.yaml"), "--write-unverified", "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 3 and json.loads((tmp_path / "p.json").read_text())["status"] == "shortfall", r.output
    r = runner.invoke(app, ["simulate", str(tmp_path / "p.json"), "-r", "a", "--duration", "20", "--warmup", "5", "--json"])
    assert r.exit_code == 0, r.output
    notes = json.loads(r.stdout)["notes"]
    assert any(n.startswith("the plan's status is 'shortfall': no fleet the instance allows (its slice shapes, SLOs and pod inventory) serves all the load") for n in notes), notes
    assert not any("verifier says not every SLO holds" in n for n in notes), notes


def test_export_warns_and_the_controller_document_carries_the_status(unverified_plan, tmp_path):
    """Newcomer trial M2: `export` of a shortfall (or unverified) plan's placement said
    nothing, and its controller document and Kubernetes objects did not say it."""
    r = runner.invoke(app, ["place", str(unverified_plan), "-o", str(tmp_path / "pl.json")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["export", str(tmp_path / "pl.json"), "--plan", str(unverified_plan)])
    assert r.exit_code == 0, r.output
    _warned(r.stderr)
    doc = json.loads(r.stdout)
    assert doc["plan_status"] == "unverified" and "NOT VERIFIED" in doc["plan_note"]
    # the Kubernetes formats print the same warning (the tiny instance has no chip labels to export them with)
