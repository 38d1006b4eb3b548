"""What the simulator runs: one region's pools of a plan in one scenario, as the plan
sized them, scaled to a proportional slice when asked.

:func:`tier_setups` reads the plan (pools, operating points, speculation switch, the
scenario's pool loads: own and diverted arrivals, clamp, shed, warm slices) and the
instance (tier mixes, classes and their SLOs, hit rates, priors), and, with a placement,
which pod every slice lives in and where each prefill pod sends its KV.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from fleetplan.errors import InputError, Problem
from fleetplan.instance.schema import Instance
from fleetplan.perf.pools import TierMix, tier_mixes
from fleetplan.perf.roofline import SliceSpec
from fleetplan.results.evaluate import Context
from fleetplan.results.modes import plan_modes
from fleetplan.results.plan import OperatingPoint, Plan, PoolLoad, ScenarioResult
from fleetplan.sim.dcn import UNPLACED, DcnSetup, placed_pods, tier_dcn

__all__ = ["ClassSpec", "DecodePoolSetup", "TierSetup", "class_specs", "pick_scenario", "tier_setups", "scaled"]


@dataclass(frozen=True)
class ClassSpec:
    """A traffic class as the simulator needs it: share (of the tier's requests),
    acceptance (``alpha``: the instance's number, read as ``acceptance_kind`` and
    ``acceptance_at_k`` say), whether it may be shed, its TTFT and TPOT limits (ms; None
    when it has no such SLO; the loosest when it has several percentiles) and every SLO
    as (metric, percentile, limit_ms)."""

    name: str
    share: float
    alpha: float
    sheddable: bool
    ttft_limit_ms: float | None
    tpot_limit_ms: float | None
    slos: tuple[tuple[str, float, float], ...]
    acceptance_kind: str = "rate"
    acceptance_at_k: int | None = None

    def token_probability(self, k: int) -> float:
        """Per-token acceptance probability at draft length k (the instance's number read as
        its kind says: :func:`fleetplan.perf.speculation.class_token_probability`)."""
        from fleetplan.perf.speculation import class_token_probability

        return class_token_probability(self.alpha, self.acceptance_kind, self.acceptance_at_k, k)


def class_specs(inst: Instance, tier: str) -> list[ClassSpec]:
    """The instance's classes, sorted by name, with the tier's SLO overrides applied
    (an override replaces the class's SLO of that metric, and adds it to classes that
    have SLOs but not that metric -- as :func:`fleetplan.perf.pools.tier_slos`)."""
    t = next((x for x in inst.workload.tiers if x.name == tier), None)
    over = {s.metric: s for s in t.slo_overrides} if t is not None else {}
    out = []
    for name in sorted(inst.workload.classes):
        c = inst.workload.classes[name]
        slos = []
        if c.slos:
            mine = {s.metric: s for s in c.slos}
            for s in list(c.slos) + [o for m, o in over.items() if m not in mine]:
                s = over.get(s.metric, s)
                slos.append((s.metric, float(s.percentile), float(s.limit_ms)))
        lim = {m: max(x[2] for x in slos if x[0] == m) for m in ("ttft", "tpot") if any(x[0] == m for x in slos)}
        out.append(ClassSpec(name, c.share, c.spec_acceptance, c.sheddable, lim.get("ttft"), lim.get("tpot"), tuple(slos),
                             c.spec_acceptance_kind, c.spec_acceptance_at_k))
    return out


@dataclass(frozen=True)
class DecodePoolSetup:
    """One decode pool (one slice shape) of a region-tier as simulated: shape, slices in
    the plan and simulated, its operating point in this scenario (batch cap, draft
    length; ``plan_op`` the plan's record of it), the speculation switch-off batch,
    which classes draft, and each simulated slice's pod (empty without a placement)."""

    label: str
    slice: SliceSpec
    slices_planned: int
    slices: int
    batch_cap: int
    draft_tokens: int
    switch_off_batch: int | None
    speculating: tuple[str, ...]
    plan_op: OperatingPoint
    pods: tuple[str, ...] = ()


@dataclass(frozen=True)
class TierSetup:
    """A region-tier's pools in one scenario, scaled by ``scale``.

    Rates are of the simulated slice (requests/s): own users, diverted users before the
    admission clamp, and the probability a sheddable-class request of each source is shed.
    ``prefill`` / ``replica``: (label, SliceSpec, slices planned, slices simulated,
    pods), a replica's with its schedule label last; ``decode``: its pools. ``loads``: the plan's pool loads in this scenario by
    role (its full-scale predictions). With a placement: ``route`` prefill pod -> [(decode
    pod, share)] and ``dcn`` the routing's source and the DCN shares it is set beside
    (:class:`fleetplan.sim.dcn.DcnSetup`)."""

    region: str
    tier: str
    mode: str
    scenario: ScenarioResult
    failover: bool
    mix: TierMix
    classes: list[ClassSpec]
    own_rps: float
    div_rps: float
    own_hit: float
    div_hit: float
    clamp_min_tokens: int | None
    shed_prob_own: float
    shed_prob_div: float
    scale: float
    prefill: tuple | None
    decode: list[DecodePoolSetup]
    replica: tuple | None
    loads: dict[str, PoolLoad]
    route: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    dcn: DcnSetup | None = None

    @property
    def load_rps(self) -> float:
        """Requests/s offered to the gateway (own + diverted, before clamp and shed)."""
        return self.own_rps + self.div_rps


def scaled(n: int, scale: float) -> int:
    """Slices of a pool simulated at ``scale``: round(scale x n), at least 1."""
    return max(1, int(math.floor(scale * n + 0.5)))


_LOSS = re.compile(r"^lose:(?P<region>[^@]+)@(?P<hour>\d{1,2})$")


def pick_scenario(inst: Instance, plan: Plan, name: str, region: str) -> tuple[ScenarioResult, list[str]]:
    """The scenario ``name`` to simulate ``region`` in, and notes on how it was built: one
    of the plan's, or -- a region loss at an hour the plan does not list,
    ``lose:X@HH`` -- built by :func:`fleetplan.whatif.loss_scenario` (the instance's loads
    that hour, the plan's failover routing held, the what-if's mitigations).
    Raises InputError naming --scenario (unknown name, a loss of ``region`` itself)."""
    notes: list[str] = []
    sc = next((s for s in plan.scenarios if s.name == name), None)
    m = _LOSS.match(name) if sc is None else None
    lost = sc.lost_region if sc is not None else (m["region"] if m is not None else None)
    if sc is None and m is None:
        names = [s.name for s in plan.scenarios if s.lost_region != region]
        have = f"for {region} it has {', '.join(names)}, " if names else ""
        raise InputError("--scenario", [Problem("--scenario", f"{name!r} is not a scenario of the plan; {have}'sizing', or any region loss "
                                                              "lose:REGION@HH (HH 0-23 UTC; an hour the plan does not list is built from "
                                                              "the what-if).")])
    if lost == region:
        raise InputError("--scenario", [Problem("--scenario", f"{name!r} loses {region} itself; simulate a survivor "
                                                              f"({', '.join(sorted(inst.regions[region].failover_to)) or 'it fails over to none'}).")])
    if sc is None:
        from fleetplan.whatif import loss_scenario

        sc, notes = loss_scenario(inst, plan, m["region"], int(m["hour"]))
    return sc, notes


def tier_setups(inst: Instance, plan: Plan, region: str, tiers: list[str] | None = None, scenario: str = "normal", scale: float = 1.0,
                placement=None, required: bool = True, kv_routing: str = "placement") -> list[TierSetup]:
    """The region-tiers to simulate (every tier of ``region`` with a pool, or ``tiers``).
    A tier without traffic in the scenario is an error when ``required``, else left out.
    With a placement, each slice's pod (warm slices that join included) and the KV routing
    of ``kv_routing`` ('placement' or 'rule': :mod:`fleetplan.sim.dcn`).

    Raises InputError naming --region, --tier or --scenario when they are not in the plan,
    and --scale outside (0, 1]."""
    modes = plan_modes(inst, plan)
    if region not in inst.regions:
        raise InputError("--region", [Problem("--region", f"unknown region {region!r}; the plan's instance has {', '.join(sorted(inst.regions))}.")])
    if not (0.0 < scale <= 1.0) or not math.isfinite(scale):
        raise InputError("--scale", [Problem("--scale", "must be in (0, 1]: the fraction of the region's slices and load to simulate.", repr(scale))])
    sc, sc_notes = pick_scenario(inst, plan, scenario, region)
    ctx = Context(inst)
    mixes = {t.name: t for t in tier_mixes(inst)}
    have = sorted({p.tier for p in plan.pools if p.region == region} | {p.tier for p in sc.pools if p.region == region and p.slices > 0})
    if tiers:
        bad = [t for t in tiers if t not in mixes]
        if bad:
            raise InputError("--tier", [Problem("--tier", f"unknown tier {bad[0]!r}; the instance has {', '.join(mixes)}.")])
        empty = [t for t in tiers if t not in have]
        if empty:
            raise InputError("--tier", [Problem("--tier", f"tier {empty[0]!r} has no pool in {region} in scenario {sc.name}.")])
        want = list(tiers)
    else:
        want = [t for t in mixes if t in have]
    if not want:
        raise InputError("--region", [Problem("--region", f"{region} has no pool in the plan.")])
    fail = sc.kind == "loss"
    fo = inst.failover
    out = []
    for t in want:
        tm = mixes[t]
        loads = {p.role: p for p in sc.pools if p.region == region and p.tier == t}
        first = loads.get("prefill") or loads.get("replica")
        if first is None:
            raise InputError("--tier", [Problem("--tier", f"tier {t!r} has no load in {region} in scenario {sc.name}.")])
        for role, pl in loads.items():
            for fld in ("arrivals_rps", "diverted_rps", "clamped_rps", "shed_rps", "shed_diverted_rps"):
                v = getattr(pl, fld)
                if not math.isfinite(v) or v < 0:
                    raise InputError("plan", [Problem(f"scenarios[{sc.name}].pools[{region},{t},{role}].{fld}", "must be a finite rate >= 0 "
                                                      "(requests/s); re-solve the plan rather than edit it.", repr(v))])
        if first.arrivals_rps <= 0:
            if required:
                raise InputError("--tier", [Problem("--tier", f"tier {t!r} has no traffic in {region} in scenario {sc.name} (0 requests/s): "
                                                              "nothing to simulate.")])
            continue
        div_net = first.diverted_rps
        own = max(first.arrivals_rps - div_net, 0.0)
        clamp_share = ctx.clamped_share[t] if fail else 0.0
        div_before = div_net + first.clamped_rps
        srcs = ctx.sources(t, fail, max(own, 1e-12), div_net)
        own_hit = srcs[0].hit_rate
        div_hit = srcs[1].hit_rate if len(srcs) > 1 else inst.failover.diverted_hit_rate
        batch = ctx.batch_share
        shed_div = first.shed_diverted_rps
        shed_own = max(first.shed_rps - shed_div, 0.0)
        p_own = min(shed_own / (own * batch), 1.0) if own > 0 and batch > 0 else 0.0
        p_div = min(shed_div / (div_net * batch), 1.0) if div_net > 0 and batch > 0 else 0.0
        notes = list(sc_notes)
        pools = [p for p in plan.pools if p.region == region and p.tier == t]
        pre = rep = None
        decs: list[DecodePoolSetup] = []
        mode = modes[(region, t)]  # the plan's serving mode of this region x tier
        dcn = None
        if mode == "disaggregated":
            pl = loads.get("prefill")
            dl = loads.get("decode")
            dpools = [p for p in pools if p.role == "decode"]
            pods = None
            if placement is not None:
                pods, pod_notes = placed_pods(placement, sc, region, t, pl.slice if pl is not None else None, [p.slice for p in dpools])
                notes += pod_notes
            if pl is not None and pl.slices > 0 and pl.slice is not None:
                n = scaled(pl.slices, scale)
                pre = (pl.slice, ctx.slice(pl.slice), pl.slices, n, (pods.prefill + (UNPLACED,) * n)[:n] if pods is not None else ())
                if pl.warm_slices:
                    notes.append(f"prefill: {pl.warm_slices} warm-pool slice(s) joined in this scenario, simulated as {pl.slice} like the plan's "
                                 "evaluation does" + (" (in the pods of the placement's warm slices)" if pods is not None else ""))
            warm = dl.warm_slices if dl is not None else 0
            for i, p in enumerate(dpools):
                op = p.decode_failover if fail else p.decode_normal
                if op is None:
                    continue
                # warm slices join the pool of their shape (the load record's slice; mixed pools: serving.mixed_shapes)
                n_plan = p.slices + (warm if (p.slice == dl.slice if (warm and dl is not None and dl.slice) else i == 0) else 0)
                n = scaled(n_plan, scale)
                sp = p.speculation
                decs.append(DecodePoolSetup(p.slice, ctx.slice(p.slice), n_plan, n, op.batch_cap, op.draft_tokens,
                                            sp.switch_off_batch if sp else None, tuple(sp.speculating_classes) if sp else (), op,
                                            pods.decode.get(p.slice, ())[:n] if pods is not None else ()))
            if not decs and dl is not None and dl.slices > 0 and dl.slice is not None:
                notes.append("decode: only warm slices serve this region-tier in this scenario; the simulator needs a planned decode pool "
                             "for their operating point and leaves decode out")
            if pods is not None and pre is not None and decs:
                dcn = tier_dcn(ctx, plan, placement, sc, region, t, pods, kv_routing)
                notes += dcn.notes
        else:
            rl = loads.get("replica")
            if len({p.slice for p in pools if p.role == "replica"}) > 1:
                raise InputError("--region", [Problem("--region", f"{region}/{t}: the plan's replica pool mixes slice shapes "
                                                      f"({', '.join(sorted(p.slice for p in pools if p.role == 'replica'))}; "
                                                      "serving.mixed_shapes): the simulator runs one replica shape per region x tier. "
                                                      "Not supported yet; simulate a region that runs one shape.")])
            if rl is not None and rl.slices > 0 and rl.slice is not None:
                n = scaled(rl.slices, scale)
                sched = next((p.schedule for p in pools if p.role == "replica" and p.slice == rl.slice), None) or "prefill-first"
                reps = tuple(sorted((s for s in placement.slices if (s.region, s.tier, s.role) == (region, t, "replica")), key=lambda s: s.id)) \
                    if placement is not None else ()
                rep = (rl.slice, ctx.slice(rl.slice), rl.slices, n, tuple(s.pod for s in reps)[:n], sched)
        route = dcn.routes if dcn is not None else {}
        own_s, div_s = own * scale, div_before * scale
        out.append(TierSetup(region, t, mode, sc, fail, tm, class_specs(inst, t), own_s, div_s, own_hit, div_hit,
                             fo.admission_clamp.min_input_tokens if (fail and fo.admission_clamp.enabled and clamp_share > 0) else None,
                             p_own, p_div, scale, pre, decs, rep, loads, route, notes, dcn))
    if not out and required:
        raise InputError("--scenario", [Problem("--scenario", f"no tier of {region} has traffic in scenario {sc.name}: nothing to simulate.")])
    return out

