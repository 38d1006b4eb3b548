"""fleetplan: capacity planning and placement for LLM serving fleets.

Physics is precomputed (:mod:`fleetplan.perf`), the optimiser only selects and counts
(:mod:`fleetplan.models`), and an independent checker re-proves every plan
(:mod:`fleetplan.results`).

The Python API (``docs/api.md``): :func:`load_instance` / :func:`parse_instance` (every
instance is checked: schema and cross-field), :func:`solve` (-> ``SolveOutcome`` with
``.plan``), :func:`verify`, :func:`load_plan`, :func:`what_if`, :func:`place`,
:func:`simulate`, :func:`build_report` / :func:`render_html`, :func:`sensitivity`,
:func:`levers`; the documents :class:`Instance`, :class:`Plan`; :class:`SolveOptions`.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "Instance", "load_instance", "parse_instance", "solve", "SolveOptions", "Plan", "verify", "load_plan",
           "plan_instance", "what_if", "place", "simulate", "build_report", "render_html", "sensitivity", "levers"]

#: name -> (module, attribute) of the entry points loaded on first use
_LAZY = {
    **{name: ("fleetplan.instance", name) for name in ("Instance", "load_instance", "parse_instance")},
    "solve": ("fleetplan.sizing", "solve"),
    "SolveOptions": ("fleetplan.solvers.base", "SolveOptions"),
    "Plan": ("fleetplan.results.plan", "Plan"),
    "verify": ("fleetplan.results.verify", "verify"),
    **{name: ("fleetplan.api", name) for name in ("load_plan", "plan_instance", "what_if", "place", "simulate", "build_report",
                                                  "render_html", "sensitivity", "levers")},
}

#: entry points that build models: Pyomo is imported before SciPy for them (see cli/solve.py)
_OPTIMISING = {"solve", "what_if", "place", "simulate", "build_report", "sensitivity", "levers"}


def __getattr__(name: str):
    """The entry points load the optimisation stack (Pyomo, HiGHS) on first use, so
    ``import fleetplan`` and ``fleetplan perf`` stay fast; even the instance schema
    (pydantic) waits, so the console entry point (:mod:`fleetplan.cli.entry`) guards every
    import the command line makes."""
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        if name in _OPTIMISING:
            import pyomo.core  # noqa: F401  (before SciPy: see fleetplan/imports.py)
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'fleetplan' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
