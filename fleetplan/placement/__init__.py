"""The placement job: put every slice of a plan into a pod (ICI domain) of its region and
onto whole adjacent VMs, route prefill -> decode KV, and check the result independently.

What lives where:

* :mod:`~fleetplan.placement.driver` -- :func:`place`, one plan's placement: the placement
  model per region (method 'mip') or the plan's own pods (method 'pods');
* :mod:`~fleetplan.placement.pods` -- a plan sized with its pods: counts per pod, the
  improvement that empties nearly empty pods, every scenario's routing and warm joins;
* :mod:`~fleetplan.placement.online` -- the greedy online placer (events in milliseconds);
* :mod:`~fleetplan.placement.packing` and :mod:`~fleetplan.placement.weights` -- aligned
  first-fit in a pod and the route weights from per-pod flows, shared by driver and pods;
* :mod:`~fleetplan.placement.document` -- the ``Placement`` document, its hashes and the diff
  of two placements;
* :mod:`~fleetplan.placement.summary` -- the summary fields (demand, pods used, fragmented
  free chips) the placer writes and the check recomputes;
* :mod:`~fleetplan.placement.check` and :mod:`~fleetplan.placement.scenario_check` -- the
  independent check of a placement (imports no placer code and no optimisation model).

The names below are loaded on first use (so reading a ``Placement`` does not load the
placer): the driver's (``from fleetplan.placement import place`` works as it always has),
the document (``Placement``), the independent check (``verify_placement``) and the online
placer (``OnlinePlacer``).
"""

__all__ = ["PlacementInfeasible", "place", "region_data", "pod_ids", "allocate", "routing_from_flows", "fragmented_free_chips",
           "tier_demand"]

#: the driver's names this package gives (``__all__`` and the other public ones it always gave)
_DRIVER = (*__all__, "PlacementTimeLimit", "pod_ids_of")
#: the other modules' public entry points, by module
_OTHER = {"Placement": "document", "verify_placement": "check", "current_placement_problems": "check", "OnlinePlacer": "online"}


def __getattr__(name: str):
    """A public name of the job, loaded from its module on first use; AttributeError otherwise."""
    if name in _DRIVER or name in _OTHER:
        import importlib

        return getattr(importlib.import_module(f"fleetplan.placement.{_OTHER.get(name, 'driver')}"), name)
    raise AttributeError(f"module 'fleetplan.placement' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_DRIVER) | set(_OTHER))
