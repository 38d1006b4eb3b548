"""The plan a careful planner makes by hand -- the brief's method (section 2, "Fleet") --
built and then checked by the same independent verifier as an optimised plan.

The method: one blended (unstratified) decode pool per region at a fixed safe batch of
128, speculation off; prefill sized at the sustained rate at the mix's *mean* length
after cache hits (the brief's ~160K tokens/s per slice); both on the smallest slice
shape; then a flat 30% margin "for regional peaks not coinciding, failover headroom,
and canaries". Failover traffic is split in proportion to the absorbers' peaks. For
colocated instances: replicas = peak / (max req/s per replica x headroom) per region, the
replica rated under vLLM's default prefill-first schedule for its own queue (M/G/1, no
pooling credit) by :mod:`fleetplan.perf.colocated`, the model the verifier uses.
"""

from __future__ import annotations

import math

from fleetplan import __version__
from fleetplan.instance.scenarios import build_scenarios
from fleetplan.instance.io import instance_document, instance_hash
from fleetplan.instance.schema import Instance
from fleetplan.instance.variants import merge_tiers
from fleetplan.perf.colocated import PREFILL_FIRST, Schedule, replica_rates
from fleetplan.perf.pools import PrefillSource, longest_request_fit, slice_specs
from fleetplan.perf.roofline import mix_moments, sustained_prefill_tokens_per_s
from fleetplan.results.evaluate import Context
from fleetplan.results.loads import cost_summary, fleet_rows, make_pool, r6, scenario_results
from fleetplan.results.plan import Plan, Route, SolverInfo, recorded_router
from fleetplan.results.verify import verify

__all__ = ["hand_plan", "BRIEF_MARGIN", "SAFE_BATCH"]

BRIEF_MARGIN = 0.30  # the brief section 2: "Add ~30% for regional peaks not coinciding, failover headroom, and canaries"
SAFE_BATCH = 128  # the brief's operating point


def hand_plan(inst: Instance) -> Plan:
    """The brief's hand plan for ``inst`` (on the tiers-merged instance), verified."""
    merged = merge_tiers(inst)
    if merged.serving.mode == "auto":  # the brief's method is disaggregated pools
        data = merged.model_dump(mode="json")
        data["serving"]["mode"] = "disaggregated"
        merged = Instance.model_validate(data)
    ctx = Context(merged)
    sl = slice_specs(merged)[0]
    label = sl.label
    t = "all"
    tm = ctx.tiers[t]
    w = merged.workload
    tok = [b.tokens for b in w.input_mix]
    sh = [b.share for b in w.input_mix]
    mean_s, _, _ = mix_moments(tok, sh)
    pools = []
    notes = [f"hand plan: brief's method on {label} slices with a flat {BRIEF_MARGIN:.0%} margin (see fleetplan.results.baseline)"]
    for r, reg in sorted(merged.regions.items()):
        if merged.serving.mode == "disaggregated":
            batch = max([b for b in merged.serving.batch_caps if b <= SAFE_BATCH] or [min(merged.serving.batch_caps)])
            tps = ctx.decode_op(t, label, batch, 0).tokens_per_s
            n_dec = math.ceil(merged.sized_peak_rps(r) * w.output_tokens / tps * (1 + BRIEF_MARGIN))
            rate = sustained_prefill_tokens_per_s(merged.model, sl, merged.priors, tok, sh)["at_mean_length"]
            n_pre = math.ceil(merged.sized_peak_rps(r) * mean_s * (1 - w.prefix_hit_rate) / rate * (1 + BRIEF_MARGIN))
            pools.append(make_pool(merged, ctx, r, t, "prefill", label, n_pre))
            pools.append(make_pool(merged, ctx, r, t, "decode", label, n_dec, (batch, 0), (batch, 0)))
        else:
            # vLLM's default schedule (prefill-first), rated by the model the verifier uses, for one replica's own
            # queue (M/G/1: the hand planner takes no credit for pooling the prompts over the replicas)
            rr = replica_rates(merged, tm, sl, [PrefillSource(1.0, tm.hit_rate)], Schedule(PREFILL_FIRST))
            lam = rr.rate(1) if longest_request_fit(merged, tm, sl, "replica").fits else 0.0
            n = math.ceil(merged.sized_peak_rps(r) / (lam * merged.serving.utilisation_headroom)) if lam > 0 else 0
            pools.append(make_pool(merged, ctx, r, t, "replica", label, n, schedule=PREFILL_FIRST))
    routing = {}
    for x, reg in merged.regions.items():
        tot = sum(merged.regions[a].peak_rps for a in reg.failover_to)
        for a in reg.failover_to:
            routing[(x, a, t)] = r6(merged.regions[a].peak_rps / tot)
    scenarios = scenario_results(merged, ctx, build_scenarios(merged), pools, routing, {})
    fleet = fleet_rows(merged, ctx, pools, [])
    cost = cost_summary(merged, ctx, pools, [], fleet, scenarios)
    plan = Plan(fleetplan_version=__version__, instance_name=merged.name, instance_hash=instance_hash(merged),
                instance=instance_document(merged), options={"method": "brief section 2 hand plan", "margin": BRIEF_MARGIN, "safe_batch": SAFE_BATCH},
                status="verified", fleet=fleet, pools=pools, warm_pool=[],
                routing=[Route(lost=x, to=a, tier=tt, share=v) for (x, a, tt), v in sorted(routing.items())],
                scenarios=scenarios, cost=cost,
                solver=SolverInfo(solver="hand", termination="n/a", objective=cost.fleet_cost_per_hour_usd, bound=None, gap=None,
                                  iterations=0, variables=0, integer_variables=0, constraints=0),
                binding=[], diagnostics=notes, violations=[], router=recorded_router(merged.serving.router))
    v = verify(merged, plan)
    return plan.model_copy(update={"violations": v, "status": "violations" if v else "verified"})
