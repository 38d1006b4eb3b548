"""workload.arrival_scv in the sizing, the evaluator and the verifier (Allen-Cunneen G/G/c)."""

from __future__ import annotations

import pytest

from fleetplan.perf.pools import path_ms
from fleetplan.perf.queueing import wait_percentile_ms
from fleetplan.results.evaluate import Context
from fleetplan.results.verify import verify
from fleetplan.sizing import solve


def test_evaluator_prefill_uses_the_arrival_scv(tiny_instance):
    """TTFT p99 of 3 slices at 20 req/s = path + the G/G/c wait at C_a^2 = 4 + the percentile
    request's compute and exposed KV; C_a^2 = 4 with C_s^2 = 0 (one prompt length) is 4x
    the Poisson wait."""
    poisson, bursty = tiny_instance(), tiny_instance(workload={"arrival_scv": 4.0})
    ep = Context(poisson).prefill("all", "accx1", 3, 20.0, 0.0, False)
    eb = Context(bursty).prefill("all", "accx1", 3, 20.0, 0.0, False)
    assert ep.cs2 == 0.0 and eb.ca2 == 4.0
    w = float(wait_percentile_ms(3, 20.0, eb.mean_service_ms, 99.0, 0.0, 4.0))
    assert eb.wait_ms[99.0] == pytest.approx(w, rel=1e-12) and w == pytest.approx(4.0 * ep.wait_ms[99.0], rel=1e-12)
    assert eb.ttft_ms[99.0] == pytest.approx(path_ms(bursty, 99.0) + w + eb.compute_ms[99.0], rel=1e-12)


def test_bursty_arrivals_size_more_prefill_and_the_verifier_sees_it(tiny_instance):
    """The tiny instance at 20 req/s per region: sized with C_a^2 = 8 it buys more prefill than
    with Poisson arrivals, both plans verify against their own instance, and the Poisson plan
    checked against the bursty instance fails its TTFT (the verifier takes C_a^2 from the
    instance, never from the model)."""
    poisson, bursty = tiny_instance(), tiny_instance(workload={"arrival_scv": 8.0})
    p0, p1 = solve(poisson).plan, solve(bursty).plan
    pre = lambda p: sum(x.slices for x in p.pools if x.role == "prefill")  # noqa: E731
    assert pre(p1) > pre(p0)
    assert verify(poisson, p0) == [] and verify(bursty, p1) == []
    bad = verify(bursty, p0.model_copy(update={"instance_hash": p1.instance_hash}))
    assert any(v.check == "prefill_ttft" for v in bad)


def test_bursty_arrivals_note_says_what_the_scv_does_not_reach():
    """Issue 17 trial, finding 2: a plan with the fitted code-trace C_a^2 was 'verified' and
    said nothing, yet failed p99 TPOT when the simulator replayed the trace; the plan now
    carries a diagnostic naming what the SCV does not reach."""
    from fleetplan.tables.derived import build_model_data
    from fleetplan.instance.io import load_instance

    inst = load_instance("llama70b-h100-fp8-p99")
    assert not any("arrival_scv" in n for n in build_model_data(inst).notes)
    bursty = type(inst).model_validate({**inst.model_dump(mode="json"),
                                        "workload": {**inst.workload.model_dump(mode="json"), "arrival_scv": 13.2}})
    notes = [n for n in build_model_data(bursty).notes if "arrival_scv" in n]
    assert len(notes) == 1 and "TPOT" in notes[0] and "--arrivals trace:" in notes[0]


def test_very_bursty_arrivals_note_gives_the_measured_optimism():
    """Issue 17 trial: above I = 3 (where workload fit flags a trace) the note must say how
    optimistic the replay found the model (TPOT p99 1.26 x, TTFT p99 3.5 x on the code
    trace), not only that it may be; at I = 1.4 (the conversation trace, where the model
    was right within 4%) it does not."""
    from fleetplan.tables.derived import build_model_data
    from fleetplan.instance.io import load_instance

    inst = load_instance("llama70b-h100-fp8-p99")

    def note(i):
        b = type(inst).model_validate({**inst.model_dump(mode="json"), "workload": {**inst.workload.model_dump(mode="json"), "arrival_scv": i}})
        return next(n for n in build_model_data(b).notes if "arrival_scv" in n)

    assert "1.26 x" in note(13.2) and "3.5 x" in note(13.2) and "--scv-timescale" in note(13.2)
    assert "1.26 x" not in note(1.4)
