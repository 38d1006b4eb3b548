"""Issue 16, row 14: kill -9 during `solve/place/report -o` left `.NAME.XXXX.tmp` beside
the output and `tmpXXXX.mps(.log)` in $TMPDIR, and a stale one survived later clean runs.
Now the temporary files have two documented places (docs/cli.md, "Temporary files";
fleetplan/tempfiles.py): beside the output as `.NAME.fleetplan-HOST-PID-*.tmp` (the rename
stays atomic), swept by the next write to that folder once PID is gone; and one directory
per process under $TMPDIR for the solvers' MPS and logs, removed at exit and swept when
stale. A kill -9 is simulated by `os._exit` at the point of the kill (between the temp
write and the rename; inside the HiGHS run), in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fleetplan import tempfiles
from fleetplan.cli.common import write_atomic

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, tmpdir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120)


def test_a_write_killed_before_its_rename_leaves_a_named_temp_the_next_write_removes(tmp_path):
    out = tmp_path / "p.json"
    out.write_text("old\n")
    r = _run(f"""
        import os
        from fleetplan.cli import common
        common.os.replace = lambda *a: (print(os.getpid(), flush=True), os._exit(9))  # killed here
        common.write_atomic({str(out)!r}, "new\\n")
    """, tmp_path)
    assert r.returncode == 9, r.stderr
    pid = int(r.stdout)
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "p.json")
    assert len(left) == 1 and left[0].startswith(f".p.json.fleetplan-") and f"-{pid}-" in left[0] and left[0].endswith(".tmp")
    assert out.read_text() == "old\n"  # the earlier output intact
    # a live writer's temp (this process's parent) and another host's are never touched
    live = tmp_path / f".q.json.fleetplan-{tempfiles._HOST}-{os.getppid()}-abc12345.tmp"
    other = tmp_path / f".q.json.fleetplan-otherhost-{pid}-abc12345.tmp"
    live.write_text("x")
    other.write_text("x")
    write_atomic(tmp_path / "r.json", "clean run\n")  # any later write to the folder sweeps it
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["p.json", "r.json", live.name, other.name])


def test_an_export_killed_between_its_renames_gets_the_earlier_export_back(tmp_path):
    dead = _run("import os; print(os.getpid())", tmp_path)
    pid = int(dead.stdout)
    tag = f"fleetplan-{tempfiles._HOST}-{pid}-abc12345"
    (tmp_path / f".k8s.{tag}.old").mkdir()
    (tmp_path / f".k8s.{tag}.old" / "kustomization.yaml").write_text("earlier\n")
    (tmp_path / f".k8s.{tag}.tmp").mkdir()  # the new export, not yet renamed
    tempfiles.sweep_stale(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["k8s"]
    assert (tmp_path / "k8s" / "kustomization.yaml").read_text() == "earlier\n"


def test_highs_files_live_in_one_per_process_directory_swept_after_a_kill(tmp_path, monkeypatch):
    # a process's directory goes when it exits (the cheap case: no solver imported)
    r = _run("from fleetplan.tempfiles import process_temp_dir; print(process_temp_dir().name)", tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"fleetplan-{tempfiles._HOST}-") and list(tmp_path.iterdir()) == []
    # HiGHS writes its log there (and, before issue 41's array hand-over, the MPS export); killed inside the
    # solve, the process leaves only that directory
    r = _run("""
        import os
        import highspy
        import pyomo.environ as pyo
        from fleetplan.solvers.base import SolveOptions
        from fleetplan.solvers.highs import solve_highs

        m = pyo.ConcreteModel()
        m.x = pyo.Var(domain=pyo.NonNegativeIntegers)
        m.c = pyo.Constraint(expr=m.x >= 1.5)
        m.o = pyo.Objective(expr=m.x)
        highspy.Highs.run = lambda self: os._exit(9)  # killed here
        solve_highs(m, SolveOptions())
    """, tmp_path)
    assert r.returncode == 9, r.stderr
    (left,) = tmp_path.iterdir()
    assert left.name.startswith(f"fleetplan-{tempfiles._HOST}-") and any(p.name.endswith(".highs.log") for p in left.iterdir())
    # the next process to make its directory sweeps the dead one's
    monkeypatch.setattr(tempfiles.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(tempfiles, "_mine", {})
    mine = tempfiles.process_temp_dir()
    assert list(tmp_path.iterdir()) == [mine]
    tempfiles._cleanup(mine)
