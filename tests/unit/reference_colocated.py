"""The scalar colocated-replica physics as it was before the candidate tables became array
programs (issue 41): ``fleetplan/perf/colocated.py`` at main 35eeb42, its functions
verbatim (mixed_step, prompt_service_grid, colocated_state, tpot_percentile_ms,
_own_compute, colocated_latency, ReplicaRates), the data types imported from fleetplan.

A reference for tests only (tests/unit/test_replica_tables.py): the array programs must
give the same tables within 1e-9 relative. Not imported by fleetplan.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fleetplan.instance.schema import ModelSpec, Priors
from fleetplan.perf.colocated import (
    CHUNKED,
    PREFILL_FIRST,
    ColocatedLatency,
    ColocatedState,
    MixedStep,
    PromptTypes,
    Schedule,
    _geometric_gaps,
    chunk_plan,
    prompt_types,
    queued_behind_prefill,
)
from fleetplan.perf.queueing import path_sum_distribution, ttft_percentile_of_sum_ms, wait_percentile_ms
from fleetplan.perf.roofline import (
    SliceSpec,
    attention_bandwidth,
    attention_mfu,
    decode_attention_flops,
    decode_step,
    kv_bytes_per_token,
    layer_overhead_ms,
    prefill_flops,
    prefill_time_ms,
    step_comm_ms,
    weight_bytes_streamed,
)

TB = 1e12


def mixed_step(
    model: ModelSpec,
    sl: SliceSpec,
    priors: Priors,
    batch: ArrayLike,
    kv_bytes_per_request: ArrayLike,
    chunk_tokens: ArrayLike,
    chunk_context_tokens: ArrayLike,
) -> MixedStep:
    """A Sarathi-Serve mixed step: B residents' decode tokens plus a chunk of C prompt
    tokens that attends over the ``chunk_context_tokens`` c0 of its prompt already in KV.

      gemm       = max(W(B + C) / (hbm_tbps x hbm_bw_fraction),
                       2 A B / (peak x decode_mfu) + 2 A C / (peak x prefill_mfu))
      decode att = max(B x KV / (hbm_tbps x attention_bw_fraction),
                       decode attention FLOPs / (peak x attention_mfu))       [as decode_step]
      chunk att  = max(c0 x KV bytes per token / (hbm_tbps x attention_bw_fraction),
                       2 L d ((c0 + C)^2 - c0^2) / (peak x attention_mfu))   [prefill_flops(c0 + C, c0)]
      comm       = :func:`roofline.step_comm_ms` over B + C tokens
      overhead   = decode_step_overhead_ms + layers x layer_overhead_us       (once per step)
    One pass reads the weights once for all B + C tokens (the saving Sarathi-Serve's
    piggybacking is after); each token's GEMM FLOPs run at its phase's fitted MFU, so C = 0
    is exactly :func:`roofline.decode_step` and B = 0 a prefill chunk. The per-request
    ``prefill_overhead_ms`` is not in a step: the caller adds it once per prompt
    (:func:`prompt_service`). Context parallelism is not used inside a mixed step.
    Source: Agrawal et al., "Taming Throughput-Latency Tradeoff in LLM Inference with
    Sarathi-Serve", OSDI 2024 (section 4); the operator sum of :mod:`fleetplan.perf.roofline`.

    Args: batch B (residents, >= 0), kv_bytes_per_request (bytes a resident streams),
    chunk_tokens C (>= 0), chunk_context_tokens c0 (>= 0): broadcastable arrays.
    Returns: :class:`MixedStep` (ms). Raises ValueError on negative tokens.
    """
    b = np.asarray(batch, dtype=float)
    kv = np.asarray(kv_bytes_per_request, dtype=float)
    ch = np.asarray(chunk_tokens, dtype=float)
    c0 = np.asarray(chunk_context_tokens, dtype=float)
    if np.any(b < 0) or np.any(ch < 0) or np.any(c0 < 0):
        raise ValueError("need batch, chunk_tokens and chunk_context_tokens >= 0 (requests, tokens)")
    peak = sl.peak_tflops * 1e12
    bw = sl.hbm_tbps * TB * priors.hbm_bw_fraction
    att_bw = attention_bandwidth(sl, priors)
    a2 = 2.0 * model.active_params_b * 1e9
    w_ms = weight_bytes_streamed(model, b + ch) / bw * 1e3
    g_comp = (a2 * b / (peak * priors.decode_mfu) + a2 * ch / (peak * priors.prefill_mfu)) * 1e3
    gemm = np.maximum(w_ms, g_comp)
    d_att = np.maximum(b * kv / att_bw * 1e3, decode_attention_flops(model, b, kv) / (peak * attention_mfu(priors, "decode")) * 1e3)
    _, attn_flops = prefill_flops(model, c0 + ch, c0)
    c_att = np.maximum(c0 * kv_bytes_per_token(model) * (ch > 0) / att_bw * 1e3, attn_flops / (peak * attention_mfu(priors, "prefill")) * 1e3)
    ar, a2a = step_comm_ms(model, sl, priors, b + ch)
    over = priors.decode_step_overhead_ms + layer_overhead_ms(model, priors)
    gemm, d_att, c_att, comm = np.broadcast_arrays(gemm, d_att, c_att, ar + a2a)
    step = gemm + d_att + c_att + comm + over
    return MixedStep(gemm.astype(float), d_att.astype(float), c_att.astype(float), comm.astype(float), over, step)


def prompt_service_grid(model: ModelSpec, sl: SliceSpec, priors: Priors, schedule: Schedule, prompts: PromptTypes,
                        batch: ArrayLike, kv_bytes_per_request: float) -> tuple[NDArray[np.float64], ...]:
    """(S, n, Delta, d) at every batch of ``batch`` (residents, array (G,)): S, n, Delta arrays
    (G, types) as :func:`prompt_service`, d the decode step (G,) (ms)."""
    B = np.atleast_1d(np.asarray(batch, dtype=float))
    s, c = prompts.prompt_tokens, prompts.cached_tokens
    d = np.asarray(decode_step(model, sl, priors, B, kv_bytes_per_request).step_ms, dtype=float)
    if schedule.kind == PREFILL_FIRST:
        S = np.broadcast_to(np.asarray(prefill_time_ms(model, sl, priors, s, c), dtype=float), (B.size, s.size)).copy()
        return S, np.zeros_like(S), S.copy(), d
    q = np.maximum(float(schedule.chunk_tokens) - B, 1.0)  # (G,) prefill tokens per mixed step
    S = np.zeros((B.size, s.size))
    n = np.zeros((B.size, s.size))
    for i in range(s.size):
        new = s[i] - c[i]
        k = np.maximum(np.ceil(new / q - 1e-9), 1.0)  # (G,) chunks
        j = np.arange(int(k.max()), dtype=float)[None, :]
        sizes = np.where(j < k[:, None] - 1, q[:, None], np.where(j == k[:, None] - 1, new - q[:, None] * (k[:, None] - 1), 0.0))
        ctx = c[i] + j * q[:, None]
        st = mixed_step(model, sl, priors, B[:, None], kv_bytes_per_request, sizes, np.where(sizes > 0, ctx, 0.0)).step_ms
        S[:, i] = np.sum(np.where(sizes > 0, st, 0.0), axis=1) + priors.prefill_overhead_ms
        n[:, i] = k
    return S, n, S - n * d[:, None], d


def prompt_service(model: ModelSpec, sl: SliceSpec, priors: Priors, schedule: Schedule, prompts: PromptTypes,
                   batch: float, kv_bytes_per_request: float) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """(S, n, Delta) per prompt type at ``batch`` residents (arrays (types,)): S the ms of
    steps that carry the prompt, n how many of them are also decode steps, Delta = S - n
    d(batch) the ms they add over plain decode steps.

    Prefill-first: S = :func:`roofline.prefill_time_ms` (one pass, decode stalled), n = 0.
    Chunked with budget C: chunks of C - B tokens (at least 1), each a :func:`mixed_step`
    at B = ``batch``, plus prefill_overhead_ms once; n = the chunk count.
    """
    S, n, D, _ = prompt_service_grid(model, sl, priors, schedule, prompts, [batch], kv_bytes_per_request)
    return S[0], n[0], D[0]


def prompts_of(st: ColocatedState, i: int) -> PromptTypes:
    """The state's prompt type ``i`` alone."""
    p = st.prompts
    return PromptTypes(p.prompt_tokens[i:i + 1], p.cached_tokens[i:i + 1], np.ones(1))


