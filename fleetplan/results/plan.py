"""The Plan: what to buy and how to run it, per scenario, with predictions, costs, the
solver's status and the independent verifier's findings. Versioned; carries the hash of
the instance it was solved for (loading it against another instance is an error)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from fleetplan.results.fields import omit_none

__all__ = [
    "PLAN_SCHEMA_VERSION", "OperatingPoint", "SpeculationPolicy", "Pool", "RegionFleet", "WarmPoolSlices", "Route",
    "PoolLoad", "SourceRecord", "PoolSource", "PlanPhysics", "SloMargin", "ScenarioResult", "CostSummary", "SolverInfo", "Violation", "ServingModeChoice", "PodContent", "TierDcn", "Plan", "recorded_router", "status_note",
]

PLAN_SCHEMA_VERSION = 1


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class OperatingPoint(_F):
    """A decode operating point: the batch cap a slice admits up to and the draft length."""

    batch_cap: int = Field(description="Resident requests per slice, at most (count).")
    draft_tokens: int = Field(description="Speculative draft length k; 0 = speculation off.")
    step_ms: float = Field(description="p50 (verify) step time at a full batch (ms).")
    tokens_per_s_per_slice: float = Field(description="Output tokens/s of one slice at a full batch.")
    tpot_p50_ms: float = Field(description="p50 TPOT of the slowest SLO class at a full batch (ms).")
    tpot_ms: dict[str, float] = Field(description="TPOT percentiles ('p99': ms) at a full batch.")
    itl_ms: dict[str, float] = Field(description="ITL percentiles ('p99': ms) at a full batch.")
    knee_batch: int = Field(description="The SLO knee at this draft length: largest legal batch (count).")
    handoff_reserve_requests: int = Field(description="Handoffs in flight the slice keeps KV for beside the batch: the p99 of "
                                          "Poisson(arrivals per slice at full load x the KV transfer time) (requests; fleetplan.perf.handoff).")
    handoff_reserve_gb: float = Field(description="The KV held for them: requests x the tier's p99 prompt's KV with the paging slack (GB); "
                                      "batch_cap x resident KV + this must fit the slice's KV page pool.")


class SpeculationPolicy(_F):
    """The load-aware speculation switch of a decode pool."""

    draft_tokens: int = Field(description="Draft length k when on (tokens).")
    speculating_classes: list[str] = Field(description="Classes that draft (acceptance >= threshold).")
    off_classes: list[str] = Field(description="Classes that never draft (acceptance below threshold).")
    alpha_threshold: float = Field(description="Acceptance-rate threshold (fraction).")
    switch_off_batch: int | None = Field(description="Occupancy (residents per slice) at and above which speculation no longer pays; null: it pays at every batch up to the cap.")


class Pool(_F):
    """Slices of one shape serving one role of one tier in one region."""

    region: str
    tier: str
    role: Literal["prefill", "decode", "replica"]
    slice: str = Field(description="Slice shape label, chip x chips.")
    chip: str
    chips_per_slice: int
    slices: int = Field(description="Slices (count).")
    chips: int = Field(description="Chips in these slices (count).")
    cost_per_hour_usd: float
    decode_normal: OperatingPoint | None = Field(None, description="Decode operating point in normal hours.")
    decode_failover: OperatingPoint | None = Field(None, description="Decode operating point in a region loss.")
    speculation: SpeculationPolicy | None = None
    schedule: str | None = Field(None, description="Replica pools: the engine schedule, 'prefill-first' (whole prompts before decode "
                                 "steps) or 'chunked-<C>' (mixed steps of the residents' decode tokens and a chunk of the head prompt "
                                 "within a budget of C tokens per step: vLLM --enable-chunked-prefill --max-num-batched-tokens C).")

    @property
    def chunk_tokens(self) -> int | None:
        """The chunked schedule's token budget per step (tokens), None otherwise."""
        if self.schedule and self.schedule.startswith("chunked-"):
            return int(self.schedule.split("-", 1)[1])
        return None


class WarmPoolSlices(_F):
    region: str
    slice: str
    slices: int
    chips: int
    cost_per_hour_usd: float


