"""Deprecated import path: moved to :mod:`fleetplan.export.k8s`; kept so old imports work.

``from fleetplan.k8s import build_bundle`` (and the other names of :data:`__all__`) still
works; the submodules are at ``fleetplan.export.k8s.<module>`` (common, engines,
workloads, routing, scaling, alerts, bundle). The names load on first use, as in
:mod:`fleetplan.export.k8s`, so this module stays light.
"""

import warnings

warnings.warn("fleetplan.k8s is a deprecated import path: import fleetplan.export.k8s", DeprecationWarning, stacklevel=2)

__all__ = ["Bundle", "ExportOptions", "build_bundle", "read_bundle", "write_bundle"]


def __getattr__(name: str):
    """:data:`__all__`'s names from :mod:`fleetplan.export.k8s`; AttributeError otherwise."""
    if name in __all__:
        import importlib

        return getattr(importlib.import_module("fleetplan.export.k8s"), name)
    raise AttributeError(f"module 'fleetplan.k8s' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
