"""ModelData: index sets, scenarios and the candidate tables the sizing model chooses from.

Everything nonlinear is computed here, once, with :mod:`fleetplan.perf`; the
mixed-integer model (:mod:`fleetplan.models.sizing`) only selects and counts.

Scenarios. ``normal``: every region at its own peak hour (regions do not interact in
normal operation and the fleet is fixed across hours, so each region's peak hour
dominates its other hours -- exact, not an approximation). ``lose:X@h``: region X is lost
at hour h; its traffic goes to the regions listed in its ``failover_to`` (the
*absorbers*); other survivors carry only their own load, which the normal scenario
already dominates. Among the 24 hours of a loss of X only those whose load vector
(X and its absorbers) is not dominated component-wise by another hour's are kept
(Pareto pruning -- exact, because demand is monotone in those loads for any routing).

Candidate tables. Decode: per (tier, slice shape, regime) the operating point with the
most output tokens/s among the legal ones (regime ``normal`` caps the batch at (1 -
decode_knee_margin) x the knee; ``failover`` may ride to the knee). Prefill: per (tier,
slice shape, regime) the mean service time of each traffic source and the (convex)
curve A(n) of the most work (busy slices, Erlangs) n slices carry with the TTFT
percentile -- the percentile of the sum of path, queue wait, compute and exposed KV
(:mod:`fleetplan.perf.ttft_tail`) -- within its SLO, for every traffic mix routing can
produce in that regime (the least of their capacities).
A shape whose KV page pool cannot hold the tier's longest request in a role (the
prompt for prefill, prompt + output for decode and replicas) has no candidate in that
role (``ModelData.excluded`` says why; :func:`fleetplan.perf.pools.longest_request_fit`).
Colocated replicas: the largest req/s a replica carries within its SLOs, likewise.

Physics sources (issue 40, :mod:`fleetplan.instance.physics`). An instance that holds its
plan under several sources gets the least favourable candidate of all of them, in every
table: a decode operating point (batch cap, draft length) is legal only when it is legal
under every held source, its capacity the least tokens/s of any, its knee the least; a
shape serves a role only when the longest request fits under every source; a prefill
candidate's per-source service times are the largest of any source's and its capacity
curve the pointwise least of the sources' curves, each in the units of those service
times (:func:`fleetplan.perf.robust.min_capacity`: the least of concave curves is
concave, so the model's chords stay valid); a replica's rate is the least of the sources'
rates at its pool size n_ref, and n_ref the largest any source needs
(:class:`fleetplan.perf.robust.MinRates`). One held source (no physics block) is the code
as it was, bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from fleetplan.deadline import check, phase
from fleetplan.errors import InstanceError, Problem

from fleetplan.instance.modes import COLOCATED, DISAGGREGATED, ROLES_OF, candidate_modes
from fleetplan.instance.physics import held_instances, held_slowest_first
from fleetplan.instance.schema import Instance
from fleetplan.instance.tables import TableCache, default_tables, family_key, rate_memos
from fleetplan.perf.pools import (
    KNEE_SEARCH_MAX,
    DecodeOp,
    PrefillProfile,
    PrefillSource,
    TierMix,
    decode_knee,
    decode_table,
    path_ms,
    prefill_profile,
    slice_specs,
    tier_mixes,
    tier_slos,
)
from fleetplan.perf.queueing import max_arrival_rate
from fleetplan.perf.colocated import PREFILL_FIRST, Schedule, schedules_of
from fleetplan.perf.robust import fit_under, min_capacity, rates_under
from fleetplan.perf.roofline import SliceSpec
from fleetplan.perf.ttft_tail import MixTail, capacity_curve_of_sum, convex_minorant, mix_tail, sum_curve_points

__all__ = ["normal_peak_slices", "best_decode_op", "replica_rps_for_mix", "mix_capacity_curve", "Scenario", "DecodeCandidate", "PrefillCandidate", "ReplicaCandidate", "ModelData", "build_model_data", "workload_capacity_curve"]

NORMAL = "normal"
FAILOVER = "failover"


@dataclass(frozen=True)
class Scenario:
    """A demand scenario. ``load[r]`` is region r's load multiplier (fraction of its
    peak_rps); ``lost`` the lost region (None for normal); ``absorbers`` the regions
    that may take its traffic; ``active`` the regions the model constrains here."""

    name: str
    kind: str  # "normal" | "loss"
    hour: int | None
    lost: str | None
    load: dict[str, float]
    absorbers: tuple[str, ...]
    active: tuple[str, ...]


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
    #: are kept under it (:func:`_sum_curve`), so :func:`extend_prefill` reuses them
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
    # placement-aware sizing (fleetplan.instance.pods.PodData; set by the driver's pod stage): None sizes without pods
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
        return min(self.inst.failover.warm_pool.max_slices_per_region, _pod_bound(self, r, c))

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
        schedule of (t, c) dominates (:func:`_prune_schedules`)."""
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


# --------------------------------------------------------------------------- scenarios


def _pareto_hours(inst: Instance, lost: str, absorbers: tuple[str, ...]) -> list[int]:
    regs = (lost,) + absorbers
    vecs = {h: tuple(inst.regions[r].hourly_load[h] for r in regs) for h in range(24)}
    keep = []
    for h, v in vecs.items():
        dominated = False
        for h2, v2 in vecs.items():
            if h2 == h:
                continue
            if all(a <= b for a, b in zip(v, v2)) and (v != v2 or h2 < h):
                dominated = True
                break
        if not dominated:
            keep.append(h)
    return sorted(keep)


def build_scenarios(inst: Instance) -> list[Scenario]:
    """The normal-peak scenario and, with N-1 on, the Pareto-maximal hours of every
    region loss (see the module docstring for why this pruning is exact)."""
    regions = sorted(inst.regions)
    out = [Scenario(NORMAL, "normal", None, None, {r: 1.0 for r in regions}, (), tuple(regions))]
    if inst.failover.n_minus_1 and len(regions) > 1:
        for x in regions:
            absorbers = tuple(sorted(inst.regions[x].failover_to))
            for h in _pareto_hours(inst, x, absorbers):
                load = {r: inst.regions[r].hourly_load[h] for r in regions}
                out.append(Scenario(f"lose:{x}@{h:02d}", "loss", h, x, load, absorbers, absorbers))
    return out


# --------------------------------------------------------------------------- prefill capacity


def _capacity_points(tau_scaled: float, percentile: float, first: int, last: int) -> np.ndarray:
    """A(n) for n = first..last (Erlangs), in the units of :func:`_capacity_curve`."""
    n = np.arange(first, last + 1, dtype=float)
    return max_arrival_rate(n, 1.0, tau_scaled, percentile, 1.0) / 1e3


def _capacity_curve_uncached(tau_scaled: float, percentile: float, n_max: int) -> np.ndarray:
    """:func:`_capacity_curve` computed afresh, every point."""
    return np.concatenate([[0.0], _capacity_points(tau_scaled, percentile, 1, n_max)])


#: (scaled budget, percentile) -> the longest A(0..N) computed so far (read-only arrays)
_CURVES: dict[tuple[float, float], np.ndarray] = {}
_CURVES_MAX = 4096