class RegionFleet(_F):
    """Pods and chips of one chip type in one region."""

    region: str
    chip: str
    pods_installed: int
    pods_new: int
    pods_total: int
    chips_in_pods: int
    chips_in_slices: int
    chips_in_warm_pool: int
    cost_per_hour_usd: float


class Route(_F):
    """Share of a lost region's tier traffic an absorber takes (hour-independent)."""

    lost: str
    to: str
    tier: str
    share: float


class PoolLoad(_F):
    """A region x tier x role in one scenario: load, capacity, mitigations, predictions."""

    region: str
    tier: str
    role: Literal["prefill", "decode", "replica"]
    slice: str | None
    slices: int = Field(description="Slices in service, warm-pool slices included (count).")
    warm_slices: int = Field(description="Warm-pool slices joined in this scenario (count).")
    arrivals_rps: float = Field(description="Requests/s reaching the pool before shedding (own + diverted, net of clamp).")
    diverted_rps: float = Field(description="Of which diverted from the lost region (requests/s).")
    clamped_rps: float = Field(description="Diverted cold long prompts rejected by the admission clamp (requests/s).")
    shed_rps: float = Field(description="Sheddable-class requests shed (requests/s).")
    shed_diverted_rps: float = Field(0.0, description="Of which diverted requests (requests/s).")
    shortfall: float = Field(description="Load left unserved within the SLOs, in shortfall_unit.")
    shortfall_unit: str
    utilisation: float | None = Field(description="Busy fraction (prefill) or demand/capacity (decode, replica).")
    capacity: float | None = Field(description="Capacity in capacity_unit.")
    capacity_unit: str
    ttft_p50_ms: float | None = None
    ttft_ms: dict[str, float] = Field(default_factory=dict, description="TTFT percentiles ('p99': ms) as the sum of the components' percentiles (path, queue wait, compute, exposed KV): an upper bound; a prefill pool is sized against the percentile of their sum (ttft_estimate_ms).")
    ttft_estimate_ms: dict[str, float] = Field(default_factory=dict, description="TTFT percentiles ('p50', 'p99': ms) as the percentile of the sum of those independent components: what users should see (checked against a simulation, docs/validation.md).")
    tpot_ms: dict[str, float] = Field(default_factory=dict, description="TPOT percentiles at the operating point (ms); decode: at a full batch, the bound.")
    tpot_estimate_ms: dict[str, float] = Field(default_factory=dict, description="Decode: TPOT percentiles ('p50', 'p99': ms) at the occupancy this load reaches (Little's law), by the instance's tail method.")
    occupancy: float | None = Field(None, description="Decode: mean residents per slice at this load, by Little's law at the step that occupancy gives (count; the batch cap when the load needs more). Replicas: mean sequences decoding per replica at the steady state.")
    pressure: float | None = Field(None, description="Load offered to the pool (before its shortfall) over the most load it carries within its SLOs (fraction; 1 = sized exactly for this scenario; above 1 the pool cannot carry its load).")
    growth_absorbed: float | None = Field(None, description="Load growth over the forecast the pool absorbs in this scenario before an SLO breaks: the largest g - 1 with g x the scenario's forecast load on it (own and diverted alike, without the demand margin) still within its SLOs at its operating points (fraction, e.g. 0.25 = +25%; at least the demand margin in a verified plan; prefill by a search on g with the TTFT, decode its capacity over the demand, replicas by bisection on the SLOs; searched to 100x). Null when the pool is over 100% load or has no slices.")
    withheld: str | None = Field(None, description="Why this pool's latency predictions are withheld (its load is over 100% of what it carries within the SLOs, or it has no slices); null when they are given.")
    dcn_share: float | None = Field(None, description="Prefill pools of a plan sized with its pods: the share of the pool's requests (fraction) whose "
                                    "KV crosses the DCN in this scenario, from the plan's pods (results.dcn: each pod's decode slices take "
                                    "its prefill slices' KV up to their operating point's rate, the rest leaves; warm slices joining the pool "
                                    "count as crossing); its TTFT predictions pay that share's DCN transfer. Omitted when sized without pods.")

    source: str | None = Field(None, description="A plan held under several physics sources (Plan.physics): the source these "
                               "predictions are under -- the one under which the pool is furthest from its SLOs in this scenario "
                               "(decode: the least tokens/s at its operating point); every SLO holds under every held source. "
                               "Omitted for a plan of one source.")

    @model_serializer(mode="wrap")
    def _omit_no_dcn(self, handler):
        return omit_none(handler(self), "dcn_share", "source")


