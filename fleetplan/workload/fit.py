"""Fit an instance's workload block from a request trace.

One streaming pass over the trace (:mod:`fleetplan.workload.traces`) keeps three numbers
per request (input tokens, output tokens, prefix-cache hit tokens), counts arrivals per
second and per window, and replays prefix blocks through an unbounded cache and LRU
caches of given sizes. From those it derives:

* the input-length mix as buckets (share, mean tokens) whose mean equals the trace's
  mean (each bucket carries its members' mean: the law of total expectation) and whose
  p99 matches the trace's p99 (a bucket is cut around the p99 so that its mean is the
  p99), never straddling a tier boundary (so per-tier request and token shares are the
  trace's own);
* output-length mean and percentiles, the input/output correlation and each tier's mean
  output;
* arrival rate per window, peak-to-mean, the peak window, the inter-arrival coefficient
  of variation and the index of dispersion of counts (burstiness; 1 = Poisson), and a
  24-hour profile when the trace spans at least a day;
* the arrival SCV the queueing takes (``workload.arrival_scv``, :func:`arrival_scv`): the
  index of dispersion of counts at the queue's time scale (1 s by default), inside each
  hour against that hour's own rate -- the hourly profile carries the change from hour to
  hour, so neither the diurnal swing nor a night's silence enters it;
* with prefix block hashes: the token-weighted prefix-cache hit rate, unbounded and for
  LRU caches of given sizes (GB, at the instance's KV bytes per token);
* per-tier shares of requests and of prefill tokens.

Percentiles are inverted-CDF quantiles (the smallest value whose cumulative share
reaches p; numpy's ``method="inverted_cdf"``). The brief's section 2 ("plan on the mean,
not the median") is why the mean and the p50 are printed side by side.
"""

from __future__ import annotations

import math
import warnings
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fleetplan.errors import Problem
from fleetplan.workload.arrivals import (
    SCV_TIMESCALE_S,
    SCV_TIMESCALES_REPORTED_S,
    SCV_WINDOW_S,
    WALL_CLOCK_EPOCH_S,
    ArrivalCounter,
    ArrivalStats,
    arrival_scv,
    interval_scv,
    normalise_hourly,
)
from fleetplan.workload.traces import TraceError, UnreadColumnWarning, file_sha256, gzip_problem, iter_requests, read_servegen

__all__ = [
    "LengthSample",
    "fit_input_mix",
    "Bucket",
    "LengthStats",
    "ArrivalStats",
    "CacheRow",
    "TierStats",
    "WorkloadFit",
    "fit_trace",
    "tier_hit_rate_notes",
    "TIER_HIT_RATE_FLAG",
    "DEFAULT_CACHE_GB",
    "arrival_scv",
    "interval_scv",
    "SCV_WINDOW_S",
    "SCV_TIMESCALE_S",
    "SCV_TIMESCALES_REPORTED_S",
    "WALL_CLOCK_EPOCH_S",
]

DEFAULT_CACHE_GB = (256.0, 1024.0, 4096.0, 16384.0, 65536.0)
#: Largest prefix cache replayed (GB; 1e9 GB = 1 EB).
MAX_CACHE_GB = 1e9
#: Quantile cut points of the bucketed mix (cumulative request share).
MIX_QUANTILES = (0.25, 0.75, 0.9, 0.98, 0.995, 0.999)
#: Quantiles the fitted mix reproduces (a bucket is cut around each so its mean is the quantile).
MIX_TARGETS = (0.5, 0.95, 0.99)


# --------------------------------------------------------------------------- lengths


@dataclass(frozen=True)
class LengthSample:
    """A length distribution as sorted values with weights (a trace: one unit weight per
    request; a histogram: points spread evenly over each bin).

    Attributes: values (n,) tokens ascending; weights (n,) shares summing to 1.
    """

    values: np.ndarray
    weights: np.ndarray

    @classmethod
    def of(cls, values, weights=None) -> "LengthSample":
        v = np.asarray(values, dtype=float)
        w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=float)
        if v.size == 0 or w.sum() <= 0:
            raise ValueError("a length sample needs at least one value of positive weight")
        order = np.argsort(v, kind="stable")
        return cls(v[order], w[order] / w.sum())

    @classmethod
    def from_bins(cls, bins: np.ndarray, points_per_bin: int = 32) -> "LengthSample":
        """Integer bins [lo, hi) with probabilities, each spread uniformly over its
        integers (so a bin's mean is (lo + hi - 1) / 2). ``bins``: (m, 3) lo, hi, p."""
        vals, wts = [], []
        for lo, hi, p in bins:
            if p <= 0:
                continue
            k = int(max(1, min(points_per_bin, hi - lo)))
            vals.append(lo + (hi - 1 - lo) * (np.arange(k) + 0.5) / k)
            wts.append(np.full(k, p / k))
        return cls.of(np.concatenate(vals), np.concatenate(wts))

    @property
    def cum(self) -> np.ndarray:
        return np.cumsum(self.weights)

    def index_of_quantile(self, q: float) -> int:
        """Index of the inverted-CDF quantile: first i with cumulative share >= q."""
        return int(min(np.searchsorted(self.cum, q - 1e-12, side="left"), self.values.size - 1))

    def quantile(self, q: float) -> float:
        return float(self.values[self.index_of_quantile(q)])

    @property
    def mean(self) -> float:
        return float(np.dot(self.weights, self.values))

    @property
    def moment2(self) -> float:
        return float(np.dot(self.weights, self.values ** 2))


