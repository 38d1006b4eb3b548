"""Workload objects of the Kubernetes export: the placement's slices as LeaderWorkerSet
groups (one group = one slice: a leader pod and its workers, one pod per host), or as
DisaggregatedSets (one per ICI-domain prefill-decode unit), warm slices as their own groups.

A pool's slices sit in several pods (ICI domains) and a LeaderWorkerSet has one pod
template, so each (pool, pod) pair is one object whose replicas are the slices the
placement put there, pinned to its pod by a node-affinity term on the ICI-domain label.
API references: LeaderWorkerSet leaderworkerset.x-k8s.io/v1 and DisaggregatedSet
disaggregatedset.x-k8s.io/v1 (kubernetes-sigs/lws, CRDs in ../shared/data/k8s-crds); GKE
TPU node labels cloud.google.com/gke-tpu-accelerator and cloud.google.com/gke-tpu-topology.
"""

from __future__ import annotations

from fleetplan.errors import InputError, Problem
from fleetplan.instance.schema import Instance, KubernetesAccelerator
from fleetplan.export.k8s.common import LABEL, ExportOptions, Unit, dns_name, is_label_value, label_value, meta
from fleetplan.export.k8s.engines import Engine
from fleetplan.results.placement import Placement
from fleetplan.results.plan import Plan, Pool

__all__ = ["IMAGE", "EXCLUSIVE_TOPOLOGY", "MAX_LWS_NAME", "MAX_DS_NAME", "placement_units", "hosts_per_slice", "pod_labels", "max_num_seqs",
           "leaderworkerset", "disaggregated_units", "disaggregatedset"]

IMAGE = "fleetplan-model-server"  # replaced by the kustomization's `images:` (the user's model server image)
EXCLUSIVE_TOPOLOGY = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LLMD_ROLE = "llm-d.ai/role"  # read by llm-d's prefill-filter / decode-filter
# LWS names its leader StatefulSet after itself and each worker StatefulSet '<name>-<group>';
# a StatefulSet's pods carry 'controller-revision-hash: <statefulset>-<10 chars>', a label
# value of at most 63 characters. A DisaggregatedSet names its LWSs '<name>-<slice>-<revision>-<role>'.
MAX_LWS_NAME = 45
MAX_DS_NAME = 24


def hosts_per_slice(chips: int, k: KubernetesAccelerator) -> tuple[int, int]:
    """(hosts, chips per pod) of a slice: a slice larger than a host spans chips /
    chips_per_host hosts, one pod per host requesting all its chips; a smaller slice is one
    pod requesting its own chips."""
    if chips <= k.chips_per_host:
        return 1, chips
    return chips // k.chips_per_host, k.chips_per_host


def placement_units(inst: Instance, pl: Placement) -> list[Unit]:
    """The placement's slices grouped by (region, tier, role, shape, pod), in a stable
    order. Raises InputError when a name or label value the export needs is not valid
    Kubernetes syntax, or two objects would share a name."""
    groups: dict[tuple, list[str]] = {}
    for s in pl.slices:
        groups.setdefault((s.region, s.tier, s.role, s.slice, s.pod), []).append(s.id)
    bad: list[Problem] = []
    units: list[Unit] = []
    names: dict[str, tuple] = {}
    for (r, t, role, shape, pod), ids in sorted(groups.items(), key=lambda kv: tuple("" if x is None else x for x in kv[0])):
        chip, _, n = shape.rpartition("x")
        nn = pod.rsplit("/", 1)[1]
        name = dns_name(r, "warm", shape, nn) if role == "warm" else dns_name(r, t, role, shape, nn)
        if not (len(name) <= MAX_LWS_NAME and name.replace("-", "").isalnum() and name[0].isalnum() and name[-1].isalnum()):
            bad.append(Problem(f"regions.{r}" if role == "warm" else f"workload.tiers.{t}",
                               f"the object name {name!r} ({len(name)} characters) is not a Kubernetes name of at most {MAX_LWS_NAME} "
                               "characters (lowercase alphanumerics and '-'; LeaderWorkerSet derives pod and StatefulSet names from it): "
                               "shorten the region or tier name."))
        if name in names and names[name] != (r, t, role, shape, pod):
            bad.append(Problem(f"regions.{r}", f"two groups would both be named {name!r} (names are lower-cased, '_' and '.' become '-'): "
                                               "rename a region or tier."))
        names[name] = (r, t, role, shape, pod)
        dom = label_value(pod)
        for what, v in (("region", r), ("tier", t), ("ICI-domain label value", dom), ("shape", shape)):
            if v is not None and not is_label_value(v):
                bad.append(Problem(f"regions.{r}" if what != "tier" else f"workload.tiers.{t}",
                                   f"the {what} {v!r} is not a Kubernetes label value (at most 63 characters, alphanumeric at both ends)."))
        units.append(Unit(region=r, tier=t, role=role, shape=shape, chip=chip, chips=int(n), pod=pod, slices=len(ids), name=name,
                          domain=dom, slice_ids=tuple(sorted(ids))))
    if bad:
        raise InputError("the placement", list(dict.fromkeys(bad)))
    return units


