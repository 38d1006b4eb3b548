"""The brief's section-2 arithmetic, computed by fleetplan from the bundled Gemini instance.

Every expected value is either the brief's own figure (with the tolerance its "about"
allows) or, where the brief's arithmetic slips, the value worked out here by hand from
the instance's numbers -- the comment says which.

The brief's arithmetic has no collectives: its step is the roofline alone. So these
tests run the instance with the ICI made free (latencies 0, 1e12 GB/s, no context
parallelism) -- the brief's model exactly; what the collectives add on the real
instance is pinned by hand in tests/unit/test_comm_terms.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from fleetplan.perf.pools import decode_knee, decode_table, slice_specs, tier_mixes
from fleetplan.perf.roofline import (
    SliceSpec,
    attention_ffn_crossover_tokens,
    blended_kv_bytes,
    decode_step,
    kv_bytes_per_token,
    mix_moments,
    prefill_flops,
    prefill_time_ms,
    slice_memory_map,
    sustained_prefill_tokens_per_s,
)
from fleetplan.perf.speculation import per_slot_efficiency, tokens_per_verify_step, verify_step
from fleetplan.tables.summary import blended_mix


def without_collectives(inst):
    """``inst`` with free collectives: the brief's roofline-only step."""
    pr = inst.priors.model_copy(update={"collective_latency_us": 0.0, "collective_hop_latency_us": 0.0, "all_to_all_latency_us": 0.0,
                                        "context_parallel_min_tokens": None})
    chips = {k: c.model_copy(update={"ici_gbytes_per_s": 1e12}) for k, c in inst.chips.items()}
    return inst.model_copy(update={"priors": pr, "chips": chips})


@pytest.fixture(scope="module")
def g(gemini):
    gemini = without_collectives(gemini)
    chip = gemini.chips["ironwood"]
    sl = SliceSpec.of("ironwood", chip, 8)
    mix = gemini.workload.input_mix
    tok = [b.tokens for b in mix]
    sh = [b.share for b in mix]
    return gemini, sl, tok, sh


def test_kv_is_128_kib_per_token(g):
    inst, *_ = g
    assert kv_bytes_per_token(inst.model) == 128 * 1024  # 2 x 8 x 128 x 1 B x 64 layers


def test_blended_mean_length_and_kv(g):
    inst, _, tok, sh = g
    mean, e_s2, p50 = mix_moments(tok, sh)
    # 0.9 x 6,000 + 0.08 x 32,000 + 0.02 x 128,000 = 10,520 tokens (the brief rounds to "~11K")
    assert mean == pytest.approx(10_520)
    assert p50 == 6000
    assert e_s2 == pytest.approx(0.9 * 6000**2 + 0.08 * 32000**2 + 0.02 * 128000**2)
    kv = blended_kv_bytes(inst.model, tok, sh)
    assert kv / 1e9 == pytest.approx(1.4, rel=0.02)  # 10,520 x 131,072 B = 1.379 GB


def test_eight_chip_slice(g):
    inst, sl, *_ = g
    assert sl.hbm_gb == pytest.approx(1536)
    assert sl.hbm_tbps == pytest.approx(58.96)  # "~59 TB/s"
    mm = slice_memory_map(inst.model, sl, inst.priors)
    assert mm.weights_gb == pytest.approx(400)
    assert mm.kv_pool_gb == pytest.approx(1000, abs=1)  # 1,536 - 400 - 90 - 46


def test_decode_step_at_batch_128(g):
    inst, sl, tok, sh = g
    kv = blended_kv_bytes(inst.model, tok, sh, extra_tokens=(inst.workload.output_tokens + 1) / 2)
    d = decode_step(inst.model, sl, inst.priors, 128, kv)
    # (400 GB + 128 x 1.40 GB) / (58.96 TB/s x 0.6) = 16.4 ms
    assert float(d.step_ms) == pytest.approx(16.4, rel=0.01)
    assert float(d.tokens_per_s) / 8 == pytest.approx(1000, rel=0.03)  # ~1,000 tokens/s/chip
    assert float(d.compute_ms) < 1.0  # "sub-millisecond": memory-bound confirmed


def test_batch_curve_matches_brief(g):
    inst, sl, *_ = g
    tm = blended_mix(inst)
    ops = {o.batch: o for o in decode_table(inst, tm, sl, [64, 128, 256, 384, 512], [])}
    # brief: 14 / 16 / 21 / 27 / 32 ms p50 and +60% at p99
    for b, p50 in [(64, 14), (128, 16), (256, 21), (384, 27), (512, 32)]:
        assert ops[b].step_ms == pytest.approx(p50, rel=0.06)
        assert ops[b].tpot_ms[99.0] == pytest.approx(1.6 * ops[b].step_ms, rel=1e-9)
    assert ops[256].legal and not ops[384].legal and not ops[512].legal