class Bucket(BaseModel):
    """One bucket of the fitted mix."""

    model_config = ConfigDict(frozen=True)
    share: float = Field(description="Share of requests (fraction).")
    tokens: int = Field(description="Mean input length of the requests in the bucket (tokens).")
    min_tokens: float = Field(description="Shortest request in the bucket (tokens).")
    max_tokens: float = Field(description="Longest request in the bucket (tokens).")


def _segment_means(v: np.ndarray, w: np.ndarray):
    cw = np.concatenate([[0.0], np.cumsum(w)])
    cwv = np.concatenate([[0.0], np.cumsum(w * v)])

    def mean(a, b):
        return (cwv[b] - cwv[a]) / np.maximum(cw[b] - cw[a], 1e-300)
    return cw, mean


def _band_cut(sample: LengthSample, cuts: list[int], q: float, mean) -> int | None:
    """One more cut inside the segment holding the ``q`` quantile, so that the bucket
    holding it has a mean as close as the data allow to that quantile. A prefix of
    sorted values has a non-decreasing mean, so the cut is found by bisection: first
    by extending from the segment's start, else by raising the start."""
    v = sample.values
    i_t = sample.index_of_quantile(q)
    target = float(v[i_t])
    a = max(c for c in cuts if c <= i_t)
    b = min(c for c in cuts if c > i_t)
    ends = np.arange(i_t + 1, b + 1)
    m_end = mean(a, ends)
    j = int(np.searchsorted(m_end, target - 1e-9, side="left"))
    if j < ends.size:
        cand = [ends[j]] + ([ends[j - 1]] if j > 0 else [])
        return int(min(cand, key=lambda e: abs(mean(a, e) - target)))
    starts = np.arange(a, i_t + 1)
    m_start = mean(starts, b)
    k = min(int(np.searchsorted(m_start, target - 1e-9, side="left")), starts.size - 1)
    cand = [starts[k]] + ([starts[k - 1]] if k > 0 else [])
    return int(min(cand, key=lambda st: abs(mean(st, b) - target)))


def fit_input_mix(sample: LengthSample, tier_max_tokens: list[int | None], quantiles=MIX_QUANTILES, targets=MIX_TARGETS) -> list[Bucket]:
    """Bucket a length distribution: cut at ``quantiles`` and at every tier boundary,
    then, for each of ``targets`` (p50, p95, p99), cut the segment holding that
    quantile so the bucket holding it has (about) the quantile as its mean.

    Each bucket's tokens is its members' weighted mean (rounded to a token), so the
    bucketed mean equals the sample's mean up to rounding and no bucket straddles a tier
    boundary. Buckets with equal rounded tokens are merged. Shares are rounded to 1e-6
    and sum to 1 exactly (the largest absorbs the rounding).

    Returns: buckets ascending by tokens.
    """
    v, w = sample.values, sample.weights
    n = v.size
    cw, mean = _segment_means(v, w)
    cuts = {0, n}
    for q in quantiles:
        cuts.add(sample.index_of_quantile(q) + 1)
    for m in tier_max_tokens:
        if m is not None:
            cuts.add(int(np.searchsorted(v, m, side="right")))
    cuts = sorted(c for c in cuts if 0 <= c <= n)
    for q in targets:
        cuts = sorted(set(cuts) | {_band_cut(sample, cuts, q, mean)})
    merged: dict[int, list[float]] = {}
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        if hi <= lo:
            continue
        share = cw[hi] - cw[lo]
        if share <= 0:
            continue
        tok = max(1, int(round(float(mean(lo, hi)))))
        if tok in merged:
            s0, mn, mx = merged[tok]
            merged[tok] = [s0 + share, min(mn, v[lo]), max(mx, v[hi - 1])]
        else:
            merged[tok] = [share, float(v[lo]), float(v[hi - 1])]
    rows = sorted(merged.items())
    shares = [round(s, 6) for _, (s, _, _) in rows]
    keep = [i for i, s in enumerate(shares) if s > 0]
    if not keep:
        keep = [int(np.argmax([r[1][0] for r in rows]))]
    rows = [rows[i] for i in keep]
    shares = [max(round(rows[i][1][0], 6), 1e-6) for i in range(len(rows))]
    big = int(np.argmax(shares))
    shares[big] = round(1.0 - math.fsum(s for i, s in enumerate(shares) if i != big), 9)
    return [Bucket(share=s, tokens=t, min_tokens=mn, max_tokens=mx) for s, (t, (_, mn, mx)) in zip(shares, rows)]


