"""A placement's summary fields -- ``demand``, ``dcn_share_by_tier``, ``pods_used`` and
``fragmented_free_chips`` -- from its plan and its own rows: what the placer writes
(:func:`fleetplan.placement.place`, the online placer) and what the independent check
(:func:`fleetplan.placement.check.verify_placement`) recomputes, so a file whose summary
was edited is refused naming the field before an export vouches for it (the export puts
the placement's hash in every object's labels, so it must not vouch for edited figures).
Plan and instance data only: no placer code, no model."""

from __future__ import annotations

from fleetplan.instance.schema import Instance
from fleetplan.placement.document import TierDemand
from fleetplan.results.plan import Plan, Violation

__all__ = ["tier_demand", "placement_demand", "fragmented_free_chips", "largest_shapes", "summary_problems"]

#: Relative tolerance of a recomputed demand rate or decode rate (req/s): the placement's
#: other checks' (:data:`fleetplan.placement.scenario_check.REL`)
REL = 1e-6
#: A DCN share the summary states against its routing rows (fraction), as the placement's
#: ``dcn_share`` is checked; plus half a unit of the rows' 6 decimals of req/s each
SHARE_TOL = 1e-6
ROW_RPS_ERROR = 5e-7


def _unserved(plan: Plan, sc, region: str, tier: str, o: float) -> float:
    """Requests/s of a region-tier scenario ``sc`` not served end to end: the largest of its
    roles' shortfalls in requests (decode's are output tokens/s), as the plan's own
    ``unserved_rps`` sums them."""
    return max([p.shortfall / (o if p.role == "decode" else 1.0) for p in sc.pools if (p.region, p.tier) == (region, tier)] + [0.0])


def tier_demand(inst: Instance, plan: Plan) -> list:
    """Each region-tier's requests/s at its normal peak and what a decode slice takes
    (:class:`~fleetplan.placement.document.TierDemand`, one per region x tier of the
    instance). A region with no traffic of its own (peak_rps 0) carries only what it
    absorbs in a region loss: its demand is the most its prefill pool receives in the
    plan's scenarios, so its slices are placed and routed for that traffic. A shortfall
    plan (some load not served end to end) carries only what it serves: the demand less
    its unserved requests, and never more than its decode slices take -- the KV its
    prefill slices send is the KV of requests the fleet serves."""
    from fleetplan.perf.pools import tier_mixes

    tms = {t.name: t for t in tier_mixes(inst)}
    o = inst.workload.output_tokens
    normal = next((sc for sc in plan.scenarios if sc.kind == "normal"), None)
    out = []
    for r in sorted(inst.regions):
        peak = inst.regions[r].peak_rps * max(inst.regions[r].hourly_load)
        for t, tm in tms.items():
            dec = {p.slice: p.decode_normal.tokens_per_s_per_slice / o for p in plan.pools
                   if (p.region, p.tier, p.role) == (r, t, "decode") and p.decode_normal is not None}
            rps = peak * tm.tier_share
            short = 0.0
            if rps > 0:
                short = _unserved(plan, normal, r, t, o) if normal is not None else 0.0
                rps -= short
            else:
                served = [(pl.arrivals_rps - _unserved(plan, sc, r, t, o), _unserved(plan, sc, r, t, o)) for sc in plan.scenarios
                          for pl in sc.pools if (pl.region, pl.tier) == (r, t) and pl.role in ("prefill", "replica")]
                rps, short = max(served, default=(0.0, 0.0))
            if short > 0 and dec:
                # the shortfall is recorded rounded (6 significant figures of the whole demand): what
                # the decode slices take bounds it exactly
                cap = sum(p.slices * dec[p.slice] for p in plan.pools if (p.region, p.tier, p.role) == (r, t, "decode") and p.slice in dec)
                rps = min(rps, cap)
            out.append(TierDemand(region=r, tier=t, rps=max(rps, 0.0), decode_rps_per_slice=dec))
    return out


def placement_demand(inst: Instance, plan: Plan) -> list:
    """The ``demand`` rows of a placement of ``plan`` (:func:`tier_demand`); for a plan sized
    with its pods the normal routing carries the plan's own served load (the demand margin
    included): each region-tier's normal prefill record's served requests/s (net of
    shedding and of its shortfall), to 6 decimals, where it serves any."""
    out = tier_demand(inst, plan)
    if plan.pods is None:
        return out
    from fleetplan.results.loads import served_rps

    normal = next((sc for sc in plan.scenarios if sc.kind == "normal"), None)
    served: dict[tuple[str, str], float] = {}
    for pl in normal.pools if normal is not None else []:
        if pl.role == "prefill" and pl.slices > 0:
            own, div = served_rps(pl)
            if own + div > 0:
                served[(pl.region, pl.tier)] = own + div
    return [td.model_copy(update={"rps": round(served.get((td.region, td.tier), td.rps), 6)}) for td in out]


def largest_shapes(inst: Instance) -> dict[str, int]:
    """Chip type -> its largest slice shape (chips): what ``fragmented_free_chips`` measures against."""
    return {k: max(c.slice_shapes) for k, c in inst.chips.items()}