class SourceRecord(_F):
    """One physics source of the plan's instance (``physics.sources``, and 'instance' when its own priors are one)."""

    name: str
    held: bool = Field(description="Whether the plan is sized and verified under this source (physics.hold).")
    description: str
    origin: str = Field(description="Where its priors came from: 'instance' (the instance's own), 'inline', or the included file's path.")
    priors_hash: str = Field(description="First 16 hex digits of the SHA-256 of its priors' canonical JSON (fleetplan.instance.physics.priors_hash).")
    reference_step_ms: float = Field(description="The step time 'hold: slowest' ranks sources by (ms): a decode step at batch 64 plus the "
                                     "prefill of the mean prompt, on the first chip's first slice shape.")


class PoolSource(_F):
    """Which held source binds a pool: the one its predictions are under in its sizing scenario."""

    region: str
    tier: str
    role: Literal["prefill", "decode", "replica"]
    scenario: str = Field(description="The pool's sizing scenario (its highest pressure), 'normal' when none is recorded.")
    source: str = Field(description="The held source under which the pool is furthest from its SLOs there.")


class PlanPhysics(_F):
    """The physics sources a plan was sized and verified under (instances with a physics: block)."""

    hold: str = Field(description="physics.hold as solved: 'all', 'slowest' or a source's name.")
    sources: list[SourceRecord]
    binding: list[PoolSource] = Field(description="Per pool (region x tier x role), the held source that binds it.")


class SloMargin(_F):
    """How far one SLO of one pool is from breaking, in one scenario (computed by the evaluator,
    results/margins.py, never the model)."""

    region: str
    tier: str
    role: Literal["prefill", "decode", "replica"]
    scenario: str = Field(description="'normal' (the normal peak) or the pool's sizing scenario.")
    metric: Literal["ttft", "tpot", "itl"]
    percentile: float
    limit_ms: float = Field(description="The SLO's limit (ms).")
    step_time_margin: float | None = Field(description="The largest multiplier on every step time (prefill and decode together: the "
                                           "priors' two time scales) at which the SLO still holds at the pool's load in this scenario "
                                           "(dimensionless, 4 significant digits rounded down, searched from 0.1 to 10; 1.25 = every step may be 25% "
                                           "slower); the least over the held sources. Null: no slices.")
    load_margin: float | None = Field(description="The largest multiplier on the pool's load in this scenario (own and diverted alike) at "
                                      "which the SLO still holds (dimensionless, 4 significant digits rounded down, searched to 100); the least over "
                                      "the held sources. Null: no slices or no load.")
    source: str | None = Field(None, description="A plan of several held sources: the one whose step-time margin is the least (the "
                               "step-time margin is under it; the load margin too unless load_source names another). Omitted for a "
                               "plan of one source.")
    load_source: str | None = Field(None, description="A plan of several held sources: the one whose load margin is the least, when it "
                                    "is not `source`. Omitted otherwise.")

    @model_serializer(mode="wrap")
    def _omit_one_source(self, handler):
        return omit_none(handler(self), "source", "load_source")


class ScenarioResult(_F):
    name: str
    kind: Literal["normal", "loss"]
    lost_region: str | None
    hour: int | None = Field(description="Hour (UTC) of a loss scenario; null for normal (each region at its own peak).")
    pools: list[PoolLoad]
    shed_rps: float
    clamped_rps: float
    warm_slices_used: int
    prefill_shortfall_rps: float
    decode_shortfall_tokens_per_s: float
    unserved_rps: float = Field(0.0, description="Requests/s not served end to end (a request needs its prefill and its decode): per region-tier the largest of its roles' shortfalls in requests, summed.")
    shed_cost_per_hour_usd: float = Field(0.0, description="Price of the shed tokens while the scenario lasts (USD/h, instance's batch_shed_cost).")
    clamp_cost_per_hour_usd: float = Field(0.0, description="Price of the clamped requests while the scenario lasts (USD/h, instance's clamp_cost).")


