"""``solve(instance, options)``: build the candidate tables and the sizing model, solve it
with the chosen backend, refine the prefill TTFT chords until the exact queueing curve
holds at the solution, extract the plan and have the independent verifier re-prove it."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable

from fleetplan.deadline import TimeLimitReached, deadline_scope
from fleetplan.instance.derived import ModelData, build_model_data
from fleetplan.instance.io import require_valid
from fleetplan.instance.schema import Instance
from fleetplan.sizing.post_solve_cost import record as record_post_solve, record_cut, reserve_basis
from fleetplan.models.sizing import build_sizing_model
from fleetplan.models.sizing.build import shortfall_vars, unserved_vars
import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.models.sizing.constraints.prefill import chord_slack_usd, move_chords, nonconvex_curves, violated_pools
from fleetplan.sizing.rounding import round_lp_solution
from fleetplan.sizing.extract import extract_plan
from fleetplan.results.plan import Plan, SolverInfo
from fleetplan.results.verify import verify
from fleetplan.solvers.base import SolveOptions, SolveResult, above_bound, gap_words
from fleetplan.solvers.recorded import Recorded
from fleetplan.sizing.context import SolveContext
from fleetplan.sizing.pods import POD_PROOF_NODES, fix_start, placed_start, prove_from_start, solve_capped, start_result

__all__ = ["solve", "SolveOutcome", "GAP_NOTE", "NOT_REPRODUCIBLE", "NOT_SIZED_WITH_PODS", "MAX_REFINEMENTS", "POST_SOLVE_RESERVE", "SHORTFALL_POST_SOLVE_RESERVE", "SHORTFALL_STAGE_SHARE"]

MAX_REFINEMENTS = 12
#: Integer variables from which the first HiGHS solve starts from the component start
#: (fleetplan.solvers.components): the generated 5-, 10- and 20-region instances have
#: 3,793-6,902, where branch and bound spends most of its time finding a first incumbent
#: near its root bound; the bundled instances have at most a few hundred and HiGHS solves
#: them at its root, so their plans do not change (docs/benchmarks.md).
COMPONENT_START_MIN_INTEGERS = 2000
#: The solver stops this many times the table-building time (+ 0.2 s) before the deadline,
#: for extracting and verifying the plan: verification re-derives the tables' physics (the
#: bundled Gemini instance: tables 5.2 s, verification 5.5 s; docs/benchmarks.md).
POST_SOLVE_RESERVE = 1.2
#: Once no fleet serves everything (the plan will be a shortfall plan) the reserve is this many
#: times the table time (+ 0.2 s), capped the same way: a shortfall plan's extraction and
#: verification took 1.4x the tables on the generated 5-region instance (docs/benchmarks.md),
#: and the post-solve phase is cut at the deadline -- exit 3, no verified plan --
#: so a cost stage shortened by a second is the better trade.
SHORTFALL_POST_SOLVE_RESERVE = 2.5
#: Under a time limit the least-shortfall stage (solved to a 1e-6 gap) gets at most this share of
#: the solver time left, so the cost stage after it, warm-started from its fleet, still runs.
SHORTFALL_STAGE_SHARE = 0.6
#: seconds before the deadline at which a least-shortfall stage that found nothing in its
#: share stops when it is given the rest of the limit
LAST_STAGE_MARGIN_S = 0.3


@dataclass
class SolveOutcome:
    """A plan (None when the solver found no incumbent, or when the time limit passed while
    the incumbent was being extracted), the last solve's result, the model data (None when
    the time limit passed while building it), wall times (s) of each phase, and the number
    of solves.

    ``cut_after_solve`` names the phase the time limit cut after the solve, with an
    incumbent in hand ('extracting the plan' or 'verifying the plan'; None when the plan
    was extracted and verified): extraction cut, ``plan`` is None; verification cut,
    ``plan`` is the extracted plan with status 'unverified' and a diagnostic saying so.
    ``shortfall`` says whether the incumbent leaves load unserved (the solve's shortfall
    variables; known before the extraction). ``time_limited`` says whether the time limit
    (or the share of it a stage had) stopped any stage -- no stage has a wall-clock budget
    of its own: a plan it stopped depends on the machine's speed and load, and its
    diagnostics say so (:data:`NOT_REPRODUCIBLE`); one it did not is the same on any
    machine (one thread)."""

    plan: Plan | None
    result: SolveResult
    data: ModelData
    timings_s: dict[str, float]
    iterations: int
    cut_after_solve: str | None = None
    shortfall: bool = False
    time_limited: bool = False


def _backend(name: str):
    if name == "highs":
        from fleetplan.solvers.highs import solve_highs

        return solve_highs
    if name == "cpsat":
        from fleetplan.solvers.cpsat import solve_cpsat

        return solve_cpsat
    raise ValueError(f"unknown solver {name!r}; choose highs or cpsat")


def _component_start_on(m, d: ModelData, opts: SolveOptions) -> bool:
    """Whether the first HiGHS solve starts from the component start
    (:mod:`fleetplan.solvers.components`): ``opts.component_start`` when set, else on for
    models of at least COMPONENT_START_MIN_INTEGERS integer variables with failover
    routing to fix (never with ``--rounding-start``, which offers its own start)."""
    if opts.solver != "highs" or opts.rounding_start or not hasattr(m, "v_route_bp") or len(m.v_route_bp) == 0:
        return False
    if opts.component_start is not None:
        return opts.component_start
    return sum(1 for v in m.component_data_objects(pyo.Var) if not v.fixed and v.is_integer()) >= COMPONENT_START_MIN_INTEGERS


def _no_incumbent_in_time(phase: str, opts: SolveOptions, t0: float, end: float | None, d: ModelData | None = None) -> SolveOutcome:
    """The outcome of a solve whose time limit passed before any incumbent existed."""
    note = f"the time limit passed while {phase}"
    res = SolveResult("time_limit", "noSolution", False, None, None, None, time.monotonic() - t0, opts.solver, "", [note])
    return SolveOutcome(None, res, d, {"tables": time.monotonic() - t0}, 0, time_limited=True)


@dataclass
class _Loop:
    """What :func:`_size_loop` ends with: the last solve's result (the best exact-feasible one's
    values loaded into the model), the number of solves and the notes for the plan."""

    res: SolveResult | None
    it: int
    start_note: str | None
    fallback_note: str | None
    time_cut: bool = False  # the chord refinement stopped at the deadline (not at a solver's time limit)


def _size_loop(m, d: ModelData, opts: SolveOptions, ctx: SolveContext, notes: list[str], shortfall_end: float | None = None) -> _Loop:
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
    split = _component_start_on(m, d, opts)
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
    return _Loop(res, it, start_note, fallback_note, time_cut)


#: With placement-aware sizing, the share of the solver time the plain sizing (which fixes the
#: failover routing and proves the bound) may take; the pod stage has the rest.
PODS_PLAIN_SHARE = 0.4


def pods_apply(inst: Instance, d: ModelData) -> bool:
    """Whether the sizing counts slices per pod: ``placement.size_with_pods`` and some tier
    may run disaggregated (prefill -> decode KV to keep in the pods)."""
    return bool(inst.placement.size_with_pods) and d.disaggregated


@dataclass
class _PodStage:
    """The pod stage's model, its loop (None when it could not run), the plan's notes about it
    and whether the time limit (not a proof) left it without a plan."""

    model: object
    loop: _Loop | None
    notes: list[str]
    time_cut: bool = False  # the time limit passed while the pod data were built (the stage did not run)
    out_of_time: bool = False  # the time limit, not a proof, left the stage without a plan (the plan is the plain sizing's)


def _pod_stage(inst: Instance, d: ModelData, m, res: SolveResult, opts: SolveOptions, ctx: SolveContext) -> _PodStage:
    """Placement-aware sizing: the sizing model again with the pod families
    (:mod:`fleetplan.instance.pods`, constraints ``pods`` and ``dcn``), the failover routing
    fixed at the plain solution's (so a survivor's loads are constants). Sets ``d.pods``. The
    plain solve's bound is a bound of this problem too (it only adds constraints), so the
    plan's gap is measured against it."""
    from fleetplan.instance.pods import build_pod_data
    from fleetplan.models.sizing.constraints.traffic import ROUTE_UNITS
    from fleetplan.models import fix_in_bounds

    run, say, end, solver_end, basis = ctx.run, ctx.say, ctx.end, ctx.solver_end, ctx.basis
    if any((v.value or 0.0) > 1e-6 for v in shortfall_vars(m)):
        d.pods = None
        return _PodStage(m, None, ["not sized with its pods: no fleet serves all the load (the Notes give each shortfall's cause), so "
                                   "the plan is the least-unserved fleet sized without them; `fleetplan place` minimises its DCN share"])
    say("sizing with the pods: prefill and decode counted per pod, the DCN share bounded")
    if solver_end is not None and end is not None:
        # a plan with pods costs more to extract and verify (its pod contents, DCN flows and scenario records), and when
        # that cannot finish the plain plan is extracted and verified instead, in the time kept for it at the end (--time-limit
        # 60 on 20 regions had written nothing): the stage -- its build and every solve -- ends before both reserves, but is never left less than half
        # of the time before the plain plan's (a stage that may still find a plan is not given up for an estimate: its
        # plan's extraction may then be cut, and the plain plan is the fallback)
        now, last = time.monotonic(), end - _plain_reserve_s(basis)
        solver_end = min(solver_end, max(last - _pod_reserve_s(basis), now + 0.5 * (last - now)))
        opts = replace(opts, incumbent_deadline=last - _pod_reserve_s(basis))  # with an incumbent, its solves stop at its reserve
        if now >= solver_end:
            d.pods = None
            return _PodStage(m, None, [_NO_POD_TIME], time_cut=True, out_of_time=True)
        ctx = replace(ctx, solver_end=solver_end)  # the stage's solves end before both reserves
    routing = {(x, a, t): float(pyo.value(m.e_route_share[x, a, t])) for (x, a, t) in m.ROUTES}
    centers = {(r, t): int(round(sum((pyo.value(m.v_slices[r, t, "prefill", c], exception=False) or 0.0) for c in d.CONFIGS
                                     if (r, t, "prefill", c) in m.v_slices)))
               for r in d.REGIONS for t in d.TIERS}
    notes: list[str] = []
    try:
        with deadline_scope(solver_end if solver_end is not None else end):
            d.pods = build_pod_data(d, routing, centers)
            mb = build_sizing_model(d)
    except TimeLimitReached as e:
        d.pods = None
        return _PodStage(m, None, [f"NOT SIZED WITH ITS PODS: placement-aware sizing did not run, the time limit passed while {e.phase} "
                                   "(the time left for the pod stage: --time-limit less the time to extract and verify its plan and, "
                                   f"failing that, the plain plan); {_PLAIN_PLAN}"], time_cut=True, out_of_time=True)
    for (x, a, t) in mb.ROUTES:
        fix_in_bounds(mb.v_route_bp[x, a, t], routing[(x, a, t)] * ROUTE_UNITS)  # the plain solve's shares carry its noise
    over = [v for v in mb.v_dcn_over.values() if not v.fixed]
    over += [mb.v_dcn_level[r, t, li] for (r, t, li) in mb.DCN_LEVELS if li == d.pods.over_level(t)]
    over += list(mb.v_dcn_over_overall.values())  # the overall ceiling's overage (region, regime)
    for v in over:  # every DCN share within its ceiling first (no overage, nor its level)
        v.fix(0.0)
    bopts = replace(opts, component_start=False, rounding_start=False, separable=True)  # one block per region (routing fixed)
    # no stage stops at a wall-clock budget of its own: the start and the proof run to the gap asked for, the time limit
    # (solver_end) is only a guard, and a stage it stops makes the plan time-limited (not reproducible; the plan says so)
    proof_end = solver_end
    # the pod stage's solves after its start stop at a work limit, as its proof on the arrays does (none when --mip-gap 0
    # asks for a proof): without it the generated 20-region instance's solve with its overage capped ran 137 s of CPU
    nodes = POD_PROOF_NODES if opts.mip_gap > 0 else None
    found, failed, start = _pod_start(m, mb, d, opts, ctx, over)
    over_failed = [v for v in over if v.index()[0] in failed]
    if failed and over_failed and found:
        # regions with no placed fleet within the ceilings at the plain pools (typically a tier whose prefill slice fills a
        # pod, so all its KV crosses): their overage is capped at the least the start found there (c_dcn_over_cap, active),
        # and the cost is minimised with the prefill pools free again -- not the least overage of every fleet (that
        # lexicographic stage is _over_stage's, for a model with no placed start), which took minutes on 20 regions
        least = {r: float(pyo.value(mb.e_dcn_over_region_rps[r])) for r in sorted(failed)}
        notes.append("no placement within the pods keeps every DCN share within its ceiling (each tier's, and the region's overall) in "
                     + ", ".join(f"{r} ({v:,.1f} requests/s over)" for r, v in least.items())
                     + ": there the plan sends at most the least KV over the ceilings found with the plain sizing's prefill shapes and "
                     "pools, and the region x tiers over their ceiling (plan.dcn) have their TTFT sized with every request's DCN transfer")
        done = solve_capped(mb, d, res.bound, opts, run, say, proof_end) if opts.solver == "highs" else None
        loop = _Loop(done[0], done[1], None, None) if done is not None else \
            _size_loop(mb, d, replace(bopts, deadline=proof_end, max_nodes=nodes), ctx, notes)
    elif failed and over_failed:
        loop = _over_stage(mb, d, over_failed, bopts, ctx, notes)
    else:
        done = prove_from_start(mb, d, res, start, opts, run, say, proof_end) if (start is not None and found) else None
        loop = None if done is None else _Loop(done[0], done[1], None, None)
        if loop is None:
            loop = _size_loop(mb, d, replace(bopts, deadline=proof_end, max_nodes=nodes), ctx, notes)
    rb = loop.res
    short_b = rb is not None and rb.has_incumbent and any((v.value or 0.0) > 1e-6 for v in shortfall_vars(mb))
    out_of_time = rb is not None and not rb.has_incumbent and rb.termination == "time_limit"  # not a proof that none exists
    if over and not (failed and over_failed) and ((rb is None or not rb.has_incumbent) and not out_of_time or short_b):
        # no fleet within the pods keeps every share within its ceiling and serves everything (the plain sizing does):
        # serve it all, with the least KV over the ceilings (declared; its TTFT pays every request crossing), then the cost
        notes[:] = [n for n in notes if not n.startswith("no fleet serves all the load")]
        loop = _over_stage(mb, d, over, bopts, ctx, notes)
        rb = loop.res
    if rb is None or not rb.has_incumbent:
        if rb is not None and rb.termination == "time_limit":
            return _PodStage(mb, loop, notes + ["NOT SIZED WITH ITS PODS: placement-aware sizing found no plan before the time limit "
                                                f"passed; {_PLAIN_PLAN}"], out_of_time=True)
        why = ("no fleet whose slices fit the pods the inventory allows keeps every pod's KV leaving over the DCN within its egress "
               "(chips.*.pod_dcn_egress_gbytes_per_s) with the plain sizing's failover routing -- a DCN share may be declared over its "
               "ceiling, the pods and their egress may not be exceeded"
               if rb is not None and rb.termination in ("infeasible", "infeasible_or_unbounded") else
               f"it ended {rb.termination if rb is not None else 'without a solve'}")
        return _PodStage(mb, loop, notes + [f"placement-aware sizing found no plan: {why}; the plan is sized without its pods (its DCN "
                                            "share is not bounded: see `fleetplan place`)"])
    own_bound = rb.bound
    rb.stage_termination, rb.stage_gap = rb.termination, rb.gap
    if res.bound is not None and rb.objective is not None:
        # the plain sizing's bound is a bound of the joint problem (the pod stage only adds rows); the pod stage's own
        # bound is of the routing-fixed problem only, so it never replaces it (nor, cut by a time limit, weakens it)
        rb.bound = res.bound
        rb.gap = max(0.0, (rb.objective - rb.bound) / max(abs(rb.objective), 1e-9))
    within = not any(v.value and v.value > 1e-9 for v in mb.v_dcn_over.values())
    notes.append("sized with its pods (placement.size_with_pods): every slice is counted in a pod, so each tier's prefill and decode "
                 "share pods and its KV crossing the DCN "
                 + ("stays within its ceiling in every scenario" if within else "is bounded (within its ceiling where a placement allows)")
                 + " (plan.dcn); the failover routing is the plain sizing's, fixed, and the bound is the plain sizing's (a bound of this "
                 "problem too)"
                 + (f"; with that routing the pod stage proved {((rb.objective - own_bound) / max(abs(rb.objective), 1e-9)):.2%}"
                    if own_bound is not None and rb.objective is not None else ""))
    notes += d.pods.notes
    return _PodStage(mb, loop, notes)


