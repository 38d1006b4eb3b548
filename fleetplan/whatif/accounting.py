"""What-if accounting: every survivor pool recomputed with :mod:`fleetplan.perf` at the
what-if model's decisions (routing, shedding, clamp, warm slices) -- the multipliers, the
gap in slices, each mitigation's size in slices, the residual and what it means for
users, and the prefix-cache re-warm timeline. Nothing here reads the model's curves.

Slice accounting (per pool, in the brief's order, section 5). *Needed* is the fewest
slices that hold the SLO for a load: prefill, the smallest G/G/c pool whose TTFT
percentile -- of the sum of path, wait, compute and exposed KV -- meets the SLO
(:func:`fleetplan.perf.ttft_tail.min_servers_of_sum` with the pool's exact traffic mix); decode, ceil(output tokens/s / tokens/s per slice at the operating
point). Then

    gap        = needed(failover load) - installed                    (>= 0)
    knee ride  = needed at the normal operating point - at the knee   (decode only)
    batch shed = needed(before shedding) - needed(after)
    clamp      = needed(after shedding) - needed(after the clamp)
    warm pool  = warm slices joined
    residual   = max(needed(final load) - installed - warm, 0)

so gap = batch shed + clamp + warm pool + residual - headroom left, where headroom is
what the pool has beyond the final need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from fleetplan.instance.physics import held_instances
from fleetplan.instance.schema import Instance
from fleetplan.perf.pools import prefill_profile, slice_specs, split_sources, tier_mixes, tier_slos
from fleetplan.perf.queueing import ttft_percentiles_of_sum_ms
from fleetplan.perf.ttft_tail import max_arrival_rate_of_sum, min_servers_of_sum, mix_tail, path_distribution
from fleetplan.perf.rewarm import cache_tokens, rewarm
from fleetplan.perf.roofline import kv_bytes_per_token
from fleetplan.results.evaluate import Context
from fleetplan.results.plan import Plan, PoolLoad, SloMargin
from fleetplan.whatif.events import hit_rates, region_phase
from fleetplan.whatif.report import (EventResult, Multiplier, PoolAccount, RewarmPoint, RewarmReport, RouteShare, Step,
                                     SurvivorReport)

__all__ = ["account", "unserved_request_equivalents"]

TINY_RPS = 1e-3  # mitigations below this (req/s) are solver noise, not steps
#: loads within 10 ppm of a pool's SLO boundary count as meeting it (the model's curves are
#: built for the previous solve's mix, which may differ from the final one at that level)
REL_TOL = 1e-5


# ----------------------------------------------------------------------------- physics helpers


class _PrefillMath:
    """Exact prefill numbers of one tier on one shape for per-source rates."""

    def __init__(self, inst: Instance, tm, sl, kappa: float):
        self.inst, self.tm, self.sl, self.kappa = inst, tm, sl, kappa
        self.slos = [s for s in tier_slos(inst, tm.name) if s.metric == "ttft"]
        self.clamp_min = inst.failover.admission_clamp.min_input_tokens
        self._states: dict[tuple, tuple | None] = {}
        self._path = None  # the path latency's distribution (queueing.path_sum_distribution), built on first use

    def state(self, rates: dict[str, float], hit_own: float, hit_cold: float):
        """(profile, req/s, {TTFT percentile: its tail at the limit}) of the mix ``rates``, or None
        when nothing arrives; remembered per mix (the accounting asks the same mix for its
        need, capacity, TTFT and work; read-only)."""
        key = (tuple(rates.items()), hit_own, hit_cold)
        if key not in self._states:
            self._states[key] = self._state(rates, hit_own, hit_cold)
        return self._states[key]

    def _state(self, rates: dict[str, float], hit_own: float, hit_cold: float):
        src = split_sources({k: v for k, v in rates.items() if v > 1e-12}, hit_own, hit_cold, self.clamp_min, self.kappa)
        lam = sum(v for v in rates.values() if v > 1e-12)
        if not src or lam <= 0:
            return None
        pcts = sorted({s.percentile for s in self.slos} | {50.0, 99.0})
        prof = prefill_profile(self.inst, self.tm, self.sl, src, pcts)
        tails = {s.percentile: mix_tail(self.inst, prof, s.limit_ms).tail for s in self.slos}
        return prof, lam, tails

    def need(self, rates, hit_own, hit_cold) -> int | None:
        st = self.state(rates, hit_own, hit_cold)
        if st is None:
            return 0
        prof, lam, tails = st
        if not tails:  # no TTFT SLO: stability only
            return int(math.floor(lam * prof.mean_ms / 1e3)) + 1
        out = 0
        for p, tail in tails.items():
            # the same relative tolerance as the residual: a pool sized exactly at the SLO
            # boundary is not one slice short
            n = min_servers_of_sum(lam * (1 - REL_TOL), prof.mean_ms, tail, p, prof.cs2, prof.ca2, router=self.inst.serving.router)
            if n is None:
                return None
            out = max(out, n)
        return out

    def carry(self, n: int, rates, hit_own, hit_cold) -> float:
        """Most req/s (this mix) n slices carry within the SLO."""
        st = self.state(rates, hit_own, hit_cold)
        if st is None or n <= 0:
            return 0.0
        prof, lam, tails = st
        if not tails:
            return n * 1e3 / prof.mean_ms * 0.999999
        return float(min(max_arrival_rate_of_sum(n, prof.mean_ms, tail, p, prof.cs2, prof.ca2, router=self.inst.serving.router)[0] for p, tail in tails.items()))

    def ttft(self, n: int, rates, hit_own, hit_cold) -> tuple[dict[str, float], float | None]:
        st = self.state(rates, hit_own, hit_cold)
        if st is None or n <= 0:
            return {}, None
        prof, lam, _ = st
        util = lam * prof.mean_ms / 1e3 / n
        if util >= 1.0:
            return {}, util
        # the percentile of the TTFT sum (path + wait + own compute and exposed KV), what the
        # pool's need above is sized against (perf.ttft_tail) -- not the sum of the components'
        # percentiles, a bound that quoted 1,039 ms for a pool within its 800 ms SLO
        if self._path is None:
            self._path = path_distribution(self.inst)  # memoised per path (perf.ttft_tail)
        est = ttft_percentiles_of_sum_ms([50.0, 99.0], self._path, n, lam, prof.mean_ms, prof.cs2, prof.type_ms, prof.type_weight, prof.ca2,
                                         self.inst.serving.router)
        return {f"p{p:g}": float(v) for p, v in est.items()}, util

    def work(self, rates, hit_own, hit_cold) -> float:
        st = self.state(rates, hit_own, hit_cold)
        return 0.0 if st is None else st[1] * st[0].mean_ms / 1e3

    def new_tokens_per_s(self, rates, hit_own, hit_cold) -> float:
        st = self.state(rates, hit_own, hit_cold)
        return 0.0 if st is None else st[1] * st[0].new_tokens_mean


class _RobustPrefillMath:
    """:class:`_PrefillMath` under every held physics source (an instance's ``physics:``
    block may give several sources of the step physics; the plan must hold under each held
    one, :mod:`fleetplan.instance.physics`): the most slices any source needs, the least
    load any carries, the TTFT of the source that needs the most (ties: the first), the
    most work. The same interface."""

    def __init__(self, parts: list[_PrefillMath]):
        self.parts = parts

    def need(self, rates, hit_own, hit_cold) -> int | None:
        got = [pm.need(rates, hit_own, hit_cold) for pm in self.parts]
        return None if any(n is None for n in got) else max(got)

    def carry(self, n: int, rates, hit_own, hit_cold) -> float:
        return min(pm.carry(n, rates, hit_own, hit_cold) for pm in self.parts)

    def ttft(self, n: int, rates, hit_own, hit_cold) -> tuple[dict[str, float], float | None]:
        got = [pm.ttft(n, rates, hit_own, hit_cold) for pm in self.parts]
        return max(got, key=lambda x: (x[1] is not None and x[1] >= 1.0, x[0].get("p99", 0.0), x[1] or 0.0))

    def work(self, rates, hit_own, hit_cold) -> float:
        return max(pm.work(rates, hit_own, hit_cold) for pm in self.parts)

    def new_tokens_per_s(self, rates, hit_own, hit_cold) -> float:
        return self.parts[0].new_tokens_per_s(rates, hit_own, hit_cold)


def _prefill_math(inst: Instance, tm, sl, kappa: float):
    """:class:`_PrefillMath` of the instance's physics: one per held source, combined when several."""
    parts = [_PrefillMath(si, tm, sl, kappa) for _, si in held_instances(inst)]
    return parts[0] if len(parts) == 1 else _RobustPrefillMath(parts)


