"""A newcomer's trial: in `fleetplan solve gemini-ironwood` the latency table named
lose:us-central@03 as the scenario sizing prefill[us-east,short], Binding named
lose:us-central@01 and the margins column showed '-': the pool runs at 99.96-99.997% load in
several losses, and the table took the highest by 1e-12 where Binding and the margins keep
the first of a 1e-5 tie (results.loads.sizing_records: routing shares are stored to 6
significant digits). The table now takes the same record."""

from __future__ import annotations

from fleetplan.cli.solve import _worst
from fleetplan.results.loads import sizing_records


def test_the_table_names_the_scenario_binding_names(solved):
    _, plan = solved("gemini-ironwood")
    records = sizing_records(plan.scenarios)
    near_ties = 0
    for p in plan.pools:
        key = (p.region, p.tier, p.role)
        assert _worst(plan, p, records)[1] == records[key][0], key
        loads = [pl.pressure for sc in plan.scenarios for pl in sc.pools if (pl.region, pl.tier, pl.role) == key and pl.pressure is not None]
        top = max(loads)
        near_ties += sum(1 for x in loads if top * (1 - 1e-5) <= x < top) > 0
    assert near_ties > 0  # the plan has pools where the two rules part (what the trial saw)
