"""The independent check of a placement: recomputed from the instance, the plan and the
placement's own rows, without the placer's code (:mod:`fleetplan.placement.driver`,
:mod:`~fleetplan.placement.pods`, :mod:`~fleetplan.placement.online`) or an optimisation
model -- the placement's counterpart of :func:`fleetplan.results.verify.verify`. The
summary fields are re-derived by :mod:`fleetplan.placement.summary` and every scenario's
routing by :mod:`fleetplan.placement.scenario_check`."""

from __future__ import annotations

from fleetplan.instance.schema import Instance
from fleetplan.placement.document import Placement, plan_hash, regions_of, vm_range
from fleetplan.placement.scenario_check import scenario_problems
from fleetplan.placement.summary import summary_problems
from fleetplan.results.plan import Plan, Violation

__all__ = ["verify_placement", "current_placement_problems"]


def verify_placement(inst: Instance, plan: Plan | None, pl: Placement, counts: bool = True) -> list[Violation]:
    """Re-check a placement against its plan without the placer's code: every pod within
    its chips and VMs, every slice inside one pod on whole adjacent VMs with no overlap,
    every slice of the plan placed exactly once (warm slices too), pods per region within
    the plan's, routing shares summing to 1 and pointing at decode pods of the tier, the
    DCN share and the summary (pods used, fragmented free chips, the DCN share per tier and,
    with the plan, the demand rows: :func:`fleetplan.placement.summary.summary_problems`)
    recomputed; for a plan sized with its pods, in every scenario of the plan,
    the warm slices joining pools, the load the routing carries to decode capacity, each
    tier's DCN share against its ceiling, each pod's DCN egress and the TTFT at the
    placement's share (:func:`fleetplan.placement.scenario_check.scenario_problems`). With
    ``plan`` None only what stands without a plan is
    checked (pods, chips, VMs, overlaps, routing); with ``counts`` False neither the
    plan's hash, its pods per region nor its slice counts are (a current placement being
    replaced by a placement of a changed plan: it may hold pods the plan gives up and
    other slice counts; see :func:`current_placement_problems`).
    Returns the violations (empty: the placement holds)."""
    out: list[Violation] = []

    def v(check, where, msg):
        out.append(Violation(check=check, where=where, message=msg))

    if plan is not None and counts and pl.plan_hash != plan_hash(plan):
        v("plan", "plan_hash", "the placement was made for another plan")
    pods = {}
    for p in pl.pods:
        if p.id in pods:
            v("pods", p.id, "pod id appears twice")
        pods[p.id] = p
        if p.region not in inst.regions or p.chip not in inst.chips:
            v("pods", p.id, f"unknown region {p.region!r} or chip {p.chip!r}")
        elif p.chips != inst.chips[p.chip].chips_per_pod or p.chips_per_vm != inst.chips[p.chip].chips_per_vm:
            v("pods", p.id, "chips or chips_per_vm differ from the instance")
    if plan is not None and counts:
        fleet = {(f.region, f.chip): f.pods_total for f in plan.fleet}
        for (r, k), n in sorted({(p.region, p.chip): 0 for p in pl.pods}.items()):
            have = sum(1 for p in pl.pods if (p.region, p.chip) == (r, k))
            if have > fleet.get((r, k), 0):
                v("pods", f"{r}/{k}", f"{have} pods placed, the plan has {fleet.get((r, k), 0)}")
    used: dict[str, list[tuple[int, int, str]]] = {}
    ids = set()
    placed: dict[tuple, int] = {}  # (region, tier, role, shape) -> slices (not ``counts``: that is the argument)
    for s in pl.slices:
        if s.id in ids:
            v("slices", s.id, "slice id appears twice")
        ids.add(s.id)
        pod = pods.get(s.pod)
        if pod is None:
            v("slices", s.id, f"pod {s.pod!r} does not exist")
            continue
        chip, _, n = s.slice.rpartition("x")
        if chip != pod.chip or not n.isdigit() or int(n) != s.chips or s.chips < 1:
            v("slices", s.id, f"shape {s.slice} does not fit pod {pod.id} of {pod.chip}")
        if s.region != pod.region:
            v("slices", s.id, f"in region {s.region} but on pod {pod.id} of {pod.region}")
        if (s.role == "warm") != (s.tier is None):
            v("slices", s.id, "a warm slice has no tier; every other slice has one")
        if not pod.up:
            v("slices", s.id, f"on pod {pod.id}, which is down")
        if s.first_chip < 0 or s.first_chip + s.chips > pod.chips:
            v("span", s.id, f"chips {s.first_chip}..{s.first_chip + s.chips - 1} leave pod {pod.id} ({pod.chips} chips)")
        if s.chips >= pod.chips_per_vm and (s.first_chip % pod.chips_per_vm or s.chips % pod.chips_per_vm):
            v("vms", s.id, "does not occupy whole VMs")
        want = [f"{pod.id}/vm-{i:03d}" for i in vm_range(s.first_chip, s.chips, pod.chips_per_vm)]
        if s.vms != want:
            v("vms", s.id, f"VMs {s.vms} do not match chips {s.first_chip}..{s.first_chip + s.chips - 1} ({want})")
        used.setdefault(s.pod, []).append((s.first_chip, s.first_chip + s.chips, s.id))
        key = (s.region, s.tier, s.role, s.slice)
        placed[key] = placed.get(key, 0) + 1
    for pod_id, spans in used.items():
        spans.sort()
        total = sum(b - a for a, b, _ in spans)
        if total > pods[pod_id].chips:
            v("capacity", pod_id, f"{total} chips of slices in a {pods[pod_id].chips}-chip pod")
        for (a1, b1, i1), (a2, b2, i2) in zip(spans, spans[1:]):
            if a2 < b1:
                v("overlap", pod_id, f"{i1} and {i2} share chips {a2}..{min(b1, b2) - 1}")
        if pods[pod_id].chips_used != total:
            v("capacity", pod_id, f"chips_used says {pods[pod_id].chips_used}, the slices occupy {total}")
    if plan is not None and counts:
        want_counts = {(p.region, p.tier, p.role, p.slice): p.slices for p in plan.pools}
        want_counts.update({(w.region, None, "warm", w.slice): w.slices for w in plan.warm_pool if w.slices > 0})
        for key in sorted(set(want_counts) | set(placed), key=str):
            if want_counts.get(key, 0) != placed.get(key, 0):
                v("count", "/".join(str(x) for x in key if x is not None), f"{placed.get(key, 0)} placed, the plan has {want_counts.get(key, 0)}")
    # routing
    role_in = {}
    for s in pl.slices:
        role_in.setdefault((s.pod, s.tier, s.role), 0)
        role_in[(s.pod, s.tier, s.role)] += 1
    sums: dict[tuple, float] = {}
    cross = total = 0.0
    for w in pl.routing:
        if role_in.get((w.to_pod, w.tier, "decode"), 0) == 0:
            v("routing", f"{w.from_pod}->{w.to_pod}", f"sends tier {w.tier} KV to a pod with no decode slice of the tier")
        if role_in.get((w.from_pod, w.tier, "prefill"), 0) == 0:
            v("routing", f"{w.from_pod}->{w.to_pod}", f"routes tier {w.tier} from a pod with no prefill slice of the tier")
        sums[(w.from_pod, w.tier)] = sums.get((w.from_pod, w.tier), 0.0) + w.share
        total += w.rps
        cross += w.rps if w.from_pod != w.to_pod else 0.0
    for (pod, tier), sh in sums.items():
        if abs(sh - 1.0) > 1e-6:
            v("routing", f"{pod}/{tier}", f"shares sum to {sh:.6f}, not 1")
    for (pod, tier, role), n in role_in.items():
        if role == "prefill" and (pod, tier) not in sums:
            v("routing", f"{pod}/{tier}", "prefill slices with no routing")
    if total > 0 and abs(cross / total - pl.dcn_share) > 1e-6:
        v("dcn", "dcn_share", f"says {pl.dcn_share:.6f}, the routing gives {cross / total:.6f}")
    # the summary (pods used, fragmentation, per-tier DCN shares, the demand its routing carries): the export's hash covers it
    out += summary_problems(inst, plan if counts else None, pl)
    if plan is not None and counts:
        # a plan sized with its pods: every scenario's routing, DCN shares, egress and TTFT
        out += scenario_problems(inst, plan, pl)
    return out


