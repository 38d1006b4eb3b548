"""Workload-fit benchmark: time and peak memory of `fleetplan workload fit` (not part of the tests).

    python benchmarks/bench_workload_fit.py [DATA_DIR]

Fits the real traces as they are, then a 1,000,000-request CSV trace built by replaying
the Azure conversation trace end to end (timestamps shifted by its span each time,
written to a temporary file), and the Mooncake trace replayed 10 times with fresh block
ids per copy (120,310 requests, 2.9 M prefix blocks through 5 LRU caches). Each fit runs
in a fresh process so its peak RSS is its own. Writes
benchmarks/results/workload_fit.json; docs/benchmarks.md quotes it.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, resource, sys, time
from fleetplan.workload.fit import fit_trace
t0 = time.perf_counter()
fit = fit_trace(sys.argv[1], sys.argv[2], [16384, None], 131072.0)
print(json.dumps({"seconds": time.perf_counter() - t0, "requests": fit.arrivals.requests,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(path: Path, fmt: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), fmt], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def azure_million(src: Path, dest: Path) -> None:
    rows = []
    with open(src) as f:
        for r in csv.DictReader(f):
            t = datetime.fromisoformat(r["TIMESTAMP"]).replace(tzinfo=timezone.utc).timestamp()
            rows.append((t, r["ContextTokens"], r["GeneratedTokens"]))
    t0, span = rows[0][0], rows[-1][0] - rows[0][0] + 1.0
    with open(dest, "w") as f:
        f.write("timestamp_s,input_tokens,output_tokens\n")
        n, k = 0, 0
        while n < 1_000_000:
            for t, i, o in rows:
                f.write(f"{t - t0 + k * span:.6f},{i},{o}\n")
                n += 1
                if n == 1_000_000:
                    break
            k += 1


def mooncake_times_ten(src: Path, dest: Path) -> None:
    lines = [json.loads(x) for x in open(src) if x.strip()]
    span = lines[-1]["timestamp"] + 1000
    top = max(max(r["hash_ids"]) for r in lines) + 1
    with open(dest, "w") as f:
        for k in range(10):
            for r in lines:
                f.write(json.dumps({"timestamp": r["timestamp"] + k * span, "input_length": r["input_length"],
                                    "output_length": r["output_length"], "hash_ids": [h + k * top for h in r["hash_ids"]]}) + "\n")


def main() -> None:
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parent.parent / "shared" / "data"
    res = {}
    for label, rel, fmt in [("azure-conv (19,366 requests)", "azure-llm-2023/AzureLLMInferenceTrace_conv.csv", "azure"),
                            ("mooncake-conv (12,031 requests, hashes)", "mooncake/conversation_trace.jsonl", "mooncake")]:
        res[label] = run(data / rel, fmt)
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "azure_1m.csv"
        azure_million(data / "azure-llm-2023/AzureLLMInferenceTrace_conv.csv", big)
        res["azure-conv replayed to 1,000,000 requests (csv, %.0f MB)" % (big.stat().st_size / 1e6)] = run(big, "csv")
        mc = Path(tmp) / "mooncake_x10.jsonl"
        mooncake_times_ten(data / "mooncake/conversation_trace.jsonl", mc)
        res["mooncake-conv x 10 (120,310 requests, %.0f MB)" % (mc.stat().st_size / 1e6)] = run(mc, "mooncake")
    for k, v in res.items():
        print(f"{k}: {v['seconds']:.2f} s, {v['requests'] / v['seconds']:,.0f} requests/s, peak RSS {v['peak_rss_mb']:.0f} MB")
    (HERE / "results" / "workload_fit.json").write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
