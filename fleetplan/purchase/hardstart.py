r"""A first plan for the trees the pod-floor decomposition does not solve: priced unserved
demand or burst capacity (:func:`fleetplan.purchase.floors.applies`). With a CVaR objective
too, the risk-neutral plan of the same tree is HiGHS's start instead when it was found
(:mod:`fleetplan.purchase.risk`); a CVaR tree with hard demand and no burst the decomposition
solves itself.

Every plan of the *restricted* tree -- the same tree with every request served, no burst
pod rented and the expected cost as the objective -- is a plan of the tree itself: its
shortfall variables are 0, its burst pods 0, and a CVaR objective only adds the
Rockafellar-Uryasev variables (eta and each scenario's excess), which follow from the
scenario costs. The decomposition solves the restricted tree well (the bundled example to
0.86% in ~40 s); HiGHS on the deterministic equivalent of the priced or CVaR tree from the
snapshot start did not (a newcomer trial: 6,175M USD at a 97% gap with priced demand, where
the hard plan costs 489M; 1,170M on the CVaR objective where the expectation plan scores
576M). So the restricted plan is offered to HiGHS as its start and kept when HiGHS ends
with nothing better (:func:`fleetplan.purchase.solve.solve_tree`).

The restricted tree's lower bound bounds nothing here (allowing shortfall or burst can
only lower the optimum, and CVaR weighs the costs differently): it is not reported as one.
"""

from __future__ import annotations

from dataclasses import replace

import pyomo.environ as pyo

from fleetplan.models.sizing.constraints.prefill import set_chord
from fleetplan.purchase.io import PurchaseProblem
from fleetplan.purchase.model import PurchaseModel, settle_cvar
from fleetplan.purchase.schema import HardUnserved

__all__ = ["restricted", "copy_plan", "START_SHARE"]

#: the share of the time left that the restricted tree's build and decomposition may take
#: (HiGHS on the tree itself gets the rest)
START_SHARE = 0.5


def restricted(p: PurchaseProblem) -> PurchaseProblem:
    """``p`` with every request served (hard unserved policy), no burst capacity and the
    expected cost as the objective; the rest (mixed shapes, supply, tree) unchanged."""
    policy = p.spec.policy.model_copy(update={"unserved": HardUnserved(kind="hard"), "risk": "expectation", "burst": []})
    return replace(p, spec=p.spec.model_copy(update={"policy": policy}))


def copy_plan(p: PurchaseProblem, src: PurchaseModel, dst: PurchaseModel) -> float:
    """Set every free variable of ``dst.m`` (the tree of ``p``) to the plan held in ``src.m`` (the
    restricted tree, same nodes and data): orders, pods in service, each node block's
    fleet and its prefill chords; the variables the restricted model lacks or fixes at 0
    (shortfall, burst pods) to 0; a CVaR's eta at the minimising scenario cost and each
    scenario's excess over it. Returns the plan's objective in ``dst`` (USD)."""
    m, s = dst.m, src.m
    for n in m.NODES:
        blk, sblk = m.node[n], s.node[n]
        for key in getattr(blk, "PREFILL_KEYS", []):
            set_chord(blk, dst.data[n], key, sblk.p_chord_k[key])
    for v in m.component_data_objects(pyo.Var):
        if v.fixed:
            continue
        sv = s.find_component(v.name)
        val = sv.value if sv is not None and sv.value is not None else 0.0
        v.set_value(round(val) if v.is_integer() or v.is_binary() else val, skip_validation=True)
    if hasattr(m, "v_cvar_eta"):
        settle_cvar(m, dst.tree, p.spec.policy.risk.alpha)
    return float(pyo.value(m.obj_expected_cost_usd))
