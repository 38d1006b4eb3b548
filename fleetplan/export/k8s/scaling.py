"""Autoscaling objects of the Kubernetes export: a KEDA ScaledObject (keda.sh/v1alpha1,
prometheus and cron triggers) or an autoscaling/v2 HorizontalPodAutoscaler per group, on
the brief's section 5 leading signals against the controller document's thresholds.

Bounds. A pool's floor at hour h is the slices it needs then, in normal traffic or after
losing any region it absorbs (the plan's routing shares, the admission clamp applied,
nothing shed), at most its planned slices and at least one: the autoscaler can never scale
below what failover needs at that hour. minReplicaCount is the lowest hourly floor (the
trough's); KEDA cron triggers hold the higher floors of the other hours (UTC, the
instance's hourly_load clock). maxReplicaCount is what the pool runs in its sizing scenario
(planned slices plus the warm slices that join it). Needs come from the independent
evaluator (:mod:`fleetplan.results.evaluate`): prefill and colocated replicas the fewest
slices meeting the TTFT/TPOT SLOs at that load (M/G/c), decode the load over a slice's
tokens/s at the plan's operating point (the failover one after a loss).

A pool spread over several pods is several groups (one per pod); its floors and ceiling are
split over them in proportion to the placement by D'Hondt's divisor method, which never
gives a group less when the pool's total grows (so each group's floor stays within its
ceiling), and sums to the pool's.
"""

from __future__ import annotations

import math

from fleetplan.instance.schema import Instance
from fleetplan.export.k8s.common import LABEL, ExportOptions, Unit, meta
from fleetplan.export.k8s.engines import Engine, selector
from fleetplan.results.evaluate import Context
from fleetplan.export.controller import Thresholds
from fleetplan.results.plan import Plan, Pool

__all__ = ["pool_floors", "sizing_slices", "dhondt", "Bounds", "unit_bounds", "cron_windows", "scaled_object", "hpa", "unit_signals"]

POLLING_S = 15
COOLDOWN_S = 300
# a new slice takes 2-5 minutes to load weights and compile (the brief, section 5): scale in
# only after ten minutes below target, so a short dip does not throw warm state away
SCALE_DOWN_STABILISATION_S = 600


def _need(ctx: Context, pool: Pool, own: float, div: float, failover: bool) -> int:
    t, label, n_max = pool.tier, pool.slice, pool.slices
    if own + div <= 0:
        return 0
    if pool.role == "decode":
        op = (pool.decode_failover if failover else None) or pool.decode_normal
        if op is None or op.tokens_per_s_per_slice <= 0:
            return n_max
        return math.ceil((own + div) * ctx.inst.workload.output_tokens / op.tokens_per_s_per_slice - 1e-9)
    if pool.role == "prefill":
        ok = lambda n: ctx.prefill(t, label, n, own, div, failover).meets_slo  # noqa: E731
    else:
        ok = lambda n: ctx.replica(t, label, n, own, div, failover).meets_slo  # noqa: E731
    if not ok(n_max):
        return n_max
    lo, hi = 0, n_max  # ok(hi); not ok(lo) (no slices carry no load)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def pool_floors(inst: Instance, plan: Plan, ctx: Context, pool: Pool) -> list[int]:
    """The pool's 24 hourly floors (slices; hour 0..23 UTC), see the module docstring."""
    reg = inst.regions[pool.region]
    tm = ctx.tiers[pool.tier]
    routes = [rt for rt in plan.routing if rt.to == pool.region and rt.tier == pool.tier] if inst.failover.n_minus_1 else []
    cache: dict[tuple, int] = {}

    def need(own: float, div: float, failover: bool) -> int:
        key = (round(own, 9), round(div, 9), failover)
        if key not in cache:
            cache[key] = _need(ctx, pool, own, div, failover)
        return cache[key]

    out = []
    for h in range(24):
        own = reg.peak_rps * reg.hourly_load[h] * tm.tier_share
        n = need(own, 0.0, False)
        for rt in routes:
            lost = inst.regions[rt.lost]
            div = lost.peak_rps * lost.hourly_load[h] * tm.tier_share * rt.share * (1.0 - ctx.clamped_share[pool.tier])
            n = max(n, need(own, div, True))
        out.append(max(1, min(pool.slices, n)))
    return out


def sizing_slices(plan: Plan, pool: Pool) -> int:
    """Slices the pool runs in its sizing scenario: the most in service in any scenario
    (planned slices plus warm slices joined), at least the planned slices."""
    n = pool.slices
    for sc in plan.scenarios:
        for pl in sc.pools:
            if (pl.region, pl.tier, pl.role, pl.slice) == (pool.region, pool.tier, pool.role, pool.slice):
                n = max(n, pl.slices)
    return n


