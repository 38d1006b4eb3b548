"""Roofline performance model of one serving slice: bytes, memory map, decode steps, prefill.

Pure functions of the instance's model, chip and priors; numpy-vectorised over batch
sizes and prompt lengths. Units: bytes, GB (1e9 bytes), TB/s (1e12 bytes/s), FLOP,
milliseconds, tokens. Sources: the brief (``shared/seeds/000_...txt``) section 2
"Capacity Math First" for every formula unless another source is named; the roofline
model itself is Williams, Waterman & Patterson, CACM 2009.

A step is a sum of what runs one after the other on the slice (the operator-level sum of
Vidur, Agrawal et al. MLSys'24, and AIConfigurator, arXiv 2601.06288): the GEMMs (weight
reads or FLOPs, whichever binds), attention (KV reads or its own FLOPs, at its own
efficiency), the tensor-parallel all-reduces and MoE dispatch/combine all-to-alls of
:func:`step_comm_ms` (:mod:`fleetplan.perf.comm`), context-parallel ring passes in a long
prefill, and fixed overheads. No pipeline bubble: a slice has no pipeline stages (the
schema offers none; every chip of a slice holds a shard of every layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fleetplan.perf.inputs import GQA_KINDS, HYBRID_KIND, MLA_KIND, ChipType, ModelSpec, Priors
from fleetplan.perf.comm import all_to_all_ms, allreduce_ms, p2p_ms

__all__ = [
    "kv_bytes_per_token",
    "kv_bytes_per_request",
    "moe_param_split",
    "experts_touched_fraction",
    "weight_bytes_resident",
    "weight_bytes_streamed",
    "mix_moments",
    "blended_kv_bytes",
    "SliceSpec",
    "MemoryMap",
    "slice_memory_map",
    "moe_remote_copies",
    "step_comm_ms",
    "decode_attention_flops",
    "attention_mfu",
    "attention_bandwidth",
    "layer_overhead_ms",
    "DecodeStep",
    "decode_step",
    "tpot_p99_kv_spread_ms",
    "prefill_flops",
    "context_parallel_layout",
    "PrefillTime",
    "prefill_breakdown",
    "prefill_time_ms",
    "attention_ffn_crossover_tokens",
    "sustained_prefill_tokens_per_s",
    "kv_transfer_ms",
]

GB = 1e9
TB = 1e12


# --------------------------------------------------------------------------- bytes


def kv_bytes_per_token(model: ModelSpec) -> float:
    """KV-cache bytes one token adds in the layers whose KV grows with the context.

    GQA/MHA: 2 x layers x kv_heads x head_dim x bytes (K and V);
    MLA: layers x (kv_latent_rank + rope_dim) x bytes (DeepSeek-V2, arXiv 2405.04434);
    hybrid: the same GQA term over the full-attention layers only (sliding-window and
    linear layers are bounded per request, see :func:`kv_bytes_per_request`).

    Returns: bytes per token (float). Source: the brief section 2 ("Bytes").
    """
    a = model.attention
    b = model.bytes_per_kv_element
    kind = getattr(a, "kind", None)  # the layout's discriminator (perf.inputs: GQALayout, MLALayout, HybridLayout)
    if kind in GQA_KINDS:
        return 2.0 * model.layers * a.kv_heads * a.head_dim * b
    if kind == MLA_KIND:
        return float(model.layers * (a.kv_latent_rank + a.rope_dim) * b)
    if kind == HYBRID_KIND:
        return 2.0 * a.full_attention_layers * a.kv_heads * a.head_dim * b
    raise TypeError(f"unknown attention layout {type(a).__name__}")


def kv_bytes_per_request(model: ModelSpec, context_tokens: ArrayLike) -> NDArray[np.float64]:
    """KV bytes held by one request with ``context_tokens`` tokens of context.

    For GQA/MHA/MLA this is ``kv_bytes_per_token * context``. For hybrid models the
    sliding-window layers hold ``min(context, window)`` tokens and linear-attention
    layers a fixed state, so the bytes are affine-then-linear in the context.

    Args:
        context_tokens: array of any shape (tokens, >= 0).
    Returns: array of the same shape (bytes).
    Raises: ValueError if any context is negative.
    """
    s = np.asarray(context_tokens, dtype=float)
    if np.any(s < 0):
        raise ValueError("context_tokens must be >= 0 (tokens)")
    per_tok = kv_bytes_per_token(model)
    out = per_tok * s
    a = model.attention
    if a.kind == HYBRID_KIND:
        b = model.bytes_per_kv_element
        swa = 2.0 * a.sliding_window_layers * a.kv_heads * a.head_dim * b
        out = out + swa * np.minimum(s, a.window_tokens)
        out = out + a.linear_attention_layers * a.linear_state_bytes_per_layer * (s > 0)
    return out


def moe_param_split(model: ModelSpec) -> tuple[float, float]:
    """(shared, routed-expert) parameters of the model, in parameters (not billions).

    With N experts, k per token, total T and active A parameters:
    shared + E = T and shared + E k/N = A, so shared = (A - T k/N) / (1 - k/N).
    A dense model is all shared. Raises ValueError when A < T k/N (impossible shape).
    """
    total = model.total_params_b * 1e9
    active = model.active_params_b * 1e9
    if model.moe is None:
        return total, 0.0
    f = model.moe.experts_per_token / model.moe.experts
    if f >= 1.0:
        return total, 0.0
    shared = (active - total * f) / (1.0 - f)
    if shared < -1e-6 * total:
        raise ValueError(
            f"MoE shape impossible: active_params_b {model.active_params_b} < total_params_b x k/N "
            f"= {model.total_params_b * f:.3g} (billions)"
        )
    shared = max(shared, 0.0)
    return shared, total - shared


def experts_touched_fraction(tokens_per_step: ArrayLike, experts: int, experts_per_token: int) -> NDArray[np.float64]:
    """Expected fraction of a layer's N experts touched by T tokens each routed to k of N.

    With uniform routing a given expert is missed by one token with probability
    1 - k/N, so E[distinct experts]/N = 1 - (1 - k/N)^T (a standard occupancy result).

    Args: tokens_per_step: array (tokens, >= 0). Returns: array in [0, 1].
    """
    t = np.asarray(tokens_per_step, dtype=float)
    f = experts_per_token / experts
    if f >= 1.0:
        return np.ones_like(t)
    return 1.0 - np.power(1.0 - f, t)


def weight_bytes_resident(model: ModelSpec) -> float:
    """Bytes of weights held in HBM: all parameters, all experts (bytes)."""
    return model.total_params_b * 1e9 * model.bytes_per_weight


def weight_bytes_streamed(model: ModelSpec, tokens_per_step: ArrayLike) -> NDArray[np.float64]:
    """Weight bytes one forward step over ``tokens_per_step`` tokens reads from HBM.

    Dense: every weight once. MoE: the shared weights plus the experts the step's
    tokens actually touch (:func:`experts_touched_fraction`) -- at batch 128 on the
    brief's model nearly every expert, at batch 8 well under half.

    Returns: array like ``tokens_per_step`` (bytes).
    """
    shared, experts = moe_param_split(model)
    t = np.asarray(tokens_per_step, dtype=float)
    if model.moe is None or experts == 0.0:
        return np.full_like(t, (shared + experts) * model.bytes_per_weight)
    frac = experts_touched_fraction(t, model.moe.experts, model.moe.experts_per_token)
    return (shared + experts * frac) * model.bytes_per_weight


def mix_moments(tokens: ArrayLike, shares: ArrayLike) -> tuple[float, float, float]:
    """(E[s], E[s^2], p50) of a bucketed length mix (tokens, tokens^2, tokens).

    Planning uses the mean -- queues and fleets bill by the mean, not the median (the
    brief section 2) -- and the quadratic attention term needs E[s^2], not E[s]^2.
    Raises ValueError if shares do not sum to 1 within 1e-6.
    """
    s = np.asarray(tokens, dtype=float)
    w = np.asarray(shares, dtype=float)
    if abs(w.sum() - 1.0) > 1e-6:
        raise ValueError(f"length-mix shares must sum to 1, got {w.sum():.6f}")
    order = np.argsort(s)
    cum = np.cumsum(w[order])
    p50 = float(s[order][np.searchsorted(cum, 0.5 - 1e-12)])
    return float(np.dot(w, s)), float(np.dot(w, s * s)), p50


def blended_kv_bytes(model: ModelSpec, tokens: ArrayLike, shares: ArrayLike, extra_tokens: float = 0.0) -> float:
    """Mean KV bytes per request over a length mix, each request holding ``tokens + extra_tokens``.

    ``extra_tokens`` is the decoded context a resident request carries on average
    (about half its output). Returns bytes (float). Source: the brief section 2
    ("Blended KV per request -- compute it once, use it everywhere").
    """
    s = np.asarray(tokens, dtype=float) + extra_tokens
    w = np.asarray(shares, dtype=float)
    return float(np.dot(w, kv_bytes_per_request(model, s)))


# --------------------------------------------------------------------------- slice


@dataclass(frozen=True)
class SliceSpec:
    """A slice: ``chips`` chips of one type joined by ICI.

    Attributes: chip (name), chips (count), hbm_gb (GB total), hbm_tbps (TB/s total),
    peak_tflops (TFLOP/s total), ici_gbytes_per_s (GB/s per chip).
    """

    chip: str
    chips: int
    hbm_gb: float
    hbm_tbps: float
    peak_tflops: float
    ici_gbytes_per_s: float

    @classmethod
    def of(cls, chip_name: str, chip: ChipType, chips: int) -> "SliceSpec":
        return cls(chip_name, chips, chip.hbm_gb * chips, chip.hbm_tbps * chips, chip.peak_tflops * chips, chip.ici_gbytes_per_s)

    @property
    def label(self) -> str:
        return f"{self.chip}x{self.chips}"


@dataclass(frozen=True)
class MemoryMap:
    """Where a slice's HBM goes (all GB): total = weights + workspace + headroom + kv_pool."""

    total_gb: float
    weights_gb: float
    workspace_gb: float
    headroom_gb: float
    kv_pool_gb: float

    def resident_capacity(self, kv_bytes_per_request: float, paging_slack: float = 0.0) -> int:
        """Requests whose KV fits the page pool, each holding ``kv_bytes_per_request``
        (bytes) plus ``paging_slack`` of it (fraction). 0 when the pool is empty."""
        per = kv_bytes_per_request * (1.0 + paging_slack)
        if self.kv_pool_gb <= 0 or per <= 0:
            return 0
        return int(np.floor(self.kv_pool_gb * GB / per + 1e-9))


