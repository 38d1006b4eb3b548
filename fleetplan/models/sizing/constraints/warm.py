r"""Warm pool use: in a loss scenario a region's warm slices join any of its pools.

.. math::

   \sum_{t,\rho} v\_warm\_use_{r,t,\rho,c,s} \le v\_warm_{r,c}      \qquad (c\_warm\_use)

   v\_warm\_use_{r,t,\rho,c,s} \le W^{max}_{r,c}\, v\_select_{r,t,\rho,c}  \qquad (c\_warm\_shape)

Warm slices are weight-loaded and traffic-less in normal operation (burst insurance,
the brief section 5 "Scale on warm state"); in a region loss they are assigned, whole,
to the survivor's pools that need them. A warm slice joining a pool must have the
pool's shape (pools stay homogeneous); :math:`W^{max}_{r,c}` is the instance's
max_slices_per_region capped by the slices of shape c the region's pods hold. Units: slices. Applies when the
instance allows a warm pool and N-1 is on.

With mixed shapes (``serving.mixed_shapes``) a decode or replica role may run several
shapes; its warm slices still join one of them, the same in every loss scenario (a plan
records one warm shape per pool and scenario, and the controller pre-loads one):

.. math::

   v\_warm\_use_{r,t,\rho,c,s} \le W^{max}_{r,c}\, v\_warm\_shape_{r,t,\rho,c},\quad
   v\_warm\_shape_{r,t,\rho,c} \le v\_select_{r,t,\rho,c},\quad
   \sum_c v\_warm\_shape_{r,t,\rho,c} \le 1                 \qquad (c\_warm\_one\_shape)
"""

from __future__ import annotations

import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.tables.derived import ModelData


def add_warm_use(m: pyo.ConcreteModel, d: ModelData) -> None:
    S = {s.name: s for s in d.SCENARIOS}
    wmax = d.inst.failover.warm_pool.max_slices_per_region
    keys = []
    if wmax > 0:
        for (r, t, sn) in m.ACTIVE:
            if S[sn].kind != "loss":
                continue
            for ro in d.ROLES:
                for c in d.CONFIGS:
                    if d.p_warm_allowed[(r, c)] and d.p_max_slices[(r, t, ro, c)] > 0:
                        keys.append((r, t, ro, c, sn))
    m.WARM_USE = pyo.Set(initialize=keys, dimen=5, ordered=True)
    m.v_warm_use = pyo.Var(m.WARM_USE, domain=pyo.NonNegativeIntegers, bounds=lambda _m, r, t, ro, c, sn: (0, d.warm_max(r, c)))

    def warm_use(r, t, ro, c, sn):
        return m.v_warm_use[r, t, ro, c, sn] if (r, t, ro, c, sn) in m.WARM_USE else 0

    m.warm_use = warm_use
    if keys:
        groups: dict[tuple, list] = {}
        for k in keys:
            groups.setdefault((k[0], k[3], k[4]), []).append(k)
        m.c_warm_use = pyo.Constraint(sorted(groups), rule=lambda _m, r, c, sn: sum(
            m.v_warm_use[k] for k in groups[(r, c, sn)]) <= m.v_warm[r, c])
        m.c_warm_shape = pyo.Constraint(m.WARM_USE, rule=lambda _m, r, t, ro, c, sn: m.v_warm_use[r, t, ro, c, sn] <= d.warm_max(r, c) * m.v_select[r, t, ro, c])
        if d.mixed_shapes:  # several shapes of a role may be selected; the warm slices join one of them
            shapes = sorted({k[:4] for k in keys})
            m.v_warm_shape = pyo.Var(shapes, domain=pyo.Binary)
            m.c_warm_shape_pick = pyo.Constraint(m.WARM_USE, rule=lambda _m, r, t, ro, c, sn: m.v_warm_use[r, t, ro, c, sn] <= d.warm_max(r, c) * m.v_warm_shape[r, t, ro, c])
            m.c_warm_shape_used = pyo.Constraint(shapes, rule=lambda _m, r, t, ro, c: m.v_warm_shape[r, t, ro, c] <= m.v_select[r, t, ro, c])
            m.c_warm_one_shape = pyo.Constraint(sorted({k[:3] for k in shapes}), rule=lambda _m, r, t, ro: sum(
                m.v_warm_shape[k] for k in shapes if k[:3] == (r, t, ro)) <= 1)