def _u(x: float) -> str:
    """A utilisation, with a decimal near 100% (100.3% is over, not full)."""
    return f"{x:.1%}" if 0.995 <= x < 1.005 and abs(x - 1.0) > 1e-12 else f"{x:.0%}"


def _ceil(x: float) -> int:
    return int(math.ceil(x - 1e-9)) if x > 0 else 0


def _n(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.3g}"


# ----------------------------------------------------------------------------- accounting


@dataclass(frozen=True)
class _PoolAt:
    """One survivor pool (region x tier, one role) in the event, as its accounting reads it."""

    region: str
    tier: str
    installed: int  # slices in service after the event (n)
    lost_to_pods: int  # slices lost with the pods
    warm: int  # warm slices the model joins to it (w)
    own_rps: float  # the region-tier's own req/s this hour (before the loss)
    #: req/s per source ('own', 'own_cold', 'div', 'div_long'): before shedding, after it,
    #: and after the admission clamp too (the load the pool is left with)
    before: dict[str, float]
    after_shed: dict[str, float]
    final: dict[str, float]
    normal_hits: tuple[float, float]  # (own, cold) prefix hit rates before the loss
    hits: tuple[float, float]  # (own, cold) prefix hit rates in the region's phase of the event


def account(inst: Instance, plan: Plan, event, dec, d) -> EventResult:
    """The exact accounting of one event at the what-if model's decisions ``dec``
    (``d``: the model data, for the fleet after the event and the traffic at the hour)."""
    ctx = Context(inst)
    tms = {t.name: t for t in tier_mixes(inst)}
    specs = {sl.label: sl for sl in slice_specs(inst)}
    o = inst.workload.output_tokens
    f = inst.failover.rewarm_hit_rate_factor
    plan_pools = {(p.region, p.tier, p.role): p for p in plan.pools}
    survivors = []
    routes = []
    for (x, r, t), share in sorted(dec.routes.items()):
        routes.append(RouteShare(lost=x, to=r, tier=t, share=round(share, 6), rps=round(share * d.lost_rps[(x, t)], 6)))
    tot_shed = tot_clamp = 0.0
    tot_warm = tot_res = 0
    margin_at: list[PoolLoad] = []  # each survivor pool's slices and final load, for its margins here
    for r in d.survivors:
        pools_out: list[PoolAccount] = []
        own_req = div_req = 0.0
        div_from: dict[str, float] = {}
        tok = {"own": 0.0, "div": 0.0, "own_miss": 0.0, "div_miss_steady": 0.0, "own_miss_steady": 0.0,
               "own_miss_tr": 0.0, "div_miss_tr": 0.0}
        shed_r = clamp_r = 0.0
        warm_r = res_r = 0
        prefill_in_service = 0
        front_need_at: list = []  # (tier, math, rates_final, n_total)
        for t in d.tiers:
            p = d.pools[(r, t)]
            tm = tms[t]
            div_tot = sum(dec.routes.get((x, r, t), 0.0) * d.lost_rps[(x, t)] for x in d.lost)
            for x in d.lost:
                v = dec.routes.get((x, r, t), 0.0) * d.lost_rps[(x, t)]
                if v > 0:
                    div_from[x] = div_from.get(x, 0.0) + v
            own_tot = p.own_rps + p.own_cold_rps
            own_req += own_tot
            div_req += div_tot
            T = tm.mean_tokens
            h = tm.hit_rate
            dh = inst.failover.diverted_hit_rate
            tok["own"] += own_tot * T
            tok["div"] += div_tot * T
            tok["own_miss"] += own_tot * T * (1 - h)
            tok["own_miss_steady"] += own_tot * T * (1 - h)
            tok["div_miss_steady"] += div_tot * T * (1 - dh)
            f_r = f if region_phase(inst, replace(event, phase="transient"), r) == "transient" else 1.0
            tok["own_miss_tr"] += (p.own_rps * T * (1 - h * f_r) + p.own_cold_rps * T * (1 - dh * f_r))
            tok["div_miss_tr"] += div_tot * T * (1 - dh * f_r)
            before = {"own": p.own_rps, "own_cold": p.own_cold_rps, "div": div_tot * (1 - p.clamp_share), "div_long": div_tot * p.clamp_share}
            shed = {q: dec.shed_rps.get((r, t, q), 0.0) for q in before}
            clamp = dec.clamp_rps.get((r, t), 0.0)
            after_shed = {q: max(before[q] - shed[q], 0.0) for q in before}
            final = dict(after_shed)
            final["div_long"] = max(final["div_long"] - clamp, 0.0)
            shed_r += sum(shed.values())
            clamp_r += clamp
            hit_own, hit_cold = hit_rates(inst, h, region_phase(inst, event, r))
            for role in d.roles(r, t):
                sh, n = p.slices.get(role, (None, 0))
                if sh is None:
                    if sum(final.values()) > 1e-9:
                        pools_out.append(_missing_pool(r, t, role, sum(final.values()), o))
                    continue
                w = dec.warm.get((r, t, role), 0)
                lost_n = plan_pools[(r, t, role)].slices - n if (r, t, role) in plan_pools else 0
                at = _PoolAt(region=r, tier=t, installed=n, lost_to_pods=lost_n, warm=w, own_rps=own_tot, before=before, after_shed=after_shed,
                             final=final, normal_hits=(h, 0.0), hits=(hit_own, hit_cold))
                if role == "decode":
                    acc = _decode_account(ctx, plan_pools[(r, t, role)], at, o)
                elif role == "prefill":
                    pm = _prefill_math(inst, tm, specs[sh], p.clamp_share)
                    rejected = {q: dec.residual_prefill_rps.get((r, t, q), 0.0) for q in final}
                    acc = _prefill_account(pm, sh, at, rejected)
                    prefill_in_service += n + w
                    front_need_at.append((t, pm, final, n + w))
                else:
                    acc = _replica_account(inst, tm, specs[sh], p.clamp_share, at, getattr(p, "schedule", None))
                    prefill_in_service += n + w
                warm_r += w
                res_r += acc.residual_slices
                pools_out.append(acc)
                margin_at.append(_margin_record(r, t, role, sh, n, w, final))
        traffic = (own_req + div_req) / own_req if own_req > 0 else math.inf
        traffic_tok = (tok["own"] + tok["div"]) / tok["own"] if tok["own"] > 0 else math.inf
        hit_before = 1 - tok["own_miss"] / tok["own"] if tok["own"] > 0 else 0.0
        all_tok = tok["own"] + tok["div"]
        hit_steady = 1 - (tok["own_miss_steady"] + tok["div_miss_steady"]) / all_tok if all_tok > 0 else 0.0
        hit_tr = 1 - (tok["own_miss_tr"] + tok["div_miss_tr"]) / all_tok if all_tok > 0 else 0.0
        miss_b = 1 - hit_before

        def pdm(hit_after: float, label: str) -> Multiplier:
            if tok["own"] <= 0:
                return Multiplier(value=None, explain=f"prefill ({label}): no prompt tokens of its own before the loss; all {_n(tok['div'])} "
                                                      f"prompt tokens/s are diverted, at a miss rate of {1 - hit_after:.3f}")
            if miss_b <= 0:
                return Multiplier(value=math.inf, explain="no prefill work before the loss (every prompt token cached)")
            val = traffic_tok * (1 - hit_after) / miss_b
            return Multiplier(value=round(val, 6), explain=f"prefill x{val:.2f} ({label}) = prompt tokens x{traffic_tok:.2f} x miss rate "
                              f"{1 - hit_after:.3f}/{miss_b:.3f} (hit {hit_before:.0%} -> {hit_after:.0%})")

        rew, rew_note = _rewarm(inst, r, d, event, front_need_at, prefill_in_service, tms, traffic_tok, miss_b, hit_steady, hit_tr)
        survivors.append(SurvivorReport(
            region=r, own_rps=round(own_req, 6), diverted_rps=round(div_req, 6), diverted_from={k: round(v, 6) for k, v in sorted(div_from.items())},
            traffic=Multiplier(value=round(traffic, 6), explain=f"traffic x{traffic:.2f} = (own {_n(own_req)} + diverted {_n(div_req)} req/s) / own {_n(own_req)} req/s")
            if own_req > 0 else Multiplier(value=None, explain=f"traffic: no traffic of its own; {_n(div_req)} req/s diverted, all of its load"),
            hit_rate_before=round(hit_before, 6), hit_rate_steady=round(hit_steady, 6), hit_rate_transient=round(hit_tr, 6),
            prefill_demand_steady=pdm(hit_steady, "steady"), prefill_demand_transient=pdm(hit_tr, "re-warm transient"),
            decode_demand=Multiplier(value=round(traffic, 6), explain=f"decode x{traffic:.2f} = output tokens/s (own {_n(own_req * o)} + diverted "
                                     f"{_n(div_req * o)}) / own {_n(own_req * o)}; {o:g} output tokens per request whatever the cache")
            if own_req > 0 else Multiplier(value=None, explain=f"decode: no output tokens of its own; {_n(div_req * o)} output tokens/s diverted"),
            shed_rps=round(shed_r, 6), clamped_rps=round(clamp_r, 6), warm_slices=warm_r, residual_slices=res_r,
            pools=pools_out, rewarm=rew, rewarm_note=rew_note,
        ))
        tot_shed += shed_r
        tot_clamp += clamp_r
        tot_warm += warm_r
        tot_res += res_r
    notes = list(dec.notes)
    if event.lost and event.routing in ("plan", "controller"):
        notes.insert(0, f"routing held at the {'plan' if event.routing == 'plan' else 'controller document'}'s failover shares (what is "
                        "deployed), not re-optimised; shedding, the admission clamp and warm slices are decided for it")
    if event.lost_pods:
        notes.append("pods lost: the what-if does not read which slices a placement puts in which pod, so the lost pods are taken as the fullest ones, their slices drawn from every pool and the warm pool "
                     "of that chip type in proportion to chips; in the transient the own users whose cache was on them arrive cold")
    if dec.dropped_rps > 0:
        notes.append(f"{_n(dec.dropped_rps)} req/s of lost traffic have no surviving region allowed to absorb them (failover_to): dropped")
    return EventResult(
        label=event.label(), lost_regions=list(event.lost), lost_pods=[f"{r}:{k}:{n}" for r, k, n in event.lost_pods], hour=event.hour,
        phase=event.phase, routing=event.routing, routes=routes, survivors=survivors, dropped_rps=round(dec.dropped_rps, 6), shed_rps=round(tot_shed, 6),
        clamped_rps=round(tot_clamp, 6), warm_slices=tot_warm, residual_slices=tot_res,
        residual_request_equivalents=round(unserved_request_equivalents(survivors, o) + dec.dropped_rps, 6),
        model_residual_request_equivalents=round(dec.model_unserved_rps, 6), mix_iterations=dec.mix_iterations,
        solve_s=round(dec.solve_s, 3), notes=notes, margins=_event_margins(inst, plan, margin_at, event.label()),
    )