def _chunk_steps(model, sl, priors, schedule, one: PromptTypes, batch: float, kv: float) -> NDArray[np.float64]:
    """Every mixed step of the one prompt in ``one`` at ``batch`` residents (ms), the first
    with prefill_overhead_ms."""
    q = max(float(schedule.chunk_tokens) - batch, 1.0)
    sizes, ctx = chunk_plan(float(one.prompt_tokens[0] - one.cached_tokens[0]), float(one.cached_tokens[0]), q)
    m = np.array(mixed_step(model, sl, priors, batch, kv, sizes, ctx).step_ms, dtype=float)
    m[0] += priors.prefill_overhead_ms
    return m


def _unstable(rps, schedule, u, reason, S, n, D, w) -> ColocatedState:
    return ColocatedState(rps, schedule, u, math.inf, math.inf, math.inf, S, D, n, w, False, reason)


#: A chunked replica is taken as unstable once its decode tokens fill more than this share of
#: the token budget (chunks of under 1/8 of it: the prompt would crawl).
CHUNK_BUDGET_DECODE_SHARE = 0.875


def colocated_state(model: ModelSpec, sl: SliceSpec, priors: Priors, schedule: Schedule, prompts: PromptTypes, rps: float,
                    output_tokens: float, kv_bytes_per_request: float, kv_capacity_requests: int, grid_points: int = 129,
                    grid_memo: dict | None = None) -> ColocatedState:
    """Solve one replica at ``rps`` (requests/s) under ``schedule`` (module docstring):
    the smallest b >= 0 with b = rps x output_tokens x d(b) / (1 - rps E[Delta(b)]),
    searched on a grid of ``grid_points`` over [0, cap], refined on 33 points inside the
    first bracket and interpolated linearly (to ~1e-3 of a resident), where cap is the
    KV capacity (requests), and for a chunked schedule :data:`CHUNK_BUDGET_DECODE_SHARE`
    of its token budget.

    ``grid_memo``: a dict kept by the caller across calls with the same replica (every
    argument but ``rps`` the same, as :class:`ReplicaRates` calls it): the step times at
    b = 0, on the search grid and on each refinement bracket do not depend on ``rps``, so
    they are computed once and looked up after (the same arrays, bit for bit).

    Returns :class:`ColocatedState`; ``stable`` False with a reason when it diverges.
    Raises ValueError for rps < 0 or output_tokens <= 0.
    """
    if rps < 0 or output_tokens <= 0:
        raise ValueError("need rps >= 0 (requests/s) and output_tokens > 0 (tokens)")
    w = prompts.weight / prompts.weight.sum()
    cap = float(max(kv_capacity_requests, 0))
    if schedule.kind == CHUNKED:
        cap = min(cap, math.floor(CHUNK_BUDGET_DECODE_SHARE * schedule.chunk_tokens))

    def service(B, memo: bool = False):
        """prompt_service_grid at the batches ``B`` (a float array), from ``grid_memo`` when
        ``memo`` (the batches that do not depend on rps)."""
        if not memo or grid_memo is None:
            return prompt_service_grid(model, sl, priors, schedule, prompts, B, kv_bytes_per_request)
        key = B.tobytes()
        hit = grid_memo.get(key)
        if hit is None:
            hit = grid_memo[key] = prompt_service_grid(model, sl, priors, schedule, prompts, B, kv_bytes_per_request)
            for x in hit:
                x.flags.writeable = False  # shared by the states built from it
        return hit

    def g(B, memo: bool = False):
        S, n, D, d = service(B, memo)
        frac = rps * (D @ w) / 1e3
        u = rps * (S @ w) / 1e3
        with np.errstate(divide="ignore"):
            val = rps * output_tokens * d / 1e3 / (1.0 - frac) - B
        return np.where((frac >= 1.0) | (u >= 1.0), np.inf, val), S, n, D, d

    if rps == 0:
        _, S, n, D, d = g(np.zeros(1))
        return ColocatedState(0.0, schedule, 0.0, 0.0, float(d[0]), float(d[0]), S[0], D[0], n[0], w, True, "")
    S0, n0, D0, _ = service(np.zeros(1), memo=True)
    u0 = rps * float(S0[0] @ w) / 1e3
    if u0 >= 1.0:
        return _unstable(rps, schedule, u0, f"prefill alone needs {u0:.2f} of the replica's time", S0[0], n0[0], D0[0], w)
    if cap < 1.0:
        return _unstable(rps, schedule, u0, "the replica holds no resident request (KV capacity or token budget)", S0[0], n0[0], D0[0], w)
    grid = np.linspace(0.0, cap, grid_points)
    vals = g(grid, memo=True)[0]
    neg = np.nonzero(vals <= 0)[0]
    if neg.size == 0:
        return _unstable(rps, schedule, u0, f"sequences decoding would exceed the replica's capacity of {cap:.0f} requests "
                         + ("(KV pool or token budget)" if schedule.kind == CHUNKED else "(KV pool)"), S0[0], n0[0], D0[0], w)
    i = int(neg[0])
    b = 0.0
    if i > 0:  # refine the bracket on a finer grid, then interpolate g linearly inside it
        fine = np.linspace(float(grid[i - 1]), float(grid[i]), 33)
        fv = g(fine, memo=True)[0]
        j = max(int(np.nonzero(fv <= 0)[0][0]), 1)
        x0, x1, g0, g1 = float(fine[j - 1]), float(fine[j]), float(fv[j - 1]), float(fv[j])
        b = x1 if not np.isfinite(g0 - g1) or g0 == g1 else x0 + (x1 - x0) * g0 / (g0 - g1)
        b = min(max(b, x0), x1)
    _, S, n, D, d = g(np.array([b]))
    S, n, D, d = S[0], n[0], D[0], float(d[0])
    u = rps * float(S @ w) / 1e3
    tpot = d / (1.0 - rps * float(D @ w) / 1e3)
    return ColocatedState(rps, schedule, u, b, d, tpot, S, D, n, w, True, "", prompts)