def pod_labels(u: Unit, unit_name: str) -> dict[str, str]:
    """Labels of a unit's pods: what the InferencePool, the endpoint picker, the scrape
    configuration and the autoscalers select on. Stable across plans (no hashes), so a
    re-plan that keeps a group does not roll its pods."""
    out = {f"{LABEL}region": u.region, f"{LABEL}role": u.role, f"{LABEL}shape": u.shape, f"{LABEL}unit": unit_name,
           f"{LABEL}ici-domain": u.domain, f"{LABEL}traffic": "off" if u.role == "warm" else "on"}
    if u.tier is not None:
        out[f"{LABEL}tier"] = u.tier
    if u.role != "warm":
        # llm-d's decode-filter keeps pods labelled 'decode' or 'both' (or unlabelled), its
        # prefill-filter 'prefill' (llm-d-inference-scheduler, pkg/plugins/filter/by_label.go:
        # RoleDecode, RoleBoth): a colocated replica serves both phases, so 'both'
        out[LLMD_ROLE] = "both" if u.role == "replica" else u.role
    return out


def max_num_seqs(pool: Pool) -> int | None:
    """The requests a decode slice's engine admits into its batch (``--max-num-seqs``): the
    failover batch cap (a region loss may ride to the knee), else the normal one; None for
    a pool without a decode operating point."""
    if pool.decode_normal is None:
        return None
    return (pool.decode_failover or pool.decode_normal).batch_cap


def replica_max_num_seqs(inst: Instance, u: Unit, schedule: str | None) -> int | None:
    """The requests a colocated replica's engine admits (``--max-num-seqs``): its KV pool's
    request capacity at the tier's mean resident KV, the most residents the plan's replica
    model lets it hold (perf.colocated); under 'chunked-C' at most C, because each step
    carries one decode token per resident inside the C-token budget (and vLLM refuses
    ``--max-num-batched-tokens`` below ``--max-num-seqs``). None when the tier or shape is
    not in the instance."""
    from fleetplan.perf.pools import slice_specs, tier_mixes
    from fleetplan.perf.roofline import slice_memory_map

    tm = next((t for t in tier_mixes(inst) if t.name == u.tier), None)
    sl = next((x for x in slice_specs(inst) if x.label == u.shape), None)
    if tm is None or sl is None:
        return None
    cap = slice_memory_map(inst.model, sl, inst.priors).resident_capacity(tm.resident_kv(inst)[0], inst.priors.kv_paging_slack)
    if schedule is not None and schedule.startswith("chunked-"):
        cap = min(cap, int(schedule.split("-", 1)[1]))
    return max(int(cap), 1)