class CostSummary(_F):
    """Cost of the fleet and what it buys (USD, tokens)."""

    fleet_cost_per_hour_usd: float = Field(description="Chip-hours of every slice and warm slice + new pods (USD/h).")
    chips: int
    prefill_cost_per_hour_usd: float
    decode_cost_per_hour_usd: float
    replica_cost_per_hour_usd: float
    warm_pool_cost_per_hour_usd: float
    pods_cost_per_hour_usd: float
    peak_output_tokens_per_s: float = Field(description="Sum of the regions' peak output tokens/s.")
    mean_output_tokens_per_s: float = Field(description="Daily mean output tokens/s over the 24 hourly loads.")
    mean_input_tokens_per_s: float = Field(description="Daily mean input (prompt) tokens/s.")
    cost_per_1m_output_tokens_usd: float | None = Field(description="All fleet cost carried by output tokens, at the daily mean demand (USD per 1M); null when withheld (per_1m_withheld).")
    cost_per_1m_output_tokens_at_peak_usd: float | None = Field(description="The brief's convention: fleet cost over peak output tokens (USD per 1M); null when withheld.")
    cost_per_1m_input_tokens_usd: float | None = Field(description="Prefill-side cost (prefill slices; replicas by prefill time share) over input tokens (USD per 1M); null when withheld.")
    cost_per_1m_output_tokens_decode_usd: float | None = Field(description="Decode-side cost over output tokens (USD per 1M); null when withheld.")
    cost_per_1m_tokens_blended_usd: float | None = Field(description="Fleet cost over input + output tokens (USD per 1M); null when withheld.")
    batch_infill_output_tokens_per_day: float = Field(description="Output tokens/day the idle trough capacity could serve to the batch class.")
    cost_per_1m_output_tokens_with_infill_usd: float | None = Field(description="Fleet cost over interactive plus batch-infill output tokens (USD per 1M); null when withheld.")
    per_1m_withheld: str | None = Field(None, description="Why every $ per 1M tokens figure is null: in normal operation the fleet does not serve all the demand (a pool over 100% load or without slices), so a cost over tokens it does not serve would be understated; null when they are given.")


class SolverInfo(_F):
    solver: str
    termination: str = Field(description="How the last solve ended: 'optimal' (proved: the bound meets the objective), 'gap_reached' "
                                         "(stopped at the --mip-gap asked for; gap says how far from the bound), 'time_limit', "
                                         "'infeasible', 'unknown' ...; 'n/a' for the hand plan.")
    objective: float | None
    bound: float | None
    gap: float | None
    iterations: int = Field(description="Solves in the chord-refinement loop (iterated capacity cap).")
    variables: int
    integer_variables: int
    constraints: int
    pod_stage_termination: str | None = Field(None, description="A plan sized with its pods: how the pod stage's last solve ended "
                                              "(termination values as above; 'work_limit' when its proof stopped at its work limit), the failover "
                                              "routing fixed at the plain sizing's. bound and gap are against the plain sizing's bound, a bound "
                                              "of the placement-aware problem too. A plan without pods of an instance sized with them: "
                                              "'time_limit' when `solve --time-limit` cut the pod stage, or its plan's extraction or "
                                              "verification, and the plan is the plain sizing's (its diagnostics say so). Omitted otherwise.")
    pod_stage_gap: float | None = Field(None, description="The pod stage's gap against its own bound (fraction): how far the plan may be "
                                        "from the best placed fleet with that routing. Omitted otherwise.")

    @model_serializer(mode="wrap")
    def _omit_no_stage(self, handler):
        return omit_none(handler(self), "pod_stage_termination", "pod_stage_gap")


class Violation(_F):
    """A check the independent verifier found failing."""

    check: str
    where: str
    message: str


class PodContent(_F):
    """One pod (ICI domain) of a plan sized with its pods: which slices it holds."""

    region: str
    chip: str
    pod: int = Field(description="Index of the pod among the region's pods of this chip type (0-based; `fleetplan place` names it REGION/CHIP/NN).")
    slices: dict[str, int] = Field(description="'tier/role/shape' (and 'warm/shape') -> slices in this pod (count).")
    chips_used: int = Field(description="Chips its slices occupy (count).")
    dcn_egress_gbytes_per_s: float = Field(description="Its largest cross-pod KV in any scenario (GB/s), at the plan's loads (results.dcn).")


