"""Issue 40 trial B, item 5: simulate, solve and the docs agree on ``--physics``.

The bundled BF16 instance's own priors are not a source (``include_base: false``), so
``solve --physics instance`` was exit 2 while ``simulate --physics instance`` ran -- and
simulate's default was that non-source. Now 'instance' is a name only where the base is a
source, everywhere, and simulate's default is the held source binding the plan's pools in
the region, named on stderr and in the report (``physics_source``)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from fleetplan.cli.app import app

runner = CliRunner()
SHORT = ["--duration", "20", "--warmup", "5"]


def _plan(tmp_path, solved):
    _, plan = solved("llama70b-h100-bf16-p99")
    p = tmp_path / "plan.json"
    p.write_text(plan.model_dump_json())
    return p, plan


def test_simulate_refuses_instance_where_solve_does(tmp_path, solved):
    path, _ = _plan(tmp_path, solved)
    r = runner.invoke(app, ["simulate", str(path), "--region", "us-central", "--physics", "instance", *SHORT])
    assert r.exit_code == 2, r.output  # failed before: 0, a run under priors the plan does not hold under
    assert "--physics" in r.output and "include_base" in r.output
    s = runner.invoke(app, ["solve", "llama70b-h100-bf16-p99", "--physics", "instance", "--no-source-plans"])
    assert s.exit_code == 2


def test_simulate_defaults_to_the_binding_source(tmp_path, solved):
    path, plan = _plan(tmp_path, solved)
    binding = {b.source for b in plan.physics.binding if b.region == "us-central"}
    r = runner.invoke(app, ["simulate", str(path), "--region", "us-central", *SHORT, "--json"])
    assert r.exit_code in (0, 3), r.output
    doc = json.loads(r.stdout)
    assert doc["physics_source"] in binding  # failed before: 'instance'
    assert f"physics: source {doc['physics_source']}" in " ".join(r.stderr.split())
