r"""Serving mode: per region x tier, disaggregated pools or colocated replicas ('auto' mode).

With ``serving.mode: auto`` the candidate tables hold both the disaggregated (prefill,
decode) and the colocated (replica) candidates, and a binary per region x tier picks the
mode (1: disaggregated, 0: colocated):

.. math::

   \sum_c v\_select_{r,t,\rho,c} \le v\_mode\_disagg_{r,t}       \qquad \rho \in \{prefill, decode\}

   \sum_c v\_select_{r,t,\mathrm{replica},c} \le 1 - v\_mode\_disagg_{r,t}
   \qquad \forall r, t                                             \quad (c\_mode\_roles)

(with mixed shapes, ``serving.mixed_shapes``, one row per shape instead,
:math:`v\_select_{r,t,\rho,c} \le v\_mode\_disagg_{r,t}` and likewise, since a mixed
role may select several shapes), so with the fleet family's :math:`v\_slices \le M\, v\_select` and the warm family's
:math:`v\_warm\_use \le W^{max} v\_select` the pools (and warm slices) of the mode not
chosen are 0. The capacity rows of each mode are switched off where the other mode is
chosen, with big-M values the data already bounds (:math:`\Lambda_{r,t}` = ``max_rps(r, t)``,
the tier's share of the region's sized peak plus the largest region it may absorb,
requests/s; every arrival rate and admitted load of (r, t) is at most that):

.. math::

   \mathrm{prefill\ balance}_{r,t,q,s}:\; \ldots + \Lambda_{r,t}\,(1 - v\_mode\_disagg_{r,t}) \ge \lambda^{q}_{r,t,s}

   \mathrm{decode\ capacity}_{r,t,s}:\; \ldots + o\,\Lambda_{r,t}\,(1 - v\_mode\_disagg_{r,t}) \ge o\, e\_admitted_{r,t,s}

   \mathrm{replica\ capacity}_{r,t,s}:\; \ldots + \Lambda_{r,t}\, v\_mode\_disagg_{r,t} \ge e\_admitted_{r,t,s}

The prefill TTFT rows already switch off with :math:`v\_select` (prefill.py). Failover
traffic is routed to a survivor's region x tier whatever mode it runs: the admitted load
:math:`e\_admitted_{r,t,s}` is mode-independent and lands on the chosen mode's rows, each
with its own loss-regime candidates (a replica's rate for the survivor's own/diverted mix;
the prefill curve and failover decode point). Shedding and the admission clamp act on
the arrivals before either mode. No family is copied: each capacity family adds
:func:`mode_relax` to its rows. Applies when ``serving.mode`` is 'auto'; with a fixed mode
:func:`mode_relax` is 0 and no variable is declared.
"""

from __future__ import annotations

import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.tables.derived import ModelData
from fleetplan.instance.modes import COLOCATED, DISAGGREGATED, ROLES_OF

__all__ = ["add_serving_mode", "mode_relax"]


def add_serving_mode(m: pyo.Block, d: ModelData) -> None:
    if not d.auto:
        return
    m.v_mode_disagg = pyo.Var(m.REGIONS, m.TIERS, domain=pyo.Binary)
    def chosen(r, t, ro):
        return m.v_mode_disagg[r, t] if ro in ROLES_OF[DISAGGREGATED] else 1 - m.v_mode_disagg[r, t]

    if not d.mixed_shapes:
        rows = [(r, t, ro) for r in d.REGIONS for t in d.TIERS for ro in d.ROLES]
        m.c_mode_roles = pyo.Constraint(rows, rule=lambda _m, r, t, ro: sum(m.v_select[r, t, ro, c] for c in d.CONFIGS) <= chosen(r, t, ro))
    else:  # a mixed role may select several shapes: each is switched off on its own
        rows = [(r, t, ro, c) for r in d.REGIONS for t in d.TIERS for ro in d.ROLES for c in d.CONFIGS]
        m.c_mode_roles = pyo.Constraint(rows, rule=lambda _m, r, t, ro, c: m.v_select[r, t, ro, c] <= chosen(r, t, ro))


def mode_relax(m: pyo.Block, d: ModelData, r: str, t: str, mode: str, scale: float = 1.0):
    """The big-M term that switches a capacity row of ``mode`` off at (r, t) when the
    other mode is chosen: ``scale`` x max_rps(r, t) x (1 - chosen), in the row's units
    (``scale`` = output tokens per request for decode rows). 0 with a fixed mode."""
    if not d.auto:
        return 0
    off = (1 - m.v_mode_disagg[r, t]) if mode == DISAGGREGATED else m.v_mode_disagg[r, t]
    assert mode in (DISAGGREGATED, COLOCATED)
    return scale * d.max_rps(r, t) * off