def _margin_record(r: str, t: str, role: str, sh: str, n: int, w: int, final: dict[str, float]) -> PoolLoad:
    """A survivor pool's slices in service (``n``, warm ``w`` joined) and the load it is left
    with after shedding and the clamp (``final``: own, own users arriving cold and diverted,
    requests/s), as the margin search reads a scenario record: the cold ones (diverted, or own
    whose cache was on lost pods) at the diverted hit rate."""
    own, cold = final.get("own", 0.0), sum(v for k, v in final.items() if k != "own")
    return PoolLoad(region=r, tier=t, role=role, slice=sh, slices=n + w, warm_slices=w, arrivals_rps=own + cold, diverted_rps=cold,
                    clamped_rps=0.0, shed_rps=0.0, shortfall=0.0, shortfall_unit="requests/s", utilisation=None, capacity=None,
                    capacity_unit="not computed")


def _event_margins(inst: Instance, plan: Plan, records: list[PoolLoad], label: str) -> list[SloMargin]:
    """Every survivor pool's SLO margins in the event (:func:`fleetplan.results.margins.scenario_margins`):
    the step-time and load multipliers at which each SLO breaks at the pool's slices and load
    after the event and its mitigations, under the failover operating points; below 1 where
    the pool cannot hold the SLO as it is (a pool left short)."""
    from fleetplan.results.margins import scenario_margins

    left = {(p.region, p.tier, p.role): p.slices - p.warm_slices for p in records}
    pools = [p.model_copy(update={"slices": left[(p.region, p.tier, p.role)]}) if (p.region, p.tier, p.role) in left else p
             for p in plan.pools]
    return scenario_margins(inst, pools, [(p, True) for p in records], label)


