"""The demand scenario tree: the three input forms (explicit tree, growth paths, sampled
fan) expanded into one list of nodes.

A node is one quarter's demand after the history above it. Node 0 is the root (the
first quarter); a node's children are the next quarter's branches; a scenario is a
root-to-leaf path, its probability the product of the conditional branch probabilities
on it. Decisions indexed by node are non-anticipative by construction: two scenarios
that share a node share its decisions. A branch of probability 0 is dropped (it weighs
nothing in the expected cost; with the hard policy it would still constrain the plan,
which is what a small positive probability is for).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fleetplan.errors import Problem
from fleetplan.purchase.schema import MAX_TREE_NODES, TREE_NODE_PEAK_MB, DemandTree, Fan, GrowthPaths, TreeNode

__all__ = ["Node", "Tree", "expand_demand", "mean_tree", "mean_workload", "path_tree", "PROBABILITY_TOLERANCE"]

#: Siblings' probabilities must sum to 1 within this.
PROBABILITY_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Node:
    """One tree node. ``quarter`` is the index into the horizon (0 = first); ``demand[r]``
    region r's demand as a multiplier of the base peak_rps; ``probability`` the path
    probability (product of the branch probabilities from the root); ``path`` the branch
    names from the root (empty for the root)."""

    id: int
    quarter: int
    parent: int | None
    probability: float
    demand: dict[str, float]
    path: tuple[str, ...]
    #: the base workload's fields this node replaces (input_mix as a list of {share, tokens},
    #: output_tokens, prefix_hit_rate), its own shift merged over its parent's; empty: the base's
    workload: dict = field(default_factory=dict)
    #: where the node's workload shift was given (a field path of the purchase file), for messages
    workload_source: str = ""

    @property
    def label(self) -> str:
        return "/".join(self.path) or "root"


@dataclass(frozen=True)
class Tree:
    """Nodes in breadth-first order (a parent before its children) and the scenarios:
    ``scenarios[name]`` = the node ids from the root to the leaf."""

    nodes: list[Node]
    scenarios: dict[str, list[int]]

    def ancestors_or_self(self, n: int) -> list[int]:
        out = []
        cur: int | None = n
        while cur is not None:
            out.append(cur)
            cur = self.nodes[cur].parent
        return out[::-1]

    def scenario_probability(self, name: str) -> float:
        return self.nodes[self.scenarios[name][-1]].probability

    def children(self, n: int) -> list[int]:
        return [x.id for x in self.nodes if x.parent == n]


def _too_big(path: str, nodes: int, scenarios: int | None, value: str = "") -> Problem:
    """The problem of a tree of more than :data:`MAX_TREE_NODES` nodes (``scenarios`` None:
    not counted, the expansion stopped at the cap)."""
    count = f"{nodes:,} nodes ({scenarios:,} scenarios)" if scenarios is not None else f"more than {nodes:,} nodes"
    need = f", so this one needs ~{nodes * TREE_NODE_PEAK_MB / 1000:,.0f} GB" if scenarios is not None else ""
    return Problem(path, f"the scenario tree has {count}; a tree is at most {MAX_TREE_NODES} nodes: the deterministic equivalent "
                         f"holds a sizing model per node, ~{TREE_NODE_PEAK_MB} MB of memory each at the solve's peak{need}. Branch in "
                         "fewer quarters or on fewer paths (3 paths branching in k quarters make 3^k scenarios).", value)


def _growth_size(n_paths: int, branch: list[int], nq: int) -> tuple[int, int]:
    """(nodes, scenarios) of growth paths ``n_paths`` wide branching at the quarter indices
    ``branch`` over ``nq`` quarters, counted without building them."""
    nodes, width = 0, 1
    for q in range(nq):
        if q in branch:
            width *= n_paths
        nodes += width
    return nodes, width


def _region_demand(value, regions: list[str], path: str, problems: list[Problem]) -> dict[str, float]:
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(regions))
        missing = sorted(set(regions) - set(value))
        if unknown:
            problems.append(Problem(path, f"unknown region(s) {unknown}; the base instance has {regions}.", str(unknown)))
        if missing:
            problems.append(Problem(path, f"no demand given for region(s) {missing}: give one multiplier per region, or one number for all.", str(sorted(value))))
        return {r: float(value.get(r, 0.0)) for r in regions}
    return {r: float(value) for r in regions}


def _shifted(parent: dict, shift) -> dict:
    """The parent's workload overrides with ``shift`` (a WorkloadShift or None) merged over them."""
    if shift is None:
        return parent
    out = dict(parent)
    for k, v in shift.model_dump(mode="python").items():
        if v is not None:
            out[k] = v
    return out


