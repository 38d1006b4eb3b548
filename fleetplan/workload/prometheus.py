"""A running deployment's vLLM metrics over a window, per pool (``fleetplan calibrate --format
prometheus``, ``fleetplan drift``).

Two inputs:

* **text exposition** (a scrape of ``/metrics``, or Prometheus's ``/federate``), parsed with
  ``prometheus_client.parser.text_string_to_metric_families``: two scrapes (``--baseline``
  the earlier one) give every counter and histogram as its increase between them; one
  scrape alone is taken as counting from zero (an engine started at the window's start).
  The window is the scrapes' timestamps apart when every sample carries one (federate
  does), else ``--window`` seconds.
* **range-query JSON** (Prometheus HTTP API ``/api/v1/query_range``: ``{"status":
  "success", "data": {"resultType": "matrix", "result": [{"metric": {...}, "values": [[t,
  "v"], ...]}]}}``), one response or a JSON list of responses (one per query): counters
  and histogram series as their increase over the range (a drop is a counter reset: the
  new value counts from zero, as PromQL's ``increase``), gauges as their mean; the window
  is the series' first to last timestamp unless ``--window`` says otherwise.

Metrics (vLLM's V1 engine, ``vllm/v1/metrics/loggers.py`` of vLLM 0.11-0.12):
``vllm:time_to_first_token_seconds`` (histogram), ``vllm:inter_token_latency_seconds``
(histogram; before 0.11 ``vllm:time_per_output_token_seconds``, read when the new one is
absent), ``vllm:request_time_per_output_token_seconds`` (per-request TPOT, histogram),
``vllm:request_success_total`` (counter, by finished_reason), ``vllm:request_prompt_tokens``
and ``vllm:request_generation_tokens`` (histograms: their sum over count is the mean prompt
and answer), ``vllm:prefix_cache_hits_total`` / ``vllm:prefix_cache_queries_total``
(counters, tokens), ``vllm:num_requests_running`` (gauge, per engine).

Pools: a series belongs to the pool its ``fleetplan_region``, ``fleetplan_tier`` and
``fleetplan_role`` labels name -- the labels fleetplan's Kubernetes export puts on every pod
(``fleetplan/region``, ``/tier``, ``/role``) and its PodMonitor copies onto the engine's
series (:mod:`fleetplan.export.k8s.engines`). Series without them form one unlabelled pool. A pool's
replicas are its distinct ``vllm:num_requests_running`` series (one per engine).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from fleetplan.errors import InputError, Problem, short_repr
from fleetplan.workload.traces import file_sha256

__all__ = ["MetricsError", "Histogram", "PoolMetrics", "POOL_LABELS", "read_metrics", "MAX_METRICS_BYTES", "TTFT", "ITL", "ITL_OLD",
           "TPOT", "RUNNING", "SUCCESS", "no_latency_problem", "PROMPT_TOKENS", "GENERATION_TOKENS", "PREFIX_HITS", "PREFIX_QUERIES", "MIN_SIDE_COUNT"]

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
ITL_OLD = "vllm:time_per_output_token_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"
RUNNING = "vllm:num_requests_running"
SUCCESS = "vllm:request_success_total"
PROMPT_TOKENS = "vllm:request_prompt_tokens"
GENERATION_TOKENS = "vllm:request_generation_tokens"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
_HISTOGRAMS = (TTFT, ITL, ITL_OLD, TPOT, PROMPT_TOKENS, GENERATION_TOKENS)
_COUNTERS = (SUCCESS, PREFIX_HITS, PREFIX_QUERIES)
#: The labels that name a series' pool (fleetplan's Kubernetes export).
POOL_LABELS = ("fleetplan_region", "fleetplan_tier", "fleetplan_role")
#: A histogram bucket boundary is used as a quantile point only with at least this many
#: observations on each side of it (fewer: the empirical fraction is too coarse).
MIN_SIDE_COUNT = 5
MAX_METRICS_BYTES = 256 * 1024 * 1024
_SERIES_LABELS_DROPPED = ("le", "finished_reason")


class MetricsError(InputError):
    """A metrics file is unreadable or inconsistent; problems name the file part and the unit."""

    kind = "metrics"


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram's increase over a window: ``bounds`` (the ``le`` upper bounds,
    ascending, in the metric's unit, the last +inf), ``cumulative`` (observations at or below
    each bound), ``count`` and ``total`` (the sum of the observations)."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    count: float
    total: float

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count > 0 else math.nan

    def quantile(self, q: float) -> tuple[float, float, float]:
        """(value, bucket lower bound, bucket upper bound) at quantile ``q`` in (0, 1), as
        PromQL's ``histogram_quantile`` interpolates it: linearly inside the bucket the rank
        falls in (from 0 in the first bucket); in the +Inf bucket the largest finite bound."""
        rank = q * self.count
        prev_b, prev_c = 0.0, 0.0
        for b, c in zip(self.bounds, self.cumulative):
            if c >= rank and c > prev_c:
                if math.isinf(b):
                    return prev_b, prev_b, b
                return prev_b + (b - prev_b) * (rank - prev_c) / (c - prev_c), prev_b, b
            prev_b, prev_c = b, c
        return prev_b, prev_b, math.inf

    def points(self, min_side: int = MIN_SIDE_COUNT) -> list[tuple[float, float]]:
        """(percentile, bound) of every finite bound with at least ``min_side`` observations
        on each side: the bound is exactly the measured percentile there."""
        out = []
        for b, c in zip(self.bounds, self.cumulative):
            if math.isfinite(b) and b > 0 and c >= min_side and self.count - c >= min_side:
                out.append((100.0 * c / self.count, b))
        return out


@dataclass
class PoolMetrics:
    """One pool's metrics over the window.

    key: (region, tier, role) from :data:`POOL_LABELS`, None for unlabelled series.
    window_s (s); engines (the distinct engine series: replicas); models (model_name
    labels seen); requests (finished requests); histograms by metric name (seconds or
    tokens); prefix_hits / prefix_queries (tokens); running_sum / running_samples (the
    running gauge summed over the engines' values, and how many: :attr:`running_mean`)."""

    key: tuple[str, str, str] | None
    window_s: float = math.nan
    engines: set = field(default_factory=set)
    models: set = field(default_factory=set)
    requests: float = 0.0
    histograms: dict[str, Histogram] = field(default_factory=dict)
    prefix_hits: float = 0.0
    prefix_queries: float = 0.0
    running_sum: float = 0.0
    running_samples: int = 0

    @property
    def name(self) -> str:
        return "/".join(self.key) if self.key else "(unlabelled)"

    @property
    def replicas(self) -> int:
        return len(self.engines)

    @property
    def rate_rps(self) -> float:
        return self.requests / self.window_s

    @property
    def running_mean(self) -> float | None:
        """Mean of the running gauge per engine over the samples (count), None without samples."""
        if not self.running_samples:
            return None
        return self.running_sum / self.running_samples

    @property
    def hit_rate(self) -> float | None:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries > 0 else None

    def mean_tokens(self, metric: str) -> float | None:
        h = self.histograms.get(metric)
        return h.mean if h is not None and h.count > 0 else None


# ----------------------------------------------------------------------------- reading


def _series_key(labels: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in _SERIES_LABELS_DROPPED))