class LengthStats(BaseModel):
    """Summary of a length distribution (tokens)."""

    mean: float = Field(description="Mean (tokens).")
    p50: float = Field(description="Median (tokens).")
    p95: float = Field(description="95th percentile (tokens).")
    p99: float = Field(description="99th percentile (tokens).")
    max: float = Field(description="Largest (tokens).")
    mean_square: float = Field(description="E[len^2] (tokens^2): the attention FLOPs of prefill go with it, not with E[len]^2.")

    @classmethod
    def of(cls, s: LengthSample) -> "LengthStats":
        return cls(mean=s.mean, p50=s.quantile(0.5), p95=s.quantile(0.95), p99=s.quantile(0.99), max=float(s.values[-1]), mean_square=s.moment2)


def bucket_stats(buckets: list[Bucket]) -> LengthStats:
    """The same summary for a bucketed mix (the inverted-CDF quantiles of the discrete mix)."""
    return LengthStats.of(LengthSample.of([b.tokens for b in buckets], [b.share for b in buckets]))


# --------------------------------------------------------------------------- prefix cache


class CacheRow(BaseModel):
    """Prefix-cache hit rate at one cache size."""

    cache_gb: float | None = Field(description="Cache size (GB); null = unbounded.")
    blocks: int | None = Field(description="Blocks the cache holds (count); null = unbounded.")
    hit_rate_tokens: float = Field(description="Prompt tokens served from cache / prompt tokens (fraction).")
    hit_rate_blocks: float = Field(description="Blocks hit / blocks looked up (fraction).")
    tier_hit_rate_tokens: list[float | None] = Field(default_factory=list, description="The token hit rate within each tier, in tier "
                                                     "order (fraction; null for a tier with no request).")


class _PrefixCaches:
    """Replay of prefix blocks through an unbounded cache and LRU caches.

    A block hits when its id was seen before and every earlier block of the same
    request hit (a prefix cache: KV of a block depends on all tokens before it).
    Token weight of a block: ``block_tokens``, the last one the remainder of the prompt.
    Hits are also counted per tier (the caches are shared by every tier, as one
    region's prefix cache is; a tier's rate is its own prompts' hits over its own
    prompt tokens).
    """

    def __init__(self, block_tokens: int, capacities: list[int], n_tiers: int = 1):
        self.block_tokens = block_tokens
        self.seen: set[int] = set()
        self.lrus = [OrderedDict() for _ in capacities]
        self.caps = capacities
        self.tokens = 0
        self.blocks = 0
        self.hit_tokens = [0] * (1 + len(capacities))
        self.hit_blocks = [0] * (1 + len(capacities))
        self.tier_tokens = [0] * n_tiers
        self.tier_hit_tokens = [[0] * n_tiers for _ in range(1 + len(capacities))]

    def _tokens_of_first(self, k: int, n_blocks: int, input_tokens: int) -> int:
        if k <= 0:
            return 0
        if k < n_blocks:
            return k * self.block_tokens
        return input_tokens

    def add(self, ids: tuple[int, ...], input_tokens: int, tier: int = 0) -> list[int]:
        """Replay one request of tier index ``tier``; returns its hit tokens in every
        cache (the unbounded one first, then the LRU caches in order)."""
        nb = len(ids)
        self.tokens += input_tokens
        self.blocks += nb
        self.tier_tokens[tier] += input_tokens
        k = 0
        while k < nb and ids[k] in self.seen:
            k += 1
        self.seen.update(ids)
        hits = [self._tokens_of_first(k, nb, input_tokens)]
        self.hit_blocks[0] += k
        for j, (lru, cap) in enumerate(zip(self.lrus, self.caps), start=1):
            k = 0
            while k < nb and ids[k] in lru:
                k += 1
            for b in ids:
                if b in lru:
                    lru.move_to_end(b)
                else:
                    lru[b] = None
            while len(lru) > cap:
                lru.popitem(last=False)
            hits.append(self._tokens_of_first(k, nb, input_tokens))
            self.hit_blocks[j] += k
        for j, h in enumerate(hits):
            self.hit_tokens[j] += h
            self.tier_hit_tokens[j][tier] += h
        return hits

    def _tier_rates(self, j: int) -> list[float | None]:
        return [h / n if n > 0 else None for h, n in zip(self.tier_hit_tokens[j], self.tier_tokens)]

    def rows(self, sizes_gb: list[float]) -> list[CacheRow]:
        out = [CacheRow(cache_gb=None, blocks=None, hit_rate_tokens=self.hit_tokens[0] / self.tokens, hit_rate_blocks=self.hit_blocks[0] / self.blocks,
                        tier_hit_rate_tokens=self._tier_rates(0))]
        for j, (gb, cap) in enumerate(zip(sizes_gb, self.caps), start=1):
            out.append(CacheRow(cache_gb=gb, blocks=cap, hit_rate_tokens=self.hit_tokens[j] / self.tokens, hit_rate_blocks=self.hit_blocks[j] / self.blocks,
                                tier_hit_rate_tokens=self._tier_rates(j)))
        return out


