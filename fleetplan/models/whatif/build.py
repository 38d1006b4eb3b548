r"""The what-if model: a plan's installed fleet held fixed, one loss event (regions and/or
pods), one hour and one phase; only what operations can change is decided.

Index sets: lost regions X, survivors r, tiers t, traffic sources q of a survivor's tier
pools -- ``own`` (its own users, warm cache), ``own_cold`` (its own users whose cache was
on lost pods; transient only), ``div`` (diverted users' prompts below the admission-clamp
length) and ``div_long`` (diverted prompts at or above it: the clampable part).

Decisions: routing shares :math:`v\_route_{X,r,t}` of each lost region's tier traffic to
its allowed survivors; the admission clamp :math:`v\_clamp_{r,t}` (req/s of cold long
diverted prompts rejected); sheddable-class shedding :math:`v\_shed_{r,t,q}`; warm-pool
slices joining each pool (:math:`v\_warm\_pick_{r,t,\rho,k}`, one-hot over k = 0..W); the
residual shortfall (:math:`v\_res\_prefill_{r,t,q}` req/s, :math:`v\_res\_decode_{r,t}`
output tokens/s, :math:`v\_res\_replica` via the balance). Decode runs at the failover
operating point (the best legal one up to the SLO knee, speculation as it pays there);
prefill capacity is the exact M/G/c curve :math:`A_{r,t}(m)` (Erlangs within the TTFT
budget on m slices) for the pool's traffic mix, refreshed by the driver until the mix the
solution sends matches the mix the curve was built for.

The objective is lexicographic (:func:`fleetplan.whatif.decide`): least residual, then
the mitigations in the reverse of the order they are reached for -- fewest warm slices,
then least clamping, then least shedding -- so the sheddable (batch) class is shed
first, the clamp comes next and warm-pool slices last (the issue's order); finally the
routing closest to the reference split (proportional to the survivors' own load in that
hour). Each stage is a separate solve with the earlier stages' optima capped.

Units: rates are in req/s (output tokens/s for decode, Erlangs for prefill work) divided
by :attr:`WhatIfData.rate_unit` -- 1, the identity, at every load up to RATE_UNIT_ABOVE
req/s, a power of ten above it -- so every rate variable holds rate_unit req/s per unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyomo.environ as pyo

__all__ = ["WhatIfPool", "WhatIfData", "build_whatif_model", "STAGES", "RATE_UNIT_ABOVE"]

#: the largest load (req/s) the model takes in req/s; above it, rates are in a power of ten
#: of req/s (:attr:`WhatIfData.rate_unit`) so that the model's coefficients stay in range
RATE_UNIT_ABOVE = 1e4

#: objective stages, in lexicographic order: (expression name, what it minimises)
STAGES = [
    ("e_residual", "residual shortfall (request equivalents/s)"),
    ("e_warm_slices", "warm-pool slices used (slices)"),
    ("e_clamp_rps", "cold long prompts clamped (req/s)"),
    ("e_shed_rps", "sheddable-class requests shed (req/s)"),
    ("e_route_deviation", "routing away from the reference split (share)"),
]


@dataclass
class WhatIfPool:
    """A survivor region x tier in the event (units in names).

    ``slices[role]`` = (slice shape label, slices in service after any pod loss);
    ``warm_max[role]`` = warm slices of that shape the region holds; ``service_ms[q]``
    = mean prefill service time of source q (ms); ``curve`` = A(m) for m = 0..n+W
    (Erlangs; prefill) ; ``decode_tokens_per_s`` = output tokens/s per decode slice at the
    failover operating point; ``replica_rps`` = req/s per replica (colocated).
    """

    region: str
    tier: str
    slices: dict[str, tuple[str | None, int]]
    warm_max: dict[str, int]
    own_rps: float
    own_cold_rps: float
    clamp_share: float  # of the tier's diverted requests, prompts >= the clamp length
    service_ms: dict[str, float] = field(default_factory=dict)
    curve: np.ndarray | None = None
    curve_clamped: np.ndarray | None = None  # A(m) with the admission clamp on (no cold long prompts)
    decode_tokens_per_s: float = 0.0
    replica_rps: float = 0.0
    schedule: str | None = None  # replica pools: the plan's engine schedule ('prefill-first', 'chunked-<C>')


@dataclass
class WhatIfData:
    """Everything the what-if model needs for one event, hour and phase."""

    modes: dict[tuple[str, str], str]  # (survivor, tier) -> disaggregated | colocated, the plan's mode there
    lost: list[str]
    survivors: list[str]
    tiers: list[str]
    absorbers: dict[str, list[str]]  # lost region -> allowed survivors
    lost_rps: dict[tuple[str, str], float]  # (lost region, tier) -> req/s at the hour
    reference: dict[tuple[str, str], float]  # (lost, survivor) -> reference share
    pools: dict[tuple[str, str], WhatIfPool]
    warm: dict[tuple[str, str], int]  # (region, shape) -> warm slices
    batch_share: float
    output_tokens: float

    @cached_property
    def rate_unit(self) -> float:
        """Requests/s per model unit of rate: 1 while every load of the event is at most
        RATE_UNIT_ABOVE req/s, else the power of ten that brings the largest to at most that.
        Every rate constant (req/s, output tokens/s, Erlangs) enters the model divided by it
        and every rate variable (serve, shed, clamp, residual) is in it; the driver
        multiplies them back. A region at 1e8 req/s otherwise puts 3e10 in the decode rows
        beside coefficients of 0.03, and HiGHS 1.16 then declares the always-feasible model
        infeasible or returns a worse point as optimal."""
        top = max([*self.lost_rps.values(), *(p.own_rps + p.own_cold_rps for p in self.pools.values()), 0.0])
        return 10.0 ** math.ceil(math.log10(top / RATE_UNIT_ABOVE)) if top > RATE_UNIT_ABOVE else 1.0

    def sources(self, r: str, t: str) -> list[str]:
        p = self.pools[(r, t)]
        out = ["own"]
        if p.own_cold_rps > 0:
            out.append("own_cold")
        if any(r in self.absorbers[x] for x in self.lost):
            out.append("div")
            if p.clamp_share > 0:
                out.append("div_long")
        return out

    def mode_of(self, r: str, t: str) -> str:
        """The serving mode (r, t) runs in the plan: a lost region's traffic lands on it, whatever it is."""
        return self.modes.get((r, t), "disaggregated")

    def roles(self, r: str, t: str) -> list[str]:
        return ["prefill", "decode"] if self.mode_of(r, t) == "disaggregated" else ["replica"]

    def front(self, r: str, t: str) -> str:
        """The role a request meets first at (r, t): prefill, or the replica."""
        return self.roles(r, t)[0]

    def pools_of(self, mode: str) -> list[tuple[str, str]]:
        return [k for k in self.pools if self.mode_of(*k) == mode]


