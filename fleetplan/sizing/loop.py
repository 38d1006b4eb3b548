"""The sizing loop: the sizing model solved with every shortfall fixed at zero (the fleet
must serve everything) -- if that is infeasible, the least shortfall first and the cost
second (lexicographic) -- and the prefill TTFT chords moved to each solution until the exact
queueing curve holds there (:mod:`fleetplan.models.sizing.constraints.prefill`).

:func:`size_loop` runs it on the plain sizing model and, again, on the pod stage's model
(:mod:`fleetplan.sizing.pod_stage`); the driver (:mod:`fleetplan.sizing.driver`) decides the
deadlines it runs under.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.tables.derived import ModelData
from fleetplan.models.sizing.build import shortfall_vars, unserved_vars
from fleetplan.models.sizing.constraints.prefill import chord_slack_usd, move_chords, nonconvex_curves, violated_pools
from fleetplan.sizing.context import SolveContext
from fleetplan.sizing.rounding import round_lp_solution
from fleetplan.solvers.base import SolveOptions, SolveResult

__all__ = ["Loop", "size_loop", "component_start_on", "MAX_REFINEMENTS", "COMPONENT_START_MIN_INTEGERS", "SHORTFALL_POST_SOLVE_RESERVE",
           "SHORTFALL_STAGE_SHARE", "LAST_STAGE_MARGIN_S"]

#: Solves of the chord refinement at most; past it the best exact-feasible solve is kept (a note says so).
MAX_REFINEMENTS = 12
#: Integer variables from which the first HiGHS solve starts from the component start
#: (fleetplan.solvers.components): the generated 5-, 10- and 20-region instances have
#: 3,793-6,902, where branch and bound spends most of its time finding a first incumbent
#: near its root bound; the bundled instances have at most a few hundred and HiGHS solves
#: them at its root, so their plans do not change (docs/benchmarks.md).
COMPONENT_START_MIN_INTEGERS = 2000
#: Once no fleet serves everything (the plan will be a shortfall plan) the reserve is this many
#: times the table time (+ 0.2 s), capped the same way: a shortfall plan's extraction and
#: verification took ~1.4x the tables on the generated 5-region instance (extraction 1.8 s +
#: verification 0.3 s against a reserve of 1.2x the tables + 0.2 s = 1.96 s:
#: docs/benchmarks-history.md, *Time limits ... run 3 and row 4*),
#: and the post-solve phase is cut at the deadline -- exit 3, no verified plan --
#: so a cost stage shortened by a second is the better trade.
SHORTFALL_POST_SOLVE_RESERVE = 2.5
#: Under a time limit the least-shortfall stage (solved to a 1e-6 gap) gets at most this share of
#: the solver time left, so the cost stage after it, warm-started from its fleet, still runs.
SHORTFALL_STAGE_SHARE = 0.6
#: seconds before the deadline at which a least-shortfall stage that found nothing in its
#: share stops when it is given the rest of the limit
LAST_STAGE_MARGIN_S = 0.3


def component_start_on(m, d: ModelData, opts: SolveOptions) -> bool:
    """Whether the first HiGHS solve starts from the component start
    (:mod:`fleetplan.solvers.components`): ``opts.component_start`` when set, else on for
    models of at least COMPONENT_START_MIN_INTEGERS integer variables with failover
    routing to fix (never with ``--rounding-start``, which offers its own start)."""
    if opts.solver != "highs" or opts.rounding_start or not hasattr(m, "v_route_bp") or len(m.v_route_bp) == 0:
        return False
    if opts.component_start is not None:
        return opts.component_start
    return sum(1 for v in m.component_data_objects(pyo.Var) if not v.fixed and v.is_integer()) >= COMPONENT_START_MIN_INTEGERS


@dataclass
class Loop:
    """What :func:`size_loop` ends with: the last solve's result (the best exact-feasible one's
    values loaded into the model), the number of solves and the notes for the plan."""

    res: SolveResult | None
    it: int
    start_note: str | None
    fallback_note: str | None
    time_cut: bool = False  # the chord refinement stopped at the deadline (not at a solver's time limit)


def size_loop(m, d: ModelData, opts: SolveOptions, ctx: SolveContext, notes: list[str], shortfall_end: float | None = None) -> Loop:
    """The sizing loop on model ``m``: every shortfall fixed at zero; if that is infeasible,
    the least shortfall first and the cost second (lexicographic); the prefill chords moved
    to the solution until the exact queueing curve holds. The best exact-feasible solve's
    values are left in ``m``. ``opts.deadline`` bounds every solve, ``opts.incumbent_deadline``
    every solve holding an incumbent and the refinement; once no fleet serves everything,
    ``shortfall_end`` and the shortfall reserve replace them (with the pods, the plain
    sizing's share of the time is kept for a pod stage that a shortfall plan does not run).
    ``ctx.solver_end`` ends the solves."""
    run, say, end, solver_end = ctx.run, ctx.say, ctx.end, ctx.solver_end
    it = 0
    time_cut = False
    res: SolveResult | None = None
    best: tuple[float, list, SolveResult] | None = None
    least_fleet: tuple[list, SolveResult] | None = None  # the least-shortfall solve's values and result
    fallback_note: str | None = None
    if d.disaggregated and nonconvex_curves(d):
        notes.append("some prefill capacity curves are not convex; chords may be optimistic between integers (the verifier checks the plan)")

    # Stage 1: every shortfall fixed at zero -- the fleet must serve everything.
    for v in shortfall_vars(m):
        v.fix(0.0)
    m.c_shortfall_cap.deactivate()
    if opts.solver == "highs" and opts.rounding_start:
        say("LP-guided rounding for a first fleet")
        if not round_lp_solution(m, d, opts):
            for v in m.component_data_objects(pyo.Var):
                if not v.fixed:
                    v.set_value(None, skip_validation=True)
    split = component_start_on(m, d, opts)
    start_note: str | None = None
    if opts.component_start and not split:  # asked for and not applicable: say why, as --dcn-slack's note does
        why = ("it is a HiGHS start (--solver cpsat)" if opts.solver != "highs" else
               "--rounding-start offers its own start" if opts.rounding_start else "the model has no failover routing to fix")
        start_note = f"--component-start on was not applied: {why}"
    while True:
        it += 1
        say(f"solve {it} with {opts.solver}" + (" from the component start" if split and it == 1 else ""))
        # the first solve only: later ones start from the previous solution
        res = run(m, opts, split_on=lambda v: v.parent_component() is m.v_route_bp) if (split and it == 1) else run(m, opts)
        if split and it == 1:
            start_note = next((n for n in res.notes if "component start" in n), None)
        if not res.has_incumbent and res.termination in ("infeasible", "infeasible_or_unbounded") and any(v.fixed for v in shortfall_vars(m)):
            # Stage 2 (lexicographic): the least shortfall first, then the least cost with it capped.
            say("no fleet serves everything: minimising the shortfall first")
            if shortfall_end is not None:
                solver_end = shortfall_end
            if solver_end is not None:
                # a shortfall plan: leave its extraction and verification their larger reserve
                reserve = SHORTFALL_POST_SOLVE_RESERVE * ctx.basis + 0.2
                solver_end = min(solver_end, max(end - reserve, ctx.t2 + 0.5 * (end - ctx.t2)))
                opts = replace(opts, deadline=solver_end, incumbent_deadline=end - reserve)  # the whole solver time, less its reserve
            for v in shortfall_vars(m):
                v.unfix()
            m.obj_cost_per_hour_usd.deactivate()
            m.obj_shortfall_rps.activate()
            it += 1
            # the least shortfall must really be the least: a 1% gap would leave whole pools unserved;
            # under a time limit it may take at most SHORTFALL_STAGE_SHARE of what is left, so the
            # cost stage (warm-started from its fleet) still runs
            r1_opts = replace(opts, mip_gap=min(opts.mip_gap, 1e-6))
            if solver_end is not None:
                now = time.monotonic()
                r1_opts = replace(r1_opts, deadline=now + SHORTFALL_STAGE_SHARE * max(solver_end - now, 0.0))
            r1 = run(m, r1_opts)
            if (not r1.has_incumbent and end is not None and r1.termination == "time_limit"
                    and end - LAST_STAGE_MARGIN_S - time.monotonic() > 0.25):
                # no least-shortfall fleet in its share: no cost stage follows, and the extraction and
                # verification of a fleet found now stop at the deadline themselves (an 'unverified'
                # outcome at worst), so the stage gets the rest of the limit (without it a trial ended
                # exit 3 'no incumbent' up to 4.7 s before the limit)
                r1b = run(m, replace(r1_opts, deadline=end - LAST_STAGE_MARGIN_S))
                r1 = replace(r1b, wall_time_s=r1.wall_time_s + r1b.wall_time_s)
            m.obj_shortfall_rps.deactivate()
            m.obj_cost_per_hour_usd.activate()
            if not r1.has_incumbent:
                res = r1
                break
            least = float(pyo.value(m.e_shortfall_rps))
            least_fleet = ([(v, v.value) for v in m.component_data_objects(pyo.Var)], r1)
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
        # with an exact-feasible fleet in hand the refinement stops where the solves stop with an incumbent
        stop_at = solver_end if (best is None or opts.incumbent_deadline is None or solver_end is None) else min(solver_end, opts.incumbent_deadline)
        if stop_at is not None and time.monotonic() >= stop_at:
            notes.append("time limit reached during chord refinement; the best exact-feasible solve is kept")
            time_cut = True
            break
    if best is None and least_fleet is not None and res is not None and not res.has_incumbent:
        # the cost stage found nothing in the time left: the least-shortfall fleet is a plan (the
        # verifier checks it), not a cost-minimised one -- better than no plan
        for v, val in least_fleet[0]:
            v.set_value(val, skip_validation=True)
        r1 = least_fleet[1]
        cost = float(pyo.value(m.obj_cost_per_hour_usd))
        fallback_note = ("the time limit passed before the cost stage found a fleet: the plan is the least-shortfall "
                         "fleet, not minimised for cost (no cost bound proved); raise --time-limit")
        res = SolveResult(res.termination, "feasible", True, cost, None, None, r1.wall_time_s + res.wall_time_s, r1.solver, r1.log,
                          [fallback_note])
    # keep the cheapest solve that meets the exact curve (the last one, unless the loop was cut short)
    if best is not None and res is not None and res is not best[2]:
        for v, val in best[1]:
            v.set_value(val, skip_validation=True)
        res = best[2]
    if res is not None:
        res.notes.extend(notes)
    return Loop(res, it, start_note, fallback_note, time_cut)