def tpot_percentile_ms(model: ModelSpec, sl: SliceSpec, priors: Priors, st: ColocatedState, output_tokens: float,
                       kv_bytes_per_request: float, percentile: float, ca2: float = 1.0, router: str = "least-work",
                       output_lengths: str = "fixed") -> float:
    """A request's TPOT at ``percentile`` over the occupancy distribution (module docstring), ms.

    Poisson arrivals (``ca2`` = 1): mean d(b + 1) + b E[Delta]/o, variance
    d'^2 2b/3 + b E[Delta^2]/o^2 + d' E[Delta] b/o. Bursty arrivals with index of dispersion
    of counts I = ``ca2`` (``workload.arrival_scv``; arrivals in clusters of mean size-biased
    size I, i.e. a compound Poisson stream, whose counts over windows longer than a cluster
    have variance I x mean): every count covariance scales by I, so Var(Bbar) = I 2b/3,
    Var(K) = I b and Cov(Bbar, K) = I b/2, and the tagged request's own cluster adds I - 1
    residents (the size-biased cluster less itself) of which half prefill after its first
    token: mean d(b + I) + (b + (I - 1)/2) E[Delta]/o (I >= 1; smooth arrivals see
    b + 1), variance
    I d'^2 2b/3 + b (E[Delta^2] + (I - 1) E[Delta]^2)/o^2 + I d' E[Delta] b/o. I = 1 is the
    Poisson formula exactly; smooth arrivals (I < 1) narrow it. The window that matters is
    the request's lifetime (o x TPOT, seconds), longer than the 1 s at which ``workload fit``
    measures I by default: fit at that timescale (``--scv-timescale``) for bursty traffic.
    Source: the module docstring's derivation; compound-Poisson count variance (Daley &
    Vere-Jones, *An Introduction to the Theory of Point Processes*, 2003, section 6.4).

    ``router`` 'random': the replica's own arrivals are the Poisson split, and a request
    whose lifetime holds more prompts than the mean lives longer, so more prompts arrive
    in it: T = T0 + sum over the arrivals in T of Delta_k, and a fluctuation dX of the work
    at a fixed window becomes dT = dX + u dT, i.e. dX / (1 - u) with u = lambda E[Delta]
    (the share of the replica's time the prompts add). The variance is divided by
    (1 - u)^2. Under 'least-work' a replica that is stalled on prompts is not the one with
    the least work, so the prompts arriving in its stall go to the others and the loop is
    cut: no factor (the simulator agrees within 5% on the GPU scenario, docs/validation.md;
    under random routing without the factor the p99 was 17% optimistic at 38% prefill share).

    ``output_lengths`` 'geometric' (``workload.output_length_distribution``): answers of
    geometric length with mean o, so a request's window is g = n - 1 gaps of its own, not
    o. Per g (x = g / o, the window over the mean residence): the prompts in the window
    are Poisson(lambda g TPOT), so the stall term's variance is lambda TPOT E[Delta^2] / g
    (and the cross term d' E[Delta] lambda TPOT, as before independent of g); the others'
    residences are exponential-like, so their window average has variance
    2b (x - 1 + e^-x) / x^2 (the M/G/infinity autocovariance lambda T e^(-tau/T)); the
    mean is unchanged but the cluster term ((I - 1)/2) E[Delta] / g. The percentile is of
    the mixture over g (48 equal-probability bins of the answers with a TPOT, n >= 2),
    each normal. Short answers carry the tail: on the FP8 scenario with geometric answers
    the fixed-length model was 1.33 x optimistic at p99 (issue-17 trial)."""
    if not st.stable:
        return math.inf
    b = st.sequences_decoding
    if st.rps <= 0:
        return st.step_ms
    i = max(float(ca2), 0.0)
    seen = b + max(i, 1.0)  # the stationary others, the own cluster's, and itself
    d1 = decode_step(model, sl, priors, np.array([seen, seen + 1.0]), kv_bytes_per_request).step_ms
    slope = float(d1[1] - d1[0])
    o = output_tokens
    eD = float(np.dot(st.weight, st.delta_ms))
    eD2 = float(np.dot(st.weight, st.delta_ms**2))
    feedback = 1.0
    if router == "random":
        u = st.rps * eD / 1e3
        if u >= 1.0:
            return math.inf
        feedback = (1.0 - u) ** 2
    z = NormalDist().inv_cdf(percentile / 100.0)
    if output_lengths != "geometric":
        mean = float(d1[0]) + (b + max(i - 1.0, 0.0) / 2.0) * eD / o
        var = i * slope**2 * 2.0 * b / 3.0 + b * (eD2 + (i - 1.0) * eD**2) / o**2 + i * slope * eD * b / o
        return mean + z * math.sqrt(max(var / feedback, 0.0))
    g, w = _geometric_gaps(o)
    lt = b / o  # lambda x TPOT: prompts per token gap (Little: b = lambda o TPOT)
    x = g / o
    occ = 2.0 * b * (x - 1.0 + np.exp(-x)) / x**2
    means = float(d1[0]) + lt * eD + max(i - 1.0, 0.0) / 2.0 * eD / g
    var = (i * slope**2 * occ + lt * (eD2 + (i - 1.0) * eD**2) / g + i * slope * eD * lt) / feedback
    sd = np.sqrt(np.maximum(var, 1e-18))
    tail = 1.0 - percentile / 100.0
    nd = NormalDist()
    sf = lambda t: float(np.dot(w, [1.0 - nd.cdf(v) for v in (t - means) / sd]))  # noqa: E731
    lo, hi = float(means.min()), float((means + 10.0 * sd).max())
    for _ in range(60):  # the mixture's quantile: sf(t) = tail, sf decreasing in t
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if sf(mid) > tail else (lo, mid)
    return 0.5 * (lo + hi)


