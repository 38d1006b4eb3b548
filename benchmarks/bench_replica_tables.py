"""Cost of the colocated candidate tables (issue 17: a ReplicaCandidate per tier x shape x
schedule x regime) and of the sizing solve, on the bundled GPU instances and on two small
multi-region instances of the tests (where the loss regimes multiply the tables).

    python benchmarks/bench_replica_tables.py [--repeat 3]

Prints, per instance, the wall and CPU seconds of build_model_data (the candidate tables)
and of the whole fleetplan.sizing.solve (tables, model, HiGHS, verification), the best of
``--repeat`` runs in one process (the ReplicaRates are rebuilt every time: nothing is
cached across build_model_data calls). ``--checkout DIR`` imports fleetplan from another
source tree (e.g. ``git archive main | tar -x -C DIR``) instead of the installed one, to
compare.
docs/benchmarks.md records the numbers and the machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def _use_checkout(argv: list[str]) -> None:
    """With ``--checkout DIR``: import fleetplan (and tests.conftest) from DIR, bypassing an
    editable install's import hook."""
    if "--checkout" in argv:
        root = argv[argv.index("--checkout") + 1]
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()]
        sys.path.insert(0, root)
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


_use_checkout(sys.argv)


def _instances():
    from fleetplan.instance.io import load_instance, parse_instance
    from tests.conftest import tiny_data

    out = [(n, load_instance(n)) for n in ("llama70b-h100", "llama70b-h100-bf16-p99", "llama70b-h100-fp8-p99")]
    two = dict(serving={"mode": "colocated", "colocated_schedules": ["prefill-first", "chunked"], "chunk_tokens": [256, 2048]},
               regions={"a": {"peak_rps": 7}, "b": {"peak_rps": 83}}, chips={"acc": {"slice_shapes": [1]}},
               workload={"classes": {"std": {"share": 1.0, "spec_acceptance": 0.5,
                                             "slos": [{"metric": "ttft", "percentile": 99, "limit_ms": 500},
                                                      {"metric": "tpot", "percentile": 99, "limit_ms": 20}]}}})
    out.append(("tests/families/test_replica_schedule (2 regions, no N-1)", parse_instance(tiny_data(**two), "schedules")))
    n1 = dict(serving={"mode": "colocated"}, failover={"n_minus_1": True, "warm_pool": {"max_slices_per_region": 1}},
              regions={"a": {"peak_rps": 30, "failover_to": ["b"]}, "b": {"peak_rps": 30, "failover_to": ["a"]},
                       "c": {"peak_rps": 1, "hourly_load": [1.0] * 24, "pods": {"acc": {"installed": 0, "available_new": 10}}, "failover_to": ["a"]}})
    out.append(("tiny, 3 regions, N-1 + warm pool, colocated, default schedules", parse_instance(tiny_data(**n1), "n1")))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--checkout", default=None, help="a fleetplan source tree to import instead of the installed one")
    args = ap.parse_args()
    import fleetplan
    from fleetplan.tables.derived import build_model_data
    from fleetplan.sizing import solve

    print(f"fleetplan from {Path(fleetplan.__file__).parent}")
    for name, inst in _instances():
        best = {}
        for _ in range(args.repeat):
            for what, fn in (("tables", lambda: build_model_data(inst)), ("solve", lambda: solve(inst))):
                w, c = time.perf_counter(), time.process_time()
                res = fn()
                w, c = time.perf_counter() - w, time.process_time() - c
                if what not in best or w < best[what][0]:
                    best[what] = (w, c)
                if what == "solve":
                    cost = res.plan.cost.fleet_cost_per_hour_usd
                    sched = sorted({(p.region, p.schedule) for p in res.plan.pools if p.role == "replica"})
        print(f"{name}: tables {best['tables'][0]:.2f} s wall / {best['tables'][1]:.2f} s CPU; solve {best['solve'][0]:.2f} s wall / "
              f"{best['solve'][1]:.2f} s CPU; {cost:g} $/h; schedules {sched}")


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    main()
