r"""Progressive hedging for the purchase tree (``fleetplan purchase --method ph``), by mpi-sppy.

The deterministic equivalent (:mod:`fleetplan.purchase.model`) holds one sizing block
per tree node in one MIP; on the Gemini-scale base 22 nodes found no incumbent in 900 s
(docs/benchmarks.md). Progressive hedging (Rockafellar
and Wets, "Scenarios and policy aggregation in optimization under uncertainty", Math. of
OR 16(1), 1991) splits the tree into its scenarios: each scenario's model is the
deterministic equivalent of its own path (:func:`fleetplan.purchase.solve.path_tree`,
built by :func:`fleetplan.purchase.model.build_purchase_model`, the same code and the
same sizing families as the tree, never a copy), and the orders at each non-leaf tree
node are the non-anticipative variables PH drives to consensus with its multipliers W
and proximal terms (linearised: HiGHS solves no MIQP).

mpi-sppy (Knueven et al., "A parallel hub-and-spoke system for large-scale scenario-based
optimization under uncertainty", Math. Prog. Comp. 15, 2023) runs it:

* with mpi4py, as a hub-and-spoke "wheel" over ``MPI.COMM_WORLD``: the PH hub, plus a
  Lagrangian outer-bound spoke with 2 cylinders and an xhat-shuffle inner-bound spoke with
  3 (the process count must be a multiple of the cylinder count; it is chosen from the
  count: 3 -> hub + Lagrangian + xhat, 2 -> hub + Lagrangian, else the hub alone);
* without mpi4py, PH alone in this process (:class:`mpisppy.opt.ph.PH`).

The lower bound is mpi-sppy's best outer bound: the trivial (wait-and-see) bound of PH's
iteration 0 and, with the Lagrangian spoke, the Lagrangian bound at PH's W. The
incumbent is PH's consensus: each non-leaf node's orders are the probability-weighted
mean xbar over its scenarios (rounded to whole pods, minimum orders and delivery caps
respected), fixed in the whole tree and evaluated by
:func:`fleetplan.purchase.solve.solve_tree` (prefill chords refined, every fleet then
verified like the EF's); the last quarter's orders stay free (they are recourse). The
gap is (incumbent - bound) / incumbent. If the rounded consensus admits no plan (PH
stopped before consensus, hard policy), it is rounded up; failing that only the orders its scenarios agree on within
half a pod are fixed and the tree is solved for the rest (a fix-and-optimise step: the
EF with most of its order integers fixed).

Under ``mpiexec -n N`` every process runs the same command: global rank 0 drives (it
reports and writes), the others serve each PH solve rank 0 announces
(:func:`serve_ph`) and exit when it sends None.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import time
from dataclasses import replace

import pyomo.environ as pyo

from fleetplan.deadline import TimeLimitReached
from fleetplan.purchase.io import PurchaseProblem
from fleetplan.purchase.model import build_purchase_model
from fleetplan.purchase.solve import TreeSolution, fix_node_orders, path_tree, solve_tree
from fleetplan.purchase.tree import Tree
from fleetplan.solvers.base import SolveOptions, SolveResult, optimal_or_gap_reached

__all__ = ["available", "node_names", "scenario_creator", "solve_tree_ph", "serve_ph", "world", "PH_DEFAULTS"]

#: PH settings: iterations, rho as a fraction of each order's discounted price per pod,
#: the convergence threshold (mpi-sppy's mean |x - xbar| over the nonants, pods).
PH_DEFAULTS = {"max_iterations": 30, "rho_fraction": 0.5, "convthresh": 0.01}


def available() -> str | None:
    """None when mpi-sppy imports; else why not (install the ``stochastic`` extra)."""
    # MPICH's UCX transport prints 'UCX WARN ... not returned to mpool' on stdout (which may
    # carry --json) when the process ends after a failed PH run: warnings off unless asked for
    os.environ.setdefault("UCX_LOG_LEVEL", "error")
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # mpi-sppy prints a banner on import; stdout may be --json
            import mpisppy  # noqa: F401
    except ImportError as e:  # pragma: no cover - the extra is installed in CI
        return f"--method ph needs mpi-sppy (pip install 'fleetplan[stochastic]'): {e}"
    return None


def world():
    """(comm, rank, size) of MPI.COMM_WORLD, or (None, 0, 1) without mpi4py."""
    import mpisppy

    if not mpisppy.haveMPI:
        return None, 0, 1
    from mpisppy import MPI

    c = MPI.COMM_WORLD
    return c, c.Get_rank(), c.Get_size()


def node_names(tree: Tree) -> dict[int, str]:
    """mpi-sppy's node names: ``ROOT``, then the parent's name and the child's position
    (``ROOT_0_2``); mpi-sppy's names must end in a serial number."""
    names = {0: "ROOT"}
    for n in tree.nodes[1:]:
        kids = tree.children(n.parent)
        names[n.id] = f"{names[n.parent]}_{kids.index(n.id)}"
    return names


