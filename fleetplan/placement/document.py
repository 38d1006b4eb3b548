"""A placement: which pod (ICI domain) and which VMs every slice of a plan occupies, and
where each prefill pod sends its KV; plus the hashes that tie it to its plan and the diff
of two placements. Versioned; carries the hashes of the instance and of the plan. The
independent check of a placement is :mod:`fleetplan.placement.check`."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from fleetplan.results.fields import omit_none
from fleetplan.results.plan import Plan

__all__ = ["PLACEMENT_SCHEMA_VERSION", "PodSlots", "PlacedSlice", "RouteWeight", "TierDemand", "WarmJoin", "TierScenarioDcn",
           "ScenarioRouting", "PlacedTierDcn", "Placement", "plan_hash", "placement_hash", "regions_of", "same_fleet_problems",
           "placement_diff", "vm_range"]

#: 2: a placement of a plan sized with its pods (``Plan.pods``) carries ``scenarios`` (the
#: routing and warm slices of every scenario of the plan) and ``dcn``; 1: neither (a plan
#: sized without its pods, or a placement of the online placer), written as before.
PLACEMENT_SCHEMA_VERSION = 2


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


_ID = r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$"


class PodSlots(_F):
    """One pod (ICI domain): its chips, VMs and whether it is up."""

    id: str = Field(pattern=_ID, description="Pod id, 'region/chip/NN'.")
    region: str
    chip: str
    chips: int = Field(ge=1, description="Chips in the pod (count).")
    chips_per_vm: int = Field(ge=1)
    up: bool = True
    chips_used: int = Field(ge=0, description="Chips occupied by slices, warm slices included (count).")


class PlacedSlice(_F):
    """One slice and where it lives. A slice occupies the chips [first_chip, first_chip +
    chips) of one pod, i.e. whole consecutive VMs."""

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[0-9]{4,}$",
                    description="Stable slice id, 'region/tier/role/NNNN' ('region/warm/shape/NNNN' for warm slices).")
    region: str
    tier: str | None = Field(description="Context tier (null for warm slices).")
    role: Literal["prefill", "decode", "replica", "warm"]
    slice: str = Field(description="Slice shape label, chip x chips.")
    chips: int = Field(ge=1)
    pod: str
    first_chip: int = Field(ge=0, description="First chip offset inside the pod (0-based).")
    vms: list[str] = Field(description="VM ids, 'pod/vm-NNN', adjacent.")


class RouteWeight(_F):
    """Share of a prefill pod's tier requests whose KV goes to a decode pod."""

    region: str
    tier: str
    from_pod: str
    to_pod: str
    share: float = Field(ge=0.0, le=1.0 + 1e-9, description="Of the from_pod's prefill requests of the tier (fraction).")
    rps: float = Field(ge=0.0, description="Requests/s: at the normal peak in Placement.routing; in the scenario in ScenarioRouting.routing.")


class TierDemand(_F):
    """What a region-tier's placement must carry at the normal peak (req/s)."""

    region: str
    tier: str
    rps: float = Field(description="Requests/s of the tier at the region's normal peak; for a region with no traffic of its own, the most it absorbs in a region loss; "
                                   "for a shortfall plan, what the plan serves (less its unserved requests, at most what its decode slices take).")
    decode_rps_per_slice: dict[str, float] = Field(description="Requests/s a decode slice of each shape takes at the normal operating point.")


class WarmJoin(_F):
    """A warm slice that joins a pool of its region in a region-loss scenario (it serves as
    a slice of that tier and role while the scenario lasts)."""

    slice_id: str = Field(description="The warm slice's id ('region/warm/shape/NNNN').")
    pod: str = Field(description="The pod it sits in (where its prefill KV starts or its decode takes KV).")
    region: str
    tier: str
    role: Literal["prefill", "decode", "replica"]


