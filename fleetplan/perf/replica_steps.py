"""The step physics of a colocated replica: the engine schedules, the Sarathi-Serve mixed
step, the prompt types a replica prefills and the ms of steps each one costs at a number
of residents (:func:`prompt_service_grid`), and the simulator's scalar step kernel
(:class:`MixedKernel`). The steady state and the latency percentiles built on them are
:mod:`fleetplan.perf.replica_state`, the per-pool rate search
:mod:`fleetplan.perf.replica_rates`; :mod:`fleetplan.perf.colocated`'s docstring derives
them, and every public name here is re-exported there.

Units: requests/s, ms, tokens, bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fleetplan.perf.inputs import ModelSpec, Priors
from fleetplan.perf.roofline import (
    SliceSpec,
    attention_bandwidth,
    attention_mfu,
    decode_attention_flops,
    kv_bytes_per_token,
    layer_overhead_ms,
    prefill_flops,
    prefill_time_ms,
    step_comm_ms,
    weight_bytes_streamed,
)

__all__ = [
    "PREFILL_FIRST",
    "CHUNKED",
    "Schedule",
    "MixedStep",
    "mixed_step",
    "mixed_time_scale",
    "PromptTypes",
    "prompt_types",
    "chunk_plan",
    "prompt_service",
    "own_compute_share",
    "prompt_service_grid",
    "ChunkSteps",
    "ServiceKernel",
    "MixedKernel",
]

PREFILL_FIRST = "prefill-first"
CHUNKED = "chunked"
TB = 1e12


@dataclass(frozen=True)
class Schedule:
    """A colocated replica's schedule: ``kind`` 'prefill-first' or 'chunked'; ``chunk_tokens``
    the chunked schedule's token budget per step (vLLM's max_num_batched_tokens; decode
    tokens first, the rest for the head prompt), None for prefill-first."""

    kind: str
    chunk_tokens: int | None = None

    def __post_init__(self):
        if self.kind not in (PREFILL_FIRST, CHUNKED):
            raise ValueError(f"schedule kind must be '{PREFILL_FIRST}' or '{CHUNKED}', got {self.kind!r}")
        if (self.kind == CHUNKED) != (self.chunk_tokens is not None and self.chunk_tokens > 0):
            raise ValueError("a chunked schedule needs chunk_tokens > 0 (tokens); prefill-first takes none")

    @property
    def label(self) -> str:
        return PREFILL_FIRST if self.kind == PREFILL_FIRST else f"chunked-{self.chunk_tokens}"

    @classmethod
    def parse(cls, label: str) -> "Schedule":
        """Inverse of :attr:`label` ('prefill-first', 'chunked-512')."""
        if label == PREFILL_FIRST:
            return cls(PREFILL_FIRST)
        if label.startswith(CHUNKED + "-") and label[len(CHUNKED) + 1:].isdigit():
            return cls(CHUNKED, int(label[len(CHUNKED) + 1:]))
        raise ValueError(f"unknown colocated schedule {label!r}: 'prefill-first' or 'chunked-<tokens>'")


# --------------------------------------------------------------------------- mixed step


@dataclass(frozen=True)
class MixedStep:
    """One engine step carrying B decode tokens and a chunk of C prefill tokens (arrays
    broadcast from the inputs, ms): ``step_ms`` = ``gemm_ms`` + ``decode_attention_ms`` +
    ``chunk_attention_ms`` + ``comm_ms`` + ``overhead_ms``."""

    gemm_ms: NDArray[np.float64]
    decode_attention_ms: NDArray[np.float64]
    chunk_attention_ms: NDArray[np.float64]
    comm_ms: NDArray[np.float64]
    overhead_ms: float
    step_ms: NDArray[np.float64]


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
    each multiplied by :func:`mixed_time_scale` (1 as fitted).
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
    x = mixed_time_scale(priors, b, ch)
    gemm, d_att, c_att, comm, x = np.broadcast_arrays(gemm, d_att, c_att, ar + a2a, x)
    gemm, d_att, c_att, comm, over = gemm * x, d_att * x, c_att * x, comm * x, over * x
    step = gemm + d_att + c_att + comm + over
    return MixedStep(gemm.astype(float), d_att.astype(float), c_att.astype(float), comm.astype(float), over, step)


def mixed_time_scale(priors: Priors, batch: ArrayLike, chunk_tokens: ArrayLike) -> NDArray[np.float64] | float:
    """The step-time multiplier of a mixed step of B decode tokens and C prompt tokens
    (dimensionless): the token-weighted mean (B decode_time_scale + C prefill_time_scale) /
    (B + C) -- a decode step's at C = 0, a prefill chunk's at B = 0 -- or the one scale when
    the two are equal (then exactly it, so scale 1 changes no bit). Arrays broadcast."""
    xd, xp = priors.decode_time_scale, priors.prefill_time_scale
    if xd == xp:
        return xd
    b = np.asarray(batch, dtype=float)
    c = np.asarray(chunk_tokens, dtype=float)
    tot = b + c
    return np.where(tot > 0, (b * xd + c * xp) / np.where(tot > 0, tot, 1.0), xd)


# --------------------------------------------------------------------------- prompts


@dataclass(frozen=True)
class PromptTypes:
    """The prompt types a replica prefills: prompt tokens s, cached tokens c and share w,
    arrays (types,). Build from a tier's mix with :func:`prompt_types`."""

    prompt_tokens: NDArray[np.float64]
    cached_tokens: NDArray[np.float64]
    weight: NDArray[np.float64]


