"""Prefill -> decode KV with a placement: which pod every simulated slice sits in, where
each prefill pod sends its KV in the simulated scenario, and the DCN share the plan
predicts (the run's measurement beside it: :mod:`fleetplan.sim.dcn_measure`).

Routing (``kv_routing``):

* ``placement`` (the default): the placement's routing weights, per prefill pod the share
  of its requests whose KV goes to each decode pod of the tier, those of the scenario
  simulated when the placement carries them (``Placement.scenarios``, a placement of a plan
  sized with its pods: which warm slices join which pool, pod-to-pod shares per tier);
  else those of the normal peak (``Placement.routing``), held in a region loss (source
  ``placement-normal``, and a note says so). :func:`scenario_routing` is the one place
  that reads a scenario's routing.
* ``rule``: the plan's rule (:mod:`fleetplan.results.dcn`) applied to the placed pods at
  the scenario's load -- the prefill pool's requests spread evenly over its slices (warm
  slices that join it included, in the pods they sit in), each pod's decode slices take
  its prefill's KV up to their operating point's rate (requests/s), and the rest crosses
  to the other pods in proportion to the rate they have left (to their whole rate when
  none has any left).

A prefill pod with no row (a warm slice's pod that routed nothing at the normal peak)
sends its KV to its own decode slices when it has some, else to the tier's decode pods
in proportion to their rate. Which warm slices join which pool: those the placement's
routing of the scenario names, else the placement's warm slices of the pool's shape in
slice-id order, pools taken by (tier, role).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PLAN_PODS", "PlanPods", "plan_pods", "TierPods", "DcnSetup", "scenario_routing", "placed_pods", "placement_routes", "rule_routes", "complete_routes", "routes_share", "rule_share",
           "pods_differing", "tier_dcn"]

#: ``--placement plan``: simulate the plan's own pods (``plan.pods``) instead of a placement file.
PLAN_PODS = "plan"


@dataclass(frozen=True)
class _PodSlice:
    id: str
    region: str
    tier: str | None
    role: str
    slice: str
    pod: str


@dataclass(frozen=True)
class PlanPods:
    """A plan's own pods (``plan.pods``) in the shape the simulator reads a placement:
    ``slices`` (id, region, tier, role, slice shape, pod id 'REGION/CHIP/NN') and no routing
    weights (KV is routed by the plan's rule)."""

    slices: tuple[_PodSlice, ...]
    routing: tuple = ()


def plan_pods(plan) -> PlanPods:
    """The plan's pods as a :class:`PlanPods` (slice ids numbered per region/tier/role in
    pod order). Raises ValueError when the plan was sized without pods."""
    if plan.pods is None:
        raise ValueError("the plan was sized without pods (placement.size_with_pods false, or its pod stage found no plan: its notes say): it has no pods to simulate")
    out, seen = [], {}
    for p in sorted(plan.pods, key=lambda p: (p.region, p.chip, p.pod)):
        pid = f"{p.region}/{p.chip}/{p.pod:02d}"
        for key, count in sorted(p.slices.items()):
            parts = key.split("/")
            tier, role, shape = (None, "warm", parts[1]) if parts[0] == "warm" else (parts[0], parts[1], parts[2])
            head = f"{p.region}/warm/{shape}" if role == "warm" else f"{p.region}/{tier}/{role}"
            for _ in range(count):
                i = seen.get(head, 0)
                seen[head] = i + 1
                out.append(_PodSlice(f"{head}/{i:04d}", p.region, tier, role, shape, pid))
    return PlanPods(tuple(out))


#: The pod of a slice the placement does not hold (a warm slice joined beyond its warm pool): it has no decode slices.
UNPLACED = "(unplaced)"


@dataclass(frozen=True)
class TierPods:
    """Pods of a region-tier's simulated slices in one scenario, in slice-id order:
    ``prefill`` one pod per prefill slice (warm slices that join it last), ``decode`` per
    decode shape one pod per slice (warm slices last); ``warm`` how many of each are warm."""

    prefill: tuple[str, ...]
    decode: dict[str, tuple[str, ...]]
    warm_prefill: int = 0
    warm_decode: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DcnSetup:
    """A region-tier's KV routing as simulated, and the shares it is set beside.

    ``routing``: 'placement', 'placement-normal' or 'rule' (module docstring); ``routes``:
    prefill pod -> [(decode pod, share)], complete (every prefill pod has rows summing to
    1); ``routed_share``: the share of requests those routes send across pods when the
    pool's requests spread evenly over its slices (what the run should measure);
    ``rule_share``: the plan's rule (:func:`fleetplan.results.dcn.tier_flow`, warm slices
    that join counted as crossing, as the plan counts them) on the placed pods at the
    scenario's load; ``plan_share``: the plan's prediction (the scenario's prefill record,
    ``dcn_share``; None when the plan was sized without pods); ``pods_differing``: pods
    whose slices of this tier differ from the plan's pods (``plan.pods``; None without
    them); ``decode_rps``: (pod, requests/s its decode slices take at the scenario's
    operating point)."""

    routing: str
    routes: dict[str, list[tuple[str, float]]]
    routed_share: float
    rule_share: float | None
    plan_share: float | None
    pods_differing: int | None
    decode_rps: dict[str, float]
    notes: tuple[str, ...] = ()


def _pod_index(pod_id: str) -> tuple[str, int] | None:
    """(chip, index) of a pod id 'REGION/CHIP/NN'; None when it is not one."""
    parts = pod_id.rsplit("/", 2)
    if len(parts) != 3 or not parts[2].isdigit():
        return None
    return parts[1], int(parts[2])


def scenario_routing(placement, sc):
    """The placement's routing record of scenario ``sc`` (``Placement.scenarios``: warm slices
    joining pools and the pod-to-pod weights of that scenario, in a placement of a plan sized
    with its pods), or None when the placement has none for it (a placement routes the
    normal peak only, or ``sc`` is a loss hour the plan does not list)."""
    return next((x for x in (getattr(placement, "scenarios", None) or ()) if x.scenario == sc.name), None)


def placed_pods(placement, sc, region: str, tier: str, prefill_shape: str | None, decode_shapes: list[str]) -> tuple[TierPods, list[str]]:
    """The pods of ``region``/``tier``'s slices in scenario ``sc`` (a ScenarioResult): the
    placement's slices of each role and shape in slice-id order, then the warm slices that
    join the tier's pools in ``sc`` (its records' ``warm_slices``): those the placement's
    routing of ``sc`` names (:func:`scenario_routing`), else dealt out from the
    placement's warm slices of the record's shape in slice-id order, the region's records
    taken by (tier, role), so no warm slice joins two pools. Returns (TierPods, notes)."""
    notes: list[str] = []
    by: dict[tuple[str, str], list[str]] = {}
    warm_free: dict[str, list[str]] = {}
    for s in sorted(placement.slices, key=lambda x: x.id):
        if s.region != region:
            continue
        if s.role == "warm":
            warm_free.setdefault(s.slice, []).append(s.pod)
        elif s.tier == tier:
            by.setdefault((s.role, s.slice), []).append(s.pod)
    joined: dict[tuple[str, str], list[str]] = {}
    sr = scenario_routing(placement, sc) if sc.kind == "loss" else None
    if sr is not None:
        for w in sorted(sr.warm, key=lambda w: w.slice_id):
            if (w.region, w.tier) == (region, tier):
                joined.setdefault((w.role, w.slice_id.split("/")[-2]), []).append(w.pod)
    for p in sorted((p for p in sc.pools if p.region == region and p.warm_slices > 0 and p.slice), key=lambda p: (p.tier, p.role)):
        free = warm_free.get(p.slice, [])
        take, warm_free[p.slice] = free[:p.warm_slices], free[p.warm_slices:]
        if p.tier != tier:
            continue
        if sr is not None:
            take = joined.get((p.role, p.slice), [])
        if len(take) < p.warm_slices:
            notes.append(f"{p.role}: {p.warm_slices - len(take)} of the {p.warm_slices} warm {p.slice} slice(s) joined in {sc.name} are "
                         "not in the placement's warm pool" + (" or its routing of the scenario" if sr is not None else "")
                         + ": simulated in no pod (their KV crosses the DCN)")
            take = take + [UNPLACED] * (p.warm_slices - len(take))
        joined[(p.role, p.slice)] = take[:p.warm_slices]
    pre_warm = joined.get(("prefill", prefill_shape), []) if prefill_shape else []
    pre = tuple(p for (role, _), pods in sorted(by.items()) if role == "prefill" for p in pods) + tuple(pre_warm)
    dec, dec_warm = {}, {}
    for shape in decode_shapes:
        w = joined.get(("decode", shape), [])
        dec[shape] = tuple(by.get(("decode", shape), [])) + tuple(w)
        dec_warm[shape] = len(w)
    return TierPods(pre, dec, len(pre_warm), dec_warm), notes


def placement_routes(placement, sc, region: str, tier: str) -> tuple[dict[str, list[tuple[str, float]]], str]:
    """The placement's routing rows of ``region``/``tier`` for scenario ``sc``: (prefill pod ->
    [(decode pod, share)], source). At the normal peak ``Placement.routing``; in a region
    loss those of the scenario when the placement routes it (:func:`scenario_routing`;
    source 'placement'), else the normal peak's held (source 'placement-normal')."""
    sr = scenario_routing(placement, sc) if sc.kind == "loss" else None  # the normal peak's rows are Placement.routing
    rows = sr.routing if sr is not None else placement.routing
    out: dict[str, list[tuple[str, float]]] = {}
    for w in rows:
        if w.region == region and w.tier == tier and w.share > 0:
            out.setdefault(w.from_pod, []).append((w.to_pod, w.share))
    return out, ("placement" if (sr is not None or sc.kind == "normal") else "placement-normal")


def rule_routes(prefill_pods: tuple[str, ...], decode_rps: dict[str, float], rps: float) -> dict[str, list[tuple[str, float]]]:
    """Routes by the plan's rule (module docstring): ``rps`` requests/s spread evenly over
    the prefill slices (one pod each in ``prefill_pods``); each pod keeps up to its decode
    slices' rate (``decode_rps``: pod -> requests/s) and sends the rest to the other pods
    in proportion to what they have left (their whole rate when none has any left). While
    the decode slices carry the load (a verified plan's) the share crossing is exactly
    :func:`fleetplan.results.dcn.tier_flow`'s; a pod with no other decode pod to send to
    keeps its excess, which tier_flow counts as crossing."""
    n = len(prefill_pods)
    if n == 0:
        return {}
    per = max(rps, 0.0) / n
    count: dict[str, int] = {}
    for p in prefill_pods:
        count[p] = count.get(p, 0) + 1
    load = {p: per * c for p, c in count.items()}
    local = {p: min(load[p], decode_rps.get(p, 0.0)) for p in load}
    spare = {q: max(r - local.get(q, 0.0), 0.0) for q, r in decode_rps.items() if r > 0}
    out: dict[str, list[tuple[str, float]]] = {}
    for p in sorted(load):
        others = {q: s for q, s in spare.items() if q != p}
        if sum(others.values()) <= 0:
            others = {q: decode_rps[q] for q in spare if q != p}
        tot_o = sum(others.values())
        if load[p] <= 0:
            # no load: route as the rule would route a first request (local first)
            out[p] = [(p, 1.0)] if decode_rps.get(p, 0.0) > 0 else [(q, w / tot_o) for q, w in sorted(others.items())] if tot_o > 0 else []
            continue
        keep = local[p] / load[p] if tot_o > 0 else (1.0 if decode_rps.get(p, 0.0) > 0 else 0.0)
        rows = [(p, keep)] if keep > 0 else []
        if keep < 1.0 and tot_o > 0:
            rows += [(q, (1.0 - keep) * w / tot_o) for q, w in sorted(others.items()) if w > 0]
        out[p] = rows
    return out


def complete_routes(routes: dict[str, list[tuple[str, float]]], prefill_pods: tuple[str, ...],
                    decode_rps: dict[str, float]) -> dict[str, list[tuple[str, float]]]:
    """``routes`` restricted to decode pods the run has (``decode_rps``), shares normalised
    to 1, with a row for every pod of ``prefill_pods``: a pod without any sends its KV to
    its own decode slices when it has some, else to the decode pods in proportion to their
    rate."""
    out: dict[str, list[tuple[str, float]]] = {}
    have = {q for q, r in decode_rps.items() if r > 0} or set(decode_rps)
    tot_r = sum(decode_rps[q] for q in have)
    for p in dict.fromkeys(prefill_pods):
        rows = [(q, w) for q, w in routes.get(p, []) if q in have and w > 0]
        if not rows:
            rows = [(p, 1.0)] if p in have else [(q, (decode_rps[q] / tot_r) if tot_r > 0 else 1.0) for q in sorted(have)]
        s = sum(w for _, w in rows)
        out[p] = [(q, w / s) for q, w in rows] if s > 0 else rows
    return out


def routes_share(routes: dict[str, list[tuple[str, float]]], prefill_pods: tuple[str, ...]) -> float:
    """Share of requests (fraction) ``routes`` send to another pod when the requests spread
    evenly over the prefill slices (one pod each in ``prefill_pods``)."""
    if not prefill_pods:
        return 0.0
    cross = sum(sum(w for q, w in routes.get(p, []) if q != p) for p in prefill_pods)
    return cross / len(prefill_pods)


def _contents(placement, region: str, tier: str) -> dict[str, dict[str, int]]:
    """Per pod of ``region`` the placement's slices as a plan's pod records count them:
    'tier/role/shape' (and 'warm/shape') -> slices."""
    out: dict[str, dict[str, int]] = {}
    for s in placement.slices:
        if s.region != region:
            continue
        key = f"warm/{s.slice}" if s.role == "warm" else f"{s.tier}/{s.role}/{s.slice}"
        d = out.setdefault(s.pod, {})
        d[key] = d.get(key, 0) + 1
    return out


def rule_share(placement, region: str, tier: str, rps: float, slices: int, warm_prefill: int, warm_shape: str | None,
               rates: dict[str, float]) -> float:
    """The plan's predicted DCN share (:func:`fleetplan.results.dcn.tier_flow`, exactly the
    plan's rule: warm slices that join count as crossing) on the placement's pods."""
    from fleetplan.results.dcn import tier_flow
    from fleetplan.results.plan import PodContent

    pods = []
    for pid, content in sorted(_contents(placement, region, tier).items()):
        ix = _pod_index(pid)
        if ix is None:
            continue
        pods.append(PodContent(region=region, chip=ix[0], pod=ix[1], slices=content, chips_used=0, dcn_egress_gbytes_per_s=0.0))
    return tier_flow(pods, tier, rps, slices, warm_prefill, warm_shape, rates, 0.0).share


def pods_differing(plan, placement, region: str, tier: str) -> int | None:
    """Pods of ``region`` whose slices of ``tier`` (every role and shape) differ between the
    plan's pods (``plan.pods``, named REGION/CHIP/NN) and the placement; None when the plan
    was sized without pods."""
    if plan.pods is None:
        return None
    pre = f"{tier}/"
    want = {f"{p.region}/{p.chip}/{p.pod:02d}": {k: n for k, n in p.slices.items() if k.startswith(pre) and n}
            for p in plan.pods if p.region == region}
    have = {pid: {k: n for k, n in c.items() if k.startswith(pre)} for pid, c in _contents(placement, region, tier).items()}
    return sum(1 for pid in set(want) | set(have) if want.get(pid, {}) != have.get(pid, {}))


def tier_dcn(ctx, plan, placement, sc, region: str, tier: str, pods: TierPods, kv_routing: str) -> DcnSetup:
    """The routing and the shares of a disaggregated region-tier with a placement (see
    :class:`DcnSetup`). ``ctx``: the plan's :class:`fleetplan.results.evaluate.Context`."""
    from fleetplan.results.dcn import decode_rates

    fail = sc.kind == "loss"
    rec = next((p for p in sc.pools if p.region == region and p.tier == tier and p.role == "prefill"), None)
    rates = decode_rates(ctx, [p for p in plan.pools if p.region == region], tier, fail)
    dec_rps: dict[str, float] = {}
    for shape, pp in pods.decode.items():
        for pod in pp:
            dec_rps[pod] = dec_rps.get(pod, 0.0) + rates.get(shape, 0.0)
    lam = 0.0
    if rec is not None:
        lam = max(rec.arrivals_rps - rec.shed_rps, 0.0)
        lam *= max(0.0, 1.0 - rec.shortfall / lam) if lam > 0 else 1.0
    notes: list[str] = []
    if kv_routing == "rule" or isinstance(placement, PlanPods):
        routes, source = rule_routes(pods.prefill, dec_rps, lam), "rule"
    else:
        routes, source = placement_routes(placement, sc, region, tier)
        if source == "placement-normal":
            notes.append(f"KV routed by the placement's weights for the normal peak: the placement has no routing for {sc.name}, so each "
                         "prefill pod keeps its normal-peak shares at this scenario's load (the plan's prediction instead lets each pod's "
                         "decode slices take its KV up to their operating point's rate and sends the rest across; --kv-routing rule "
                         "runs that rule on these pods)")
    routes = complete_routes(routes, pods.prefill, dec_rps)
    n = len(pods.prefill)
    rshare = rule_share(placement, region, tier, lam, n, pods.warm_prefill, rec.slice if (rec is not None and pods.warm_prefill) else None,
                        rates) if rec is not None else None
    return DcnSetup(source, routes, routes_share(routes, pods.prefill), rshare, rec.dcn_share if rec is not None else None,
                    pods_differing(plan, placement, region, tier), dec_rps, tuple(notes))
