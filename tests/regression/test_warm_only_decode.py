"""A region-tier with no decode pool whose failover is carried by warm slices alone.

Found by a newcomer applying Llama/A100-fitted priors to the Gemini instance: no decode
slice of the long tier is bought in some regions, warm slices join in a region loss, and
the plan recorded them without a slice shape, so the verifier credited them with no
capacity and called the (honest) shortfall plan a bug. The plan now names the warm
slices' shape and the verifier finds their best legal operating point itself."""

from __future__ import annotations

from fleetplan.instance.io import load_instance
from fleetplan.instance.variants import with_updates
from fleetplan.sizing import solve
from fleetplan.solvers.base import SolveOptions

PRIORS = {"prefill_mfu": 1.0, "prefill_overhead_ms": 33.87, "hbm_bw_fraction": 0.8927, "decode_mfu": 0.0181, "decode_step_overhead_ms": 45.67}


def test_warm_only_decode_is_checked_with_its_shape():
    inst = with_updates(load_instance("gemini-ironwood"), {f"priors.{k}": v for k, v in PRIORS.items()})
    plan = solve(inst, SolveOptions(time_limit_s=120)).plan
    warm_only = [p for s in plan.scenarios for p in s.pools
                 if p.role == "decode" and p.warm_slices > 0
                 and not any(q.region == p.region and q.tier == p.tier and q.role == "decode" for q in plan.pools)]
    assert warm_only, "the case needs a region-tier served in a loss by warm decode slices alone"
    assert all(p.slice is not None for p in warm_only)
    assert plan.violations == [] and plan.status == "shortfall"
