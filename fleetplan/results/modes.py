"""The serving mode of each region x tier of a plan, as every reader must take it.

A plan of a fixed-mode instance runs that mode everywhere; a plan of an 'auto' instance
records its choice per region x tier in ``Plan.serving_modes``. Readers (verifier,
simulator, what-if, report, Kubernetes export, perf summary) call :func:`plan_modes`,
never ``inst.serving.mode``. Imports neither the models nor the candidate tables.
"""

from __future__ import annotations

from fleetplan.instance.modes import COLOCATED, DISAGGREGATED, ROLES_OF, fixed_mode, mode_of_role

__all__ = ["plan_modes", "pool_modes", "roles_at", "mode_at"]


def _tiers(inst) -> list[str]:
    return [t.name for t in inst.workload.tiers]


def pool_modes(plan) -> dict[tuple[str, str], set[str]]:
    """(region, tier) -> the modes its pools' roles belong to (empty where it has no pool)."""
    out: dict[tuple[str, str], set[str]] = {}
    for p in plan.pools:
        out.setdefault((p.region, p.tier), set()).add(mode_of_role(p.role))
    return out


def plan_modes(inst, plan) -> dict[tuple[str, str], str]:
    """(region, tier) -> 'disaggregated' | 'colocated' for every region and tier of ``inst``.

    Fixed mode: the instance's. 'auto': the plan's record (``serving_modes``); a region x
    tier it does not list takes the mode of its pools (a plan edited by hand), else
    disaggregated. The verifier checks record and pools agree."""
    fixed = fixed_mode(inst)
    tiers = _tiers(inst)
    if fixed is not None:
        return {(r, t): fixed for r in inst.regions for t in tiers}
    rec = {(c.region, c.tier): c.mode for c in (getattr(plan, "serving_modes", None) or [])}
    seen = pool_modes(plan)
    out = {}
    for r in inst.regions:
        for t in tiers:
            if (r, t) in rec:
                out[(r, t)] = rec[(r, t)]
            else:
                ms = seen.get((r, t), set())
                out[(r, t)] = COLOCATED if ms == {COLOCATED} else DISAGGREGATED
    return out


def mode_at(modes: dict[tuple[str, str], str], r: str, t: str) -> str:
    """The mode of (r, t) in ``modes`` (disaggregated for a pair it does not hold)."""
    return modes.get((r, t), DISAGGREGATED)


def roles_at(modes: dict[tuple[str, str], str], r: str, t: str) -> list[str]:
    """The pool roles (r, t) runs: ['prefill', 'decode'] or ['replica']."""
    return list(ROLES_OF[mode_at(modes, r, t)])


def mode_record_problems(inst, plan) -> list[tuple[str, str]]:
    """(where, message) for every way ``plan``'s serving modes disagree with the instance
    and with its own pools: a fixed-mode instance's plan records none and runs only that
    mode's roles; an 'auto' instance's plan records exactly one mode per region x tier
    (``serving_modes``), its pools there have only that mode's roles, and each record's
    cost is its pools' cost. The candidate-table estimates in the record are not checked
    (they are the solver's explanation, not a claim about the fleet)."""
    out: list[tuple[str, str]] = []
    fixed = fixed_mode(inst)
    recs = getattr(plan, "serving_modes", None)
    tiers = _tiers(inst)
    if fixed is not None:
        if recs is not None and any(c.mode != fixed for c in recs):
            out.append(("serving_modes", f"the instance fixes serving.mode '{fixed}'; the plan records other modes"))
    else:
        if recs is None:
            out.append(("serving_modes", "serving.mode is 'auto' but the plan records no serving mode per region x tier; re-solve"))
            recs = []
        seen: dict[tuple[str, str], int] = {}
        for i, c in enumerate(recs):
            if c.region not in inst.regions or c.tier not in tiers:
                out.append((f"serving_modes[{i}]", f"{c.region}/{c.tier} is not a region x tier of this instance"))
                continue
            if (c.region, c.tier) in seen:
                out.append((f"serving_modes[{i}]", f"{c.region}/{c.tier} is recorded twice"))
            seen[(c.region, c.tier)] = i
            cost = sum(p.cost_per_hour_usd for p in plan.pools if p.region == c.region and p.tier == c.tier)
            if abs(cost - c.cost_per_hour_usd) > 1e-5 * max(abs(cost), abs(c.cost_per_hour_usd), 1e-9) + 1e-9 * len(plan.pools):
                out.append((f"serving_modes[{i}].cost_per_hour_usd",
                            f"records ${c.cost_per_hour_usd:.6g}/h; the pools of {c.region}/{c.tier} cost ${cost:.6g}/h"))
        for r in inst.regions:
            for t in tiers:
                if (r, t) not in seen and recs:
                    out.append(("serving_modes", f"{r}/{t} has no recorded serving mode"))
    modes = plan_modes(inst, plan)
    for i, p in enumerate(plan.pools):
        if (p.region, p.tier) not in modes:
            continue
        want = modes[(p.region, p.tier)]
        if p.role not in ROLES_OF[want]:
            out.append((f"pools[{i}].role", f"{p.role!r} pool in {p.region}/{p.tier}, which runs {want} ({', '.join(ROLES_OF[want])})"))
    return out
