r"""Requests not served end to end: what the lexicographic first stage minimises.

A request is served only when both its prefill and its decode are: a fleet of decode
slices with no prefill (or the reverse) serves nothing. Per active region-tier-scenario
the requests served end to end are the least of what each role serves, and the requests
not served the largest of the roles' shortfalls, in request equivalents (requests/s):

.. math::

   v\_unserved_{r,t,s} \ge \sum_{q} v\_short\_prefill_{r,t,q,s}                 \quad (c\_unserved[r,t,s,\mathrm{prefill}])

   v\_unserved_{r,t,s} \ge v\_short\_decode_{r,t,s} / o                       \quad (c\_unserved[r,t,s,\mathrm{decode}])

   v\_unserved_{r,t,s} \ge v\_short\_replica_{r,t,s}                          \quad (c\_unserved[r,t,s,\mathrm{replica}])

   e\_shortfall\_rps = \sum_{(r,t,s) \in ACTIVE} v\_unserved_{r,t,s}

since :math:`\lambda - \min(\text{prefill served}, \text{decode served}) = \max(\text{prefill
shortfall}, \text{decode shortfall})`; the max is linearised by the lower bounds, exact at
the minimum. :math:`o` is the mean output tokens per request (decode shortfall is in
output tokens/s); shed batch-class requests are not in the admitted load, so they are
not counted as unserved. Each capacity family registers its shortfall, in request
equivalents, in ``m.shortfall_by_key[(r, t, s)]`` (accumulated like the cost terms); this
family turns them into ``v_unserved``. Applies always; the variables matter only when no
fleet serves everything: the driver (:func:`fleetplan.sizing.solve`) first fixes every
shortfall at zero, and only when that is infeasible minimises ``e_shortfall_rps`` (the
requests not served end to end, summed over the scenarios), then the cost with that sum
capped at its minimum and the region-tier-scenarios it left served kept served.
"""

from __future__ import annotations

import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.tables.derived import ModelData


def add_unserved(m: pyo.ConcreteModel, d: ModelData) -> None:
    keys = list(m.ACTIVE)
    m.v_unserved_rps = pyo.Var(m.ACTIVE, domain=pyo.NonNegativeReals, bounds=lambda _m, r, t, sn: (0.0, d.max_rps(r, t)))
    rows = [(r, t, sn, role) for (r, t, sn) in keys for role in sorted(m.shortfall_by_key.get((r, t, sn), {}))]
    m.UNSERVED_ROWS = pyo.Set(initialize=rows, dimen=4, ordered=True)
    m.c_unserved = pyo.Constraint(m.UNSERVED_ROWS, rule=lambda _m, r, t, sn, role: m.v_unserved_rps[r, t, sn] >= m.shortfall_by_key[(r, t, sn)][role])
    m.shortfall_terms.append(sum(m.v_unserved_rps[k] for k in keys))
