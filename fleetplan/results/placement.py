"""Deprecated import path: moved to :mod:`fleetplan.placement.document` (the ``Placement``
document, its hashes, the diff of two placements) and :mod:`fleetplan.placement.check`
(:func:`verify_placement`, :func:`current_placement_problems`: the independent check);
kept so old imports work. New code imports from those modules."""

from fleetplan.placement.check import current_placement_problems, verify_placement
from fleetplan.placement.document import (PLACEMENT_SCHEMA_VERSION, PlacedSlice, PlacedTierDcn, Placement, PodSlots, RouteWeight,
                                          ScenarioRouting, TierDemand, TierScenarioDcn, WarmJoin, placement_diff, placement_hash, plan_hash,
                                          same_fleet_problems, vm_range)

__all__ = ["PLACEMENT_SCHEMA_VERSION", "PodSlots", "PlacedSlice", "RouteWeight", "TierDemand", "WarmJoin", "TierScenarioDcn",
           "ScenarioRouting", "PlacedTierDcn", "Placement", "plan_hash", "placement_hash", "verify_placement", "current_placement_problems",
           "same_fleet_problems", "placement_diff", "vm_range"]
