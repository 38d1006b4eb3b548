r"""Fleet: slices per pool, pods per region and chip type, the warm pool, and their cost.

.. math::

   \sum_{t,\rho,c \in k} \mathit{chips}_c\, v\_slices_{r,t,\rho,c}
   + \sum_{c \in k} \mathit{chips}_c\, v\_warm_{r,c}
   \le \mathit{pod\_chips}_k \,(p\_installed_{r,k} + v\_new\_pods_{r,k})
   \qquad \forall r, k                                   \quad (c\_fleet\_pod\_chips)

   v\_new\_pods_{r,k} \le p\_available_{r,k}              \quad (\text{bound})

   W^{min} \le \sum_c v\_warm_{r,c} \le W^{max}           \quad (c\_fleet\_warm\_pool)

   v\_slices_{r,t,\rho,c} \le M_{r,t,\rho,c}\, v\_select_{r,t,\rho,c},\;
   \sum_c v\_select_{r,t,\rho,c} \le 1                    \quad (c\_fleet\_one\_shape)

Valid inequality (tightens the relaxation, cuts off no integer solution):
:math:`v\_slices_{r,t,\rho,c} \ge N^{min}_{r,t,\rho,c}\, v\_select_{r,t,\rho,c}`
(c_fleet_min_slices), where N^min is the fewest slices of shape c that carry the pool's
own peak in normal operation (exact Erlang C curve for prefill, ceil(demand / capacity)
otherwise): every plan must survive the normal peak without help.

Cost (USD per hour), appended to ``m.cost_terms``:
:math:`\sum p\_price_{r,c} (v\_slices + v\_warm) + \sum p\_pod\_cost_k\, v\_new\_pods_{r,k}`,
where p_price is chips per slice x USD per chip-hour in that region.

Units: slices and pods are counts; chips_c chips per slice; pod_chips_k chips per pod;
M_{r,t,rho,c} is the data's bound on a pool (pods that can exist, demand that can arrive).
Applies always. Every pool is homogeneous (one slice shape): a prefill pool because its
queueing model is an M/G/c of identical servers, a decode or replica pool because that
is what a controller runs and it removes symmetric mixtures from the search.
"""

from __future__ import annotations

import pyomo.environ as pyo

from fleetplan.instance.derived import ModelData


def add_fleet(m: pyo.ConcreteModel, d: ModelData) -> None:
    inst = d.inst
    m.REGIONS = pyo.Set(initialize=d.REGIONS, ordered=True)
    m.TIERS = pyo.Set(initialize=d.TIERS, ordered=True)
    m.CONFIGS = pyo.Set(initialize=d.CONFIGS, ordered=True)
    m.CHIPS = pyo.Set(initialize=d.CHIPS, ordered=True)
    m.ROLES = pyo.Set(initialize=d.ROLES, ordered=True)
    m.POOLS = pyo.Set(initialize=[(r, t, ro, c) for r in d.REGIONS for t in d.TIERS for ro in d.ROLES for c in d.CONFIGS],
                      dimen=4, ordered=True)

    def slice_bound(_m, r, t, ro, c):
        return (0, d.p_max_slices[(r, t, ro, c)])

    m.v_slices = pyo.Var(m.POOLS, domain=pyo.NonNegativeIntegers, bounds=slice_bound)
    m.v_new_pods = pyo.Var(m.REGIONS, m.CHIPS, domain=pyo.NonNegativeIntegers,
                           bounds=lambda _m, r, k: (0, d.p_available_pods[(r, k)]))
    wp = inst.failover.warm_pool
    m.v_warm = pyo.Var(m.REGIONS, m.CONFIGS, domain=pyo.NonNegativeIntegers,
                       bounds=lambda _m, r, c: (0, d.warm_max(r, c)))

    def pod_chips(_m, r, k):
        used = sum(d.slices[c].chips * m.v_slices[r, t, ro, c] for (rr, t, ro, c) in m.POOLS if rr == r and d.config_chip(c) == k)
        used += sum(d.slices[c].chips * m.v_warm[r, c] for c in d.CONFIGS if d.config_chip(c) == k)
        return used <= d.p_pod_chips[k] * (d.p_installed_pods[(r, k)] + m.v_new_pods[r, k])

    m.c_fleet_pod_chips = pyo.Constraint(m.REGIONS, m.CHIPS, rule=pod_chips)

    if wp.max_slices_per_region > 0:
        m.c_fleet_warm_pool = pyo.Constraint(
            m.REGIONS, rule=lambda _m, r: pyo.inequality(wp.min_slices_per_region, sum(m.v_warm[r, c] for c in d.CONFIGS), wp.max_slices_per_region))

    m.v_select = pyo.Var(m.POOLS, domain=pyo.Binary)
    m.c_fleet_shape = pyo.Constraint(
        m.POOLS, rule=lambda _m, r, t, ro, c: m.v_slices[r, t, ro, c] <= d.p_max_slices[(r, t, ro, c)] * m.v_select[r, t, ro, c])
    m.c_fleet_min_slices = pyo.Constraint(
        [k for k in d.p_min_slices if d.p_min_slices[k] > 0],
        rule=lambda _m, r, t, ro, c: m.v_slices[r, t, ro, c] >= d.p_min_slices[(r, t, ro, c)] * m.v_select[r, t, ro, c])
    m.c_fleet_one_shape = pyo.Constraint(
        m.REGIONS, m.TIERS, m.ROLES, rule=lambda _m, r, t, ro: sum(m.v_select[r, t, ro, c] for c in d.CONFIGS) <= 1)

    m.e_fleet_cost_per_hour_usd = pyo.Expression(expr=(
        sum(d.p_price_per_slice_hour_usd[(r, c)] * m.v_slices[r, t, ro, c] for (r, t, ro, c) in m.POOLS)
        + sum(d.p_price_per_slice_hour_usd[(r, c)] * m.v_warm[r, c] for r in d.REGIONS for c in d.CONFIGS)
        + sum(d.p_pod_cost_per_hour_usd[k] * m.v_new_pods[r, k] for r in d.REGIONS for k in d.CHIPS)
    ))
    m.cost_terms.append(m.e_fleet_cost_per_hour_usd)
