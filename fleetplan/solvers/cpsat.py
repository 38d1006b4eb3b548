"""Solve the same Pyomo model with OR-Tools CP-SAT: the model is written to MPS (the
model is never written twice) and read by ``model_builder``, whose 'sat' backend runs CP-SAT.

CP-SAT solves integer programs only. A glop presolve first removes what continuous
variables it can; every continuous variable that is left is multiplied by
``mip_var_scaling`` and treated as an integer, so it moves on a grid of
1/``CONTINUOUS_SCALING`` (0.1 here: 0.1 req/s, 0.1 tokens/s, 0.1 basis point of a
routing share -- the model keeps shares in basis points and its request balances as
inequalities so the grid costs almost nothing). Every variable has a finite bound from
the data. Fractional coefficients are scaled to integers by CP-SAT itself to
``mip_wanted_precision`` (1e-9). The consequences, documented in docs/formulation.md:
CP-SAT's 'optimal' is optimal on that grid, a rounding above the HiGHS optimum at most,
and its reported bound refers to the gridded problem. CP-SAT runs a portfolio of
``CPSAT_WORKERS`` workers (it is weak with one), so its runs are not bit-reproducible;
re-solves in the chord loop start from the previous solution (a hint). The loaded
solution is re-verified like any other plan.

Ctrl-C (SIGINT) or SIGTERM during a solve stops the search (``stop_search``) and raises
KeyboardInterrupt to the caller, as the HiGHS backend does; it is never reported as a
time limit (CP-SAT's own SIGINT handler, which would, is switched off).
"""

from __future__ import annotations

import io
import os
import time

import pyomo.environ as pyo

from fleetplan.solvers.highs import write_mps
from fleetplan.solvers.base import SolveOptions, SolveResult, optimal_or_gap_reached, out_of_time, relative_gap, run_interruptible, solver_seconds

__all__ = ["solve_cpsat", "CONTINUOUS_SCALING"]

CONTINUOUS_SCALING = 10.0
CPSAT_WORKERS = 8

_MAP = {
    "OPTIMAL": "optimal",
    "FEASIBLE": "time_limit",
    "INFEASIBLE": "infeasible",
    "UNBOUNDED": "unbounded",
    "MODEL_INVALID": "error",
    "NOT_SOLVED": "unknown",
    "UNKNOWN_STATUS": "unknown",
}


def _hint(m: pyo.ConcreteModel, model, smap) -> None:
    """Offer the variables' current values, when every one has a value, as a hint."""
    pairs = []
    for v in model.get_variables():
        pv = smap.bySymbol.get(v.name)
        if pv is None or pv.ctype is not pyo.Var:
            continue
        if pv.value is None:
            return
        pairs.append((v, float(pv.value)))
    for v, val in pairs:
        model.add_hint(v, val)


def solve_cpsat(m: pyo.ConcreteModel, options: SolveOptions) -> SolveResult:
    """Solve ``m`` with CP-SAT via an MPS export; loads the incumbent into ``m``."""
    from ortools.linear_solver.python import model_builder as mb
    from pyomo.common.tee import capture_output

    t0 = time.monotonic()
    if (solver_seconds(options, t0) or 1.0) <= 0:
        return out_of_time("cpsat", t0)
    path, smap = write_mps(m)
    try:
        model = mb.Model()
        if not model.import_from_mps_file(path):
            return SolveResult("error", "noSolution", False, None, None, None, time.monotonic() - t0, "cpsat", "", ["MPS import failed"])
    finally:
        os.unlink(path)
    _hint(m, model, smap)
    s = mb.Solver("sat")
    left = solver_seconds(options, t0)
    if left is not None:
        if left <= 0:
            return out_of_time("cpsat", t0)
        s.set_time_limit_in_seconds(max(left, 0.01))
    params = [
        f"num_workers:{options.threads if options.threads > 1 else CPSAT_WORKERS}",
        f"random_seed:{options.seed}",
        f"relative_gap_limit:{options.mip_gap}",
        f"mip_var_scaling:{CONTINUOUS_SCALING}",
        "mip_max_bound:1e12",
        "mip_wanted_precision:1e-9",
    ]
    # CP-SAT's own SIGINT handler would end the search and report it as a time limit
    # (FEASIBLE) or UNKNOWN: Ctrl-C is the Python caller's to handle (KeyboardInterrupt).
    params.append("catch_sigint_signal:false")
    s.set_solver_specific_parameters(" ".join(params))
    s.enable_output(True)
    buf = io.StringIO()
    interrupted = None
    with capture_output(buf, capture_fd=True):
        try:
            status = run_interruptible(lambda: s.solve(model), s.stop_search)
        except KeyboardInterrupt as e:  # leave the capture normally (it echoes its buffer on an exception), then re-raise
            interrupted = e
    if interrupted is not None:
        raise interrupted
    wall = time.monotonic() - t0
    term = _MAP.get(status.name, "unknown")
    if term == "unknown" and left is not None:
        # CP-SAT reports UNKNOWN (model_builder: NOT_SOLVED) when a limit ends the search before
        # any solution; the only limit set is the time limit: no incumbent within it
        term = "time_limit"
    has = status.name in ("OPTIMAL", "FEASIBLE")
    obj = bound = None
    if has:
        for v in model.get_variables():
            pv = smap.bySymbol.get(v.name)
            if pv is not None and pv.ctype is pyo.Var:
                val = s.value(v)
                if pv.is_integer() or pv.is_binary():
                    val = round(val)
                pv.set_value(val, skip_validation=True)
        obj = float(pyo.value(next(m.component_data_objects(pyo.Objective, active=True))))
        try:
            bound = float(s.best_objective_bound)
        except (TypeError, ValueError):
            bound = None
    if term == "optimal":
        term = optimal_or_gap_reached(obj, bound)  # CP-SAT returns OPTIMAL when relative_gap_limit is reached too
    return SolveResult(term, status.name, has, obj, bound, relative_gap(obj, bound), wall, "cpsat", buf.getvalue(),
                       [f"CP-SAT status string: {s.status_string}"] if s.status_string else [])
