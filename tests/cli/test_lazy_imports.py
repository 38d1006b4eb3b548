"""Start-up stays light (issue 19): what each command path imports, checked without
timing (docs/benchmarks.md, *Start-up and the brief's solve*, has the times).

Each check runs the command line in a fresh interpreter (modules already loaded by the
test session would hide an import) and lists the modules loaded when the command ends.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: run argv through the console entry point's code path (fleetplan.cli.app.main), stdout
#: swallowed; print the exit code and the loaded module names as JSON on the real stdout
_RUN = """
import contextlib, io, json, sys
sys.argv = ["fleetplan"] + json.loads(sys.argv[1])
code = 0
out = sys.stdout
try:
    with contextlib.redirect_stdout(io.StringIO()):
        from fleetplan.cli.app import main
        main()
except SystemExit as e:
    code = e.code
loader = sys.modules.get("pydantic.plugin._loader")
out.write(json.dumps({"code": code, "modules": sorted(sys.modules),
                     "lazy": sorted(n for n, m in sys.modules.items() if type(m).__name__ == "_LazyModule"),
                     "pydantic_plugins_searched": loader is not None and loader._plugins is not None}))
"""

#: third-party stacks that only the commands that need them may load
OPTIMISATION = ("pyomo", "highspy", "ortools", "networkx")
PLOTTING = ("matplotlib",)
SCIENCE = ("scipy",)
DOCUMENTS = ("numpy", "pydantic", "yaml")
#: fleetplan's own heavy parts: the schema, the physics, the models, the evaluation, ...
CORE_STACKS = ("fleetplan.instance", "fleetplan.perf", "fleetplan.models", "fleetplan.sizing", "fleetplan.solvers.highs",
               "fleetplan.results.plan", "fleetplan.results.loads", "fleetplan.results.evaluate", "fleetplan.results.verify",
               "fleetplan.sim", "fleetplan.export.k8s.bundle", "fleetplan.workload", "fleetplan.report", "fleetplan.purchase",
               "fleetplan.whatif", "fleetplan.placement", "fleetplan.api")


def _run(args: list[str], env: dict | None = None) -> dict:
    """``fleetplan ARGS`` in a fresh process (asserts exit 0): {"modules": names in
    sys.modules, "lazy": those registered but never executed (importlib's LazyLoader),
    "pydantic_plugins_searched": whether pydantic scanned the entry points for plugins}."""
    r = subprocess.run([sys.executable, "-c", _RUN, json.dumps(args)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["code"] in (0, None), (args, doc["code"])
    return doc


def _modules(args: list[str]) -> set[str]:
    """The modules loaded by ``fleetplan ARGS`` in a fresh process (asserts exit 0)."""
    return set(_run(args)["modules"])


def _loaded(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    """The top-level packages of ``packages`` that are in ``modules``."""
    return sorted(p for p in packages if p in modules)


def test_importing_the_command_line_loads_no_command_stack():
    """``import fleetplan.cli.app`` (every command's import cost): typer, rich and the CLI
    plumbing only -- no numpy, pydantic, yaml, SciPy, Pyomo, HiGHS, OR-Tools, matplotlib,
    and none of the core's heavy parts (:data:`CORE_STACKS`; errors, interrupts, temp
    files, the solve options, the precision helper and the k8s defaults are light).
    Before the lazy imports, numpy, pydantic, yaml, the instance schema, the simulator and
    the k8s bundle all loaded here."""
    code = "import json, sys, fleetplan.cli.app; print(json.dumps(sorted(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    modules = set(json.loads(r.stdout))
    assert _loaded(modules, OPTIMISATION + PLOTTING + SCIENCE + DOCUMENTS) == []
    assert sorted(m for m in modules if m.startswith(CORE_STACKS)) == []


def test_help_and_version_load_no_command_stack():
    """``fleetplan --help``, ``fleetplan perf --help`` and ``--version`` build every
    command's options and print; none of them loads a command's stack. (A subcommand's
    options are parsed by typer, which imports pydantic for that itself.)"""
    for args in (["--help"], ["--version"], ["perf", "--help"], ["solve", "--help"]):
        modules = _modules(args)
        allowed = ("pydantic",) if len(args) > 1 else ()
        assert _loaded(modules, tuple(p for p in OPTIMISATION + PLOTTING + SCIENCE + DOCUMENTS if p not in allowed)) == [], args
        assert sorted(m for m in modules if m.startswith(CORE_STACKS)) == [], args


def test_perf_loads_no_solver_stack():
    """``fleetplan perf`` (the closed-form model) loads the instance schema and numpy but
    no optimisation stack, plotting or SciPy, nor the plan evaluation or the simulator."""
    modules = _modules(["perf", "gemini-ironwood"])
    assert "fleetplan.tables.summary" in modules  # the command did run
    assert _loaded(modules, OPTIMISATION + PLOTTING + SCIENCE) == []
    assert not [m for m in modules if m.startswith(("fleetplan.sim", "fleetplan.models", "fleetplan.results.loads", "fleetplan.export.k8s.bundle"))]


def test_solve_loads_only_the_scipy_it_uses():
    """``fleetplan solve`` uses scipy.special only; Pyomo's import hook on SciPy would load
    scipy.stats, scipy.sparse, scipy.integrate and scipy.spatial with it, and
    ``scipy.signal`` (once used for one recurrence) loads scipy.stats and scipy.optimize
    -- about 0.5 s of the brief's solve (docs/benchmarks.md). Fails before
    fleetplan/imports.py and queueing._decayed_cumsum: all five were loaded."""
    modules = _modules(["solve", "llama70b-h100", "--json"])
    assert "pyomo.core" in modules and "scipy.special._ufuncs" in modules  # the solve did run
    assert sorted(m for m in ("scipy.stats", "scipy.signal", "scipy.optimize", "scipy.sparse", "scipy.integrate", "scipy.spatial")
                  if m in modules) == []
    # issue 41: the special functions' compiled module alone, not scipy.special's __init__ and SciPy's array-API layer
    # (0.085 s of CPU against 0.015 s); fails before: both were loaded
    assert sorted(m for m in ("scipy.special", "scipy.special._support_alternative_backends", "scipy._lib.array_api_compat")
                  if m in modules) == []
    # issue 41: the TTFT-of-the-sum recurrence runs in lfilter's compiled routine, loaded without scipy.signal's
    # package (which is still not loaded); fails before: the recurrence ran in Python, _sigtools not loaded
    assert "scipy.signal._sigtools" in modules
    assert _loaded(modules, PLOTTING + ("ortools",)) == []


def test_solve_loads_pyomo_core_without_environs_plugins():
    """Issue 41: the solve path builds its models with ``pyomo.core`` and hands HiGHS arrays
    (solvers/lparrays.py); ``pyomo.environ`` would also load every plugin package (Pyomo's
    writers and solver interfaces, GDP, DAE, network, contrib.solver, appsi, pynumero ...),
    ~0.1 s of CPU of the brief's ~4 s solve (docs/benchmarks.md). Fails before: the
    solve path imported pyomo.environ."""
    modules = _modules(["solve", "gemini-ironwood", "--json"])
    assert "fleetplan.sizing.pods" in modules and "highspy" in modules  # the pod-aware solve ran
    assert sorted(m for m in ("pyomo.environ", "pyomo.solvers.plugins", "pyomo.gdp", "pyomo.dae", "pyomo.network", "pyomo.contrib.solver")
                  if m in modules) == []


def test_the_sweep_help_gives_a_working_ray_install_command():
    """Regression (issue-19 trial): rich read '[ray]' in the --executor help as markup and
    printed "pip install 'fleetplan'", which installs no Ray."""
    from typer.testing import CliRunner

    from fleetplan.cli.app import app

    for cmd in ("sensitivity", "levers"):
        out = " ".join(CliRunner().invoke(app, [cmd, "--help"], env={"COLUMNS": "300"}).output.split())
        assert "pip install 'fleetplan[ray]'" in out, cmd


def test_perf_of_colocated_replicas_leaves_numpys_extras_unloaded():
    """Issue 41: ``fleetplan perf`` of colocated replicas needs scipy.special (the queue
    waits, the TPOT tail), whose import runs ``from numpy import *`` in SciPy's array-API
    shim -- and numpy 2 then loads numpy.f2py, numpy.testing, numpy.random ... (~0.1 s of
    CPU, a tenth of the command). fleetplan/imports.py registers them as lazy modules
    first: present, never executed. Fails before: every one was loaded."""
    doc = _run(["perf", "llama70b-h100", "--json"])
    modules, lazy = set(doc["modules"]), set(doc["lazy"])
    assert "scipy.special._ufuncs" in modules and "fleetplan.tables.summary" in modules  # the colocated model did run
    extras = ("numpy.f2py", "numpy.testing", "numpy.random", "numpy.ctypeslib", "numpy.polynomial")
    assert sorted(m for m in extras if m in modules and m not in lazy) == []
    assert not [m for m in modules if m.startswith(tuple(f"{x}." for x in extras))]


def test_the_deferred_numpy_extras_still_work():
    """A deferred module is the module, loaded on first use (the simulator's numpy.random,
    a test's numpy.testing): the same functions, the same numbers."""
    code = ("import json, sys; from fleetplan.imports import defer_numpy_extras, scipy_special; import numpy as np; "
            "done = defer_numpy_extras(); sp = scipy_special(); lazy = type(sys.modules['numpy.random']).__name__; "
            "x = np.random.default_rng(7).random(3).tolist(); np.testing.assert_array_equal([1.0], [1.0]); "
            "print(json.dumps({'done': done, 'lazy': lazy, 'x': x, 'after': type(np.random).__name__, 'erf': float(sp.erf(0.5)), "
            "'masked': float(np.ma.masked_array([1.0, 2.0], mask=[0, 1]).sum())}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    doc = json.loads(r.stdout)
    import numpy as np

    assert "numpy.f2py" in doc["done"] and doc["lazy"] == "_LazyModule" and doc["after"] == "module"
    assert doc["x"] == np.random.default_rng(7).random(3).tolist()
    assert doc["erf"] == 0.5204998778130465 and doc["masked"] == 1.0


def test_the_special_functions_are_scipy_specials_own():
    """Issue 41: :func:`fleetplan.imports.scipy_special` loads ``scipy.special._ufuncs``
    without the package's ``__init__``; its functions are the objects ``scipy.special``
    exports (so every number is the same), ``scipy.special`` is left unimported, and
    importing it afterwards works and reuses them."""
    code = ("import json, sys, pyomo.core; from fleetplan.imports import SPECIAL_FUNCTIONS, scipy_special; sp = scipy_special(); "
            "before = 'scipy.special' in sys.modules; import scipy.special; "
            "print(json.dumps({'before': before, 'name': sp.__name__, 'same': [getattr(sp, f) is getattr(scipy.special, f) for f in "
            "SPECIAL_FUNCTIONS], 'erf': float(sp.erf(0.5)), 'bessel': float(scipy.special.jv(0, 1.0))}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    doc = json.loads(r.stdout)
    assert doc["before"] is False and doc["name"] == "scipy.special._ufuncs"
    assert doc["same"] == [True, True, True]
    assert doc["erf"] == 0.5204998778130465 and abs(doc["bessel"] - 0.7651976865579666) < 1e-15


def test_the_command_line_does_not_search_for_pydantic_plugins():
    """Issue 41: pydantic scans every installed distribution's entry points for plugins when
    the first model is built (~0.04 s of each command's start-up); the command line turns
    the search off (PYDANTIC_DISABLE_PLUGINS=__all__) unless the variable is set -- an
    empty value keeps the plugins. Fails before: the search ran."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    assert _run(["perf", "gemini-ironwood", "--json"], env)["pydantic_plugins_searched"] is False
    assert _run(["perf", "gemini-ironwood", "--json"], dict(env, PYDANTIC_DISABLE_PLUGINS=""))["pydantic_plugins_searched"] is True


def test_purchase_without_report_loads_no_plotting():
    """``fleetplan purchase`` without ``--report`` draws nothing: the output checks listed
    the report's figure files by importing fleetplan.purchase.report (matplotlib with it,
    ~0.7 s of CPU of ``purchase gemini-ironwood-2027 --no-value``) whatever the options.
    Run up to those checks (``--now`` without ``--fix-orders`` is then refused, exit 2);
    fails before: matplotlib and fleetplan.purchase.report were loaded."""
    args = ["purchase", "gemini-ironwood-2027", "--no-value", "--now", "2027Q2"]
    r = subprocess.run([sys.executable, "-c", _RUN, json.dumps(args)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["code"] == 2  # refused after the output checks
    modules = set(doc["modules"])
    assert "fleetplan.purchase.io" in modules  # the purchase file was read
    assert _loaded(modules, PLOTTING) == [] and "fleetplan.purchase.report" not in modules
