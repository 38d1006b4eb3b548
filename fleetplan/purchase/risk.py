r"""A CVaR plan beside the risk-neutral plan (``policy.risk`` cvar, ``--risk cvar:ALPHA:WEIGHT``).

A risk term is worth its name only against what the expectation alone would order: once,
``--risk cvar:0.9:0.5`` on the bundled tree ran 10 minutes and returned the orders and the
expected cost of the risk-neutral plan without saying so. So :func:`fleetplan.purchase.solve.solve_purchase`
first solves the same tree with the expected cost as the objective (:func:`neutral_problem`),
offers that plan to the risk solve as its start (the pod-floor decomposition's first incumbent,
or HiGHS's start where the decomposition does not apply), and the plan reports, from the two
plans' scenario costs:

* the risk-neutral plan's expected cost, its CVaR_alpha and its value of the risk objective
  (1 - w) E + w CVaR_alpha (the CVaR by :func:`fleetplan.purchase.model.cvar`, Rockafellar and
  Uryasev's minimum over eta);
* how many orders (tree node x region x chip) the risk term changed, and so whether it changed
  none (``same_orders``): then the plan *is* the risk-neutral plan, and the headline says so.

Both are plans of the same tree at the same MIP gap: a difference within the gaps is reported
as it is, not explained away.
"""

from __future__ import annotations

from dataclasses import replace

from fleetplan.purchase.io import PurchaseProblem
from fleetplan.purchase.model import cvar, risk_objective
from fleetplan.purchase.result import NeutralPlanFigures, RiskFigures
from fleetplan.purchase.schema import CVaRRisk
from fleetplan.purchase.tree import Tree
from fleetplan.results.precision import r6

__all__ = ["NEUTRAL_SHARE", "neutral_problem", "plan_seed", "risk_figures"]

#: of the time left for the tree's solves, what the risk-neutral plan's solve may take (the risk
#: solve starts from its plan, with the pod floors and node fleets it found cached)
NEUTRAL_SHARE = 0.5


def neutral_problem(p: PurchaseProblem) -> PurchaseProblem:
    """``p`` with the expected cost as the objective (``policy.risk: expectation``), all else kept."""
    policy = p.spec.policy.model_copy(update={"risk": "expectation"})
    return replace(p, spec=p.spec.model_copy(update={"policy": policy}))


def plan_seed(sol) -> dict | None:
    """A solved tree's orders and pods in service as the pod-floor decomposition's ``seed``
    (:func:`fleetplan.purchase.floors.floor_decomposition`); None without a plan."""
    if sol is None or not sol.ok:
        return None
    return {"orders": dict(sol.orders), "pods": dict(sol.pods)}


def _scenario_costs(tree: Tree, sol) -> tuple[list[float], list[float]]:
    names = list(tree.scenarios)
    return [sol.scenario_cost(tree.scenarios[s]) for s in names], [tree.scenario_probability(s) for s in names]


def risk_figures(risk: CVaRRisk, tree: Tree, rp, neutral) -> tuple[RiskFigures, list[str]]:
    """The plan's :class:`RiskFigures` and its notes: ``rp`` the risk plan's solved tree,
    ``neutral`` the risk-neutral plan's (None or without a plan: not compared, said so). Every
    figure is recomputed from the scenario costs (USD), none read from a model."""
    costs, probs = _scenario_costs(tree, rp)
    expected = sum(c * q for c, q in zip(costs, probs))
    mine = cvar(costs, probs, risk.alpha)
    a, w = f"{risk.alpha:g}", f"{risk.weight:g}"
    notes = [f"objective: (1 - {w}) E[cost] + {w} CVaR_{a}[cost] over the scenarios' discounted costs (Rockafellar-Uryasev); "
             "expected_cost_usd is the plan's expectation, risk.cvar_usd its CVaR; the value-of-information figures are of the "
             "risk-weighted objective"]
    fig = None
    if neutral is None or not neutral.ok:
        why = "not solved" if neutral is None else f"no plan in its share of the time ({neutral.result.termination})"
        notes.append(f"the risk-neutral plan (the expected cost alone as the objective) was {why}: the plan is not compared with it")
    else:
        n_costs, _ = _scenario_costs(tree, neutral)
        n_exp = sum(c * q for c, q in zip(n_costs, probs))
        n_cvar = cvar(n_costs, probs, risk.alpha)
        keys = set(rp.orders) | set(neutral.orders)
        changed = sum(1 for k in keys if rp.orders.get(k, 0) != neutral.orders.get(k, 0))
        fig = NeutralPlanFigures(expected_cost_usd=r6(n_exp), cvar_usd=r6(n_cvar), objective_usd=r6(risk_objective(n_costs, probs, risk)),
                                 orders_changed=changed, same_orders=changed == 0, solve=neutral.figure())
    doc = RiskFigures(measure="cvar", alpha=risk.alpha, weight=risk.weight, objective_usd=r6(rp.result.objective),
                      expected_cost_usd=r6(expected), cvar_usd=r6(mine), neutral=fig)
    return doc, notes