# --------------------------------------------------------------------------- tiers and the whole fit


class TierStats(BaseModel):
    """One context-length tier's slice of the trace."""

    name: str = Field(description="Tier name.")
    max_input_tokens: int | None = Field(description="Upper bound (tokens, inclusive); null = unbounded.")
    request_share: float = Field(description="Share of requests (fraction).")
    prefill_token_share: float = Field(description="Share of prompt tokens (fraction).")
    uncached_prefill_token_share: float | None = Field(description="Share of prompt tokens left to compute after cache hits (fraction; at the "
                                                       "cache whose rate is written: unbounded unless --hit-rate-cache-gb); null without hashes.")
    mean_input_tokens: float | None = Field(description="Mean input length (tokens); null for an empty tier.")
    mean_output_tokens: float | None = Field(description="Mean output length (tokens); null for an empty tier or histogram data.")
    hit_rate_tokens: float | None = Field(description="Prefix hit rate within the tier (fraction of the tier's prompt tokens; at the cache "
                                          "whose rate is written: unbounded unless --hit-rate-cache-gb); null without hashes or for an empty tier.")


class WorkloadFit(BaseModel):
    """Everything ``fleetplan workload fit`` measured, and the workload block it proposes."""

    trace: str = Field(description="Trace file as given.")
    format: str = Field(description="Trace format.")
    sha256: str = Field(description="SHA-256 of the trace file.")
    kv_bytes_per_token: float = Field(description="KV bytes per token used to size the caches (bytes), from the instance.")
    block_tokens: int | None = Field(description="Tokens per prefix block (hash traces).")
    input: LengthStats = Field(description="Input lengths of the trace.")
    input_bucketed: LengthStats = Field(description="The same statistics of the fitted bucketed mix.")
    input_mix: list[Bucket] = Field(description="The fitted input-length mix.")
    output: LengthStats = Field(description="Output lengths.")
    input_output_pearson: float | None = Field(description="Pearson correlation of input and output length; null for histogram data.")
    input_output_spearman: float | None = Field(description="Spearman rank correlation of input and output length; null for histogram data.")
    arrivals: ArrivalStats = Field(description="Arrival rate and burstiness.")
    prefix_cache: list[CacheRow] | None = Field(description="Hit rate vs cache size (first row unbounded); null without hashes.")
    tiers: list[TierStats] = Field(description="Per-tier shares.")
    notes: list[str] = Field(default_factory=list, description="Caveats found while fitting.")

    hit_rate_cache_gb: float | None = Field(None, description="The cache size whose hit rate is written as prefix_hit_rate (GB); null = unbounded.")

    def hit_rate_row(self) -> CacheRow | None:
        """The prefix-cache row written into the workload block (None without hashes)."""
        if not self.prefix_cache:
            return None
        return next(r for r in self.prefix_cache if r.cache_gb == self.hit_rate_cache_gb)

    def workload_block(self) -> dict:
        """The instance ``workload`` fields this fit sets: input_mix, output_tokens,
        arrival_scv (when measurable; 4 significant digits) and,
        with hashes, prefix_hit_rate (the unbounded cache's, an upper bound, unless a
        cache size was chosen) and each tier's own rate at the same cache as
        ``tiers: [{max_input_tokens, prefix_hit_rate}]`` (an overlay matches them to the
        instance's tiers by bound: :func:`fleetplan.instance.io.apply_overlay_block`).
        Rates are rounded to 4 decimals and capped at 0.9999 (the schema wants < 1)."""
        out: dict = {"input_mix": [{"share": b.share, "tokens": b.tokens} for b in self.input_mix],
                     "output_tokens": round(self.output.mean, 1)}
        if self.arrivals.arrival_scv is not None and self.arrivals.arrival_scv > 0:
            out["arrival_scv"] = float(f"{min(self.arrivals.arrival_scv, 1e4):.4g}")
        row = self.hit_rate_row()
        if row is not None:
            out["prefix_hit_rate"] = _rate(row.hit_rate_tokens)
            tiers = [{"max_input_tokens": t.max_input_tokens, "prefix_hit_rate": _rate(t.hit_rate_tokens)}
                     for t in self.tiers if t.hit_rate_tokens is not None]
            if tiers:
                out["tiers"] = tiers
        return out