def add_routing(m: pyo.ConcreteModel, d: WhatIfData) -> None:
    r"""Routing of every lost region's tier traffic to its allowed survivors.

    .. math:: \sum_{r \in A(X)} v\_route_{X,r,t} = 1 \quad (c\_whatif\_route),\qquad
              e\_div_{r,t} = \sum_X v\_route_{X,r,t}\, L_{X,t}

    L (req/s) is the lost region's tier traffic at the hour. A lost region with no
    surviving absorber is dropped whole (reported, a constant in the residual).
    """
    keys = [(x, r, t) for x in d.lost for r in d.absorbers[x] for t in d.tiers]
    m.ROUTES = pyo.Set(initialize=keys, dimen=3, ordered=True)
    m.v_route = pyo.Var(m.ROUTES, bounds=(0.0, 1.0))
    pairs = [(x, t) for x in d.lost if d.absorbers[x] for t in d.tiers]
    m.c_whatif_route = pyo.Constraint(pairs, rule=lambda _m, x, t: sum(m.v_route[x, r, t] for r in d.absorbers[x]) == 1.0)
    m.e_div_rps = pyo.Expression(list(d.pools), rule=lambda _m, r, t: sum(
        m.v_route[x, r, t] * (d.lost_rps[(x, t)] / d.rate_unit) for x in d.lost if r in d.absorbers[x]))
    m.p_dropped_rps = sum(d.lost_rps[(x, t)] for x in d.lost if not d.absorbers[x] for t in d.tiers) / d.rate_unit
    m.v_route_dev = pyo.Var(m.ROUTES, domain=pyo.NonNegativeReals)
    m.c_whatif_route_dev_up = pyo.Constraint(m.ROUTES, rule=lambda _m, x, r, t: m.v_route_dev[x, r, t] >= m.v_route[x, r, t] - d.reference[(x, r)])
    m.c_whatif_route_dev_dn = pyo.Constraint(m.ROUTES, rule=lambda _m, x, r, t: m.v_route_dev[x, r, t] >= d.reference[(x, r)] - m.v_route[x, r, t])
    m.e_route_deviation = pyo.Expression(expr=sum(m.v_route_dev[k] for k in m.ROUTES))


