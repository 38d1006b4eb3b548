"""The numbers behind every figure and table of ``fleetplan report`` (the ``--json``
document), built from a plan and its instance.

Curves come from :mod:`fleetplan.perf` (decode tables and knees, memory maps, replica
steady states) and from the independent evaluator :class:`fleetplan.results.evaluate.Context`
(prefill TTFT percentiles, capacities) -- the same functions the verifier uses, never
the optimisation model. Operating points and loads are the plan's. The region-loss
cascade is :func:`fleetplan.whatif.whatif` at each region's peak hour.
"""

from __future__ import annotations

import math
from typing import Callable, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fleetplan import __version__
from fleetplan.instance.schema import Instance
from fleetplan.perf.pools import KNEE_SEARCH_MAX, decode_knee, decode_table
from fleetplan.perf.colocated import PREFILL_FIRST
from fleetplan.perf.roofline import kv_bytes_per_request, slice_memory_map
from fleetplan.report.margin_curves import MarginCurve, margin_curves
from fleetplan.results.modes import plan_modes, roles_at
from fleetplan.results.evaluate import Context
from fleetplan.results.loads import r6, slice_price
from fleetplan.results.plan import Plan, status_note

__all__ = ["REPORT_SCHEMA_VERSION", "MemorySlice", "DecodeCurve", "TtftCurve", "FleetRow", "HourlyRegion", "CascadeSurvivor",
           "CascadeEvent", "CostSegment", "ReportData", "build_report_data", "cost_segments"]

REPORT_SCHEMA_VERSION = 1
CURVE_POINTS = 120  # points per curve


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _r(xs) -> list[float]:
    return [r6(float(x)) for x in xs]


# ----------------------------------------------------------------------------- schema


class KvUse(_F):
    """KV a pool keeps resident on one slice at its operating point."""

    tier: str
    role: str
    batch: float = Field(description="Resident requests per slice at the operating point (count; colocated: sequences decoding at the normal peak).")
    kv_gb: float = Field(description="Their KV with paging slack (GB).")
    capacity_requests: int = Field(description="Residents of this tier's mix the KV pool holds (count).")
    handoff_reserve_requests: int = Field(0, description="Decode: handoffs in flight the operating point keeps KV for beside the batch "
                                          "(the plan's record: p99 of Poisson(arrivals at full load x transfer time); 0 for replicas).")
    handoff_reserve_gb: float = Field(0.0, description="Their KV: the tier's p99 prompt each, with paging slack (GB; fleetplan.perf.handoff).")


class MemorySlice(_F):
    """A slice shape's HBM (GB): weights + workspace + headroom + KV page pool = total."""

    slice: str
    chips: int
    total_gb: float
    weights_gb: float
    workspace_gb: float
    headroom_gb: float
    kv_pool_gb: float
    in_use: list[KvUse]
    longest_request_kv_gb: float = Field(description="KV of one request of the longest bucket plus its output (GB).")
    longest_request_tokens: float


class OperatingMark(_F):
    label: str
    batch: float
    draft_tokens: int
    tpot_p50_ms: float
    tpot_ms: float = Field(description="TPOT at the SLO's percentile (ms).")
    tokens_per_s_per_chip: float


class DecodeCurve(_F):
    """Batch -> TPOT of one tier on one slice shape (disaggregated: the decode table;
    colocated: the replica's steady state, TPOT with prefill interleaved)."""

    tier: str
    slice: str
    mode: Literal["decode", "replica"]
    percentile: float = Field(description="The TPOT SLO's percentile.")
    tpot_limit_ms: float | None
    batch: list[float] = Field(description="Resident requests per slice (count).")
    tpot_p50_ms: list[float]
    tpot_ms: list[float] = Field(description="TPOT at the SLO percentile (ms).")
    tokens_per_s_per_chip: list[float]
    spec_draft_tokens: int = Field(description="Draft length of the speculative curve (0: none drawn).")
    spec_tpot_p50_ms: list[float]
    spec_tpot_ms: list[float]
    spec_tokens_per_s_per_chip: list[float]
    knee: int | None = Field(description="SLO knee without speculation (largest legal batch; replicas: sequences at the SLO-limited rate).")
    spec_knee: int | None
    kv_capacity: int = Field(description="Residents of this tier's mix whose KV (with paging slack) fits the slice's page pool (count).")
    points: list[OperatingMark]
    regions: list[str]
    schedule: str | None = Field(default=None, description="Colocated replicas: the pools' engine schedule ('prefill-first', 'chunked-<tokens>').")


class TtftPoint(_F):
    label: str
    utilisation: float
    ttft_ms: float | None
    scenario: str


class TtftCurve(_F):
    """TTFT p50 and at the SLO percentile against prefill utilisation, for one pool (ms).
    Prefill pools: the percentile of the sum of TTFT's components (the plan's
    ``ttft_estimate_ms``, what the pool is sized against); replicas: the evaluator's
    ``ttft_ms``, as their SLO-limited rate is."""

    region: str
    tier: str
    slice: str
    slices: int
    mode: Literal["prefill", "replica"]
    percentile: float
    ttft_limit_ms: float | None
    utilisation: list[float] = Field(description="Busy fraction of the pool (prefill) or prefill share of replica time (replica).")
    ttft_p50_ms: list[float]
    ttft_ms: list[float]
    sizing_label: str = Field("", description="The scenario whose traffic mix the second curve is for (empty: none).")
    sizing_slices: int = 0
    sizing_utilisation: list[float] = Field(default_factory=list)
    sizing_ttft_ms: list[float] = Field(default_factory=list)
    limit_utilisation: float | None = Field(None, description="Replicas: the prefill share at the SLO-limited rate.")
    limit_binds: str = Field("", description="Replicas: which SLO sets the SLO-limited rate ('TTFT' or 'TPOT').")
    points: list[TtftPoint]


