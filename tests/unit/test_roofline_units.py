"""Hand-worked micro-cases for the roofline, speculation and metrics functions (colocated replicas: tests/unit/test_colocated.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetplan.perf.metrics import goodput, percentile, request_metrics
from fleetplan.perf.roofline import (
    SliceSpec,
    decode_step,
    experts_touched_fraction,
    kv_bytes_per_request,
    kv_bytes_per_token,
    moe_param_split,
    slice_memory_map,
    weight_bytes_streamed,
)
from fleetplan.perf.speculation import acceptance_rate_from_token_probability, switch_off_batch, verify_step


def test_mla_kv_bytes(tiny_instance):
    inst = tiny_instance(model={"attention": {"kind": "mla", "kv_latent_rank": 512, "rope_dim": 64}, "bytes_per_kv_element": 2})
    assert kv_bytes_per_token(inst.model) == 32 * (512 + 64) * 2  # layers x (rank + rope) x bytes


def test_hybrid_kv_bytes(tiny_instance):
    inst = tiny_instance(model={"attention": {
        "kind": "hybrid", "kv_heads": 8, "head_dim": 128, "full_attention_layers": 8,
        "sliding_window_layers": 20, "window_tokens": 4096, "linear_attention_layers": 4,
        "linear_state_bytes_per_layer": 1_000_000}})
    full = 2 * 8 * 8 * 128  # per token, full layers, 1-byte KV
    swa = 2 * 20 * 8 * 128
    got = kv_bytes_per_request(inst.model, [1000, 100_000])
    assert got[0] == full * 1000 + swa * 1000 + 4 * 1_000_000
    assert got[1] == full * 100_000 + swa * 4096 + 4 * 1_000_000


def test_hybrid_layers_must_sum(tiny_instance):
    from fleetplan.errors import InstanceError

    with pytest.raises(InstanceError) as e:
        tiny_instance(model={"attention": {"kind": "hybrid", "kv_heads": 8, "head_dim": 128, "full_attention_layers": 8}})
    assert "model.attention" in e.value.render()


def test_moe_split_and_touched_experts(tiny_instance):
    inst = tiny_instance(model={"total_params_b": 400, "active_params_b": 40, "moe": {"experts": 128, "experts_per_token": 8}},
                         chips={"acc": {"hbm_gb": 1000}})
    shared, experts = moe_param_split(inst.model)
    assert shared == pytest.approx(16e9) and experts == pytest.approx(384e9)  # (40 - 400/16) / (15/16)
    f = experts_touched_fraction(np.array([1, 8, 128]), 128, 8)
    assert f[0] == pytest.approx(1 / 16)
    assert f[1] == pytest.approx(1 - (15 / 16) ** 8)
    assert f[2] > 0.9997
    w1 = float(weight_bytes_streamed(inst.model, 1))
    assert w1 == pytest.approx(16e9 + 384e9 / 16)  # one token streams shared + its 8 of 128 experts


def test_memory_map_and_capacity(tiny_instance):
    inst = tiny_instance()
    sl = SliceSpec.of("acc", inst.chips["acc"], 2)
    mm = slice_memory_map(inst.model, sl, inst.priors)
    assert mm.total_gb == 160 and mm.weights_gb == 8 and mm.workspace_gb == 8 and mm.headroom_gb == pytest.approx(8)
    assert mm.kv_pool_gb == pytest.approx(136)
    assert mm.resident_capacity(1e9, 0.0) == 136
    assert mm.resident_capacity(1e9, 0.0 + 1.0) == 68


def test_decode_step_by_hand(tiny_instance):
    inst = tiny_instance()
    sl = SliceSpec.of("acc", inst.chips["acc"], 1)
    d = decode_step(inst.model, sl, inst.priors, [1, 64], 0.5e9)
    bw = 3.0e12 * 0.6
    assert d.memory_ms[0] == pytest.approx((8e9 + 0.5e9) / bw * 1e3)
    assert d.memory_ms[1] == pytest.approx((8e9 + 64 * 0.5e9) / bw * 1e3)
    # GEMMs 2 A B plus attention 4 L d x context x B, the context 0.5 GB / 64 KiB per token = 7,629 tokens
    ctx = 0.5e9 / (2 * 32 * 8 * 128)
    assert d.compute_ms[1] == pytest.approx((2 * 8e9 * 64 + 4 * 32 * 4096 * ctx * 64) / (1000e12 * 0.4) * 1e3)
    # one chip: no collectives; the step is the GEMMs' and attention's rooflines added
    assert float(d.comm_ms[1]) == 0.0
    assert d.step_ms[1] == pytest.approx(max(8e9 / bw, 2 * 8e9 * 64 / 0.4e15) * 1e3 + 64 * 0.5e9 / bw * 1e3)


def test_speculation_switch_off_on_a_dense_gpu_slice(tiny_instance):
    # dense 8B: the verify FLOPs 2 A B k overtake the gain at a finite batch. With m0 the
    # weight read, m1 the KV read per request, c = 2A / F per position and w1 the draft KV
    # writes per request, a memory-bound step pays while (alpha k + 1)(m0 + m1 B) >
    # m0 + (m1 + w1 + k c) B, i.e. below B = 2 m0 / (k c + w1 - 2 m1) at alpha k = 2.
    inst = tiny_instance()
    sl = SliceSpec.of("acc", inst.chips["acc"], 1)
    kv = 0.02e9
    b = switch_off_batch(inst.model, sl, inst.priors, kv, 4, 0.5, 0.0, max_batch=4096)
    assert b is not None
    bw = 3.0e12 * 0.6
    m0, m1 = 8e9 / bw, kv / bw
    c = 2 * 8e9 / (1000e12 * 0.4)
    w1 = 4 * 2 * 32 * 8 * 128 / bw
    by_hand = 2 * m0 / (4 * c + w1 - 2 * m1)
    assert by_hand < 8e9 / bw / c  # the crossover is inside the memory-bound region (GEMMs bind above 111)
    assert b == pytest.approx(by_hand, abs=1.0)


def test_verify_step_components(tiny_instance):
    inst = tiny_instance()
    sl = SliceSpec.of("acc", inst.chips["acc"], 1)
    v = verify_step(inst.model, sl, inst.priors, 16, 0.1e9, 3, 0.5, 0.4)
    assert v.draft_ms == pytest.approx(1.2)
    assert float(v.extra_verify_ms) == pytest.approx(2 * 8e9 * 16 * 0.5 * 3 / (1000e12 * 0.4) * 1e3)


def test_acceptance_conversion():
    # p = 0.8, k = 4: E[accepted] = .8 + .64 + .512 + .4096 = 2.3616 -> alpha 0.5904
    assert float(acceptance_rate_from_token_probability(0.8, 4)) == pytest.approx(2.3616 / 4)


def test_metrics_from_timestamps():
    arr = [0.0, 1.0]
    toks = [[0.1, 0.12, 0.14, 0.20], [1.5]]
    m = request_metrics(arr, toks)
    assert m.ttft_ms.tolist() == pytest.approx([100.0, 500.0])
    assert m.tpot_ms[0] == pytest.approx(100 / 3)
    assert math.isnan(m.tpot_ms[1])
    assert sorted(m.itl_ms.tolist()) == pytest.approx([20.0, 20.0, 60.0])
    assert m.itl_max_ms[0] == pytest.approx(60.0)
    assert goodput(m, ttft_limit_ms=200) == 0.5
    assert goodput(m, itl_limit_ms=50) == 0.5  # request 0 stalls 60 ms; request 1 has no gap
    assert percentile([1, 2, 3, 4], 50) == 2.5
    with pytest.raises(ValueError):
        request_metrics([0.0], [[-1.0]])
    with pytest.raises(ValueError):
        request_metrics([0.0], [[0.2, 0.1]])