def _pool_of(labels: dict) -> tuple[str, str, str] | None:
    vals = tuple(labels.get(k) for k in POOL_LABELS)
    return vals if all(vals) else None


def _read_text(path: str) -> tuple[dict, bool]:
    """{(sample name, labels tuple incl. le): (value, timestamp or None)} of a text scrape, and
    whether every sample carried a timestamp."""
    from prometheus_client.parser import text_string_to_metric_families

    text = _text(path)
    out: dict = {}
    stamped = True
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if not s.name.startswith("vllm:"):
                    continue
                if not math.isfinite(s.value) or s.value < 0:
                    raise MetricsError(path, [Problem(s.name, "a vLLM counter, gauge or histogram value must be finite and >= 0.",
                                                      short_repr(s.value))])
                out[(s.name, tuple(sorted(s.labels.items())))] = (float(s.value), s.timestamp)
                stamped &= s.timestamp is not None
    except MetricsError:
        raise
    except (ValueError, TypeError, IndexError, KeyError) as e:
        raise MetricsError(path, [Problem("(text)", f"not the Prometheus text exposition format: {e}.")]) from None
    if not out:
        raise MetricsError(path, [Problem("(text)", "no vllm:* sample: a scrape of a vLLM server's /metrics (or /federate) is expected.")])
    return out, stamped


