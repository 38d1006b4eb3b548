"""Issue 15 item 11: the Python API is documented (docs/api.md) and the page's example
runs as written.

Before the fix there was no page, and `what_if`, `place`, `simulate`, `build_report`,
`sensitivity` had no public entry point. The test writes the page's `small.yaml` block,
runs every `python` block in order in one namespace (except the one marked as not run),
checks that the page names every public entry point, and that `import fleetplan` still
loads no optimisation stack.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import fleetplan

PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
NOT_RUN = "# not run by the docs test"


def _blocks(kind: str) -> list[str]:
    return [body for k, body in BLOCK.findall(PAGE.read_text()) if k == kind]


def test_the_pages_example_runs(tmp_path, monkeypatch, capsys):
    yamls = {b.splitlines()[0][2:].strip(): b for b in _blocks("yaml") if b.startswith("# ")}
    assert "small.yaml" in yamls
    for name, body in yamls.items():
        (tmp_path / name).write_text(body)
    monkeypatch.chdir(tmp_path)
    code = [b for b in _blocks("python") if not b.startswith(NOT_RUN)]
    assert len(code) >= 6
    ns: dict = {}
    for i, block in enumerate(code):
        exec(compile(block, f"docs/api.md python block {i + 1}", "exec"), ns)  # noqa: S102 -- the page's own example
    out = capsys.readouterr().out
    assert "verified" in out and "lose us-east" in out
    assert (tmp_path / "mfu-sensitivity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert ns["plan"].instance is not None and ns["sim"].scenario == "lose:us-east@09"


def test_every_entry_point_is_documented_and_lazy():
    text = PAGE.read_text()
    for name in fleetplan.__all__:
        if name == "__version__":
            continue
        assert f"fleetplan.{name}" in text, f"docs/api.md does not document fleetplan.{name}"
        obj = getattr(fleetplan, name)
        assert obj.__doc__, name
    for name in ("what_if", "place", "simulate", "build_report", "sensitivity", "levers", "load_plan"):
        doc = getattr(fleetplan, name).__doc__
        assert "Returns" in doc and "Raises" in doc, f"fleetplan.{name}: the docstring says what it returns and raises"
    # import fleetplan stays fast: the optimisation stack loads on the first call that needs it
    r = subprocess.run([sys.executable, "-c", "import sys, fleetplan; fleetplan.Plan; fleetplan.load_plan; "
                        "print(sorted(m for m in ('pyomo', 'highspy', 'ortools', 'matplotlib') if m in sys.modules))"],
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"