def _over_stage(mb, d: ModelData, over: list, opts: SolveOptions, ctx: SolveContext, notes: list[str]) -> _Loop:
    """The pod stage when no fleet within the pods keeps every DCN share within its ceiling
    and serves everything (as the plain sizing does): lexicographic, as the shortfall is --
    every request served, the least DCN overage first (requests/s over the ceilings,
    ``obj_dcn_over``; the overage level's TTFT has every request crossing), then the cost
    with the overage capped at its least."""
    ctx.say("no placement keeps every DCN share within its ceiling: the least KV over the ceilings first")
    for v in over:
        v.unfix()
    for v in shortfall_vars(mb):
        v.fix(0.0)
    mb.c_shortfall_cap.deactivate()
    mb.c_dcn_over_cap.deactivate()
    r1 = _lexicographic_over(mb, d, opts, ctx.run, cost=False)
    if not r1.has_incumbent:
        return _Loop(r1, 1, None, None)
    least = float(pyo.value(mb.e_dcn_over_rps))
    if least > 1e-9:
        notes.append("no placement within the pods keeps every DCN share within its ceiling (each tier's, and the region's overall): the plan sends the least KV over "
                     "the ceilings it can; the region x tiers over their ceiling (plan.dcn, sized for any share) have their TTFT sized with "
                     "every request's DCN transfer")
    loop = _size_loop(mb, d, opts, ctx, notes)
    loop.it += 1
    return loop


