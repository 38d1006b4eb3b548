"""Deprecated import path: moved to :mod:`fleetplan.export.controller`; kept so old imports
work.

``from fleetplan.results.export import ControllerExport, build_export`` (and the other
names of :data:`__all__`) still works. The names load on first use: the controller
document sits above the verifier (``fleetplan.export``), and an import statement here
would be an arrow from ``results`` up to it.
"""

import warnings

warnings.warn("fleetplan.results.export is a deprecated import path: import fleetplan.export.controller", DeprecationWarning, stacklevel=2)

__all__ = ["CONTROLLER_SCHEMA_VERSION", "ControllerExport", "TierRouting", "LossRouting", "WarmJoinRef", "build_export", "DCN_SHARE_CEILING",
           "HIT_RATE_DRIFT_BAND", "ControllerRegion", "Thresholds"]


def __getattr__(name: str):
    """:data:`__all__`'s names from :mod:`fleetplan.export.controller`; AttributeError otherwise."""
    if name in __all__:
        import importlib

        return getattr(importlib.import_module("fleetplan.export.controller"), name)
    raise AttributeError(f"module 'fleetplan.results.export' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
