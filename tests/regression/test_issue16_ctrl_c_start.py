"""A Ctrl-C while the command line is still importing (before any command runs) printed a
raw KeyboardInterrupt traceback; now exit 130 and one line on stderr. The SIGINT is real,
sent by the process to itself the moment it starts importing ``fleetplan.cli.app`` (an
import hook), through both ways in: ``python -m fleetplan`` and the console-script target
pyproject.toml declares."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOK = """
    import importlib.abc, os, signal, sys
    class Interrupt(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "fleetplan.cli.app":
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, halfway through the imports
            return None
    sys.meta_path.insert(0, Interrupt())
    sys.argv = ["fleetplan", "solve", "gemini-ironwood"]
"""
SCRIPT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["fleetplan"]


@pytest.mark.parametrize("start", [
    "import runpy; runpy.run_module('fleetplan', run_name='__main__')",
    f"import importlib; importlib.import_module({SCRIPT.split(':')[0]!r}).{SCRIPT.split(':')[1]}()",
], ids=["python -m fleetplan", "console script"])
def test_ctrl_c_while_importing_exits_130_with_one_line(start):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(HOOK) + start], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 130, r.stderr
    assert r.stderr == "interrupted while starting (Ctrl-C): no command ran, nothing was written\n"
    assert r.stdout == ""
