"""The candidate tables' types: one candidate per (tier, slice shape, regime) and role, and
:class:`ModelData`, everything the sizing model reads (index sets, scenarios, parameters and
the candidates), built by :func:`fleetplan.tables.derived.build_model_data`.

Units: requests/s, tokens/s, ms, Erlangs (busy slices), slices and chips as named.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fleetplan.instance.modes import COLOCATED, DISAGGREGATED, candidate_modes
from fleetplan.instance.scenarios import FAILOVER, NORMAL, Scenario
from fleetplan.instance.schema import Instance
from fleetplan.perf.pools import DecodeOp, PrefillProfile, TierMix
from fleetplan.perf.roofline import SliceSpec
from fleetplan.perf.ttft_tail import MixTail

__all__ = ["DecodeCandidate", "PrefillCandidate", "ReplicaCandidate", "ModelData", "pod_bound"]


@dataclass(frozen=True)
class DecodeCandidate:
    """Chosen decode operating point of a tier on a slice shape in a regime."""

    tier: str
    config: str
    regime: str
    op: DecodeOp | None
    knee_batch: int
    tokens_per_s: float  # per slice, output tokens/s; 0 when no legal point


@dataclass(frozen=True)
class PrefillCandidate:
    """Prefill physics of a tier on a slice shape in one regime (ms, Erlangs).

    ``service_ms[src]`` is the mean service time of a request of source ``src``
    ('own' or 'div'); ``capacity_erlangs[n]`` the most work n slices carry with the TTFT
    percentile of the sum within its SLO for every mix of ``tails`` (index 0..len-1,
    convex in n; all zero when the SLO cannot hold on this shape whatever the pool size:
    too many requests miss it with no queue at all); ``budget_ms`` the wait budget of the
    sum of percentiles (the least favourable mix's limit - path - compute - KV at the
    percentile), ``profile`` that mix's; ``tails`` every mix's :class:`MixTail`.
    """

    tier: str
    config: str
    regime: tuple
    service_ms: dict[str, float]
    profile: PrefillProfile
    budget_ms: float
    percentile: float
    capacity_erlangs: np.ndarray
    ttft_limit_ms: float
    tails: tuple[MixTail, ...] = ()
    #: several held sources: each source's own candidate and the factor its curve is
    #: multiplied by in the units of ``service_ms`` (:func:`fleetplan.perf.robust.min_capacity`)
    parts: tuple = ()
    factors: tuple = ()
    #: the table cache's key of the prefill piece (() without a cache): its curve's points
    #: are kept under it (:func:`fleetplan.tables.prefill._sum_curve`), so :func:`fleetplan.tables.prefill.extend_prefill` reuses them
    table_key: tuple = ()


@dataclass(frozen=True)
class ReplicaCandidate:
    """A colocated replica of a tier on a slice shape under one engine schedule in one regime
    (``ModelData.replica[(tier, config, schedule, regime)]``).

    ``rps_per_replica`` (requests/s) is SLO-limited, times the utilisation headroom, for a
    pool of at least ``min_replicas`` replicas (n_ref; least-work routing pools the prompts'
    queue, so the rate holds for every larger pool); ``schedule`` the engine schedule's
    label ('prefill-first', 'chunked-512': :class:`fleetplan.perf.colocated.Schedule`);
    ``rps_floor`` the rate of a pool of one (its own M/G/1 queue), times the headroom."""

    tier: str
    config: str
    regime: tuple
    rps_per_replica: float  # SLO-limited, times the utilisation headroom
    schedule: str = "prefill-first"
    min_replicas: int = 1
    rps_floor: float = 0.0  # the rate of a pool of one (M/G/1: safe for any count), times the headroom


@dataclass
class ModelData:
    """Everything the sizing model needs, as plain Python/numpy data (units in names)."""

    inst: Instance
    REGIONS: list[str]
    TIERS: list[str]
    CONFIGS: list[str]
    CHIPS: list[str]
    ROLES: list[str]
    SCENARIOS: list[Scenario]
    slices: dict[str, SliceSpec]
    tiers: dict[str, TierMix]
    p_peak_rps: dict[str, float]  # the peak each region is sized for: peak_rps x (1 + demand margin)
    p_price_per_slice_hour_usd: dict[tuple[str, str], float]
    p_pod_chips: dict[str, int]
    p_installed_pods: dict[tuple[str, str], int]
    p_available_pods: dict[tuple[str, str], int]
    p_pod_cost_per_hour_usd: dict[str, float]
    p_batch_share: float
    p_clamped_share: dict[str, float]  # of a tier's diverted requests
    p_mean_input_tokens: dict[str, float]
    p_output_tokens: float
    routing_reference: dict[tuple[str, str], float]  # (lost, absorber) -> share, for first estimates only
    decode: dict[tuple[str, str, str], DecodeCandidate] = field(default_factory=dict)
    prefill: dict[tuple[str, str, tuple], PrefillCandidate] = field(default_factory=dict)
    replica: dict[tuple[str, str, str, tuple], ReplicaCandidate] = field(default_factory=dict)  # (tier, config, schedule, regime)
    SCHEDULES: list[str] = field(default_factory=list)  # colocated schedule labels, in schedules_of order
    p_max_replicas: dict[tuple[str, str, str, str], int] = field(default_factory=dict)  # (r, t, c, schedule) -> bound on the pool
    # (r, t, c, schedule, regime) -> a region's own candidate where its normal peak needs a larger pool than
    # the tier's smallest region (its n_ref and the rate of that pool): replica_cand(..., r)
    replica_region: dict[tuple, "ReplicaCandidate"] = field(default_factory=dict)
    dominated_schedules: set[tuple[str, str, str]] = field(default_factory=set)  # (t, c, schedule) another schedule dominates
    p_max_slices: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    p_min_slices: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    p_warm_allowed: dict[tuple[str, str], bool] = field(default_factory=dict)
    excluded: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (tier, config, role) -> why the shape cannot serve it
    notes: list[str] = field(default_factory=list)
    # placement-aware sizing (fleetplan.tables.pods.PodData; set by the driver's pod stage): None sizes without pods
    pods: object | None = None

    # ---------------------------------------------------------------- helpers
    def regime(self, s: Scenario, r: str) -> tuple:
        """Prefill / replica regime of region r in scenario s."""
        if s.kind == "normal":
            return (NORMAL,)
        return ("loss", s.lost, r)

    def decode_regime(self, s: Scenario) -> str:
        return NORMAL if s.kind == "normal" else FAILOVER

    def own_rps(self, s: Scenario, r: str, t: str) -> float:
        return self.p_peak_rps[r] * s.load[r] * self.tiers[t].tier_share

    def lost_rps(self, s: Scenario, t: str) -> float:
        assert s.lost is not None
        return self.p_peak_rps[s.lost] * s.load[s.lost] * self.tiers[t].tier_share

    def max_rps(self, r: str, t: str) -> float:
        """Most requests/s of tier t region r can ever see: its peak plus the largest
        region it may absorb (the bound of every rate variable; from the data, not 1e9)."""
        lost = max([self.p_peak_rps[x] for x in self.REGIONS if r in self.inst.regions[x].failover_to] or [0.0])
        return (self.p_peak_rps[r] + (lost if self.inst.failover.n_minus_1 else 0.0)) * self.tiers[t].tier_share

    def config_chip(self, c: str) -> str:
        return self.slices[c].chip

    def warm_max(self, r: str, c: str) -> int:
        """Most warm slices of shape ``c`` region ``r`` can hold (count): the instance's
        ``max_slices_per_region``, capped by what the region's pods hold of that shape (0
        where warm slices are not allowed) -- a bound, and a big-M, from the data."""
        if not self.p_warm_allowed.get((r, c), False):
            return 0
        return min(self.inst.failover.warm_pool.max_slices_per_region, pod_bound(self, r, c))

    def replica_cand(self, t: str, c: str, h: str, regime: tuple, r: str | None = None) -> ReplicaCandidate:
        """The replica candidate of tier t on shape c under schedule h in ``regime`` -- region
        ``r``'s own where its normal peak needs a larger least-work pool than the tier's
        smallest region (:attr:`replica_region`: a larger n_ref, the rate of that pool) -- or a
        zero-rate candidate where there is none (the shape cannot serve t under h)."""
        if r is not None:
            got = self.replica_region.get((r, t, c, h, regime))
            if got is not None:
                return got
        return self.replica.get((t, c, h, regime)) or ReplicaCandidate(t, c, regime, 0.0, h)

    def replica_schedules(self, t: str, c: str) -> list[str]:
        """The schedules a replica pool of tier t on shape c may run (labels, in
        :attr:`SCHEDULES` order): those with a positive normal-regime rate that no other
        schedule of (t, c) dominates (:func:`fleetplan.tables.derived._prune_schedules`)."""
        return [h for h in self.SCHEDULES if self.replica_cand(t, c, h, (NORMAL,)).rps_per_replica > 0
                and (t, c, h) not in self.dominated_schedules]

    @property
    def MODES(self) -> tuple[str, ...]:
        """The serving modes the model chooses among: one for a fixed ``serving.mode``,
        both for 'auto' (then a binary per region x tier picks one)."""
        return candidate_modes(self.inst)

    @property
    def auto(self) -> bool:
        """True when the model decides the serving mode per region x tier."""
        return len(self.MODES) > 1

    @property
    def mixed_shapes(self) -> bool:
        """True when a region x tier's decode and replica pools may mix slice shapes
        (``serving.mixed_shapes``; prefill pools stay one shape)."""
        return bool(self.inst.serving.mixed_shapes)

    @property
    def disaggregated(self) -> bool:
        """True when the disaggregated (prefill/decode) families apply (fixed disaggregated or auto)."""
        return DISAGGREGATED in self.MODES

    @property
    def colocated(self) -> bool:
        """True when the colocated (replica) family applies (fixed colocated or auto)."""
        return COLOCATED in self.MODES


def pod_bound(d: ModelData, r: str, c: str) -> int:
    """The most slices of shape ``c`` region ``r``'s pods (installed and available) can hold."""
    k = d.config_chip(c)
    pods = d.p_installed_pods[(r, k)] + d.p_available_pods[(r, k)]
    return pods * d.p_pod_chips[k] // d.slices[c].chips

