"""A Pyomo model written to HiGHS's arrays once and solved many times, block by block,
under other column bounds: the pod stage's placed start and its proof
(:mod:`fleetplan.sizing`, docs/architecture.md).

:func:`fleetplan.solvers.highs.solve_highs` exports its model at every call, so a
driver that fixes variables for one solve and unfixes them for the next pays an export
each time (the generated 10-region pod model: 1.6 s of CPU per write, through MPS then). Here the model is
written once (:func:`fleetplan.solvers.persistent.read_model`, as the purchase
decomposition's :class:`~fleetplan.solvers.persistent.PersistentHighs` is), with the
variables a stage fixes left free; each stage's fixings are
column bounds on a copy of the arrays (a variable fixed at v: both bounds v), and every
solve goes through :func:`fleetplan.solvers.components.solve_blocks` (one HiGHS MIP per
independent block, one thread each: the result does not depend on the order the blocks
run in nor on the machine's load). Nothing here reads the clock but the deadline, the
caller's guard.
"""

from __future__ import annotations

import numpy as np
import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.solvers.components import BlockSolve, solve_blocks
from fleetplan.solvers.persistent import read_model

__all__ = ["BlockModel"]


class BlockModel:
    """``m`` (one active objective, minimised) as HiGHS arrays.

    Attributes: ``lp`` (``highspy.HighsLp``, n columns), ``pvars`` (the Pyomo variable of
    each column, None for a column Pyomo added), ``lo``/``up`` (shape (n,), the written
    bounds), ``integer`` (shape (n,), bool). Variables fixed when it was written are
    constants in it (no column). Raises RuntimeError when HiGHS refuses the model's
    arrays (:func:`fleetplan.solvers.highs.model_arrays`)."""

    def __init__(self, m: pyo.ConcreteModel):
        h, smap = read_model(m)
        self.m = m
        self._smap = smap
        self._rows: dict[int, list[tuple[int, str]]] | None = None
        self.lp = h.getLp()
        self.n = self.lp.num_col_
        self.pvars = [smap.bySymbol.get(name) for name in self.lp.col_names_]
        self.pvars = [v if (v is not None and v.ctype is pyo.Var) else None for v in self.pvars]
        self._col = {id(v): j for j, v in enumerate(self.pvars) if v is not None}
        self.lo = np.array(self.lp.col_lower_, dtype=float)
        self.up = np.array(self.lp.col_upper_, dtype=float)
        integ = np.array([int(v) for v in self.lp.integrality_], dtype=int) if len(self.lp.integrality_) else np.zeros(self.n, dtype=int)
        self.integer = integ != 0

    def col(self, v) -> int | None:
        """The column of Pyomo variable ``v`` (None: fixed when written, or in no row)."""
        return self._col.get(id(v))

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the written column bounds, to change for one solve."""
        return self.lo.copy(), self.up.copy()

    def bounds_now(self) -> tuple[np.ndarray, np.ndarray]:
        """The written column bounds with every column whose Pyomo variable was fixed since
        the model was written held at its value (lower = upper = the value): the model's
        state now, as column bounds, without writing it again."""
        lo, up = self.bounds()
        for j, pv in enumerate(self.pvars):
            if pv is not None and pv.fixed and pv.value is not None:
                lo[j] = up[j] = float(pv.value)
        return lo, up

    def costs(self, expr) -> np.ndarray:
        """Column costs (shape (n,)) of the linear Pyomo expression ``expr`` over the written
        columns -- another objective for the same arrays (:meth:`solve`'s ``cost``); its
        fixed variables and constant drop out. Raises ValueError for a variable of ``expr``
        that is no column (it was fixed when the model was written, and is not now)."""
        from pyomo.repn.standard_repn import generate_standard_repn

        repn = generate_standard_repn(expr, compute_values=True)
        c = np.zeros(self.n)
        for v, a in zip(repn.linear_vars, repn.linear_coefs):
            j = self.col(v)
            if j is None:
                raise ValueError(f"{v.name} is not a column of the written model")
            c[j] += float(a)
        return c

    def set_row_upper(self, con, value: float) -> None:
        """Set the upper bound of the written row(s) of Pyomo constraint ``con`` (a ``<=``
        row: body <= ``value``, the body's constant taken off as the writer does), for
        every later :meth:`solve`."""
        from pyomo.repn.standard_repn import generate_standard_repn

        if self._rows is None:
            self._rows = {}
            for i, name in enumerate(self.lp.row_names_):
                c = self._smap.bySymbol.get(name[4:-1]) if name.endswith("_") else None
                if c is not None:
                    self._rows.setdefault(id(c), []).append((i, name[:4]))
        from pyomo.core.expr.visitor import identify_variables

        # the constant the writer took off: of the variables fixed when it wrote (a column fixed since is a column)
        since = [v for v in identify_variables(con.body, include_fixed=True) if v.fixed and self.col(v) is not None]
        for v in since:
            v.unfix()
        try:
            const = float(generate_standard_repn(con.body, compute_values=True).constant)
        finally:
            for v in since:
                v.fix()
        up = np.asarray(self.lp.row_upper_, dtype=float).copy()
        for i, pre in self._rows.get(id(con), []):
            if pre in ("c_u_", "r_u_"):
                up[i] = float(value) - const
        self.lp.row_upper_ = up

    def solve(self, lo: np.ndarray, up: np.ndarray, mip_gap: float, deadline: float | None, threads: int = 1, seed: int = 0,
              start=None, relax: bool = False, max_nodes: int | None = None, skip: set[int] | None = None,
              stop_above: dict[int, float] | None = None, cost: np.ndarray | None = None, drop_fixed: bool = False) -> BlockSolve:
        """Solve the model under column bounds ``lo``/``up`` (shape (n,)), block by block
        (:func:`fleetplan.solvers.components.solve_blocks`; a model that does not split is
        one block), each to ``mip_gap`` (relative) or ``max_nodes`` branch-and-bound nodes
        (None: no limit) from ``start`` (n values, a point feasible for these bounds; a block
        with a None or NaN value gets no start; None: none); ``relax``: the LP relaxation;
        ``skip``: columns whose blocks are not solved (failed, 'skipped'); ``stop_above``: column -> a
        value its block's MIP stops above (:func:`~fleetplan.solvers.components.solve_blocks`); ``cost``: column
        costs (shape (n,)) to minimise instead of the written objective's (:meth:`costs`); ``drop_fixed``: the
        columns with lower = upper taken out of the model HiGHS sees, as constants (their activity moved into
        the row bounds and the objective's offset) -- what the model written with those variables fixed is, so
        that a state held as column bounds solves as the same MIP, column for column (``skip`` and
        ``stop_above`` name the kept columns; a block's fixed columns are at their values, also in a failed block). ``deadline``: a
        :func:`time.monotonic` timestamp (None: none), the caller's guard. Returns the
        :class:`~fleetplan.solvers.components.BlockSolve` (values shape (n,), integers
        rounded; None for a block without a solution)."""
        import highspy

        if drop_fixed:
            return self._solve_free(lo, up, mip_gap, deadline, threads, seed, start, relax, max_nodes, cost, skip, stop_above)
        src = self.lp
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = src.num_col_, src.num_row_
        lp.col_cost_, lp.offset_ = (src.col_cost_, src.offset_) if cost is None else (np.asarray(cost, dtype=float), 0.0)
        lp.col_lower_, lp.col_upper_ = lo, up
        lp.row_lower_, lp.row_upper_ = src.row_lower_, src.row_upper_
        lp.a_matrix_.format_ = src.a_matrix_.format_
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = src.a_matrix_.start_, src.a_matrix_.index_, src.a_matrix_.value_
        if not relax and self.integer.any():
            lp.integrality_ = src.integrality_
        start = None if start is None else [None if (v is None or v != v) else float(v) for v in start]  # a block with a None: no start
        return solve_blocks(lp, start, deadline, mip_gap, threads, seed, single=True, max_nodes=max_nodes, skip=skip,
                            stop_above=stop_above)

    def _solve_free(self, lo, up, mip_gap, deadline, threads, seed, start, relax, max_nodes, cost, skip, stop_above) -> BlockSolve:
        """:meth:`solve` with the fixed columns (lower = upper) as constants: the model on the
        other columns, its rows' bounds less the fixed columns' activity, the fixed columns'
        cost in its offset; the result in the n columns (a fixed column at its value)."""
        import highspy
        import scipy.sparse as sp

        src = self.lp
        lo, up = np.asarray(lo, dtype=float), np.asarray(up, dtype=float)
        c = np.asarray(src.col_cost_, dtype=float) if cost is None else np.asarray(cost, dtype=float)
        offset = float(src.offset_) if cost is None else 0.0
        a = sp.csc_matrix((np.asarray(src.a_matrix_.value_, dtype=float), np.asarray(src.a_matrix_.index_),
                           np.asarray(src.a_matrix_.start_)), shape=(src.num_row_, self.n))
        fixed = lo == up
        keep, fx = np.flatnonzero(~fixed), np.flatnonzero(fixed)
        shift = a[:, fx] @ lo[fx] if fx.size else np.zeros(src.num_row_)
        sub = a[:, keep].tocsc()
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = len(keep), src.num_row_
        lp.col_cost_, lp.offset_ = c[keep], offset + float(c[fx] @ lo[fx])
        lp.col_lower_, lp.col_upper_ = lo[keep], up[keep]
        lp.row_lower_ = np.asarray(src.row_lower_, dtype=float) - shift
        lp.row_upper_ = np.asarray(src.row_upper_, dtype=float) - shift
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = sub.indptr, sub.indices, sub.data
        lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = len(keep), src.num_row_
        if not relax and self.integer[keep].any():
            types = list(src.integrality_)  # once: each read of the attribute copies the whole list
            lp.integrality_ = [types[j] for j in keep]
        if start is not None:
            start = [None if (start[j] is None or start[j] != start[j]) else float(start[j]) for j in keep]
        new = {int(j): i for i, j in enumerate(keep)}
        if skip:
            skip = {new[j] for j in skip if j in new}
        if stop_above:
            stop_above = {new[j]: v for j, v in stop_above.items() if j in new}
        bs = solve_blocks(lp, start, deadline, mip_gap, threads, seed, single=True, max_nodes=max_nodes, skip=skip, stop_above=stop_above)
        if bs is None:  # every column fixed
            return BlockSolve(lo.tolist(), float(lp.offset_), float(lp.offset_), "optimal", 0, 0.0)
        x: list = lo.tolist()
        if bs.values is not None:
            for i, j in enumerate(keep):
                x[j] = bs.values[i]
        else:
            x = None
        bs.values = x
        bs.parts = [(keep[cols], obj, b, t) for cols, obj, b, t in bs.parts]
        bs.failed = [(keep[cols], t) for cols, t in bs.failed]
        return bs

    def load(self, x) -> None:
        """Set the Pyomo variables to the solution ``x`` (shape (n,); integers rounded; a
        None entry leaves its variable as it is)."""
        for pv, val in zip(self.pvars, x):
            if pv is not None and val is not None:
                pv.set_value(round(val) if (pv.is_integer() or pv.is_binary()) else val, skip_validation=True)

    def objective(self, x: np.ndarray) -> float:
        """The objective at ``x`` (shape (n,)), in the model's units."""
        return float(np.asarray(self.lp.col_cost_, dtype=float) @ np.asarray(x, dtype=float) + self.lp.offset_)