class FleetRow(_F):
    region: str
    tier: str
    role: str
    slice: str
    slices: int
    chips: int
    cost_per_hour_usd: float
    growth_absorbed_normal: float | None = Field(None, description="Load growth the pool absorbs at the normal peak before an SLO breaks (fraction; the plan's growth_absorbed).")
    growth_absorbed_least: float | None = Field(None, description="The least over the plan's scenarios (fraction), in growth_scenario.")
    growth_scenario: str | None = None
    schedule: str | None = Field(None, description="Replica pools: the engine schedule ('prefill-first' or 'chunked-C', C tokens per step).")


class LossMark(_F):
    """What one region-loss scenario puts on a survivor, and what carries it."""

    scenario: str
    hour: int
    lost: str
    arrivals_rps: float = Field(description="Own plus diverted requests/s reaching the region's pools (after the admission clamp, before batch shedding).")
    pressure: float | None = Field(description="Load over the most the region's tightest pool carries within its SLOs (fraction).")
    offered_rps: float = Field(0.0, description="Requests/s the loss sends to the region: arrivals plus those the admission clamp rejects.")
    clamped_rps: float = Field(0.0, description="Cold diverted long prompts rejected fast by the admission clamp (req/s).")
    shed_rps: float = Field(0.0, description="Batch-class requests shed (req/s).")
    carried_rps: float = Field(0.0, description="Requests/s the region's pools carry: arrivals less the batch shed.")
    capacity_rps: float | None = Field(None, description="Requests/s of this scenario's carried mix the region's pools carry within the SLOs in the loss "
                                                         "(installed plus the warm slices that join, at the failover operating points): carried / pressure.")
    binding: str = Field("", description="The tier and role of the tightest pool in the loss.")
    warm_slices: int = Field(0, description="Warm slices that join the region's pools in the loss (count).")


class HourlyRegion(_F):
    region: str
    load_rps: list[float] = Field(description="Own requests/s at hours 0..23 UTC.")
    capacity_rps: float = Field(description="Requests/s of the region's mix its pools carry within the SLOs in normal operation.")
    binding: str = Field(description="The tier and role that sets capacity_rps.")
    policy_capacity_rps: float = Field(description="The same at the plan's normal operating policy (decode below the knee margin; replicas at the utilisation headroom).")
    losses: list[LossMark]


class CascadeSurvivor(_F):
    """A survivor of a region loss, in chips of its front pools (prefill, or replicas)."""

    region: str
    traffic_multiplier: float | None  # None: the survivor has no traffic of its own (the ratio is undefined)
    prefill_multiplier_steady: float | None
    prefill_multiplier_transient: float | None
    hit_rate_before: float
    hit_rate_steady: float
    hit_rate_transient: float
    need_own_chips: int = Field(description="Chips the hour's own load needs (count).")
    need_steady_chips: int | None = Field(description="Chips the failover load needs in the post-failover steady state, before mitigations "
                                                      "(None: no pool size holds the SLO for some pool's unmitigated mix, see unbounded_pools).")
    need_transient_chips: int | None = Field(description="The same during the cache re-warm.")
    unbounded_pools: list[str] = Field(default_factory=list, description="Pools ('tier role (slice)') whose failover need before the "
                                       "mitigations has no size: the TTFT SLO cannot hold for that mix at any pool size (the what-if's need "
                                       "None; its percentile prompt's compute alone exceeds it) until shedding or the clamp changes the mix.")
    shed_chips: int
    clamp_chips: int
    need_final_chips: int = Field(description="Transient need after shedding and the clamp.")
    installed_chips: int
    warm_chips: int
    residual_chips: int
    decode_need_own_chips: int
    decode_need_failover_chips: int = Field(description="Decode chips the failover load needs at the failover operating points, before mitigations.")
    decode_shed_chips: int = Field(0, description="Decode chips batch shedding frees.")
    decode_clamp_chips: int = Field(0, description="Decode chips the admission clamp frees (clamped requests never decode).")
    decode_need_final_chips: int = Field(0, description="Decode need after shedding and the clamp: failover need - shed - clamp.")
    decode_installed_chips: int
    decode_warm_chips: int
    decode_residual_chips: int
    pools: list[dict] = Field(description="Each survivor pool's accounting (the what-if's PoolAccount, transient phase).")


class CascadeEvent(_F):
    lost: str
    hour: int
    label: str
    survivors: list[CascadeSurvivor]
    residual_request_equivalents: float


class CostSegment(_F):
    name: str
    explain: str
    chips: int = Field(description="Chips in the segment (count).")
    cost_per_hour_usd: float
    usd_per_1m_output_daily_mean: float | None = Field(description="USD per 1M output tokens at the daily mean demand; null when the plan withholds its $ per 1M figures.")
    usd_per_1m_output_at_peak: float | None
    usd_per_1m_output_with_infill: float | None