def unserved_request_equivalents(survivors: list[SurvivorReport], o: float) -> float:
    """Requests/s left unserved, counted once per region-tier: a request rejected at
    prefill never decodes, so a tier's unserved load is the larger of its prefill (or
    replica) residual and its decode residual in requests (tokens/s over o)."""
    per: dict[tuple[str, str], float] = {}
    for s in survivors:
        for p in s.pools:
            x = p.residual / o if p.role == "decode" else p.residual
            per[(p.region, p.tier)] = max(per.get((p.region, p.tier), 0.0), x)
    return sum(per.values())


def _missing_pool(r, t, role, rps, o) -> PoolAccount:
    unit = "output tokens/s" if role == "decode" else "req/s"
    amt = rps * o if role == "decode" else rps
    return PoolAccount(region=r, tier=t, role=role, slice="-", installed=0, lost_to_pods=0, need_normal=None, need_failover=None,
                       need_final=None, gap=0, steps=[], warm_slices=0, residual_slices=0, headroom_slices=0, residual=amt,
                       residual_unit=unit, reject_share=1.0, utilisation=None,
                       impact=f"the plan has no {role} pool for tier {t} in {r}: all {_n(rps)} req/s of it are rejected")


_SOURCE_WORDS = {"own": "own users", "own_cold": "own users with a lost cache", "div": "diverted users", "div_long": "diverted long prompts"}


