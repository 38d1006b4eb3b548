"""The what-if report (``fleetplan whatif --json``, ``fleetplan schema whatif``): per
event the routes, each surviving region's multipliers, pools and re-warm timeline, the
totals and the placement's DCN shares -- the document only (pydantic, frozen); the numbers
in it are computed by :mod:`fleetplan.whatif.accounting`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from fleetplan import __version__
from fleetplan.instance.schema import Instance
from fleetplan.results.fields import omit_none
from fleetplan.results.plan import Plan, SloMargin, status_note

__all__ = ["WHATIF_SCHEMA_VERSION", "Step", "PoolAccount", "Multiplier", "RewarmPoint", "RewarmReport", "SurvivorReport",
           "RouteShare", "WarmJoinCount", "PlacedDcnShare", "PlacementDcn", "EventResult", "WhatIfReport", "summary_report"]

WHATIF_SCHEMA_VERSION = 1


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Step(_F):
    """One line of a pool's slice accounting."""

    name: str
    slices: int = Field(description="Slices this step frees (mitigations) or adds (warm pool) (count).")
    amount: float = Field(description="Its size in amount_unit.")
    amount_unit: str
    explain: str


class PoolAccount(_F):
    """A survivor pool (region x tier x role) in the event."""

    region: str
    tier: str
    role: Literal["prefill", "decode", "replica"]
    slice: str
    installed: int = Field(description="Slices in service after the event (count).")
    lost_to_pods: int = Field(description="Slices lost with the pods (count).")
    need_normal: int | None = Field(description="Slices needed for this hour's own load before the loss (count; null: the SLO cannot hold).")
    need_failover: int | None = Field(description="Slices needed for the failover load before any mitigation (count).")
    need_final: int | None = Field(description="Slices needed for the load left after shedding and the clamp (count).")
    gap: int = Field(description="need_failover - installed, at least 0 (slices).")
    steps: list[Step]
    warm_slices: int
    residual_slices: int = Field(description="Slices still missing after every mitigation (count).")
    headroom_slices: int = Field(description="Slices beyond the final need (count).")
    residual: float = Field(description="Load left unserved within the SLO, in residual_unit.")
    residual_unit: str
    reject_share: float = Field(description="Share of the pool's admitted requests that must be rejected fast for the rest to meet the SLO (fraction).")
    check_excess: float = Field(0.0, description="Of the residual, the load the model kept that the exact check finds over the SLO (residual_unit; 0 when model and check agree).")
    work_normal_erlangs: float | None = Field(None, description="Prefill: busy slices of this hour's own load before the loss (Erlangs).")
    work_failover_erlangs: float | None = Field(None, description="Prefill: busy slices of the failover load before mitigations (Erlangs).")
    utilisation: float | None = Field(description="Busy fraction of the pool at the final load with every slice in service (fraction).")
    ttft_ms: dict[str, float] = Field(default_factory=dict, description="Prefill: TTFT percentiles at the final load without rejections ('p50', 'p99': ms); empty when the queue is unstable.")
    impact: str = Field(description="What the residual means for users, in one line.")


class Multiplier(_F):
    value: float | None = Field(description="After the loss over before it (x); null when the survivor had no load of that kind of its own "
                                            "before (a region with no traffic): the ratio is undefined, the explain text gives the load.")
    explain: str


class RewarmPoint(_F):
    t_s: float
    hit_rate: float = Field(description="Blended prefix hit rate (fraction of prompt tokens).")
    prefill_demand_multiplier: float | None = Field(description="Prefill work then over before the loss (x); null for a region with no traffic of its own.")
    needed: dict[str, int | None] = Field(description="Prefill slices each pool ('tier shape') needs then, with the transient's mitigations (count; null: the SLO cannot hold).")
    in_service: dict[str, int] = Field(description="Prefill slices each pool has: installed + warm slices joined (count).")


class RewarmReport(_F):
    cache_tokens: float = Field(description="Prefix-cache capacity of the survivor's prefill chips (tokens).")
    cold_tokens_per_s: float = Field(description="Uncached prompt tokens/s of the cold traffic, written into the cache (tokens/s).")
    tau_s: float = Field(description="Time constant: cache tokens / cold tokens/s (s).")
    done_s: float = Field(description="Until the hit rate is within 1 point of steady (s).")
    points: list[RewarmPoint]
    explain: str


class SurvivorReport(_F):
    region: str
    own_rps: float
    diverted_rps: float
    diverted_from: dict[str, float] = Field(description="Diverted req/s by lost region.")
    traffic: Multiplier
    hit_rate_before: float
    hit_rate_steady: float
    hit_rate_transient: float
    prefill_demand_steady: Multiplier
    prefill_demand_transient: Multiplier
    decode_demand: Multiplier
    shed_rps: float
    clamped_rps: float
    warm_slices: int
    residual_slices: int
    pools: list[PoolAccount]
    rewarm: RewarmReport | None
    rewarm_note: str


class RouteShare(_F):
    lost: str
    to: str
    tier: str
    share: float
    rps: float


class WarmJoinCount(_F):
    """Warm slices of one pod that join one pool of a region-tier in a placement's loss scenario."""

    pod: str = Field(description="Pod (ICI domain) id, 'region/chip/NN'.")
    role: Literal["prefill", "decode", "replica"]
    slices: int = Field(description="Warm slices of this pod joining the pool (count).")