class ReportData(_F):
    schema_version: Literal[1] = REPORT_SCHEMA_VERSION
    fleetplan_version: str
    instance_name: str
    instance_hash: str
    description: str
    serving_mode: str = Field(description="'disaggregated' or 'colocated' when every region x tier runs it; 'mixed' for an auto plan that runs both (the plan's serving_modes say where).")
    replica_router: str = Field("least-work", description="The router the plan was sized for (plan.router, serving.router): how a "
                                "colocated pool's requests reach its replicas and a prefill pool's its slices -- 'least-work' queues "
                                "them G/G/c over the pool, 'round-robin', 'random' and 'prefix-aware' G/G/1 per replica or slice.")
    plan_status: str
    cost: dict = Field(description="The plan's cost summary.")
    memory: list[MemorySlice]
    decode_curves: list[DecodeCurve]
    ttft_curves: list[TtftCurve]
    fleet: list[FleetRow]
    hourly: list[HourlyRegion]
    cascade: list[CascadeEvent]
    cascade_note: str
    cost_segments: list[CostSegment]
    notes: list[str]
    margin_curves: list[MarginCurve] = Field(default_factory=list, description="Each pool's SLOs against a multiplier on every step "
                                             "time, the physics sources marked (issue 40).")


# ----------------------------------------------------------------------------- builders


def _pct_of(slos, metric: str) -> tuple[float, float | None]:
    s = [x for x in slos if x.metric == metric]
    if not s:
        return 99.0, None
    s = min(s, key=lambda x: x.limit_ms)
    return s.percentile, s.limit_ms


def _memory(inst: Instance, ctx: Context, plan: Plan) -> list[MemorySlice]:
    shapes = sorted({p.slice for p in plan.pools} | {w.slice for w in plan.warm_pool}, key=lambda s: (s.rpartition("x")[0], int(s.rpartition("x")[2])))
    longest = max(b.tokens for b in inst.workload.input_mix) + inst.workload.output_tokens
    out = []
    for label in shapes:
        sl = ctx.slice(label)
        mm = slice_memory_map(inst.model, sl, inst.priors)
        uses = {}
        for p in plan.pools:
            if p.slice != label or p.role == "prefill":
                continue
            tm = ctx.tiers[p.tier]
            kv, _ = tm.resident_kv(inst)
            cap = mm.resident_capacity(kv, inst.priors.kv_paging_slack)
            hand = (0, 0.0)
            if p.role == "decode" and p.decode_normal is not None:
                b = float(p.decode_normal.batch_cap)
                hand = (p.decode_normal.handoff_reserve_requests, p.decode_normal.handoff_reserve_gb)
            elif p.role == "replica":
                b = ctx.replica(p.tier, label, max(p.slices, 1), inst.regions[p.region].peak_rps * tm.tier_share, 0.0, False, p.schedule).occupancy
                b = b if math.isfinite(b) else float(cap)
            else:
                continue
            key = (p.tier, p.role)
            if key not in uses or b > uses[key].batch:
                uses[key] = KvUse(tier=p.tier, role=p.role, batch=r6(b), kv_gb=r6(b * kv * (1 + inst.priors.kv_paging_slack) / 1e9), capacity_requests=cap,
                                  handoff_reserve_requests=hand[0], handoff_reserve_gb=hand[1])
        out.append(MemorySlice(slice=label, chips=sl.chips, total_gb=r6(mm.total_gb), weights_gb=r6(mm.weights_gb), workspace_gb=r6(mm.workspace_gb),
                               headroom_gb=r6(mm.headroom_gb), kv_pool_gb=r6(mm.kv_pool_gb), in_use=[uses[k] for k in sorted(uses)],
                               longest_request_kv_gb=r6(float(kv_bytes_per_request(inst.model, longest)) / 1e9), longest_request_tokens=r6(longest)))
    return out


def _batch_grid(top: int) -> np.ndarray:
    return np.unique(np.round(np.linspace(1, max(top, 8), CURVE_POINTS))).astype(float)