#: finer in the upper tail, where a p99 TTFT's extra chunk lives; each bin is represented
#: by the quantile at its middle probability and weighs its width
OCCUPANCY_EDGES = (0.0, 0.25, 0.5, 0.75, 0.9, 0.96, 0.985, 0.995, 0.999, 1.0)


def _own_compute(model: ModelSpec, sl: SliceSpec, priors: Priors, st: ColocatedState,
                 kv_bytes_per_request: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(own compute ms, weight) of a prompt over (residents found, prompt type), arrays
    (K, types): the ms of the steps that carry it (:func:`prompt_service_grid`).

    Prefill-first: K = 1 (the pass does not depend on the residents). Chunked with budget
    C: a prompt's chunks are C - B tokens, B the residents decoding when its chunks run, so
    its chunk count (and TTFT) depends on B: a prompt of about C - b new tokens takes one
    step at b residents and two above. B is taken at K = len(:data:`OCCUPANCY_EDGES`) - 1
    quantiles (finer in the upper tail) of the residents an arrival finds, Poisson(b) by PASTA and
    the M/G/infinity occupancy of the module docstring (normal approximation b + z
    sqrt(b), at least 0), each weighing its bin's probability. Without it the GPU scenario's FP8
    chunked-2048 pool (2,000-token prompts, b = 36) was 37% optimistic at p99 TTFT."""
    if st.schedule.kind != CHUNKED or st.sequences_decoding <= 0 or st.prompts is None:
        return st.service_ms[None, :], st.weight[None, :]
    b = st.sequences_decoding
    nd = NormalDist()
    edges = np.asarray(OCCUPANCY_EDGES)
    z = np.array([nd.inv_cdf(0.5 * (lo + hi)) for lo, hi in zip(edges[:-1], edges[1:])])
    B = np.maximum(np.round(b + z * math.sqrt(b)), 0.0)
    S, _, _, _ = prompt_service_grid(model, sl, priors, st.schedule, st.prompts, B, kv_bytes_per_request)
    return S, np.diff(edges)[:, None] * st.weight[None, :]


def colocated_latency(model: ModelSpec, sl: SliceSpec, priors: Priors, st: ColocatedState, replicas: int, router: str,
                      output_tokens: float, kv_bytes_per_request: float, percentiles: list[float],
                      path_components: list[tuple[float, float]], path_pct_ms: dict[float, float],
                      extra_ms: ArrayLike = 0.0, estimate: bool = True, ca2: float = 1.0, output_lengths: str = "fixed") -> ColocatedLatency:
    """TTFT, TPOT and ITL percentiles of ``replicas`` replicas each in state ``st`` (ms).

    ``router`` 'least-work' (M/G/c over the pool's replicas at the pool's arrivals) or
    'random' (M/G/1 per replica); ``path_components`` the fixed path's (p50, p99) pairs and
    ``path_pct_ms`` its percentiles (the sum of the components'); ``extra_ms`` per prompt
    type, ms added to its own TTFT (the exposed KV transfer of prefill-first). The residual
    of the step in progress is bounded by one decode step d(b) in the bound and taken as
    d(b)/2 in the estimate (``estimate`` False: left out, inf).
    """
    if router not in ("least-work", "random"):
        raise ValueError("router must be 'least-work' or 'random'")
    inf = {p: math.inf for p in percentiles}
    if not st.stable:
        return ColocatedLatency(inf, dict(inf), dict(inf), dict(inf), dict(inf), math.inf)
    c, lam = (replicas, st.rps * replicas) if router == "least-work" else (1, st.rps)
    mean, cs2 = st.service_mean_ms, st.service_cs2
    own, own_w = _own_compute(model, sl, priors, st, kv_bytes_per_request)
    own = own + np.broadcast_to(np.asarray(extra_ms, dtype=float), st.weight.shape)[None, :]
    own, own_w = own.ravel(), own_w.ravel()
    order = np.argsort(own, kind="stable")
    cum = np.cumsum(own_w[order])
    path = path_sum_distribution(path_components) if estimate else None
    ttft, est, wait, tpot, itl = {}, {}, {}, {}, {}
    for p in percentiles:
        w = float(wait_percentile_ms(c, lam, mean, p, cs2, ca2)) if lam > 0 else 0.0
        own_p = float(own[order][min(int(np.searchsorted(cum, p / 100.0 - 1e-12)), own.size - 1)])
        wait[p] = w
        ttft[p] = path_pct_ms[p] + w + own_p + st.step_ms
        est[p] = ttft_percentile_of_sum_ms(p, path, c, lam, mean, cs2, own + 0.5 * st.step_ms, own_w, ca2) if estimate else math.inf
        tpot[p] = tpot_percentile_ms(model, sl, priors, st, output_tokens, kv_bytes_per_request, p, ca2, router, output_lengths)
        share = st.chunk_step_share
        if st.schedule.kind == CHUNKED and share > 0:
            # the step-time mixture: decode steps (1 - share) and every chunk's mixed step
            vals, wts = [np.array([st.step_ms])], [np.array([1.0 - share])]
            nbar = float(np.dot(st.weight, st.steps))
            for i in range(st.weight.size):
                m = _chunk_steps(model, sl, priors, st.schedule, prompts_of(st, i), st.sequences_decoding, kv_bytes_per_request)
                vals.append(m)
                wts.append(np.full(m.size, share * st.weight[i] / max(nbar, 1.0)))
            v, ww = np.concatenate(vals), np.concatenate(wts)
            o2 = np.argsort(v, kind="stable")
            c2 = np.cumsum(ww[o2]) / ww.sum()
            itl[p] = float(v[o2][min(int(np.searchsorted(c2, p / 100.0 - 1e-12)), v.size - 1)])
        elif share >= 1.0 - p / 100.0:
            # prompts run back to back in one token gap: k or more with probability share x pi^(k-1)
            pi = queued_behind_prefill(c, min(st.prefill_share, 1.0), mean, st.step_ms)
            k, tail = 1, share * pi
            while tail >= 1.0 - p / 100.0 and k < 64:
                k, tail = k + 1, tail * pi
            itl[p] = st.step_ms + k * mean
        else:
            itl[p] = st.step_ms
    b = st.sequences_decoding
    return ColocatedLatency(ttft, est, wait, tpot, itl, math.sqrt(2.0 * b / 3.0) if b > 0 else 0.0)


def replica_rates(inst, tm, sl: SliceSpec, sources, schedule: Schedule, router: str | None = None) -> "ReplicaRates":
    """:class:`ReplicaRates` of tier mix ``tm`` on shape ``sl`` fed by ``sources`` under
    ``schedule``, from the instance: its SLOs (:func:`fleetplan.perf.pools.tier_slos`), the
    residents' mean KV and the KV pool's request capacity, the fixed path, and the
    instance's ``serving.replica_router`` unless ``router`` is given. A colocated replica
    moves no KV, so no transfer is added to its TTFT."""
    from fleetplan.perf.pools import path_ms, tier_slos
    from fleetplan.perf.roofline import slice_memory_map

    kv_mean, _ = tm.resident_kv(inst)
    cap = slice_memory_map(inst.model, sl, inst.priors).resident_capacity(kv_mean, inst.priors.kv_paging_slack)
    slos = [(s.metric, float(s.percentile), float(s.limit_ms)) for s in tier_slos(inst, tm.name)]
    pcts = sorted({p for _, p, _ in slos} | {50.0, 95.0, 99.0})
    comps = [(c.p50_ms, c.p99_ms) for c in inst.priors.path_latency]
    return ReplicaRates(inst.model, sl, inst.priors, schedule, prompt_types(tm, sources), tm.output_tokens, kv_mean, cap, slos,
                        comps, {p: path_ms(inst, p) for p in pcts}, 0.0, router or inst.serving.replica_router,
                        ca2=inst.workload.arrival_scv, output_lengths=inst.workload.output_length_distribution)


class ReplicaRates:
    """The largest per-replica arrival rate (requests/s) at which a pool of n replicas is
    stable and meets ``slos`` ([(metric 'ttft'|'tpot'|'itl', percentile, limit_ms)]) under
    ``schedule``, for any n (:meth:`rate`, memoised), and the fewest replicas for a demand
    (:meth:`replicas_for`).

    The per-replica state depends on the per-replica rate only, so TPOT, ITL and stability
    give one limit for every n (:attr:`top`: bisection on lambda in (0, 1/E[S at b = 0]),
    the metrics rising with the load); the TTFT percentile bound (:func:`colocated_latency`)
    lowers it per n. ``router`` 'least-work' queues the pool's prompts M/G/c over its n
    replicas, so the rate rises with n (pooling); n = 1, or 'random', is the M/G/1 per
    replica -- an upper bound on the least-work wait for any pool size (pooling never
    lengthens the FCFS wait at the same load per server), so the n = 1 rate holds for
    every count and rate(n) holds for every count >= n. A rate is 0 when even a trickle fails.
    """

    def __init__(self, model: ModelSpec, sl: SliceSpec, priors: Priors, schedule: Schedule, prompts: PromptTypes,
                 output_tokens: float, kv_bytes_per_request: float, kv_capacity_requests: int,
                 slos: list[tuple[str, float, float]], path_components: list[tuple[float, float]],
                 path_pct_ms: dict[float, float], extra_ms: ArrayLike = 0.0, router: str = "least-work", iterations: int = 22,
                 ca2: float = 1.0, output_lengths: str = "fixed"):
        self.args = (model, sl, priors)
        self.output_lengths = output_lengths  # 'fixed' or 'geometric' (workload.output_length_distribution)
        self.schedule, self.prompts, self.o, self.kv, self.cap = schedule, prompts, output_tokens, kv_bytes_per_request, kv_capacity_requests
        self.slos, self.comps, self.path_pct, self.extra, self.router, self.iterations = slos, path_components, path_pct_ms, extra_ms, router, iterations
        self.ca2 = ca2  # the arrivals' SCV within the hour (Allen-Cunneen, workload.arrival_scv)
        self._states: dict[float, ColocatedState] = {}
        self._grid_memo: dict[bytes, tuple] = {}  # colocated_state's rps-free step times (grid_memo)
        self._rates: dict[int, float] = {}
        self._top_rate: float | None = None

    @property
    def top(self) -> float:
        """The per-replica rate TPOT, ITL and stability allow (requests/s), for any pool size."""
        if self._top_rate is None:
            self._top_rate = self._top()
        return self._top_rate

    def latency(self, lam: float, n: int, percentiles: list[float], estimate: bool = True) -> tuple[ColocatedState, ColocatedLatency]:
        """(state, latency) of a pool of ``n`` replicas at ``lam`` requests/s per replica."""
        st = self.state(lam)
        return st, colocated_latency(*self.args, st, n, self.router, self.o, self.kv, percentiles, self.comps, self.path_pct,
                                     self.extra, estimate, self.ca2, self.output_lengths)

    def state(self, lam: float) -> ColocatedState:
        if lam not in self._states:
            self._states[lam] = colocated_state(*self.args, self.schedule, self.prompts, lam, self.o, self.kv, self.cap,
                                                grid_memo=self._grid_memo)
        return self._states[lam]

    def _lat(self, lam: float, n: int, pcts: list[float]) -> ColocatedLatency:
        return colocated_latency(*self.args, self.state(lam), n, self.router, self.o, self.kv, pcts, self.comps, self.path_pct,
                                 self.extra, estimate=False, ca2=self.ca2, output_lengths=self.output_lengths)

    def _ok_state(self, lam: float) -> bool:
        st = self.state(lam)
        if not st.stable:
            return False
        rest = [x for x in self.slos if x[0] != "ttft"]
        if rest:
            lat = self._lat(lam, 1, sorted({p for _, p, _ in rest}))
            for metric, p, limit in rest:
                if {"tpot": lat.tpot_ms, "itl": lat.itl_ms}[metric][p] > limit:
                    return False
        return True

    def _ok_ttft(self, lam: float, n: int) -> bool:
        tt = [(p, limit) for m, p, limit in self.slos if m == "ttft"]
        if not tt:
            return True
        lat = self._lat(lam, n, sorted({p for p, _ in tt}))
        return all(lat.ttft_ms[p] <= limit for p, limit in tt)

    def _top(self) -> float:
        model, sl, priors = self.args
        S0, _, _ = prompt_service(model, sl, priors, self.schedule, self.prompts, 0.0, self.kv)
        hi = 1e3 / float(np.dot(self.prompts.weight / self.prompts.weight.sum(), S0))
        lo = hi * 1e-6
        if not self._ok_state(lo):
            return 0.0
        for _ in range(self.iterations):
            mid = 0.5 * (lo + hi)
            if self._ok_state(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def rate(self, n: int) -> float:
        """Largest per-replica rate of a pool of ``n`` (>= 1) replicas (requests/s)."""
        n = int(n)
        if n < 1:
            raise ValueError("replicas must be >= 1")
        if self.router == "random":
            n = 1
        if n in self._rates:
            return self._rates[n]
        top = self.top
        if top <= 0:
            r = 0.0
        elif self._ok_ttft(top, n):
            r = top
        else:
            below = [v for k, v in self._rates.items() if k < n]
            a = max(below) if below else top * 1e-6
            if not self._ok_ttft(a, n):
                r = 0.0
            else:
                b = min([v for k, v in self._rates.items() if k > n] + [top])
                for _ in range(self.iterations - 6):
                    mid = 0.5 * (a + b)
                    if self._ok_ttft(mid, n):
                        a = mid
                    else:
                        b = mid
                r = a
        self._rates[n] = r
        return r

    def replicas_for(self, demand_rps: float, headroom: float = 1.0, max_replicas: int = 100_000) -> int | None:
        """Fewest replicas n with n x rate(n) x headroom >= ``demand_rps`` (count; 0 for no
        demand; None when no pool up to ``max_replicas`` carries it). Binary search: n x
        rate(n) rises with n."""
        if demand_rps <= 0:
            return 0
        r1 = self.rate(1) * headroom
        if r1 <= 0:
            return None
        ok = lambda n: n * self.rate(n) * headroom >= demand_rps * (1 - 1e-12)  # noqa: E731
        hi = min(int(math.ceil(demand_rps / r1 - 1e-9)), max_replicas)
        if not ok(hi):
            return None
        top = self.top * headroom
        lo = max(int(math.ceil(demand_rps / top - 1e-9)) - 1, 0) if top > 0 else 0
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if mid >= 1 and ok(mid):
                hi = mid
            else:
                lo = mid
        return hi

