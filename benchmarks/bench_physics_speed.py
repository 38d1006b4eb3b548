"""What robust sizing over several physics sources costs in time (issue 41's target "with
robust sizing over three physics sources, each target within 1.5x of the single-source
figure"; not part of the tests).

    python benchmarks/bench_physics_speed.py            # 3 runs of each command
    python benchmarks/bench_physics_speed.py --runs 1

The bundled ``llama70b-h100-bf16-p99`` (Llama-3-70B BF16 on H100, colocated; its priors are
the AIConfigurator TensorRT-LLM source, ``include_base: false``) written three ways beside a
copy of its ``sources/`` folder:

* ``1 source``: the physics block removed -- the plan of the instance's own priors alone;
* ``3 sources``: AIConfigurator, Vidur, LLM-Inference-Bench vLLM, ``hold: all``;
* ``4 sources``: the bundled instance as it is (the three and LLM-Inference-Bench TensorRT-LLM).

Per variant, each command in a fresh process as a user runs it, with no table cache
(``FLEETPLAN_CACHE=0``: every table computed): ``fleetplan perf X``, ``fleetplan solve X -o
PLAN --no-source-plans`` (the robust plan alone) and, with several sources, ``fleetplan
solve X -o PLAN`` (the default, which also solves once per single source and prints each
plan beside the robust one). Wall seconds (``time.perf_counter`` around ``subprocess.run``)
and CPU seconds (user + system of the child), medians over ``--runs``, and the ratio of
each CPU median to the 1-source figure. The machine is shared: CPU time is the figure to
trust; the 1-minute load average is printed. docs/benchmarks.md records the numbers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_tables import time_once  # noqa: E402

NAME = "llama70b-h100-bf16-p99"
THREE = ["aiconfigurator-trtllm", "vidur-vllm", "llm-inference-bench-vllm"]


def variants(work: Path) -> dict[str, Path]:
    """The three variants as YAML files under ``work`` (beside a copy of the sources they include)."""
    src = ROOT / "fleetplan" / "instances" / f"{NAME}.yaml"
    shutil.copytree(src.parent / "sources", work / "sources")
    doc = yaml.safe_load(src.read_text())
    out = {}
    one = {k: v for k, v in doc.items() if k != "physics"}
    three = {**doc, "physics": {**doc["physics"], "sources": [s for s in doc["physics"]["sources"] if s["name"] in THREE]}}
    assert [s["name"] for s in three["physics"]["sources"]] == THREE
    for label, d in (("1 source", one), ("3 sources", three), ("4 sources", doc)):
        out[label] = work / f"{NAME}-{label.split()[0]}.yaml"
        out[label].write_text(yaml.safe_dump(d, sort_keys=False))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    os.environ["FLEETPLAN_CACHE"] = "0"  # every table computed: the cold figure
    print(f"fleetplan from {ROOT}; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="bench-physics-") as tmp:
        work = Path(tmp)
        paths = variants(work)
        py = [sys.executable, "-m", "fleetplan"]
        rows = []
        for label, path in paths.items():
            cmds = {"perf": py + ["perf", str(path)],
                    "solve --no-source-plans": py + ["solve", str(path), "-o", str(work / "plan.json"), "--no-source-plans"]}
            if label != "1 source":
                cmds["solve (default)"] = py + ["solve", str(path), "-o", str(work / "plan.json")]
            for what, argv in cmds.items():
                runs = [time_once(argv) for _ in range(args.runs)]
                wall, cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
                rows.append((label, what, wall, cpu))
                print(f"  {label:9s} {what:24s} {wall:6.2f} s wall {cpu:6.2f} s CPU  (CPU runs: "
                      f"{', '.join(f'{r[1]:.2f}' for r in runs)}; load {os.getloadavg()[0]:.2f})", flush=True)
        base = {what: cpu for label, what, _, cpu in rows if label == "1 source"}
        print("CPU ratio to the 1-source figure:")
        for label, what, _, cpu in rows:
            ref = base.get("solve --no-source-plans" if what.startswith("solve") else what)
            print(f"  {label:9s} {what:24s} {cpu / ref:5.2f}x")


if __name__ == "__main__":
    main()