def _mitigation_steps(need_b, need_s, need_f, shed_rps: float, clamp_rps: float, w: int, unit: str, warm_text: str,
                      clamp_text: str) -> list[Step]:
    """The shed / clamp / warm lines of a pool's accounting, in the order they are reached
    for: each frees needed(before it) - needed(after it) slices (``unit``: 'slices' or
    'replicas'; a need of None -- the SLO cannot hold -- frees nothing countable)."""

    def freed(a, b):
        return (a - b) if (a is not None and b is not None) else 0

    steps = []
    if shed_rps > TINY_RPS:
        steps.append(Step(name="batch shed", slices=freed(need_b, need_s), amount=round(shed_rps, 6), amount_unit="req/s",
                          explain=f"shed {_n(shed_rps)} req/s of the sheddable class: needed {need_b} -> {need_s} {unit}"))
    if clamp_rps > TINY_RPS:
        steps.append(Step(name="admission clamp", slices=freed(need_s, need_f), amount=round(clamp_rps, 6), amount_unit="req/s",
                          explain=f"{clamp_text}: needed {need_s} -> {need_f} {unit}"))
    if w > 0:
        steps.append(Step(name="warm pool", slices=w, amount=w, amount_unit=unit, explain=warm_text))
    return steps


def _after(steps: list[Step]) -> str:
    """' for the admitted requests (after batch shed and admission clamp)', or '' when no
    request was turned away."""
    names = [st.name for st in steps if st.name in ("batch shed", "admission clamp")]
    return f" for the admitted requests (after {' and '.join(names)})" if names else ""


def _warm_text(w: int, sh: str, tail: str) -> str:
    return f"{w} warm {sh} slice{'s' if w != 1 else ''} join{'s' if w == 1 else ''}{tail}"


