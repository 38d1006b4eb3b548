"""What a deployment's vLLM metrics and a serving benchmark's result would read if fleetplan's
model were exact: the synthetic inputs of the calibration and drift tests and of
``benchmarks/calibration_fixtures.py``, made by the same pool models the fits use
(:class:`fleetplan.workload.loadfit.PoolModel`) at chosen priors.

Histograms: each bucket's count is the number of requests (or token gaps) the model puts
at or below its bound -- the model's quantile function on a 0.25% grid of percentiles
(0.25 to 99.25, then 99.6 ... 99.999), inverted by linear interpolation in -ln(1 - p) -- and the sum is
the count times the model's mean (:data:`fleetplan.workload.loadfit.MEAN_GRID`). The
buckets are vLLM's own (``vllm/v1/metrics/loggers.py``). Writers: the text exposition by
``prometheus_client`` (a collector of metric families, ``generate_latest``), a
``query_range`` matrix as Prometheus's HTTP API returns it, and a ``vllm bench serve``
result.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from fleetplan.instance.schema import Instance, Priors
from fleetplan.workload.loadfit import MEAN_GRID, ObservedPool, PoolModel
from fleetplan.workload.prometheus import (
    GENERATION_TOKENS, ITL, POOL_LABELS, PREFIX_HITS, PREFIX_QUERIES, PROMPT_TOKENS, RUNNING, SUCCESS, TPOT, TTFT, Histogram,
)

__all__ = ["TTFT_BUCKETS_S", "TOKEN_GAP_BUCKETS_S", "EngineMetrics", "expected_engines", "pool_labels", "exposition", "range_export",
           "bench_result"]

#: vLLM's TTFT buckets (s) and its ITL / per-request TPOT buckets (s), vllm/v1/metrics/loggers.py (0.11-0.12)
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0,
                  640.0, 2560.0)
TOKEN_GAP_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_GRID = tuple(float(p) for p in np.arange(0.25, 99.5, 0.25)) + (99.6, 99.7, 99.8, 99.9, 99.95, 99.99, 99.999)
_ROLE = {"replica": ("ttft", "tpot", "itl"), "prefill": ("ttft",), "decode": ("tpot", "itl")}


def _tokens_buckets(max_len: int = 8192) -> tuple[float, ...]:
    """vLLM's 1-2-5 buckets of the token-count histograms, up to ``max_len`` (the engine's
    max_model_len; 8,192 is Llama-3-70B's)."""
    out, e = [], 0
    while True:
        for m in (1, 2, 5):
            if m * 10**e > max_len:
                return tuple(float(x) for x in out)
            out.append(m * 10**e)
        e += 1


@dataclass(frozen=True)
class EngineMetrics:
    """One engine's counters and histograms over a window (what a pair of scrapes differ by):
    labels (the series' labels), requests, histograms by metric name, prefix hits and
    queries (tokens), running (the gauge, requests)."""

    labels: dict
    requests: int
    histograms: dict[str, Histogram]
    prefix_hits: float
    prefix_queries: float
    running: float


def _histogram(quantiles_ms: dict[float, float], mean_ms: float, bounds_s: tuple[float, ...], count: int) -> Histogram:
    """Counts at ``bounds_s`` from the quantile function ``quantiles_ms`` (percentile -> ms),
    inverted by linear interpolation in -ln(1 - p) (exact for an exponential tail, which the
    queue waits have), and the sum ``count`` x ``mean_ms``."""
    ps = np.array(sorted(quantiles_ms))
    qs = np.maximum.accumulate(np.array([quantiles_ms[p] for p in ps]))
    zs = -np.log1p(-ps / 100.0)
    cum = []
    for b in bounds_s:
        z = float(np.interp(b * 1e3, qs, zs, left=0.0, right=np.inf)) if qs[-1] > qs[0] else (np.inf if b * 1e3 >= qs[0] else 0.0)
        f = 0.0 if b * 1e3 < qs[0] else -math.expm1(-z)
        cum.append(float(round(count * f)))
    return Histogram(bounds_s + (math.inf,), tuple(cum) + (float(count),), float(count), count * mean_ms / 1e3)


