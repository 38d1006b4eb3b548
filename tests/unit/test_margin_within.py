"""Issue 41: the margins' searches ask of a prefill pool only whether its TTFT percentile is
within the SLO at each step-time and load multiplier; the percentile's own bisection (50
steps after the doubling) is stopped once that is decided
(:func:`fleetplan.perf.queueing.ttft_percentile_of_sum_within`) -- its points and decisions
the full bisection's, so the answers, and the margins, are the same to the bit. The full
percentile is kept here as the reference. And a context's decode operating point is
computed for its own draft length alone."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fleetplan.perf.queueing as queueing
from fleetplan.perf.queueing import path_sum_distribution, ttft_percentile_of_sum_ms, ttft_percentile_of_sum_within
from fleetplan.results import margins as margins_mod
from fleetplan.results.margins import pool_margins

PATH = path_sum_distribution([(40.0, 120.0), (5.0, 30.0)])
OWN = (np.array([80.0, 150.0, 400.0, 1200.0]), np.array([0.4, 0.3, 0.2, 0.1]))


@pytest.mark.parametrize("c, lam, mean, cs2, ca2, router", [
    (4, 10.0, 300.0, 0.8, 1.0, "least-work"),   # a moderate load
    (4, 13.0, 300.0, 0.8, 1.0, "least-work"),   # near saturation: a long wait tail
    (1, 0.0, 300.0, 0.8, 1.0, "least-work"),    # no arrivals: path + own compute
    (2, 7.0, 300.0, 1.5, 2.0, "round-robin"),   # a load-blind router's G/G/1
    (4, 14.0, 300.0, 0.8, 1.0, "least-work"),   # unstable: inf
])
def test_within_answers_as_the_full_percentile_does(c, lam, mean, cs2, ca2, router):
    for p in (50.0, 90.0, 99.0):
        full = ttft_percentile_of_sum_ms(p, PATH, c, lam, mean, cs2, *OWN, ca2, router)
        limits = [0.0, 1.0, 100.0, 500.0, 1500.0, 5000.0, 1e5, math.inf]
        if math.isfinite(full):  # at the value and one ulp either side: the bisection's last steps decide these
            limits += [full, np.nextafter(full, -np.inf), np.nextafter(full, np.inf), full * (1 + 1e-9), full * (1 - 1e-9)]
        for lim in limits:
            assert ttft_percentile_of_sum_within(p, lim, PATH, c, lam, mean, cs2, *OWN, ca2, router) == (full <= lim), (p, lim, full)


def test_within_stops_its_bisection_early_away_from_the_value(monkeypatch):
    """Far from the percentile the question is decided in the first passes (the point of it)."""
    full = ttft_percentile_of_sum_ms(99.0, PATH, 4, 10.0, 300.0, 0.8, *OWN)
    seen = []
    real = queueing.tree_mids
    monkeypatch.setattr(queueing, "tree_mids", lambda *a: seen.append(1) or real(*a))
    assert ttft_percentile_of_sum_within(99.0, 2 * full, PATH, 4, 10.0, 300.0, 0.8, *OWN)
    assert not ttft_percentile_of_sum_within(99.0, 0.5 * full, PATH, 4, 10.0, 300.0, 0.8, *OWN)
    assert len(seen) <= 6, len(seen)  # the full bisection: 17 passes each


def test_the_brief_plans_margins_are_those_of_the_full_percentile(solved, monkeypatch):
    """pool_margins of the brief's plan equal, every field, the margins searched on the TTFT
    percentile itself (the code before: values(...)[(metric, percentile)] <= bound)."""
    inst, plan = solved("gemini-ironwood")
    got = pool_margins(inst, plan.pools, plan.scenarios)

    def reference(self, ctx, g, metric, percentile, bound_ms):
        return self.values(ctx, g).get((metric, percentile), math.inf) <= bound_ms

    monkeypatch.setattr(margins_mod._Pool, "within", reference)
    want = pool_margins(inst, plan.pools, plan.scenarios)
    assert any(m.role == "prefill" and m.load_margin is not None for m in want)
    assert [m.model_dump() for m in got] == [m.model_dump() for m in want]


def test_a_contexts_decode_op_is_the_tables_and_computes_its_draft_length_alone(gemini, monkeypatch):
    """Context.decode_op of a speculating operating point: the same DecodeOp as the full
    table's (the reference: every draft length with the off points), built from one
    _decode_arrays call, not two -- the off points beside it were computed and thrown away.
    Fails before: two calls."""
    import fleetplan.perf.pools as pools
    from fleetplan.perf.pools import decode_table
    from fleetplan.results.evaluate import Context

    ctx = Context(gemini)
    t = next(iter(ctx.tiers))
    label = "ironwoodx8"  # a decode slice of the brief's plan
    ks = sorted(gemini.speculation.draft_tokens)
    assert gemini.speculation.enabled and ks
    calls = []
    real = pools._decode_arrays
    monkeypatch.setattr(pools, "_decode_arrays", lambda *a: calls.append(a[-1]) or real(*a))
    for batch in (8, 64):
        full = decode_table(gemini, ctx.tiers[t], ctx.slice(label), [batch], ks)
        for k in [0] + ks:
            calls.clear()
            got = ctx.decode_op(t, label, batch, k)
            assert got == next(o for o in full if o.draft_tokens == k)
            assert calls == [k]