def test_knee_is_346_not_250(g):
    """The brief: "the SLO-legal region ends ... around B ~ 250". Its own curve says
    otherwise: p99 = 1.6 x (400 GB + B x 1.40 GB) / 35.4 TB/s <= 40 ms gives
    B <= (25 ms x 35.38 TB/s - 400 GB) / 1.3986 GB = 346. Pinned: 346."""
    inst, sl, *_ = g
    bw = sl.hbm_tbps * 1e12 * 0.6
    kv = blended_mix(inst).resident_kv(inst)[0]
    by_hand = int((40 / 1.6 / 1e3 * bw - 400e9) / kv)
    knee = decode_knee(inst, blended_mix(inst), sl)
    assert knee == by_hand == 346


def test_prefill_terms(g):
    inst, sl, *_ = g
    rate = sl.peak_tflops * 1e12 * 0.4  # 14.76 PFLOP/s effective
    ffn8, attn8 = prefill_flops(inst.model, 8192)
    assert float(ffn8) / rate * 1e3 == pytest.approx(44, rel=0.02)
    assert float(attn8) / rate * 1e3 == pytest.approx(5, rel=0.05)
    ffn128, attn128 = prefill_flops(inst.model, 131072)
    assert float(ffn128) / rate == pytest.approx(0.71, rel=0.01)
    assert float(attn128) / rate == pytest.approx(1.2, rel=0.03)
    assert float(prefill_time_ms(inst.model, sl, inst.priors, 131072)) == pytest.approx(1930, rel=0.01)  # "~2 s"
    assert attention_ffn_crossover_tokens(inst.model) == pytest.approx(76_294, rel=1e-4)


def test_sustained_prefill_rates(g):
    inst, sl, tok, sh = g
    r = sustained_prefill_tokens_per_s(inst.model, sl, inst.priors, tok, sh)
    assert r["ffn_only"] == pytest.approx(185_000, rel=0.01)
    assert r["at_mean_length"] == pytest.approx(160_000, rel=0.02)
    # Over the mix the attention term needs E[s^2] = 4.42e8, not E[s]^2 = 1.11e8:
    # 14.765e15 / (80e9 + 2 x 64 x 8192 x 4.42e8 / 10,520) = 119,017 tokens/s.
    by_hand = 14.7648e15 / (80e9 + 2 * 64 * 8192 * 4.42e8 / 10_520)
    assert r["over_mix"] == pytest.approx(by_hand, rel=1e-4)
    assert r["over_mix"] < 0.8 * r["at_mean_length"]  # markedly lower


def test_prefill_with_cache_hits_attends_over_the_prefix(g):
    """The brief divides cache-adjusted tokens (88M/s) by 160K tokens/s/slice. With a 60%
    hit the new 40% of each prompt still attends over the whole context, so a computed
    token costs 80 GFLOP + 2 L d s (1 + h): E over the mix gives 98,112 tokens/s, and the
    brief's ~550 prefill slices become ~858 at its own demand."""
    inst, sl, tok, sh = g
    r = sustained_prefill_tokens_per_s(inst.model, sl, inst.priors, tok, sh, 0.6)
    s = np.array(tok, float)
    w = np.array(sh)
    flops = 80e9 * 0.4 * s + 2 * 64 * 8192 * (s**2) * (1 - 0.36)
    by_hand = 14.7648e15 * np.dot(w, 0.4 * s) / np.dot(w, flops)
    assert r["over_mix"] == pytest.approx(by_hand, rel=1e-4)
    assert r["over_mix"] == pytest.approx(98_112, rel=1e-3)
    slices = 20_000 * 10_520 * 0.4 / r["over_mix"]
    assert slices == pytest.approx(858, abs=1)


def test_speculation_slot_economics():
    assert float(tokens_per_verify_step(0.8, 4)) == pytest.approx(4.2)
    assert float(per_slot_efficiency(0.8, 4)) == pytest.approx(0.84)
    assert float(per_slot_efficiency(0.5, 4)) == pytest.approx(0.60)
    assert float(per_slot_efficiency(0.3, 4)) == pytest.approx(0.44)


def test_verify_compute_adds_3ms_at_128_and_11ms_at_512(g):
    inst, sl, tok, sh = g
    kv = blended_kv_bytes(inst.model, tok, sh, 150.5)
    v = verify_step(inst.model, sl, inst.priors, np.array([128, 512]), kv, 4, 1.0, 0.0)
    assert v.extra_verify_ms[0] == pytest.approx(2.8, rel=0.02)  # 80 GFLOP x 128 x 4 / 14.8 PF/s
    assert v.extra_verify_ms[1] == pytest.approx(11.1, rel=0.02)


def test_stratified_tiers_of_the_gemini_mix(g):
    inst, *_ = g
    tms = {t.name: t for t in tier_mixes(inst)}
    assert tms["short"].tier_share == pytest.approx(0.9)
    assert tms["long"].tier_share == pytest.approx(0.1)
    assert tms["long"].mean_tokens == pytest.approx(0.8 * 32000 + 0.2 * 128000)
    # the long tier's knee sits far below the short tier's (brief s5.5: B ~ 16-32 vs 200-250)
    sl = slice_specs(inst)[0]
    assert decode_knee(inst, tms["long"], sl) < decode_knee(inst, tms["short"], sl) / 5
