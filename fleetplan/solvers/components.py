"""A first incumbent for a MIP that separates once a few continuous variables are fixed:
fix them at the LP relaxation's values, split what is left into its connected components
and solve each component's MIP on its own (fix-and-optimise over the components).

The sizing model is such a MIP: its regions couple only through the failover routing
shares (``v_route_bp``, continuous) -- with the routing fixed, a survivor's load in every
region-loss scenario is a constant and each region (its pools, pods and warm pool in
every scenario) is a MIP of its own. Branch and bound on the whole model spends most of
its time finding an incumbent near its root bound (the 10-region generated instance:
the root bound is within 1% of the optimum after 1.4 s, the first incumbent within 1%
comes at 17 s; docs/benchmarks.md); ten region MIPs of ~1,200 columns each take HiGHS
a fraction of that, and their union is feasible for the whole model by construction
(every row is either inside one component or holds only fixed columns, satisfied by the
LP values). HiGHS is offered it as a start (``setSolution``) and proves its gap against
it. The start is only as good as the LP's routing (measured: 0.1-1.2% above the best
bound on the generated instances); the solve that follows may improve it.

Source: the fix-and-optimise / relax-and-fix family of MIP heuristics (Pochet and Wolsey,
*Production Planning by Mixed Integer Programming*, Springer 2006, ch. 3.6), with the
fixed set chosen so that the rest decomposes.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fleetplan.solvers.base import run_interruptible

log = logging.getLogger(__name__)

__all__ = ["component_start", "ComponentStart", "SUB_MIP_GAP", "solve_blocks", "BlockSolve", "BLOCK_MIN_COLUMNS", "worst_failure"]

#: Relative MIP gap each component is solved to: well inside the whole solve's gap, so
#: the start's distance from the bound is the routing's, not the components'.
SUB_MIP_GAP = 1e-3


class ComponentStart:
    """What :func:`component_start` did: ``values`` (one per column of the model, None
    when there is no start), ``components`` (count), ``seconds`` (wall, LP and component
    MIPs), ``objective`` (the start's, in the model's objective units) and ``why`` (the
    reason when there is no start)."""

    def __init__(self, values, components: int, seconds: float, objective: float | None, why: str | None = None):
        self.values, self.components, self.seconds, self.objective, self.why = values, components, seconds, objective, why


#: HiGHS's own MIP feasibility tolerance (absolute; its default).
MIP_FEASIBILITY_TOLERANCE = 1e-6
#: The MIP feasibility tolerance never falls below this fraction of the model's largest finite
#: row or column bound: a row whose activity is near M carries rounding of about one unit in the
#: last place of M (2.2e-16 M) per operation, so past M ~ 1e10 HiGHS's absolute 1e-6 is below
#: what double precision can meet. Example: peak_rps 6e8 in two Gemini regions puts
#: 1.6e11 output tokens/s in the bounds; every incumbent HiGHS found in 90 s was refused for a
#: 6.8e-6 to 3.1e-5 residual (1-2 units in the last place) and the solve ended with none; at
#: 1e-15 M (1.6e-4) the least-shortfall stage solves in 0.3 s. The bundled and generated
#: instances' bounds (at most ~4e6) keep the default. A plan is re-proved by the verifier anyway.
MIP_FEASIBILITY_PER_BOUND = 1e-15


def mip_feasibility_tolerance(lp, floor: float = MIP_FEASIBILITY_TOLERANCE) -> float:
    """The MIP feasibility tolerance for HiGHS's model ``lp`` (a ``highspy`` HighsLp): at least
    ``floor``, and at least MIP_FEASIBILITY_PER_BOUND x its largest finite row or column bound
    (bounds of 1e20 and above are HiGHS's infinity)."""
    big = floor
    for arr in (lp.row_lower_, lp.row_upper_, lp.col_lower_, lp.col_upper_):
        a = np.abs(np.asarray(arr, dtype=float))
        a = a[np.isfinite(a) & (a < 1e20)]
        if a.size:
            big = max(big, MIP_FEASIBILITY_PER_BOUND * float(a.max()))
    return big


def _highs(threads: int, seed: int, lp=None):
    """A quiet HiGHS with ``threads`` and ``seed``; with ``lp`` (the whole model), its MIP
    feasibility tolerance scaled to the model's bounds (:func:`mip_feasibility_tolerance`)."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", max(1, threads))
    h.setOptionValue("random_seed", int(seed))
    tol = MIP_FEASIBILITY_TOLERANCE if lp is None else mip_feasibility_tolerance(lp)
    if tol != MIP_FEASIBILITY_TOLERANCE:
        h.setOptionValue("mip_feasibility_tolerance", tol)
    return h


def component_start(lp, fix: np.ndarray, deadline: float | None, threads: int = 1, seed: int = 0) -> ComponentStart:
    """A start for the MIP ``lp`` (a ``highspy.HighsLp``, as ``Highs.getLp()`` returns it).

    Args:
        lp: the model, n columns and m rows, its integrality included.
        fix: shape (n,), bool: the columns fixed at their LP-relaxation values (continuous
            ones; an integer column here is fixed at its LP value rounded).
        deadline: a :func:`time.monotonic` timestamp by which to give up (None = none).
        threads, seed: HiGHS's, for every solve here.
    Returns: :class:`ComponentStart`; ``values`` is None when the LP or a component has no
        solution in the time (``why`` says which) or the fixed columns leave a single
        component (nothing to split: the start would be the whole MIP).
    """
    import highspy
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    t0 = time.monotonic()

    def left() -> float | None:
        return None if deadline is None else deadline - time.monotonic()

    def limit(h) -> bool:
        s = left()
        if s is not None:
            if s <= 0:
                return False
            h.setOptionValue("time_limit", float(s))
        return True

    n, nrow = lp.num_col_, lp.num_row_
    if n == 0 or not fix.any():
        return ComponentStart(None, 0, 0.0, None, "no column to fix")
    h = _highs(threads, seed)
    h.setOptionValue("solve_relaxation", True)
    if not limit(h):
        return ComponentStart(None, 0, time.monotonic() - t0, None, "no time left for the LP relaxation")
    h.passModel(lp)
    h.run()
    if h.getInfo().primal_solution_status != 2:
        return ComponentStart(None, 0, time.monotonic() - t0, None, f"the LP relaxation ended {h.modelStatusToString(h.getModelStatus())}")
    x = np.array(h.getSolution().col_value, dtype=float)
    integ = np.array([int(v) for v in lp.integrality_], dtype=int) if len(lp.integrality_) else np.zeros(n, dtype=int)
    is_int = integ != 0
    x[fix & is_int] = np.round(x[fix & is_int])
    a = sp.csc_matrix((np.asarray(lp.a_matrix_.value_, dtype=float), np.asarray(lp.a_matrix_.index_), np.asarray(lp.a_matrix_.start_)),
                      shape=(nrow, n))
    free = np.flatnonzero(~fix)
    af = a[:, free]
    # rows and free columns as one graph: a component is a set of columns that share rows
    pattern = (af != 0).astype(np.int8)
    graph = sp.bmat([[None, pattern], [pattern.T, None]], format="csr")
    ncomp, label = connected_components(graph, directed=False)
    row_label, col_label = label[:nrow], label[nrow:]
    comps = sorted({int(c) for c in col_label})
    if len(comps) < 2:
        return ComponentStart(None, len(comps), time.monotonic() - t0, None, "the fixed columns leave one component")
    fixed_activity = a[:, fix] @ x[fix]
    rows_used = np.diff(af.tocsr().indptr) > 0
    cost, lo, up = np.asarray(lp.col_cost_), np.asarray(lp.col_lower_), np.asarray(lp.col_upper_)
    rlo, rup = np.asarray(lp.row_lower_), np.asarray(lp.row_upper_)
    types = [highspy.HighsVarType(int(v)) for v in integ]
    for c in comps:
        cols = free[col_label == c]
        rows = np.flatnonzero((row_label == c) & rows_used)
        sub = a[rows][:, cols].tocsc()
        s = highspy.HighsLp()
        s.num_col_, s.num_row_ = len(cols), len(rows)
        s.col_cost_, s.col_lower_, s.col_upper_ = cost[cols], lo[cols], up[cols]
        s.row_lower_, s.row_upper_ = rlo[rows] - fixed_activity[rows], rup[rows] - fixed_activity[rows]
        s.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        s.a_matrix_.start_, s.a_matrix_.index_, s.a_matrix_.value_ = sub.indptr, sub.indices, sub.data
        if is_int[cols].any():
            s.integrality_ = [types[j] for j in cols]
        hs = _highs(threads, seed, lp)
        hs.setOptionValue("mip_rel_gap", SUB_MIP_GAP)
        if not limit(hs):
            return ComponentStart(None, len(comps), time.monotonic() - t0, None, "the time limit passed during the component MIPs")
        hs.passModel(s)
        hs.run()
        if hs.getInfo().primal_solution_status != 2:
            return ComponentStart(None, len(comps), time.monotonic() - t0, None,
                                  f"a component ({len(cols)} columns) ended {hs.modelStatusToString(hs.getModelStatus())}")
        x[cols] = hs.getSolution().col_value
    x[is_int] = np.round(x[is_int])
    return ComponentStart(x.tolist(), len(comps), time.monotonic() - t0, float(cost @ x + lp.offset_))


#: :func:`solve_blocks` gathers components smaller than this (columns) into shared MIPs, so that
#: a model with many one-column pieces does not pay a HiGHS run per piece.
BLOCK_MIN_COLUMNS = 200


class BlockSolve:
    """What :func:`solve_blocks` found: ``values`` (one per column, None without a
    solution for every block), ``objective`` and ``bound`` (sums over the blocks, the LP's
    offset included; ``bound`` None when some block proved none), ``termination``
    ('optimal', 'time_limit', 'infeasible' or 'unknown': the worst of the blocks'),
    ``blocks`` (count), ``seconds`` (wall), ``why`` (the first block that failed: its size and
    status) and ``failed`` (every such block's columns, 0-based, and its termination). With a
    failed block, ``values`` holds the other blocks' solutions and None for its columns, and
    ``objective`` and ``bound`` are None. ``parts`` gives each block with a solution: its
    columns, objective, bound and termination ('work_limit': stopped at ``max_nodes``)."""

    def __init__(self, values, objective, bound, termination: str, blocks: int, seconds: float, why: str | None = None,
                 failed: list | None = None, parts: list | None = None):
        self.values, self.objective, self.bound, self.termination = values, objective, bound, termination
        self.blocks, self.seconds, self.why = blocks, seconds, why
        #: (its columns, its termination) of every block with no solution; their values are None
        self.failed = failed or []
        #: (its columns, its objective, its bound or None, its termination) of every block with a solution
        self.parts = parts or []


def solve_blocks(lp, start: list[float] | None, deadline: float | None, mip_gap: float, threads: int = 1,
                 seed: int = 0, single: bool = False, max_nodes: int | None = None, skip: set[int] | None = None,
                 stop_above: dict[int, float] | None = None) -> BlockSolve | None:
    """Solve a MIP whose rows split into independent blocks one block at a time.

    A MIP whose constraint matrix is block-diagonal is the sum of its blocks' MIPs: the
    optimum is the union of the blocks' optima and the bound the sum of their bounds, so
    each block solved to a relative gap g leaves the whole within g (for non-negative
    objectives: (sum U - sum L) / sum U <= max (U_i - L_i) / U_i). Branch and bound on
    the whole model branches across blocks that do not interact; per block it does not.
    The sizing model's pod stage (its failover routing fixed) is one block per region.

    Args:
        lp: the model (``highspy.HighsLp``), n columns, m rows, its integrality.
        start: n values offered to every block as its start (a feasible point of the whole,
            e.g. the previous solve's), or None.
        deadline: a :func:`time.monotonic` timestamp (None = none); each block gets a share
            of the time left in proportion to its columns.
        mip_gap: relative gap each block is solved to.
        threads, seed: HiGHS's, for every block.
        single: solve a model whose rows do not split too, as one block.
        max_nodes: a block's branch-and-bound nodes at most (HiGHS's ``mip_max_nodes``: a
            work limit, the same on any machine), None for none.
        skip: columns (0-based) whose blocks are not solved: they are among the failed
            blocks, termination 'skipped' (a caller that knows them to have no solution).
        stop_above: column (0-based) -> a value of its block's objective (the LP's offset
            excluded): the block's MIP stops once past its root (at least one node explored)
            with a solution and a dual bound above it -- a caller that will discard any
            solution costlier than that value wants the incumbent as a start, not the gap
            (:func:`fleetplan.sizing.pods.placed_start`). A block that had reached its gap
            before never sees its bound pass the value (the bound stays below its solution),
            so its search is the one without the rule, node for node; the stop reads node
            counts and bounds only (a work rule, the same on any machine). Its part's
            termination is 'work_limit'.
    Returns: :class:`BlockSolve`, or None when the rows do not split (one block) and not
    ``single``, or the model has no column. A block with
    no solution (infeasible, or out of time) does not stop the others: each is solved, so a
    caller can keep the blocks that have one and treat the others on their own.
    """
    import highspy
    import scipy.sparse as sp

    t0 = time.monotonic()
    n, nrow = lp.num_col_, lp.num_row_
    if n == 0:
        return None
    a = sp.csc_matrix((np.asarray(lp.a_matrix_.value_, dtype=float), np.asarray(lp.a_matrix_.index_), np.asarray(lp.a_matrix_.start_)),
                      shape=(nrow, n))
    split = _blocks_of(a, single)
    if split is None:
        return None
    col_block, row_block, nblocks = split
    rlo, rup = np.asarray(lp.row_lower_, dtype=float), np.asarray(lp.row_upper_, dtype=float)
    empty = ~(np.diff(a.tocsr().indptr) > 0)
    # a row whose columns are all fixed (their activity in its bounds) is met within HiGHS's own MIP feasibility tolerance:
    # held values are a solver's, with its residuals (6.3e-9 over a held region's TTFT row was seen; 1e-9 had refused it)
    tol = mip_feasibility_tolerance(lp)
    if np.any((rlo[empty] > tol) | (rup[empty] < -tol)):
        return BlockSolve(None, None, None, "infeasible", nblocks, time.monotonic() - t0, "a row without columns excludes 0")
    integ = np.array([int(v) for v in lp.integrality_], dtype=int) if len(lp.integrality_) else np.zeros(n, dtype=int)
    types = [highspy.HighsVarType(int(v)) for v in integ]
    cost, lo, up = np.asarray(lp.col_cost_), np.asarray(lp.col_lower_), np.asarray(lp.col_upper_)
    failed: list = []
    # every block's model first (numpy, holds the GIL), then the solves on a thread per core (HiGHS runs outside
    # the GIL): each block is solved alone with the same options, so the result does not depend on the order
    jobs = []
    for b in sorted(range(nblocks), key=lambda b: -int(np.sum(col_block == b))):
        cols = np.flatnonzero(col_block == b)
        if skip and any(int(j) in skip for j in cols):
            failed.append((cols, "skipped"))
            continue
        is_mip = bool(np.any(integ[cols] != 0))
        h = _block_highs(lp, a, (cost, lo, up, rlo, rup), cols, np.flatnonzero(row_block == b), types if is_mip else None, mip_gap,
                         threads, seed, max_nodes)
        cut = min((stop_above[int(j)] for j in cols if int(j) in stop_above), default=None) if (stop_above and is_mip) else None
        if cut is not None:
            _stop_above(h, cut)
        if start is not None and all(start[j] is not None for j in cols):
            sol = highspy.HighsSolution()
            sol.col_value = [float(start[j]) for j in cols]
            sol.value_valid = True
            h.setSolution(sol)
        jobs.append((cols, is_mip, h))
    _run_blocks(jobs, deadline)
    x, bound, worst, parts = _gather(jobs, cost, float(lp.offset_), failed)
    x[integ != 0] = np.round(x[integ != 0])
    if failed:
        vals: list = x.tolist()
        for cols, _ in failed:
            for j in cols:
                vals[j] = None
        return BlockSolve(vals, None, None, worst_failure(failed), nblocks, time.monotonic() - t0,
                          f"{len(failed)} of {nblocks} blocks found no solution (" + ", ".join(sorted({t for _, t in failed})) + ")", failed,
                          parts)
    return BlockSolve(x.tolist(), float(cost @ x + lp.offset_), bound, worst, nblocks, time.monotonic() - t0, parts=parts)


def _blocks_of(a, single: bool) -> tuple[np.ndarray, np.ndarray, int] | None:
    """The blocks of the constraint matrix ``a`` (m x n, scipy sparse): its connected
    components (rows and columns linked by a nonzero), every component of at least
    BLOCK_MIN_COLUMNS columns alone and the smaller ones gathered into blocks of about that
    many. Returns (each column's block, shape (n,); each row's block, -1 for a row without
    columns, shape (m,); the number of blocks), or None when the matrix is one component
    and not ``single``."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    nrow, n = a.shape
    pattern = (a != 0).astype(np.int8)
    graph = sp.bmat([[None, pattern], [pattern.T, None]], format="csr")
    _, label = connected_components(graph, directed=False)
    row_label, col_label = label[:nrow], label[nrow:]
    sizes: dict[int, int] = {}
    for c in col_label:
        sizes[int(c)] = sizes.get(int(c), 0) + 1
    if len(sizes) < 2 and not single:
        return None
    group: dict[int, int] = {}
    nblocks, acc, open_block = 0, 0, None
    for c in sorted(sizes, key=lambda c: (sizes[c], c)):
        if sizes[c] >= BLOCK_MIN_COLUMNS:
            group[c] = nblocks
            nblocks += 1
            continue
        if open_block is None or acc >= BLOCK_MIN_COLUMNS:
            open_block, acc = nblocks, 0
            nblocks += 1
        group[c] = open_block
        acc += sizes[c]
    col_block = np.array([group[int(c)] for c in col_label], dtype=int)
    rows_used = np.diff(a.tocsr().indptr) > 0
    row_block = np.full(nrow, -1, dtype=int)
    row_block[rows_used] = np.array([group.get(int(c), -1) for c in row_label[rows_used]], dtype=int)
    return col_block, row_block, nblocks


def _block_highs(lp, a, arrays: tuple, cols: np.ndarray, rows: np.ndarray, types: list | None, mip_gap: float, threads: int, seed: int,
                 max_nodes: int | None):
    """A ``highspy.Highs`` holding the block of ``lp`` (matrix ``a``; ``arrays``: its column
    costs, column bounds and row bounds as numpy arrays) on columns ``cols`` and rows ``rows``, a MIP when ``types`` (every column's HiGHS variable type) is given, with
    the relative gap, node limit, threads and seed asked for; stoppable from the main thread."""
    import highspy

    cost, lo, up, rlo, rup = arrays
    sub = a[rows][:, cols].tocsc()
    s = highspy.HighsLp()
    s.num_col_, s.num_row_ = len(cols), len(rows)
    s.col_cost_, s.col_lower_, s.col_upper_ = cost[cols], lo[cols], up[cols]
    s.row_lower_, s.row_upper_ = rlo[rows], rup[rows]
    s.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    s.a_matrix_.start_, s.a_matrix_.index_, s.a_matrix_.value_ = sub.indptr, sub.indices, sub.data
    if types is not None:
        s.integrality_ = [types[j] for j in cols]
    h = _highs(threads, seed, lp)
    h.setOptionValue("mip_rel_gap", float(mip_gap))
    if max_nodes is not None:
        h.setOptionValue("mip_max_nodes", int(max_nodes))
    if hasattr(h, "cancelSolve") and hasattr(type(h), "HandleUserInterrupt"):  # Ctrl-C, SIGTERM and the watchdog stop it
        h.HandleUserInterrupt = True
    h.passModel(s)
    return h


def _run_blocks(jobs: list, deadline: float | None) -> None:
    """Run every job's (columns, is_mip, Highs) on a thread per core, each with a share of
    the time left before ``deadline`` (monotonic s; None: none) in proportion to its
    columns; Ctrl-C, SIGTERM and the watchdog (the deadline + 0.25 s) stop them all."""
    workers = max(1, min(len(jobs), os.cpu_count() or 1))
    total = sum(len(c) for c, _, _ in jobs)
    stopped = threading.Event()
    lock, pending = threading.Lock(), [total]  # columns of the blocks not yet started

    def solve(job) -> None:
        cols, _, h = job
        if stopped.is_set():
            return
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            # a share of what is left by its columns among the blocks not yet started (itself included), as if they ran one
            # after another on each worker: time a block leaves unused goes to the blocks after it
            with lock:
                share = min(1.0, workers * len(cols) / max(pending[0], 1))
                pending[0] -= len(cols)
            h.setOptionValue("time_limit", float(max(0.01, left * share)))
        t = time.monotonic()
        h.run()
        log.debug("block of %d columns: %s in %.2f s, gap %.2e", len(cols), h.modelStatusToString(h.getModelStatus()),
                  time.monotonic() - t, h.getInfo().mip_gap)

    def run_all() -> None:
        if workers <= 1:
            for job in jobs:
                solve(job)
            return
        with ThreadPoolExecutor(workers, thread_name_prefix="fleetplan-blocks") as ex:
            list(ex.map(solve, jobs))

    def stop() -> None:
        stopped.set()
        for _, _, h in jobs:
            if hasattr(h, "cancelSolve"):
                h.cancelSolve()

    run_interruptible(run_all, stop, deadline=None if deadline is None else deadline + 0.25)


def _gather(jobs: list, cost: np.ndarray, offset: float, failed: list):
    """The blocks' solutions put together: (x, shape (n,), zero where a block has none; the
    bound, the offset plus the blocks' -- None once a block has none; the worst termination; the parts (columns, objective, bound,
    termination) of the blocks with a solution). A block without one is appended to
    ``failed`` as (columns, 'infeasible' | 'time_limit' | 'unknown')."""
    import highspy

    S = highspy.HighsModelStatus
    x = np.zeros(len(cost))
    bound, worst = offset, "optimal"
    parts: list = []
    for cols, is_mip, h in jobs:
        info = h.getInfo()
        status = h.getModelStatus()
        if info.primal_solution_status != 2:
            term = ("infeasible" if status in (S.kInfeasible, S.kUnboundedOrInfeasible) else
                    "time_limit" if status in (S.kTimeLimit, S.kInterrupt, S.kNotset) else "unknown")
            failed.append((cols, term))
            continue
        x[cols] = h.getSolution().col_value
        val = float(cost[cols] @ x[cols])
        lb = float(info.mip_dual_bound) if is_mip else val
        bound = bound + lb if (bound is not None and np.isfinite(lb)) else None
        term = ("optimal" if status == S.kOptimal else "work_limit" if getattr(h, "_fleetplan_stopped_above", False) else
                "time_limit" if status in (S.kTimeLimit, S.kInterrupt) else
                "work_limit" if status == S.kSolutionLimit else "unknown")
        worst = max(worst, term, key=_BLOCK_TERMS.index)
        parts.append((cols, val, lb if np.isfinite(lb) else None, term))
    return x, bound, worst, parts


def _stop_above(h, cut: float) -> None:
    """Stop ``h``'s MIP (a ``highspy.Highs``) through its MIP interrupt callback once it has
    explored a node, has a solution, and its dual bound is above ``cut`` (marks
    ``h._fleetplan_stopped_above``). Subscribed before the user-interrupt handler (Ctrl-C,
    :func:`solve_blocks`'s ``HandleUserInterrupt``), which then still stops it."""
    import highspy

    mip = highspy.cb.HighsCallbackType.kCallbackMipInterrupt
    h._fleetplan_stopped_above = False

    def event(e) -> None:
        if e.callback_type != mip:
            return
        out = e.data_out
        if out.mip_node_count >= 1 and math.isfinite(out.mip_primal_bound) and out.mip_dual_bound > cut:
            h._fleetplan_stopped_above = True
            e.interrupt()

    h.cbMipInterrupt += event


def worst_failure(failed: list) -> str | None:
    """The termination that decides what blocks without a solution mean, from ``failed``
    ((columns, termination) pairs, :attr:`BlockSolve.failed`): 'infeasible' (a proof)
    before 'time_limit' before 'unknown'; None when the list is empty."""
    rank = {"infeasible": 0, "time_limit": 1, "unknown": 2}
    return min((t for _, t in failed), key=lambda t: rank.get(t, 3), default=None)


#: A block's terminations, from the best to the worst (BlockSolve.termination is the worst of its blocks')
_BLOCK_TERMS = ["optimal", "work_limit", "unknown", "time_limit"]