def _path_tree(start: dict[str, float], paths: list[tuple[str, float, list[float]]], n_quarters: int) -> Tree:
    """Root = the first quarter at ``start``; each path (name, probability, multiplier per
    quarter 1..) a chain of nodes branching from the root."""
    nodes = [Node(0, 0, None, 1.0, start, ())]
    scenarios: dict[str, list[int]] = {}
    if n_quarters == 1:
        return Tree(nodes, {"root": [0]})
    for name, p, mults in paths:
        if p <= 0:  # probability 0: nothing in expectation, not planned for
            continue
        ids = [0]
        parent = 0
        for i in range(1, n_quarters):
            n = Node(len(nodes), i, parent, p, {r: v * mults[i] for r, v in start.items()}, (name,))
            nodes.append(n)
            ids.append(n.id)
            parent = n.id
        scenarios[name] = ids
    # breadth-first order: by quarter, stable
    order = sorted(range(len(nodes)), key=lambda k: (nodes[k].quarter, k))
    remap = {old: new for new, old in enumerate(order)}
    nodes = [Node(remap[n.id], n.quarter, None if n.parent is None else remap[n.parent], n.probability, n.demand, n.path) for n in (nodes[k] for k in order)]
    return Tree(nodes, {s: [remap[i] for i in ids] for s, ids in scenarios.items()})


def _branching_tree(start: dict[str, float], paths: list[tuple[str, float, float]], branch: list[int], nq: int,
                    shifts: dict | None = None) -> Tree:
    """Growth paths (name, probability, growth per quarter) branching at the quarter indices
    ``branch``; before the first branching demand grows at the mean rate. ``shifts[name]``
    = (WorkloadShift, field path): the path's workload from each quarter it branches on."""
    shifts = shifts or {}
    mean = sum(p * g for _, p, g in paths)
    nodes = [Node(0, 0, None, 1.0, dict(start), ())]
    growth = {0: mean}
    frontier = [0]
    for q in range(1, nq):
        nxt = []
        for n in frontier:
            parent = nodes[n]
            kids = paths if q in branch else [(None, 1.0, growth[n])]
            for name, p, g in kids:
                shift, src = shifts.get(name, (None, "")) if name is not None else (None, "")
                node = Node(len(nodes), q, n, parent.probability * p, {r: v * (1.0 + g) for r, v in parent.demand.items()},
                            parent.path + ((name,) if name is not None else ()), _shifted(parent.workload, shift),
                            src if shift is not None else parent.workload_source)
                nodes.append(node)
                growth[node.id] = g
                nxt.append(node.id)
        frontier = nxt
    tree = Tree(nodes, {})
    return Tree(nodes, {nodes[n].label: tree.ancestors_or_self(n) for n in frontier})