def _capacity_curve(tau_scaled: float, percentile: float, n_max: int, known: np.ndarray | None = None) -> np.ndarray:
    """A(n), n = 0..n_max, in units where E[S] = 1 ms and C_s^2 = 1 with the budget
    already scaled by 2 / (1 + C_s^2): one curve serves every (E[S], C_s^2, budget) with
    the same scaled budget, so it is cached -- per (scaled budget, percentile), the
    longest curve asked for. A(0..n) is a prefix of A(0..N) bit for bit (the bisection is
    element-wise, :mod:`fleetplan.instance.tables`), so a longer request computes only
    the server counts past the stored curve and a shorter one is a slice of it: the
    candidate tables ask for each curve again when a pool needs more slices than first
    estimated (:func:`extend_prefill`). ``known``: a curve of the same key read elsewhere (the
    on-disk table cache), taken as the stored one when it is longer. Returns a read-only
    array of n_max + 1 points."""
    key = (tau_scaled, percentile)
    got = _CURVES.get(key)
    if known is not None and (got is None or len(known) > len(got)):
        got = np.array(known, dtype=float)
    if got is None:
        got = _capacity_curve_uncached(tau_scaled, percentile, n_max)
    elif len(got) <= n_max:
        got = np.concatenate([got, _capacity_points(tau_scaled, percentile, len(got), n_max)])
    else:
        return got[: n_max + 1]
    got.flags.writeable = False
    if key not in _CURVES and len(_CURVES) >= _CURVES_MAX:
        del _CURVES[next(iter(_CURVES))]  # the oldest
    _CURVES[key] = got
    return got


def workload_capacity_curve(budget_ms: float, mean_ms: float, cs2: float, percentile: float, n_max: int, ca2: float = 1.0,
                            tables: TableCache | None = None, router: str = "least-work") -> np.ndarray:
    """A(n) for n = 0..n_max: the most work (Erlangs = busy slices) n slices carry with the
    queue-wait percentile within ``budget_ms`` (G/G/c, Allen-Cunneen scaling by
    (C_a^2 + C_s^2) / 2; ``ca2`` = 1 is M/G/c). Zeros when the budget is negative.
    ``tables``: slice the curve from the longest one of the same scaled budget computed
    so far (:meth:`fleetplan.instance.tables.TableCache.curve`; the same numbers).
    ``router`` (``serving.router``): under a load-blind one each slice is a G/G/1 of its
    own at its split's C_a^2 (:func:`fleetplan.perf.queueing.routed_queue`), A(n) = n x one
    slice's -- linear for a random split, convex for round robin (C_a^2 / n falls) --
    computed directly (no cache: the curve is not a function of the scaled budget alone)."""
    if budget_ms < 0 or n_max <= 0:
        return np.zeros(max(n_max, 0) + 1)
    if router != "least-work":
        n = np.arange(1, int(n_max) + 1, dtype=float)
        return np.concatenate([[0.0], max_arrival_rate(n, mean_ms, budget_ms, percentile, cs2, ca2=ca2, router=router) * mean_ms / 1e3])
    tau = budget_ms / mean_ms * 2.0 / (ca2 + cs2)
    if tables is not None:
        return tables.curve(round(tau, 9), percentile, int(n_max), lambda n, known=None: _capacity_curve(round(tau, 9), percentile, n, known))
    return _capacity_curve(round(tau, 9), percentile, int(n_max)).copy()


def _ttft_slo(inst: Instance, tier: str):
    return next((s for s in tier_slos(inst, tier) if s.metric == "ttft"), None)


def mix_capacity_curve(inst: Instance, tm: TierMix, sl: SliceSpec, sources: list[PrefillSource], n_max: int) -> tuple[np.ndarray, PrefillProfile, float]:
    """A(n), n = 0..n_max, for one prefill traffic mix: the most work (Erlangs) n slices
    carry with the tier's TTFT percentile -- of the sum of path, G/G/c wait, compute and
    exposed KV (:func:`fleetplan.perf.ttft_tail.capacity_curve_of_sum`) -- within its SLO.
    Returns (curve, profile, wait budget ms of the sum of percentiles: limit - path -
    compute at the percentile request - exposed KV); without a TTFT SLO the curve is
    stability only (A(n) ~ n)."""
    slo = _ttft_slo(inst, tm.name)
    pct = slo.percentile if slo else 99.0
    prof = prefill_profile(inst, tm, sl, [x for x in sources if x.weight > 0], [pct])
    if slo is None:
        return np.arange(n_max + 1, dtype=float) * 0.999999, prof, math.inf
    budget = slo.limit_ms - path_ms(inst, pct) - prof.pct_ms[pct] - prof.kv_exposed_ms[pct]
    return capacity_curve_of_sum([mix_tail(inst, prof, slo.limit_ms)], pct, n_max, router=inst.serving.router), prof, budget


def _mixes_key(mixes: list[dict[str, PrefillSource]]) -> tuple:
    """The prefill traffic mixes as a hashable key (every source's weight, hit rate, clamp)."""
    return tuple(tuple(sorted(mix.items())) for mix in mixes)


def _prefill_candidate(inst, tm: TierMix, sl: SliceSpec, regime: tuple, mixes: list[dict[str, PrefillSource]], n_max: int,
                       tables: TableCache | None = None, phys: str = "", dcn_share: float = 0.0) -> PrefillCandidate:
    """Prefill physics of one pool-regime. ``mixes`` are the traffic mixes the pool may
    see in that regime (own and diverted sources at different diverted shares); the
    capacity curve is built for the least favourable one -- the smallest wait budget in
    units of (C_a^2 + C_s^2)/2 x E[S] -- so it holds whatever routing the model chooses. The
    per-source mean service times are exact (the work is linear in each source).
    ``tables``: share the service times, the least favourable profile, the mixes' TTFT
    tails and the curve with other builds of the same ``phys``
    (:func:`fleetplan.instance.tables.family_key` 'prefill', computed here when empty), mixes and
    length.
    ``dcn_share``: the share of the pool's requests whose KV crosses the DCN, in the TTFT
    composition (:func:`fleetplan.perf.pools.prefill_profile`; placement-aware sizing's levels).
    Several held sources: one candidate per source, combined (:func:`_combine_prefill`)."""
    srcs = held_instances(inst)
    if len(srcs) > 1:
        parts = [_prefill_candidate(si, tm, sl, regime, mixes, n_max, tables, _source_key(phys, si), dcn_share) for _, si in srcs]
        return _combine_prefill(parts)
    if srcs[0][1] is not inst:  # one held source that is not the instance's own priors
        return _prefill_candidate(srcs[0][1], tm, sl, regime, mixes, n_max, tables, _source_key(phys, srcs[0][1]), dcn_share)
    slo = _ttft_slo(inst, tm.name)
    pct = slo.percentile if slo else 99.0
    key = (phys, "prefill", tm.name, sl.label, _mixes_key(mixes)) + ((dcn_share,) if dcn_share else ())
    if tables is None:
        service, prof, budget, tails = _prefill_physics(inst, tm, sl, mixes, slo, pct, dcn_share)
    else:
        phys = phys or family_key(inst, "prefill")
        key = (phys,) + key[1:]
        service, prof, budget, tails = tables.memo(key, lambda: _prefill_physics(inst, tm, sl, mixes, slo, pct, dcn_share))
        service = dict(service)
    cap = _sum_curve(tails, pct, n_max, tables, key, inst.serving.router)
    return PrefillCandidate(tm.name, sl.label, regime, service, prof, budget, pct, cap, slo.limit_ms if slo else math.inf, tails,
                            table_key=key if tables is not None else ())