def add_admission(m: pyo.ConcreteModel, d: WhatIfData) -> None:
    r"""Arrivals per source after the admission clamp, and sheddable-class shedding.

    .. math::
       \lambda_{own} = \ell_r \mathit{peak}_r \sigma_t (1-\phi_r),\;
       \lambda_{own\_cold} = \ell_r \mathit{peak}_r \sigma_t \phi_r,\;
       \lambda_{div} = (1-\kappa_t)\, e\_div_{r,t},\;
       \lambda_{div\_long} = \kappa_t\, e\_div_{r,t} - v\_clamp_{r,t}

       v\_clamp_{r,t} = v\_clamp\_on_{r,t}\, \kappa_t\, e\_div_{r,t}
       \quad (c\_whatif\_clamp, c\_whatif\_clamp\_all, c\_whatif\_clamp\_off; big-M = \kappa_t \sum_X L_{X,t})

       v\_shed_{r,t,q} \le \beta\, \lambda_q \quad (c\_whatif\_shed)

    :math:`\phi_r` is the share of the region's own traffic whose cache was on lost pods
    (transient phase of a pod loss), :math:`\kappa_t` the share of the tier's prompts at
    or above the clamp length, :math:`\beta` the sheddable classes' share. Units: req/s.
    The clamp is a rule a survivor's tier turns on or off (binary): a partial clamp would
    leave a few cold long prompts whose compute sets the TTFT percentile, a capacity
    cliff the traffic-mix refresh could not settle on.
    """
    src = [(r, t, q) for (r, t) in d.pools for q in d.sources(r, t)]
    m.SOURCES = pyo.Set(initialize=src, dimen=3, ordered=True)
    clamp_keys = [(r, t) for (r, t) in d.pools if "div_long" in d.sources(r, t)]
    m.CLAMP = pyo.Set(initialize=clamp_keys, dimen=2, ordered=True)
    m.v_clamp = pyo.Var(m.CLAMP, domain=pyo.NonNegativeReals)
    m.v_clamp_on = pyo.Var(m.CLAMP, domain=pyo.Binary)
    big = {(r, t): d.pools[(r, t)].clamp_share * sum(d.lost_rps[(x, t)] for x in d.lost if r in d.absorbers[x]) / d.rate_unit for (r, t) in clamp_keys}
    m.c_whatif_clamp = pyo.Constraint(m.CLAMP, rule=lambda _m, r, t: m.v_clamp[r, t] <= d.pools[(r, t)].clamp_share * m.e_div_rps[r, t])
    m.c_whatif_clamp_all = pyo.Constraint(m.CLAMP, rule=lambda _m, r, t: m.v_clamp[r, t] >= d.pools[(r, t)].clamp_share * m.e_div_rps[r, t]
                                          - big[(r, t)] * (1 - m.v_clamp_on[r, t]))
    m.c_whatif_clamp_off = pyo.Constraint(m.CLAMP, rule=lambda _m, r, t: m.v_clamp[r, t] <= big[(r, t)] * m.v_clamp_on[r, t])

    def kept(_m, r, t, q):
        p = d.pools[(r, t)]
        if q == "own":
            return p.own_rps / d.rate_unit
        if q == "own_cold":
            return p.own_cold_rps / d.rate_unit
        if q == "div":
            return (1.0 - p.clamp_share) * m.e_div_rps[r, t]
        return p.clamp_share * m.e_div_rps[r, t] - m.v_clamp[r, t]

    m.e_kept_rps = pyo.Expression(m.SOURCES, rule=kept)
    m.v_shed = pyo.Var(m.SOURCES, domain=pyo.NonNegativeReals)
    m.c_whatif_shed = pyo.Constraint(m.SOURCES, rule=lambda _m, r, t, q: m.v_shed[r, t, q] <= d.batch_share * m.e_kept_rps[r, t, q])
    m.e_admitted_rps = pyo.Expression(list(d.pools), rule=lambda _m, r, t: sum(
        m.e_kept_rps[r, t, q] - m.v_shed[r, t, q] for q in d.sources(r, t)))
    m.e_shed_rps = pyo.Expression(expr=sum(m.v_shed[k] for k in m.SOURCES))
    m.e_clamp_rps = pyo.Expression(expr=sum(m.v_clamp[k] for k in m.CLAMP))


