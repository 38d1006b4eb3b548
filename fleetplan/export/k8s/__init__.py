"""The Kubernetes export: a verified placement as the objects the serving controllers run
(LeaderWorkerSet or DisaggregatedSet groups on GKE TPU node pools, InferencePools with
their endpoint pickers, KEDA or HPA autoscalers) and a Prometheus rule file, validated
offline against the published schemas (docs/controller.md).

Modules: :mod:`common` (options, units, names, labels), :mod:`engines` (metric names and
PromQL), :mod:`workloads`, :mod:`routing`, :mod:`scaling`, :mod:`alerts`, :mod:`bundle`
(build, write atomically, read back).

The names below load on first use (PEP 562), so importing :mod:`fleetplan.export.k8s.common`
for its defaults (``fleetplan place --help`` shows them) does not build the bundle
machinery, nor the instance schema and plan evaluation it imports.
"""

__all__ = ["Bundle", "ExportOptions", "build_bundle", "read_bundle", "write_bundle"]

#: name -> module that defines it
_LAZY = {"Bundle": "fleetplan.export.k8s.bundle", "build_bundle": "fleetplan.export.k8s.bundle", "read_bundle": "fleetplan.export.k8s.bundle",
         "write_bundle": "fleetplan.export.k8s.bundle", "ExportOptions": "fleetplan.export.k8s.common"}


def __getattr__(name: str):
    """Load :data:`__all__`'s names from their modules on first use; AttributeError otherwise."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fleetplan.export.k8s' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
