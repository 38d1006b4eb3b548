r"""Prefix-cache re-warm after a failover: how fast the hit-rate dip closes.

A survivor's prefix cache holds ``cache_tokens`` tokens of KV. When a region is lost,
the diverted users arrive with no cached prefixes and their prompts are computed in
full: ``cold_tokens_per_s`` tokens/s of new KV are written into the cache, evicting warm
entries (the brief, section 5: "during re-warm, the flood of cold prefills evicts warm
entries, so blended hit dips below 40% -- call it ~30%"). The dip closes as the cache is
rewritten with the entries the new traffic mix reuses. We model the closing as
first-order with the time it takes the cold traffic to write one cache's worth of KV:

.. math::

   \tau = C / M, \qquad
   h(t) = h_{steady} - (h_{steady} - h_{0})\, e^{-t/\tau}

with C the cache size (tokens), M the cold (uncached) prompt tokens/s of the diverted
traffic, h_0 the transient blended hit rate and h_steady the post-failover steady value.
The re-warm is *done* when the hit rate is within ``tolerance`` (1 percentage point by
default) of the steady value: :math:`t_{done} = \tau \ln((h_{steady} - h_0)/\mathit{tol})`.

Source: the brief, section 5 ("at ~30M+ tok/s of cold traffic per survivor, the prefix
caches repopulate in single-digit minutes, and demand decays from x2.6 toward x2.25").
The first-order form is our modelling choice (one cache turnover closes 63% of the dip);
it is a prior to be replaced by a measured re-warm curve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Rewarm", "rewarm", "cache_tokens"]


@dataclass(frozen=True)
class Rewarm:
    """Re-warm of one survivor (s, tokens, fractions).

    Attributes: tau_s: time constant (s). done_s: time until the hit rate is within the
    tolerance of steady (s; 0 when there is no dip). hit_transient, hit_steady: blended
    hit rates (fraction). cache_tokens: cache size (tokens). cold_tokens_per_s: M.
    """

    tau_s: float
    done_s: float
    hit_transient: float
    hit_steady: float
    cache_tokens: float
    cold_tokens_per_s: float

    def hit_at(self, t_s: float | np.ndarray) -> np.ndarray:
        """Blended hit rate at time ``t_s`` after the loss (fraction)."""
        t = np.asarray(t_s, dtype=float)
        if self.tau_s <= 0 or not math.isfinite(self.tau_s):
            return np.full_like(t, self.hit_steady if self.tau_s <= 0 else self.hit_transient)
        return self.hit_steady - (self.hit_steady - self.hit_transient) * np.exp(-t / self.tau_s)


def cache_tokens(cache_gb: float, kv_bytes_per_token: float) -> float:
    """Tokens of KV a cache of ``cache_gb`` GB holds. Raises ValueError for a non-positive KV size."""
    if kv_bytes_per_token <= 0:
        raise ValueError("kv_bytes_per_token must be positive (bytes)")
    return cache_gb * 1e9 / kv_bytes_per_token


def rewarm(cache_tok: float, cold_tokens_per_s: float, hit_transient: float, hit_steady: float, tolerance: float = 0.01) -> Rewarm:
    """Time constant and duration of the re-warm (see the module docstring).

    Args: cache_tok (tokens, > 0); cold_tokens_per_s (tokens/s, >= 0); hit rates
    (fractions); tolerance (fraction, > 0).
    Returns: :class:`Rewarm`; ``tau_s`` is inf when no cold traffic arrives but a dip exists.
    Raises: ValueError for a non-positive cache or tolerance.
    """
    if cache_tok <= 0:
        raise ValueError("cache_tokens must be positive")
    if tolerance <= 0:
        raise ValueError("tolerance must be positive (fraction)")
    dip = hit_steady - hit_transient
    if dip <= tolerance:
        return Rewarm(0.0, 0.0, hit_transient, hit_steady, cache_tok, cold_tokens_per_s)
    if cold_tokens_per_s <= 0:
        return Rewarm(math.inf, math.inf, hit_transient, hit_steady, cache_tok, cold_tokens_per_s)
    tau = cache_tok / cold_tokens_per_s
    return Rewarm(tau, tau * math.log(dip / tolerance), hit_transient, hit_steady, cache_tok, cold_tokens_per_s)
