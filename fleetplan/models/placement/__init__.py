"""The placement model: slices of a plan into the pods (ICI domains) of their region."""

from fleetplan.models.placement.build import PlacementItem, RegionPlacementData, build_placement_model

__all__ = ["PlacementItem", "RegionPlacementData", "build_placement_model"]
