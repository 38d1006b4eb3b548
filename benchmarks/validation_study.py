"""Validation study: every planned pool of every bundled instance, simulated, beside the
plan's predictions (the table in docs/validation.md).

    python benchmarks/validation_study.py                 # about 40 minutes on 2 cores
    python benchmarks/validation_study.py --jobs 2        # two simulations at a time
    python benchmarks/validation_study.py --quick         # one region per instance, 120 s windows

For each bundled instance (solved at the default options), each region and each tier,
it simulates the normal peak and the scenario that sizes the tier's prefill (or replica)
pool (`fleetplan simulate PLAN --region R --scenario normal|sizing`), at full scale, for
a 300 s window after a 30 s warm-up, seed 0. Writes benchmarks/results/validation.json
(the key metrics of every pool) and benchmarks/results/validation.md (the tables).
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
KEYS = {
    "prefill": ["ttft_p50_ms", "ttft_p99_ms", "ttft_p99_bound_ms", "queue_wait_p99_ms", "utilisation"],
    "decode": ["tpot_p50_ms", "tpot_p99_ms", "itl_p99_ms", "occupancy", "utilisation"],
    "replica": ["ttft_p95_ms", "ttft_p95_bound_ms", "queue_wait_p95_ms", "tpot_p95_ms", "occupancy"],
}
_PLANS: dict = {}


def _plan(name):
    if name not in _PLANS:
        import pyomo.environ  # noqa: F401

        from fleetplan.instance import load_instance
        from fleetplan.sizing import solve

        inst = load_instance(name)
        _PLANS[name] = (inst, solve(inst).plan)
    return _PLANS[name]


def _run(job):
    name, region, scenario, duration = job
    from fleetplan.sim.run import simulate

    inst, plan = _plan(name)
    t0 = time.perf_counter()
    rep = simulate(inst, plan, region, None, scenario, duration_s=duration, warmup_s=30.0, seed=0, scale=1.0)
    rows = []
    for t in rep.tiers:
        for p in t.pools:
            ms = {m.key: m for m in p.metrics}
            rows.append({"instance": name, "region": region, "tier": t.tier, "scenario": t.scenario, "role": p.role, "slice": p.slice,
                         "slices": p.slices, "requests": t.requests, "rejected": t.rejected_admission, "goodput": t.goodput,
                         "metrics": {k: ms[k].model_dump() for k in KEYS[p.role] if k in ms}})
    return rows, time.perf_counter() - t0


def _f(x, nd=1):
    return "-" if x is None else f"{x:,.{nd}f}"


def _closer(m):
    """Which queue model is closer to the simulated wait, and by how much."""
    if m is None or m.get("simulated") in (None, 0.0) or m.get("model") is None or m.get("model_mmc") is None:
        return "-"
    s = m["simulated"]
    g, e = abs(m["model"] - s), abs(m["model_mmc"] - s)
    if max(g, e) < 1.0:
        return "both (no queue)"
    return f"M/G/c ({m['model']:,.0f})" if g <= e else f"M/M/c ({m['model_mmc']:,.0f})"


def markdown(rows) -> str:
    out = ["| instance | region | tier | scenario | pool | metric | simulated (95% interval) | plan | sim/plan | model here | sim/model | queue model closer (wait) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ms = r["metrics"]
        for key in ("ttft_p99_ms", "ttft_p95_ms", "tpot_p99_ms", "tpot_p95_ms"):
            m = ms.get(key)
            if m is None:
                continue
            ci = f" ({_f(m['ci95'][0])}-{_f(m['ci95'][1])})" if m.get("ci95") else ""
            wait = ms.get("queue_wait_p99_ms") or ms.get("queue_wait_p95_ms")
            out.append(f"| {r['instance']} | {r['region']} | {r['tier']} | {r['scenario']} | {r['role']} {r['slices']} x {r['slice']} | "
                       f"{m['name'].split(',')[0]} ms | {_f(m['simulated'])}{ci} | {_f(m['plan'])} | {_f(m['ratio_plan'], 2)} | {_f(m['model'])} | "
                       f"{_f(m['ratio_model'], 2)} | {_closer(wait) if key.startswith('ttft') else '-'} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--duration", type=float, default=None)
    a = ap.parse_args()
    from fleetplan.instance.io import bundled_instances, load_instance

    dur = a.duration or (120.0 if a.quick else 300.0)
    jobs = []
    for name in bundled_instances():
        regions = sorted(load_instance(name).regions)
        for region in regions[:1] if a.quick else regions:
            for sc in ("normal", "sizing"):
                jobs.append((name, region, sc, dur))
    rows, walls = [], []
    with ProcessPoolExecutor(max_workers=a.jobs) as ex:
        for (r, w), job in zip(ex.map(_run, jobs), jobs):
            print(f"{job}: {w:.1f} s", flush=True)
            rows += r
            walls.append({"job": list(job), "wall_s": round(w, 1)})
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "validation.json").write_text(json.dumps({"duration_s": dur, "warmup_s": 30.0, "seed": 0, "rows": rows, "walls": walls},
                                                                 indent=2, sort_keys=True) + "\n")
    (HERE / "results" / "validation.md").write_text(markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