def _sum_curve(tails: tuple[MixTail, ...], pct: float, n_max: int, tables: TableCache | None, key: tuple,
               router: str = "least-work") -> np.ndarray:
    """A(0..n_max) of :func:`fleetplan.perf.ttft_tail.capacity_curve_of_sum` over ``tails``
    (stability only, A(n) ~ n, without a TTFT SLO: no tails); ``tables`` keeps its points
    (:func:`fleetplan.perf.ttft_tail.sum_curve_points`, before the convex envelope) under
    ``key`` and ``router``, the longest asked for (:meth:`~fleetplan.instance.tables.TableCache.points`):
    a longer curve asked for later (:func:`extend_prefill`) computes only the pool sizes past
    them, a shorter one slices them; the envelope is taken here, of the points 0..n_max."""
    if not tails:
        return np.arange(n_max + 1, dtype=float) * 0.999999
    if tables is None or not key:
        return capacity_curve_of_sum(list(tails), pct, n_max, router=router)
    points = tables.points(key + ("points of the sum", router),
                           max(n_max, 0), lambda start, n: sum_curve_points(list(tails), pct, n, router=router, start=start))
    return convex_minorant(points[: max(n_max, 0) + 1])


def _source_key(phys: str, si: Instance) -> str:
    """The table cache's prefill key of one source's instance (its priors differ:
    :func:`fleetplan.instance.tables.family_key`): '' without a cache."""
    return family_key(si, "prefill") if phys else ""


def _combine_prefill(parts: list[PrefillCandidate]) -> PrefillCandidate:
    """One prefill candidate from each held source's: the largest service time per traffic
    source, the least capacity curve in its units (:func:`fleetplan.perf.robust.min_capacity`),
    the profile, budget and percentile of the source with the least scaled wait budget (the
    binding one, which :func:`fleetplan.results.extract` quotes when the SLO cannot hold)."""
    service, cap, factors = min_capacity([p.service_ms for p in parts], [p.capacity_erlangs for p in parts])
    bind = min(parts, key=lambda p: _tau(p))
    return PrefillCandidate(bind.tier, bind.config, bind.regime, service, bind.profile, bind.budget_ms, bind.percentile, cap,
                            bind.ttft_limit_ms, bind.tails, tuple(parts), tuple(factors))


def _tau(c: PrefillCandidate) -> float:
    """A prefill candidate's wait budget in units of (C_a^2 + C_s^2)/2 x E[S] (dimensionless)."""
    if c.budget_ms == math.inf:
        return math.inf
    return c.budget_ms / (c.profile.mean_ms * (c.profile.ca2 + c.profile.cs2) / 2.0)


def _prefill_physics(inst, tm: TierMix, sl: SliceSpec, mixes: list[dict[str, PrefillSource]], slo, pct: float,
                     dcn_share: float = 0.0) -> tuple[dict, PrefillProfile, float, tuple[MixTail, ...]]:
    """(mean service ms per source, the least favourable mix's profile and wait budget ms
    by the sum of percentiles, every mix's TTFT tail at the limit (none without a TTFT
    SLO)) of :func:`_prefill_candidate`."""
    service = {}
    for name, src in mixes[0].items():
        if src.clamp_min_tokens is not None and float(np.min(tm.tokens)) >= src.clamp_min_tokens:
            service[name] = 0.0  # every request of this source is clamped: none reaches the pool
            continue
        one = prefill_profile(inst, tm, sl, [PrefillSource(1.0, src.hit_rate, src.clamp_min_tokens)], [pct])
        service[name] = one.mean_ms
    worst = None
    tails = []
    for mix in mixes:
        prof = prefill_profile(inst, tm, sl, [x for x in mix.values() if x.weight > 0], [pct], dcn_share)
        if slo is None:
            budget, tau = math.inf, math.inf
        else:
            budget = slo.limit_ms - path_ms(inst, pct) - prof.pct_ms[pct] - prof.kv_exposed_ms[pct]
            tau = budget / (prof.mean_ms * (prof.ca2 + prof.cs2) / 2.0)
            tails.append(mix_tail(inst, prof, slo.limit_ms))
        if worst is None or tau < worst[0]:
            worst = (tau, prof, budget)
    _, prof, budget = worst
    return service, prof, budget, tuple(tails)


def extend_prefill(d: ModelData, key: tuple, n_max: int, tables: TableCache | None = None) -> PrefillCandidate:
    """Recompute a prefill candidate's curve up to ``n_max`` slices (used when the model
    needs more slices than first estimated; ``tables`` extends the points the first length
    stored, :func:`_sum_curve`)."""
    old = d.prefill[key]
    if len(old.capacity_erlangs) > n_max:
        return old
    check("building the candidate tables")
    if old.parts:  # several held sources: extend each source's curve and combine them again
        new = _combine_prefill([_extend_curve(p, n_max, tables, d.inst.serving.router) for p in old.parts])
        d.prefill[key] = new
        return new
    new = _extend_curve(old, n_max, tables, d.inst.serving.router)
    d.prefill[key] = new
    return new


def _extend_curve(old: PrefillCandidate, n_max: int, tables: TableCache | None, router: str = "least-work") -> PrefillCandidate:
    """``old`` with its capacity curve computed up to ``n_max`` slices, its slices spread by
    ``router`` (``serving.router``, :func:`fleetplan.perf.ttft_tail.capacity_curve_of_sum`)."""
    cap = _sum_curve(old.tails, old.percentile, n_max, tables, old.table_key, router)
    return PrefillCandidate(old.tier, old.config, old.regime, old.service_ms, old.profile, old.budget_ms, old.percentile, cap, old.ttft_limit_ms,
                            old.tails, table_key=old.table_key)


# --------------------------------------------------------------------------- build


def _reference_routing(inst: Instance) -> dict[tuple[str, str], float]:
    """Share of a lost region's traffic each absorber takes in the reference routing
    (proportional to the absorbers' peak_rps) -- used only to place the first chord of
    each prefill pool; the model chooses the actual routing."""
    out = {}
    for x, reg in inst.regions.items():
        tot = sum(inst.regions[a].peak_rps for a in reg.failover_to)
        for a in reg.failover_to:
            out[(x, a)] = inst.regions[a].peak_rps / tot if tot > 0 else 0.0
    return out


