"""The import paths the what-if and the exports had before they moved into packages
(``fleetplan.whatif`` the module, ``fleetplan.k8s``, ``fleetplan.results.export``) still
give the same objects as their new homes, and the old paths stay light."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

OLD_TO_NEW = [("fleetplan.k8s", "fleetplan.export.k8s"), ("fleetplan.results.export", "fleetplan.export.controller")]

#: what ``fleetplan.whatif`` exported as one module (its __all__ then, and the names the
#: report, the simulator, the API and the tests imported from it)
WHATIF_NAMES = ["Event", "Decisions", "WhatIfUnsolved", "parse_event", "held_shares", "prepare", "decide", "whatif", "loss_scenario",
                "check_placement", "placement_scenario", "placement_dcn", "PHASES", "ROUTINGS", "mixed_pools", "fleet_after_loss",
                "region_phase", "hit_rates"]


@pytest.mark.parametrize("old,new", OLD_TO_NEW)
def test_old_paths_give_the_moved_objects(old, new):
    shim, home = importlib.import_module(old), importlib.import_module(new)
    assert "Deprecated import path" in shim.__doc__
    assert shim.__all__
    for name in shim.__all__:
        assert getattr(shim, name) is getattr(home, name), (old, name)
    with pytest.raises(AttributeError):
        getattr(shim, "no_such_name")


def test_whatif_package_exports_what_the_module_did():
    import fleetplan.whatif as w

    missing = [n for n in WHATIF_NAMES if not hasattr(w, n)]
    assert not missing, missing
    assert set(WHATIF_NAMES) <= set(w.__all__)


def test_old_paths_load_nothing_until_used():
    """Importing the shims loads neither the controller document nor the bundle (they are
    resolved on first use, as ``fleetplan.export.k8s`` does)."""
    code = ("import json, sys, fleetplan.k8s, fleetplan.results.export; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('fleetplan.export'))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(r.stdout) == []
