"""Assemble the sizing model from its constraint families.

Order matters only for the shared terms: the fleet family declares the slice
variables, traffic the arrival expressions, warm use the warm-slice assignment; the
capacity families read them; every family appends its cost to ``m.cost_terms`` and the
objective is written once, last (adding a lever never edits the objective).
Never calls a solver.
"""

from __future__ import annotations

import pyomo.environ as pyo

from fleetplan.instance.derived import ModelData
from fleetplan.models.sizing.constraints.decode import add_decode_capacity
from fleetplan.models.sizing.constraints.fleet import add_fleet
from fleetplan.models.sizing.constraints.prefill import add_prefill_ttft
from fleetplan.models.sizing.constraints.replica import add_replica_capacity
from fleetplan.models.sizing.constraints.traffic import add_traffic
from fleetplan.models.sizing.constraints.unserved import add_unserved
from fleetplan.models.sizing.constraints.warm import add_warm_use

__all__ = ["build_sizing_model", "shortfall_vars", "unserved_vars"]


def build_sizing_model(d: ModelData) -> pyo.ConcreteModel:
    """The Pyomo sizing model for ``d`` (see docs/formulation.md).

    Two objectives over the same constraints: ``obj_cost_per_hour_usd`` (fleet cost per
    hour + weighted event costs; active) and ``obj_shortfall_rps`` (the requests not
    served end to end, ``e_shortfall_rps`` = sum of ``v_unserved_rps``, requests/s summed
    over the scenarios; inactive). The driver (:func:`fleetplan.sizing.solve`) fixes the
    shortfalls at zero, and only if that is infeasible solves lexicographically: least
    unserved first, then cost with the unserved capped at its minimum (``c_shortfall_cap``).
    """
    m = pyo.ConcreteModel(name=f"sizing[{d.inst.name}]")
    m.cost_terms = []
    m.shortfall_terms = []
    m.shortfall_by_key = {}  # (r, t, s) -> {role: shortfall in request equivalents}, read by add_unserved
    add_fleet(m, d)
    add_traffic(m, d)
    add_warm_use(m, d)
    if d.disaggregated:
        add_decode_capacity(m, d)
        add_prefill_ttft(m, d)
    else:
        add_replica_capacity(m, d)
    add_unserved(m, d)
    m.obj_cost_per_hour_usd = pyo.Objective(expr=sum(m.cost_terms), sense=pyo.minimize)
    m.e_shortfall_rps = pyo.Expression(expr=sum(m.shortfall_terms))
    m.obj_shortfall_rps = pyo.Objective(expr=m.e_shortfall_rps, sense=pyo.minimize)
    m.obj_shortfall_rps.deactivate()
    m.p_shortfall_cap = pyo.Param(mutable=True, initialize=0.0)
    m.c_shortfall_cap = pyo.Constraint(expr=m.e_shortfall_rps <= m.p_shortfall_cap)
    return m


def shortfall_vars(m: pyo.ConcreteModel):
    """Every shortfall variable of the model: each role's and the end-to-end unserved."""
    for name in ("v_short_prefill", "v_short_decode", "v_short_replica", "v_unserved_rps"):
        if hasattr(m, name):
            yield from getattr(m, name).values()


def unserved_vars(m: pyo.ConcreteModel):
    """The requests not served end to end, per active (region, tier, scenario)."""
    yield from m.v_unserved_rps.values()
