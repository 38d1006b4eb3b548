"""How pessimistic a scaled-down simulation is (`fleetplan simulate --scale F`): the
bundled Gemini plan's us-east long-tier prefill pool in the region loss that sizes it
(74 slices at 98% utilisation), and at its normal peak (67 slices at 74%), simulated at
several scales beside the M/G/c model at each size. Also the same pool under the
public traces' arrival processes (rescaled to the plan's rate) instead of Poisson, and
how long a near-critical pool (the us-west short tier in its sizing region loss, 99.94%
busy) takes to build the queue the steady-state model predicts.

    python benchmarks/scale_study.py        # about 4 minutes

Writes benchmarks/results/scale.json; docs/validation.md quotes it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("FLEETPLAN_SHARED_DATA", HERE.parents[1] / "shared" / "data"))
if not DATA.is_dir():
    DATA = Path("/work/shared/data")


def main() -> None:
    import pyomo.environ  # noqa: F401  (before SciPy, as the CLI does)

    from fleetplan.instance import load_instance
    from fleetplan.sim.run import simulate
    from fleetplan.sizing import solve

    inst = load_instance("gemini-ironwood")
    plan = solve(inst).plan
    out = {"scale": [], "arrivals": []}
    for scenario in ("sizing", "normal"):
        for scale in (1.0, 0.5, 0.2, 0.1):
            rep = simulate(inst, plan, "us-east", ["long"], scenario, duration_s=600.0, warmup_s=30.0, seed=0, scale=scale)
            t = rep.tiers[0]
            ms = {m.key: m for m in t.pools[0].metrics}
            row = {"scenario": t.scenario, "scale": scale, "slices": t.pools[0].slices, "requests": t.requests,
                   "rejected_share": t.rejected_admission / t.requests if t.requests else None,
                   **{k: {"simulated": ms[k].simulated, "ci95": ms[k].ci95, "model": ms[k].model, "model_mmc": ms[k].model_mmc}
                      for k in ("ttft_p99_ms", "queue_wait_p99_ms", "utilisation")}}
            print(json.dumps(row), flush=True)
            out["scale"].append(row)
    traces = [("poisson", "poisson"), ("azure conv", f"trace:{DATA / 'azure-llm-2023' / 'AzureLLMInferenceTrace_conv.csv'}"),
              ("azure code", f"trace:{DATA / 'azure-llm-2023' / 'AzureLLMInferenceTrace_code.csv'}"),
              ("mooncake conversation", f"trace:{DATA / 'mooncake' / 'conversation_trace.jsonl'}")]
    for label, arrivals in traces:
        if arrivals != "poisson" and not Path(arrivals[6:]).exists():
            continue
        for scenario in ("normal", "sizing"):
            rep = simulate(inst, plan, "us-east", ["long"], scenario, duration_s=600.0, warmup_s=30.0, seed=0, arrivals=arrivals)
            t = rep.tiers[0]
            ms = {m.key: m for m in t.pools[0].metrics}
            row = {"arrivals": label, "scenario": t.scenario, "requests": t.requests, "rejected": t.rejected_admission, "goodput": t.goodput,
                   "ttft_p99_ms": ms["ttft_p99_ms"].simulated, "ttft_p99_ci95": ms["ttft_p99_ms"].ci95, "model_ttft_p99_ms": ms["ttft_p99_ms"].model,
                   "queue_wait_p99_ms": ms["queue_wait_p99_ms"].simulated, "notes": [n for n in t.notes if "dispersion" in n]}
            print(json.dumps(row), flush=True)
            out["arrivals"].append(row)
    out["convergence"] = convergence(inst, plan)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "scale.json").write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")


def convergence(inst, plan) -> list[dict]:
    """The near-critical short-tier pool from empty: its queue wait over windows of 300,
    600 and 1,200 s (prefill only, admission control off) against the M/G/c steady state
    and the queue's relaxation time 1 / (c mu (1 - sqrt(rho))^2)."""
    import math

    import numpy as np

    from fleetplan.perf.metrics import percentile
    from fleetplan.perf.queueing import wait_mean_ms
    from fleetplan.sim.run import prefill_model, resolve_scenarios, run_tier
    from fleetplan.sim.setup import tier_setups

    (tier, sc), = resolve_scenarios(inst, plan, "us-west", ["short"], "sizing")
    su = tier_setups(inst, plan, "us-west", [tier], sc)[0]
    n = su.prefill[3]
    m, prof = prefill_model(inst, su, su.prefill[1], n)
    relax_s = 1.0 / (n / prof.mean_ms * (1.0 - math.sqrt(m["util"])) ** 2) / 1e3
    rows = []
    for window in (300.0, 600.0, 1200.0):
        run = run_tier(inst, su, window, 0.0, 0, decode=False, admission=False)
        w = (run.start_ms - run.req.queue_in_ms)[run.admitted]
        half = run.req.arrival_ms[run.admitted] >= window * 1e3 / 2
        row = {"scenario": sc, "slices": n, "utilisation_model": m["util"], "relaxation_time_s": relax_s, "window_s": window,
               "wait_p99_ms": percentile(w, 99.0), "wait_p99_second_half_ms": percentile(w[half], 99.0), "wait_mean_ms": float(np.mean(w)),
               "model_wait_p99_ms": m["wait_mgc_99"], "model_wait_mean_ms": float(wait_mean_ms(n, m["lam"], prof.mean_ms, prof.cs2))}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    main()
