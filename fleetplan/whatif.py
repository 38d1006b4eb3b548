"""``whatif(instance, plan, event)``: hold a plan's installed fleet fixed, lose regions
and/or pods at an hour, re-optimise what operations can change (routing, clamp,
shedding, warm pool; decode rides to its SLO knee) and account for every slice.

The model is :mod:`fleetplan.models.whatif` (Pyomo, HiGHS), solved lexicographically;
the numbers reported come from :mod:`fleetplan.results.whatif`, which recomputes every
pool with :mod:`fleetplan.perf` at the model's decisions (never from the model's tables).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from fleetplan.errors import InputError, Problem
from fleetplan.instance.derived import FAILOVER, best_decode_op, mix_capacity_curve, replica_rps_for_mix
from fleetplan.instance.schema import Instance
from fleetplan.perf.pools import prefill_profile, slice_specs, split_sources, tier_mixes
from fleetplan.results.plan import Plan
from fleetplan.results.verify import check_plan_contents, check_plan_matches

__all__ = ["Event", "Decisions", "parse_event", "prepare", "decide", "whatif", "PHASES"]

PHASES = ("steady", "transient")
ROUTINGS = ("optimise", "proportional")
MAX_MIX_ITERATIONS = 6


@dataclass(frozen=True)
class Event:
    """A loss: regions lost whole, pods lost inside surviving regions ({region: {chip:
    pods}}), the hour (0-23, UTC) and the phase ('steady' post-failover, or the re-warm
    'transient' with every hit rate times the instance's rewarm_hit_rate_factor)."""

    lost: tuple[str, ...]
    lost_pods: tuple[tuple[str, str, int], ...]
    hour: int
    phase: str
    routing: str = "optimise"  # or "proportional": the reference split, held fixed

    def label(self) -> str:
        parts = [f"lose {x}" for x in self.lost] + [f"lose {n} {k} pod(s) in {r}" for r, k, n in self.lost_pods]
        extra = ", routing proportional to the survivors' load" if (self.routing == "proportional" and self.lost) else ""
        return ", ".join(parts) + f" at {self.hour:02d}:00 UTC ({self.phase}{extra})"


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


def parse_event(inst: Instance, plan: Plan, lose: list[str], lose_pods: list[str], hour: int | str | None, phase: str,
                routing: str = "optimise") -> list[Event]:
    """Validate a loss given on the command line and return one event per hour.

    Args: lose: region names; lose_pods: 'REGION:N' or 'REGION:CHIP:N'; hour: 0-23,
    'peak' (the hour of the largest lost load; default), or 'all' (24 events); phase:
    'steady' or 'transient'; routing: 'optimise' (the model chooses) or 'proportional'
    (the reference split: shares proportional to the survivors' own load that hour).
    Raises: InputError naming the option and the expected value.
    """
    probs: list[Problem] = []
    regions = sorted(inst.regions)
    lost = []
    for x in lose:
        if x not in inst.regions:
            probs.append(Problem("--lose", f"unknown region {x!r}; regions are {', '.join(regions)}."))
        elif x in lost:
            probs.append(Problem("--lose", f"region {x!r} given twice."))
        else:
            lost.append(x)
    pods = []
    fleet = {(f.region, f.chip): f for f in plan.fleet}
    for spec in lose_pods:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            probs.append(Problem("--lose-pods", f"{spec!r} is not REGION:N or REGION:CHIP:N (N pods, a whole number)."))
            continue
        r, n_txt = parts[0], parts[-1]
        if r not in inst.regions:
            probs.append(Problem("--lose-pods", f"unknown region {r!r}; regions are {', '.join(regions)}."))
            continue
        if r in lost:
            probs.append(Problem("--lose-pods", f"region {r!r} is already lost whole (--lose)."))
            continue
        chips = sorted(k for (rr, k) in fleet if rr == r)
        if len(parts) == 3:
            k = parts[1]
            if (r, k) not in fleet:
                probs.append(Problem("--lose-pods", f"{r} has no {k!r} pods in this plan; it has {', '.join(chips) or 'none'}."))
                continue
        elif len(chips) == 1:
            k = chips[0]
        else:
            probs.append(Problem("--lose-pods", f"{r} has pods of several chip types ({', '.join(chips) or 'none'}); write REGION:CHIP:N."))
            continue
        try:
            n = int(n_txt)
        except ValueError:
            probs.append(Problem("--lose-pods", f"{n_txt!r} in {spec!r} is not a whole number of pods."))
            continue
        total = fleet[(r, k)].pods_total
        if n < 1 or n > total:
            probs.append(Problem("--lose-pods", f"{spec!r}: between 1 and the {total} {k} pod(s) {r} has in this plan (pods)."))
            continue
        if n == total and len([c for (rr, c) in fleet if rr == r]) == 1:
            probs.append(Problem("--lose-pods", f"{spec!r} takes every pod of {r}: that is a region loss; use --lose {r} (its traffic is then re-routed)."))
            continue
        if any(p[0] == r and p[1] == k for p in pods):
            probs.append(Problem("--lose-pods", f"{r}:{k} given twice."))
            continue
        pods.append((r, k, n))
    if not lose and not lose_pods:
        probs.append(Problem("--lose", "name at least one region to lose (--lose REGION) or pods (--lose-pods REGION:N)."))
    elif len(lost) == len(regions):
        probs.append(Problem("--lose", "every region is lost; nothing survives to re-optimise."))
    if routing not in ROUTINGS:
        probs.append(Problem("--routing", f"{routing!r}; choose optimise or proportional."))
    if phase not in PHASES:
        probs.append(Problem("--phase", f"{phase!r}; choose steady, transient or both."))
    hours: list[int] = []
    if hour is None or hour == "peak":
        who = lost or [r for r, _, _ in pods]
        loads = [sum(inst.regions[x].peak_rps * inst.regions[x].hourly_load[h] for x in who) for h in range(24)]
        hours = [int(np.argmax(loads))]
    elif hour in ("all", "worst"):
        hours = list(range(24))
    else:
        try:
            h = int(hour)
            if not 0 <= h <= 23:
                raise ValueError
            hours = [h]
        except (TypeError, ValueError):
            probs.append(Problem("--hour", f"{hour!r}; give an hour 0-23 (UTC), 'peak', 'worst' or 'all'."))
    if probs:
        raise InputError("what-if", probs)
    return [Event(tuple(sorted(lost)), tuple(sorted(pods)), h, phase, routing) for h in hours]


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


def region_phase(inst: Instance, event: Event, r: str) -> str:
    """The phase region r is in: the re-warm 'transient' (every hit rate dips by
    rewarm_hit_rate_factor) where a lost region's traffic floods in; 'cold-pods' where it
    only lost pods of its own (those users arrive cold, the rest keep their cache);
    'steady' elsewhere."""
    if event.phase != "transient":
        return "steady"
    if any(r in inst.regions[x].failover_to for x in event.lost):
        return "transient"
    # pods lost, no flood of diverted traffic: only the users whose cache was on the lost
    # pods arrive cold; the rest of the cache is not evicted
    return "cold-pods" if any(rr == r for rr, _, _ in event.lost_pods) else "steady"


def hit_rates(inst: Instance, hit: float, phase: str) -> tuple[float, float]:
    """(own, cold) hit rates of a tier with steady hit rate ``hit`` in ``phase``."""
    f = inst.failover.rewarm_hit_rate_factor if phase == "transient" else 1.0
    return hit * f, inst.failover.diverted_hit_rate * f


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
    roles = ["prefill", "decode"] if inst.serving.mode == "disaggregated" else ["replica"]
    front = "prefill" if inst.serving.mode == "disaggregated" else "replica"
    wp = {}
    for r in survivors:
        for t, tm in tms.items():
            own = inst.regions[r].peak_rps * inst.regions[r].hourly_load[h] * tm.tier_share
            sh, n = pools.get((r, t, front), (None, 0))
            n_lost = lost_slices.get((r, t, front), 0)
            phi = n_lost / (n + n_lost) if (event.phase == "transient" and n + n_lost > 0) else 0.0
            kappa = float(np.sum(tm.shares[tm.tokens >= clamp.min_input_tokens])) if clamp.enabled else 0.0
            slices = {ro: pools.get((r, t, ro), (None, 0)) for ro in roles}
            wmax = {ro: warm.get((r, slices[ro][0]), 0) for ro in roles if slices[ro][0] is not None}
            wp[(r, t)] = WhatIfPool(r, t, slices, wmax, own * (1 - phi), own * phi, kappa)
    d = WhatIfData(inst.serving.mode, list(event.lost), survivors, list(tms), absorbers, lost_rps, reference, wp, warm,
                   sum(c.share for c in inst.workload.classes.values() if c.sheddable), inst.workload.output_tokens)
    specs = {sl.label: sl for sl in slice_specs(inst)}
    for (r, t), p in wp.items():
        tm = tms[t]
        hit_own, hit_cold = hit_rates(inst, tm.hit_rate, region_phase(inst, event, r))
        sh = p.slices[front][0]
        if sh is None:
            continue
        sl = specs[sh]
        for q in d.sources(r, t):
            src = split_sources({q: 1.0}, hit_own, hit_cold, clamp.min_input_tokens, p.clamp_share)
            p.service_ms[q] = prefill_profile(inst, tm, sl, src, [99.0]).mean_ms if src else 0.0
        if inst.serving.mode == "disaggregated":
            dsh = p.slices["decode"][0]
            if dsh is not None:
                op, _ = best_decode_op(inst, tm, specs[dsh], FAILOVER)
                p.decode_tokens_per_s = op.tokens_per_s if op is not None else 0.0
    return d, tms, specs


def _reference_mix(d, r: str, t: str) -> dict[str, float]:
    p = d.pools[(r, t)]
    div = sum(d.reference.get((x, r), 0.0) * d.lost_rps[(x, t)] for x in d.lost if r in d.absorbers[x])
    out = {"own": p.own_rps, "own_cold": p.own_cold_rps}
    if "div" in d.sources(r, t):
        out["div"] = div * (1 - p.clamp_share)
        if "div_long" in d.sources(r, t):
            out["div_long"] = div * p.clamp_share
    return out


def _set_curves(inst: Instance, d, tms, specs, event: Event, mixes: dict) -> None:
    clamp = inst.failover.admission_clamp
    front = "prefill" if d.mode == "disaggregated" else "replica"
    for (r, t), p in d.pools.items():
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
        src = split_sources(open_rates, hit_own, hit_cold, clamp.min_input_tokens, p.clamp_share)
        if d.mode == "disaggregated":
            n_max = n + p.warm_max.get(front, 0)
            p.curve, _, _ = mix_capacity_curve(inst, tm, specs[sh], src, n_max)
            shut = split_sources(shut_rates, hit_own, hit_cold, clamp.min_input_tokens, p.clamp_share)
            p.curve_clamped = mix_capacity_curve(inst, tm, specs[sh], shut, n_max)[0] if shut else p.curve
        else:
            # colocated: one replica rate, for the mix with the cold long prompts (conservative when the clamp is on)
            p.replica_rps = replica_rps_for_mix(inst, tm, specs[sh], src) * inst.serving.utilisation_headroom


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
        res = solve_highs(m, SolveOptions(mip_gap=1e-9, time_limit_s=time_limit_s))
        obj.deactivate()
        wall += res.wall_time_s
        if not res.has_incumbent:
            if i == 0:
                raise RuntimeError(f"what-if stage '{what}' ended {res.termination} without a solution; the model is always "
                                   "feasible (residual is allowed), so this is a bug")
            for v, val in kept:
                v.set_value(val, skip_validation=True)
            notes.append(f"the stage minimising {what} ended {res.termination}; the previous stage's solution is kept")
            break
        val = float(res.objective)
        values[name] = val
        kept = [(v, v.value) for v in m.component_data_objects(pyo.Var)]
        m.c_stage_caps.add(getattr(m, name) <= val + 1e-6 * max(abs(val), 1.0))
    return values, wall, notes


def decide(inst: Instance, plan: Plan, event: Event, time_limit_s: float | None = 60.0,
           fixed_routes: dict[tuple[str, str, str], float] | None = None) -> tuple[Decisions, object]:
    """Build and solve the what-if model for ``event``; returns (decisions, model data).

    The prefill capacity curves are built for the traffic mix the solution sends to each
    pool: when the solution does not hold on the curves of its own mix, every curve is
    tightened to the pointwise minimum of the old and the new one and the model solved
    again (at most MAX_MIX_ITERATIONS solves; a note says so if it still did not hold).
    """
    import pyomo.environ as pyo

    from fleetplan.models.whatif import build_whatif_model

    d, tms, specs = prepare(inst, plan, event)
    mixes = {k: _reference_mix(d, *k) for k in d.pools}
    notes: list[str] = []
    wall = 0.0
    it = 0
    _set_curves(inst, d, tms, specs, event, mixes)
    while True:
        it += 1
        m = build_whatif_model(d)
        if fixed_routes is not None:
            for k in m.ROUTES:
                m.v_route[k].fix(fixed_routes.get(k, 0.0))
        elif event.routing == "proportional":
            for (x, r, t) in m.ROUTES:
                m.v_route[x, r, t].fix(d.reference[(x, r)])
        _values, w, stage_notes = _lexicographic(m, time_limit_s)
        wall += w
        new = {}
        for (r, t) in d.pools:
            served = {q: max(pyo.value(m.v_serve[r, t, q]), 0.0) for q in d.sources(r, t)}
            if sum(served.values()) <= 1e-9:
                served = {q: max(pyo.value(m.e_kept_rps[r, t, q]), 0.0) for q in d.sources(r, t)}
            new[(r, t)] = served
        # the solution must hold on the curves of the mix it actually sends; if not, tighten
        # every curve to the pointwise minimum of the old and the new mix's (capacity only
        # ever falls, so the refresh cannot oscillate) and solve again
        old_curves = {k: (p.curve, p.curve_clamped, p.replica_rps) for k, p in d.pools.items()}
        _set_curves(inst, d, tms, specs, event, new)
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
    dec = Decisions(
        routes={k: val(m.v_route[k]) for k in m.ROUTES},
        clamp_rps={k: val(m.v_clamp[k]) for k in m.CLAMP},
        shed_rps={k: val(m.v_shed[k]) for k in m.SOURCES},
        warm={k: int(round(val(m.e_warm[k]))) for k in m.WARM_POOLS},
        residual_prefill_rps={(r, t, q): val(m.v_res_prefill[r, t, q]) for (r, t, q) in m.SOURCES},
        residual_decode_tokens_per_s={k: val(m.v_res_decode[k]) for k in d.pools} if d.mode == "disaggregated" else {},
        dropped_rps=float(m.p_dropped_rps),
        model_unserved_rps=sum(max(sum(val(m.v_res_prefill[r, t, q]) for q in d.sources(r, t)),
                                   val(m.v_res_decode[r, t]) / d.output_tokens if d.mode == "disaggregated" else 0.0)
                               for (r, t) in d.pools) + float(m.p_dropped_rps),
        mix_iterations=it, solve_s=wall, notes=notes,
    )
    return dec, d


def _solution_holds(m, d, rel: float = 1e-6) -> bool:
    """Whether the loaded solution's prefill work (replica load) fits the curves now in
    ``d`` (built for the mix the solution sends)."""
    import pyomo.environ as pyo

    for (r, t), p in d.pools.items():
        if d.mode == "disaggregated":
            sh, n = p.slices.get("prefill", (None, 0))
            if sh is None:
                continue
            work = sum(pyo.value(m.v_serve[r, t, q]) * p.service_ms.get(q, 0.0) / 1e3 for q in d.sources(r, t))
            on = (r, t) in m.CLAMP and pyo.value(m.v_clamp_on[r, t]) > 0.5
            A = p.curve_clamped if (on and p.curve_clamped is not None) else p.curve
            w = int(round(pyo.value(m.e_warm[r, t, "prefill"]))) if (r, t, "prefill") in m.WARM_POOLS else 0
            if work > float(A[min(n + w, len(A) - 1)]) * (1 + rel) + 1e-9:
                return False
        else:
            sh, n = p.slices.get("replica", (None, 0))
            if sh is None:
                continue
            load = sum(pyo.value(m.v_serve[r, t, q]) for q in d.sources(r, t))
            w = int(round(pyo.value(m.e_warm[r, t, "replica"]))) if (r, t, "replica") in m.WARM_POOLS else 0
            if load > p.replica_rps * (n + w) * (1 + rel) + 1e-9:
                return False
    return True


def whatif(inst: Instance, plan: Plan, events: list[Event], progress: Callable[[str], None] | None = None):
    """Run every event and return the :class:`fleetplan.results.whatif.WhatIfReport`.

    Raises: InputError when the plan was solved for another instance.
    """
    from fleetplan.results.whatif import account, summary_report

    check_plan_matches(inst, plan)
    check_plan_contents(inst, plan)
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
        fixed = routes.get(key) if ev.phase == "steady" else None
        dec, d = decide(inst, plan, ev, fixed_routes=fixed)
        if fixed is not None and ev.lost:
            dec.notes.append("routing as chosen for the re-warm transient of this loss (the controller re-routes once)")
        if ev.phase == "transient":
            routes[key] = dec.routes
        results[i] = account(inst, plan, ev, dec, d)
    return summary_report(inst, plan, [results[i] for i in range(len(events))])
