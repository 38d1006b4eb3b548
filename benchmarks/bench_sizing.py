"""Sizing benchmarks: solve time, gap, model size and peak memory (not part of the tests).

    python benchmarks/bench_sizing.py                 # everything, results in benchmarks/results/
    python benchmarks/bench_sizing.py --quick         # the bundled instances only

Each case runs in a fresh process (so peak RSS is the case's own); the brief's
instance is also timed as the CLI a user runs (`fleetplan solve`, process start to
exit). Results are printed as a Markdown table and written to
benchmarks/results/sizing.json; docs/benchmarks.md quotes them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CASES = [
    # name, instance (bundled name or generator args), time limit s, rounding start
    ("gemini-ironwood", "gemini-ironwood", None, False),
    ("gemini-trillium", "gemini-trillium", None, False),
    ("llama70b-h100", "llama70b-h100", None, False),
    ("gen r5 t3 c2", (5, 3, 2), 120, False),
    ("gen r5 t4 c3", (5, 4, 3), 120, False),
    ("gen r10 t4 c3", (10, 4, 3), 120, False),
    ("gen r20 t4 c3", (20, 4, 3), 120, False),
    ("gen r20 t4 c3 +rounding start", (20, 4, 3), 120, True),
]


def run_one(instance: str, time_limit: float | None, rounding: bool) -> dict:
    """Solve in this process and report (called in a child process)."""
    from fleetplan.instance.io import load_instance
    from fleetplan.sizing import solve
    from fleetplan.solvers.base import SolveOptions

    t0 = time.perf_counter()
    out = solve(load_instance(instance), SolveOptions(time_limit_s=time_limit, rounding_start=rounding))
    wall = time.perf_counter() - t0
    p = out.plan
    return {
        "wall_s": round(wall, 2),
        "phases_s": {k: round(v, 2) for k, v in out.timings_s.items()},
        "solves": out.iterations,
        "termination": out.result.termination,
        "gap": out.result.gap,
        "objective_usd_per_h": out.result.objective,
        "bound": out.result.bound,
        "status": p.status if p else None,
        "chips": p.cost.chips if p else None,
        "variables": p.solver.variables if p else None,
        "integer_variables": p.solver.integer_variables if p else None,
        "constraints": p.solver.constraints if p else None,
        "scenarios": len(out.data.SCENARIOS),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def cli_wall(instance: str, repeats: int = 3) -> dict:
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "fleetplan", "solve", instance, "-o", os.path.join(d, "p.json")],
                           check=True, capture_output=True)
            times.append(time.perf_counter() - t0)
    return {"median_s": round(statistics.median(times), 2), "runs_s": [round(t, 2) for t in times]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--one", nargs=3, metavar=("INSTANCE", "TIME_LIMIT", "ROUNDING"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        inst, tl, rd = a.one
        print(json.dumps(run_one(inst, None if tl == "none" else float(tl), rd == "1")))
        return 0
    from generate import generate
    import yaml

    results = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
               "cli": {}, "cases": {}}
    results["cli"]["gemini-ironwood"] = cli_wall("gemini-ironwood")
    tmp = Path(tempfile.mkdtemp())
    for name, spec, tl, rd in CASES:
        if a.quick and isinstance(spec, tuple):
            continue
        if isinstance(spec, tuple):
            path = tmp / f"gen-{'-'.join(map(str, spec))}.yaml"
            path.write_text(yaml.safe_dump(generate(*spec)))
            inst = str(path)
        else:
            inst = spec
        cp = subprocess.run([sys.executable, __file__, "--one", inst, "none" if tl is None else str(tl), "1" if rd else "0"],
                            capture_output=True, text=True)
        if cp.returncode != 0:
            results["cases"][name] = {"error": cp.stderr[-2000:]}
            continue
        results["cases"][name] = json.loads(cp.stdout.strip().splitlines()[-1])
        print(name, results["cases"][name], flush=True)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "sizing.json").write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(f"`fleetplan solve` (gemini-ironwood, CLI process): median {results['cli']['gemini-ironwood']['median_s']} s "
          f"over {results['cli']['gemini-ironwood']['runs_s']}")
    print()
    print("| case | scenarios | variables (integer) | constraints | solves | termination | gap | wall s | peak RSS MB | status |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results["cases"].items():
        if "error" in r:
            print(f"| {name} | error | | | | | | | | |")
            continue
        gap = f"{r['gap']:.2%}" if r["gap"] is not None else "-"
        print(f"| {name} | {r['scenarios']} | {r['variables']} ({r['integer_variables']}) | {r['constraints']} | {r['solves']} | "
              f"{r['termination']} | {gap} | {r['wall_s']} | {r['peak_rss_mb']} | {r['status']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
