"""Re-solves for the sweeps: one task per modified instance, run by an executor, each
returning a :class:`SolveSummary` of the plan (chips, slices by role, cost, status, how
the solve ended and the gap it reached).

A task is JSON-able: ``{"key": str, "instance": <instance as data>, "options": {...}}``
-- the instance is rebuilt and validated in the worker with
:func:`fleetplan.instance.io.parse_instance`, and solved with :func:`fleetplan.solve`
(so every number comes from a real solve and the independent verifier).

Every solve is deterministic (one HiGHS thread, as every `fleetplan solve`): no stage
stops at a wall-clock budget of its own, so a point is the same on any machine, under any
load and on any executor. The options' ``time_limit_s`` is a guard: a solve it stops
keeps its incumbent and is marked ``time_limited`` (that point depends on the machine's
speed and load, and is not compared with the others: :func:`compare`). The instance's
own pod inventory is kept; with ``lift_inventory`` (a factor) a point that leaves load
unserved with every pod of some region committed is solved again with that many times
the pods (``inventory`` says which).
"""

from __future__ import annotations

import copy
import math
import time
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from fleetplan.errors import InstanceError
from fleetplan.instance.schema import Instance

__all__ = ["SolveSummary", "summarise", "make_task", "solve_task", "run_solves", "instance_data", "compare", "Comparison", "sweep_notes",
           "sweep_options_doc"]

Status = Literal["verified", "shortfall", "violations", "unverified", "no_solution", "invalid"]
#: How two points' costs compare (:func:`compare`).
Comparison = Literal["resolved", "within_gap", "not_comparable"]


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
    time_limited: bool = Field(False, description="The --time-limit guard (seconds per solve) stopped a stage of this solve: its plan "
                                                  "depends on the machine's speed and load, its gap may be above the one asked, and it "
                                                  "is not compared with the other points.")
    inventory: str = Field("instance", description="The pod inventory solved with: 'instance' (its own), or 'lifted xN' (N times "
                                                   "the pods: at its own the fleet left load unserved with every pod of some region "
                                                   "committed).")
    pods: dict[str, int] = Field(default_factory=dict, description="Pods committed per 'region/chip' (count).")
    beyond_inventory: list[str] = Field(default_factory=list, description="Regions needing more pods than the instance allows (a point solved with the inventory lifted).")
    wall_s: float = Field(0.0, exclude=True, description="Wall time of the solve (s); printed, never stored (same input, same bytes).")


def instance_data(inst: Instance) -> dict:
    """The instance as plain data (every default filled in), ready to modify and
    re-validate with parse_instance; parse_instance(instance_data(i)) equals i."""
    return inst.model_dump(mode="json")


def summarise(key: str, plan, wall_s: float = 0.0, time_limited: bool = False) -> SolveSummary:
    """A :class:`SolveSummary` of ``plan`` (a :class:`fleetplan.results.plan.Plan` or None);
    ``time_limited``: a wall-clock limit stopped a stage of its solve."""
    if plan is None:
        return SolveSummary(key=key, status="no_solution", message="the solver found no feasible fleet in the time limit", wall_s=wall_s,
                            time_limited=time_limited, termination="time_limit" if time_limited else "")
    by = {ro: [p for p in plan.pools if p.role == ro] for ro in ("prefill", "decode", "replica")}
    c = plan.cost
    short_r = max([p.prefill_shortfall_rps for p in plan.scenarios] or [0.0])
    short_t = max([p.decode_shortfall_tokens_per_s for p in plan.scenarios] or [0.0])
    msg = ""
    if plan.status == "shortfall":
        # the cause is the plan's own diagnostic (its fix hint blames the pod inventory only where every pod is in use)
        why = next((x for x in plan.diagnostics if x.startswith("shortfall in ")), None)
        msg = (f"no fleet the instance allows serves all the load within the SLOs: up to {short_r:,.4g} req/s of prefill"
               f"{f' and {short_t:,.4g} output tokens/s of decode' if short_t > 0 else ''} unserved in some scenario"
               f"{f'; e.g. {why}' if why else ''}")
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
        shortfall_rps=short_r, shortfall_tokens_per_s=short_t, termination=plan.solver.termination, time_limited=time_limited,
        pods={f"{f.region}/{f.chip}": f.pods_total for f in plan.fleet}, wall_s=wall_s,
    )


