r"""Colocated replicas: each replica interleaves prefill and decode.

.. math::

   \sum_c \mathit{cap}^{rep}_{t,c,g} \,(v\_slices_{r,t,\mathrm{replica},c} + v\_warm\_use_{r,t,\mathrm{replica},c,s})
   + v\_short\_replica_{r,t,s} \;\ge\; e\_admitted_{r,t,s}
   \qquad \forall (r,t,s) \in ACTIVE          \quad (c\_replica\_capacity)

:math:`\mathit{cap}^{rep}` (requests/s per replica) is the largest arrival rate at which the
replica's steady state (prefill share u = lambda E[prefill], effective TPOT = step(b)/(1-u),
Little's law b = lambda o TPOT as a fixed point) meets the TPOT percentile and whose
M/G/1 prefill queue keeps the TTFT percentile, times ``utilisation_headroom``
(:func:`fleetplan.perf.replica.max_rps_per_replica`); 0 on a shape whose KV page pool cannot
hold the tier's longest request (prompt and output). Each replica is its own queue, so
capacity is linear in the replica count. Applies in colocated mode (and in auto mode,
switched off where a region x tier runs disaggregated: mode.py).
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
