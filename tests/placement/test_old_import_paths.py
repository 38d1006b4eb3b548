"""The placement job moved into one package (fleetplan/placement/); the import paths people
use keep working: ``fleetplan.results.placement`` (named by docs/placement.md) gives the
moved document and check, and ``fleetplan.placement`` every name the module of that name
gave -- the same objects, not copies."""

from __future__ import annotations

import subprocess
import sys


def test_the_old_results_path_gives_the_moved_document_and_check():
    import fleetplan.placement.check as check
    import fleetplan.placement.document as document
    import fleetplan.results.placement as old

    for name in old.__all__:
        new = check if name in ("verify_placement", "current_placement_problems") else document
        assert getattr(old, name) is getattr(new, name), name
    assert {"Placement", "verify_placement", "current_placement_problems", "plan_hash", "placement_diff"} <= set(old.__all__)


def test_the_placement_package_gives_what_the_module_gave():
    import fleetplan.placement as package
    import fleetplan.placement.driver as driver
    import fleetplan.placement.packing as packing

    for name in ("PlacementInfeasible", "place", "region_data", "pod_ids", "allocate", "routing_from_flows", "fragmented_free_chips",
                 "tier_demand", "PlacementTimeLimit", "pod_ids_of"):
        assert getattr(package, name) is getattr(driver, name), name
    assert package.PlacementInfeasible is packing.PlacementInfeasible


def test_reading_a_placement_loads_no_placer():
    """The package's names load on first use: the document (read by export, simulate,
    whatif) does not bring the placer and Pyomo with it."""
    code = ("import json, sys; from fleetplan.results.placement import Placement; import fleetplan.placement.document; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('fleetplan.placement.driver', 'pyomo')))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert r.stdout.strip() == "[]", r.stdout


def test_the_package_gives_the_jobs_entry_points():
    """``fleetplan.placement`` gives the placer, the document, the independent check and the
    online placer by name (a newcomer's trial found the old ``results.placement`` path easier
    to use than the package for the check)."""
    import fleetplan.placement as pkg
    from fleetplan.placement import check, document, driver, online

    assert pkg.place is driver.place
    assert pkg.Placement is document.Placement
    assert pkg.verify_placement is check.verify_placement
    assert pkg.OnlinePlacer is online.OnlinePlacer
