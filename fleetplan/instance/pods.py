"""Deprecated import path: moved to :mod:`fleetplan.tables.pods`; kept so old imports work
(docs/formulation.md and docs/benchmarks.md name it). Re-exports the public names; import from :mod:`fleetplan.tables.pods` instead."""

import warnings

warnings.warn("fleetplan.instance.pods is a deprecated import path: import fleetplan.tables.pods", DeprecationWarning, stacklevel=2)

from fleetplan.tables.pods import (  # noqa: F401
    Kit,
    PodLayer,
    PodGroup,
    RegimeDcn,
    TierDcn,
    PodData,
    build_pod_data,
    EXACT_LEVELS,
    MAX_DCN_LEVELS,
    LADDER,
    crossing_shapes,
    size_crossing_shapes,
)

__all__ = ["Kit", "PodLayer", "PodGroup", "RegimeDcn", "TierDcn", "PodData", "build_pod_data", "EXACT_LEVELS", "MAX_DCN_LEVELS", "LADDER", "crossing_shapes", "size_crossing_shapes"]
