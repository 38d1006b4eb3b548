"""A Pyomo model kept in HiGHS between solves: written once, then objectives, variable
bounds and the coefficients of chosen rows change in place.

:func:`fleetplan.solvers.highs.solve_highs` exports the model at every call; for a
Gemini-scale sizing block that was ~0.4 s of a ~0.6 s solve (through MPS text then). A
caller that solves the same block many times with another linear objective or other pod bounds (the purchase
decomposition's floors and node fleets, :mod:`fleetplan.purchase.floors`) keeps it here.
The model's structure (variables, constraints, which variables are fixed) must not change
after the write; mutable parameters may, if the rows that read them are passed to
:meth:`PersistentHighs.update_rows`.
"""

from __future__ import annotations

import io
import time

import numpy as np

import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)
from pyomo.repn import generate_standard_repn

from fleetplan.solvers.base import SolveOptions, SolveResult, optimal_or_gap_reached, out_of_time, relative_gap, run_interruptible, solver_seconds
from fleetplan.solvers.highs import WATCHDOG_GRACE_S, _set_start, _status_map, model_arrays

__all__ = ["PersistentHighs", "read_model"]

_ROW_PREFIXES = ("c_l_", "c_u_", "c_e_", "r_l_", "r_u_")
#: HiGHS's default mip_max_nodes (no limit)
_NO_NODE_LIMIT = 2**31 - 1


def read_model(m: pyo.ConcreteModel):
    """``m`` passed once to a new ``highspy.Highs`` (output off) as the arrays HiGHS reads
    from its MPS export (:func:`fleetplan.solvers.highs.model_arrays`). Returns (the Highs,
    the symbol table: column and row names to components). Raises RuntimeError when HiGHS
    refuses the arrays."""
    import highspy
    from pyomo.common.tee import capture_output

    lp, smap = model_arrays(m)
    with capture_output(io.StringIO(), capture_fd=True):  # HiGHS prints a banner on stdout
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    if h.passModel(lp) == highspy.HighsStatus.kError:
        raise RuntimeError("HiGHS could not read the model's arrays; this is a bug, please report it with the instance")
    return h, smap


