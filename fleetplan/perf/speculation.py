"""Speculative-decoding economics: tokens per verify step, the longer verify step,
effective TPOT, per-slot efficiency, and the batch above which speculation stops paying.

Acceptance ``alpha`` is the *acceptance rate*: mean accepted draft tokens divided by
draft tokens proposed (the metric vLLM reports). With that definition a verify step
yields exactly alpha k + 1 tokens per request on average (k drafts, plus the token the
target model samples itself). The rate depends on k: with a per-token acceptance
probability a (Leviathan et al., ICML 2023: drafts are accepted until the first
rejection) E[tokens per verify step] = 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a), so
alpha(k) = (a - a^(k+1)) / ((1 - a) k) falls with k. An instance says which it gives
(``workload.classes.*.spec_acceptance_kind`` and ``spec_acceptance_at_k``);
:func:`class_token_probability` and :func:`class_acceptance_rate` turn it into a and
alpha(k) (:func:`acceptance_rate_from_token_probability` and its inverse).

Source: the brief section 5, "Speculative decoding under load -- the actual crossover
math"; the verify step adds the extra verify FLOPs (80 GFLOP x B x k on the brief's
model) on top of the plain step, and k sequential draft steps.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fleetplan.perf.inputs import ModelSpec, Priors
from fleetplan.perf.roofline import (
    TB,
    SliceSpec,
    attention_bandwidth,
    attention_mfu,
    decode_attention_flops,
    decode_step,
    kv_bytes_per_token,
    layer_overhead_ms,
    step_comm_ms,
    weight_bytes_streamed,
)

__all__ = [
    "tokens_per_verify_step",
    "per_slot_efficiency",
    "acceptance_rate_from_token_probability",
    "token_probability_from_acceptance_rate",
    "accepted_drafts_pmf",
    "expected_tokens_per_step",
    "class_token_probability",
    "class_acceptance_rate",
    "steps_cv",
    "VerifyStep",
    "verify_step",
    "effective_tpot_ms",
    "switch_off_batch",
    "StepKernel",
]


def tokens_per_verify_step(alpha: ArrayLike, k: int) -> NDArray[np.float64]:
    """Tokens a request gains per verify step: alpha k + 1 (tokens). alpha in [0, 1], k >= 1."""
    a = np.asarray(alpha, dtype=float)
    if np.any(a < 0) or np.any(a > 1) or k < 1:
        raise ValueError("need 0 <= alpha <= 1 (fraction) and draft length k >= 1 (tokens)")
    return a * k + 1.0


def per_slot_efficiency(alpha: ArrayLike, k: int) -> NDArray[np.float64]:
    """Useful share of the k + 1 token-slots a speculating request uses per step: (alpha k + 1)/(k + 1).
    alpha = 0.8, k = 4 gives 0.84; alpha = 0.3 gives 0.44 (the brief section 5)."""
    return tokens_per_verify_step(alpha, k) / (k + 1.0)


def acceptance_rate_from_token_probability(p: ArrayLike, k: int) -> NDArray[np.float64]:
    """Acceptance rate alpha from a per-token acceptance probability p (drafts stop at the
    first rejection): E[accepted] = p + p^2 + ... + p^k, alpha = E[accepted] / k."""
    pp = np.asarray(p, dtype=float)
    if np.any(pp < 0) or np.any(pp > 1) or k < 1:
        raise ValueError("need 0 <= p <= 1 and k >= 1")
    acc = np.array([np.sum(np.power(x, np.arange(1, k + 1))) for x in np.atleast_1d(pp)]).reshape(np.shape(pp))
    return acc / k


def token_probability_from_acceptance_rate(alpha: float, k: int) -> float:
    """Per-token acceptance probability p whose acceptance rate (drafts stopping at the
    first rejection) is ``alpha``: the inverse of
    :func:`acceptance_rate_from_token_probability`, (p + p^2 + ... + p^k) / k = alpha.

    Args: alpha: acceptance rate in [0, 1] (fraction); k: draft length (>= 1).
    Returns: p in [0, 1] (bisection to 1e-12; the rate is increasing in p).
    Raises: ValueError outside those ranges. Source: Leviathan, Kalman & Matias, "Fast
    inference from transformers via speculative decoding", ICML 2023, section 3.

    Memoised per (alpha, k) for the process: the bisection's 60 numpy steps take ~0.35 ms,
    and the decode tables, the extraction's decode points and the margins ask the same few
    classes' values thousands of times (2,021 times in a solve of the generated 10-region
    instance, ~0.7 s of CPU).
    """
    if not 0.0 <= alpha <= 1.0 or k < 1:
        raise ValueError("need 0 <= alpha <= 1 (fraction) and draft length k >= 1 (tokens)")
    return _token_probability(float(alpha), int(k))


@functools.lru_cache(maxsize=4096)
def _token_probability(alpha: float, k: int) -> float:
    """:func:`token_probability_from_acceptance_rate`'s bisection (arguments checked)."""
    lo, hi = 0.0, 1.0
    powers = np.arange(1, k + 1)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if float(np.sum(np.power(mid, powers))) / k < alpha:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def expected_tokens_per_step(a: ArrayLike, k: int) -> NDArray[np.float64]:
    """E[tokens per verify step] for per-token acceptance probability a and draft length k:
    1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a), k + 1 at a = 1 (tokens). Leviathan, Kalman
    & Matias, ICML 2023, eq. (1). Raises ValueError outside 0 <= a <= 1, k >= 0."""
    aa = np.asarray(a, dtype=float)
    if np.any(aa < 0) or np.any(aa > 1) or k < 0:
        raise ValueError("need 0 <= a <= 1 (per-token acceptance probability) and k >= 0 (tokens)")
    with np.errstate(divide="ignore", invalid="ignore"):
        geo = (1.0 - np.power(aa, k + 1)) / (1.0 - aa)
    return np.where(aa < 1.0, geo, k + 1.0)


