"""The simulator's engine against answers known exactly: Erlang C for FCFS with
exponential service, a lone request priced by hand with the perf primitives, the
speculative acceptance distribution, the step kernel against the roofline, and the
token log rebuilt token by token."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetplan.perf.metrics import request_metrics, weighted_percentile
from fleetplan.perf.pools import slice_specs
from fleetplan.perf.queueing import erlang_c, wait_mean_ms
from fleetplan.perf.roofline import decode_step, kv_bytes_per_request, kv_bytes_per_token, slice_memory_map
from fleetplan.perf.speculation import (
    StepKernel,
    acceptance_rate_from_token_probability,
    accepted_drafts_pmf,
    token_probability_from_acceptance_rate,
    verify_step,
)
from fleetplan.sim.engine import DecodeSlice, accepted_drafts, decode_des, log_acceptance, prefill_pass, uniform_hash


def _batch_means(x: np.ndarray, batches: int = 20) -> tuple[float, float]:
    """Mean and its standard error by batch means (consecutive batches)."""
    parts = np.array_split(x, batches)
    m = np.array([p.mean() for p in parts])
    return float(x.mean()), float(m.std(ddof=1) / math.sqrt(batches))


@pytest.mark.parametrize("c,rho", [(1, 0.7), (8, 0.8), (32, 0.9)])
def test_fcfs_with_exponential_service_matches_erlang_c(c, rho):
    """M/M/c is the case where queueing theory is exact: the simulated mean wait and the
    share of arrivals that wait match Erlang C within sampling error (3 standard errors
    by batch means; the first 5% of arrivals dropped as warm-up)."""
    rng = np.random.default_rng(11 + c)
    es = 10.0  # ms
    lam = rho * c / es  # per ms
    n = 300_000
    arrivals = np.cumsum(rng.exponential(1.0 / lam, n))
    service = rng.exponential(es, n)
    pp = prefill_pass(arrivals, service, c)
    wait = (pp.start_ms - arrivals)[n // 20:]
    mean, se = _batch_means(wait)
    theory = float(wait_mean_ms(c, lam * 1e3, es))
    assert abs(mean - theory) < 3 * se, (mean, theory, se)
    waited, se_w = _batch_means((wait > 0).astype(float))
    assert abs(waited - float(erlang_c(c, rho * c))) < 3 * se_w + 1e-3
    assert np.all(pp.admitted) and np.allclose(pp.end_ms - pp.start_ms, service)


def test_fcfs_is_first_come_first_served_and_work_conserving():
    """No request starts before an earlier one; no slice idles while a request waits."""
    rng = np.random.default_rng(3)
    t = np.cumsum(rng.exponential(1.0, 5000))
    s = rng.exponential(3.5, 5000)
    pp = prefill_pass(t, s, 4)
    assert np.all(np.diff(pp.start_ms) >= -1e-12)
    busy_until = np.zeros(4)
    for i in range(t.size):
        j = pp.server[i]
        assert pp.start_ms[i] == pytest.approx(max(t[i], busy_until[j]))
        # the slice it took was the first to free up
        assert busy_until[j] == pytest.approx(busy_until.min()) or t[i] >= busy_until[j]
        busy_until[j] = pp.end_ms[i]


def test_admission_rejects_exactly_those_over_the_budget():
    """A request whose queue wait plus the rest of its TTFT estimate exceeds its limit is
    turned away and takes no slot; nan limits are never rejected."""
    t = np.array([0.0, 0.0, 0.0, 1.0])
    s = np.array([100.0, 100.0, 100.0, 1.0])
    lim = np.array([150.0, 150.0, np.nan, 150.0])
    pp = prefill_pass(t, s, 1, limit_ms=lim, est_extra_ms=s.copy())
    # request 1 would wait 100 ms + 100 ms of its own > 150: rejected; request 2 has no limit
    assert pp.admitted.tolist() == [True, False, True, False]
    assert pp.start_ms[2] == 100.0 and math.isnan(pp.start_ms[1])


def test_kv_link_hides_overlap_and_queues_transfers():
    """The transfer may start overlap x T before the compute ends, never before it starts,
    and one slice's transfers queue on its link."""
    t = np.array([0.0, 0.0])
    s = np.array([10.0, 1.0])
    x = np.array([8.0, 8.0])
    pp = prefill_pass(t, s, 1, xfer_ici_ms=x, overlap=0.75)
    # first: compute 0-10, transfer 4-12 (6 ms hidden); second: compute 10-11, hides at most 1 ms but
    # the link is busy until 12: transfer 12-20
    assert pp.kv_done_ms.tolist() == [12.0, 20.0]


