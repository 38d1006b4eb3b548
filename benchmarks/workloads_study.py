"""Workload study: the Gemini plan re-solved on each public trace's fitted workload (not part of the tests).

    python benchmarks/workloads_study.py [DATA_DIR]

DATA_DIR defaults to ../shared/data. For every trace it runs `fleetplan workload fit`
(the library call) with the Gemini instance's tiers, solves gemini-ironwood with the
fitted workload block in place of the brief's assumed one, and re-solves the brief's
instance with each changed input alone (the attribution `fleetplan solve --compare`
prints). Writes benchmarks/results/workloads.json and prints the tables of
docs/workloads.md.
"""

from __future__ import annotations

import json
from dataclasses import asdict
import platform
import sys
import time
from pathlib import Path

import pyomo.environ  # noqa: F401

from fleetplan.instance import load_instance
from fleetplan.instance.io import apply_overlay_block, parse_instance
from fleetplan.perf.roofline import kv_bytes_per_token
from fleetplan.sizing import solve as _solve
from fleetplan.solvers.base import SolveOptions
from fleetplan.workload.compare import attribute, figures
from fleetplan.workload.fit import fit_trace

HERE = Path(__file__).resolve().parent
OPTS = SolveOptions(time_limit_s=120.0, mip_gap=0.01)  # the CLI's gap; a limit so no single solve can stall the study


def solve(inst):
    t0 = time.perf_counter()
    out = _solve(inst, OPTS)
    print(f"  solved {inst.name} in {time.perf_counter() - t0:.1f} s ({out.result.termination})", flush=True)
    return out

TRACES = [
    ("azure-code", "azure-llm-2023/AzureLLMInferenceTrace_code.csv", "azure"),
    ("azure-conv", "azure-llm-2023/AzureLLMInferenceTrace_conv.csv", "azure"),
    ("mooncake-conv", "mooncake/conversation_trace.jsonl", "mooncake"),
    ("servegen-m-large", "servegen/m-large_aggregate_rate.csv", "servegen"),
    ("servegen-m-mid", "servegen/m-mid_aggregate_rate.csv", "servegen"),
    ("servegen-m-small", "servegen/m-small_aggregate_rate.csv", "servegen"),
    ("servegen-deepseek-r1", "servegen/deepseek-r1_aggregate_rate.csv", "servegen"),
]


def with_workload(base, block: dict):
    """The base instance with a fitted workload block, applied as `--workload` does."""
    data = base.model_dump(mode="json")
    apply_overlay_block(data, "workload", block)
    return parse_instance(data, f"{base.name} + fitted workload")


def main() -> None:
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parent.parent / "shared" / "data"
    base = load_instance("gemini-ironwood")
    kv = kv_bytes_per_token(base.model)
    bounds = [t.max_input_tokens for t in base.workload.tiers]
    names = [t.name for t in base.workload.tiers]
    t0 = time.perf_counter()
    base_plan = solve(base).plan
    out = {"base": asdict(figures(base_plan)), "traces": {}}
    for label, rel, fmt in TRACES:
        t1 = time.perf_counter()
        fit = fit_trace(data / rel, fmt, bounds, kv, 600.0 if fmt == "servegen" else 60.0, tier_names=names)
        fit_s = time.perf_counter() - t1
        inst = with_workload(base, fit.workload_block())
        plan = solve(inst).plan
        attr = attribute(base, inst, lambda i: solve(i).plan)
        out["traces"][label] = {
            "file": rel, "format": fmt, "fit_seconds": round(fit_s, 3),
            "input": fit.input.model_dump(), "input_bucketed": fit.input_bucketed.model_dump(),
            "buckets": len(fit.input_mix), "output_mean": fit.output.mean,
            "prefix_hit_rate": fit.workload_block().get("prefix_hit_rate"),
            "tiers": [t.model_dump() for t in fit.tiers],
            "arrivals": {k: getattr(fit.arrivals, k) for k in ("mean_rps", "peak_to_mean", "inter_arrival_cv", "dispersion_window")},
            "plan": asdict(figures(plan)), "gap": plan.solver.gap,
            "attribution": [a.to_dict() for a in attr],
        }
        print(f"{label}: fitted in {fit_s:.2f} s, plan {plan.status} {plan.cost.chips:,} chips", flush=True)
    out["wall_seconds"] = round(time.perf_counter() - t0, 1)
    out["machine"] = {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()}
    (HERE / "results" / "workloads.json").write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    print_tables(out)


def print_tables(out: dict) -> None:
    b = out["base"]
    print("\n| trace | requests' mean / p50 / p99 input (tokens) | buckets | share of requests > 16K | their share of prompt tokens | mean output | hit rate | peak/mean (60 s or 600 s) | inter-arrival CV |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, t in out["traces"].items():
        i, long_ = t["input"], t["tiers"][-1]
        hit = f"{t['prefix_hit_rate']:.1%} (measured)" if t["prefix_hit_rate"] is not None else "60% (brief, kept)"
        a = t["arrivals"]
        print(f"| {label} | {i['mean']:,.0f} / {i['p50']:,.0f} / {i['p99']:,.0f} | {t['buckets']} | {long_['request_share']:.2%} | "
              f"{long_['prefill_token_share']:.1%} | {t['output_mean']:,.0f} | {hit} | {a['peak_to_mean']:.2f} | {a['inter_arrival_cv']:.2f} |")
    print("\n| workload | chips | pods | prefill / decode slices | $/h | $ / 1M output tokens | $ / 1M input+output tokens |")
    print("|---|---|---|---|---|---|---|")
    print(f"| brief's assumed mix | {b['chips']:,} | {b['pods']} | {b['prefill_slices']} / {b['decode_slices']} | {b['cost_per_hour_usd']:,.0f} | "
          f"{b['usd_per_1m_output']:.3f} | {b['usd_per_1m_blended']:.4f} |")
    for label, t in out["traces"].items():
        p = t["plan"]
        print(f"| {label} | {p['chips']:,} ({(p['chips'] - b['chips']) / b['chips']:+.0%}) | {p['pods']} | {p['prefill_slices']} / {p['decode_slices']} | "
              f"{p['cost_per_hour_usd']:,.0f} | {p['usd_per_1m_output']:.3f} | {p['usd_per_1m_blended']:.4f} |")
    print("\n| trace | input changed alone | chips alone | change in $ / 1M output alone |")
    print("|---|---|---|---|")
    for label, t in out["traces"].items():
        for a in t["attribution"]:
            f = a["figures"]
            if f is None:
                print(f"| {label} | {a['input']} | - | {a['error']} |")
            else:
                print(f"| {label} | {a['input']}: {a['change']} | {f['chips']:,} ({f['chips'] - b['chips']:+,}) | {f['usd_per_1m_output'] - b['usd_per_1m_output']:+.3f} |")


if __name__ == "__main__":
    main()
