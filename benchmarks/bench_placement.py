"""Placement benchmarks (not part of the tests).

    python benchmarks/bench_placement.py

1. `fleetplan place` (the MIP) against the greedy online placer placing the same plan
   from scratch, on the bundled instances and on generated ones (benchmarks/generate.py,
   solved first): DCN share, pods used, wall time; the ratio greedy / MIP.
2. The online placer on a 10,000-slice fleet (8 regions x 64 pods of 256 chips, two tiers,
   8- and 32-chip slices): 10,000 random events (add 40%, remove 40%, pod down 10%, pod
   up 10%), total and per-event time; the invariants checked at the end.
Writes benchmarks/results/placement.json; docs/benchmarks.md quotes it.
"""

from __future__ import annotations

import json
import platform
import random
import sys
import time
from pathlib import Path

import pyomo.environ  # noqa: F401

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fleetplan import __version__  # noqa: E402
from fleetplan.instance.io import load_instance, parse_instance  # noqa: E402
from fleetplan.placement import place  # noqa: E402
from fleetplan.placement.check import verify_placement  # noqa: E402
from fleetplan.placement.document import Placement, PodSlots, TierDemand  # noqa: E402
from fleetplan.sizing import solve  # noqa: E402
from fleetplan.placement.online import OnlinePlacer, greedy_place  # noqa: E402


def compare(name, inst) -> dict:
    plan = solve(inst).plan
    t0 = time.perf_counter()
    mip = place(inst, plan, time_limit_s=10.0)
    t_mip = time.perf_counter() - t0
    t0 = time.perf_counter()
    g, refused = greedy_place(plan, mip)
    gp = g.to_placement()
    t_g = time.perf_counter() - t0
    return {
        "instance": name, "slices": len(mip.slices), "pods": len(mip.pods),
        "mip": {"dcn_share": mip.dcn_share, "pods_used": mip.pods_used, "wall_s": round(t_mip, 3), "violations": len(verify_placement(inst, plan, mip))},
        "greedy": {"dcn_share": gp.dcn_share, "pods_used": gp.pods_used, "wall_s": round(t_g, 3), "refused": len(refused),
                   "violations": len(verify_placement(inst, plan, gp)) if not refused else None},
    }


def online_events(n_events: int = 10_000, seed: int = 0) -> dict:
    rnd = random.Random(seed)
    pods, demand = [], []
    regions = [f"r{i}" for i in range(8)]
    for r in regions:
        pods += [PodSlots(id=f"{r}/acc/{k:02d}", region=r, chip="acc", chips=256, chips_per_vm=4, up=True, chips_used=0) for k in range(64)]
        demand += [TierDemand(region=r, tier="short", rps=2000.0, decode_rps_per_slice={"accx8": 8.0}),
                   TierDemand(region=r, tier="long", rps=200.0, decode_rps_per_slice={"accx32": 6.0})]
    base = Placement(fleetplan_version=__version__, instance_name="synthetic", instance_hash="-", plan_hash="-", method="greedy",
                     pods=pods, slices=[], routing=[], demand=demand, dcn_share=0.0, dcn_share_by_tier={}, pods_used=0, fragmented_free_chips=0)
    g = OnlinePlacer(base)
    kinds = [("short", "prefill", "accx8", 0.55), ("short", "decode", "accx8", 0.30), ("long", "prefill", "accx32", 0.10), ("long", "decode", "accx32", 0.05)]
    t0 = time.perf_counter()
    while len(g.slices) < 10_000:
        x = rnd.random()
        for t, role, shape, w in kinds:
            if x < w:
                break
            x -= w
        g.add_slice(rnd.choice(regions), t, role, shape)
    t_fill = time.perf_counter() - t0
    n0 = len(g.slices)
    counts = {"add": 0, "remove": 0, "pod_down": 0, "pod_up": 0}
    ok = 0
    t0 = time.perf_counter()
    for _ in range(n_events):
        x = rnd.random()
        if x < 0.4:
            t, role, shape, _ = rnd.choice(kinds)
            res = g.add_slice(rnd.choice(regions), t, role, shape)
            counts["add"] += 1
        elif x < 0.8:
            res = g.remove_slice(rnd.choice(list(g.slices)))
            counts["remove"] += 1
        elif x < 0.9:
            res = g.pod_down(rnd.choice(list(g.pods)))
            counts["pod_down"] += 1
        else:
            res = g.pod_up(rnd.choice(list(g.pods)))
            counts["pod_up"] += 1
        ok += res.ok
    wall = time.perf_counter() - t0
    return {"slices_at_start": n0, "fill_s": round(t_fill, 3), "events": n_events, "events_applied": ok, "by_kind": counts,
            "total_s": round(wall, 3), "per_event_ms": round(wall / n_events * 1e3, 4), "invariant_failures": len(g.check()),
            "dcn_share_at_end": round(g.dcn_share(), 6)}


def main() -> None:
    from generate import generate

    cases = [(n, load_instance(n)) for n in ("gemini-ironwood", "gemini-trillium", "llama70b-h100")]
    for regions, tiers in ((4, 2), (6, 3)):
        data = generate(regions, tiers, 1, seed=1)
        cases.append((f"generated-{regions}r{tiers}t", parse_instance(data, "generated")))
    rows = [compare(n, i) for n, i in cases]
    for r in rows:
        m, g = r["mip"], r["greedy"]
        r["greedy_over_mip_dcn"] = round(g["dcn_share"] / m["dcn_share"], 3) if m["dcn_share"] > 0 else None
        r["greedy_minus_mip_pods"] = g["pods_used"] - m["pods_used"]
    out = {"compare": rows, "online": online_events(), "machine": platform.machine(), "python": platform.python_version()}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "placement.json").write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(json.dumps(out, indent=2, sort_keys=True))


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    main()
