"""Issue 17 newcomer trial: `fleetplan solve llama70b-h100-bf16-p99` printed the replica
pool's predicted latencies as "TTFT p50 214 ms, TPOT p50 27.4 ms" although both SLOs are
p99 -- the table took the first key of each latency dict, which is p50. It now shows the
SLO's tail percentile (p99: 357 ms and 31.2 ms there)."""

from __future__ import annotations

from fleetplan.cli.common import plan_and_instance
from fleetplan.cli.solve import _pred


def test_the_solve_table_shows_the_slo_percentile(plan_file):
    plan, _ = plan_and_instance(str(plan_file("llama70b-h100-bf16-p99")), None)
    (pool,) = [p for p in plan.pools if p.role == "replica"]
    normal = next(s for s in plan.scenarios if s.kind == "normal")
    load = next(x for x in normal.pools if (x.region, x.tier, x.role) == (pool.region, pool.tier, "replica"))
    text = _pred(normal, pool, plan)
    assert "p50" not in text
    assert f"TTFT p99 {load.ttft_ms['p99']:.0f}" in text and f"TPOT p99 {load.tpot_ms['p99']:.1f}" in text
