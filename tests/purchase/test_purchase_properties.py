"""Issue 18's properties, drawn by hypothesis over the tiny two-path tree (one region, one
chip, three quarters; a few examples each, every solve under a second): VSS >= 0 and
EVPI >= 0 within the MIP gaps; a longer lead time never lowers cost; more supply never
raises cost; a probability-0 path changes nothing; orders at a node never depend on a
later branch, read off the solution. The fixed worked cases are in test_purchase_model.py."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetplan.purchase.io import parse_purchase
from fleetplan.purchase.solve import solve_purchase
from fleetplan.solvers.base import SolveOptions
from tests.purchase.helpers import two_paths, write_base

EXACT = SolveOptions(mip_gap=0.0)
TOL = 1e-6  # relative, on costs of 1e4..1e5 USD stored to six significant digits
SETTINGS = dict(max_examples=3, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])

cases = st.fixed_dictionaries({
    "p_high": st.sampled_from([0.2, 0.4, 0.7]),
    "growth": st.sampled_from([0.25, 0.5, 0.9]),
    "later_price": st.sampled_from([10000, 20000, 40000]),
    "unserved_price": st.sampled_from([None, 30.0]),
})


def _doc(tmp_path, c, **over) -> dict:
    doc = two_paths(write_base(tmp_path))
    doc["demand"]["paths"][0]["probability"] = 1 - c["p_high"]
    doc["demand"]["paths"][1].update(probability=c["p_high"], growth_per_quarter=c["growth"])
    doc["supply"][0]["by_quarter"]["2027Q2"]["price"]["usd_per_pod"] = c["later_price"]
    if c["unserved_price"] is not None:
        doc["policy"] = {"unserved": {"kind": "priced", "usd_per_1m_tokens": c["unserved_price"]}}
    for k, v in over.items():
        doc["supply"][0][k] = v
    return doc


def _cost(doc) -> float:
    return solve_purchase(parse_purchase(doc), EXACT, value=False).expected_cost_usd


@settings(**SETTINGS)
@given(c=cases)
def test_vss_and_evpi_are_nonnegative_within_the_gaps(tmp_path, c):
    v = solve_purchase(parse_purchase(_doc(tmp_path, c)), EXACT).value
    scale = abs(v.rp.objective_usd)
    assert v.ws_usd is not None and v.evpi_interval_usd[1] >= -TOL * scale  # RP >= WS: the best RP bound cannot fall below WS
    if v.eev_feasible:
        assert v.vss_interval_usd[1] >= -TOL * scale


@settings(**SETTINGS)
@given(c=cases)
def test_longer_lead_time_and_less_supply_never_help(tmp_path, c):
    base = _cost(_doc(tmp_path, c, lead_time_quarters=0))
    slower = _cost(_doc(tmp_path, c, lead_time_quarters=1))
    assert slower >= base * (1 - TOL)
    less = _cost(_doc(tmp_path, c, lead_time_quarters=0, max_pods_delivered_per_quarter=2))
    assert less >= base * (1 - TOL)  # base has 4 pods per quarter: a superset of the orders


@settings(**SETTINGS)
@given(c=cases, g=st.sampled_from([0.0, 3.0]))
def test_probability_zero_path_and_non_anticipativity(tmp_path, c, g):
    doc = _doc(tmp_path, c)
    ref = solve_purchase(parse_purchase(doc), EXACT, value=False)
    doc["demand"]["paths"].append({"name": "never", "probability": 0.0, "growth_per_quarter": g})
    got = solve_purchase(parse_purchase(doc), EXACT, value=False)
    assert got.expected_cost_usd == ref.expected_cost_usd and got.order_sheet == ref.order_sheet
    # every scenario saw the same 2027Q1: the same pods in service and the same orders there
    first = {s.name: s.quarters[0].pods_in_service for s in got.scenarios}
    assert all(a == b for a, b in itertools.pairwise(first.values()))
    for o in got.contingency:
        assert o.order_quarter != got.quarters[0] and set(o.scenarios) == {s.name for s in got.scenarios if s.name == o.node.split("/")[0]}
