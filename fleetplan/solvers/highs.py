"""Solve a Pyomo model with HiGHS (highspy).

The Pyomo model is handed to ``highspy.Highs`` as arrays (:func:`fleetplan.solvers.lparrays.highs_lp`:
the columns, rows, names and numbers HiGHS reads from Pyomo's MPS export, bit for bit, without
writing and parsing the text; the CP-SAT backend reads the MPS export itself), so the driver
controls what Pyomo's wrapper does not: a warm start from the variables' current values
(``setSolution``; the chord loop re-solves a model whose previous solution stays feasible),
the thread count (reset before each solve, since HiGHS fixes its thread pool on first use),
the MIP dual bound and gap. Never raises on time limits or infeasibility: both come back as a
:class:`SolveResult`.
"""

from __future__ import annotations

import io
import math
import os
import tempfile
import time
from dataclasses import replace

import numpy as np
import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.tempfiles import process_temp_dir
from fleetplan.solvers.lparrays import highs_lp
from fleetplan.solvers.components import MIP_FEASIBILITY_TOLERANCE, SUB_MIP_GAP, component_start, mip_feasibility_tolerance, solve_blocks
from fleetplan.solvers.base import SolveOptions, SolveResult, optimal_or_gap_reached, out_of_time, relative_gap, run_interruptible, solver_seconds

__all__ = ["solve_highs", "model_arrays", "write_mps", "WATCHDOG_GRACE_S"]

#: Seconds past the time limit HiGHS was given after which the watchdog cancels the solve
#: (:func:`fleetplan.solvers.base.run_interruptible`): HiGHS's own limit normally ends it
#: first; the watchdog is for a solve that overruns it.
WATCHDOG_GRACE_S = 0.25


def _status_map(highspy):
    S = highspy.HighsModelStatus
    return {
        S.kOptimal: "optimal",
        S.kTimeLimit: "time_limit",
        S.kInfeasible: "infeasible",
        S.kUnbounded: "unbounded",
        S.kUnboundedOrInfeasible: "infeasible_or_unbounded",
        S.kSolutionLimit: "time_limit",
        S.kInterrupt: "time_limit",
        S.kIterationLimit: "time_limit",
    }


def _reuse_constraint_repns(m: pyo.ConcreteModel) -> None:
    """Let Pyomo's MPS writer reuse the constraint representations it stored on ``m``
    (``m._repn``) at the previous write instead of regenerating them: the representation
    of any constraint added since is generated here, with the writer's own call
    (``generate_standard_repn`` of the body), so the file written is the same, byte for
    byte. Valid only while no variable is fixed or unfixed and no mutable parameter
    changes between the writes (a lexicographic driver only adds caps and switches the
    objective). The objective is regenerated at every write."""
    from pyomo.repn import generate_standard_repn

    cache = getattr(m, "_repn", None)
    if cache is None or len(list(m.block_data_objects(active=True))) != 1:
        return  # first write (the writer fills the cache), or sub-blocks: regenerate all
    for c in m.component_data_objects(pyo.Constraint, active=True, descend_into=False):
        if not c._linear_canonical_form and c not in cache:
            cache[c] = generate_standard_repn(c.body)
    m._gen_con_repn = False


def write_mps(m: pyo.ConcreteModel, reuse_repn: bool = False) -> tuple[str, object]:
    """Write ``m`` to a temporary MPS file (the CP-SAT backend reads it; HiGHS takes :func:`model_arrays`) in this process's temporary directory
    (:func:`fleetplan.tempfiles.process_temp_dir`); returns (path, Pyomo symbol map).
    With ``reuse_repn``, the constraints' representations of the previous write of ``m``
    are reused (:func:`_reuse_constraint_repns`; the same file, ~40% less writing)."""
    import pyomo.environ  # noqa: F401 -- registers Pyomo's writers (m.write); the rest of the solve path needs only pyomo.core

    if reuse_repn:
        _reuse_constraint_repns(m)
    fd, path = tempfile.mkstemp(suffix=".mps", dir=process_temp_dir())
    os.close(fd)
    _, smap_id = m.write(path, io_options={"symbolic_solver_labels": False})
    return path, m.solutions.symbol_map[smap_id]


