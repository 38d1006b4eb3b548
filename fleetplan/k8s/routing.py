"""Routing objects of the Kubernetes export: per region x tier an InferencePool
(inference.networking.k8s.io/v1, Gateway API Inference Extension) selecting that tier's
serving pods, the Service its endpoint picker (EPP) answers on, and a ConfigMap with the
EPP configuration (llm-d inference scheduler v0.7.0 plugin names) and the placement's
routing data.

Which field maps to which llm-d plugin is tabulated in docs/controller.md. The
placement's prefill -> decode routing weights (at the normal peak, and for a placement of
a plan sized with its pods in every region loss the region survives) and the plan's
failover routing have no
llm-d plugin that consumes them (v0.7.0): they are written as data (``fleetplan-routing.yaml``)
for the gateway's cross-region weights and for a locality filter, and the DCN-share alert
checks what the router actually does against them.
"""

from __future__ import annotations

import yaml

from fleetplan.k8s.common import LABEL, ExportOptions, dns_name, label_value, meta
from fleetplan.k8s.engines import Engine
from fleetplan.results.export import ControllerRegion
from fleetplan.results.placement import Placement
from fleetplan.results.plan import Plan

__all__ = ["EPP_PORT", "EPP_METRICS_PORT", "pool_name", "inference_pool", "epp_service", "epp_config", "epp_configmap", "replica_routing_assumption",
           "routing_data", "loss_routing"]

SHARE_DIGITS = 9  # routing shares are stored to 9 decimal places (fleetplan.placement)
EPP_PORT = 9002  # ext-proc gRPC port of the GIE / llm-d endpoint picker
EPP_METRICS_PORT = 9090
EPP_CONFIG_API = "inference.networking.x-k8s.io/v1alpha1"  # EndpointPickerConfig of llm-d inference scheduler v0.7.0
LWS_LEADER = ("leaderworkerset.sigs.k8s.io/worker-index", "0")  # LWS labels a group's leader pod so


def pool_name(region: str, tier: str) -> str:
    """The InferencePool's name (its picker's Service and ConfigMap add '-epp')."""
    return dns_name(region, tier)


def inference_pool(region: str, tier: str, opts: ExportOptions, engine: Engine, tie) -> dict:
    """The tier's InferencePool: the serving pods of the region-tier (warm pods excluded by
    ``fleetplan/traffic: "on"``; only a group's leader, worker index 0, runs the engine's
    API server on a multi-host slice), the engine's port, and the EPP Service."""
    name = pool_name(region, tier)
    return {
        "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": meta(name, opts.namespace, tie, {f"{LABEL}region": region, f"{LABEL}tier": tier}),
        "spec": {
            "selector": {"matchLabels": {f"{LABEL}region": region, f"{LABEL}tier": tier, f"{LABEL}traffic": "on",
                                         LWS_LEADER[0]: LWS_LEADER[1]}},
            "targetPorts": [{"number": engine.port}],
            "endpointPickerRef": {"kind": "Service", "name": f"{name}-epp", "port": {"number": EPP_PORT}, "failureMode": "FailClose"},
        },
    }


def epp_service(region: str, tier: str, opts: ExportOptions, tie) -> dict:
    """The Service the InferencePool's endpointPickerRef names; it selects the EPP pods
    labelled ``app.kubernetes.io/name: <pool>-epp`` (the EPP Deployment is the user's)."""
    name = f"{pool_name(region, tier)}-epp"
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": meta(name, opts.namespace, tie, {f"{LABEL}region": region, f"{LABEL}tier": tier}),
        "spec": {"type": "ClusterIP", "selector": {"app.kubernetes.io/name": name},
                 "ports": [{"name": "grpc-ext-proc", "port": EPP_PORT, "targetPort": EPP_PORT, "protocol": "TCP", "appProtocol": "http2"},
                           {"name": "http-metrics", "port": EPP_METRICS_PORT, "targetPort": EPP_METRICS_PORT, "protocol": "TCP"}]},
    }


