"""Issue 15 item 10: a plan solved with `--workload`/`--priors` overlays is usable by the
commands that read plans, with no hand-written `include:` file.

Before the fix the plan carried only the instance's name and hash, readers resolved the
name to the bundled (or given) instance without the overlays, and refused the plan
("solved for instance ... with hash ..., not ..."). Now the plan embeds the effective
instance; a reader given no instance uses it (hash checked), one given an instance
checks that it is the plan's.
"""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.instance.io import instance_document, instance_hash, load_instance_overlaid
from tests.conftest import tiny_data

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def overlaid(tmp_path_factory):
    d = tmp_path_factory.mktemp("overlaid")
    pods = {"acc": {"installed": 0, "available_new": 10}}
    (d / "base.yaml").write_text(yaml.safe_dump(tiny_data(
        regions={"a": {"peak_rps": 20, "hourly_load": [0.5] * 12 + [1.0] * 12, "pods": pods, "failover_to": ["b"]},
                 "b": {"peak_rps": 20, "hourly_load": [1.0] * 12 + [0.5] * 12, "pods": pods, "failover_to": ["a"]}},
        failover={"n_minus_1": True})))
    (d / "wl.yaml").write_text(yaml.safe_dump({"workload": {"output_tokens": 250, "prefix_hit_rate": 0.2}}))
    (d / "pr.yaml").write_text(yaml.safe_dump({"priors": {"prefill_mfu": 0.35}}))
    r = run("solve", d / "base.yaml", "--workload", d / "wl.yaml", "--priors", d / "pr.yaml", "-o", d / "plan.json")
    assert r.exit_code == 0, r.output
    return d


def test_the_plan_embeds_the_effective_instance(overlaid):
    d = overlaid
    doc = json.loads((d / "plan.json").read_text())
    inst, _ = load_instance_overlaid(d / "base.yaml", d / "wl.yaml", d / "pr.yaml")
    assert doc["instance"] == json.loads(json.dumps(instance_document(inst)))  # the dump less the neutral defaults, the old router name (io.instance_document)
    assert doc["instance_hash"] == instance_hash(inst)
    assert doc["instance"]["workload"]["output_tokens"] == 250 and doc["instance"]["priors"]["prefill_mfu"] == 0.35
    # deterministic: the same input gives the same bytes
    r = run("solve", d / "base.yaml", "--workload", d / "wl.yaml", "--priors", d / "pr.yaml", "-o", d / "again.json")
    assert r.exit_code == 0 and (d / "again.json").read_bytes() == (d / "plan.json").read_bytes()


def test_readers_take_the_plan_alone(overlaid):
    d = overlaid
    plan = d / "plan.json"
    r = run("whatif", plan, "--lose", "a", "--hour", "13", "--phase", "steady", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["events"][0]["survivors"][0]["region"] == "b"
    r = run("place", plan, "-o", d / "placement.json")
    assert r.exit_code == 0, r.output
    r = run("export", d / "placement.json", "--plan", plan, "-o", d / "controller.json")
    assert r.exit_code == 0, r.output
    r = run("simulate", plan, "--region", "a", "--duration", "20", "--warmup", "5", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tiers"][0]["region"] == "a"


def test_a_given_instance_must_be_the_plans(overlaid):
    d = overlaid
    r = run("whatif", d / "plan.json", "--lose", "a", "-i", d / "base.yaml")
    assert r.exit_code == 2 and "instance_hash" in r.output and "leave the instance out" in r.output
    # the effective instance written as a file with include: is the plan's (the old way still works)
    inc = yaml.safe_load((d / "base.yaml").read_text()) | {"include": {"workload": "wl.yaml", "priors": "pr.yaml"}}
    (d / "inc.yaml").write_text(yaml.safe_dump(inc))
    r = run("place", d / "plan.json", "-i", d / "inc.yaml", "--json")
    assert r.exit_code == 0, r.output


def test_an_edited_embedded_instance_is_refused(overlaid, tmp_path):
    doc = json.loads((overlaid / "plan.json").read_text())
    doc["instance"]["regions"]["a"]["peak_rps"] = 10.0  # fewer users, same plan: not what was solved
    (tmp_path / "edited.json").write_text(json.dumps(doc))
    r = run("whatif", tmp_path / "edited.json", "--lose", "a")
    assert r.exit_code == 2 and "edited after it was solved" in r.output
    doc["instance"]["regions"]["a"]["peak_rps"] = -1.0
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    r = run("place", tmp_path / "bad.json")
    assert r.exit_code == 2 and "instance.regions.a.peak_rps" in r.output


def test_a_plan_without_an_embedded_instance_falls_back_to_the_named_one(overlaid, tmp_path):
    """Plans written before instances were embedded (instance null) still resolve as before."""
    d = overlaid
    doc = json.loads((d / "plan.json").read_text())
    doc.pop("instance")
    (tmp_path / "old.json").write_text(json.dumps(doc))
    r = run("place", tmp_path / "old.json", "--json")
    assert r.exit_code == 2 and "carries no copy of it" in r.output and "--instance" in r.output
    inc = yaml.safe_load((d / "base.yaml").read_text()) | {"include": {"workload": str(d / "wl.yaml"), "priors": str(d / "pr.yaml")}}
    (tmp_path / "inc.yaml").write_text(yaml.safe_dump(inc))
    r = run("place", tmp_path / "old.json", "-i", tmp_path / "inc.yaml", "--json")
    assert r.exit_code == 0, r.output