class PersistentHighs:
    """``m`` (with one active objective, minimised) read into one ``highspy.Highs``.

    Raises RuntimeError when HiGHS refuses the model's arrays."""

    def __init__(self, m: pyo.ConcreteModel):
        import highspy

        self.m = m
        self._hs = highspy
        h, smap = read_model(m)
        self.h = h
        lp = h.getLp()
        self.ncol = lp.num_col_
        self.pvars = [smap.bySymbol.get(n) for n in lp.col_names_]
        self.col = {id(v): j for j, v in enumerate(self.pvars) if v is not None}
        self.rows: dict[int, list[tuple[int, str]]] = {}
        for i, name in enumerate(lp.row_names_):
            pre = name[:4]
            if pre in _ROW_PREFIXES and name.endswith("_"):
                con = smap.bySymbol.get(name[4:-1])
                if con is not None:
                    self.rows.setdefault(id(con), []).append((i, pre))
        self.offset = 0.0
        self.integer = bool(lp.integrality_)

    def set_objective(self, expr) -> None:
        """Minimise ``expr`` (linear in the model's variables; fixed ones count as constants).
        Raises ValueError for a variable the written model has no column for."""
        repn = generate_standard_repn(expr, compute_values=True)
        if repn.nonlinear_expr is not None or repn.quadratic_vars:
            raise ValueError("the objective is not linear")
        cost = np.zeros(self.ncol)
        for v, c in zip(repn.linear_vars, repn.linear_coefs):
            j = self.col.get(id(v))
            if j is None:
                raise ValueError(f"{v.name} is in no constraint of the written model")
            cost[j] += float(c)
        self.offset = float(repn.constant)
        self.h.changeColsCost(self.ncol, np.arange(self.ncol, dtype=np.int32), cost)

    def set_bounds(self, v, lb: float | None, ub: float | None) -> None:
        """Bounds of variable ``v`` (None: unbounded), in HiGHS and on the Pyomo variable."""
        v.setlb(lb)
        v.setub(ub)
        inf = self._hs.kHighsInf
        self.h.changeColBounds(self.col[id(v)], -inf if lb is None else float(lb), inf if ub is None else float(ub))

    def update_rows(self, cons) -> None:
        """Re-read the coefficients and right-hand sides of constraints ``cons`` (after a
        mutable parameter they read changed); their variables must be the written ones."""
        inf = self._hs.kHighsInf
        for con in cons:
            repn = generate_standard_repn(con.body, compute_values=True)
            for i, pre in self.rows[id(con)]:
                for v, c in zip(repn.linear_vars, repn.linear_coefs):
                    self.h.changeCoeff(i, self.col[id(v)], float(c))
                lo = -inf if con.lower is None else float(pyo.value(con.lower)) - float(repn.constant)
                up = inf if con.upper is None else float(pyo.value(con.upper)) - float(repn.constant)
                if pre in ("r_l_",):
                    up = inf
                elif pre in ("r_u_",):
                    lo = -inf
                elif pre == "c_l_":
                    up = inf
                elif pre == "c_u_":
                    lo = -inf
                self.h.changeRowBounds(i, lo, up)

    def column_values(self, value_of) -> list:
        """A value per column of the written model: ``value_of(var)`` for a variable's column,
        1.0 for a column with no variable (the objective's constant)."""
        return [1.0 if (v is None or v.ctype is not pyo.Var) else float(value_of(v)) for v in self.pvars]

    def cancel(self) -> None:
        """Stop a solve in progress (from another thread); harmless when none runs."""
        if hasattr(self.h, "cancelSolve"):
            self.h.cancelSolve()

    def solve(self, options: SolveOptions, max_nodes: int | None = None, start: list | None = None) -> SolveResult:
        """Solve from scratch under ``options`` (MIP gap, time limit, threads, seed,
        deadline); the incumbent, if any, is loaded into the variables (integers rounded).
        ``max_nodes``: HiGHS's ``mip_max_nodes``, a work limit -- a solve that reaches it
        ends 'work_limit' (with or without an incumbent), the same on any machine and under
        any load, where a time limit's cut depends on both. ``start``: a value per column
        (:meth:`column_values`) offered to HiGHS as its first incumbent (HiGHS ignores one
        that breaks a row). Returns a :class:`SolveResult` as :func:`solve_highs` does."""
        hs, h = self._hs, self.h
        t0 = time.monotonic()
        left = solver_seconds(options, t0)
        if left is not None and left <= 0:
            return out_of_time("highs", t0)
        h.clearSolver()
        if start is not None:
            _set_start(h, start)
        h.setOptionValue("threads", max(1, options.threads))
        h.setOptionValue("random_seed", int(options.seed))
        h.setOptionValue("mip_rel_gap", float(options.mip_gap))
        h.setOptionValue("mip_max_nodes", int(max_nodes) if max_nodes is not None else _NO_NODE_LIMIT)
        h.setOptionValue("time_limit", float(max(left, 0.01)) if left is not None else hs.kHighsInf)
        watchdog = None if left is None else time.monotonic() + max(left, 0.01) + WATCHDOG_GRACE_S
        if hasattr(h, "cancelSolve") and hasattr(type(h), "HandleUserInterrupt"):
            h.HandleUserInterrupt = True
            run_interruptible(h.run, h.cancelSolve, deadline=watchdog)
        else:  # pragma: no cover - older highspy
            h.run()
        status = h.getModelStatus()
        info = h.getInfo()
        has = info.primal_solution_status == 2
        term = "work_limit" if status == hs.HighsModelStatus.kSolutionLimit else _status_map(hs).get(status, "unknown")
        obj = bound = None
        if has:
            for pv, val in zip(self.pvars, h.getSolution().col_value):
                if pv is not None and pv.ctype is pyo.Var:
                    pv.set_value(round(val) if (pv.is_integer() or pv.is_binary()) else val, skip_validation=True)
            obj = float(info.objective_function_value) + self.offset
            bound = float(info.mip_dual_bound) + self.offset if self.integer else obj
        elif self.integer and term in ("work_limit", "time_limit") and np.isfinite(info.mip_dual_bound):
            bound = float(info.mip_dual_bound) + self.offset  # a limit without an incumbent: the bound it proved
        if term == "optimal" and has:
            term = optimal_or_gap_reached(obj, bound)
        return SolveResult(term, h.modelStatusToString(status), has, obj, bound, relative_gap(obj, bound), time.monotonic() - t0, "highs")
