"""Issue 17's GPU scenario: the fewest colocated replicas per slice shape and schedule that
carry 20 req/s within the p99 SLOs, at a utilisation headroom of 0.8 (the FP8 instance's; the BF16
instance's until it held its plan under four physics sources instead, commit bbe7801) and at none
(the BF16 instance's today), under each instance's own priors and router.

    python benchmarks/gpu_scenario.py

Prints one line per (instance, shape, schedule): the rate TPOT and stability allow per
replica (``top``, req/s), the replicas and GPUs needed at headroom 0.8 and 1.0, the rate per
replica at that pool size, and the pool's p99 TPOT and TTFT estimate at 20 req/s.
docs/gpu-scenario.md tables the output.
"""

from __future__ import annotations

from fleetplan.instance.io import load_instance
from fleetplan.perf.colocated import replica_rates, schedules_of
from fleetplan.perf.pools import PrefillSource, slice_specs, tier_mixes


def main() -> None:
    for name in ["llama70b-h100-bf16-p99", "llama70b-h100-fp8-p99"]:
        inst = load_instance(name)
        tm = tier_mixes(inst)[0]
        demand = inst.sized_peak_rps("us-central")
        for sl in slice_specs(inst):
            for sch in schedules_of(inst):
                rr = replica_rates(inst, tm, sl, [PrefillSource(1.0, tm.hit_rate)], sch)
                n8, n10 = rr.replicas_for(demand, 0.8), rr.replicas_for(demand, 1.0)
                line = f"{name} {sl.label} {sch.label}: top {rr.top:.3f} req/s"
                for head, n in ((0.8, n8), (1.0, n10)):
                    line += f"; at {head:g}: {n} x {sl.label} = {n * sl.chips} GPUs" if n else f"; at {head:g}: none"
                if n8:
                    _, lat = rr.latency(demand / n8, n8, [99.0])
                    line += f"; rate({n8}) {rr.rate(n8):.3f}, TPOT p99 {lat.tpot_ms[99.0]:.1f} ms, TTFT p99 {lat.ttft_estimate_ms[99.0]:.0f} ms"
                print(line, flush=True)


if __name__ == "__main__":
    main()