def dhondt(total: int, weights: list[int], keys: list[str]) -> list[int]:
    """``total`` seats over parties of ``weights`` by D'Hondt's divisor method (ties to the
    smaller key). House-monotone: a larger total never gives a party fewer seats."""
    import heapq

    rank = {k: i for i, k in enumerate(sorted(keys))}
    seats = [0] * len(weights)
    heap = [(-w, rank[k], j) for j, (w, k) in enumerate(zip(weights, keys)) if w > 0]
    heapq.heapify(heap)
    for _ in range(total if heap else 0):
        _, rk, j = heapq.heappop(heap)
        seats[j] += 1
        heapq.heappush(heap, (-weights[j] / (seats[j] + 1), rk, j))
    return seats


class Bounds:
    """One group's autoscaling bounds: ``floors`` (24 hourly floors, slices), ``min`` (the
    lowest), ``max`` (its share of the sizing-scenario slices)."""

    def __init__(self, floors: list[int], maximum: int):
        self.floors = floors
        self.min = min(floors)
        self.max = maximum


def unit_bounds(inst: Instance, plan: Plan, ctx: Context, units: list[Unit]) -> tuple[dict[str, Bounds], list[str]]:
    """Bounds of every serving group (by name) and notes on pools held at their planned size."""
    out: dict[str, Bounds] = {}
    notes: list[str] = []
    by_pool: dict[tuple, list[Unit]] = {}
    for u in units:
        if u.role != "warm":
            by_pool.setdefault(u.pool, []).append(u)
    for key, us in sorted(by_pool.items()):
        pool = next(p for p in plan.pools if (p.region, p.tier, p.role, p.slice) == key)
        same_role = [p for p in plan.pools if (p.region, p.tier, p.role) == key[:3]]
        if len(same_role) > 1:
            floors = [pool.slices] * 24  # two shapes share the tier's load: the evaluator has no split to size each alone
            notes.append(f"{pool.region}/{pool.tier} {pool.role}: {len(same_role)} slice shapes share the load; "
                         f"the {pool.slice} groups are held at their {pool.slices} planned slices")
        else:
            floors = pool_floors(inst, plan, ctx, pool)
        top = sizing_slices(plan, pool)
        w, keys = [u.slices for u in us], [u.name for u in us]
        maxes = dhondt(top, w, keys)
        per_hour = [dhondt(f, w, keys) for f in floors]
        for j, u in enumerate(us):
            out[u.name] = Bounds([max(1, min(maxes[j], ph[j])) for ph in per_hour], max(1, maxes[j]))
    return out, notes


def cron_windows(floors: list[int], base: int) -> list[tuple[int, int, int]]:
    """(start hour, end hour, replicas) windows where the floor is above ``base``; runs of
    equal floors merged, never across midnight (end 0 = midnight)."""
    out = []
    h = 0
    while h < 24:
        f = floors[h]
        if f <= base:
            h += 1
            continue
        e = h + 1
        while e < 24 and floors[e] == f:
            e += 1
        out.append((h, e % 24, f))
        h = e
    return out


def unit_signals(u: Unit, th: Thresholds | None, engine: Engine, ns: str, unit_name: str) -> list[tuple[str, str, str, float]]:
    """(trigger name, PromQL, KEDA metric type, threshold) of a group's leading signals:
    prefill queue-wait p95 (ms, Value) against the controller document's threshold;
    decode demand, requests running plus queued (count; AverageValue, so replicas =
    demand / the normal-hours batch cap, the plan's own sizing rule at its operating
    point: a slice at its batch cap carries what the plan sized it for) and the fullest
    slice's KV use against 1 - the KV headroom floor (Value).

    Why demand and not running requests alone: the engine admits at most
    ``--max-num-seqs`` (the failover batch cap) per slice, which equals the normal cap
    wherever both are clamped to the instance's largest batch cap (the bundled Gemini
    plan: 512 and 512), so running / slices can never exceed the target and the
    autoscaler could never scale up; queued requests are what a full batch turns extra
    demand into."""
    if th is None:
        return []
    sel = selector(namespace=ns, fleetplan_unit=unit_name)
    out = []
    if u.role == "prefill" and th.prefill_queue_wait_p95_ms is not None:
        out.append(("prefill-queue-wait-p95-ms", engine.queue_wait_p95_ms(sel, "fleetplan_unit"), "Value", th.prefill_queue_wait_p95_ms))
    if u.role == "decode" and th.decode_occupancy_knee is not None:
        out.append(("decode-demand", engine.decode_demand_total(sel, "fleetplan_unit"), "AverageValue", float(th.decode_occupancy_knee)))
    if u.role == "decode" and th.kv_headroom_floor is not None and th.kv_headroom_floor > 0:
        out.append(("decode-kv-usage-max", engine.kv_usage_max(sel, "fleetplan_unit"), "Value", round(1.0 - th.kv_headroom_floor, 6)))
    return out


