"""The what-if's view of a placement (``fleetplan whatif --placement``): per surviving
region x tier of a region loss, the share of requests whose KV crosses the DCN by the
placement's routing in that loss (its ``scenarios``, schema_version 2), beside the tier's
ceiling and the plan's prediction -- the what-if decides its own routing, so this is what
the deployed placement would do in the same loss. The driver
(:mod:`fleetplan.whatif.driver`) calls :func:`placement_dcn` per event."""

from __future__ import annotations

from fleetplan.errors import InputError, Problem
from fleetplan.instance.schema import Instance
from fleetplan.results.plan import Plan
from fleetplan.whatif.events import Event

__all__ = ["check_placement", "placement_scenario", "placement_dcn"]


def check_placement(plan: Plan, pl) -> None:
    """Raise InputError (``--placement``) unless ``pl`` is a placement of ``plan`` (its
    plan_hash) carrying the routing of the plan's scenarios (schema_version 2)."""
    from fleetplan.results.placement import plan_hash

    if pl.plan_hash != plan_hash(plan):
        raise InputError("--placement", [Problem("--placement", f"the placement was made for another plan (plan_hash {pl.plan_hash[:12]}..., "
                                                                f"this plan's {plan_hash(plan)[:12]}...); place this plan first "
                                                                "(`fleetplan place PLAN -o placement.json`).")])
    if pl.scenarios is None:
        why = ("place the plan again with `fleetplan place` (the online placer's and earlier placements have none)" if plan.pods is not None
               else "the plan was sized without its pods (placement.size_with_pods false, or its pod stage found no plan: its notes say): re-solve it with its pods and place it")
        raise InputError("--placement", [Problem("--placement", "schema_version 1: the placement carries no routing of the plan's region "
                                                                f"losses, so it gives no DCN share in a loss; {why}, or run without --placement.")])


def placement_scenario(inst: Instance, pl, lost: str, hour: int):
    """The placement's scenario (``ScenarioRouting``) for losing ``lost`` at ``hour`` (0-23
    UTC) and how it was chosen: 'hour' (``lose:LOST@HH``, the plan lists it), else
    'dominating' (the plan's loss of ``lost`` at the nearest hour whose loads, every
    region's ``hourly_load``, are at least the hour's: its routing was checked at loads as
    high) or 'nearest' (none dominates: the nearest hour). (None, None) when the plan has
    no loss of ``lost``."""
    cands = [s for s in pl.scenarios or [] if s.kind == "loss" and s.lost_region == lost]
    exact = next((s for s in cands if s.hour == hour), None)
    if exact is not None or not cands:
        return exact, exact and "hour"
    load = lambda h: [inst.regions[r].hourly_load[h] for r in sorted(inst.regions)]  # noqa: E731
    dom = [s for s in cands if all(a >= b - 1e-12 for a, b in zip(load(s.hour), load(hour)))]
    return min(dom or cands, key=lambda s: (min((s.hour - hour) % 24, (hour - s.hour) % 24), s.hour)), "dominating" if dom else "nearest"


def placement_dcn(inst: Instance, pl, event: Event, warm_decided: int = 0, pl_hash: str | None = None):
    """The DCN share per surviving region x tier by the placement's routing for ``event``
    (a single-region loss; :func:`placement_scenario` picks the scenario), beside each
    tier's ceiling (``PlacedTierDcn.dcn_share_max``) and the plan's prediction.
    ``warm_decided``: the warm slices the what-if joined (for the note); ``pl_hash``: the
    placement's hash, if known (computed otherwise).

    Returns (:class:`~fleetplan.whatif.report.PlacementDcn` or None, notes): None with a
    note for N-2 and pod losses and for a region the plan has no loss scenario of."""
    from fleetplan.results.placement import placement_hash
    from fleetplan.whatif.report import PlacedDcnShare, PlacementDcn, WarmJoinCount

    if event.lost_pods:
        return None, ["--placement: no DCN share for a pod loss (the placement does not yet choose which pods are lost)"]
    if len(event.lost) != 1:
        return None, ["--placement: no DCN share for an N-2 loss (the placement routes the plan's single-region losses only)"]
    x, h = event.lost[0], event.hour
    sc, how = placement_scenario(inst, pl, x, h)
    if sc is None:
        return None, [f"--placement: the plan has no loss scenario of {x} (N-1 off, or nothing fails over from it): no DCN share"]
    ceil = {(c.region, c.tier): c for c in pl.dcn or []}
    tiers, notes = [], []
    for t in sorted(sc.tiers, key=lambda t: (t.region, t.tier)):
        c = ceil.get((t.region, t.tier))
        top = c.dcn_share_max if c is not None else inst.dcn_share_max_of(t.tier)
        declared = c is not None and c.sized_for is not None and c.sized_for > c.dcn_share_max
        joins: dict[tuple[str, str], int] = {}
        for w in sc.warm:
            if (w.region, w.tier) == (t.region, t.tier):
                joins[(w.pod, w.role)] = joins.get((w.pod, w.role), 0) + 1
        tiers.append(PlacedDcnShare(region=t.region, tier=t.tier, rps=t.rps, kv_out_rps=t.kv_out_rps, dcn_share=t.dcn_share, dcn_share_max=top,
                                    plan_dcn_share=t.plan_dcn_share, above_ceiling=t.dcn_share > top + 1e-9, overage_declared=declared,
                                    warm_joins=[WarmJoinCount(pod=p, role=ro, slices=n) for (p, ro), n in sorted(joins.items())]))
        if t.dcn_share > top + 1e-9:
            notes.append(f"{t.region}/{t.tier}: the placement sends {t.dcn_share:.1%} of the tier's requests' KV over the DCN in {sc.scenario}, "
                         f"above its {top:.0%} ceiling" + (f" (the plan declares the overage: sized for {c.sized_for:.1%})" if declared else ""))
    where = "" if how == "hour" else (f" (the plan lists no loss of {x} at {h:02d}:00 UTC, only the hours that dominate the others; "
                                      f"{sc.scenario} is the listed one nearest that hour" + (" whose loads are at least that hour's)" if how == "dominating" else ")"))
    note = (f"DCN shares by the placement's routing in {sc.scenario}{where}, at that scenario's loads (the plan's record: its failover "
            f"routing held, the demand margin included) with its {len(sc.warm)} warm slice(s) where the placement puts them; the what-if "
            f"decides its own routing and warm slices ({warm_decided} joined here), so its pools' loads may differ. The routing is the "
            "same in the steady and transient phases")
    return PlacementDcn(placement_hash=pl_hash or placement_hash(pl), scenario=sc.scenario, same_hour=how == "hour", tiers=tiers, note=note), notes