def test_step_kernel_is_the_roofline(gemini):
    """The simulator's per-step kernel is decode_step / verify_step, exactly."""
    rng = np.random.default_rng(0)
    for sl in slice_specs(gemini):
        ker = StepKernel.of(gemini.model, sl, gemini.priors, 512, 4, 0.5)
        ker0 = StepKernel.of(gemini.model, sl, gemini.priors, 512, 0)
        for _ in range(20):
            b = int(rng.integers(1, 513))
            ns = int(rng.integers(0, b + 1))
            kv = float(rng.uniform(0.1, 20.0)) * 1e9 * b
            plain = float(decode_step(gemini.model, sl, gemini.priors, b, kv / b).step_ms)
            assert ker0.step_ms(b, 0, kv) == pytest.approx(plain, rel=1e-12)
            assert ker.step_ms(b, 0, kv) == pytest.approx(plain, rel=1e-12)
            if ns:
                ref = float(verify_step(gemini.model, sl, gemini.priors, b, kv / b, 4, ns / b, 0.5).step_ms)
                assert ker.step_ms(b, ns, kv) == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("alpha,k", [(0.3, 2), (0.5, 4), (0.6, 4), (0.9, 3), (1.0, 4), (0.0, 4)])
def test_acceptance_inverse_and_hashed_draws(alpha, k):
    """p solves the acceptance rate; drafts drawn through the hash follow
    P(A = a) = p^a (1 - p), P(A = k) = p^k, mean alpha k."""
    p = token_probability_from_acceptance_rate(alpha, k)
    assert float(acceptance_rate_from_token_probability(p, k)) == pytest.approx(alpha, abs=1e-9)
    pmf = accepted_drafts_pmf(p, k)
    assert pmf.sum() == pytest.approx(1.0) and float(np.dot(pmf, np.arange(k + 1))) == pytest.approx(alpha * k, abs=1e-9)
    n = 200_000
    u = uniform_hash(7, np.arange(n), np.zeros(n, dtype=np.int64))
    a = accepted_drafts(u, np.full(n, float(log_acceptance(p))), k)
    freq = np.bincount(a, minlength=k + 1) / n
    assert np.all(np.abs(freq - pmf) < 5 * np.sqrt(pmf * (1 - pmf) / n) + 1e-9)


def test_uniform_hash_is_a_pure_function():
    ids, m = np.arange(1000), np.arange(1000) % 7
    a = uniform_hash(5, ids, m)
    assert np.array_equal(a, uniform_hash(5, ids, m)) and not np.array_equal(a, uniform_hash(6, ids, m))
    assert np.all((a > 0) & (a < 1)) and abs(a.mean() - 0.5) < 0.03


def test_weighted_percentile_is_the_expanded_one():
    rng = np.random.default_rng(1)
    v = rng.exponential(5.0, 300)
    w = rng.integers(0, 6, 300)
    full = np.repeat(v, w)
    for p in (0, 1, 50, 95, 99, 99.9, 100):
        assert weighted_percentile(v, w, p) == pytest.approx(float(np.percentile(full, p, method="inverted_cdf")))


def _one_slice(inst, k=0, cap=64):
    sl = next(s for s in slice_specs(inst) if s.chips == 1)
    mm = slice_memory_map(inst.model, sl, inst.priors)
    return sl, DecodeSlice(StepKernel.of(inst.model, sl, inst.priors, cap, k, inst.speculation.draft_step_ms), cap, mm.kv_pool_gb * 1e9, k, None, 0)


def test_lone_request_decodes_at_the_roofline_step(tiny_instance):
    """One request alone on a slice: each of its steps takes decode_step(1, its KV), its
    tokens arrive one per step and its last at the sum of those steps."""
    inst = tiny_instance()
    sl, ds = _one_slice(inst)
    prompt, out = 2000.0, 40
    log = decode_des(np.array([5.0]), np.array([prompt]), np.array([out]), np.array([False]), {0: np.zeros(1)}, [ds],
                     lambda c: kv_bytes_per_request(inst.model, c), kv_bytes_per_token(inst.model), 1)
    steps = [float(decode_step(inst.model, sl, inst.priors, 1, kv_bytes_per_request(inst.model, prompt + g)).step_ms) for g in range(1, out)]
    assert log.done_ms[0] == pytest.approx(5.0 + sum(steps), rel=1e-12)
    assert log.ends_ms[0].size == out - 1 and np.allclose(np.diff(log.ends_ms[0], prepend=5.0), steps)
    tt = log.token_times_ms(0, 5.0, out, False, 0.0)
    assert tt.size == out and tt[-1] == log.done_ms[0]


