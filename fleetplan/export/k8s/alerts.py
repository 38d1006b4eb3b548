"""The Prometheus rule file of one region: recording rules for the brief's section 5
signals (per region-tier for paging, per group for the autoscalers) and an alerting rule
for each threshold of the controller document, with ``for:`` durations and annotations
that quote the plan's numbers and the action the brief's table names.

The pager fires when the autoscaler's action did not work (the brief, section 6): the
autoscalers act within a minute and a new slice is warm in 2-5 minutes, so the capacity
alerts wait ten minutes; KV headroom waits five (preemption wastes finished prefills at
once); the slow drifts (DCN share, prefix hit rate, acceptance) wait long enough not to
page on a burst. Severity ``page`` for capacity, ``ticket`` for drifts.
"""

from __future__ import annotations

from fleetplan.export.k8s.common import ExportOptions
from fleetplan.export.k8s.engines import KV_TRANSFERS_METRIC, SIGNAL_WINDOW, Engine, selector
from fleetplan.export.controller import ControllerRegion

__all__ = ["FOR", "DCN_SHARE_TOLERANCE", "dcn_alert_threshold", "rule_file", "warm_unit_regex"]

# How far above the placement's planned DCN share a tier placed over the ceiling may run
# before FleetplanKVOverDCN fires (fraction of requests, absolute): the brief's own 5-point
# DCN budget, taken as the allowance for a router that does not follow the planned pairing
# exactly (no llm-d plugin pairs prefill and decode by ICI domain, see routing.py).
DCN_SHARE_TOLERANCE = 0.05

BY_TIER = "namespace, fleetplan_region, fleetplan_tier"
BY_UNIT = "namespace, fleetplan_region, fleetplan_tier, fleetplan_unit"

# alert -> (for, severity)
FOR = {
    "FleetplanPrefillQueueWaitHigh": ("10m", "page"),
    "FleetplanDecodeOccupancyOverKnee": ("10m", "page"),
    "FleetplanKVHeadroomLow": ("5m", "page"),
    "FleetplanKVOverDCN": ("30m", "ticket"),
    "FleetplanKVPathSignalMissing": ("1h", "ticket"),
    "FleetplanPrefixHitRateDrift": ("30m", "ticket"),
    "FleetplanSpeculationAcceptanceLow": ("15m", "ticket"),
    "FleetplanWarmPoolShallow": ("15m", "ticket"),
}


def warm_unit_regex(names: list[str]) -> str:
    return "|".join(sorted(names))


def dcn_alert_threshold(planned: float, ceiling: float) -> float:
    """The DCN-share alert threshold of a tier (fraction of requests whose KV crosses the
    DCN): the brief's ``ceiling`` where the placement keeps the tier within it (the alert
    then means the pairing drifted past policy, and re-placing restores it); where the
    placement's ``planned`` share (``Placement.dcn_share_by_tier``) is already above it, a
    sizing choice no rebalancing clears, ``planned`` + :data:`DCN_SHARE_TOLERANCE` (at most
    1): the alert then means worse than planned, not a ticket from day one."""
    if planned <= ceiling:
        return ceiling
    return round(min(1.0, planned + DCN_SHARE_TOLERANCE), 6)


def _alert(name: str, expr: str, labels: dict, summary: str, description: str, action: str, plan_hash: str) -> dict:
    f, sev = FOR[name]
    return {"alert": name, "expr": expr, "for": f, "labels": {"severity": sev, **labels},
            "annotations": {"summary": summary, "description": description, "action": action, "plan_hash": plan_hash}}


