"""The controller export: a versioned JSON document the serving controller reads --
per region and pod the slices (role, tier, VMs, batch cap, speculation switch), the
prefill -> decode routing weights (at the normal peak, and for a plan sized with its pods
in every region loss a region survives: which warm slices join and where the KV flows),
the failover routing of each region loss, and the autoscaler and alert thresholds that follow from the plan (the brief, section 5's
signal table). The schema is generated from these pydantic models
(``docs/controller-schema.json``; ``fleetplan schema controller``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from fleetplan.instance.schema import Instance
from fleetplan.perf.pools import path_ms, prefill_profile, PrefillSource, tier_mixes, tier_slos
from fleetplan.perf.queueing import max_arrival_rate, wait_percentile_ms
from fleetplan.perf.roofline import slice_memory_map
from fleetplan.results.evaluate import Context
from fleetplan.results.fields import omit_none
from fleetplan.placement.document import Placement, plan_hash
from fleetplan.results.plan import Plan, status_note

__all__ = ["CONTROLLER_SCHEMA_VERSION", "ControllerExport", "TierRouting", "LossRouting", "WarmJoinRef", "build_export", "DCN_SHARE_CEILING", "HIT_RATE_DRIFT_BAND"]

#: 2: the placement routes the plan's region losses (a plan sized with its pods), and each
#: tier's routing carries ``on_loss``; 1: the normal peak's routing only, written as before.
CONTROLLER_SCHEMA_VERSION = 2
DCN_SHARE_CEILING = 0.05  # the brief, section 5: rebalance above 5% of requests crossing the DCN
HIT_RATE_DRIFT_BAND = 0.05  # the brief: alert on a drift of more than 5 points off the baseline


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SpeculationSwitch(_F):
    draft_tokens: int = Field(description="Draft length k when on (0: speculation off on this pool).")
    speculating_classes: list[str]
    off_above_occupancy: int | None = Field(description="Turn speculation off at and above this occupancy (residents per slice); null: never on load.")
    alpha_threshold: float = Field(description="Turn it off for a traffic slice whose measured acceptance falls below this (fraction).")


class ControllerSlice(_F):
    id: str
    role: Literal["prefill", "decode", "replica", "warm"]
    tier: str | None
    shape: str
    vms: list[str]
    batch_cap: int | None = Field(description="Decode: resident requests per slice in normal hours (count).")
    batch_cap_failover: int | None = Field(description="Decode: the cap a region loss may raise it to, the SLO knee (count).")
    speculation: SpeculationSwitch | None


class ControllerPod(_F):
    id: str
    chip: str
    chips: int
    up: bool
    slices: list[ControllerSlice]


class Weight(_F):
    from_pod: str
    to_pod: str
    share: float = Field(description="Of the from_pod's prefill requests of the tier (fraction).")


class WarmJoinRef(_F):
    """A warm slice that joins a pool of the tier while a region loss lasts."""

    slice_id: str = Field(description="The warm slice's id ('region/warm/shape/NNNN'): promote it (give it the tier and role, traffic on).")
    pod: str = Field(description="The pod (ICI domain) it sits in.")
    role: Literal["prefill", "decode", "replica"]


class LossRouting(_F):
    """A tier's prefill -> decode routing in one region loss this region survives (the
    placement's scenario routing)."""

    scenario: str = Field(description="The plan's scenario, 'lose:REGION@HH'.")
    lost_region: str
    hour: int = Field(description="Hour of the loss (UTC, 0-23) the plan sized for; the plan lists the hours that dominate the others.")
    warm_joins: list[WarmJoinRef] = Field(description="Warm slices joining the tier's pools in this loss (the placement's choice of which).")
    weights: list[Weight] = Field(description="from_pod -> to_pod shares in this loss, warm slices that joined counted in their pods (sum to 1 per from_pod).")
    dcn_share: float | None = Field(description="Share of the tier's requests whose KV crosses the DCN with these weights (fraction; null where "
                                                "the tier prefills nothing).")


class TierRouting(_F):
    tier: str
    weights: list[Weight] = Field(description="At the normal peak.")
    on_loss: list[LossRouting] | None = Field(None, description=(
        "Schema version 2 (a placement of a plan sized with its pods): the tier's routing in every region loss of the plan this region "
        "survives, in the plan's scenario order. Omitted in version 1."))

    @model_serializer(mode="wrap")
    def _omit_v2(self, handler):
        # a placement without scenario routing gives the version-1 document exactly
        return omit_none(handler(self), "on_loss")


class FailoverShare(_F):
    tier: str
    to: str
    share: float = Field(description="Of the lost region's tier traffic (fraction).")