class TierDcn(_F):
    """A region x tier's DCN share in a plan sized with its pods."""

    region: str
    tier: str
    dcn_share_max: float = Field(description="Its ceiling (fraction of requests): workload.tiers[].dcn_share_max, else placement.dcn_share_max.")
    sized_for: float = Field(description="The DCN share its TTFT composition was sized for (fraction; a level at most the ceiling, "
                                         "or 1 -- every request crossing, a declared overage -- where the plan's pods send more "
                                         "than the ceiling): the "
                                         "prefill pools pay that share's DCN transfer in their p99 composition.")
    normal: float = Field(description="Share at the normal peak (fraction), from the plan's pods.")
    worst_loss: float | None = Field(description="Largest share in a region-loss scenario (fraction); null without one.")
    worst_loss_scenario: str | None = Field(description="The scenario of worst_loss.")
    why: str | None = Field(None, description="Where a share is above its ceiling (a declared overage), or where this tier's own "
                                              "ceiling is above placement.dcn_share_max and the region's share over all tiers passes that "
                                              "overall ceiling (declared for the region): why no placement keeps it within, from the plan's "
                                              "pods and slice shapes, and what reaching the ceiling would take. Omitted otherwise.")

    @model_serializer(mode="wrap")
    def _omit_no_why(self, handler):
        return omit_none(handler(self), "why")


class ServingModeChoice(_F):
    """The serving mode a region x tier runs ('auto' instances), and why."""

    region: str
    tier: str
    mode: Literal["disaggregated", "colocated"] = Field(description="What the sizing model chose for this region x tier.")
    cost_per_hour_usd: float = Field(description="Slices of this region x tier in the plan (USD/h; pods and warm pool not included).")
    estimate_per_hour_usd: dict[str, float | None] = Field(description=(
        "Per mode, the cost of the fewest slices of the cheapest shape that carry this region x tier's own normal peak, from the "
        "candidate tables (USD/h; null: no shape of that mode serves the tier). An estimate of each mode's cost without failover, "
        "warm pool or pod rounding, not a comparison solve."))
    reason: str = Field(description="Why this mode, in plain words.")


