"""Import-time hygiene shared by the core and the command line (imports only ``sys`` and
``importlib``).

Pyomo (``pyomo.common.dependencies``, 6.x) registers an import hook on SciPy: the moment
anything imports ``scipy``, the hook's callback imports ``scipy.stats``,
``scipy.integrate``, ``scipy.sparse`` and ``scipy.spatial`` as well -- about 0.4 s of
a solve's start-up on the 2-core session machine (docs/benchmarks.md, *Start-up and the
brief's solve*), though a solve uses only ``scipy.special``. It
happens whichever of the two is imported first (if SciPy is already loaded, Pyomo runs
the callback at its own import). :func:`skip_pyomo_scipy_extras` drops the callback
before fleetplan's first SciPy import, so only the submodules asked for load. Nothing is
lost: SciPy loads its submodules lazily on attribute access (``scipy.sparse``), which is
all Pyomo's deferred ``scipy`` module does with them.

fleetplan's physics uses three of SciPy's special functions (``gammaincc``, ``gammaln``,
``erf``), all ufuncs of the compiled module ``scipy.special._ufuncs``. ``import
scipy.special`` also runs the package's ``__init__``, which loads SciPy's array-API layer
(``_support_alternative_backends``: ``scipy._lib.array_api_compat``, ``array_api_extra``
...) -- 0.085 s of CPU against 0.015 s for the compiled module alone (measured after numpy
and Pyomo). :func:`scipy_special` loads that module alone
(:func:`_special_ufuncs`); its functions are the very objects ``scipy.special`` exports
(``scipy.special.erf is scipy.special._ufuncs.erf``), so every number is the same, and a
later ``import scipy.special`` (a command that needs more of it) runs the package's
``__init__`` as usual and reuses the loaded module.

The solve path imports ``pyomo.core``, not ``pyomo.environ``: environ loads
every plugin package too -- Pyomo's file writers and solver interfaces, GDP, DAE, network,
contrib.solver, appsi, pynumero -- ~0.1 s of CPU that a solve handing HiGHS the model's
arrays (:mod:`fleetplan.solvers.lparrays`) never uses; the CP-SAT backend's MPS export
(:func:`fleetplan.solvers.highs.write_mps`) imports environ for Pyomo's writers.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

__all__ = ["skip_pyomo_scipy_extras", "defer_numpy_extras", "scipy_special", "linear_filter", "NUMPY_EXTRAS", "SPECIAL_FUNCTIONS"]

#: numpy's optional submodules that ``import scipy.special`` loads and fleetplan's physics
#: never uses: SciPy's array-API shim (``scipy._lib.array_api_compat.numpy``) runs ``from
#: numpy import *``, and numpy 2 loads each of these on that first access -- numpy.f2py (the
#: Fortran wrapper generator), numpy.testing, numpy.random ... about 0.1 s of CPU of
#: ``fleetplan perf`` (measured when this list was added: commit 39d49a3's message, 2026-12-07;
#: docs/benchmarks.md, *perf start-up*, has perf's imports today). (numpy.ma loads anyway at the
#: first ``np.unique``, numpy.fft with SciPy's shim of it.)
NUMPY_EXTRAS = ("numpy.f2py", "numpy.testing", "numpy.ma", "numpy.random", "numpy.ctypeslib", "numpy.polynomial", "numpy.char",
                "numpy.rec", "numpy.strings")
_SPECIAL: list[ModuleType] = []


def skip_pyomo_scipy_extras() -> bool:
    """Before importing a SciPy submodule: if Pyomo is loaded and SciPy not yet, drop
    Pyomo's post-import callback for ``scipy`` (the eager import of four SciPy
    subpackages, module docstring). Returns whether it was dropped; a no-op (False) when
    SciPy is already imported, Pyomo is not, or Pyomo's internals are not the ones this
    was written against (the speed-up is then lost, nothing else). Never raises."""
    if "scipy" in sys.modules:
        return False
    deps = sys.modules.get("pyomo.common.dependencies")
    indicator = getattr(deps, "scipy_available", None) if deps is not None else None
    # an unresolved DeferredImportIndicator: it has not imported SciPy yet, _module is None
    if indicator is None or getattr(indicator, "_module", True) is not None or not hasattr(indicator, "_callback"):
        return False
    indicator._callback = None
    return True


def defer_numpy_extras() -> list[str]:
    """Make each submodule of :data:`NUMPY_EXTRAS` not imported yet a lazy module
    (:class:`importlib.util.LazyLoader`: registered as numpy's attribute and in
    ``sys.modules``, its code runs on the first access to one of its attributes -- the same
    module, only later), so ``from numpy import *`` costs nothing for them. Returns the
    names deferred; a no-op for a module already imported or that numpy does not have.
    Never raises."""
    np = sys.modules.get("numpy")
    if np is None:
        import numpy as np
    done = []
    for name in NUMPY_EXTRAS:
        if name in sys.modules:
            continue
        try:
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                continue
            spec.loader = importlib.util.LazyLoader(spec.loader)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            setattr(np, name.rsplit(".", 1)[1], module)
            done.append(name)
        except Exception:  # noqa: BLE001 - the deferral is only a speed-up: leave the module to numpy
            sys.modules.pop(name, None)
    return done


#: the special functions fleetplan calls (all ufuncs of ``scipy.special._ufuncs``)
SPECIAL_FUNCTIONS = ("gammaincc", "gammaln", "erf")


def scipy_special() -> ModuleType:
    """A module holding SciPy's special functions :data:`SPECIAL_FUNCTIONS` (the same
    ufunc objects as ``scipy.special``'s), loaded once with the hygiene above: Pyomo's
    SciPy hook dropped (:func:`skip_pyomo_scipy_extras`), and ``scipy.special._ufuncs``
    alone when ``scipy.special`` is not imported yet (:func:`_special_ufuncs`; module
    docstring) -- else, or should that fail, ``scipy.special`` itself with numpy's optional
    submodules deferred (:func:`defer_numpy_extras`)."""
    if not _SPECIAL:
        mod = sys.modules.get("scipy.special")
        if mod is None:
            skip_pyomo_scipy_extras()
            mod = _special_ufuncs()
        if mod is None:
            defer_numpy_extras()
            import scipy.special as mod
        _SPECIAL.append(mod)
    return _SPECIAL[0]


def _special_ufuncs() -> ModuleType | None:
    """``scipy.special._ufuncs`` without ``scipy.special``'s ``__init__``
    (:func:`_compiled_alone`), None unless it holds :data:`SPECIAL_FUNCTIONS`."""
    return _compiled_alone("scipy.special", "_ufuncs", SPECIAL_FUNCTIONS)


_FILTER: list = []


def linear_filter():
    """SciPy's compiled IIR filter, ``scipy.signal._sigtools._linear_filter(b, a, x, axis)``
    -- the routine ``scipy.signal.lfilter(b, a, x, axis)`` calls for 1-D float64
    coefficients normalised to ``a[0] = 1``, so the same floats -- loaded without
    ``scipy.signal``'s ``__init__`` (which loads scipy.stats, scipy.optimize and more: ~0.4 s
    of start-up; :func:`_compiled_alone`). The TTFT-of-the-sum recurrence uses it
    (:func:`fleetplan.perf.queueing._decayed_cumsum`: 0.025 ms against 0.54 ms for 4,000
    path points in Python). None when SciPy's layout is not the one this was
    written against (the caller's recurrence in Python is the same floats). Never raises."""
    if not _FILTER:
        if "scipy" not in sys.modules:
            skip_pyomo_scipy_extras()
        mod = _compiled_alone("scipy.signal", "_sigtools", ("_linear_filter",))
        _FILTER.append(getattr(mod, "_linear_filter", None) if mod is not None else None)
    return _FILTER[0]


def _compiled_alone(package: str, name: str, attrs: tuple[str, ...]) -> ModuleType | None:
    """The module ``package.name`` (SciPy's compiled modules: ``scipy.special._ufuncs``,
    ``scipy.signal._sigtools``) imported without running ``package``'s ``__init__`` when
    that is not imported yet: a stand-in package module (``__path__`` the real package's
    folder) is registered as ``package`` while the module and what it imports load, then
    removed, so ``package`` is still not imported (a later import runs its ``__init__``,
    which reuses the modules loaded here). None -- nothing left registered -- when SciPy's
    layout is not the one this was written against or a name of ``attrs`` is missing or not
    callable. Never raises."""
    holder = None
    try:
        if package in sys.modules:
            mod = importlib.import_module(f"{package}.{name}")
        else:
            import scipy  # noqa: F401 -- the top package only (its __init__ is light)

            spec = importlib.util.find_spec(package)  # finds the package without running it
            if spec is None or not spec.submodule_search_locations:
                return None
            holder = ModuleType(package)
            holder.__path__ = list(spec.submodule_search_locations)
            holder.__package__ = package
            sys.modules[package] = holder
            mod = importlib.import_module(f"{package}.{name}")
        return mod if all(callable(getattr(mod, f, None)) for f in attrs) else None
    except Exception:  # noqa: BLE001 - a speed-up only: the caller falls back
        return None
    finally:
        if holder is not None:
            if sys.modules.get(package) is holder:
                del sys.modules[package]
            parent, _, child = package.rpartition(".")
            if vars(sys.modules.get(parent, holder)).get(child) is holder:
                delattr(sys.modules[parent], child)
