"""Mixed pools in purchasing (policy.mixed_shapes, on by default): the field case of issue 18
(tests/families/field_case.py) as a two-quarter tree. Eight older pods are installed and
kept; the newer chip can be ordered (capital, no lead time, at most one pod a quarter).
Demand is 9 units in both quarters. The optimum, by enumeration of the orders and, per
quarter, of the fleet the pods in service allow: order one newer pod now and run 1 newer
+ 7 older replicas (8.8 USD/h) in both quarters. One shape per pool has no plan at all."""

from __future__ import annotations

import itertools

import pytest
import yaml

from fleetplan.purchase.io import HOURS_PER_QUARTER, parse_purchase
from fleetplan.purchase.solve import NoPurchasePlan, solve_purchase
from fleetplan.solvers.base import SolveOptions
from tests.families.field_case import brute_force, field_data, replica_rates

POD_USD = 1000.0


def _doc(tmp_path, lam: float, **policy) -> dict:
    base = tmp_path / "field-base.yaml"
    base.write_text(yaml.safe_dump(field_data(lam)))
    return {"base": str(base), "quarters": {"labels": ["2027Q1", "2027Q2"], "discount_rate_per_year": 0.0},
            "installed": [{"region": "a", "chip": "older", "pods": 8}],
            "supply": [{"chip": "newer", "price": {"kind": "capital", "usd_per_pod": POD_USD}, "lead_time_quarters": 0,
                        "max_pods_delivered_per_quarter": 1}],
            "demand": {"kind": "growth_paths", "paths": [{"name": "flat", "probability": 1.0, "growth_per_quarter": 0.0}]},
            "policy": policy}


def test_a_purchase_tree_mixes_the_installed_and_the_new_chip(tmp_path):
    rates = replica_rates()
    lam = 9 * rates["older"] * (1 - 1e-6)
    best = None
    for q0, q1 in itertools.product((0, 1), repeat=2):  # newer pods ordered in each quarter (cap 1)
        total, newer = POD_USD * (q0 + q1), 0
        for order in (q0, q1):
            newer += order
            run = brute_force(rates, lam, {"newer": newer, "older": 8}, mixed=True)
            if run is None:
                break
            total += HOURS_PER_QUARTER * run[0]
        else:
            best = min(best or (total, q0, q1), (total, q0, q1))
    assert best[1:] == (1, 0)
    plan = solve_purchase(parse_purchase(_doc(tmp_path, lam)), SolveOptions(mip_gap=0.0), value=False)
    assert plan.status == "verified"
    assert plan.expected_cost_usd == pytest.approx(best[0], rel=1e-6)
    assert [(o.chip, o.pods) for o in plan.order_sheet] == [("newer", 1)]
    for q in plan.scenarios[0].quarters:
        assert q.plan_status == "verified" and q.fleet_cost_per_hour_usd == pytest.approx(8.8, rel=1e-6)
        assert sorted((pl.slice, pl.slices, pl.chips) for pl in q.pools) == [("newerx1", 1, 1), ("olderx1", 7, 7)]
    # one shape per pool: neither chip alone can serve the 9 units with this supply
    with pytest.raises(NoPurchasePlan, match="cannot be served in 2027Q1"):
        solve_purchase(parse_purchase(_doc(tmp_path, lam, mixed_shapes=False)), SolveOptions(mip_gap=0.0), value=False)
