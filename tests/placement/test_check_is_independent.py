"""The placement's independent check shares no code with the placer: every module
``fleetplan.placement.check`` reaches through its imports (any import statement, at module
level or inside a function, as tests/unit/test_import_graph.py reads them) is outside the
placer (driver, pods, online placer, packing, route weights) and outside the optimisation
models and solvers -- so a placer bug cannot hide in the code that re-checks it."""

from __future__ import annotations

import networkx as nx

from tests.unit.test_import_graph import import_graph

#: the placer's modules (and the package, whose names load the driver)
PLACER = {"fleetplan.placement", "fleetplan.placement.driver", "fleetplan.placement.pods", "fleetplan.placement.online",
          "fleetplan.placement.packing", "fleetplan.placement.weights"}


def test_the_placement_check_reaches_no_placer_code_and_no_model():
    g = import_graph()
    for check in ("fleetplan.placement.check", "fleetplan.placement.scenario_check", "fleetplan.placement.summary"):
        reach = nx.descendants(g, check)
        bad = sorted(m for m in reach if m in PLACER or m.startswith(("fleetplan.models", "fleetplan.solvers", "fleetplan.sizing")))
        assert not bad, (check, bad)
    # the reader sees the check's own arrows (a guard against a vacuous pass)
    assert {"fleetplan.placement.summary", "fleetplan.placement.scenario_check"} <= set(g.successors("fleetplan.placement.check"))