def expected_engines(inst: Instance, pool: ObservedPool, priors: Priors, window_s: float, labels: dict | None = None) -> list[EngineMetrics]:
    """The metrics each of ``pool.replicas`` engines would expose over ``window_s`` seconds if
    the pool ran at ``pool.rate_rps`` with step times by ``priors`` (``pool.quantities`` is not
    read). Every engine gets the same share of requests, ``round(rate / replicas x window)``;
    its series carry ``labels`` plus ``pod`` and ``engine``."""
    model = PoolModel(inst, pool)
    metrics = _ROLE[pool.role]
    stats = [(m, f"p{p:g}") for m in metrics for p in _GRID] + [(m, "mean") for m in metrics]
    pred = model.predict(priors, stats)
    if not pred.stable:
        raise ValueError(f"pool {pool.name} is unstable at these priors and load: {pred.reason}")
    n_req = int(round(pool.rate_rps / pool.replicas * window_s))
    o = model.tm.output_tokens
    out = []
    for i in range(pool.replicas):
        hs = {}
        for m in metrics:
            q = {p: pred.stats[(m, f"p{p:g}")] for p in _GRID}
            name, bounds = {"ttft": (TTFT, TTFT_BUCKETS_S), "tpot": (TPOT, TOKEN_GAP_BUCKETS_S), "itl": (ITL, TOKEN_GAP_BUCKETS_S)}[m]
            count = n_req * int(round(o - 1)) if m == "itl" else n_req
            hs[name] = _histogram(q, pred.stats[(m, "mean")], bounds, count)
        tb = _tokens_buckets()
        tok = model.tm.tokens
        cum = tuple(float(round(n_req * float(np.sum(model.tm.shares[tok <= b])))) for b in tb)
        hs[PROMPT_TOKENS] = Histogram(tb + (math.inf,), cum + (float(n_req),), float(n_req), n_req * model.tm.mean_tokens)
        hs[GENERATION_TOKENS] = Histogram(tb + (math.inf,), tuple(float(n_req) if b >= o else 0.0 for b in tb) + (float(n_req),),
                                          float(n_req), n_req * o)
        queries = n_req * model.tm.mean_tokens
        out.append(EngineMetrics({**(labels or {}), "pod": f"{pool.name.replace('/', '-')}-{i}", "engine": "0"}, n_req, hs,
                                 queries * model.tm.hit_rate, queries, pred.running))
    return out


def pool_labels(name: str, model_name: str = "llama") -> dict:
    """The labels of a pool's series: ``model_name`` and, for a name region/tier/role, the
    fleetplan_region/_tier/_role labels of fleetplan's Kubernetes export."""
    parts = name.split("/")
    return {"model_name": model_name, **(dict(zip(POOL_LABELS, parts)) if len(parts) == 3 else {})}


def _scaled(e: EngineMetrics, f: float) -> EngineMetrics:
    """``e`` with its counters and histograms times ``f`` (a scrape part-way through the window)."""
    hs = {k: Histogram(h.bounds, tuple(round(c * f) for c in h.cumulative), round(h.count * f), h.total * f) for k, h in e.histograms.items()}
    return EngineMetrics(e.labels, round(e.requests * f), hs, e.prefix_hits * f, e.prefix_queries * f, e.running)


