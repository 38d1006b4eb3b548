r"""Colocated replicas: each replica interleaves prefill and decode.

.. math::

   \sum_c \mathit{cap}^{rep}_{t,c,g} \,(v\_slices_{r,t,\mathrm{replica},c} + v\_warm\_use_{r,t,\mathrm{replica},c,s})
   + v\_short\_replica_{r,t,s} \;\ge\; e\_admitted_{r,t,s}
   \qquad \forall (r,t,s) \in ACTIVE          \quad (c\_replica\_capacity)

:math:`\mathit{cap}^{rep}` (requests/s per replica) is the largest arrival rate at which a
replica meets every SLO percentile, times ``utilisation_headroom``, under the schedule its
candidate carries (:mod:`fleetplan.perf.colocated`): *prefill-first* (whole prompts before
decode steps: TPOT = d(b)/(1 - u)) or *chunked* with a token budget C (Sarathi-Serve mixed
steps: the residents' decode tokens plus C - b tokens of the head prompt per step, TPOT =
d(b)/(1 - lambda E[Delta]) with Delta the time the chunks add), Little's law
b = lambda o TPOT as a fixed point; the TPOT percentile over the occupancy distribution
(M/G/infinity lifetime averages), the TTFT percentile with the pool's prompts queued FCFS
over its replicas (least-work routing = M/G/c; ``serving.replica_router: random`` gives an
M/G/1 per replica). The schedule is a decision taken in the candidate table: per (tier,
shape) the one of ``serving.colocated_schedules`` x ``serving.chunk_tokens`` that needs the
fewest replicas for the tier's smallest normal-peak demand over the regions (ties: the
higher rate), and the rate is that of a pool of that size n_ref; since the least-work rate
rises with the pool, it holds for every pool of at least n_ref replicas, and
``c_fleet_min_slices`` holds every chosen replica pool to at least n_ref. Each region's
pool of a shape therefore runs one schedule, the same in every region (a per-region choice
would need the schedule in the pool index). 0 on a shape whose KV page pool cannot hold
the tier's longest request (prompt and output). Capacity is linear in the replica count
above n_ref. Mixed shapes (``serving.mixed_shapes``): several shapes may serve one (r, t);
each shape is its own least-work sub-pool (a router splits the load between shapes in
proportion to their capacity, each sub-pool queues its share FCFS over its own
replicas), so the row prices the mixture exactly as long as each shape keeps the n_ref
replicas its rate assumes (``c_fleet_min_slices`` keeps that bound per shape; the
whole-peak bound is dropped). One least-work queue over unlike replicas is not modelled:
its M/G/c rate assumes identical servers. Applies in colocated mode (and in auto mode, switched off where a region x tier
runs disaggregated: mode.py).
"""

from __future__ import annotations

import pyomo.environ as pyo

from fleetplan.instance.derived import ModelData
from fleetplan.models.sizing.constraints.mode import mode_relax


def add_replica_capacity(m: pyo.ConcreteModel, d: ModelData) -> None:
    S = {s.name: s for s in d.SCENARIOS}
    m.v_short_replica = pyo.Var(m.ACTIVE, domain=pyo.NonNegativeReals, bounds=lambda _m, r, t, sn: (0.0, d.max_rps(r, t)))

    def rule(_m, r, t, sn):
        g = d.regime(S[sn], r)
        cap = sum(d.replica[(t, c, g)].rps_per_replica * (m.v_slices[r, t, "replica", c] + m.warm_use(r, t, "replica", c, sn))
                  for c in d.CONFIGS if d.replica[(t, c, g)].rps_per_replica > 0)
        relax = mode_relax(m, d, r, t, "colocated")  # 0 unless serving.mode is auto (mode.py)
        return cap + m.v_short_replica[r, t, sn] + relax >= m.e_admitted_rps[r, t, sn]

    m.c_replica_capacity = pyo.Constraint(m.ACTIVE, rule=rule)
    for k in m.ACTIVE:  # requests/s, for the end-to-end count (unserved.py)
        m.shortfall_by_key.setdefault(k, {})["replica"] = m.v_short_replica[k]
