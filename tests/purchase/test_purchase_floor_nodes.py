"""Which nodes' pod floors the decomposition solves (fleetplan.purchase.floors.floor_nodes):
not those whose pods in service are fixed, nor those a node of the same quarter with the
same orders in service and at least their demand dominates -- and the plan is still the
deterministic equivalent's optimum."""

from __future__ import annotations

import copy

import pytest

from fleetplan.purchase.floors import floor_nodes
from fleetplan.purchase.io import parse_purchase
from fleetplan.purchase.model import build_purchase_model
from fleetplan.purchase.solve import solve_tree
from tests.purchase.test_purchase_floors import EXACT, TIGHT, tree_doc, two_region_base


def _labels(doc: dict) -> list[tuple[str, str]]:
    p = parse_purchase(copy.deepcopy(doc))
    pm = build_purchase_model(p)
    return [(p.labels[pm.tree.nodes[n].quarter], pm.tree.nodes[n].label) for n in floor_nodes(pm)]


def _exact_and_floors(doc: dict):
    p = parse_purchase(copy.deepcopy(doc))
    return solve_tree(p, p.tree, EXACT, None, start_from_snapshots=False), solve_tree(p, p.tree, TIGHT, None, start_from_snapshots=True)


@pytest.mark.parametrize("lead, want", [
    # lead 1: both 2027Q2 nodes have the root's orders in service (the same pods), high dominates; the 2027Q3 nodes
    # each their own branch's 2027Q2 orders; 2027Q1 holds the installed pods alone
    (1, [("2027Q2", "high"), ("2027Q3", "low"), ("2027Q3", "high")]),
    # lead 2: nothing arrives before 2027Q3, where both nodes have the root's orders and high dominates
    (2, [("2027Q3", "high")]),
])
def test_only_the_undominated_nodes_with_orders_in_service_get_floors(tmp_path, lead, want):
    # (growth 25% a quarter on the high path: the installed pods serve 2027Q2 when nothing arrives before 2027Q3)
    doc = tree_doc(two_region_base(tmp_path, old_usd_per_chip_hour=8.0), lead=lead, prices=(3000, 6000), growth=(0.0, 0.25))
    assert _labels(doc) == want
    ef, fl = _exact_and_floors(doc)
    assert fl.floor.complete and fl.floor.floors <= 3 * len(want)  # the total's floor and each region's (two regions)
    assert fl.result.objective == pytest.approx(ef.result.objective, rel=1e-6)
    assert fl.floor.lower_usd <= ef.result.objective * (1 + 1e-9)


def test_demand_that_crosses_between_regions_keeps_both_nodes(tmp_path):
    # two branches sharing the root's orders, one busier in region a, the other in b: neither's floors bound the other's
    doc = tree_doc(two_region_base(tmp_path))
    doc["demand"] = {"kind": "tree", "root": {"demand": 1.0, "children": [
        {"name": "a_up", "probability": 0.5, "demand": {"a": 1.6, "b": 1.0}, "children": [{"demand": {"a": 1.6, "b": 1.0}}]},
        {"name": "b_up", "probability": 0.5, "demand": {"a": 1.0, "b": 1.6}, "children": [{"demand": {"a": 1.0, "b": 1.6}}]}]}}
    assert [q for q, _ in _labels(doc)] == ["2027Q2", "2027Q2", "2027Q3", "2027Q3"]
    ef, fl = _exact_and_floors(doc)
    assert fl.result.objective == pytest.approx(ef.result.objective, rel=1e-6)