def exposition(engines: list[EngineMetrics], fraction: float = 1.0) -> str:
    """The text exposition (``/metrics``) of ``engines`` with every counter at ``fraction`` of
    its window's increase (0: a baseline scrape at the window's start), written by
    ``prometheus_client`` (its metric families and ``generate_latest``)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    es = [_scaled(e, fraction) for e in engines]
    keys = sorted({k for e in es for k in e.labels})

    class _Collector:
        def collect(self):
            for name, doc in ((TTFT, "Histogram of time to first token in seconds."), (ITL, "Histogram of inter-token latency in seconds."),
                              (TPOT, "Histogram of time_per_output_token_seconds per request."),
                              (PROMPT_TOKENS, "Number of prefill tokens processed."),
                              (GENERATION_TOKENS, "Number of generation tokens processed.")):
                fam = HistogramMetricFamily(name, doc, labels=keys)
                seen = False
                for e in es:
                    h = e.histograms.get(name)
                    if h is not None:
                        seen = True
                        fam.add_metric([e.labels.get(k, "") for k in keys],
                                       [("+Inf" if math.isinf(b) else f"{b:g}", c) for b, c in zip(h.bounds, h.cumulative)], h.total)
                if seen:
                    yield fam
            fam = CounterMetricFamily(SUCCESS[: -len("_total")], "Count of successfully processed requests.", labels=keys + ["finished_reason"])
            for e in es:
                fam.add_metric([e.labels.get(k, "") for k in keys] + ["length"], e.requests)
            yield fam
            for name, attr in ((PREFIX_HITS, "prefix_hits"), (PREFIX_QUERIES, "prefix_queries")):
                fam = CounterMetricFamily(name[: -len("_total")], "Prefix cache tokens.", labels=keys)
                for e in es:
                    fam.add_metric([e.labels.get(k, "") for k in keys], getattr(e, attr))
                yield fam
            fam = GaugeMetricFamily(RUNNING, "Number of requests in model execution batches.", labels=keys)
            for e in es:
                fam.add_metric([e.labels.get(k, "") for k in keys], e.running)
            yield fam

    reg = CollectorRegistry()
    reg.register(_Collector())
    return generate_latest(reg).decode("utf-8")


def range_export(engines: list[EngineMetrics], start_s: float, window_s: float, steps: int = 2) -> str:
    """A ``query_range`` response (JSON) of ``engines`` over ``window_s`` from ``start_s``
    (unix s), ``steps`` + 1 points a series: counters and histogram parts rising linearly from
    an arbitrary earlier total (1,000 requests' worth, so the increase is what counts), the
    running gauge constant."""
    result = []

    def series(name, labels, values):
        result.append({"metric": {"__name__": name, **labels}, "values": [[start_s + window_s * k / steps, f"{v:.10g}"] for k, v in enumerate(values)]})

    for e in engines:
        fr = [k / steps for k in range(steps + 1)]
        pre = 1000.0 / max(e.requests, 1)
        for name, h in e.histograms.items():
            for b, c in zip(h.bounds, h.cumulative):
                series(name + "_bucket", {**e.labels, "le": "+Inf" if math.isinf(b) else f"{b:g}"}, [c * (pre + f) for f in fr])
            series(name + "_count", e.labels, [h.count * (pre + f) for f in fr])
            series(name + "_sum", e.labels, [h.total * (pre + f) for f in fr])
        series(SUCCESS, {**e.labels, "finished_reason": "length"}, [e.requests * (pre + f) for f in fr])
        series(PREFIX_HITS, e.labels, [e.prefix_hits * (pre + f) for f in fr])
        series(PREFIX_QUERIES, e.labels, [e.prefix_queries * (pre + f) for f in fr])
        series(RUNNING, e.labels, [e.running] * (steps + 1))
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}, separators=(",", ":"))


def bench_result(inst: Instance, pool: ObservedPool, priors: Priors, duration_s: float, percentiles=(50.0, 90.0, 99.0)) -> str:
    """The JSON ``vllm bench serve --save-result`` would write for a run at ``pool.rate_rps``
    (Poisson, no concurrency cap) against ``pool.replicas`` engines with step times by
    ``priors``: the keys of vllm/benchmarks/serve.py (``mean_*_ms``, ``median_*_ms``,
    ``pNN_*_ms`` for ttft, tpot, itl; totals; the run's shape)."""
    model = PoolModel(inst, pool)
    stats = [(m, f"p{p:g}") for m in ("ttft", "tpot", "itl") for p in percentiles] + [(m, "mean") for m in ("ttft", "tpot", "itl")]
    pred = model.predict(priors, stats)
    if not pred.stable:
        raise ValueError(f"unstable at these priors and load: {pred.reason}")
    n = int(round(pool.rate_rps * duration_s))
    o = model.tm.output_tokens
    doc = {"date": "synthetic", "endpoint_type": "vllm", "backend": "vllm", "label": None, "model_id": inst.model.name,
           "tokenizer_id": inst.model.name, "num_prompts": n, "request_rate": pool.rate_rps, "burstiness": 1.0, "max_concurrency": None,
           "duration": duration_s, "completed": n, "failed": 0, "total_input_tokens": int(round(n * model.tm.mean_tokens)),
           "total_output_tokens": int(round(n * o)), "request_throughput": n / duration_s, "request_goodput": None,
           "output_throughput": n * o / duration_s, "total_token_throughput": n * (o + model.tm.mean_tokens) / duration_s}
    for m in ("ttft", "tpot", "itl"):
        doc[f"mean_{m}_ms"] = pred.stats[(m, "mean")]
        doc[f"median_{m}_ms"] = pred.stats[(m, "p50")]
        for p in percentiles:
            if p != 50.0:
                doc[f"p{p:g}_{m}_ms"] = pred.stats[(m, f"p{p:g}")]
    return json.dumps(doc, indent=1)
