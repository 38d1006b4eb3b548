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

import time

import numpy as np

__all__ = ["component_start", "ComponentStart", "SUB_MIP_GAP"]

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


def _highs(threads: int, seed: int):
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", max(1, threads))
    h.setOptionValue("random_seed", int(seed))
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
        hs = _highs(threads, seed)
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
