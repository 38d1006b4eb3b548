"""What the pod-floor decomposition's node blocks cost to build (not part of the tests)

    python benchmarks/bench_purchase_blocks.py FILE

Loads the purchase file, builds its tree model (timed), then builds each node's snapshot
block as the decomposition does (``fleetplan.purchase.floors._Node.ensure``: the sizing
families, then the MPS write and read into a persistent HiGHS) and prints the seconds of
each part summed over the nodes. One thread: the decomposition runs these builds on its
worker threads, one at a time, beside the other threads' HiGHS solves. docs/benchmarks.md
("Purchasing") quotes it.
"""

from __future__ import annotations

import argparse
import time

import pyomo.environ as pyo

from fleetplan.models.sizing.build import add_sizing_families, shortfall_vars
from fleetplan.purchase.io import load_purchase
from fleetplan.purchase.model import build_purchase_model, pods_upper_bound
from fleetplan.solvers.persistent import PersistentHighs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    a = ap.parse_args()
    p = load_purchase(a.file)
    t = time.perf_counter()
    pm = build_purchase_model(p, cache={})
    print(f"tree model: {len(p.tree.nodes)} nodes built in {time.perf_counter() - t:.2f} s")
    regions, chips = sorted(p.base.regions), sorted(p.base.chips)
    families = write = 0.0
    for node in p.tree.nodes:
        t = time.perf_counter()
        s = pyo.ConcreteModel()
        s.b = pyo.Block()
        add_sizing_families(s.b, pm.data[node.id])
        for (r, k) in ((r, k) for r in regions for k in chips):
            s.b.v_new_pods[r, k].setub(pods_upper_bound(p, p.tree, node.id, r, k))
        for v in shortfall_vars(s.b):
            v.fix(0.0)
        s.obj = pyo.Objective(expr=sum(s.b.cost_terms), sense=pyo.minimize)
        families += time.perf_counter() - t
        t = time.perf_counter()
        PersistentHighs(s)
        write += time.perf_counter() - t
    n = len(p.tree.nodes)
    print(f"node blocks: sizing families {families:.2f} s, MPS write + HiGHS read {write:.2f} s, "
          f"total {families + write:.2f} s ({(families + write) / n:.3f} s a block)")


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    main()
