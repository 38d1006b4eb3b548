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

from fleetplan.export.k8s.common import LABEL, ExportOptions, dns_name, label_value, meta
from fleetplan.export.k8s.engines import Engine
from fleetplan.export.controller import ControllerRegion
from fleetplan.results.placement import Placement
from fleetplan.results.plan import Plan

__all__ = ["EPP_PORT", "EPP_METRICS_PORT", "EPP_PICKS", "pool_name", "inference_pool", "epp_service", "epp_config", "epp_configmap",
           "router_assumption", "epp_note", "routing_data", "loss_routing"]

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


#: The picker each router is written as (the Gateway API inference extension registers
#: ``max-score-picker``, ``random-picker`` and ``weighted-random-picker``: no round robin).
EPP_PICKS = {"least-work": "least-work", "round-robin": "least-work", "random": "random", "prefix-aware": "prefix-aware"}


def _scoring(router: str, colocated: bool) -> list[dict]:
    """The scorers and picker of the profile that picks a replica (``colocated``) or a
    prefill slice under ``router`` (its :data:`EPP_PICKS` form): least-work, load first
    (``queue-scorer`` 2; colocated also ``kv-cache-utilization-scorer`` 1, the residents'
    KV) with prefix hits a tie-break (``prefix-cache-scorer`` 1); prefix-aware, llm-d's
    default weights (prefix 2, queue 1, KV 1); random, ``random-picker`` (the scores it
    ignores; the prefill profile keeps ``prefix-cache-scorer``, which ``pd-profile-handler``
    needs in both profiles)."""
    pick = EPP_PICKS[router]
    kv = [{"pluginRef": "kv-cache-utilization-scorer", "weight": 1}] if colocated else []
    if pick == "random":
        return ([] if colocated else [{"pluginRef": "prefix-cache-scorer", "weight": 1}]) + [{"pluginRef": "random-picker"}]
    if pick == "prefix-aware":
        return [{"pluginRef": "prefix-cache-scorer", "weight": 2}, {"pluginRef": "queue-scorer", "weight": 1}, *kv,
                {"pluginRef": "max-score-picker"}]
    return [{"pluginRef": "queue-scorer", "weight": 2}, *kv, {"pluginRef": "prefix-cache-scorer", "weight": 1},
            {"pluginRef": "max-score-picker"}]


def epp_config(disaggregated: bool, router: str = "least-work") -> dict:
    """The EndpointPickerConfig for a pool sized for ``router`` (``serving.router``; the
    picker :func:`_scoring` writes for it). Disaggregated: decode first (decode-filter, KV-cache
    utilisation and queue scorers, and the prefix-cache scorer that ``pd-profile-handler``
    needs in both profiles -- llm-d's docs), then prefill for every request with an
    uncached token (prefix-based-pd-decider, nonCachedTokens 1: the plan prefills every
    request on the prefill pool) with the router's scoring; prefill-header-handler tells
    the decode side which prefill pod to pull from. Colocated replicas: one profile with
    the router's scoring. Round robin has no picker in the endpoint picker: it is written
    as least-work, which queues no more (:data:`EPP_PICKS`; the export's notes say so).
    Every plugin a profile references is declared once, in order of first reference."""
    if not disaggregated:
        profiles = [{"name": "default", "plugins": [{"pluginRef": "decode-filter"}, *_scoring(router, True)]}]
        handlers = [{"type": "single-profile-handler"}]
    else:
        profiles = [{"name": "prefill", "plugins": [{"pluginRef": "prefill-filter"}, *_scoring(router, False)]},
                    {"name": "decode", "plugins": [{"pluginRef": "decode-filter"}, {"pluginRef": "kv-cache-utilization-scorer", "weight": 1},
                                                   {"pluginRef": "queue-scorer", "weight": 1}, {"pluginRef": "prefix-cache-scorer", "weight": 1},
                                                   {"pluginRef": "max-score-picker"}]}]
        handlers = [{"type": "prefix-based-pd-decider", "parameters": {"nonCachedTokens": 1}},
                    {"type": "pd-profile-handler", "parameters": {"deciderPluginName": "prefix-based-pd-decider"}}]
    refs = list(dict.fromkeys(x["pluginRef"] for prof in profiles for x in prof["plugins"]))
    head = [{"type": "prefill-header-handler"}] if disaggregated else []
    return {"apiVersion": EPP_CONFIG_API, "kind": "EndpointPickerConfig",
            "plugins": head + [{"type": x} for x in refs] + handlers, "schedulingProfiles": profiles}


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