def class_token_probability(value: float, kind: str, at_k: int | None, k: int) -> float:
    """A class's per-token acceptance probability a at draft length k, from the instance's
    number (``spec_acceptance``) and what it is (``spec_acceptance_kind``,
    ``spec_acceptance_at_k``): 'per_token' is a itself; a 'rate' measured at K is the a whose
    rate at K it is (:func:`token_probability_from_acceptance_rate`), the same for every k;
    a rate with no K is taken to hold at every k (the a then depends on k -- the reading
    that overstates longer drafts, kept for instances that do not say)."""
    if kind == "per_token":
        return float(value)
    return token_probability_from_acceptance_rate(float(value), int(at_k) if at_k is not None else int(k))


def class_acceptance_rate(value: float, kind: str, at_k: int | None, k: int) -> float:
    """A class's acceptance rate alpha(k) at draft length k (fraction): the instance's rate
    itself when it was measured at this k or names no k, else (a + ... + a^k) / k with a from
    :func:`class_token_probability`. k = 0: the number as given."""
    if k <= 0 or (kind == "rate" and (at_k is None or at_k == k)):
        return float(value)
    return float(acceptance_rate_from_token_probability(class_token_probability(value, kind, at_k, k), k))


def accepted_drafts_pmf(p: float, k: int) -> NDArray[np.float64]:
    """Distribution of the drafts a verify step accepts for one request, (k + 1,) over
    0 .. k: P(A = a) = p^a (1 - p) for a < k and P(A = k) = p^k (acceptance stops at the
    first rejected draft; Leviathan et al. 2023). Its mean is k x the acceptance rate."""
    if not 0.0 <= p <= 1.0 or k < 1:
        raise ValueError("need 0 <= p <= 1 and k >= 1")
    a = np.arange(k + 1)
    pmf = np.power(p, a) * (1.0 - p)
    pmf[k] = p**k
    return pmf


def steps_cv(alpha: float, k: int, tokens: float) -> float:
    """Coefficient of variation of the verify steps a request needs to produce ``tokens``
    tokens when each step yields 1 + A of them, A the accepted drafts
    (:func:`accepted_drafts_pmf` at the acceptance rate ``alpha``): by the renewal central
    limit theorem N has mean tokens / mu and variance tokens x sigma^2 / mu^3 (mu, sigma^2
    the mean and variance of 1 + A), so CV = sqrt(sigma^2 / (mu x tokens)). 0 when
    nothing is drafted (k = 0 or alpha in {0, 1}: one outcome only). Source: Cox,
    *Renewal Theory* (1962), section 6.3. A request's TPOT is proportional to N, so its
    percentiles spread by this CV even when every step takes the same time.
    """
    if k <= 0 or tokens <= 0:
        return 0.0
    p = token_probability_from_acceptance_rate(alpha, k)
    pmf = accepted_drafts_pmf(p, k)
    a = np.arange(k + 1)
    mu = 1.0 + float(np.dot(pmf, a))
    var = float(np.dot(pmf, a * a)) - (mu - 1.0) ** 2
    return float(np.sqrt(max(var, 0.0) / (mu * tokens)))


@dataclass(frozen=True)
class VerifyStep:
    """One speculative step over a batch (arrays broadcast from the batch, ms).

    ``plain_ms`` is the step over all positions without the extra verify FLOPs -- GEMMs
    (max of the weights streamed for the positions and the residents' FLOPs), attention
    (the residents' KV plus the draft KV writes, or its FLOPs over every position),
    collectives over every position, overheads; ``extra_verify_ms`` the verify FLOPs of
    the draft positions; ``draft_ms`` the k sequential draft steps; ``step_ms`` their sum.
    """

    batch: NDArray[np.float64]
    plain_ms: NDArray[np.float64]
    extra_verify_ms: NDArray[np.float64]
    draft_ms: float
    step_ms: NDArray[np.float64]