def _decode_curves(inst: Instance, ctx: Context, plan: Plan) -> list[DecodeCurve]:
    groups: dict[tuple[str, str, str], list] = {}
    for p in plan.pools:
        if p.role in ("decode", "replica"):
            groups.setdefault((p.tier, p.slice, (p.schedule or PREFILL_FIRST) if p.role == "replica" else ""), []).append(p)
    out = []
    for (t, label, sched), pools in sorted(groups.items()):
        tm = ctx.tiers[t]
        sl = ctx.slice(label)
        pct, lim = _pct_of(ctx.slos[t], "tpot")
        kv_mean, _ = tm.resident_kv(inst)
        kv_cap = slice_memory_map(inst.model, sl, inst.priors).resident_capacity(kv_mean, inst.priors.kv_paging_slack)
        if pools[0].role == "decode":
            k = max((p.decode_failover.draft_tokens for p in pools if p.decode_failover), default=0)
            knee0 = decode_knee(inst, tm, sl, 0, max_batch=KNEE_SEARCH_MAX)
            kneek = decode_knee(inst, tm, sl, k, max_batch=KNEE_SEARCH_MAX) if k else None
            caps = [x for p in pools for x in ((p.decode_normal.batch_cap if p.decode_normal else 0), (p.decode_failover.batch_cap if p.decode_failover else 0))]
            top = int(min(KNEE_SEARCH_MAX, max([knee0, kneek or 0, *caps, 16]) * 1.25))
            b = _batch_grid(top)
            off = [o for o in decode_table(inst, tm, sl, b, []) if o.draft_tokens == 0]
            spec = [o for o in decode_table(inst, tm, sl, b, [k]) if o.draft_tokens == k] if k else []
            marks = []
            seen = set()
            for p in pools:
                for name, op in (("normal", p.decode_normal), ("failover", p.decode_failover)):
                    if op is None or (name, op.batch_cap, op.draft_tokens) in seen:
                        continue
                    seen.add((name, op.batch_cap, op.draft_tokens))
                    marks.append(OperatingMark(label=f"{name}: B={op.batch_cap}" + (f", k={op.draft_tokens}" if op.draft_tokens else ""),
                                               batch=op.batch_cap, draft_tokens=op.draft_tokens, tpot_p50_ms=op.tpot_p50_ms,
                                               tpot_ms=op.tpot_ms.get(f"p{pct:g}", max(op.tpot_ms.values(), default=op.tpot_p50_ms)),
                                               tokens_per_s_per_chip=r6(op.tokens_per_s_per_slice / sl.chips)))
            out.append(DecodeCurve(
                tier=t, slice=label, mode="decode", percentile=pct, tpot_limit_ms=lim, batch=_r(b),
                tpot_p50_ms=_r(o.tpot_p50_ms for o in off), tpot_ms=_r(o.tpot_ms.get(pct, o.tpot_p50_ms) for o in off),
                tokens_per_s_per_chip=_r(o.tokens_per_s / sl.chips for o in off), spec_draft_tokens=k,
                spec_tpot_p50_ms=_r(o.tpot_p50_ms for o in spec), spec_tpot_ms=_r(o.tpot_ms.get(pct, o.tpot_p50_ms) for o in spec),
                spec_tokens_per_s_per_chip=_r(o.tokens_per_s / sl.chips for o in spec), knee=knee0, spec_knee=kneek, kv_capacity=kv_cap, points=marks,
                regions=sorted({p.region for p in pools})))
        else:
            # colocated: sweep one replica's rate under the pool's schedule (the evaluator's model, perf/colocated.py):
            # batch = sequences decoding (Little's law), TPOT over the occupancy distribution
            hi = _replica_max_rps(ctx, t, label, sched)
            rates = np.linspace(hi / CURVE_POINTS, hi * 1.15, CURVE_POINTS)
            bs, p50, pxx, tps = [], [], [], []
            knee_ev = ctx.replica(t, label, 1, hi, 0.0, False, sched)
            for lam in rates:
                ev = ctx.replica(t, label, 1, float(lam), 0.0, False, sched)
                if not ev.stable or ev.occupancy > 2.5 * max(knee_ev.occupancy, 1.0):
                    break
                bs.append(ev.occupancy)
                p50.append(ev.tpot_ms[50.0])
                pxx.append(ev.tpot_ms[pct])
                tps.append(lam * tm.output_tokens / sl.chips)
            marks = []
            for p in pools:
                n = max(p.slices, 1)
                peak = inst.regions[p.region].peak_rps * tm.tier_share
                ev = ctx.replica(t, label, n, peak, 0.0, False, sched)
                lam = peak / n
                marks.append(OperatingMark(label=f"{p.region} at its peak: {lam:.3g} req/s per replica", batch=r6(ev.occupancy), draft_tokens=0,
                                           tpot_p50_ms=r6(ev.tpot_ms[50.0]), tpot_ms=r6(ev.tpot_ms[pct]), tokens_per_s_per_chip=r6(lam * tm.output_tokens / sl.chips)))
            out.append(DecodeCurve(tier=t, slice=label, mode="replica", percentile=pct, tpot_limit_ms=lim, batch=_r(bs), tpot_p50_ms=_r(p50),
                                   tpot_ms=_r(pxx), tokens_per_s_per_chip=_r(tps), spec_draft_tokens=0, spec_tpot_p50_ms=[], spec_tpot_ms=[],
                                   spec_tokens_per_s_per_chip=[], knee=int(math.floor(knee_ev.occupancy)) if knee_ev.stable else None,
                                   spec_knee=None, kv_capacity=kv_cap, points=marks, regions=sorted({p.region for p in pools}), schedule=sched))
    return out


def _replica_max_rps(ctx: Context, t: str, label: str, schedule: str | None, replicas: int = 1) -> float:
    """Most req/s per replica a pool of ``replicas`` carries within the tier's SLOs under
    ``schedule`` (bisection on the evaluator's replica check, the same the verifier uses)."""
    probe = float(max(replicas, 1))
    th = ctx.replica_max_scale(t, label, max(replicas, 1), probe, 0.0, False, hi=1e6, schedule=schedule)
    return th


def _sizing(plan: Plan, region: str, tier: str, role: str):
    best = None
    for sc in plan.scenarios:
        for pl in sc.pools:
            if (pl.region, pl.tier, pl.role) == (region, tier, role) and pl.pressure is not None:
                if best is None or pl.pressure > best[1].pressure + 1e-12:
                    best = (sc, pl)
    return best


def _admitted(pl) -> tuple[float, float]:
    """(own, diverted) requests/s a pool serves in a scenario: arrivals net of the clamp,
    less the shed."""
    shed_own = pl.shed_rps - pl.shed_diverted_rps
    return max(pl.arrivals_rps - pl.diverted_rps - shed_own, 0.0), max(pl.diverted_rps - pl.shed_diverted_rps, 0.0)


def _stick(ctx: Context, t: str, label: str, n: int, own: float, div: float, failover: bool, util: np.ndarray, pct: float):
    """TTFT p50 and pXX (ms) of a prefill pool of ``n`` slices at the busy fractions
    ``util``, the traffic mix (own : diverted) held: the percentile of the sum path + wait +
    the request's own compute and exposed KV (:meth:`Context.ttft_estimate`,
    :func:`fleetplan.perf.queueing.ttft_percentiles_of_sum_ms`; a G/G/1 per slice under a
    load-blind serving.router) -- what the pool is sized and verified against
    (:mod:`fleetplan.perf.ttft_tail`) and what the plan records as ``ttft_estimate_ms``, not
    the sum of the components' percentiles (``ttft_ms``, a bound that can sit above the SLO
    of a verified pool)."""
    ev = ctx.prefill(t, label, n, own, div, failover)
    if own + div <= 0:
        own, div = 1.0, 0.0  # no load to hold the mix of: the own tier's
    tot = own + div
    p50, pxx = [], []
    for u in util:
        lam = float(u) * n * 1e3 / ev.mean_service_ms
        est = ctx.ttft_estimate(t, label, n, own * lam / tot, div * lam / tot, failover, [50.0, pct])
        p50.append(est[50.0])
        pxx.append(est[pct])
    return util, np.array(p50), np.array(pxx)