def _lexicographic_over(mb, d: ModelData, opts: SolveOptions, run, cost: bool = True) -> SolveResult:
    """The least DCN overage of ``mb`` (``obj_dcn_over``, to a 1e-4 gap), then each region's
    overage capped at its least (``c_dcn_over_cap``, per region so that the regions stay
    independent blocks) and, with ``cost``, the cost solved under the caps. Returns the last
    solve's result (the overage's when it found nothing)."""
    mb.obj_cost_per_hour_usd.deactivate()
    mb.obj_dcn_over.activate()
    r1 = run(mb, replace(opts, mip_gap=min(opts.mip_gap, 1e-4)))
    mb.obj_dcn_over.deactivate()
    mb.obj_cost_per_hour_usd.activate()
    if not r1.has_incumbent:
        return r1
    # a region x tier with no overage in the least-overage fleet stays within its ceiling: the cost stage may not move its
    # region's overage onto it, nor size its TTFT for every request crossing (its overage level) -- both looked cheaper
    # to the cost stage, and declared overages where a placement within the ceiling exists
    free = {}
    for (r, t, g), v in mb.v_dcn_over.items():
        if not v.fixed:
            free.setdefault((r, t), []).append(v)
    for (r, t), vs in free.items():
        if all((v.value or 0.0) <= 1e-9 for v in vs):
            for v in vs:
                v.fix(0.0)
            li = d.pods.over_level(t)
            if li is not None and (r, t, li) in mb.DCN_LEVELS:
                mb.v_dcn_level[r, t, li].fix(0.0)
    for v in mb.v_dcn_over_overall.values():
        if not v.fixed and (v.value or 0.0) <= 1e-9:
            v.fix(0.0)
    for r in d.REGIONS:
        mb.p_dcn_over_cap[r] = float(pyo.value(mb.e_dcn_over_region_rps[r])) * (1 + 1e-6) + 1e-9
    mb.c_dcn_over_cap.activate()
    return run(mb, opts) if cost else r1


