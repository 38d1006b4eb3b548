"""Issue 15, item 15: the smaller dead ends, one test each (the ``*_gbps`` rename has its
own file). Each fails on the code before the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.errors import InputError
from tests.conftest import tiny_data

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


# ------------------------------------------------------------------ 99.95% is not 100.0%

def test_a_value_under_100_percent_never_reads_100():
    from fleetplan.report.render import _pct
    from fleetplan.results.loads import pct_text

    assert _pct(0.9995) == "99.950%" and pct_text(0.9995) == "99.950%"  # the report printed "100.0%"
    assert pct_text(0.9999996) == "99.99996%"  # as many digits as it takes
    assert pct_text(1.0004) == "100.04%"  # nor does a value over it
    assert pct_text(1.0) == "100.0%" and _pct(0.5) == "50%" and pct_text(0.9912) == "99.12%"
    assert pct_text(252.921) == "25,292.1%" and _pct(66.41) == "6,641%"  # loads past 1,000% read as numbers


# ------------------------------------------------------------------ a saving is not "+21.5 slices"

def test_the_hit_rate_line_signs_a_saving_as_a_fall():
    from fleetplan.cli.report import hit_rate_slices_text
    from fleetplan.report.sensitivity import HitRateSlices

    h = HitRateSlices(low_hit_rate=0.5, high_hit_rate=0.7, prefill_slices_per_10_points=21.5, prefill_chips_per_10_points=688.0,
                      smallest_shape_chips=8, smallest_shape_slices_per_10_points=86.0, fleet_chips_per_10_points=960.0,
                      fleet_cost_per_hour_usd_per_10_points=1920.0, cost_per_1m_output_tokens_usd_per_10_points=0.141, both_verified=True)
    text = hit_rate_slices_text(h)
    assert "each +10 points changes prefill by -688 chips" in text
    assert "-21.5 slices of the shapes chosen" in text and "+21.5" not in text
    assert "-960 chips, -1,920 $/h and -$0.141 per 1M output tokens" in text


# ------------------------------------------------------------------ no batch class, no batch infill

def test_levers_credit_no_batch_infill_without_a_batch_class():
    from fleetplan.report.levers import LEVERS

    infill = next(lv for lv in LEVERS if lv.id == "batch_infill")
    got = infill.variants(tiny_data(), 128)  # the tiny instance's one class is not sheddable
    assert isinstance(got, str) and got.startswith("not applicable") and "no batch class" in got
    with_batch = tiny_data(workload={"classes": {"std": {"share": 0.9}, "batch": {"share": 0.1, "slos": [], "sheddable": True,
                                                                                  "spec_acceptance": 0.3}}})
    assert isinstance(infill.variants(with_batch, 128), tuple)


# ------------------------------------------------------------------ no failover, no region-loss claim

def test_a_plan_without_failover_claims_no_region_loss_scenario(tmp_path):
    f = tmp_path / "tiny.yaml"
    f.write_text(yaml.safe_dump(tiny_data()))  # failover.n_minus_1: false
    r = run("solve", f)
    assert r.exit_code == 0, r.output
    status = r.stdout.splitlines()[0]
    assert "verified" in status and "region-loss scenario (independent" not in status
    assert "no region-loss scenario: the instance plans no N-1 failover" in status


# ------------------------------------------------------------------ --help placeholders

COMMANDS = [[], ["solve"], ["perf"], ["schema"], ["whatif"], ["place"], ["export"], ["diff"], ["workload", "fit"], ["calibrate"],
            ["simulate"], ["report"], ["sensitivity"], ["levers"], ["samples"], ["purchase"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "fleetplan")
def test_help_shows_no_python_types(cmd):
    r = runner.invoke(app, [*cmd, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for placeholder in ("<bool>", "<list[", "<str>", "<int>", "<float>"):
        assert placeholder not in r.output, (placeholder, r.output)


def test_help_names_what_an_option_takes():
    r = runner.invoke(app, ["whatif", "--help"], env={"COLUMNS": "200"})
    line = next(x for x in r.output.splitlines() if "--lose " in x or "--lose  " in x)
    assert "REGION" in line
    assert any("--output" in x and "FILE" in x for x in r.output.splitlines())
    assert "{PLAN}" in r.output  # the argument by its name


# ------------------------------------------------------------------ -o under a file

def test_an_output_under_a_file_says_it_is_a_file(tmp_path):
    from fleetplan.cli.common import check_output_path

    (tmp_path / "plan.json").write_text("{}")
    with pytest.raises(InputError) as e:
        check_output_path(str(tmp_path / "plan.json" / "x.json"), what="the plan")
    assert "plan.json is a file, not a directory" in e.value.render()
    with pytest.raises(InputError) as e:
        check_output_path(str(tmp_path / "plan.json" / "a" / "x.json"), what="the plan")
    assert "plan.json is a file, not a directory" in e.value.render()
    with pytest.raises(InputError) as e:
        check_output_path(str(tmp_path / "nodir" / "x.json"), what="the plan")
    assert "does not exist" in e.value.render()


# ------------------------------------------------------------------ | head

def test_a_closed_stdout_ends_quietly_with_141(tmp_path):
    """The reader is gone before the first write (as `| head -0`, or head exiting early):
    the command stops with 141 (128 + SIGPIPE, the shell's convention), no traceback and
    no 'Broken pipe' message. Deterministic: the pipe's read end is closed before start."""
    r, w = os.pipe()
    os.close(r)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "fleetplan", "samples"], stdout=w, stderr=subprocess.PIPE, env=env, timeout=120)
    os.close(w)
    assert p.returncode == 141, p.stderr
    assert p.stderr == b""