def prompt_types(tm, sources) -> PromptTypes:
    """The prompt types of tier mix ``tm`` (:class:`fleetplan.perf.pools.TierMix`) fed by
    ``sources`` (:class:`fleetplan.perf.pools.PrefillSource`): every (source, bucket) with
    cached c = hit rate x s, the clamp filters and the weights as
    :func:`fleetplan.perf.pools.prefill_profile` applies them. Raises ValueError when every
    request is clamped or the weights are not positive."""
    total_w = sum(x.weight for x in sources)
    if total_w <= 0:
        raise ValueError("prefill sources need a positive total weight")
    s_, c_, w_ = [], [], []
    for src in sources:
        for s, w in zip(tm.tokens, tm.shares):
            if src.clamp_min_tokens is not None and s >= src.clamp_min_tokens:
                continue
            if src.only_min_tokens is not None and s < src.only_min_tokens:
                continue
            s_.append(float(s))
            c_.append(float(src.hit_rate * s))
            w_.append(src.weight / total_w * float(w))
    if not w_ or sum(w_) <= 0:
        raise ValueError("every request of this pool is clamped")
    w = np.array(w_)
    return PromptTypes(np.array(s_), np.array(c_), w / w.sum())


def chunk_plan(new_tokens: float, cached_tokens: float, chunk: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(chunk sizes, context before each chunk) of a prompt's ``new_tokens`` uncached tokens
    after ``cached_tokens`` cached ones, in chunks of ``chunk`` tokens, the last partial
    (tokens, arrays (ceil(new / chunk),)). Raises ValueError for chunk <= 0."""
    if chunk <= 0:
        raise ValueError("chunk must be > 0 (tokens)")
    n = max(int(math.ceil(new_tokens / chunk - 1e-9)), 1)
    sizes = np.full(n, float(chunk))
    sizes[-1] = new_tokens - chunk * (n - 1)
    ctx = cached_tokens + chunk * np.arange(n, dtype=float)
    return sizes, ctx


@dataclass(frozen=True)
class ChunkSteps:
    """Every mixed step of every prompt type at every batch of a chunked schedule, flat
    (:meth:`ServiceKernel.chunk_steps`): row r = (batch g, type i) = (r // types, r % types)
    holds its chunks ``starts[r]`` .. ``starts[r] + counts[g, i] - 1`` of ``step_ms`` (ms) and
    ``tokens`` (the chunk's prompt tokens), in chunk order."""

    step_ms: NDArray[np.float64]  # (chunks,)
    tokens: NDArray[np.float64]  # (chunks,)
    starts: NDArray[np.int64]  # (G x types,)
    counts: NDArray[np.float64]  # (G, types) the chunk count k


class ServiceKernel:
    """:func:`prompt_service_grid` of one replica (model, slice, priors, schedule, prompt
    types, KV per resident) as an array program: the constants of :func:`mixed_step` and
    :func:`roofline.decode_step` computed once, and every chunk of every (batch, prompt
    type) priced in one pass over a flat array -- no Python loop over prompt types, no
    padding to the longest prompt. The same floating-point operations, element for
    element, as :func:`mixed_step` and :func:`roofline.decode_step` (a test holds them
    together); the sums over a prompt's chunks run in chunk order.

    Raises ValueError for a negative KV size."""

    def __init__(self, model: ModelSpec, sl: SliceSpec, priors: Priors, schedule: Schedule, prompts: PromptTypes,
                 kv_bytes_per_request: float):
        self.model, self.sl, self.priors, self.schedule, self.prompts = model, sl, priors, schedule, prompts
        kv = float(kv_bytes_per_request)
        if kv < 0:
            raise ValueError("kv_bytes_per_request must be >= 0 (bytes)")
        self.kv = kv
        peak = sl.peak_tflops * 1e12
        self._bw = sl.hbm_tbps * TB * priors.hbm_bw_fraction
        self._att_bw = attention_bandwidth(sl, priors)
        self._a2 = 2.0 * model.active_params_b * 1e9
        self._peak_dec = peak * priors.decode_mfu
        self._peak_pre = peak * priors.prefill_mfu
        self._peak_att_dec = peak * attention_mfu(priors, "decode")
        self._peak_att_pre = peak * attention_mfu(priors, "prefill")
        self._att_flops_per_b = float(decode_attention_flops(model, 1.0, kv))  # 4 L d (kv / per_tok) x 1
        self._kv_per_token = kv_bytes_per_token(model)
        self._pair_flops = 2.0 * model.layers * model.d_model  # prefill_flops' causal term per (s^2 - c^2)
        self._over = priors.decode_step_overhead_ms + layer_overhead_ms(model, priors)
        self._xd, self._xp = priors.decode_time_scale, priors.prefill_time_scale
        #: the per-request prefill overhead a chunked prompt pays once, at prefill_time_scale (ms)
        self.prefill_overhead_ms = priors.prefill_overhead_ms * self._xp
        # a dense model streams every weight whatever the tokens: one number (weight_bytes_streamed)
        self._w_ms = float(weight_bytes_streamed(model, 0.0)) / self._bw * 1e3 if model.moe is None else None
        s, c = prompts.prompt_tokens, prompts.cached_tokens
        if np.any(s < 0) or np.any(c < 0) or np.any(c > s + 1e-9):
            raise ValueError("need 0 <= cached_tokens <= prompt_tokens (tokens)")
        self._new = s - c
        self._new_row, self._cached_row = self._new[None, :], c[None, :]
        self._kv_ms_per_token = self._kv_per_token / self._att_bw * 1e3  # chunk attention's KV reads, ms per context token
        self._pair_ms = self._pair_flops / self._peak_att_pre * 1e3  # ... its FLOPs, ms per (query, key) pair
        self._prefill_ms = (np.asarray(prefill_time_ms(model, sl, priors, s, c), dtype=float)
                            if schedule.kind == PREFILL_FIRST else None)

    def _weights_ms(self, tokens: NDArray[np.float64]):
        return self._w_ms if self._w_ms is not None else weight_bytes_streamed(self.model, tokens) / self._bw * 1e3

    def _decode_att_ms(self, b: NDArray[np.float64]) -> NDArray[np.float64]:
        """max(KV reads, attention FLOPs) of b residents' decode tokens (ms), as decode_step."""
        flops = self._att_flops_per_b * b if self._kv_per_token > 0 else np.zeros_like(b)
        return np.maximum(b * self.kv / self._att_bw * 1e3, flops / self._peak_att_dec * 1e3)

    def decode_ms(self, batch: ArrayLike) -> NDArray[np.float64]:
        """:func:`roofline.decode_step`'s step_ms at each of ``batch`` residents (ms), same shape."""
        b = np.asarray(batch, dtype=float)
        gemm = np.maximum(self._weights_ms(b), self._a2 * b / self._peak_dec * 1e3)
        ar, a2a = step_comm_ms(self.model, self.sl, self.priors, b)
        x = self._xd
        return gemm * x + self._decode_att_ms(b) * x + ar * x + a2a * x + self._over * x

    def chunk_steps(self, batch: ArrayLike) -> ChunkSteps:
        """The mixed steps (:func:`mixed_step`) that carry each prompt type's chunks at each of
        ``batch`` residents B (array (G,)) under the chunk budget C: chunks of q = max(C - B, 1)
        tokens, k = max(ceil(new / q), 1) of them, the last partial, each attending over the
        prompt's context before it (:func:`chunk_plan`). Returns :class:`ChunkSteps`."""
        B = np.atleast_1d(np.asarray(batch, dtype=float))
        new, c = self._new, self.prompts.cached_tokens
        T = new.size
        q = np.maximum(float(self.schedule.chunk_tokens) - B, 1.0)  # (G,) prefill tokens per mixed step
        k = np.maximum(np.ceil(new[None, :] / q[:, None] - 1e-9), 1.0)  # (G, T) chunks
        counts = k.ravel().astype(np.int64)
        starts = np.zeros(counts.size, dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        row = np.repeat(np.arange(counts.size), counts)
        j = (np.arange(int(counts.sum())) - starts[row]).astype(float)  # chunk index within its prompt
        g, i = row // T, row % T
        b, qe, ke = B[g], q[g], k.ravel()[row]
        ch = np.where(j < ke - 1, qe, new[i] - qe * (ke - 1))
        c0 = np.where(ch > 0, c[i] + j * qe, 0.0)
        # mixed_step, element for element
        gemm = np.maximum(self._weights_ms(b + ch), (self._a2 * b / self._peak_dec + self._a2 * ch / self._peak_pre) * 1e3)
        d_att = self._decode_att_ms(B)[g]
        s1 = c0 + ch
        c_att = np.maximum(c0 * self._kv_per_token * (ch > 0) / self._att_bw * 1e3,
                           self._pair_flops * (s1 * s1 - c0 * c0) / self._peak_att_pre * 1e3)
        ar, a2a = step_comm_ms(self.model, self.sl, self.priors, b + ch)
        x = mixed_time_scale(self.priors, b, ch)
        step = gemm * x + d_att * x + c_att * x + (ar + a2a) * x + self._over * x
        return ChunkSteps(step, ch, starts, k)

    def grid(self, batch: ArrayLike, padded_sums: bool = False) -> tuple[NDArray[np.float64], ...]:
        """(S, n, Delta, d) at every batch of ``batch``: :func:`prompt_service_grid`.

        Chunked: S sums a prompt's chunks in closed form. Its full chunks (q tokens each)
        share the weight reads or GEMM FLOPs, the decode attention, the collectives and
        the overhead; their chunk attention max(c0 kv/bw, 2 L d (2 q c0 + q^2)/peak) is the
        larger of two lines in the chunk's index (its context c0 = c + j q), so its sum is
        two arithmetic series split where the lines cross; the last chunk is priced
        alone. The same terms as :meth:`chunk_steps`' (:func:`mixed_step`'s) added in
        another order: equal to a few ulps (a test holds them within 1e-12), for the
        price of a handful of numbers per (batch, prompt type) instead of one per chunk.

        ``padded_sums``: the chunks of :meth:`chunk_steps` summed instead as the older scalar
        code did -- per prompt type, a (batches, most chunks) array padded with
        zeros, ``np.sum`` along its rows (numpy's pairwise sum): that code's floats exactly.
        :class:`ReplicaRates` takes its rate search's upper end from the sums at b = 0 this
        way, so its rates are the ones that code found, bit for bit (a loop over the prompt
        types: once per replica)."""
        B = np.atleast_1d(np.asarray(batch, dtype=float))
        if self._prefill_ms is not None:
            d = self.decode_ms(B)
            S = np.broadcast_to(self._prefill_ms, (B.size, self._new.size)).copy()
            return S, np.zeros_like(S), S.copy(), d
        if not padded_sums:
            S, k, d = self._closed_sums(B)
            S = S + self.prefill_overhead_ms
            return S, k, S - k * d[:, None], d
        d = self.decode_ms(B)
        cs = self.chunk_steps(B)
        step = np.append(np.where(cs.tokens > 0, cs.step_ms, 0.0), 0.0)  # index -1: the padding
        T = self._new.size
        S = np.empty((B.size, T))
        for i in range(T):
            k = cs.counts[:, i].astype(np.int64)
            j = np.arange(int(k.max()))[None, :]
            S[:, i] = np.sum(step[np.where(j < k[:, None], cs.starts[i::T][:, None] + j, -1)], axis=1)
        S = S + self.prefill_overhead_ms
        return S, cs.counts, S - cs.counts * d[:, None], d

    def _closed_sums(self, B: NDArray[np.float64]) -> tuple[NDArray[np.float64], ...]:
        """(sum of each prompt's chunk steps (G, T) ms, chunks k (G, T), decode step (G,) ms)
        at the batches B (:meth:`grid`). One collectives call for every token count."""
        new, c = self._new_row, self._cached_row
        G, T = B.size, new.size
        b = B[:, None]
        q = np.maximum(float(self.schedule.chunk_tokens) - b, 1.0)  # (G, 1) tokens of a full chunk
        m = np.maximum(np.ceil(new / q - 1e-9), 1.0) - 1.0  # (G, T) full chunks, j = 0 .. m - 1, context c + j q
        c_last = c + m * q  # the last chunk's context ...
        r = new - q * m  # ... and tokens
        # one collectives (and, MoE, weights) call: decode (B), full chunks (B + q), last chunks (B + r)
        tokens = np.concatenate([B, (b + q)[:, 0], (b + r).ravel()])
        ar, a2a = step_comm_ms(self.model, self.sl, self.priors, tokens)
        comm = ar + a2a
        w_ms = self._weights_ms(tokens)
        w_dec, w_full, w_last = (w_ms, w_ms, w_ms) if np.isscalar(w_ms) else (w_ms[:G], w_ms[G:2 * G, None], w_ms[2 * G:].reshape(G, T))
        d_att = self._decode_att_ms(B)
        xd = self._xd
        d = np.maximum(w_dec, self._a2 * B / self._peak_dec * 1e3) * xd + d_att * xd + ar[:G] * xd + a2a[:G] * xd + self._over * xd
        d_att = d_att[:, None]
        g_dec = self._a2 * b / self._peak_dec
        # the last chunk, as mixed_step prices it
        s1 = c_last + r
        c_att = np.maximum(c_last * self._kv_per_token / self._att_bw * 1e3,
                           self._pair_flops * (s1 * s1 - c_last * c_last) / self._peak_att_pre * 1e3)
        last = np.maximum(w_last, (g_dec + self._a2 * r / self._peak_pre) * 1e3) + d_att + c_att + comm[2 * G:].reshape(G, T) + self._over
        # the full chunks: the same GEMMs, decode attention, collectives and overhead each ...
        each = np.maximum(w_full, (g_dec + self._a2 * q / self._peak_pre) * 1e3) + d_att + comm[G:2 * G, None] + self._over
        # ... and chunk attention max(kv (c + j q), fl q (2 (c + j q) + q)): the FLOPs' line lies
        # above the KV reads' from j = 0 on, and stays there when it is the steeper (2 fl q >=
        # kv); otherwise up to j < split, where they cross
        kv, fl = self._kv_ms_per_token, self._pair_ms
        steep = (2.0 * fl) * q - kv  # (G, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            cross = np.minimum(np.maximum(np.floor(fl * q / -steep - c / q) + 1.0, 0.0), m)
        split = np.where(steep >= 0, m, cross)
        rest = m - split
        att = split * (fl * q * (2.0 * c + q) + fl * q * q * (split - 1.0)) + rest * (kv * c + kv * q * (split + m - 1.0) / 2.0)
        if self._xd == self._xp:  # one scale (1 as fitted: the products change no bit)
            x_full = x_last = xd
        else:  # a mixed step's token-weighted scale (mixed_time_scale): full chunks of q tokens, the last of r
            x_full, x_last = mixed_time_scale(self.priors, b, q), mixed_time_scale(self.priors, b, r)
        return (m * each + att) * x_full + np.where(r > 0, last * x_last, 0.0), m + 1.0, d


def prompt_service_grid(model: ModelSpec, sl: SliceSpec, priors: Priors, schedule: Schedule, prompts: PromptTypes,
                        batch: ArrayLike, kv_bytes_per_request: float) -> tuple[NDArray[np.float64], ...]:
    """(S, n, Delta, d) at every batch of ``batch`` (residents, array (G,)): S, n, Delta arrays
    (G, types) as :func:`prompt_service`, d the decode step (G,) (ms). Prefill-first: S the
    whole prompt's :func:`roofline.prefill_time_ms`, n = 0; chunked: the sums of every
    chunk's :func:`mixed_step` plus prefill_overhead_ms once (:class:`ServiceKernel`, which
    a caller evaluating one replica many times keeps)."""
    return ServiceKernel(model, sl, priors, schedule, prompts, kv_bytes_per_request).grid(batch)


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


def own_compute_share(model: ModelSpec, sl: SliceSpec, priors: Priors, schedule: Schedule, prompts: PromptTypes,
                      batch: float, kv_bytes_per_request: float) -> NDArray[np.float64]:
    """Share of the TTFT compute of each prompt type that is the prompt's own work, Delta / S
    (fraction, (types,)): of the S ms of steps that carry the prompt (:func:`prompt_service`),
    what they add over the n decode steps of the ``batch`` residents they also run. 1 for
    prefill-first (the pass is the prompt's alone); under a chunked schedule the rest is the
    residents' decode riding along, so a longer chunk (fewer steps, each carrying more of
    the prompt) never lowers it (a property test holds this)."""
    S, _, D = prompt_service(model, sl, priors, schedule, prompts, batch, kv_bytes_per_request)
    return D / S


# --------------------------------------------------------------------------- simulator kernel


@dataclass(frozen=True)
class MixedKernel:
    """The scalar form of :func:`mixed_step` for a simulator that prices every step with the
    residents' own KV: tables over the tokens in the pass (B + C) for the weight reads and
    the collectives, the rest closed form. :meth:`step_ms` equals :func:`mixed_step` with
    KV per request = ``kv_bytes`` / B (a test holds them together), its step-time scale
    included (:func:`mixed_time_scale`). Build with :meth:`of`."""

    weights_bytes: NDArray[np.float64]  # (max_tokens + 1,) W(P), bytes
    comm_ms: NDArray[np.float64]  # (max_tokens + 1,) collectives of P tokens, ms
    bytes_per_ms: float
    kv_bytes_per_ms: float
    decode_ms_per_token: float
    prefill_ms_per_token: float
    decode_attention_ms_per_kv_byte: float
    chunk_attention_ms_per_pair: float  # 2 L d / (peak x attention_mfu): ms per (query, key) pair of the chunk's causal attention
    kv_bytes_per_token: float
    overhead_ms: float
    prefill_overhead_ms: float  # at prefill_time_scale
    decode_scale: float = 1.0  # decode_time_scale
    prefill_scale: float = 1.0  # prefill_time_scale: a step's multiplier is their token-weighted mean (mixed_time_scale)

    @classmethod
    def of(cls, model: ModelSpec, sl: SliceSpec, priors: Priors, max_tokens: int) -> "MixedKernel":
        """Kernel for passes of up to ``max_tokens`` tokens (residents + chunk)."""
        if max_tokens < 1:
            raise ValueError("need max_tokens >= 1")
        p = np.arange(max_tokens + 1, dtype=float)
        ar, a2a = step_comm_ms(model, sl, priors, p)
        peak = sl.peak_tflops * 1e12
        a2 = 2.0 * model.active_params_b * 1e9
        return cls(
            weights_bytes=weight_bytes_streamed(model, p), comm_ms=ar + a2a,
            bytes_per_ms=sl.hbm_tbps * TB * priors.hbm_bw_fraction / 1e3, kv_bytes_per_ms=attention_bandwidth(sl, priors) / 1e3,
            decode_ms_per_token=a2 / (peak * priors.decode_mfu) * 1e3, prefill_ms_per_token=a2 / (peak * priors.prefill_mfu) * 1e3,
            decode_attention_ms_per_kv_byte=float(decode_attention_flops(model, 1.0, 1.0)) / (peak * attention_mfu(priors, "decode")) * 1e3,
            chunk_attention_ms_per_pair=2.0 * model.layers * model.d_model / (peak * attention_mfu(priors, "prefill")) * 1e3,
            kv_bytes_per_token=kv_bytes_per_token(model),
            overhead_ms=priors.decode_step_overhead_ms + layer_overhead_ms(model, priors),
            prefill_overhead_ms=priors.prefill_overhead_ms * priors.prefill_time_scale,
            decode_scale=priors.decode_time_scale, prefill_scale=priors.prefill_time_scale,
        )

    def step_ms(self, residents: int, kv_bytes: float, chunk: int, context: float) -> float:
        """Time (ms) of a step with ``residents`` decode tokens holding ``kv_bytes`` of KV and a
        chunk of ``chunk`` prompt tokens after ``context`` tokens of its prompt."""
        pos = residents + chunk
        w = self.weights_bytes[pos] / self.bytes_per_ms
        comp = self.decode_ms_per_token * residents + self.prefill_ms_per_token * chunk
        kv = kv_bytes / self.kv_bytes_per_ms
        att = self.decode_attention_ms_per_kv_byte * kv_bytes
        c_att = self.chunk_attention_ms_per_pair * ((context + chunk) ** 2 - context**2)
        c_kv = context * self.kv_bytes_per_token / self.kv_bytes_per_ms if chunk else 0.0
        x = self.decode_scale if self.decode_scale == self.prefill_scale or not pos else \
            (residents * self.decode_scale + chunk * self.prefill_scale) / pos
        return float(((w if w > comp else comp) + (kv if kv > att else att) + (c_kv if c_kv > c_att else c_att)
                      + self.comm_ms[pos] + self.overhead_ms) * x)
