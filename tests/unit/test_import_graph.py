"""The package's layers, read from its import graph (every ``import`` and ``from ... import``
of every module, at module level or inside a function or an ``if TYPE_CHECKING:`` block --
an arrow is an arrow whenever it runs).

The layers, bottom to top (docs/architecture.md has the picture); an arrow may point down
or stay within its layer, never up:

==========  ===================================================================================
foundation  ``fleetplan`` (the root: ``__version__``, lazy entry points) and errors, deadline,
            interrupts, tempfiles, imports, percent, documents: nothing of fleetplan above
perf        the physics (plain data in, numbers out): the foundation only -- never
            ``fleetplan.instance`` (type hints name perf/inputs.py's Protocols and aliases)
instance    the instance: schema, checks, io, physics sources, scenarios, modes, variants ...
tables      the precomputed candidate tables (derived, data, prefill, pods, cache, store, summary)
models      the Pyomo builders by family
solvers     HiGHS, CP-SAT, arrays, components ...
results     plan records and the independent verifier: never models/, solvers/ or tables/
jobs        sizing, placement, whatif, purchase, sim, export, report, workload, samples
faces       cli/, api.py, __main__: nothing below imports them (the root's entry points load
            api lazily, by name)
==========  ===================================================================================

Besides the layer order: the package graph (``fleetplan.X`` -> ``fleetplan.Y``) has no circle,
and no two modules import each other through any path.

Shims -- a module at an old import path whose docstring begins "Deprecated import path" and
which only re-exports -- sit outside the layers: their arrows up (``fleetplan.instance.derived``
-> ``fleetplan.tables.derived``) are what they are for. They still count for the module
circles.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[2] / "fleetplan"

#: Layers bottom to top, each a list of package prefixes (a module belongs to the layer of the
#: longest prefix that names it or a package holding it). The jobs' final layout included
#: (sizing/, placement/, whatif/, export/), and their old places until they move.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("fleetplan", "fleetplan.errors", "fleetplan.deadline", "fleetplan.interrupts", "fleetplan.tempfiles",
                    "fleetplan.imports", "fleetplan.percent", "fleetplan.documents")),
    ("perf", ("fleetplan.perf",)),
    ("instance", ("fleetplan.instance",)),
    ("tables", ("fleetplan.tables",)),
    ("models", ("fleetplan.models",)),
    ("solvers", ("fleetplan.solvers",)),
    ("results", ("fleetplan.results",)),
    ("jobs", ("fleetplan.sizing", "fleetplan.placement", "fleetplan.whatif", "fleetplan.purchase", "fleetplan.sim",
              "fleetplan.export", "fleetplan.report", "fleetplan.workload", "fleetplan.samples", "fleetplan.k8s",
              # old places of the jobs' modules: the shims sizing_pods and post_solve_cost
              "fleetplan.sizing_pods", "fleetplan.post_solve_cost",
              # the generator of docs/formulation.md: reads the families' docstrings and the CP-SAT
              # backend's, so it sits above both (a doc job kept beside the families it reads)
              "fleetplan.models.sizing.docgen")),
    ("faces", ("fleetplan.cli", "fleetplan.api", "fleetplan.__main__")),
]
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}

SHIM_MARK = "Deprecated import path"


def _modules() -> dict[str, Path]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        parts = f.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


@lru_cache(maxsize=1)
def _trees() -> dict[str, ast.Module]:
    return {name: ast.parse(f.read_text(encoding="utf-8")) for name, f in _modules().items()}


def _is_shim(tree: ast.Module) -> bool:
    """A module whose docstring begins with :data:`SHIM_MARK` and whose body is that
    docstring, imports, constant assignments (``__all__``, the names it forwards), its
    ``DeprecationWarning`` and a module ``__getattr__``/``__dir__`` (names loaded on first use)
    only."""
    doc = ast.get_docstring(tree) or ""
    if not doc.startswith(SHIM_MARK):
        return False
    rest = tree.body[1:]
    return all(isinstance(n, (ast.Import, ast.ImportFrom)) or (isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) for t in n.targets)
                                                                 and isinstance(n.value, (ast.List, ast.Tuple, ast.Constant)))
               or _is_warning(n) or (isinstance(n, ast.FunctionDef) and n.name in ("__getattr__", "__dir__")) for n in rest)


def _is_warning(n: ast.stmt) -> bool:
    """``warnings.warn("... is a deprecated import path ...", DeprecationWarning, ...)``."""
    return (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and ast.unparse(n.value.func) == "warnings.warn"
            and any(ast.unparse(a) == "DeprecationWarning" for a in n.value.args))


@lru_cache(maxsize=1)
def shims() -> frozenset[str]:
    return frozenset(name for name, tree in _trees().items() if _is_shim(tree))


@lru_cache(maxsize=1)
def import_graph() -> nx.DiGraph:
    """(Read once per test process; the tests only read it.) module -> module it imports (names as ``fleetplan.x.y``); ``from pkg import mod`` is an
    arrow to ``pkg.mod`` when that is a module, else to ``pkg`` (as import-linter's grimp
    resolves them)."""
    mods = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for name, tree in _trees().items():
        package = name if mods[name].name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
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


def layer_of(module: str) -> str:
    """The layer of ``module`` (:data:`LAYERS`: the longest prefix). Raises KeyError for a
    module no layer names (a new top-level package: give it a layer)."""
    best, layer = -1, None
    for name, prefixes in LAYERS:
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, layer = len(p), name
    if layer is None:
        raise KeyError(module)
    return layer


def package_of(module: str) -> str:
    """``fleetplan.results.verify`` -> ``fleetplan.results``; top-level modules are their own."""
    return ".".join(module.split(".")[:2])


def _held_arrows() -> list[tuple[str, str]]:
    """Every arrow held to the layers: every arrow but a shim's."""
    return [(a, b) for a, b in import_graph().edges if a not in shims()]


