"""ModelData: the index sets, scenarios and candidate tables the sizing model chooses from,
built once per instance (:func:`build_model_data`).

Everything nonlinear is computed here, once, with :mod:`fleetplan.perf`; the
mixed-integer model (:mod:`fleetplan.models.sizing`) only selects and counts.

The package, by meaning: the scenarios are the instance's
(:mod:`fleetplan.instance.scenarios`); the candidates' types and :class:`ModelData` are
in :mod:`fleetplan.tables.data`; prefill capacity curves in :mod:`fleetplan.tables.prefill`;
this module builds the tables, bounds the pools and prunes dominated candidates. The
names the sizing code and the tests use are re-exported here.

Candidate tables. Decode: per (tier, slice shape, regime) the operating point with the
most output tokens/s among the legal ones (regime ``normal`` caps the batch at (1 -
decode_knee_margin) x the knee; ``failover`` may ride to the knee). Prefill: per (tier,
slice shape, regime) the mean service time of each traffic source and the (convex)
curve A(n) of the most work n slices carry within the TTFT SLO, for every traffic mix
routing can produce in that regime (:mod:`fleetplan.tables.prefill`).
A shape whose KV page pool cannot hold the tier's longest request in a role (the
prompt for prefill, prompt + output for decode and replicas) has no candidate in that
role (``ModelData.excluded`` says why; :func:`fleetplan.perf.pools.longest_request_fit`).
Colocated replicas: the largest req/s a replica carries within its SLOs, likewise.

Physics sources (:mod:`fleetplan.instance.physics`: physics with a stated spread). An
instance that holds its plan under several sources gets the least favourable candidate of
all of them, in every table: a decode operating point (batch cap, draft length) is legal
only when it is legal under every held source, its capacity the least tokens/s of any, its
knee the least; a shape serves a role only when the longest request fits under every
source; a prefill candidate's per-source service times are the largest of any source's and
its capacity curve the pointwise least of the sources' curves, each in the units of those
service times (:func:`fleetplan.perf.robust.min_capacity`: the least of concave curves is
concave, so the model's chords stay valid); a replica's rate is the least of the sources'
rates at its pool size n_ref, and n_ref the largest any source needs
(:class:`fleetplan.perf.robust.MinRates`). One held source (no physics block) is the code
as it was, bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from fleetplan.deadline import check, phase
from fleetplan.errors import InstanceError, Problem

from fleetplan.instance.modes import ROLES_OF, candidate_modes
from fleetplan.instance.physics import held_instances, held_slowest_first
from fleetplan.instance.scenarios import FAILOVER, NORMAL, Scenario, build_scenarios
from fleetplan.instance.schema import Instance
from fleetplan.tables.cache import TableCache, default_tables, family_key, rate_memos
from fleetplan.tables.data import DecodeCandidate, ModelData, PrefillCandidate, ReplicaCandidate, pod_bound
from fleetplan.tables.prefill import _mixes_key, _prefill_candidate, extend_prefill, mix_capacity_curve, workload_capacity_curve
from fleetplan.perf.pools import (
    KNEE_SEARCH_MAX,
    DecodeOp,
    PrefillSource,
    TierMix,
    decode_knee,
    decode_table,
    prefill_profile,
    slice_specs,
    tier_mixes,
)
from fleetplan.perf.colocated import PREFILL_FIRST, Schedule, schedules_of
from fleetplan.perf.robust import fit_under, rates_under
from fleetplan.perf.roofline import SliceSpec

__all__ = ["normal_peak_slices", "best_decode_op", "replica_rps_for_mix", "mix_capacity_curve", "Scenario", "DecodeCandidate", "PrefillCandidate",
           "ReplicaCandidate", "ModelData", "build_model_data", "workload_capacity_curve", "extend_prefill", "build_scenarios", "NORMAL", "FAILOVER"]


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
    (:class:`fleetplan.tables.cache.TableCache`: the same numbers, each piece keyed by
    exactly what it reads); None: the process's default cache
    (:func:`fleetplan.tables.cache.default_tables`: in memory and on disk, off with
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
        # a plan fitted to the Azure code trace (C_a^2 13.2) verified yet failed p99 TPOT in
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
    available pods of every chip type): said before any solve (a peak_rps of
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
            d.p_warm_allowed[(r, c)] = pod_bound(d, r, c) > 0
        for t in d.TIERS:
            max_rps = (d.p_peak_rps[r] + (max_lost[r] if inst.failover.n_minus_1 else 0.0)) * d.tiers[t].tier_share
            for c in d.CONFIGS:
                pb = pod_bound(d, r, c)
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
        # region's pod bound, however large max_slices_per_region is)
        need = {}
        for (r, t, ro, c), n in d.p_max_slices.items():
            if ro == "prefill":
                need[(t, c)] = max(need.get((t, c), 0), min(n + wmax, max(n, pod_bound(d, r, c))))
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
    (the schema's floors keep them from making it so; an infinity here was an
    OverflowError, exit 1)."""
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
                # longer curve is never used (and a huge peak_rps made it unbounded)
                n_max = min(_estimate_slices(d, t, c, max_rps, mean_ms) + slack, max(pod_bound(d, r, c) for r in d.REGIONS))
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
    (:func:`fleetplan.tables.cache.rate_memos`; the same rates)."""
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
    with other builds (:func:`fleetplan.tables.cache.rate_memo`: the same instance part,
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
            pods = min(max(pod_bound(d, r, c), 1) for r in d.REGIONS)
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
                    n_r = max(min(max(need_r), max(pod_bound(d, r, c), 1)), 1)
                    if n_r <= n_ref:
                        continue
                    own = {regime: min(rates(mix, sch).rate(n_r) for mix in mixes) for regime, mixes in regimes}
                    if all(own[regime] <= d.replica[(t, c, sch.label, regime)].rps_per_replica / head * (1 + 1e-12) for regime, _ in regimes):
                        continue  # no pooling gain (random routing, TTFT not binding): the smallest region's candidate
                    for regime, mixes in regimes:
                        floor = min(rates(mix, sch).rate(1) for mix in mixes)
                        d.replica_region[(r, t, c, sch.label, regime)] = ReplicaCandidate(t, c, regime, own[regime] * head, sch.label, n_r,
                                                                                         floor * head)
