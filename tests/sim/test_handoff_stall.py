"""Issue 39 item 20 in the simulator: a decode slice holds a handoff's prompt KV from the start
of its transfer until it lands, from the page pool its batch uses (fleetplan.sim.handoff), and a
handoff with no room waits -- the prefill stalls. The plan's batch caps leave room for the p99
of the handoffs in flight (fleetplan.perf.handoff); a cap that fills the pool with residents
(the reserve removed) stalls.

The case: the tiny instance (tests/conftest.py) with 32,000-token prompts on one 80 GB chip
(64 GB of KV pool, 2.10 GB a resident: 30 fit alone) and a 2 GB/s KV link (a 1,049 ms
transfer), so about four handoffs are in flight at full load and the reserve is nine prompts:
the legal cap is 21.
"""

from __future__ import annotations

import numpy as np
import pytest

from fleetplan.perf.handoff import handoff_holding_ms
from fleetplan.perf.pools import decode_knee, decode_table, slice_specs, tier_mixes
from fleetplan.perf.roofline import kv_bytes_per_request, slice_memory_map
from fleetplan.perf.speculation import StepKernel
from fleetplan.sim.engine import DecodeSlice, decode_des

PROMPT = 32000.0
OUT = 200


@pytest.fixture(scope="module")
def case():
    from fleetplan.instance.io import parse_instance
    from tests.conftest import tiny_data
    from tests.regression.test_handoff_reserve import LONG_PROMPTS

    inst = parse_instance(tiny_data(workload=LONG_PROMPTS, network={"kv_ici_gbytes_per_s_per_slice": 2, "dcn_gbytes_per_s_per_slice": 0.5},
                                    placement={"dcn_share_max": 0.0}), "tiny")
    tm = tier_mixes(inst)[0]
    sl = next(s for s in slice_specs(inst) if s.chips == 1)
    return inst, tm, sl


def _kv(inst):
    return lambda c: kv_bytes_per_request(inst.model, c)


def _run(inst, sl, cap: int, lam_rps: float, duration_s: float, seed: int = 1):
    """One decode slice at batch cap ``cap`` fed Poisson handoffs at ``lam_rps`` (requests/s), each
    moving its prompt's KV in the instance's transfer time once it may start."""
    rng = np.random.default_rng(seed)
    n = int(lam_rps * duration_s)
    ready = np.cumsum(rng.exponential(1e3 / lam_rps, n))
    xfer = np.full(n, handoff_holding_ms(inst, "all", PROMPT))
    mm = slice_memory_map(inst.model, sl, inst.priors)
    ds = DecodeSlice(StepKernel.of(inst.model, sl, inst.priors, cap, 0), cap, mm.kv_pool_gb * 1e9, 0, None, 0)
    log = decode_des(ready, np.full(n, PROMPT), np.full(n, OUT), np.zeros(n, dtype=bool), {0: np.zeros(n)}, [ds], _kv(inst),
                     float(kv_bytes_per_request(inst.model, 1.0)), 0, xfer_ms=xfer)
    ho = log.handoffs
    keep = ready > 60e3  # past the first minute
    kv_wait = np.where(ho.kv_bound, ho.stall_ms, 0.0)[keep]
    return float(np.mean(kv_wait > 1e-9)), float(np.percentile(kv_wait, 99.0)), log


def test_the_case(case):
    inst, tm, sl = case
    mm = slice_memory_map(inst.model, sl, inst.priors)
    assert mm.resident_capacity(tm.resident_kv(inst)[0]) == 30
    assert handoff_holding_ms(inst, "all", PROMPT) == pytest.approx(PROMPT * 65536 / 2e9 * 1e3)  # 1,048.6 ms
    assert decode_knee(inst, tm, sl, 0) == 21
    assert decode_table(inst, tm, sl, [21])[0].handoff_requests == 9


def test_handoffs_stall_without_the_reserve_and_not_with_it(case):
    """Each cap at 82% of its own full-load rate (tokens/s / output tokens, what a plan sized at that
    cap sends): with the residents-only cap (30) about 4% of handoffs find a slot but no room for
    their KV and wait about a second; with the reserve's cap (21) fewer than the 1% the p99 reserve
    allows, and the p99 handoff does not wait for KV at all."""
    inst, tm, sl = case
    res = {}
    for cap in (30, 21):
        op = decode_table(inst, tm, sl, [cap])[0]
        res[cap] = _run(inst, sl, cap, 0.82 * op.tokens_per_s / OUT, 1800.0)
    share, p99, _ = res[30]
    assert share > 0.02 and p99 > 500.0, res[30][:2]
    share, p99, _ = res[21]
    assert share <= 0.01 and p99 == 0.0, res[21][:2]


def test_the_kv_is_held_from_the_transfer_start_and_a_handoff_without_room_waits(case):
    """Two handoffs 1 ms apart on a slice whose page pool holds 1.5 prompts: the first is allocated
    at once and joins when its KV lands a transfer later; the second finds a slot but no room, waits
    until the first finishes (its KV freed at that step's end), then moves its own KV."""
    inst, tm, sl = case
    x = 100.0
    kv = float(kv_bytes_per_request(inst.model, PROMPT + 1.0))
    ds = DecodeSlice(StepKernel.of(inst.model, sl, inst.priors, 4, 0), 4, 1.5 * kv + 3 * 65536.0, 0, None, 0)
    ready = np.array([0.0, 1.0])
    log = decode_des(ready, np.full(2, PROMPT), np.full(2, 3), np.zeros(2, dtype=bool), {0: np.zeros(2)}, [ds], _kv(inst),
                     float(kv_bytes_per_request(inst.model, 1.0)), 0, xfer_ms=np.full(2, x))
    ho = log.handoffs
    assert ho.alloc_ms[0] == 0.0 and ho.landed_ms[0] == x and log.join_ms[0] == x and not ho.kv_bound[0]
    assert ho.kv_bound[1] and ho.alloc_ms[1] == pytest.approx(log.done_ms[0])  # freed at the end of the first's last step
    assert ho.stall_ms[1] == pytest.approx(log.done_ms[0] - 1.0) and ho.landed_ms[1] == pytest.approx(ho.alloc_ms[1] + x)
    assert log.join_ms[1] == pytest.approx(ho.landed_ms[1])
