"""Issue 41: the margins' step-time search builds an evaluation context per step scale, and
the scale leaves the TTFT path as it is -- each context convolved the path's components
again (136 times for the brief's 24 margins, ~0.06 s of CPU of its CLI). The contexts now
share the memoised path (:func:`fleetplan.perf.ttft_tail.path_distribution`): the same
arrays, so the same estimates and margins to the bit."""

from __future__ import annotations

import fleetplan.perf.queueing as queueing
from fleetplan.perf.pools import prefill_profile
from fleetplan.perf.queueing import path_sum_distribution, ttft_percentiles_of_sum_ms
from fleetplan.perf.ttft_tail import path_distribution
from fleetplan.results.evaluate import Context
from fleetplan.results.margins import pool_margins, scaled_instance


def test_a_scaled_context_estimates_the_ttft_with_the_same_path_bit_for_bit(gemini):
    """The estimate through the memoised path equals the one through a path convolved afresh
    (every float), at the instance and at a step scale."""
    for inst in (gemini, scaled_instance(gemini, 1.37)):
        ctx = Context(inst)
        t = next(iter(ctx.tiers))
        label = "ironwoodx32"  # the brief's prefill slice
        got = ctx.ttft_estimate(t, label, 12, 40.0, 5.0, True)
        prof = prefill_profile(inst, ctx.tiers[t], ctx.slice(label), ctx.sources(t, True, 40.0, 5.0), [50.0], 0.0)
        fresh = path_sum_distribution([(c.p50_ms, c.p99_ms) for c in inst.priors.path_latency])
        want = ttft_percentiles_of_sum_ms(sorted(got), fresh, 12, 45.0, prof.mean_ms, prof.cs2, prof.type_ms, prof.type_weight, prof.ca2,
                                          ctx.router)
        assert got == want
        assert ctx._path is path_distribution(inst)


def test_the_margins_convolve_the_path_once(solved, monkeypatch):
    """Every step scale's context reads the one memoised path: at most one convolution for all
    of the brief's margins (the first, when the memo is cold). Fails before: one per
    context."""
    import fleetplan.perf.ttft_tail as ttft_tail

    inst, plan = solved("gemini-ironwood")
    calls = []
    real = queueing.path_sum_distribution

    def counted(components, *a, **k):
        calls.append(tuple(components))
        return real(components, *a, **k)

    monkeypatch.setattr(queueing, "path_sum_distribution", counted)
    monkeypatch.setattr(ttft_tail, "path_sum_distribution", counted)
    margins = pool_margins(inst, plan.pools, plan.scenarios)
    assert len(margins) == 24 and any(m.role == "prefill" and m.step_time_margin is not None for m in margins)
    assert len(calls) <= 1, len(calls)


def test_a_context_computes_a_ttft_estimate_once_per_argument(gemini, monkeypatch):
    """The report asks a context for the same pool's TTFT estimate again (a region's stick,
    the margins' searches): the second ask reads the memo -- the same floats, no second
    tail -- and a caller's change to the dict it got does not reach the memo. Fails
    before: one tail per ask."""
    import fleetplan.results.evaluate as evaluate

    ctx = Context(gemini)
    t = next(iter(ctx.tiers))
    calls = []
    real = queueing.ttft_percentiles_of_sum_ms
    monkeypatch.setattr(queueing, "ttft_percentiles_of_sum_ms", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    assert not hasattr(evaluate, "ttft_percentiles_of_sum_ms")  # imported from queueing at the call, so the patch counts every tail
    first = ctx.ttft_estimate(t, "ironwoodx32", 12, 40.0, 5.0, True, [50.0, 99.0])
    want = dict(first)
    first[50.0] = -1.0
    again = ctx.ttft_estimate(t, "ironwoodx32", 12, 40.0, 5.0, True, [50.0, 99.0])
    assert again == want and len(calls) == 1
    ctx.ttft_estimate(t, "ironwoodx32", 12, 41.0, 5.0, True, [50.0, 99.0])
    assert len(calls) == 2
