"""Time ``fleetplan report``, ``levers`` and ``sensitivity`` on every bundled instance as a
user runs them (one CLI process each, end to end) and record wall time and peak RSS.

    python benchmarks/bench_reports.py            # all commands, all bundled instances (~5 min)
    python benchmarks/bench_reports.py --quick    # report only

Writes benchmarks/results/reports.json and the outputs to out/reports/ (git-ignored).
Peak RSS is the CLI process's (a sweep's solver processes are children of the
forkserver, not of the CLI, and are not counted; each holds about what one
``fleetplan solve`` does).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "reports"
INSTANCES = ["gemini-ironwood", "gemini-ironwood-mooncake", "gemini-trillium", "llama70b-h100"]


#: runs the command in a fresh process and reports the peak RSS of the CLI process it waited for
WRAP = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]).returncode; "
        "print('RSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(r)")


def run(cmd: list[str]) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", WRAP] + cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    rss = int(p.stderr.rsplit("RSS_KB", 1)[1].split()[0]) if "RSS_KB" in p.stderr else 0
    return {"command": "fleetplan " + " ".join(cmd[3:]), "exit_code": p.returncode, "wall_s": round(wall, 2),
            "peak_rss_mb": round(rss / 1024), "stderr_tail": p.stderr[-300:] if p.returncode else ""}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    fp = [sys.executable, "-m", "fleetplan.cli.app"]
    rows = []
    for name in INSTANCES:
        plan = OUT / f"{name}.plan.json"
        r = run(fp + ["solve", name, "-o", str(plan)])
        rows.append({"instance": name, "step": "solve", **r})
        r = run(fp + ["report", str(plan), "-o", str(OUT / f"{name}.html")])
        rows.append({"instance": name, "step": "report", "html_kb": round((OUT / f"{name}.html").stat().st_size / 1024), **r})
        if a.quick:
            continue
        r = run(fp + ["levers", name, "--json", "-o", str(OUT / f"{name}.levers.png")])
        rows.append({"instance": name, "step": "levers", **r})
        r = run(fp + ["sensitivity", name, "--json", "-o", str(OUT / f"{name}.tornado.png")])
        rows.append({"instance": name, "step": "sensitivity", **r})
        print(json.dumps(rows[-4:], indent=1), flush=True)
    import os

    doc = {"machine": {"python": platform.python_version(), "platform": platform.platform(), "cores": os.cpu_count(),
                       "load_average_1min_at_end": round(os.getloadavg()[0], 2)},
           "rows": rows}
    (ROOT / "benchmarks" / "results" / "reports.json").write_text(json.dumps(doc, indent=2) + "\n")
    for r in rows:
        print(f"{r['instance']:26s} {r['step']:12s} exit {r['exit_code']}  {r['wall_s']:7.2f} s  {r['peak_rss_mb']:5.0f} MB")


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    main()