def _rate(x: float) -> float:
    return round(min(x, 0.9999), 4)


#: A tier's own hit rate is flagged when it moves the tier's uncached prompt tokens (its
#: prefill work, proportional to 1 - hit rate) by more than this fraction against the
#: pooled rate.
TIER_HIT_RATE_FLAG = 0.05


def tier_hit_rate_notes(pooled: float, tiers: list[TierStats]) -> list[str]:
    """Notes for the tiers whose own hit rate differs materially from the pooled one:
    (1 - tier) / (1 - pooled) - 1, the change in the tier's prefill work, beyond
    :data:`TIER_HIT_RATE_FLAG`."""
    out = []
    for t in tiers:
        if t.hit_rate_tokens is None or pooled >= 1:
            continue
        work = (1 - t.hit_rate_tokens) / (1 - pooled) - 1
        if abs(work) > TIER_HIT_RATE_FLAG:
            out.append(f"tier {t.name}: prefix hit rate {t.hit_rate_tokens:.1%} against {pooled:.1%} pooled over all tiers, so its prefill "
                       f"computes {abs(work):.0%} {'more' if work > 0 else 'fewer'} prompt tokens than the pooled rate says: the workload "
                       "block carries each tier's own rate (workload.tiers[].prefix_hit_rate); an instance given only the pooled rate "
                       f"would {'under' if work > 0 else 'over'}-size this tier's prefill.")
    return out


def _tier_names(tier_max_tokens: list[int | None], names: list[str] | None) -> list[str]:
    if names is not None:
        return names
    return [f"up-to-{m}" if m is not None else "unbounded" for m in tier_max_tokens]


def _check_tiers(tier_max_tokens: list[int | None]) -> None:
    finite = [m for m in tier_max_tokens[:-1]]
    if any(m is None for m in finite) or tier_max_tokens[-1] is not None or any(b <= a for a, b in zip(finite, finite[1:])) or any(m <= 0 for m in finite):
        raise TraceError("--tiers", [Problem("--tiers", "tier bounds must be ascending positive token counts; the last tier is unbounded.",
                                             str(tier_max_tokens))])