# ----------------------------------------------------------------------------- the reader


def test_the_graph_reads_the_imports_it_should():
    """The reader itself: arrows it must see (module level, inside a function, a relative
    form is not used in the package) and one it must not invent."""
    g = import_graph()
    assert g.has_edge("fleetplan.sim.run", "fleetplan.sim.metrics")  # module level
    assert g.has_edge("fleetplan.report.executor", "fleetplan.report.ray_executor")  # inside get_executor
    assert g.has_edge("fleetplan.sim.run", "fleetplan.sim.arrivals")  # from fleetplan.sim import arrivals
    assert not g.has_edge("fleetplan.sim.run", "fleetplan.sim")


def test_every_module_has_a_layer_and_the_shims_are_shims():
    """Each module of the package is in a layer (a new top-level package needs one), and the
    shims are what the house allows: the old path's docstring says where the code moved, the
    module re-exports and does nothing else."""
    missing = []
    for m in _modules():
        try:
            layer_of(m)
        except KeyError:
            missing.append(m)
    assert not missing, f"modules in no layer of LAYERS: {missing}"
    assert {"fleetplan.instance.derived", "fleetplan.instance.pods", "fleetplan.instance.tables", "fleetplan.results.placement",
            "fleetplan.results.export", "fleetplan.k8s", "fleetplan.sizing_pods", "fleetplan.post_solve_cost"} <= shims()
    for m in shims():
        assert all(b.startswith("fleetplan.") for b in import_graph().successors(m)), m




# ----------------------------------------------------------------------------- circles


def test_no_import_circle():
    """No module reaches itself through its imports (shims included): move the shared part
    below both."""
    circles = sorted(sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1)
    assert not circles, f"import circles: {circles}"


def test_the_package_graph_is_a_dag():
    """``fleetplan.X`` -> ``fleetplan.Y`` whenever a module of X imports one of Y: no circle
    (jobs may use each other, one way). Shims' arrows are left out."""
    g = nx.DiGraph()
    g.add_edges_from((package_of(a), package_of(b)) for a, b in _held_arrows() if package_of(a) != package_of(b))
    circles = sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)
    assert not circles, f"packages importing each other: {circles}"