class Thresholds(_F):
    """Autoscaler and alert thresholds of one region-tier (units in names)."""

    tier: str
    prefill_queue_wait_p95_ms: float | None = Field(description="Scale prefill up (pull from the warm pool) above this queue-wait p95: the p95 wait at the load where the pool's TTFT percentile reaches its SLO (ms).")
    prefill_queue_wait_share_of_ttft: float | None = Field(description="That threshold as a share of the TTFT SLO (fraction).")
    decode_occupancy_knee: int | None = Field(description="Scale decode up and stop admitting to a slice above this occupancy: the SLO knee minus the instance's margin (residents per slice).")
    kv_headroom_floor: float | None = Field(description="Shed the batch class below this free share of a decode slice's KV page pool: what is left free at the knee occupancy (fraction).")
    dcn_share_ceiling: float = Field(description="Rebalance prefill/decode pairing above this share of requests whose KV crosses the DCN (fraction).")
    prefix_hit_rate_baseline: float = Field(description="Expected prefix-cache hit rate (fraction of prompt tokens).")
    prefix_hit_rate_band: float = Field(description="Alert when the measured hit rate drifts more than this from the baseline (fraction).")
    speculation_alpha_threshold: float = Field(description="Disable speculation on a traffic slice whose acceptance falls below this (fraction).")


class ControllerRegion(_F):
    region: str
    pods: list[ControllerPod]
    routing: list[TierRouting]
    failover: dict[str, list[FailoverShare]] = Field(description="Lost region -> the shares of its tier traffic this region takes when it is lost.")
    warm_pool_depth: int = Field(description="Warm (weight-loaded, traffic-less) slices to keep (count).")
    thresholds: list[Thresholds]


class ControllerExport(_F):
    schema_version: Literal[1, 2] = Field(1, description="2 when the routing carries each tier's region-loss routing (on_loss), else 1.")
    fleetplan_version: str
    instance_name: str
    instance_hash: str
    plan_hash: str
    regions: list[ControllerRegion]
    failover_routing: dict[str, list[FailoverShare]] = Field(description="Lost region -> shares of its tier traffic per absorbing region.")
    router: Literal["least-work", "round-robin", "random", "prefix-aware"] = Field("least-work", description=(
        "How to spread each region-tier's requests over its colocated replicas or prefill slices: the router the plan was sized "
        "for (plan.router, serving.router) -- 'least-work' (to the one that can start the prefill first), 'round-robin' (every c-th "
        "request to each), 'random' or 'prefix-aware' (by the prompt's prefix; sized as random). A router that balances better "
        "(least-work beats round robin beats random) only lowers the TTFT the plan predicts; a worse one breaks it."))
    plan_status: Literal["verified", "shortfall", "violations", "unverified", "no_solution"] = Field(
        "verified", description="The plan's status: a controller deploying a 'shortfall' plan serves less than the demand (plan_note says how much).")
    plan_note: str | None = Field(None, description="What the plan's status means, in words (null for a verified plan), as report, whatif and place print it.")


def _thresholds(inst: Instance, plan: Plan, ctx: Context, region: str, tier: str) -> Thresholds:
    pools = {p.role: p for p in plan.pools if p.region == region and p.tier == tier}
    tm = next(t for t in tier_mixes(inst) if t.name == tier)
    wait95 = share = None
    pre = pools.get("prefill") or pools.get("replica")
    ttft = next((s for s in tier_slos(inst, tier) if s.metric == "ttft"), None)
    if pre is not None and ttft is not None and pools.get("prefill") is not None:
        sl = ctx.slice(pre.slice)
        prof = prefill_profile(inst, tm, sl, [PrefillSource(1.0, tm.hit_rate)], [ttft.percentile])
        budget = ttft.limit_ms - path_ms(inst, ttft.percentile) - prof.pct_ms[ttft.percentile] - prof.kv_exposed_ms[ttft.percentile]
        router = inst.serving.router
        lam = float(max_arrival_rate(pre.slices, prof.mean_ms, budget, ttft.percentile, prof.cs2, ca2=prof.ca2, router=router)[0])
        if lam > 0:
            wait95 = round(float(wait_percentile_ms(pre.slices, lam, prof.mean_ms, 95.0, prof.cs2, prof.ca2, router)), 3)
            share = round(wait95 / ttft.limit_ms, 6)
    knee = floor = None
    # a mixed decode pool (serving.mixed_shapes) has a knee per shape: the tier's thresholds are the most cautious of them
    for dec in [p for p in plan.pools if p.region == region and p.tier == tier and p.role == "decode" and p.decode_normal is not None]:
        k = dec.decode_normal.batch_cap
        knee = k if knee is None else min(knee, k)
        sl = ctx.slice(dec.slice)
        kv_mean, _ = tm.resident_kv(inst)
        mm = slice_memory_map(inst.model, sl, inst.priors)
        if mm.kv_pool_gb > 0:
            used = k * kv_mean * (1 + inst.priors.kv_paging_slack) / (mm.kv_pool_gb * 1e9)
            f = round(max(0.0, 1.0 - used), 6)
            floor = f if floor is None else min(floor, f)
    return Thresholds(tier=tier, prefill_queue_wait_p95_ms=wait95, prefill_queue_wait_share_of_ttft=share, decode_occupancy_knee=knee,
                      kv_headroom_floor=floor, dcn_share_ceiling=DCN_SHARE_CEILING, prefix_hit_rate_baseline=tm.hit_rate,
                      prefix_hit_rate_band=HIT_RATE_DRIFT_BAND, speculation_alpha_threshold=inst.speculation.alpha_threshold)


