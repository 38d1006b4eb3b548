"""Issue 39 item 23: ``fleetplan simulate PLAN --region us-east --scenario sizing`` (a
documented example) ran for minutes and printed nothing when its output was not a terminal
-- the progress bar is silent there -- so a log or CI run could not tell a slow run from a
hung one. Now each phase gets a line on stderr (the bar stays for a terminal). The run
also holds half the memory and does less work per decode step, with the same results: the
chunked loops against whole-run ones and the acceptance hash's identity below (the
documented example's report was compared byte for byte, docs/benchmarks.md; the token
rebuild of tests/sim/test_engine.py checks every drafting resident's hash against the log)."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from fleetplan.cli.app import app
from tests.sim.test_simulate_cli import FAST, gemini_plan_file  # noqa: F401 -- the fixture

runner = CliRunner()


def test_a_log_line_per_phase_when_stderr_is_not_a_terminal(gemini_plan_file):  # noqa: F811
    r = runner.invoke(app, ["simulate", str(gemini_plan_file), "--region", "us-east", "--scenario", "sizing", *FAST, "--json"])
    assert r.exit_code == 0, r.output
    json.loads(r.stdout)  # the document alone on stdout
    lines = [x for x in r.stderr.splitlines() if x.startswith("simulate: ")]
    phases = [re.sub(r" \(at [0-9,.]+ s\)$", "", x[len("simulate: "):]) for x in lines]
    for tier in ("short", "long"):
        assert [p for p in phases if p.startswith(tier + ":")] == [f"{tier}: requests", f"{tier}: prefill", f"{tier}: decode", f"{tier}: measuring"], phases
    assert all(re.search(r"\(at [0-9,.]+ s\)$", x) for x in lines), lines


def test_a_load_sweep_logs_its_points(gemini_plan_file, tmp_path):  # noqa: F811
    r = runner.invoke(app, ["simulate", str(gemini_plan_file), "--region", "us-east", "--tier", "long", "--sweep-load", "--duration", "6",
                            "--warmup", "1", "--scale", "0.2", "--png", str(tmp_path / "s.png")])
    assert r.exit_code == 0, r.output
    lines = [x for x in r.stderr.splitlines() if x.startswith("simulate: long: sweeping the load")]
    assert len(lines) >= 3 and any("of the points done" in x for x in lines), r.stderr


def test_the_chunked_loops_give_the_same_run(gemini_plan_file, monkeypatch):  # noqa: F811
    """The prefill pass and the decode arrivals run on Python lists a chunk of requests at a
    time (a whole run's lists held 2 GB of the 3.3 GB the example took): chunks of 7 requests
    give the very same report as chunks larger than the run."""
    import fleetplan.sim.engine as engine

    args = ["simulate", str(gemini_plan_file), "--region", "us-east", "--tier", "long", "--scale", "0.1", "--duration", "10", "--warmup", "1",
            "--json"]
    monkeypatch.setattr(engine, "_CHUNK", 1 << 30)
    whole = runner.invoke(app, args)
    monkeypatch.setattr(engine, "_CHUNK", 7)
    chunked = runner.invoke(app, args)
    assert whole.exit_code == chunked.exit_code == 0, (whole.output, chunked.output)
    assert json.loads(whole.stdout)["tiers"][0]["requests"] > 7 * 20
    assert whole.stdout == chunked.stdout


def test_a_residents_hash_base_plus_its_step_is_the_uniform_hash():
    """A decode slice keeps seed x golden + id x C1 + golden per resident and adds the step
    count (one addition per step instead of four): the same bits as uniform_hash."""
    import numpy as np

    from fleetplan.sim.engine import _hash_base, _mix, uniform_hash

    rng = np.random.default_rng(5)
    ids = rng.integers(0, 2**62, 1000)
    m = rng.integers(0, 10_000, 1000)
    for seed in (0, 99, 2**64 - 1, 0x5EED1234ABCD):
        with np.errstate(over="ignore"):
            got = _mix(_hash_base(seed, ids) + m.view(np.uint64))
        assert np.array_equal(got, uniform_hash(seed, ids, m))