def slice_memory_map(model: ModelSpec, sl: SliceSpec, priors: Priors) -> MemoryMap:
    """The slice memory map: weights, workspace, headroom, and what is left for KV pages.

    workspace = hbm_workspace_gb_per_chip x chips; headroom = hbm_headroom_fraction x
    slice HBM; KV pool = the rest (negative when the model does not fit).
    Source: the brief section 2, "Decode-slice memory map".
    """
    weights = weight_bytes_resident(model) / GB
    workspace = priors.hbm_workspace_gb_per_chip * sl.chips
    headroom = priors.hbm_headroom_fraction * sl.hbm_gb
    return MemoryMap(sl.hbm_gb, weights, workspace, headroom, sl.hbm_gb - weights - workspace - headroom)


# --------------------------------------------------------------------------- communication


def moe_remote_copies(model: ModelSpec, chips: int) -> float:
    """Remote chips one token's hidden state goes to in an expert-parallel dispatch (count).

    The N routed experts are spread evenly over the slice's n chips; a token routed to k
    of them touches a given chip with probability 1 - (1 - 1/n)^k (the occupancy result
    of :func:`experts_touched_fraction`, with the chips as the bins), and sends one copy
    to each touched chip other than its own (deduplicated per destination, as DeepEP and
    TPU all-to-all dispatch do): (n - 1) x (1 - (1 - 1/n)^k). 0 for a dense model or one chip.
    """
    if model.moe is None or chips <= 1:
        return 0.0
    touched = float(experts_touched_fraction(model.moe.experts_per_token, chips, 1))
    return (chips - 1) * touched