def _order_keys(p: PurchaseProblem, quarter: int) -> list[tuple[str, str]]:
    return sorted((t.region, t.chip) for t in p.orders if t.quarter == quarter)


def _stock_keys(p: PurchaseProblem) -> list[tuple[str, str]]:
    return [(r, k) for r in sorted(p.base.regions) for k in sorted(p.base.chips)]


def scenario_creator(scenario_name: str, problem: PurchaseProblem, tree: Tree, fixed_orders: dict | None = None, cache: dict | None = None,
                     fixed_node_orders: dict | None = None, deadline: float | None = None):
    """mpi-sppy's scenario creator: the deterministic equivalent of the scenario's path
    (probability 1 on every node, so its objective is the scenario's own discounted cost,
    or its risk-weighted cost with ``policy.risk`` cvar), with ``_mpisppy_node_list`` one
    :class:`mpisppy.scenario_tree.ScenarioNode` per non-leaf quarter, its nonants the
    orders placed there, then the pods in service there (fixed by the orders, listed so
    no node's list is empty), and at the root the CVaR's eta; ``_mpisppy_probability``
    the scenario's probability. ``fixed_node_orders``: (tree node, region, chip) -> pods
    fixed (the re-plan's earlier orders), fixed on the path's nodes by
    :func:`fleetplan.purchase.solve.fix_node_orders`. ``deadline`` (a :func:`time.perf_counter`
    timestamp, s): the build raises :class:`~fleetplan.deadline.TimeLimitReached` once it passes."""
    from mpisppy import scenario_tree

    ids = tree.scenarios[scenario_name]
    names = node_names(tree)
    pm = build_purchase_model(problem, path_tree(tree, scenario_name), fixed_orders, cache, deadline=deadline)
    if fixed_node_orders:
        at = {n: i for i, n in enumerate(ids)}  # tree node -> its position on the path (the path tree's node id)
        fix_node_orders(pm, {(at[n], r, k): v for (n, r, k), v in fixed_node_orders.items() if n in at})
    m = pm.m
    nodes = []
    for i, n in enumerate(ids[:-1]):
        nonants = [m.v_order_pods[(i, r, k)] for (r, k) in _order_keys(problem, i)]
        nonants += [m.v_pods_in_service[(i, r, k)] for (r, k) in _stock_keys(problem)]
        if i == 0 and hasattr(m, "v_cvar_eta"):
            nonants.append(m.v_cvar_eta)
        parent = tree.nodes[n].parent
        cond = 1.0 if parent is None else tree.nodes[n].probability / tree.nodes[parent].probability
        nodes.append(scenario_tree.ScenarioNode(names[n], cond, i + 1, m.e_node_cost_usd[i], nonants, m,
                                                parent_name=None if parent is None else names[parent]))
    m._mpisppy_node_list = nodes
    m._mpisppy_probability = tree.scenario_probability(scenario_name)
    m._fleetplan_terms = pm.terms
    return m


def _denouement(rank, scenario_name, scenario):
    pass


def _rho_setter(scenario, rho_fraction: float = 0.5):
    """rho per nonant (USD per pod of disagreement): a fraction of the order's discounted
    price (the cost scale of the variable, mpi-sppy's 'coefficient rho' idea); pods in
    service and eta get the mean order price / 1 USD."""
    terms = scenario._fleetplan_terms
    out = []
    prices = [t.cost_usd_per_pod for t in terms.values()] or [1.0]
    mean = max(sum(prices) / len(prices), 1.0)
    for node in scenario._mpisppy_node_list:
        for v in node.nonant_list:
            for vd in (v.values() if v.is_indexed() else [v]):
                idx = vd.index()
                if vd.parent_component().name == "v_order_pods":
                    rho = max(terms[idx].cost_usd_per_pod, 1.0) * rho_fraction
                elif vd.parent_component().name == "v_pods_in_service":
                    rho = mean * rho_fraction
                else:
                    rho = 1.0
                out.append((id(vd), rho))
    return out