def current_placement_problems(inst: Instance, current: Placement) -> list[Violation]:
    """Whether ``current``, the placement in force, can be re-placed onto a plan of
    ``inst`` (``fleetplan place PLAN --current``).

    A placement made for an earlier instance (another hash: the plan re-solved for a
    grown load, new priors or a fitted workload) is accepted when it describes the same
    fleet -- what is compared:

    * regions: the placement's regions (its demand rows list every region of the
      instance it was made for) are the instance's;
    * pods: every pod of the placement is one the instance has -- id 'REGION/CHIP/NN'
      of a region and chip type it lists, NN below its installed + available new pods of
      that chip there -- with the instance's chips per pod and chips per VM.

    Slice counts, shapes, tiers and traffic may differ (re-placing is for that), and so
    may the pods in use: the new plan may buy pods the placement does not have yet, or
    give up some (their slices move). The placement is then checked on its own (chips,
    VMs, overlaps, routing: :func:`verify_placement` with ``counts`` False).

    Returns the problems (empty: it can be re-placed), the region and pod comparison
    first; when that fails nothing else is reported.
    """
    out: list[Violation] = []
    old, new = regions_of(current), set(inst.regions)
    made_for = f"made for instance '{current.instance_name}' ({current.instance_hash[:12]}...)"
    if old != new:
        out.append(Violation(check="instance", where="regions",
                             message=f"the current placement was {made_for} with regions {', '.join(sorted(old)) or 'none'}; this plan's "
                                     f"instance has {', '.join(sorted(new))}: another fleet, not a changed plan -- place from scratch "
                                     "(drop --current)"))
    for p in current.pods:
        prefix, _, nn = p.id.rpartition("/")
        inv = inst.regions[p.region].pods.get(p.chip) if p.region in inst.regions else None
        chip = inst.chips.get(p.chip)
        if prefix != f"{p.region}/{p.chip}" or not nn.isdigit():
            why = f"is not a pod id REGION/CHIP/NN of region {p.region} and chip {p.chip}"
        elif chip is None or inv is None:
            why = f"is a {p.chip} pod in {p.region}; this plan's instance has no {p.chip} pods there"
        elif int(nn) >= inv.installed + inv.available_new:
            why = (f"is pod {int(nn)} (0-based) of {p.chip} in {p.region}; this plan's instance has {inv.installed} installed + "
                   f"{inv.available_new} available there")
        elif (p.chips, p.chips_per_vm) != (chip.chips_per_pod, chip.chips_per_vm):
            why = (f"has {p.chips} chips and {p.chips_per_vm} chips per VM; this plan's instance has {chip.chips_per_pod} and "
                   f"{chip.chips_per_vm} for {p.chip}")
        else:
            continue
        out.append(Violation(check="instance", where=p.id, message=f"the current placement was {made_for}; its pod {p.id} {why} -- "
                                                                   "not the same pods: place from scratch (drop --current)"))
    return out or verify_placement(inst, None, current, counts=False)
