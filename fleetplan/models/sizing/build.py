"""Assemble the sizing model from its constraint families.

Order matters only for the shared terms: the fleet family declares the slice
variables, traffic the arrival expressions, warm use the warm-slice assignment; the
capacity families read them; every family appends its cost to ``m.cost_terms`` and the
objective is written once, last (adding a lever never edits the objective).
Never calls a solver.
"""

from __future__ import annotations

import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.deadline import check

from fleetplan.tables.derived import ModelData
from fleetplan.models.sizing.constraints.dcn import add_dcn
from fleetplan.models.sizing.constraints.decode import add_decode_capacity
from fleetplan.models.sizing.constraints.fleet import add_fleet
from fleetplan.models.sizing.constraints.mode import add_serving_mode
from fleetplan.models.sizing.constraints.pods import add_pods
from fleetplan.models.sizing.constraints.prefill import add_prefill_ttft
from fleetplan.models.sizing.constraints.replica import add_replica_capacity
from fleetplan.models.sizing.constraints.traffic import add_traffic
from fleetplan.models.sizing.constraints.unserved import add_unserved
from fleetplan.models.sizing.constraints.warm import add_warm_use

__all__ = ["add_sizing_families", "build_sizing_model", "shortfall_vars", "unserved_vars"]


def add_sizing_families(m: pyo.Block, d: ModelData) -> None:
    """Apply every sizing constraint family of ``d`` to ``m``, a model or a Pyomo Block
    (the families only use the Block API), in the order the shared terms need.

    Leaves on ``m``: ``cost_terms`` (USD per hour expressions: fleet, shed), ``shortfall_terms``
    (requests/s), ``shortfall_by_key`` and every family's sets, variables and constraints;
    no objective. :func:`build_sizing_model` adds the snapshot's objectives; the purchase
    model (:mod:`fleetplan.purchase.model`) builds one Block per scenario-tree node with it.
    """
    m.cost_terms = []
    m.shortfall_terms = []
    m.shortfall_by_key = {}  # (r, t, s) -> {role: shortfall in request equivalents}, read by add_unserved
    families = [add_fleet, add_traffic, add_warm_use, add_serving_mode]
    families += ([add_decode_capacity, add_prefill_ttft] if d.disaggregated else []) + ([add_replica_capacity] if d.colocated else [])
    if d.pods is not None:  # placement-aware sizing (fleetplan.tables.pods): slices counted per pod, the DCN share bounded
        families += [add_pods, add_dcn]
    for add in families + [add_unserved]:
        check("building the model")  # a wall-clock deadline (fleetplan.deadline) stops a huge build between families
        add(m, d)


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
    add_sizing_families(m, d)
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