def _text(path: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise MetricsError(path, [Problem("(file)", "no such file (or not a regular file); give a /metrics scrape or a query_range JSON export.")])
    if p.stat().st_size > MAX_METRICS_BYTES:
        raise MetricsError(path, [Problem("(file)", f"file is {p.stat().st_size} bytes; a metrics file is at most {MAX_METRICS_BYTES} bytes.")])
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise MetricsError(path, [Problem("(file)", "not UTF-8 text.")]) from None


def _is_json(text: str) -> bool:
    return text.lstrip()[:1] in ("{", "[")


def _read_range(path: str) -> tuple[dict, float]:
    """{(sample name, labels tuple): value over the range} of a query_range export (counters
    and histogram parts: the increase; gauges: the mean) and the range's length (s)."""
    text = _text(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise MetricsError(path, [Problem("(json)", f"not a JSON document: {e}.")]) from None
    docs = doc if isinstance(doc, list) else [doc]
    out: dict = {}
    t0, t1 = math.inf, -math.inf
    for i, d in enumerate(docs):
        where = f"[{i}]" if isinstance(doc, list) else "(document)"
        data = d.get("data") if isinstance(d, dict) else None
        if not isinstance(data, dict) or d.get("status") not in (None, "success"):
            raise MetricsError(path, [Problem(where, "not a Prometheus query_range response (status success, data.resultType matrix, "
                                                     "data.result).")])
        if data.get("resultType") != "matrix":
            raise MetricsError(path, [Problem(f"{where}.data.resultType", "expected matrix: export a range query (/api/v1/query_range), "
                                                                          "not an instant vector.", short_repr(data.get("resultType")))])
        for j, series in enumerate(data.get("result") or []):
            at = f"{where}.data.result[{j}]"
            labels = dict(series.get("metric") or {}) if isinstance(series, dict) else None
            values = series.get("values") if isinstance(series, dict) else None
            if labels is None or not isinstance(values, list) or not values:
                raise MetricsError(path, [Problem(at, "a series needs metric (labels) and values ([[unix time s, \"value\"], ...]).")])
            name = labels.pop("__name__", None)
            if not name or not str(name).startswith("vllm:"):
                continue
            try:
                pts = sorted((float(t), float(v)) for t, v in values)
            except (TypeError, ValueError):
                raise MetricsError(path, [Problem(f"{at}.values", "each point is [unix time in s, \"value\"].")]) from None
            if any(not math.isfinite(v) or v < 0 for _, v in pts):
                raise MetricsError(path, [Problem(f"{at}.values", "a value is negative or not finite.")])
            t0, t1 = min(t0, pts[0][0]), max(t1, pts[-1][0])
            if _is_cumulative(name):
                inc = 0.0
                for (_, a), (_, b) in zip(pts, pts[1:]):
                    inc += b - a if b >= a else b  # a drop is a reset: the new value counted from zero
                out[(name, tuple(sorted(labels.items())))] = (inc, None)
            else:
                out[(name, tuple(sorted(labels.items())))] = (sum(v for _, v in pts) / len(pts), None)
    if not out:
        raise MetricsError(path, [Problem("(json)", "no vllm:* series in the export.")])
    return out, t1 - t0


def _is_cumulative(name: str) -> bool:
    return name.endswith(("_total", "_bucket", "_count", "_sum"))


def read_metrics(path: str, baseline: str | None = None, window_s: float | None = None) -> tuple[list[PoolMetrics], dict]:
    """The pools' metrics over the window (one :class:`PoolMetrics` per pool label set) and
    the source record ({path, format, sha256, baseline, window_s, window_from}).

    Raises: :class:`MetricsError` for an unreadable file, a file in neither format, a
    baseline with a range export, a window that cannot be known (no ``window_s`` and no
    timestamps), a counter that fell between the scrapes on every series, or no
    finished request in the window."""
    text = _text(path)
    if _is_json(text):
        if baseline is not None:
            raise MetricsError(path, [Problem("--baseline", "a range export holds its own window; --baseline goes with text scrapes.")])
        samples, span = _read_range(path)
        fmt, window, src = "prometheus-range", window_s if window_s is not None else span, "--window" if window_s is not None else "the range"
    else:
        after, stamped = _read_text(path)
        before, stamped0 = ({}, True) if baseline is None else _read_text(baseline)
        fmt = "prometheus-text"
        if window_s is not None:
            window, src = window_s, "--window"
        elif baseline is not None and stamped and stamped0:
            t1 = max(ts for _, ts in after.values())
            t0 = max(ts for _, ts in before.values())
            window, src = t1 - t0, "the scrapes' timestamps"
        else:
            raise MetricsError(path, [Problem("--window", "the window cannot be known: give --window SECONDS (the time between the two "
                                                          "scrapes, or since the engines started for a single scrape).")])
        samples = {}
        changed = fell = 0
        for key, (v, _) in after.items():
            name = key[0]
            if _is_cumulative(name):
                v0 = before.get(key, (0.0, None))[0]
                samples[key] = (v - v0 if v >= v0 else v, None)  # a drop: the engine restarted, counting from zero
                changed += v != v0
                fell += v < v0
            else:
                samples[key] = (v, None)
        if baseline is not None and fell and fell == changed:
            raise MetricsError(path, [Problem("--baseline", f"every counter that changed between the scrapes went down ({fell:,} "
                                                            f"series): is --baseline ({baseline}) the earlier scrape? Give the earlier "
                                                            "one as --baseline and the later as the metrics (an engine restart resets "
                                                            "only its own series).")])
    if not math.isfinite(window) or window <= 0:
        raise MetricsError(path, [Problem("--window", f"the window is {window!r} s; expected > 0 s ({src}).")])
    pools = _pools(samples, float(window), path)
    if not any(p.requests > 0 for p in pools.values()):
        raise MetricsError(path, [Problem(SUCCESS, "no request finished in the window: nothing to measure a load from.")])
    _check_seconds(pools, path)
    source = {"metrics": path, "format": fmt, "sha256": file_sha256(Path(path)), "baseline": baseline,
              "baseline_sha256": file_sha256(Path(baseline)) if baseline else None, "window_s": float(window), "window_from": src}
    return sorted(pools.values(), key=lambda p: (p.key is None, p.key or ())), source


#: The largest plausible mean of a latency histogram (seconds): a mean TTFT of an hour, a mean
#: gap between tokens of 10 s. vLLM records seconds; the same histogram in milliseconds reads
#: 1,000x long (a 300 ms TTFT as 300 s, a 33 ms ITL as 33 s) and lands past these.
PLAUSIBLE_MEAN_S = {TTFT: 3600.0, ITL: 10.0, TPOT: 10.0}


def no_latency_problem(where: str) -> Problem:
    """The problem of metrics without a usable latency histogram: the names expected."""
    return Problem("(histograms)", f"{where} no TTFT, TPOT or ITL histogram with at least {MIN_HISTOGRAM_COUNT} observations: "
                                   f"expected vLLM's {TTFT}, {TPOT} and {ITL} (or {ITL_OLD} before vLLM 0.11), "
                                   "named as vLLM exports them (docs/calibration.md).")


def _check_seconds(pools: dict, path: str) -> None:
    """Refuse (:class:`MetricsError`) latency histograms whose mean over the window is past
    :data:`PLAUSIBLE_MEAN_S`: not seconds (milliseconds in a ``*_seconds`` histogram)."""
    bad = []
    for p in pools.values():
        for h, lim in PLAUSIBLE_MEAN_S.items():
            hist = p.histograms.get(h)
            if hist is None or not (hist.count > 0 and math.isfinite(hist.mean)) or hist.mean <= lim:
                continue
            top = max((b for b in hist.bounds if math.isfinite(b)), default=math.nan)
            bad.append(Problem(h + "_sum", f"pool {p.name}: the mean is {hist.mean:,.4g} s over {hist.count:,.0f} observations "
                                           f"(buckets up to le={top:g}), past the {lim:g} s any engine serves; the series is in "
                                           "seconds (vLLM's unit): a histogram recorded in milliseconds reads 1,000x long. "
                                           "Re-export it in seconds."))
    if bad:
        raise MetricsError(path, bad)


def _pools(samples: dict, window: float, path: str) -> dict:
    """Aggregate the samples per pool: histograms bucket by bucket over the engines, counters
    summed, the running gauge averaged over the engines (each engine's value: its mean over a
    range export, the scrape's instantaneous value of a text scrape)."""
    pools: dict = {}
    buckets: dict = defaultdict(lambda: defaultdict(float))  # (pool, metric) -> le -> count
    sums: dict = defaultdict(float)
    counts: dict = defaultdict(float)

    def pool(labels: dict) -> PoolMetrics:
        k = _pool_of(labels)
        if k not in pools:
            pools[k] = PoolMetrics(k, window)
        return pools[k]

    for (name, lab), (v, _) in samples.items():
        labels = dict(lab)
        pm = pool(labels)
        if "model_name" in labels:
            pm.models.add(labels["model_name"])
        if name == SUCCESS:
            pm.requests += v
        elif name == PREFIX_HITS:
            pm.prefix_hits += v
        elif name == PREFIX_QUERIES:
            pm.prefix_queries += v
        elif name == RUNNING:
            pm.engines.add(_series_key(labels))
            pm.running_sum += v
            pm.running_samples += 1
        else:
            for h in _HISTOGRAMS:
                if name == h + "_bucket" and "le" in labels:
                    try:
                        le = float(labels["le"])
                    except ValueError:
                        raise MetricsError(path, [Problem(name, "a bucket's le label is its upper bound, a number or +Inf.",
                                                          short_repr(labels["le"]))]) from None
                    buckets[(pm.key, h)][le] += v
                elif name == h + "_sum":
                    sums[(pm.key, h)] += v
                elif name == h + "_count":
                    counts[(pm.key, h)] += v
    for (k, h), bk in buckets.items():
        bounds = tuple(sorted(bk))
        cum = tuple(bk[b] for b in bounds)
        if any(b < a - 1e-9 * max(a, 1.0) for a, b in zip(cum, cum[1:])) or math.isnan(bounds[-1]):
            raise MetricsError(path, [Problem(h + "_bucket", f"pool {'/'.join(k) if k else '(unlabelled)'}: the cumulative bucket counts "
                                                             "fall with le over the window (scrapes of different engines, or out of order?).")])
        # the +Inf bucket counts every observation (the _count series says the same; a scrape may lack it)
        total = cum[-1] if math.isinf(bounds[-1]) else max(counts.get((k, h), 0.0), cum[-1])
        pools[k].histograms[h] = Histogram(bounds, cum, total, sums.get((k, h), math.nan))
    for p in pools.values():
        if ITL not in p.histograms and ITL_OLD in p.histograms:  # vLLM before 0.11
            p.histograms[ITL] = p.histograms[ITL_OLD]
    return pools


#: the statistics each role's histograms give (a decode pool's TTFT ran in its prefill pool)
_ROLE_METRICS = {"replica": ("ttft", "tpot", "itl"), "prefill": ("ttft",), "decode": ("tpot", "itl")}
_METRIC_HIST = {"ttft": TTFT, "tpot": TPOT, "itl": ITL}
#: fewest observations a histogram needs before its mean is fitted
MIN_HISTOGRAM_COUNT = 10


def observed_pool(pm: PoolMetrics, role: str, tier: str, slice_label: str, schedule: str | None = None, router: str | None = None,
                  replicas: int | None = None, batch_cap: int | None = None, draft_tokens: int = 0):
    """``pm`` as a :class:`fleetplan.workload.loadfit.ObservedPool` of ``role`` (replica |
    prefill | decode): the rate of finished requests, the measured mean prompt and answer
    (the token histograms' sum over count), the prefix-cache hit rate, the running gauge,
    and the statistics -- per latency histogram of the role its mean (sum over count, exact
    over the window) and every bucket bound with :data:`MIN_SIDE_COUNT` observations on
    each side as a percentile point (the bound is the measured value at that percentile:
    no interpolation inside a bucket); ITL by its mean only. ``replicas`` overrides the
    engine count. Raises ValueError when the pool has no engine series and no ``replicas``."""
    from fleetplan.workload.loadfit import ObservedPool, Quantity

    n = replicas if replicas is not None else pm.replicas
    if n < 1:
        raise ValueError(f"pool {pm.name}: no {RUNNING} series to count its engines by")
    qs, notes = [], []
    for metric in _ROLE_METRICS[role]:
        h = pm.histograms.get(_METRIC_HIST[metric])
        if h is None or h.count < MIN_HISTOGRAM_COUNT:
            notes.append(f"{_METRIC_HIST[metric]}: {'absent' if h is None else f'{h.count:g} observations'}; not fitted.")
            continue
        if math.isfinite(h.mean) and h.mean > 0:
            qs.append(Quantity(metric, "mean", 1e3 * h.mean, f"{_METRIC_HIST[metric]} sum / count ({h.count:g})"))
        if metric != "itl":
            qs += [Quantity(metric, f"p{p:.6g}", 1e3 * b, f"{_METRIC_HIST[metric]} le={b:g} s ({p:.4g}% at or below)") for p, b in h.points()]
    prompt, out = pm.mean_tokens(PROMPT_TOKENS), pm.mean_tokens(GENERATION_TOKENS)
    return ObservedPool(pm.name, role, tier, slice_label, n, pm.rate_rps, tuple(qs), schedule=schedule, router=router,
                        prompt_tokens=prompt, output_tokens=out, hit_rate=pm.hit_rate, batch_cap=batch_cap, draft_tokens=draft_tokens,
                        running=pm.running_mean, notes=tuple(notes))
