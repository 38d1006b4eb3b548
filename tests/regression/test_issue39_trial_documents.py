"""Issue 39's newcomer trial, item 6: a command given another kind of fleetplan file listed
every field the expected schema lacks -- ``fleetplan perf plan.json`` 26 missing fields,
``place`` and ``simulate`` given a purchase plan 61 problems -- where ``report
placement.json`` already said 'is a fleetplan placement, not a plan'. Every command that
reads an instance or a plan now says what the file is (fleetplan/documents.py), in one
problem, exit 2."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from tests.conftest import tiny_data

runner = CliRunner()
PURCHASE = Path(__file__).resolve().parents[2] / "benchmarks" / "purchase"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A plan of the tiny instance, a purchase plan of docs/purchase.md's worked example, the
    purchase file and a workload overlay, each as the commands write them."""
    d = tmp_path_factory.mktemp("documents")
    (d / "tiny.yaml").write_text(yaml.safe_dump(tiny_data()))
    r = runner.invoke(app, ["solve", str(d / "tiny.yaml"), "-o", str(d / "plan.json")])
    assert r.exit_code == 0, r.output
    for name in ("worked-example.yaml", "tiny-base.yaml"):
        shutil.copy(PURCHASE / name, d / name)
    r = runner.invoke(app, ["purchase", str(d / "worked-example.yaml"), "--no-value", "-o", str(d / "purchase-plan.json")])
    assert r.exit_code == 0, r.output
    (d / "wl.yaml").write_text(yaml.safe_dump({"workload": {"output_tokens": 250}, "source": {"trace": "t.csv"}}))
    return d


def _one_problem(args: list[str], words: str) -> None:
    r = runner.invoke(app, args)
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and words in text and "1 problem" in text, r.output


@pytest.mark.parametrize("command", [["perf"], ["solve"], ["sensitivity", "--param", "mfu=0.3:0.5"]])
def test_a_plan_given_for_an_instance(files, command):
    _one_problem(command[:1] + [str(files / "plan.json")] + command[1:], "is a fleetplan plan, not an instance")


@pytest.mark.parametrize("command", [["place"], ["simulate", "--region", "a"], ["whatif", "--lose", "a"], ["report"]])
def test_a_purchase_plan_given_for_a_plan(files, command):
    _one_problem(command[:1] + [str(files / "purchase-plan.json")] + command[1:], "is a fleetplan purchase plan, not a plan")


def test_other_documents_given_for_an_instance(files):
    _one_problem(["perf", str(files / "purchase-plan.json")], "is a fleetplan purchase plan, not an instance")
    _one_problem(["perf", str(files / "worked-example.yaml")], "is a fleetplan purchase-planning file, not an instance")
    _one_problem(["perf", str(files / "wl.yaml")], "is a fleetplan workload file, not an instance")


def test_a_plan_given_for_a_purchase_file(files):
    _one_problem(["purchase", str(files / "plan.json")], "is a fleetplan plan, not a purchase-planning file")