def epp_config(disaggregated: bool) -> dict:
    """The EndpointPickerConfig. Disaggregated: decode first (decode-filter, KV-cache
    utilisation and queue scorers), then prefill for every request with an uncached token
    (prefix-based-pd-decider, nonCachedTokens 1: the plan prefills every request on the
    prefill pool) with prefix-cache-aware scoring (prefill-filter, prefix-cache-scorer,
    queue-scorer); prefill-header-handler tells the decode side which prefill pod to pull
    from. Colocated replicas: one profile with prefix-cache, queue and KV scorers."""
    common = [{"type": "prefix-cache-scorer"}, {"type": "queue-scorer"}, {"type": "kv-cache-utilization-scorer"},
              {"type": "max-score-picker"}]
    if not disaggregated:
        return {"apiVersion": EPP_CONFIG_API, "kind": "EndpointPickerConfig",
                "plugins": [{"type": "decode-filter"}, *common, {"type": "single-profile-handler"}],
                "schedulingProfiles": [{"name": "default", "plugins": [
                    {"pluginRef": "decode-filter"}, {"pluginRef": "prefix-cache-scorer", "weight": 2},
                    {"pluginRef": "queue-scorer", "weight": 1}, {"pluginRef": "kv-cache-utilization-scorer", "weight": 1},
                    {"pluginRef": "max-score-picker"}]}]}
    return {"apiVersion": EPP_CONFIG_API, "kind": "EndpointPickerConfig",
            "plugins": [{"type": "prefill-header-handler"}, {"type": "prefill-filter"}, {"type": "decode-filter"}, *common,
                        {"type": "prefix-based-pd-decider", "parameters": {"nonCachedTokens": 1}},
                        {"type": "pd-profile-handler", "parameters": {"deciderPluginName": "prefix-based-pd-decider"}}],
            "schedulingProfiles": [
                {"name": "prefill", "plugins": [{"pluginRef": "prefill-filter"}, {"pluginRef": "prefix-cache-scorer", "weight": 2},
                                                {"pluginRef": "queue-scorer", "weight": 1}, {"pluginRef": "max-score-picker"}]},
                {"name": "decode", "plugins": [{"pluginRef": "decode-filter"}, {"pluginRef": "kv-cache-utilization-scorer", "weight": 1},
                                               {"pluginRef": "queue-scorer", "weight": 1}, {"pluginRef": "max-score-picker"}]}]}


def loss_routing(region: str, tier: str, pl: Placement) -> dict[str, dict]:
    """The placement's routing of ``region`` x ``tier`` in every region loss it survives
    (a schema-version-2 placement; {} for version 1), keyed by the plan's scenario name
    ('lose:REGION@HH'). Each entry: ``lost_region``, ``hour_utc``; ``warm_joins``, the
    warm slices that join the tier's pools there, per ICI domain, role and shape
    (``{"ici_domain": label value, "role", "shape", "slices": count}``); ``weights``, rows
    as ``kv_routing_weights`` (from/to ICI-domain label values, ``share`` of the from
    domain's prefill requests, rounded to SHARE_DIGITS) with ``rps_in_scenario`` (req/s in
    that scenario); ``dcn_share``, the share of the tier's requests whose KV crosses the
    DCN then (fraction, rounded likewise; null where the tier prefills nothing).
    Scenarios where the tier has neither routing nor warm joins are left out."""
    shape = {s.id: s.slice for s in pl.slices}
    out: dict[str, dict] = {}
    for sc in pl.scenarios or []:
        if sc.kind != "loss" or sc.lost_region == region:
            continue
        weights = [{"from": label_value(w.from_pod), "to": label_value(w.to_pod), "share": round(w.share, SHARE_DIGITS), "rps_in_scenario": w.rps}
                   for w in sc.routing if w.region == region and w.tier == tier]
        joins: dict[tuple[str, str, str], int] = {}
        for w in sc.warm:
            if (w.region, w.tier) == (region, tier):
                key = (label_value(w.pod), w.role, shape.get(w.slice_id, ""))
                joins[key] = joins.get(key, 0) + 1
        row = next((x for x in sc.tiers if (x.region, x.tier) == (region, tier)), None)
        if not weights and not joins and row is None:
            continue
        out[sc.scenario] = {"lost_region": sc.lost_region, "hour_utc": sc.hour,
                            "warm_joins": [{"ici_domain": d, "role": ro, "shape": sh, "slices": n} for (d, ro, sh), n in sorted(joins.items())],
                            "weights": weights, "dcn_share": round(row.dcn_share, SHARE_DIGITS) if row is not None else None}
    return out