def rule_file(region: ControllerRegion, tiers: dict[str, set[str]], spec_tiers: set[str], warm_units: list[str], opts: ExportOptions,
              engine: Engine, plan_hash: str, ttft_limit_ms: dict[str, float], planned_dcn: dict[str, float]) -> dict:
    """The rule file (``groups:``) of one region.

    Args: region: the controller document's region (thresholds, warm-pool depth); tiers:
    tier -> roles present ({"prefill", "decode"} or {"replica"}); spec_tiers: tiers whose
    decode (or replica) pool speculates; warm_units: names of the region's warm groups
    (their leader StatefulSets); ttft_limit_ms: tier -> the TTFT SLO (ms) the queue-wait
    threshold is a share of; planned_dcn: tier -> the placement's share of requests whose
    KV crosses the DCN (fraction; :func:`dcn_alert_threshold`)."""
    ns, r = opts.namespace, region.region
    rec: list[dict] = []
    alerts: list[dict] = []
    base = {"namespace": ns, "fleetplan_region": r}
    if any("prefill" in v for v in tiers.values()):
        s = selector(**base, fleetplan_role="prefill")
        rec += [{"record": "fleetplan:prefill_queue_wait_p95_ms", "expr": engine.queue_wait_p95_ms(s, BY_TIER)},
                {"record": "fleetplan_unit:prefill_queue_wait_p95_ms", "expr": engine.queue_wait_p95_ms(s, BY_UNIT)}]
    if any("decode" in v for v in tiers.values()):
        s = selector(**base, fleetplan_role="decode")
        rec += [{"record": "fleetplan:decode_occupancy_per_slice", "expr": engine.residents_per_slice(s, BY_TIER)},
                {"record": "fleetplan:decode_demand_per_slice", "expr": engine.decode_demand_per_slice(s, BY_TIER)},
                {"record": "fleetplan:decode_kv_headroom_min", "expr": engine.kv_headroom_min(s, BY_TIER)},
                {"record": "fleetplan_unit:decode_demand", "expr": engine.decode_demand_total(s, BY_UNIT)},
                {"record": "fleetplan_unit:decode_kv_usage_max", "expr": engine.kv_usage_max(s, BY_UNIT)}]
        k = selector(**base)
        rec.append({"record": "fleetplan:kv_dcn_share",
                    "expr": f'sum by ({BY_TIER}) (rate({KV_TRANSFERS_METRIC}{selector(**base, path="dcn")}[{SIGNAL_WINDOW}])) / '
                            f"sum by ({BY_TIER}) (rate({KV_TRANSFERS_METRIC}{k}[{SIGNAL_WINDOW}]))"})
    rec.append({"record": "fleetplan:prefix_hit_rate", "expr": engine.prefix_hit_rate(selector(**base, fleetplan_role="~prefill|replica"), BY_TIER)})
    if spec_tiers:
        rec.append({"record": "fleetplan:spec_acceptance_rate",
                    "expr": engine.acceptance_rate(selector(**base, fleetplan_role="~decode|replica"), BY_TIER)})
    if region.warm_pool_depth > 0:
        # a warm group's leader StatefulSet is named after the group (kube-state-metrics);
        # no series (kube-state-metrics missing) counts as none ready
        rec.append({"record": "fleetplan:warm_slices_ready", "labels": {"namespace": ns, "fleetplan_region": r},
                    "expr": f"sum(kube_statefulset_status_replicas_ready{selector(namespace=ns, statefulset='~' + warm_unit_regex(warm_units))}) "
                            "or vector(0)"})

    for th in region.thresholds:
        t = th.tier
        if t not in tiers:
            continue
        at = selector(**base, fleetplan_tier=t)
        lab = {"fleetplan_region": r, "fleetplan_tier": t}
        where = f"{r}/{t}"
        if th.prefill_queue_wait_p95_ms is not None:
            v = th.prefill_queue_wait_p95_ms
            alerts.append(_alert(
                "FleetplanPrefillQueueWaitHigh", f"fleetplan:prefill_queue_wait_p95_ms{at} > {v:g}", lab,
                f"{where}: prefill queue-wait p95 above the plan's {v:g} ms",
                f"Prefill queue-wait p95 is {{{{ $value | printf \"%.0f\" }}}} ms in {where}; the plan's threshold is {v:g} ms "
                f"({th.prefill_queue_wait_share_of_ttft:.0%} of the {ttft_limit_ms.get(t, 0):g} ms TTFT SLO), the wait at which the pool's "
                "TTFT percentile reaches its SLO: queue wait leads the TTFT breach by minutes.",
                "Scale prefill up and pull slices from the warm pool; if the autoscaler is at maxReplicaCount, the pool is past its "
                "sizing scenario: check for a region loss and the prefix hit rate.", plan_hash))
        if th.decode_occupancy_knee is not None:
            v = th.decode_occupancy_knee
            alerts.append(_alert(
                "FleetplanDecodeOccupancyOverKnee", f"fleetplan:decode_demand_per_slice{at} > {v}", lab,
                f"{where}: decode demand above the plan's {v} residents per slice",
                f"Decode slices in {where} are asked for {{{{ $value | printf \"%.0f\" }}}} requests each on average, running plus "
                f"queued; the plan runs them at most {v} in normal hours (the SLO knee less the instance's margin, at most the largest "
                "batch cap). Past the engine's --max-num-seqs requests queue for a seat: TTFT and TPOT are about to breach.",
                "Scale decode up and stop admitting to slices over the knee; a region loss may ride to the knee itself "
                "(the controller document's batch_cap_failover).", plan_hash))
        if th.kv_headroom_floor is not None:
            v = th.kv_headroom_floor
            alerts.append(_alert(
                "FleetplanKVHeadroomLow", f"fleetplan:decode_kv_headroom_min{at} < {v:g}", lab,
                f"{where}: KV headroom under the plan's {v:.0%}",
                f"The fullest decode slice in {where} has {{{{ $value | humanizePercentage }}}} of its KV pages free; the plan keeps "
                f"{v:.0%} free at its occupancy threshold: OOM-driven preemption wastes finished prefills.",
                "Shed the batch class, offload idle turns to host memory, scale decode up.", plan_hash))
        if "decode" in tiers[t]:
            c, planned = th.dcn_share_ceiling, planned_dcn.get(t, 0.0)
            v = dcn_alert_threshold(planned, c)
            if v == c:
                why = (f"the ceiling is {c:.0%} (the brief, section 5); the placement planned {planned:.1%} (the shares in the endpoint "
                       "picker's ConfigMap).")
                act = "Rebalance prefill/decode pairing within ICI domains (re-place with `fleetplan place --current`); chips look idle, not hot."
            else:
                why = (f"the placement planned {planned:.1%}, above the brief's {c:.0%} ceiling (a sizing choice: the tier's prefill and "
                       f"decode slices do not fit one ICI domain each), so this alert fires {DCN_SHARE_TOLERANCE * 100:g} points above "
                       "the plan: the router pairs worse than the placement's weights (the endpoint picker's ConfigMap).")
                act = ("Bring the pairing back to the planned weights (kv_routing_weights in the picker's ConfigMap); re-placing cannot reach "
                       f"{c:.0%} with this plan: re-size with placement-aware sizing to get there.")
            alerts.append(_alert(
                "FleetplanKVOverDCN", f"fleetplan:kv_dcn_share{at} > {v:g}", lab,
                f"{where}: more than {v:.0%} of requests move their KV over the DCN" + ("" if v == c else f" (planned {planned:.1%})"),
                f"{{{{ $value | humanizePercentage }}}} of {where}'s requests move their KV between ICI domains over the DCN; " + why,
                act, plan_hash))
        v, band = th.prefix_hit_rate_baseline, th.prefix_hit_rate_band
        alerts.append(_alert(
            "FleetplanPrefixHitRateDrift", f"abs(fleetplan:prefix_hit_rate{at} - {v:g}) > {band:g}", lab,
            f"{where}: prefix-cache hit rate drifted more than {band * 100:g} points off the plan's {v:.0%}",
            f"The prefix-cache hit rate in {where} is {{{{ $value | humanizePercentage }}}} off the plan's {v:.0%} baseline "
            f"(band {band * 100:g} points): a cache regression masquerades as organic prefill load.",
            "Re-examine routing keys and eviction; re-plan with the measured hit rate (`fleetplan sensitivity`).", plan_hash))
        if t in spec_tiers:
            v = th.speculation_alpha_threshold
            alerts.append(_alert(
                "FleetplanSpeculationAcceptanceLow", f"fleetplan:spec_acceptance_rate{at} < {v:g}", lab,
                f"{where}: speculation acceptance under the plan's switch threshold {v:g}",
                f"Draft tokens accepted in {where}: {{{{ $value | printf \"%.2f\" }}}} of those proposed; below {v:g} speculation "
                "spends slots on rejected drafts (utilisation rises while goodput falls).",
                "Disable speculation on the affected traffic slice; check for a model or traffic-mix change.", plan_hash))
    if any("decode" in v for v in tiers.values()):
        alerts.append(_alert(
            "FleetplanKVPathSignalMissing", f"absent({KV_TRANSFERS_METRIC}{selector(**base)})", {"fleetplan_region": r},
            f"{r}: no KV-transfer path counter, so the DCN-share alert cannot fire",
            f"{KV_TRANSFERS_METRIC} (KV transfers by path=ici|dcn) has no series in {r}: no serving engine or router metric "
            "names a transfer's (prefill, decode) pair, so the routing layer must count it (docs/controller.md).",
            "Export the counter from the routing layer, or watch the DCN share another way.", plan_hash))
    if region.warm_pool_depth > 0:
        v = region.warm_pool_depth
        alerts.append(_alert(
            "FleetplanWarmPoolShallow", f"fleetplan:warm_slices_ready{selector(**base)} < {v}", {"fleetplan_region": r},
            f"{r}: fewer than the plan's {v} warm slices ready",
            f"{{{{ $value }}}} warm slices are ready in {r}; the plan keeps {v} weight-loaded, traffic-less slices for bursts and "
            "failover, sized with the rest of the fleet.",
            "Pre-warm more slices (a cold start takes 2-5 minutes); return promoted warm slices after the event.", plan_hash))
    return {"groups": [{"name": f"fleetplan-{r}-signals", "interval": "30s", "rules": rec},
                       {"name": f"fleetplan-{r}-alerts", "interval": "30s", "rules": alerts}]}