def test_token_log_rebuilds_every_token(tiny_instance):
    """With speculation, the step log and the acceptance hash rebuild each request's
    tokens: exactly out_tokens of them, the last at its done time, and the perf metrics
    of the rebuilt tokens agree with the compact per-request figures."""
    inst = tiny_instance(speculation={"enabled": True, "draft_tokens": [3], "draft_step_ms": 0.2})
    sl, ds = _one_slice(inst, k=3)
    rng = np.random.default_rng(2)
    n = 400
    ready = np.sort(rng.uniform(0, 4000.0, n))
    prompt = np.full(n, 1500.0)
    out = rng.integers(2, 120, n)
    spec = rng.random(n) < 0.7
    lp = float(log_acceptance(token_probability_from_acceptance_rate(0.6, 3)))
    log = decode_des(ready, prompt, out, spec, {3: np.full(n, lp)}, [ds], lambda c: kv_bytes_per_request(inst.model, c),
                     kv_bytes_per_token(inst.model), 99)
    toks = [log.token_times_ms(i, ready[i], int(out[i]), bool(spec[i]), lp) for i in range(n)]
    assert all(t.size == o for t, o in zip(toks, out))
    assert all(t[-1] == d for t, d in zip(toks, log.done_ms))
    m = request_metrics(ready / 1e3, [t / 1e3 for t in toks])
    tpot = (log.done_ms - ready) / (out - 1)
    assert np.allclose(m.tpot_ms, tpot)
    # residents never exceed the cap, and every step's residents are counted
    assert max(s.max() for s in log.sizes) <= ds.batch_cap
    total_steps = sum(int(log.j1[i] - log.j0[i] + 1) for i in range(n))
    assert total_steps == int(log.sizes[0].sum())


def test_least_work_router_counts_a_chunk_in_progress_once(tiny_instance):
    """Regression (issue 17): under a chunked schedule the router counted the chunk in
    progress twice (in the replica's queued work until the chunk ended, and as what is left
    of its step), so it sent prompts behind another replica's queue while a replica with
    less work left was running a long chunk; the simulator's FP8 chunked-2048 TTFT p99 was
    1.37 x the model's. Here replica 0 runs a 1,000 ms prompt from t = 0 and 100 ms prompts
    arrive every 1 ms from t = 1: replica 1 takes them until its queue holds more work than
    what is left of replica 0's chunk, then they alternate -- no prompt waits much longer
    than replica 0's chunk."""
    from types import SimpleNamespace

    from fleetplan.sim.engine import Replica, replica_des

    inst = tiny_instance()
    sl, ds = _one_slice(inst)
    n = 16
    tokens = np.array([1000.0] + [100.0] * (n - 1))
    types = np.array([0] + [1] * (n - 1))
    # one solo chunk per prompt at 1 ms per token: the chunk's time is its token count
    mixed = SimpleNamespace(step_ms=lambda res, kv, ch, ctx: float(ch), prefill_overhead_ms=0.0)
    reps = [Replica(ds.kernel, 1e15, 64) for _ in range(2)]
    log = replica_des(np.arange(n, dtype=float), [np.array([1000.0]), np.array([100.0])], types, tokens, np.ones(n, dtype=np.int64),
                      np.zeros(n, dtype=bool), {0: np.zeros(n)}, reps, lambda c: kv_bytes_per_request(inst.model, c),
                      kv_bytes_per_token(inst.model), 1, chunk_budget=100_000, mixed=mixed, cached_tokens=np.zeros(n))
    # the reference: each prompt to the replica with the least work left (list scheduling)
    free, want_r, want_w = [0.0, 0.0], [], []
    for t, s in zip(np.arange(n, dtype=float), tokens):
        r = min((0, 1), key=lambda x: max(free[x] - t, 0.0))
        w = max(free[r] - t, 0.0)
        free[r] = t + w + s
        want_r.append(r)
        want_w.append(w)
    assert 0 < want_r.count(0) - 1 < n - 1  # the premise: replica 0 takes some once it has less left
    assert log.replica.tolist() == want_r
    assert np.allclose(log.prefill_start_ms - np.arange(n), want_w)