class TierScenarioDcn(_F):
    """A region x tier's prefill -> decode KV in one scenario, by the placement's routing."""

    region: str
    tier: str
    rps: float = Field(ge=0.0, description="Requests/s its prefill pool serves in the scenario (own and diverted, net of shedding and "
                                          "shortfall: the plan's scenario record).")
    prefill_slices: int = Field(ge=0, description="Prefill slices in service, the warm slices that join included (count).")
    kv_out_rps: float = Field(ge=0.0, description="Requests/s whose KV crosses the DCN (leaves its prefill pod).")
    dcn_share: float = Field(ge=0.0, le=1.0 + 1e-9, description="kv_out_rps / rps (fraction).")
    plan_dcn_share: float | None = Field(description="The share the plan predicts for this scenario (PoolLoad.dcn_share, fraction; it "
                                                     "counts every warm prefill slice as crossing); its TTFT paid that share.")
    kv_gbytes_per_request: float = Field(ge=0.0, description="Mean KV of a prefilled request, own and diverted weighted (GB).")


class ScenarioRouting(_F):
    """The placement's routing in one scenario of the plan: which warm slices join which
    pool, the prefill pod -> decode pod weights and the DCN share and egress they give."""

    scenario: str = Field(description="The plan's scenario name ('normal', 'lose:REGION@HH').")
    kind: Literal["normal", "loss"]
    lost_region: str | None
    hour: int | None = Field(description="Hour (UTC) of a loss scenario; null for normal.")
    warm: list[WarmJoin] = Field(description="Warm slices joining pools (count per pool = the plan's PoolLoad.warm_slices); empty at normal.")
    routing: list[RouteWeight] = Field(description="Per surviving region and tier, from_pod -> to_pod shares of the from_pod's prefill "
                                                   "requests and their requests/s in this scenario (warm slices that joined counted "
                                                   "in their pods); at normal the same rows as Placement.routing.")
    tiers: list[TierScenarioDcn]
    pod_dcn_egress_gbytes_per_s: dict[str, float] = Field(description="Pod id -> KV leaving the pod over the DCN (GB/s; pods with none "
                                                                      "omitted), every tier summed.")


class PlacedTierDcn(_F):
    """A region x tier's DCN share by the placement, beside its ceiling and the plan's."""

    region: str
    tier: str
    dcn_share_max: float = Field(description="Its ceiling (fraction): workload.tiers[].dcn_share_max, else placement.dcn_share_max.")
    sized_for: float | None = Field(description="The share the plan sized its TTFT for (plan.dcn; above the ceiling: the plan "
                                                "declares an overage).")
    normal: float = Field(description="Share at the normal peak (fraction).")
    worst_loss: float | None = Field(description="Largest share in a region-loss scenario (fraction); null without one.")
    worst_loss_scenario: str | None
    plan_normal: float | None = Field(description="The plan's prediction at the normal peak (fraction).")
    plan_worst_loss: float | None = Field(description="The plan's prediction in worst_loss_scenario (fraction).")


class Placement(_F):
    schema_version: Literal[1, 2] = Field(1, description="2 when the placement carries `scenarios` and `dcn` (a plan sized with its pods), "
                                                         "else 1.")
    fleetplan_version: str
    instance_name: str
    instance_hash: str
    plan_hash: str = Field(description="SHA-256 of the plan's canonical JSON.")
    method: Literal["mip", "greedy", "pods"] = Field(description="mip: the placement model (a plan sized without its pods); pods: the "
                                                                 "plan's per-pod counts (plan.pods), improved where no DCN share rises; "
                                                                 "greedy: the online placer.")
    pods: list[PodSlots]
    slices: list[PlacedSlice]
    routing: list[RouteWeight]
    demand: list[TierDemand]
    slice_shapes: dict[str, list[int]] = Field(default_factory=dict, description="Chip type -> slice sizes the instance allows (chips); the online placer refuses others.")
    dcn_share: float = Field(ge=0.0, le=1.0 + 1e-9, description="Share of requests whose KV crosses the DCN (fraction).")
    dcn_share_by_tier: dict[str, float] = Field(description="'region/tier' -> DCN share (fraction).")
    pods_used: int = Field(description="Pods holding at least one slice (count).")
    fragmented_free_chips: int = Field(description="Free chips in used pods that cannot hold the pod's largest slice shape (count).")
    moves: int | None = Field(None, description="Slices of the previous placement now in another pod (count; null when placed from scratch). New slices of grown pools are not moves (see notes).")
    notes: list[str] = Field(default_factory=list)
    scenarios: list[ScenarioRouting] | None = Field(None, description=(
        "A plan sized with its pods (schema_version 2): the routing of every scenario of the plan, normal first -- in a region loss "
        "which warm slices join which pool and where the survivors' KV flows (docs/placement.md). Omitted otherwise."))
    dcn: list[PlacedTierDcn] | None = Field(None, description=(
        "A plan sized with its pods: per region x tier the placement's DCN share at the normal peak and in the worst region loss, "
        "beside its ceiling and the plan's predictions. Omitted otherwise."))

    @model_validator(mode="after")
    def _version_matches(self):
        if (self.schema_version == 2) != (self.scenarios is not None) or (self.scenarios is None) != (self.dcn is None):
            raise ValueError("schema_version 2 carries both scenarios and dcn; schema_version 1 neither")
        return self

    @model_serializer(mode="wrap")
    def _omit_v2(self, handler):
        # a placement without pods (schema_version 1) is written exactly as before the fields existed
        return omit_none(handler(self), "scenarios", "dcn")


