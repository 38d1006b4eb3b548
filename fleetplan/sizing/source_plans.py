"""What holding a plan under several physics sources costs: the instance solved once
per single source (``physics.hold`` set to that source), each plan's chips and $ per 1M tokens
beside the robust plan's, and under which sources each plan holds -- the verifier run on it
with each source's priors (:func:`holds_under`).

Used by ``fleetplan solve`` (its "what it costs" table; ``--no-source-plans`` skips it) and the
tests' property that a plan robust to a set of sources is feasible for each of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fleetplan.instance.io import instance_hash
from fleetplan.instance.physics import sources, with_hold
from fleetplan.instance.schema import Instance
from fleetplan.results.plan import Plan, Violation

__all__ = ["SourcePlan", "holds_under", "plans_per_source"]


@dataclass(frozen=True)
class SourcePlan:
    """One source's plan (``hold`` = its name, or the instance's own hold for the robust plan):
    the plan (None when the solve gave none), the sources it holds under and those it breaks
    under, with each one's first finding (the verifier's, under that source's priors)."""

    hold: str
    plan: Plan | None
    holds: tuple[str, ...]
    breaks: tuple[tuple[str, str], ...]


def holds_under(inst: Instance, plan: Plan, name: str) -> list[Violation]:
    """The verifier's findings on ``plan`` under source ``name`` of ``inst`` alone (its
    ``physics.hold`` set to it): every SLO, capacity and KV check with that source's priors.
    The plan's own claims of tokens/s at its operating points (made under the source it was
    solved for) are not findings here, nor its status line."""
    from fleetplan.results.verify import verify

    target = with_hold(inst, name)
    copy = plan.model_copy(update={"instance_hash": instance_hash(target), "instance": None})
    return [v for v in verify(target, copy)
            if not (v.check == "operating_point" and " claims " in v.message) and v.check != "status"]


def plans_per_source(inst: Instance, solve_plan: Callable[[Instance], Plan | None], robust_plan: Plan | None = None,
                     progress: Callable[[str], None] | None = None) -> list[SourcePlan]:
    """The robust plan (``robust_plan``, or solved) and one plan per source of ``inst`` (held
    or not), each checked under every source (:func:`holds_under`). ``solve_plan`` solves an
    instance (``fleetplan.solve`` with the caller's options). Raises what the solves raise."""
    names = [s.name for s in sources(inst)]
    own = inst.physics.hold if inst.physics else "all"
    out = []
    for hold in [own] + [n for n in names if n != own]:
        if progress:
            progress(f"solving for physics source {hold}" if hold in names else "the robust plan")
        plan = robust_plan if (hold not in names and robust_plan is not None) else solve_plan(with_hold(inst, hold))
        if plan is None:
            out.append(SourcePlan(hold, None, (), ()))
            continue
        holds, breaks = [], []
        for name in names:
            found = holds_under(inst, plan, name)
            if found:
                breaks.append((name, f"[{found[0].check}] {found[0].where}: {found[0].message}"))
            else:
                holds.append(name)
        out.append(SourcePlan(hold, plan, tuple(holds), tuple(breaks)))
    return out
