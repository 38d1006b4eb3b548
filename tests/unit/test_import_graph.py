"""The package's import graph, read from the source (every ``import`` and ``from ... import``
of every module, at module level or inside a function or an ``if TYPE_CHECKING:`` block --
an arrow is an arrow whenever it runs): no import circle between files beyond the ones
listed below, and no forbidden arrow between layers.

``KNOWN_CIRCLES`` is a ratchet, not an allowance: each is a circle the house issue (42)
removes; the test fails on any new circle, on a listed one that grew, and on a listed one
that is gone (so the list says what is left)."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[2] / "fleetplan"

#: Circles still in the package (each a set of modules), to be broken by moves.
KNOWN_CIRCLES = [
    {"fleetplan.results.evaluate", "fleetplan.results.robust"},
    {"fleetplan.results.records", "fleetplan.results.verify"},
    {"fleetplan.results.placement", "fleetplan.results.placement_summary"},
    {"fleetplan.placement", "fleetplan.placement_pods"},
    {"fleetplan.instance.checks", "fleetplan.instance.io", "fleetplan.instance.physics", "fleetplan.instance.schema",
     "fleetplan.perf.comm", "fleetplan.perf.roofline"},
]

#: The verifier re-derives every figure on its own: it shares no code with the models.
VERIFIER = {"fleetplan.results.verify", "fleetplan.results.evaluate", "fleetplan.results.records"}


def _modules() -> dict[str, Path]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        parts = f.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


@lru_cache(maxsize=1)
def import_graph() -> nx.DiGraph:
    """(Read once per test process; the tests only read it.) module -> module it imports (names as ``fleetplan.x.y``); ``from pkg import mod`` is an
    arrow to ``pkg.mod`` when that is a module, else to ``pkg`` (as import-linter's grimp
    resolves them)."""
    mods = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for name, f in mods.items():
        package = name if f.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:  # import a.b.c of a non-module attribute: its module
                    t = t.rpartition(".")[0]
                if t and t != name:
                    g.add_edge(name, t)
    return g


def test_the_graph_reads_the_imports_it_should():
    """The reader itself: arrows it must see (module level, inside a function, a relative
    form is not used in the package) and one it must not invent."""
    g = import_graph()
    assert g.has_edge("fleetplan.sim.run", "fleetplan.sim.metrics")  # module level
    assert g.has_edge("fleetplan.report.executor", "fleetplan.report.ray_executor")  # inside get_executor
    assert g.has_edge("fleetplan.sim.run", "fleetplan.sim.arrivals")  # from fleetplan.sim import arrivals
    assert not g.has_edge("fleetplan.sim.run", "fleetplan.sim")


def test_no_new_import_circle():
    circles = sorted((c for c in nx.strongly_connected_components(import_graph()) if len(c) > 1), key=sorted)
    new = [sorted(c) for c in circles if c not in KNOWN_CIRCLES]
    gone = [sorted(c) for c in KNOWN_CIRCLES if c not in circles]
    assert not new, f"import circles not in KNOWN_CIRCLES (move the shared part below both): {new}"
    assert not gone, f"circles broken (or changed): take them out of KNOWN_CIRCLES: {gone}"


def test_the_core_never_imports_the_command_line():
    g = import_graph()
    bad = sorted((a, b) for a, b in g.edges if b.startswith("fleetplan.cli") and not a.startswith("fleetplan.cli")
                 and a not in ("fleetplan.__main__",))
    assert not bad, bad


def test_the_verifier_never_imports_the_models():
    g = import_graph()
    bad = sorted((a, b) for a, b in g.edges if a in VERIFIER and (b == "fleetplan.models" or b.startswith("fleetplan.models.")))
    assert not bad, bad


def test_the_physics_knows_no_optimiser():
    """perf/ (the closed forms) imports neither Pyomo nor the models nor the solvers."""
    mods = _modules()
    bad = []
    for name, f in mods.items():
        if not name.startswith("fleetplan.perf"):
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            bad += [(name, n) for n in names if n.split(".")[0] in ("pyomo", "highspy", "ortools") or n.startswith(("fleetplan.models", "fleetplan.solvers"))]
    assert not bad, bad