def _sources(d: ModelData, s: Scenario, r: str, t: str) -> dict[str, PrefillSource]:
    inst = d.inst
    tm = d.tiers[t]
    if s.kind == "normal":
        return {"own": PrefillSource(1.0, tm.hit_rate)}
    f = inst.failover.rewarm_hit_rate_factor if inst.failover.size_for == "transient" else 1.0
    clamp = inst.failover.admission_clamp.min_input_tokens if inst.failover.admission_clamp.enabled else None
    return {
        "own": PrefillSource(1.0, tm.hit_rate * f),
        "div": PrefillSource(1.0, inst.failover.diverted_hit_rate * f, clamp),
    }


DIVERTED_GRID = 11  # diverted shares examined between none and all of the lost traffic


def _failover_mixes(d: ModelData, s: Scenario, r: str, t: str, src: dict[str, PrefillSource]) -> list[dict[str, PrefillSource]]:
    """Own/diverted mixes over the whole range of diverted shares routing can produce at
    region r in the loss of ``s.lost``: from none to all of the lost traffic, at the
    modelled hours. The diverted weight is its rate before the clamp, because the
    profile drops the clamped prompts itself."""
    hi = _max_diverted_fraction(d, s.lost, r, t, d.SCENARIOS)
    kappa = d.p_clamped_share[t]
    out = []
    for i in range(DIVERTED_GRID):
        frac = hi * i / (DIVERTED_GRID - 1)
        div_before = frac / (1.0 - kappa) if kappa < 1.0 else frac
        out.append({"own": PrefillSource(1.0 - frac, src["own"].hit_rate),
                    "div": PrefillSource(div_before, src["div"].hit_rate, src["div"].clamp_min_tokens)})
    return out


def _max_diverted_fraction(d: ModelData, lost: str, r: str, t: str, scenarios: list[Scenario]) -> float:
    """The largest share of r's admitted tier-t prefill requests that can be diverted
    traffic in a loss of ``lost`` (all of the lost region's kept traffic sent to r), over
    the modelled hours."""
    best = 0.0
    for s in scenarios:
        if s.lost != lost or r not in s.absorbers:
            continue
        own = d.own_rps(s, r, t)
        div = d.lost_rps(s, t) * (1 - d.p_clamped_share[t])
        if own + div > 0:
            best = max(best, div / (own + div))
    return best


def build_model_data(inst: Instance, slack_slices: int = 2, tables: TableCache | None | bool = None) -> ModelData:
    """Compute sets, scenarios and candidate tables for ``inst``.

    Args: slack_slices: extra slices beyond the estimated need in each prefill curve.
    tables: share the pieces of the decode, prefill and replica tables with other builds
    (:class:`fleetplan.instance.tables.TableCache`: the same numbers, each piece keyed by
    exactly what it reads); None: the process's default cache
    (:func:`fleetplan.instance.tables.default_tables`: in memory and on disk, off with
    FLEETPLAN_CACHE=0); False computes everything here.
    Raises: ValueError when no slice shape can serve a tier at all in normal operation
    (the message says which and why); :class:`~fleetplan.deadline.TimeLimitReached`
    ('building the candidate tables') once a deadline scope's deadline has passed.
    """
    cache = default_tables() if tables is None or tables is True else (None if tables is False else tables)
    with phase("building the candidate tables"):  # the physics' own deadline checks name it
        try:
            return _build_model_data(inst, slack_slices, cache)
        finally:
            if cache is not None:
                cache.flush()  # the rate searches' memos, also those of a build the deadline stopped


def _build_model_data(inst: Instance, slack_slices: int, tables: TableCache | None) -> ModelData:
    regions = sorted(inst.regions)
    tms = {t.name: t for t in tier_mixes(inst)}
    specs = {sl.label: sl for sl in slice_specs(inst)}
    chips = sorted(inst.chips)
    roles = [ro for mode in candidate_modes(inst) for ro in ROLES_OF[mode]]
    scenarios = build_scenarios(inst)
    price = {}
    for r in regions:
        for c, sl in specs.items():
            per_chip = inst.regions[r].price_per_chip_hour_usd.get(sl.chip, inst.chips[sl.chip].price_per_chip_hour_usd)
            price[(r, c)] = per_chip * sl.chips
    installed, available = {}, {}
    for r in regions:
        for k in chips:
            inv = inst.regions[r].pods.get(k)
            installed[(r, k)] = inv.installed if inv else 0
            available[(r, k)] = inv.available_new if inv else 0
    batch_share = sum(c.share for c in inst.workload.classes.values() if c.sheddable)
    clamp = inst.failover.admission_clamp
    clamped = {}
    for t, tm in tms.items():
        clamped[t] = float(np.sum(tm.shares[tm.tokens >= clamp.min_input_tokens])) if clamp.enabled else 0.0
    d = ModelData(
        inst=inst, REGIONS=regions, TIERS=list(tms), CONFIGS=list(specs), CHIPS=chips, ROLES=roles, SCENARIOS=scenarios,
        slices=specs, tiers=tms, p_peak_rps={r: inst.sized_peak_rps(r) for r in regions},
        p_price_per_slice_hour_usd=price, p_pod_chips={k: inst.chips[k].chips_per_pod for k in chips},
        p_installed_pods=installed, p_available_pods=available,
        p_pod_cost_per_hour_usd={k: inst.chips[k].new_pod_cost_per_hour_usd for k in chips},
        p_batch_share=batch_share, p_clamped_share=clamped,
        p_mean_input_tokens={t: tm.mean_tokens for t, tm in tms.items()}, p_output_tokens=inst.workload.output_tokens,
        routing_reference=_reference_routing(inst),
    )
    key = (lambda family: family_key(inst, family)) if tables is not None else (lambda family: "")
    if d.disaggregated:
        _decode_candidates(d, tables, key("decode"))
        _prefill_candidates(d, slack_slices, tables, key("prefill"))
    if d.colocated:
        _replica_candidates(d, tables)
        _prune_schedules(d)
    _bounds(d, tables)
    ca2 = inst.workload.arrival_scv
    if ca2 > 1.0:
        # issue 17 trial: a plan fitted to the Azure code trace (C_a^2 13.2) verified yet failed p99 TPOT in
        # the simulator replaying it -- the SCV reaches the prompt queues only
        d.notes.append(f"workload.arrival_scv {ca2:g} (bursty arrivals, measured at one timescale) enters the prompt queues' TTFT "
                       "(prefill pools, replicas' prompt queue) and the colocated replicas' occupancy TPOT tail; disaggregated decode "
                       "slots are sized on the mean rate, and traffic burstier at longer timescales than the fit's can still push p99 "
                       "TTFT or TPOT past its SLO: simulate with --arrivals trace:FILE before trusting the plan "
                       "(docs/validation.md, 'Bursty arrivals')"
                       + (". At this burstiness (above 3 at the fit's timescale) expect the plan to be optimistic: replaying the Azure "
                          "code trace (I(1 s) 13.2) measured p99 TPOT 1.26 x and p99 TTFT 3.5 x the model's on colocated replicas, and "
                          "p95 TTFT 8 x on a disaggregated prefill pool; fit at the requests' lifetime (workload fit --scv-timescale) "
                          "and simulate" if ca2 > BURSTY_SCV else ""))
    return d