def verify_step(
    model: ModelSpec,
    sl: SliceSpec,
    priors: Priors,
    batch: ArrayLike,
    kv_bytes_per_request: ArrayLike,
    k: int,
    speculating_share: float = 1.0,
    draft_step_ms: float = 0.0,
) -> VerifyStep:
    """Time of a verify step at batch B where ``speculating_share`` s of residents draft k tokens.

    With P = B (1 + s k) positions:
      plain = max(W(P) / (hbm x hbm_bw_fraction), 2 A B / (peak x decode_mfu))
              + max((B x KV + s B k x KV per token) / (hbm x attention_bw_fraction),
                    attention FLOPs of the P positions / (peak x attention_mfu))
              + :func:`roofline.step_comm_ms` over P tokens + the overheads of :func:`roofline.decode_step`
      step  = plain + 2 A s B k / (peak x decode_mfu) [extra verify FLOPs]
              + k x draft_step_ms [the draft model runs k steps in sequence]
    each part multiplied by ``decode_time_scale`` (the draft steps too: they are decode
    steps of the draft model on the same engine). At s = 0 ``plain_ms`` is
    :func:`roofline.decode_step`'s step.

    Args:
        batch: residents per step (array). kv_bytes_per_request: mean KV streamed per
        resident (bytes). k: draft length (tokens). speculating_share: fraction of
        residents speculating. draft_step_ms: one draft step (ms).
    Returns: :class:`VerifyStep` (ms).
    """
    if not 0.0 <= speculating_share <= 1.0 or k < 1:
        raise ValueError("need 0 <= speculating_share <= 1 and k >= 1")
    b = np.asarray(batch, dtype=float)
    kv = np.asarray(kv_bytes_per_request, dtype=float)
    positions = b * (1.0 + speculating_share * k)
    base = decode_step(model, sl, priors, b, kv)
    bw = sl.hbm_tbps * TB * priors.hbm_bw_fraction
    peak = sl.peak_tflops * 1e12
    w_ms = weight_bytes_streamed(model, positions) / bw * 1e3
    g_comp = 2.0 * model.active_params_b * 1e9 * b / (peak * priors.decode_mfu) * 1e3
    kv_ms = (b * kv + b * speculating_share * k * kv_bytes_per_token(model)) / attention_bandwidth(sl, priors) * 1e3
    a_comp = decode_attention_flops(model, positions, kv) / (peak * attention_mfu(priors, "decode")) * 1e3
    ar, a2a = step_comm_ms(model, sl, priors, positions)
    x = priors.decode_time_scale  # base.overhead_ms carries it already
    plain = (np.maximum(w_ms, g_comp) + np.maximum(kv_ms, a_comp) + ar + a2a) * x + base.overhead_ms
    extra = 2.0 * model.active_params_b * 1e9 * b * speculating_share * k / (peak * priors.decode_mfu) * 1e3 * x
    draft = k * draft_step_ms * x if speculating_share > 0 else 0.0
    return VerifyStep(b, plain, extra, draft, plain + extra + draft)


def effective_tpot_ms(step_ms: ArrayLike, alpha: ArrayLike, k: int) -> NDArray[np.float64]:
    """Effective time per output token of a speculating request: step / (alpha k + 1) (ms)."""
    return np.asarray(step_ms, dtype=float) / tokens_per_verify_step(alpha, k)


def switch_off_batch(
    model: ModelSpec,
    sl: SliceSpec,
    priors: Priors,
    kv_bytes_per_request: float,
    k: int,
    alpha: float,
    draft_step_ms: float,
    max_batch: int = 4096,
) -> int | None:
    """The batch from which speculation no longer raises the slice's tokens/s.

    Compares B (alpha k + 1) / verify_step(B) with B / decode_step(B) for B = 1 ..
    ``max_batch`` and returns the smallest B such that speculation does not pay at B
    or at any larger batch. Returns None when it still pays at ``max_batch``, and 1
    when it pays at no batch at all. (On an MoE slice speculation can also fail to pay
    at very small batches, where the drafts touch experts the plain step would not.)
    """
    b = np.arange(1, max_batch + 1, dtype=float)
    plain = decode_step(model, sl, priors, b, kv_bytes_per_request).step_ms
    spec = verify_step(model, sl, priors, b, kv_bytes_per_request, k, 1.0, draft_step_ms).step_ms
    pays = tokens_per_verify_step(alpha, k) * plain / spec > 1.0
    idx = np.nonzero(pays)[0]
    if idx.size == 0:
        return 1
    last = int(idx[-1])
    return None if last == b.size - 1 else int(b[last + 1])