# ------------------------------------------------------------------ a region with no traffic

def _zero(tmp_path, **over):
    f = tmp_path / "zero.yaml"
    f.write_text(yaml.safe_dump(tiny_data(regions={"b": {"peak_rps": 0}}, **over)))
    return f


def test_a_region_with_no_traffic_is_accepted_sized_and_verified(tmp_path):
    f = _zero(tmp_path)
    plan = tmp_path / "p.json"
    r = run("solve", f, "-o", plan)
    assert r.exit_code == 0, r.output
    doc = json.loads(plan.read_text())
    assert doc["status"] == "verified"
    assert {p["region"] for p in doc["pools"]} == {"a"}  # no pools where nothing arrives and nothing fails over
    for cmd in (["whatif", plan, "--instance", f, "--lose", "b"], ["place", plan, "--instance", f, "-o", tmp_path / "pl.json"],
                ["simulate", plan, "--instance", f, "--region", "a", "--duration", "20"]):
        r = run(*cmd)
        assert r.exit_code == 0, (cmd, r.output)  # the plan's contents check no longer asks for pools in b
        assert "xinf" not in r.stdout and " inf " not in r.stdout and "nan" not in r.stdout.lower().replace("nano", "")


def test_a_failover_site_with_no_traffic_of_its_own(tmp_path):
    f = _zero(tmp_path, failover={"n_minus_1": True})
    plan = tmp_path / "p.json"
    r = run("solve", f, "-o", plan)
    assert r.exit_code == 0, r.output
    doc = json.loads(plan.read_text())
    assert any(p["region"] == "b" and p["role"] == "prefill" for p in doc["pools"])  # sized for a's failover
    # what-if: b's multipliers over its own (zero) load are undefined, said in words, never 'xinf'
    r = run("whatif", plan, "--instance", f, "--lose", "a", "--json")
    assert r.exit_code == 0, r.output
    w = json.loads(r.stdout)
    b = next(s for e in w["events"] for s in e["survivors"] if s["region"] == "b")
    assert b["traffic"]["value"] is None and "no traffic of its own" in b["traffic"]["explain"]
    assert b["prefill_demand_steady"]["value"] is None and b["decode_demand"]["value"] is None
    assert '"inf"' not in r.stdout
    # placement: b's slices are routed for the traffic b absorbs
    pl = tmp_path / "pl.json"
    r = run("place", plan, "--instance", f, "-o", pl)
    assert r.exit_code == 0, r.output
    routes = [x for x in json.loads(pl.read_text())["routing"] if x["region"] == "b"]
    assert routes and abs(sum(x["share"] for x in routes) - 1.0) < 1e-9
    # simulate: b's normal hours have nothing to simulate, and the message says where b has load
    r = run("simulate", plan, "--instance", f, "--region", "b", "--duration", "20")
    assert r.exit_code == 2 and "no traffic of its own" in r.output and "--scenario lose:a@" in r.output
    r = run("simulate", plan, "--instance", f, "--region", "b", "--scenario", "lose:a@00", "--duration", "20", "--json")
    assert r.exit_code == 0, r.output


def test_every_region_at_zero_is_bad_input(tmp_path):
    f = tmp_path / "none.yaml"
    f.write_text(yaml.safe_dump(tiny_data(regions={"a": {"peak_rps": 0}, "b": {"peak_rps": 0}})))
    r = run("solve", f)
    assert r.exit_code == 2 and "every region has peak_rps 0" in r.output