#: arrival index of dispersion above which the plan's note gives the optimism measured on
#: the Azure code trace (docs/validation.md, 'Bursty arrivals'; workload fit flags I(1 s) > 3)
BURSTY_SCV = 3.0


def _pod_bound(d: ModelData, r: str, c: str) -> int:
    k = d.config_chip(c)
    pods = d.p_installed_pods[(r, k)] + d.p_available_pods[(r, k)]
    return pods * d.p_pod_chips[k] // d.slices[c].chips


def normal_peak_slices(d: ModelData, lam: float, t: str, ro: str, c: str, r: str | None = None) -> int:
    """Fewest slices of shape ``c`` that carry ``lam`` requests/s of tier ``t``'s own
    traffic in role ``ro`` in normal operation (count; 0 where the shape has no candidate):
    decode ceil(lam o / tokens per slice), prefill the first n of the exact capacity curve
    A(n) (Erlangs) that carries the work, replicas the least over the schedules the pool
    may run of max(ceil(lam / req/s per replica), n_ref). The curve may be too short for a
    pool bigger than the pods hold: then its length, or the work in Erlangs if more (a slice
    carries at most one: A(n) <= n)."""
    if ro == "decode":
        cap = d.decode[(t, c, NORMAL)].tokens_per_s
        return int(math.ceil(lam * d.p_output_tokens / cap - 1e-9)) if cap > 0 else 0
    if ro == "prefill":
        cand = d.prefill.get((t, c, (NORMAL,)))
        if cand is None or cand.capacity_erlangs[-1] <= 0:
            return 0
        work = lam * cand.service_ms["own"] / 1e3
        n = int(np.searchsorted(cand.capacity_erlangs, work - 1e-9 * max(work, 1.0)))
        return max(n, int(math.ceil(work - 1e-9))) if n >= len(cand.capacity_erlangs) else n
    # at least the pool size each schedule's rate was computed for (least-work pooling)
    need = [max(int(math.ceil(lam / cand.rps_per_replica - 1e-9)), cand.min_replicas)
            for cand in (d.replica_cand(t, c, h, (NORMAL,), r) for h in d.replica_schedules(t, c))]
    return min(need) if need else 0


def _normal_minimum(d: ModelData) -> None:
    """Fewest slices of shape c a pool needs to carry its own peak in normal operation
    (where nothing is routed, shed or borrowed): a valid lower bound whenever that shape
    is chosen, used to tighten the model (c_fleet_min_slices). Dropped in a region whose
    pods cannot hold every pool's minimum at once (then the model may report shortfall)."""
    s = d.SCENARIOS[0]
    for r in d.REGIONS:
        for t in d.TIERS:
            lam = d.own_rps(s, r, t)
            for c in d.CONFIGS:
                for ro in d.ROLES:
                    d.p_min_slices[(r, t, ro, c)] = normal_peak_slices(d, lam, t, ro, c, r)
    certain = {r: _certain_shortfall(d, r) for r in d.REGIONS}
    d.notes[:0] = [n for n in certain.values() if n is not None]
    for r in d.REGIONS:
        for k in d.CHIPS:
            need = _normal_minimum_chips(d, r, [c for c in d.CONFIGS if d.config_chip(c) == k])
            if need > (d.p_installed_pods[(r, k)] + d.p_available_pods[(r, k)]) * d.p_pod_chips[k]:
                for key in list(d.p_min_slices):
                    if key[0] == r and d.config_chip(key[3]) == k:
                        d.p_min_slices[key] = 0
                if certain[r] is None:
                    d.notes.append(f"{r}: the pods of {k} cannot hold every pool's normal-peak minimum; shortfall is likely")
    for key, n in list(d.p_min_slices.items()):
        if d.p_max_slices.get(key, 0) < n:
            d.p_min_slices[key] = 0
    # a replica pool is held to its schedule's n_ref by the replica family (c_replica_schedule_min)


def _normal_minimum_chips(d: ModelData, r: str, shapes: list[str]) -> int:
    """Fewest chips region ``r``'s pools need for its own normal peak on ``shapes`` (chips): per
    tier the least over the modes it may run of each role's fewest slices x chips over the
    shapes that may serve it (:attr:`ModelData.p_min_slices`, from the candidate tables; a
    prefill curve shorter than the need counts its length, so this is a lower bound)."""
    need = 0
    for t in d.TIERS:
        per_mode = []
        for mode in d.MODES:  # the least any mode the tier may run needs (auto: the cheaper in chips of the two)
            tot = 0
            for ro in ROLES_OF[mode]:
                opts = [d.p_min_slices[(r, t, ro, c)] * d.slices[c].chips for c in shapes if d.p_max_slices.get((r, t, ro, c), 0) > 0]
                tot += min(opts) if opts else 0
            per_mode.append(tot)
        need += min(per_mode)
    return need


def _certain_shortfall(d: ModelData, r: str) -> str | None:
    """'SHORTFALL CERTAIN: ...' when region ``r``'s own normal peak needs more chips than all
    its pods hold (:func:`_normal_minimum_chips` over every shape, against the installed and
    available pods of every chip type): said before any solve (issue 39 item 13: peak_rps
    6e8, a typo for 6e3, gave 90 s of search and no answer). None otherwise."""
    need = _normal_minimum_chips(d, r, list(d.CONFIGS))
    pods = {k: d.p_installed_pods[(r, k)] + d.p_available_pods[(r, k)] for k in d.CHIPS}
    have = sum(n * d.p_pod_chips[k] for k, n in pods.items())
    if need <= have:
        return None
    kinds = [k for k, n in pods.items() if n > 0]
    margin = d.inst.demand_margin_of(r)
    peak = f"regions.{r}.peak_rps {d.inst.regions[r].peak_rps:,.0f} requests/s" + (f" plus its {margin:.0%} demand margin" if margin > 0 else "")
    if len(kinds) <= 1:
        k = kinds[0] if kinds else d.CHIPS[0]
        what = (f"needs at least {math.ceil(need / d.p_pod_chips[k]):,} pods of {k} ({need:,} chips); the inventory allows "
                f"{pods.get(k, 0):,} ({have:,} chips)")
    else:
        what = (f"needs at least {need:,} chips; the inventory allows "
                + ", ".join(f"{pods[k]:,} pods of {k}" for k in kinds) + f" ({have:,} chips)")
    return (f"SHORTFALL CERTAIN: {r}'s own demand ({peak}) {what} -- each pool's fewest slices at that peak from the candidate "
            f"tables, before failover and the warm pool; the plan serves what the inventory allows and leaves the rest unserved "
            f"(check the demand's unit: requests/s)")


def _prune_dominated_linear(d: ModelData) -> None:
    """Drop decode (and replica) shapes another shape dominates: c dominates c' when c's
    chips divide c''s and c'/c slices of c carry at least what one c' slice carries in
    every regime at no more cost in every region (capacity is linear in the slice count
    for these roles, so this is exact -- "tighter candidate tables"). Prefill is not
    pruned: its capacity is not linear (queueing economies of scale)."""
    for role in (["decode"] if d.disaggregated else []) + (["replica"] if d.colocated else []):
        _prune_role(d, role)


