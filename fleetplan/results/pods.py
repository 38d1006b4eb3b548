"""A plan's pods (``Plan.pods``, placement-aware sizing) checked against its pools and the
instance: known regions, chip types, tiers, roles and shapes; each pod once and numbered
below the pods the plan buys; its chips within the pod; every pool's slices exactly the
slices its pods hold. Used by the verifier (:mod:`fleetplan.results.verify`) and by the
check of the plan's records (:mod:`fleetplan.results.records`). Never imports
:mod:`fleetplan.models`."""

from __future__ import annotations

from fleetplan.errors import Problem
from fleetplan.instance.schema import Instance
from fleetplan.results.modes import plan_modes, roles_at
from fleetplan.results.plan import Plan

__all__ = ["pods_used", "pod_problems"]


def pods_used(plan: Plan) -> dict[tuple[str, str], int]:
    """(region, chip) -> the pods a plan sized with its pods places slices in (``Plan.pods``; empty without)."""
    out: dict[tuple[str, str], int] = {}
    for p in plan.pods or []:
        out[(p.region, p.chip)] = out.get((p.region, p.chip), 0) + 1
    return out


def pod_problems(inst: Instance, plan: Plan) -> list[Problem]:
    """A plan's pods (``Plan.pods``) against its pools and the instance: known regions, chip
    types, tiers, roles and shapes; each pod once, numbered below the pods the plan buys;
    its chips = its slices x their chips, within the pod; and every pool's and warm entry's
    slices exactly the slices its pods hold."""
    if plan.pods is None:
        return []
    from fleetplan.perf.pools import slice_specs, tier_mixes

    probs: list[Problem] = []
    labels = {sl.label: sl for sl in slice_specs(inst)}
    tiers = {t.name for t in tier_mixes(inst)}
    modes = plan_modes(inst, plan)
    totals = {(f.region, f.chip): f.pods_total for f in plan.fleet}
    held: dict[tuple, int] = {}
    seen = set()
    for i, pc in enumerate(plan.pods):
        where = f"pods[{i}]"
        if pc.region not in inst.regions or pc.chip not in inst.chips:
            probs.append(Problem(where, f"pod {pc.region}/{pc.chip}/{pc.pod}: no such region and chip type in the instance."))
            continue
        if (pc.region, pc.chip, pc.pod) in seen:
            probs.append(Problem(where, f"pod {pc.region}/{pc.chip}/{pc.pod:02d} is given twice."))
        seen.add((pc.region, pc.chip, pc.pod))
        if not 0 <= pc.pod < totals.get((pc.region, pc.chip), 0):
            probs.append(Problem(f"{where}.pod", f"{pc.pod}: pods are numbered 0 to {totals.get((pc.region, pc.chip), 0) - 1}, the pods the "
                                                 f"plan has in {pc.region} ({pc.chip})."))
        chips = 0
        for key, n in pc.slices.items():
            parts = key.split("/")
            shape = parts[-1]
            ok = (len(parts) == 2 and parts[0] == "warm") or (len(parts) == 3 and parts[0] in tiers and parts[1] in roles_at(modes, pc.region, parts[0]))
            if not ok or shape not in labels or labels[shape].chip != pc.chip or not isinstance(n, int) or n < 1:
                probs.append(Problem(f"{where}.slices.{key}", f"{n!r}: a count of at least 1 of 'tier/role/shape' or 'warm/shape' slices of "
                                                              f"the pod's chip type {pc.chip}."))
                continue
            chips += n * labels[shape].chips
            k = (pc.region, key)
            held[k] = held.get(k, 0) + n
        if chips != pc.chips_used:
            probs.append(Problem(f"{where}.chips_used", f"{pc.chips_used}, but its slices occupy {chips} chips."))
        if chips > inst.chips[pc.chip].chips_per_pod:
            probs.append(Problem(f"{where}.slices", f"{chips} chips of slices in a pod of {inst.chips[pc.chip].chips_per_pod}."))
    want = {(p.region, f"{p.tier}/{p.role}/{p.slice}"): p.slices for p in plan.pools}
    want.update({(w.region, f"warm/{w.slice}"): w.slices for w in plan.warm_pool if w.slices > 0})
    for k in sorted(set(want) | set(held)):
        if want.get(k, 0) != held.get(k, 0):
            probs.append(Problem("pods", f"{k[0]} {k[1]}: the pools hold {want.get(k, 0)} slices, the pods {held.get(k, 0)}."))
    return probs
