r"""Decode capacity: output tokens/s of the decode slices at the regime's operating point.

.. math::

   \sum_c \mathit{cap}^{dec}_{t,c,g(s)} \,(v\_slices_{r,t,\mathrm{decode},c} + v\_warm\_use_{r,t,\mathrm{decode},c,s})
   + v\_short\_decode_{r,t,s}
   \;\ge\; o \cdot e\_admitted_{r,t,s}
   \qquad \forall (r,t,s) \in ACTIVE          \quad (c\_decode\_capacity)

:math:`\mathit{cap}^{dec}_{t,c,g}` (output tokens/s per slice) is the most tokens/s among
the tier's legal operating points on shape c in regime g (normal: batch at most (1 -
decode_knee_margin) x the SLO knee; failover: up to the knee), taken from the candidate
table, where an operating point is legal when its TPOT/ITL percentiles meet every SLO
of the tier at a full batch, the batch's KV fits the page pool and so does the tier's
longest request (its prompt and output) on its own. Operating below the
cap only lowers TPOT, so the chosen point is a bound the pool never crosses.
:math:`o` is the mean output tokens per request. Shortfall is in output tokens/s (reported), counted in request equivalents (/ o) towards
the requests not served end to end (unserved.py).
Applies in disaggregated mode (and in auto mode, switched off where a region x tier runs colocated: mode.py).

Mixed shapes (``serving.mixed_shapes``): several shapes c may serve one (r, t) side by side
(fleet.py drops one-shape for decode). The row is unchanged and exact for the mixture: a
decode slice's capacity does not depend on its neighbours, each shape runs at its own
operating point (its own batch cap, draft length and TPOT), and the router gives each
shape load in proportion to its capacity, so every slice runs at or below its own point
and the tier's TPOT/ITL SLO holds on the slowest shape used.
"""

from __future__ import annotations

import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.tables.derived import ModelData
from fleetplan.models.sizing.constraints.mode import mode_relax


def add_decode_capacity(m: pyo.ConcreteModel, d: ModelData) -> None:
    S = {s.name: s for s in d.SCENARIOS}
    m.v_short_decode = pyo.Var(m.ACTIVE, domain=pyo.NonNegativeReals, bounds=lambda _m, r, t, sn: (0.0, d.max_rps(r, t) * d.p_output_tokens))

    def rule(_m, r, t, sn):
        s = S[sn]
        g = d.decode_regime(s)
        cap = sum(d.decode[(t, c, g)].tokens_per_s * (m.v_slices[r, t, "decode", c] + m.warm_use(r, t, "decode", c, sn))
                  for c in d.CONFIGS if d.decode[(t, c, g)].tokens_per_s > 0)
        relax = mode_relax(m, d, r, t, "disaggregated", d.p_output_tokens)  # 0 unless serving.mode is auto (mode.py)
        return cap + m.v_short_decode[r, t, sn] + relax >= d.p_output_tokens * m.e_admitted_rps[r, t, sn]

    m.c_decode_capacity = pyo.Constraint(m.ACTIVE, rule=rule)
    # in request equivalents (tokens/s over output tokens per request), for the end-to-end count (unserved.py)
    for k in m.ACTIVE:
        m.shortfall_by_key.setdefault(k, {})["decode"] = m.v_short_decode[k] / d.p_output_tokens