def add_warm(m: pyo.ConcreteModel, d: WhatIfData) -> None:
    r"""Warm-pool slices join pools of their shape, whole.

    .. math:: \sum_k v\_warm\_pick_{r,t,\rho,k} = 1,\quad
              w_{r,t,\rho} = \sum_k k\, v\_warm\_pick_{r,t,\rho,k},\quad
              \sum_{(t,\rho): c(r,t,\rho) = c} w_{r,t,\rho} \le W_{r,c} \quad (c\_whatif\_warm)

    The one-hot form lets the prefill capacity use the exact A(n + k). Units: slices.
    """
    keys, picks = [], []
    for (r, t), p in d.pools.items():
        for ro in d.roles(r, t):
            shape, n = p.slices.get(ro, (None, 0))
            if shape is None:
                continue
            keys.append((r, t, ro))
            picks += [(r, t, ro, k) for k in range(p.warm_max.get(ro, 0) + 1)]
    m.WARM_POOLS = pyo.Set(initialize=keys, dimen=3, ordered=True)
    m.WARM_PICK = pyo.Set(initialize=picks, dimen=4, ordered=True)
    m.v_warm_pick = pyo.Var(m.WARM_PICK, domain=pyo.Binary)
    m.c_whatif_warm_one = pyo.Constraint(m.WARM_POOLS, rule=lambda _m, r, t, ro: sum(
        m.v_warm_pick[r, t, ro, k] for k in range(d.pools[(r, t)].warm_max.get(ro, 0) + 1)) == 1)
    m.e_warm = pyo.Expression(m.WARM_POOLS, rule=lambda _m, r, t, ro: sum(
        k * m.v_warm_pick[r, t, ro, k] for k in range(d.pools[(r, t)].warm_max.get(ro, 0) + 1)))
    groups: dict[tuple[str, str], list] = {}
    for (r, t, ro) in keys:
        groups.setdefault((r, d.pools[(r, t)].slices[ro][0]), []).append((r, t, ro))
    m.c_whatif_warm = pyo.Constraint(sorted(groups), rule=lambda _m, r, c: sum(m.e_warm[k] for k in groups[(r, c)]) <= d.warm.get((r, c), 0))
    m.e_warm_slices = pyo.Expression(expr=sum(m.e_warm[k] for k in m.WARM_POOLS))


def _warm_of(m, r, t, ro):
    return m.e_warm[r, t, ro] if (r, t, ro) in m.WARM_POOLS else 0


