"""Numbers in the documentation that come from a plan, an export or a study, rendered from
their sources (hand-copied, the README, docs/reports.md and docs/controller.md had kept
figures of plans two physics changes old beside commands that print today's).

A generated passage of README.md or docs/*.md sits between two HTML comments, which
Markdown does not show:

    <!-- generated:KEY -->
    ... text rendered by the function registered for KEY ...
    <!-- /generated:KEY -->

Written on lines of their own the markers hold a block (a table, paragraphs); written
inside a line (``... the knee is <!-- generated:k -->784<!-- /generated:k --> ...``) a
phrase. ``python -m fleetplan.report.docnumbers`` renders every block and rewrites the
files in place; ``--check`` rewrites nothing and exits 1 listing the stale blocks
(tests/report/test_docs_numbers.py runs the same comparison in the test suite).

The renderers (:mod:`.plans`, :mod:`.studies`) read :class:`Sources`:

* cheap sources, computed when asked: the bundled plans as ``fleetplan solve`` writes them
  (``solve(load_instance(name))`` at the default options), their report data
  (:func:`fleetplan.report.data.build_report_data`), the Gemini plan placed and exported
  for Kubernetes, the brief's hand plan, ``fleetplan perf``'s summary -- seconds each;
* the studies that take minutes, read from ``benchmarks/results/*.json``:
  ``gemini_sensitivity.json`` and ``gemini_levers.json`` (``python
  benchmarks/docs_figures.py``, which also draws docs/figures/), ``hit_rate_study.json``
  (``python benchmarks/hit_rate_study.py``). Each records the instance's hash and the base
  plan it was run against; the test checks both against today's solve, so a change to
  the physics that moves the plan fails the test until the studies are re-run.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetplan.report.docnumbers.registry import RENDERERS, block  # noqa: F401 -- block re-exported

#: The repository root (docs and benchmark results are read from the working tree, not the wheel).
ROOT = Path(__file__).resolve().parents[3]

#: Files that may hold generated blocks, relative to ROOT.
DOC_GLOBS = ("README.md", "docs/*.md")

_MARK = re.compile(r"<!-- generated:(?P<key>[a-z0-9][a-z0-9_-]*) -->(?P<body>.*?)<!-- /generated:(?P=key) -->", re.S)
_OPEN = re.compile(r"<!-- /?generated:([a-z0-9][a-z0-9_-]*) -->")  # KEY in capitals (the syntax, as the docs spell it) is no marker

REFRESH = "python -m fleetplan.report.docnumbers"
STUDIES = {"gemini_sensitivity.json": "python benchmarks/docs_figures.py", "gemini_levers.json": "python benchmarks/docs_figures.py",
           "hit_rate_study.json": "python benchmarks/hit_rate_study.py"}


@dataclass
class Sources:
    """Where the renderers read their numbers. Every source is computed (or read) once, on
    first use; tests pass the session's plans and reports in (``plan`` and ``report``:
    callables of a bundled instance's name) so that nothing is solved twice.

    ``plan(name)`` -> (Instance, Plan) of ``solve(load_instance(name))``; ``report(name)`` ->
    its :class:`fleetplan.report.data.ReportData`; ``results`` the folder of the studies'
    JSON (benchmarks/results)."""

    plan_fn: Callable[[str], tuple] | None = None
    report_fn: Callable[[str], Any] | None = None
    results: Path = ROOT / "benchmarks" / "results"
    _cache: dict = field(default_factory=dict)

    def _once(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def plan(self, name: str = "gemini-ironwood"):
        """(instance, plan) of the bundled ``name`` at solve's default options."""

        def make():
            if self.plan_fn is not None:
                return self.plan_fn(name)
            import pyomo.environ  # noqa: F401 -- before SciPy, as the CLI does

            from fleetplan.instance.io import load_instance
            from fleetplan.sizing import solve

            inst = load_instance(name)
            return inst, solve(inst).plan

        return self._once(("plan", name), make)

    def report(self, name: str = "gemini-ironwood"):
        """The report data of ``plan(name)`` (what `fleetplan report` draws)."""

        def make():
            if self.report_fn is not None:
                return self.report_fn(name)
            from fleetplan.report.data import build_report_data

            return build_report_data(*self.plan(name))

        return self._once(("report", name), make)

    def placement(self, name: str = "gemini-ironwood"):
        """``fleetplan place`` of ``plan(name)``."""

        def make():
            from fleetplan.placement import place

            return place(*self.plan(name))

        return self._once(("placement", name), make)

    def export(self, name: str = "gemini-ironwood", workload: str = "leaderworkerset"):
        """The Kubernetes bundle ``fleetplan export PLACEMENT --plan PLAN --format all`` writes
        (``--workload`` as given), built in memory."""

        def make():
            from fleetplan.export.k8s import ExportOptions, build_bundle

            inst, plan = self.plan(name)
            return build_bundle(inst, plan, self.placement(name), ExportOptions(workload=workload))

        return self._once(("export", name, workload), make)

    def hand_plan(self, name: str = "gemini-ironwood"):
        """The brief's hand plan (``fleetplan solve --baseline``), verified."""

        def make():
            from fleetplan.results.baseline import hand_plan

            return hand_plan(self.plan(name)[0])

        return self._once(("hand", name), make)

    def perf(self, name: str = "gemini-ironwood") -> dict:
        """``fleetplan perf NAME --json``."""

        def make():
            from fleetplan.tables.summary import perf_summary

            return perf_summary(self.plan(name)[0])

        return self._once(("perf", name), make)

    def study(self, file: str) -> dict:
        """A study's JSON document from ``results`` (see STUDIES for the command that writes it)."""
        return self._once(("study", file), lambda: json.loads((self.results / file).read_text(encoding="utf-8")))