def _prefill_account(pm: _PrefillMath, sh: str, at: _PoolAt, rejected: dict[str, float]) -> PoolAccount:
    """A prefill pool of shape ``sh`` (``pm``: its exact numbers). ``rejected``: req/s per
    source the model rejects (its residual); the rest must meet the SLO on n + w slices --
    checked here exactly, any excess added to the residual."""
    r, t, n, lost_n, w, own_tot = at.region, at.tier, at.installed, at.lost_to_pods, at.warm, at.own_rps
    before, after_shed, final, normal_hits, hits = at.before, at.after_shed, at.final, at.normal_hits, at.hits
    need_norm = pm.need({"own": own_tot}, *normal_hits)
    need_b = pm.need(before, *hits)
    need_s = pm.need(after_shed, *hits)
    need_f = pm.need(final, *hits)
    shed_rps = sum(before.values()) - sum(after_shed.values())
    clamp_rps = sum(after_shed.values()) - sum(final.values())
    steps = _mitigation_steps(need_b, need_s, need_f, shed_rps, clamp_rps, w, "slices", _warm_text(w, sh, f": {n} -> {n + w} in service"),
                              f"reject {_n(clamp_rps)} req/s of cold prompts >= {pm.clamp_min:,} tokens")
    lam_f = sum(final.values())
    served = {q: max(v - rejected.get(q, 0.0), 0.0) for q, v in final.items()}
    lam_s = sum(served.values())
    if need_f is None:
        res_slices, excess = 0, lam_s
    else:
        res_slices = max(need_f - n - w, 0)
        excess = max(lam_s - pm.carry(n + w, served, *hits), 0.0) if lam_s > 0 else 0.0
        if excess <= REL_TOL * max(lam_s, 1.0):
            excess = 0.0
    residual = (lam_f - lam_s) + excess
    if residual <= REL_TOL * max(lam_f, 1.0):
        residual = 0.0
    ttft, util = pm.ttft(n + w, final, *hits)
    share = residual / lam_f if lam_f > 0 else 0.0
    pm_limits = [x.limit_ms for x in pm.slos if x.percentile == 99.0]
    who = ", ".join(f"{_SOURCE_WORDS[q]} {_n(v)}" for q, v in rejected.items() if v > TINY_RPS)
    which = f" ({who} req/s)" if who else ""
    if need_f is None:
        impact = "the TTFT SLO cannot hold for this mix at any pool size (the percentile prompt's compute alone exceeds it); every request of it misses"
        share = 1.0
        residual = lam_f
    elif residual <= 0:
        lim = f" {min(pm_limits):,.0f} ms" if pm_limits else ""
        impact = f"TTFT p99 {ttft.get('p99', 0):,.0f} ms, within the{lim} SLO{_after(steps)}" if ttft else "within the SLO"
    elif ttft:
        impact = (f"if all {_n(lam_f)} req/s are admitted, TTFT p50 {ttft['p50']:,.0f} ms / p99 {ttft['p99']:,.0f} ms (queueing at "
                  f"{util:.0%} busy); to hold the SLO, reject fast {share:.1%} of requests{which}")
    elif util is None:
        impact = f"no slices left in service: all {_n(lam_f)} req/s are rejected"
    else:
        impact = (f"the pool would be {util:.0%} busy: the queue grows without bound; reject fast {share:.1%} of requests"
                  f"{which} to hold the SLO")
    return PoolAccount(region=r, tier=t, role="prefill", slice=sh, installed=n, lost_to_pods=lost_n, need_normal=need_norm, need_failover=need_b,
                       need_final=need_f, gap=max((need_b or 0) - n, 0) if need_b is not None else 0, steps=steps, warm_slices=w,
                       residual_slices=res_slices, headroom_slices=max(n + w - need_f, 0) if need_f is not None else 0,
                       residual=round(residual, 6), residual_unit="req/s", reject_share=round(share, 6), check_excess=round(excess, 6),
                       work_normal_erlangs=round(pm.work({"own": own_tot}, *normal_hits), 6), work_failover_erlangs=round(pm.work(before, *hits), 6),
                       utilisation=round(util, 6) if util is not None else None, ttft_ms={k: round(v, 3) for k, v in ttft.items()}, impact=impact)