def add_capacity(m: pyo.ConcreteModel, d: WhatIfData) -> None:
    r"""Capacity of every survivor pool, with the residual as an explicit variable.

    .. math::
       v\_serve_{q} + v\_shed_{q} + v\_res\_prefill_{q} \ge \lambda_q \quad (c\_whatif\_balance)

       \sum_q v\_serve_q\, S_q / 1000 \le \sum_k A_{r,t}(n + k)\, v\_warm\_pick_{k} + M\, v\_clamp\_on
       \quad (c\_whatif\_prefill\_open)

       \sum_q v\_serve_q\, S_q / 1000 \le \sum_k A^{clamped}_{r,t}(n + k)\, v\_warm\_pick_{k} + M (1 - v\_clamp\_on)
       \quad (c\_whatif\_prefill\_clamped)

       \mathit{cap}^{dec}_t (n^{dec} + w^{dec}) + v\_res\_decode_{r,t} \ge o\, e\_admitted_{r,t}
       \quad (c\_whatif\_decode)

       \mathit{rps}^{rep}_t (n^{rep} + w^{rep}) \ge \sum_q v\_serve_q \quad (c\_whatif\_replica)

    A is the curve for the pool's mix with cold long prompts, A^clamped without them (a
    pool that may not clamp has only A and no big-M term). S_q (ms) is the mean prefill
    time of source q on the pool's shape; o the output tokens
    per request. The residual is in req/s (prefill, replicas) and output tokens/s
    (decode); ``e_residual`` counts it in request equivalents, plus any traffic dropped
    because no survivor may absorb it.
    """
    m.v_serve = pyo.Var(m.SOURCES, domain=pyo.NonNegativeReals)
    m.v_res_prefill = pyo.Var(m.SOURCES, domain=pyo.NonNegativeReals)
    m.c_whatif_balance = pyo.Constraint(m.SOURCES, rule=lambda _m, r, t, q: m.v_serve[r, t, q] + m.v_shed[r, t, q] + m.v_res_prefill[r, t, q] >= m.e_kept_rps[r, t, q])
    pools = d.pools_of("disaggregated")  # each survivor region x tier in its own mode (the plan's)
    coloc = d.pools_of("colocated")
    res_dec = 0
    if pools:
        def prefill(_m, r, t):
            p = d.pools[(r, t)]
            shape, n = p.slices.get("prefill", (None, 0))
            work = sum(m.v_serve[r, t, q] * p.service_ms.get(q, 0.0) / 1e3 for q in d.sources(r, t))
            if shape is None:
                return work <= 0
            return work <= _cap(p.curve, r, t, p, n)

        def _cap(A, r, t, p, n):
            return sum(float(A[min(n + k, len(A) - 1)]) / d.rate_unit * m.v_warm_pick[r, t, "prefill", k] for k in range(p.warm_max.get("prefill", 0) + 1))

        m.c_whatif_prefill = pyo.Constraint(pools, rule=prefill)
        # a pool whose clamp may be on has a second curve: with the clamp on no cold long
        # prompt reaches it (a different percentile request, a different wait budget)
        both = [k for k in m.CLAMP if d.pools[k].slices.get("prefill", (None, 0))[0] is not None and d.pools[k].curve_clamped is not None]

        def big(r, t):
            p = d.pools[(r, t)]
            most = p.own_rps + p.own_cold_rps + sum(d.lost_rps[(x, t)] for x in d.lost if r in d.absorbers[x])
            return (float(max(p.curve[-1], p.curve_clamped[-1])) + most * max(p.service_ms.values()) / 1e3) / d.rate_unit

        def work_of(r, t):
            p = d.pools[(r, t)]
            return sum(m.v_serve[r, t, q] * p.service_ms.get(q, 0.0) / 1e3 for q in d.sources(r, t))

        m.c_whatif_prefill_clamped = pyo.Constraint(both, rule=lambda _m, r, t: work_of(r, t) <= _cap(
            d.pools[(r, t)].curve_clamped, r, t, d.pools[(r, t)], d.pools[(r, t)].slices["prefill"][1]) + big(r, t) * (1 - m.v_clamp_on[r, t]))
        m.c_whatif_prefill.deactivate()
        m.c_whatif_prefill_open = pyo.Constraint(pools, rule=lambda _m, r, t: prefill(_m, r, t) if (r, t) not in both else
                                                 work_of(r, t) <= _cap(d.pools[(r, t)].curve, r, t, d.pools[(r, t)], d.pools[(r, t)].slices["prefill"][1])
                                                 + big(r, t) * m.v_clamp_on[r, t])
        m.v_res_decode = pyo.Var(pools, domain=pyo.NonNegativeReals)

        def decode(_m, r, t):
            p = d.pools[(r, t)]
            shape, n = p.slices.get("decode", (None, 0))
            cap = p.decode_tokens_per_s / d.rate_unit * (n + _warm_of(m, r, t, "decode")) if shape is not None else 0
            return cap + m.v_res_decode[r, t] >= d.output_tokens * m.e_admitted_rps[r, t]

        m.c_whatif_decode = pyo.Constraint(pools, rule=decode)
        res_dec = sum(m.v_res_decode[k] for k in pools) / d.output_tokens
    if coloc:
        def replica(_m, r, t):
            p = d.pools[(r, t)]
            shape, n = p.slices.get("replica", (None, 0))
            cap = p.replica_rps / d.rate_unit * (n + _warm_of(m, r, t, "replica")) if shape is not None else 0
            return cap >= sum(m.v_serve[r, t, q] for q in d.sources(r, t))

        m.c_whatif_replica = pyo.Constraint(coloc, rule=replica)
    m.e_residual = pyo.Expression(expr=sum(m.v_res_prefill[k] for k in m.SOURCES) + res_dec + m.p_dropped_rps)


def build_whatif_model(d: WhatIfData) -> pyo.ConcreteModel:
    """The Pyomo what-if model for ``d`` (see the module docstring); every stage
    objective is declared and deactivated -- the driver activates one at a time."""
    m = pyo.ConcreteModel(name="whatif")
    add_routing(m, d)
    add_admission(m, d)
    add_warm(m, d)
    add_capacity(m, d)
    for name, _ in STAGES:
        obj = pyo.Objective(expr=getattr(m, name), sense=pyo.minimize)
        setattr(m, f"obj_{name[2:]}", obj)
        obj.deactivate()
    return m
