"""The demand scenarios a plan is sized and verified under: the normal peak and, with N-1 on,
the hours of each region's loss that matter.

``normal``: every region at its own peak hour (regions do not interact in normal operation
and the fleet is fixed across hours, so each region's peak hour dominates its other hours --
exact, not an approximation). ``lose:X@h``: region X is lost at hour h; its traffic goes to
the regions listed in its ``failover_to`` (the *absorbers*); other survivors carry only their
own load, which the normal scenario already dominates. Among the 24 hours of a loss of X only
those whose load vector (X and its absorbers) is not dominated component-wise by another
hour's are kept (Pareto pruning -- exact, because demand is monotone in those loads for any
routing).

A plain reading of the instance (no physics): the candidate tables
(:mod:`fleetplan.tables.derived`) and the independent verifier (:mod:`fleetplan.results`)
both enumerate the scenarios here, so the verifier needs nothing of the tables' builders.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetplan.instance.schema import Instance

__all__ = ["NORMAL", "FAILOVER", "Scenario", "build_scenarios"]

#: the normal scenario's name, and the regime of the normal operating points (decode batch
#: capped below the knee by ``decode_knee_margin``)
NORMAL = "normal"
#: the regime of a region loss's operating points (decode may ride to the knee)
FAILOVER = "failover"


@dataclass(frozen=True)
class Scenario:
    """A demand scenario. ``load[r]`` is region r's load multiplier (fraction of its
    peak_rps); ``lost`` the lost region (None for normal); ``absorbers`` the regions
    that may take its traffic; ``active`` the regions the model constrains here."""

    name: str
    kind: str  # "normal" | "loss"
    hour: int | None
    lost: str | None
    load: dict[str, float]
    absorbers: tuple[str, ...]
    active: tuple[str, ...]


def _pareto_hours(inst: Instance, lost: str, absorbers: tuple[str, ...]) -> list[int]:
    regs = (lost,) + absorbers
    vecs = {h: tuple(inst.regions[r].hourly_load[h] for r in regs) for h in range(24)}
    keep = []
    for h, v in vecs.items():
        dominated = False
        for h2, v2 in vecs.items():
            if h2 == h:
                continue
            if all(a <= b for a, b in zip(v, v2)) and (v != v2 or h2 < h):
                dominated = True
                break
        if not dominated:
            keep.append(h)
    return sorted(keep)


def build_scenarios(inst: Instance) -> list[Scenario]:
    """The normal-peak scenario and, with N-1 on, the Pareto-maximal hours of every
    region loss (the module docstring says why this pruning is exact)."""
    regions = sorted(inst.regions)
    out = [Scenario(NORMAL, "normal", None, None, {r: 1.0 for r in regions}, (), tuple(regions))]
    if inst.failover.n_minus_1 and len(regions) > 1:
        for x in regions:
            absorbers = tuple(sorted(inst.regions[x].failover_to))
            for h in _pareto_hours(inst, x, absorbers):
                load = {r: inst.regions[r].hourly_load[h] for r in regions}
                out.append(Scenario(f"lose:{x}@{h:02d}", "loss", h, x, load, absorbers, absorbers))
    return out