def model_arrays(m: pyo.ConcreteModel, reuse_repn: bool = False):
    """``m`` as HiGHS's arrays (:func:`fleetplan.solvers.lparrays.highs_lp`): (``highspy.HighsLp``,
    the symbol table of its column and row names). With ``reuse_repn``, the constraints'
    representations of the previous export of ``m`` are reused (:func:`_reuse_constraint_repns`;
    the same arrays)."""
    if reuse_repn:
        _reuse_constraint_repns(m)
    return highs_lp(m)


def _block_result(m: pyo.ConcreteModel, pvars: list, blocks, t0: float) -> SolveResult:
    """The :class:`SolveResult` of a block-by-block solve (:func:`fleetplan.solvers.components.solve_blocks`),
    its values loaded into ``m``; a block that failed is named by its first variable."""
    notes = [f"solved as {blocks.blocks} independent blocks (the rows split once the routing is fixed), one HiGHS MIP each"]
    if blocks.values is None:
        notes.append(f"{blocks.why}")
        return SolveResult(blocks.termination, blocks.termination, False, None, None, None, time.monotonic() - t0, "highs", "", notes)
    for pv, val in zip(pvars, blocks.values):
        if pv is not None and pv.ctype is pyo.Var:
            pv.set_value(val, skip_validation=True)
    if blocks.failed:
        # the other blocks' solutions stay loaded: a caller may keep them and treat the failed blocks alone
        notes.append(f"{blocks.why}")
        failed = [[pvars[j] for j in cols if pvars[j] is not None and pvars[j].ctype is pyo.Var] for cols, _ in blocks.failed]
        return SolveResult(blocks.termination, blocks.termination, False, None, None, None, time.monotonic() - t0, "highs", "", notes,
                           failed_blocks=failed, failed_terminations=[t for _, t in blocks.failed])
    obj = float(pyo.value(next(m.component_data_objects(pyo.Objective, active=True))))
    term = optimal_or_gap_reached(obj, blocks.bound) if (blocks.termination == "optimal" and blocks.bound is not None) else (
        "time_limit" if blocks.termination == "time_limit" else blocks.termination)
    return SolveResult(term, blocks.termination, True, obj, blocks.bound, relative_gap(obj, blocks.bound) if blocks.bound is not None else None,
                       time.monotonic() - t0, "highs", "", notes)


def _stop_with_incumbent(at: float):
    """A HiGHS MIP interrupt callback (HiGHS calls it where it checks its limits, in presolve,
    at the root and between nodes): stop the search once it holds an incumbent (a finite
    primal bound: found, or the warm start it accepted) and ``at`` (monotonic s) has passed --
    ``SolveOptions.incumbent_deadline``. HiGHS then returns that incumbent, status
    'Interrupted by user' (termination 'time_limit')."""

    def check(e) -> None:
        if e.data_out.mip_primal_bound < math.inf and time.monotonic() >= at:
            e.interrupt()

    return check


#: MIP feasibility tolerance of the one retry after HiGHS's 'Solve error' (its default 1e-6):
#: on a badly scaled model (e.g. a region's peak_rps of 1e8 puts 3e10 in the
#: bounds) HiGHS finds its optimum but refuses it for a 1.1e-6 residual infeasibility. The
#: retry's plan is re-checked by the independent verifier like any other.
RETRY_MIP_FEASIBILITY_TOLERANCE = 1e-5

