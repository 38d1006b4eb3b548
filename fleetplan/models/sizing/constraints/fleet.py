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
Applies always. By default every pool is homogeneous (one slice shape): a prefill pool because its
queueing model is an M/G/c of identical servers, a decode or replica pool because that
is what a controller runs and it removes symmetric mixtures from the search.

Mixed pools (``serving.mixed_shapes``; ``fleetplan purchase`` turns it on): for the roles
:math:`\rho \in \{decode, replica\}` c_fleet_one_shape is dropped, so a (region, tier,
role) may run several shapes (and chip types) side by side. The capacity families already
price that mixture exactly: their rows sum, per shape, the slices times that shape's own
SLO-limited rate (decode: its own operating point, whose TPOT/ITL percentiles meet every
SLO of the tier at a full batch, so the tier's SLO holds on the slowest shape used; the
router sends each shape load in proportion to its capacity). A replica shape is its own
least-work sub-pool with that share of the load, so its rate (the rate of a pool of n_ref
replicas, replica.py) still needs at least n_ref replicas of that shape:
c_fleet_min_slices keeps exactly that bound, :math:`N^{min} = n_{ref}` where n_ref > 1 and
the rate is above the per-replica G/G/1 floor (with ``serving.router: random`` and Poisson
arrivals, or where the floor is the rate, any count is safe),
and drops the whole-peak bound (valid only when one shape carries the pool's whole load).
For decode c_fleet_min_slices is dropped. Prefill keeps one shape per pool: its TTFT row
is an Erlang C curve of identical servers, and splitting it into per-shape sub-pools
would lose the pooling the curve prices and need a load split the plan does not record.
"""

from __future__ import annotations

import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.tables.derived import ModelData
from fleetplan.instance.modes import MIXABLE_ROLES


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
    low = min_slices(d)
    m.c_fleet_min_slices = pyo.Constraint(
        [k for k in low if low[k] > 0],
        rule=lambda _m, r, t, ro, c: m.v_slices[r, t, ro, c] >= low[(r, t, ro, c)] * m.v_select[r, t, ro, c])
    one = [ro for ro in d.ROLES if not (d.mixed_shapes and ro in MIXABLE_ROLES)]
    m.c_fleet_one_shape = pyo.Constraint(
        m.REGIONS, m.TIERS, one, rule=lambda _m, r, t, ro: sum(m.v_select[r, t, ro, c] for c in d.CONFIGS) <= 1)

    m.e_fleet_cost_per_hour_usd = pyo.Expression(expr=(
        sum(d.p_price_per_slice_hour_usd[(r, c)] * m.v_slices[r, t, ro, c] for (r, t, ro, c) in m.POOLS)
        + sum(d.p_price_per_slice_hour_usd[(r, c)] * m.v_warm[r, c] for r in d.REGIONS for c in d.CONFIGS)
        + sum(d.p_pod_cost_per_hour_usd[k] * m.v_new_pods[r, k] for r in d.REGIONS for k in d.CHIPS)
    ))
    m.cost_terms.append(m.e_fleet_cost_per_hour_usd)


def min_slices(d: ModelData) -> dict[tuple[str, str, str, str], int]:
    """(region, tier, role, shape) -> the fewest slices a chosen shape must have (count):
    ``d.p_min_slices`` (the normal-peak bound) with one shape per pool; with mixed shapes
    none for decode and replica pools, since one shape of a mixture may carry any part of
    the load (a replica shape's n_ref, the pool size its least-work rate assumes, is held
    per schedule by replica.py's c_replica_schedule_min)."""
    if not d.mixed_shapes:
        return d.p_min_slices
    out = {}
    for (r, t, ro, c), n in d.p_min_slices.items():
        if ro not in MIXABLE_ROLES:
            out[(r, t, ro, c)] = n
        # a mixed replica shape keeps the n_ref of the schedule it runs through the replica family's
        # c_replica_schedule_min (per shape and schedule); a mixed decode shape may carry any part
    return out
