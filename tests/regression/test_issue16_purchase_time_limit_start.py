"""Issue 16 ("--time-limit means the wall clock of the whole command, measured from process
start"): `purchase --time-limit` counted from when the purchase file had been read, so
start-up and reading the file were not in it. It is now the command's start + the limit,
as for `solve`; a command whose limit was spent before the build ends with exit 3 at the
first node."""

from __future__ import annotations

import time

import yaml
from typer.testing import CliRunner

import fleetplan.deadline as deadline
from fleetplan.cli.app import app
from tests.purchase.helpers import two_paths, write_base

runner = CliRunner()


def test_the_purchase_time_limit_counts_from_the_commands_start(tmp_path, monkeypatch):
    f = tmp_path / "purchase.yaml"
    f.write_text(yaml.safe_dump(two_paths(write_base(tmp_path)), sort_keys=False))
    monkeypatch.setattr(deadline, "command_start", lambda: time.monotonic() - 100.0)  # started 100 s ago
    r = runner.invoke(app, ["purchase", str(f), "--no-value", "--time-limit", "60"])
    assert r.exit_code == 3, r.output
    assert "the time limit passed while building node 1 of" in " ".join(r.stderr.split()), r.output
