"""Mixed pools on the bundled snapshots: does serving.mixed_shapes lower any bundled plan's
cost, and what does it cost in solve time? (not part of the tests)

    python benchmarks/bench_mixed_shapes.py [NAME ...]

Solves every bundled instance (or the NAMEs) at the default options twice, with
serving.mixed_shapes off (the snapshot's default) and on, and prints per instance the
fleet cost (USD/h), the verifier's verdict, the wall time of each solve and the pools
that mix shapes. docs/benchmarks.md records a run (the reason the snapshot's default is off).
"""

from __future__ import annotations

import sys
import time

import pyomo.environ  # noqa: F401 -- before SciPy, as the CLI does

from fleetplan.instance.io import bundled_instances, load_instance
from fleetplan.results.verify import verify
from fleetplan.sizing import solve


def main() -> None:
    names = sys.argv[1:] or bundled_instances()
    print(f"{'instance':28s} {'off USD/h':>12s} {'on USD/h':>12s} {'off s':>7s} {'on s':>7s}  verified  mixed pools")
    for name in names:
        base = load_instance(name)
        row = {}
        for mixed in (False, True):
            inst = base.model_copy(update={"serving": base.serving.model_copy(update={"mixed_shapes": mixed})})
            t0 = time.perf_counter()
            plan = solve(inst).plan
            wall = time.perf_counter() - t0
            shapes: dict = {}
            for p in plan.pools:
                shapes.setdefault((p.region, p.tier, p.role), set()).add(p.slice)
            mixes = [f"{ro}[{r},{t}]" for (r, t, ro), v in sorted(shapes.items()) if len(v) > 1]
            row[mixed] = (plan.cost.fleet_cost_per_hour_usd, wall, plan.status == "verified" and not verify(inst, plan), mixes)
        (c0, w0, v0, _), (c1, w1, v1, m1) = row[False], row[True]
        print(f"{name:28s} {c0:12,.2f} {c1:12,.2f} {w0:7.1f} {w1:7.1f}  {v0!s:5s}/{v1!s:5s} {', '.join(m1) or '-'}", flush=True)


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    main()
