"""The simulation report: per region-tier and pool, every simulated metric beside the
plan's prediction and the closed-form model at the simulated size, with their ratios.
Versioned; carries the hashes of the instance and of the plan; no wall-clock time
inside (the same inputs and seed give the same bytes)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_serializer

from fleetplan.results.fields import omit_none

__all__ = ["SIM_SCHEMA_VERSION", "SimMetric", "SimPool", "SimDcn", "SimTier", "SimReport"]

SIM_SCHEMA_VERSION = 1

#: |simulated / predicted - 1| above this is flagged (the 20% of capacity-planning practice).
RATIO_TOLERANCE = 0.20


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


#: A value that may be infinite (an unstable queue): in JSON a number, the string "inf", or null.
Num = Annotated[float | None, WithJsonSchema({"anyOf": [{"type": "number"}, {"const": "inf"}, {"type": "null"}]})]


class SimMetric(_F):
    """One metric of a pool: simulated, predicted, and their ratios."""

    key: str = Field(description="Machine name, e.g. 'ttft_p99_ms'.")
    name: str = Field(description="What it is, e.g. 'TTFT p99'.")
    unit: str = Field(description="Unit of every value in the row.")
    simulated: Num = Field(description="Measured in the simulation over the requests that arrived in the measurement window.")
    ci95: list[Num] | None = Field(None, description="95% confidence interval of the simulated value from 10 batch means of the window (percentiles only).")
    plan: Num = Field(description="The plan's estimate for this pool in this scenario, at full scale: TTFT as the percentile of the sum of its components, TPOT at the occupancy the load reaches (null when the plan states none).")
    plan_bound: Num = Field(None, description="The plan's sizing bound, at full scale: TTFT as the sum of its components' percentiles, TPOT and ITL at a full batch (the batch cap).")
    model: Num = Field(description="The closed-form model at the simulated slices and load (queues: M/G/c, Allen-Cunneen; TTFT: the percentile of the sum of its independent components).")
    model_mmc: Num = Field(None, description="Queue metrics: the same with exponential service (M/M/c, Erlang C).")
    model_bound: Num = Field(None, description="The bound at the simulated slices and load (TTFT: the sum of the components' percentiles -- path, M/G/c wait, compute, exposed KV; 'model' is the percentile of their sum).")
    ratio_plan: Num = Field(description="simulated / plan; null when either is missing, or both are times under 1 ms (a ratio of two "
                                        "sub-millisecond waits says nothing about the model).")
    ratio_model: Num = Field(description="simulated / model; null as ratio_plan.")


class SimPool(_F):
    """A pool of the region-tier: its slices and metrics."""

    role: Literal["prefill", "decode", "replica"]
    slice: str
    slices_planned: int = Field(description="Slices of this pool in the plan in this scenario, warm-pool slices joined included (count).")
    slices: int = Field(description="Slices simulated (count).")
    metrics: list[SimMetric]


class SimDcn(_F):
    """Prefill -> decode KV over the DCN in a run with a placement: how it was
    routed and what the measured share (the prefill pool's ``dcn_share`` row: simulated
    against the plan's prediction) is set beside."""

    routing: Literal["placement", "placement-normal", "rule"] = Field(description=(
        "How KV was routed: 'placement' -- the placement's routing weights for this scenario; 'placement-normal' -- the placement's "
        "weights for the normal peak held in another scenario (a placement routes the normal peak only); 'rule' -- the plan's rule "
        "(results.dcn) on the placed pods at this scenario's load (--kv-routing rule)."))
    prefilled: int = Field(description="Requests of the window whose prompt was prefilled (count).")
    crossed: int = Field(description="Of which their KV crossed the DCN to a decode slice in another pod (count).")
    routed_share: float = Field(description="The share of requests (fraction) the run's routes send to another pod when the requests "
                                            "spread evenly over the prefill slices: what the run should measure (the row's 'model').")
    rule_share: float | None = Field(description="The plan's rule (results.dcn.tier_flow: each pod's decode slices take its prefill's KV "
                                                 "up to their operating point's rate, the rest crosses; warm slices that join count as "
                                                 "crossing) on the placement's pods at this scenario's load (fraction): the plan's "
                                                 "prediction had it been made for these pods.")
    pods_differing: int | None = Field(description="Pods of the region whose slices of this tier differ between the plan's pods "
                                                   "(plan.pods) and the placement (count; null when the plan was sized without pods).")
    decode_elsewhere: int = Field(description="Requests of the window whose KV reached a pod with no decode slot free and that joined "
                                              "a decode slice in another pod, their KV moved without a second transfer (count).")


class SimTier(_F):
    """One region-tier: its traffic in the window, what was turned away, goodput and pools."""

    region: str
    tier: str
    scenario: str = Field(description="The plan's scenario this region-tier ran in.")
    load_rps: float = Field(description="Requests/s offered to the simulated slice of the region-tier (own + diverted, before clamp and shed; the plan's arrivals_rps is after the clamp).")
    arrived_rps: float = Field(0.0, description="Requests/s that arrived in the window (a trace's rate over a window differs from its mean).")
    requests: int = Field(description="Requests that arrived in the measurement window (count).")
    admitted: int = Field(description="Of which served (count).")
    rejected_admission: int = Field(description="Rejected fast by admission control (TTFT estimate over the budget) (count).")
    clamped: int = Field(description="Diverted long prompts rejected by the admission clamp (count).")
    shed: int = Field(description="Sheddable-class requests shed (count).")
    waited_for_decode: int = Field(0, description="Admitted requests that found every decode slot taken and queued for one (count).")
    goodput: float | None = Field(description="Of the SLO-class requests served or rejected by admission control (clamped and shed ones, the plan's deliberate mitigations counted above, are left out), the share served within both the TTFT and the TPOT limit of their class (fraction).")
    goodput_by_class: dict[str, float] = Field(default_factory=dict, description="The same per class with SLOs (fraction).")
    pools: list[SimPool]
    notes: list[str] = Field(default_factory=list)
    dcn: SimDcn | None = Field(None, description="KV over the DCN (disaggregated tiers run with a placement); null otherwise.")


class SimReport(_F):
    """A simulation of one region's pools of a plan."""

    schema_version: Literal[1] = SIM_SCHEMA_VERSION
    fleetplan_version: str
    instance_name: str
    instance_hash: str
    plan_hash: str
    region: str
    scenario: str = Field(description="The scenario asked for: 'normal', a region loss 'lose:X@HH', or 'sizing' (each tier in the scenario that sizes its prefill or replica pool).")
    arrivals: str = Field(description="'poisson' or 'trace:FILE'.")
    output_lengths: Literal["fixed", "geometric"] = Field(description="Output tokens per request: the instance's mean for all, or geometric with that mean.")
    router: str = Field(description="Colocated replicas: how the gateway picks a replica ('least-work' or 'random').")
    trace_format: str | None = Field(None, description="The trace's format when arrivals replay one (detected or --trace-format).")
    trace_sha256: str | None = Field(None, description="SHA-256 of the trace file replayed.")
    placement: str | None = Field(None, description="The placement file used for pods and KV routing (null: one ICI domain).")
    placement_hash: str | None = Field(None, description="SHA-256 of that placement's canonical JSON.")
    kv_routing: Literal["placement", "rule"] | None = Field(None, description="With a placement: 'placement' (its routing weights; "
                                                            "those of the normal peak in a scenario it has none for) or 'rule' (the plan's "
                                                            "rule on the placed pods); null without one.")
    seed: int
    scale: float = Field(description="Fraction of the region's slices and load simulated.")
    duration_s: float = Field(description="Measurement window (s of simulated time).")
    warmup_s: float = Field(description="Simulated time before the window, excluded from the metrics (s).")
    tiers: list[SimTier]
    notes: list[str] = Field(default_factory=list)
    physics_source: str | None = Field(None, description="The plan's instance has a physics: block: the source whose step times this "
                                       "run used ('instance' for the instance's own priors; simulate --physics); the model's predictions "
                                       "beside the metrics are under it too. Omitted otherwise.")

    @model_serializer(mode="wrap")
    def _omit_no_physics(self, handler):
        return omit_none(handler(self), "physics_source")
