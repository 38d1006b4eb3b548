"""``solve(instance, options)``: build the candidate tables and the sizing model, solve it
with the chosen backend, refine the prefill TTFT chords until the exact queueing curve
holds at the solution, extract the plan and have the independent verifier re-prove it."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

from fleetplan.instance.derived import ModelData, build_model_data
from fleetplan.instance.io import require_valid
from fleetplan.instance.schema import Instance
from fleetplan.models.sizing import build_sizing_model
from fleetplan.models.sizing.build import shortfall_vars, unserved_vars
import pyomo.environ as pyo

from fleetplan.models.sizing.constraints.prefill import chord_slack_usd, move_chords, nonconvex_curves, violated_pools
from fleetplan.solvers.rounding import round_lp_solution
from fleetplan.results.extract import extract_plan
from fleetplan.results.plan import Plan
from fleetplan.results.verify import verify
from fleetplan.solvers.base import SolveOptions, SolveResult

__all__ = ["solve", "SolveOutcome", "MAX_REFINEMENTS"]

MAX_REFINEMENTS = 12


@dataclass
class SolveOutcome:
    """A plan (None only when the solver found no incumbent), the last solve's result,
    the model data, wall times (s) of each phase, and the number of solves."""

    plan: Plan | None
    result: SolveResult
    data: ModelData
    timings_s: dict[str, float]
    iterations: int


def _backend(name: str):
    if name == "highs":
        from fleetplan.solvers.highs import solve_highs

        return solve_highs
    if name == "cpsat":
        from fleetplan.solvers.cpsat import solve_cpsat

        return solve_cpsat
    raise ValueError(f"unknown solver {name!r}; choose highs or cpsat")


def solve(inst: Instance, options: SolveOptions | None = None, progress: Callable[[str], None] | None = None) -> SolveOutcome:
    """Size the fleet of ``inst``.

    Args:
        options: solver, time limit (s, for the whole refinement loop), MIP gap, threads, seed.
        progress: called with a short status line at each phase (for a CLI spinner).
    Returns: :class:`SolveOutcome`; ``plan.status`` is 'verified', 'shortfall' (verified,
        with load the fleet cannot serve, reported per pool) or 'violations' (the verifier
        disagrees -- a bug or an unconverged time-limited run; listed in plan.violations).
    Raises: ValueError for an unknown solver name; :class:`~fleetplan.errors.InstanceError`
        for an instance that fails the schema or the cross-field checks (one built with
        ``model_copy(update=...)`` skipped them).
    """
    require_valid(inst)
    opts = options or SolveOptions()
    run = _backend(opts.solver)
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    say("computing candidate tables")
    d = build_model_data(inst)
    t1 = time.perf_counter()
    say("building the model")
    m = build_sizing_model(d)
    t2 = time.perf_counter()
    it = 0
    res: SolveResult | None = None
    best: tuple[float, list, SolveResult] | None = None
    notes: list[str] = []
    if d.disaggregated and nonconvex_curves(d):
        notes.append("some prefill capacity curves are not convex; chords may be optimistic between integers (the verifier checks the plan)")

    def remaining() -> float | None:
        if opts.time_limit_s is None:
            return None
        return max(opts.time_limit_s - (time.perf_counter() - t0), 0.05)

    # Stage 1: every shortfall fixed at zero -- the fleet must serve everything.
    for v in shortfall_vars(m):
        v.fix(0.0)
    m.c_shortfall_cap.deactivate()
    if opts.solver == "highs" and opts.rounding_start:
        say("LP-guided rounding for a first fleet")
        if not round_lp_solution(m, d, replace(opts, time_limit_s=remaining())):
            for v in m.component_data_objects(pyo.Var):
                if not v.fixed:
                    v.set_value(None, skip_validation=True)
    while True:
        it += 1
        say(f"solve {it} with {opts.solver}")
        res = run(m, replace(opts, time_limit_s=remaining()))
        if not res.has_incumbent and res.termination in ("infeasible", "infeasible_or_unbounded") and any(v.fixed for v in shortfall_vars(m)):
            # Stage 2 (lexicographic): the least shortfall first, then the least cost with it capped.
            say("no fleet serves everything: minimising the shortfall first")
            for v in shortfall_vars(m):
                v.unfix()
            m.obj_cost_per_hour_usd.deactivate()
            m.obj_shortfall_rps.activate()
            it += 1
            # the least shortfall must really be the least: a 1% gap would leave whole pools unserved
            r1 = run(m, replace(opts, time_limit_s=remaining(), mip_gap=min(opts.mip_gap, 1e-6)))
            m.obj_shortfall_rps.deactivate()
            m.obj_cost_per_hour_usd.activate()
            if not r1.has_incumbent:
                res = r1
                break
            least = float(pyo.value(m.e_shortfall_rps))
            # keep the unserved where the least-unserved solve put it: the region-tier-scenarios it
            # served end to end stay served (their roles' shortfalls follow); each role of the
            # others may shrink to what the other role serves -- capacity nobody can use
            for v in unserved_vars(m):
                if (v.value or 0.0) <= 1e-7:
                    v.fix(0.0)
            m.p_shortfall_cap = least * (1 + 1e-7) + 1e-9
            m.c_shortfall_cap.activate()
            notes.append(f"no fleet serves all the load within the SLOs; the plan minimises the requests not served end to end first "
                         f"(a request needs its prefill and its decode; {least:.4g} requests/s summed over scenarios), then the cost")
            continue
        if not res.has_incumbent:
            break
        exact = not (violated_pools(m, d) if hasattr(m, "PREFILL_KEYS") else [])
        improved = best is None or res.objective < best[0] * (1 - opts.mip_gap) - 1e-9
        if exact and (best is None or res.objective < best[0] - 1e-9):
            best = (res.objective, [(v, v.value) for v in m.component_data_objects(pyo.Var)], res)
        if exact and hasattr(m, "PREFILL_KEYS") and chord_slack_usd(m, d) <= opts.mip_gap * abs(res.objective):
            break  # what moving the chords could still save is within the gap asked for
        moved = move_chords(m, d) if hasattr(m, "PREFILL_KEYS") else 0
        if moved == 0 or (exact and not improved):
            break
        if it >= MAX_REFINEMENTS:
            notes.append(f"chord refinement stopped after {it} solves with {moved} chords still moving; the best exact-feasible solve is kept")
            break
        if opts.time_limit_s is not None and time.perf_counter() - t0 >= opts.time_limit_s:
            notes.append("time limit reached during chord refinement; the best exact-feasible solve is kept")
            break
    # keep the cheapest solve that meets the exact curve (the last one, unless the loop was cut short)
    if best is not None and res is not None and res is not best[2]:
        for v, val in best[1]:
            v.set_value(val, skip_validation=True)
        res = best[2]
    if res is not None:
        res.notes.extend(notes)
    t3 = time.perf_counter()
    assert res is not None
    if not res.has_incumbent:
        return SolveOutcome(None, res, d, {"tables": t1 - t0, "build": t2 - t1, "solve": t3 - t2}, it)
    say("extracting and verifying the plan")
    options_doc = {"solver": opts.solver, "mip_gap": opts.mip_gap, "time_limit_s": opts.time_limit_s, "threads": opts.threads, "seed": opts.seed}
    plan = extract_plan(d, m, res, options_doc, it)
    shortfall = any(p.shortfall > 1e-6 for s in plan.scenarios for p in s.pools)
    plan = plan.model_copy(update={"status": "shortfall" if shortfall else "verified"})
    violations = verify(inst, plan)
    if violations:
        plan = plan.model_copy(update={"violations": violations, "status": "violations"})
    t4 = time.perf_counter()
    return SolveOutcome(plan, res, d, {"tables": t1 - t0, "build": t2 - t1, "solve": t3 - t2, "verify": t4 - t3}, it)
