"""Deprecated import path: moved to :mod:`fleetplan.tables.derived`; kept so old imports work
(the issue text, the benchmarks and docs/architecture.md name it). Re-exports the public names; import from :mod:`fleetplan.tables.derived` instead."""

import warnings

warnings.warn("fleetplan.instance.derived is a deprecated import path: import fleetplan.tables.derived", DeprecationWarning, stacklevel=2)

from fleetplan.tables.derived import (  # noqa: F401
    normal_peak_slices,
    best_decode_op,
    replica_rps_for_mix,
    mix_capacity_curve,
    Scenario,
    DecodeCandidate,
    PrefillCandidate,
    ReplicaCandidate,
    ModelData,
    build_model_data,
    workload_capacity_curve,
    extend_prefill,
    build_scenarios,
    NORMAL,
    FAILOVER,
)

__all__ = ["normal_peak_slices", "best_decode_op", "replica_rps_for_mix", "mix_capacity_curve", "Scenario", "DecodeCandidate", "PrefillCandidate", "ReplicaCandidate", "ModelData", "build_model_data", "workload_capacity_curve", "extend_prefill", "build_scenarios", "NORMAL", "FAILOVER"]
