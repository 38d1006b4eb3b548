"""Serving metrics from per-request token timestamps: TTFT, TPOT, ITL, goodput.

Definitions (the field's, and the ones the instance's SLOs name):
  TTFT  time from arrival to the first output token;
  TPOT  per-request mean time per output token after the first:
        (t_last - t_first) / (n_tokens - 1), undefined for one-token answers;
  ITL   every gap between consecutive tokens of a request (its p99 and max show the
        stalls TPOT averages away);
  goodput  share of requests that meet every SLO.
Percentiles use linear interpolation between order statistics (numpy's default,
Hyndman & Fan type 7). Times in seconds in, milliseconds out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["RequestMetrics", "request_metrics", "percentile", "weighted_percentile", "goodput"]


def percentile(values: ArrayLike, p: float) -> float:
    """The p-th percentile (0..100) by linear interpolation; nan for an empty input."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return float("nan")
    if not 0.0 <= p <= 100.0:
        raise ValueError("percentile must be in [0, 100]")
    return float(np.percentile(v, p, method="linear"))


def weighted_percentile(values: ArrayLike, weights: ArrayLike, p: float) -> float:
    """The p-th percentile (0..100) of ``values`` each counted ``weights`` times: the
    smallest value whose cumulative weight reaches p% of the total (the inverted-CDF
    definition, Hyndman & Fan type 1, which for integer weights equals that percentile of
    the expanded sample). nan when the total weight is 0. Weights must be >= 0."""
    v = np.asarray(values, dtype=float)
    w = np.asarray(weights, dtype=float)
    if v.shape != w.shape:
        raise ValueError("values and weights must have the same shape")
    if not 0.0 <= p <= 100.0:
        raise ValueError("percentile must be in [0, 100]")
    if np.any(w < 0):
        raise ValueError("weights must be >= 0")
    keep = (w > 0) & ~np.isnan(v)
    v, w = v[keep], w[keep]
    if v.size == 0:
        return float("nan")
    order = np.argsort(v, kind="stable")
    cum = np.cumsum(w[order])
    i = int(np.searchsorted(cum, p / 100.0 * cum[-1] * (1 - 1e-12), side="left"))
    return float(v[order][min(i, v.size - 1)])


@dataclass(frozen=True)
class RequestMetrics:
    """Per-request metrics (arrays of length n_requests, ms) and all ITL gaps (ms).

    ``itl_weights`` (optional, like ``itl_ms``): how many gaps each ``itl_ms`` entry
    stands for, when the gaps are kept compressed (a simulator's decode step is one gap
    for every resident it serves); None means each entry is one gap."""

    ttft_ms: NDArray[np.float64]
    tpot_ms: NDArray[np.float64]  # nan for requests with fewer than 2 tokens
    itl_ms: NDArray[np.float64]  # concatenated gaps of all requests
    itl_max_ms: NDArray[np.float64]  # per request, nan for < 2 tokens
    itl_weights: NDArray[np.float64] | None = None

    def itl_percentile_ms(self, p: float) -> float:
        """ITL percentile over every gap (ms): linear interpolation, or the inverted-CDF
        definition when the gaps carry weights."""
        if self.itl_weights is None:
            return percentile(self.itl_ms, p)
        return weighted_percentile(self.itl_ms, self.itl_weights, p)


def request_metrics(arrival_s: ArrayLike, token_times_s: Sequence[ArrayLike]) -> RequestMetrics:
    """Compute TTFT, TPOT and ITL from token timestamps.

    Args:
        arrival_s: array (n,) of arrival times (s).
        token_times_s: n arrays, each the non-decreasing emission times (s) of one
            request's output tokens (at least one token each).
    Returns: :class:`RequestMetrics` (ms).
    Raises: ValueError on length mismatch, a request with no token, a token before its
        arrival or decreasing timestamps.
    """
    arr = np.asarray(arrival_s, dtype=float)
    if arr.ndim != 1 or len(token_times_s) != arr.size:
        raise ValueError("arrival_s must be 1-D with one entry per request")
    n = arr.size
    ttft = np.empty(n)
    tpot = np.full(n, np.nan)
    itl_max = np.full(n, np.nan)
    gaps = []
    for i, tt in enumerate(token_times_s):
        t = np.asarray(tt, dtype=float)
        if t.size == 0:
            raise ValueError(f"request {i} has no output token")
        if t[0] < arr[i] - 1e-12:
            raise ValueError(f"request {i}: first token before arrival")
        d = np.diff(t)
        if np.any(d < -1e-12):
            raise ValueError(f"request {i}: token timestamps decrease")
        ttft[i] = (t[0] - arr[i]) * 1e3
        if t.size > 1:
            tpot[i] = (t[-1] - t[0]) / (t.size - 1) * 1e3
            itl_max[i] = d.max() * 1e3
            gaps.append(d * 1e3)
    itl = np.concatenate(gaps) if gaps else np.empty(0)
    return RequestMetrics(ttft, tpot, itl, itl_max)


def goodput(m: RequestMetrics, ttft_limit_ms: float | None = None, tpot_limit_ms: float | None = None, itl_limit_ms: float | None = None) -> float:
    """Share of requests meeting every given per-request limit (ms): TTFT, TPOT (one-token
    answers pass TPOT) and the request's largest ITL gap. Returns a fraction in [0, 1]
    (nan for no requests)."""
    n = m.ttft_ms.size
    if n == 0:
        return float("nan")
    ok = np.ones(n, dtype=bool)
    if ttft_limit_ms is not None:
        ok &= m.ttft_ms <= ttft_limit_ms
    if tpot_limit_ms is not None:
        ok &= np.isnan(m.tpot_ms) | (m.tpot_ms <= tpot_limit_ms)
    if itl_limit_ms is not None:
        ok &= np.isnan(m.itl_max_ms) | (m.itl_max_ms <= itl_limit_ms)
    return float(ok.mean())
