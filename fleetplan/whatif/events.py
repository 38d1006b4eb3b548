"""A what-if event: which regions and pods are lost, at which hour (UTC), in which phase
(steady post-failover, or the re-warm transient) and how the lost traffic is routed --
parsed and checked from the command line's options -- and the phase and prefix-cache hit
rates of each surviving region in it.

Both the driver (:mod:`fleetplan.whatif.driver`) and the exact accounting
(:mod:`fleetplan.whatif.accounting`) read these; they sit below both so that neither
imports the other for them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fleetplan.errors import InputError, Problem
from fleetplan.instance.schema import Instance
from fleetplan.results.plan import Plan

__all__ = ["Event", "PHASES", "ROUTINGS", "HELD", "held_shares", "mixed_pools", "check_one_shape", "parse_event", "region_phase",
           "hit_rates"]

PHASES = ("steady", "transient")
#: optimise: the model routes; proportional: the reference split; plan / controller: the
#: deployed shares (the plan's failover routing, or a controller document's) held fixed
ROUTINGS = ("optimise", "proportional", "plan", "controller")
HELD = ("plan", "controller")


@dataclass(frozen=True)
class Event:
    """A loss: regions lost whole, pods lost inside surviving regions ({region: {chip:
    pods}}), the hour (0-23, UTC) and the phase ('steady' post-failover, or the re-warm
    'transient' with every hit rate times the instance's rewarm_hit_rate_factor)."""

    lost: tuple[str, ...]
    lost_pods: tuple[tuple[str, str, int], ...]
    hour: int
    phase: str
    routing: str = "optimise"  # "proportional": the reference split; "plan" / "controller": ``held`` shares, fixed
    #: the deployed failover routing held with ``routing`` plan or controller:
    #: (lost region, absorbing region, tier, share of the lost region's tier traffic)
    held: tuple[tuple[str, str, str, float], ...] = ()

    def label(self) -> str:
        parts = [f"lose {x}" for x in self.lost] + [f"lose {n} {k} pod(s) in {r}" for r, k, n in self.lost_pods]
        extra = ""
        if self.lost:
            extra = {"proportional": ", routing proportional to the survivors' load", "plan": ", routing held at the plan's failover shares",
                     "controller": ", routing held at the controller document's failover shares"}.get(self.routing, "")
        return ", ".join(parts) + f" at {self.hour:02d}:00 UTC ({self.phase}{extra})"



def held_shares(inst: Instance, shares, source: str = "--routing") -> tuple[tuple[str, str, str, float], ...]:
    """A deployed failover routing as ``Event.held``: ``shares`` are (lost region,
    absorbing region, tier, share) rows -- the plan's ``routing`` or a controller
    document's ``failover_routing`` -- checked against the instance: known regions and
    tiers, an absorber the lost region may fail over to (``failover_to``), shares in
    [0, 1] summing to 1 per lost region and tier (to 1e-5: they are stored to 6 digits).

    Raises: InputError naming ``source`` and the row."""
    from fleetplan.perf.pools import tier_mixes

    tiers = {t.name for t in tier_mixes(inst)}
    probs: list[Problem] = []
    rows = []
    sums: dict[tuple[str, str], float] = {}
    for x, a, t, sh in shares:
        where = f"{x} -> {a} [{t}]"
        if x not in inst.regions or a not in inst.regions:
            probs.append(Problem(source, f"{where}: unknown region; the instance has {', '.join(sorted(inst.regions))}."))
        elif a not in inst.regions[x].failover_to:
            probs.append(Problem(source, f"{where}: {x} may fail over only to {', '.join(inst.regions[x].failover_to) or 'no region'} (failover_to)."))
        elif t not in tiers:
            probs.append(Problem(source, f"{where}: unknown tier; the instance has {', '.join(sorted(tiers))}."))
        elif not (isinstance(sh, (int, float)) and math.isfinite(sh) and 0.0 <= sh <= 1.0):
            probs.append(Problem(source, f"{where}: a share is a fraction in [0, 1] of the lost region's tier traffic.", repr(sh)))
        else:
            rows.append((x, a, t, float(sh)))
            sums[(x, t)] = sums.get((x, t), 0.0) + float(sh)
    for (x, t), tot in sorted(sums.items()):
        if abs(tot - 1.0) > 1e-5:
            probs.append(Problem(source, f"lose {x} [{t}]: the shares sum to {tot:.6f}, not 1 (fraction of the lost region's tier traffic)."))
    if probs:
        raise InputError("routing", probs)
    return tuple(sorted(rows))


def mixed_pools(plan: Plan) -> list[str]:
    """'role[region,tier] (shape, shape)' of every pool that mixes slice shapes (``serving.mixed_shapes``)."""
    shapes: dict[tuple[str, str, str], set[str]] = {}
    for p in plan.pools:
        shapes.setdefault((p.region, p.tier, p.role), set()).add(p.slice)
    return [f"{ro}[{r},{t}] ({', '.join(sorted(v))})" for (r, t, ro), v in sorted(shapes.items()) if len(v) > 1]


def check_one_shape(plan: Plan) -> None:
    """Raise InputError when the plan mixes slice shapes in a pool: the what-if accounts a
    pool's slices, needs and mitigations in one shape (not supported for mixed pools yet)."""
    mixed = mixed_pools(plan)
    if mixed:
        raise InputError("plan", [Problem("pools", f"{', '.join(mixed)} mix slice shapes (serving.mixed_shapes): the what-if counts a pool's "
                                                    "slices, needs and mitigations in one shape and does not handle mixed pools yet; "
                                                    "re-solve with serving.mixed_shapes false to run it on a one-shape plan.")])


def parse_event(inst: Instance, plan: Plan, lose: list[str], lose_pods: list[str], hour: int | str | None, phase: str,
                routing: str = "optimise", held=None) -> list[Event]:
    """Validate a loss given on the command line and return one event per hour.

    Args: lose: region names; lose_pods: 'REGION:N' or 'REGION:CHIP:N'; hour: 0-23,
    'peak' (the hour of the largest lost load; default), or 'all' (24 events); phase:
    'steady' or 'transient'; routing: 'optimise' (the model chooses), 'proportional'
    (the reference split: shares proportional to the survivors' own load that hour),
    'plan' (the plan's failover shares, held: what is deployed) or 'controller' (the
    shares ``held`` of a controller document, held); held: with 'controller', the
    (lost, absorber, tier, share) rows (:func:`held_shares` checks them).
    Raises: InputError naming the option and the expected value.
    """
    check_one_shape(plan)
    probs: list[Problem] = []
    shares: tuple = ()
    if routing == "plan":
        shares = held_shares(inst, [(r.lost, r.to, r.tier, r.share) for r in plan.routing], "plan.routing")
    elif routing == "controller":
        if held is None:
            probs.append(Problem("--routing", "controller needs the controller document's failover routing (--routing controller:FILE)."))
        else:
            shares = held_shares(inst, held, "--routing controller")
    regions = sorted(inst.regions)
    lost = []
    for x in lose:
        if x not in inst.regions:
            probs.append(Problem("--lose", f"unknown region {x!r}; regions are {', '.join(regions)}."))
        elif x in lost:
            probs.append(Problem("--lose", f"region {x!r} given twice."))
        else:
            lost.append(x)
    pods = []
    fleet = {(f.region, f.chip): f for f in plan.fleet}
    for spec in lose_pods:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            probs.append(Problem("--lose-pods", f"{spec!r} is not REGION:N or REGION:CHIP:N (N pods, a whole number)."))
            continue
        r, n_txt = parts[0], parts[-1]
        if r not in inst.regions:
            probs.append(Problem("--lose-pods", f"unknown region {r!r}; regions are {', '.join(regions)}."))
            continue
        if r in lost:
            probs.append(Problem("--lose-pods", f"region {r!r} is already lost whole (--lose)."))
            continue
        chips = sorted(k for (rr, k) in fleet if rr == r)
        if len(parts) == 3:
            k = parts[1]
            if (r, k) not in fleet:
                probs.append(Problem("--lose-pods", f"{r} has no {k!r} pods in this plan; it has {', '.join(chips) or 'none'}."))
                continue
        elif len(chips) == 1:
            k = chips[0]
        else:
            probs.append(Problem("--lose-pods", f"{r} has pods of several chip types ({', '.join(chips) or 'none'}); write REGION:CHIP:N."))
            continue
        try:
            n = int(n_txt)
        except ValueError:
            probs.append(Problem("--lose-pods", f"{n_txt!r} in {spec!r} is not a whole number of pods."))
            continue
        total = fleet[(r, k)].pods_total
        if n < 1 or n > total:
            probs.append(Problem("--lose-pods", f"{spec!r}: between 1 and the {total} {k} pod(s) {r} has in this plan (pods)."))
            continue
        if n == total and len([c for (rr, c) in fleet if rr == r]) == 1:
            probs.append(Problem("--lose-pods", f"{spec!r} takes every pod of {r}: that is a region loss; use --lose {r} (its traffic is then re-routed)."))
            continue
        if any(p[0] == r and p[1] == k for p in pods):
            probs.append(Problem("--lose-pods", f"{r}:{k} given twice."))
            continue
        pods.append((r, k, n))
    if not lose and not lose_pods:
        probs.append(Problem("--lose", "name at least one region to lose (--lose REGION) or pods (--lose-pods REGION:N)."))
    elif len(lost) == len(regions):
        probs.append(Problem("--lose", "every region is lost; nothing survives to re-optimise."))
    if routing not in ROUTINGS:
        probs.append(Problem("--routing", f"{routing!r}; choose optimise, proportional, plan or controller:FILE."))
    if phase not in PHASES:
        probs.append(Problem("--phase", f"{phase!r}; choose steady, transient or both."))
    hours: list[int] = []
    if hour is None or hour == "peak":
        who = lost or [r for r, _, _ in pods]
        loads = [sum(inst.regions[x].peak_rps * inst.regions[x].hourly_load[h] for x in who) for h in range(24)]
        hours = [int(np.argmax(loads))]
    elif hour in ("all", "worst"):
        hours = list(range(24))
    else:
        try:
            h = int(hour)
            if not 0 <= h <= 23:
                raise ValueError
            hours = [h]
        except (TypeError, ValueError):
            probs.append(Problem("--hour", f"{hour!r}; give an hour 0-23 (UTC), 'peak', 'worst' or 'all'."))
    if probs:
        raise InputError("what-if", probs)
    return [Event(tuple(sorted(lost)), tuple(sorted(pods)), h, phase, routing, shares) for h in hours]



def region_phase(inst: Instance, event: Event, r: str) -> str:
    """The phase region r is in: the re-warm 'transient' (every hit rate dips by
    rewarm_hit_rate_factor) where a lost region's traffic floods in; 'cold-pods' where it
    only lost pods of its own (those users arrive cold, the rest keep their cache);
    'steady' elsewhere."""
    if event.phase != "transient":
        return "steady"
    if any(r in inst.regions[x].failover_to for x in event.lost):
        return "transient"
    # pods lost, no flood of diverted traffic: only the users whose cache was on the lost
    # pods arrive cold; the rest of the cache is not evicted
    return "cold-pods" if any(rr == r for rr, _, _ in event.lost_pods) else "steady"


def hit_rates(inst: Instance, hit: float, phase: str) -> tuple[float, float]:
    """(own, cold) hit rates of a tier with steady hit rate ``hit`` in ``phase``."""
    f = inst.failover.rewarm_hit_rate_factor if phase == "transient" else 1.0
    return hit * f, inst.failover.diverted_hit_rate * f