def solve_highs(m: pyo.ConcreteModel, options: SolveOptions, warm_start: bool = True, relax: bool = False,
                reuse_repn: bool = False, _retry: bool = False, split_on=None) -> SolveResult:
    """Solve ``m`` (minimisation) and load the incumbent, if any, into its variables.

    With ``warm_start`` and every variable holding a value, that assignment is offered
    to HiGHS as a starting incumbent (HiGHS checks it and ignores it if infeasible).
    With ``relax`` only the LP relaxation is solved (integers loaded unrounded).
    ``reuse_repn``: ``m`` was solved before and since then only gained constraints and
    switched objectives (no variable fixed or unfixed): its constraints' representations
    are reused when exporting it (:func:`model_arrays`).
    ``split_on`` (a predicate on the model's variables): when there is no warm start,
    the variables it selects are fixed at the LP relaxation's values, the rest of the
    model is solved component by component and the union is offered as the start
    (:func:`fleetplan.solvers.components.component_start`; the sizing model passes its
    failover routing shares); the result's notes say what the start did.
    """
    import highspy

    t0 = time.monotonic()
    if (solver_seconds(options, t0) or 1.0) <= 0:
        return out_of_time("highs", t0)
    lp_in, smap = model_arrays(m, reuse_repn)
    fd, logf = tempfile.mkstemp(suffix=".highs.log", dir=process_temp_dir())  # HiGHS's log (the solve's notes read it)
    os.close(fd)
    banner = io.StringIO()
    try:
        h = _new_highs(banner, logf, options, relax)
        if relax:
            warm_start = False
        lp = _pass_model(h, lp_in, m, _retry)
        left = solver_seconds(options, t0)
        watchdog = None
        if left is not None:
            if left <= 0:
                return out_of_time("highs", t0)
            watchdog = _set_time_limit(h, left)
        names = list(lp.col_names_)
        pvars = [smap.bySymbol.get(n) for n in names]
        started, start_note, vals = False, None, None
        if warm_start:
            started, vals = _offer_warm_start(h, pvars)
        if split_on is not None and not started and not relax and lp.integrality_:
            st, start_note, offered = _offer_component_start(h, lp, pvars, split_on, left, options)
            if offered:
                started = warm_start = True  # its objective is checked against the solution HiGHS returns, as a warm start's
            left = solver_seconds(options, t0)
            if left is not None:
                if left <= 0:
                    res = out_of_time("highs", t0)
                    res.notes = [f"the time limit passed during the component start (the LP relaxation and the regions' MIPs, "
                                 f"{st.seconds:.1f} s) before HiGHS's search: {st.why or 'no time left'}"]
                    return res
                watchdog = _set_time_limit(h, left)
        if options.separable and not relax and lp.integrality_:
            blocks = solve_blocks(lp, vals, watchdog and watchdog - WATCHDOG_GRACE_S, options.mip_gap,
                                  options.threads, options.seed, max_nodes=options.max_nodes)
            if blocks is not None:
                return _block_result(m, pvars, blocks, t0)
        _run(h, banner, lp, options, relax, watchdog)
        status = h.getModelStatus()
        info = h.getInfo()
        has = info.primal_solution_status == 2  # kSolutionStatusFeasible
        term = _status_map(highspy).get(status, "unknown")
        if term == "unknown" and status == highspy.HighsModelStatus.kModelEmpty and lp.num_col_ == 0:
            term, has = "optimal", True  # nothing to decide (every variable fixed away): the empty solution
        obj = bound = None
        if has:
            obj, bound, highs_obj = _load_solution(m, h, info, pvars, relax)
            if warm_start and abs(obj - highs_obj) > 1e-6 * max(1.0, abs(highs_obj)):
                # seen with highspy 1.16: after setSolution a MIP can report its optimum while
                # getSolution still returns the offered start; solve again without the start
                try:
                    os.unlink(logf)
                except FileNotFoundError:
                    pass
                spent = time.monotonic() - t0
                again = solve_highs(m, replace(options, time_limit_s=None if options.time_limit_s is None else max(options.time_limit_s - spent, 0.01)),
                                    warm_start=False, relax=relax, reuse_repn=reuse_repn)
                if start_note is not None and start_note.startswith("started from"):
                    again.notes.insert(0, start_note.replace("started from the component start", "the component start was offered", 1)
                                       + f"; HiGHS then returned values whose objective is not the one it reported ({highs_obj:,.1f}), "
                                       "so the model was solved again without a start")
                return again
        try:
            with open(logf) as f:
                log = f.read()
        except OSError:
            log = ""
    finally:
        try:
            os.unlink(logf)
        except FileNotFoundError:
            pass
    wall = time.monotonic() - t0
    if status == highspy.HighsModelStatus.kSolveError and not has and not _retry and not relax:
        # HiGHS refused its own solution for a residual infeasibility on a badly scaled model:
        # once more at a looser MIP feasibility tolerance, in the time left
        again = solve_highs(m, replace(options, time_limit_s=None if options.time_limit_s is None else max(options.time_limit_s - wall, 0.01)),
                            warm_start=False, relax=relax, reuse_repn=reuse_repn, _retry=True)
        if start_note is not None:
            again.notes.insert(0, start_note + "; HiGHS ended in a solve error and the model was solved again, without a start, at a looser "
                               "MIP feasibility tolerance")
        return again
    if term == "optimal" and has:
        term = optimal_or_gap_reached(obj, bound)  # HiGHS's 'Optimal' is also 'the gap asked for is reached'
    return SolveResult(term, h.modelStatusToString(status), has, obj, bound, relative_gap(obj, bound), wall, "highs", log,
                       [start_note] if start_note else [])


