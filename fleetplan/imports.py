"""Import-time hygiene shared by the core and the command line (imports only ``sys``).

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

import sys


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
