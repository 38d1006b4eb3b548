"""The pod stage's placed start and proof on HiGHS's arrays (:mod:`fleetplan.sizing`).

The pod stage's model (the sizing model with the pod and DCN families, its failover
routing fixed) is written once (:class:`fleetplan.solvers.blockmodel.BlockModel`) and
solved region by region (one block per region once the routing is fixed):

1. *Placed start.* The plain sizing's prefill pools (shape, and at least their size) and
   their DCN level fixed, as column bounds; the LP relaxation of each region; then each
   region's MIP with its kits restricted to the LP's kits and their neighbours (every
   (P, D) within :data:`KIT_RADIUS` of a kit the LP uses, and prefill-only kits of up to
   ``KIT_RADIUS + 1`` slices) -- a restriction of the model, so what it finds is a placed
   fleet of the whole model. A region whose restricted fleet is not within the gap asked
   for of its LP bound is solved again with more kits: those and the restricted fleet's, and
   their *rays* (every smaller kit of the same prefill shape, any decode shape, near the
   kit's decode-to-prefill chip ratio: a pod shared by several tiers holds a scaled-down
   kit of each, where the LP fills whole pods with one tier's); one with none there is left to the
   overage start (:func:`fleetplan.sizing.pod_stage._pod_start`: every kit, its overage free, so a
   placement within the ceilings outside the restriction is found with zero overage).
   On the bundled and generated instances the restricted region MIPs took a third to a
   quarter of the unrestricted ones' time and found fleets as cheap or cheaper (trials when
   the stage was written, 2026-12-07, commit 67fd251; not kept in a benchmark -- the
   10-region figures below are).
2. *Proof.* The whole pod model (prefill pools free again), each region from its start to
   the MIP gap asked for. No wall-clock budget decides when it stops: only the gap, and
   the --time-limit guard (whose hit the plan reports).
3. *Overage start* (:func:`overage_start`), for the regions with no placed fleet among the
   restricted kits: the model written once more, their overage free and its per-region
   cap row in, the other regions held at their placed start (column bounds); the least KV
   over the ceilings (the overage's requests/s as the objective), then the cost with each
   region's overage capped at its least (the cap row's bound) -- with every kit, the prefill
   pools at the plain solution's as in step 1.
4. *The overage-capped solve* (:func:`solve_capped`), instead of the proof where some
   region has no placement within its DCN ceilings and its overage is capped at the least
   its overage start found: on the overage start's arrays (its held columns free again,
   the prefill pools free), each region's kits
   restricted to its LP relaxation's and its start's neighbourhood, its bound the larger
   of the regions' every-kit LP bounds and the plain sizing's.

Both solves are deterministic (one HiGHS thread per region, the regions independent): the
plan does not depend on the machine's speed or load unless the guard stops a solve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fleetplan.tables.derived import ModelData
from fleetplan.models.sizing.build import shortfall_vars
from fleetplan.models.sizing.constraints.prefill import chord_slack_usd, violated_pools
from fleetplan.solvers.base import SolveOptions, SolveResult, optimal_or_gap_reached, relative_gap
from fleetplan.solvers.blockmodel import BlockModel
from fleetplan.solvers.components import BlockSolve, worst_failure

__all__ = ["KIT_RADIUS", "START_GAP", "POD_PROOF_GAP_SHARE", "POD_PROOF_NODES", "OVER_GAP", "PlacedStart", "level_at", "placed_start",
           "prove", "within_gap", "fix_start", "start_result", "cap_overage", "overage_start", "prove_from_start", "solve_capped"]

#: The restricted start MIPs' relative gap (a restriction's MIP is small: proving it tight is cheap, and a
#: tighter start is a cheaper plan where no proof follows -- gemini-ironwood-mooncake: 63,750 $/h at 0.1%,
#: 63,910 at 1%).
START_GAP = 1e-3
#: The proof: each region to this share of the gap asked for, at most POD_PROOF_NODES branch-and-bound nodes
#: (gemini-trillium, whose DCN ceilings keep its plan 5% above the plain sizing's bound so that a proof always
#: runs: 92,293 $/h proved to 1%, 91,999 to 0.25% for 1.5 s more -- a trial when the share was chosen,
#: 2026-12-07, commit 67fd251, not kept in a benchmark; the generated instances' regions spend their proof at
#: the root).
POD_PROOF_GAP_SHARE = 0.25
POD_PROOF_NODES = 1000
#: The overage start's first stage (the least KV over the DCN ceilings) is solved to this relative gap
#: at most (the cap that follows is that least, so it is solved nearly exactly).
OVER_GAP = 1e-4
#: The right-hand side the per-region overage cap rows are written with before the overage start sets them:
#: HiGHS reads a bound of 1e20 or more as none (its ``infinite_bound``), and so does the MIP feasibility
#: tolerance (:func:`fleetplan.solvers.components.mip_feasibility_tolerance`).
OPEN_CAP = 1e20
#: The placed start's kits: those the LP relaxation uses and every kit of the same shapes
#: within this many prefill and decode slices of one (a judgement from trials when the stage was
#: written, 2026-12-07, not kept in a benchmark: radius 1 found fleets as cheap as radius 2 and 3
#: in less time on the brief's instance).
KIT_RADIUS = 1


def level_at(levels: list[int], n: int) -> int:
    """The largest level at most ``n`` (the first when none is)."""
    return max((x for x in levels if x <= n), default=levels[0])


@dataclass
class PlacedStart:
    """The placed start: ``blocks`` (the model's arrays), ``x`` (shape (n,), its values; None
    entries for the columns of regions without a start), ``lp`` (the LP relaxation's
    BlockSolve), ``solve`` (the restricted MIPs' and, where they found none, the unrestricted
    ones' BlockSolve, merged: its ``failed`` lists the regions' blocks with no start)."""

    blocks: BlockModel
    x: list | None
    lp: BlockSolve
    solve: BlockSolve


def start_bounds(bm: BlockModel, m, mb, d: ModelData) -> tuple[np.ndarray, np.ndarray]:
    """Column bounds of the placed start: every prefill pool at the plain solution's shape
    (``m``'s ``v_select``) and at least its size, and the DCN level its size reaches."""
    lo, up = bm.bounds()
    for k in mb.v_slices:
        if k[2] != "prefill":
            continue
        val, sel = m.v_slices[k].value, m.v_select[k].value
        j = bm.col(mb.v_select[k])
        if sel is not None and j is not None:
            lo[j] = up[j] = round(sel)
        j = bm.col(mb.v_slices[k])
        if val is not None and round(val) > 0 and j is not None:  # at least the plain pool (it may grow: warm prefill counts as crossing)
            lo[j] = max(lo[j], round(val))
    for (r, t, i) in getattr(mb, "DCN_NLEVELS", []):
        td = d.pods.tiers[(r, t)]
        n = sum(round(m.v_slices[r, t, "prefill", c].value or 0) for c in d.CONFIGS if (r, t, "prefill", c) in m.v_slices)
        j = bm.col(mb.v_dcn_reach[r, t, i])
        if j is not None:
            lo[j] = up[j] = 1 if td.n_levels[i] <= level_at(td.n_levels, n) else 0
    return lo, up


def restrict_kits(bm: BlockModel, mb, d: ModelData, x_lp, lo: np.ndarray, up: np.ndarray, rays: bool = False) -> np.ndarray:
    """``up`` with every kit outside the LP's neighbourhood (module docstring) at 0, and the
    kit layers' arcs of block sizes no kit left has; returns the new upper bounds. ``rays``:
    also every smaller kit of an LP kit's prefill shape, with any decode shape, whose decode
    chips are within one decode slice of the LP kit's decode-to-prefill chip ratio (a pod
    shared by several tiers holds a scaled-down kit of each: the LP fills whole pods with
    one tier's kit, the MIP mixes them)."""
    up = up.copy()
    by_layer: dict[tuple, dict] = {}
    chips_of: dict[tuple, dict] = {}
    for (gi, li, ki) in mb.POD_KITS:
        kt = mb.kit_of(gi, li, ki)
        by_layer.setdefault((gi, li), {})[(kt.prefill, kt.decode, kt.P, kt.D)] = ki
        chips_of.setdefault((gi, li), {})[(kt.prefill, kt.decode, kt.P, kt.D)] = kt.chips
    keep: set[tuple] = set()
    for (gi, li), kits in by_layer.items():
        for (cp, cd, P, D), ki in kits.items():
            j = bm.col(mb.v_pod_kits[gi, li, ki])
            if j is None or x_lp[j] is None or x_lp[j] <= 1e-6:
                continue
            if rays and D > 0 and P > 0:
                ch = chips_of[(gi, li)]
                cpc = next((c / p for (a, b, p, q), c in ch.items() if a == cp and b is None and q == 0 and p > 0), None)
                if cpc is not None:
                    ratio = (ch[(cp, cd, P, D)] - P * cpc) / P  # decode chips per prefill slice
                    for (a, b, p2, q2), k2 in kits.items():
                        if a == cp and b is not None and q2 > 0 and p2 <= P + KIT_RADIUS:
                            cdc = (ch[(a, b, p2, q2)] - p2 * cpc) / q2
                            if abs(q2 * cdc - p2 * ratio) <= cdc + 1e-9:
                                keep.add((gi, li, k2))
            for dp in range(-KIT_RADIUS, KIT_RADIUS + 1):
                for dd in range(-KIT_RADIUS, KIT_RADIUS + 1):
                    if (cp, cd, P + dp, D + dd) in kits:
                        keep.add((gi, li, kits[(cp, cd, P + dp, D + dd)]))
            for p in range(1, KIT_RADIUS + 2):  # a few prefill slices alone (their KV crosses), for what the kits above leave
                if (cp, None, p, 0) in kits:
                    keep.add((gi, li, kits[(cp, None, p, 0)]))
    sizes: dict[tuple, set[int]] = {}
    for (gi, li, ki) in mb.POD_KITS:
        j = bm.col(mb.v_pod_kits[gi, li, ki])
        if j is None:
            continue
        if (gi, li, ki) in keep:
            sizes.setdefault((gi, li), set()).add(mb.kit_of(gi, li, ki).chips)
        else:
            up[j] = min(up[j], max(lo[j], 0.0))
    groups = d.pods.groups
    for (gi, li, u, b), v in mb.v_pod_flow.items():
        j = bm.col(v)
        if j is not None and b > 0 and groups[gi].layers[li].kind == "kit" and b not in sizes.get((gi, li), set()):
            up[j] = min(up[j], max(lo[j], 0.0))
    return up


def placed_start(m, mb, d: ModelData, opts: SolveOptions, deadline: float | None) -> PlacedStart:
    """The placed start of the pod model ``mb`` (module docstring) from the plain solution in
    ``m``: ``mb`` is written once here, in the state its proof solves (routing, overage and
    shortfall fixed). Its values are not loaded into ``mb`` (:meth:`BlockModel.load`).

    Per region: the LP relaxation (its bound L); the MIP with its kits restricted, to
    :data:`START_GAP`; where that found a fleet above (1 + ``opts.mip_gap``) L -- the
    restriction cost more than the gap asked for -- the MIP with the wider kits of
    :func:`restrict_kits` ``rays`` (around the LP's and the restricted fleet's kits), to
    ``opts.mip_gap``, from the restricted fleet. A restricted MIP whose dual bound passes
    (1 + ``opts.mip_gap``) L after its root, with a fleet in hand, stops there (its fleet
    can only be that dear or dearer: the wider MIP follows whatever it finds); one
    within the gap never sees its bound pass that value, so it runs as without the rule
    (the bundled instances' placed starts: the same bytes; none of them reaches the wider
    MIP). Each region's start is within ``opts.mip_gap`` of the best placed fleet at the
    plain pools among those kits -- a heuristic start: the plan's gap is the plain sizing's
    bound's. On the generated 10-region instance the wider kits gave the six regions that
    need them the every-kit MIPs' fleets or cheaper ones (8,480 against 8,496 and 9,296
    against 9,328 $/h, the other four the same) in 6.1 s of CPU against 9.1-10.3 s (2026-12-08,
    branch pods). A region with no fleet among the restricted kits is one of the result's
    failed blocks (its termination the restricted MIP's: 'infeasible' there is not a proof
    for every kit; the caller's overage start solves it with every kit)."""
    bm = BlockModel(mb)
    lo, up = start_bounds(bm, m, mb, d)
    lp = bm.solve(lo, up, 0.0, deadline, opts.threads, opts.seed, relax=True)
    lp_bound = {int(cols[0]): b for cols, _, b, _ in lp.parts}  # a block by its first column
    x = [None] * bm.n
    redo: set[int] = set()  # columns of the regions solved again with the wider kits
    restricted = None
    if lp.parts:
        up_r = restrict_kits(bm, mb, d, lp.values, lo, up)
        # a restricted MIP whose dual bound passes (1 + gap) L is solved again with the wider kits whatever it finds: its
        # search stops there (past its root, with a fleet: the wider MIP's start), not at START_GAP
        doomed = {j: (1 + opts.mip_gap) * b + 1e-8 * abs(b) for j, b in lp_bound.items() if b is not None}
        restricted = bm.solve(lo, up_r, min(START_GAP, opts.mip_gap), deadline, opts.threads, opts.seed, stop_above=doomed)
        for cols, obj, _, _ in restricted.parts:
            b = lp_bound.get(int(cols[0]))
            for j in cols:
                x[j] = restricted.values[j]
            if b is None or obj > (1 + opts.mip_gap) * b + 1e-9 * abs(obj):
                redo.update(int(j) for j in cols)
        # a region with no fleet among the restricted kits keeps that failure: the overage start (every kit, its
        # overage free: fleetplan.sizing.pod_stage._pod_start) finds its least overage, zero where a placement within the
        # ceilings lies outside the restriction -- proving it infeasible with every kit first cost the generated
        # 10-region instance 7 s of CPU for its 4 regions whose long-tier prefill slice fills a pod
        kept = list(restricted.failed)
    else:
        redo, kept = set(range(bm.n)), []
    if not redo:
        return PlacedStart(bm, x, lp, restricted)
    # those regions with the wider kits; the others fixed at their restricted fleets (their HiGHS runs are then trivial),
    # the regions the restriction left without one not solved again
    # the kits of the LP and of the restricted fleet, their neighbours and their rays (restrict_kits): every kit cost the
    # generated 10-region instance 9.1-10.3 s of CPU for these six regions' MIPs, the rays 6.1 s, for fleets as cheap
    # (four the same, two 16 and 32 $/h cheaper: the every-kit MIPs stop at the gap from the same start)
    lo2 = lo.copy()
    up2 = (restrict_kits(bm, mb, d, [max(a or 0.0, b or 0.0) for a, b in zip(lp.values, x)], lo, up, rays=True)
           if restricted is not None and lp.values is not None else up.copy())
    for j in range(bm.n):
        if j not in redo and x[j] is not None:
            lo2[j] = up2[j] = x[j]
    skip = {int(j) for cols, _ in kept for j in cols}
    full = bm.solve(lo2, up2, opts.mip_gap, deadline, opts.threads, opts.seed, start=x, skip=skip)
    if full.values is not None:
        for j in redo:
            x[j] = full.values[j]
    parts = [(cols, obj, b, t) for cols, obj, b, t in full.parts]
    failed = [(cols, t) for cols, t in full.failed if any(int(j) in redo for j in cols)] + kept
    seconds = lp.seconds + (restricted.seconds if restricted is not None else 0.0) + full.seconds
    term = "optimal" if not failed and full.termination == "optimal" else (failed and worst_failure(failed)) or full.termination
    why = None if not failed else f"{len(failed)} of {full.blocks} blocks found no solution (" + ", ".join(sorted({t for _, t in failed})) + ")"
    return PlacedStart(bm, x, lp, BlockSolve(x, None, None, term, full.blocks, seconds, why, failed, parts))


def within_gap(objective: float, bound: float | None, mip_gap: float) -> float | None:
    """The relative gap of ``objective`` (a placed fleet's cost) above ``bound`` (the plain
    sizing's bound: a bound of the placement-aware problem too, which only adds rows) when it
    is at most ``mip_gap`` -- the fleet is then within the gap asked for of the best plan,
    and no proof is needed -- else None (also without a finite bound)."""
    if bound is None or not math.isfinite(bound):
        return None
    gap = max(0.0, (objective - bound) / max(abs(objective), 1e-9))
    return gap if gap <= mip_gap + 1e-12 else None


def prove(start: PlacedStart, opts: SolveOptions, deadline: float | None) -> BlockSolve:
    """The pod model solved region by region from the placed start (every value of
    ``start.x`` set), the prefill pools free again (the written bounds): each region to
    :data:`POD_PROOF_GAP_SHARE` x ``opts.mip_gap`` against its own bound or
    :data:`POD_PROOF_NODES` branch-and-bound nodes, whichever comes first -- work, not
    time, so the plan is the same on any machine. Asked for a proof (``opts.mip_gap`` 0),
    no node limit: only the caller's guard ``deadline`` stops it."""
    bm = start.blocks
    lo, up = bm.bounds()
    return bm.solve(lo, up, POD_PROOF_GAP_SHARE * opts.mip_gap, deadline, opts.threads, opts.seed, start=start.x,
                    max_nodes=POD_PROOF_NODES if opts.mip_gap > 0 else None)


def fix_start(m, mb, d: ModelData) -> tuple[list, list]:
    """The placed start's fixings on the Pyomo model ``mb`` (as :func:`start_bounds` sets them
    as column bounds, for a solve of ``mb`` itself: CP-SAT, the overage start): every prefill pool's shape fixed at the plain solution's, its
    size at least the plain pool's, its DCN level the one that size reaches. Returns the
    variables fixed and the (variable, old lower bound) raised, to undo."""
    fixed, raised = [], []
    for k in mb.v_slices:
        if k[2] == "prefill":
            val, sel = m.v_slices[k].value, m.v_select[k].value
            if sel is not None and not mb.v_select[k].fixed:
                mb.v_select[k].fix(round(sel))
                fixed.append(mb.v_select[k])
            if val is not None and round(val) > 0:  # at least the plain pool (it may grow: warm prefill slices count as crossing)
                raised.append((mb.v_slices[k], mb.v_slices[k].lb))
                mb.v_slices[k].setlb(round(val))
    for (r, t, i) in getattr(mb, "DCN_NLEVELS", []):  # the plain pool's level reached: each kit's excess is then a known number
        n = d.pods.tiers[(r, t)].n_levels[i]
        v = mb.v_dcn_reach[r, t, i]
        if v.fixed:
            continue
        v.fix(1 if n <= level_at(d.pods.tiers[(r, t)].n_levels, sum(round(m.v_slices[r, t, "prefill", c].value or 0)
                                                                         for c in d.CONFIGS if (r, t, "prefill", c) in m.v_slices)) else 0)
        fixed.append(v)
    return fixed, raised


def start_result(start: PlacedStart, run) -> SolveResult:
    """The placed start as the :class:`SolveResult` of a separable solve: its values loaded into
    the pod model (the regions that have one), the regions without one as failed blocks (their
    variables) with how each ended; a region cut by the time limit is recorded on ``run``."""
    bs, bm = start.solve, start.blocks
    if bs.values is not None:
        bm.load(bs.values)
    if bs.termination == "time_limit" or any(t == "time_limit" for _, t in bs.failed):
        run.stopped = True
    blocks = [[bm.pvars[j] for j in cols if bm.pvars[j] is not None] for cols, _ in bs.failed]
    has = bs.values is not None and not bs.failed
    obj = bm.objective(bs.values) if has else None
    notes = [f"placed start: {bs.blocks} regions solved one by one, kits restricted to the LP relaxation's neighbourhood"]
    return SolveResult(bs.termination if has else (worst_failure(bs.failed) or bs.termination), bs.termination, has, obj, None, None, bs.seconds,
                       "highs", "", notes, failed_blocks=blocks, failed_terminations=[t for _, t in bs.failed])


def cap_overage(mb, d: ModelData) -> None:
    """After the least DCN overage of ``mb`` is loaded in its variables: a region x tier with
    no overage stays within its ceiling (its overage and overage level fixed at 0), as does a
    region's overall overage at 0, and each region's overage is capped at its least
    (``p_dcn_over_cap``, ``c_dcn_over_cap`` activated; per region, so the regions stay
    independent blocks) -- the lexicographic second stage's rows
    (:func:`fleetplan.sizing.pod_stage._lexicographic_over`, :func:`overage_start`)."""
    import pyomo.core as pyo

    # a region x tier with no overage in the least-overage fleet stays within its ceiling: the cost stage may not move its
    # region's overage onto it, nor size its TTFT for every request crossing (its overage level) -- both looked cheaper
    # to the cost stage, and declared overages where a placement within the ceiling exists
    free: dict[tuple, list] = {}
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


def overage_start(m, mb, d: ModelData, failed_vars: list, mine: list, opts: SolveOptions, run,
                  deadline: float | None) -> tuple[BlockModel, bool]:
    """The overage start on HiGHS's arrays (module docstring, step 3) for the regions whose
    placed start found no fleet among the restricted kits (``failed_vars``: their blocks'
    variables, :attr:`SolveResult.failed_blocks`): their overage variables ``mine`` (fixed at
    0 when called) free, ``c_dcn_over_cap`` in (written open, :data:`OPEN_CAP`), ``mb``
    written once (:class:`BlockModel`); every other column held at its value (the placed
    start loaded in ``mb``) and the prefill pools at the plain solution's (``m``,
    :func:`start_bounds`). Then, as :func:`fleetplan.sizing.pod_stage._lexicographic_over`
    does through the backend: the least ``e_dcn_over_rps`` (to :data:`OVER_GAP`),
    :func:`cap_overage`, the cost to ``opts.mip_gap`` from it -- the same two stages, on
    arrays written once where the backend wrote the model for each (the generated
    10-region instance: two writes of 1.1-1.4 s of CPU, and a third for the capped solve,
    which reuses these arrays). Values loaded into ``mb``; ``run.stopped`` set when the
    guard ``deadline`` cut a block. Returns (the arrays, in ``mb``'s state now: overage
    free, cap active -- :func:`solve_capped` solves them; whether every region has a
    start). Where it has none, ``mb``'s overage stays free and its cap active (the caller
    undoes both)."""
    for v in mine:
        v.unfix()
    for r in d.REGIONS:
        mb.p_dcn_over_cap[r] = OPEN_CAP
    mb.c_dcn_over_cap.activate()
    bm = BlockModel(mb)
    lo, up = start_bounds(bm, m, mb, d)
    free = {id(v) for v in failed_vars} | {id(v) for v in mine}
    for j, pv in enumerate(bm.pvars):  # the regions with a placed start held there
        if pv is not None and id(pv) not in free and pv.value is not None:
            lo[j] = up[j] = pv.value
    r1 = bm.solve(lo, up, min(opts.mip_gap, OVER_GAP), deadline, opts.threads, opts.seed, cost=bm.costs(mb.e_dcn_over_rps),
                  drop_fixed=True)
    if r1.values is None or r1.failed:
        run.stopped = run.stopped or any(t == "time_limit" for _, t in r1.failed)
        return bm, False
    bm.load(r1.values)
    cap_overage(mb, d)
    for j, pv in enumerate(bm.pvars):  # cap_overage's fixings, as column bounds
        if pv is not None and pv.fixed:
            lo[j] = up[j] = pv.value
    for r in d.REGIONS:
        bm.set_row_upper(mb.c_dcn_over_cap[r], float(mb.p_dcn_over_cap[r].value))
    r2 = bm.solve(lo, up, opts.mip_gap, deadline, opts.threads, opts.seed, start=r1.values, drop_fixed=True)
    if r2.values is None or r2.failed:
        run.stopped = run.stopped or any(t == "time_limit" for _, t in r2.failed)
        return bm, False
    bm.load(r2.values)
    return bm, True



def prove_from_start(mb, d: ModelData, plain: SolveResult, start: PlacedStart, opts: SolveOptions, run, say,
                     solver_end: float | None) -> tuple[SolveResult, int] | None:
    """The pod stage's solve from its placed start (HiGHS, every region with one within the
    ceilings), on the arrays the start wrote. When the start is exact (its prefill pools meet
    the exact queueing curve) and within ``opts.mip_gap`` of the plain sizing's bound -- a
    bound of the placement-aware problem too -- it is the plan: no proof can improve what
    the gap claims. Else every region is solved from it (:func:`prove`). ``plain``: the
    plain sizing's result (its bound); ``run``: the sizing's recorded backend (its
    ``stopped`` set when the guard ``solver_end`` cut the proof); ``say``: progress.
    Returns (the result, the number of solves it counts), or None when the proof found no
    fleet for some region or the chords must move (the caller's sizing loop re-solves,
    from the values loaded into ``mb``)."""
    bm = start.blocks
    obj = bm.objective(start.x)
    exact = not (violated_pools(mb, d) if hasattr(mb, "PREFILL_KEYS") else [])
    joint = within_gap(obj, plain.bound, opts.mip_gap) if exact else None
    if joint is not None:
        say("the placed start is within the gap of the plain sizing's bound: no proof needed")
        r = SolveResult(optimal_or_gap_reached(obj, plain.bound), "start within the gap", True, obj, plain.bound, joint,
                        start.solve.seconds, "highs", "", [f"the placed start is within {joint:.2%} of the plain sizing's bound "
                                                           "(a bound of this problem too): it is the plan, no proof run"])
        return r, 1
    say("proving the placed fleet's gap, region by region")
    bs = prove(start, opts, solver_end)
    obj = _take(bs, bm, run)
    if obj is None:
        return None
    gap = relative_gap(obj, bs.bound) if bs.bound is not None else None
    # the proof stops at a share of the gap asked for, or at its node limit (work: the same on any machine): a region
    # stopped there within the gap asked for has reached it
    term = ("time_limit" if bs.termination == "time_limit" else
            optimal_or_gap_reached(obj, bs.bound) if (gap is not None and (bs.termination == "optimal" or gap <= opts.mip_gap)) else
            bs.termination)
    r = SolveResult(term, bs.termination, True, obj, bs.bound, gap,
                    start.solve.seconds + bs.seconds, "highs", "", [f"solved as {bs.blocks} independent blocks (the rows split once the "
                                                                     "routing is fixed), one HiGHS MIP each"])
    exact = not (violated_pools(mb, d) if hasattr(mb, "PREFILL_KEYS") else [])
    if exact and (not hasattr(mb, "PREFILL_KEYS") or chord_slack_usd(mb, d) <= opts.mip_gap * abs(obj)):
        return r, 2
    return None


def _take(bs: BlockSolve, bm: BlockModel, run) -> float | None:
    """A block solve's fleet loaded into the Pyomo model and its objective, or None when some
    block found none; ``run.stopped`` set when the --time-limit guard cut a block."""
    if bs.termination == "time_limit" or any(t == "time_limit" for _, t in bs.failed):
        run.stopped = True
    if bs.values is None or bs.failed:
        return None
    bm.load(bs.values)
    return bm.objective(bs.values)


def _values(bm: BlockModel) -> list:
    """The Pyomo variables' values as a start of ``bm``'s columns (1 for a column Pyomo added: its constant)."""
    return [(1.0 if pv is None else pv.value) for pv in bm.pvars]


def solve_capped(mb, d: ModelData, plain_bound: float | None, opts: SolveOptions, run, say,
                 solver_end: float | None, arrays: BlockModel | None = None) -> tuple[SolveResult, int] | None:
    """The pod stage's solve when some regions have no placement within the DCN ceilings
    (their overage capped at the least the overage start found, ``c_dcn_over_cap`` active;
    :func:`fleetplan.sizing.pod_stage.size_with_pods`), on HiGHS's arrays from the values in ``mb`` (the
    placed start and, in those regions, the overage start), the prefill pools free, every
    shortfall fixed at zero (the fleet serves everything, as the sizing loop's first stage
    asks).

    ``arrays``: the overage start's :class:`BlockModel` of ``mb`` (:func:`overage_start`:
    the overage free, its cap row in), solved in ``mb``'s state now (:meth:`BlockModel.bounds_now`:
    the variables fixed since held, the other columns at their written bounds, the cap
    rows at ``p_dcn_over_cap``); None: ``mb`` is written once more in that state. Per region: the LP
    relaxation with every kit (its bound L_r, of this routing-fixed problem), then the MIP
    with its kits restricted to those the LP or the start uses and their neighbours
    (:func:`restrict_kits`: a restriction of the model, so its fleet is a placed fleet of
    the whole model), from the start, to ``opts.mip_gap`` or :data:`POD_PROOF_NODES`
    branch-and-bound nodes -- work limits only, the same plan on any machine. Every kit was
    the cost before: the generated 20-region instance spent 130-139 s of CPU at HiGHS's
    root there, for a fleet 0.03% cheaper than the restricted one found in 23 s (10
    regions: the same fleet, 29.5 s against 4.3 s; docs/benchmarks-history.md, the pod
    stage of 2026-12-07).

    The bound returned is the larger of the sum of the L_r and ``plain_bound`` (the plain
    sizing's, a bound of this problem too): the restricted MIPs' own bounds hold for the
    restriction only. ``run``: the sizing's recorded backend (its ``stopped`` set when the
    guard ``solver_end`` cut a solve). Returns (the result, solves counted) with the values
    loaded into ``mb``, or None when some region found no fleet or the chords must move (the
    caller's sizing loop goes on from the values loaded)."""
    for v in shortfall_vars(mb):
        v.fix(0.0)
    mb.c_shortfall_cap.deactivate()
    if arrays is None:
        bm = BlockModel(mb)
        lo, up = bm.bounds()
    else:
        bm = arrays
        lo, up = bm.bounds_now()
        for r in d.REGIONS:
            bm.set_row_upper(mb.c_dcn_over_cap[r], float(mb.p_dcn_over_cap[r].value))
    x0 = _values(bm)
    say("the pod stage's solve with the overage capped, region by region: kits restricted to the LP relaxation's and the start's")
    drop = arrays is not None  # the held columns as constants: the model a fresh write would be
    lp = bm.solve(lo, up, 0.0, solver_end, opts.threads, opts.seed, relax=True, drop_fixed=drop)
    if lp.values is None or lp.failed:
        run.stopped = run.stopped or lp.termination == "time_limit"
        return None
    keep = [max(a or 0.0, b or 0.0) for a, b in zip(lp.values, x0)]  # the LP's kits and the start's
    up_r = restrict_kits(bm, mb, d, keep, lo, up)
    start = x0 if all(v is not None for v in x0) else None
    bs = bm.solve(lo, up_r, opts.mip_gap, solver_end, opts.threads, opts.seed, start=start,
                  max_nodes=POD_PROOF_NODES if opts.mip_gap > 0 else None, drop_fixed=drop)
    obj = _take(bs, bm, run)
    if obj is None:
        return None
    bound = lp.bound if drop else bm.lp.offset_ + sum(b for _, _, b, _ in lp.parts)
    if plain_bound is not None and math.isfinite(plain_bound):
        bound = max(bound, plain_bound)
    gap = relative_gap(obj, bound)
    term = ("time_limit" if bs.termination == "time_limit" else
            optimal_or_gap_reached(obj, bound) if (gap is not None and gap <= opts.mip_gap) else "work_limit")
    r = SolveResult(term, bs.termination, True, obj, bound, gap, lp.seconds + bs.seconds, "highs", "",
                    [f"solved as {bs.blocks} independent blocks (the rows split once the routing is fixed), one HiGHS MIP each, its kits "
                     "restricted to the LP relaxation's and the start's neighbourhood; the pod stage's bound is the larger of the regions' "
                     "LP relaxations with every kit and the plain sizing's bound"])
    exact = not (violated_pools(mb, d) if hasattr(mb, "PREFILL_KEYS") else [])
    if exact and (not hasattr(mb, "PREFILL_KEYS") or chord_slack_usd(mb, d) <= opts.mip_gap * abs(obj)):
        return r, 2
    return None
