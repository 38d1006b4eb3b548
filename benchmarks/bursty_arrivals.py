"""Bursty arrivals: the plan's TTFT with and without the fitted arrival SCV against the
simulator replaying the Azure LLM traces (the table in docs/validation.md, "Bursty arrivals").

    python benchmarks/bursty_arrivals.py            # ~8 minutes on 2 cores shared with other jobs

The scenario: llama70b-h100 (20 req/s of 2,000-token prompts, p95 TTFT <= 1 s) served
disaggregated (a prefill pool of h100x4 slices: a G/G/c queue the simulator can check).
For each Azure trace (code, conversation) `fleetplan workload fit` estimates
workload.arrival_scv; the instance is solved with C_a^2 = 1 (Poisson, the default) and
with the fitted value; each plan is simulated with `--arrivals trace:FILE` (the trace's
timestamps rescaled to 20 req/s by superposed, shifted copies; 3,000 s after a 30 s
warm-up, seed 0) and, for the Poisson plan, with Poisson arrivals too. The code trace's
plan is solved also at its I(10 s) and I(60 s), the conversation trace's at I(10 s) and
I(60 s) too. The simulated TTFT p50/p95/p99 are of the prefill pool with admission control
off (uncensored: the queue the model describes; the decode pool is not run); the goodput
and admission rejections are of the full run (`fleetplan simulate`). Beside them: the evaluator's estimate (the percentile
of the sum of path, G/G/c wait and compute: what a simulation measures) for that fleet at
the fitted C_a^2 and at C_a^2 = 1, and the bound the plan is sized against (the sum of the
percentiles). Writes benchmarks/results/bursty_arrivals.json and .md.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
DATA = Path("/work/shared/data/azure-llm-2023") if Path("/work/shared/data/azure-llm-2023").exists() else HERE.parent.parent / "shared/data/azure-llm-2023"
TRACES = {"code": DATA / "AzureLLMInferenceTrace_code.csv", "conversation": DATA / "AzureLLMInferenceTrace_conv.csv"}
PCTS = (50.0, 95.0, 99.0)


def _instance(scv: float):
    from fleetplan.instance.io import bundled_instance_path, parse_instance

    d = yaml.safe_load(bundled_instance_path("llama70b-h100").read_text())
    d["name"] = "llama70b-h100-disaggregated"
    d["serving"]["mode"] = "disaggregated"
    d["workload"]["arrival_scv"] = scv
    return parse_instance(d, "llama70b-h100-disaggregated")


def _prefill(plan):
    return next(p for p in plan.pools if p.role == "prefill")


def _model(inst, plan, scv: float) -> dict:
    """The evaluator's TTFT estimate and bound for the plan's prefill pool at C_a^2 = scv."""
    from fleetplan.results.evaluate import Context

    v = inst.model_copy(update={"workload": inst.workload.model_copy(update={"arrival_scv": scv})})
    pool = _prefill(plan)
    ctx = Context(v)
    lam = plan.scenarios[0].pools[[p.role for p in plan.scenarios[0].pools].index("prefill")].arrivals_rps
    est = ctx.ttft_estimate(pool.tier, pool.slice, pool.slices, lam, 0.0, False, list(PCTS))
    bound = ctx.prefill(pool.tier, pool.slice, pool.slices, lam, 0.0, False).ttft_ms
    return {"estimate": {f"p{p:g}": round(est[p], 1) for p in PCTS}, "bound_p95": round(bound[95.0], 1)}


def _sim(plan, inst, arrivals: str) -> dict:
    """The prefill pool simulated at the plan's normal peak: TTFT percentiles with admission
    control off (uncensored: what the queueing model predicts; the decode pool is not run),
    and the full run's goodput and admission rejections (`fleetplan simulate`)."""
    import numpy as np

    from fleetplan.api import simulate
    from fleetplan.sim import arrivals as arr
    from fleetplan.perf.metrics import percentile
    from fleetplan.sim.run import run_tier
    from fleetplan.sim.setup import tier_setups

    region = plan.pools[0].region
    trace = arr.read_trace_times(arrivals[len("trace:"):]) if arrivals.startswith("trace:") else None
    su = tier_setups(inst, plan, region)[0]
    run = run_tier(inst, su, 3000.0, 30.0, 0, "poisson" if trace is None else "trace", trace, decode=False, admission=False)
    req = run.req
    win = (req.arrival_ms >= run.warmup_ms) & (req.arrival_ms < run.end_ms) & run.admitted
    ttft = (run.first_ms + req.post_ms - req.arrival_ms)[win]
    rep = simulate(plan, region, duration_s=3000.0, warmup_s=30.0, arrivals=arrivals, seed=0, instance=inst).model_dump(mode="json")
    t = rep["tiers"][0]
    pre = next(p for p in t["pools"] if p["role"] == "prefill")
    m = {r["key"]: r for r in pre["metrics"]}
    return {"ttft": {f"p{p:g}": round(float(percentile(ttft, p)), 1) for p in PCTS}, "requests": int(win.sum()),
            "ttft_with_admission": {f"p{p:g}": m[f"ttft_p{p:g}_ms"]["simulated"] for p in PCTS},
            "goodput": t["goodput"], "rejected_admission": t.get("rejected_admission", 0), "requests_full_run": t["requests"],
            "max_ttft_ms": round(float(np.max(ttft)), 1)}