def _config(opts: SolveOptions, seconds: float | None, settings: dict):
    from mpisppy.utils import config

    cfg = config.Config()
    cfg.popular_args()
    cfg.ph_args()
    cfg.two_sided_args()
    cfg.lagrangian_args()
    cfg.xhatshuffle_args()
    cfg.solver_name = "appsi_highs"
    cfg.default_rho = 1.0
    cfg.max_iterations = settings["max_iterations"]
    cfg.intra_hub_conv_thresh = settings["convthresh"]
    cfg.rel_gap = opts.mip_gap
    cfg.time_limit = None if seconds is None else max(int(seconds), 1)
    cfg.linearize_proximal_terms = True
    cfg.linearize_binary_proximal_terms = True
    # each subproblem solve's HiGHS time limit is set by _deadline_extension (a share of the time left), not here
    cfg.solver_options = f"mip_rel_gap={opts.mip_gap}"
    return cfg


#: the share of the time left that progressive hedging itself may take (the rest evaluates its incumbent)
PH_TIME_SHARE = 0.6

#: the shortest HiGHS limit of a subproblem solve after PH's iteration 0 (s): an iteration
#: started before the deadline gets at least this per scenario (iteration 0 has no floor: a
#: scenario without a solution there ends PH without a plan, by the deadline)
MIN_ITERK_SOLVE_S = 0.5


def _deadline_extension():
    """An mpi-sppy Extension class that keeps PH within a wall-clock deadline (the
    ``deadline`` keyword: a :func:`time.perf_counter` timestamp, s). Before each subproblem
    solve it sets HiGHS' ``time_limit`` to the time left shared equally over the solves
    left in the current solve loop (so one loop ends by the deadline whichever scenario is
    hard; a fixed per-solve limit let iteration 0 of the bundled example's 9 scenarios run
    45 s past a 30 s --time-limit); after iteration 0 it sets PH's ``time_limit`` option
    (seconds since PH's start, checked at the top of every iteration) to the deadline."""
    from mpisppy.extensions.extension import Extension

    class DeadlineExtension(Extension):
        def __init__(self, opt, deadline: float, record: dict | None = None):
            super().__init__(opt)
            self.deadline = deadline
            self.loop_left = 0
            self.iter0 = True
            self.record = record if record is not None else {}  # "timed_out": a subproblem solve stopped at its share

        def post_solve(self, subproblem, results):
            cond = getattr(getattr(results, "solver", None), "termination_condition", None)
            if cond is not None and "time" in str(cond).lower():
                self.record["timed_out"] = self.record.get("timed_out", 0) + 1
            return results

        def pre_solve_loop(self):
            self.loop_left = len(self.opt.local_scenarios)

        def pre_solve(self, subproblem):
            share = (self.deadline - time.perf_counter()) / max(self.loop_left, 1)
            self.loop_left -= 1
            subproblem._solver_plugin.options["time_limit"] = max(share, 0.01 if self.iter0 else MIN_ITERK_SOLVE_S)

        def post_iter0(self):
            self.iter0 = False
            self.opt.options["time_limit"] = max(self.deadline - self.opt.start_time, 0.0)

    return DeadlineExtension


