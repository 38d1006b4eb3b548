"""How pessimistic a scaled-down simulation is (`fleetplan simulate --scale F`): the
bundled Gemini plan's us-east long-tier prefill pool in the region loss that sizes it
(74 slices at 98% utilisation), and at its normal peak (67 slices at 74%), simulated at
several scales beside the M/G/c model at each size. Also the same pool under the
public traces' arrival processes (rescaled to the plan's rate) instead of Poisson.

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
    import pyomo.environ  # noqa: F401

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
            row = {"scenario": t.scenario, "scale": scale, "slices": t.pools[0].slices,
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
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "scale.json").write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
