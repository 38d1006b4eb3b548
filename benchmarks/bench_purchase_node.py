"""One purchase-tree node alone: how hard is a single quarter's sizing block? (not part of the tests)

    python benchmarks/bench_purchase_node.py FILE IRONWOOD_PODS TRILLIUM_PODS DEMAND [--time-limit S]

Builds the purchase model of FILE over a one-node tree (its first quarter at DEMAND x the
base peak_rps) with IRONWOOD_PODS / TRILLIUM_PODS per region in service and nothing to
order, solves it to a 1% gap with HiGHS and prints the build and solve times, the
termination, the gap and the chips each region runs per chip type. docs/benchmarks.md
quotes it (the sizing block of one node of the gemini-ironwood-2027 tree).
"""

from __future__ import annotations

import argparse
import resource
import time
from dataclasses import replace

import pyomo.environ as pyo

from fleetplan.purchase.io import load_purchase
from fleetplan.purchase.model import build_purchase_model
from fleetplan.purchase.tree import Node, Tree
from fleetplan.solvers.base import SolveOptions
from fleetplan.solvers.highs import solve_highs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("ironwood", type=int)
    ap.add_argument("trillium", type=int)
    ap.add_argument("demand", type=float)
    ap.add_argument("--time-limit", type=float, default=120.0)
    a = ap.parse_args()
    p = load_purchase(a.file)
    inst = {k: list(v) for k, v in p.installed.items()}
    for (_r, k), v in inst.items():
        v[0] = a.ironwood if k == "ironwood" else a.trillium
    p = replace(p, installed=inst, orders=[o for o in p.orders if o.quarter > 0])
    tree = Tree([Node(0, 0, None, 1.0, {r: a.demand for r in p.base.regions}, ())], {"root": [0]})
    t0 = time.perf_counter()
    pm = build_purchase_model(p, tree)
    build = time.perf_counter() - t0
    m, d, b = pm.m, pm.data[0], pm.m.node[0]
    n_int = sum(1 for v in m.component_data_objects(pyo.Var) if not v.fixed and v.is_integer())
    t0 = time.perf_counter()
    r = solve_highs(m, SolveOptions(time_limit_s=a.time_limit, mip_gap=0.01), warm_start=False)
    print(f"build {build:.1f} s, {n_int} integers; solve {time.perf_counter() - t0:.1f} s: {r.termination}, gap {r.gap}, "
          f"objective {r.objective}, bound {r.bound}; CPU {time.process_time():.1f} s, peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if r.has_incumbent:
        for reg in sorted(p.base.regions):
            for k in sorted(p.base.chips):
                used = sum(d.slices[c].chips * round(pyo.value(b.v_slices[x, t, ro, c])) for (x, t, ro, c) in b.POOLS if x == reg and d.config_chip(c) == k)
                used += sum(d.slices[c].chips * round(pyo.value(b.v_warm[reg, c])) for c in d.CONFIGS if d.config_chip(c) == k)
                print(f"  {reg} {k}: {used} chips ({used / d.p_pod_chips[k]:.2f} pods)")


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    main()
