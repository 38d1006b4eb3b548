"""The Kubernetes export: a verified placement as the objects the serving controllers run
(LeaderWorkerSet or DisaggregatedSet groups on GKE TPU node pools, InferencePools with
their endpoint pickers, KEDA or HPA autoscalers) and a Prometheus rule file, validated
offline against the published schemas (docs/controller.md).

Modules: :mod:`common` (options, units, names, labels), :mod:`engines` (metric names and
PromQL), :mod:`workloads`, :mod:`routing`, :mod:`scaling`, :mod:`alerts`, :mod:`bundle`
(build, write atomically, read back).
"""

from fleetplan.k8s.bundle import Bundle, build_bundle, read_bundle, write_bundle
from fleetplan.k8s.common import ExportOptions

__all__ = ["Bundle", "ExportOptions", "build_bundle", "read_bundle", "write_bundle"]
