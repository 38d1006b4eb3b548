"""Simulation benchmark: wall time, events and memory of `fleetplan simulate` (not part of
the tests).

    python benchmarks/bench_simulate.py            # all cases, about 5 minutes
    python benchmarks/bench_simulate.py --quick    # the 20-slice case only

Each case runs in a process of its own (peak RSS is that process's): the issue's target
case -- one region-tier pool of 20 slices (the us-east short tier's prefill pool of the
bundled Gemini plan, scaled to 20 of its slices, with its decode pool at the same scale)
at its planned load for 10 simulated minutes -- then a long-tier pool, a whole region at full scale and the
colocated Llama replicas. Writes benchmarks/results/simulate.json; docs/benchmarks.md
quotes it. Reports the 1-minute load average before each case: timings taken while
another process holds a core are not comparable.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

CASES = [
    # (name, instance, region, tiers, scenario, scale, duration_s); a scale given as ("prefill", N) is the one that
    # rounds the tier's prefill pool to N slices of the plan's (its decode pool follows the same scale)
    ("20-slice pool: gemini us-east short prefill pool scaled to 20 slices", "gemini-ironwood", "us-east", ["short"], "normal", ("prefill", 20), 600.0),
    ("20-slice decode pool: gemini us-east short decode pool scaled to 20 slices", "gemini-ironwood", "us-east", ["short"], "normal",
     ("decode", 20), 600.0),
    ("long tier: gemini us-east long, scale 0.3", "gemini-ironwood", "us-east", ["long"], "normal", 0.3, 600.0),
    ("long tier in its sizing region loss, full scale", "gemini-ironwood", "us-east", ["long"], "sizing", 1.0, 600.0),
    ("whole region: gemini us-east, full scale", "gemini-ironwood", "us-east", None, "normal", 1.0, 600.0),
    ("colocated: llama70b-h100, 4 replicas", "llama70b-h100", "us-central", None, "normal", 1.0, 600.0),
]


def _case(args, q) -> None:
    name, inst_name, region, tiers, scenario, scale, duration = args
    import pyomo.environ  # noqa: F401

    from fleetplan.instance import load_instance
    from fleetplan.sim.run import simulate
    from fleetplan.sizing import solve

    inst = load_instance(inst_name)
    plan = solve(inst).plan
    if isinstance(scale, tuple):
        role, want = scale
        n = next(p.slices for p in plan.pools if p.region == region and p.tier == tiers[0] and p.role == role)
        scale = want / n
    t0 = time.perf_counter()
    rep = simulate(inst, plan, region, tiers, scenario, duration_s=duration, warmup_s=30.0, seed=0, scale=scale)
    wall = time.perf_counter() - t0
    slices = sum(p.slices for t in rep.tiers for p in t.pools)
    by_role = {}
    for t in rep.tiers:
        for p in t.pools:
            by_role[p.role] = by_role.get(p.role, 0) + p.slices
    requests = sum(t.requests for t in rep.tiers)
    q.put({"case": name, "instance": inst_name, "region": region, "tiers": [t.tier for t in rep.tiers],
           "scenario": [t.scenario for t in rep.tiers], "scale": round(scale, 4), "duration_s": duration, "warmup_s": 30.0,
           "slices": slices, "slices_by_role": by_role, "requests_in_window": requests, "wall_s": round(wall, 2),
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "load_average_before": round(os.getloadavg()[0], 2)})


def main() -> None:
    cases = CASES[:1] if "--quick" in sys.argv else CASES
    out = []
    ctx = mp.get_context("spawn")
    for c in cases:
        q = ctx.Queue()
        p = ctx.Process(target=_case, args=(c, q))
        p.start()
        res = q.get()
        p.join()
        print(json.dumps(res), flush=True)
        out.append(res)
    doc = {"cases": out, "machine": platform.machine(), "python": platform.python_version(), "cpus": os.cpu_count()}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "simulate.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    main()