def fragmented_free_chips(pods: list, slices: list, largest: dict[str, int]) -> int:
    """Free chips in used pods (up) that are not part of an aligned free block of the chip
    type's largest slice shape (``largest``: chip type -> chips, :func:`largest_shapes`)
    (count)."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for s in slices:
        spans.setdefault(s.pod, []).append((s.first_chip, s.chips))
    frag = 0
    for p in pods:
        if p.id not in spans or not p.up:
            continue
        free = [True] * p.chips
        for a, n in spans[p.id]:
            for c in range(max(a, 0), min(a + n, p.chips)):
                free[c] = False
        big = largest.get(p.chip, p.chips)
        usable = sum(big for off in range(0, p.chips - big + 1, big) if all(free[off:off + big]))
        frag += sum(free) - usable
    return frag


def summary_problems(inst: Instance, plan: Plan | None, pl) -> list[Violation]:
    """The summary fields of placement ``pl`` recomputed and compared (empty: they hold):

    * ``pods_used``: its pods that hold a slice (chips_used > 0, itself checked against the slices);
    * ``fragmented_free_chips``: :func:`fragmented_free_chips` of its pods and slices at the
      instance's largest slice shapes;
    * ``dcn_share_by_tier``: per 'region/tier' the share of its routing rows' requests/s that
      leave their prefill pod (0 for a tier with no rows; every routed tier listed, and only
      region-tiers of the instance);
    * ``demand`` (with ``plan``): :func:`placement_demand` row by row, the decode rates too.
    """
    from fleetplan.perf.pools import tier_mixes

    out: list[Violation] = []

    def v(where, msg):
        out.append(Violation(check="summary", where=where, message=msg + ": the placement was edited after it was written "
                                                                         "(place the plan again rather than edit it)"))

    used = sum(1 for p in pl.pods if p.chips_used > 0)
    if pl.pods_used != used:
        v("pods_used", f"says {pl.pods_used}, its pods holding slices are {used}")
    frag = fragmented_free_chips(pl.pods, pl.slices, largest_shapes(inst))
    if pl.fragmented_free_chips != frag:
        v("fragmented_free_chips", f"says {pl.fragmented_free_chips}, its pods' free chips outside aligned blocks of the largest slice "
                                   f"shape are {frag}")
    tot: dict[str, list[float]] = {}
    for w in pl.routing:
        acc = tot.setdefault(f"{w.region}/{w.tier}", [0.0, 0.0, 0])
        acc[0] += w.rps if w.from_pod != w.to_pod else 0.0
        acc[1] += w.rps
        acc[2] += 1
    known = {f"{r}/{t.name}" for r in inst.regions for t in tier_mixes(inst)}
    for k in sorted(set(tot) | set(pl.dcn_share_by_tier)):
        x, n, rows = tot.get(k, (0.0, 0.0, 0))
        want = x / n if n > 0 else 0.0
        have = pl.dcn_share_by_tier.get(k)
        # the shares are written to 9 decimals, the rows' requests/s to 6 (their rounding, over the tier's rate)
        tol = SHARE_TOL + (ROW_RPS_ERROR * rows / n if n > 0 else 0.0)
        if k not in known:
            v(f"dcn_share_by_tier.{k}", f"{k!r} is not a region/tier of the instance")
        elif have is None:
            v(f"dcn_share_by_tier.{k}", f"missing; its routing rows send {want:.6f} of their requests over the DCN")
        elif abs(have - want) > tol:
            v(f"dcn_share_by_tier.{k}", f"says {have:.6f}, its routing rows send {want:.6f} of their requests over the DCN")
    if plan is not None:
        want_rows = {(d.region, d.tier): d for d in placement_demand(inst, plan)}
        have_rows = {}
        for i, d in enumerate(pl.demand):
            have_rows[(d.region, d.tier)] = (i, d)
        for key in sorted(set(want_rows) | set(have_rows)):
            if key not in have_rows or key not in want_rows:
                v("demand", f"{'/'.join(key)}: {'missing' if key not in have_rows else 'not a region/tier of the instance'}")
                continue
            i, d = have_rows[key]
            w = want_rows[key]
            if abs(d.rps - w.rps) > REL * max(abs(w.rps), 1.0):
                v(f"demand[{i}].rps", f"{d.region}/{d.tier} says {d.rps:,.6g} req/s; the plan gives {w.rps:,.6g}")
            rates = set(d.decode_rps_per_slice) | set(w.decode_rps_per_slice)
            if any(abs(d.decode_rps_per_slice.get(s, -1.0) - w.decode_rps_per_slice.get(s, -1.0)) > REL * max(w.decode_rps_per_slice.get(s, 1.0), 1.0)
                   for s in rates):
                v(f"demand[{i}].decode_rps_per_slice", f"{d.region}/{d.tier} says {d.decode_rps_per_slice}; the plan's decode operating "
                                                       f"points give {w.decode_rps_per_slice}")
    return out