# ----------------------------------------------------------------------------- the markers


def doc_files(root: Path = ROOT) -> list[Path]:
    """The Markdown files that may hold generated blocks, sorted."""
    return sorted({p for g in DOC_GLOBS for p in root.glob(g)})


def blocks_in(text: str) -> list[tuple[str, str]]:
    """(key, current body) of every generated block of ``text``, in order. Raises
    ValueError for a marker without its partner (an unclosed or misspelt block)."""
    found = [(m["key"], m["body"]) for m in _MARK.finditer(text)]
    markers = _OPEN.findall(text)
    if len(markers) != 2 * len(found):
        paired = {k for k, _ in found}
        lost = sorted({k for k in markers if k not in paired})
        raise ValueError(f"generated-block markers without their partner: {', '.join(lost) or '(a nested or repeated marker)'}")
    return found


def _wrap(markdown: str, width: int = 100) -> str:
    """Paragraphs and list items of ``markdown`` wrapped at ``width`` columns (tables and code
    kept as they are), so a changed figure changes a line, not a paragraph."""
    import textwrap

    out = []
    for para in markdown.split("\n\n"):
        if para.startswith(("|", "```")) or "\n```" in para:
            out.append(para)
            continue
        indent = "  " if para.startswith(("* ", "- ")) else ""
        out.append(textwrap.fill(" ".join(para.split()), width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False))
    return "\n\n".join(out)


def _body(rendered: str, old: str) -> str:
    """A block's new body: on lines of its own, wrapped, when the old one was (a block), inline otherwise."""
    return f"\n{_wrap(rendered)}\n" if old.startswith("\n") else rendered


def render_text(text: str, src: Sources) -> str:
    """``text`` with every generated block re-rendered. Raises KeyError naming a block
    without a renderer."""
    blocks_in(text)

    def sub(m: re.Match) -> str:
        key = m["key"]
        if key not in RENDERERS:
            raise KeyError(f"no renderer for <!-- generated:{key} --> (fleetplan/report/docnumbers)")
        return f"<!-- generated:{key} -->{_body(RENDERERS[key](src), m['body'])}<!-- /generated:{key} -->"

    return _MARK.sub(sub, text)


def stale_blocks(src: Sources, root: Path = ROOT, write: bool = False) -> list[str]:
    """'FILE: KEY' of every block whose text differs from its rendering; with ``write``
    the files are rewritten (atomically) with the rendered blocks."""
    stale, changed = [], {}
    for path in doc_files(root):
        text = path.read_text(encoding="utf-8")
        if "<!-- generated:" not in text:
            continue
        new = render_text(text, src)
        if new == text:
            continue
        before = dict(blocks_in(text))
        stale += [f"{path.relative_to(root)}: {k}" for k, body in blocks_in(new) if before.get(k) != body]
        changed[path] = new
    if write:  # every block rendered before any file is written: a renderer that fails leaves the docs as they were
        for path, new in changed.items():
            _write(path, new)
    return stale


def _write(path: Path, text: str) -> None:
    """Replace ``path`` atomically (a temporary file beside it, then a rename)."""
    import os

    from fleetplan.tempfiles import sibling_temp

    fd, tmp = sibling_temp(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    """``python -m fleetplan.report.docnumbers [--check]``: render every generated block of
    README.md and docs/*.md (solving the bundled plans it needs, about a minute) and
    rewrite the files; with --check write nothing and exit 1 when a block is stale."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m fleetplan.report.docnumbers", description=main.__doc__)
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 listing the stale blocks")
    a = ap.parse_args(argv)
    from fleetplan.report.docnumbers import plans, studies  # noqa: F401 -- registers the renderers

    stale = stale_blocks(Sources(), write=not a.check)
    for s in stale:
        print(("stale: " if a.check else "rewritten: ") + s)
    if a.check and stale:
        print(f"run `{REFRESH}` to rewrite them", file=sys.stderr)
        return 1
    if not stale:
        print("every generated block is current")
    return 0
