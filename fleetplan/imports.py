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
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

__all__ = ["skip_pyomo_scipy_extras", "defer_numpy_extras", "scipy_special", "NUMPY_EXTRAS"]

#: numpy's optional submodules that ``import scipy.special`` loads and fleetplan's physics
#: never uses: SciPy's array-API shim (``scipy._lib.array_api_compat.numpy``) runs ``from
#: numpy import *``, and numpy 2 loads each of these on that first access -- numpy.f2py (the
#: Fortran wrapper generator), numpy.testing, numpy.random ... about 0.1 s of CPU of
#: ``fleetplan perf`` (docs/benchmarks.md, *perf start-up*). (numpy.ma loads anyway at the
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


def scipy_special() -> ModuleType:
    """``scipy.special``, imported once with the hygiene above: Pyomo's SciPy hook dropped
    (:func:`skip_pyomo_scipy_extras`) and numpy's optional submodules deferred
    (:func:`defer_numpy_extras`) -- the same functions, a third of the import's time."""
    if not _SPECIAL:
        if "scipy.special" not in sys.modules:
            skip_pyomo_scipy_extras()
            defer_numpy_extras()
        import scipy.special

        _SPECIAL.append(scipy.special)
    return _SPECIAL[0]