class Plan(_F):
    """A fleet plan. Written atomically; byte-identical for the same input and options
    (no wall-clock times inside)."""

    schema_version: Literal[1] = PLAN_SCHEMA_VERSION
    fleetplan_version: str
    instance_name: str
    instance_hash: str = Field(description="SHA-256 of the instance's canonical content.")
    instance: dict[str, Any] | None = Field(None, description=(
        "The instance the plan was solved for, as validated -- overlays (`solve --workload/--priors`, `include:`) applied -- in its "
        "canonical JSON form; its SHA-256 is instance_hash. Readers (report, whatif, place, export, simulate, the Python API) use it "
        "when no instance is given; null in plans written before it was embedded."))
    options: dict[str, str | float | int | bool | None]
    status: Literal["verified", "shortfall", "violations", "unverified", "no_solution"] = Field(
        description="verified: every SLO holds in every hour and scenario; shortfall: the plan is verified but some load cannot be served (reported); "
                    "violations: the verifier disagrees with the plan; unverified: `solve --time-limit` passed while the verifier was "
                    "checking the plan (written only with --write-unverified; its diagnostics say so): the solver's incumbent with the "
                    "independent evaluator's predictions, not re-proved."
    )
    fleet: list[RegionFleet]
    pools: list[Pool]
    warm_pool: list[WarmPoolSlices]
    routing: list[Route]
    scenarios: list[ScenarioResult]
    cost: CostSummary
    solver: SolverInfo
    binding: list[str] = Field(description="Constraints that bind at the optimum, with what binds them.")
    diagnostics: list[str] = Field(description="Plain-words notes: shortfalls, what would fix them, modelling caveats.")
    violations: list[Violation]
    serving_modes: list[ServingModeChoice] | None = Field(None, description=(
        "Per region x tier, the serving mode the sizing model chose (instances with serving.mode 'auto'; omitted when the mode is "
        "fixed, then every region x tier runs it). Readers take each region x tier's mode from here."))
    pods: list[PodContent] | None = Field(None, description=(
        "A plan sized with its pods (placement.size_with_pods): every pod in use and the slices it holds -- prefill and decode of a "
        "tier counted in the same pods, so its KV stays on the ICI -- which `fleetplan place` starts from. Omitted when sized without pods."))
    dcn: list[TierDcn] | None = Field(None, description=(
        "A plan sized with its pods: per region x tier, the DCN share ceiling, the share its TTFT was sized for, and the shares at the "
        "normal peak and in the worst region loss. Omitted when sized without pods."))
    physics: PlanPhysics | None = Field(None, description=(
        "The physics sources the plan was sized and verified under, and the one binding each pool (instances with a physics: block; "
        "omitted otherwise: one source, the instance's priors)."))
    margins: list[SloMargin] | None = Field(None, description=(
        "Per pool and SLO, at the normal peak and in the pool's sizing scenario, the step-time and load multipliers at which the SLO "
        "breaks (instances with a physics: block; `solve`, `whatif` and `report` show them for every plan)."))
    router: Literal["least-work", "round-robin", "random", "prefix-aware"] | None = Field(None, description=(
        "The routing every colocated replica pool and disaggregated prefill pool of the plan was sized for (serving.router): "
        "'round-robin' (a G/G/1 per replica or slice at C_a^2 / c), 'random' (a G/G/1 per replica or slice at a random split's "
        "C_a^2: M/G/1 for Poisson arrivals) or 'prefix-aware' (queued as random); omitted for 'least-work' (the default: one FCFS "
        "queue per pool, G/G/c), so a plan of an instance that leaves the router at its default is written as before the field "
        "existed. Deploy this router or one that balances at least as well: a plan sized for least-work misses its TTFT under a "
        "random split. Omitted too in plans written before it was recorded (their instance's serving.router applies)."))

    @model_serializer(mode="wrap")
    def _omit_fixed_modes(self, handler):
        # a fixed-mode plan has no serving_modes and is written exactly as before the field existed; likewise pods, dcn,
        # physics, margins and router
        return omit_none(handler(self), "serving_modes", "pods", "dcn", "physics", "margins", "router")


def recorded_router(router: str) -> str | None:
    """What :attr:`Plan.router` records for a plan sized for ``router`` (``serving.router``):
    the router, or None (omitted from the plan file) for the default 'least-work'."""
    return None if router == "least-work" else router


def status_note(plan: Plan) -> str | None:
    """What a reader of ``plan`` should be told about its status, in words, with what the
    plan records about it (None for a verified plan): ``report``, ``whatif`` and ``place``
    print it and carry it in their documents. An unverified plan (``solve
    --write-unverified`` after the time limit cut the verification) quotes its own
    'NOT VERIFIED' diagnostic."""
    if plan.status == "verified":
        return None
    if plan.status == "unverified":
        why = next((d for d in plan.diagnostics if d.startswith("NOT VERIFIED")), None)
        return ("the plan's status is 'unverified': written with `solve --write-unverified`, it was not re-proved against its instance "
                "when it was solved -- " + (why if why is not None else "the plan records no reason (its diagnostics have no 'NOT VERIFIED' note)"))
    if plan.status == "shortfall":
        normal = next((s for s in plan.scenarios if s.name == "normal"), None)
        worst = max(plan.scenarios, key=lambda s: s.unserved_rps, default=None)
        rps = lambda x: f"{x:,.0f}" if x >= 100 else f"{x:.3g}"  # noqa: E731
        if normal is not None and normal.unserved_rps > 0:
            what = f"{rps(normal.unserved_rps)} requests/s are not served end to end at the normal peak"
        elif worst is not None and worst.unserved_rps > 0:
            what = f"{rps(worst.unserved_rps)} requests/s are not served end to end in {worst.name}"
        else:
            what = "some load is not served within the SLOs"
        return f"the plan's status is 'shortfall': no fleet the instance allows (its slice shapes, SLOs and pod inventory) serves all the load; {what} (the plan's diagnostics say where and what would fix it)"
    if plan.status == "violations":
        return f"the plan's status is 'violations': the independent verifier found {len(plan.violations)} violation(s) when it was solved"
    return f"the plan's status is '{plan.status}'"