def _num(x: float) -> str:
    return format(x, ".6g")


def _target(u_name: str, kind_ds: bool) -> dict:
    if kind_ds:
        return {"apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSetRoleScaler", "name": u_name}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": u_name}


def scaled_object(u: Unit, unit_name: str, b: Bounds, signals, opts: ExportOptions, tie, kind_ds: bool) -> dict | None:
    """The group's ScaledObject, or None without a leading signal: scaling on the hourly
    floors alone would shed capacity on the forecast with nothing to react to a busier hour,
    so such a group stays at its planned slices."""
    if not signals:
        return None
    triggers = [{"type": "prometheus", "name": n, "metricType": mt,
                 "metadata": {"serverAddress": opts.prometheus_url, "query": q, "threshold": _num(v)}} for n, q, mt, v in signals]
    for s, e, f in cron_windows(b.floors, b.min):
        triggers.append({"type": "cron", "name": f"floor-{s:02d}h-{(e or 24):02d}h",
                         "metadata": {"timezone": "Etc/UTC", "start": f"0 {s} * * *", "end": f"0 {e} * * *", "desiredReplicas": str(f)}})
    labels = {f"{LABEL}region": u.region, f"{LABEL}tier": u.tier, f"{LABEL}role": u.role, f"{LABEL}unit": unit_name}
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": meta(unit_name, opts.namespace, tie, labels,
                             {f"{LABEL}hourly-floors": ",".join(str(f) for f in b.floors)}),
            "spec": {"scaleTargetRef": _target(unit_name, kind_ds), "minReplicaCount": b.min, "maxReplicaCount": b.max,
                     "pollingInterval": POLLING_S, "cooldownPeriod": COOLDOWN_S,
                     "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": {
                         "stabilizationWindowSeconds": SCALE_DOWN_STABILISATION_S}}}},
                     "triggers": triggers}}


# HPA reads the signals as external metrics that prometheus-adapter serves from the
# per-group recording rules (fleetplan_unit:<signal>, see alerts.py); the adapter's rules
# are written beside the HPAs.
HPA_METRICS = {"prefill-queue-wait-p95-ms": "prefill_queue_wait_p95_ms", "decode-demand": "decode_demand",
               "decode-kv-usage-max": "decode_kv_usage_max"}


def hpa(u: Unit, unit_name: str, b: Bounds, signals, opts: ExportOptions, tie, kind_ds: bool) -> dict | None:
    """The group's autoscaling/v2 HorizontalPodAutoscaler (no hourly floors: an HPA has no
    schedule, so minReplicas is the trough's floor), or None without a signal."""
    if not signals:
        return None
    metrics = []
    for n, _q, mt, v in signals:
        target = {"type": "AverageValue", "averageValue": _num(v)} if mt == "AverageValue" else {"type": "Value", "value": _num(v)}
        metrics.append({"type": "External", "external": {
            "metric": {"name": f"fleetplan_unit_{HPA_METRICS[n]}", "selector": {"matchLabels": {"fleetplan_unit": unit_name}}},
            "target": target}})
    labels = {f"{LABEL}region": u.region, f"{LABEL}tier": u.tier, f"{LABEL}role": u.role, f"{LABEL}unit": unit_name}
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": meta(unit_name, opts.namespace, tie, labels, {f"{LABEL}hourly-floors": ",".join(str(f) for f in b.floors)}),
            "spec": {"scaleTargetRef": _target(unit_name, kind_ds), "minReplicas": b.min, "maxReplicas": b.max, "metrics": metrics,
                     "behavior": {"scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_STABILISATION_S}}}}


def adapter_rules() -> dict:
    """prometheus-adapter ``externalRules`` serving the per-group recording rules as the
    HPAs' external metrics (``fleetplan_unit:x`` -> ``fleetplan_unit_x``)."""
    return {"externalRules": [{
        "seriesQuery": f'fleetplan_unit:{m}{{namespace!="",fleetplan_unit!=""}}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}}},
        "name": {"matches": f"^fleetplan_unit:{m}$", "as": f"fleetplan_unit_{m}"},
        "metricsQuery": "max by (fleetplan_unit) (<<.Series>>{<<.LabelMatchers>>})",
    } for m in sorted(HPA_METRICS.values())]}