# ----------------------------------------------------------------------------- layers


def test_arrows_point_down_the_layers():
    """Every arrow stays within its layer or points to a lower one (:data:`LAYERS`)."""
    up = sorted((a, b, f"{layer_of(a)} -> {layer_of(b)}") for a, b in _held_arrows() if RANK[layer_of(a)] < RANK[layer_of(b)])
    assert not up, f"arrows up the layers: {up}"


def test_the_physics_imports_the_foundation_only():
    """perf/ (the closed forms) imports nothing of fleetplan but the foundation and itself --
    not the instance package, not even for type hints -- and neither Pyomo, HiGHS nor OR-Tools."""
    g = import_graph()
    bad = sorted((a, b) for a, b in g.edges if a.startswith("fleetplan.perf") and layer_of(b) not in ("foundation", "perf"))
    assert not bad, bad
    third = []
    for name, tree in _trees().items():
        if not name.startswith("fleetplan.perf"):
            continue
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            third += [(name, n) for n in names if n.split(".")[0] in ("pyomo", "highspy", "ortools")]
    assert not third, third


def test_the_verifier_never_imports_the_models_the_solvers_or_the_tables():
    """results/ re-derives every figure from the instance with perf/: it shares no code with
    the models, the solvers or the candidate tables' builders."""
    bad = sorted((a, b) for a, b in _held_arrows()
                 if layer_of(a) == "results" and layer_of(b) in ("models", "solvers", "tables"))
    assert not bad, bad


def test_the_core_never_imports_the_command_line():
    g = import_graph()
    bad = sorted((a, b) for a, b in g.edges if b.startswith("fleetplan.cli") and not a.startswith("fleetplan.cli")
                 and a not in ("fleetplan.__main__",))
    assert not bad, bad


def test_only_the_faces_import_the_api():
    """``fleetplan.api`` is a face: the command line may use it (the root package loads its
    entry points lazily, by name); nothing of the core does."""
    g = import_graph()
    bad = sorted(a for a in g.predecessors("fleetplan.api") if not (a.startswith("fleetplan.cli") or a == "fleetplan"))
    assert not bad, bad


def test_no_module_of_the_package_imports_an_old_path():
    """The shims are for users' old imports: the package itself imports the new paths (so
    fleetplan never warns about itself)."""
    g = import_graph()
    bad = sorted((a, s) for s in shims() for a in g.predecessors(s))
    assert not bad, bad


def test_every_old_path_warns_and_names_the_new_one():
    """Importing a shim raises a DeprecationWarning naming the path to import instead."""
    import subprocess
    import sys

    for m in sorted(shims()):
        code = f"import warnings; warnings.simplefilter('error', DeprecationWarning); import {m}"
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent)
        assert p.returncode != 0 and "DeprecationWarning" in p.stderr and "is a deprecated import path: import fleetplan." in p.stderr, (m, p.stderr[-500:])


def test_the_physics_knows_every_attention_layout_the_schema_allows():
    """perf/inputs.py names the attention layouts by the schema's ``kind`` values (the physics
    imports no schema): the two lists must not drift, or a new layout would reach
    roofline's TypeError at run time instead of failing here."""
    import typing

    from fleetplan.instance.schema import GQAAttention, HybridAttention, MLAAttention
    from fleetplan.perf.inputs import GQA_KINDS, HYBRID_KIND, MLA_KIND

    def kinds(cls) -> set[str]:
        return set(typing.get_args(cls.model_fields["kind"].annotation))

    assert kinds(GQAAttention) == set(GQA_KINDS)
    assert kinds(MLAAttention) == {MLA_KIND}
    assert kinds(HybridAttention) == {HYBRID_KIND}
    from fleetplan.instance import schema

    layouts = {n for n, c in vars(schema).items() if isinstance(c, type) and n.endswith("Attention") and hasattr(c, "model_fields")}
    assert layouts == {"GQAAttention", "MLAAttention", "HybridAttention"}, layouts