def _ttft_curves(inst: Instance, ctx: Context, plan: Plan) -> list[TtftCurve]:
    out = []
    normal = next((s for s in plan.scenarios if s.kind == "normal"), None)
    grid = 1.0 - np.geomspace(0.95, 1e-4, CURVE_POINTS)  # dense near saturation, where a large pool's stick turns
    for p in plan.pools:
        if p.role not in ("prefill", "replica"):
            continue
        t, label, n = p.tier, p.slice, p.slices
        pct, lim = _pct_of(ctx.slos[t], "ttft")
        points = []
        if p.role == "prefill":
            u_list, p50, pxx = _stick(ctx, t, label, n, 1.0, 0.0, False, grid, pct)
            if normal is not None:
                pl = next((x for x in normal.pools if (x.region, x.tier, x.role) == (p.region, t, "prefill")), None)
                if pl is not None and pl.utilisation is not None:
                    points.append(TtftPoint(label="normal peak", utilisation=pl.utilisation, ttft_ms=pl.ttft_estimate_ms.get(f"p{pct:g}"), scenario=normal.name))
            sz = _sizing(plan, p.region, t, "prefill")
            s_label, s_n, s_u, s_t = "", 0, [], []
            if sz is not None and sz[0].kind == "loss":
                sc, pl = sz
                own, div = _admitted(pl)
                s_u, _, s_t = _stick(ctx, t, label, pl.slices, own, div, True, grid, pct)
                s_label, s_n = sc.name, pl.slices
                points.append(TtftPoint(label=f"sizing: {sc.name}", utilisation=pl.utilisation, ttft_ms=pl.ttft_estimate_ms.get(f"p{pct:g}"), scenario=sc.name))
            out.append(TtftCurve(region=p.region, tier=t, slice=label, slices=n, mode="prefill", percentile=pct, ttft_limit_ms=lim,
                                 utilisation=_r(u_list), ttft_p50_ms=_r(p50), ttft_ms=_r(pxx), sizing_label=s_label, sizing_slices=s_n,
                                 sizing_utilisation=_r(s_u), sizing_ttft_ms=_r(s_t), points=points))
        else:
            hi = _replica_max_rps(ctx, t, label, p.schedule, n) * n
            u_list, p50, pxx = [], [], []
            for lam in np.linspace(hi / CURVE_POINTS, hi * 1.3, CURVE_POINTS):
                ev = ctx.replica(t, label, n, float(lam), 0.0, False, p.schedule)
                if not ev.stable or not math.isfinite(ev.prefill_share):
                    break
                w50 = ev.ttft_ms.get(50.0)
                u_list.append(ev.prefill_share)
                pxx.append(ev.ttft_ms[pct])
                p50.append(w50 if w50 is not None else float("nan"))
            peak = inst.regions[p.region].peak_rps * ctx.tiers[t].tier_share
            ev = ctx.replica(t, label, n, peak, 0.0, False, p.schedule)
            points.append(TtftPoint(label="normal peak", utilisation=r6(ev.prefill_share), ttft_ms=r6(ev.ttft_ms[pct]), scenario="normal"))
            at = ctx.replica(t, label, n, hi, 0.0, False, p.schedule)
            binds = "TTFT" if (lim is not None and at.ttft_ms[pct] >= lim * (1 - 1e-3)) else "TPOT"
            out.append(TtftCurve(region=p.region, tier=t, slice=label, slices=n, mode="replica", percentile=pct, ttft_limit_ms=lim,
                                 utilisation=_r(u_list), ttft_p50_ms=[] if any(math.isnan(x) for x in p50) else _r(p50), ttft_ms=_r(pxx),
                                 limit_utilisation=r6(at.prefill_share), limit_binds=binds, points=points))
    return out


def _fleet(plan: Plan) -> list[FleetRow]:
    def growth(p):
        loads = [(sc, pl) for sc in plan.scenarios for pl in sc.pools if (pl.region, pl.tier, pl.role) == (p.region, p.tier, p.role)]
        normal = next((pl.growth_absorbed for sc, pl in loads if sc.kind == "normal"), None)
        least = min(((pl.growth_absorbed, sc.name) for sc, pl in loads if pl.growth_absorbed is not None), default=(None, None))
        return {"growth_absorbed_normal": normal, "growth_absorbed_least": least[0], "growth_scenario": least[1]}

    rows = [FleetRow(region=p.region, tier=p.tier, role=p.role, slice=p.slice, slices=p.slices, chips=p.chips, cost_per_hour_usd=p.cost_per_hour_usd,
                     schedule=p.schedule,
                     **growth(p)) for p in plan.pools]
    rows += [FleetRow(region=w.region, tier="-", role="warm pool", slice=w.slice, slices=w.slices, chips=w.chips, cost_per_hour_usd=w.cost_per_hour_usd)
             for w in plan.warm_pool]
    return sorted(rows, key=lambda r: (r.region, r.role == "warm pool", r.tier, r.role, r.slice))


