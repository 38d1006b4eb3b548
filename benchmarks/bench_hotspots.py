"""CPU seconds of the test suite's hot paths, and a fingerprint of their results (not part
of the tests).

    python benchmarks/bench_hotspots.py [--generated N] [--out FILE]
    PYTHONPATH=OTHER_CHECKOUT python benchmarks/bench_hotspots.py --out other.json   # the same on another checkout

Measures, in one process (process CPU time, so a machine shared with other jobs inflates
it less than the wall time): a solve of every bundled instance; the 25 what-if events of
tests/agreement/test_whatif_agreement.py's us-east case (every hour in the re-warm
transient, plus the peak hour steady) on the gemini-ironwood plan; and N solves of tiny
generated instances like tests/agreement/test_agreement.py's (a fixed seed, both serving
modes). Writes each result's JSON without its timings, hashed, so two checkouts can be
compared: the speed-ups of docs/benchmarks.md ("Test suite time") leave every hash the
same. Prints and writes benchmarks/results/hotspots.json unless --out is given.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import random
import sys
import time
from pathlib import Path

import pyomo.environ  # noqa: F401 -- before SciPy, as the CLI does

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests.conftest's tiny instance

from fleetplan.instance.io import bundled_instances, load_instance, parse_instance  # noqa: E402
from fleetplan.sizing import solve  # noqa: E402
from fleetplan.whatif import parse_event, whatif  # noqa: E402

TIMINGS = {"solve_s", "wall_time_s", "solver_log"}


def _fingerprint(doc: str) -> str:
    def strip(o):
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k not in TIMINGS}
        if isinstance(o, list):
            return [strip(x) for x in o]
        return o

    return hashlib.sha256(json.dumps(strip(json.loads(doc)), sort_keys=True).encode()).hexdigest()[:16]


def _generated(n: int):
    from tests.agreement.test_agreement import generated_data

    rng = random.Random(1)
    for i in range(n):
        g = dict(peak=rng.uniform(1, 400), tokens=rng.randint(200, 30000), out=rng.randint(10, 1000), ttft=rng.uniform(100, 5000),
                 tpot=rng.uniform(10, 200), hit=rng.uniform(0, 0.9), pods=rng.randint(0, 6), n1=rng.random() < 0.5,
                 mode=rng.choice(["disaggregated", "colocated"]))
        yield f"generated-{i}-{g['mode']}", parse_instance(generated_data(g), "gen")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generated", type=int, default=16)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "hotspots.json")
    args = ap.parse_args()
    rows, hashes = {}, {}
    plans = {}
    for name in bundled_instances():
        inst = load_instance(name)
        t0 = time.process_time()
        plan = solve(inst).plan
        rows[f"solve {name}"] = round(time.process_time() - t0, 2)
        hashes[f"solve {name}"] = _fingerprint(plan.model_dump_json())
        plans[name] = (inst, plan)
    inst, plan = plans["gemini-ironwood"]
    events = parse_event(inst, plan, ["us-east"], [], "all", "transient") + parse_event(inst, plan, ["us-east"], [], "peak", "steady")
    t0 = time.process_time()
    rep = whatif(inst, plan, events)
    rows["whatif gemini-ironwood us-east, 25 events"] = round(time.process_time() - t0, 2)
    hashes["whatif"] = _fingerprint(rep.model_dump_json())
    t0 = time.process_time()
    for name, gi in _generated(args.generated):
        hashes[name] = _fingerprint(solve(gi).plan.model_dump_json())
    rows[f"solve {args.generated} generated tiny instances"] = round(time.process_time() - t0, 2)
    out = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "python": platform.python_version(),
           "cpu_s": rows, "result_sha256": hashes}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for k, v in rows.items():
        print(f"{v:8.2f} s CPU  {k}")


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    main()
