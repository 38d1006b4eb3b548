"""Issue 39 item 16: an edited ``fleet[1].region`` was reported as 32 "pods are numbered
0 to -1" problems (one per pod of the region that lost its fleet row), never naming
``fleet[1].region``. The plan's fleet rows are now checked before its pods: an unknown
region, or a region given twice, is one problem at ``fleet[i].region`` listing the
instance's regions (and the region left without a row); the pod-numbering problems that
follow from it are not reported."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from tests.conftest import tiny_data

runner = CliRunner()


@pytest.fixture(scope="module")
def pod_plan(tmp_path_factory):
    """A plan sized with its pods (plan.pods set) on the tiny instance's two regions."""
    d = tmp_path_factory.mktemp("fleet")
    (d / "inst.yaml").write_text(yaml.safe_dump(tiny_data(failover={"n_minus_1": True}, placement={"size_with_pods": True})),
                                 encoding="utf-8")
    r = runner.invoke(app, ["solve", str(d / "inst.yaml"), "-o", str(d / "p.json")])
    assert r.exit_code == 0, r.output
    doc = json.loads((d / "p.json").read_text())
    assert doc.get("pods") and len(doc["fleet"]) == 2, "the tiny plan places its slices in pods, one fleet row per region"
    return doc


def _report(tmp_path, doc) -> tuple[int, str]:
    (tmp_path / "edited.json").write_text(json.dumps(doc), encoding="utf-8")
    r = runner.invoke(app, ["report", str(tmp_path / "edited.json")])
    return r.exit_code, " ".join(r.stderr.split())


@pytest.mark.parametrize("i,region", [(1, "nowhere"), (1, "a"), (0, "b")])
def test_an_edited_fleet_region_is_one_problem_at_that_field(tmp_path, pod_plan, i, region):
    """Rows a, b: b renamed 'nowhere'; b renamed a; a renamed b (the copy out of the rows'
    sorted order is the edited one, whichever comes first)."""
    doc = json.loads(json.dumps(pod_plan))
    assert [f["region"] for f in doc["fleet"]] == ["a", "b"]
    was = doc["fleet"][i]["region"]
    doc["fleet"][i]["region"] = region
    code, text = _report(tmp_path, doc)
    assert code == 2, text
    assert "1 problem" in text and f"fleet[{i}].region" in text, text
    assert "regions are a, b" in text and f"no fleet row for {was}" in text, text
    assert "pods are numbered" not in text, text
    if region != "nowhere":
        assert "given twice" in text, text
