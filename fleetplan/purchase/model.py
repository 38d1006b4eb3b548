r"""The purchase model: the deterministic equivalent of the multi-stage stochastic MIP.

Every scenario-tree node n (quarter q(n), path probability P_n) holds a Pyomo Block
``m.node[n]`` built by the sizing model's own constraint families
(:func:`fleetplan.models.sizing.build.add_sizing_families`, never a copy): slices, traffic,
failover, warm pool, decode, prefill TTFT or replicas, unserved. The block's ModelData is
the base instance at the node's demand with installed pods 0 and ``available_new`` the
most pods that can be in service there, so the snapshot's pod variable ``v_new_pods``
carries the pods in service, tied to the inventory below (``c_purchase_pods``); its
per-pod cost is zeroed (orders are priced by the supply instead).

Sets: NODES; ORDERS = (n, r, k) with chip k orderable in region r in quarter q(n) and
delivered within the horizon; STOCK = (n, r, k) for every region and chip.

.. math::

   v\_pods\_in\_service_{n,r,k} = v\_pods\_in\_service_{parent(n),r,k}
       + \sum_{a \preceq n:\, q(a) + L_{a,r,k} = q(n)} v\_order\_pods_{a,r,k}
       - \sum_{a \preceq n:\, q(a) + L_{a,r,k} + T_{a,r,k} = q(n)} v\_order\_pods_{a,r,k}
       + I_{r,k,q(n)} - I_{r,k,q(n)-1}                                \quad (c\_purchase\_inventory)

(a \preceq n: a is n or an ancestor of n; L the lead time, T the committed term, infinite
for a capital buy; I the starting fleet still in service, so its retirements are the
drops of I; the root has no parent term and I_{-1} = 0), with
:math:`v\_pods\_in\_service \ge 0`.

.. math::

   m.node[n].v\_new\_pods_{r,k} = v\_pods\_in\_service_{n,r,k}        \quad (c\_purchase\_pods)

   \sum_{(a,r,k) \in ORDERS(e):\, a \preceq n,\, q(a) + L = q(n)} v\_order\_pods_{a,r,k} \le D_{e,q(n)}
                                                                       \quad (c\_purchase\_delivery\_cap)

   m_{a,r,k}\, v\_order\_on_{a,r,k} \le v\_order\_pods_{a,r,k} \le D_{a,r,k}\, v\_order\_on_{a,r,k}
                                                                       \quad (c\_purchase\_min\_order)

(D_e,q the supply entry e's delivery cap in quarter q, summed over its regions; the
binary exists only where the minimum order m exceeds 1). Non-anticipativity holds by
construction: one order variable and one sizing block per tree node, shared by every
scenario through it.

Objective (USD, discounted to the first quarter, expected over the tree):

.. math::

   \sum_{(n,r,k) \in ORDERS} P_n\, c_{n,r,k}\, v\_order\_pods_{n,r,k}
   + \sum_n P_n\, \delta_{q(n)}\, H \Big( \sum m.node[n].cost\_terms
       + \pi \sum_{(r,t,s)} w_s\, (\bar\imath_t + o)\, 3600 \cdot 10^{-6}\, v\_unserved_{n,r,t,s} \Big)

with c the discounted price of a pod (capital: price x delta of the order quarter;
committed: rate x chips per pod x H x the deltas of its term's quarters), delta_q =
(1 + rate)^{-q/4}, H = 2,191.5 hours per quarter, the block's cost terms its fleet's
chip-hours at the base instance's prices (USD/h) and its shed cost, pi the price of
unserved demand (USD per 1M tokens: prompt + output per request), w_s = 1 for the normal
scenario and event_weight / (loss scenarios) for a region loss (the weighting the shed
price uses). The fleet is sized for the quarter's peak and runs all quarter, so the
chip-hours and the unserved tokens are the peak hour's, every hour (an upper bound on the
unserved tokens). With the hard policy every shortfall variable is fixed at 0.

Burst (``policy.burst``): BURST = (n, r, k) for each chip k and region r an entry covers,
with :math:`0 \le v\_burst\_pods_{n,r,k} \le B_e` integer, summed over the entry's
regions :math:`\le B_e` per node (``c_purchase_burst_cap``), added to the pods the block
may use (``c_purchase_pods`` becomes ``v_new_pods = v_pods_in_service + v_burst_pods``)
and charged :math:`\delta_{q(n)} H\, \beta_e\, \text{chips per pod}\, v\_burst\_pods`
(beta the premium, USD per chip-hour) on top of the chip-hours of what runs.

Risk (``policy.risk`` cvar, ``--risk cvar:ALPHA:WEIGHT``): with C_s the sum of the node
costs on scenario s's path, the objective is

.. math::

   (1 - w)\, \sum_s p_s C_s + w \Big( \eta + \frac{1}{1 - \alpha} \sum_s p_s z_s \Big),
   \qquad z_s \ge C_s - \eta,\; z_s \ge 0,\; \eta \ge 0       \quad (c\_purchase\_cvar)

(Rockafellar and Uryasev 2000: at the optimum eta is the VaR_alpha and the bracket the
CVaR_alpha of the scenario costs; the (1 - w) E + w CVaR form of Shapiro, Dentcheva and
Ruszczynski, Lectures on Stochastic Programming, sec. 6.2). Never calls a solver.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import pyomo.environ as pyo

from fleetplan.deadline import TimeLimitReached, deadline_scope
from fleetplan.tables.derived import ModelData, build_model_data
from fleetplan.instance.io import parse_instance
from fleetplan.tables.cache import TableCache
from fleetplan.tables.store import DiskStore
from fleetplan.instance.schema import Instance
from fleetplan.interrupts import debug_pause
from fleetplan.models.sizing.build import add_sizing_families, shortfall_vars
from fleetplan.purchase.io import HOURS_PER_QUARTER, OrderTerms, PurchaseProblem
from fleetplan.purchase.schema import CVaRRisk, PricedUnserved
from fleetplan.purchase.tree import Tree

__all__ = ["allow_partial_service", "PurchaseModel", "TABLES_KEY", "build_purchase_model", "node_instance", "pods_upper_bound", "pods_needed", "burst_caps", "cvar", "cvar_eta", "risk_objective", "settle_cvar"]


@dataclass
class PurchaseModel:
    """The built model and what reading it back needs: ``data[n]`` the node's ModelData,
    ``terms[(n, r, k)]`` the order terms of each order variable."""

    m: pyo.ConcreteModel
    tree: Tree
    data: dict[int, ModelData]
    terms: dict[tuple[int, str, str], OrderTerms]
    notes: list[str] = field(default_factory=list)


def node_instance(base: Instance, demand: dict[str, float], pods: dict[tuple[str, str], tuple[int, int]], workload: dict | None = None) -> Instance:
    """The base instance at a node: each region's peak_rps x its demand multiplier, the
    node's workload shift (``workload``: fields of the base's ``workload`` replaced), pods
    per (region, chip) = (installed, available_new), no per-pod cost of its own (orders
    are priced by the supply). A region with no pod at all gets one available pod of its
    first chip so the instance is valid; the caller ties what may be used to the inventory.
    Raises InstanceError when the result is not a valid instance."""
    data = base.model_dump(mode="python", round_trip=True)
    data["workload"].update(workload or {})
    for k in data["chips"]:
        data["chips"][k]["new_pod_cost_per_hour_usd"] = 0.0
    for r, reg in data["regions"].items():
        reg["peak_rps"] = base.regions[r].peak_rps * demand[r]
        inv = {k: {"installed": pods.get((r, k), (0, 0))[0], "available_new": pods.get((r, k), (0, 0))[1]} for k in sorted(base.chips)}
        if not any(v["installed"] + v["available_new"] for v in inv.values()):
            inv[sorted(base.chips)[0]]["available_new"] = 1
        reg["pods"] = inv
    if not any(reg["peak_rps"] > 0 for reg in data["regions"].values()):
        # an instance needs some traffic; a quarter with none keeps a token rate the fleet must carry
        for reg in data["regions"].values():
            reg["peak_rps"] = 1e-6
    return parse_instance(data, f"{base.name} (purchase node)")


def pods_upper_bound(p: PurchaseProblem, tree: Tree, n: int, r: str, k: str) -> int:
    """Most pods of chip k that can be in service in region r at node n: the starting
    fleet still in service plus every delivery cap of the supply entry up to q(n)."""
    q = tree.nodes[n].quarter
    total = p.installed[(r, k)][q]
    entries = {t.entry for t in p.orders if t.region == r and t.chip == k and t.delivery <= q}
    for e in entries:
        total += sum(p.delivery_cap[(e, qq)] for qq in range(q + 1))
    return total


def pods_needed(blk, d: ModelData) -> dict[tuple[str, str], int]:
    """The pods of each (region, chip) the fleet a solved sizing block holds needs: the chips of its
    slices and warm slices there (at the variables' values, rounded) over the chips per pod, rounded
    up -- the least ``v_new_pods`` its pod rows (``c_fleet_pod_chips``, with no installed pods: a
    purchase node's block) allow at that fleet, whatever value the solve gave the pods themselves
    (they cost nothing in a node's block, so a solve may leave them at their bound). Raises
    ValueError for a block with the placement-aware pod families (pods hold slices through the flow
    there, not by chips alone)."""
    if hasattr(blk, "c_pods_service"):
        raise ValueError("pods_needed reads c_fleet_pod_chips alone; this block has the placement-aware pod families")
    out = {}
    for r in d.REGIONS:
        for k in d.CHIPS:
            c = sum(d.slices[c].chips * round(pyo.value(blk.v_slices[x, t, ro, c])) for (x, t, ro, c) in blk.POOLS if x == r and d.config_chip(c) == k)
            c += sum(d.slices[cc].chips * round(pyo.value(blk.v_warm[r, cc])) for cc in d.CONFIGS if d.config_chip(cc) == k)
            out[(r, k)] = math.ceil(c / d.p_pod_chips[k] - 1e-9)
    return out


def burst_caps(p: PurchaseProblem) -> dict[tuple[str, str], tuple[int, int]]:
    """(region, chip) -> (policy.burst entry index, most burst pods per quarter of that entry)."""
    out = {}
    for i, b in enumerate(p.spec.policy.burst):
        if b.max_pods_per_quarter > 0:
            for r in ([b.region] if b.region is not None else sorted(p.base.regions)):
                out[(r, b.chip)] = (i, b.max_pods_per_quarter)
    return out


def cvar(costs: list[float], probs: list[float], alpha: float) -> float:
    """CVaR_alpha of a discrete cost distribution (USD): min over eta of
    eta + E[(C - eta)+] / (1 - alpha) (Rockafellar and Uryasev 2000, eq. 3), the minimum
    attained at a cost value (the function is piecewise linear in eta with breaks there).
    Shapes: ``costs`` and ``probs`` the same length, probabilities summing to 1."""
    eta = cvar_eta(costs, probs, alpha)
    return eta + sum(pr * max(c - eta, 0.0) for c, pr in zip(costs, probs)) / (1.0 - alpha)


def cvar_eta(costs: list[float], probs: list[float], alpha: float) -> float:
    """The eta that attains :func:`cvar`'s minimum (USD; the VaR_alpha), at a cost value."""
    return min(costs, key=lambda eta: eta + sum(pr * max(c - eta, 0.0) for c, pr in zip(costs, probs)) / (1.0 - alpha))


def risk_objective(costs: list[float], probs: list[float], risk) -> float:
    """The objective ``policy.risk`` weighs the scenarios' discounted costs by (USD): the
    expectation, or with a :class:`~fleetplan.purchase.schema.CVaRRisk` (1 - weight) E + weight
    CVaR_alpha (:func:`cvar`; the mean-risk form of the model's objective, docs/purchase.md)."""
    expected = sum(c * q for c, q in zip(costs, probs))
    if not isinstance(risk, CVaRRisk):
        return expected
    return (1.0 - risk.weight) * expected + risk.weight * cvar(costs, probs, risk.alpha)


def settle_cvar(m: pyo.ConcreteModel, tree: Tree, alpha: float) -> None:
    """Set a CVaR model's ``v_cvar_eta`` and ``v_cvar_excess`` (USD) to what its scenario costs
    (``e_node_cost_usd`` at the variables' values) make optimal: eta at the minimising scenario
    cost (:func:`cvar_eta`, at least 0) and each scenario's excess over it. No-op without them."""
    if not hasattr(m, "v_cvar_eta"):
        return
    names = list(m.SCEN)
    costs = [sum(pyo.value(m.e_node_cost_usd[n]) for n in tree.scenarios[sn]) for sn in names]
    eta = max(cvar_eta(costs, [tree.scenario_probability(sn) for sn in names], alpha), 0.0)
    m.v_cvar_eta.set_value(eta)
    for sn, c in zip(names, costs):
        m.v_cvar_excess[sn].set_value(max(c - eta, 0.0))


#: the key of ``build_purchase_model``'s cache under which the nodes' shared table pieces live
TABLES_KEY = "tables"


def build_purchase_model(p: PurchaseProblem, tree: Tree | None = None, fixed_orders: dict[tuple[str, str], int] | None = None,
                         cache: dict | None = None, share_tables: bool = True, deadline: float | None = None,
                         progress: Callable[[str], None] | None = None) -> PurchaseModel:
    """Build the deterministic equivalent of ``p`` over ``tree`` (default: the problem's).

    Args:
        fixed_orders: (region, chip) -> pods ordered at the root, fixed (the EEV: the
            mean-forecast plan's first-stage orders); an order the tree cannot place
            (not orderable at the root) must be 0.
        cache: ModelData by node instance, shared between builds (candidate tables are
            the expensive part; equal nodes share them), and under :data:`TABLES_KEY` the
            :class:`~fleetplan.tables.cache.TableCache` of the pieces nodes of other
            demand share (decode tables, prefill service times and capacity curves: they
            do not read the regions).
        share_tables: False builds every node's tables from scratch (the same model,
            slower: what the tests compare the shared build against).
        deadline: a :func:`time.perf_counter` timestamp (s; None: none): checked before each
            node and inside its build (the candidate tables' and the sizing families' own
            checks, :func:`fleetplan.deadline.check`); once passed,
            :class:`~fleetplan.deadline.TimeLimitReached` naming the node ("building node
            k of N").
        progress: called with a status line before each node ("building node k of N ...").
    Orders at any node are fixed on the built model by
    :func:`fleetplan.purchase.solve.fix_node_orders` (the re-plan's and PH's).
    Returns: :class:`PurchaseModel`. Raises ValueError for a fixed order that is not
    offered, TimeLimitReached when ``deadline`` passes during the build.
    """
    tree = tree or p.tree
    cache = {} if cache is None else cache
    # the nodes' own cache, in memory and on the table cache's disk (off with FLEETPLAN_CACHE=0); without
    # sharing, no cache at all (not even the process's default)
    tables = cache.setdefault(TABLES_KEY, TableCache(DiskStore.from_env())) if share_tables else False
    m = pyo.ConcreteModel(name=f"purchase[{p.spec.name}]")
    m.NODES = pyo.Set(initialize=[n.id for n in tree.nodes], ordered=True)
    m.node = pyo.Block(m.NODES)
    burst = burst_caps(p)
    data = _add_node_blocks(p, tree, m, burst, cache, tables, deadline, progress)
    terms = _add_orders(p, tree, m, fixed_orders)
    anc = {n.id: tree.ancestors_or_self(n.id) for n in tree.nodes}
    _add_inventory(p, tree, m, terms, anc, burst)
    _add_delivery_caps(p, tree, m, terms, anc)
    hard = not isinstance(p.spec.policy.unserved, PricedUnserved)
    _add_costs(p, tree, m, terms, data, burst)
    _add_objective(p, tree, m)
    for n in m.NODES:
        if hard:
            for v in shortfall_vars(m.node[n]):
                v.fix(0.0)
        else:
            allow_partial_service(m.node[n])
    return PurchaseModel(m, tree, data, terms)


def _add_node_blocks(p: PurchaseProblem, tree: Tree, m, burst: dict, cache: dict, tables, deadline: float | None,
                     progress: Callable[[str], None] | None) -> dict[int, ModelData]:
    """Each node's sizing block ``m.node[n]`` (the sizing families on its ModelData, built or
    read from ``cache``); returns the ModelData by node. Every node has one pod bound per
    (region, chip) for the whole horizon (the most in service at any node plus the burst
    cap), so nodes of equal demand share their tables.
    Raises: TimeLimitReached naming the node when ``deadline`` passes."""
    base = p.base
    regions, chips = sorted(base.regions), sorted(base.chips)
    data: dict[int, ModelData] = {}
    most = {(r, k): max(pods_upper_bound(p, tree, n.id, r, k) for n in tree.nodes) + burst.get((r, k), (0, 0))[1] for r in regions for k in chips}
    total = len(tree.nodes)
    for i, node in enumerate(tree.nodes, start=1):
        phase = f"building node {i} of {total}"
        if progress is not None:
            progress(f"{phase} ({node.label}, {p.labels[node.quarter]})")
        debug_pause("purchase-build", phase)  # the signal tests' hook: a no-op unless FLEETPLAN_DEBUG_PAUSE=purchase-build
        if deadline is not None and time.perf_counter() >= deadline:
            raise TimeLimitReached(phase)
        pods = {key: (0, most[key]) for key in most}
        key = (tuple(sorted(node.demand.items())), tuple(sorted(pods.items())), repr(sorted(node.workload.items())))
        # the tables' and the families' own deadline checks see this build's deadline (a node's
        # first tables can take tens of seconds); the clocks: perf_counter here, monotonic there
        at = None if deadline is None else time.monotonic() + (deadline - time.perf_counter())
        try:
            with deadline_scope(at):
                if key not in cache:
                    cache[key] = build_model_data(node_instance(base, node.demand, pods, node.workload), tables=tables)
                d = cache[key]
                data[node.id] = d
                add_sizing_families(m.node[node.id], d)
        except TimeLimitReached:
            raise TimeLimitReached(phase) from None
    if deadline is not None and time.perf_counter() >= deadline:
        raise TimeLimitReached(f"building the tree's orders and inventory (after its {total} nodes)")
    return data


def _add_orders(p: PurchaseProblem, tree: Tree, m, fixed_orders: dict[tuple[str, str], int] | None) -> dict[tuple[int, str, str], OrderTerms]:
    """The orders (pods, integer, at most the delivery cap) each node can place, with the
    minimum order as a semi-continuous pair of rows; the root's ``fixed_orders`` fixed.
    Returns the order terms by (node, region, chip). Raises ValueError for a fixed order that
    is not offered."""
    terms: dict[tuple[int, str, str], OrderTerms] = {}
    for node in tree.nodes:
        for t in p.orders:
            if t.quarter == node.quarter:
                terms[(node.id, t.region, t.chip)] = t
    m.ORDERS = pyo.Set(initialize=sorted(terms), dimen=3, ordered=True)

    def cap_of(t: OrderTerms) -> int:
        return p.delivery_cap[(t.entry, t.delivery)]

    m.v_order_pods = pyo.Var(m.ORDERS, domain=pyo.NonNegativeIntegers, bounds=lambda _m, n, r, k: (0, cap_of(terms[(n, r, k)])))
    semi = [key for key, t in terms.items() if t.min_order_pods > 1 and cap_of(t) > 0]
    m.SEMI = pyo.Set(initialize=semi, dimen=3, ordered=True)
    m.v_order_on = pyo.Var(m.SEMI, domain=pyo.Binary)
    m.c_purchase_min_order_lo = pyo.Constraint(m.SEMI, rule=lambda _m, n, r, k: m.v_order_pods[n, r, k] >= terms[(n, r, k)].min_order_pods * m.v_order_on[n, r, k])
    m.c_purchase_min_order_hi = pyo.Constraint(m.SEMI, rule=lambda _m, n, r, k: m.v_order_pods[n, r, k] <= cap_of(terms[(n, r, k)]) * m.v_order_on[n, r, k])
    if fixed_orders is not None:
        for (r, k), v in fixed_orders.items():
            if (0, r, k) in terms:
                m.v_order_pods[0, r, k].fix(v)
            elif v:
                raise ValueError(f"cannot fix an order of {v} {k} pods in {r} at the root: not offered there")
    return terms


def _add_inventory(p: PurchaseProblem, tree: Tree, m, terms: dict, anc: dict, burst: dict) -> None:
    """Pods in service per (node, region, chip): the parent's plus deliveries, less terms that
    end, plus the installed base's change (``c_purchase_inventory``); the burst pods within
    their caps; and each node block's pods = pods in service + burst (``c_purchase_pods``)."""
    regions, chips = sorted(p.base.regions), sorted(p.base.chips)

    def flow(n: int, r: str, k: str) -> tuple[list, list]:
        """Order variables arriving at n and those whose term ends at n."""
        q = tree.nodes[n].quarter
        arrive, leave = [], []
        for a in anc[n]:
            t = terms.get((a, r, k))
            if t is None:
                continue
            if t.delivery == q:
                arrive.append(m.v_order_pods[a, r, k])
            if t.service_quarters is not None and t.delivery + t.service_quarters == q:
                leave.append(m.v_order_pods[a, r, k])
        return arrive, leave

    m.STOCK = pyo.Set(initialize=[(n.id, r, k) for n in tree.nodes for r in regions for k in chips], dimen=3, ordered=True)
    m.v_pods_in_service = pyo.Var(m.STOCK, domain=pyo.NonNegativeReals,
                                  bounds=lambda _m, n, r, k: (0, pods_upper_bound(p, tree, n, r, k)))

    def inventory(_m, n, r, k):
        node = tree.nodes[n]
        q = node.quarter
        arrive, leave = flow(n, r, k)
        start = p.installed[(r, k)][q] - (p.installed[(r, k)][q - 1] if q > 0 else 0)
        prev = m.v_pods_in_service[node.parent, r, k] if node.parent is not None else 0
        return m.v_pods_in_service[n, r, k] == prev + sum(arrive) - sum(leave) + start

    m.c_purchase_inventory = pyo.Constraint(m.STOCK, rule=inventory)
    m.BURST = pyo.Set(initialize=[(n.id, r, k) for n in tree.nodes for (r, k) in sorted(burst)], dimen=3, ordered=True)
    m.v_burst_pods = pyo.Var(m.BURST, domain=pyo.NonNegativeIntegers, bounds=lambda _m, n, r, k: (0, burst[(r, k)][1]))
    entries = sorted({(n.id, i) for n in tree.nodes for (i, _cap) in burst.values()})
    m.BURST_CAP = pyo.Set(initialize=entries, dimen=2, ordered=True)
    m.c_purchase_burst_cap = pyo.Constraint(m.BURST_CAP, rule=lambda _m, n, i: sum(
        m.v_burst_pods[n, r, k] for (r, k), (j, _c) in burst.items() if j == i) <= p.spec.policy.burst[i].max_pods_per_quarter)

    def pods(_m, n, r, k):
        extra = m.v_burst_pods[n, r, k] if (r, k) in burst else 0
        return m.node[n].v_new_pods[r, k] == m.v_pods_in_service[n, r, k] + extra

    m.c_purchase_pods = pyo.Constraint(m.STOCK, rule=pods)


def _add_delivery_caps(p: PurchaseProblem, tree: Tree, m, terms: dict, anc: dict) -> None:
    """Per node and supply entry, the pods delivered in its quarter (orders of the node and
    its ancestors) within the entry's delivery cap (``c_purchase_delivery_cap``)."""
    caps = []
    for node in tree.nodes:
        entries = sorted({t.entry for (a, _r, _k), t in terms.items() if a in anc[node.id] and t.delivery == node.quarter})
        caps += [(node.id, e) for e in entries]
    m.DELIVERY = pyo.Set(initialize=caps, dimen=2, ordered=True)

    def delivery(_m, n, e):
        q = tree.nodes[n].quarter
        return sum(m.v_order_pods[a, r, k] for (a, r, k), t in terms.items() if a in anc[n] and t.entry == e and t.delivery == q) <= p.delivery_cap[(e, q)]

    m.c_purchase_delivery_cap = pyo.Constraint(m.DELIVERY, rule=delivery)


def _add_costs(p: PurchaseProblem, tree: Tree, m, terms: dict, data: dict, burst: dict) -> None:
    """Each node's discounted costs (USD): orders, run (its block's USD/h x the quarter's
    hours), priced unserved demand (0 under the hard policy; region losses weighed by the
    failover event weight), burst premium; their sum and the probability-weighted expectation."""
    base = p.base
    policy = p.spec.policy.unserved
    hard = not isinstance(policy, PricedUnserved)
    prob = {n.id: n.probability for n in tree.nodes}
    m.e_order_cost_usd = pyo.Expression(m.NODES, rule=lambda _m, n: sum(terms[key].cost_usd_per_pod * m.v_order_pods[key] for key in terms if key[0] == n))

    def run_cost(_m, n):
        return p.discount(tree.nodes[n].quarter) * HOURS_PER_QUARTER * sum(m.node[n].cost_terms)

    m.e_run_cost_usd = pyo.Expression(m.NODES, rule=run_cost)

    def unserved_cost(_m, n):
        if hard:
            return 0.0
        b, d = m.node[n], data[n]
        S = {s.name: s for s in d.SCENARIOS}
        n_loss = max(sum(1 for s in d.SCENARIOS if s.kind == "loss"), 1)
        w = {sn: (1.0 if S[sn].kind == "normal" else base.failover.event_weight / n_loss) for sn in S}
        per_hour = policy.usd_per_1m_tokens * 3600 / 1e6 * sum(
            w[sn] * (d.p_mean_input_tokens[t] + d.p_output_tokens) * b.v_unserved_rps[r, t, sn] for (r, t, sn) in b.ACTIVE)
        return p.discount(tree.nodes[n].quarter) * HOURS_PER_QUARTER * per_hour

    m.e_unserved_cost_usd = pyo.Expression(m.NODES, rule=unserved_cost)

    def burst_cost(_m, n):
        premium = {(r, k): p.spec.policy.burst[i].premium_usd_per_chip_hour for (r, k), (i, _c) in burst.items()}
        return p.discount(tree.nodes[n].quarter) * HOURS_PER_QUARTER * sum(
            premium[(r, k)] * base.chips[k].chips_per_pod * m.v_burst_pods[nn, r, k] for (nn, r, k) in m.BURST if nn == n)

    m.e_burst_cost_usd = pyo.Expression(m.NODES, rule=burst_cost)
    m.e_node_cost_usd = pyo.Expression(m.NODES, rule=lambda _m, n: m.e_order_cost_usd[n] + m.e_run_cost_usd[n] + m.e_unserved_cost_usd[n] + m.e_burst_cost_usd[n])
    m.e_expected_cost_usd = pyo.Expression(expr=sum(prob[n] * m.e_node_cost_usd[n] for n in m.NODES))


def _add_objective(p: PurchaseProblem, tree: Tree, m) -> None:
    """The objective ``obj_expected_cost_usd``: the expected cost, or with ``policy.risk`` cvar
    (1 - w) E + w CVaR_alpha over the scenarios' costs, CVaR linearised after Rockafellar and
    Uryasev (eta + sum_s p_s z_s / (1 - alpha), z_s >= C_s - eta; ``c_purchase_cvar``)."""
    risk = p.spec.policy.risk
    if isinstance(risk, CVaRRisk):
        names = sorted(tree.scenarios)
        m.SCEN = pyo.Set(initialize=names, ordered=True)
        m.v_cvar_eta = pyo.Var(domain=pyo.NonNegativeReals)  # the VaR at the optimum: a scenario's cost, >= 0
        m.v_cvar_excess = pyo.Var(m.SCEN, domain=pyo.NonNegativeReals)
        m.c_purchase_cvar = pyo.Constraint(m.SCEN, rule=lambda _m, s: m.v_cvar_excess[s] >= sum(m.e_node_cost_usd[n] for n in tree.scenarios[s]) - m.v_cvar_eta)
        m.e_cvar_usd = pyo.Expression(expr=m.v_cvar_eta + sum(tree.scenario_probability(s) * m.v_cvar_excess[s] for s in names) / (1.0 - risk.alpha))
        objective = (1.0 - risk.weight) * m.e_expected_cost_usd + risk.weight * m.e_cvar_usd
    else:
        objective = m.e_expected_cost_usd
    m.obj_expected_cost_usd = pyo.Objective(expr=objective, sense=pyo.minimize)


def allow_partial_service(b) -> None:
    """Deactivate a node block's pool minimum (``c_fleet_min_slices``: a chosen shape has at
    least the slices that carry the pool's whole normal peak) when unserved demand is priced.
    The minimum is valid when every request must be served; with a shortfall allowed it is
    not, and in a purchase tree it is not even the snapshot's heuristic: a node's ModelData
    is built with the horizon's most pods (so nodes of equal demand share tables), so the
    snapshot's rule that drops the minimum where the pods cannot hold it never fires, and a
    quarter whose pods in service cannot carry the whole peak served nothing at all instead of
    what its pods can (the newcomer case: 2 pods that serve 32 of 40 requests/s left all 40
    unserved, tests/purchase/test_purchase_priced_partial.py)."""
    if hasattr(b, "c_fleet_min_slices"):
        b.c_fleet_min_slices.deactivate()
