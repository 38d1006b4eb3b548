"""Purchase benchmark: `fleetplan purchase` on a purchase-planning file (not part of the tests).

    python benchmarks/bench_purchase.py FILE [--time-limit S] [--mip-gap G] [--no-value] [--name NAME] [--method ef|ph]
    mpiexec -n 2 python benchmarks/bench_purchase.py FILE --method ph ...   # PH hub + Lagrangian bound spoke

Times each phase (the driver's progress lines mark them: the tree's solve, the
verification of every node's fleet, the mean forecast, EEV, each wait-and-see), reports
the model size, the gaps, the plan's status and the process's peak RSS, and appends the
record to benchmarks/results/purchase.json under NAME (default: the file's stem).
docs/benchmarks.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import time
from pathlib import Path

import pyomo.environ  # noqa: F401

from fleetplan.purchase.io import load_purchase
from fleetplan.purchase.solve import NoPurchasePlan, solve_purchase
from fleetplan.solvers.base import SolveOptions

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--time-limit", type=float, default=600.0)
    ap.add_argument("--mip-gap", type=float, default=0.01)
    ap.add_argument("--no-value", action="store_true")
    ap.add_argument("--name")
    ap.add_argument("--method", choices=("ef", "ph"), default="ef")
    ap.add_argument("--ph-max-iterations", type=int, help="PH iterations (default fleetplan.purchase.ph.PH_DEFAULTS)")
    a = ap.parse_args()
    tree_solver = None
    if a.method == "ph":
        from fleetplan.purchase import ph

        if ph.world()[1] != 0:
            ph.serve_ph(load_purchase(a.file), SolveOptions(time_limit_s=a.time_limit, mip_gap=a.mip_gap))  # settings come with each job
            return
        tree_solver = ph.solve_tree_ph
        if a.ph_max_iterations is not None:
            import functools

            tree_solver = functools.partial(ph.solve_tree_ph, settings={"max_iterations": a.ph_max_iterations})
    t0 = time.perf_counter()
    marks: list[tuple[str, float]] = []

    def say(msg: str) -> None:
        marks.append((msg, time.perf_counter() - t0))
        print(f"{marks[-1][1]:8.1f} s  {msg}", flush=True)

    p = load_purchase(a.file)
    say("loaded")
    out: dict = {"method": a.method, "file": a.file, "time_limit_s": a.time_limit, "mip_gap": a.mip_gap, "value": not a.no_value,
                 "nodes": len(p.tree.nodes), "scenarios": len(p.tree.scenarios)}
    try:
        try:
            plan = solve_purchase(p, SolveOptions(time_limit_s=a.time_limit, mip_gap=a.mip_gap), value=not a.no_value, progress=say,
                                  tree_solver=tree_solver)
        finally:
            if a.method == "ph":
                ph.release_workers()
        out.update(status=plan.status, expected_cost_usd=plan.expected_cost_usd, model_size=plan.model_size, solve=plan.solve.model_dump(),
                   notes=plan.notes, contingency=[o.model_dump() for o in plan.contingency],
                   rp=plan.value.rp.model_dump() if plan.value else None,
                   vss_usd=plan.value.vss_usd if plan.value else None, evpi_usd=plan.value.evpi_usd if plan.value else None,
                   order_sheet=[o.model_dump() for o in plan.order_sheet],
                   decomposition=plan.decomposition.model_dump() if plan.decomposition else None)
    except NoPurchasePlan as e:
        out.update(status="no_plan", message=str(e))
    wall = time.perf_counter() - t0
    phases = [(m, b - a_) for (m, a_), (_, b) in zip(marks, marks[1:] + [("end", wall)])]
    out.update(wall_s=round(wall, 2), phases_s={m: round(s, 2) for m, s in phases},
               peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
               cpu_s=round(time.process_time(), 2), machine=platform.machine(), python=platform.python_version(),
               load_average_1m=round(__import__("os").getloadavg()[0], 2))
    res = HERE / "results" / "purchase.json"
    res.parent.mkdir(exist_ok=True)
    allr = json.loads(res.read_text()) if res.exists() else {}
    allr[a.name or Path(a.file).stem] = out
    res.write_text(json.dumps(allr, indent=2, sort_keys=True) + "\n")
    print(json.dumps(out, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
