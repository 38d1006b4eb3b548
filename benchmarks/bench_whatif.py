"""What-if benchmark: time per event on the bundled Gemini plan (not part of the tests).

    python benchmarks/bench_whatif.py

Solves gemini-ironwood, then runs `whatif` for every single-region loss in every hour,
both phases (144 events), and reports the time per event (median, p95, max), the mix
refreshes and the residual count. Writes benchmarks/results/whatif.json;
docs/benchmarks.md quotes it.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path

import pyomo.environ  # noqa: F401

from fleetplan.instance import load_instance
from fleetplan.sizing import solve
from fleetplan.whatif import parse_event, whatif

HERE = Path(__file__).resolve().parent


def main() -> None:
    inst = load_instance("gemini-ironwood")
    plan = solve(inst).plan
    times, iters, residual = [], [], 0
    for lost in sorted(inst.regions):
        for phase in ("steady", "transient"):
            for ev in parse_event(inst, plan, [lost], [], "all", phase):
                t0 = time.perf_counter()
                rep = whatif(inst, plan, [ev]).events[0]
                times.append(time.perf_counter() - t0)
                iters.append(rep.mix_iterations)
                residual += rep.residual_slices > 0
    times.sort()
    out = {
        "instance": inst.name, "events": len(times), "median_s": statistics.median(times),
        "p95_s": times[int(0.95 * (len(times) - 1))], "max_s": times[-1], "total_s": sum(times),
        "mix_iterations_max": max(iters), "mix_iterations_median": statistics.median(iters),
        "events_with_residual": residual, "machine": platform.machine(), "python": platform.python_version(),
    }
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "whatif.json").write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(json.dumps(out, indent=2, sort_keys=True))


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    main()