def _template(inst: Instance, plan: Plan, u: Unit, unit_name: str, opts: ExportOptions, engine: Engine,
              k: KubernetesAccelerator) -> tuple[dict, int]:
    """(pod template, hosts per slice) of a unit's pods."""
    hosts, per_pod = hosts_per_slice(u.chips, k)
    pool = next((p for p in plan.pools if (p.region, p.tier, p.role, p.slice) == (u.region, u.tier, u.role, u.shape)), None)
    max_seqs = None
    env = [{"name": "FLEETPLAN_REGION", "value": u.region}, {"name": "FLEETPLAN_ROLE", "value": u.role},
           {"name": "FLEETPLAN_SHAPE", "value": u.shape}, {"name": "FLEETPLAN_ICI_DOMAIN", "value": u.domain}]
    if u.tier is not None:
        env.append({"name": "FLEETPLAN_TIER", "value": u.tier})
    if pool is not None and pool.role == "replica":
        max_seqs = replica_max_num_seqs(inst, u, pool.schedule)
    if pool is not None and pool.decode_normal is not None:
        max_seqs = max_num_seqs(pool)
        env.append({"name": "FLEETPLAN_BATCH_CAP_NORMAL", "value": str(pool.decode_normal.batch_cap)})
        env.append({"name": "FLEETPLAN_DRAFT_TOKENS", "value": str(pool.speculation.draft_tokens if pool.speculation else 0)})
    node_selector = {k.accelerator_label: k.accelerator}
    if k.topology_label is not None:
        node_selector[k.topology_label] = k.topologies[u.chips]
    return {
        "metadata": {"labels": pod_labels(u, unit_name)},
        "spec": {
            "nodeSelector": node_selector,
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": opts.ici_domain_label, "operator": "In", "values": [u.domain]}]}]}}},
            "tolerations": [{"key": k.resource, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{
                "name": "model-server",
                "image": IMAGE,
                "args": (engine.server_args(u.role, max_seqs, inst.priors.prefill_chunk_tokens, pool.schedule if pool is not None else None)
                         + engine.precision_args(inst.model.bytes_per_weight, inst.model.bytes_per_kv_element)[0]
                         + engine.parallel_args(u.chips)),
                "env": env,
                "ports": [{"name": "http", "containerPort": engine.port, "protocol": "TCP"}],
                "resources": {"limits": {k.resource: str(per_pod)}, "requests": {k.resource: str(per_pod)}},
            }],
        },
    }, hosts


def _lws_spec(inst, plan, u, unit_name, opts, engine, k) -> tuple[dict, int]:
    tpl, hosts = _template(inst, plan, u, unit_name, opts, engine, k)
    return {
        "replicas": u.slices,
        "startupPolicy": "LeaderCreated",
        # a multi-host slice is one program: a pod lost restarts the whole group
        "leaderWorkerTemplate": {"size": hosts, "restartPolicy": "RecreateGroupOnPodRestart", "workerTemplate": tpl},
    }, hosts


def _annotations(u: Unit, hosts: int, k: KubernetesAccelerator, exclusive: bool) -> dict[str, str]:
    out = {f"{LABEL}pod": u.pod, f"{LABEL}slice-ids": ",".join(u.slice_ids)}
    if exclusive and hosts > 1 and k.slice_topology_label is not None:
        out[EXCLUSIVE_TOPOLOGY] = k.slice_topology_label
    return out


def leaderworkerset(inst: Instance, plan: Plan, u: Unit, opts: ExportOptions, engine: Engine, tie: tuple[dict, dict]) -> dict:
    """One LeaderWorkerSet: ``u.slices`` groups, one per slice, pinned to ``u.pod``."""
    k = inst.chips[u.chip].kubernetes
    spec, hosts = _lws_spec(inst, plan, u, u.name, opts, engine, k)
    labels = {x: v for x, v in pod_labels(u, u.name).items() if x.startswith(LABEL)}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": meta(u.name, opts.namespace, tie, labels, _annotations(u, hosts, k, True)), "spec": spec}


def disaggregated_units(units: list[Unit]) -> tuple[dict[tuple[str, str, str], list[Unit]], list[Unit]]:
    """(P-D units, the rest): the prefill and decode groups of one region-tier in one pod,
    when the pod has both; everything else (prefill or decode alone in its pod, colocated
    replicas, warm slices) stays a LeaderWorkerSet."""
    by: dict[tuple[str, str, str], list[Unit]] = {}
    for u in units:
        if u.role in ("prefill", "decode"):
            by.setdefault((u.region, u.tier, u.pod), []).append(u)
    pd = {key: us for key, us in by.items() if {u.role for u in us} == {"prefill", "decode"}}
    taken = {id(u) for us in pd.values() for u in us}
    return pd, [u for u in units if id(u) not in taken]


def ds_name(region: str, tier: str, pod: str) -> str:
    return dns_name(region, tier, pod.rsplit("/", 1)[1])


def role_names(us: list[Unit]) -> dict[int, str]:
    """DisaggregatedSet role names: 'prefill' and 'decode', with the shape when a role has two."""
    per_role: dict[str, int] = {}
    for u in us:
        per_role[u.role] = per_role.get(u.role, 0) + 1
    return {id(u): (u.role if per_role[u.role] == 1 else dns_name(u.role, u.shape)) for u in us}


def disaggregatedset(inst: Instance, plan: Plan, key: tuple[str, str, str], us: list[Unit], opts: ExportOptions, engine: Engine,
                     tie: tuple[dict, dict], external: bool) -> dict:
    """One DisaggregatedSet: the unit's prefill and decode groups as roles (replicas = the
    slices placed in the pod), one slice of the role topology, pinned to the pod. With
    ``external`` the roles take their replica counts from DisaggregatedSetRoleScalers (the
    autoscalers' targets).

    Placement policy: ExclusiveSlice on the ICI-domain label keeps the unit in one domain,
    but the DisaggregatedSet webhook refuses it together with LeaderWorkerSet's exclusive
    topology, which a multi-host slice needs (its hosts must be one node pool). A unit with
    a multi-host slice therefore keeps the exclusive topology per role and no policy; the
    node affinity on the ICI-domain label holds every role in the pod either way."""
    r, t, pod = key
    name = ds_name(r, t, pod)
    if len(name) > MAX_DS_NAME:
        raise InputError("the placement", [Problem(f"workload.tiers.{t}", f"the DisaggregatedSet name {name!r} is longer than {MAX_DS_NAME} "
                                                                          "characters (the controller derives LeaderWorkerSet names from it): shorten "
                                                                          "the region or tier name, or export --workload leaderworkerset.")])
    rn = role_names(us)
    multi = any(hosts_per_slice(u.chips, inst.chips[u.chip].kubernetes)[0] > 1 for u in us)
    roles = []
    for u in sorted(us, key=lambda u: (u.role != "prefill", u.shape)):
        k = inst.chips[u.chip].kubernetes
        unit = f"{name}-{rn[id(u)]}"
        spec, hosts = _lws_spec(inst, plan, u, unit, opts, engine, k)
        role = {"name": rn[id(u)],
                "metadata": {"labels": {x: v for x, v in pod_labels(u, unit).items() if x.startswith(LABEL)},
                             "annotations": _annotations(u, hosts, k, multi)},
                "spec": spec}
        if external:
            role["scaling"] = {"mode": "External"}
        roles.append(role)
    spec = {"slices": 1, "roles": roles}
    if not multi:
        spec["placementPolicy"] = {"type": "ExclusiveSlice", "topology": opts.ici_domain_label}
    labels = {f"{LABEL}region": r, f"{LABEL}tier": t, f"{LABEL}ici-domain": us[0].domain}
    return {"apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
            "metadata": meta(name, opts.namespace, tie, labels, {f"{LABEL}pod": pod}), "spec": spec}