def _run_wheel(p: PurchaseProblem, tree: Tree, opts: SolveOptions, fixed_orders, cache, seconds, settings, fixed_node_orders=None,
               record: dict | None = None) -> dict:
    """One PH solve over every process (collective). Returns, on global rank 0, the hub's
    figures: xbar per node name, the best bounds, iterations, convergence, cylinders."""
    from mpisppy.utils import cfg_vanilla as vanilla

    comm, rank, size = world()
    cfg = _config(opts, seconds, settings)
    names = node_names(tree)
    all_nodenames = [names[n.id] for n in tree.nodes]  # mpi-sppy wants the leaves' names too
    deadline = None if seconds is None else time.perf_counter() + seconds
    # one process: the scenario builds stop at the deadline too (under MPI a build cut short on one
    # process and not on another would leave the others waiting in a collective)
    kw = {"problem": p, "tree": tree, "fixed_orders": fixed_orders, "cache": cache, "fixed_node_orders": fixed_node_orders,
          "deadline": deadline if comm is None or size == 1 else None}
    # record: what the deadline extension saw of this process's subproblem solves (read by the caller after a failure)
    ext = {} if deadline is None else {"ph_extensions": _deadline_extension(), "extension_kwargs": {"deadline": deadline, "record": record}}
    beans = (cfg, scenario_creator, _denouement, sorted(tree.scenarios))
    hub = vanilla.ph_hub(*beans, scenario_creator_kwargs=kw, all_nodenames=all_nodenames, rho_setter=_rho_setter, **ext)
    hub["opt_kwargs"]["options"]["rho_setter_kwargs"] = {"rho_fraction": settings["rho_fraction"]}
    t0 = time.perf_counter()
    if comm is None:
        from mpisppy.opt.ph import PH

        ph = PH(**hub["opt_kwargs"])
        conv, _eobj, tbound = ph.ph_main()
        opt, outer, inner, cyl = ph, tbound, None, ["PH (one process, no MPI)"]
    else:
        from mpisppy.spin_the_wheel import WheelSpinner

        ncyl = 3 if size % 3 == 0 else (2 if size % 2 == 0 else 1)
        spokes = []
        if ncyl >= 2:
            lag = vanilla.lagrangian_spoke(*beans, scenario_creator_kwargs=kw, all_nodenames=all_nodenames, rho_setter=_rho_setter, **ext)
            lag["opt_kwargs"]["options"]["rho_setter_kwargs"] = {"rho_fraction": settings["rho_fraction"]}
            spokes.append(lag)
        if ncyl >= 3:
            spokes.append(vanilla.xhatshuffle_spoke(*beans, scenario_creator_kwargs=kw, all_nodenames=all_nodenames, **ext))
        ws = WheelSpinner(hub, spokes)
        ws.spin()
        cyl = ["PH hub"] + (["Lagrangian bound"] if ncyl >= 2 else []) + (["xhat shuffle"] if ncyl >= 3 else [])
        if not ws.on_hub():
            return {}
        opt = ws.spcomm.opt
        outer, inner, conv = ws.BestOuterBound, ws.BestInnerBound, getattr(opt, "conv", None)
    xbar: dict[str, list[float]] = {}
    own: dict[str, tuple[list[float], list[float]]] = {}  # node -> (least, most) of each nonant over its local scenarios
    for s in opt.local_scenarios.values():
        for node in s._mpisppy_node_list:
            xbar[node.name] = [pyo.value(s._mpisppy_model.xbars[(node.name, i)]) for i in range(len(node.nonant_vardata_list))]
            vals = [pyo.value(v) for v in node.nonant_vardata_list]
            lo, hi = own.get(node.name, (vals, vals))
            own[node.name] = ([min(a, b) for a, b in zip(lo, vals)], [max(a, b) for a, b in zip(hi, vals)])
    if comm is not None and opt.mpicomm.Get_size() > 1:  # a hub spread over several processes: gather its nodes
        parts = opt.mpicomm.gather((xbar, own), root=0)
        if opt.cylinder_rank != 0:
            return {}
        for xb, ow in parts:
            xbar.update(xb)
            for k, (lo2, hi2) in ow.items():
                lo, hi = own.get(k, (lo2, hi2))
                own[k] = ([min(a, b) for a, b in zip(lo, lo2)], [max(a, b) for a, b in zip(hi, hi2)])
    if rank != 0:
        return {}
    return {"xbar": xbar, "own": own, "outer": outer, "inner": inner, "conv": conv, "iterations": getattr(opt, "_PHIter", None),
            "cylinders": cyl, "processes": size, "seconds": time.perf_counter() - t0}


def _quiet_wheel(*args) -> dict:
    """:func:`_run_wheel` with mpi-sppy's progress prints kept off stdout (it may carry --json); the log is returned."""
    buf = io.StringIO()
    quiet = logging.getLogger("pyomo")  # HiGHS' coefficient notes and 'aborted with a solution' warnings of every subproblem
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(buf):
            fig = _run_wheel(*args)
    finally:
        quiet.setLevel(level)
    if fig:
        fig["log"] = buf.getvalue()
    return fig


def _orders_from(p: PurchaseProblem, tree: Tree, values: dict[str, list[float]], spread: dict | None = None,
                 up: bool = False) -> dict[tuple[int, str, str], int]:
    """Whole-pod orders per (node, region, chip) from per-node nonant values: rounded half
    up (``up``: to the next whole pod, 0.01 pod tolerated), below a minimum order m set to 0 (under m / 2) or m, at most the delivery cap. With
    ``spread`` (node -> (least, most) over its scenarios) only the orders on which the
    scenarios agree within half a pod are returned (the others stay free)."""
    names = node_names(tree)
    terms = {(t.quarter, t.region, t.chip): t for t in p.orders}
    out = {}
    for n in tree.nodes:
        if names[n.id] not in values:
            continue
        vals = values[names[n.id]]
        for j, (r, k) in enumerate(_order_keys(p, n.quarter)):
            if spread is not None and spread[names[n.id]][1][j] - spread[names[n.id]][0][j] > 0.5:
                continue
            t = terms[(n.quarter, r, k)]
            x = max(vals[j], 0.0)
            pods = math.ceil(x - 0.01) if up else math.floor(x + 0.5)
            if 0 < pods < t.min_order_pods:
                pods = t.min_order_pods if x >= t.min_order_pods / 2 else 0
            out[(n.id, r, k)] = min(pods, p.delivery_cap[(t.entry, t.delivery)])
    return out