def make_task(key: str, data: dict, options: dict[str, Any]) -> dict:
    """A task for :func:`solve_task`: the instance as data (copied) and the solve options
    (``solver``, ``mip_gap``, ``time_limit_s`` -- the guard, seconds per solve --,
    ``threads``, ``lift_inventory``: 0, or the factor a point the inventory cannot serve
    is solved again with)."""
    return {"key": key, "instance": copy.deepcopy(data), "options": dict(options)}


def _solve_one(key: str, data: dict, opts) -> SolveSummary:
    """One deterministic solve of the instance ``data`` as a :class:`SolveSummary`."""
    from fleetplan.instance.io import parse_instance
    from fleetplan.sizing import solve

    try:
        inst = parse_instance(data, key)
    except InstanceError as e:
        msg = "; ".join(p.render() for p in e.problems)
        return SolveSummary(key=key, status="invalid", message=f"the modified instance does not validate: {msg}")
    t0 = time.perf_counter()
    try:
        out = solve(inst, opts)
    except ValueError as e:  # build_model_data: no slice shape can serve a tier at all -- an infeasible point, not a crash
        return SolveSummary(key=key, status="no_solution", message=f"no fleet can be sized: {e}", wall_s=time.perf_counter() - t0)
    s = summarise(key, out.plan, time.perf_counter() - t0, out.time_limited)
    if out.plan is None and out.time_limited:
        s = s.model_copy(update={"message": f"no plan: the --time-limit guard ({opts.time_limit_s:g} s per solve) passed "
                                            f"{'while ' + out.cut_after_solve if out.cut_after_solve else 'before the solver found a fleet'}"})
    return s


def solve_task(task: dict) -> dict:
    """Validate the task's instance and solve it (deterministically, the options'
    ``time_limit_s`` as a guard; with ``lift_inventory`` N > 0, a plan that leaves load
    unserved with every pod of some region committed is solved again with N times the
    pods). Runs in a worker; module-level so a process pool can pickle it by reference.
    Returns a SolveSummary as a dict (status 'invalid' with the problems when the
    modified instance does not validate)."""
    import pyomo.environ  # noqa: F401  (before SciPy: see cli/solve.py)

    from fleetplan.report.modify import lift_inventory, pods_at_inventory
    from fleetplan.solvers.base import SolveOptions

    key, data = task["key"], task["instance"]
    o = task.get("options", {})
    opts = SolveOptions(solver=o.get("solver", "highs"), mip_gap=o.get("mip_gap", 0.01), time_limit_s=o.get("time_limit_s", 300.0),
                        threads=o.get("threads", 1))
    s = _solve_one(key, data, opts)
    lift = int(o.get("lift_inventory", 0) or 0)
    full = pods_at_inventory(data, s.pods) if s.status == "shortfall" and lift > 1 else []
    if full:
        first = s
        s = _solve_one(key, lift_inventory(data, lift), opts)
        s = s.model_copy(update={"inventory": f"lifted x{lift}", "wall_s": first.wall_s + s.wall_s, "message": "; ".join(filter(None, [
            f"at the instance's pod inventory ({'; '.join(full)}) the fleet leaves up to {first.shortfall_rps:,.4g} req/s unserved: "
            f"solved again with {lift}x the pods", s.message]))})
    d = s.model_dump()
    d["wall_s"] = s.wall_s  # excluded from JSON documents, but the caller prints it
    return d


