"""Issue 39 item 20: the decode KV reserve for handoffs in flight (fleetplan.perf.handoff),
worked by hand on the tiny instance (tests/conftest.py).

The tiny model: 2 x 32 layers x 8 KV heads x 128 x 1 byte = 65,536 bytes of KV per token.
The network: 100 GB/s over ICI, 25 GB/s over the DCN; placement.dcn_share_max 0.05 (default).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetplan.perf.handoff import handoff_holding_ms, handoff_prompt_tokens, handoff_reserve
from fleetplan.perf.pools import decode_knee, decode_table, slice_specs, tier_mixes
from fleetplan.perf.roofline import slice_memory_map

KV_PER_TOKEN = 2 * 32 * 8 * 128  # bytes


def _two_buckets(tiny_instance, slack=0.07):
    return tiny_instance(workload={"input_mix": [{"share": 0.9, "tokens": 1000}, {"share": 0.1, "tokens": 32000}]},
                         priors={"kv_paging_slack": slack})


def test_the_p99_prompt_is_the_shortest_bucket_reaching_99_percent():
    assert handoff_prompt_tokens([1000, 32000], [0.9, 0.1]) == 32000
    assert handoff_prompt_tokens([32000, 1000], [0.1, 0.9]) == 32000  # order of the buckets does not matter
    assert handoff_prompt_tokens([1000, 32000], [0.995, 0.005]) == 1000  # 99.5% of the requests are at most 1,000 tokens
    with pytest.raises(ValueError):
        handoff_prompt_tokens([], [])


def test_the_reserve_worked_by_hand(tiny_instance):
    inst = _two_buckets(tiny_instance)
    kv = 32000 * KV_PER_TOKEN  # 2,097,152,000 bytes: the p99 prompt's whole KV
    # holding: 95% of handoffs over the ICI (100 GB/s), 5% over the DCN (25 GB/s)
    hold_ms = 0.95 * kv / 100e9 * 1e3 + 0.05 * kv / 25e9 * 1e3  # 19.922944 + 4.194304 = 24.117248 ms
    assert handoff_holding_ms(inst, "all", 32000) == pytest.approx(24.117248, rel=1e-12)
    # a slice at 3,000 output tokens/s with 200 output tokens per request takes 15 requests/s (Little's law)
    h = handoff_reserve(inst, "all", [1000, 32000], [0.9, 0.1], 200, [3000.0, 0.0])
    assert h.arrivals_rps[0] == pytest.approx(15.0)
    mean = 15.0 * hold_ms / 1e3  # 0.36175872 handoffs in flight on average
    assert h.mean_in_flight[0] == pytest.approx(mean, rel=1e-12)
    # Poisson(0.3618): P(N <= 1) = e^-m (1 + m) = 0.9485 < 0.99 <= P(N <= 2) = 0.9485 + e^-m m^2/2 = 0.9941
    p1 = math.exp(-mean) * (1 + mean)
    p2 = p1 + math.exp(-mean) * mean**2 / 2
    assert p1 < 0.99 <= p2
    assert int(h.requests[0]) == 2
    assert h.bytes[0] == pytest.approx(2 * kv * 1.07, rel=1e-12)  # two p99 prompts' KV with the 7% paging slack
    assert h.gb[0] == pytest.approx(4.48790528, rel=1e-9)
    # no load, nothing in flight
    assert int(h.requests[1]) == 0 and h.bytes[1] == 0.0


def test_the_dcn_share_lengthens_the_hold(tiny_instance):
    inst = tiny_instance(placement={"dcn_share_max": 0.0})
    assert handoff_holding_ms(inst, "all", 2000) == pytest.approx(2000 * KV_PER_TOKEN / 100e9 * 1e3, rel=1e-12)
    inst = tiny_instance(placement={"dcn_share_max": 1.0})
    assert handoff_holding_ms(inst, "all", 2000) == pytest.approx(2000 * KV_PER_TOKEN / 25e9 * 1e3, rel=1e-12)


def test_a_batch_cap_must_leave_room_for_the_reserve(tiny_instance):
    """32,000-token prompts on one 80 GB chip: 64 GB of KV pool (80 - 8 weights - 4 workspace - 4
    headroom), 2.1037 GB per resident (32,000 + 100.5 tokens): 30 residents fit alone, but 30 x
    2.1037 + one in-flight prompt (2.0972 GB) > 64 GB, so the knee is 29 where it was 30."""
    inst = tiny_instance(workload={"input_mix": [{"share": 1.0, "tokens": 32000}],
                                   "classes": {"std": {"share": 1.0, "spec_acceptance": 0.5,
                                                       "slos": [{"metric": "ttft", "percentile": 99, "limit_ms": 3000},
                                                                {"metric": "tpot", "percentile": 99, "limit_ms": 200}]}}})
    tm = tier_mixes(inst)[0]
    sl = next(s for s in slice_specs(inst) if s.chips == 1)
    mm = slice_memory_map(inst.model, sl, inst.priors)
    assert mm.kv_pool_gb == pytest.approx(64.0)
    resident = (32000 + 100.5) * KV_PER_TOKEN
    assert mm.resident_capacity(resident) == 30  # floor(64e9 / 2.1037e9)
    ops = {o.batch: o for o in decode_table(inst, tm, sl, [29, 30])}
    assert ops[30].kv_fit and not ops[30].handoff_fit and not ops[30].legal
    assert ops[30].handoff_requests == 1 and ops[30].handoff_gb == pytest.approx(32000 * KV_PER_TOKEN / 1e9)
    assert 30 * resident + 32000 * KV_PER_TOKEN > 64e9 >= 29 * resident + 32000 * KV_PER_TOKEN
    assert "handoffs in flight" in ops[30].handoff_violation and ops[30].handoff_violation in ops[30].violations
    assert ops[29].legal and ops[29].handoff_fit and ops[29].handoff_violation == ""
    assert decode_knee(inst, tm, sl, 0) == 29


def test_the_reserve_grows_with_the_batch(tiny_instance):
    """The fit is monotone in the batch (the knee search relies on it): the reserve's arrivals grow with tokens/s."""
    inst = _two_buckets(tiny_instance)
    tm = tier_mixes(inst)[0]
    sl = next(s for s in slice_specs(inst) if s.chips == 2)
    ops = decode_table(inst, tm, sl, list(range(1, 400, 7)))
    req = np.array([o.handoff_requests for o in ops])
    assert (np.diff(req) >= 0).all() and req[-1] > req[0]