def routing_data(region: str, tier: str, pl: Placement, doc_region: ControllerRegion, plan: Plan, opts: ExportOptions) -> dict:
    """The placement's routing for one region-tier, in ICI-domain label values: the share
    of each prefill domain's requests whose KV goes to each decode domain at the normal
    peak (``kv_routing_weights``), and the plan's N-1 failover shares (of each lost
    region's tier traffic: this region's, and every absorber's). A schema-version-2
    placement adds ``kv_routing_weights_on_loss``: its routing in every region loss this
    region survives (:func:`loss_routing`); a version-1 placement's data is as before."""
    # shares as the placement rounds them (9 digits; its normalisation to a sum of 1 can leave float noise: 0.2760600400000001)
    weights = [{"from": label_value(w.from_pod), "to": label_value(w.to_pod), "share": round(w.share, SHARE_DIGITS), "rps_at_normal_peak": w.rps}
               for w in pl.routing if w.region == region and w.tier == tier]
    absorbs = {lost: next((f.share for f in shares if f.tier == tier), 0.0) for lost, shares in sorted(doc_region.failover.items())}
    everyone = {}
    for rt in sorted(plan.routing, key=lambda x: (x.lost, x.to)):
        if rt.tier == tier:
            everyone.setdefault(rt.lost, {})[rt.to] = round(rt.share, SHARE_DIGITS)
    out = {"region": region, "tier": tier, "ici_domain_label": opts.ici_domain_label,
           "kv_routing_weights": weights,
           "failover_share_this_region_absorbs": {k: round(v, SHARE_DIGITS) for k, v in absorbs.items() if v > 0},
           "failover_routing": everyone}
    if pl.scenarios is not None:
        out["kv_routing_weights_on_loss"] = loss_routing(region, tier, pl)
    return out


def replica_routing_assumption(inst, plan: Plan, region: str, tier: str) -> dict:
    """What the plan's colocated replica pool of ``region`` x ``tier`` assumes of the router
    (``serving.replica_router``) and the engine schedule it was sized under, for the EPP's
    ConfigMap: 'least-work' is one FCFS prompt queue over the pool (M/G/c: the picker sends
    each request to the replica that can start its prefill first -- the queue-scorer is the
    closest of the picker's scorers, and prefix-cache affinity that overrides it moves TTFT
    off the plan), 'random' an M/G/1 per replica."""
    sched = next((p.schedule for p in plan.pools if (p.region, p.tier, p.role) == (region, tier, "replica")), None)
    router = inst.serving.replica_router
    why = ("TTFT was sized as one FCFS prompt queue over the pool's replicas (M/G/c): route each request to the replica that can "
           "start its prefill first (least queued prefill work; the queue-scorer); prefix-cache affinity that overrides it "
           "lengthens the queue wait the plan counts" if router == "least-work" else
           "TTFT was sized as an M/G/1 prompt queue per replica (requests spread at random): any balancing router does no worse")
    return {"replica_router": router, "replica_schedule": sched, "router_assumption": why}


def epp_configmap(region: str, tier: str, disaggregated: bool, data: dict, opts: ExportOptions, tie) -> dict:
    """The ConfigMap the EPP mounts (``--config-file`` = its ``epp-config.yaml``), with the
    routing data beside it."""
    name = f"{pool_name(region, tier)}-epp"
    dump = lambda d: yaml.safe_dump(d, sort_keys=True, default_flow_style=False, width=1_000_000)  # noqa: E731
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": meta(name, opts.namespace, tie, {f"{LABEL}region": region, f"{LABEL}tier": tier}),
            "data": {"epp-config.yaml": dump(epp_config(disaggregated)), "fleetplan-routing.yaml": dump(data)}}
