"""Roofline performance model of one serving slice: bytes, memory map, decode steps, prefill.

Pure functions of the instance's model, chip and priors; numpy-vectorised over batch
sizes and prompt lengths. Units: bytes, GB (1e9 bytes), TB/s (1e12 bytes/s), FLOP,
milliseconds, tokens. Sources: the brief (``shared/seeds/000_...txt``) section 2
"Capacity Math First" for every formula unless another source is named; the roofline
model itself is Williams, Waterman & Patterson, CACM 2009.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fleetplan.instance.schema import ChipType, GQAAttention, HybridAttention, MLAAttention, ModelSpec, Priors

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
    "DecodeStep",
    "decode_step",
    "tpot_p99_kv_spread_ms",
    "prefill_flops",
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
    if isinstance(a, GQAAttention):
        return 2.0 * model.layers * a.kv_heads * a.head_dim * b
    if isinstance(a, MLAAttention):
        return float(model.layers * (a.kv_latent_rank + a.rope_dim) * b)
    if isinstance(a, HybridAttention):
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
    if isinstance(a, HybridAttention):
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


# --------------------------------------------------------------------------- decode


@dataclass(frozen=True)
class DecodeStep:
    """Decode step times at each batch (arrays of the batch's shape, ms)."""

    batch: NDArray[np.float64]
    memory_ms: NDArray[np.float64]
    compute_ms: NDArray[np.float64]
    step_ms: NDArray[np.float64]

    @property
    def tokens_per_s(self) -> NDArray[np.float64]:
        """Output tokens/s of the slice at full occupancy (tokens/s)."""
        return self.batch / (self.step_ms / 1e3)

    @property
    def memory_bound(self) -> NDArray[np.bool_]:
        return self.memory_ms >= self.compute_ms


def decode_step(
    model: ModelSpec,
    sl: SliceSpec,
    priors: Priors,
    batch: ArrayLike,
    kv_bytes_per_request: ArrayLike,
) -> DecodeStep:
    """Decode step time at batch B: max(memory time, compute time) + fixed overhead.

    memory = (weights streamed for B tokens + B x KV bytes per resident request) /
    (hbm_tbps x hbm_bw_fraction); compute = 2 x active params x B / (peak_tflops x
    decode_mfu). The slack pages are not streamed, only the request's own KV.

    Args:
        batch: array of resident requests per step (>= 0).
        kv_bytes_per_request: mean KV bytes a resident request streams per step (bytes);
            a scalar or an array broadcastable with ``batch``.
    Returns: :class:`DecodeStep` (ms). Source: the brief section 2 ("Decode ceiling",
    "The batching-vs-TPOT curve").
    """
    b = np.asarray(batch, dtype=float)
    kv = np.asarray(kv_bytes_per_request, dtype=float)
    bw = sl.hbm_tbps * TB * priors.hbm_bw_fraction
    mem = (weight_bytes_streamed(model, b) + b * kv) / bw * 1e3
    flops = sl.peak_tflops * 1e12 * priors.decode_mfu
    comp = 2.0 * model.active_params_b * 1e9 * b / flops * 1e3
    mem, comp = np.broadcast_arrays(mem, comp)
    step = np.maximum(mem, comp) + priors.decode_step_overhead_ms
    return DecodeStep(np.broadcast_to(b, step.shape).astype(float), mem, comp, step)


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


def prefill_time_ms(
    model: ModelSpec, sl: SliceSpec, priors: Priors, prompt_tokens: ArrayLike, cached_tokens: ArrayLike = 0.0
) -> NDArray[np.float64]:
    """Prefill compute time on one slice (ms): (FFN + attention FLOPs) / (peak x prefill_mfu) + overhead.

    Compute-bound; the slice's chips run the prompt together (tensor / context
    parallel). Returns an array broadcast from the inputs (ms).
    """
    ffn, attn = prefill_flops(model, prompt_tokens, cached_tokens)
    rate = sl.peak_tflops * 1e12 * priors.prefill_mfu
    return (ffn + attn) / rate * 1e3 + priors.prefill_overhead_ms


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
      ``over_mix``: the expectation over the mix of per-request FLOPs divided by the
      expected new tokens, E[2A(s-c) + 2Ld(s^2-c^2)] / E[s-c] with c = hit_rate x s; the
      attention term needs E[s^2], not E[s]^2, so this is the figure fleet sizing must use.
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
    ffn, attn = prefill_flops(model, s, hit_rate * s)
    new_tokens = (1.0 - hit_rate) * s
    per_req_time = (ffn + attn) / rate + priors.prefill_overhead_ms / 1e3
    over_mix = float(np.dot(w, new_tokens) / np.dot(w, per_req_time))
    return {"ffn_only": rate / a2, "at_mean_length": float(at_mean), "over_mix": over_mix}


def kv_transfer_ms(kv_bytes: ArrayLike, gbytes_per_s: float) -> NDArray[np.float64]:
    """Time to move ``kv_bytes`` (bytes) at ``gbytes_per_s`` (GB/s = 1e9 bytes/s): ms. The brief section 4."""
    if gbytes_per_s <= 0:
        raise ValueError("bandwidth must be > 0 GB/s")
    return np.asarray(kv_bytes, dtype=float) / (gbytes_per_s * GB) * 1e3