def _prune_role(d: ModelData, role: str) -> None:
    regimes = (NORMAL, FAILOVER)
    for t in d.TIERS:
        for c2 in d.CONFIGS:
            for c1 in d.CONFIGS:
                if c1 == c2 or d.config_chip(c1) != d.config_chip(c2):
                    continue
                n1, n2 = d.slices[c1].chips, d.slices[c2].chips
                if n2 % n1:
                    continue
                ratio = n2 // n1
                cheaper = all(ratio * d.p_price_per_slice_hour_usd[(r, c1)] <= d.p_price_per_slice_hour_usd[(r, c2)] + 1e-9 for r in d.REGIONS)
                if not cheaper:
                    continue
                if role == "decode":
                    caps1 = [d.decode[(t, c1, g)].tokens_per_s for g in regimes]
                    caps2 = [d.decode[(t, c2, g)].tokens_per_s for g in regimes]
                    dominated = caps1[0] > 0 and _carries(ratio, caps1, caps2)
                else:
                    # every schedule of c2 is matched by one of c1 that carries as much in every
                    # regime and needs no larger a pool for its rate (ratio x n_ref of c2's)
                    # (in every region: a region's own candidates where its pool is larger)
                    keys = sorted({k[3] for k in d.replica if k[0] == t})
                    s1, s2 = d.replica_schedules(t, c1), d.replica_schedules(t, c2)
                    caps = lambda c, h: [d.replica_cand(t, c, h, g, r).rps_per_replica for g in keys for r in d.REGIONS]  # noqa: E731
                    nref = lambda c, h: [d.replica_cand(t, c, h, (NORMAL,), r).min_replicas for r in d.REGIONS]  # noqa: E731
                    dominated = bool(s1) and all(any(_carries(ratio, caps(c1, h1), caps(c2, h2))
                                                     and all(a <= ratio * b for a, b in zip(nref(c1, h1), nref(c2, h2)))
                                                     for h1 in s1) for h2 in s2)
                if dominated:
                    for r in d.REGIONS:
                        if d.p_max_slices.get((r, t, role, c2), 0) > 0 and d.p_max_slices.get((r, t, role, c1), 0) > 0:
                            d.p_max_slices[(r, t, role, c2)] = 0
                            d.notes.append(f"{role} shape {c2} of tier {t} in {r} dropped: {ratio} x {c1} carry as much for no more cost")


def _carries(ratio: int, caps1: list[float], caps2: list[float]) -> bool:
    """True when ``ratio`` slices at capacities ``caps1`` carry at least one slice at
    ``caps2`` in every regime (the same units; a strict margin unless the smaller is used)."""
    return all(ratio * a >= b * (1 + 1e-12) or (ratio * a >= b and a > 0) for a, b in zip(caps1, caps2))


def _prune_schedules(d: ModelData) -> None:
    """Leave out of the model a replica schedule of (tier, shape) another one dominates: at
    least its rate in every regime with no larger n_ref (exact: a pool running it runs the
    other at the same count and cost with as much capacity). Ties keep the earlier schedule
    of :attr:`ModelData.SCHEDULES`. The candidates stay in the table."""
    for t in d.TIERS:
        keys = sorted({k[3] for k in d.replica if k[0] == t})
        for c in d.CONFIGS:
            # in every region (a region's own candidates where its pool is larger than the smallest region's)
            rates = {h: [d.replica_cand(t, c, h, g, r).rps_per_replica for g in keys for r in d.REGIONS] for h in d.replica_schedules(t, c)}
            nref = {h: [d.replica_cand(t, c, h, (NORMAL,), r).min_replicas for r in d.REGIONS] for h in rates}
            for i, h2 in enumerate(rates):
                if any(h1 != h2 and (t, c, h1) not in d.dominated_schedules and all(a <= b for a, b in zip(nref[h1], nref[h2]))
                       and all(a >= b for a, b in zip(rates[h1], rates[h2]))
                       and (rates[h1] != rates[h2] or nref[h1] != nref[h2] or j < i) for j, h1 in enumerate(rates)):
                    d.dominated_schedules.add((t, c, h2))


def _bounds(d: ModelData, tables: TableCache | None = None) -> None:
    """Per-pool slice bounds (big-M values come from the data: pods and demand) and
    warm-pool eligibility (``tables``: as :func:`extend_prefill`)."""
    inst = d.inst
    wmax = inst.failover.warm_pool.max_slices_per_region
    max_lost = {r: max([d.p_peak_rps[x] for x in d.REGIONS if r in inst.regions[x].failover_to] or [0.0]) for r in d.REGIONS}
    for r in d.REGIONS:
        for c in d.CONFIGS:
            d.p_warm_allowed[(r, c)] = _pod_bound(d, r, c) > 0
        for t in d.TIERS:
            max_rps = (d.p_peak_rps[r] + (max_lost[r] if inst.failover.n_minus_1 else 0.0)) * d.tiers[t].tier_share
            for c in d.CONFIGS:
                pb = _pod_bound(d, r, c)
                if d.disaggregated:
                    cap = d.decode[(t, c, NORMAL)].tokens_per_s
                    d.p_max_slices[(r, t, "decode", c)] = 0 if cap <= 0 else min(pb, int(math.ceil(max_rps * d.p_output_tokens / cap)) + 1)
                    cand = d.prefill.get((t, c, (NORMAL,)))
                    if cand is None or cand.capacity_erlangs[-1] <= 0:
                        d.p_max_slices[(r, t, "prefill", c)] = 0
                    else:
                        # the largest pool any of r's regimes may need: its own normal peak, or
                        # a failover with colder, heavier traffic
                        sized = [len(g.capacity_erlangs) - 1 for (tt, cc, reg), g in d.prefill.items()
                                 if tt == t and cc == c and (reg == (NORMAL,) or (reg[0] == "loss" and reg[2] == r))]
                        d.p_max_slices[(r, t, "prefill", c)] = min(pb, max(sized))
                if d.colocated:
                    # per schedule: the pool that carries the most r can see, and never less than
                    # the n_ref its rate assumes (n_ref <= every region's pod bound)
                    for h in d.replica_schedules(t, c):
                        cand = d.replica_cand(t, c, h, (NORMAL,), r)
                        d.p_max_replicas[(r, t, c, h)] = min(pb, max(int(math.ceil(max_rps / cand.rps_per_replica)) + 1, cand.min_replicas))
                    d.p_max_slices[(r, t, "replica", c)] = max([d.p_max_replicas[(r, t, c, h)] for h in d.replica_schedules(t, c)] or [0])
    _prune_dominated_linear(d)
    _normal_minimum(d)
    if d.disaggregated:
        # every prefill curve must reach the largest pool (plus warm slices) any scenario can field
        # (warm slices share the pool's pods: a pool and its warm slices never exceed the
        # region's pod bound, however large max_slices_per_region is -- issue 16 row 1)
        need = {}
        for (r, t, ro, c), n in d.p_max_slices.items():
            if ro == "prefill":
                need[(t, c)] = max(need.get((t, c), 0), min(n + wmax, max(n, _pod_bound(d, r, c))))
        for key in list(d.prefill):
            t, c, _ = key
            extend_prefill(d, key, need.get((t, c), 0), tables)


