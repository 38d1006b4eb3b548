"""The what-if against the sizing solver and against its own exact check.

* A plan solved with N-1 on has no residual for any single-region loss in any hour (the
  re-warm transient, which the bundled instance sizes for, in all 24 hours; the steady
  state at each loss's peak). The default run walks the 24 hours of one loss (us-east) and
  every loss at its peak hour, both phases; ``pytest -m slow`` the 24 hours of the other
  two losses (48 what-if events, ~25 s of CPU, outside the suite's 5-minute budget).
* A plan solved with N-1 off shows a residual at a peak-hour loss, and the model's least
  residual equals what the independent accounting finds (perf only, at the model's
  decisions), with nothing the model kept failing the exact check.
"""

from __future__ import annotations

import pytest

from fleetplan.instance.variants import with_updates
from fleetplan.sizing import solve
from fleetplan.whatif import parse_event, whatif


@pytest.fixture(scope="module")
def plans(gemini, solved):
    off = with_updates(gemini, {"failover.n_minus_1": False})
    return {"on": solved("gemini-ironwood"), "off": (off, solve(off).plan)}


def _exact_residual(ev, o):
    """Unserved req/s recounted here: per region-tier the larger of the prefill residual
    and the decode residual in requests (a request rejected at prefill never decodes)."""
    per = {}
    for s in ev.survivors:
        for p in s.pools:
            x = p.residual / o if p.role == "decode" else p.residual
            per[(p.region, p.tier)] = max(per.get((p.region, p.tier), 0.0), x)
    return sum(per.values()) + ev.dropped_rps


def _assert_no_residual(rep) -> None:
    for ev in rep.events:
        assert ev.residual_slices == 0, ev.label
        assert ev.model_residual_request_equivalents == pytest.approx(0.0, abs=1e-4), ev.label
        for s in ev.survivors:
            for p in s.pools:
                assert p.reject_share == 0.0 and p.check_excess == 0.0, (ev.label, p.region, p.tier, p.role, p.impact)


@pytest.mark.parametrize("lost", [pytest.param("us-central", marks=pytest.mark.slow), "us-east", pytest.param("us-west", marks=pytest.mark.slow)])
def test_n1_plan_has_no_residual_in_any_hour(plans, lost):
    inst, plan = plans["on"]
    assert plan.status == "verified"
    rep = whatif(inst, plan, parse_event(inst, plan, [lost], [], "all", "transient") + parse_event(inst, plan, [lost], [], "peak", "steady"))
    assert len(rep.events) == 25
    _assert_no_residual(rep)


def test_n1_plan_has_no_residual_at_every_loss_peak(plans):
    """Every single-region loss at its peak hour, steady and re-warm transient (the hours
    of the two losses not walked by default are under ``-m slow``)."""
    inst, plan = plans["on"]
    assert plan.status == "verified"
    events = [e for lost in sorted(inst.regions) for phase in ("steady", "transient") for e in parse_event(inst, plan, [lost], [], "peak", phase)]
    rep = whatif(inst, plan, events)
    assert len(rep.events) == 2 * len(inst.regions) == 6
    _assert_no_residual(rep)


@pytest.mark.parametrize("phase", ["steady", "transient"])
def test_n1_off_plan_shows_the_residual_the_check_confirms(plans, phase):
    inst, plan = plans["off"]
    o = inst.workload.output_tokens
    for lost in sorted(inst.regions):
        ev = whatif(inst, plan, parse_event(inst, plan, [lost], [], "peak", phase)).events[0]
        assert ev.residual_slices > 0
        assert ev.model_residual_request_equivalents > 0
        assert _exact_residual(ev, o) == pytest.approx(ev.model_residual_request_equivalents, rel=1e-4)
        assert ev.residual_request_equivalents == pytest.approx(_exact_residual(ev, o), rel=1e-9)
        # never more unserved than arrives
        assert ev.residual_request_equivalents <= sum(s.own_rps + s.diverted_rps for s in ev.survivors) + ev.dropped_rps
        assert all(p.check_excess == 0.0 for s in ev.survivors for p in s.pools)
        # the residual is what users see: some pool must reject fast
        assert any(p.reject_share > 0 for s in ev.survivors for p in s.pools)
