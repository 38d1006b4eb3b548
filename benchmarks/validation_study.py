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
    "prefill": ["ttft_p50_ms", "ttft_p99_ms", "queue_wait_p95_ms", "queue_wait_p99_ms", "utilisation"],
    "decode": ["tpot_p50_ms", "tpot_p99_ms", "tpot_p99_physics_ms", "itl_p99_ms", "itl_p99_physics_ms", "occupancy", "utilisation",
               "decode_wait_p99_ms"],
    "replica": ["ttft_p50_ms", "ttft_p95_ms", "queue_wait_p95_ms", "tpot_p95_ms", "occupancy", "prefill_share"],
}
_PLANS: dict = {}


def _plan(name):
    if name not in _PLANS:
        import pyomo.environ  # noqa: F401  (before SciPy, as the CLI does)

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
    return "-" if x is None else ("inf" if x == float("inf") else f"{x:,.{nd}f}")


def _r(x):
    return "-" if x is None else f"**{x:.2f}**" if abs(x - 1.0) > 0.2 else f"{x:.2f}"


def _ci(m):
    return f" [{_f(m['ci95'][0])}, {_f(m['ci95'][1])}]" if m.get("ci95") else ""


def _closer(m):
    """Which queue model is closer to the simulated wait, with both values."""
    if m is None or m.get("simulated") in (None, 0.0) or m.get("model") is None or m.get("model_mmc") is None:
        return "-"
    s = m["simulated"]
    g, e = abs(m["model"] - s), abs(m["model_mmc"] - s)
    if max(g, e) < 1.0:
        return "no queue"
    best = m["model"] if g <= e else m["model_mmc"]
    verdict = "M/G/c" if g <= e else "M/M/c"
    if not 0.5 <= s / best <= 2.0:
        verdict = "neither within 2x: the window is too short for this load (see the text)"
    return f"M/G/c {m['model']:,.0f} vs M/M/c {m['model_mmc']:,.0f}: {verdict}"


def markdown(rows) -> str:
    """Three tables: prefill TTFT, decode TPOT, colocated replicas."""
    pre = ["| instance | region | tier | scenario | prefill | busy | TTFT p99 simulated [95%] | plan estimate | sim/est | plan bound | sim/bound | wait p99 simulated | queue model |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    dec = ["| instance | region | tier | scenario | decode | load | residents sim / plan / model | TPOT p99 simulated [95%] | plan estimate (prior) | sim/est | physics alone | sim/physics | plan bound (cap) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rep = ["| instance | region | tier | scenario | replicas | TTFT p95 simulated [95%] | plan estimate | sim/est | TPOT p95 simulated | plan | sim/plan | wait p95 | queue model |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    seen = set()
    for r in rows:
        key = (r["instance"], r["region"], r["tier"], r["scenario"], r["role"], r["slice"])
        if key in seen:  # 'sizing' can be the normal scenario (one region, no N-1)
            continue
        seen.add(key)
        ms = r["metrics"]
        head = f"| {r['instance']} | {r['region']} | {r['tier']} | {r['scenario']} | {r['slices']} x {r['slice']} |"
        if r["role"] == "prefill":
            t, u, w = ms["ttft_p99_ms"], ms["utilisation"], ms["queue_wait_p99_ms"]
            sb = t["simulated"] / t["plan_bound"] if t.get("plan_bound") else None
            pre.append(f"{head} {_f(u['simulated'] * 100)}% | {_f(t['simulated'])}{_ci(t)} | {_f(t['plan'])} | {_r(t['ratio_plan'])} | {_f(t['plan_bound'])} | "
                       f"{_r(sb)} | {_f(w['simulated'])} | {_closer(w)} |")
        elif r["role"] == "decode":
            t, ph, o, u = ms["tpot_p99_ms"], ms["tpot_p99_physics_ms"], ms["occupancy"], ms["utilisation"]
            dec.append(f"{head} {_f(u['simulated'] * 100)}% | {_f(o['simulated'], 0)} / {_f(o['plan'], 0)} / {_f(o['model'], 0)} | {_f(t['simulated'], 2)}{_ci(t)} | "
                       f"{_f(t['plan'], 2)} | {_r(t['ratio_plan'])} | {_f(ph['model'], 2)} | {_r(ph['ratio_model'])} | {_f(t['plan_bound'], 2)} |")
        else:
            t, tp, w = ms["ttft_p95_ms"], ms["tpot_p95_ms"], ms["queue_wait_p95_ms"]
            rep.append(f"{head} {_f(t['simulated'])}{_ci(t)} | {_f(t['plan'])} | {_r(t['ratio_plan'])} | {_f(tp['simulated'])} | {_f(tp['plan'])} | "
                       f"{_r(tp['ratio_plan'])} | {_f(w['simulated'])} | {_closer(w)} |")
    return "\n".join(pre) + "\n\n" + "\n".join(dec) + "\n\n" + "\n".join(rep) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--duration", type=float, default=None)
    ap.add_argument("--rerender", action="store_true", help="only re-write the tables from benchmarks/results/validation.json")
    a = ap.parse_args()
    if a.rerender:
        rerender()
        return
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


def rerender() -> None:
    """Re-write validation.md from validation.json (no simulation)."""
    doc = json.loads((HERE / "results" / "validation.json").read_text())
    (HERE / "results" / "validation.md").write_text(markdown(doc["rows"]))


if __name__ == "__main__":
    main()
