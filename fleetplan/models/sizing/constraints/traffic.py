r"""Traffic in every scenario: own load, failover routing of a lost region, the admission
clamp, batch-class shedding and the explicit shortfall.

Scenario s, active region r, tier t (requests/s):

.. math::

   \lambda^{own}_{r,t,s} = \mathit{peak}_r\, \ell_{r,h(s)}\, \sigma_t
   \qquad
   \lambda^{div}_{r,t,s} = v\_route_{X,r,t}\; \mathit{peak}_X\, \ell_{X,h(s)}\, \sigma_t\, (1-\kappa_t)

   \sum_{a \in A(X)} v\_route_{X,a,t} = 1 \qquad \forall X, t   \quad (c\_traffic\_route)

(in the code the share is ``v_route_bp / 10,000``, basis points, a scaling that keeps
the CP-SAT backend's grid fine).

   v\_shed_{r,t,q,s} \le \beta\, \lambda^{q}_{r,t,s} \qquad q \in \{own, div\}  \quad (c\_traffic\_shed\_limit)

with :math:`\mathit{peak}_r = \mathit{peak\_rps}_r\,(1 + \mu_r)` the peak region r is sized for
(:math:`\mu_r` its forecast-error demand margin, ``regions.r.demand_margin`` or
``workload.demand_margin``, default 0; the verifier checks the plan at the same demand),
:math:`\ell` the hourly multiplier, :math:`\sigma_t` the tier's share of requests,
:math:`\kappa_t` the share of the tier's diverted requests the admission clamp rejects
(prompts at or above ``min_input_tokens`` arriving with a cold cache; a rule, applied
whenever the clamp is enabled), :math:`\beta` the sheddable classes' share.

Routing shares are hour-independent per lost region and tier (what the serving controller
is told: "if X fails, send 60% of its long-tier traffic to Y"). Shedding is allowed only
in loss scenarios. Shortfall variables (``v_short_*``, in the units of their family) carry
what cannot be served within the SLOs; they are not priced: the driver first solves with
every shortfall fixed at zero and only when that is infeasible (inventory, an SLO no
slice shape can meet) minimises the shortfall first and the cost second
(lexicographic, see build.py), so shortfall appears only when nothing can be bought,
and is reported, never silent.
The shed price weighs event hours against fleet hours with ``event_weight`` (the
fraction of hours spent in a region-loss event) spread over the modelled loss scenarios.
"""

from __future__ import annotations

import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.tables.derived import ModelData

ROUTE_UNITS = 10_000.0  # routing shares are modelled in basis points


def add_traffic(m: pyo.ConcreteModel, d: ModelData) -> None:
    inst = d.inst
    S = {s.name: s for s in d.SCENARIOS}
    m.SCENARIOS = pyo.Set(initialize=list(S), ordered=True)
    m.ACTIVE = pyo.Set(initialize=[(r, t, s.name) for s in d.SCENARIOS for r in s.active for t in d.TIERS], dimen=3, ordered=True)
    losses = [s for s in d.SCENARIOS if s.kind == "loss"]
    m.ROUTES = pyo.Set(initialize=sorted({(x, a, t) for x in d.REGIONS for a in inst.regions[x].failover_to for t in d.TIERS}
                                         if losses else []), dimen=3, ordered=True)
    # routing shares in basis points (1/10,000): integral-friendly for the CP-SAT backend,
    # which treats continuous variables on a grid of 1 / mip_var_scaling
    m.v_route_bp = pyo.Var(m.ROUTES, bounds=(0.0, ROUTE_UNITS))
    m.e_route_share = pyo.Expression(m.ROUTES, rule=lambda _m, x, a, t: m.v_route_bp[x, a, t] / ROUTE_UNITS)
    if losses:
        pairs = sorted({(x, t) for (x, a, t) in m.ROUTES})
        m.c_traffic_route = pyo.Constraint(pairs, rule=lambda _m, x, t: sum(m.v_route_bp[x, a, t] for a in inst.regions[x].failover_to) == ROUTE_UNITS)

    src_keys = []
    for (r, t, sn) in m.ACTIVE:
        src_keys.append((r, t, "own", sn))
        if S[sn].kind == "loss":
            src_keys.append((r, t, "div", sn))
    m.SOURCES = pyo.Set(initialize=src_keys, dimen=4, ordered=True)

    def lam(_m, r, t, q, sn):
        s = S[sn]
        if q == "own":
            return d.own_rps(s, r, t)
        return m.e_route_share[s.lost, r, t] * d.lost_rps(s, t) * (1.0 - d.p_clamped_share[t])

    m.e_arrivals_rps = pyo.Expression(m.SOURCES, rule=lam)

    shed_keys = [k for k in src_keys if S[k[3]].kind == "loss"] if d.p_batch_share > 0 else []
    m.SHED = pyo.Set(initialize=shed_keys, dimen=4, ordered=True)
    m.v_shed_rps = pyo.Var(m.SHED, domain=pyo.NonNegativeReals, bounds=lambda _m, r, t, q, sn: (0.0, d.max_rps(r, t)))
    m.c_traffic_shed_limit = pyo.Constraint(m.SHED, rule=lambda _m, r, t, q, sn: m.v_shed_rps[r, t, q, sn] <= d.p_batch_share * m.e_arrivals_rps[r, t, q, sn])

    def served(_m, r, t, sn):
        total = sum(m.e_arrivals_rps[r, t, q, sn] for q in ("own", "div") if (r, t, q, sn) in m.SOURCES)
        total -= sum(m.v_shed_rps[r, t, q, sn] for q in ("own", "div") if (r, t, q, sn) in m.SHED)
        return total

    m.e_admitted_rps = pyo.Expression(m.ACTIVE, rule=served)

    n_loss = max(len(losses), 1)
    w = inst.failover.event_weight / n_loss
    price = inst.failover.batch_shed_cost_per_1m_tokens_usd
    if shed_keys and price > 0:
        m.e_shed_cost_per_hour_usd = pyo.Expression(expr=w * price * 3600 / 1e6 * sum(
            m.v_shed_rps[r, t, q, sn] * (d.p_mean_input_tokens[t] + d.p_output_tokens) for (r, t, q, sn) in m.SHED))
        m.cost_terms.append(m.e_shed_cost_per_hour_usd)