def fit_trace(
    path: str | Path,
    fmt: str,
    tier_max_tokens: list[int | None],
    kv_bytes_per_token: float,
    window_s: float = 60.0,
    cache_gb: tuple[float, ...] = DEFAULT_CACHE_GB,
    block_tokens: int = 512,
    tier_names: list[str] | None = None,
    progress: Callable[[int], None] | None = None,
    hit_rate_cache_gb: float | None = None,
    scv_timescale_s: float = SCV_TIMESCALE_S,
) -> WorkloadFit:
    """Fit a workload from a trace file.

    Args:
        path: the trace. fmt: 'azure', 'mooncake', 'csv' or 'servegen'.
        tier_max_tokens: tier upper bounds (tokens), ascending, the last None (unbounded).
        kv_bytes_per_token: KV bytes per token of the served model (bytes), to turn cache
            sizes in GB into blocks.
        window_s: rate window (seconds; a multiple of 600 for servegen).
        cache_gb: LRU cache sizes to replay (GB = 1e9 bytes).
        block_tokens: tokens per prefix block (Mooncake: 512).
        tier_names: names of the tiers (default from the bounds).
        progress: called with the number of requests read, every 20,000.
        hit_rate_cache_gb: write the hit rate of an LRU cache of this size (GB; added to
            ``cache_gb``) instead of the unbounded cache's.
        scv_timescale_s: the bin of the arrival SCV's counts (seconds, :func:`arrival_scv`).
    Returns: :class:`WorkloadFit`.
    Raises: TraceError naming the line of any malformed record, or bad arguments.
    """
    p = Path(path)
    _check_tiers(tier_max_tokens)
    if not (window_s > 0 and math.isfinite(window_s)):
        raise TraceError("--window", [Problem("--window", "the rate window must be a positive number of seconds.", str(window_s))])
    if not 0 < block_tokens <= 1_000_000:
        raise TraceError("--block-tokens", [Problem("--block-tokens", "tokens per prefix block must be between 1 and 1,000,000.", str(block_tokens))])
    block_bytes = kv_bytes_per_token * block_tokens
    if hit_rate_cache_gb is not None:
        if not (math.isfinite(hit_rate_cache_gb) and block_bytes <= hit_rate_cache_gb * 1e9 <= MAX_CACHE_GB * 1e9):
            raise TraceError("--hit-rate-cache-gb", [Problem("--hit-rate-cache-gb", f"the cache must hold at least one block "
                                                             f"({block_bytes / 1e9:.3g} GB) and at most {MAX_CACHE_GB:,.0f} GB.", f"{hit_rate_cache_gb:g}")])
        cache_gb = tuple(sorted(set(cache_gb) | {float(hit_rate_cache_gb)}))
    for g in cache_gb:
        if not (math.isfinite(g) and block_bytes <= g * 1e9 <= MAX_CACHE_GB * 1e9):
            raise TraceError("--cache-gb", [Problem("--cache-gb", f"a cache must hold at least one block ({block_bytes / 1e9:.3g} GB: "
                                                    f"{block_tokens} tokens x {kv_bytes_per_token:,.0f} bytes) and at most {MAX_CACHE_GB:,.0f} GB.",
                                                    f"{g:g}")])
    if not (scv_timescale_s > 0 and scv_timescale_s <= SCV_WINDOW_S / 2):
        raise TraceError("--scv-timescale", [Problem("--scv-timescale", f"the arrival SCV's time scale must be > 0 and at most {SCV_WINDOW_S / 2:g} "
                                                     "seconds (two bins in an hour).", f"{scv_timescale_s:g}")])
    names = _tier_names(tier_max_tokens, tier_names)
    if fmt == "servegen":
        return _fit_servegen(p, tier_max_tokens, names, kv_bytes_per_token, window_s)
    caps = [max(1, int(g * 1e9 // block_bytes)) for g in cache_gb]
    written = 0 if hit_rate_cache_gb is None else 1 + list(cache_gb).index(float(hit_rate_cache_gb))  # the cache whose rate is written
    arr = ArrivalCounter(window_s, scv_timescale_s)
    caches: _PrefixCaches | None = None
    inputs, outputs, hits = array("q"), array("q"), array("q")
    with_hash = None
    with warnings.catch_warnings(record=True) as caught:  # columns the trace has that are not read: named in the notes
        warnings.simplefilter("always", UnreadColumnWarning)
        for req in iter_requests(p, fmt, block_tokens):
            has = req.hash_ids is not None
            if with_hash is None:
                with_hash = has
                if has:
                    caches = _PrefixCaches(block_tokens, caps, len(tier_max_tokens))
            elif has != with_hash:
                raise gzip_problem(p, req.line) or TraceError(str(p), [Problem(f"line {req.line}, hash_ids", "some requests carry prefix block ids and "
                                                                               "others do not; give them for every request or for none.")])
            arr.add(req.t_s)
            inputs.append(req.input_tokens)
            outputs.append(req.output_tokens)
            hits.append(caches.add(req.hash_ids, req.input_tokens, _tier_of(req.input_tokens, tier_max_tokens))[written] if caches is not None else 0)
            if progress is not None and arr.n % 20000 == 0:
                progress(arr.n)
    inp = np.frombuffer(inputs, dtype=np.int64).astype(float)
    out = np.frombuffer(outputs, dtype=np.int64).astype(float)
    if out.sum() <= 0:
        raise TraceError(str(p), [Problem("output tokens", f"every one of the {out.size:,} requests has 0 output tokens: the trace carries no "
                                          "output lengths, and an instance needs a mean output > 0 (tokens).")])
    hit = np.frombuffer(hits, dtype=np.int64).astype(float)
    s_in, s_out = LengthSample.of(inp), LengthSample.of(out)
    arrivals, notes = arr.stats()
    notes += [str(w.message) for w in caught if issubclass(w.category, UnreadColumnWarning)]
    for w in caught:  # any other warning goes on as it came
        if not issubclass(w.category, UnreadColumnWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    mix = fit_input_mix(s_in, tier_max_tokens)
    pearson = spearman = None
    if inp.size >= 3 and inp.std() > 0 and out.std() > 0:
        from scipy.stats import spearmanr

        pearson = float(np.corrcoef(inp, out)[0, 1])
        spearman = float(spearmanr(inp, out).statistic)
    tiers = _tier_stats(inp, out, hit if caches is not None else None, tier_max_tokens, names)
    if caches is not None and max(caps) >= len(caches.seen):
        notes.append(f"the largest cache ({max(cache_gb):g} GB) holds every distinct block of the trace: its hit rate equals the unbounded one.")
    if caches is not None:
        notes += tier_hit_rate_notes(caches.hit_tokens[written] / caches.tokens, tiers)
    return WorkloadFit(
        trace=str(path), format=fmt, sha256=file_sha256(p), kv_bytes_per_token=kv_bytes_per_token,
        block_tokens=block_tokens if caches is not None else None,
        input=LengthStats.of(s_in), input_bucketed=bucket_stats(mix), input_mix=mix, output=LengthStats.of(s_out),
        input_output_pearson=pearson, input_output_spearman=spearman, arrivals=arrivals,
        prefix_cache=caches.rows(list(cache_gb)) if caches is not None else None, tiers=tiers, notes=notes + _mix_notes(s_in, mix),
        hit_rate_cache_gb=float(hit_rate_cache_gb) if (hit_rate_cache_gb is not None and caches is not None) else None)


def _tier_of(tokens: int, bounds: list[int | None]) -> int:
    """Index of the tier holding a prompt of ``tokens`` (bounds inclusive, the last unbounded)."""
    return next(i for i, m in enumerate(bounds) if m is None or tokens <= m)


def _tier_stats(inp: np.ndarray, out: np.ndarray | None, hit: np.ndarray | None, bounds: list[int | None], names: list[str],
                weights: np.ndarray | None = None) -> list[TierStats]:
    w = np.ones_like(inp) if weights is None else weights
    total_w, total_tok = w.sum(), np.dot(w, inp)
    uncached_total = np.dot(w, inp - hit) if hit is not None else None
    rows, lo = [], 0.0
    for name, m in zip(names, bounds):
        hi = math.inf if m is None else m
        sel = (inp > lo) & (inp <= hi)
        lo = hi
        ws = w[sel]
        tok = float(np.dot(ws, inp[sel]))
        rows.append(TierStats(
            name=name, max_input_tokens=m, request_share=float(ws.sum() / total_w), prefill_token_share=tok / total_tok,
            uncached_prefill_token_share=float(np.dot(ws, inp[sel] - hit[sel]) / uncached_total) if hit is not None and uncached_total > 0 else None,
            mean_input_tokens=tok / ws.sum() if ws.sum() > 0 else None,
            mean_output_tokens=float(np.dot(ws, out[sel]) / ws.sum()) if out is not None and ws.sum() > 0 else None,
            hit_rate_tokens=float(hit[sel].sum() / inp[sel].sum()) if hit is not None and sel.any() else None))
    return rows


def _mix_notes(s: LengthSample, mix: list[Bucket]) -> list[str]:
    b = bucket_stats(mix)
    notes = []
    gap = abs(b.p99 - s.quantile(0.99)) / s.quantile(0.99)
    if gap > 0.02:
        notes.append(f"the bucketed p99 ({b.p99:,.0f} tokens) is {gap:.1%} from the trace's ({s.quantile(0.99):,.0f}): a tier boundary "
                     "or ties near the p99 leave no finer cut.")
    r2 = b.mean_square / s.moment2
    if abs(r2 - 1) > 0.02:
        notes.append(f"the bucketed mix has E[len^2] {r2:.1%} of the trace's: the attention term of prefill is "
                     f"{'under' if r2 < 1 else 'over'}-stated by about that much for prompts longer than the attention/FFN crossover.")
    return notes


def _fit_servegen(p: Path, bounds: list[int | None], names: list[str], kv_bytes_per_token: float, window_s: float) -> WorkloadFit:
    sg = read_servegen(p)
    k = window_s / sg.window_s
    if k < 1 or abs(k - round(k)) > 1e-9:
        raise TraceError("--window", [Problem("--window", f"servegen rates come in {sg.window_s:g} s windows; --window must be a multiple of it.", f"{window_s:g}")])
    k = int(round(k))
    s_in, s_out = LengthSample.from_bins(sg.input_bins), LengthSample.from_bins(sg.output_bins)
    mix = fit_input_mix(s_in, bounds)
    gap = sg.rate_rps <= 0  # a 600 s window with no request from any client is a collection gap (data README)
    rates = np.where(gap, np.nan, sg.rate_rps)
    nw = rates.size // k
    if nw < 1:
        raise TraceError("--window", [Problem("--window", f"the trace has {rates.size} windows of {sg.window_s:g} s; --window must be at most its span.", f"{window_s:g}")])
    if gap.all():
        raise TraceError(str(p), [Problem("total_rate_rps", "every window has rate 0: no traffic to fit (requests/s).")])
    blocks = rates[: nw * k].reshape(nw, k)
    have = np.isfinite(blocks).sum(axis=1)
    win_all = np.where(have > 0, np.where(np.isfinite(blocks), blocks, 0.0).sum(axis=1) / np.maximum(have, 1), np.nan)
    keep = np.flatnonzero(np.isfinite(win_all))
    win = win_all[keep]
    span = float(sg.window_start_s[-1] + sg.window_s - sg.window_start_s[0])
    mean_rps = float(np.nanmean(rates))
    notes = ["servegen is aggregated (600 s window rates, length histograms): no per-request trace, so no input/output correlation, no "
             "index of dispersion and no prefix hashes; the input/output statistics treat each histogram bin as uniform.",
             "ServeGen's absolute rates may be rescaled by its authors: trust the shape (peak-to-mean, the daily profile, CV) more than the level."]
    if gap.any():
        notes.append(f"{int(gap.sum())} of the {gap.size} windows have no request from any client (collection gaps): left out of the "
                     "mean, the peak-to-mean and the daily profile.")
    hourly = None
    if span >= 86400:
        tot, cnt = np.zeros(24), np.zeros(24)
        for t, r in zip(sg.window_start_s, rates):
            if not np.isfinite(r):
                continue
            h = int(((t - sg.window_start_s[0] + sg.window_s / 2) // 3600) % 24)
            tot[h] += r
            cnt[h] += 1
        hourly = normalise_hourly(tot, cnt)
    j = int(np.argmax(win))
    ok = ~gap
    cv = float(np.dot(sg.rate_rps[ok], sg.cv[ok]) / sg.rate_rps[ok].sum()) if sg.rate_rps[ok].sum() > 0 else None
    scv = float(np.dot(sg.rate_rps[ok], sg.cv[ok] ** 2) / sg.rate_rps[ok].sum()) if sg.rate_rps[ok].sum() > 0 else None
    if scv is not None:
        notes.append(f"servegen carries no timestamps: arrival_scv is the rate-weighted mean of the 600 s windows' inter-arrival CV^2 "
                     f"({scv:.3g}; the stationary-interval estimate), not the index of dispersion of counts the per-request traces give.")
    arrivals = ArrivalStats(
        requests=int(round(float(np.nansum(rates) * sg.window_s))), span_s=span, mean_rps=mean_rps, window_s=window_s, windows=int(win.size),
        window_rps_p50=float(np.quantile(win, 0.5, method="inverted_cdf")), window_rps_p95=float(np.quantile(win, 0.95, method="inverted_cdf")),
        peak_rps=float(win[j]), peak_window_start_s=float(keep[j] * window_s),
        peak_to_mean=float(win[j] / mean_rps) if mean_rps > 0 else float("nan"),
        inter_arrival_cv=cv, dispersion_1s=None, dispersion_window=None, zero_gap_share=None,
        arrival_scv=scv, scv_timescale_s=None, interval_scv_within_hour=scv,
        hourly_load=hourly, hourly_basis="hours from the trace's time origin" if hourly else None, window_rps=[round(float(x), 6) for x in win])
    tiers = _tier_stats(s_in.values, None, None, bounds, names, weights=s_in.weights)
    return WorkloadFit(
        trace=str(p), format="servegen", sha256=file_sha256(p), kv_bytes_per_token=kv_bytes_per_token, block_tokens=None,
        input=LengthStats.of(s_in), input_bucketed=bucket_stats(mix), input_mix=mix, output=LengthStats.of(s_out),
        input_output_pearson=None, input_output_spearman=None, arrivals=arrivals, prefix_cache=None, tiers=tiers,
        notes=notes + _mix_notes(s_in, mix))