#: A plan sized with its pods: its extraction and verification are given this many times the table-building
#: time (+ 0.2 s) before the plain plan's reserve (POST_SOLVE_RESERVE) -- the generated 20-region plan's took
#: 2.8 x its tables (15.9 s for 5.7 s; 1.8 had left --time-limit 60 with no plan at all).
POD_POST_SOLVE_RESERVE = 3.0


def _plain_reserve_s(basis: float) -> float:
    """Seconds kept at the end of the limit for extracting and verifying a plan sized without pods (``basis``: :func:`fleetplan.sizing.post_solve_cost.reserve_basis`, s)."""
    return POST_SOLVE_RESERVE * basis + 0.2


def _pod_reserve_s(basis: float) -> float:
    """Seconds kept, before the plain plan's reserve, for extracting and verifying a plan sized with its pods."""
    return POD_POST_SOLVE_RESERVE * basis + 0.2


#: What a plan whose pod stage the time limit cut says it is (the verifier reads plan.solver.pod_stage_termination).
_PLAIN_PLAN = ("the plan is the plain sizing's, without its pods, extracted and verified in the time kept for it: its TTFT is sized "
               "with every request's KV over the ICI, and the share that crosses the DCN is neither bounded nor priced by the sizing "
               "(`fleetplan place` minimises it and reports it against each tier's ceiling); raise --time-limit for a plan sized "
               "with its pods")
_NO_POD_TIME = ("NOT SIZED WITH ITS PODS: the time limit left no time for placement-aware sizing after the plain sizing (it ends "
                "before the time kept to extract and verify its plan and, failing that, the plain plan); " + _PLAIN_PLAN)