def best_decode_op(inst: Instance, tm: TierMix, sl: SliceSpec, regime: str, knees: dict[int, int] | None = None) -> tuple[DecodeOp | None, dict[int, int]]:
    """The legal decode operating point with the most output tokens/s of tier ``tm`` on
    shape ``sl`` in ``regime`` ('normal': batch at most (1 - decode_knee_margin) x the SLO
    knee; 'failover': up to the knee), over the batch caps and draft lengths; and the
    knee per draft length (searched up to 4,096). (None, knees) when no point is legal."""
    margin = inst.serving.decode_knee_margin
    caps = list(inst.serving.batch_caps)
    kmax = max(caps)
    ks = [0] + (list(inst.speculation.draft_tokens) if inst.speculation.enabled else [])
    srcs = [si for _, si in held_instances(inst)]
    # the SLO knee itself, not capped by the largest batch cap the engine allows (several held sources: the least)
    knees = knees if knees is not None else {k: min(decode_knee(si, tm, sl, k, max_batch=KNEE_SEARCH_MAX) for si in srcs) for k in ks}
    best: DecodeOp | None = None
    for k in ks:
        knee = knees[k]
        if knee <= 0:
            continue
        limit = knee if regime == FAILOVER else max(1, int(math.floor((1.0 - margin) * knee)))
        limit = min(limit, kmax)
        cand = sorted({b for b in caps if b <= limit} | {limit})
        for op in _least_ops(srcs, tm, sl, cand, k):
            if op.draft_tokens != k or not op.legal:
                continue
            if best is None or op.tokens_per_s > best.tokens_per_s * (1 + 1e-12):
                best = op
    return best, knees


def _least_ops(srcs: list[Instance], tm: TierMix, sl: SliceSpec, batches: list[int], k: int) -> list[DecodeOp]:
    """:func:`decode_table` of ``batches`` at draft length ``k``; under several held sources
    (``srcs``) each point the source's with the least tokens/s, legal only when legal under
    every source (its violations name the sources)."""
    tables = [decode_table(si, tm, sl, batches, [k] if k else []) for si in srcs]
    if len(tables) == 1:
        return tables[0]
    out = []
    for ops in zip(*tables):
        worst = min(ops, key=lambda o: o.tokens_per_s)
        out.append(worst if all(o.legal for o in ops) else
                   replace(worst, legal=False, kv_fit=all(o.kv_fit for o in ops), violations=tuple(v for o in ops for v in o.violations)))
    return out


def _decode_candidates(d: ModelData, tables: TableCache | None = None, phys: str = "") -> None:
    """Per (tier, shape) the decode candidates of both regimes; they read no region, so
    ``tables`` shares them between builds of the same ``phys`` (:func:`family_key` 'decode')."""
    inst = d.inst
    for t, tm in d.tiers.items():
        for c, sl in d.slices.items():
            check("building the candidate tables")

            def compute(t=t, tm=tm, c=c, sl=sl):
                fit = _fit(inst, tm, sl, "decode")
                knees, out = None, {}
                for regime in (NORMAL, FAILOVER):
                    best, knees = best_decode_op(inst, tm, sl, regime, knees)
                    out[regime] = DecodeCandidate(t, c, regime, best, knees[0], best.tokens_per_s if best else 0.0)
                return fit, out

            fit, cands = compute() if tables is None else tables.memo((phys, "decode", t, c), compute)
            if not fit.fits:  # no operating point is legal (decode_table says so too)
                d.excluded[(t, c, "decode")] = fit.reason
            for regime, cand in cands.items():
                d.decode[(t, c, regime)] = cand


def _estimate_slices(d: ModelData, t: str, c: str, max_rps: float, service_ms: float) -> int:
    """Slices of shape ``c`` tier ``t``'s prefill pool may need at ``max_rps`` (requests/s)
    of ``service_ms`` (ms) each: the offered load in Erlangs plus 25% and 8.

    Raises: InstanceError naming the chip's figures when the service time is not finite
    (the schema's floors keep them from making it so; issue 39 item 11: an infinity here
    was an OverflowError, exit 1)."""
    if not math.isfinite(service_ms) or not math.isfinite(max_rps):
        chip = d.slices[c].chip
        raise InstanceError(d.inst.name, [Problem(f"chips.{chip}", f"the prefill service time of tier {t} on slice {c} is not a finite "
                                                               f"number of ms ({service_ms!r}): check peak_tflops (TFLOP/s), hbm_tbps "
                                                               "(TB/s) and ici_gbytes_per_s (GB/s) of the chip.")])
    return int(math.ceil(max_rps * service_ms / 1e3 * 1.25)) + 8


def _regime_mixes(d: ModelData, t: str) -> list[tuple[tuple, list[dict[str, PrefillSource]]]]:
    """Each distinct regime tier t's pools meet -- normal, and every (lost region,
    survivor) -- with the traffic mixes it may carry there."""
    out, done = [], set()
    for s in d.SCENARIOS:
        for r in s.active:
            regime = d.regime(s, r)
            if regime in done:
                continue
            done.add(regime)
            src = _sources(d, s, r, t)
            out.append((regime, _failover_mixes(d, s, r, t, src) if "div" in src else [src]))
    return out


def _prefill_candidates(d: ModelData, slack: int, tables: TableCache | None = None, phys: str = "") -> None:
    """Per (tier, shape, regime) the prefill candidate, its curve as long as the demand
    needs (``tables``: as :func:`_prefill_candidate`)."""
    inst = d.inst
    regime_mixes = {t: _regime_mixes(d, t) for t in d.tiers}
    for t, tm in d.tiers.items():
        for c, sl in d.slices.items():
            check("building the candidate tables")
            fit = (_fit(inst, tm, sl, "prefill") if tables is None
                   else tables.memo((phys, "fit", t, c, "prefill"), lambda tm=tm, sl=sl: _fit(inst, tm, sl, "prefill")))
            if not fit.fits:  # the slice cannot hold the tier's longest prompt: no candidate
                d.excluded[(t, c, "prefill")] = fit.reason
                continue
            # worst-case arrivals any region may see: its own peak plus all of the largest lost region
            max_rps = max(d.p_peak_rps.values()) * 2 * tm.tier_share
            for regime, mixes in regime_mixes[t]:
                check("building the candidate tables")
                def probe_ms(tm=tm, sl=sl, mixes=mixes) -> float:
                    return max(max((prefill_profile(si, tm, sl, [x for x in mix.values() if x.weight > 0], [99.0]) for mix in mixes),
                                   key=lambda p: p.mean_ms).mean_ms for _, si in held_instances(inst))

                mean_ms = probe_ms() if tables is None else tables.memo((phys, "probe", t, c, _mixes_key(mixes)), probe_ms)
                # no region's pods hold more slices of this shape than the largest pod bound: a
                # longer curve is never used (and a huge peak_rps made it unbounded -- issue 16 row 2)
                n_max = min(_estimate_slices(d, t, c, max_rps, mean_ms) + slack, max(_pod_bound(d, r, c) for r in d.REGIONS))
                d.prefill[(t, c, regime)] = _prefill_candidate(inst, tm, sl, regime, mixes, n_max, tables, phys)


