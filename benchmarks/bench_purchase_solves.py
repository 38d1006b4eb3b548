"""Where the pod-floor decomposition's solve time goes, solve by solve (not part of the tests)

    python benchmarks/bench_purchase_solves.py FILE [--floor-abs-gap G]

Solves the purchase file's tree as ``fleetplan purchase FILE --no-value`` does and times
every node-block solve of the decomposition (``fleetplan.purchase.floors._Node.solve``)
and every block build (``_Node.ensure``), wrapped from outside: the pod-floor solves (an
integer count of pods, MIP gap 1e-4) apart from the cost solves (each node's run-cost
floor and the node fleets at the master's pods, the command's MIP gap). Prints, per kind,
the count, the sum, the median and the largest (seconds; on two threads the sums overlap)
and the terminations. ``--floor-abs-gap G`` also sets HiGHS's ``mip_abs_gap`` to G for the
floor solves (a floor is the ceiling of the bound, so any G < 1 gives the same floors),
to see whether that stops them sooner. docs/benchmarks.md ("Purchasing") quotes it.
"""

from __future__ import annotations

import argparse
import collections
import threading
import time

import pyomo.environ  # noqa: F401

from fleetplan.purchase import floors
from fleetplan.purchase.io import load_purchase
from fleetplan.purchase.solve import solve_purchase
from fleetplan.solvers import persistent
from fleetplan.solvers.base import SolveOptions

FLOOR_GAP = 1e-4  # floors.py's MIP gap of a pod-floor solve


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--floor-abs-gap", type=float, help="HiGHS mip_abs_gap of the pod-floor solves (pods; default HiGHS's 1e-6)")
    ap.add_argument("--time-limit", type=float, default=600.0)
    a = ap.parse_args()
    stats: dict[str, list] = collections.defaultdict(list)
    lock = threading.Lock()
    solve0, ensure0, hsolve0 = floors._Node.solve, floors._Node.ensure, persistent.PersistentHighs.solve

    def solve(self, expr, opts):
        t = time.perf_counter()
        res = solve0(self, expr, opts)
        with lock:
            stats["pod floor" if opts.mip_gap == FLOOR_GAP else "run floor or fleet"].append((time.perf_counter() - t, res.termination))
        return res

    def ensure(self):
        t = time.perf_counter()
        ensure0(self)
        with lock:
            stats["block build"].append((time.perf_counter() - t, "built"))

    def hsolve(self, options):
        floor = options.mip_gap == FLOOR_GAP and a.floor_abs_gap is not None
        self.h.setOptionValue("mip_abs_gap", a.floor_abs_gap if floor else 1e-6)
        return hsolve0(self, options)

    floors._Node.solve, floors._Node.ensure, persistent.PersistentHighs.solve = solve, ensure, hsolve
    p = load_purchase(a.file)
    t0 = time.perf_counter()
    plan = solve_purchase(p, SolveOptions(time_limit_s=a.time_limit), value=False)
    wall = time.perf_counter() - t0
    print(f"{a.file}: {plan.status}, {plan.solve.objective_usd:,.0f} USD, bound {plan.solve.bound_usd:,.0f} USD "
          f"({plan.solve.gap:.2%}); solve_purchase {wall:.1f} s of wall")
    for kind, rows in sorted(stats.items()):
        ts = sorted(t for t, _ in rows)
        print(f"  {kind}: {len(ts)}, sum {sum(ts):.1f} s, median {ts[len(ts) // 2]:.2f} s, largest {ts[-1]:.2f} s; "
              + ", ".join(f"{k} {v}" for k, v in sorted(collections.Counter(x for _, x in rows).items())))


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    main()
