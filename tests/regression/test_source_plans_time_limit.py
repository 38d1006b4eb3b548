"""A newcomer's trial: `fleetplan solve llama70b-h100-bf16-p99 --time-limit 3` listed three of
the per-source plans ("What holding under the sources costs") as 'no plan' with no word of
the time limit; without it those plans exist (24, 28 and 24 chips). The per-source solves run
inside the command's --time-limit, and a source whose solve it cut now says so (the table and
`--json`'s source_plans[].no_plan)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

import fleetplan.sizing as sizing
from fleetplan.cli.app import app


def _cut_after_the_first(monkeypatch):
    real = sizing.solve
    calls = []

    def solve(inst, *a, **k):
        out = real(inst, *a, **k)
        calls.append(inst.physics.hold if inst.physics is not None else None)
        if len(calls) > 1 and inst.physics is not None and inst.physics.hold == "vidur-vllm":  # a source the limit cut
            out.result.termination = "time_limit"
            return sizing.SolveOutcome(None, out.result, out.data, out.timings_s, out.iterations, time_limited=True)
        return out

    monkeypatch.setattr(sizing, "solve", solve)
    return calls


def test_a_source_plan_the_time_limit_cut_says_so(monkeypatch):
    calls = _cut_after_the_first(monkeypatch)
    r = CliRunner().invoke(app, ["solve", "llama70b-h100-bf16-p99"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert "vidur-vllm" in calls
    row = [line for line in r.output.splitlines() if line.startswith("│ vidur-vllm ")]
    assert any("no plan: --time-limit 300 s" in line for line in row), row  # the cell wraps: its first line
    assert "skips these solves" in r.output


def test_the_json_names_why_a_source_has_no_plan(monkeypatch):
    _cut_after_the_first(monkeypatch)
    r = CliRunner().invoke(app, ["solve", "llama70b-h100-bf16-p99", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    rows = {x["hold"]: x for x in doc["source_plans"]}
    assert rows["vidur-vllm"]["chips"] is None and "--time-limit 300 s" in rows["vidur-vllm"]["no_plan"]
    assert all(x["no_plan"] is None for h, x in rows.items() if h != "vidur-vllm")


def test_json_output_warns_on_stderr_when_the_pods_were_cut(tmp_path, monkeypatch):
    """A newcomer's trial: with --json, stderr warned of the gap and NOT REPRODUCIBLE but not
    of NOT SIZED WITH ITS PODS (the plan's own diagnostic); all three are warnings now. The
    demand-margin note is printed once (it opened the line above the latency table and was
    repeated under Notes)."""
    import yaml

    from tests.conftest import tiny_data

    real = sizing.solve

    def cut_pods(inst, *a, **k):
        out = real(inst, *a, **k)
        if out.plan is not None:
            out.plan = out.plan.model_copy(update={"diagnostics": [*out.plan.diagnostics, f"{sizing.NOT_SIZED_WITH_PODS}: (a test's note)"]})
        return out

    monkeypatch.setattr(sizing, "solve", cut_pods)
    (tmp_path / "i.yaml").write_text(yaml.safe_dump(tiny_data()), encoding="utf-8")
    r = CliRunner().invoke(app, ["solve", str(tmp_path / "i.yaml"), "--json"])
    assert r.exit_code == 0, r.output
    assert "warning: NOT SIZED WITH ITS PODS: (a test's note)" in " ".join(r.stderr.split())
    r = CliRunner().invoke(app, ["solve", str(tmp_path / "i.yaml")])
    assert " ".join(r.output.split()).lower().count("demand margin: none") == 1
