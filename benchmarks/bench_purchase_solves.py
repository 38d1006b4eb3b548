"""Where the pod-floor decomposition's solve time goes, solve by solve (not part of the tests)

    python benchmarks/bench_purchase_solves.py FILE [--floor-abs-gap G]

Solves the purchase file's tree as ``fleetplan purchase FILE --no-value`` does and times
every node-block solve of the decomposition (``fleetplan.purchase.floors._Node.solve``)
and every block build (``_Node.ensure``), wrapped from outside: the pod-floor solves (an
integer count of pods, MIP gap 1e-4) apart from the run-cost floors and the node fleets at
the master's pods (the command's MIP gap), and the master solves. Prints, per kind, the
count, the wall sum, the median and the largest (seconds; on two threads the sums overlap),
the CPU seconds of the HiGHS runs (the solver thread's; the figure to trust under load),
HiGHS's branch-and-bound nodes and simplex iterations (the work: the same on any machine)
and the terminations ('work_limit': the node limit). ``--floor-abs-gap G`` also sets HiGHS's ``mip_abs_gap`` to G for the
floor solves (a floor is the ceiling of the bound, so any G < 1 gives the same floors),
to see whether that stops them sooner. docs/benchmarks.md ("Purchasing") quotes it.
"""

from __future__ import annotations

import argparse
import collections
import os
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
    ap.add_argument("--each", action="store_true", help="also print every node-block solve: kind, block, CPU s, B&B nodes, objective, bound, termination")
    a = ap.parse_args()
    stats: dict[str, list] = collections.defaultdict(list)
    lock = threading.Lock()
    solve0, ensure0, hsolve0 = floors._Node.solve, floors._Node.ensure, persistent.PersistentHighs.solve
    fleet0, master0, interruptible0 = floors._fleet, floors.solve_highs, persistent.run_interruptible
    cpu: dict[int, float] = {}  # calling thread -> CPU seconds of its last HiGHS run
    where = threading.local()

    def interruptible(run, stop, **k):  # the HiGHS run goes to a thread of its own: its CPU is that thread's
        caller = threading.get_ident()

        def timed():
            c = time.thread_time()
            try:
                return run()
            finally:
                cpu[caller] = time.thread_time() - c
        return interruptible0(timed, stop, **k)

    def fleet(*args, **kw):
        where.fleet = True
        try:
            return fleet0(*args, **kw)
        finally:
            where.fleet = False

    def solve(self, expr, opts, max_nodes, give_up=None, stall=None, **kw):
        t = time.perf_counter()
        res = solve0(self, expr, opts, max_nodes, give_up, stall, **kw)
        info = self.hs.h.getInfo()
        kind = "pod floor" if opts.mip_gap == FLOOR_GAP else ("node fleet" if getattr(where, "fleet", False) else "run-cost floor")
        with lock:
            stats[kind].append((time.perf_counter() - t, res.termination, cpu.get(threading.get_ident(), 0.0), int(info.mip_node_count),
                                int(info.simplex_iteration_count), f"{sum(r.peak_rps for r in self.d.inst.regions.values()):.0f} rps, ub {sum(self.bound.values())}", res.objective, res.bound))
        return res

    def master(m, opts, **kw):
        t, c = time.perf_counter(), time.process_time()
        res = master0(m, opts, **kw)
        with lock:
            stats["master"].append((time.perf_counter() - t, res.termination, time.process_time() - c, 0, 0))
        return res

    def ensure(self):
        t, c = time.perf_counter(), time.thread_time()
        ensure0(self)
        with lock:
            stats["block build"].append((time.perf_counter() - t, "built", time.thread_time() - c, 0, 0))

    def hsolve(self, options, max_nodes=None, **kw):
        floor = options.mip_gap == FLOOR_GAP and a.floor_abs_gap is not None
        self.h.setOptionValue("mip_abs_gap", a.floor_abs_gap if floor else 1e-6)
        return hsolve0(self, options, max_nodes=max_nodes, **kw)

    floors._Node.solve, floors._Node.ensure, persistent.PersistentHighs.solve = solve, ensure, hsolve
    floors._fleet, floors.solve_highs, persistent.run_interruptible = fleet, master, interruptible
    p = load_purchase(a.file)
    t0, c0 = time.perf_counter(), time.process_time()
    plan = solve_purchase(p, SolveOptions(time_limit_s=a.time_limit), value=False)
    wall, used = time.perf_counter() - t0, time.process_time() - c0
    fl = plan.solve.pod_floors
    print(f"{a.file}: {plan.status}, {plan.solve.objective_usd:,.0f} USD, bound {plan.solve.bound_usd:,.0f} USD "
          f"({plan.solve.gap:.2%}); {fl.master_solves if fl else 0} master solve(s); solve_purchase {wall:.1f} s of wall, {used:.1f} s of CPU "
          f"(load average {os.getloadavg()[0]:.1f}); clock-limited: {plan.solve.clock_limited or 'no'}")
    for kind, rows in sorted(stats.items()):
        ts = sorted(r[0] for r in rows)
        print(f"  {kind}: {len(ts)}, sum {sum(ts):.1f} s, median {ts[len(ts) // 2]:.2f} s, largest {ts[-1]:.2f} s; CPU {sum(r[2] for r in rows):.1f} s; "
              f"{sum(r[3] for r in rows):,} B&B nodes, {sum(r[4] for r in rows):,} simplex iterations; "
              + ", ".join(f"{k} {v}" for k, v in sorted(collections.Counter(r[1] for r in rows).items())))
    if a.each:
        for kind, rows in sorted(stats.items()):
            for r in rows:
                if len(r) > 5:
                    print(f"    {kind:15s} {r[5]:40s} CPU {r[2]:6.2f} s {r[3]:6,} nodes  obj {r[6] if r[6] is None else round(r[6], 2)}  "
                          f"bound {r[7] if r[7] is None else round(r[7], 2)}  {r[1]}")


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    main()