#: The pod stage's first incumbent (:func:`_pod_start`) may take this share of the solver time left.
POD_START_SHARE = 0.5


def _pod_start(m, mb, d: ModelData, opts: SolveOptions, ctx: SolveContext, over: list) -> tuple[bool, set[str], object]:
    """A first incumbent for the pod stage's model ``mb``: the same model with every prefill
    pool at the plain solution's shape and at least its size (``m``), counted at that size's
    level -- each kit's excess is then a known number and HiGHS finds a placed fleet
    quickly -- solved to the gap asked for, one region at a time; its values stay in ``mb``
    (the proof starts from them, with the prefill pools free again). With HiGHS the start is
    :func:`fleetplan.sizing.pods.placed_start` (the model written once, its kits restricted
    to the LP relaxation's neighbourhood); with CP-SAT the same model is solved whole. A
    region with none there (typically a tier whose prefill slice fills a pod, so all its KV
    crosses) is solved again with its overage variables (``over``) free,
    lexicographically: the least KV over the ceilings, then the cost, the other regions'
    values held. Returns whether every region has a start (within the ceilings, or with the
    least overage), the regions that have none within the ceilings (their values are the
    overage start's, or None) -- nothing is kept when no region has one -- and the
    :class:`~fleetplan.sizing.pods.PlacedStart` (None with CP-SAT), whose arrays the proof
    reuses while ``mb`` is as it was written (no region needed the overage start)."""
    from fleetplan.models.sizing.constraints.prefill import set_chord

    run, say, solver_end = ctx.run, ctx.say, ctx.solver_end
    # the plain solution's chords: at its pools' sizes the chords are exact (fresh ones sit at an estimate, below the curve)
    if hasattr(m, "PREFILL_KEYS"):
        for key in mb.PREFILL_KEYS:
            if key in m.p_chord_k:
                set_chord(mb, d, key, m.p_chord_k[key])
        for key in getattr(mb, "PREFILL_DCN_KEYS", []):
            if key[:4] in m.p_chord_k:
                set_chord(mb, d, key, m.p_chord_k[key[:4]])
    for v in shortfall_vars(mb):
        v.fix(0.0)
    mb.c_shortfall_cap.deactivate()
    say("a first placed fleet: the plain sizing's prefill pools, placed")
    now = time.monotonic()
    cut = None if solver_end is None else now + POD_START_SHARE * max(solver_end - now, 0.0)
    start = None
    if opts.solver == "highs":
        start = placed_start(m, mb, d, opts, cut)  # mb written once, in the state the proof solves it in
        r = start_result(start, run)
        fixed, raised = fix_start(m, mb, d) if r.failed_blocks else ([], [])  # the overage start below solves mb itself
    else:
        fixed, raised = fix_start(m, mb, d)
        r = run(mb, replace(opts, deadline=cut, component_start=False, rounding_start=False, separable=True))
    found = r.has_incumbent
    # a region with no placed fleet within the ceilings at the plain pools (HiGHS: among the start's restricted kits) gets an
    # overage start; one that ran out of its share of the time (a time limit) does not -- the loop after the start solves it
    failed = {reg for block, term in zip(r.failed_blocks, r.failed_terminations) if term == "infeasible"
              for reg in _regions_of(mb, block)}
    mine = [v for v in over if v.index()[0] in failed]
    if failed and mine and (solver_end is None or time.monotonic() < solver_end):
        say(f"a first placed fleet with the least KV over the DCN ceilings in {', '.join(sorted(failed))}")
        in_failed = {id(v) for block in r.failed_blocks for v in block}
        held = [v for v in mb.component_data_objects(pyo.Var) if not v.fixed and id(v) not in in_failed and v.value is not None]
        for v in held:
            v.fix()
        for v in mine:
            v.unfix()
        now = time.monotonic()
        cut2 = None if solver_end is None else now + POD_START_SHARE * max(solver_end - now, 0.0)
        r2 = _lexicographic_over(mb, d, replace(opts, deadline=cut2, component_start=False, rounding_start=False, separable=True), run)
        found = r2.has_incumbent
        for v in held:
            v.unfix()
        if found:  # a region with a placement within the ceilings outside the placed start's restricted kits: not failed
            within = {reg for reg in failed if float(pyo.value(mb.e_dcn_over_region_rps[reg])) <= 1e-9}
            failed -= within
            for v in mine:
                if v.index()[0] in within:
                    v.fix(0.0)
        if not found:  # no start there either: the overage stage (prefill pools free) finds the least overage itself
            mb.c_dcn_over_cap.deactivate()
            for v in mine:
                v.fix(0.0)
    for v in fixed:
        v.unfix()
    for v, lb in raised:
        v.setlb(lb)
    for v in shortfall_vars(mb):
        v.unfix()
    if not r.has_incumbent and not r.failed_blocks:  # nothing found (a separable solve keeps its blocks' starts)
        for v in mb.component_data_objects(pyo.Var):
            if not v.fixed:
                v.set_value(None, skip_validation=True)
    return found, failed, (start if (start is not None and not r.failed_blocks) else None)


def _regions_of(mb, block: list) -> set[str]:
    """The regions whose pools a block of the pod stage's variables holds (its slice counts)."""
    return {v.index()[0] for v in block if v.parent_component() is mb.v_slices}


#: The start of the diagnostic :func:`gap_note` writes (the CLI prints it as a warning).
GAP_NOTE = "MIP GAP NOT REACHED"
#: The starts of the diagnostics of a plan a wall-clock limit stopped some stage of, or cut the pods from (the CLI prints them as warnings).
NOT_REPRODUCIBLE, NOT_SIZED_WITH_PODS = "NOT REPRODUCIBLE", "NOT SIZED WITH ITS PODS"