#: Why each router's plan holds (or not) under the picker the export configures: the ConfigMap's ``router_assumption``.
ROUTER_ASSUMPTIONS = {
    "least-work": ("TTFT was sized as one FCFS prompt queue over the pool's replicas or prefill slices (G/G/c): route each request "
                   "to the one that can start its prefill first; the picker weights queue-scorer (waiting requests) above the KV and "
                   "prefix scorers -- it counts requests, not their prefill work, so with mixed prompt lengths it balances more "
                   "coarsely than the plan assumes, and prefix affinity that overrides the queue lengthens the wait the plan counts"),
    "round-robin": ("TTFT was sized as a G/G/1 prompt queue per replica or prefill slice fed every c-th request (C_a^2 / c); the "
                    "endpoint picker has no round-robin picker, so the pool is configured with the least-work scorers, which "
                    "queue no more than round robin: the plan holds with margin (a plain Service in IPVS mode, scheduler rr, "
                    "is the round robin the plan names)"),
    "random": ("TTFT was sized as an M/G/1 (G/G/1) prompt queue per replica or prefill slice at a random split: random-picker "
               "is that split, and any balancing picker does no worse"),
    "prefix-aware": ("TTFT was sized as under a random split (G/G/1 per replica or prefill slice: prefix affinity ignores load) at "
                     "the tier's prefix hit rate: the picker is llm-d's default prefix-cache 2, queue 1, KV 1; a hot prefix that "
                     "the queue-scorer cannot outweigh can queue more than the plan counts, so watch the queue-wait p95"),
}


def router_assumption(inst, plan: Plan, region: str, tier: str) -> dict:
    """What the plan's replica or prefill pool of ``region`` x ``tier`` assumes of the
    router, for the EPP's ConfigMap: ``router`` (the plan's, ``serving.router``),
    ``epp_picker`` (the form the picker is written in, :data:`EPP_PICKS`),
    ``router_assumption`` (why the plan holds under it) and, for colocated replicas,
    ``replica_schedule`` (the engine schedule it was sized under)."""
    router = plan.router or inst.serving.router
    out = {"router": router, "epp_picker": EPP_PICKS[router], "router_assumption": ROUTER_ASSUMPTIONS[router]}
    sched = next((p.schedule for p in plan.pools if (p.region, p.tier, p.role) == (region, tier, "replica")), None)
    if sched is not None:
        out["replica_schedule"] = sched
    return out


def epp_note(router: str) -> str | None:
    """The export's note where the endpoint picker cannot express ``router`` (None where it can)."""
    if EPP_PICKS[router] == router:
        return None
    return (f"the plan was sized for {router} routing (serving.router), which the endpoint picker cannot express: the Gateway API "
            "inference extension and llm-d register max-score-picker, random-picker and weighted-random-picker, no round robin; "
            "each EndpointPickerConfig is written with the least-work scorers (queue-scorer first), which queue no more than "
            "round robin, so the plan's TTFT holds with margin; a colocated pool's TPOT was sized for round robin's even split of "
            "the residents, which the kv-cache-utilization-scorer balances instead (`fleetplan solve --router least-work` says "
            "whether the fleet also holds under fleetplan's least-work model, which takes each replica's arrivals as bursty as the "
            "stream); for round robin itself put a Service in IPVS mode (scheduler rr) in front of the pods instead of the "
            "InferencePool")


def epp_configmap(region: str, tier: str, disaggregated: bool, data: dict, opts: ExportOptions, tie, router: str = "least-work") -> dict:
    """The ConfigMap the EPP mounts (``--config-file`` = its ``epp-config.yaml``, for a pool
    sized for ``router``), with the routing data beside it."""
    name = f"{pool_name(region, tier)}-epp"
    dump = lambda d: yaml.safe_dump(d, sort_keys=True, default_flow_style=False, width=1_000_000)  # noqa: E731
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": meta(name, opts.namespace, tie, {f"{LABEL}region": region, f"{LABEL}tier": tier}),
            "data": {"epp-config.yaml": dump(epp_config(disaggregated, router)), "fleetplan-routing.yaml": dump(data)}}
