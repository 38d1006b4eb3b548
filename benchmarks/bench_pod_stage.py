"""The pod stage's CPU by step, in one process (not part of the tests).

    python benchmarks/generate.py --regions 20 --tiers 4 --chips 3 -o /tmp/r20.yaml
    FLEETPLAN_CACHE_DIR=/tmp/cache python benchmarks/bench_pod_stage.py /tmp/r20.yaml [--json out.json]

Solves the instance as ``fleetplan solve`` does (default options, no time limit) with the
pod stage's steps wrapped (:mod:`fleetplan.sizing.pods`: the placed start and its wider
MIP, the overage start, the overage-capped solve, the proof; and every
:class:`~fleetplan.solvers.blockmodel.BlockModel` write and solve inside them), and prints
each call's CPU seconds (:func:`time.process_time`: the process's, so HiGHS's one thread
included and other jobs' load left out), nested as the calls nest, with each solve's gap,
whether it is an LP relaxation, a start, and how its blocks (regions) ended -- the
breakdown docs/benchmarks.md quotes for the generated instances. Then one JSON line: the
whole solve's CPU and wall seconds, objective ($/h), bound, gap, termination, the solve's
phase timers and the 1-minute load averages. Warm the table cache first (one run) when
timing: the tables are not the pod stage's.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections import Counter


def _wrap(owner, name: str, log: list, depth: list, label: str | None = None) -> None:
    """Replace ``owner.name`` by a wrapper appending (depth, label, CPU s, details) to ``log``."""
    f = getattr(owner, name)

    @functools.wraps(f)
    def timed(*a, **k):
        c0, res = time.process_time(), None
        depth[0] += 1
        try:
            res = f(*a, **k)
            return res
        finally:
            depth[0] -= 1
            extra = ""
            if label == "BlockModel.solve":
                extra = (f" gap={a[3]} relax={k.get('relax', False)} start={k.get('start') is not None} "
                         f"skip={len(k.get('skip') or ())} max_nodes={k.get('max_nodes')}")
                if res is not None:
                    extra += f" blocks={dict(Counter(str(p[3]) for p in res.parts))} failed={len(res.failed)}"
            log.append((depth[0], label or name, time.process_time() - c0, extra))

    setattr(owner, name, timed)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("instance", help="an instance file or bundled name")
    ap.add_argument("--json", default=None, help="also write the steps and the summary here")
    a = ap.parse_args(argv)

    import fleetplan.sizing.pod_stage as pod_stage
    import fleetplan.sizing.pods as pods
    from fleetplan.instance.io import load_instance
    from fleetplan.sizing import solve
    from fleetplan.solvers.base import SolveOptions
    from fleetplan.solvers.blockmodel import BlockModel

    log: list = []
    depth = [0]
    for name in ("_pod_start", "_lexicographic_over"):
        if hasattr(pod_stage, name):
            _wrap(pod_stage, name, log, depth)
    for name in ("placed_start", "widen_start", "overage_start", "solve_capped", "prove_from_start", "prove"):
        if hasattr(pods, name):
            _wrap(pods, name, log, depth)
            if hasattr(pod_stage, name):  # imported by name there
                setattr(pod_stage, name, getattr(pods, name))
    _wrap(BlockModel, "solve", log, depth, "BlockModel.solve")
    _wrap(BlockModel, "__init__", log, depth, "BlockModel write")
    inst = load_instance(a.instance)
    c0, t0 = time.process_time(), time.perf_counter()
    out = solve(inst, SolveOptions())
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    for d, label, s, extra in log:
        print("  " * d + f"{label}: {s:.2f} s CPU{extra}")
    r = out.result
    summary = {"cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "objective_usd_per_h": r.objective, "bound": r.bound, "gap": r.gap,
               "termination": r.termination, "phases_s": {k: round(v, 2) for k, v in out.timings_s.items()},
               "load_1_5_15": os.getloadavg()}
    print(json.dumps(summary))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"steps": [{"depth": d, "step": label, "cpu_s": round(s, 3), "details": extra.strip()} for d, label, s, extra in log],
                       "summary": summary}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
