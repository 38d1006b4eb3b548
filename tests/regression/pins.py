"""Pinned results of the bundled instances at the default options.

Refresh deliberately, after a change that is meant to move them, with
``python -m tests.regression.pins`` -- and say in the commit message why they moved.
The test checks the proved interval [bound, objective]; chips and slices are kept for
the record (what the pinning machine's incumbent was), not compared."""

from __future__ import annotations

import json
from pathlib import Path

from fleetplan.instance.io import bundled_instances, load_instance
from fleetplan.sizing import solve

PINS = Path(__file__).with_name("bundled_plans.json")


def current() -> dict:
    out = {}
    for name in bundled_instances():
        plan = solve(load_instance(name)).plan
        out[name] = {
            "status": plan.status,
            "objective": plan.solver.objective,
            "bound": plan.solver.bound,
            "fleet_cost_per_hour_usd": plan.cost.fleet_cost_per_hour_usd,
            "chips": plan.cost.chips,
            "slices": {f"{p.region}/{p.tier}/{p.role}/{p.slice}": p.slices for p in plan.pools},
        }
    return out


if __name__ == "__main__":
    PINS.write_text(json.dumps(current(), indent=2, sort_keys=True) + "\n")
    print(f"wrote {PINS}")