def compare(a: SolveSummary, b: SolveSummary) -> Comparison:
    """How the fleet costs of two points compare: 'not_comparable' when either has no plan
    or was stopped by the --time-limit guard (not reproducible); 'within_gap' when
    |a - b| (USD/h) is at most what their gaps allow (gap x fleet $/h of each: the sign of
    the difference is not resolved; an unknown gap counts as unresolved); else 'resolved'."""
    if any(s.status in ("no_solution", "invalid") or s.time_limited or s.fleet_cost_per_hour_usd is None for s in (a, b)):
        return "not_comparable"
    if a.mip_gap is None or b.mip_gap is None:
        return "within_gap"
    noise = a.mip_gap * a.fleet_cost_per_hour_usd + b.mip_gap * b.fleet_cost_per_hour_usd
    return "resolved" if abs(a.fleet_cost_per_hour_usd - b.fleet_cost_per_hour_usd) > noise + 1e-9 else "within_gap"


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


def sweep_options_doc(options: dict, keep_inventory: bool) -> dict:
    """A sweep report's ``options``: the solve options and how the inventory was treated."""
    from fleetplan.report.modify import INVENTORY_LIFT

    return {**{k: options[k] for k in ("solver", "mip_gap", "time_limit_s", "threads")},
            "inventory": "kept" if keep_inventory else f"the instance's; lifted x{INVENTORY_LIFT} for points it cannot serve"}


def sweep_notes(options: dict, points: dict[str, SolveSummary], keep_inventory: bool) -> list[str]:
    """What a sweep's table says about how its points were solved: deterministic solves to
    the MIP gap and what the gap column measures; the points the --time-limit guard
    stopped (not reproducible, not compared), named with the gap each reached; how the
    pod inventory was treated and the points beyond it. ``points``: {label: summary},
    the base first."""
    from fleetplan.report.modify import INVENTORY_LIFT

    gap = options["mip_gap"]
    cut = {k: s for k, s in points.items() if s.time_limited}
    notes = [f"each point is one deterministic solve to a {gap:.2%} MIP gap (one HiGHS thread; no stage stops at a wall-clock budget "
             "of its own), so the same input gives the same points on any machine and executor"
             + (f", except the {len(cut)} the --time-limit guard stopped (below)" if cut else "")
             + f"; 'gap' is each plan's distance from the best bound of the sizing without pods (the placement's cost is in it, so it "
             f"can exceed {gap:.2%} where the solve reached its gap); differences within two points' gaps are not resolved, and trades "
             "between roles and slice shapes of equal cost are noise"]
    if cut:
        notes.append(f"stopped by the --time-limit guard ({options['time_limit_s']:g} s per solve) before the {gap:.2%} gap, so not "
                     "reproducible (they depend on the machine's speed and load) and not compared with the other points: "
                     + "; ".join(f"{k} ({'no plan' if s.status in ('no_solution', 'invalid') else 'gap unknown' if s.mip_gap is None else f'{s.mip_gap:.2%} from its bound'})"
                                 for k, s in cut.items())
                     + "; raise --time-limit to solve them to the gap")
    if keep_inventory:
        notes.append("pod inventory kept for every point (--keep-inventory): a point beyond it is a shortfall plan")
    else:
        notes.append(f"every point is solved with the instance's pod inventory, the base as `fleetplan solve` solves it; a point that leaves "
                     f"load unserved with every pod of some region committed is solved again with {INVENTORY_LIFT}x the pods and flagged "
                     "(what it needs beyond the inventory)")
    notes.append("the base is the plan `fleetplan solve` writes for the instance (solve is deterministic too: only its --time-limit "
                 "guard, which its plan then reports, can make the two differ)")
    over = [f"{k} ({'; '.join(s.beyond_inventory)})" for k, s in points.items() if s.beyond_inventory]
    if over:
        notes.append("beyond the instance's pod inventory: " + "; ".join(over))
    return notes
