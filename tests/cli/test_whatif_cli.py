"""``fleetplan whatif`` from the command line: the report, JSON, every-hour summary,
atomic output, and bad input (exit 2, the option named, nothing overwritten)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.whatif.report import WhatIfReport

runner = CliRunner()


@pytest.fixture(scope="module")
def plan_file(plan_file):
    """What `fleetplan solve -o` writes for gemini-ironwood (the session's, tests/conftest.py)."""
    return plan_file("gemini-ironwood")


@pytest.fixture(scope="module")
def peaked_tiny(tmp_path_factory):
    """(plan file, instance file) of the tiny two-region instance sized without N-1, its
    load 0.5 of the peak but 0.8 at 13-14 and 16-17 UTC and 1.0 at 15: losing a region
    leaves a residual in those hours, the largest at 15."""
    import yaml

    from tests.conftest import tiny_data

    load = [1.0 if h == 15 else 0.8 if abs(h - 15) <= 2 else 0.5 for h in range(24)]
    d = tmp_path_factory.mktemp("peaked")
    inst, plan = d / "tiny.yaml", d / "plan.json"
    inst.write_text(yaml.safe_dump(tiny_data(regions={"a": {"hourly_load": load}, "b": {"hourly_load": load}})))
    r = runner.invoke(app, ["solve", str(inst), "-o", str(plan)])
    assert r.exit_code == 0, r.output
    return plan, inst


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


def test_every_hour_is_a_table_of_the_24_hours(peaked_tiny):
    """--hour all: one row per hour of the day, the short slices where the lost load is
    over what the survivor holds (13-17 UTC on this plan sized without N-1) and none in the
    other hours. (On a tiny plan: the brief's 24 steady what-ifs cost ~10 s of CPU; its
    every-hour walk is tests/agreement/test_whatif_agreement.py's.)"""
    plan, inst = peaked_tiny
    r = runner.invoke(app, ["whatif", str(plan), "-i", str(inst), "--lose", "a", "--hour", "all", "--phase", "steady"])
    assert r.exit_code == 0, r.output
    assert "every hour (steady)" in r.output
    rows = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"^│\s+(\d\d) │(?:[^│]*│){4}\s+(\d+) │", r.output, re.M)}
    assert sorted(rows) == list(range(24)), r.output
    assert {h for h, short in rows.items() if short > 0} == {13, 14, 15, 16, 17}, rows


def test_two_regions_lost_at_once(plan_file):
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


def test_more_bad_input(plan_file, tmp_path):
    r = runner.invoke(app, ["whatif", str(tmp_path), "--lose", "us-east"])
    assert r.exit_code == 2 and "is a directory" in r.output
    for bad_out in ("", "-", "/dev/null", str(plan_file)):
        r = runner.invoke(app, ["whatif", str(plan_file), "--lose", "us-east", "-o", bad_out])
        assert r.exit_code == 2 and "-o" in r.output, (bad_out, r.output)
    assert (tmp_path.parent).exists() and __import__("os").path.exists("/dev/null") and not __import__("os").path.isfile("/dev/null")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    r = runner.invoke(app, ["whatif", str(other), "--lose", "us-east"])
    assert r.exit_code == 2 and "not a fleetplan plan" in r.output
    doc = json.loads(plan_file.read_text())
    doc["pools"][0]["slices"] = -5
    doc["pools"][1]["slice"] = "h100x8"
    doc["warm_pool"][0]["slices"] = 10**6
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = runner.invoke(app, ["whatif", str(bad), "--lose", "us-east"])
    assert r.exit_code == 2, r.output
    for needle in ("pools[0].slices", "pools[1].slice", "warm_pool[0].slices"):
        assert needle in r.output
    r = runner.invoke(app, ["whatif", str(plan_file), "--lose", "mars", "--lose-pods", "foo"])
    assert r.exit_code == 2 and "name at least one region" not in r.output


def test_worst_hour_is_the_hour_of_the_largest_residual(peaked_tiny):
    """--hour worst keeps one hour of the 24 per phase asked (the CLI's _worst, one loop over
    the phases), with a note saying why: here the load's peak hour, the largest residual.
    (On a tiny plan: the 24 what-ifs of the brief's plan cost ~10 s of CPU, and its N-1
    plan has no residual to rank; the every-hour walk of the brief's plan is
    test_every_hour_and_n2 and tests/agreement/test_whatif_agreement.py.)"""
    plan, inst = peaked_tiny
    r = runner.invoke(app, ["whatif", str(plan), "-i", str(inst), "--lose", "a", "--hour", "worst", "--phase", "steady", "--json"])
    assert r.exit_code == 0, r.output
    rep = WhatIfReport.model_validate_json(r.output)
    assert [(e.phase, e.hour) for e in rep.events] == [("steady", 15)]
    assert rep.events[0].residual_request_equivalents > 0
    assert rep.events[0].notes[0] == "--hour worst: the hour with the largest residual of the 24"


def test_the_phases_of_one_hour_share_the_routing(plan_file):
    """The steady state and the re-warm transient of one hour are routed alike (the routing
    chosen for the transient; the same code path as within --hour worst)."""
    r = runner.invoke(app, ["whatif", str(plan_file), "--lose", "us-west", "--hour", "3", "--json"])
    steady, transient = sorted(WhatIfReport.model_validate_json(r.output).events, key=lambda e: e.phase)
    assert [(x.to, x.tier, x.share) for x in steady.routes] == [(x.to, x.tier, x.share) for x in transient.routes]
    assert any("routing as chosen for the re-warm transient" in n for n in steady.notes)


def test_pod_loss_leaves_other_regions_steady(plan_file):
    r = runner.invoke(app, ["whatif", str(plan_file), "--lose-pods", "us-east:2", "--phase", "transient", "--json"])
    assert r.exit_code == 0, r.output
    ev = WhatIfReport.model_validate_json(r.output).events[0]
    for s in ev.survivors:
        if s.region != "us-east":
            assert s.hit_rate_transient == pytest.approx(s.hit_rate_before) and s.rewarm is None
            assert all(p.lost_to_pods == 0 for p in s.pools)
        else:
            assert s.hit_rate_transient < s.hit_rate_before and sum(p.lost_to_pods for p in s.pools) > 0
