"""A region at the schema's smallest peak rate (0.001 req/s) beside regions of thousands.

Found by a newcomer: the plan rounds loads to 6 significant digits, so a survivor's own
load (arrivals minus diverted) and its own shed (shed minus shed diverted) are
differences of rounded numbers; the shed check measured them against a tolerance of the
tiny own load and called a verified plan's rounding a violation."""

from __future__ import annotations

from fleetplan.instance.io import load_instance
from fleetplan.instance.variants import with_updates
from fleetplan.sizing import solve


def test_tiny_region_beside_large_ones_verifies():
    inst = with_updates(load_instance("gemini-ironwood"), {"regions.us-east.peak_rps": 0.001})
    plan = solve(inst).plan
    assert plan.violations == [] and plan.status == "verified"