def replica_rps_for_mix(inst: Instance, tm: TierMix, sl: SliceSpec, sources: list[PrefillSource], schedule: Schedule | None = None,
                        replicas: int = 1) -> float:
    """Largest req/s one colocated replica of shape ``sl`` in a pool of ``replicas`` carries
    within the tier's SLOs under ``schedule`` (default prefill-first) for the prefill
    traffic mix ``sources`` (:meth:`fleetplan.perf.colocated.ReplicaRates.rate`), before the
    utilisation headroom. 0 when the KV of the tier's longest request does not fit
    (:func:`fleetplan.perf.pools.longest_request_fit`)."""
    if not _fit(inst, tm, sl, "replica").fits:
        return 0.0
    return _rates(inst, tm, sl, [x for x in sources if x.weight > 0], schedule or Schedule(PREFILL_FIRST)).rate(replicas)


def _rates(inst: Instance, tm: TierMix, sl: SliceSpec, sources: list[PrefillSource], schedule: Schedule,
           tables: TableCache | None = None):
    """:func:`fleetplan.perf.colocated.replica_rates` of ``inst``; under several held sources their
    :class:`fleetplan.perf.robust.MinRates`, the slowest source searched first. ``tables``: each
    source's search shares its :class:`~fleetplan.perf.replica_rates.RateMemo`
    (:func:`fleetplan.instance.tables.rate_memos`; the same rates)."""
    held = [si for _, si in held_slowest_first(inst)]
    return rates_under(held, tm, sl, sources, schedule, rate_memos(tables, held, tm.name, sl.label, sources, schedule.label))


def _fit(inst: Instance, tm: TierMix, sl: SliceSpec, role: str):
    """:func:`fleetplan.perf.pools.longest_request_fit` under every held source (:func:`fleetplan.perf.robust.fit_under`)."""
    return fit_under(held_instances(inst), tm, sl, role)


def _replica_candidates(d: ModelData, tables: TableCache | None = None) -> None:
    """Per (tier, shape, schedule) -- prefill-first, or chunked at each candidate token
    budget (:func:`fleetplan.perf.colocated.schedules_of`) -- the pool size n_ref: the
    fewest replicas the least favourable normal mix needs at the tier's smallest
    normal-peak demand over the regions (capped by the smallest pod bound), and in every
    regime the rate per replica of a pool of n_ref replicas (least favourable mix), times
    the utilisation headroom; a region whose own normal peak needs a larger pool gets its
    own n_ref and that pool's rates (``replica_region``) where pooling raises the rate. The optimiser picks one schedule per replica pool (region x
    tier x shape: the replica family); a pool running schedule h holds at least its
    n_ref replicas (c_replica_schedule_min), so the rate -- which rises with the pool
    size under least-work routing -- is safe for any count the model picks. Capacity
    stays linear in the count. Rates are computed once per distinct mix profile and
    schedule; ``tables`` shares each search's :class:`~fleetplan.perf.replica_rates.RateMemo`
    with other builds (:func:`fleetplan.instance.tables.rate_memo`: the same instance part,
    sources and schedule)."""
    inst = d.inst
    head = inst.serving.utilisation_headroom
    scheds = schedules_of(inst)
    d.SCHEDULES = [sch.label for sch in scheds]
    s0 = d.SCENARIOS[0]
    for t, tm in d.tiers.items():
        regimes = _regime_mixes(d, t)
        demand = min(d.own_rps(s0, r, t) for r in d.REGIONS)
        for c, sl in d.slices.items():
            check("building the candidate tables")
            fit = _fit(inst, tm, sl, "replica")
            if not fit.fits:  # no candidate under any schedule (replica_cand gives rate 0)
                d.excluded[(t, c, "replica")] = fit.reason
                continue
            # mixes that differ only in weight but not in hit rate or clamp give the same
            # rates: one ReplicaRates per distinct profile and schedule
            seen: dict[tuple, object] = {}

            def rates(mix: dict[str, PrefillSource], sch: Schedule):
                srcs = [x for x in mix.values() if x.weight > 0]
                tot = sum(x.weight for x in srcs)
                key = tuple(sorted((round(x.weight / tot, 12), x.hit_rate, x.clamp_min_tokens or 0) for x in srcs))
                if len(set((h, m) for _, h, m in key)) == 1:
                    key = (key[0][1:],)  # one hit rate and clamp: the weights do not matter
                key = (key, sch.label)
                if key not in seen:
                    seen[key] = _rates(inst, tm, sl, srcs, sch, tables)
                return seen[key]

            normal = [mixes for regime, mixes in regimes if regime == (NORMAL,)][0]
            pods = min(max(_pod_bound(d, r, c), 1) for r in d.REGIONS)
            for sch in scheds:
                check("building the candidate tables")
                worst = [rates(mix, sch) for mix in normal]
                # the fewest replicas the least favourable mix needs at the smallest demand
                need = [rr.replicas_for(demand, head) for rr in worst]
                if any(n is None for n in need):
                    continue
                # no larger than the pods of every region can hold (a bigger pool is never fielded)
                n_ref = max(min(max(need), pods), 1)
                if min(rr.rate(n_ref) for rr in worst) <= 0:
                    continue
                if all(rates(mix, sch).rate(n_ref) <= rates(mix, sch).rate(1) * (1 + 1e-12) for _, mixes in regimes for mix in mixes):
                    n_ref = 1  # no pooling gain (random routing, or TTFT not binding): the rate holds for any pool size
                for regime, mixes in regimes:
                    lam = min(rates(mix, sch).rate(n_ref) for mix in mixes)
                    floor = min(rates(mix, sch).rate(1) for mix in mixes)
                    d.replica[(t, c, sch.label, regime)] = ReplicaCandidate(t, c, regime, lam * head, sch.label, n_ref, floor * head)
                # a region whose own normal peak needs a larger pool is rated at that pool's size (the
                # issue-17 trial: a 1.5 req/s region held a 60 req/s region to the rate of a pool of one)
                for r in d.REGIONS:
                    need_r = [rr.replicas_for(d.own_rps(s0, r, t), head) for rr in worst]
                    if any(n is None for n in need_r):
                        continue
                    n_r = max(min(max(need_r), max(_pod_bound(d, r, c), 1)), 1)
                    if n_r <= n_ref:
                        continue
                    own = {regime: min(rates(mix, sch).rate(n_r) for mix in mixes) for regime, mixes in regimes}
                    if all(own[regime] <= d.replica[(t, c, sch.label, regime)].rps_per_replica / head * (1 + 1e-12) for regime, _ in regimes):
                        continue  # no pooling gain (random routing, TTFT not binding): the smallest region's candidate
                    for regime, mixes in regimes:
                        floor = min(rates(mix, sch).rate(1) for mix in mixes)
                        d.replica_region[(r, t, c, sch.label, regime)] = ReplicaCandidate(t, c, regime, own[regime] * head, sch.label, n_r,
                                                                                         floor * head)
