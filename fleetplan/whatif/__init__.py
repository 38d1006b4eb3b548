"""The what-if: hold a plan's installed fleet fixed, lose regions and/or pods at an hour,
re-optimise what operations can change (routing, admission clamp, batch shedding, warm
pool; decode rides to its SLO knee) and account for every slice (docs/whatif.md).

Modules, bottom to top: :mod:`events` (the event: what is lost, when, in which phase,
parsed from the command line; each survivor's phase and hit rates), :mod:`report` (the
what-if report document), :mod:`dcn` (with ``--placement``: each survivor tier's DCN share
by the placement's routing), :mod:`accounting` (every survivor pool recomputed with
:mod:`fleetplan.perf` at the model's decisions) and :mod:`driver` (the data for the model
in :mod:`fleetplan.models.whatif`, its lexicographic solve and :func:`whatif`).

The names below are what ``fleetplan.whatif`` exported when it was one module.
"""

from fleetplan.whatif.dcn import check_placement, placement_dcn, placement_scenario
from fleetplan.whatif.driver import (MAX_MIX_ITERATIONS, Decisions, WhatIfUnsolved, decide, fleet_after_loss, loss_scenario, prefill_instance,
                                     prepare, whatif)
from fleetplan.whatif.events import (HELD, PHASES, ROUTINGS, Event, check_one_shape, held_shares, hit_rates, mixed_pools, parse_event,
                                     region_phase)

__all__ = ["Event", "Decisions", "WhatIfUnsolved", "parse_event", "held_shares", "prepare", "decide", "whatif", "loss_scenario",
           "check_placement", "placement_scenario", "placement_dcn", "PHASES", "ROUTINGS", "HELD", "MAX_MIX_ITERATIONS", "mixed_pools",
           "check_one_shape", "fleet_after_loss", "region_phase", "hit_rates", "prefill_instance"]
