"""``place(instance, plan)``: put every slice of a plan into a pod (ICI domain) of its
region and onto whole adjacent VMs, keeping prefill -> decode KV inside pods, and give
the prefill -> decode routing weights. One mixed-integer model per region
(:mod:`fleetplan.models.placement`, HiGHS); VMs by aligned first-fit; the result is
re-checked by :func:`fleetplan.placement.check.verify_placement`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from fleetplan import __version__
from fleetplan.errors import InputError, Problem
from fleetplan.instance.io import instance_hash
from fleetplan.instance.schema import Instance
from fleetplan.models.placement.build import PlacementItem, RegionPlacementData
from fleetplan.placement.check import current_placement_problems
from fleetplan.placement.document import Placement, PlacedSlice, PodSlots, RouteWeight, plan_hash, vm_range
from fleetplan.placement.packing import PlacementInfeasible, allocate
from fleetplan.placement.pods import improve as improve_pods, map_to_current, plan_counts, region_loads, scenario_routing
from fleetplan.placement.summary import fragmented_free_chips, largest_shapes, placement_demand, tier_demand
from fleetplan.placement.weights import routing_from_flows
from fleetplan.results.plan import Plan, status_note


__all__ = ["PlacementInfeasible", "place", "region_data", "pod_ids", "allocate", "routing_from_flows", "fragmented_free_chips", "tier_demand"]


def pod_ids(plan: Plan) -> list[tuple[str, str, str]]:
    """(pod id, region, chip) of every pod of the plan, in a stable order."""
    out = []
    for f in sorted(plan.fleet, key=lambda f: (f.region, f.chip)):
        out += [(f"{f.region}/{f.chip}/{n:02d}", f.region, f.chip) for n in range(f.pods_total)]
    return out


def region_data(inst: Instance, plan: Plan, region: str, current: Placement | None = None) -> RegionPlacementData:
    down = {p.id for p in current.pods if not p.up} if current is not None else set()
    pods = [(pid, k, inst.chips[k].chips_per_pod) for pid, r, k in pod_ids(plan) if r == region and pid not in down]
    items = []
    for p in sorted(plan.pools, key=lambda p: (p.tier, p.role, p.slice)):
        if p.region == region:
            items.append(PlacementItem(p.tier, p.role, p.slice, p.chip, p.chips_per_slice, p.slices))
    for w in sorted(plan.warm_pool, key=lambda w: w.slice):
        if w.region == region and w.slices > 0:
            chip, _, n = w.slice.rpartition("x")
            items.append(PlacementItem(None, "warm", w.slice, chip, int(n), w.slices))
    d = RegionPlacementData(region, pods, items)
    for td in tier_demand(inst, plan):
        if td.region == region and td.decode_rps_per_slice:
            d.tier_rps[td.tier] = td.rps
            d.decode_rps_per_slice[td.tier] = min(td.decode_rps_per_slice.values())
            d.decode_rps_per_shape.update({(td.tier, sh): v for sh, v in td.decode_rps_per_slice.items()})
    if current is not None:
        idx = {it.key: i for i, it in enumerate(items)}
        d.current = {}
        for s in current.slices:
            if s.region != region:
                continue
            key = (s.tier, s.role, s.slice)
            if key in idx:
                d.current[(idx[key], s.pod)] = d.current.get((idx[key], s.pod), 0) + 1
    return d


class PlacementTimeLimit(RuntimeError):
    """The placement's deadline passed before a region's stage found any placement."""


def _stage_seconds(time_limit_s: float | None, deadline: float | None, share: float = 1.0) -> float | None:
    """Seconds one stage may take: its own limit, cut to ``share`` of what is left before
    ``deadline`` (a :func:`time.monotonic` timestamp; None = none); None or <= 0 as
    described by the caller (<= 0: no time left)."""
    if deadline is None:
        return time_limit_s
    left = (deadline - time.monotonic()) * share
    return left if time_limit_s is None else min(time_limit_s, left)


def _solve_region(d: RegionPlacementData, time_limit_s: float | None, dcn_slack_rps: float,
                  deadline: float | None = None, share: float = 1.0) -> tuple[dict, dict, list[str]]:
    """Place region ``d`` in stages (DCN traffic, moves, pods used, DCN again). Under a
    ``deadline`` each stage gets at most ``share`` (this region's share of the regions
    left) of the time left; the first stage gives a complete placement, so once the time
    is gone the later stages (refinements) are skipped and the notes say so; only a first
    stage without any placement raises PlacementTimeLimit."""
    import pyomo.environ as pyo

    from fleetplan.models.placement import build_placement_model
    from fleetplan.solvers.base import SolveOptions
    from fleetplan.solvers.highs import solve_highs

    m = build_placement_model(d)
    notes = []
    # the last stage re-minimises the DCN traffic over the routing alone (the counts are
    # capped by the earlier stages), so the weights are the best the chosen placement allows
    stages = [("dcn_rps", dcn_slack_rps)] + ([("moves", 0.0)] if d.current is not None else []) + [("pods_used", 0.0), ("dcn_rps", 0.0)]
    m.c_stage = pyo.ConstraintList()
    first = True
    for name, slack in stages:
        if getattr(m, f"e_{name}").polynomial_degree() == 0:
            continue  # nothing to choose (no KV traffic in a colocated region, ...)
        seconds = _stage_seconds(time_limit_s, deadline, share)
        if seconds is not None and seconds <= 0.05:
            if first:
                raise PlacementTimeLimit(f"the time limit passed before {d.region}'s {name} stage (its first) could start")
            notes.append(f"{d.region}: the time limit left no time for the {name} stage and those after it; the placement is the "
                         "earlier stages'")
            break
        obj = getattr(m, f"obj_{name}")
        obj.activate()
        res = solve_highs(m, SolveOptions(mip_gap=1e-6 if name != "pods_used" else 0.0, time_limit_s=seconds), reuse_repn=True)
        obj.deactivate()
        if not res.has_incumbent and res.termination == "time_limit" and deadline is not None:
            if first:
                raise PlacementTimeLimit(f"the time limit passed while {d.region}'s {name} stage (its first) had no placement yet")
            notes.append(f"{d.region}: the {name} stage found nothing better within its share of the time limit; the placement is the "
                         "earlier stages'")
            break
        first = False
        if not res.has_incumbent:
            if res.termination in ("infeasible", "infeasible_or_unbounded"):
                if _chips_fit(m, _stage_seconds(time_limit_s, deadline, share)):
                    # the chips fit: what does not is the KV the prefill slices send to the decode
                    # slices (tier_demand caps a shortfall plan's demand at what they take)
                    cap = {t: sum(d.decode_rate(D) * d.items[D].count for D in d.items_of(t, "decode")) for t in d.tier_rps}
                    raise PlacementInfeasible(f"{d.region}: the slices fit the {len(d.pods)} up pods, but the decode slices do not take the "
                                              "prefill -> decode KV of the normal peak: "
                                              + "; ".join(f"tier {t} {v:,.6g} req/s, its decode slices {cap[t]:,.6g} req/s"
                                                          for t, v in sorted(d.tier_rps.items()))
                                              + " -- re-solve the plan")
                need = sum(it.chips * it.count for it in d.items)
                have = sum(c for _, _, c in d.pods)
                raise PlacementInfeasible(f"{d.region}: the plan's slices ({need:,} chips) do not fit the {len(d.pods)} up pods "
                                          f"({have:,} chips) in whole aligned blocks; bring pods up, or see what the loss does with "
                                          f"`fleetplan whatif PLAN --lose-pods`")
            raise RuntimeError(f"placement of {d.region}: the stage minimising {name} ended {res.termination} without a solution")
        if res.termination not in ("optimal", "gap_reached"):
            notes.append(f"{d.region}: the {name} stage stopped at its time limit (gap {res.gap or 0:.2%})")
        val = float(pyo.value(getattr(m, f"e_{name}")))
        m.c_stage.add(getattr(m, f"e_{name}") <= val + max(slack, 1e-6 * max(val, 1.0)))
    counts = {(i, j): int(round(pyo.value(m.v_place[i, j]))) for (i, j) in m.PLACE}
    flows = {k: (pyo.value(m.v_kv_local[k]), pyo.value(m.v_kv_out[k]), pyo.value(m.v_kv_in[k])) for k in m.KV}
    return counts, flows, notes


def _chips_fit(m, time_limit_s: float | None) -> bool:
    """Whether the slices fit the pods with the KV constraints left out (the placement
    model ``m`` is changed: its KV constraints are deactivated)."""
    import pyomo.environ as pyo

    from fleetplan.solvers.base import SolveOptions
    from fleetplan.solvers.highs import solve_highs

    for c in (m.c_kv_source, m.c_kv_sink, m.c_kv_dcn, m.c_stage):
        c.deactivate()
    for o in m.component_objects(pyo.Objective, active=True):
        o.deactivate()
    m.obj_pods_used.activate()
    res = solve_highs(m, SolveOptions(mip_gap=1.0, time_limit_s=time_limit_s))
    return res.has_incumbent


def _materialise(r: str, d: RegionPlacementData, counts: dict, cur_by_id: dict[str, PlacedSlice], chips_per_vm: dict[str, int],
                 notes: list[str]) -> tuple[list[PodSlots], list[PlacedSlice]]:
    """Region ``r``'s slices (ids, chips, VMs) from the counts per (item, pod): current ids
    and positions kept where the count allows, slices that leave a pod keeping their ids
    where they land (a move, not a remove + add), new ids numbered per 'region/tier/role'
    prefix after the highest in use (the shape is not in the id: a pool whose shape changed
    gets new ids, never a removed slice's); inside a pod aligned first-fit around the kept
    slices, the pod repacked (noted) when the new ones do not fit around them."""
    next_no: dict[str, int] = {}
    for s in cur_by_id.values():
        if s.region == r:
            head, _, no = s.id.rpartition("/")
            next_no[head] = max(next_no.get(head, 0), int(no) + 1)
    plans = []
    kept_ids = set()
    for pid, k, cap in d.pods:
        kept: list[PlacedSlice] = []
        new: list[PlacementItem] = []
        for i, it in enumerate(d.items):
            c = counts.get((i, pid), 0)
            here = sorted((s for s in cur_by_id.values() if s.pod == pid and (s.tier, s.role, s.slice) == it.key), key=lambda s: s.id)
            kept += here[:c]
            new += [it] * max(c - len(here), 0)
        kept_ids.update(s.id for s in kept)
        plans.append((pid, k, cap, kept, new))
    released: dict[tuple, list[str]] = {}
    for s in sorted(cur_by_id.values(), key=lambda s: s.id):
        if s.region == r and s.id not in kept_ids:
            released.setdefault((s.tier, s.role, s.slice), []).append(s.id)
    pods_out, slices_out = [], []
    for pid, k, cap, kept, new in plans:
        offs = allocate(cap, chips_per_vm[k], [it.chips for it in new], [(s.first_chip, s.chips) for s in kept])
        if offs is None:  # fragmentation around the kept slices: repack the pod (ids kept)
            notes.append(f"{pid}: repacked to fit the new slices (kept slices changed chips)")
            sizes = [s.chips for s in kept] + [it.chips for it in new]
            all_offs = allocate(cap, chips_per_vm[k], sizes)
            if all_offs is None:
                raise RuntimeError(f"{pid}: slices of {sum(sizes)} chips do not pack into {cap} chips")
            kept = [s.model_copy(update={"first_chip": o, "vms": [f"{pid}/vm-{v:03d}" for v in vm_range(o, s.chips, chips_per_vm[k])]})
                    for s, o in zip(kept, all_offs[:len(kept)])]
            offs = all_offs[len(kept):]
        placed_here = list(kept)
        for it, o in zip(new, offs):
            key = it.key
            if released.get(key):
                sid = released[key].pop(0)
            else:
                head = f"{r}/{it.tier}/{it.role}" if it.role != "warm" else f"{r}/warm/{it.shape}"
                no = next_no.get(head, 0)
                next_no[head] = no + 1
                sid = f"{head}/{no:04d}"
            placed_here.append(PlacedSlice(id=sid, region=r, tier=it.tier, role=it.role, slice=it.shape, chips=it.chips, pod=pid,
                                           first_chip=o, vms=[f"{pid}/vm-{v:03d}" for v in vm_range(o, it.chips, chips_per_vm[k])]))
        slices_out += placed_here
        pods_out.append(PodSlots(id=pid, region=r, chip=k, chips=cap, chips_per_vm=chips_per_vm[k], up=True,
                                 chips_used=sum(s.chips for s in placed_here)))
    return pods_out, slices_out


def _pod_counts(inst: Instance, plan: Plan, d: RegionPlacementData, loads: list, current: Placement | None, improve: bool,
                notes: list[str], deadline: float | None = None) -> dict:
    """Counts per (item, pod) of a plan sized with its pods: the plan's pods, improved
    (:func:`fleetplan.placement.pods.improve`, within ``deadline``) unless ``improve`` is
    False, mapped onto the current placement's pods with the fewest arrivals when there is one."""
    # the plan's pod ids; from scratch they are all up, with a current placement they are
    # mapped onto its up pods below
    pods = [(pid, k, inst.chips[k].chips_per_pod) for pid, _, k in pod_ids_of(plan, d.region)]
    content = plan_counts(plan, d.region, [pid for pid, _, _ in (d.pods if current is None else pods)])
    if improve:
        cap = {pid: inst.chips[k].pod_egress_gbytes_per_s(inst.network.dcn_gbytes_per_s_per_slice) for pid, k, _ in pods}
        content, n = improve_pods(content, pods, {k: c.chips_per_vm for k, c in inst.chips.items()}, loads, cap, d.region,
                                  deadline=deadline)
        notes += n
    if current is not None:
        cur: dict[str, dict] = {}
        for s in current.slices:
            if s.region == d.region:
                c = cur.setdefault(s.pod, {})
                c[(s.tier, s.role, s.slice)] = c.get((s.tier, s.role, s.slice), 0) + 1
        content = map_to_current(content, d.pods, cur)
    idx = {it.key: i for i, it in enumerate(d.items)}
    counts = {}
    for pid, c in content.items():
        for key, n in c.items():
            counts[(idx[key], pid)] = counts.get((idx[key], pid), 0) + n
    return counts


def pod_ids_of(plan: Plan, region: str) -> list[tuple[str, str, str]]:
    """(pod id, region, chip) of ``region``'s pods in ``plan`` (:func:`pod_ids`)."""
    return [x for x in pod_ids(plan) if x[1] == region]


def place(inst: Instance, plan: Plan, current: Placement | None = None, dcn_slack: float = 0.01,
          time_limit_s: float | None = 60.0, progress: Callable[[str], None] | None = None, deadline: float | None = None,
          improve: bool = True) -> Placement:
    """Place every slice of ``plan`` (see the module docstring).

    A plan sized with its pods (``plan.pods``) is placed as its pods say
    (:mod:`fleetplan.placement.pods`, method 'pods'): its counts kept -- ``improve`` empties
    pods the sizing left nearly empty where no tier's DCN share rises in any scenario --
    with the routing of every scenario of the plan (``Placement.scenarios``, schema
    version 2); ``dcn_slack`` and ``time_limit_s`` do not apply, ``deadline`` does (the
    improvement stops at it, noted; a region or the scenario routing not started by it
    raises PlacementTimeLimit). Any other plan by the placement model (method 'mip').

    Args: current: the placement in force, of this plan or of an earlier plan of the same
    regions and pods (a load re-solved after growth; what is compared:
    :func:`fleetplan.placement.check.current_placement_problems`); slices stay where
    they are unless moving them lowers the DCN share by more than ``dcn_slack`` (fraction
    of the region's requests); a plan with pods keeps its pods' contents and maps them
    onto the current pods with the fewest moves.
    Raises: InputError when ``current`` is not a placement of the same regions and pods
    or does not hold on its own, or when the plan's pods do not hold its slices;
    PlacementInfeasible when a region's slices do not fit
    the pods that are up; RuntimeError when they do not pack (the plan's own inventory
    check makes this a bug); PlacementTimeLimit when ``deadline`` (a
    :func:`time.monotonic` timestamp: ``place --time-limit`` from the command's start)
    passes before a stage has any placement. ``time_limit_s`` bounds each stage's solve
    (seconds); a stage cut by either limit keeps its incumbent and the placement says so
    in its notes.
    """
    say = progress or (lambda _m: None)
    if current is not None:
        broken = current_placement_problems(inst, current)
        if broken:
            raise InputError("current placement", [Problem(f"{v.check} {v.where}", v.message) for v in broken])
    pods_mode = plan.pods is not None
    loads = _scenario_loads(inst, plan) if pods_mode else {}
    chips_per_vm = {k: c.chips_per_vm for k, c in inst.chips.items()}
    pods_out: list[PodSlots] = []
    slices_out: list[PlacedSlice] = []
    routed = _Routing()
    notes: list[str] = [n for n in (status_note(plan),) if n is not None]  # a plan not verified: said first
    cur_by_id = {s.id: s for s in current.slices} if current is not None else {}
    for r in sorted(inst.regions):
        say(f"placing {r}")
        d = region_data(inst, plan, r, current)
        if not d.items:
            continue
        if pods_mode:
            if deadline is not None and time.monotonic() >= deadline:
                raise PlacementTimeLimit(f"the time limit passed before {r}'s placement (as the plan's pods say) could start")
            counts, flows = _pod_counts(inst, plan, d, loads[r], current, improve, notes, deadline), {}
        else:
            slack = dcn_slack * sum(d.tier_rps.values()) if current is not None else 0.0
            left = sum(1 for x in sorted(inst.regions) if x >= r)  # this region and those after it share what is left
            counts, flows, n = _solve_region(d, time_limit_s, slack, deadline, 1.0 / left)
            notes += n
        p_r, s_r = _materialise(r, d, counts, cur_by_id, chips_per_vm, notes)
        pods_out += p_r
        slices_out += s_r
        if not pods_mode:
            _route_region(r, d, counts, flows, routed, notes)
    scenarios = dcn_rows = None
    if pods_mode:
        say("routing every scenario")
        scenarios, dcn_rows = _route_scenarios(inst, plan, loads, pods_out, slices_out, deadline, routed, notes)
    moves = _changes_from_current(inst, current, cur_by_id, pods_out, slices_out, notes) if current is not None else None
    demand = placement_demand(inst, plan)  # with pods: the normal routing carries the plan's own served load (the demand margin included)
    notes += [n for n in (_shortfall_note(plan, demand),) if n is not None]
    largest = largest_shapes(inst)
    pods_out.sort(key=lambda p: p.id)
    slices_out.sort(key=lambda s: s.id)
    pl = Placement(
        schema_version=2 if pods_mode else 1,
        fleetplan_version=__version__, instance_name=inst.name, instance_hash=instance_hash(inst), plan_hash=plan_hash(plan),
        method="pods" if pods_mode else "mip", pods=pods_out, slices=slices_out, routing=routed.rows, demand=demand,
        slice_shapes={k: sorted(c.slice_shapes) for k, c in sorted(inst.chips.items())},
        dcn_share=routed.share, dcn_share_by_tier=routed.dcn_by_tier,
        pods_used=sum(1 for p in pods_out if p.chips_used > 0), fragmented_free_chips=fragmented_free_chips(pods_out, slices_out, largest),
        moves=moves, notes=notes, scenarios=scenarios, dcn=dcn_rows,
    )
    return pl


@dataclass
class _Routing:
    """The placement's normal-peak routing as :func:`place` builds it: the route weights,
    the DCN share per 'region/tier' (fraction) and the requests/s routed in all and across
    the DCN (req/s), summed in region and tier order."""

    rows: list[RouteWeight] = field(default_factory=list)
    dcn_by_tier: dict[str, float] = field(default_factory=dict)
    cross: float = 0.0
    total: float = 0.0

    @property
    def share(self) -> float:
        """Share of the routed requests whose KV crosses the DCN (fraction, 9 decimals)."""
        return round(self.cross / self.total, 9) if self.total > 0 else 0.0


def _scenario_loads(inst: Instance, plan: Plan) -> dict[str, list]:
    """Region -> its loads in every scenario of a plan sized with its pods
    (:func:`fleetplan.placement.pods.region_loads`), the normal routing carrying each
    region-tier's :func:`~fleetplan.placement.summary.tier_demand` where the plan's normal
    record has none. Raises InputError (``plan.pods...``) when the plan's pods do not hold
    its slices."""
    from fleetplan.results.evaluate import Context
    from fleetplan.results.pods import pod_problems

    bad = pod_problems(inst, plan)
    if bad:
        raise InputError("plan", [Problem(f"plan.{p.path}", p.message) for p in bad])
    ctx = Context(inst)
    normal_rps = {(td.region, td.tier): td.rps for td in tier_demand(inst, plan)}
    return {r: region_loads(inst, plan, ctx, r, {t: v for (rr, t), v in normal_rps.items() if rr == r}) for r in sorted(inst.regions)}


def _route_region(r: str, d: RegionPlacementData, counts: dict, flows: dict, routed: _Routing, notes: list[str]) -> None:
    """Region ``r``'s prefill -> decode weights per tier from the placement model's KV
    flows (req/s), added to ``routed``; a tier with more than 5% of its requests crossing
    the DCN gets a note saying why (its decode slices share few pods with its prefill)."""
    for t in d.tier_rps:
        P = d.item_index(t, "prefill")
        if P is None:
            continue
        load = {pid: d.tier_rps[t] / d.items[P].count * counts.get((P, pid), 0) for pid, _, _ in d.pods}
        local = {j: flows[(t, j)][0] for (tt, j) in flows if tt == t}
        out = {j: flows[(t, j)][1] for (tt, j) in flows if tt == t}
        inn = {j: flows[(t, j)][2] for (tt, j) in flows if tt == t}
        Ds = d.items_of(t, "decode")  # one per decode shape (a mixed pool has several)
        capd = {pid: sum(d.decode_rate(D) * counts.get((D, pid), 0) for D in Ds) for pid, _, _ in d.pods}
        rows = routing_from_flows(r, t, local, out, inn, load, capd)
        routed.rows += rows
        tot = sum(w.rps for w in rows)
        cross = sum(w.rps for w in rows if w.from_pod != w.to_pod)
        routed.dcn_by_tier[f"{r}/{t}"] = round(cross / tot, 9) if tot > 0 else 0.0
        routed.cross += cross
        routed.total += tot
        if tot > 0 and cross / tot > 0.05:
            pods_both = sum(1 for pid, _, _ in d.pods if counts.get((P, pid), 0) and any(counts.get((D, pid), 0) for D in Ds))
            nd, npf = sum(d.items[D].count for D in Ds), d.items[P].count
            notes.append(f"{r}/{t}: {cross / tot:.0%} of the tier's requests cross the DCN: its {nd} decode slice{'s' if nd != 1 else ''} of "
                         f"{' + '.join(d.items[D].shape for D in Ds)} share only {pods_both} pod{'s' if pods_both != 1 else ''} with its {npf} prefill slices of {d.items[P].shape}; "
                         "more, smaller decode slices would spread the decode pool over more pods (a sizing choice: the plan "
                         "does not price DCN traffic)")


def _route_scenarios(inst: Instance, plan: Plan, loads: dict[str, list], pods_out: list[PodSlots], slices_out: list[PlacedSlice],
                     deadline: float | None, routed: _Routing, notes: list[str]) -> tuple[list, list]:
    """The routing of every scenario of a plan sized with its pods
    (:func:`fleetplan.placement.pods.scenario_routing`): its normal rows and shares go to
    ``routed``, its DCN notes to ``notes``; returns (``Placement.scenarios``,
    ``Placement.dcn``). Raises PlacementTimeLimit when ``deadline`` has passed, InputError
    when the plan's warm slices do not add up (an edited plan)."""
    if deadline is not None and time.monotonic() >= deadline:
        raise PlacementTimeLimit("the time limit passed before the routing of the plan's scenarios could start")
    try:
        routed.rows, scenarios, dcn_rows = scenario_routing(inst, plan, loads, pods_out, slices_out)
    except ValueError as e:  # the plan's warm slices do not add up (an edited plan)
        raise InputError("plan", [Problem("plan.scenarios[].pools[].warm_slices", str(e))]) from None
    normal = next((s for s in scenarios if s.kind == "normal"), None)
    for x in normal.tiers if normal is not None else []:
        routed.dcn_by_tier[f"{x.region}/{x.tier}"] = x.dcn_share
    for w in routed.rows:
        routed.total += w.rps
        routed.cross += w.rps if w.from_pod != w.to_pod else 0.0
    notes += _dcn_notes(dcn_rows)
    return scenarios, dcn_rows


def _changes_from_current(inst: Instance, current: Placement, cur_by_id: dict[str, PlacedSlice], pods_out: list[PodSlots],
                          slices_out: list[PlacedSlice], notes: list[str]) -> int:
    """Against the placement in force: the slices moved to another pod (count, returned),
    notes on the instance it was made for and on slices added and removed, and its down
    pods kept, empty, in ``pods_out``."""
    if current.instance_hash != instance_hash(inst):
        notes.append(f"re-placed from a placement made for instance '{current.instance_name}' ({current.instance_hash[:12]}...), "
                     "an earlier instance with the same regions and pods")
    moves = sum(1 for s in slices_out if s.id in cur_by_id and cur_by_id[s.id].pod != s.pod)
    added = sum(1 for s in slices_out if s.id not in cur_by_id)
    removed = len(set(cur_by_id) - {s.id for s in slices_out})
    if added or removed:
        notes.append(f"{added} new slices placed and {removed} removed (grown and shrunk pools), besides the {moves} moved")
    for p in current.pods:
        if not p.up:
            pods_out.append(p.model_copy(update={"chips_used": 0}))
    return moves


def _shortfall_note(plan: Plan, demand: list) -> str | None:
    """For a shortfall plan (requests not served end to end at the normal peak), what its
    placement carries and how to close the shortfall; None otherwise."""
    normal = next((sc for sc in plan.scenarios if sc.kind == "normal"), None)
    if plan.status == "shortfall" or (normal is not None and normal.unserved_rps > 0):
        short = normal.unserved_rps if normal is not None else 0.0
        return (f"a shortfall plan (status {plan.status}: {short:,.6g} requests/s not served end to end at the normal peak): this "
                f"places the fleet as sized, and its routing carries the {sum(td.rps for td in demand):,.6g} requests/s the plan "
                "serves; more inventory and a re-solve close the shortfall, see `fleetplan report PLAN`")
    return None


def _dcn_notes(rows) -> list[str]:
    """The placement's DCN shares in words, for a plan sized with its pods: tiers whose
    share is above the ceiling (the plan declares the overage), and where the placement
    does better than the plan predicts in a region loss."""
    out = []
    for x in rows:
        over = [(v, where) for v, where in ((x.normal, "at the normal peak"), (x.worst_loss, f"in {x.worst_loss_scenario}")) if v is not None
                and v > x.dcn_share_max + 1e-9]
        if over:
            v, where = max(over)
            declared = x.sized_for is not None and x.sized_for > x.dcn_share_max
            out.append(f"{x.region}/{x.tier}: {v:.1%} of the tier's requests cross the DCN {where}, above its ceiling {x.dcn_share_max:.0%}"
                       + ("; the plan declares the overage (plan.dcn: no placement within its pods keeps it under, its TTFT was sized "
                          "with every request crossing)" if declared else ""))
    return out
