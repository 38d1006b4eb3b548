"""Prefill -> decode route weights of a region-tier from per-pod flows (req/s), each
prefill pod's shares summing to exactly 1. Shared by the placement model's routing
(:mod:`fleetplan.placement.driver`) and every scenario's routing of a plan sized with its
pods (:mod:`fleetplan.placement.pods`)."""

from __future__ import annotations

from fleetplan.placement.document import RouteWeight

__all__ = ["routing_from_flows", "normalise_shares"]


def routing_from_flows(region: str, tier: str, local: dict[str, float], out: dict[str, float], inn: dict[str, float],
                       load: dict[str, float], cap: dict[str, float] | None = None) -> list[RouteWeight]:
    """Prefill -> decode weights of a region-tier from per-pod flows (req/s): a pod keeps
    ``local`` and sends ``out`` over the DCN, spread over the receiving pods in proportion
    to what each takes in (``inn``)."""
    # flows below 1e-6 of the tier's load are solver noise, not routes; nothing goes to a
    # pod without decode capacity (the solver's tolerance can leave a trace there)
    eps = 1e-6 * max(sum(load.values()), 1e-9)
    if cap is not None:
        local = {k: v for k, v in local.items() if cap.get(k, 0.0) > 0}
        inn = {k: v for k, v in inn.items() if cap.get(k, 0.0) > 0}
    inn = {k: v for k, v in inn.items() if v > eps}
    total_in = sum(inn.values())
    rows = []
    for j in sorted(load):
        lj = load[j]
        if lj <= 1e-12:
            continue
        parts = {}
        if local.get(j, 0.0) > eps:
            parts[j] = local[j]
        o = out.get(j, 0.0)
        if o > eps and total_in > 0:
            for k, v in inn.items():
                parts[k] = parts.get(k, 0.0) + o * v / total_in
        s = sum(parts.values())
        for k in sorted(parts):
            rows.append(RouteWeight(region=region, tier=tier, from_pod=j, to_pod=k, share=round(parts[k] / s, 9), rps=round(parts[k] / s * lj, 6)))
    return normalise_shares(rows)


def normalise_shares(rows: list[RouteWeight]) -> list[RouteWeight]:
    """Make each pod's rounded shares sum to exactly 1 (the largest absorbs the rounding)."""
    by: dict[tuple, list[int]] = {}
    for i, w in enumerate(rows):
        by.setdefault((w.from_pod, w.tier), []).append(i)
    for idx in by.values():
        gap = 1.0 - sum(rows[i].share for i in idx)
        k = max(idx, key=lambda i: rows[i].share)
        rows[k] = rows[k].model_copy(update={"share": rows[k].share + gap})
    return rows
