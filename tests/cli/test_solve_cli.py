"""``fleetplan solve`` from the command line: exit codes, atomic deterministic output,
bad input, the plan schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.results.plan import Plan

runner = CliRunner()


def test_same_input_same_bytes(tmp_path, plan_file):
    # a: the session's plan as `fleetplan solve llama70b-h100 -o` writes it (tests/conftest.py plan_file), b: the command run here
    a, b = plan_file("llama70b-h100"), tmp_path / "b.json"
    assert runner.invoke(app, ["solve", "llama70b-h100", "-o", str(b)]).exit_code == 0
    assert a.read_bytes() == b.read_bytes()


def test_failed_run_leaves_earlier_output_intact(tmp_path):
    out = tmp_path / "plan.json"
    out.write_text("EARLIER")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    r = runner.invoke(app, ["solve", str(bad), "-o", str(out)])
    assert r.exit_code == 2
    assert "YAML syntax error" in r.stderr
    assert out.read_text() == "EARLIER"


def test_bad_options(tmp_path):
    r = runner.invoke(app, ["solve", "llama70b-h100", "--solver", "gurobi"])
    assert r.exit_code == 2 and "highs" in r.stderr
    r = runner.invoke(app, ["solve", "llama70b-h100", "-o", str(tmp_path / "no" / "dir" / "plan.json")])
    assert r.exit_code == 2 and "does not exist" in r.stderr
    r = runner.invoke(app, ["solve", "llama70b-h100", "-o", str(tmp_path)])
    assert r.exit_code == 2 and "directory" in r.stderr
    r = runner.invoke(app, ["solve", "llama70b-h100", "--mip-gap", "-1"])
    assert r.exit_code == 2
    r = runner.invoke(app, ["solve", "no-such-instance"])
    assert r.exit_code == 2 and "no such file" in r.stderr


def test_shortfall_exits_3_and_leaves_the_earlier_plan(tmp_path):
    from tests.conftest import tiny_data
    import yaml

    inst = tmp_path / "short.yaml"
    data = tiny_data(regions={"a": {"peak_rps": 400, "pods": {"acc": {"installed": 0, "available_new": 1}}}})
    inst.write_text(yaml.safe_dump(data))
    out = tmp_path / "plan.json"
    out.write_text("EARLIER")
    r = runner.invoke(app, ["solve", str(inst), "-o", str(out)])
    assert r.exit_code == 3
    assert "cannot meet the SLOs" in r.output and "every pod of acc that a can have is in use" in r.output
    assert "NOT written" in r.stderr and out.read_text() == "EARLIER"
    r = runner.invoke(app, ["solve", str(inst), "-o", str(out), "--write-unverified"])
    assert r.exit_code == 3
    assert Plan.model_validate_json(out.read_text()).status == "shortfall"


def test_written_plan_has_the_usual_file_mode(tmp_path):
    out = tmp_path / "plan.json"
    old = os.umask(0o022)
    try:
        assert runner.invoke(app, ["solve", "llama70b-h100", "-o", str(out)]).exit_code == 0
    finally:
        os.umask(old)
    assert (out.stat().st_mode & 0o777) == 0o644


def test_ttft_below_the_path_latency_is_invalid_input(tmp_path):
    import yaml
    from fleetplan.instance.io import bundled_instance_path

    data = yaml.safe_load(bundled_instance_path("gemini-ironwood").read_text())
    data["workload"]["classes"]["standard"]["slos"][0]["limit_ms"] = 1
    f = tmp_path / "i.yaml"
    f.write_text(yaml.safe_dump(data))
    r = runner.invoke(app, ["solve", str(f)])
    assert r.exit_code == 2 and "path latency" in r.stderr and "workload.classes.standard.slos.0.limit_ms" in r.stderr


def test_json_and_plan_schema():
    r = runner.invoke(app, ["solve", "llama70b-h100", "--json"])
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    Plan.model_validate(doc)
    r = runner.invoke(app, ["schema", "plan"])
    assert r.exit_code == 0 and json.loads(r.stdout)["title"] == "Plan"


def test_time_limit_is_reported_not_raised():
    r = runner.invoke(app, ["solve", "gemini-trillium", "--time-limit", "0.5", "--mip-gap", "0"])
    assert r.exit_code in (0, 3)
    assert "Traceback" not in r.output


def test_solve_default_instance_in_a_process_of_its_own_writes_the_verified_plan_and_the_comparisons(tmp_path, plan_file):
    """`fleetplan solve` of the default instance (the brief's) as a user runs it, in a
    process of its own, with the comparisons: it prints and writes a verified plan, the same
    bytes as the session's solve in the test process written as the command writes it
    (another process, another hash seed: tests/conftest.py's ``plan_file``) -- the
    comparisons printed after it leave it so (the plan is written first, by the same code as
    without them) -- then the hand plan and the unstratified fleet beside it. One process
    for both checks: each was a Gemini solve of its own. (Its wall time is measured in
    benchmarks/, not here.)"""
    out = tmp_path / "plan.json"
    p = subprocess.run([sys.executable, "-m", "fleetplan", "solve", "--baseline", "--compare-stratification", "-o", str(out)],
                       capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 0, p.stderr
    text = p.stdout
    assert "verified" in text and "per 1M output tokens" in text and "Binding" in text
    plan = Plan.model_validate_json(out.read_text())
    assert plan.instance_name == "gemini-ironwood" and plan.status == "verified"
    assert not any(f.name.startswith(".plan.json") for f in tmp_path.iterdir())  # no temp file left
    assert out.read_bytes() == plan_file("gemini-ironwood").read_bytes()
    assert "hand plan (the design brief's method)" in text and "unstratified" in text
    assert "hand plan (the design brief's method) fails" in text


def test_output_is_checked_before_any_work_without_physics(tmp_path, monkeypatch):
    """issue 39 newcomer trial 1: -o was checked only under --physics (or --router): `solve
    x.yaml -o x.yaml --write-unverified` replaced the instance with exit 0, and a missing
    directory or a directory was said only after the whole solve. Each is exit 2 naming -o,
    before the solve starts (the solve is replaced by one that fails the test)."""
    import yaml

    import fleetplan.sizing
    from tests.conftest import tiny_data

    def no_solve(*a, **k):
        raise AssertionError("the solve started before -o was checked")

    monkeypatch.setattr(fleetplan.sizing, "solve", no_solve)
    inst = tmp_path / "x.yaml"
    inst.write_text(yaml.safe_dump(tiny_data()))
    before = inst.read_text()
    r = runner.invoke(app, ["solve", str(inst), "-o", str(inst), "--write-unverified"])
    assert r.exit_code == 2 and "-o" in r.stderr and "is the input file" in r.stderr, r.output
    assert inst.read_text() == before
    for bad, words in ((tmp_path / "no" / "d" / "x.json", "does not exist"), (tmp_path, "is a directory")):
        r = runner.invoke(app, ["solve", str(inst), "-o", str(bad)])
        assert r.exit_code == 2 and "-o" in r.stderr and words in r.stderr, r.output


def test_output_may_not_replace_a_physics_source_include(tmp_path, monkeypatch):
    """-o over a file a physics source includes (physics.sources[].include) is exit 2 naming
    -o, as over the instance or its include: overlays -- with or without --physics (the check
    left these files out)."""
    import shutil

    import fleetplan.sizing
    from fleetplan.instance.io import bundled_instance_path

    monkeypatch.setattr(fleetplan.sizing, "solve", lambda *a, **k: (_ for _ in ()).throw(AssertionError("solved")))
    src = bundled_instance_path("llama70b-h100-bf16-p99")
    shutil.copy(src, tmp_path / src.name)
    shutil.copytree(src.parent / "sources", tmp_path / "sources")
    target = tmp_path / "sources" / "h100-bf16-vidur.yaml"
    before = target.read_bytes()
    for extra in (["--physics", "all"], []):
        r = runner.invoke(app, ["solve", str(tmp_path / src.name), "-o", str(target), "--write-unverified", *extra])
        assert r.exit_code == 2 and "-o" in r.stderr and "is the input file" in r.stderr, r.output
        assert target.read_bytes() == before