def expand_demand(demand, labels: list[str], regions: list[str]) -> tuple[Tree | None, list[Problem]]:
    """Expand ``demand`` (a :class:`DemandTree`, :class:`GrowthPaths` or :class:`Fan`) over the
    quarters ``labels`` for the base instance's ``regions``.

    Returns (tree, problems); the tree is None when there are problems. Problems name the
    field path: probabilities that do not sum to 1 at a branching, a node whose quarter is
    not the one at its depth, branches that end before or run past the horizon (they
    disagree on the quarters), unknown or missing regions, too many nodes.
    """
    problems: list[Problem] = []
    nq = len(labels)
    if isinstance(demand, GrowthPaths):
        start = _region_demand(demand.start, regions, "demand.start", problems)
        total = math.fsum(p.probability for p in demand.paths)
        if abs(total - 1.0) > PROBABILITY_TOLERANCE:
            problems.append(Problem("demand.paths", f"the paths' probabilities must sum to 1 (fractions); they sum to {total:.6g}.",
                                    str([p.probability for p in demand.paths])))
        names = [p.name for p in demand.paths]
        if len(set(names)) != len(names):
            problems.append(Problem("demand.paths", "path names must be unique.", str(names)))
        branch = [1] if nq > 1 else []
        if demand.branch_at is not None:
            branch = []
            for i, q in enumerate(demand.branch_at):
                if q not in labels[1:]:
                    problems.append(Problem(f"demand.branch_at.{i}", f"a branching quarter is a quarter of the horizon after the first ({labels[1:2] or labels}...).", q))
                elif branch and labels.index(q) <= branch[-1]:
                    problems.append(Problem(f"demand.branch_at.{i}", "branching quarters ascend.", q))
                else:
                    branch.append(labels.index(q))
        if problems:
            return None, problems
        nodes, scenarios = _growth_size(sum(1 for p in demand.paths if p.probability > 0), branch, nq)
        if nodes > MAX_TREE_NODES:
            where = "demand.branch_at" if demand.branch_at is not None else "demand.paths"
            return None, [_too_big(where, nodes, scenarios, str(demand.branch_at if demand.branch_at is not None else len(demand.paths)))]
        shifts = {p.name: (p.workload, f"demand.paths.{i}.workload") for i, p in enumerate(demand.paths) if p.workload is not None}
        return _branching_tree(start, [(p.name, p.probability, p.growth_per_quarter) for p in demand.paths if p.probability > 0], branch, nq, shifts), []
    if isinstance(demand, Fan):
        start = _region_demand(demand.start, regions, "demand.start", problems)
        if problems:
            return None, problems
        nodes = 1 + demand.paths * max(nq - 1, 0)
        if nodes > MAX_TREE_NODES:
            return None, [_too_big("demand.paths", nodes, demand.paths if nq > 1 else 1, str(demand.paths))]
        rng = np.random.default_rng(demand.seed)
        z = rng.standard_normal((demand.paths, max(nq - 1, 0)))
        s = demand.volatility_per_quarter
        step = (1.0 + demand.growth_per_quarter) * np.exp(s * z - s * s / 2.0)
        width = len(str(demand.paths))
        paths = []
        for j in range(demand.paths):
            mult = [1.0] + [float(v) for v in np.cumprod(step[j])]
            paths.append((f"path{j + 1:0{width}d}", 1.0 / demand.paths, mult))
        return _path_tree(start, paths, nq), []
    assert isinstance(demand, DemandTree)
    nodes: list[Node] = []
    scenarios: dict[str, list[int]] = {}
    queue: list[tuple[TreeNode, str, int | None, float, tuple[str, ...], list[int]]] = [(demand.root, "demand.root", None, 1.0, (), [])]
    root = demand.root
    if root.probability is not None and abs(root.probability - 1.0) > PROBABILITY_TOLERANCE:
        problems.append(Problem("demand.root.probability", "the root has probability 1 (or omit it).", str(root.probability)))
    while queue:
        tn, path, parent, prob, names, ids = queue.pop(0)
        depth = 0 if parent is None else nodes[parent].quarter + 1
        if len(nodes) >= MAX_TREE_NODES:
            problems.append(_too_big("demand.root", MAX_TREE_NODES, None))
            break
        if depth >= nq:
            problems.append(Problem(path, f"this branch runs past the horizon's last quarter {labels[-1]}: the tree's branches disagree on the "
                                          f"quarters (every root-to-leaf path has exactly {nq} nodes, one per quarter).", ""))
            continue
        if tn.quarter is not None and tn.quarter != labels[depth]:
            problems.append(Problem(f"{path}.quarter", f"a node at depth {depth} is quarter {labels[depth]}: the branches disagree on the quarters.", tn.quarter))
        above = nodes[parent] if parent is not None else None
        wl = _shifted(above.workload if above else {}, tn.workload)
        src = f"{path}.workload" if tn.workload is not None else (above.workload_source if above else "")
        n = Node(len(nodes), depth, parent, prob, _region_demand(tn.demand, regions, f"{path}.demand", problems), names, wl, src)
        nodes.append(n)
        chain = ids + [n.id]
        if not tn.children:
            if depth != nq - 1:
                problems.append(Problem(path, f"this branch ends in {labels[depth]}, before the horizon's last quarter {labels[-1]}: the tree's "
                                              f"branches disagree on the quarters (every root-to-leaf path has one node per quarter).", ""))
            scenarios["/".join(names) or "root"] = chain
            continue
        kids = tn.children
        if len(kids) == 1 and kids[0].probability is None:
            probs = [1.0]
        else:
            missing = [i for i, k in enumerate(kids) if k.probability is None]
            for i in missing:
                problems.append(Problem(f"{path}.children.{i}.probability", "a branch with siblings needs its probability (fraction, given the parent).", ""))
            probs = [k.probability or 0.0 for k in kids]
            total = math.fsum(probs)
            if not missing and abs(total - 1.0) > PROBABILITY_TOLERANCE:
                problems.append(Problem(f"{path}.children", f"the branch probabilities must sum to 1 at each branching (fractions); they sum to {total:.6g}.", str(probs)))
        knames = [k.name or f"b{i + 1}" for i, k in enumerate(kids)]
        if len(set(knames)) != len(knames):
            problems.append(Problem(f"{path}.children", "sibling branch names must be unique.", str(knames)))
        for i, k in enumerate(kids):
            if probs[i] > 0:  # a branch of probability 0 costs nothing in expectation: it is not planned for
                queue.append((k, f"{path}.children.{i}", n.id, prob * probs[i], names + (knames[i],), chain))
    if problems:
        return None, problems
    return Tree(nodes, scenarios), []


