"""Prefill capacity: the candidate tables' prefill candidates and their capacity curves.

Per (tier, slice shape, regime) the mean service time of each traffic source and the
(convex) curve A(n) of the most work (busy slices, Erlangs) n slices carry with the TTFT
percentile -- the percentile of the sum of path, queue wait, compute and exposed KV
(:mod:`fleetplan.perf.ttft_tail`) -- within its SLO, for every traffic mix routing can
produce in that regime (the least of their capacities). Under several held physics sources
a candidate's per-source service times are the largest of any source's and its curve the
pointwise least of the sources' curves, each in the units of those service times
(:func:`fleetplan.perf.robust.min_capacity`: the least of concave curves is concave, so the
model's chords stay valid). Curves are memoised per process (``_CURVES``) and in the table
cache (:mod:`fleetplan.tables.cache`); a pool that needs more slices than first estimated
extends its curve (:func:`extend_prefill`).

Units: ms, requests/s, Erlangs (busy slices), slices as named.
"""

from __future__ import annotations

import math

import numpy as np

from fleetplan.deadline import check
from fleetplan.instance.physics import held_instances
from fleetplan.instance.schema import Instance
from fleetplan.perf.pools import PrefillProfile, PrefillSource, TierMix, path_ms, prefill_profile, tier_slos
from fleetplan.perf.queueing import max_arrival_rate
from fleetplan.perf.robust import min_capacity
from fleetplan.perf.roofline import SliceSpec
from fleetplan.perf.ttft_tail import MixTail, capacity_curve_of_sum, convex_minorant, mix_tail, sum_curve_points
from fleetplan.tables.cache import TableCache, family_key
from fleetplan.tables.data import ModelData, PrefillCandidate

__all__ = ["workload_capacity_curve", "mix_capacity_curve", "extend_prefill"]


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
    element-wise, :mod:`fleetplan.tables.cache`), so a longer request computes only
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
    so far (:meth:`fleetplan.tables.cache.TableCache.curve`; the same numbers).
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
    (:func:`fleetplan.tables.cache.family_key` 'prefill', computed here when empty), mixes and
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
    ``key`` and ``router``, the longest asked for (:meth:`~fleetplan.tables.cache.TableCache.points`):
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
    :func:`fleetplan.tables.cache.family_key`): '' without a cache."""
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
