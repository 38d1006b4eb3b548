"""The purchase model's build alone: candidate tables of every tree node plus the Pyomo
blocks, no solve (not part of the tests).

    python benchmarks/bench_purchase_build.py [FILE] [--profile N] [--value-builds]

FILE defaults to the bundled gemini-ironwood-2027. Prints the build's wall and CPU
seconds (``time.perf_counter`` / ``time.process_time``), the number of nodes and
distinct node instances, and the 1-minute load average at the start and the end (the
machine may be shared); ``--profile N`` prints the N costliest functions by cumulative
time (cProfile). ``--value-builds`` also builds, with the same cache, the trees
``fleetplan purchase`` builds for its value of information (the mean forecast, the EEV
tree again, one path tree per scenario: fleetplan.purchase.solve._value_of_information)
and prints the total. docs/benchmarks.md ("Purchasing: the build") quotes it.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time

from fleetplan.purchase.io import load_purchase
from fleetplan.purchase.model import build_purchase_model
from fleetplan.purchase.solve import mean_tree, path_tree


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file", nargs="?", default="gemini-ironwood-2027")
    ap.add_argument("--profile", type=int, default=0)
    ap.add_argument("--value-builds", action="store_true")
    a = ap.parse_args()
    p = load_purchase(a.file)
    load0 = os.getloadavg()[0]
    prof = cProfile.Profile() if a.profile else None
    w0, c0 = time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    cache: dict = {}
    pm = build_purchase_model(p, cache=cache)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    distinct = len({id(d) for d in pm.data.values()})
    print(f"build {wall:.1f} s wall, {cpu:.1f} s CPU; {len(pm.tree.nodes)} nodes, {distinct} distinct ModelData; "
          f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}")
    if a.value_builds:
        trees = [mean_tree(p.tree, p.base.workload), p.tree] + [path_tree(p.tree, s) for s in p.tree.scenarios]
        nodes = sum(len(build_purchase_model(p, t, cache=cache).tree.nodes) for t in trees) + len(pm.tree.nodes)
        print(f"with the value builds ({len(trees) + 1} trees, {nodes} nodes): {time.perf_counter() - w0:.1f} s wall, "
              f"{time.process_time() - c0:.1f} s CPU; load average {os.getloadavg()[0]:.2f}")
    if prof:
        prof.disable()
    if prof:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(a.profile)


if __name__ == "__main__":
    main()