def _pool_capacity_rps(inst: Instance, ctx: Context, p, policy: bool) -> float:
    """Requests/s of the pool's tier it carries within the SLOs in normal operation
    (``policy``: at the plan's normal operating point and utilisation headroom)."""
    t, label, n = p.tier, p.slice, p.slices
    if p.role == "prefill":
        es = ctx.prefill(t, label, n, 1.0, 0.0, False).mean_service_ms
        big = n * 1e3 / es
        return ctx.prefill_max_scale(t, label, n, big, 0.0, False) * big
    if p.role == "decode":
        op = p.decode_normal if policy else (p.decode_failover or p.decode_normal)
        return 0.0 if op is None else ctx.decode_op(t, label, op.batch_cap, op.draft_tokens).tokens_per_s * n / inst.workload.output_tokens
    cap = _replica_max_rps(ctx, t, label, p.schedule, n) * n
    return cap * (inst.serving.utilisation_headroom if policy else 1.0)


def serving_summary(inst: Instance, plan: Plan) -> str:
    """The plan's serving mode in one word: 'disaggregated' or 'colocated' when every region
    x tier runs it, else 'mixed' (an 'auto' plan; ``Plan.serving_modes`` says which runs where)."""
    used = set(plan_modes(inst, plan).values())
    return used.pop() if len(used) == 1 else "mixed"


def _hourly(inst: Instance, ctx: Context, plan: Plan) -> list[HourlyRegion]:
    out = []
    modes = plan_modes(inst, plan)  # each region x tier in the plan's mode
    for r in sorted(inst.regions):
        reg = inst.regions[r]
        caps, pcaps = [], []
        for t, tm in ctx.tiers.items():
            for ro in roles_at(modes, r, t):
                pp = [p for p in plan.pools if (p.region, p.tier, p.role) == (r, t, ro)]
                c = sum(_pool_capacity_rps(inst, ctx, p, False) for p in pp)
                pc = c if ro == "prefill" else sum(_pool_capacity_rps(inst, ctx, p, True) for p in pp)
                caps.append((c / tm.tier_share, f"{t} {ro}"))
                pcaps.append(pc / tm.tier_share)
        cap, binding = min(caps) if caps else (0.0, "-")
        losses = []
        for sc in plan.scenarios:
            if sc.kind != "loss" or r not in {p.region for p in sc.pools}:
                continue
            mine = [p for p in sc.pools if p.region == r]
            front = [p for p in mine if p.role in ("prefill", "replica")]
            arr = sum(p.arrivals_rps for p in front)
            clamped = sum(p.clamped_rps for p in front)
            shed = sum(p.shed_rps for p in front)
            tight = max((p for p in mine if p.pressure is not None), key=lambda p: p.pressure, default=None)
            pr = tight.pressure if tight is not None else None
            carried = arr - shed
            losses.append(LossMark(scenario=sc.name, hour=sc.hour, lost=sc.lost_region, arrivals_rps=r6(arr), pressure=r6(pr) if pr is not None else None,
                                   offered_rps=r6(arr + clamped), clamped_rps=r6(clamped), shed_rps=r6(shed), carried_rps=r6(carried),
                                   capacity_rps=r6(carried / pr) if pr else None, binding=f"{tight.tier} {tight.role}" if tight is not None else "",
                                   warm_slices=sum(p.warm_slices for p in mine)))
        out.append(HourlyRegion(region=r, load_rps=_r(reg.peak_rps * x for x in reg.hourly_load), capacity_rps=r6(cap), binding=binding,
                                policy_capacity_rps=r6(min(pcaps) if pcaps else 0.0), losses=losses))
    return out


def _cascade(inst: Instance, plan: Plan, progress: Callable[[str], None]) -> tuple[list[CascadeEvent], str]:
    regions = sorted(inst.regions)
    if not inst.failover.n_minus_1 or len(regions) < 2:
        return [], "no region-loss cascade: this instance does not plan for N-1 (failover.n_minus_1 is false or there is one region)"
    from fleetplan.whatif import WhatIfUnsolved, mixed_pools, parse_event, whatif

    if mixed_pools(plan):
        return [], (f"no region-loss cascade: {', '.join(mixed_pools(plan))} mix slice shapes (serving.mixed_shapes) and the what-if "
                    "does not handle mixed pools yet")

    out = []
    unsolved: list[str] = []
    chips = lambda sh: int(sh.rpartition("x")[2]) if sh and sh != "-" else 0  # noqa: E731
    for x in regions:
        if not inst.regions[x].failover_to:
            continue
        progress(f"region-loss cascade: lose {x}")
        evs = parse_event(inst, plan, [x], [], "peak", "transient") + parse_event(inst, plan, [x], [], "peak", "steady")
        try:
            rep = whatif(inst, plan, evs)
        except WhatIfUnsolved as e:
            unsolved.append(str(e))
            continue
        tr, st = rep.events
        survivors = []
        for s_t in tr.survivors:
            s_s = next(s for s in st.survivors if s.region == s_t.region)
            front_t = [p for p in s_t.pools if p.role in ("prefill", "replica")]
            front_s = {(p.tier, p.role): p for p in s_s.pools if p.role in ("prefill", "replica")}
            dec = [p for p in s_t.pools if p.role == "decode"]

            def c(pools, f):
                return sum((getattr(p, f) or 0) * chips(p.slice) for p in pools)

            def step(p, name):
                return sum(s.slices for s in p.steps if s.name == name) * chips(p.slice)

            # a pool the what-if finds no size for (need None) has no chip count: the phase's sum has none either
            # (counting it as 0 made the failover need read below the own load's)
            no_size = {"steady": [p for p in front_s.values() if p.need_failover is None], "transient": [p for p in front_t if p.need_failover is None]}
            unbounded = sorted({f"{p.tier} {p.role} ({p.slice})" for ps in no_size.values() for p in ps})

            survivors.append(CascadeSurvivor(
                region=s_t.region, traffic_multiplier=s_t.traffic.value, prefill_multiplier_steady=s_t.prefill_demand_steady.value,
                prefill_multiplier_transient=s_t.prefill_demand_transient.value, hit_rate_before=s_t.hit_rate_before,
                hit_rate_steady=s_t.hit_rate_steady, hit_rate_transient=s_t.hit_rate_transient,
                need_own_chips=c(front_t, "need_normal"), need_steady_chips=None if no_size["steady"] else c(list(front_s.values()), "need_failover"),
                need_transient_chips=None if no_size["transient"] else c(front_t, "need_failover"), unbounded_pools=unbounded, shed_chips=sum(step(p, "batch shed") for p in front_t),
                clamp_chips=sum(step(p, "admission clamp") for p in front_t), need_final_chips=c(front_t, "need_final"),
                installed_chips=c(front_t, "installed"), warm_chips=c(front_t, "warm_slices"), residual_chips=c(front_t, "residual_slices"),
                decode_need_own_chips=c(dec, "need_normal"), decode_need_failover_chips=c(dec, "need_failover"),
                decode_shed_chips=sum(step(p, "batch shed") for p in dec), decode_clamp_chips=sum(step(p, "admission clamp") for p in dec),
                decode_need_final_chips=c(dec, "need_final"), decode_installed_chips=c(dec, "installed"),
                decode_warm_chips=c(dec, "warm_slices"), decode_residual_chips=c(dec, "residual_slices"),
                pools=[p.model_dump(mode="json") for p in s_t.pools]))
        out.append(CascadeEvent(lost=x, hour=tr.hour, label=tr.label, survivors=survivors, residual_request_equivalents=tr.residual_request_equivalents))
    if unsolved:
        return out, ("no region-loss cascade" if not out else "the region-loss cascade leaves out a loss") + ": the what-if could not solve " + "; ".join(unsolved)
    return out, ""


