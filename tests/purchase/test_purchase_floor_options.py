"""The HiGHS options of the decomposition's block solves (fleetplan.purchase.floors): the floor
solves (pod floors, run-cost floors) run without HiGHS's root reduced-cost heuristic, the node
fleets with HiGHS's defaults (on the bundled gemini-ironwood-2027 the heuristic was a third of the
run-cost floors' CPU, and without it the 2027Q3 node fleets found dearer fleets: docs/benchmarks.md,
"Purchasing > Issue 41") -- the option set for a floor must not leak into the fleet solves of the
same block -- and the plan is still the deterministic equivalent's optimum."""

from __future__ import annotations

import copy
import threading

import pytest

from fleetplan.purchase import floors
from fleetplan.purchase.io import parse_purchase
from fleetplan.purchase.solve import solve_tree
from fleetplan.solvers import persistent
from tests.purchase.test_purchase_floors import EXACT, TIGHT, tree_doc, two_region_base

OPTION = "mip_heuristic_run_root_reduced_cost"


def test_floor_solves_run_without_the_root_reduced_cost_heuristic_and_fleets_with_it(tmp_path, monkeypatch):
    seen: list[tuple[bool, bool]] = []  # (inside a node fleet's search, the option's value at the HiGHS run)
    where = threading.local()
    solve0, fleet0 = persistent.PersistentHighs.solve, floors._fleet

    def solve(self, options, max_nodes=None, **kw):
        seen.append((getattr(where, "fleet", False), bool(self.h.getOptionValue(OPTION)[1])))
        return solve0(self, options, max_nodes=max_nodes, **kw)

    def fleet(*a, **k):
        where.fleet = True
        try:
            return fleet0(*a, **k)
        finally:
            where.fleet = False

    monkeypatch.setattr(persistent.PersistentHighs, "solve", solve)
    monkeypatch.setattr(floors, "_fleet", fleet)
    # the installed 'old' chip costs more to run: cost cuts and node fleet solves after the floors
    doc = tree_doc(two_region_base(tmp_path, old_usd_per_chip_hour=8.0), prices=(3000, 6000))
    p = parse_purchase(copy.deepcopy(doc))
    fl = solve_tree(p, p.tree, TIGHT, None, start_from_snapshots=True)
    floor_runs = [on for in_fleet, on in seen if not in_fleet]
    fleet_runs = [on for in_fleet, on in seen if in_fleet]
    assert floor_runs and fleet_runs, "the case must solve floors and node fleets"
    assert not any(floor_runs)
    assert all(fleet_runs)
    ef = solve_tree(p, p.tree, EXACT, None, start_from_snapshots=False)
    assert fl.floor.complete and fl.result.objective == pytest.approx(ef.result.objective, rel=1e-6)
    assert fl.floor.lower_usd <= ef.result.objective * (1 + 1e-9)


def test_each_block_variable_is_named_once(tmp_path, monkeypatch):
    # issue 41: a fleet record ({name: value} of every variable of the block), a started solve (every column's
    # name looked up) and the earlier-fleet match each asked Pyomo for the names again (getname ~17 us; ~1,400
    # variables a Gemini-scale block, 30 blocks, several fleets each, on the worker threads where a profile of
    # the main thread does not see them). Now a block names each variable once (the plan byte for byte:
    # the bundled purchase plan is compared in the snapshot).
    # Fails before: variables named several times
    from pyomo.core.base.component import ComponentData

    blocks: set[int] = set()
    named: dict[tuple[int, int], int] = {}
    ensure0, getname0 = floors._Node.ensure, ComponentData.getname

    def ensure(self):
        ensure0(self)
        blocks.add(id(self.s.b))

    def getname(self, fully_qualified=False, name_buffer=None, relative_to=None):
        if relative_to is not None and id(relative_to) in blocks:
            named[(id(self), id(relative_to))] = named.get((id(self), id(relative_to)), 0) + 1
        return getname0(self, fully_qualified, name_buffer, relative_to)

    monkeypatch.setattr(floors._Node, "ensure", ensure)
    monkeypatch.setattr(ComponentData, "getname", getname)
    doc = tree_doc(two_region_base(tmp_path, old_usd_per_chip_hour=8.0), prices=(3000, 6000))
    p = parse_purchase(copy.deepcopy(doc))
    fl = solve_tree(p, p.tree, TIGHT, None, start_from_snapshots=True)
    assert named, "the case must record fleets"
    assert max(named.values()) == 1
    assert fl.floor.complete