def test_no_reserve_when_no_request_reaches_decode(tiny_instance):
    """output_tokens 1: the one token is prefill's, nothing hands off (the simulator never decodes such a request)."""
    inst = _two_buckets(tiny_instance)
    h = handoff_reserve(inst, "all", [1000, 32000], [0.9, 0.1], 1, [3000.0])
    assert int(h.requests[0]) == 0 and h.bytes[0] == 0.0
    with pytest.raises(ValueError):
        handoff_reserve(inst, "all", [1000], [1.0], 0, [1.0])


def test_the_poisson_quantile_is_scipys():
    """perf.handoff computes the quantile with numpy (fleetplan perf loads no SciPy); it is scipy.stats.poisson.ppf."""
    from scipy.stats import poisson

    from fleetplan.perf.handoff import poisson_quantile

    means = np.concatenate([[0.0, 1e-9, 1e-3], np.linspace(0.01, 60.0, 997), [123.4, 987.6, 5432.1]])
    for q in (0.5, 0.9, 0.99, 0.999):
        want = np.where(means > 0, poisson.ppf(q, np.maximum(means, 1e-300)), 0).astype(np.int64)
        assert (poisson_quantile(q, means) == want).all(), q
    assert poisson_quantile(0.99, np.array([[0.0, 2.44], [0.0916, 3.55]])).tolist() == [[0, 7], [1, 9]]
    with pytest.raises(ValueError):
        poisson_quantile(1.0, [1.0])
    with pytest.raises(ValueError):
        poisson_quantile(0.99, [-1.0])