def mean_tree(tree: Tree, base_workload=None) -> Tree:
    """One path whose quarter-q demand is the probability-weighted mean over the tree's
    quarter-q nodes (the path probabilities of one quarter's nodes sum to 1), and whose
    workload is their expected workload (:func:`mean_workload`; ``base_workload`` the base
    instance's, needed only when some node shifts it)."""
    nq = max(n.quarter for n in tree.nodes) + 1
    nodes = []
    for q in range(nq):
        at = [n for n in tree.nodes if n.quarter == q]
        regions = at[0].demand
        dem = {r: sum(n.probability * n.demand[r] for n in at) for r in regions}
        nodes.append(Node(q, q, q - 1 if q else None, 1.0, dem, ("mean",) if q else (), mean_workload(at, base_workload)))
    return Tree(nodes, {"mean": list(range(nq))})


def mean_workload(at: list[Node], base) -> dict:
    """The expected workload over one quarter's nodes ``at``, as overrides of the base
    instance's workload ``base`` (empty when no node shifts it). Each node weighs its path
    probability x its summed demand multiplier (its share of the quarter's expected
    requests); the input mix is the weighted mixture of the nodes' mixes (buckets of equal
    length merged; the expected distribution of a request's prompt length), output tokens
    and the prefix hit rate the weighted means (a node without a shift of a field has the
    base's value)."""
    if not any(n.workload for n in at):
        return {}
    w = [n.probability * sum(n.demand.values()) for n in at]
    if sum(w) <= 0:
        w = [n.probability for n in at]
    tot = sum(w)
    mix: dict[int, float] = {}
    out_tok = hit = 0.0
    for n, wi in zip(at, w):
        wl = n.workload
        buckets = wl.get("input_mix") or [{"share": b.share, "tokens": b.tokens} for b in base.input_mix]
        for b in buckets:
            mix[int(b["tokens"])] = mix.get(int(b["tokens"]), 0.0) + wi / tot * float(b["share"])
        out_tok += wi / tot * float(wl.get("output_tokens", base.output_tokens))
        hit += wi / tot * float(wl.get("prefix_hit_rate", base.prefix_hit_rate))
    return {"input_mix": [{"share": v, "tokens": k} for k, v in sorted(mix.items())], "output_tokens": out_tok, "prefix_hit_rate": hit}


def path_tree(tree: Tree, scenario: str) -> Tree:
    """The scenario's path alone, with probability 1 (its wait-and-see problem)."""
    ids = tree.scenarios[scenario]
    nodes = [Node(i, tree.nodes[n].quarter, i - 1 if i else None, 1.0, tree.nodes[n].demand, tree.nodes[n].path, tree.nodes[n].workload,
                  tree.nodes[n].workload_source) for i, n in enumerate(ids)]
    return Tree(nodes, {scenario: list(range(len(ids)))})