def _new_highs(banner: io.StringIO, logf: str, options: SolveOptions, relax: bool):
    """A ``highspy.Highs`` logging to ``logf`` (its start-up banner captured into ``banner``)
    with the threads, seed and MIP gap of ``options``; with ``relax`` it solves the LP
    relaxation only."""
    import highspy

    from pyomo.common.tee import capture_output

    try:
        highspy.Highs.resetThreadScheduler(True)
    except Exception:  # pragma: no cover - older highspy
        pass
    with capture_output(banner, capture_fd=True):  # HiGHS prints a banner on stdout
        h = highspy.Highs()
    h.setOptionValue("output_flag", True)
    h.setOptionValue("log_to_console", False)
    h.setOptionValue("log_file", logf)
    h.setOptionValue("threads", max(1, options.threads))
    h.setOptionValue("random_seed", int(options.seed))
    h.setOptionValue("mip_rel_gap", float(options.mip_gap))
    if relax:
        h.setOptionValue("solve_relaxation", True)
    return h


def _pass_model(h, lp_in, m, retry: bool):
    """Pass the model's arrays ``lp_in`` to ``h`` and return HiGHS's copy (``h.getLp()``),
    its MIP feasibility tolerance set to what double precision can meet on it (looser when
    ``retry``). Raises RuntimeError when HiGHS could not read them (a bug)."""
    import highspy

    # the model is passed before any time limit is set (HiGHS's MPS reader honoured the limit and,
    # cut short, had left an empty model that 'solved' to kModelEmpty)
    read = h.passModel(lp_in)
    lp = h.getLp()
    if read == highspy.HighsStatus.kError or (lp.num_col_ == 0 and any(not v.fixed for v in m.component_data_objects(pyo.Var))):
        raise RuntimeError(f"HiGHS could not read the model's arrays ({read}); this is a bug, please report it with the instance")
    tol = mip_feasibility_tolerance(lp, RETRY_MIP_FEASIBILITY_TOLERANCE if retry else MIP_FEASIBILITY_TOLERANCE)
    if tol != MIP_FEASIBILITY_TOLERANCE:  # a badly scaled model (huge demand): what double precision can meet
        h.setOptionValue("mip_feasibility_tolerance", tol)
    return lp


def _set_time_limit(h, left: float) -> float:
    """Give ``h`` the ``left`` seconds (at least 0.01) as its time limit; returns the
    watchdog's deadline (monotonic s): that limit plus a grace."""
    h.setOptionValue("time_limit", float(max(left, 0.01)))
    return time.monotonic() + max(left, 0.01) + WATCHDOG_GRACE_S


def _set_start(h, values) -> None:
    """Offer ``values`` (one per column) to ``h`` as a starting incumbent."""
    import highspy

    sol = highspy.HighsSolution()
    sol.col_value = values
    sol.value_valid = True
    h.setSolution(sol)