def not_reproducible_note(stages: list[str]) -> str:
    """The diagnostic of a plan the ``--time-limit`` guard stopped ``stages`` of (what it
    stopped, in the order they ran; at least one)."""
    return (f"{NOT_REPRODUCIBLE}: the --time-limit guard stopped {' and '.join(dict.fromkeys(stages))}, so the plan depends on the "
            "machine's speed and load; with time to spare every stage stops at its MIP gap or work limit and the same input gives "
            "the same plan, byte for byte")
#: What CP-SAT is for, said wherever its plan is dearer than asked (docs/cli.md, README).
CPSAT_PURPOSE = ("CP-SAT is for cross-checking small instances (8 workers, not bit-reproducible); on instances of the Gemini "
                 "scenario's size HiGHS, the default, is faster and cheaper")


def gap_note(s: SolverInfo, asked: SolveOptions, with_pods: bool = True) -> str | None:
    """A diagnostic when the plan's solve stopped further from its bound than the
    ``--mip-gap`` asked for (a time limit cut it), else None -- the same for HiGHS and
    CP-SAT (a CP-SAT plan 5.3% dearer than HiGHS's had passed with exit 0 and no word). For a plan sized with its pods the pod stage's gap against its own bound is
    the one compared (the gap against the plain sizing's bound holds the placement's cost);
    for a plan that is the plain sizing's (``with_pods`` False: the time limit cut the pod
    stage, or it did not apply) the plain sizing's own."""
    staged = s.pod_stage_termination is not None and with_pods
    term, gap = (s.pod_stage_termination, s.pod_stage_gap) if staged else (s.termination, s.gap)
    proved = gap is not None and math.isfinite(gap)
    if (proved and gap <= asked.mip_gap + 1e-12) or (not proved and term != "time_limit"):
        return None
    if term == "work_limit":  # the pod stage's proof at its work limit (deterministic): a larger --time-limit does not help
        how = f"at {gap_words(gap)}" if proved else "before any bound on the cost was proved"
        return (f"{GAP_NOTE}: the HiGHS solve of the pod stage stopped at its work limit ({POD_PROOF_NODES:,} branch-and-bound nodes per "
                f"region and, where a region's DCN overage is capped, each region's kits restricted to its LP relaxation's neighbourhood; "
                f"the same on any machine) {how}, above the --mip-gap asked for ({asked.mip_gap:.2%}): the placed fleet may cost up "
                f"to {(above_bound(gap) if proved else math.inf):.2%} more than the best one with that routing.")
    if proved:
        how = f"at {gap_words(gap)}"
        what = (f"the placed fleet may cost up to {above_bound(gap):.2%} more than the best one with that routing" if staged else
                f"the plan may cost up to {above_bound(gap):.2%} more than the cheapest fleet")
    else:
        how, what = "before any bound on the cost was proved", "how far its cost is from the cheapest fleet's is unknown"
    stop = "the time limit" if term == "time_limit" else f"'{term}'"
    tip = f"; {CPSAT_PURPOSE}" if s.solver == "cpsat" else ""
    name = {"highs": "HiGHS", "cpsat": "CP-SAT"}.get(s.solver, s.solver)
    return (f"{GAP_NOTE}: the {name} solve{' of the pod stage' if staged else ''} stopped at {stop} {how}, above the --mip-gap "
            f"asked for ({asked.mip_gap:.2%}): {what}; raise --time-limit{tip}.")


