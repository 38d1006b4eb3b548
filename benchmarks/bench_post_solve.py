"""What a plan costs after the solver (issue 16 row 4): the evaluation ``extract_plan`` runs
on the solved fleet (every scenario's loads, capacities and TTFT/TPOT predictions, the
cost summary, the binding list) and the independent verification (:func:`verify`), timed
on a plan file, without the solve.

    python benchmarks/bench_post_solve.py PLAN.json [PLAN.json ...] [--repeat 3] [--profile]

A plan with a shortfall is the case that overran ``--time-limit`` (docs/benchmarks.md,
*Time limits*); make one with, e.g., ``python benchmarks/generate.py``'s 5-region 4-tier
instance and ``fleetplan solve FILE --time-limit 120 --write-unverified -o PLAN.json``.

The evaluation is timed as the records check rebuilds it
(:func:`fleetplan.results.records._check_plan_records`: the same functions ``extract_plan``
fills the plan with, from the plan's pools, routing and recorded mitigations; uncached).
Each repeat starts from a fresh evaluation context (the perf layer's own memos persist, as
they do after the tables in a solve). ``PYTHONPATH=DIR`` times the fleetplan of another
checkout (a ``git archive`` of the commit before, say): the script takes whichever
``fleetplan`` Python imports. Prints wall seconds per phase (best of ``--repeat``) and, with ``--profile``, the top of a
cProfile by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

from fleetplan.results.plan import Plan
from fleetplan.results.records import _check_plan_records
from fleetplan.results.verify import plan_instance, verify


def _timed(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plans", nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="print the top 25 functions by cumulative time of one evaluation and one verification")
    a = ap.parse_args(argv)
    rows = []
    for path in a.plans:
        plan = Plan.model_validate_json(Path(path).read_text())
        inst = plan_instance(plan)
        t_eval, probs = _timed(lambda: _check_plan_records(inst, plan, 12), a.repeat)
        t_ver, viol = _timed(lambda: verify(inst, plan), a.repeat)
        row = {"plan": path, "status": plan.status, "scenarios": len(plan.scenarios), "pools": len(plan.pools),
               "evaluation_s": round(t_eval, 3), "verify_s": round(t_ver, 3), "record_problems": len(probs), "violations": len(viol)}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if a.profile:
            for name, fn in (("evaluation", lambda: _check_plan_records(inst, plan, 12)), ("verify", lambda: verify(inst, plan))):
                pr = cProfile.Profile()
                pr.runcall(fn)
                s = io.StringIO()
                pstats.Stats(pr, stream=s).sort_stats("cumtime").print_stats(25)
                print(f"--- {name} ---\n{s.getvalue()}")
    return 0


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    sys.exit(main())
