"""Write the synthetic calibration fixtures of tests/data/calibration/ (issue 40): what a vLLM
serving benchmark and a deployment's Prometheus metrics would read if fleetplan's model
were exact, at known step-time multipliers on the bundled llama70b-h100-bf16-p99 priors and
under that instance's serving.router, which the fits read too (fleetplan.workload.synthetic).
The tests fit them back and recover the multipliers (tests/workload/test_load_calibration.py),
and check that this script still writes the fixtures' bytes (an edit of the instance's
serving block or of the pool models moves them: rerun it); tests/data/calibration/README.md
states the truth.

    python benchmarks/calibration_fixtures.py            # rewrite the fixtures (a few seconds)

Deterministic: the same fleetplan gives the same bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleetplan.instance.io import load_instance  # noqa: E402
from fleetplan.workload.loadfit import ObservedPool, phase_scaled_priors  # noqa: E402
from fleetplan.workload.synthetic import bench_result, expected_engines, exposition, pool_labels, range_export  # noqa: E402

OUT = ROOT / "tests" / "data" / "calibration"
INSTANCE = "llama70b-h100-bf16-p99"
#: (prefill, decode) multipliers each fixture was made at
BENCH_TRUTH = (1.15, 1.25)
PROM_TRUTH = (1.10, 1.30)
#: the benchmark: one engine (4 x H100, chunked prefill of 512 tokens) at 2.5 requests/s for 10 minutes
BENCH_POOL = ObservedPool("benchmark", "replica", "all", "h100x4", 1, 2.5, (), schedule="chunked-512")
#: the deployment: 2 engines at 2.67 requests/s each (20 requests/s over 6 engines at 80%) for an hour
PROM_POOL = ObservedPool("us-central/all/replica", "replica", "all", "h100x4", 2, 16.0 / 3.0, (), schedule="chunked-512")
PROM_WINDOW_S = 3600.0


def main(out: Path = OUT) -> None:
    """Write the four synthetic fixtures into ``out`` (tests/data/calibration/ by default)."""
    inst = load_instance(INSTANCE)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm_bench_synthetic.json").write_text(bench_result(inst, BENCH_POOL, phase_scaled_priors(inst.priors, *BENCH_TRUTH), 600.0) + "\n")
    eng = expected_engines(inst, PROM_POOL, phase_scaled_priors(inst.priors, *PROM_TRUTH), PROM_WINDOW_S, pool_labels(PROM_POOL.name))
    (out / "prom_synthetic_before.prom").write_text(exposition(eng, 0.0))
    (out / "prom_synthetic_after.prom").write_text(exposition(eng, 1.0))
    (out / "prom_synthetic_range.json").write_text(range_export(eng, 1_750_000_000.0, PROM_WINDOW_S) + "\n")
    for f in sorted(out.glob("*synthetic*")):
        print(f"{f}: {f.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