def _decode_account(ctx: Context, plan_pool, at: _PoolAt, o: float) -> PoolAccount:
    """A decode pool (``plan_pool``: the plan's, for its shape and normal and failover
    operating points; ``o``: output tokens per request): slices at the knee operating point,
    ceil(output tokens/s / tokens/s per slice)."""
    r, t, n, lost_n, w, own_tot = at.region, at.tier, at.installed, at.lost_to_pods, at.warm, at.own_rps
    before, after_shed, final = at.before, at.after_shed, at.final
    sh = plan_pool.slice
    opn, opk = plan_pool.decode_normal, plan_pool.decode_failover
    cap_n = ctx.decode_op(t, sh, opn.batch_cap, opn.draft_tokens).tokens_per_s if opn else 0.0
    cap_k = ctx.decode_op(t, sh, opk.batch_cap, opk.draft_tokens).tokens_per_s if opk else cap_n
    dem = {k: o * sum(v.values()) for k, v in (("before", before), ("shed", after_shed), ("final", final))}
    # the same relative tolerance as the residual
    need = lambda x, cap: _ceil(x * (1 - REL_TOL) / cap) if cap > 0 else None  # noqa: E731
    need_norm = need(o * own_tot, cap_n)
    need_bn = need(dem["before"], cap_n)
    need_b, need_s, need_f = need(dem["before"], cap_k), need(dem["shed"], cap_k), need(dem["final"], cap_k)
    steps = []
    if opn and opk and (opn.batch_cap, opn.draft_tokens) != (opk.batch_cap, opk.draft_tokens) and need_bn is not None:
        spec = lambda op: f"speculation k={op.draft_tokens}" if op.draft_tokens else "speculation off"  # noqa: E731
        steps.append(Step(name="ride to the knee", slices=need_bn - need_b, amount=round(cap_k - cap_n, 6), amount_unit="output tokens/s per slice",
                          explain=f"batch {opn.batch_cap} ({spec(opn)}) -> {opk.batch_cap} ({spec(opk)}), the SLO knee: "
                                  f"{_n(cap_n)} -> {_n(cap_k)} tokens/s per slice; needed {need_bn} -> {need_b} slices"))
    steps += _mitigation_steps(need_b, need_s, need_f, (dem["before"] - dem["shed"]) / o, (dem["shed"] - dem["final"]) / o, w, "slices",
                               _warm_text(w, sh, " at the knee operating point"), "clamped requests never decode")
    cap_total = cap_k * (n + w)
    residual = max(dem["final"] - cap_total, 0.0)
    if residual <= REL_TOL * max(dem["final"], 1.0):
        residual = 0.0
    share = residual / dem["final"] if dem["final"] > 0 else 0.0
    util = dem["final"] / cap_total if cap_total > 0 else None
    if residual <= 0:
        impact = (f"TPOT within the SLO at {_u(util)} of the knee capacity{_after(steps)}" if util is not None else "within the SLO")
    elif util is None:
        impact = f"no slices left in service: all {_n(dem['final'] / o)} req/s are rejected"
    else:
        impact = (f"decode demand is {_u(util)} of the knee capacity: admitting it all pushes occupancy past the SLO knee (TPOT p99 over the SLO) "
                  f"or queues requests for a decode slot; to hold TPOT, reject fast {share:.1%} of requests")
    return PoolAccount(region=r, tier=t, role="decode", slice=sh, installed=n, lost_to_pods=lost_n, need_normal=need_norm, need_failover=need_b,
                       need_final=need_f, gap=max((need_b or 0) - n, 0), steps=steps, warm_slices=w,
                       residual_slices=max((need_f or 0) - n - w, 0), headroom_slices=max(n + w - (need_f or 0), 0),
                       residual=round(residual, 6), residual_unit="output tokens/s", reject_share=round(share, 6),
                       utilisation=round(util, 6) if util is not None else None, impact=impact)


def _replica_account(inst, tm, sl, kappa: float, at: _PoolAt, schedule: str | None = None) -> PoolAccount:
    """A colocated replica pool of tier mix ``tm`` on slice ``sl`` (``kappa``: the share of
    the diverted requests whose prompts reach the admission clamp's length; ``schedule``: the
    plan's, prefill-first if none): replicas by the plan's own rule, n x rate(n) x headroom
    >= the load."""
    r, t, n, lost_n, w, own_tot = at.region, at.tier, at.installed, at.lost_to_pods, at.warm, at.own_rps
    before, after_shed, final, normal_hits, hits = at.before, at.after_shed, at.final, at.normal_hits, at.hits
    from fleetplan.instance.physics import held_slowest_first
    from fleetplan.perf.colocated import PREFILL_FIRST, Schedule
    from fleetplan.perf.robust import fit_under, rates_under

    cm = inst.failover.admission_clamp.min_input_tokens
    head = inst.serving.utilisation_headroom
    sched = Schedule.parse(schedule) if schedule else Schedule(PREFILL_FIRST)
    fits = fit_under(held_instances(inst), tm, sl, "replica").fits  # under every held physics source
    held = [si for _, si in held_slowest_first(inst)]

    def rates_of(rates, hh):
        src = split_sources({k: v for k, v in rates.items() if v > 1e-12}, hh[0], hh[1], cm, kappa)
        src = [x for x in src if x.weight > 0]
        return rates_under(held, tm, sl, src, sched) if (src and fits) else None

    def per(rates, hh, k):
        # req/s per replica in a pool of k under the plan's schedule (least-work pooling: the rate rises with k)
        rr = rates_of(rates, hh)
        return rr.rate(max(k, 1)) * head if rr is not None else (math.inf if fits else 0.0)

    def need(rates, hh):
        # fewest replicas n with n x rate(n) x headroom >= the load (the plan's own rule, perf.colocated)
        lam = sum(rates.values())
        if lam <= 0:
            return 0
        rr = rates_of(rates, hh)
        return rr.replicas_for(lam * (1 - REL_TOL), head) if rr is not None else None

    need_norm = need({"own": own_tot}, normal_hits)
    need_b, need_s, need_f = need(before, hits), need(after_shed, hits), need(final, hits)
    shed_rps = sum(before.values()) - sum(after_shed.values())
    clamp_rps = sum(after_shed.values()) - sum(final.values())
    steps = _mitigation_steps(need_b, need_s, need_f, shed_rps, clamp_rps, w, "replicas", f"{w} warm replica{'s' if w != 1 else ''} join",
                              f"reject {_n(clamp_rps)} req/s of cold long prompts")
    lam_f = sum(final.values())
    cap = per(final, hits, n + w) * (n + w) if lam_f > 0 else 0.0
    residual = max(lam_f - cap, 0.0) if lam_f > 0 else 0.0
    if residual <= REL_TOL * max(lam_f, 1.0):
        residual = 0.0
    share = residual / lam_f if lam_f > 0 else 0.0
    impact = "within the SLOs" if residual <= 0 else (f"no replicas left in service: all {_n(lam_f)} req/s are rejected" if cap <= 0 else
                                           f"replicas past their SLO-limited rate: reject fast {share:.1%} of requests to hold TTFT and TPOT")
    return PoolAccount(region=r, tier=t, role="replica", slice=sl.label, installed=n, lost_to_pods=lost_n, need_normal=need_norm, need_failover=need_b,
                       need_final=need_f, gap=max((need_b or 0) - n, 0), steps=steps, warm_slices=w,
                       residual_slices=max((need_f or 0) - n - w, 0), headroom_slices=max(n + w - (need_f or 0), 0),
                       residual=round(residual, 6), residual_unit="req/s", reject_share=round(share, 6),
                       utilisation=round(lam_f / cap, 6) if cap > 0 else None, impact=impact)


