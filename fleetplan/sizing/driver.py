"""``solve(instance, options)``: build the candidate tables and the sizing model, solve it
with the chosen backend, refine the prefill TTFT chords until the exact queueing curve
holds at the solution, extract the plan and have the independent verifier re-prove it."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable

from fleetplan.deadline import TimeLimitReached, deadline_scope
from fleetplan.tables.derived import ModelData, build_model_data
from fleetplan.instance.io import require_valid
from fleetplan.instance.schema import Instance
from fleetplan.models.sizing import build_sizing_model
from fleetplan.models.sizing.build import shortfall_vars
from fleetplan.results.plan import Plan, SolverInfo
from fleetplan.results.verify import verify
from fleetplan.sizing import loop as sizing_loop, pod_stage
from fleetplan.sizing.context import SolveContext
from fleetplan.sizing.extract import extract_plan
from fleetplan.sizing.pod_stage import PLAIN_PLAN
from fleetplan.sizing.pods import POD_PROOF_NODES
from fleetplan.sizing.post_solve_cost import (POD_POST_SOLVE_RESERVE, POST_SOLVE_RESERVE, plain_reserve_s, record as record_post_solve,
                                              record_cut, reserve_basis)
from fleetplan.solvers.base import SolveOptions, SolveResult, above_bound, gap_words
from fleetplan.solvers.recorded import Recorded

__all__ = ["solve", "SolveOutcome", "GAP_NOTE", "NOT_REPRODUCIBLE", "NOT_SIZED_WITH_PODS", "CPSAT_PURPOSE", "PODS_PLAIN_SHARE", "gap_note",
           "not_reproducible_note", "pods_apply", "POST_SOLVE_RESERVE", "POD_POST_SOLVE_RESERVE"]


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


def _no_incumbent_in_time(phase: str, opts: SolveOptions, t0: float, end: float | None, d: ModelData | None = None) -> SolveOutcome:
    """The outcome of a solve whose time limit passed before any incumbent existed."""
    note = f"the time limit passed while {phase}"
    res = SolveResult("time_limit", "noSolution", False, None, None, None, time.monotonic() - t0, opts.solver, "", [note])
    return SolveOutcome(None, res, d, {"tables": time.monotonic() - t0}, 0, time_limited=True)


#: With placement-aware sizing, the share of the solver time the plain sizing (which fixes the
#: failover routing and proves the bound) may take; the pod stage has the rest.
PODS_PLAIN_SHARE = 0.4


def pods_apply(inst: Instance, d: ModelData) -> bool:
    """Whether the sizing counts slices per pod: ``placement.size_with_pods`` and some tier
    may run disaggregated (prefill -> decode KV to keep in the pods)."""
    return bool(inst.placement.size_with_pods) and d.disaggregated


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


def sound_gap_note(s: SolverInfo, asked: SolveOptions) -> str | None:
    """A diagnostic when a plan sized with its pods met the ``--mip-gap`` against the pod
    stage's own bound (``s.pod_stage_gap``, with the failover routing fixed at the plain
    sizing's) but not against the plain sizing's (``s.gap``), the only bound proved for the
    placement-aware problem (it relaxes it: the pod rows only cut fleets off); else None.
    gemini-trillium's plan had met 0.07% against its own bound at 2.51% against the sound one,
    with no word (a newcomer's finding on main a025c48)."""
    if s.gap is None or not math.isfinite(s.gap) or s.gap <= asked.mip_gap + 1e-12:
        return None
    stop = ("" if "time_limit" in (s.termination, s.pod_stage_termination) else
            "; no limit stopped either solve, so neither a larger --time-limit nor a smaller --mip-gap narrows it (a larger --mip-gap "
            "only stops the solves sooner, at dearer plans): the gap may be what packing slices into pods truly costs or a weak bound, and no solve tells which")
    sound = gap_words(s.gap, "the plain sizing's bound")
    return (f"{GAP_NOTE}: the placed fleet is at {sound}, the only bound proved for "
            f"placement-aware sizing, above the --mip-gap asked for ({asked.mip_gap:.2%}): it may cost up to {above_bound(s.gap):.2%} "
            f"more than the cheapest placed fleet. The pod stage met its own gap ({s.pod_stage_gap:.2%}) with the failover routing "
            "fixed at the plain sizing's; this gap is larger because the plain sizing's bound ignores the pods (what counting "
            "every slice in a pod and keeping its KV within the DCN ceilings costs lies in it) and the routing was not chosen again "
            f"with the pods, and no solve bounds that part{stop}.")


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
    if staged and proved and gap <= asked.mip_gap + 1e-12:
        return sound_gap_note(s, asked)
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
    reserve = plain_reserve_s(basis)
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
                              None if end is None else end - plain_reserve_s(basis), t3, time_cut)
    if out.cut_after_solve is None:
        return out
    m, res, it, fallback_note = sized.plain
    say("the plan with pods could not be verified in time: extracting and verifying the plain sizing's plan")
    d.pods = None
    res.stage_termination = "time_limit"
    note = (f"NOT SIZED WITH ITS PODS: placement-aware sizing found a plan ({out.result.objective:,.0f} $/h), but the time limit passed "
            f"while {out.cut_after_solve} before the time kept for the plain plan; {PLAIN_PLAN}")
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
            from fleetplan.tables.pods import size_crossing_shapes

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
    sizing found a fleet, the pod stage (:func:`fleetplan.sizing.pod_stage.size_with_pods`) after it. ``opts`` bound every
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
    loop = sizing_loop.size_loop(m, d, plain_opts, ctx, notes, shortfall_end=solver_end)
    res, it, start_note, fallback_note = loop.res, loop.it, loop.start_note, loop.fallback_note
    time_cut = ["the plain sizing's chord refinement"] if loop.time_cut else []
    pod_notes: list[str] = []
    plain = None  # the plain sizing's fleet, when the pod stage's plan replaces it: the plan if that one cannot be verified in time
    if pods_on and res is not None and res.has_incumbent:
        stage = pod_stage.size_with_pods(inst, d, m, res, opts, ctx)
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
