"""Re-solves for the sweeps: one task per modified instance, run by an executor, each
returning a :class:`SolveSummary` of the plan (chips, slices by role, cost, status).

A task is JSON-able: ``{"key": str, "instance": <instance as data>, "options": {...}}``
-- the instance is rebuilt and validated in the worker with
:func:`fleetplan.instance.io.parse_instance`, and solved with :func:`fleetplan.solve`
(so every number comes from a real solve and the independent verifier).
"""

from __future__ import annotations

import copy
import math
import time
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from fleetplan.errors import InstanceError
from fleetplan.instance.schema import Instance

__all__ = ["SolveSummary", "summarise", "make_task", "solve_task", "run_solves", "instance_data"]

Status = Literal["verified", "shortfall", "violations", "unverified", "no_solution", "invalid"]


class SolveSummary(BaseModel):
    """What a sweep keeps of one re-solve (units in names; counts are whole slices or chips)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(description="The task's name (e.g. 'prefill_mfu=0.2', 'lever:speculation:off').")
    status: Status = Field(description="The plan's status; 'no_solution': no incumbent; 'invalid': the modified instance does not validate.")
    message: str = Field("", description="Why the point is invalid or short, in plain words.")
    chips: int = Field(0, description="Chips in every slice and the warm pool.")
    prefill_slices: int = 0
    prefill_chips: int = 0
    decode_slices: int = 0
    decode_chips: int = 0
    replicas: int = 0
    replica_chips: int = 0
    warm_slices: int = 0
    warm_chips: int = 0
    fleet_cost_per_hour_usd: float | None = None
    cost_per_1m_output_tokens_usd: float | None = Field(None, description="All fleet cost over output tokens at the daily mean demand (USD per 1M).")
    cost_per_1m_output_tokens_at_peak_usd: float | None = Field(None, description="Fleet cost over the sum of the regions' peak output tokens (the brief's convention; USD per 1M).")
    cost_per_1m_output_tokens_with_infill_usd: float | None = Field(None, description="Fleet cost over interactive plus batch-infill output tokens (USD per 1M).")
    cost_per_1m_input_tokens_usd: float | None = None
    mip_gap: float | None = Field(None, description="The solve's relative gap to its best bound (fraction).")
    shortfall_rps: float = Field(0.0, description="Largest prefill (or replica) shortfall over the scenarios (requests/s).")
    shortfall_tokens_per_s: float = Field(0.0, description="Largest decode shortfall over the scenarios (output tokens/s).")
    termination: str = Field("", description="The last solve's termination ('optimal', 'gap_reached', 'time_limit' ...).")
    pods: dict[str, int] = Field(default_factory=dict, description="Pods committed per 'region/chip' (count).")
    beyond_inventory: list[str] = Field(default_factory=list, description="Regions needing more pods than the instance allows (the sweeps lift the inventory).")
    wall_s: float = Field(0.0, exclude=True, description="Wall time of the solve (s); printed, never stored (same input, same bytes).")


def instance_data(inst: Instance) -> dict:
    """The instance as plain data (every default filled in), ready to modify and
    re-validate with parse_instance; parse_instance(instance_data(i)) equals i."""
    return inst.model_dump(mode="json")


def summarise(key: str, plan, wall_s: float = 0.0) -> SolveSummary:
    """A :class:`SolveSummary` of ``plan`` (a :class:`fleetplan.results.plan.Plan` or None)."""
    if plan is None:
        return SolveSummary(key=key, status="no_solution", message="the solver found no feasible fleet in the time limit", wall_s=wall_s)
    by = {ro: [p for p in plan.pools if p.role == ro] for ro in ("prefill", "decode", "replica")}
    c = plan.cost
    short_r = max([p.prefill_shortfall_rps for p in plan.scenarios] or [0.0])
    short_t = max([p.decode_shortfall_tokens_per_s for p in plan.scenarios] or [0.0])
    msg = ""
    if plan.status == "shortfall":
        msg = (f"no fleet the pod inventory allows serves all the load within the SLOs: up to {short_r:,.4g} req/s of prefill"
               f"{f' and {short_t:,.4g} output tokens/s of decode' if short_t > 0 else ''} unserved in some scenario")
    elif plan.status == "violations":
        msg = f"the verifier found {len(plan.violations)} violation(s), e.g. {plan.violations[0].message}"
    elif plan.status == "unverified":
        msg = "the time limit passed while the verifier was checking the plan: not verified (raise the time limit)"
    gap = plan.solver.gap
    return SolveSummary(
        key=key, status=plan.status, message=msg, chips=c.chips,
        prefill_slices=sum(p.slices for p in by["prefill"]), prefill_chips=sum(p.chips for p in by["prefill"]),
        decode_slices=sum(p.slices for p in by["decode"]), decode_chips=sum(p.chips for p in by["decode"]),
        replicas=sum(p.slices for p in by["replica"]), replica_chips=sum(p.chips for p in by["replica"]),
        warm_slices=sum(w.slices for w in plan.warm_pool), warm_chips=sum(w.chips for w in plan.warm_pool),
        fleet_cost_per_hour_usd=c.fleet_cost_per_hour_usd, cost_per_1m_output_tokens_usd=c.cost_per_1m_output_tokens_usd,
        cost_per_1m_output_tokens_at_peak_usd=c.cost_per_1m_output_tokens_at_peak_usd,
        cost_per_1m_output_tokens_with_infill_usd=c.cost_per_1m_output_tokens_with_infill_usd,
        cost_per_1m_input_tokens_usd=c.cost_per_1m_input_tokens_usd,
        mip_gap=gap if gap is not None and math.isfinite(gap) else None,
        shortfall_rps=short_r, shortfall_tokens_per_s=short_t, termination=plan.solver.termination,
        pods={f"{f.region}/{f.chip}": f.pods_total for f in plan.fleet}, wall_s=wall_s,
    )


def make_task(key: str, data: dict, options: dict[str, Any]) -> dict:
    """A task for :func:`solve_task`: the instance as data (copied) and the solve options
    (``solver``, ``mip_gap``, ``time_limit_s``, ``threads``)."""
    return {"key": key, "instance": copy.deepcopy(data), "options": dict(options)}


def solve_task(task: dict) -> dict:
    """Validate the task's instance and solve it. Runs in a worker; module-level so a
    process pool can pickle it by reference. Returns a SolveSummary as a dict (status
    'invalid' with the problems when the modified instance does not validate)."""
    import pyomo.environ  # noqa: F401  (before SciPy: see cli/solve.py)

    from fleetplan.instance.io import parse_instance
    from fleetplan.sizing import solve
    from fleetplan.solvers.base import SolveOptions

    key = task["key"]
    try:
        inst = parse_instance(task["instance"], key)
    except InstanceError as e:
        msg = "; ".join(p.render() for p in e.problems)
        return SolveSummary(key=key, status="invalid", message=f"the modified instance does not validate: {msg}").model_dump()
    o = task.get("options", {})
    opts = SolveOptions(solver=o.get("solver", "highs"), mip_gap=o.get("mip_gap", 0.01), time_limit_s=o.get("time_limit_s", 300.0),
                        threads=o.get("threads", 1))
    t0 = time.perf_counter()
    try:
        out = solve(inst, opts)
    except ValueError as e:  # build_model_data: no slice shape can serve a tier at all -- an infeasible point, not a crash
        return SolveSummary(key=key, status="no_solution", message=f"no fleet can be sized: {e}", wall_s=time.perf_counter() - t0).model_dump()
    s = summarise(key, out.plan, time.perf_counter() - t0)
    d = s.model_dump()
    d["wall_s"] = s.wall_s  # excluded from JSON documents, but the caller prints it
    return d


def run_solves(tasks: list[dict], executor, progress: Callable[[str], None] | None = None,
               inventory: dict | None = None) -> dict[str, SolveSummary]:
    """Run every task with ``executor`` (see :mod:`fleetplan.report.executor`); returns
    {key: SolveSummary}. ``progress(key)`` is called as each solve finishes;
    ``inventory`` (the unmodified instance as data) flags plans beyond its pods."""
    from fleetplan.report.modify import pods_over_inventory

    def done(_i, r):
        if progress is not None:
            progress(r["key"])

    res = executor.map(solve_task, tasks, done)
    out = {}
    for r in res:
        s = SolveSummary.model_validate(r)
        if inventory is not None and s.pods:
            s = s.model_copy(update={"beyond_inventory": pods_over_inventory(inventory, s.pods)})
        out[s.key] = s
    return out