def _rewarm(inst, r, d, event, front, in_service, tms, traffic_tok, miss_b, hit_steady, hit_tr) -> tuple[RewarmReport | None, str]:
    gb = inst.failover.prefix_cache_gb_per_prefill_chip
    f0 = inst.failover.rewarm_hit_rate_factor
    if hit_steady - hit_tr <= 1e-9:
        return None, "no re-warm dip here (no cold traffic arrives, or rewarm_hit_rate_factor = 1)"
    if event.phase != "transient":
        return None, "the re-warm timeline is part of the transient phase (--phase transient or both)"
    if gb is None:
        return None, "re-warm time not estimated: set failover.prefix_cache_gb_per_prefill_chip in the instance"
    if all(d.mode_of(rr, t) != "disaggregated" for (rr, t) in d.pools if rr == r):
        return None, "re-warm time is estimated for disaggregated prefill pools only"
    chips = sum(n * int(sh.rpartition("x")[2]) for (rr, t), p in d.pools.items() if rr == r
                for sh, n in [p.slices.get("prefill", (None, 0))] if sh is not None)
    if chips <= 0:
        return None, "no prefill slices: no prefix cache"
    cache = cache_tokens(chips * gb, kv_bytes_per_token(inst.model))
    cold = 0.0
    for (t, pm, final, _) in front:
        hit_own, hit_cold = hit_rates(inst, tms[t].hit_rate, region_phase(inst, event, r))
        cold_rates = {k: v for k, v in final.items() if k != "own"}
        cold += pm.new_tokens_per_s(cold_rates, hit_own, hit_cold)
    if cold <= 0:
        return None, "no cold prompt tokens reach the survivor's prefill pools: nothing to re-warm"
    rw = rewarm(cache, cold, hit_tr, hit_steady)
    flood = region_phase(inst, event, r) == "transient"
    dh = inst.failover.diverted_hit_rate

    def hits_at(h: float, g: float) -> tuple[float, float]:
        """(own, cold) hit rates at closing fraction g of the dip: a flood region recovers
        from the dip factor on every source; a region that lost pods sees its cold users
        return to the warm hit rate."""
        if flood:
            return h * (f0 + (1 - f0) * g), dh * (f0 + (1 - f0) * g)
        return h, dh + (h - dh) * g

    pts = []
    times = [0.0] + ([rw.tau_s * k for k in (0.5, 1.0, 2.0)] + [rw.done_s] if math.isfinite(rw.tau_s) else [])
    for ts in sorted(set(round(x, 6) for x in times)):
        hit = float(rw.hit_at(ts))
        g = 1.0 - math.exp(-ts / rw.tau_s) if rw.tau_s > 0 else 1.0  # t = 0 is the transient table above
        need, have = {}, {}
        for (t, pm, final, n_in) in front:
            key = f"{t} {pm.sl.label}"
            need[key] = pm.need(final, *hits_at(tms[t].hit_rate, g))
            have[key] = n_in
        pts.append(RewarmPoint(t_s=round(ts, 3), hit_rate=round(hit, 6), prefill_demand_multiplier=(round(traffic_tok * (1 - hit) / miss_b, 6) if miss_b > 0 else 0.0) if math.isfinite(traffic_tok) else None,
                               needed=need, in_service=have))
    explain = (f"tau = cache {cache:.3g} tokens ({chips:,} prefill chips x {gb:g} GB / {kv_bytes_per_token(inst.model) / 1024:g} KiB per token) / "
               f"cold prompt tokens {cold:.3g}/s = {rw.tau_s:,.0f} s; hit {hit_tr:.0%} -> {hit_steady:.0%} within 1 point after {rw.done_s / 60:,.1f} min")
    return RewarmReport(cache_tokens=round(cache, 3), cold_tokens_per_s=round(cold, 3), tau_s=round(rw.tau_s, 3), done_s=round(rw.done_s, 3),
                        points=pts, explain=explain), ""
