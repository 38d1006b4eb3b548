"""Which communication term moved the bundled TPU plans (issue 17): solve each plan with the
terms switched on one at a time.

    python benchmarks/comm_attribution.py          # up to ~16 minutes on 2 cores (120 s per solve at most)

Variants for gemini-ironwood and gemini-trillium at the default options:

  A  roofline only (the step before issue 17: no collectives, no context parallelism)
  B  + the tensor-parallel all-reduces (no all-to-alls, no context parallelism)
  C  + the MoE dispatch/combine all-to-alls (no context parallelism)
  D  + context-parallel prefill for prompts >= context_parallel_min_tokens: the bundled instance
  E  D without the all-reduces       F  D without the all-to-alls  (leave one out)

B and C end in shortfall -- without context parallelism no slice shape prefills the long
tier's p99 prompt within the TTFT once the collectives are paid -- so their cost is not
comparable; E and F (context parallelism on) say what each collective costs the full plan.

A study switches a term off by replacing its perf function in this process only
(``fleetplan.perf.roofline.step_comm_ms``); the product code has no such switch. Writes
benchmarks/results/comm_attribution.json and prints the table docs/gemini-vs-brief.md quotes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
#: some intermediate variants are hard MIPs (HiGHS does not close 1% on gemini-ironwood B in
#: 10 minutes); each solve stops here and the table reports its gap
TIME_LIMIT_S = 120.0


def _solve(name: str, variant: str) -> dict:
    import pyomo.environ  # noqa: F401  (before SciPy, as the CLI does)

    import fleetplan.perf.roofline as rf
    import fleetplan.perf.speculation as spc
    from fleetplan.instance.io import load_instance
    from fleetplan.sizing import solve
    from fleetplan.solvers.base import SolveOptions

    orig = rf.step_comm_ms

    def comm(model, sl, priors, tokens):
        ar, a2a = orig(model, sl, priors, tokens)
        if variant == "A":
            return np.zeros_like(ar), np.zeros_like(a2a)
        if variant in ("B", "F"):
            return ar, np.zeros_like(a2a)
        if variant == "E":
            return np.zeros_like(ar), a2a
        return ar, a2a

    inst = load_instance(name)
    if variant in ("A", "B", "C"):
        inst = inst.model_copy(update={"priors": inst.priors.model_copy(update={"context_parallel_min_tokens": None})})
    rf.step_comm_ms = spc.step_comm_ms = comm
    try:
        t0 = time.perf_counter()
        plan = solve(inst, SolveOptions(time_limit_s=TIME_LIMIT_S)).plan
        dt = time.perf_counter() - t0
    finally:
        rf.step_comm_ms = spc.step_comm_ms = orig
    chips = {"decode": 0, "prefill": 0}
    for p in plan.pools:
        chips[p.role] = chips.get(p.role, 0) + p.chips
    return {"instance": name, "variant": variant, "status": plan.status, "chips": plan.cost.chips,
            "fleet_cost_per_hour_usd": plan.cost.fleet_cost_per_hour_usd, "decode_chips": chips["decode"], "prefill_chips": chips["prefill"],
            "warm_chips": plan.cost.chips - chips["decode"] - chips["prefill"], "gap": plan.solver.gap, "termination": plan.solver.termination,
            "solve_s": round(dt, 1),
            "pools": {f"{p.region}/{p.tier}/{p.role}": f"{p.slices} x {p.slice}" for p in plan.pools}}


def main() -> int:
    rows = []
    for name in ("gemini-ironwood", "gemini-trillium"):
        for v in "ABCDEF":
            r = _solve(name, v)
            rows.append(r)
            print(f"{name:16s} {v}: {r['status']:9s} {r['chips']:6,d} chips  ${r['fleet_cost_per_hour_usd']:9,.1f}/h  decode {r['decode_chips']:6,d}  "
                  f"prefill {r['prefill_chips']:6,d}  warm {r['warm_chips']:4,d}  {r['termination']}, gap "
                  f"{'-' if r['gap'] is None else format(r['gap'], '.2%')}  ({r['solve_s']} s)", flush=True)
    (HERE / "results" / "comm_attribution.json").write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
