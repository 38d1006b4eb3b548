"""Independent evaluation of a planned pool: recomputes loads, TTFT/TPOT percentiles, KV
fit and capacity from the instance with :mod:`fleetplan.perf` only -- never from the
optimisation model or its candidate tables. Used to fill a plan's predictions and, by
:mod:`fleetplan.results.verify`, to re-prove it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from fleetplan.instance.schema import Instance
from fleetplan.instance.physics import held_instances, physics_key
from fleetplan.perf.pools import (
    KNEE_SEARCH_MAX,
    DecodeOp,
    PrefillSource,
    TierMix,
    decode_knee,
    decode_table,
    path_ms,
    prefill_profile,
    tier_mixes,
    tier_slos,
)
from fleetplan.perf.queueing import wait_percentile_ms
from fleetplan.perf.ttft_tail import max_arrival_rate_of_sum, meets_percentile_of_sum, mix_tail, tail_exceeds
from fleetplan.perf.colocated import PREFILL_FIRST, Schedule, replica_rates
from fleetplan.perf.roofline import SliceSpec

__all__ = ["PrefillEval", "DecodeEval", "ReplicaEval", "Context", "RobustContext", "tagged", "context", "GROWTH_SEARCH_MAX"]

#: Largest load multiplier the growth searches go to: a pool that still meets its SLOs at
#: 100x its load is reported as absorbing +9,900% (at least).
GROWTH_SEARCH_MAX = 100.0


@dataclass(frozen=True)
class PrefillEval:
    """A prefill pool at a load (units in names). ``ttft_ms`` maps percentile -> ms: the
    sum of the components' percentiles (path, queue wait ``wait_ms``, compute and exposed
    KV ``compute_ms``), a bound; ``meets_slo``: every TTFT SLO holds for the percentile of
    their sum (:mod:`fleetplan.perf.ttft_tail`), what the pool is sized against."""

    arrivals_rps: float
    slices: int
    utilisation: float
    mean_service_ms: float
    cs2: float
    ttft_p50_ms: float
    ttft_ms: dict[float, float]
    wait_ms: dict[float, float]
    compute_ms: dict[float, float]
    meets_slo: bool
    slo_limit_ms: dict[float, float]
    ca2: float = 1.0
    source: str = ""  # several held physics sources: the one these figures are under (the least favourable)


@dataclass(frozen=True)
class DecodeEval:
    demand_tokens_per_s: float
    capacity_tokens_per_s: float
    slices: int
    op: DecodeOp
    occupancy: float  # mean residents per slice at this load (Little's law at the p50 TPOT)
    meets_capacity: bool


@dataclass(frozen=True)
class ReplicaEval:
    """Colocated replicas at a load (units in names; dicts map percentile -> ms): ``ttft_ms``
    the sum of the components' percentiles (the bound), ``ttft_estimate_ms`` the percentile
    of their sum, ``tpot_ms`` over the occupancy distribution (:mod:`fleetplan.perf.colocated`)."""

    arrivals_rps: float
    replicas: int
    rps_per_replica: float
    prefill_share: float
    tpot_ms: dict[float, float]
    ttft_ms: dict[float, float]
    stable: bool
    meets_slo: bool
    reason: str
    schedule: str = PREFILL_FIRST
    ttft_estimate_ms: dict[float, float] = field(default_factory=dict)
    itl_ms: dict[float, float] = field(default_factory=dict)
    occupancy: float = 0.0
    occupancy_sd: float = 0.0
    source: str = ""  # several held physics sources: the one these figures are under (the least favourable)


#: SLO knees by (physics key, tier, slice, draft length), the oldest dropped past _KNEES_MAX (:meth:`Context.decode_knee`)
_KNEES: dict[tuple, int] = {}
_KNEES_MAX = 4096


class Context:
    """Per-instance evaluation helpers (tier mixes, slices, SLOs), built once.

    ``Context(inst)`` of an instance that holds its plan under several physics sources
    (:func:`fleetplan.instance.physics.robust`) is a
    :class:`RobustContext` (below): the same questions, each answered
    under every held source, the least favourable answer kept (and named)."""

    def __new__(cls, inst: Instance):
        if cls is Context and inst.physics is not None:
            from fleetplan.instance.physics import robust

            if robust(inst):
                return super().__new__(RobustContext)
        return super().__new__(cls)

    def __init__(self, inst: Instance):
        if inst.physics is not None and type(self) is Context:
            # one held source: the context of its instance (the instance with its priors, no physics block)
            inst = held_instances(inst)[0][1]
        self.inst = inst
        self.router = inst.serving.router  # how each pool's requests reach its replicas or prefill slices (queueing.routed_queue)
        self.tiers: dict[str, TierMix] = {t.name: t for t in tier_mixes(inst)}
        self.slos = {t: tier_slos(inst, t) for t in self.tiers}
        clamp = inst.failover.admission_clamp
        self.clamped_share = {t: (float(np.sum(tm.shares[tm.tokens >= clamp.min_input_tokens])) if clamp.enabled else 0.0)
                              for t, tm in self.tiers.items()}
        self.batch_share = sum(c.share for c in inst.workload.classes.values() if c.sheddable)
        self._ops: dict = {}
        self._memo: dict = {}
        self._path = None
        self._physics: str | None = None

    def slice(self, label: str) -> SliceSpec:
        chip, _, n = label.rpartition("x")
        return SliceSpec.of(chip, self.inst.chips[chip], int(n))

    def ttft_slo(self, t: str):
        return [s for s in self.slos[t] if s.metric == "ttft"]

    def sources(self, t: str, failover: bool, own_rps: float, div_rps: float) -> list[PrefillSource]:
        """Prefill sources of tier t: own traffic and (in a failover) diverted, kept traffic."""
        tm = self.tiers[t]
        f = self.inst.failover.rewarm_hit_rate_factor if (failover and self.inst.failover.size_for == "transient") else 1.0
        out = []
        if own_rps > 0 or div_rps <= 0:
            out.append(PrefillSource(max(own_rps, 1e-12), tm.hit_rate * f))
        if failover and div_rps > 0:
            clamp = self.inst.failover.admission_clamp
            # the profile drops clamped prompts itself: weigh the source by its rate before the clamp
            before = div_rps / (1.0 - self.clamped_share[t]) if self.clamped_share[t] < 1.0 else div_rps
            out.append(PrefillSource(before, self.inst.failover.diverted_hit_rate * f, clamp.min_input_tokens if clamp.enabled else None))
        return out

    # ------------------------------------------------------------ prefill
    def prefill(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                dcn_share: float = 0.0) -> PrefillEval:
        """TTFT percentiles of a prefill pool of ``slices`` slices at the given arrivals
        (requests/s; ``div_rps`` is diverted traffic already net of the clamp); ``dcn_share``
        (fraction) of its requests send their KV over the DCN (:func:`prefill_profile`).
        Memoised: the verifier asks the same question for every hour a scenario dominates."""
        key = ("prefill", t, slice_label, slices, own_rps, div_rps, failover, dcn_share)
        if key not in self._memo:
            self._memo[key] = self._prefill(t, slice_label, slices, own_rps, div_rps, failover, dcn_share)
        return self._memo[key]

    def prefill_meets_slo(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                          dcn_share: float = 0.0) -> bool:
        """Whether the prefill pool meets its TTFT SLOs at that load: :meth:`prefill`'s
        ``meets_slo`` (under several physics sources the searches ask only this, and a
        :class:`RobustContext` stops at the first source that misses)."""
        return self.prefill(t, slice_label, slices, own_rps, div_rps, failover, dcn_share).meets_slo

    def _profile(self, t: str, slice_label: str, sources: list[PrefillSource], percentiles: list[float], dcn_share: float = 0.0):
        """:func:`prefill_profile` memoised on what it depends on: the sources' shares of the
        total weight (to 12 digits), hit rates and clamps -- not the rate itself. The
        shortfall searches (:meth:`prefill_max_scale`, :meth:`prefill_min_shortfall`) scale the
        arrivals by a bisection variable and asked for the same profile 25-50 times per
        question (a 5-region shortfall plan's verification took 7x its tables,
        past the time limit's reserve)."""
        tot = sum(x.weight for x in sources)
        key = ("profile", t, slice_label, tuple(percentiles),
               tuple((round(x.weight / tot, 12) if tot > 0 else x.weight, x.hit_rate, x.clamp_min_tokens, x.only_min_tokens) for x in sources),
               dcn_share)
        if key not in self._memo:
            self._memo[key] = prefill_profile(self.inst, self.tiers[t], self.slice(slice_label), sources, percentiles, dcn_share)
        return self._memo[key]

    def _prefill(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                 dcn_share: float = 0.0) -> PrefillEval:
        pcts = sorted({s.percentile for s in self.ttft_slo(t)} | {99.0})
        prof = self._profile(t, slice_label, self.sources(t, failover, own_rps, div_rps), pcts + [50.0], dcn_share)
        lam = max(own_rps, 0.0) + max(div_rps, 0.0)
        util = lam * prof.mean_ms / 1e3 / slices if slices > 0 else (math.inf if lam > 0 else 0.0)
        ttft, wait, comp = {}, {}, {}
        for p in pcts:
            if lam <= 0:
                w = 0.0
            elif slices <= 0:
                w = math.inf
            else:
                w = float(wait_percentile_ms(slices, lam, prof.mean_ms, p, prof.cs2, prof.ca2, self.router))
            wait[p] = w
            comp[p] = prof.pct_ms[p] + prof.kv_exposed_ms[p]
            ttft[p] = path_ms(self.inst, p) + w + comp[p]
        w50 = (float(wait_percentile_ms(slices, lam, prof.mean_ms, 50.0, prof.cs2, prof.ca2, self.router)) if (lam > 0 and slices > 0)
               else (0.0 if lam <= 0 else math.inf))
        p50 = path_ms(self.inst, 50.0) + w50 + prof.pct_ms[50.0] + prof.kv_exposed_ms[50.0]
        limits = {s.percentile: s.limit_ms for s in self.ttft_slo(t)}
        ok = all(meets_percentile_of_sum(self._tail(prof, lim).tail, p, slices, lam, prof.mean_ms, prof.cs2, prof.ca2, self.router) if slices > 0 else lam <= 0
                 for p, lim in limits.items())
        return PrefillEval(lam, slices, util, prof.mean_ms, prof.cs2, p50, ttft, wait, comp, ok, limits, prof.ca2)

    def _tail(self, prof, limit_ms: float):
        """The :class:`fleetplan.perf.ttft_tail.MixTail` of a pool's profile at a TTFT limit,
        memoised on the profile object (held by the memo, so its id is not reused)."""
        key = ("tail", id(prof), limit_ms)
        if key not in self._memo:
            self._memo[key] = (prof, mix_tail(self.inst, prof, limit_ms))
        return self._memo[key][1]

    def prefill_capacity_erlangs(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                                 dcn_share: float = 0.0) -> float:
        """Most work (Erlangs) ``slices`` slices carry at this traffic mix (the arrivals'
        own/diverted split and hit rates; their scale does not matter) with every TTFT
        percentile of the sum within its limit (:func:`fleetplan.perf.ttft_tail.max_arrival_rate_of_sum`);
        ``slices`` (stability) without a TTFT SLO, 0 where an empty queue already misses."""
        pcts = sorted({s.percentile for s in self.ttft_slo(t)} | {99.0})
        prof = self._profile(t, slice_label, self.sources(t, failover, max(own_rps, 1e-9), div_rps), pcts + [50.0], dcn_share)
        out = float(slices)
        for s in self.ttft_slo(t):
            key = ("capacity", id(self._tail(prof, s.limit_ms)), slices, s.percentile)
            if key not in self._memo:
                tail = self._tail(prof, s.limit_ms)
                lam = float(max_arrival_rate_of_sum([slices], prof.mean_ms, tail.tail, s.percentile, prof.cs2, prof.ca2, router=self.router)[0])
                self._memo[key] = lam * prof.mean_ms / 1e3
            out = min(out, self._memo[key])
        return out

    def ttft_estimate(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                      percentiles: list[float] | None = None, dcn_share: float = 0.0) -> dict[float, float]:
        """TTFT percentiles of a prefill pool (ms) as the percentile of the sum of its
        independent components -- path, M/G/c wait, the request's own compute and exposed
        KV (:func:`queueing.ttft_percentiles_of_sum_ms`, every percentile from one tail) -- where :meth:`prefill` adds their
        percentiles (an upper bound; the pool is sized against this estimate, :mod:`fleetplan.perf.ttft_tail`). ``slices`` = 1 with a replica's
        share of the arrivals gives a colocated replica's. Default percentiles: 50, the
        tier's TTFT SLO percentiles and 99. Within a few % of a simulation of the pool
        (docs/validation.md)."""
        from fleetplan.perf.ttft_tail import path_distribution

        if self._path is None:
            # memoised per path (the margins' step-time search builds a context per step scale, and the scale leaves the
            # path as it is: 136 convolutions of the brief's path components, ~0.06 s of CPU, without the memo)
            self._path = path_distribution(self.inst)
        pcts = percentiles or sorted({50.0, 99.0} | {s.percentile for s in self.ttft_slo(t)})
        # memoised per argument (the report asks for the same pool's estimate again: a region's stick and the
        # margins' searches), a copy out so that a caller's change cannot reach the memo
        key = ("ttft_estimate", t, slice_label, slices, own_rps, div_rps, failover, tuple(pcts), dcn_share)
        if key not in self._memo:
            self._memo[key] = self._ttft_estimate(t, slice_label, slices, own_rps, div_rps, failover, pcts, dcn_share)
        return dict(self._memo[key])

    def _ttft_estimate(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                       pcts: list[float], dcn_share: float) -> dict[float, float]:
        from fleetplan.perf.queueing import ttft_percentiles_of_sum_ms

        prof = prefill_profile(self.inst, self.tiers[t], self.slice(slice_label), self.sources(t, failover, own_rps, div_rps), [50.0], dcn_share)
        lam = max(own_rps, 0.0) + max(div_rps, 0.0)
        if slices <= 0:
            return {p: math.inf for p in pcts} if lam > 0 else {}
        return ttft_percentiles_of_sum_ms(pcts, self._path, slices, lam, prof.mean_ms, prof.cs2, prof.type_ms, prof.type_weight, prof.ca2,
                                          self.router)

    def ttft_within(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool, percentile: float,
                    limit_ms: float, dcn_share: float = 0.0) -> bool:
        """Whether :meth:`ttft_estimate`'s ``percentile`` (ms; 0 for a pool of no slices and no
        arrivals) is <= ``limit_ms`` -- the same answer, its bisection stopped once it is
        decided (:func:`queueing.ttft_percentile_of_sum_within`): what the margins' searches
        ask of a prefill pool at each step-time and load multiplier. Memoised per argument."""
        from fleetplan.perf.queueing import ttft_percentile_of_sum_within
        from fleetplan.perf.ttft_tail import path_distribution

        key = ("ttft_within", t, slice_label, slices, own_rps, div_rps, failover, percentile, limit_ms, dcn_share)
        if key not in self._memo:
            if self._path is None:
                self._path = path_distribution(self.inst)
            lam = max(own_rps, 0.0) + max(div_rps, 0.0)
            if slices <= 0:
                got = (math.inf if lam > 0 else 0.0) <= limit_ms
            else:
                prof = prefill_profile(self.inst, self.tiers[t], self.slice(slice_label), self.sources(t, failover, own_rps, div_rps), [50.0],
                                       dcn_share)
                got = ttft_percentile_of_sum_within(percentile, limit_ms, self._path, slices, lam, prof.mean_ms, prof.cs2, prof.type_ms,
                                                    prof.type_weight, prof.ca2, self.router)
            self._memo[key] = got
        return self._memo[key]

    def prefill_max_scale(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                          dcn_share: float = 0.0) -> float:
        """Largest theta in [0, 1] such that theta x the arrivals meet the TTFT SLO."""
        if self.prefill_meets_slo(t, slice_label, slices, own_rps, div_rps, failover, dcn_share):
            return 1.0
        if slices <= 0:
            return 0.0
        lo, hi = 0.0, 1.0
        if not self.prefill_meets_slo(t, slice_label, slices, own_rps * 1e-9, div_rps * 1e-9, failover, dcn_share):
            return 0.0
        for _ in range(50):
            mid = 0.5 * (lo + hi)
            if self.prefill_meets_slo(t, slice_label, slices, own_rps * mid, div_rps * mid, failover, dcn_share):
                lo = mid
            else:
                hi = mid
        return lo

    def prefill_growth(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                       g_max: float | None = None, dcn_share: float = 0.0) -> float:
        """Largest multiplier g in [0, g_max] of the arrivals (both sources, so the traffic
        mix and its service-time profile stay as they are) at which the pool still meets
        every TTFT percentile SLO of :meth:`prefill` -- the percentile of the sum of path, the
        G/G/c wait at g x the arrivals, compute and exposed KV -- below utilisation 1.
        The TTFT rises with g, so a grid over the bracket is refined five times (to 3e-8 of
        it). Returns 0 when even a trickle misses, g_max (default :data:`GROWTH_SEARCH_MAX`)
        when g_max still meets; ``inf`` with no arrivals. No TTFT SLO: the stability limit."""
        g_max = GROWTH_SEARCH_MAX if g_max is None else g_max
        lam = max(own_rps, 0.0) + max(div_rps, 0.0)
        if lam <= 0:
            return math.inf
        if slices <= 0:
            return 0.0
        limits = {s.percentile: s.limit_ms for s in self.ttft_slo(t)}
        prof = prefill_profile(self.inst, self.tiers[t], self.slice(slice_label), self.sources(t, failover, own_rps, div_rps),
                               sorted(limits) or [99.0], dcn_share)
        tails = {p: self._tail(prof, lim).tail for p, lim in limits.items()}

        def ok(g: np.ndarray) -> np.ndarray:
            good = g * lam * prof.mean_ms / 1e3 < slices
            for p, tail in tails.items():
                good &= tail_exceeds(tail, slices, g * lam, prof.mean_ms, prof.cs2, prof.ca2, self.router) <= (1.0 - p / 100.0) * (1 + 1e-9)
            return good

        hi = min(g_max, slices * 1e3 / (prof.mean_ms * lam))
        if ok(np.array([g_max]))[0]:
            return g_max
        lo = 0.0
        for _ in range(5):
            grid = np.linspace(lo, hi, 33)
            good = np.nonzero(ok(grid))[0]
            if good.size == 0:
                return 0.0
            k = int(good.max())
            if k == len(grid) - 1:
                return float(grid[k])
            lo, hi = float(grid[k]), float(grid[k + 1])
        return lo

    def prefill_min_shortfall(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                              dcn_share: float = 0.0) -> float:
        """Fewest requests/s that must go unserved for the rest to meet the TTFT SLO: the
        least over three ways of choosing them -- proportionally, diverted (cold, longer)
        requests first, or own requests first (requests/s)."""
        lam = own_rps + div_rps
        if lam <= 0 or self.prefill_meets_slo(t, slice_label, slices, own_rps, div_rps, failover, dcn_share):
            return 0.0
        best = (1.0 - self.prefill_max_scale(t, slice_label, slices, own_rps, div_rps, failover, dcn_share)) * lam
        for first, second in (("div", "own"), ("own", "div")):
            rates = {"own": own_rps, "div": div_rps}
            kept = dict(rates)

            def ok(k):
                return self.prefill_meets_slo(t, slice_label, slices, k["own"], k["div"], failover, dcn_share)

            kept[first] = 0.0
            if ok(kept):  # cutting part of the first source is enough: bisect on it
                lo, hi = 0.0, rates[first]
                for _ in range(50):
                    mid = 0.5 * (lo + hi)
                    if ok({**kept, first: mid}):
                        lo = mid
                    else:
                        hi = mid
                best = min(best, rates[first] - lo)
            else:  # all of the first source and part of the second
                lo, hi = 0.0, rates[second]
                for _ in range(50):
                    mid = 0.5 * (lo + hi)
                    if ok({first: 0.0, second: mid}):
                        lo = mid
                    else:
                        hi = mid
                best = min(best, rates[first] + rates[second] - lo)
        return best

    def prefill_shortfall_within(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                                 allowed_rps: float, dcn_share: float = 0.0) -> bool:
        """Whether :meth:`prefill_min_shortfall` is at most ``allowed_rps`` (requests/s):
        whether one of its three ways of choosing the unserved requests -- proportionally,
        diverted first, own first -- leaves the rest within the TTFT SLO when it takes
        ``allowed_rps`` off. The same verdict from at most four evaluations at the
        threshold instead of three 50-step bisections (the verifier asks
        this for every hour of every region loss and pool, and a shortfall plan's
        verification overran ``--time-limit``).

        Each way's shortfall is monotone in what it takes off (the bisections of
        :meth:`prefill_min_shortfall` assume it), so "its shortfall <= allowed" is "the
        point ``allowed`` off meets the SLO": proportionally the arrivals x theta = 1 -
        allowed / lambda (not below the 1e-9 floor of :meth:`prefill_max_scale`, which
        counts a pool that misses at 1e-9 x the arrivals as serving none); first-source
        first, that source less ``allowed`` or, when it is smaller, none of it and the other
        less the rest. Exact at the threshold where the bisections stop within 2^-50 of
        the rates above the least shortfall (they over-state it by that much, never under)."""
        lam = own_rps + div_rps
        if lam <= 0 or allowed_rps >= lam or self.prefill_meets_slo(t, slice_label, slices, own_rps, div_rps, failover, dcn_share):
            return True
        if slices <= 0:
            return False
        theta = max(1.0 - allowed_rps / lam, 1e-9)
        if self.prefill_meets_slo(t, slice_label, slices, own_rps * theta, div_rps * theta, failover, dcn_share):
            return True
        rates = {"own": own_rps, "div": div_rps}
        for first, second in (("div", "own"), ("own", "div")):
            if allowed_rps <= rates[first]:
                kept = {first: rates[first] - allowed_rps, second: rates[second]}
            else:
                kept = {first: 0.0, second: rates[second] - (allowed_rps - rates[first])}
            if self.prefill_meets_slo(t, slice_label, slices, kept["own"], kept["div"], failover, dcn_share):
                return True
        return False

    def replica_scale_within(self, t: str, slice_label: str, replicas: int, own_rps: float, div_rps: float, failover: bool,
                             theta: float, schedule: str | None = None) -> bool:
        """Whether :meth:`replica_max_scale` with ``hi=1`` is at least ``theta`` (a share in
        [0, 1]): whether theta x the arrivals (requests/s) meet the replicas' SLOs -- one
        evaluation where the bisection takes 40 (the verifier's shortfall checks,
        which must finish within the solve's time limit). The bisection assumes the SLOs hold at every share below one that holds;
        so does this; exact at ``theta`` where the bisection stops within 2^-40 below."""
        if theta <= 0.0:
            return True
        if theta > 1.0:
            return False
        if replicas <= 0 or own_rps + div_rps <= 0:
            return replicas > 0
        return self.replica_meets_slo(t, slice_label, replicas, own_rps * theta, div_rps * theta, failover, schedule)

    def replica_max_scale(self, t: str, slice_label: str, replicas: int, own_rps: float, div_rps: float, failover: bool,
                          hi: float | None = 4.0, schedule: str | None = None) -> float:
        """Largest theta in [0, hi] such that theta x the arrivals meet the replicas' SLOs
        (bisection, 40 halvings). ``hi=None``: no ceiling -- the bracket doubles from 1
        until theta x the arrivals miss an SLO (up to 2^30; beyond, 2^30 is returned), so
        1 / theta is the load's exact share of what the replicas carry, however light."""
        if replicas <= 0 or own_rps + div_rps <= 0:
            return 0.0 if replicas <= 0 else (hi if hi is not None else math.inf)
        ok = lambda th: self.replica_meets_slo(t, slice_label, replicas, own_rps * th, div_rps * th, failover, schedule)  # noqa: E731
        if hi is None:
            lo, up = 0.0, 1.0
            while ok(up):
                lo, up = up, 2.0 * up
                if up > 2.0**30:
                    return lo
        elif ok(hi):
            return hi
        else:
            lo, up = 0.0, hi
        for _ in range(40):
            mid = 0.5 * (lo + up)
            if ok(mid):
                lo = mid
            else:
                up = mid
        return lo

    # ------------------------------------------------------------ decode
    def decode_op(self, t: str, slice_label: str, batch: int, draft_tokens: int) -> DecodeOp:
        """The operating point (``batch`` cap, ``draft_tokens``; 0 = off) of tier ``t`` on the
        slice: :func:`decode_table`'s, of that draft length alone (the off points beside a
        speculating one were computed and thrown away: half the decode physics of the margins'
        step-time searches). Memoised."""
        key = (t, slice_label, batch, draft_tokens)
        if key not in self._ops:
            ops = decode_table(self.inst, self.tiers[t], self.slice(slice_label), [batch], [draft_tokens], with_off=False)
            self._ops[key] = next(o for o in ops if o.draft_tokens == draft_tokens)
        return self._ops[key]

    def decode_knee(self, t: str, slice_label: str, draft_tokens: int) -> int:
        """The SLO knee (largest legal batch, searched up to 4,096) at this draft length.
        Memoised for the process by what it reads -- the instance without its regions
        (:func:`fleetplan.instance.physics.physics_key`), the tier, the slice, the draft
        length -- so instances that differ in demand or pods alone (a purchase tree's 30
        quarter checks: ~1,100 knee searches of 4,096 batches, 7 s of the bundled example's
        verification) search each knee once; the same value the search returns."""
        if self._physics is None:
            self._physics = physics_key(self.inst)
        key = (self._physics, t, slice_label, int(draft_tokens))
        got = _KNEES.get(key)
        if got is None:
            got = _KNEES[key] = decode_knee(self.inst, self.tiers[t], self.slice(slice_label), draft_tokens, max_batch=KNEE_SEARCH_MAX)
            for old in list(_KNEES)[:max(0, len(_KNEES) - _KNEES_MAX)]:
                _KNEES.pop(old, None)
        return got

    def decode_at_load(self, t: str, slice_label: str, batch: int, draft_tokens: int, rps_per_slice: float):
        """:func:`fleetplan.perf.pools.decode_at_load` of a slice at ``rps_per_slice`` requests/s."""
        from fleetplan.perf.pools import decode_at_load

        return decode_at_load(self.inst, self.tiers[t], self.slice(slice_label), batch, draft_tokens, rps_per_slice)

    def decode(self, t: str, slice_label: str, slices: int, batch: int, draft_tokens: int, admitted_rps: float) -> DecodeEval:
        op = self.decode_op(t, slice_label, batch, draft_tokens)
        demand = admitted_rps * self.inst.workload.output_tokens
        cap = op.tokens_per_s * slices
        occ = demand / cap * batch if cap > 0 else math.inf
        return DecodeEval(demand, cap, slices, op, occ, cap >= demand * (1 - 1e-9) - 1e-9)

    # ------------------------------------------------------------ colocated
    def replica(self, t: str, slice_label: str, replicas: int, own_rps: float, div_rps: float, failover: bool,
                schedule: str | None = None, router: str | None = None) -> ReplicaEval:
        """Steady state of ``replicas`` colocated replicas at the given arrivals (requests/s)
        under ``schedule`` (a label, 'prefill-first' or 'chunked-<tokens>'; default
        prefill-first) and ``router`` (default the instance's ``serving.router``):
        TTFT, TPOT and ITL percentiles (ms), stability, SLOs met. Memoised like :meth:`prefill`."""
        key = ("replica", t, slice_label, replicas, own_rps, div_rps, failover, schedule or PREFILL_FIRST, router)
        if key not in self._memo:
            self._memo[key] = self._replica(t, slice_label, replicas, own_rps, div_rps, failover, schedule or PREFILL_FIRST, router)
        return self._memo[key]

    def replica_meets_slo(self, t: str, slice_label: str, replicas: int, own_rps: float, div_rps: float, failover: bool,
                          schedule: str | None = None, router: str | None = None) -> bool:
        """Whether the replicas are stable and meet their SLOs at that load: :meth:`replica`'s
        ``meets_slo`` (a :class:`RobustContext` stops at the first
        source that misses)."""
        return self.replica(t, slice_label, replicas, own_rps, div_rps, failover, schedule, router).meets_slo

    def _replica(self, t: str, slice_label: str, replicas: int, own_rps: float, div_rps: float, failover: bool,
                 schedule: str, router: str | None) -> ReplicaEval:
        sl = self.slice(slice_label)
        tm = self.tiers[t]
        lam = own_rps + div_rps
        per = lam / replicas if replicas > 0 else math.inf
        if replicas <= 0 and lam > 0:
            return ReplicaEval(lam, replicas, per, math.inf, {}, {}, False, False, "no replicas", schedule)
        sched = Schedule.parse(schedule)
        rkey = ("rates", t, slice_label, own_rps > 0 or div_rps <= 0, failover and div_rps > 0, schedule, router,
                round(own_rps / lam, 12) if lam > 0 else 1.0)
        if rkey not in self._memo:
            self._memo[rkey] = replica_rates(self.inst, tm, sl, self.sources(t, failover, max(own_rps, 1e-12), div_rps), sched, router)
        rr = self._memo[rkey]
        pcts = sorted({s.percentile for s in self.slos[t]} | {50.0, 99.0})
        st, lat = rr.latency(max(per, 0.0), max(replicas, 1), pcts)
        ok = st.stable
        for s in self.slos[t]:
            got = {"ttft": lat.ttft_ms, "tpot": lat.tpot_ms, "itl": lat.itl_ms}[s.metric][s.percentile]
            ok &= got <= s.limit_ms * (1 + 1e-6)
        return ReplicaEval(lam, replicas, per, st.prefill_share, lat.tpot_ms, lat.ttft_ms, st.stable, bool(ok), st.reason, schedule,
                           lat.ttft_estimate_ms, lat.itl_ms, st.sequences_decoding if st.stable else math.inf, lat.occupancy_sd)


# --------------------------------------------------------------------------- several physics sources
#
# The evaluator under several held physics sources (fleetplan.instance.physics.held_sources):
# every question of Context answered under each source, the least favourable answer kept and
# named. Context(inst) returns a RobustContext when inst holds its plan under more than one
# source, so every reader of a plan -- the verifier, the plan's records and their check, the
# what-if's accounting, the report -- evaluates it under all of them with no code of its own.
# It lives beside Context because Context(inst) constructs it. The rule, per question:
#
#
# * a pool's latencies (:meth:`prefill`, :meth:`replica`) are one source's evaluation whole --
#   the source under which the pool is furthest from its SLOs (the largest ratio of a
#   percentile to its limit; an unstable source first) -- and the pool meets its SLOs only
#   when it meets them under every source; the evaluation carries the source's name;
# * a decode operating point (:meth:`decode_op`) is the source's with the least tokens/s,
#   legal only when legal under every source (each violation names its source); the knee is
#   the least of the sources' knees;
# * the searches built on those predicates (the largest share of the load the SLOs allow, the
#   least shortfall, the threshold checks) inherit them, so they hold under every source; the
#   load growth a prefill pool absorbs is the least over the sources. A search asks only
#   whether the SLOs hold (:meth:`RobustContext.prefill_meets_slo`,
#   :meth:`RobustContext.replica_meets_slo`): the source that missed last is asked first and
#   the first that misses ends the question (without it, the batch infill's 40-step search of a
#   robust colocated plan rated every probe under every source).


def tagged(name: str, text: str) -> str:
    """``text`` (a finding) prefixed with the physics source it holds under."""
    return f"[physics source '{name}'] {text}"


class RobustContext(Context):
    """:class:`Context` under every held physics source (see the module docstring).
    ``parts`` are (source name, that source's :class:`Context`), in the instance's order."""

    def __init__(self, inst: Instance):
        super().__init__(inst)
        self.parts: list[tuple[str, Context]] = [(name, Context(si)) for name, si in held_instances(inst)]
        self._missed: dict[tuple, int] = {}  # per pool, the source that missed its SLOs last (:meth:`_all_meet`)

    # ------------------------------------------------------------ prefill
    def _prefill_worst(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                       dcn_share: float = 0.0) -> tuple[int, list[PrefillEval]]:
        key = ("robust-prefill", t, slice_label, slices, own_rps, div_rps, failover, dcn_share)
        if key not in self._memo:
            evs = [c.prefill(t, slice_label, slices, own_rps, div_rps, failover, dcn_share) for _, c in self.parts]
            self._memo[key] = (max(range(len(evs)), key=lambda i: (_prefill_ratio(evs[i]), -i)), evs)
        return self._memo[key]

    def prefill(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                dcn_share: float = 0.0) -> PrefillEval:
        """The prefill pool under the source furthest from its TTFT SLOs, meeting them only
        when every source does (``source`` names it)."""
        i, evs = self._prefill_worst(t, slice_label, slices, own_rps, div_rps, failover, dcn_share)
        return replace(evs[i], meets_slo=all(e.meets_slo for e in evs), source=self.parts[i][0])

    def prefill_meets_slo(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                          dcn_share: float = 0.0) -> bool:
        """Whether the pool meets its TTFT SLOs under every source (:meth:`prefill`'s
        ``meets_slo``), stopping at the first source that misses (:meth:`_all_meet`) -- a
        search that asks only this (the load growth, the largest share allowed) does not rate
        the pool under the sources after it."""
        key = ("robust-prefill", t, slice_label, slices, own_rps, div_rps, failover, dcn_share)
        if key in self._memo:
            _, evs = self._memo[key]
            return all(e.meets_slo for e in evs)
        return self._all_meet(("prefill", t, slice_label, failover),
                              lambda c: c.prefill(t, slice_label, slices, own_rps, div_rps, failover, dcn_share).meets_slo)

    def ttft_estimate(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                      percentiles: list[float] | None = None, dcn_share: float = 0.0) -> dict[float, float]:
        """The TTFT estimate under the source :meth:`prefill` names for the same load."""
        i, _ = self._prefill_worst(t, slice_label, slices, own_rps, div_rps, failover, dcn_share)
        return self.parts[i][1].ttft_estimate(t, slice_label, slices, own_rps, div_rps, failover, percentiles, dcn_share)

    def prefill_growth(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                       g_max: float | None = None, dcn_share: float = 0.0) -> float:
        """The least load growth any source's pool absorbs."""
        return min(c.prefill_growth(t, slice_label, slices, own_rps, div_rps, failover, g_max, dcn_share) for _, c in self.parts)

    # ------------------------------------------------------------ decode
    def decode_op(self, t: str, slice_label: str, batch: int, draft_tokens: int) -> DecodeOp:
        """The operating point under the source with the least tokens/s, legal only when legal
        under every source (each violation names its source)."""
        key = ("robust", t, slice_label, batch, draft_tokens)
        if key not in self._ops:
            ops = [c.decode_op(t, slice_label, batch, draft_tokens) for _, c in self.parts]
            i = min(range(len(ops)), key=lambda j: (ops[j].tokens_per_s, j))
            names = [n for n, _ in self.parts]
            hand = next((tagged(n, o.handoff_violation) for n, o in zip(names, ops) if o.handoff_violation), "")
            viol = tuple(tagged(n, v) for n, o in zip(names, ops) for v in o.violations)
            self._ops[key] = replace(ops[i], legal=all(o.legal for o in ops), kv_fit=all(o.kv_fit for o in ops),
                                     handoff_fit=all(o.handoff_fit for o in ops), violations=viol, handoff_violation=hand,
                                     source=names[i])
        return self._ops[key]

    def decode_knee(self, t: str, slice_label: str, draft_tokens: int) -> int:
        """The least SLO knee of the sources."""
        return min(c.decode_knee(t, slice_label, draft_tokens) for _, c in self.parts)

    def decode_at_load(self, t: str, slice_label: str, batch: int, draft_tokens: int, rps_per_slice: float):
        """The slice at that load under the source :meth:`decode_op` names."""
        name = self.decode_op(t, slice_label, batch, draft_tokens).source
        return dict(self.parts)[name].decode_at_load(t, slice_label, batch, draft_tokens, rps_per_slice)

    # ------------------------------------------------------------ colocated
    def replica(self, t: str, slice_label: str, replicas: int, own_rps: float, div_rps: float, failover: bool,
                schedule: str | None = None, router: str | None = None) -> ReplicaEval:
        """The replicas under the source furthest from their SLOs (an unstable one first),
        stable and meeting them only when every source is."""
        key = ("robust-replica", t, slice_label, replicas, own_rps, div_rps, failover, schedule, router)
        if key not in self._memo:
            evs = [c.replica(t, slice_label, replicas, own_rps, div_rps, failover, schedule, router) for _, c in self.parts]
            i = max(range(len(evs)), key=lambda j: (self._replica_ratio(t, evs[j]), -j))
            self._memo[key] = replace(evs[i], meets_slo=all(e.meets_slo for e in evs), stable=all(e.stable for e in evs),
                                      source=self.parts[i][0])
        return self._memo[key]

    def replica_meets_slo(self, t: str, slice_label: str, replicas: int, own_rps: float, div_rps: float, failover: bool,
                          schedule: str | None = None, router: str | None = None) -> bool:
        """Whether the replicas are stable and meet their SLOs under every source
        (:meth:`replica`'s ``meets_slo``), stopping at the first source that misses."""
        key = ("robust-replica", t, slice_label, replicas, own_rps, div_rps, failover, schedule, router)
        if key in self._memo:
            return self._memo[key].meets_slo
        return self._all_meet(("replica", t, slice_label, failover, schedule, router),
                              lambda c: c.replica(t, slice_label, replicas, own_rps, div_rps, failover, schedule, router).meets_slo)

    def _all_meet(self, pool: tuple, meets) -> bool:
        """Whether ``meets(context)`` holds under every source: the source that missed last for
        this ``pool`` is asked first (a search's failing probes then cost one source's
        evaluation), the first that misses ends it -- the same answer in any order."""
        first = self._missed.get(pool, 0)
        for i in [first] + [j for j in range(len(self.parts)) if j != first]:
            if not meets(self.parts[i][1]):
                self._missed[pool] = i
                return False
        return True

    def _replica_ratio(self, t: str, ev: ReplicaEval) -> float:
        """How far the replicas are from their SLOs: the largest percentile / limit (inf when unstable)."""
        if not ev.stable:
            return math.inf
        got = {"ttft": ev.ttft_ms, "tpot": ev.tpot_ms, "itl": ev.itl_ms}
        return max([got[s.metric].get(s.percentile, math.inf) / s.limit_ms for s in self.slos[t]] or [0.0])


def _prefill_ratio(ev: PrefillEval) -> float:
    """How far a prefill pool is from its TTFT SLOs: the largest percentile / limit (its p99
    over 1 s without one)."""
    if ev.slo_limit_ms:
        return max(ev.ttft_ms[p] / lim for p, lim in ev.slo_limit_ms.items())
    return ev.ttft_ms.get(99.0, 0.0) / 1e3


def context(inst: Instance) -> Context:
    return Context(inst)