def solve_tree_ph(p: PurchaseProblem, tree: Tree, opts: SolveOptions, deadline: float | None, fixed_orders: dict | None = None,
                  cache: dict | None = None, fixed_node_orders: dict | None = None, settings: dict | None = None) -> TreeSolution:
    """Solve ``tree`` by progressive hedging (the signature of
    :func:`fleetplan.purchase.solve.solve_tree`, so ``solve_purchase`` takes either).

    Returns the incumbent as a :class:`TreeSolution` of the whole tree, its result's
    objective the incumbent's cost (USD, the risk-weighted objective with cvar), its
    bound mpi-sppy's best outer bound and its gap between them; ``method`` holds the PH
    figures (iterations, convergence, bounds, cylinders, processes, seconds). A tree of
    one scenario or one quarter has nothing to decompose: solved as the EF. Collective
    under MPI: every process calls it (rank 0 directly, the others through
    :func:`serve_ph`). ``fixed_node_orders`` (the re-plan's earlier orders, as for
    :func:`~fleetplan.purchase.solve.solve_tree`) are fixed in every scenario subproblem
    and in the incumbent's evaluation; raises ValueError (from
    :func:`~fleetplan.purchase.solve.fix_node_orders`) for one the supply does not allow.
    """
    settings = {**PH_DEFAULTS, **(settings or {})}
    if len(tree.scenarios) == 1 or len(tree.nodes) == 1:
        return solve_tree(p, tree, opts, deadline, fixed_orders, cache, fixed_node_orders=fixed_node_orders)
    if fixed_node_orders:  # refuse an order the supply does not allow before any process starts PH
        fix_node_orders(build_purchase_model(p, tree, fixed_orders, cache), fixed_node_orders)
    comm, rank, size = world()
    # PH gets a share of the time left; the rest is the incumbent's evaluation (the tree built and solved with
    # the consensus orders fixed): with all of it, PH ran to the deadline and the evaluation had none
    left = None if deadline is None else PH_TIME_SHARE * (deadline - time.perf_counter())
    if comm is not None and size > 1:
        comm.bcast(("ph", tree, fixed_orders, fixed_node_orders, left, settings), root=0)
    t0 = time.perf_counter()
    record: dict = {}
    try:
        fig = _quiet_wheel(p, tree, opts, fixed_orders, cache, left, settings, fixed_node_orders, record)
    except (RuntimeError, TimeLimitReached) as e:
        # mpi-sppy stops when a scenario subproblem of its iteration 0 ends without a solution
        # (infeasible, or at its share of the time left with no incumbent): no plan from PH.
        # No model is built for the message (the tree's build took seconds past the deadline)
        msg = " ".join(str(e).split())[:300]
        timed_out = record.get("timed_out", 0)
        if isinstance(e, TimeLimitReached):
            why, term = f"progressive hedging: the time limit passed while building the scenario models ({msg})", "time_limit"
        elif timed_out:
            # (mpi-sppy's own words, 'Infeasibility detected', read as an infeasible model: they are left out)
            why = (f"progressive hedging: {timed_out} scenario subproblem solve(s) stopped at their share of the time left without a "
                   f"solution ({len(tree.scenarios)} scenarios, PH's {PH_TIME_SHARE:.0%} of the time); no plan from PH")
            term = "time_limit"
        else:
            why, term = f"progressive hedging: a scenario's subproblem ended without a solution (mpi-sppy: {msg})", "ph_failed"
        return TreeSolution(None, SolveResult(term, why, False, None, None, None, time.perf_counter() - t0, "mpi-sppy PH + highs"), 0)  # type: ignore[arg-type]
    outer = fig["outer"]
    tried = []
    sol = None
    for label, spread, up in (("rounded consensus xbar", None, False), ("consensus xbar rounded up", None, True),
                              ("orders the scenarios agree on (the others re-optimised in the tree)", fig["own"], False)):
        fixed = {**_orders_from(p, tree, fig["xbar"], spread, up), **(fixed_node_orders or {})}
        if fixed in [f for _l, f in tried]:
            continue
        tried.append((label, fixed))
        try:
            sol = solve_tree(p, tree, opts, deadline, fixed_orders, cache, fixed_node_orders=fixed)
        except ValueError as e:  # a rounded order the supply does not allow (fix_node_orders): try the next rounding
            pm = build_purchase_model(p, tree, fixed_orders, cache)
            sol = TreeSolution(pm, SolveResult("error", str(e), False, None, None, None, 0.0, "highs"), 0)
            continue
        if sol.ok:
            break
    assert sol is not None
    if deadline is not None:  # PH's subproblem solves each had a share of the time left (_deadline_extension): clock-shaped
        sol.clock = ["progressive hedging (each subproblem solve had a share of the time left as its limit)"] + sol.clock
    inc = sol.result.objective if sol.ok else None
    bound, gap, bound_note = ph_bound_and_gap(inc, outer)
    sol.method = {"method": "ph", "incumbent_from": tried[-1][0], "iterations": fig["iterations"], "convergence": fig["conv"],
                  "outer_bound_usd": bound, "mpisppy_inner_bound_usd": None if fig["inner"] in (None, float("inf")) else float(fig["inner"]),
                  "incumbent_usd": inc, "gap": gap, "cylinders": fig["cylinders"], "processes": fig["processes"], "ph_seconds": fig["seconds"],
                  **{k: settings[k] for k in sorted(PH_DEFAULTS)}}
    if sol.ok:
        # the fixed-orders tree's termination ('optimal') is not PH's: say what the bound proves
        term = optimal_or_gap_reached(inc, bound) if bound is not None else "ph_no_bound"
        if term == "gap_reached" and gap is not None and gap > opts.mip_gap:
            # PH ended above --mip-gap: converged (its nonants agree within convthresh), or stopped by its iterations or the clock
            conv = fig["conv"]
            term = "ph_converged" if conv is not None and conv < settings["convthresh"] else "ph_stopped"
        sol.result = replace(sol.result, bound=bound, gap=gap, solver="mpi-sppy PH + highs", termination=term,
                             notes=list(sol.result.notes) + [f"progressive hedging: {fig['iterations']} iterations; incumbent from the {tried[-1][0]}"]
                             + ([bound_note] if bound_note else []))
    return sol


