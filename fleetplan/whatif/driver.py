"""``whatif(instance, plan, event)``: hold a plan's installed fleet fixed, lose regions
and/or pods at an hour, re-optimise what operations can change (routing, clamp,
shedding, warm pool; decode rides to its SLO knee) and account for every slice.

The model is :mod:`fleetplan.models.whatif` (Pyomo, HiGHS), solved lexicographically;
the numbers reported come from :mod:`fleetplan.whatif.accounting`, which recomputes every
pool with :mod:`fleetplan.perf` at the model's decisions (never from the model's tables).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from fleetplan.errors import InputError, Problem
from fleetplan.instance.derived import FAILOVER, best_decode_op, mix_capacity_curve, replica_rps_for_mix
from fleetplan.perf.colocated import Schedule
from fleetplan.instance.schema import Instance
from fleetplan.perf.pools import prefill_profile, slice_specs, split_sources, tier_mixes
from fleetplan.results.modes import plan_modes, roles_at
from fleetplan.results.plan import Plan
from fleetplan.results.verify import check_plan_contents, check_plan_matches
from fleetplan.whatif.dcn import check_placement, placement_dcn
from fleetplan.whatif.events import HELD, Event, check_one_shape, held_shares, hit_rates, region_phase

__all__ = ["Decisions", "WhatIfUnsolved", "fleet_after_loss", "prepare", "decide", "whatif", "loss_scenario"]

MAX_MIX_ITERATIONS = 6


@dataclass
class Decisions:
    """What the what-if model decided (req/s, slices; shares in [0, 1])."""

    routes: dict[tuple[str, str, str], float]  # (lost, survivor, tier) -> share
    clamp_rps: dict[tuple[str, str], float]  # (survivor, tier)
    shed_rps: dict[tuple[str, str, str], float]  # (survivor, tier, source)
    warm: dict[tuple[str, str, str], int]  # (survivor, tier, role) -> slices joined
    residual_prefill_rps: dict[tuple[str, str, str], float]  # (survivor, tier, source): rejected req/s
    residual_decode_tokens_per_s: dict[tuple[str, str], float]
    dropped_rps: float
    model_unserved_rps: float  # the model's residual counted once per region-tier (req/s)
    mix_iterations: int
    solve_s: float
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- preparation


def fleet_after_loss(inst: Instance, plan: Plan, event: Event) -> tuple[dict, dict, dict]:
    """Slices in service after the event.

    Returns ({(region, tier, role): (shape, slices)}, {(region, shape): warm slices},
    {(region, tier, role): slices lost}). Without a placement (pods are not yet assigned
    slices), a pod loss takes the fullest pods: min(pods x chips per pod, chips in use)
    chips, drawn from every pool and the warm pool of that chip type in proportion to
    their chips (largest remainder, whole slices).
    """
    pools = {(p.region, p.tier, p.role): (p.slice, p.slices) for p in plan.pools}
    warm = {(w.region, w.slice): w.slices for w in plan.warm_pool}
    lost_slices: dict[tuple, int] = {}
    for r, k, n_pods in event.lost_pods:
        chips_per_pod = inst.chips[k].chips_per_pod
        items = [(("pool",) + key, sh, n) for key, (sh, n) in pools.items() if key[0] == r and sh.rpartition("x")[0] == k]
        items += [(("warm", r, sh), sh, n) for (rr, sh), n in warm.items() if rr == r and sh.rpartition("x")[0] == k]
        size = {it[0]: int(it[1].rpartition("x")[2]) for it in items}
        used = sum(size[key] * n for key, _, n in items)
        target = min(n_pods * chips_per_pod, used)
        frac = target / used if used else 0.0
        take = {key: int(math.floor(n * frac)) for key, _, n in items}
        left = target - sum(size[key] * v for key, v in take.items())
        order = sorted(items, key=lambda it: (-(it[2] * frac - take[it[0]]), it[0]))
        for key, _, n in order:
            if left <= 0:
                break
            if take[key] < n and size[key] <= left:  # never more chips than the lost pods hold
                take[key] += 1
                left -= size[key]
        for key, v in take.items():
            if key[0] == "pool":
                sh, n = pools[key[1:]]
                pools[key[1:]] = (sh, n - v)
                lost_slices[key[1:]] = v
            else:
                warm[key[1:]] = warm[key[1:]] - v
    return pools, warm, lost_slices


def prepare(inst: Instance, plan: Plan, event: Event):
    """The what-if model data for ``event`` (curves still to be built for a mix)."""
    from fleetplan.models.whatif import WhatIfData, WhatIfPool

    regions = sorted(inst.regions)
    survivors = [r for r in regions if r not in event.lost]
    tms = {t.name: t for t in tier_mixes(inst)}
    h = event.hour
    pools, warm, lost_slices = fleet_after_loss(inst, plan, event)
    clamp = inst.failover.admission_clamp
    absorbers = {x: sorted(a for a in inst.regions[x].failover_to if a in survivors) for x in event.lost}
    lost_rps = {(x, t): inst.regions[x].peak_rps * inst.regions[x].hourly_load[h] * tm.tier_share for x in event.lost for t, tm in tms.items()}
    own_total = {r: inst.regions[r].peak_rps * inst.regions[r].hourly_load[h] for r in survivors}
    reference = {}
    for x in event.lost:
        tot = sum(own_total[a] for a in absorbers[x])
        for a in absorbers[x]:
            reference[(x, a)] = own_total[a] / tot if tot > 0 else 1.0 / len(absorbers[x])
    modes = plan_modes(inst, plan)  # each survivor region x tier runs the plan's mode there
    schedules = {(pl.region, pl.tier): pl.schedule for pl in plan.pools if pl.role == "replica" and pl.schedule}
    wp = {}
    for r in survivors:
        for t, tm in tms.items():
            roles = roles_at(modes, r, t)
            front = roles[0]
            own = inst.regions[r].peak_rps * inst.regions[r].hourly_load[h] * tm.tier_share
            sh, n = pools.get((r, t, front), (None, 0))
            n_lost = lost_slices.get((r, t, front), 0)
            phi = n_lost / (n + n_lost) if (event.phase == "transient" and n + n_lost > 0) else 0.0
            kappa = float(np.sum(tm.shares[tm.tokens >= clamp.min_input_tokens])) if clamp.enabled else 0.0
            slices = {ro: pools.get((r, t, ro), (None, 0)) for ro in roles}
            wmax = {ro: warm.get((r, slices[ro][0]), 0) for ro in roles if slices[ro][0] is not None}
            wp[(r, t)] = WhatIfPool(r, t, slices, wmax, own * (1 - phi), own * phi, kappa, schedule=schedules.get((r, t)))
    d = WhatIfData({k: v for k, v in modes.items() if k[0] in survivors}, list(event.lost), survivors, list(tms), absorbers, lost_rps, reference, wp, warm,
                   sum(c.share for c in inst.workload.classes.values() if c.sheddable), inst.workload.output_tokens)
    specs = {sl.label: sl for sl in slice_specs(inst)}
    for (r, t), p in wp.items():
        tm = tms[t]
        hit_own, hit_cold = hit_rates(inst, tm.hit_rate, region_phase(inst, event, r))
        sh = p.slices[d.front(r, t)][0]
        if sh is None:
            continue
        sl = specs[sh]
        pinst = prefill_instance(inst)
        for q in d.sources(r, t):
            src = split_sources({q: 1.0}, hit_own, hit_cold, clamp.min_input_tokens, p.clamp_share)
            p.service_ms[q] = prefill_profile(pinst, tm, sl, src, [99.0]).mean_ms if src else 0.0
        if d.mode_of(r, t) == "disaggregated":
            dsh = p.slices["decode"][0]
            if dsh is not None:
                p.decode_tokens_per_s = _failover_decode_tokens_per_s(inst, tm, specs[dsh])
    return d, tms, specs


#: (id of the instance, tier, slice label) -> (instance, tokens/s): the failover decode
#: operating point of a tier on a shape depends on the instance alone, not on the event,
#: so the events of a run (every hour of a loss, a report's cascade) search it once. The
#: instance is kept with its value so that a recycled id is never taken for it.
_FAILOVER_DECODE: dict[tuple[int, str, str], tuple[Instance, float]] = {}


def _failover_decode_tokens_per_s(inst: Instance, tm, sl) -> float:
    """Output tokens/s per slice at the best failover decode operating point of tier ``tm``
    on shape ``sl`` (:func:`fleetplan.instance.derived.best_decode_op`; 0 when none is
    legal), remembered per instance, tier and shape."""
    key = (id(inst), tm.name, sl.label)
    hit = _FAILOVER_DECODE.get(key)
    if hit is None or hit[0] is not inst:
        if len(_FAILOVER_DECODE) >= 256:
            _FAILOVER_DECODE.pop(next(iter(_FAILOVER_DECODE)))
        op, _ = best_decode_op(inst, tm, sl, FAILOVER)
        hit = _FAILOVER_DECODE[key] = (inst, op.tokens_per_s if op is not None else 0.0)
    return hit[1]


def prefill_instance(inst: Instance) -> Instance:
    """The physics the what-if's decision model prices prefill pools with: the instance's
    one held source, or with several the slowest (:func:`fleetplan.instance.physics.held_slowest_first`;
    its service times and curve in one source's units). The accounting of every number the
    what-if prints holds under every held source (fleetplan.whatif.accounting)."""
    from fleetplan.instance.physics import held_slowest_first

    return held_slowest_first(inst)[0][1]


def _reference_mix(d, r: str, t: str) -> dict[str, float]:
    p = d.pools[(r, t)]
    div = sum(d.reference.get((x, r), 0.0) * d.lost_rps[(x, t)] for x in d.lost if r in d.absorbers[x])
    out = {"own": p.own_rps, "own_cold": p.own_cold_rps}
    if "div" in d.sources(r, t):
        out["div"] = div * (1 - p.clamp_share)
        if "div_long" in d.sources(r, t):
            out["div_long"] = div * p.clamp_share
    return out


def _set_curves(inst: Instance, d, tms, specs, event: Event, mixes: dict, memo: dict | None = None) -> None:
    """Set every pool's prefill capacity curves (replica rate, colocated) for the traffic
    mix ``mixes[(region, tier)]`` (req/s per source). ``memo`` (one per event) keeps the
    curves of each pool's mixes already built: a pool the loss does not touch, or whose mix
    the last solve did not move, gets the same arrays again (never modified in place)."""
    clamp = inst.failover.admission_clamp
    for (r, t), p in d.pools.items():
        front = d.front(r, t)
        sh, n = p.slices[front]
        if sh is None:
            continue
        tm = tms[t]
        hit_own, hit_cold = hit_rates(inst, tm.hit_rate, region_phase(inst, event, r))
        rates = mixes[(r, t)]
        if sum(rates.values()) <= 0:
            rates = {"own": 1.0}
        if "div_long" in d.sources(r, t) and rates.get("div", 0.0) > 0 and p.clamp_share < 1.0:
            # the clamp decides whether cold long prompts are in the mix: a curve for each case
            open_rates = {**rates, "div_long": rates["div"] * p.clamp_share / (1.0 - p.clamp_share)}
            shut_rates = {**rates, "div_long": 0.0}
        else:
            open_rates = shut_rates = rates
        key = (r, t, tuple(open_rates.items()), tuple(shut_rates.items()))
        if memo is not None and key in memo:
            p.curve, p.curve_clamped, p.replica_rps = memo[key]
            continue
        src = split_sources(open_rates, hit_own, hit_cold, clamp.min_input_tokens, p.clamp_share)
        if d.mode_of(r, t) == "disaggregated":
            n_max = n + p.warm_max.get(front, 0)
            pinst = prefill_instance(inst)
            p.curve, _, _ = mix_capacity_curve(pinst, tm, specs[sh], src, n_max)
            shut = split_sources(shut_rates, hit_own, hit_cold, clamp.min_input_tokens, p.clamp_share)
            p.curve_clamped = mix_capacity_curve(pinst, tm, specs[sh], shut, n_max)[0] if shut else p.curve
        else:
            # colocated: one replica rate, for the mix with the cold long prompts (conservative when the clamp is on),
            # under the plan's schedule and for the pool's surviving size (the least-work rate rises with the
            # pool, so rate(n) holds for n replicas and for any warm ones added)
            sched = Schedule.parse(p.schedule) if p.schedule else None
            p.replica_rps = replica_rps_for_mix(inst, tm, specs[sh], src, sched, max(n, 1)) * inst.serving.utilisation_headroom
        if memo is not None:
            memo[key] = (p.curve, p.curve_clamped, p.replica_rps)


class WhatIfUnsolved(RuntimeError):
    """The what-if's first stage (least residual) ended without a solution: its time limit
    passed first, or HiGHS ended it otherwise though the model always has one (any load
    may go unserved) -- a numerical failure of the solver. The message says which; the
    CLI prints it and exits 3."""

    def __init__(self, termination: str, time_limit_s: float | None, where: str = ""):
        self.termination, self.time_limit_s, self.where = termination, time_limit_s, where
        if termination == "time_limit":
            why = (f"no solution within the what-if's solver limit of {time_limit_s:g} s per stage" if time_limit_s is not None
                   else "no solution within the solver's time limit")
        else:
            why = (f"HiGHS ended the first stage (least residual) '{termination}' without a solution, though the model always has one "
                   "(any load may go unserved): the solver failed numerically on this loss, so no accounting is given rather than a "
                   "wrong one")
        super().__init__(f"{where}: {why}" if where else why)


def _lexicographic(m, time_limit_s: float | None) -> tuple[dict[str, float], float, list[str]]:
    """Solve the stages in order, capping each optimum before the next. A later stage
    that HiGHS cannot solve (numerically, under the caps) keeps the previous stage's
    solution, which still holds every earlier optimum; a note says so."""
    import pyomo.environ as pyo

    from fleetplan.models.whatif.build import STAGES
    from fleetplan.solvers.base import SolveOptions
    from fleetplan.solvers.highs import solve_highs

    values, wall, notes = {}, 0.0, []
    m.c_stage_caps = pyo.ConstraintList()
    kept = None
    for i, (name, what) in enumerate(STAGES):
        if i > 0 and getattr(m, name).polynomial_degree() == 0:
            values[name] = float(pyo.value(getattr(m, name)))  # nothing left to choose (no routes, no warm pool ...)
            continue
        obj = getattr(m, f"obj_{name[2:]}")
        obj.activate()
        res = solve_highs(m, SolveOptions(mip_gap=1e-9, time_limit_s=time_limit_s), reuse_repn=True)  # only caps added
        obj.deactivate()
        wall += res.wall_time_s
        if not res.has_incumbent:
            if i == 0:
                raise WhatIfUnsolved(res.termination, time_limit_s)
            for v, val in kept:
                v.set_value(val, skip_validation=True)
            notes.append(f"the stage minimising {what} ended {res.termination}; the previous stage's solution is kept")
            break
        val = float(res.objective)
        values[name] = val
        kept = [(v, v.value) for v in m.component_data_objects(pyo.Var)]
        m.c_stage_caps.add(getattr(m, name) <= val + 1e-6 * max(abs(val), 1.0))
    return values, wall, notes


def _held_routes(d, event: Event) -> tuple[dict[tuple[str, str, str], float], list[str]]:
    """The what-if routes (lost, survivor, tier) -> share with the deployed shares
    ``event.held`` fixed: a share to a region that is lost too is spread over the held
    survivors in proportion to their shares (a weighted router skips a dead target);
    where no held share reaches a survivor (every target lost, or no row for the lost
    region and tier) the reference split is used, and a note says so."""
    held: dict[tuple[str, str], dict[str, float]] = {}
    for x, a, t, sh in event.held:
        held.setdefault((x, t), {})[a] = sh
    out: dict[tuple[str, str, str], float] = {}
    notes: list[str] = []
    fallback: list[str] = []
    for x in d.lost:
        for t in d.tiers:
            alive = {a: sh for a, sh in held.get((x, t), {}).items() if a in d.absorbers[x]}
            tot = sum(alive.values())
            if not d.absorbers[x]:
                continue  # nothing may absorb it: dropped whatever the routing
            if tot <= 0:
                fallback.append(f"{x} [{t}]")
                for a in d.absorbers[x]:
                    out[(x, a, t)] = d.reference[(x, a)]
                continue
            gone = sorted(a for a, sh in held.get((x, t), {}).items() if a not in alive and sh > 0)
            if gone:
                notes.append(f"lose {x} [{t}]: the held shares to {', '.join(gone)} (lost too) are spread over the other targets in proportion")
            for a in d.absorbers[x]:
                out[(x, a, t)] = alive.get(a, 0.0) / tot
    if fallback:
        notes.append(f"the held routing sends no traffic of {', '.join(fallback)} to a surviving region: routed in proportion to the "
                     "survivors' own load that hour (what a front door does unaided)")
    return out, notes


def decide(inst: Instance, plan: Plan, event: Event, time_limit_s: float | None = 60.0,
           fixed_routes: dict[tuple[str, str, str], float] | None = None, clamp_on: bool = False) -> tuple[Decisions, object]:
    """Build and solve the what-if model for ``event``; returns (decisions, model data).

    The routing is the model's (``event.routing`` optimise), the reference split
    (proportional), the deployed shares held (plan, controller: see :func:`_held_routes`),
    or ``fixed_routes`` when given. ``clamp_on`` turns the admission clamp on wherever it
    can act (as the sizing plan's loss scenarios and the simulator's gateway assume)
    instead of letting the model decide it.

    The prefill capacity curves are built for the traffic mix the solution sends to each
    pool: when the solution does not hold on the curves of its own mix, every curve is
    tightened to the pointwise minimum of the old and the new one and the model solved
    again (at most MAX_MIX_ITERATIONS solves; a note says so if it still did not hold).
    """
    import pyomo.environ as pyo

    from fleetplan.models import fix_in_bounds
    from fleetplan.models.whatif import build_whatif_model

    d, tms, specs = prepare(inst, plan, event)
    mixes = {k: _reference_mix(d, *k) for k in d.pools}
    notes: list[str] = []
    if fixed_routes is None and event.routing in HELD:
        fixed_routes, held_notes = _held_routes(d, event)
        notes += held_notes
    wall = 0.0
    it = 0
    curves: dict = {}
    unit = d.rate_unit  # req/s per model unit of rate (1 at ordinary loads; models.whatif.build)
    _set_curves(inst, d, tms, specs, event, mixes, curves)
    while True:
        it += 1
        m = build_whatif_model(d)
        if fixed_routes is not None:
            for k in m.ROUTES:
                fix_in_bounds(m.v_route[k], fixed_routes.get(k, 0.0))  # an earlier solve's shares carry its noise
        elif event.routing == "proportional":
            for (x, r, t) in m.ROUTES:
                fix_in_bounds(m.v_route[x, r, t], d.reference[(x, r)])
        if clamp_on:
            for k in m.CLAMP:
                m.v_clamp_on[k].fix(1)
        try:
            _values, w, stage_notes = _lexicographic(m, time_limit_s)
        except WhatIfUnsolved as e:
            raise WhatIfUnsolved(e.termination, e.time_limit_s, event.label()) from None
        wall += w
        new = {}
        for (r, t) in d.pools:
            served = {q: max(pyo.value(m.v_serve[r, t, q]) * unit, 0.0) for q in d.sources(r, t)}
            if sum(served.values()) <= 1e-9:
                served = {q: max(pyo.value(m.e_kept_rps[r, t, q]) * unit, 0.0) for q in d.sources(r, t)}
            new[(r, t)] = served
        # the solution must hold on the curves of the mix it actually sends; if not, tighten
        # every curve to the pointwise minimum of the old and the new mix's (capacity only
        # ever falls, so the refresh cannot oscillate) and solve again
        old_curves = {k: (p.curve, p.curve_clamped, p.replica_rps) for k, p in d.pools.items()}
        _set_curves(inst, d, tms, specs, event, new, curves)
        holds = _solution_holds(m, d)
        if holds or it >= MAX_MIX_ITERATIONS:
            notes.extend(stage_notes)
            if not holds:
                notes.append(f"after {it} solves the traffic mix still moved the prefill capacity curves; the accounting below is exact "
                             "for the decisions taken (check_excess shows any load over the SLO)")
            break
        for k, p in d.pools.items():
            c0, k0, r0 = old_curves[k]
            if c0 is not None and p.curve is not None:
                p.curve = np.minimum(c0, p.curve)
            if k0 is not None and p.curve_clamped is not None:
                p.curve_clamped = np.minimum(k0, p.curve_clamped)
            p.replica_rps = min(r0, p.replica_rps) if r0 else p.replica_rps
    val = lambda x: float(pyo.value(x))  # noqa: E731
    rate = lambda x: float(pyo.value(x)) * unit  # noqa: E731  (a rate variable, back in req/s or tokens/s)
    dec = Decisions(
        routes={k: val(m.v_route[k]) for k in m.ROUTES},
        clamp_rps={k: rate(m.v_clamp[k]) for k in m.CLAMP},
        shed_rps={k: rate(m.v_shed[k]) for k in m.SOURCES},
        warm={k: int(round(val(m.e_warm[k]))) for k in m.WARM_POOLS},
        residual_prefill_rps={(r, t, q): rate(m.v_res_prefill[r, t, q]) for (r, t, q) in m.SOURCES},
        residual_decode_tokens_per_s={k: rate(m.v_res_decode[k]) for k in d.pools_of("disaggregated")},
        dropped_rps=float(m.p_dropped_rps) * unit,
        model_unserved_rps=sum(max(sum(rate(m.v_res_prefill[r, t, q]) for q in d.sources(r, t)),
                                   rate(m.v_res_decode[r, t]) / d.output_tokens if d.mode_of(r, t) == "disaggregated" else 0.0)
                               for (r, t) in d.pools) + float(m.p_dropped_rps) * unit,
        mix_iterations=it, solve_s=wall, notes=notes,
    )
    return dec, d


def _solution_holds(m, d, rel: float = 1e-6) -> bool:
    """Whether the loaded solution's prefill work (replica load) fits the curves now in
    ``d`` (built for the mix the solution sends)."""
    import pyomo.environ as pyo

    u = d.rate_unit  # the model's rates are in u req/s
    for (r, t), p in d.pools.items():
        if d.mode_of(r, t) == "disaggregated":
            sh, n = p.slices.get("prefill", (None, 0))
            if sh is None:
                continue
            work = sum(pyo.value(m.v_serve[r, t, q]) * u * p.service_ms.get(q, 0.0) / 1e3 for q in d.sources(r, t))
            on = (r, t) in m.CLAMP and pyo.value(m.v_clamp_on[r, t]) > 0.5
            A = p.curve_clamped if (on and p.curve_clamped is not None) else p.curve
            w = int(round(pyo.value(m.e_warm[r, t, "prefill"]))) if (r, t, "prefill") in m.WARM_POOLS else 0
            if work > float(A[min(n + w, len(A) - 1)]) * (1 + rel) + 1e-9:
                return False
        else:
            sh, n = p.slices.get("replica", (None, 0))
            if sh is None:
                continue
            load = sum(pyo.value(m.v_serve[r, t, q]) * u for q in d.sources(r, t))
            w = int(round(pyo.value(m.e_warm[r, t, "replica"]))) if (r, t, "replica") in m.WARM_POOLS else 0
            if load > p.replica_rps * (n + w) * (1 + rel) + 1e-9:
                return False
    return True


def whatif(inst: Instance, plan: Plan, events: list[Event], progress: Callable[[str], None] | None = None, placement=None):
    """Run every event and return the :class:`fleetplan.whatif.report.WhatIfReport`.

    ``placement``: a schema-version-2 :class:`~fleetplan.results.placement.Placement` of
    ``plan`` (verify it first: ``verify_placement``); each single-region loss then carries
    ``placement_dcn`` (:func:`placement_dcn`). Raises: InputError when the plan was solved
    for another instance, or (``--placement``) the placement was made for another plan or
    carries no scenario routing (schema_version 1).
    """
    from fleetplan.whatif.accounting import account
    from fleetplan.whatif.report import summary_report

    check_plan_matches(inst, plan)
    check_plan_contents(inst, plan)
    check_one_shape(plan)
    if placement is not None:
        from fleetplan.results.placement import placement_hash

        check_placement(plan, placement)
        pl_hash = placement_hash(placement)
    say = progress or (lambda _m: None)
    # the transient first: when the same loss is also asked in the steady state, the steady
    # state keeps the routing chosen at the loss (the controller re-routes once)
    order = sorted(range(len(events)), key=lambda i: events[i].phase != "transient")
    routes: dict[tuple, dict] = {}
    results: dict[int, object] = {}
    for n, i in enumerate(order):
        ev = events[i]
        say(f"{ev.label()} ({n + 1}/{len(events)})")
        key = (ev.lost, ev.lost_pods, ev.hour, ev.routing)
        fixed = routes.get(key) if (ev.phase == "steady" and ev.routing not in HELD) else None
        dec, d = decide(inst, plan, ev, fixed_routes=fixed)
        if fixed is not None and ev.lost:
            dec.notes.append("routing as chosen for the re-warm transient of this loss (the controller re-routes once)")
        if ev.phase == "transient":
            routes[key] = dec.routes
        results[i] = account(inst, plan, ev, dec, d)
        if placement is not None:
            got, extra = placement_dcn(inst, placement, ev, results[i].warm_slices, pl_hash)
            results[i] = results[i].model_copy(update={"placement_dcn": got, "notes": results[i].notes + extra})
    return summary_report(inst, plan, [results[i] for i in range(len(events))])


# ----------------------------------------------------------------------------- the placement's routing in a region loss


# ----------------------------------------------------------------------------- any loss hour, as a plan scenario

#: (instance hash, plan hash, lost region, hour) -> (scenario, notes): the simulator asks per tier
_LOSS_SCENARIOS: dict[tuple, tuple] = {}


def loss_scenario(inst: Instance, plan: Plan, lost: str, hour: int):
    """The loss of region ``lost`` at ``hour`` (0-23 UTC) as a scenario of ``plan``, for an
    hour the plan does not list (it keeps only the hours that dominate the others), in
    the form of the plan's own loss scenarios (``fleetplan simulate --scenario
    lose:X@HH``). What is assumed:

    * loads: every region at its ``hourly_load`` of that hour times ``peak_rps``;
    * routing: the plan's failover shares, held (what is deployed; :func:`_held_routes`);
    * mitigations: what the what-if decides for that hour on the plan's fleet
      (:func:`decide`, routing held, the admission clamp on wherever it can act -- as in
      the plan's loss scenarios and the simulator's gateway -- in the phase the instance
      sizes for, ``failover.size_for``): batch-class requests shed per source (own,
      diverted), warm-pool slices joined, and any residual, recorded as shortfall;
    * predictions: the independent evaluator at those loads
      (:func:`fleetplan.results.loads.scenario_results`), as for the plan's scenarios.

    Returns: (a :class:`~fleetplan.results.plan.ScenarioResult` named ``lose:X@HH``, notes
    in words saying the above with the mitigations' sizes).
    Raises: InputError (``--scenario``) for an unknown region, an hour outside 0-23, or
    a region no other region may absorb (``failover_to`` empty).
    """
    from fleetplan.instance.derived import Scenario
    from fleetplan.instance.io import instance_hash
    from fleetplan.results.evaluate import Context
    from fleetplan.results.loads import Decisions as PoolDecisions
    from fleetplan.results.loads import scenario_results
    from fleetplan.results.placement import plan_hash

    if lost not in inst.regions:
        raise InputError("--scenario", [Problem("--scenario", f"unknown region {lost!r} in lose:{lost}@..; regions are {', '.join(sorted(inst.regions))}.")])
    if not (isinstance(hour, int) and 0 <= hour <= 23):
        raise InputError("--scenario", [Problem("--scenario", f"hour {hour!r}: an hour 0-23 (UTC), as in lose:{lost}@13.")])
    absorbers = tuple(sorted(inst.regions[lost].failover_to))
    if not absorbers:
        raise InputError("--scenario", [Problem("--scenario", f"{lost} fails over to no region (failover_to is empty): its traffic is dropped "
                                                              "whole and no survivor's load changes; simulate 'normal'.")])
    key = (instance_hash(inst), plan_hash(plan), lost, hour)
    if key in _LOSS_SCENARIOS:
        sc, notes = _LOSS_SCENARIOS[key]
        return sc, list(notes)
    check_plan_contents(inst, plan)
    check_one_shape(plan)
    held = held_shares(inst, [(r.lost, r.to, r.tier, r.share) for r in plan.routing], "plan.routing")
    ev = Event((lost,), (), hour, inst.failover.size_for, "plan", held)
    dec, d = decide(inst, plan, ev, clamp_on=True)
    name = f"lose:{lost}@{hour:02d}"
    pools = {(p.region, p.tier, p.role): p for p in plan.pools}
    decisions = {}
    for (r, t) in d.pools:
        dc = PoolDecisions()
        for (rr, tt, q), v in dec.shed_rps.items():
            if (rr, tt) == (r, t) and v > 0:
                if q in ("own", "own_cold"):
                    dc.shed_own += v
                else:
                    dc.shed_div += v
        for role in d.roles(r, t):
            w = dec.warm.get((r, t, role), 0)
            if w and (r, t, role) in pools:
                dc.warm[role] = w
                dc.warm_shape[role] = pools[(r, t, role)].slice
        front = d.front(r, t)
        dc.short[front] = sum(v for (rr, tt, _q), v in dec.residual_prefill_rps.items() if (rr, tt) == (r, t) and v > 0)
        if d.mode_of(r, t) == "disaggregated":
            dc.short["decode"] = max(dec.residual_decode_tokens_per_s.get((r, t), 0.0), 0.0)
        decisions[(name, r, t)] = dc
    scen = Scenario(name, "loss", hour, lost, {r: inst.regions[r].hourly_load[hour] for r in sorted(inst.regions)}, absorbers, absorbers)
    sc = scenario_results(inst, Context(inst), [scen], plan.pools, dict(dec.routes), decisions, plan_modes(inst, plan),
                          pods=plan.pods)[0]  # a plan sized with its pods: the DCN share and its TTFT cost, as in its own scenarios
    listed = [s.name for s in plan.scenarios if s.lost_region == lost]
    routes = ", ".join(f"{a} {t} {sh:.1%}" for (x, a, t), sh in sorted(dec.routes.items()) if sh > 0)
    notes = [f"{name} is not a scenario of the plan (it lists {', '.join(listed) or 'no loss of ' + lost}: the hours that dominate the "
             f"others): built from the instance's loads at {hour:02d}:00 UTC, the plan's failover routing held ({routes}) and the "
             f"mitigations the what-if decides for that hour in the {ev.phase} phase with the admission clamp on: {sc.shed_rps:,.3g} req/s "
             f"shed, {sc.clamped_rps:,.3g} req/s clamped, {sc.warm_slices_used} warm slice(s) joined"
             + (f", {dec.model_unserved_rps:,.3g} req/s-equivalents unserved (recorded as shortfall)" if dec.model_unserved_rps > 1e-6 else "")
             + "; the plan column is the evaluator's prediction at those loads"] + [n for n in dec.notes]
    if len(_LOSS_SCENARIOS) >= 32:
        _LOSS_SCENARIOS.pop(next(iter(_LOSS_SCENARIOS)))
    _LOSS_SCENARIOS[key] = (sc, tuple(notes))
    return sc, notes
