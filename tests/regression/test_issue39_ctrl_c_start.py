"""Issue 39's newcomer trial, item 4: a Ctrl-C during start-up -- after the command line's
import (which fleetplan.cli.entry guards, tests/regression/test_issue16_ctrl_c_start.py)
and before the command runs -- printed a traceback from typer building the command line
(exit 130 by the signal), or, in the command's own first imports, a pydantic_core
SchemaError carrying the KeyboardInterrupt (exit 1); typer's argument parsing turned it
into a silent exit 130. Each now ends with one line on stderr and exit 130.

The SIGINT is real and sent at a known point, whatever the machine's load: the process
sends it to itself from a hook on the step named (no timing)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

HOOKS = {
    # typer builds the click command from the functions' signatures (typer.main.get_command)
    "building the command line": """
        import typer.main
        orig = typer.main.get_command
        def hooked(app):
            os.kill(os.getpid(), signal.SIGINT)
            return orig(app)
        typer.main.get_command = hooked
    """,
    # click parses the arguments (typer turns a KeyboardInterrupt there into a silent Exit(130))
    "parsing the arguments": """
        import typer.core
        orig = typer.core.TyperCommand.parse_args
        def hooked(self, ctx, args):
            os.kill(os.getpid(), signal.SIGINT)
            return orig(self, ctx, args)
        typer.core.TyperCommand.parse_args = hooked
    """,
    # the command's first import; the KeyboardInterrupt comes out as another exception, as
    # pydantic_core's SchemaError did when the signal landed while it built a model's schema
    "a library wrapping the interrupt": """
        import importlib.abc
        class SchemaError(Exception):
            pass
        class Interrupt(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "fleetplan.tables.summary":
                    try:
                        os.kill(os.getpid(), signal.SIGINT)
                        for _ in range(10**6):
                            pass
                    except KeyboardInterrupt as e:
                        raise SchemaError(f"Error building validator: {e!r} KeyboardInterrupt") from None
                return None
        sys.meta_path.insert(0, Interrupt())
    """,
}


@pytest.mark.parametrize("where", list(HOOKS))
def test_ctrl_c_during_start_up_is_one_line_and_exit_130(where, tmp_path):
    script = "import os, signal, sys\n" + textwrap.dedent(HOOKS[where]) + textwrap.dedent("""
        sys.argv = ["fleetplan", "perf", "llama70b-h100"]
        from fleetplan.cli.entry import main
        main()
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 130, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted") and "(Ctrl-C)" in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert r.stdout == ""
