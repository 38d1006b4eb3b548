"""The verifier decides "is the least shortfall above what the plan reports?" at the
threshold (issue 16 row 4: the bisections it ran for every hour of every region loss made
a shortfall plan's verification overrun --time-limit). The threshold verdicts must be the
bisections' verdicts: Context.prefill_shortfall_within(allowed) == (prefill_min_shortfall
<= allowed) and Context.replica_scale_within(theta) == (replica_max_scale(hi=1) >= theta),
on a grid of pools, loads and thresholds either side of the least shortfall (where the
bisections, which stop 2^-50 / 2^-40 of the rates from it, and the threshold agree)."""

from __future__ import annotations

import itertools

import pytest

from fleetplan.results.evaluate import Context

MIX = {"input_mix": [{"share": 0.7, "tokens": 1000}, {"share": 0.3, "tokens": 6000}], "output_tokens": 200}
FACTORS = (0.0, 0.25, 0.9, 0.99, 1.01, 1.1, 2.0)


@pytest.fixture(scope="module")
def prefill_ctx():
    from fleetplan.instance.io import parse_instance
    from tests.conftest import tiny_data

    return Context(parse_instance(tiny_data(workload=MIX, failover={"n_minus_1": True}), "tiny"))


@pytest.fixture(scope="module")
def replica_ctx():
    from fleetplan.instance.io import parse_instance
    from tests.conftest import tiny_data

    return Context(parse_instance(tiny_data(workload=MIX, failover={"n_minus_1": True}, serving={"mode": "colocated"}), "tiny"))


def test_prefill_threshold_verdict_is_the_bisections(prefill_ctx):
    ctx = prefill_ctx
    seen_over = seen_within = 0
    for shape, n, own, div, failover in itertools.product(("accx1", "accx2"), (1, 3), (4.0, 30.0, 90.0), (0.0, 6.0, 40.0), (False, True)):
        if div > 0 and not failover:
            continue
        least = ctx.prefill_min_shortfall("all", shape, n, own, div, failover)
        lam = own + div
        for f in FACTORS:
            allowed = least * f if least > 0 else lam * f
            want = least <= allowed
            assert ctx.prefill_shortfall_within("all", shape, n, own, div, failover, allowed) == want, (shape, n, own, div, failover, allowed, least)
            seen_over += not want
            seen_within += want
    assert seen_over > 20 and seen_within > 20  # both verdicts are exercised


def test_replica_threshold_verdict_is_the_bisections(replica_ctx):
    ctx = replica_ctx
    seen = set()
    for shape, n, own, div, failover in itertools.product(("accx1", "accx2"), (1, 3), (2.0, 20.0, 80.0), (0.0, 10.0), (False, True)):
        if div > 0 and not failover:
            continue
        theta = ctx.replica_max_scale("all", shape, n, own, div, failover, hi=1.0)
        for th in (0.0, theta * 0.5, theta * 0.99, theta * 1.01, min(1.0, theta * 2.0), 1.0):
            want = theta >= th
            assert ctx.replica_scale_within("all", shape, n, own, div, failover, th) == want, (shape, n, own, div, failover, th, theta)
            seen.add(want)
    assert seen == {True, False}