@dataclass(frozen=True)
class StepKernel:
    """One decode slice's step time for the residents it actually holds: the scalar form
    of :func:`roofline.decode_step` and :func:`verify_step`, for a simulator that prices
    every step (millions of them) with the residents' own KV instead of a tier mean.

    With b residents of which s draft k tokens each and K bytes of KV among them:
      positions  P = b + s k
      gemm       max(W(P) / (hbm_tbps x hbm_bw_fraction), 2 A b / (peak x decode_mfu))
      attention  max((K + s k x KV bytes per token) / (hbm_tbps x attention_bw_fraction),
                     4 L d (K / KV bytes per token)(1 + s k / b) / (peak x attention_mfu))
      step       (gemm + attention + comm(P) + overhead + 2 A s k / (peak x decode_mfu) + k x draft_step_ms [s > 0])
                 x decode_time_scale
    where W(P) is :func:`roofline.weight_bytes_streamed` and comm(P)
    :func:`roofline.step_comm_ms` for P tokens, both tabulated over P. This is exactly
    :func:`verify_step` with speculating_share = s / b and KV per request K / b, and
    :func:`roofline.decode_step` when s = 0 (a test holds the three together).

    Build with :meth:`of`; :meth:`step_ms` takes plain ints and floats (ms out).
    """

    weights_bytes: NDArray[np.float64]  # (max_positions + 1,) W(P), bytes
    comm_ms: NDArray[np.float64]  # (max_positions + 1,) all-reduce + all-to-all of P tokens, ms
    bytes_per_ms: float  # achieved HBM bandwidth of the weight reads, bytes per ms
    kv_bytes_per_ms: float  # achieved HBM bandwidth of the KV traffic, bytes per ms
    compute_ms_per_token: float  # 2 A / (peak x decode_mfu), ms per position
    attention_ms_per_kv_byte: float  # 4 L d / (KV bytes per token x peak x attention_mfu), ms per (KV byte x position)
    kv_bytes_per_token: float
    draft_tokens: int
    draft_step_ms: float
    overhead_ms: float
    scale: float = 1.0  # decode_time_scale: multiplies the whole step

    @classmethod
    def of(cls, model: ModelSpec, sl: SliceSpec, priors: Priors, max_residents: int, draft_tokens: int = 0, draft_step_ms: float = 0.0) -> "StepKernel":
        """Kernel for up to ``max_residents`` residents, each drafting ``draft_tokens`` (0 = off)."""
        if max_residents < 1 or draft_tokens < 0:
            raise ValueError("need max_residents >= 1 and draft_tokens >= 0")
        positions = np.arange(max_residents * (1 + draft_tokens) + 1, dtype=float)
        ar, a2a = step_comm_ms(model, sl, priors, positions)
        peak = sl.peak_tflops * 1e12
        kvpt = kv_bytes_per_token(model)
        per_kv_byte = float(decode_attention_flops(model, 1.0, 1.0)) / (peak * attention_mfu(priors, "decode")) * 1e3
        return cls(
            weights_bytes=weight_bytes_streamed(model, positions),
            comm_ms=ar + a2a,
            bytes_per_ms=sl.hbm_tbps * TB * priors.hbm_bw_fraction / 1e3,
            kv_bytes_per_ms=attention_bandwidth(sl, priors) / 1e3,
            compute_ms_per_token=2.0 * model.active_params_b * 1e9 / (peak * priors.decode_mfu) * 1e3,
            attention_ms_per_kv_byte=per_kv_byte,
            kv_bytes_per_token=kvpt,
            draft_tokens=draft_tokens,
            draft_step_ms=draft_step_ms,
            overhead_ms=priors.decode_step_overhead_ms + layer_overhead_ms(model, priors),
            scale=priors.decode_time_scale,
        )

    def step_ms(self, residents: int, speculating: int, kv_bytes: float) -> float:
        """Step time (ms) for ``residents`` requests holding ``kv_bytes`` of KV, of which
        ``speculating`` draft ``draft_tokens`` each this step."""
        drafts = speculating * self.draft_tokens
        pos = residents + drafts
        w = self.weights_bytes[pos] / self.bytes_per_ms
        comp = self.compute_ms_per_token * residents
        kv = (kv_bytes + drafts * self.kv_bytes_per_token) / self.kv_bytes_per_ms
        att = self.attention_ms_per_kv_byte * kv_bytes * (pos / residents if residents else 1.0)
        step = (w if w > comp else comp) + (kv if kv > att else att) + self.comm_ms[pos] + self.overhead_ms
        if drafts:
            step += self.compute_ms_per_token * drafts + self.draft_tokens * self.draft_step_ms
        return float(step * self.scale)