class PlacedDcnShare(_F):
    """A surviving region x tier's DCN share by the placement's routing in a region loss,
    beside its ceiling and the plan's prediction (``fleetplan whatif --placement``)."""

    region: str
    tier: str
    rps: float = Field(description="Requests/s the tier's prefill pool serves in the placement's scenario (the plan's scenario record).")
    kv_out_rps: float = Field(description="Of those, requests/s whose KV crosses the DCN by the placement's routing (req/s).")
    dcn_share: float = Field(description="kv_out_rps / rps: share of the tier's requests whose KV crosses the DCN, by the placement's "
                                         "routing in the scenario (fraction; the placement's TierScenarioDcn.dcn_share).")
    dcn_share_max: float | None = Field(description="The tier's ceiling (fraction; the placement's PlacedTierDcn.dcn_share_max: "
                                                    "workload.tiers[].dcn_share_max, else placement.dcn_share_max, by default the brief's 5%).")
    plan_dcn_share: float | None = Field(description="The plan's predicted share in the same scenario (fraction; PoolLoad.dcn_share: it "
                                                     "counts every warm prefill slice as crossing); its TTFT paid that share.")
    above_ceiling: bool = Field(description="dcn_share above dcn_share_max: above the share the DCN-share alert (FleetplanKVOverDCN) "
                                            "is set at for a tier planned within it.")
    overage_declared: bool = Field(description="The plan declares this tier's overage (plan.dcn[].sized_for above the ceiling): its "
                                               "TTFT was sized for that share and the alert is set above the planned share.")
    warm_joins: list[WarmJoinCount] = Field(description="Where the warm slices that join this tier's pools sit in the scenario, per pod "
                                                        "and role (the placement's choice; the plan says only how many).")


class PlacementDcn(_F):
    """The placement's KV routing in a region loss, as ``fleetplan whatif --placement`` reads it."""

    placement_hash: str = Field(description="SHA-256 of the placement's canonical JSON.")
    scenario: str = Field(description="The placement's scenario used ('lose:REGION@HH'): the event's own hour when the plan lists it, "
                                      "else the plan's loss of that region whose loads dominate the event's hour (nearest such hour; "
                                      "nearest hour if none does).")
    same_hour: bool = Field(description="The scenario is at the event's hour (false: another hour's routing, see note).")
    tiers: list[PlacedDcnShare] = Field(description="Per surviving region x tier whose prefill serves load in the scenario.")
    note: str


class EventResult(_F):
    label: str
    lost_regions: list[str]
    lost_pods: list[str]
    hour: int
    phase: Literal["steady", "transient"]
    routing: Literal["optimise", "proportional", "plan", "controller"] = Field("optimise", description=(
        "How the lost traffic was routed: optimise (the what-if model chose the shares), proportional (fixed to the survivors' own "
        "load), plan or controller (held at the deployed shares: the plan's failover routing or a controller document's; only "
        "shedding, the clamp and warm slices were decided)."))
    routes: list[RouteShare]
    survivors: list[SurvivorReport]
    dropped_rps: float = Field(description="Lost traffic no surviving region may absorb (req/s).")
    shed_rps: float
    clamped_rps: float
    warm_slices: int
    residual_slices: int
    residual_request_equivalents: float = Field(description="Requests/s unserved within the SLOs, counted once per region-tier (the larger of the prefill/replica residual and the decode residual in requests), plus dropped traffic (req/s).")
    model_residual_request_equivalents: float = Field(description="The model's least residual, counted like residual_request_equivalents from the model's own decisions (req/s).")
    mix_iterations: int
    solve_s: float
    notes: list[str]
    placement_dcn: PlacementDcn | None = Field(None, description=(
        "With --placement, a single-region loss: the DCN share per surviving region x tier by the placement's routing in that loss, "
        "beside its ceiling and the plan's prediction. Omitted without --placement, and for N-2 and pod losses (the placement routes "
        "single-region losses only; notes say so)."))

    margins: list[SloMargin] | None = Field(None, description=(
        "Every survivor pool's SLO margins in this event (results/margins.py): per SLO the step-time and load multipliers at which it "
        "breaks at the pool's slices and load after the event and its mitigations (scenario: the event's label); below 1 where the "
        "pool does not hold the SLO as it is. Not the plan's margins (those are the plan's margins[])."))

    @model_serializer(mode="wrap")
    def _omit_placement(self, handler):
        # without a placement the report is written exactly as before the field existed
        return omit_none(handler(self), "placement_dcn", "margins")


class WhatIfReport(_F):
    schema_version: Literal[1] = WHATIF_SCHEMA_VERSION
    fleetplan_version: str
    instance_name: str
    instance_hash: str
    plan_status: Literal["verified", "shortfall", "violations", "unverified", "no_solution"] = Field("verified", description=(
        "The status of the plan the what-if ran on (its `status`): anything but verified is a plan `solve` wrote with "
        "--write-unverified, and plan_note says what it records."))
    plan_note: str | None = Field(None, description="Why the plan is not verified, in words, quoting what it records (null for a verified plan).")
    events: list[EventResult]


def summary_report(inst: Instance, plan: Plan, results: list[EventResult]) -> WhatIfReport:
    return WhatIfReport(fleetplan_version=__version__, instance_name=inst.name, instance_hash=plan.instance_hash, plan_status=plan.status,
                        plan_note=status_note(plan), events=results)
