"""Property tests of the perf functions (hypothesis): the physics' monotonicities."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetplan.instance.io import parse_instance
from fleetplan.perf.queueing import wait_percentile_ms
from fleetplan.perf.roofline import SliceSpec, decode_step, prefill_time_ms
from tests.conftest import tiny_data

models = st.fixed_dictionaries({
    "total": st.floats(1, 1000),
    "active_frac": st.floats(0.05, 1.0),
    "layers": st.integers(1, 128),
    "d_model": st.sampled_from([1024, 4096, 8192, 16384]),
    "experts": st.sampled_from([0, 8, 64, 256]),
    "k": st.integers(1, 8),
})
chips = st.fixed_dictionaries({
    "hbm_tbps": st.floats(0.5, 10), "peak_tflops": st.floats(100, 5000), "chips": st.integers(1, 64),
    "bw": st.floats(0.2, 1.0), "mfu": st.floats(0.05, 1.0),
})


def _inst(m, c):
    moe = None
    total = m["total"]
    active = total
    if m["experts"]:
        k = min(m["k"], m["experts"])
        active = max(total * m["active_frac"], total * k / m["experts"])
        moe = {"experts": m["experts"], "experts_per_token": k}
    data = tiny_data(
        model={"total_params_b": total, "active_params_b": active, "layers": m["layers"], "d_model": m["d_model"], "moe": moe},
        chips={"acc": {"hbm_gb": 1e5, "hbm_tbps": c["hbm_tbps"], "peak_tflops": c["peak_tflops"], "slice_shapes": [1]}},
        priors={"hbm_bw_fraction": c["bw"], "decode_mfu": c["mfu"], "prefill_mfu": c["mfu"]},
    )
    inst = parse_instance(data, "prop")
    return inst, SliceSpec.of("acc", inst.chips["acc"], c["chips"])


@settings(max_examples=200, deadline=None)
@given(models, chips, st.floats(0, 5e9))
def test_step_time_grows_with_batch(m, c, kv):
    inst, sl = _inst(m, c)
    b = np.arange(1, 1025)
    d = decode_step(inst.model, sl, inst.priors, b, kv)
    assert np.all(np.diff(d.step_ms) >= -1e-12)


@settings(max_examples=200, deadline=None)
@given(models, chips, st.floats(0, 5e9))
def test_tokens_per_s_grows_until_compute_bound(m, c, kv):
    inst, sl = _inst(m, c)
    b = np.arange(1, 2049)
    d = decode_step(inst.model, sl, inst.priors, b, kv)
    tps = d.tokens_per_s
    mem_bound = d.memory_bound
    # while memory-bound, adding a request never lowers throughput (weights amortise)
    both = mem_bound[1:] & mem_bound[:-1]
    assert np.all(np.diff(tps)[both] >= -1e-9 * tps[1:][both])
    # throughput never passes the GEMMs' compute ceiling F / 2A (a step is at least its GEMM FLOPs;
    # attention, collectives and overheads only add)
    flat = sl.peak_tflops * 1e12 * inst.priors.decode_mfu / (2 * inst.model.active_params_b * 1e9)
    assert np.all(tps <= flat * (1 + 1e-9))


@settings(max_examples=200, deadline=None)
@given(models, chips, st.floats(0, 0.95))
def test_prefill_time_grows_with_prompt(m, c, hit):
    inst, sl = _inst(m, c)
    s = np.linspace(1, 300_000, 500)
    t = prefill_time_ms(inst.model, sl, inst.priors, s, hit * s)
    assert np.all(np.diff(t) > 0)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5000), st.floats(0.01, 0.999), st.floats(1, 5000), st.floats(50, 99.99), st.floats(0, 10))
def test_more_servers_never_raise_the_wait_percentile(c, rho, es, p, cs2):
    lam = rho * c * 1e3 / es
    w = wait_percentile_ms(np.arange(c, c + 50), lam, es, p, cs2)
    assert np.all(np.diff(w) <= 1e-9 * np.maximum(w[:-1], 1.0))


def test_remembered_prefill_times_are_the_computed_ones(gemini):
    """prefill_profile looks each (slice, prompt lengths, cached tokens) set's prefill
    times up after the first computation: the profile is the same, bit for bit, whether
    the set was seen before or not, and the remembered array cannot be changed."""
    from fleetplan.perf import pools
    from fleetplan.perf.pools import PrefillSource, prefill_profile, slice_specs, tier_mixes
    from fleetplan.perf.roofline import prefill_time_ms

    tm, sl = tier_mixes(gemini)[0], slice_specs(gemini)[0]
    src = [PrefillSource(0.7, 0.25), PrefillSource(0.3, 0.0)]
    pools._PREFILL_TIMES.clear()
    first = prefill_profile(gemini, tm, sl, src, [50.0, 99.0])
    assert pools._PREFILL_TIMES  # remembered
    again = prefill_profile(gemini, tm, sl, [PrefillSource(0.2, 0.25), PrefillSource(0.8, 0.0)], [50.0, 99.0])
    pools._PREFILL_TIMES.clear()
    fresh = prefill_profile(gemini, tm, sl, [PrefillSource(0.2, 0.25), PrefillSource(0.8, 0.0)], [50.0, 99.0])
    assert again == fresh and first != fresh
    s = np.array([float(x) for x in tm.tokens])
    t = pools._prefill_times(gemini.model, sl, gemini.priors, s, 0.25 * s)
    assert t.tobytes() == np.atleast_1d(prefill_time_ms(gemini.model, sl, gemini.priors, s, 0.25 * s)).tobytes()
    with pytest.raises(ValueError):
        t[0] = 0.0


def test_bisection_by_levels_is_the_plain_bisection():
    """decode_at_load's bisection asks for six steps' mids at once (pools._bisect_up): the
    same result as one mid at a time, bit for bit, for crossings anywhere in the bracket
    and for functions that are not monotone."""
    from fleetplan.perf.pools import _bisect_up

    def plain(f, lo, hi, n):
        for _ in range(n):
            mid = 0.5 * (lo + hi)
            if f(np.array([mid]))[0] > 0:
                lo = mid
            else:
                hi = mid
        return hi

    rng = np.random.default_rng(3)
    fs = [lambda x, r=r: r - x for r in rng.uniform(0, 512, 20)] + [lambda x: np.sin(x) - 0.1, lambda x: -x, lambda x: 1.0 + 0 * x]
    for f in fs:
        for n in (60, 7, 1):
            assert _bisect_up(f, 0.0, 512.0, n) == plain(f, 0.0, 512.0, n)