def _offer_warm_start(h, pvars: list) -> tuple[bool, list]:
    """Offer the model's current values as the start when every column has one (a column
    with no Pyomo variable -- the objective's constant -- is 1): (whether offered, the
    values, None where a variable has none)."""
    vals = []
    for pv in pvars:
        v = pv.value if (pv is not None and pv.ctype is pyo.Var) else (1.0 if pv is None else None)
        vals.append(v)
    if all(v is not None for v in vals):
        _set_start(h, [float(v) for v in vals])
        return True, vals
    return False, vals


def _offer_component_start(h, lp, pvars: list, split_on, left: float | None, options: SolveOptions):
    """The component start (:func:`fleetplan.solvers.components.component_start`): the
    variables ``split_on`` selects fixed at the LP relaxation's values, the rest solved
    component by component within ``left`` seconds, the union offered to ``h``. Returns
    (the start, its note for the result, whether it was offered)."""
    fix = np.array([pv is not None and pv.ctype is pyo.Var and bool(split_on(pv)) for pv in pvars], dtype=bool)
    st = component_start(lp, fix, None if left is None else time.monotonic() + left, options.threads, options.seed)
    if st.values is None:
        return st, f"no component start ({st.why}); HiGHS started cold", False
    _set_start(h, st.values)
    return st, (f"started from the component start: the LP's failover routing fixed, {st.components} components solved "
                f"one by one to {SUB_MIP_GAP:.1%} in {st.seconds:.1f} s, start objective {st.objective:,.1f}"), True


def _run(h, banner: io.StringIO, lp, options: SolveOptions, relax: bool, watchdog: float | None) -> None:
    """Run ``h``, stoppable from the main thread (Ctrl-C, SIGTERM, the watchdog at
    ``watchdog``) and, with ``options.incumbent_deadline``, at that deadline once it holds
    an incumbent. Re-raises KeyboardInterrupt after leaving the output capture."""
    from pyomo.common.tee import capture_output

    # HiGHS polls its interrupt callbacks where it checks its clock; cancelSolve (from
    # the main thread: Ctrl-C, SIGTERM or the watchdog) sets the flag they read
    stoppable = hasattr(h, "cancelSolve") and hasattr(type(h), "HandleUserInterrupt")  # highspy >= 1.8
    if stoppable:
        h.HandleUserInterrupt = True
    if options.incumbent_deadline is not None and not relax and lp.integrality_ and hasattr(type(h), "cbMipInterrupt"):
        h.cbMipInterrupt.subscribe(_stop_with_incumbent(options.incumbent_deadline))
    stopped = None
    with capture_output(banner, capture_fd=True):
        try:
            if stoppable:
                run_interruptible(h.run, h.cancelSolve, deadline=watchdog)
            else:  # an older highspy: no asynchronous stop; HiGHS's own time limit ends it
                h.run()
        except KeyboardInterrupt as e:  # leave the capture normally (it echoes its buffer on an exception), then re-raise
            stopped = e
    if stopped is not None:
        raise stopped


def _load_solution(m, h, info, pvars: list, relax: bool) -> tuple[float, float, float]:
    """Load HiGHS's solution into ``m`` (integers rounded unless ``relax``; ``info``: the
    solve's ``h.getInfo()``): (the active objective's value recomputed by Pyomo, the dual
    bound -- the objective for an LP --, HiGHS's own objective value)."""
    col = h.getSolution().col_value
    for pv, val in zip(pvars, col):
        if pv is not None and pv.ctype is pyo.Var:
            if (pv.is_integer() or pv.is_binary()) and not relax:
                val = round(val)
            pv.set_value(val, skip_validation=True)
    obj = float(pyo.value(next(m.component_data_objects(pyo.Objective, active=True))))
    bound = float(info.mip_dual_bound) if (h.getLp().integrality_ and not relax) else obj
    return obj, bound, float(info.objective_function_value)
