r"""The pod-floor decomposition: a plan and a proven lower bound for a hard-demand tree from
per-node snapshot solves and an orders-only master (a logic-based Benders decomposition).

The deterministic equivalent couples its nodes only through the pods in service: given
the orders, every node's sizing block is a snapshot solve of its own. HiGHS's bound on the
whole tree is weak (the LP relaxation of 30 Gemini-scale blocks lets fractional slices need
fractional pods), so the proof of a 1% gap does not come in minutes. This decomposes:

1. **Floors.** For every node n, every chip k that can be ordered and every region subset
   S (all regions; all but one; each one alone), the fewest pods any fleet serving the
   node's demand within its SLOs can have there (the block alone, the other pods at the
   most that can be in service, shortfall fixed at 0):
   :math:`F_{n,k,S} = \lceil \min \sum_{r \in S} v\_new\_pods_{r,k} \rceil` (the MIP's proven
   bound, rounded up). They are valid inequalities of the tree:
   :math:`\sum_{r \in S} v\_pods\_in\_service_{n,r,k} \ge F_{n,k,S}` (``c_purchase_floor``).
   And the node's run-cost floor :math:`\underline{C}_n` (USD/h), the proven bound of the
   block's cheapest fleet with the most pods it can have (more pods never cost more to run).
2. **Master.** The tree's orders, inventory, delivery caps and minimum orders (the same
   variables and constraints, the blocks switched off) with the floors and the no-good
   cuts below, minimising the expected discounted order cost plus each node's run cost
   theta_n (at least its floor; the cost cuts below raise it).
3. **Nodes.** Each node's block at the master's pods in service, cheapest fleet (its prefill
   chords refined until the exact queueing curves hold, as :func:`fleetplan.sizing.solve`),
   the solve started from the cheapest fleet the block found at other pods that fits in these
   (:func:`_earlier_fleet`).
   A node no fleet serves at pods :math:`\hat x` gets the no-good cut: one of its orderable
   (region, chip) pods must exceed :math:`\hat x` (binary :math:`z_j`,
   :math:`v\_pods\_in\_service_{n,r_j,k_j} \ge (\hat x_j + 1) z_j`, :math:`\sum_j z_j \ge 1`;
   fewer pods never serve what :math:`\hat x` cannot); back to 2. When every node has a
   fleet, that is a plan.

An infeasible master (every cut valid) proves the tree infeasible: the report's ``short``
names the first quarter whose nodes' floors and cuts no orders meet together with the earlier
quarters', and at its nodes each floor beyond what the supply alone can put in service
(the master maximising those pods with no floor or cut), without a solve of the tree.

Bounds (USD): the plan's expected cost is the upper bound; the master's proven bound plus
:math:`\sum_n P_n \delta_{q(n)} H\, \underline{C}_n` is a lower bound of the tree's optimum
(every feasible plan meets every floor and every no-good cut, and runs each node at no less
than its floor). Reference: J. N. Hooker and G. Ottosson, "Logic-based Benders
decomposition", Mathematical Programming 96 (2003) 33-60; the no-good cuts are its
combinatorial cuts for a subproblem monotone in the master's variables.

With a CVaR objective (``policy.risk`` cvar) the master minimises (1 - w) E + w CVaR over the
scenarios' costs (each the sum of its nodes' orders and run costs theta_n, linearised as the
tree's own objective): every scenario cost is non-decreasing in each theta_n, so the floors
and cuts bound it as they bound the expectation, and a node's cheapest fleet at its pods is
its fleet under either objective.

Applies to the hard unserved policy without burst capacity (where the cost of a node is its
run cost alone); elsewhere :func:`applies` says why not and the driver uses the snapshot
start. Never raises for a model it applies to; the report says
what it found.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable

import pyomo.environ as pyo

from fleetplan.models.sizing.build import add_sizing_families, shortfall_vars
from fleetplan.models.sizing.constraints.prefill import move_chords, set_chord, violated_pools
from fleetplan.purchase.io import PurchaseProblem
from fleetplan.purchase.master import Short, add_floor_rows, close_master, cut_round, first_short, open_master, plan_objective
from fleetplan.purchase.model import PurchaseModel, pods_needed, pods_upper_bound, settle_cvar
from fleetplan.purchase.schema import CVaRRisk, PricedUnserved
from fleetplan.sizing import MAX_REFINEMENTS
from fleetplan.solvers.base import SolveOptions, run_interruptible
from fleetplan.solvers.give_up import STALL_SHARE, GiveUp
from fleetplan.solvers.highs import solve_highs
from fleetplan.solvers.persistent import PersistentHighs

__all__ = ["FloorReport", "Short", "applies", "floor_decomposition", "floor_nodes", "FLOOR_CACHE_KEY"]

#: the key under which the build cache keeps the floors and node fleets between the trees of one run
FLOOR_CACHE_KEY = "pod floors"
#: most master solves (rounds of no-good and cost cuts)
MAX_ROUNDS = 20
#: the work limits of the node-block solves, in HiGHS branch-and-bound nodes: a pod-floor solve stops at
#: its proof or FLOOR_MAX_NODES (the floor is then the ceiling of the bound reached, a weaker valid floor),
#: a run-cost floor or node fleet at its MIP gap or COST_MAX_NODES (a fleet at exactly its floors can be
#: hard to find: past this it is 'unknown'). Work, not seconds: each solve, and so the floors, the fleets
#: and the plan, come out the same on any machine and under any load ("Plans are deterministic",
#: docs/architecture.md); the wall clock (--time-limit) is only an outer guard, and a solve it cuts is
#: recorded (FloorReport.clock; the plan then says it is not reproducible). On the bundled
#: gemini-ironwood-2027 every floor solve ends by its proof within 3,100 nodes, and every cost solve
#: but one by its gap at the root (the 2027Q2 node's run floor, Ironwood and Trillium side by side,
#: was 1.2-1.6% above its bound after 1,000-3,900 nodes: the 1% gap is out of reach in any time)
FLOOR_MAX_NODES = 5000
COST_MAX_NODES = 1000
#: a node fleet solve with no fleet after this many nodes ends there ('unknown', as at COST_MAX_NODES without
#: one): the bundled gemini-ironwood-2027's fleets are all found within the first 200 nodes (most at the root),
#: and its two fleet solves that found none ran 1,000 nodes for it (5-8 s of CPU each). A work limit too: the
#: same on any machine; a solve that finds a fleet sooner searches on to its gap or COST_MAX_NODES as before
FLEET_GIVE_UP_NODES = 200
#: a run-cost floor (a bound, and the free fleet when its incumbent meets the exact curves) also ends after this
#: many nodes in which its gap closed by less than 1% of itself (solvers/give_up.STALL_SHARE): the bundled tree's
#: 2027Q2 floor reached 5,270.58 USD/h at node 121 and 5,270.90 at its 1,000-node limit (5 s of CPU more)
RUN_FLOOR_STALL_NODES = 200
#: HiGHS options of the floor solves (pod floors and run-cost floors; a node fleet solve runs with HiGHS's
#: defaults, ``_HIGHS_DEFAULTS``), measured on the bundled gemini-ironwood-2027's 30 blocks (docs/benchmarks-history.md,
#: the bundled purchase example of 2026-12-07): HiGHS's root reduced-cost heuristic (a sub-MIP over the columns the root LP's reduced
#: costs fix) took a third of the run-cost floors' CPU; without it the root-chain floors end sooner and cheaper
#: (2027Q1 4,850 against 4,861 USD/h, 2027Q2 5,331 against 5,349), but the 2027Q3 node fleets found dearer fleets
FLOOR_HIGHS_OPTIONS = {"mip_heuristic_run_root_reduced_cost": False}
_HIGHS_DEFAULTS = {"mip_heuristic_run_root_reduced_cost": True}
#: also the floors of every region subset but one (with the total's); False: the total's alone, and
#: the no-good cuts find the regions' split (more rounds: the tests use it to exercise them)
SUBSET_FLOORS = True


@dataclass
class FloorReport:
    """What the decomposition found. ``lower_usd``/``upper_usd``: the bounds (USD, None
    when not reached); ``complete``: every node has a fleet at the master's pods and the
    model's variables hold that plan; ``infeasible``: nodes no fleet serves even with the
    most pods they can have (node -> those bounds; the tree is infeasible); ``why``: in
    words, what stopped it when not complete."""

    complete: bool = False
    lower_usd: float | None = None
    upper_usd: float | None = None
    rounds: int = 0
    nogoods: int = 0
    floors: int = 0
    snapshots: int = 0
    seconds: float = 0.0
    infeasible: dict = field(default_factory=dict)
    why: str = ""
    optimality_cuts: int = 0
    #: every cut so far is valid (False after a no-good cut on a node whose fleet solve ended
    #: without a fleet or a proof there is none: ``lower_usd`` is then the last bound before it)
    proven: bool = True
    unproven_nodes: int = 0
    #: when the master proved the tree infeasible (every cut valid): the first quarter whose nodes
    #: cannot all meet their floors, one :class:`Short` per floor the supply cannot reach there
    #: (``chip`` None: the floors of that quarter together, none alone)
    short: list = field(default_factory=list)
    #: it started from a given plan (``seed``: the risk-neutral plan of a CVaR tree)
    seeded: bool = False
    #: what the wall clock (the deadline) cut, in words, in the order met; empty when every solve ended
    #: by its own gap, proof or node limit and no deadline check changed a step: the report is then the
    #: same on any machine and under any load
    clock: list = field(default_factory=list)

    def clocked(self, what: str) -> None:
        """Record that the wall clock cut ``what`` (once)."""
        if what not in self.clock:
            self.clock.append(what)

    @property
    def gap(self) -> float | None:
        if self.lower_usd is None or self.upper_usd is None or self.upper_usd <= 0:
            return None
        return max(0.0, (self.upper_usd - self.lower_usd) / self.upper_usd)


def applies(p: PurchaseProblem) -> str | None:
    """None when the decomposition applies to ``p``, else why not (in words)."""
    if isinstance(p.spec.policy.unserved, PricedUnserved):
        return "unserved demand is priced (a node's cost is not its run cost alone)"
    if any(b.max_pods_per_quarter > 0 for b in p.spec.policy.burst):
        return "burst capacity is offered"
    return None


def floor_nodes(pm: PurchaseModel) -> list[int]:
    """The tree nodes whose pod floors the master needs, in the tree's order: every node but

    * those whose pods in service are fixed -- no order can be in service there (the first
      quarters, before any delivery): their floors bound constants (a node no fleet serves
      with them is found by its run-cost floor);
    * those another node of the same quarter *dominates*: the same orders in service (the
      same ancestors' order variables delivered and not yet retired, so the same pods in
      service in every plan -- a branching closer than the lead time), the same workload and
      at least the demand in every region. A node's fewest pods grow with its demand, so the
      dominating node's floors, on the same variables, are at least the dominated one's: theirs
      would be valid and redundant. (Were some not, the floors kept stay valid; the master
      would meet that node's need by a no-good cut instead.)

    On the bundled gemini-ironwood-2027 tree: 12 of the 30 nodes (the 2027Q1-Q2 nodes hold
    the installed fleet; the three 2027Q4 and three 2028Q1 nodes share the root's orders, and
    each first branch's three 2028Q3 and three 2028Q4 nodes their branch's), 48 pod-floor
    solves of 120."""
    tree = pm.tree
    groups: dict = {}
    for node in tree.nodes:
        anc = set(tree.ancestors_or_self(node.id))
        q = node.quarter
        live = frozenset(key for key, t in pm.terms.items()
                         if key[0] in anc and t.delivery <= q and (t.service_quarters is None or q < t.delivery + t.service_quarters))
        if live:
            groups.setdefault((q, live), []).append(node)

    def dominates(a, b) -> bool:
        return a.workload == b.workload and all(a.demand[r] >= b.demand[r] for r in b.demand)

    keep = []
    for nodes in groups.values():
        for n in nodes:
            if not any(o is not n and dominates(o, n) and (not dominates(n, o) or o.id < n.id) for o in nodes):
                keep.append(n.id)
    return sorted(keep)


#: one block build at a time (:meth:`_Node.ensure`)
_BUILD = threading.Lock()


class _Node:
    """One distinct node block (same ModelData, same pod bounds): its own snapshot model,
    written to HiGHS once (:class:`~fleetplan.solvers.persistent.PersistentHighs`); the
    objectives, the pod bounds and the prefill chords change in place."""

    def __init__(self, d, bound: dict):
        self.d = d
        self.bound = bound
        self.s = None  # the snapshot model and its HiGHS copy: built by ensure(), on the thread that first solves it
        self.hs = None
        self.floor: dict = {}  # (chip, regions) -> pods
        self.floors_done = False  # its pod floors found (a tree may not need them: floor_nodes)
        self.run_floor: float | None = None  # USD/h
        self.fleets: dict = {}  # pods tuple -> (USD/h, values, chords, proven USD/h) or None (no fleet)
        self.free_fleet = None  # the run floor's fleet when it meets the exact curves: (pods it needs, _fleet's record)
        self.clocked: set = set()  # 'floors' and the pods tuples whose result a solve cut by the wall clock gave
        self._names: dict = {}  # id of a variable of the snapshot block (which holds it) -> its name relative to the block

    def name(self, v) -> str:
        """``v``'s name relative to the snapshot block (Pyomo's ``getname``, ~17 us a call),
        each variable's computed once: a fleet record names all ~1,400 variables of a
        Gemini-scale block, a started solve looks every column's up, and a block records
        and starts several fleets."""
        got = self._names.get(id(v))
        if got is None:
            got = self._names[id(v)] = v.getname(fully_qualified=True, relative_to=self.s.b)
        return got

    def values(self) -> dict:
        """{name relative to the snapshot block: value} of every variable of the block."""
        return {self.name(v): v.value for v in self.s.b.component_data_objects(pyo.Var)}

    def ensure(self) -> None:
        """Build the block's snapshot model and write it to HiGHS, once. One build at a time
        (``_BUILD``): a build is pure Python and holds the GIL, so on the worker threads it
        overlaps the other blocks' HiGHS solves (which release it) instead of preceding them
        all (30 Gemini-scale blocks: ~8.5 s, ~0.2 s of it the sizing families, the rest the
        MPS write and read)."""
        if self.hs is not None:
            return
        with _BUILD:
            if self.hs is not None:
                return
            s = pyo.ConcreteModel()
            s.b = pyo.Block()
            add_sizing_families(s.b, self.d)
            for (r, k), ub in self.bound.items():
                s.b.v_new_pods[r, k].setub(ub)
            for v in shortfall_vars(s.b):
                v.fix(0.0)
            s.obj = pyo.Objective(expr=sum(s.b.cost_terms), sense=pyo.minimize)
            self.s = s
            self.hs = PersistentHighs(s)
            self.give_up = GiveUp(self.hs.h)

    def solve(self, expr, opts: SolveOptions, max_nodes: int, give_up: int | None = None, stall: int | None = None,
              highs: dict | None = None, start: dict | None = None):
        """Minimise ``expr`` to ``opts``'s gap or ``max_nodes`` nodes; ``give_up``: also stop,
        as a work limit, after that many nodes without a solution, ``stall``: after that many in
        which the gap hardly closed (:class:`~fleetplan.solvers.give_up.GiveUp`); ``highs``: HiGHS
        options of this solve (``FLOOR_HIGHS_OPTIONS``; the others at ``_HIGHS_DEFAULTS``);
        ``start``: variable values by name (a fleet record's), offered as the first incumbent."""
        for k, v in (_HIGHS_DEFAULTS | (highs or {})).items():
            self.hs.h.setOptionValue(k, v)
        self.hs.set_objective(expr)
        self.give_up.start(give_up, stall)
        col = None if start is None else self.hs.column_values(lambda v: start.get(self.name(v), 0.0))
        res = self.hs.solve(opts, max_nodes=max_nodes, start=col)
        if col is not None and res.has_incumbent and abs(pyo.value(expr) - res.objective) > 1e-6 * max(1.0, abs(res.objective)):
            # seen with highspy 1.16 (solvers/highs.py): after setSolution HiGHS can report its optimum while its
            # solution is still the start offered; solve again without it
            return self.solve(expr, opts, max_nodes, give_up, stall, highs)
        if self.give_up.fired:  # HiGHS says 'interrupted', which reads as the clock: it was the work rule
            res = replace(res, termination="work_limit", solution_status=f"no solution in {give_up} branch-and-bound nodes" if not res.has_incumbent
                          else f"the gap closed by less than {STALL_SHARE:.0%} of itself in {stall} branch-and-bound nodes")
        return res

    def pods_ub(self, pods: dict) -> None:
        for (r, k), v in pods.items():
            self.hs.set_bounds(self.s.b.v_new_pods[r, k], 0, v)

    def chords_moved(self) -> None:
        self.hs.update_rows(self.s.b.c_prefill_ttft[key] for key in self.s.b.PREFILL_KEYS)


def _workers(jobs: int) -> int:
    """Threads for ``jobs`` independent block solves: one per core, at most one per job."""
    return max(1, min(jobs, os.cpu_count() or 1))


def _in_parallel(fn: Callable, items: list, nodes: list, workers: int) -> list:
    """``[fn(item) for item in items]`` on ``workers`` threads. Ctrl-C or SIGTERM stops every
    block's HiGHS (:func:`~fleetplan.solvers.base.run_interruptible` in the calling thread)
    and is raised once the threads have returned; items not started are then skipped."""
    stopped = threading.Event()

    def run() -> list:
        if workers <= 1:
            return [None if stopped.is_set() else fn(it) for it in items]
        with ThreadPoolExecutor(workers, thread_name_prefix="fleetplan-floors") as ex:
            return list(ex.map(lambda it: None if stopped.is_set() else fn(it), items))

    def stop() -> None:
        stopped.set()
        for b in nodes:
            if b.hs is not None:
                b.hs.cancel()

    return run_interruptible(run, stop)


def _guard(deadline: float | None) -> float | None:
    """One block solve's wall-clock limit (s): what is left to the deadline (None: none), the
    outer guard only -- the solve ends by its gap, its proof or its node limit
    (FLOOR_MAX_NODES, COST_MAX_NODES) first whenever the time suffices, so its result is the
    same on any machine; a solve the guard ends is recorded as cut by the clock."""
    if deadline is None:
        return None
    return max(0.01, deadline - time.perf_counter())


def _clocked(res) -> bool:
    """The solve was ended by the wall clock (its time limit or the watchdog), not by its own criteria."""
    return res.termination == "time_limit"


@dataclass
class _Run:
    """What the decomposition's steps share (:func:`floor_decomposition`): the problem and its
    built tree, the node blocks (``blocks``: node id -> block; ``distinct``: each block once),
    the (region, chip) keys of a pod vector, the orderable (region, chip) pairs, the options,
    the deadline (:func:`time.perf_counter` s, None: none), the report being filled and the
    progress callback."""

    p: PurchaseProblem
    pm: PurchaseModel
    blocks: dict
    distinct: list
    keys: list
    orderable: list
    opts: SolveOptions
    deadline: float | None
    rep: FloorReport
    say: Callable[[str], None]


def floor_decomposition(p: PurchaseProblem, pm: PurchaseModel, opts: SolveOptions, deadline: float | None,
                        cache: dict | None = None, progress: Callable[[str], None] | None = None,
                        seed: dict | None = None) -> FloorReport:
    """Run the decomposition on the built tree ``pm`` (module docstring); on success every
    variable of ``pm.m`` holds the plan (orders, pods in service, each block's fleet and
    prefill chords) and ``pm.m.c_purchase_floor`` holds the floors as valid inequalities.

    Args:
        opts: the MIP gap is each node fleet's and the decomposition's target; the time
            limit is not read (``deadline``, a :func:`time.perf_counter` timestamp, bounds
            every solve; the decomposition may use all of it).
        cache: shared between the trees of one run (the recourse problem, the mean
            forecast, the wait-and-see paths): node blocks of equal ModelData and pod
            bounds keep their floors and fleets.
        progress: called with a status line per phase.
        seed: a plan of the same tree to start from, ``{"orders": {(n, r, k): pods}, "pods":
            {(n, r, k): pods in service}}`` (the risk-neutral plan of a CVaR tree): its node
            fleets are found (or read from ``cache``) and it is the incumbent before the first
            master solve, so a master bound within the gap of it ends the decomposition there.
    Returns: :class:`FloorReport`. Raises nothing (a solve that fails leaves the report
    incomplete, with ``why``).
    """
    # the whole time left: on a Gemini-scale tree HiGHS finds no plan of the tree in what a share of it leaves
    # (a newcomer's run with --time-limit 90 ended with none at 60%); it gets what the decomposition does not use
    t0 = time.perf_counter()
    say = progress or (lambda _m: None)
    rep = FloorReport()
    m, tree = pm.m, pm.tree
    regions, chips = sorted(p.base.regions), sorted(p.base.chips)
    orderable = sorted({(t.region, t.chip) for t in p.orders})
    blocks, distinct = _node_blocks(p, pm, regions, chips, cache)
    # 1. floors, the node blocks on parallel threads
    _find_floors(pm, blocks, distinct, regions, orderable, opts, deadline, rep, say)
    if rep.why:
        rep.seconds = time.perf_counter() - t0
        return rep
    floor_rows = add_floor_rows(m, blocks, rep)
    # 2-3. master and nodes
    open_master(p, m, tree, blocks)
    run = _Run(p, pm, blocks, distinct, [(r, k) for r in regions for k in chips], orderable, opts, deadline, rep, say)
    best = None  # (the objective USD: expected cost, or the risk objective; orders, pods, fleets)
    if seed is not None:
        best = _seed_plan(run, seed)
        rep.seeded = best is not None
    try:
        best = _master_rounds(run, floor_rows, best)
    finally:
        close_master(m)
        rep.seconds = time.perf_counter() - t0
    if best is None:
        rep.why = rep.why or "no plan in the time"
        return rep
    _write_plan(p, pm, best, regions, chips)
    rep.upper_usd = float(pyo.value(m.obj_expected_cost_usd))
    rep.complete = True
    rep.seconds = time.perf_counter() - t0
    return rep


def _node_blocks(p: PurchaseProblem, pm: PurchaseModel, regions: list, chips: list, cache: dict | None) -> tuple[dict, list]:
    """Each node's block (``{node id: _Node}``) and the distinct blocks: nodes of equal ModelData
    and pod bounds share one block, kept in ``cache`` across the trees of a run."""
    store = (cache if cache is not None else {}).setdefault(FLOOR_CACHE_KEY, {})
    blocks: dict[int, _Node] = {}
    for node in pm.tree.nodes:
        bound = {(r, k): pods_upper_bound(p, pm.tree, node.id, r, k) for r in regions for k in chips}
        key = (id(pm.data[node.id]), tuple(sorted(bound.items())))
        if key not in store:
            store[key] = _Node(pm.data[node.id], bound)
        blocks[node.id] = store[key]
    return blocks, list({id(b): b for b in blocks.values()}.values())


def _find_floors(pm: PurchaseModel, blocks: dict, distinct: list, regions: list, orderable: list, opts: SolveOptions,
                 deadline: float | None, rep: FloorReport, say: Callable[[str], None]) -> None:
    """Step 1: each block's pod floors (for the nodes :func:`floor_nodes` picks) and run-cost
    floor not found yet, on parallel threads (HiGHS runs outside the GIL; one block per thread
    at a time). A block that fails sets ``rep.why`` (and ``rep.infeasible`` when no fleet
    serves it); a block cut short loses its partial floors, to be done again by a later tree."""
    ochips = sorted({k for _r, k in orderable})
    subsets = [tuple(regions)] + (list(itertools.combinations(regions, len(regions) - 1)) if len(regions) >= 2 and SUBSET_FLOORS else [])
    want = {id(blocks[n]) for n in floor_nodes(pm)}
    todo = [b for b in distinct if b.run_floor is None or (id(b) in want and not b.floors_done)]
    per_floors = sum(1 for k in ochips for sub in subsets if any((r, k) in orderable for r in sub))  # pod-floor solves of a block
    solves = sum((b.run_floor is None) + per_floors * (id(b) in want and not b.floors_done) for b in todo)
    workers = _workers(len(todo))
    if todo:
        say(f"pod floors: {len(todo)} node blocks, {solves} solves on {workers} threads")
    got = _in_parallel(lambda b: _block_floors(b, id(b) in want, ochips, subsets, orderable, opts, deadline), todo, distinct, workers)
    rep.snapshots += solves
    for b, why in zip(todo, got):
        if why == "infeasible":
            rep.infeasible.update({n: dict(b.bound) for n, bb in blocks.items() if bb is b})
            rep.why = "a node no fleet serves with the most pods it can have"
        elif why is not None and not rep.why:
            rep.why = "the time limit passed while finding the pod floors" if why == "time" else why
        if why == "time" or (why is not None and why.endswith("(time_limit))")):
            rep.clocked("the pod floors (the time limit passed before they were all found)")
    for node in pm.tree.nodes:  # floors found now or by an earlier tree of this run, in the tree's order
        if "floors" in blocks[node.id].clocked:
            rep.clocked(f"the pod floors of node {node.label} (a floor or run-cost floor solve stopped by the time limit)")
    if rep.why:
        for b in todo:  # a block cut short is done again from the start by a later tree
            if not b.floors_done:
                b.floor.clear()


def _block_floors(b: _Node, wanted: bool, ochips: list, subsets: list, orderable: list, opts: SolveOptions,
                  deadline: float | None) -> str | None:
    """One block's floors (its pod floors when ``wanted``, then its run-cost floor); None, or
    why it stopped ("time", "infeasible", or a sentence)."""
    if deadline is not None and time.perf_counter() >= deadline:
        return "time"
    b.ensure()
    if wanted and not b.floors_done:
        why = _pod_floors(b, ochips, subsets, orderable, opts, deadline)
        if why is not None:
            return why
    if b.run_floor is None:
        return _run_floor(b, opts, deadline)
    return None


def _pod_floors(b: _Node, ochips: list, subsets: list, orderable: list, opts: SolveOptions, deadline: float | None) -> str | None:
    """The block's pod floors: for each orderable chip and region subset, the fewest pods in
    service (the MIP's bound, rounded up) any fleet of the block needs there."""
    for k in ochips:
        for sub in subsets:
            if not any((r, k) in orderable for r in sub):
                continue
            if deadline is not None and time.perf_counter() >= deadline:
                return "time"
            res = b.solve(sum(b.s.b.v_new_pods[r, k] for r in sub), replace(opts, threads=1, mip_gap=1e-4, time_limit_s=_guard(deadline)),
                          FLOOR_MAX_NODES, highs=FLOOR_HIGHS_OPTIONS)
            if res.termination == "infeasible":
                return "infeasible"
            if res.bound is None or not math.isfinite(res.bound):
                return f"a pod floor's solve ended without a bound ({res.termination})"
            if _clocked(res):
                b.clocked.add("floors")  # a weaker floor than its node limit gives, by how far the clock let it go
            b.floor[(k, sub)] = max(0, math.ceil(res.bound - 1e-6))
    b.floors_done = True
    return None


def _run_floor(b: _Node, opts: SolveOptions, deadline: float | None) -> str | None:
    """The block's run-cost floor (USD/h, the MIP's bound at the most pods); its incumbent, when
    it serves every pool, is kept as the fleet of any pods it fits in (``free_fleet``)."""
    res = b.solve(sum(b.s.b.cost_terms), replace(opts, threads=1, time_limit_s=_guard(deadline)), COST_MAX_NODES, None, RUN_FLOOR_STALL_NODES, highs=FLOOR_HIGHS_OPTIONS)
    if res.termination == "infeasible":
        return "infeasible"
    if res.bound is None or not math.isfinite(res.bound):
        return f"a node's run-cost floor ended without a bound ({res.termination})"
    if _clocked(res):
        b.clocked.add("floors")
    b.run_floor = float(res.bound)
    s = b.s.b
    if res.has_incumbent and (not hasattr(s, "PREFILL_KEYS") or not violated_pools(s, b.d)):
        b.free_fleet = (pods_needed(s, b.d), (float(res.objective), b.values(),
                        {key: int(pyo.value(s.p_chord_k[key])) for key in getattr(s, "PREFILL_KEYS", [])}, b.run_floor))
    return None


def _master_rounds(run: _Run, floor_rows: list, best):
    """Steps 2-3: solve the master, find the node fleets at its pods, cut, until the master's
    bound is within the gap of the best plan, no round adds a cut, or a limit passes. Returns
    the best plan (objective USD, orders, pods, fleets) or None; the reason for stopping short
    is in ``run.rep``."""
    m, tree, blocks, keys = run.pm.m, run.pm.tree, run.blocks, run.keys
    opts, deadline, rep, say = run.opts, run.deadline, run.rep, run.say
    gap = float(opts.mip_gap)
    seen: set = set()
    nogood_rows: list = []  # (constraint, node)
    while rep.rounds < MAX_ROUNDS:
        rep.rounds += 1
        say(f"pod floors: master {rep.rounds} ({rep.nogoods} no-good and {rep.optimality_cuts} cost cuts)")
        left = None if deadline is None else max(0.5, deadline - time.perf_counter())
        mres = solve_highs(m, replace(opts, mip_gap=1e-9, time_limit_s=left), warm_start=False)
        if _clocked(mres):
            rep.clocked(f"master solve {rep.rounds} (stopped by the time limit)")
        if mres.termination in ("infeasible", "infeasible_or_unbounded"):
            rep.why = "no orders meet every node's pod floors and no-good cuts (with the orders fixed in this tree)"
            if rep.proven:  # every floor and cut is valid: the tree is infeasible; say where first
                say("pod floors: the tree is infeasible; finding the first quarter that cannot be served")
                rep.short = first_short(m, tree, floor_rows, nogood_rows, opts, deadline)
            break
        if not mres.has_incumbent or mres.bound is None:
            rep.why = f"the orders master ended without a plan ({mres.termination})"
            break
        if rep.proven:
            rep.lower_usd = max(rep.lower_usd or -math.inf, float(mres.bound))
        if best is not None and (best[0] - rep.lower_usd) <= gap * best[0]:
            break
        pods = {key: int(round(pyo.value(m.v_pods_in_service[key]))) for key in m.STOCK}
        order_usd = {n: float(pyo.value(m.e_order_cost_usd[n])) for n in m.NODES}
        seen_before = set(seen)
        _node_fleets(run, pods, f"round {rep.rounds}")
        late = deadline is not None and time.perf_counter() >= deadline  # a fleet not found may have been cut by the clock
        bad, fleets, cut = cut_round(m, tree, blocks, keys, run.orderable, pods, seen, nogood_rows, late, rep)
        new_cuts = cut + sum(1 for n in bad if (n, tuple(pods[(n, r, k)] for (r, k) in keys)) not in seen_before)
        if not bad:
            cost = plan_objective(run.p, tree, order_usd, fleets)
            if best is None or cost < best[0]:
                best = (cost, {key: pyo.value(m.v_order_pods[key]) for key in m.ORDERS}, pods, fleets)
            if (best[0] - rep.lower_usd) <= gap * best[0]:
                break
        if late:
            rep.why = "the time limit passed while solving the node fleets"
            rep.clocked(f"the master's rounds after round {rep.rounds} (the time limit passed while solving its node fleets)")
            break  # a round whose fleets were all found is kept (above), even past the deadline
        if not new_cuts:
            break  # the master can only propose what it has: its plan stands
    else:
        rep.why = f"stopped after {MAX_ROUNDS} master solves"
    return best


def _write_plan(p: PurchaseProblem, pm: PurchaseModel, best: tuple, regions: list, chips: list) -> None:
    """Set every variable of the tree to the best plan: orders (and their on/off), pods in
    service, each node block's fleet and prefill chords (and the CVaR's variables)."""
    m = pm.m
    _cost, orders, pods, fleets = best
    for key, v in orders.items():
        if not m.v_order_pods[key].fixed:
            m.v_order_pods[key].set_value(int(round(v)))
    for key, v in pods.items():
        m.v_pods_in_service[key].set_value(v)
    for key in m.SEMI:
        if not m.v_order_on[key].fixed:
            m.v_order_on[key].set_value(1 if pyo.value(m.v_order_pods[key]) > 0.5 else 0)
    for n in m.NODES:
        blk, d = m.node[n], pm.data[n]
        _c, vals, chords, _beta = fleets[n]
        for key, k in chords.items():
            set_chord(blk, d, key, k)
        for v in blk.component_data_objects(pyo.Var):
            if v.fixed:
                continue
            val = vals.get(v.getname(fully_qualified=True, relative_to=blk))
            v.set_value(val if val is not None else (0.0 if v.lb is None or v.lb <= 0 else v.lb), skip_validation=True)
        for r in regions:
            for k in chips:
                blk.v_new_pods[r, k].set_value(pods[(n, r, k)], skip_validation=True)
    if isinstance(p.spec.policy.risk, CVaRRisk):
        settle_cvar(m, pm.tree, p.spec.policy.risk.alpha)


def _node_fleets(run: _Run, pods: dict, what: str) -> None:
    """Find each node's cheapest fleet at ``pods`` in service (``pods[(n, r, k)]``) that its
    block has not solved yet, the blocks on parallel threads; each lands in
    ``run.blocks[n].fleets``; ``what`` names the plan in the progress line."""
    tree, blocks, keys = run.pm.tree, run.blocks, run.keys
    want: dict[int, list] = {}
    for node in tree.nodes:
        b = blocks[node.id]
        x = tuple(pods[(node.id, r, k)] for (r, k) in keys)
        if x not in b.fleets and x not in want.setdefault(id(b), [b]):
            want[id(b)].append(x)
    jobs = [w for w in want.values() if len(w) > 1]
    if not jobs:
        return
    run.say(f"pod floors: {what}, {sum(len(w) - 1 for w in jobs)} node fleets on {_workers(len(jobs))} threads")

    def fleets_of(w: list) -> None:
        b = w[0]
        for x in w[1:]:
            b.fleets[x] = _fleet(b, dict(zip(keys, x)), run.opts, run.deadline)

    _in_parallel(fleets_of, jobs, run.distinct, _workers(len(jobs)))
    run.rep.snapshots += sum(len(w) - 1 for w in jobs)


def _seed_plan(run: _Run, seed: dict):
    """The decomposition's first incumbent from ``seed`` (:func:`floor_decomposition`): (its
    objective USD, orders, pods, fleets), or None when a node has no fleet found at its pods."""
    p, pm, blocks, keys, rep = run.p, run.pm, run.blocks, run.keys, run.rep
    m, tree = pm.m, pm.tree
    pods = {key: int(seed["pods"][key]) for key in m.STOCK}
    _node_fleets(run, pods, "the starting plan")
    fleets = {}
    for node in tree.nodes:
        x = tuple(pods[(node.id, r, k)] for (r, k) in keys)
        got = blocks[node.id].fleets.get(x)
        if x in blocks[node.id].clocked:
            rep.clocked(f"the fleet of node {node.label} in the starting plan (its solve stopped by the time limit)")
        if got is None or got == "unknown":
            return None
        fleets[node.id] = got
    orders = {key: float(seed["orders"].get(key, 0)) for key in m.ORDERS}
    order_usd = {n.id: sum(t.cost_usd_per_pod * orders[key] for key, t in pm.terms.items() if key[0] == n.id) for n in tree.nodes}
    return plan_objective(p, tree, order_usd, fleets), orders, pods, fleets


def _earlier_fleet(b: _Node, pods: dict):
    """The cheapest fleet the block has found so far (at other pods in service) that fits in
    ``pods`` (its new pods at most those), or None: a fleet at the new pods too, under its
    own chords, so the node fleet solve starts from it (the master's later rounds move the
    pods a little; the fleet solves found such fleets only after hundreds of nodes)."""
    s = b.s.b
    names = {key: b.name(s.v_new_pods[key]) for key in pods}
    fits = [f for f in b.fleets.values() if isinstance(f, tuple) and all(f[1].get(names[key], 0.0) <= v + 1e-6 for key, v in pods.items())]
    return min(fits, key=lambda f: f[0], default=None)


def _fleet(b: _Node, pods: dict, opts: SolveOptions, deadline: float | None):
    """The block's cheapest fleet with at most ``pods`` in service: (USD/h, variable values
    by name, prefill chords); None when no fleet serves the node with them; 'unknown' when
    the solve ended without either. Prefill chords are refined until the exact queueing
    curves hold (at most MAX_REFINEMENTS solves; the cheapest exact one is kept)."""
    s = b.s.b
    if b.free_fleet is not None and all(v <= pods[key] for key, v in b.free_fleet[0].items()):
        # the run floor's fleet (cheapest within the MIP gap with the most pods, exact curves met) fits in ``pods``:
        # fewer pods allow no cheaper fleet than its bound, so it is this fleet too, to the same gap, without a solve
        return b.free_fleet[1]
    b.pods_ub(pods)
    chords = hasattr(s, "PREFILL_KEYS")
    x = tuple(pods.values())
    start = _earlier_fleet(b, pods)
    if start is not None:  # its chords, under which it is a fleet of the block
        for key, k in start[2].items():
            set_chord(s, b.d, key, k)
        b.chords_moved()
    try:
        best = None
        beta = b.run_floor
        for _ in range(MAX_REFINEMENTS):
            res = b.solve(sum(s.cost_terms), replace(opts, threads=1, time_limit_s=_guard(deadline)), COST_MAX_NODES, FLEET_GIVE_UP_NODES,
                          start=None if start is None else start[1])
            start = None  # offered to the first solve only: a refinement's chords cut the fleet that moved them
            if _clocked(res):
                b.clocked.add(x)
            if res.bound is not None and math.isfinite(res.bound):
                beta = max(beta, float(res.bound))  # each solve's bound holds for the block under its chords (a chord is conservative)
            if res.termination in ("infeasible", "infeasible_or_unbounded") and best is None:
                # no fleet under these chords; a chord is conservative (below the exact curve off its two points), so this
                # rests on the chords (docs/benchmarks.md, 'Purchasing', the bundled example to 1%: the caveat on the proven bound)
                return None
            if not res.has_incumbent:
                break
            if not chords or not violated_pools(s, b.d):
                # the first fleet that meets the exact curves (moving its chords on may find a cheaper one; the
                # lower bound does not rest on it)
                best = (float(res.objective), b.values(),
                        {key: int(pyo.value(s.p_chord_k[key])) for key in (s.PREFILL_KEYS if chords else [])}, beta)
                break
            if not chords or move_chords(s, b.d) == 0:
                break
            b.chords_moved()
        return best if best is not None else "unknown"
    finally:
        b.pods_ub(b.bound)