def ph_bound_and_gap(incumbent: float | None, outer: float | None) -> tuple[float | None, float | None, str | None]:
    """(bound, relative gap, note) from PH's incumbent and mpi-sppy's outer (lower) bound
    (USD). A bound that is not finite is no bound. A "lower bound" above the incumbent
    (beyond 1e-6 relative) is not a valid bound -- seen with ``--risk cvar`` under
    ``mpiexec -n 2``, where the Lagrangian spoke's bound exceeded the verified incumbent --
    so it is dropped with a note instead of being clamped to a proved 0% gap."""
    bound = None if outer is None or outer != outer or abs(outer) == float("inf") else float(outer)
    if incumbent is None or bound is None:
        return bound, None, None
    if bound > incumbent + 1e-6 * max(abs(incumbent), 1.0):
        return None, None, (f"mpi-sppy's outer bound {bound:,.0f} USD lies above the verified incumbent {incumbent:,.0f} USD, so it bounds "
                            "nothing (a known problem with --risk cvar's split into scenario models); no gap is claimed")
    return bound, max(incumbent - bound, 0.0) / max(abs(incumbent), 1e-9), None


def serve_ph(p: PurchaseProblem, opts: SolveOptions) -> None:
    """The loop of an MPI process other than rank 0: take part in each PH solve rank 0
    announces (same problem; the tree and fixed orders rank 0 sends: a re-plan's
    re-rooted tree), until it announces None."""
    comm, rank, _size = world()
    assert comm is not None and rank != 0
    cache: dict = {}
    while True:
        job = comm.bcast(None, root=0)
        if job is None:
            return
        _kind, tree, fixed_orders, fixed_node_orders, left, settings = job
        try:
            _quiet_wheel(p, tree, opts, fixed_orders, cache, left, settings, fixed_node_orders)
        except RuntimeError:
            pass  # rank 0 meets the same failure and reports it


def release_workers() -> None:
    """Rank 0: tell the other processes there is no further PH solve."""
    comm, rank, size = world()
    if comm is not None and size > 1 and rank == 0:
        comm.bcast(None, root=0)
