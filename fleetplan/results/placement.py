"""Deprecated import path: moved to :mod:`fleetplan.placement.document` (the ``Placement``
document, its hashes, the diff of two placements) and :mod:`fleetplan.placement.check`
(:func:`verify_placement`, :func:`current_placement_problems`: the independent check);
kept so old imports work.

``from fleetplan.results.placement import Placement, verify_placement`` (and the other
names of :data:`__all__`) still works. The names load on first use: the placement sits
above the verifier (``fleetplan.placement``), and an import statement here would be an
arrow from ``results`` up to it.
"""

import warnings

warnings.warn("fleetplan.results.placement is a deprecated import path: import fleetplan.placement.document and fleetplan.placement.check", DeprecationWarning, stacklevel=2)

__all__ = ["PLACEMENT_SCHEMA_VERSION", "PodSlots", "PlacedSlice", "RouteWeight", "TierDemand", "WarmJoin", "TierScenarioDcn",
           "ScenarioRouting", "PlacedTierDcn", "Placement", "plan_hash", "placement_hash", "verify_placement", "current_placement_problems",
           "same_fleet_problems", "placement_diff", "vm_range"]

#: the names of the independent check; the others are the document's
_CHECK = ("verify_placement", "current_placement_problems")


def __getattr__(name: str):
    """:data:`__all__`'s names from :mod:`fleetplan.placement.check` or
    :mod:`fleetplan.placement.document`; AttributeError otherwise."""
    if name in __all__:
        import importlib

        return getattr(importlib.import_module("fleetplan.placement.check" if name in _CHECK else "fleetplan.placement.document"), name)
    raise AttributeError(f"module 'fleetplan.results.placement' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