def _loss_routing(pl: Placement, region: str) -> dict[str, list[LossRouting]] | None:
    """Tier -> the placement's routing of ``region`` in every region loss it survives
    (None for a schema-version-1 placement)."""
    if pl.scenarios is None:
        return None
    out: dict[str, list[LossRouting]] = {}
    for sc in pl.scenarios:
        if sc.kind != "loss" or sc.lost_region == region:
            continue
        share = {x.tier: x.dcn_share for x in sc.tiers if x.region == region}
        tiers = sorted({w.tier for w in sc.routing if w.region == region} | {w.tier for w in sc.warm if w.region == region} | set(share))
        for t in tiers:
            out.setdefault(t, []).append(LossRouting(
                scenario=sc.scenario, lost_region=sc.lost_region, hour=sc.hour,
                warm_joins=[WarmJoinRef(slice_id=w.slice_id, pod=w.pod, role=w.role) for w in sc.warm if (w.region, w.tier) == (region, t)],
                weights=[Weight(from_pod=w.from_pod, to_pod=w.to_pod, share=w.share) for w in sc.routing if (w.region, w.tier) == (region, t)],
                dcn_share=share.get(t)))
    return out


def build_export(inst: Instance, plan: Plan, pl: Placement) -> ControllerExport:
    """The controller document for a verified placement of ``plan``: schema_version 2,
    with each tier's region-loss routing (``on_loss``), for a placement carrying scenario
    routing (schema_version 2), else version 1 exactly as before.
    Raises ValueError when the placement was made for another plan."""
    if pl.plan_hash != plan_hash(plan):
        raise ValueError("the placement was made for another plan")
    ctx = Context(inst)
    pools = {(p.region, p.tier, p.role, p.slice): p for p in plan.pools}  # a mixed pool has one entry per shape
    fo: dict[str, list[FailoverShare]] = {}
    for rt in sorted(plan.routing, key=lambda x: (x.lost, x.tier, x.to)):
        fo.setdefault(rt.lost, []).append(FailoverShare(tier=rt.tier, to=rt.to, share=rt.share))
    regions = []
    for r in sorted(inst.regions):
        pods = []
        for p in [p for p in pl.pods if p.region == r]:
            rows = []
            for s in [s for s in pl.slices if s.pod == p.id]:
                pool = pools.get((r, s.tier, s.role, s.slice))
                spec = None
                if pool is not None and pool.speculation is not None:
                    sp = pool.speculation
                    spec = SpeculationSwitch(draft_tokens=sp.draft_tokens, speculating_classes=sp.speculating_classes,
                                             off_above_occupancy=sp.switch_off_batch, alpha_threshold=sp.alpha_threshold)
                rows.append(ControllerSlice(id=s.id, role=s.role, tier=s.tier, shape=s.slice, vms=s.vms,
                                            batch_cap=pool.decode_normal.batch_cap if pool is not None and pool.decode_normal else None,
                                            batch_cap_failover=pool.decode_failover.batch_cap if pool is not None and pool.decode_failover else None,
                                            speculation=spec))
            pods.append(ControllerPod(id=p.id, chip=p.chip, chips=p.chips, up=p.up, slices=rows))
        routing = []
        on_loss = _loss_routing(pl, r)
        for t in sorted({w.tier for w in pl.routing if w.region == r} | set(on_loss or {})):
            routing.append(TierRouting(tier=t, weights=[Weight(from_pod=w.from_pod, to_pod=w.to_pod, share=w.share)
                                                        for w in pl.routing if w.region == r and w.tier == t],
                                       on_loss=None if on_loss is None else on_loss.get(t, [])))
        absorbs = {x: [f for f in v if f.to == r] for x, v in fo.items()}
        regions.append(ControllerRegion(
            region=r, pods=pods, routing=routing, failover={x: v for x, v in absorbs.items() if v},
            warm_pool_depth=sum(w.slices for w in plan.warm_pool if w.region == r),
            thresholds=[_thresholds(inst, plan, ctx, r, t) for t in sorted({p.tier for p in plan.pools if p.region == r})],
        ))
    return ControllerExport(schema_version=CONTROLLER_SCHEMA_VERSION if pl.scenarios is not None else 1, fleetplan_version=plan.fleetplan_version, instance_name=inst.name, instance_hash=plan.instance_hash,
                            plan_hash=pl.plan_hash, regions=regions, failover_routing=fo, router=plan.router or inst.serving.router,
                            plan_status=plan.status, plan_note=status_note(plan))