def solve(inst: Instance, options: SolveOptions | None = None, progress: Callable[[str], None] | None = None,
          warn: Callable[[str], None] | None = None) -> SolveOutcome:
    """Size the fleet of ``inst``.

    Args:
        options: solver, time limit (s of wall clock for the whole call: candidate tables,
            model build, every solve and the verification; or the options' deadline,
            :mod:`fleetplan.deadline`), MIP gap, threads, seed. When the limit passes
            before any incumbent exists the outcome has no plan and its result's
            termination is 'time_limit' with a note naming the phase. The limit's end is
            kept to extract and verify the plan (:mod:`fleetplan.sizing.post_solve_cost`): a
            solve holding an incumbent stops where that reserve begins, its gap above
            ``mip_gap`` if need be (the diagnostics say so) -- a plan found is not traded
            for a better one too late to verify; one without may run into the reserve, up
            to half the time left. Extraction or verification still cut (a slower machine
            than estimated): ``cut_after_solve`` says which; the limit is not exceeded.
        progress: called with a short status line at each phase (for a CLI spinner).
        warn: called at once, before any solve, with each note that decides the outcome
            already -- a region whose own demand needs more chips than its pods hold
            ('SHORTFALL CERTAIN: ...', also the plan's first diagnostics).
    Returns: :class:`SolveOutcome`; ``plan.status`` is 'verified', 'shortfall' (verified,
        with load the fleet cannot serve, reported per pool), 'violations' (the verifier
        disagrees -- a bug or an unconverged time-limited run; listed in plan.violations)
        or 'unverified' (the time limit passed during the verification:
        ``outcome.cut_after_solve`` says so; when it passed during the extraction there is
        no plan and the same field names that phase).
    Raises: ValueError for an unknown solver name; :class:`~fleetplan.errors.InstanceError`
        for an instance that fails the schema or the cross-field checks (one built with
        ``model_copy(update=...)`` skipped them).
    """
    require_valid(inst)
    opts = options or SolveOptions()
    run = Recorded(_backend(opts.solver))
    say = progress or (lambda _msg: None)
    t0, c0 = time.monotonic(), time.process_time()
    # the whole call ends by ``end``: the options' deadline (the CLI's: process start +
    # --time-limit) or, without one, time_limit_s from now -- tables and model build included
    ends = [x for x in (opts.deadline, None if opts.time_limit_s is None else t0 + opts.time_limit_s) if x is not None]
    end = min(ends) if ends else None
    try:
        d, m, t1 = _tables_and_model(inst, say, warn, end)
    except TimeLimitReached as e:
        return _no_incumbent_in_time(e.phase, opts, t0, end)
    t2 = time.monotonic()
    # leave time to extract and verify the plan after the last solve (verifying re-derives the
    # tables' physics); a solve without an incumbent may run into it, up to half of what is left,
    # one holding an incumbent stops at it (incumbent_deadline; without it gemini-ironwood
    # --time-limit 6, loaded, had ended exit 3 'a plan was found but its extraction ... did not finish').
    # Every reserve is a multiple of the basis (s): the table build's time, or what the
    # last extraction and verification of this instance took (CPU s) times how much slower the
    # process runs now, when that is more -- tables from the cache take a fraction of it
    basis = reserve_basis(inst, t1 - t0, t2 - t0, time.process_time() - c0, POD_POST_SOLVE_RESERVE / POST_SOLVE_RESERVE)
    reserve = _plain_reserve_s(basis)
    solver_end = None if end is None else max(end - reserve, t2 + 0.5 * (end - t2))
    if solver_end is not None and time.monotonic() >= end:
        return _no_incumbent_in_time("building the candidate tables and the model", opts, t0, end, d)
    ctx = SolveContext(opts, run, say, end, solver_end, basis, t0, t1, t2)
    # the deadline bounds every solve of the loop; with an incumbent, the reserve's start
    opts = replace(opts, deadline=solver_end, time_limit_s=None, incumbent_deadline=None if end is None else end - reserve)
    sized = _plain_then_pods(inst, d, m, opts, ctx)
    t3 = time.monotonic()
    res, time_cut = sized.res, sized.time_cut
    assert res is not None
    time_cut += [run.cut_text()] if run.stopped else []
    if not res.has_incumbent:
        return SolveOutcome(None, res, d, ctx.timings_s(t3), sized.it, time_limited=bool(time_cut))
    say("extracting and verifying the plan")
    first = [n for n in (sized.start_note, sized.fallback_note) if n is not None]
    if sized.plain is None:
        return _extract_and_verify(inst, d, sized.m, res, sized.it, first + sized.pod_notes, ctx, end, t3, time_cut)
    # a plan sized with its pods: extracted and verified by the deadline less the plain plan's reserve; cut there, the
    # plain sizing's plan is extracted and verified instead (--time-limit 60 on 20 regions had written nothing)
    out = _extract_and_verify(inst, d, sized.m, res, sized.it, first + sized.pod_notes, ctx,
                              None if end is None else end - _plain_reserve_s(basis), t3, time_cut)
    if out.cut_after_solve is None:
        return out
    m, res, it, fallback_note = sized.plain
    say("the plan with pods could not be verified in time: extracting and verifying the plain sizing's plan")
    d.pods = None
    res.stage_termination = "time_limit"
    note = (f"NOT SIZED WITH ITS PODS: placement-aware sizing found a plan ({out.result.objective:,.0f} $/h), but the time limit passed "
            f"while {out.cut_after_solve} before the time kept for the plain plan; {_PLAIN_PLAN}")
    return _extract_and_verify(inst, d, m, res, it, [n for n in (sized.start_note, fallback_note) if n is not None] + [note],
                               ctx, end, t3, [*time_cut, "the extraction and verification of the plan with its pods"])


def _tables_and_model(inst: Instance, say: Callable[[str], None], warn: Callable[[str], None] | None, end: float | None):
    """The candidate tables and the sizing model of ``inst``, both by ``end`` (monotonic s;
    raises :class:`~fleetplan.deadline.TimeLimitReached` when it passes): ``(data, model,
    t1)``, ``t1`` the tables' end. Each 'SHORTFALL CERTAIN' note goes to ``warn`` at once."""
    with deadline_scope(end):
        say("computing candidate tables")
        d = build_model_data(inst)
        t1 = time.monotonic()
        for note in d.notes:
            if note.startswith("SHORTFALL CERTAIN") and warn is not None:
                warn(note)
        if pods_apply(inst, d):
            # prefill shapes that no decode slice can share a pod with: sized for every request's KV crossing the DCN
            # in the plain sizing too (valid for every placed plan), so its bound holds what that costs
            from fleetplan.instance.pods import size_crossing_shapes

            d.notes = d.notes + size_crossing_shapes(d)
        say("building the model")
        m = build_sizing_model(d)
    return d, m, t1


@dataclass
class _Sized:
    """What the solves end with: the model holding the plan's values and its last result
    (the pod stage's when its plan replaced the plain sizing's), the number of solves, the
    plan's notes from the solves, the stages the time limit stopped, and ``plain`` -- the
    plain sizing's (model, result, solves, fallback note) when the pod stage's plan replaced
    it (the plan to fall back on if that one cannot be verified in time), else None."""

    m: object
    res: SolveResult | None
    it: int
    start_note: str | None
    fallback_note: str | None
    pod_notes: list[str]
    time_cut: list[str]
    plain: tuple | None