def plan_hash(plan: Plan) -> str:
    """SHA-256 (hex) of the plan's canonical JSON (sorted keys)."""
    return hashlib.sha256(json.dumps(plan.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


def placement_hash(pl: Placement) -> str:
    """SHA-256 (hex) of the placement's canonical JSON (sorted keys), as :func:`plan_hash`."""
    return hashlib.sha256(json.dumps(pl.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


def vm_range(first_chip: int, chips: int, chips_per_vm: int) -> range:
    """Indices of the VMs a slice at ``first_chip`` of ``chips`` chips occupies."""
    return range(first_chip // chips_per_vm, (first_chip + chips - 1) // chips_per_vm + 1)


def regions_of(pl: Placement) -> set[str]:
    """The regions of the instance a placement was made for: its demand rows list every
    region (a region with no slices has no pods in it)."""
    return {d.region for d in pl.demand} | {p.region for p in pl.pods}


def same_fleet_problems(a: Placement, b: Placement) -> list[str]:
    """Why two placements (of possibly different instances) do not describe the same
    fleet, for a diff: other regions, or a pod id with another region, chip, chips or
    chips per VM in each. Empty when their slices can be compared by id."""
    out = []
    ra, rb = regions_of(a), regions_of(b)
    if ra != rb:
        out.append(f"regions {', '.join(sorted(ra))} vs {', '.join(sorted(rb))}")
    pb = {p.id: p for p in b.pods}
    for p in a.pods:
        q = pb.get(p.id)
        if q is not None and (p.region, p.chip, p.chips, p.chips_per_vm) != (q.region, q.chip, q.chips, q.chips_per_vm):
            out.append(f"pod {p.id}: {p.chips} {p.chip} chips ({p.chips_per_vm} per VM) vs {q.chips} {q.chip} chips ({q.chips_per_vm} per VM)")
    return out


def placement_diff(a: Placement, b: Placement) -> dict:
    """Slice moves from placement ``a`` to ``b``: slices (by id) that changed pod, that
    appear only in b (added) or only in a (removed), and per pod the chips used before
    and after."""
    sa = {s.id: s for s in a.slices}
    sb = {s.id: s for s in b.slices}
    moved = sorted((i, sa[i].pod, sb[i].pod) for i in sa.keys() & sb.keys() if sa[i].pod != sb[i].pod)
    shifted = sorted(i for i in sa.keys() & sb.keys() if sa[i].pod == sb[i].pod and sa[i].first_chip != sb[i].first_chip)
    pods = sorted({p.id for p in a.pods} | {p.id for p in b.pods})
    ua = {p.id: p.chips_used for p in a.pods}
    ub = {p.id: p.chips_used for p in b.pods}
    return {
        "moved": [{"id": i, "from": f, "to": t} for i, f, t in moved],
        "shifted_within_pod": shifted,
        "added": sorted(sb.keys() - sa.keys()),
        "removed": sorted(sa.keys() - sb.keys()),
        "pods": [{"pod": p, "chips_used_before": ua.get(p, 0), "chips_used_after": ub.get(p, 0)} for p in pods if ua.get(p, 0) != ub.get(p, 0)],
        "dcn_share_before": a.dcn_share,
        "dcn_share_after": b.dcn_share,
    }
