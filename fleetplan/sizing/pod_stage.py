"""The pod stage of placement-aware sizing (``placement.size_with_pods``): the sizing model
again with the pod families (:mod:`fleetplan.tables.pods`, constraints ``pods`` and
``dcn``), the plain sizing's failover routing fixed, started from the plain fleet placed in
its pods (:mod:`fleetplan.sizing.pods`, on HiGHS's arrays) and proved from that start; when
no placement keeps every DCN share within its ceiling, the least KV over the ceilings first
and the cost second.

:func:`size_with_pods` is called by the driver (:mod:`fleetplan.sizing.driver`) after the
plain sizing found a fleet.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.deadline import TimeLimitReached, deadline_scope
from fleetplan.tables.derived import ModelData
from fleetplan.instance.schema import Instance
from fleetplan.models.sizing import build_sizing_model
from fleetplan.models.sizing.build import shortfall_vars
from fleetplan.sizing import loop as sizing_loop
from fleetplan.sizing.context import SolveContext
from fleetplan.sizing.pods import (OVER_GAP, POD_PROOF_NODES, cap_overage, fix_start, overage_start, placed_start, prove_from_start, solve_capped,
                                   start_result)
from fleetplan.sizing.post_solve_cost import plain_reserve_s, pod_reserve_s
from fleetplan.solvers.base import SolveOptions, SolveResult, gap_words

__all__ = ["PodStage", "size_with_pods", "PLAIN_PLAN", "NO_POD_TIME", "POD_START_SHARE"]


@dataclass
class PodStage:
    """The pod stage's model, its loop (None when it could not run), the plan's notes about it
    and whether the time limit (not a proof) left it without a plan."""

    model: object
    loop: sizing_loop.Loop | None
    notes: list[str]
    time_cut: bool = False  # the time limit passed while the pod data were built (the stage did not run)
    out_of_time: bool = False  # the time limit, not a proof, left the stage without a plan (the plan is the plain sizing's)


def size_with_pods(inst: Instance, d: ModelData, m, res: SolveResult, opts: SolveOptions, ctx: SolveContext) -> PodStage:
    """Placement-aware sizing: the sizing model again with the pod families
    (:mod:`fleetplan.tables.pods`, constraints ``pods`` and ``dcn``), the failover routing
    fixed at the plain solution's (so a survivor's loads are constants). Sets ``d.pods``. The
    plain solve's bound is a bound of this problem too (it only adds constraints), so the
    plan's gap is measured against it."""
    from fleetplan.tables.pods import build_pod_data
    from fleetplan.models.sizing.constraints.traffic import ROUTE_UNITS
    from fleetplan.models import fix_in_bounds

    run, say, end, solver_end, basis = ctx.run, ctx.say, ctx.end, ctx.solver_end, ctx.basis
    if any((v.value or 0.0) > 1e-6 for v in shortfall_vars(m)):
        d.pods = None
        return PodStage(m, None, ["not sized with its pods: no fleet serves all the load (the Notes give each shortfall's cause), so "
                                  "the plan is the least-unserved fleet sized without them; `fleetplan place` minimises its DCN share"])
    say("sizing with the pods: prefill and decode counted per pod, the DCN share bounded")
    if solver_end is not None and end is not None:
        # a plan with pods costs more to extract and verify (its pod contents, DCN flows and scenario records), and when
        # that cannot finish the plain plan is extracted and verified instead, in the time kept for it at the end (--time-limit
        # 60 on 20 regions had written nothing): the stage -- its build and every solve -- ends before both reserves, but is never left less than half
        # of the time before the plain plan's (a stage that may still find a plan is not given up for an estimate: its
        # plan's extraction may then be cut, and the plain plan is the fallback)
        now, last = time.monotonic(), end - plain_reserve_s(basis)
        solver_end = min(solver_end, max(last - pod_reserve_s(basis), now + 0.5 * (last - now)))
        opts = replace(opts, incumbent_deadline=last - pod_reserve_s(basis))  # with an incumbent, its solves stop at its reserve
        if now >= solver_end:
            d.pods = None
            return PodStage(m, None, [NO_POD_TIME], time_cut=True, out_of_time=True)
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
        return PodStage(m, None, [f"NOT SIZED WITH ITS PODS: placement-aware sizing did not run, the time limit passed while {e.phase} "
                                  "(the time left for the pod stage: --time-limit less the time to extract and verify its plan and, "
                                  f"failing that, the plain plan); {PLAIN_PLAN}"], time_cut=True, out_of_time=True)
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
    found, failed, start, arrays = _pod_start(m, mb, d, opts, ctx, over)
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
        done = solve_capped(mb, d, res.bound, opts, run, say, proof_end, arrays) if opts.solver == "highs" else None
        loop = sizing_loop.Loop(done[0], done[1], None, None) if done is not None else \
            sizing_loop.size_loop(mb, d, replace(bopts, deadline=proof_end, max_nodes=nodes), ctx, notes)
    elif failed and over_failed:
        loop = _over_stage(mb, d, over_failed, bopts, ctx, notes)
    else:
        done = prove_from_start(mb, d, res, start, opts, run, say, proof_end) if (start is not None and found) else None
        loop = None if done is None else sizing_loop.Loop(done[0], done[1], None, None)
        if loop is None:
            loop = sizing_loop.size_loop(mb, d, replace(bopts, deadline=proof_end, max_nodes=nodes), ctx, notes)
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
            return PodStage(mb, loop, notes + ["NOT SIZED WITH ITS PODS: placement-aware sizing found no plan before the time limit "
                                               f"passed; {PLAIN_PLAN}"], out_of_time=True)
        why = ("no fleet whose slices fit the pods the inventory allows keeps every pod's KV leaving over the DCN within its egress "
               "(chips.*.pod_dcn_egress_gbytes_per_s) with the plain sizing's failover routing -- a DCN share may be declared over its "
               "ceiling, the pods and their egress may not be exceeded"
               if rb is not None and rb.termination in ("infeasible", "infeasible_or_unbounded") else
               f"it ended {rb.termination if rb is not None else 'without a solve'}")
        return PodStage(mb, loop, notes + [f"placement-aware sizing found no plan: {why}; the plan is sized without its pods (its DCN "
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
                 + (f"; with that routing the pod stage proved {gap_words(max(0.0, (rb.objective - own_bound) / max(abs(rb.objective), 1e-9)), 'its own bound')}"
                    if own_bound is not None and rb.objective is not None else ""))
    notes += d.pods.notes
    return PodStage(mb, loop, notes)


def _over_stage(mb, d: ModelData, over: list, opts: SolveOptions, ctx: SolveContext, notes: list[str]) -> sizing_loop.Loop:
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
        return sizing_loop.Loop(r1, 1, None, None)
    least = float(pyo.value(mb.e_dcn_over_rps))
    if least > 1e-9:
        notes.append("no placement within the pods keeps every DCN share within its ceiling (each tier's, and the region's overall): the plan sends the least KV over "
                     "the ceilings it can; the region x tiers over their ceiling (plan.dcn, sized for any share) have their TTFT sized with "
                     "every request's DCN transfer")
    loop = sizing_loop.size_loop(mb, d, opts, ctx, notes)
    loop.it += 1
    return loop


def _lexicographic_over(mb, d: ModelData, opts: SolveOptions, run, cost: bool = True) -> SolveResult:
    """The least DCN overage of ``mb`` (``obj_dcn_over``, to :data:`~fleetplan.sizing.pods.OVER_GAP`), then each region's
    overage capped at its least (``c_dcn_over_cap``, per region so that the regions stay
    independent blocks) and, with ``cost``, the cost solved under the caps. Returns the last
    solve's result (the overage's when it found nothing)."""
    mb.obj_cost_per_hour_usd.deactivate()
    mb.obj_dcn_over.activate()
    r1 = run(mb, replace(opts, mip_gap=min(opts.mip_gap, OVER_GAP)))
    mb.obj_dcn_over.deactivate()
    mb.obj_cost_per_hour_usd.activate()
    if not r1.has_incumbent:
        return r1
    cap_overage(mb, d)
    return run(mb, opts) if cost else r1


#: What a plan whose pod stage the time limit cut says it is (the verifier reads plan.solver.pod_stage_termination).
PLAIN_PLAN = ("the plan is the plain sizing's, without its pods, extracted and verified in the time kept for it: its TTFT is sized "
              "with every request's KV over the ICI, and the share that crosses the DCN is neither bounded nor priced by the sizing "
              "(`fleetplan place` minimises it and reports it against each tier's ceiling); raise --time-limit for a plan sized "
              "with its pods")
NO_POD_TIME = ("NOT SIZED WITH ITS PODS: the time limit left no time for placement-aware sizing after the plain sizing (it ends "
               "before the time kept to extract and verify its plan and, failing that, the plain plan); " + PLAIN_PLAN)
#: The pod stage's first incumbent (:func:`_pod_start`) may take this share of the solver time left.
POD_START_SHARE = 0.5


def _pod_start(m, mb, d: ModelData, opts: SolveOptions, ctx: SolveContext, over: list) -> tuple[bool, set[str], object, object]:
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
    values held (HiGHS: :func:`fleetplan.sizing.pods.overage_start`, on arrays written once;
    CP-SAT: through the backend). Returns whether every region has a start (within the
    ceilings, or with the least overage), the regions that have none within the ceilings
    (their values are the overage start's, or None) -- nothing is kept when no region has
    one -- the :class:`~fleetplan.sizing.pods.PlacedStart` (None with CP-SAT), whose arrays
    the proof reuses while ``mb`` is as it was written (no region needed the overage start),
    and the overage start's :class:`~fleetplan.solvers.blockmodel.BlockModel` (None but
    where HiGHS found one), which the capped solve reuses."""
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
    start, arrays = None, None
    if opts.solver == "highs":
        start = placed_start(m, mb, d, opts, cut)  # mb written once, in the state the proof solves it in
        r = start_result(start, run)
        fixed, raised = [], []  # the overage start below sets the placed start's fixings as column bounds
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
        now = time.monotonic()
        cut2 = None if solver_end is None else now + POD_START_SHARE * max(solver_end - now, 0.0)
        failed_vars = [v for block in r.failed_blocks for v in block]
        if opts.solver == "highs":  # on arrays written once, which the capped solve reuses
            arrays, found = overage_start(m, mb, d, failed_vars, mine, opts, run, cut2)
        else:
            found = _overage_start_backend(mb, d, failed_vars, mine, opts, run, cut2)
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
            arrays = None
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
    return found, failed, (start if (start is not None and not r.failed_blocks) else None), arrays


def _overage_start_backend(mb, d: ModelData, failed_vars: list, mine: list, opts: SolveOptions, run, deadline: float | None) -> bool:
    """The overage start through the sizing's backend (CP-SAT; HiGHS solves it on arrays,
    :func:`fleetplan.sizing.pods.overage_start`): the variables outside ``failed_vars`` held
    at their values, the overage ``mine`` free, :func:`_lexicographic_over` (each stage
    writes the model). The placed start's prefill fixings (:func:`fix_start`) are the
    caller's. Returns whether it found a fleet (its values in ``mb``)."""
    in_failed = {id(v) for v in failed_vars}
    held = [v for v in mb.component_data_objects(pyo.Var) if not v.fixed and id(v) not in in_failed and v.value is not None]
    for v in held:
        v.fix()
    for v in mine:
        v.unfix()
    r2 = _lexicographic_over(mb, d, replace(opts, deadline=deadline, component_start=False, rounding_start=False, separable=True), run)
    for v in held:
        v.unfix()
    return r2.has_incumbent


def _regions_of(mb, block: list) -> set[str]:
    """The regions whose pools a block of the pod stage's variables holds (its slice counts)."""
    return {v.index()[0] for v in block if v.parent_component() is mb.v_slices}