def _plain_then_pods(inst: Instance, d: ModelData, m, opts: SolveOptions, ctx: SolveContext) -> _Sized:
    """The plain sizing on ``m`` and, when the plan is sized with its pods and the plain
    sizing found a fleet, the pod stage (:func:`_pod_stage`) after it. ``opts`` bound every
    solve (``ctx.solver_end``; with an incumbent, the reserve's start)."""
    solver_end = ctx.solver_end
    notes: list[str] = []
    pods_on = pods_apply(inst, d)
    # with the pods, the plain sizing (routing, a bound) gets a share of the solver time and the pod stage the rest; a plain
    # sizing without a fleet in its share keeps solving to solver_end (no pod stage without one: 20 regions under
    # --time-limit 60 had ended exit 3 with half the time unused) -- in the same solve: restarted at the share's end, it did its
    # component start (LP relaxation and region MIPs, 6-10 s on a loaded machine) over again and its plan's extraction was cut
    share = None if (solver_end is None or not pods_on) else ctx.t2 + PODS_PLAIN_SHARE * (solver_end - ctx.t2)
    plain_opts = opts if share is None else replace(opts, incumbent_deadline=min(share, opts.incumbent_deadline))
    loop = _size_loop(m, d, plain_opts, ctx, notes, shortfall_end=solver_end)
    res, it, start_note, fallback_note = loop.res, loop.it, loop.start_note, loop.fallback_note
    time_cut = ["the plain sizing's chord refinement"] if loop.time_cut else []
    pod_notes: list[str] = []
    plain = None  # the plain sizing's fleet, when the pod stage's plan replaces it: the plan if that one cannot be verified in time
    if pods_on and res is not None and res.has_incumbent:
        stage = _pod_stage(inst, d, m, res, opts, ctx)
        pod_notes = stage.notes
        time_cut += (["the pod stage before it ran (its tables or its start)"] if stage.time_cut else []) + (
            ["the pod stage's chord refinement"] if stage.loop is not None and stage.loop.time_cut else [])
        if stage.loop is not None and stage.loop.res is not None and stage.loop.res.has_incumbent:
            stage.loop.res.notes[:0] = res.notes  # the plain sizing's (its component start ...) first
            plain = (m, res, it, fallback_note)
            m, res, it = stage.model, stage.loop.res, it + stage.loop.it
            fallback_note = stage.loop.fallback_note or fallback_note
        else:
            d.pods = None  # the plan is the plain sizing's: no pods to read
            if stage.out_of_time:
                res.stage_termination = "time_limit"  # the plan says the time limit cut its pod stage (the verifier reads it)
    return _Sized(m, res, it, start_note, fallback_note, pod_notes, time_cut, plain)


def _extract_and_verify(inst: Instance, d: ModelData, m, res: SolveResult, it: int, notes: list[str], ctx: SolveContext,
                        end: float | None, t3: float, time_cut: list[str]) -> SolveOutcome:
    """Extract the plan of ``m``'s loaded solution and have the independent verifier check it,
    both by ``end`` (monotonic s; None: no deadline); ``notes`` join its diagnostics; ``t3``
    is the solves' end (the timings).

    The deadline bounds the extraction and the verification (a shortfall plan's had taken
    40-160 s past --time-limit): both re-derive every scenario's physics and check it as they
    go. Cut during the extraction: no plan, ``cut_after_solve`` names the phase; during the
    verification: the plan with status 'unverified' and a note. ``time_cut`` names the stages
    the --time-limit guard stopped (empty: none)."""
    timings = {**ctx.timings_s(t3), "reserve_basis": ctx.basis}
    short_solve = any((v.value or 0.0) > 1e-6 for v in shortfall_vars(m))
    c3 = time.process_time()
    try:
        with deadline_scope(end):
            plan = extract_plan(d, m, res, ctx.options_doc(), it)
    except TimeLimitReached as e:
        record_cut(inst, d.pods is not None, time.process_time() - c3)
        return SolveOutcome(None, res, d, {**timings, "verify": time.monotonic() - t3}, it, e.phase, short_solve, time_limited=True)
    shortfall = any(p.shortfall > 1e-6 for s in plan.scenarios for p in s.pools)
    plan = plan.model_copy(update={"status": "shortfall" if shortfall else "verified"})
    extra = notes + [n for n in (gap_note(plan.solver, ctx.asked, plan.pods is not None),
                                 not_reproducible_note(time_cut) if time_cut else None) if n is not None]
    if extra:
        plan = plan.model_copy(update={"diagnostics": [*plan.diagnostics, *extra]})
    try:
        with deadline_scope(end):
            violations = verify(inst, plan)
    except TimeLimitReached as e:
        record_cut(inst, plan.pods is not None, time.process_time() - c3)
        note = (f"NOT VERIFIED: the time limit passed while {e.phase}; the plan is the solver's incumbent with the independent "
                f"evaluator's predictions, not re-proved against the instance ({'it leaves load unserved' if shortfall else 'no shortfall recorded'}); "
                "re-solve with a larger --time-limit for a verified plan")
        plan = plan.model_copy(update={"status": "unverified", "diagnostics": [*plan.diagnostics, note]})
        return SolveOutcome(plan, res, d, {**timings, "verify": time.monotonic() - t3}, it, e.phase, shortfall, time_limited=True)
    record_post_solve(inst, plan.pods is not None, time.process_time() - c3)
    if violations:
        plan = plan.model_copy(update={"violations": violations, "status": "violations"})
    return SolveOutcome(plan, res, d, {**timings, "verify": time.monotonic() - t3}, it, None, shortfall, time_limited=bool(time_cut))
