"""A 40-solve sweep on the local process pool against Ray on the same cores: the overhead
of ``--executor ray``, and that every executor returns the same summaries.

    python benchmarks/bench_ray.py                          # gemini-trillium, 40 solves, all modes (~6 min on 2 quiet cores)
    python benchmarks/bench_ray.py --instance llama70b-h100 # short solves: the fixed costs show
    python benchmarks/bench_ray.py --modes local,ray-local

Modes (each on two CPUs):

* ``local``: ``LocalPoolExecutor(2)`` (forkserver start included);
* ``ray-local``: ``RayExecutor(2, 'local')``, the cluster started for the run and
  stopped after (what ``--executor ray`` does with no address), startup timed apart;
* ``ray-2-nodes``: an existing cluster of two Ray nodes of one CPU each on this machine
  (``ray.cluster_utils.Cluster``: two raylets, as two machines would run), reached by
  its GCS address; the tasks' nodes are counted;
* ``ray-client``: the same cluster through the Ray Client (``ray://127.0.0.1:PORT``).

The sweep: the instance with its pod inventory lifted (as the sensitivity sweep does),
``prefill_mfu`` at 40 values from -25% to +25% of the instance's, solved with the
sweep's options (1% gap, one HiGHS thread). Writes benchmarks/results/ray.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODES = ("local", "ray-local", "ray-2-nodes", "ray-client")


def tasks_for(name: str, n: int) -> list[dict]:
    import numpy as np

    from fleetplan.instance.io import load_instance
    from fleetplan.report import modify
    from fleetplan.report.sensitivity import SWEEP_OPTIONS
    from fleetplan.report.sweep import instance_data, make_task

    data = modify.lift_inventory(instance_data(load_instance(name)))
    base = float(data["priors"]["prefill_mfu"])
    return [make_task(f"prefill_mfu={v:.6g}", modify.set_prior(data, "prefill_mfu", float(v)), SWEEP_OPTIONS)
            for v in np.linspace(base * 0.75, base * 1.25, n)]


def strip(rs: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rs]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(ex, tasks) -> tuple[list[dict], dict]:
    from fleetplan.report.sweep import solve_task

    first = []
    t0 = time.perf_counter()
    ex.open()
    t_open = time.perf_counter() - t0
    t1 = time.perf_counter()
    res = ex.map(solve_task, tasks, lambda i, r: first.append(time.perf_counter() - t1) if not first else None)
    t_map = time.perf_counter() - t1
    t2 = time.perf_counter()
    ex.close()
    t_close = time.perf_counter() - t2
    solve_sum = sum(r["wall_s"] for r in res)
    # the map's time beyond its solves spread evenly over the 2 CPUs: dispatch, the workers'
    # first imports, moving documents, the checks, the last solves' tail -- robust to the
    # machine's load slowing the solves themselves
    return res, {"open_s": round(t_open, 2), "map_s": round(t_map, 2), "close_s": round(t_close, 2),
                 "total_s": round(t_open + t_map + t_close, 2), "first_result_s": round(first[0], 2) if first else None,
                 "sum_of_solve_wall_s": round(solve_sum, 2), "map_beyond_solves_s": round(t_map - solve_sum / 2, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instance", default="gemini-trillium")
    ap.add_argument("--solves", type=int, default=40)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ray.json"))
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import pyomo.environ  # noqa: F401

    from fleetplan.report.executor import LocalPoolExecutor
    from fleetplan.report.ray_executor import RayExecutor

    tasks = tasks_for(a.instance, a.solves)
    rows, results = [], {}
    load_before = os.getloadavg()
    for mode in modes:
        print(f"== {mode}", flush=True)
        la = os.getloadavg()[0]
        extra = {}
        if mode == "local":
            res, t = run(LocalPoolExecutor(2), tasks)
        elif mode == "ray-local":
            res, t = run(RayExecutor(2, "local"), tasks)
        else:
            from ray.cluster_utils import Cluster

            port = free_port()
            t0 = time.perf_counter()
            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                                     "ray_client_server_port": port})
            cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
            extra["cluster_start_s"] = round(time.perf_counter() - t0, 2)
            try:
                ex = RayExecutor(None, cluster.address if mode == "ray-2-nodes" else f"ray://127.0.0.1:{port}")
                res, t = run(ex, tasks)
                nodes = {}
                for w in ex.where:
                    nodes[w["node_id"][:8]] = nodes.get(w["node_id"][:8], 0) + 1
                extra["tasks_per_node"] = nodes
            finally:
                cluster.shutdown()
        results[mode] = strip(res)
        row = {"mode": mode, "solves": len(tasks), "load_1min_at_start": round(la, 2), **t, **extra,
               "same_as_first_mode": results[mode] == results[modes[0]]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    doc = {"instance": a.instance, "solves": len(tasks), "modes": rows, "all_identical": all(r["same_as_first_mode"] for r in rows),
           "statuses": sorted({r["status"] for r in results[modes[0]]}),
           "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                       "ray": __import__("ray").__version__, "load_avg_before": [round(x, 2) for x in load_before],
                       "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
           "command": "python benchmarks/bench_ray.py " + " ".join(sys.argv[1:])}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    main()
