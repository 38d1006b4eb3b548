"""Issue 16 row 6 at 10 regions: a generated 10-region, 4-tier instance
(benchmarks/generate.py --regions 10), `solve --time-limit 400 --write-unverified -o p.json`
wrote a shortfall plan that report, whatif and place refused as "edited after it was
solved": 13 records differed, e.g. ``scenarios[2].pools[0].utilisation: the plan records
0.0 ... give 2.72302e-06`` and a withheld note at 158.2% against 158.8%.

The pools were prefill pools whose whole load was shed or short in a loss scenario
(arrivals 1367.32 = shed 41.0197 + shortfall 1326.3 req/s). The writer computed their
loads from the solver's raw shed and shortfall (served: exactly 0); a reader rebuilds
them from the six-digit records, and arrivals - shed - shortfall came out ~1e-4 req/s:
a utilisation of ~1e-6 instead of 0, and a prefill capacity taken at the served traffic
mix (own vs diverted prompts), which at zero load is another mix -- the 0.6% in the note.
The writer now computes the loads from the decisions as recorded
(:func:`fleetplan.results.loads.as_recorded`), so the records rebuild exactly.

Also, what is left after the shed and the shortfall is served only when it exceeds their
stored precision (the records cannot tell less from 0), so plans written before the fix
with such pools are read as they were written.

The instance here is the tiny one (no solve): its region a's prefill pool in the normal
scenario with everything (or all but 1%) shed or short, at values six digits do not hold.
"""

from __future__ import annotations

from fleetplan.tables.derived import build_scenarios
from fleetplan.instance.io import parse_instance
from fleetplan.results.evaluate import Context
from fleetplan.results.loads import Decisions, as_recorded, make_pool, recorded_decisions, scenario_results
from tests.conftest import tiny_data


def _setup(served: float):
    inst = parse_instance(tiny_data(), "tiny")
    ctx = Context(inst)
    pools = [make_pool(inst, ctx, "a", "all", "prefill", "accx2", 3, None, None, None),
             make_pool(inst, ctx, "a", "all", "decode", "accx2", 2, (64, 0), (64, 0), None)]
    scenarios = [s for s in build_scenarios(inst) if s.kind == "normal"]
    own = inst.sized_peak_rps("a") * scenarios[0].load["a"] * ctx.tiers["all"].tier_share
    shed = own * 0.0300185617  # solver values, more digits than a plan keeps (at 20 req/s both round down: served > 0 from the records)
    raw = Decisions(shed_own=shed, short={"prefill": (own - shed) * (1.0 - served), "decode": 0.0})  # the rest short but `served`
    return inst, ctx, pools, scenarios, {("normal", "a", "all"): raw}


def _dump(results):
    return [r.model_dump(mode="json") for r in results]


def test_a_pool_whose_load_is_all_shed_or_short_rebuilds_from_its_records():
    inst, ctx, pools, scenarios, raw = _setup(0.0)
    routing: dict = {}
    written = scenario_results(inst, ctx, scenarios, pools, routing, {k: as_recorded(v) for k, v in raw.items()})
    pool = next(p for p in written[0].pools if p.role == "prefill")
    assert pool.shortfall > 0 and pool.utilisation == 0.0  # nothing served
    rebuilt = scenario_results(inst, ctx, scenarios, pools, routing, recorded_decisions(written))
    assert _dump(rebuilt) == _dump(written)


def test_a_pool_that_serves_one_percent_rebuilds_from_its_records_only_when_written_from_them():
    """Served = arrivals - shed - shortfall loses digits to the cancellation: at 1% served the
    six-digit records give its load to about 3e-4, so loads written from the raw solver
    values (before) are not what a reader rebuilds; written from the recorded decisions, they are."""
    inst, ctx, pools, scenarios, raw = _setup(0.01)
    for decisions, same in (({k: as_recorded(v) for k, v in raw.items()}, True), (raw, False)):
        written = scenario_results(inst, ctx, scenarios, pools, {}, decisions)
        assert next(p for p in written[0].pools if p.role == "prefill").utilisation > 0
        rebuilt = scenario_results(inst, ctx, scenarios, pools, {}, recorded_decisions(written))
        assert (_dump(rebuilt) == _dump(written)) is same
