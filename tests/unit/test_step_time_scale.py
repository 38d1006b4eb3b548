"""The two step-time scale fields of the priors (issue 40: a physics source's plain range, the
margins' step-time multiplier): ``prefill_time_scale`` multiplies every prefill time and
``decode_time_scale`` every decode (and verify) step, each in one place per step function,
and a colocated mixed step of B decode tokens and C prompt tokens takes their token-weighted
mean (B x_d + C x_p) / (B + C). Worked by hand against the unscaled functions on the bundled
BF16 70B instance; scale 1 changes no bit."""

from __future__ import annotations

import numpy as np
import pytest

from fleetplan.instance.io import load_instance
from fleetplan.perf.colocated import (
    CHUNKED,
    PREFILL_FIRST,
    MixedKernel,
    Schedule,
    ServiceKernel,
    mixed_step,
    prompt_types,
)
from fleetplan.perf.pools import PrefillSource, slice_specs, tier_mixes
from fleetplan.perf.roofline import decode_step, kv_bytes_per_request, prefill_breakdown, prefill_time_ms
from fleetplan.perf.speculation import StepKernel, verify_step

XD, XP = 1.3, 0.8  # decode, prefill


@pytest.fixture(scope="module")
def case():
    inst = load_instance("llama70b-h100-bf16-p99")
    sl = next(s for s in slice_specs(inst) if s.chips == 4)
    scaled = inst.priors.model_copy(update={"decode_time_scale": XD, "prefill_time_scale": XP})
    return inst, sl, inst.priors, scaled


def test_scale_one_is_the_default_bit_for_bit(case):
    inst, sl, base, _ = case
    one = base.model_copy(update={"decode_time_scale": 1.0, "prefill_time_scale": 1.0})
    b = np.array([1.0, 17.0, 64.0, 256.0])
    kv = float(kv_bytes_per_request(inst.model, 2200.0))
    assert np.array_equal(decode_step(inst.model, sl, one, b, kv).step_ms, decode_step(inst.model, sl, base, b, kv).step_ms)
    s = np.array([100.0, 2000.0, 30000.0])
    assert np.array_equal(prefill_time_ms(inst.model, sl, one, s), prefill_time_ms(inst.model, sl, base, s))


def test_decode_step_and_its_parts_scale_by_decode_time_scale_only(case):
    inst, sl, base, scaled = case
    b = np.array([1.0, 8.0, 64.0, 200.0])
    kv = float(kv_bytes_per_request(inst.model, 2200.0))
    d0, d1 = decode_step(inst.model, sl, base, b, kv), decode_step(inst.model, sl, scaled, b, kv)
    for part in ("step_ms", "gemm_ms", "attention_ms", "allreduce_ms", "all_to_all_ms", "memory_ms", "compute_ms"):
        np.testing.assert_allclose(getattr(d1, part), XD * getattr(d0, part), rtol=1e-13, err_msg=part)
    assert d1.overhead_ms == pytest.approx(XD * d0.overhead_ms, rel=1e-13)
    np.testing.assert_allclose(d1.step_ms, d1.gemm_ms + d1.attention_ms + d1.allreduce_ms + d1.all_to_all_ms + d1.overhead_ms, rtol=1e-13)
    np.testing.assert_allclose(d1.tokens_per_s, d0.tokens_per_s / XD, rtol=1e-13)


def test_prefill_scales_by_prefill_time_scale_only(case):
    inst, sl, base, scaled = case
    s = np.array([128.0, 2000.0, 16384.0])
    c = np.array([0.0, 500.0, 0.0])
    p0, p1 = prefill_breakdown(inst.model, sl, base, s, c), prefill_breakdown(inst.model, sl, scaled, s, c)
    for part in ("total_ms", "gemm_ms", "attention_ms", "allreduce_ms", "memory_ms", "compute_ms"):
        np.testing.assert_allclose(getattr(p1, part), XP * getattr(p0, part), rtol=1e-13, err_msg=part)
    assert p1.overhead_ms == pytest.approx(XP * p0.overhead_ms, rel=1e-13)
    # the decode scale does not touch a prefill, nor the prefill scale a decode step
    only_d = base.model_copy(update={"decode_time_scale": XD})
    np.testing.assert_array_equal(prefill_time_ms(inst.model, sl, only_d, s, c), p0.total_ms)
    only_p = base.model_copy(update={"prefill_time_scale": XP})
    kv = float(kv_bytes_per_request(inst.model, 2200.0))
    np.testing.assert_array_equal(decode_step(inst.model, sl, only_p, s, kv).step_ms, decode_step(inst.model, sl, base, s, kv).step_ms)


