"""The step physics beyond the roofline (issue 17): collectives, attention at its own
efficiency, per-layer overheads, context-parallel prefill. Each term against a hand
calculation, then the properties an inference performance engineer expects."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetplan.instance.schema import Priors
from fleetplan.perf.comm import all_to_all_ms, allreduce_ms, allreduce_steps, p2p_ms
from fleetplan.perf.roofline import (
    SliceSpec,
    context_parallel_layout,
    decode_step,
    kv_bytes_per_token,
    moe_remote_copies,
    prefill_breakdown,
    prefill_flops,
    prefill_time_ms,
    step_comm_ms,
    weight_bytes_streamed,
)
from fleetplan.perf.speculation import StepKernel, verify_step

BASE = dict(prefill_mfu=0.5, decode_mfu=0.5, hbm_bw_fraction=0.8, hbm_workspace_gb_per_chip=0.0, hbm_headroom_fraction=0.0,
            tpot_p99_inflation=1.0)


def _pr(**kw) -> Priors:
    return Priors(**{**BASE, **kw})


def test_allreduce_ring_and_tree_by_hand():
    p = _pr(collective_latency_us=10.0, collective_hop_latency_us=1.0, collective_bw_fraction=0.5)
    # ring on 4 chips: 10 + 2 x 3 x 1 us, plus 2 x 3/4 x 1 MB over 100 GB/s x 0.5 = 30 us
    assert float(allreduce_ms(1e6, 4, 100.0, p)) == pytest.approx((10 + 6 + 30) / 1e3)
    tree = p.model_copy(update={"allreduce_algorithm": "tree"})
    assert float(allreduce_ms(1e6, 4, 100.0, tree)) == pytest.approx((10 + 4 + 30) / 1e3)  # 2 log2(4) = 4 steps
    assert allreduce_steps(5, "tree") == 6 and allreduce_steps(5, "ring") == 8
    assert float(allreduce_ms(1e6, 1, 100.0, p)) == 0.0
    # one-shot: one step, each chip reads the 3 others' whole 1 MB: 10 + 1 + 3 MB / 50 GB/s = 71 us
    one = p.model_copy(update={"allreduce_algorithm": "one_shot"})
    assert float(allreduce_ms(1e6, 4, 100.0, one)) == pytest.approx((10 + 1 + 60) / 1e3)
    # auto: one-shot for a small message (11 + 0.6 us against 16 + 0.3 us), ring for a large one
    auto = p.model_copy(update={"allreduce_algorithm": "auto"})
    assert float(allreduce_ms(1e4, 4, 100.0, auto)) == pytest.approx((11 + 3 * 1e4 / 50e9 * 1e6) / 1e3)
    assert float(allreduce_ms(1e6, 4, 100.0, auto)) == pytest.approx((10 + 6 + 30) / 1e3)


def test_all_to_all_and_p2p_by_hand():
    p = _pr(all_to_all_latency_us=5.0, collective_hop_latency_us=1.0, all_to_all_bw_fraction=0.8)
    # pairwise exchange on 4 chips: 5 + 3 x 1 us + 1 MB / 80 GB/s = 12.5 us
    assert float(all_to_all_ms(1e6, 4, 100.0, p)) == pytest.approx((5 + 3 + 12.5) / 1e3)
    assert float(all_to_all_ms(1e6, 1, 100.0, p)) == 0.0
    assert float(p2p_ms(1e6, 100.0, p)) == pytest.approx((5 + 1 + 12.5) / 1e3)


def test_collective_defaults_are_the_nccl_fit():
    """The Priors defaults are the DGX-H100 fit of benchmarks/fit_collectives.py (numbers
    in benchmarks/results/collectives.json): a 1 MiB all-reduce on 8 H100s costs
    18.26 + 14 x 0.789 us + 1.75 MiB / (450 GB/s x 0.730)."""
    p = _pr()
    by_hand = 18.26 + 14 * 0.789 + 1.75 * 2**20 / (450e9 * 0.730) * 1e6
    assert float(allreduce_ms(2**20, 8, 450.0, p)) * 1e3 == pytest.approx(by_hand)


def test_moe_remote_copies_reuse_the_occupancy_model(tiny_instance):
    inst = tiny_instance(model={"total_params_b": 40, "active_params_b": 8, "moe": {"experts": 64, "experts_per_token": 4}})
    # 64 experts on 8 chips, 4 per token: each chip touched with p = 1 - (7/8)^4; 7 remote chips
    assert moe_remote_copies(inst.model, 8) == pytest.approx(7 * (1 - (7 / 8) ** 4))
    assert moe_remote_copies(inst.model, 1) == 0.0
    dense = tiny_instance()
    assert moe_remote_copies(dense.model, 8) == 0.0


def test_dense_step_comm_by_hand(tiny_instance):
    inst = tiny_instance()
    sl = SliceSpec.of("acc", inst.chips["acc"], 2)
    ar, a2a = step_comm_ms(inst.model, sl, inst.priors, 64)
    msg = 64 * 4096 * 2  # tokens x d_model x 2 bytes (BF16 activations)
    one_us = 18.26 + 2 * 0.789 + 1.0 * msg / (400e9 * 0.730) * 1e6  # ring on 2 chips: 2 steps, 2(n-1)/n = 1
    assert float(ar) == pytest.approx(2 * 32 * one_us / 1e3)  # two per layer, 32 layers
    assert float(a2a) == 0.0


def test_moe_step_comm_by_hand(tiny_instance):
    inst = tiny_instance(model={"total_params_b": 40, "active_params_b": 8, "moe": {"experts": 64, "experts_per_token": 4}},
                         chips={"acc": {"slice_shapes": [1, 2, 4]}})
    sl = SliceSpec.of("acc", inst.chips["acc"], 4)
    ar, a2a = step_comm_ms(inst.model, sl, inst.priors, 128)
    msg = 128 * 4096 * 2
    ar_us = 18.26 + 6 * 0.789 + 1.5 * msg / (400e9 * 0.730) * 1e6
    assert float(ar) == pytest.approx(32 * ar_us / 1e3)  # one all-reduce per MoE layer (attention)
    per_chip = 128 / 4 * 3 * (1 - 0.75**4) * 4096 * 2  # 32 tokens per chip x remote copies x d x 2 B
    a2a_us = 6.80 + 3 * 0.789 + per_chip / (400e9 * 0.794) * 1e6
    assert float(a2a) == pytest.approx(2 * 32 * a2a_us / 1e3)  # dispatch + combine per layer


def test_decode_step_adds_comm_attention_and_overheads(tiny_instance):
    inst = tiny_instance(priors={"attention_bw_fraction": 0.3, "layer_overhead_us": 10.0, "decode_step_overhead_ms": 0.5})
    sl = SliceSpec.of("acc", inst.chips["acc"], 2)
    d = decode_step(inst.model, sl, inst.priors, 32, 0.2e9)
    weights = 8e9 / (6e12 * 0.6) * 1e3
    kv = 32 * 0.2e9 / (6e12 * 0.3) * 1e3  # KV reads at attention_bw_fraction, not hbm_bw_fraction
    ar, _ = step_comm_ms(inst.model, sl, inst.priors, 32)
    assert float(d.gemm_ms) == pytest.approx(weights)
    assert float(d.attention_ms) == pytest.approx(kv)
    assert d.overhead_ms == pytest.approx(0.5 + 32 * 10e-3)
    assert float(d.step_ms) == pytest.approx(weights + kv + float(ar) + 0.5 + 0.32)


def test_decode_attention_compute_at_its_own_mfu(tiny_instance):
    """MHA with a tiny KV element count per FLOP makes attention compute-bound when its
    efficiency is low: 4 L d x context x B at attention_mfu."""
    inst = tiny_instance(priors={"attention_mfu": 0.01})
    sl = SliceSpec.of("acc", inst.chips["acc"], 1)
    ctx = 4096
    kv = ctx * kv_bytes_per_token(inst.model)
    d = decode_step(inst.model, sl, inst.priors, 8, kv)
    flops = 4 * 32 * 4096 * ctx * 8
    assert float(d.attention_ms) == pytest.approx(max(flops / (1000e12 * 0.01), 8 * kv / (3e12 * 0.6)) * 1e3)
    assert flops / (1000e12 * 0.01) > 8 * kv / (3e12 * 0.6)  # the FLOPs bind here


def test_prefill_breakdown_by_hand(tiny_instance):
    inst = tiny_instance(priors={"attention_mfu": 0.2, "layer_overhead_us": 5.0, "prefill_overhead_ms": 1.0})
    sl = SliceSpec.of("acc", inst.chips["acc"], 2)
    pb = prefill_breakdown(inst.model, sl, inst.priors, 4000, 1000)
    ffn, attn = prefill_flops(inst.model, 4000, 1000)
    assert float(pb.gemm_ms) == pytest.approx(float(ffn) / (2000e12 * 0.4) * 1e3)  # compute-bound at 3,000 new tokens
    assert float(pb.attention_ms) == pytest.approx(float(attn) / (2000e12 * 0.2) * 1e3)
    ar, _ = step_comm_ms(inst.model, sl, inst.priors, 3000)  # the new tokens' activations only
    assert float(pb.allreduce_ms) == pytest.approx(float(ar))
    assert pb.overhead_ms == pytest.approx(1.0 + 32 * 5e-3)
    assert float(pb.total_ms) == pytest.approx(float(pb.gemm_ms + pb.attention_ms + pb.allreduce_ms) + 1.16)
    # a one-token prefill reads every weight once: the weights bind, not the FLOPs
    one = prefill_breakdown(inst.model, sl, inst.priors, 1)
    assert float(one.gemm_ms) == pytest.approx(8e9 / (6e12 * 0.6) * 1e3)


def test_context_parallel_layout_of_the_gemini_slices(gemini):
    chip = gemini.chips["ironwood"]
    # 400 GB over (192 x 0.97 - 11.25) GB per chip needs 2.3 chips: the smallest divisor of 8 is 4
    assert context_parallel_layout(gemini.model, SliceSpec.of("ironwood", chip, 8), gemini.priors) == (2, 4)
    assert context_parallel_layout(gemini.model, SliceSpec.of("ironwood", chip, 32), gemini.priors) == (8, 4)


def test_context_parallel_prefill_by_hand(gemini):
    """A 128K prompt on an 8-chip Ironwood slice: two groups of 4 chips, each runs 64K
    tokens tensor-parallel (weights read twice, all-reduces of 64K tokens over 4 chips,
    all-to-alls over 4), attention at 0.4 x 0.93, and the KV passes of one step hidden
    behind a block of attention."""
    inst = gemini
    chip = inst.chips["ironwood"]
    sl = SliceSpec.of("ironwood", chip, 8)
    grp = SliceSpec.of("ironwood", chip, 4)
    s = 131072
    pb = prefill_breakdown(inst.model, sl, inst.priors, s)
    assert int(pb.context_parallel) == 2
    ffn, attn = prefill_flops(inst.model, s)
    peak = 8 * 4614e12
    bw = 8 * 7.37e12 * 0.6
    assert float(pb.gemm_ms) == pytest.approx(max(2 * float(weight_bytes_streamed(inst.model, s / 2)) / bw, float(ffn) / (peak * 0.4)) * 1e3)
    assert float(pb.attention_ms) == pytest.approx(float(attn) / (peak * 0.4 * 0.93) * 1e3)
    ar, a2a = step_comm_ms(inst.model, grp, inst.priors, s / 2)
    assert float(pb.allreduce_ms) == pytest.approx(float(ar)) and float(pb.all_to_all_ms) == pytest.approx(float(a2a))
    # one KV block: 64K tokens x 2 KiB per layer / 4 chips = 33.5 MB, about 70 us over 600 GB/s x 0.794;
    # one block of attention: 4 d x 64K x 64K / (4 x 4614 TFLOP/s x 0.372) = 20 ms: fully hidden
    pass_ms = (6.8 + 1.0) / 1e3 + (s / 2) * 2048 / 4 / (1200e9 * 0.397) * 1e3
    block_ms = 4 * 8192 * (s / 2) ** 2 / (4 * 4614e12 * 0.4 * 0.93) * 1e3
    assert pass_ms < block_ms and float(pb.ring_ms) == 0.0
    tp = prefill_breakdown(inst.model, sl, inst.priors.model_copy(update={"context_parallel_min_tokens": None}), s)
    assert int(tp.context_parallel) == 1 and float(tp.total_ms) > float(pb.total_ms)


def test_gemini_decode_comm_at_batch_128_by_hand(gemini):
    """The brief's 8-chip Ironwood slice at B = 128 (the instance's ICI priors): per layer one
    all-reduce of 128 x 8192 x 2 B = 2 MiB (ring, 14 steps) and a dispatch + combine of 16
    tokens per chip x 7 (1 - (7/8)^8) copies x 16 KiB."""
    sl = SliceSpec.of("ironwood", gemini.chips["ironwood"], 8)
    d = decode_step(gemini.model, sl, gemini.priors, 128, 1.4e9)
    ar_us = 18.26 + 14 * 1.0 + 1.75 * 128 * 8192 * 2 / (1200e9 * 0.365) * 1e6
    copies = 7 * (1 - (7 / 8) ** 8)
    a2a_us = 6.80 + 7 * 1.0 + 16 * copies * 8192 * 2 / (1200e9 * 0.397) * 1e6
    assert float(d.allreduce_ms) == pytest.approx(64 * ar_us / 1e3)
    assert float(d.all_to_all_ms) == pytest.approx(2 * 64 * a2a_us / 1e3)
    assert float(d.allreduce_ms) == pytest.approx(2.60, abs=0.01) and float(d.all_to_all_ms) == pytest.approx(2.09, abs=0.01)


def test_step_kernel_equals_verify_step_with_every_new_term(tiny_instance):
    inst = tiny_instance(model={"total_params_b": 40, "active_params_b": 8, "moe": {"experts": 64, "experts_per_token": 4}},
                         chips={"acc": {"slice_shapes": [1, 2, 4], "hbm_gb": 200}},
                         priors={"attention_bw_fraction": 0.35, "attention_mfu": 0.05, "layer_overhead_us": 7.0,
                                 "decode_step_overhead_ms": 0.3, "allreduce_algorithm": "tree"})
    sl = SliceSpec.of("acc", inst.chips["acc"], 4)
    ker = StepKernel.of(inst.model, sl, inst.priors, 256, 3, 0.4)
    rng = np.random.default_rng(1)
    for _ in range(30):
        b = int(rng.integers(1, 257))
        ns = int(rng.integers(0, b + 1))
        kv = float(rng.uniform(0.01, 2.0)) * 1e9 * b
        plain = float(decode_step(inst.model, sl, inst.priors, b, kv / b).step_ms)
        assert ker.step_ms(b, 0, kv) == pytest.approx(plain, rel=1e-12)
        if ns:
            ref = float(verify_step(inst.model, sl, inst.priors, b, kv / b, 3, ns / b, 0.4).step_ms)
            assert ker.step_ms(b, ns, kv) == pytest.approx(ref, rel=1e-12)


# --------------------------------------------------------------------------- properties

priors_st = st.fixed_dictionaries({
    "collective_latency_us": st.floats(0, 100), "collective_hop_latency_us": st.floats(0, 10),
    "collective_bw_fraction": st.floats(0.01, 1.0), "allreduce_algorithm": st.sampled_from(["ring", "tree", "one_shot", "auto"]),
    "all_to_all_latency_us": st.floats(0, 100), "all_to_all_bw_fraction": st.floats(0.01, 1.0),
})


@settings(max_examples=150, deadline=None)
@given(priors_st, st.floats(0, 1e9), st.floats(1, 5000))
def test_more_chips_never_lower_the_allreduce_time(pk, msg, ici):
    p = _pr(**pk)
    t = [float(allreduce_ms(msg, n, ici, p)) for n in range(1, 129)]
    assert all(b >= a - 1e-15 for a, b in zip(t, t[1:]))


@settings(max_examples=100, deadline=None)
@given(priors_st, st.integers(1, 4096), st.sampled_from([None, (64, 8), (8, 2), (256, 8)]))
def test_more_chips_per_slice_never_lower_the_allreduce_time_per_step(pk, tokens, moe):
    from fleetplan.instance.io import parse_instance
    from tests.conftest import tiny_data

    model = {"moe": {"experts": moe[0], "experts_per_token": moe[1]}, "total_params_b": 64, "active_params_b": 16} if moe else {}
    inst = parse_instance(tiny_data(model=model, priors=pk, chips={"acc": {"hbm_gb": 1e4}}), "prop")
    t = [float(step_comm_ms(inst.model, SliceSpec.of("acc", inst.chips["acc"], n), inst.priors, tokens)[0]) for n in (1, 2, 4, 8, 16, 32, 64)]
    assert all(b >= a - 1e-15 for a, b in zip(t, t[1:]))


@settings(max_examples=100, deadline=None)
@given(priors_st, st.floats(0, 1e5), st.booleans())
def test_collectives_vanish_on_one_chip(pk, tokens, moe):
    from fleetplan.instance.io import parse_instance
    from tests.conftest import tiny_data

    model = {"moe": {"experts": 64, "experts_per_token": 4}, "total_params_b": 40, "active_params_b": 8} if moe else {}
    inst = parse_instance(tiny_data(model=model, priors={**pk, "context_parallel_min_tokens": 1}), "prop")
    sl = SliceSpec.of("acc", inst.chips["acc"], 1)
    d = decode_step(inst.model, sl, inst.priors, tokens, 1e8)
    assert float(d.comm_ms) == 0.0
    pb = prefill_breakdown(inst.model, sl, inst.priors, tokens + 1)
    assert float(pb.comm_ms) == 0.0 and int(pb.context_parallel) == 1


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 300_000), st.floats(0, 0.9), st.sampled_from([2, 4, 8, 16]), st.integers(1, 200_000))
def test_context_parallel_is_never_slower_and_off_below_its_threshold(s, hit, chips, thr):
    from fleetplan.instance.io import parse_instance
    from tests.conftest import tiny_data

    inst = parse_instance(tiny_data(chips={"acc": {"slice_shapes": [chips], "chips_per_pod": 16}}), "prop")
    sl = SliceSpec.of("acc", inst.chips["acc"], chips)
    c = math.floor(hit * s)
    cp = inst.priors.model_copy(update={"context_parallel_min_tokens": thr})
    a = prefill_breakdown(inst.model, sl, cp, s, c)
    b = prefill_breakdown(inst.model, sl, inst.priors, s, c)
    assert float(a.total_ms) <= float(b.total_ms) * (1 + 1e-12)
    if s - c < thr:
        assert int(a.context_parallel) == 1 and float(a.total_ms) == float(b.total_ms)
    assert float(prefill_time_ms(inst.model, sl, cp, s, c)) == float(a.total_ms)
