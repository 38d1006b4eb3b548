"""Sizing benchmarks: solve time, gap, model size and peak memory (not part of the tests).

    python benchmarks/bench_sizing.py                 # everything, results in benchmarks/results/
    python benchmarks/bench_sizing.py --quick         # the bundled instances only
    python benchmarks/bench_sizing.py --case "gen r10" --repeat 3 --no-cli   # some cases, 3 runs each
    python benchmarks/bench_sizing.py --no-cli --no-pods --case gen --out benchmarks/results/sizing-no-pods.json
                                                      # sized without the pods (placement.size_with_pods: false)

Each case records the plan's cost, chips, the pod stage's termination and own gap and the
largest DCN share at the normal peak and in a region loss, and the tiers over their DCN
ceiling (a declared overage), beside the solve's size, time and gap.

Each case runs in a fresh process (so peak RSS is the case's own); the brief's
instance is also timed as the CLI a user runs (`fleetplan solve`, process start to
exit). Results are printed as a Markdown table and written to
benchmarks/results/sizing.json (or ``--out``); docs/benchmarks.md quotes them.

Every case records its wall time, its CPU time (user + system of the solving process:
one HiGHS thread, so on a machine shared with other jobs the CPU time is close to what
the wall time would be on a quiet one) and the 1-minute load average before and after,
so that a run on a busy machine says so.
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


def run_one(instance: str, time_limit: float | None, rounding: bool, component_start: bool | None = None, pods: bool = True) -> dict:
    """Solve in this process and report (called in a child process). ``pods=False`` sizes
    without the pods (``placement.size_with_pods: false``): the plain sizing, to compare."""
    from fleetplan.instance.io import load_instance
    from fleetplan.sizing import solve
    from fleetplan.solvers.base import SolveOptions

    inst = load_instance(instance)
    if not pods:
        inst = inst.model_copy(update={"placement": inst.placement.model_copy(update={"size_with_pods": False})})
    t0, c0 = time.perf_counter(), time.process_time()
    out = solve(inst, SolveOptions(time_limit_s=time_limit, rounding_start=rounding, component_start=component_start))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    p = out.plan
    dcn = (p.dcn or []) if p else []
    over = [f"{x.region}/{x.tier}" for x in dcn if max(x.normal, x.worst_loss or 0.0) > x.dcn_share_max + 1e-6]
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
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
        "sized_with_pods": bool(dcn),
        "pod_stage_termination": p.solver.pod_stage_termination if p else None,
        "pod_stage_gap": p.solver.pod_stage_gap if p else None,
        "dcn_share_normal_max": round(max((x.normal for x in dcn), default=0.0), 4) if dcn else None,
        "dcn_share_loss_max": round(max((x.worst_loss or 0.0 for x in dcn), default=0.0), 4) if dcn else None,
        "dcn_over_ceiling": over,
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
    ap.add_argument("--quick", action="store_true", help="the bundled instances only")
    ap.add_argument("--case", action="append", default=[], help="run only the cases whose name contains this (repeatable)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per case (each in a fresh process; all are recorded)")
    ap.add_argument("--no-cli", action="store_true", help="skip the CLI timing of the brief's instance")
    ap.add_argument("--out", default=None, help="results file (default benchmarks/results/sizing.json)")
    ap.add_argument("--component-start", choices=("auto", "on", "off"), default="auto", help="as `fleetplan solve --component-start`")
    ap.add_argument("--no-pods", action="store_true", help="size without the pods (placement.size_with_pods: false), to compare")
    ap.add_argument("--one", nargs="+", metavar="ARG", help=argparse.SUPPRESS)  # INSTANCE TIME_LIMIT ROUNDING [auto|on|off] [pods|nopods]
    a = ap.parse_args(argv)
    if a.one:
        inst, tl, rd, cs, pd = (a.one + ["auto", "pods"][len(a.one) - 3:])[:5]
        print(json.dumps(run_one(inst, None if tl == "none" else float(tl), rd == "1", {"auto": None, "on": True, "off": False}[cs], pd == "pods")))
        return 0
    from generate import generate
    import yaml

    results = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
               "component_start": a.component_start, "sized_with_pods": not a.no_pods,
               "cli": {}, "cases": {}}
    if not a.no_cli:
        results["cli"]["gemini-ironwood"] = cli_wall("gemini-ironwood")
    tmp = Path(tempfile.mkdtemp())
    rows = []
    for name, spec, tl, rd in CASES:
        if a.quick and isinstance(spec, tuple):
            continue
        if a.case and not any(c in name for c in a.case):
            continue
        if isinstance(spec, tuple):
            path = tmp / f"gen-{'-'.join(map(str, spec))}.yaml"
            path.write_text(yaml.safe_dump(generate(*spec)))
            inst = str(path)
        else:
            inst = spec
        runs = []
        for _ in range(max(1, a.repeat)):
            load0 = os.getloadavg()[0]
            cp = subprocess.run([sys.executable, __file__, "--one", inst, "none" if tl is None else str(tl), "1" if rd else "0", a.component_start,
                                 "nopods" if a.no_pods else "pods"],
                                capture_output=True, text=True)
            if cp.returncode != 0:
                runs.append({"error": cp.stderr[-2000:]})
                continue
            r = json.loads(cp.stdout.strip().splitlines()[-1])
            r["load_1min"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
            runs.append(r)
            rows.append((name, r))
            print(name, r, flush=True)
        results["cases"][name] = runs[0] if len(runs) == 1 else runs
    out = Path(a.out) if a.out else HERE / "results" / "sizing.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print()
    if "gemini-ironwood" in results["cli"]:
        print(f"`fleetplan solve` (gemini-ironwood, CLI process): median {results['cli']['gemini-ironwood']['median_s']} s "
              f"over {results['cli']['gemini-ironwood']['runs_s']}")
        print()
    print("| case | scenarios | variables (integer) | constraints | solves | termination | gap | pod stage (gap) | USD/h | chips | "
          "DCN share max: normal / loss | tiers over ceiling | wall s | CPU s | load before/after | peak RSS MB | status |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in rows:
        gap = f"{r['gap']:.2%}" if r["gap"] is not None else "-"
        pod = (f"{r['pod_stage_termination']} ({r['pod_stage_gap']:.2%})" if r.get("pod_stage_gap") is not None
               else (r.get("pod_stage_termination") or "-"))
        share = (f"{r['dcn_share_normal_max']:.1%} / {r['dcn_share_loss_max']:.1%}" if r.get("sized_with_pods") else "-")
        obj = f"{r['objective_usd_per_h']:,.0f}" if r["objective_usd_per_h"] is not None else "-"
        print(f"| {name} | {r['scenarios']} | {r['variables']} ({r['integer_variables']}) | {r['constraints']} | {r['solves']} | "
              f"{r['termination']} | {gap} | {pod} | {obj} | {r['chips']} | {share} | {', '.join(r.get('dcn_over_ceiling') or []) or '-'} | "
              f"{r['wall_s']} | {r['cpu_s']} | {r['load_1min'][0]} / {r['load_1min'][1]} | {r['peak_rss_mb']} | {r['status']} |")
    for name, r in results["cases"].items():
        for x in (r if isinstance(r, list) else [r]):
            if "error" in x:
                print(f"{name}: error: {x['error'][-300:]}")
    return 0


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    sys.exit(main())
