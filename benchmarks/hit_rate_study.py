"""How many prefill slices are 10 points of prefix hit rate worth? (the brief section 2 and
7: "every 10 points is ~120 prefill slices", "~950 chips ~ $1,900/hr")

Re-solves the Gemini instance at hit rates 40% .. 80% (5-point steps) on the sweep
executor and splits each plan's chips with the report's cost segments: the prefill the
normal peak needs within the TTFT SLO, and the failover reserve held for the region-loss
scenarios (where diverted users arrive with no cached prefix, so their demand does not
shrink with the hit rate).

    python benchmarks/hit_rate_study.py [--mip-gap 0.005] [--workers 2] [--executor local|ray] [--ray-address ray://HEAD:10001]

Writes benchmarks/results/hit_rate_study.json (4 min 18 s at a 0.5% gap on 2 cores shared at
load 6-8, 2026-12-07), with the instance's hash and its ``base``: the plan ``fleetplan solve``
writes at the default options (one more solve), so tests/report/test_docs_numbers.py can tell
when a change to the physics has moved the plan and the study must be re-run.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HIT_RATES = [0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70, 0.75, 0.80]


def study_task(task: dict) -> dict:
    """Solve one hit rate and split its chips (module-level: the process pool pickles it)."""
    import pyomo.environ  # noqa: F401

    from fleetplan.instance.io import parse_instance
    from fleetplan.report.data import cost_segments
    from fleetplan.report.sweep import summarise
    from fleetplan.sizing import solve
    from fleetplan.solvers.base import SolveOptions

    inst = parse_instance(task["instance"])
    t0 = time.perf_counter()
    gap = task["options"]["mip_gap"]
    plan = solve(inst, SolveOptions() if gap is None else SolveOptions(mip_gap=gap)).plan  # None: solve's defaults
    s = summarise(task["key"], plan, time.perf_counter() - t0).model_dump()
    segs = {x.name: x.chips for x in cost_segments(inst, plan)}
    return {**s, "wall_s": round(time.perf_counter() - t0, 2), "segments_chips": segs,
            "prefill_normal_need_chips": segs.get("prefill", 0)}


def main() -> None:
    from fleetplan.instance.io import instance_hash, load_instance
    from fleetplan.report import modify
    from fleetplan.report.executor import get_executor
    from fleetplan.report.sweep import instance_data, make_task

    ap = argparse.ArgumentParser()
    ap.add_argument("--mip-gap", type=float, default=0.005)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--executor", default="local", help="local, serial or ray (docs/ray.md)")
    ap.add_argument("--ray-address", default=None, help="with --executor ray: ray://HOST:PORT, HOST:PORT, auto or local")
    a = ap.parse_args()
    inst = load_instance("gemini-ironwood")
    data = instance_data(inst)
    tasks = [make_task(f"hit={h:.2f}", modify.set_hit_rate(data, h), {"mip_gap": a.mip_gap}) for h in HIT_RATES]
    tasks.append(make_task("base", data, {"mip_gap": None}))  # the plan `fleetplan solve` writes
    t0 = time.perf_counter()
    res = get_executor(a.executor, a.workers, a.ray_address).map(study_task, tasks, lambda i, r: print(r["key"], r["wall_s"], "s", flush=True))
    base = res.pop()
    rows = []
    for h, r in zip(HIT_RATES, res):
        rows.append({"hit_rate": h, "status": r["status"], "mip_gap": r["mip_gap"], "chips": r["chips"], "prefill_chips": r["prefill_chips"],
                     "decode_chips": r["decode_chips"], "warm_chips": r["warm_chips"], "prefill_normal_need_chips": r["prefill_normal_need_chips"],
                     "failover_reserve_chips": r["segments_chips"].get("failover reserve", 0),
                     "fleet_cost_per_hour_usd": r["fleet_cost_per_hour_usd"], "usd_per_1m_output": r["cost_per_1m_output_tokens_usd"],
                     "usd_per_1m_output_at_peak": r["cost_per_1m_output_tokens_at_peak_usd"], "wall_s": r["wall_s"]})
    # least-squares slopes per 10 points over the whole range (robust to one solve's gap)
    import numpy as np

    x = np.array([r["hit_rate"] for r in rows]) * 10
    fits = {}
    for k in ("chips", "prefill_chips", "prefill_normal_need_chips", "failover_reserve_chips", "fleet_cost_per_hour_usd", "usd_per_1m_output",
              "usd_per_1m_output_at_peak"):
        y = np.array([r[k] for r in rows], dtype=float)
        fits[k + "_per_10_points"] = round(float(np.polyfit(x, y, 1)[0]), 4)
    doc = {"instance": "gemini-ironwood", "instance_hash": instance_hash(inst), "mip_gap": a.mip_gap, "wall_s": round(time.perf_counter() - t0, 1),
           "base": {k: base[k] for k in ("status", "mip_gap", "chips", "fleet_cost_per_hour_usd", "cost_per_1m_output_tokens_usd")},
           "rows": rows, "slopes": fits}
    out = ROOT / "benchmarks" / "results" / "hit_rate_study.json"
    out.write_text(json.dumps(doc, indent=2) + "\n")
    for r in rows:
        print(r)
    print(json.dumps(fits, indent=1))


if __name__ == "__main__":
    main()