def _min_prefill_slices(ctx: Context, t: str, label: str, n: int, lam: float) -> int:
    """Fewest slices of this shape whose TTFT meets the SLO at ``lam`` req/s of own
    traffic (bisection; TTFT percentiles fall as slices are added)."""
    if lam <= 0:
        return 0
    if not ctx.prefill(t, label, n, lam, 0.0, False).meets_slo:
        return n
    lo, hi = 0, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ctx.prefill(t, label, mid, lam, 0.0, False).meets_slo:
            hi = mid
        else:
            lo = mid
    return hi


def cost_segments(inst: Instance, plan: Plan, ctx: Context | None = None) -> list[CostSegment]:
    """The fleet's $/h (and chips) split by what each slice is for: the normal peak's
    need within the SLOs (prefill: the fewest slices of the pool's shape whose TTFT meets
    the SLO at the region's own peak, by the evaluator; decode: at the knee operating
    point; replicas: at their SLO-limited rate), the headroom the plan's policy margins
    add (decode_knee_margin, utilisation_headroom, the warm pool's burst minimum), the
    failover reserve (the rest: held for the region-loss scenarios) and new pods; with a
    demand margin, the slices its (1 + margin) x the forecast needs beyond the forecast's
    own come apart as 'demand margin'. The segments add up to the plan's fleet cost."""
    ctx = ctx or Context(inst)
    o = inst.workload.output_tokens
    seg = {"prefill": 0.0, "decode": 0.0, "replicas": 0.0, "demand margin": 0.0, "headroom": 0.0, "failover reserve": 0.0, "new pods": 0.0}
    chips = dict.fromkeys(seg, 0)

    def add(name: str, n: int, price: float, per_slice: int) -> None:
        seg[name] += n * price
        chips[name] += n * per_slice

    for p in plan.pools:
        price = slice_price(inst, p.region, p.slice, ctx)
        lam = inst.regions[p.region].peak_rps * ctx.tiers[p.tier].tier_share  # the forecast
        lam_m = inst.sized_peak_rps(p.region) * ctx.tiers[p.tier].tier_share  # with the demand margin
        if p.role == "prefill":
            need = min(_min_prefill_slices(ctx, p.tier, p.slice, p.slices, lam), p.slices)
            need_m = max(min(_min_prefill_slices(ctx, p.tier, p.slice, p.slices, lam_m), p.slices), need) if lam_m > lam else need
            add("prefill", need, price, p.chips_per_slice)
            add("demand margin", need_m - need, price, p.chips_per_slice)
            add("failover reserve", p.slices - need_m, price, p.chips_per_slice)
        elif p.role == "decode":
            tps = lambda op: ctx.decode_op(p.tier, p.slice, op.batch_cap, op.draft_tokens).tokens_per_s if op else 0.0  # noqa: E731
            knee = tps(p.decode_failover or p.decode_normal)
            pol = tps(p.decode_normal)
            n_knee = min(math.ceil(lam * o / knee - 1e-9), p.slices) if knee > 0 else p.slices
            n_knee_m = min(max(math.ceil(lam_m * o / knee - 1e-9), n_knee), p.slices) if knee > 0 else p.slices
            n_pol = min(max(math.ceil(lam_m * o / pol - 1e-9), n_knee_m), p.slices) if pol > 0 else p.slices
            add("decode", n_knee, price, p.chips_per_slice)
            add("demand margin", n_knee_m - n_knee, price, p.chips_per_slice)
            add("headroom", n_pol - n_knee_m, price, p.chips_per_slice)
            add("failover reserve", p.slices - n_pol, price, p.chips_per_slice)
        else:
            r1 = _replica_max_rps(ctx, p.tier, p.slice, p.schedule, p.slices)
            n_slo = min(math.ceil(lam / r1 - 1e-9), p.slices) if r1 > 0 else p.slices
            n_slo_m = min(max(math.ceil(lam_m / r1 - 1e-9), n_slo), p.slices) if r1 > 0 else p.slices
            n_pol = min(max(math.ceil(lam_m / (r1 * inst.serving.utilisation_headroom) - 1e-9), n_slo_m), p.slices) if r1 > 0 else p.slices
            add("replicas", n_slo, price, p.chips_per_slice)
            add("demand margin", n_slo_m - n_slo, price, p.chips_per_slice)
            add("headroom", n_pol - n_slo_m, price, p.chips_per_slice)
            add("failover reserve", p.slices - n_pol, price, p.chips_per_slice)
    burst = inst.failover.warm_pool.min_slices_per_region
    for r in sorted(inst.regions):
        warm = sorted((slice_price(inst, r, w.slice, ctx), w.slices, w.chips // max(w.slices, 1)) for w in plan.warm_pool if w.region == r)
        left = burst
        for price, n, per in warm:
            k = min(n, left)
            left -= k
            add("headroom", k, price, per)
            add("failover reserve", n - k, price, per)
    seg["new pods"] = sum(f.pods_new * inst.chips[f.chip].new_pod_cost_per_hour_usd for f in plan.fleet)
    c = plan.cost
    mean_h, peak_h = c.mean_output_tokens_per_s * 3600, c.peak_output_tokens_per_s * 3600
    fill_h = (c.mean_output_tokens_per_s * 86400 + c.batch_infill_output_tokens_per_day) / 24
    text = {
        "prefill": "prefill slices each region's own normal peak needs within the TTFT SLO",
        "decode": "decode slices each region's own normal peak needs at the SLO knee operating point",
        "replicas": "replicas each region's own normal peak needs at their SLO-limited rate",
        "demand margin": "slices each region's normal peak needs beyond that at (1 + its demand margin) x the forecast: the reserve for forecast error",
        "headroom": "slices the normal peak needs beyond that under the plan's policy margins (decode below the knee margin, "
                    "replicas at the utilisation headroom), and the warm pool's burst minimum",
        "failover reserve": "slices and warm slices beyond the normal peak's need: held for the region-loss scenarios (N-1, cold caches)",
        "new pods": "amortised commitment of new pods",
    }
    out = []
    for name, v in seg.items():
        if v <= 1e-9 and name in ("replicas", "new pods", "prefill", "decode", "demand margin"):
            continue
        # withheld with the plan's: a cost over tokens the fleet does not serve would be understated
        per = lambda tok_h: None if c.per_1m_withheld else (r6(v / tok_h * 1e6) if tok_h > 0 else 0.0)  # noqa: E731
        out.append(CostSegment(name=name, explain=text[name], chips=chips[name], cost_per_hour_usd=r6(v), usd_per_1m_output_daily_mean=per(mean_h),
                               usd_per_1m_output_at_peak=per(peak_h), usd_per_1m_output_with_infill=per(fill_h)))
    return out


def build_report_data(inst: Instance, plan: Plan, progress: Callable[[str], None] | None = None) -> ReportData:
    """Every figure's numbers for ``plan`` (which must have been solved for ``inst``:
    the caller checks the hash, see :func:`fleetplan.cli.common.plan_and_instance`)."""
    say = progress or (lambda _m: None)
    ctx = Context(inst)
    say("memory map and decode curves")
    memory = _memory(inst, ctx, plan)
    decode = _decode_curves(inst, ctx, plan)
    say("TTFT against prefill utilisation")
    ttft = _ttft_curves(inst, ctx, plan)
    say("hourly load and capacity")
    hourly = _hourly(inst, ctx, plan)
    cascade, cnote = _cascade(inst, plan, say)
    say("cost breakdown")
    segs = cost_segments(inst, plan, ctx)
    say("margins against a step-time scale")

    margins = margin_curves(inst, plan)
    from fleetplan.sizing.extract import margin_note

    notes = [margin_note(inst)]
    if status_note(plan) is not None:
        notes.append(status_note(plan))
    if cascade and cnote:
        notes.append(cnote)  # a cascade with a loss left out (with none, the cascade section says why)
    for sc in plan.scenarios:
        if sc.unserved_rps > 0:
            notes.append(f"{sc.name}: {sc.unserved_rps:,.4g} requests/s are not served end to end (a request needs its prefill and its decode)")
    if plan.cost.per_1m_withheld:
        notes.append(f"$ per 1M tokens withheld: {plan.cost.per_1m_withheld}")
    withheld = sorted({(pl.role, pl.region, pl.tier, sc.name, pl.withheld) for sc in plan.scenarios for pl in sc.pools if pl.withheld})
    for role, r, t, name, why in withheld[:12]:
        notes.append(f"{role}[{r},{t}] in {name}: latencies withheld -- {why}")
    if len(withheld) > 12:
        notes.append(f"... and {len(withheld) - 12} more pools and scenarios with latencies withheld (the plan's scenarios[].pools[].withheld)")
    return ReportData(fleetplan_version=__version__, instance_name=inst.name, instance_hash=plan.instance_hash, description=inst.description,
                      serving_mode=serving_summary(inst, plan), replica_router=plan.router or inst.serving.router, plan_status=plan.status, cost=plan.cost.model_dump(mode="json"), memory=memory,
                      decode_curves=decode, ttft_curves=ttft, fleet=_fleet(plan), hourly=hourly, cascade=cascade, cascade_note=cnote,
                      cost_segments=segs, notes=notes, margin_curves=margins)
