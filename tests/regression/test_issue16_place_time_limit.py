"""Issue 16 newcomer trial M1: `place` had no bound on its wall clock (a verified
20-region plan was still being placed after 300 s: up to 60 s per solve stage per region,
three stages, twenty regions). `place --time-limit S` bounds the whole command from its
start: a stage cut by it keeps its placement (noted), and when one has none yet the
command exits 3 saying so, any -o file left as it was."""

from __future__ import annotations

import json
import time

import yaml
from typer.testing import CliRunner

import fleetplan.deadline as deadline
from fleetplan.cli.app import app
from tests.conftest import tiny_data

runner = CliRunner()


def _plan(tmp_path, one_region: bool = False, pods: bool = False):
    """A tiny plan; sized without its pods unless ``pods`` (the stages are the placement
    model's; a plan sized with its pods is placed as they say, issue 20)."""
    data = tiny_data(failover={"n_minus_1": not one_region}, placement={"size_with_pods": pods})
    if one_region:
        data["regions"] = {"a": {**data["regions"]["a"], "failover_to": []}}
    (tmp_path / "inst.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    assert runner.invoke(app, ["solve", str(tmp_path / "inst.yaml"), "-o", str(tmp_path / "p.json")]).exit_code == 0
    return tmp_path / "p.json"


def _spent_after_the_plan_checks(monkeypatch) -> None:
    """The limit spent once the plan's checks are done (a limit spent before them stops there,
    issue 39: tests/regression/test_issue39_time_limits.py): the placement starts past its deadline."""
    import fleetplan.placement as placement

    real = placement.place
    monkeypatch.setattr(placement, "place", lambda *a, deadline=None, **k: real(*a, deadline=time.monotonic() - 1.0, **k))


def test_a_limit_already_spent_ends_with_exit_3_and_keeps_the_output(tmp_path, monkeypatch):
    plan = _plan(tmp_path)
    (tmp_path / "pl.json").write_text("earlier", encoding="utf-8")
    _spent_after_the_plan_checks(monkeypatch)
    r = runner.invoke(app, ["place", str(plan), "--time-limit", "5", "-o", str(tmp_path / "pl.json")])
    text = " ".join(r.stderr.split())
    assert r.exit_code == 3, r.output
    assert "no placement: the time limit passed before a's dcn_rps stage (its first) could start" in text, text
    assert "--time-limit 5 s of wall clock from the command's start" in text and "left as it was" in text, text
    assert (tmp_path / "pl.json").read_text() == "earlier"


def test_a_generous_limit_gives_the_same_placement(tmp_path):
    plan = _plan(tmp_path)
    a = runner.invoke(app, ["place", str(plan), "--json"])
    b = runner.invoke(app, ["place", str(plan), "--json", "--time-limit", "600"])
    assert a.exit_code == b.exit_code == 0, (a.output, b.output)
    assert json.loads(a.stdout) == json.loads(b.stdout)


def test_a_limit_that_cuts_the_refinements_keeps_the_first_stages_placement(tmp_path, monkeypatch):
    """Newcomer trial of --time-limit: a stage cut with a placement in hand was followed by a
    bare 'the time limit passed' at the next stage, so no cut placement was ever kept. The
    first stage's placement is complete; later stages are refinements, skipped when the
    time is gone, and the notes say so."""
    import fleetplan.placement.driver as placement

    plan = _plan(tmp_path, one_region=True)
    calls = []
    real = placement._stage_seconds

    def budget(time_limit_s, deadline, share=1.0):
        calls.append(deadline)
        return real(time_limit_s, deadline, share) if len(calls) == 1 else 0.0  # the first stage runs, then no time is left

    monkeypatch.setattr(placement, "_stage_seconds", budget)
    r = runner.invoke(app, ["place", str(plan), "--time-limit", "600", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert any("the time limit left no time for the" in n and "the placement is the earlier stages'" in n for n in doc["notes"]), doc["notes"]
    monkeypatch.undo()
    assert not any("no time" in n for n in json.loads(runner.invoke(app, ["place", str(plan), "--json"]).stdout)["notes"])


def test_no_output_file_is_said_as_nothing_written(tmp_path, monkeypatch):
    plan = _plan(tmp_path)
    monkeypatch.setattr(deadline, "command_start", lambda: time.monotonic() - 100.0)
    r = runner.invoke(app, ["place", str(plan), "--time-limit", "5", "-o", str(tmp_path / "new.json")])
    assert r.exit_code == 3 and "nothing written" in " ".join(r.stderr.split()) and not (tmp_path / "new.json").exists(), r.output


def test_a_plan_with_pods_stops_at_the_limit_too(tmp_path, monkeypatch):
    """A plan sized with its pods has no solve stages, but its placement honours the limit:
    spent before a region starts, exit 3 and the -o file left as it was; a generous one
    gives the same placement."""
    plan = _plan(tmp_path, pods=True)
    a = runner.invoke(app, ["place", str(plan), "--json"])
    b = runner.invoke(app, ["place", str(plan), "--json", "--time-limit", "600"])
    assert a.exit_code == b.exit_code == 0 and json.loads(a.stdout)["method"] == "pods", (a.output, b.output)
    assert json.loads(a.stdout) == json.loads(b.stdout)
    (tmp_path / "pl.json").write_text("earlier", encoding="utf-8")
    _spent_after_the_plan_checks(monkeypatch)
    r = runner.invoke(app, ["place", str(plan), "--time-limit", "5", "-o", str(tmp_path / "pl.json")])
    text = " ".join(r.stderr.split())
    assert r.exit_code == 3 and "no placement: the time limit passed before a's placement (as the plan's pods say) could start" in text, text
    assert (tmp_path / "pl.json").read_text() == "earlier"
