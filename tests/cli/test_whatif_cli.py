"""``fleetplan whatif`` from the command line: the report, JSON, every-hour summary,
atomic output, and bad input (exit 2, the option named, nothing overwritten)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.results.whatif import WhatIfReport

runner = CliRunner()


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("wi") / "plan.json"
    r = runner.invoke(app, ["solve", "-o", str(p)])
    assert r.exit_code == 0, r.output
    return p


def test_region_loss_report_explains_its_numbers(plan_file):
    r = runner.invoke(app, ["whatif", str(plan_file), "--lose", "us-east", "--hour", "1"])
    assert r.exit_code == 0, r.output
    out = r.output
    for text in ("lose us-east at 01:00 UTC (steady)", "lose us-east at 01:00 UTC (transient)", "routing: us-east -> us-central",
                 "traffic x", "= (own", "prefill x", "miss rate", "decode x", "need", "users see", "re-warm: tau = cache", "no residual"):
        assert text in out, text


def test_json_is_the_report_schema(plan_file, tmp_path):
    out = tmp_path / "r.json"
    r = runner.invoke(app, ["whatif", str(plan_file), "--lose", "us-west", "--phase", "transient", "--json", "-o", str(out)])
    assert r.exit_code == 0, r.output
    rep = WhatIfReport.model_validate_json(r.output)
    assert [e.phase for e in rep.events] == ["transient"]
    assert json.loads(out.read_text()) == json.loads(r.output)


def test_every_hour_and_n2(plan_file):
    r = runner.invoke(app, ["whatif", str(plan_file), "--lose", "us-east", "--hour", "all", "--phase", "steady"])
    assert r.exit_code == 0, r.output
    assert "every hour (steady)" in r.output and r.output.count("│ ") >= 24
    r = runner.invoke(app, ["whatif", str(plan_file), "--lose", "us-east", "--lose", "us-west", "--phase", "steady"])
    assert r.exit_code == 0, r.output
    assert "us-east -> us-central" in r.output and "us-west -> us-central" in r.output


@pytest.mark.parametrize("args,needle", [
    (["--lose", "mars"], "unknown region 'mars'"),
    (["--lose", "us-east", "--hour", "24"], "--hour"),
    (["--lose", "us-east", "--phase", "later"], "--phase"),
    (["--lose", "us-east", "--routing", "random"], "--routing"),
    (["--lose-pods", "us-east:-1"], "--lose-pods"),
    ([], "--lose"),
    (["--lose", "us-east", "-i", "gemini-trillium"], "instance_hash"),
])
def test_bad_options_exit_2(plan_file, args, needle):
    r = runner.invoke(app, ["whatif", str(plan_file)] + args)
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output


def test_bad_plan_files_exit_2(tmp_path):
    missing = runner.invoke(app, ["whatif", str(tmp_path / "nope.json"), "--lose", "us-east"])
    assert missing.exit_code == 2 and "no such file" in missing.output
    junk = tmp_path / "junk.json"
    junk.write_text("not json")
    r = runner.invoke(app, ["whatif", str(junk), "--lose", "us-east"])
    assert r.exit_code == 2 and "not a JSON plan" in r.output
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    r = runner.invoke(app, ["whatif", str(other), "--lose", "us-east"])
    assert r.exit_code == 2 and "invalid input" in r.output


def test_failed_run_leaves_earlier_output_intact(plan_file, tmp_path):
    out = tmp_path / "r.json"
    out.write_text("EARLIER")
    r = runner.invoke(app, ["whatif", str(plan_file), "--lose", "mars", "-o", str(out)])
    assert r.exit_code == 2
    assert out.read_text() == "EARLIER"
    r = runner.invoke(app, ["whatif", str(plan_file), "--lose", "us-east", "-o", str(tmp_path / "no" / "r.json")])
    assert r.exit_code == 2 and "does not exist" in r.output
