"""The load sweep's JSON document (``fleetplan simulate --sweep --json``): each point, the
plan's marks and the SLO crossings of each swept pool, as pydantic models
(:func:`fleetplan.sim.sweep.sweep_report` fills them; ``fleetplan schema`` prints their
JSON Schema)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from fleetplan.sim.report import Num


class _D(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SweepPointDoc(_D):
    target_utilisation: float = Field(description="Offered utilisation asked for (load x mean service / slices).")
    utilisation: float = Field(description="Busy fraction measured over the window.")
    arrived_utilisation: float = Field(description="The busy fraction the window's own arrivals would need.")
    saturated: bool = Field(description="The queue grew through the window: the mean wait of its last third of requests rose significantly and "
                                        "materially over the first third's (10 batch means), or the pool served well below the work that "
                                        "arrived. Not stationary: its TTFT and wait depend on the window's length.")
    settled: bool = Field(True, description="The window is at least three of the queue's relaxation times, 1 / (c mu (1 - sqrt rho))^2, at "
                                            "this load: a stationary queue would have reached its tail. When false the simulated values are "
                                            "lower bounds (a pool that starts empty only fills).")
    wait_first_third_ms: Num = Field(None, description="Mean queue wait of the window's first third of requests (ms).")
    wait_last_third_ms: Num = Field(None, description="Mean queue wait of the window's last third of requests (ms).")
    wait_growth_t: Num = Field(None, description="t statistic of the slope of 10 batch means of the queue wait in arrival order.")
    backlogged: Num = Field(None, description="Share of the window during which a request waited in the queue.")
    busy_while_backlogged: Num = Field(None, description="Busy fraction over that time: what the pool serves when it always has work.")
    overloaded: bool = Field(False, description="The load asked for is above the pool's measured capacity (see SweepDoc.measured_capacity): "
                                                "the queue grows without bound in the long run, whatever this window showed.")
    near_capacity: bool = Field(False, description="The load asked for is within the measurement's margin of the pool's measured capacity: "
                                                   "utilisation ~1, which no window settles; not used for the crossing.")
    rps: float = Field(description="Requests/s offered (simulated slice).")
    ttft_ms: Num = Field(description="Simulated TTFT at the sweep's percentile (ms).")
    ttft_ci95: list[Num] | None = None
    wait_ms: Num = Field(description="Simulated prefill queue wait at the sweep's percentile (ms).")
    wait_ci95: list[Num] | None = None
    model_ttft_ms: Num = Field(description="The estimate: percentile of the sum, M/G/c wait (ms); colocated replicas: the colocated model's "
                                           "(perf.colocated, the pool's schedule and router).")
    mmc_ttft_ms: Num = Field(description="The same with M/M/c (ms); null for colocated replicas (no M/M analogue).")
    bound_ttft_ms: Num = Field(description="The bound at the simulated slices: sum of the components' percentiles (ms); the plan's own with "
                                           "--scale 1.")
    bound_full_scale_ttft_ms: Num = Field(None, description="With --scale < 1: the plan's bound at its own slices, at this utilisation (ms).")
    model_wait_ms: Num = Field(description="M/G/c (Allen-Cunneen) wait percentile (ms); colocated: the colocated model's prompt-queue wait.")
    mmc_wait_ms: Num = Field(description="M/M/c (Erlang C) wait percentile (ms); null for colocated replicas.")
    tpot_percentile: Num = Field(None, description="Colocated replicas: the percentile of the TPOT columns (the tightest TPOT SLO's; 99 "
                                                   "without one); null for prefill pools (their TPOT is the decode pool's).")
    tpot_ms: Num = Field(None, description="Colocated replicas: simulated TPOT of the window's SLO-class requests at tpot_percentile (ms).")
    tpot_ci95: list[Num] | None = None
    model_tpot_ms: Num = Field(None, description="Colocated replicas: the colocated model's TPOT at tpot_percentile at this load, over the "
                                                 "occupancy distribution (perf.colocated, ms).")


class SweepMark(_D):
    scenario: str
    utilisation: float = Field(description="Offered utilisation of the simulated pool at that scenario's load.")
    percentile: float
    plan_ttft_estimate_ms: Num = Field(description="The plan's TTFT estimate there at the sweep's percentile (ms).")


class SweepCrossing(_D):
    curve: Literal["bound", "bound full scale", "model", "simulation"] = Field(
        description="bound: the sum of the components' percentiles at the simulated slices (the plan's bound with --scale 1); bound full "
                    "scale: the same at the plan's slices (with --scale < 1); model: the percentile of the sum (M/G/c wait); simulation: "
                    "the simulated points.")
    slices: int = Field(description="Slices (or replicas) the curve is at.")
    utilisation: float | None = Field(description="Offered utilisation where the curve crosses the TTFT limit, interpolated; null when it "
                                                  "does not cross, or (simulation) when the points around the crossing cannot place it "
                                                  "(not both settled and stationary, or not adjacent).")
    lower: float | None = Field(description="The crossing is above this utilisation: the last one known under the limit (simulation: "
                                            "a settled, stationary point); null when above it from the first.")
    upper: float | None = Field(description="The crossing is at or below this utilisation: the first known above the limit (simulation: "
                                            "any point measured above it -- a queue that has not settled only rises); null when under it "
                                            "wherever it is known.")


class SweepDoc(_D):
    region: str
    tier: str
    role: str
    slice: str
    slices: int
    slices_planned: int | None = Field(None, description="The plan's slices (replicas) in this pool; more than slices with --scale < 1.")
    percentile: float
    limit_ms: float | None
    service_cs2: float
    schedule: str | None = Field(None, description="Colocated replicas: the pool's engine schedule the run and the model curves use.")
    router: str | None = Field(None, description="The router the run and the model curves use (serving.router: colocated replicas or prefill slices).")
    points: list[SweepPointDoc]
    marks: list[SweepMark]
    measured_capacity_margin: float | None = Field(None, description="Its margin: 0.02 or 3 standard deviations of the held points' busy "
                                                                    "fractions, whichever is larger.")
    measured_capacity: float | None = Field(None, description="The highest busy fraction while backlogged of the saturated points whose "
                                                             "queue held a request through half the window or more: what the pool serves "
                                                             "when it always has work "
                                                             "(~1 for a prefill pool; less for colocated replicas, whose decode takes a "
                                                             "share); null when no point was held.")
    crossings: list[SweepCrossing] = Field(default_factory=list, description="Where each curve crosses the TTFT SLO (none without a TTFT SLO).")
    notes: list[str]


class SweepReport(_D):
    """``fleetplan simulate --sweep-load --json``: the load sweep of each tier's prefill (or
    replica) pool, the models beside it, where each crosses the SLO, every option and the
    hashes of what it ran on. Floats to 6 significant digits."""

    kind: Literal["load sweep"] = "load sweep"
    fleetplan_version: str
    instance_name: str
    instance_hash: str
    plan_hash: str
    region: str
    scenario: str
    duration_s: float
    warmup_s: float
    seed: int
    scale: float
    arrivals: str
    trace_format: str | None = None
    trace_sha256: str | None = None
    output_lengths: str
    router: str
    placement: str | None = None
    admission_control: bool = Field(False, description="Always off in a sweep: the queue shows its own curve.")
    figure: str
    sweeps: list[SweepDoc]