def step_comm_ms(model: ModelSpec, sl: SliceSpec, priors: Priors, tokens: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(all-reduce ms, all-to-all ms) of one forward pass over ``tokens`` tokens on the slice.

    The slice's n chips hold the model tensor-parallel (Megatron-LM, Shoeybi et al. 2019):
    a dense layer all-reduces its activations twice (after attention's output projection
    and after the MLP), each message tokens x d_model x collective_bytes_per_element. An
    MoE layer all-reduces once (attention) and runs its experts expert-parallel: a
    dispatch and a combine all-to-all, each chip sending its tokens / n tokens'
    :func:`moe_remote_copies` x d_model x bytes (GShard, Lepikhin et al. 2020). Every
    layer of an MoE model is taken as an MoE layer. Collective times from
    :mod:`fleetplan.perf.comm` over the chip's ``ici_gbytes_per_s``. Both are 0 on one chip.

    Args: tokens: array (tokens in the pass, >= 0). Returns: two arrays like ``tokens`` (ms).
    """
    t = np.asarray(tokens, dtype=float)
    n = sl.chips
    if n <= 1:
        z = np.zeros_like(t)
        return z, z.copy()
    msg = t * model.d_model * priors.collective_bytes_per_element
    one = allreduce_ms(msg, n, sl.ici_gbytes_per_s, priors)
    if model.moe is None:
        return 2.0 * model.layers * one, np.zeros_like(t)
    per_chip = t / n * moe_remote_copies(model, n) * model.d_model * priors.collective_bytes_per_element
    a2a = all_to_all_ms(per_chip, n, sl.ici_gbytes_per_s, priors)
    return model.layers * one, 2.0 * model.layers * a2a


def attention_mfu(priors: Priors, phase: str) -> float:
    """The attention kernels' compute efficiency (fraction): attention_mfu, or the phase's
    GEMM MFU (prefill_mfu / decode_mfu) when it is null."""
    if priors.attention_mfu is not None:
        return priors.attention_mfu
    return priors.prefill_mfu if phase == "prefill" else priors.decode_mfu


def attention_bandwidth(sl: SliceSpec, priors: Priors) -> float:
    """Achieved HBM bandwidth of attention's KV traffic (bytes/s)."""
    f = priors.attention_bw_fraction if priors.attention_bw_fraction is not None else priors.hbm_bw_fraction
    return sl.hbm_tbps * TB * f


def layer_overhead_ms(model: ModelSpec, priors: Priors) -> float:
    """layers x layer_overhead_us, in ms: the per-pass fixed cost of the layers' kernels."""
    return model.layers * priors.layer_overhead_us / 1e3


def decode_attention_flops(model: ModelSpec, positions: ArrayLike, kv_bytes_per_request: ArrayLike) -> NDArray[np.float64]:
    """Attention FLOPs of decode positions over their context (FLOP).

    Each query position attends over its request's context: 4 x layers x d_model FLOPs per
    context token (QK^T and AV, 2 d_model each, as in :func:`prefill_flops`, without the
    causal half). The context is the one the KV bytes imply, kv_bytes_per_request /
    :func:`kv_bytes_per_token` (0 when the model keeps no per-token KV).
    """
    per_tok = kv_bytes_per_token(model)
    p = np.asarray(positions, dtype=float)
    kv = np.asarray(kv_bytes_per_request, dtype=float)
    if per_tok <= 0:
        return np.zeros(np.broadcast_shapes(p.shape, kv.shape))
    return 4.0 * model.layers * model.d_model * (kv / per_tok) * p


# --------------------------------------------------------------------------- decode


@dataclass(frozen=True)
class DecodeStep:
    """Decode step times at each batch (arrays of the batch's shape, ms).

    ``step_ms`` = ``gemm_ms`` + ``attention_ms`` + ``allreduce_ms`` + ``all_to_all_ms`` +
    ``overhead_ms``. ``memory_ms`` is the HBM time (weights + KV) and ``compute_ms`` the
    FLOP time (GEMMs + attention); ``gemm_ms`` = max(weight reads, GEMM FLOPs),
    ``attention_ms`` = max(KV reads, attention FLOPs).
    """

    batch: NDArray[np.float64]
    memory_ms: NDArray[np.float64]
    compute_ms: NDArray[np.float64]
    step_ms: NDArray[np.float64]
    gemm_ms: NDArray[np.float64]
    attention_ms: NDArray[np.float64]
    allreduce_ms: NDArray[np.float64]
    all_to_all_ms: NDArray[np.float64]
    overhead_ms: float

    @property
    def tokens_per_s(self) -> NDArray[np.float64]:
        """Output tokens/s of the slice at full occupancy (tokens/s)."""
        return self.batch / (self.step_ms / 1e3)

    @property
    def memory_bound(self) -> NDArray[np.bool_]:
        return self.memory_ms >= self.compute_ms

    @property
    def comm_ms(self) -> NDArray[np.float64]:
        """All-reduce + all-to-all time (ms)."""
        return self.allreduce_ms + self.all_to_all_ms


def decode_step(
    model: ModelSpec,
    sl: SliceSpec,
    priors: Priors,
    batch: ArrayLike,
    kv_bytes_per_request: ArrayLike,
) -> DecodeStep:
    """Decode step time at batch B: GEMMs + attention + collectives + fixed overheads.

      gemm      = max(W(B) / (hbm_tbps x hbm_bw_fraction), 2 A B / (peak x decode_mfu))
      attention = max(B x KV / (hbm_tbps x attention_bw_fraction),
                      :func:`decode_attention_flops` / (peak x attention_mfu))
      comm      = :func:`step_comm_ms` over B tokens (0 on one chip)
      overhead  = decode_step_overhead_ms + layers x layer_overhead_us
    each multiplied by ``decode_time_scale`` (1 as fitted; a physics source's plain range,
    a margin's step-time multiplier).
    W(B) are the weights B tokens stream (:func:`weight_bytes_streamed`); the slack pages
    are not streamed, only the request's own KV. With attention_bw_fraction and
    attention_mfu null (their defaults) attention runs at hbm_bw_fraction and decode_mfu.

    Args:
        batch: array of resident requests per step (>= 0).
        kv_bytes_per_request: mean KV bytes a resident request streams per step (bytes);
            a scalar or an array broadcastable with ``batch``.
    Returns: :class:`DecodeStep` (ms). Source: the brief section 2 ("Decode ceiling",
    "The batching-vs-TPOT curve") for the roofline terms; the module docstring for the rest.
    """
    b = np.asarray(batch, dtype=float)
    kv = np.asarray(kv_bytes_per_request, dtype=float)
    bw = sl.hbm_tbps * TB * priors.hbm_bw_fraction
    w_ms = weight_bytes_streamed(model, b) / bw * 1e3
    kv_ms = b * kv / attention_bandwidth(sl, priors) * 1e3
    peak = sl.peak_tflops * 1e12
    g_comp = 2.0 * model.active_params_b * 1e9 * b / (peak * priors.decode_mfu) * 1e3
    a_comp = decode_attention_flops(model, b, kv) / (peak * attention_mfu(priors, "decode")) * 1e3
    ar, a2a = step_comm_ms(model, sl, priors, b)
    w_ms, kv_ms, g_comp, a_comp, ar, a2a = np.broadcast_arrays(w_ms, kv_ms, g_comp, a_comp, ar, a2a)
    x = priors.decode_time_scale  # every part of the step; x * 1.0 is x, bit for bit
    gemm = np.maximum(w_ms, g_comp) * x
    attn = np.maximum(kv_ms, a_comp) * x
    ar, a2a = ar * x, a2a * x
    over = (priors.decode_step_overhead_ms + layer_overhead_ms(model, priors)) * x
    step = gemm + attn + ar + a2a + over
    return DecodeStep(np.broadcast_to(b, step.shape).astype(float), (w_ms + kv_ms) * x, (g_comp + a_comp) * x, step, gemm, attn,
                      ar.astype(float), a2a.astype(float), over)


def tpot_p99_kv_spread_ms(
    model: ModelSpec,
    sl: SliceSpec,
    priors: Priors,
    batch: ArrayLike,
    kv_mean_bytes: float,
    kv_std_bytes: float,
    percentile: float = 99.0,
) -> NDArray[np.float64]:
    """Step-time percentile from the spread of the residents' KV in the tier.

    The B residents' KV is a sum of B draws from the tier's per-request KV
    distribution: mean B mu, standard deviation sqrt(B) sigma (central limit
    theorem); the step at the sum's percentile bounds the per-request TPOT percentile
    from above (a request's TPOT averages steps). Returns ms, shape of ``batch``.
    """
    from statistics import NormalDist

    b = np.asarray(batch, dtype=float)
    z = NormalDist().inv_cdf(percentile / 100.0)
    kv_tail = kv_mean_bytes + z * kv_std_bytes / np.sqrt(np.maximum(b, 1.0))
    return decode_step(model, sl, priors, b, kv_tail).step_ms


# --------------------------------------------------------------------------- prefill


def prefill_flops(model: ModelSpec, prompt_tokens: ArrayLike, cached_tokens: ArrayLike = 0.0) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(FFN/MoE FLOPs, causal-attention FLOPs) to prefill s tokens of which c are cached.

    FFN term, linear in the new tokens: 2 x active params x (s - c).
    Attention term, the new tokens attending over the whole causal context:
    2 x layers x d_model x (s^2 - c^2) (QK^T and AV, each 2 d per pair, half the
    square by causality). The brief section 2 "Prefill ceiling" gives the c = 0 case.

    Args: prompt_tokens s, cached_tokens c: broadcastable arrays (tokens), 0 <= c <= s.
    Returns: two arrays (FLOP). Raises ValueError if c > s or either is negative.
    """
    s = np.asarray(prompt_tokens, dtype=float)
    c = np.asarray(cached_tokens, dtype=float)
    if np.any(s < 0) or np.any(c < 0) or np.any(c > s + 1e-9):
        raise ValueError("need 0 <= cached_tokens <= prompt_tokens (tokens)")
    ffn = 2.0 * model.active_params_b * 1e9 * (s - c)
    attn = 2.0 * model.layers * model.d_model * (s * s - c * c)
    return ffn, attn


def context_parallel_layout(model: ModelSpec, sl: SliceSpec, priors: Priors) -> tuple[int, int]:
    """(groups, chips per group) of a context-parallel prefill on the slice.

    Each group holds the whole model tensor-parallel, so a group needs t chips with
    weights / t <= chip HBM x (1 - hbm_headroom_fraction) - hbm_workspace_gb_per_chip; t is
    the smallest divisor of the slice's chips that holds the weights, and the slice splits
    into n / t groups that share the prompt's sequence (ring attention, Liu, Zaharia &
    Abbeel 2023). (1, n) when no smaller group holds the weights.
    """
    n = sl.chips
    per_chip = sl.hbm_gb / n * (1.0 - priors.hbm_headroom_fraction) - priors.hbm_workspace_gb_per_chip
    need = weight_bytes_resident(model) / GB
    if per_chip <= 0:
        return 1, n
    for t in range(1, n + 1):
        if n % t == 0 and need <= per_chip * t + 1e-9:
            return n // t, t
    return 1, n


@dataclass(frozen=True)
class PrefillTime:
    """Prefill time of one request on one slice and its parts (arrays broadcast from the
    inputs, ms): ``total_ms`` = ``gemm_ms`` + ``attention_ms`` + ``allreduce_ms`` +
    ``all_to_all_ms`` + ``ring_ms`` + ``overhead_ms``. ``context_parallel`` is the number of
    context-parallel groups the prompt ran on (1: tensor parallel across the slice).
    ``memory_ms`` is the weight-read time and ``compute_ms`` the FLOP time (FFN at
    prefill_mfu + attention at its efficiency); ``gemm_ms`` = max(weight reads, FFN FLOPs)."""

    gemm_ms: NDArray[np.float64]
    attention_ms: NDArray[np.float64]
    allreduce_ms: NDArray[np.float64]
    all_to_all_ms: NDArray[np.float64]
    ring_ms: NDArray[np.float64]
    overhead_ms: float
    total_ms: NDArray[np.float64]
    context_parallel: NDArray[np.int64]
    memory_ms: NDArray[np.float64]
    compute_ms: NDArray[np.float64]

    @property
    def comm_ms(self) -> NDArray[np.float64]:
        """All-reduce + all-to-all + exposed ring passes (ms)."""
        return self.allreduce_ms + self.all_to_all_ms + self.ring_ms


def prefill_breakdown(
    model: ModelSpec, sl: SliceSpec, priors: Priors, prompt_tokens: ArrayLike, cached_tokens: ArrayLike = 0.0
) -> PrefillTime:
    """Prefill of one prompt of s tokens, c of them cached, on one slice, part by part (ms).

    Tensor parallel across the slice (the default):
      gemm      = max(W(s - c) / (hbm_tbps x hbm_bw_fraction), FFN FLOPs / (peak x prefill_mfu))
      attention = attention FLOPs / (peak x attention_mfu)      [:func:`prefill_flops`]
      comm      = :func:`step_comm_ms` over the s - c new tokens
      overhead  = prefill_overhead_ms + layers x layer_overhead_us
    Context parallel, when ``context_parallel_min_tokens`` is set, s - c reaches it and
    the layout is faster than tensor parallel for this prompt (an engine's choice), on
    g groups of t chips (:func:`context_parallel_layout`, g >= 2): every group runs 1/g of
    the new tokens tensor-parallel, so the weights are read g times and each group's
    all-reduces carry (s - c)/g tokens over t chips; attention runs at attention_mfu x
    context_parallel_efficiency; and per layer the KV blocks travel g - 1 steps around the
    ring (pass-KV, Yang et al. MLSys 2025), each block (s/g tokens of that layer's KV, a
    1/t shard per chip) overlapped with one block of attention FLOPs, so only
    max(0, pass - block) is exposed (``ring_ms``).

    Every part is multiplied by ``prefill_time_scale`` (1 as fitted). Compute-bound for
    long prompts; the weight reads bind for short ones. Returns :class:`PrefillTime`.
    Raises ValueError as :func:`prefill_flops`.
    """
    s = np.asarray(prompt_tokens, dtype=float)
    c = np.asarray(cached_tokens, dtype=float)
    ffn, attn = prefill_flops(model, s, c)
    s, c = np.broadcast_arrays(s, c)
    new = s - c
    peak = sl.peak_tflops * 1e12
    bw = sl.hbm_tbps * TB * priors.hbm_bw_fraction
    f_comp = ffn / (peak * priors.prefill_mfu) * 1e3
    a_mfu = attention_mfu(priors, "prefill")
    over = priors.prefill_overhead_ms + layer_overhead_ms(model, priors)
    mem = weight_bytes_streamed(model, new) / bw * 1e3
    gemm = np.maximum(mem, f_comp)
    att = attn / (peak * a_mfu) * 1e3
    ar, a2a = step_comm_ms(model, sl, priors, new)
    ring = np.zeros_like(new)
    cp = np.ones(new.shape, dtype=np.int64)
    thr = priors.context_parallel_min_tokens
    if thr is not None and sl.chips > 1:
        g, t = context_parallel_layout(model, sl, priors)
        use = new >= thr
        if g > 1 and np.any(use):
            grp = SliceSpec(sl.chip, t, sl.hbm_gb * t / sl.chips, sl.hbm_tbps * t / sl.chips, sl.peak_tflops * t / sl.chips,
                            sl.ici_gbytes_per_s)
            mem_cp = g * weight_bytes_streamed(model, new / g) / bw * 1e3
            gemm_cp = np.maximum(mem_cp, f_comp)
            eff = a_mfu * priors.context_parallel_efficiency
            att_cp = attn / (peak * eff) * 1e3
            ar_cp, a2a_cp = step_comm_ms(model, grp, priors, new / g)
            block_bytes = (s / g) * kv_bytes_per_token(model) / model.layers / t
            pass_ms = p2p_ms(block_bytes, sl.ici_gbytes_per_s, priors)
            block_ms = 4.0 * model.d_model * (new / g) * (s / g) / (grp.peak_tflops * 1e12 * eff) * 1e3
            ring_cp = model.layers * (g - 1) * np.maximum(pass_ms - block_ms, 0.0)
            use = use & (gemm_cp + att_cp + ar_cp + a2a_cp + ring_cp < gemm + att + ar + a2a)
            gemm, att = np.where(use, gemm_cp, gemm), np.where(use, att_cp, att)
            ar, a2a, ring = np.where(use, ar_cp, ar), np.where(use, a2a_cp, a2a), np.where(use, ring_cp, ring)
            cp = np.where(use, g, 1).astype(np.int64)
            mem = np.where(use, mem_cp, mem)
    x = priors.prefill_time_scale  # every part of the prefill; x * 1.0 is x, bit for bit
    gemm, att, ar, a2a, ring, over = gemm * x, att * x, ar * x, a2a * x, ring * x, over * x
    total = gemm + att + ar + a2a + ring + over
    return PrefillTime(gemm, att, ar, a2a, ring, over, total, cp, mem * x, f_comp * x + att)


def prefill_time_ms(
    model: ModelSpec, sl: SliceSpec, priors: Priors, prompt_tokens: ArrayLike, cached_tokens: ArrayLike = 0.0
) -> NDArray[np.float64]:
    """Prefill time of one request on one slice (ms): :func:`prefill_breakdown`'s total --
    GEMMs (max of weight reads and FFN FLOPs at prefill_mfu), attention FLOPs at
    attention_mfu, the tensor-parallel all-reduces / MoE all-to-alls, the exposed
    context-parallel ring, and the per-request and per-layer overheads. Returns an array
    broadcast from the inputs (ms)."""
    return prefill_breakdown(model, sl, priors, prompt_tokens, cached_tokens).total_ms


def attention_ffn_crossover_tokens(model: ModelSpec) -> float:
    """Prompt length at which the attention FLOPs equal the FFN FLOPs (tokens):
    2 A s = 2 L d s^2  =>  s = A / (L d). The brief: ~76K for its model."""
    return model.active_params_b * 1e9 / (model.layers * model.d_model)


def sustained_prefill_tokens_per_s(
    model: ModelSpec,
    sl: SliceSpec,
    priors: Priors,
    tokens: ArrayLike,
    shares: ArrayLike,
    hit_rate: float = 0.0,
) -> dict[str, float]:
    """Sustained prefill throughput of one slice, in computed (uncached) tokens/s.

    Returns a dict with
      ``ffn_only``: FFN term alone;
      ``at_mean_length``: as if every prompt had the mix's mean length E[s] (the brief's
      ~160K figure): rate / (2A + 2 L d E[s]);
      ``at_mean_length_all_terms``: a prompt of the mean length with every term of
      :func:`prefill_time_ms` (the tensor-parallel all-reduces, per-layer and per-pass
      overheads, the weight-read floor), no cache;
      ``over_mix``: the expected new tokens over the expected per-request prefill time,
      E[s-c] / E[:func:`prefill_time_ms`(s, c)] with c = hit_rate x s (the FLOPs
      2A(s-c) + 2Ld(s^2-c^2) and every other term of the prefill); the attention term
      needs E[s^2], not E[s]^2, so this is the figure fleet sizing must use.
    ``ffn_only`` and ``at_mean_length`` are FLOP-only figures at prefill_mfu (the brief's).
    Raises ValueError for hit_rate outside [0, 1).
    """
    if not 0.0 <= hit_rate < 1.0:
        raise ValueError("hit_rate must be in [0, 1) (fraction of prompt tokens)")
    s = np.asarray(tokens, dtype=float)
    w = np.asarray(shares, dtype=float)
    rate = sl.peak_tflops * 1e12 * priors.prefill_mfu
    a2 = 2.0 * model.active_params_b * 1e9
    mean_s, _, _ = mix_moments(s, w)
    at_mean = rate / (a2 + 2.0 * model.layers * model.d_model * mean_s)
    new_tokens = (1.0 - hit_rate) * s
    per_req_time = prefill_time_ms(model, sl, priors, s, hit_rate * s) / 1e3
    over_mix = float(np.dot(w, new_tokens) / np.dot(w, per_req_time))
    # every term (collectives, overheads, weight reads, attention) at the mean length, no cache
    full_at_mean = float(mean_s / (float(prefill_time_ms(model, sl, priors, np.array([mean_s]), np.array([0.0]))[0]) / 1e3))
    return {"ffn_only": rate / a2, "at_mean_length": float(at_mean), "at_mean_length_all_terms": full_at_mean, "over_mix": over_mix}


def kv_transfer_ms(kv_bytes: ArrayLike, gbytes_per_s: float) -> NDArray[np.float64]:
    """Time to move ``kv_bytes`` (bytes) at ``gbytes_per_s`` (GB/s = 1e9 bytes/s): ms. The brief section 4."""
    if gbytes_per_s <= 0:
        raise ValueError("bandwidth must be > 0 GB/s")
    return np.asarray(kv_bytes, dtype=float) / (gbytes_per_s * GB) * 1e3