def test_verify_step_and_the_simulators_kernel_scale_with_decode(case):
    inst, sl, base, scaled = case
    b = np.array([4.0, 32.0])
    kv = float(kv_bytes_per_request(inst.model, 2200.0))
    v0 = verify_step(inst.model, sl, base, b, kv, 4, 0.5, draft_step_ms=0.7)
    v1 = verify_step(inst.model, sl, scaled, b, kv, 4, 0.5, draft_step_ms=0.7)
    np.testing.assert_allclose(v1.step_ms, XD * v0.step_ms, rtol=1e-13)
    ker0 = StepKernel.of(inst.model, sl, base, 64, 4, 0.7)
    ker1 = StepKernel.of(inst.model, sl, scaled, 64, 4, 0.7)
    for res, spec in ((4, 2), (32, 16), (32, 0)):
        t0, t1 = ker0.step_ms(res, spec, kv * res), ker1.step_ms(res, spec, kv * res)
        assert t1 == pytest.approx(XD * t0, rel=1e-13)
        want = verify_step(inst.model, sl, scaled, res, kv, 4, spec / res, 0.7).step_ms if spec else \
            decode_step(inst.model, sl, scaled, res, kv).step_ms
        assert t1 == pytest.approx(float(want), rel=1e-12)


def test_mixed_step_takes_the_token_weighted_scale(case):
    inst, sl, base, scaled = case
    kv = float(kv_bytes_per_request(inst.model, 2200.0))
    for B, C, c0 in ((0, 512, 0.0), (48, 0, 0.0), (48, 464, 1024.0), (3, 1, 7.0)):
        m0 = mixed_step(inst.model, sl, base, B, kv, C, c0).step_ms
        m1 = mixed_step(inst.model, sl, scaled, B, kv, C, c0).step_ms
        x = (B * XD + C * XP) / (B + C)
        assert float(m1) == pytest.approx(x * float(m0), rel=1e-13), (B, C)
        ker = MixedKernel.of(inst.model, sl, scaled, 1024)
        assert ker.step_ms(B, kv * B, C, c0) == pytest.approx(float(m1), rel=1e-12), (B, C)
    # C = 0 is a decode step at x_d; B = 0 a prefill chunk at x_p
    assert float(mixed_step(inst.model, sl, scaled, 48, kv, 0, 0.0).step_ms) == pytest.approx(
        float(decode_step(inst.model, sl, scaled, 48, kv).step_ms), rel=1e-13)
    assert MixedKernel.of(inst.model, sl, scaled, 8).prefill_overhead_ms == pytest.approx(XP * base.prefill_overhead_ms)


@pytest.mark.parametrize("kind", [PREFILL_FIRST, CHUNKED])
def test_replica_service_grid_scales_each_phase(case, kind):
    """The colocated service sums (closed form) against the chunk-by-chunk sums, and their
    parts against the unscaled ones: prefill-first S = x_p S_1, the decode step x_d d_1;
    chunked: each chunk's step at its own token-weighted scale, the prefill overhead at x_p."""
    inst, sl, base, scaled = case
    tm = tier_mixes(inst)[0]
    prompts = prompt_types(tm, [PrefillSource(1.0, 0.0)])
    kv = float(kv_bytes_per_request(inst.model, 2200.0))
    sched = Schedule(kind, 512 if kind == CHUNKED else None)
    k0, k1 = ServiceKernel(inst.model, sl, base, sched, prompts, kv), ServiceKernel(inst.model, sl, scaled, sched, prompts, kv)
    B = np.array([0.0, 8.0, 40.0])
    S0, n0, _, d0 = k0.grid(B)
    S1, n1, D1, d1 = k1.grid(B)
    np.testing.assert_allclose(d1, XD * d0, rtol=1e-13)
    np.testing.assert_array_equal(n1, n0)
    if kind == PREFILL_FIRST:
        np.testing.assert_allclose(S1, XP * S0, rtol=1e-13)
        return
    Sp, _, _, _ = k1.grid(B, padded_sums=True)
    np.testing.assert_allclose(S1, Sp, rtol=1e-12)
    cs = k1.chunk_steps(B)
    for g, b in enumerate(B):
        for i in range(len(prompts.prompt_tokens)):
            lo = cs.starts[g * len(prompts.prompt_tokens) + i]
            k = int(cs.counts[g, i])
            steps = [float(mixed_step(inst.model, sl, scaled, b, kv, cs.tokens[j], 0.0 if j == lo else
                                      prompts.cached_tokens[i] + cs.tokens[lo:j].sum()).step_ms) for j in range(lo, lo + k)]
            assert S1[g, i] == pytest.approx(sum(steps) + XP * base.prefill_overhead_ms, rel=1e-12)
    np.testing.assert_allclose(D1, S1 - n1 * d1[:, None], rtol=1e-13)


def test_the_simulators_chunks_of_a_disaggregated_prefill_add_up(case):
    """sim/run.py's chunks of a prompt that fits one chunk are prefill_time_ms, overhead
    included, at the scale (the overhead taken off and put back at x_p)."""
    from fleetplan.sim.run import _chunks

    inst, sl, _, scaled = case
    si = inst.model_copy(update={"priors": scaled})
    t = _chunks(si, sl, 2000.0, 0.0)
    assert t.size == 1 and float(t[0]) == pytest.approx(float(prefill_time_ms(si.model, sl, scaled, 2000.0, 0.0)), rel=1e-13)
    long = _chunks(si, sl, 20000.0, 0.0)
    long0 = _chunks(inst, sl, 20000.0, 0.0)
    np.testing.assert_allclose(long, XP * long0, rtol=1e-12)
