"""`fleetplan solve` with stderr not a terminal (a log, CI, a pipe) printed no progress at all:
its phases went to rich's spinner, which draws nothing there, while docs/cli.md speaks of the
progress lines (a newcomer's trial). Now one line per phase, with the wall time since the
solve began, as `simulate` does."""

from __future__ import annotations

import re
import subprocess
import sys


def test_solve_prints_a_line_per_phase_when_stderr_is_not_a_terminal(tmp_path):
    out = tmp_path / "plan.json"
    run = subprocess.run([sys.executable, "-m", "fleetplan", "solve", "llama70b-h100", "-o", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = [ln for ln in run.stderr.splitlines() if ln.startswith("solve: ")]
    phases = [re.sub(r" \(at [0-9.]+ s\)$", "", ln[len("solve: "):]) for ln in lines]
    assert phases[0] == "computing candidate tables" and "building the model" in phases and phases[-1] == "extracting and verifying the plan"
    assert all(re.search(r" \(at [0-9]+\.[0-9] s\)$", ln) for ln in lines)
    assert len(phases) == len(set(phases))  # a line per new phase, not per repeat
    assert out.exists()