def main() -> None:
    import pyomo.environ  # noqa: F401  (before SciPy, as the CLI does)

    from fleetplan.sizing import solve
    from fleetplan.workload.fit import fit_trace

    fitted = {}
    for name, path in TRACES.items():
        a = fit_trace(path, "azure", [None], 327680.0).arrivals
        fitted[name] = {"arrival_scv": a.arrival_scv, "dispersion_within_hour": a.dispersion_within_hour,
                        "inter_arrival_cv": a.inter_arrival_cv, "interval_scv_within_hour": a.interval_scv_within_hour}
    rows = []
    base = _instance(1.0)
    p0 = solve(base).plan
    poisson = {"plan": "C_a^2 = 1", "prefill_slices": _prefill(p0).slices, "arrivals": "poisson", "sim": _sim(p0, base, "poisson"),
               "model_fitted": None, "model_poisson": _model(base, p0, 1.0)}
    rows.append(poisson)
    for name, path in TRACES.items():
        disp = fitted[name]["dispersion_within_hour"]
        scvs = [float(f"{fitted[name]['arrival_scv']:.4g}")] + [float(f"{disp[k]:.4g}") for k in ("10", "60") if disp.get(k)]
        rows.append({"plan": "C_a^2 = 1", "prefill_slices": _prefill(p0).slices, "status": p0.status, "arrivals": f"trace:{name}",
                     "sim": _sim(p0, base, f"trace:{path}"), "model_fitted": _model(base, p0, scvs[0]), "model_poisson": _model(base, p0, 1.0)})
        for scv, tag in zip(scvs, ("I(1 s)", "I(10 s)", "I(60 s)")):
            inst = _instance(scv)
            plan = solve(inst).plan
            rows.append({"plan": f"C_a^2 = {scv:g} ({name} {tag})", "prefill_slices": _prefill(plan).slices, "status": plan.status,
                         "arrivals": f"trace:{name}", "sim": _sim(plan, inst, f"trace:{path}"), "model_fitted": _model(inst, plan, scv),
                         "model_poisson": _model(inst, plan, 1.0)})
    out = {"fitted": fitted, "rows": rows}
    res = HERE / "results"
    res.mkdir(exist_ok=True)
    (res / "bursty_arrivals.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    lines = ["| plan (prefill sized with) | prefill slices | arrivals simulated | simulated TTFT p50 / p95 / p99 (ms) | model at the plan's C_a^2 "
             "(Poisson row: the trace's I(1 s)): p50 / p95 / p99 | model at C_a^2 = 1 | full run: goodput, rejected at admission |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        s, mf, mp = r["sim"]["ttft"], r["model_fitted"], r["model_poisson"]
        f = lambda d: " / ".join(f"{d[f'p{p:g}']:,.0f}" for p in PCTS)  # noqa: E731
        lines.append(f"| {r['plan']} | {r['prefill_slices']} | {r['arrivals']} | {f(s)} | {f(mf['estimate']) if mf else '-'} | "
                     f"{f(mp['estimate'])} | {r['sim']['goodput']:.3f}, {r['sim']['rejected_admission']:,} of {r['sim']['requests_full_run']:,} |")
    (res / "bursty_arrivals.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps(fitted, indent=1))


if __name__ == "__main__":
    main()
