"""The result JSON of vLLM's serving benchmark as a load measurement (``fleetplan calibrate
--format vllm-bench``).

``vllm bench serve --save-result`` (and the older ``benchmarks/benchmark_serving.py``)
writes one JSON object per run. The keys read here are those of vLLM's
``vllm/benchmarks/serve.py`` (commit 009e6d4a1cd6, read through the code search; the older
script wrote the same names): ``request_rate`` (requests/s of its Poisson -- or, with
``burstiness`` b != 1, gamma -- arrival generator; the string ``"inf"`` for all at once),
``burstiness``, ``max_concurrency`` (null, or a cap on requests in flight), ``duration``
(s), ``completed``, ``total_input_tokens``, ``total_output_tokens``, and per metric m in
ttft, tpot, itl: ``mean_m_ms``, ``median_m_ms``, ``std_m_ms`` and ``pNN_m_ms`` for every
percentile of its ``--metric-percentiles`` (default 99). TPOT is per request, (latency -
TTFT) / (output tokens - 1), its percentiles over requests; ITL pools every token gap.
The per-request lists (``ttfts``, ``itls``, ``input_lens`` ...) of ``--save-detailed`` are
not needed and not read.

What becomes of them (:class:`fleetplan.workload.loadfit.ObservedPool`): the arrival rate
is ``request_rate`` (what the generator offered; ``completed / duration`` is reported
beside it), the arrival SCV 1 / ``burstiness`` (a gamma renewal process with shape b), the
mean prompt and answer ``total_input_tokens / completed`` and ``total_output_tokens /
completed``; the statistics fitted are TTFT mean, median and percentiles, TPOT likewise,
and the ITL mean (:mod:`fleetplan.workload.loadfit` says why not the ITL percentiles).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from fleetplan.errors import InputError, Problem, short_repr
from fleetplan.workload.loadfit import ObservedPool, Quantity
from fleetplan.workload.traces import file_sha256

__all__ = ["FORMAT", "BenchError", "BenchResult", "is_vllm_bench", "load_vllm_bench", "bench_pool", "MAX_BENCH_BYTES"]

FORMAT = "vllm-bench"
MAX_BENCH_BYTES = 256 * 1024 * 1024  # a --save-detailed result of 100k requests is tens of MB
_STAT = re.compile(r"^(mean|median|p\d+(?:\.\d+)?)_(ttft|tpot|itl)_ms$")


class BenchError(InputError):
    """A serving-benchmark result is malformed or cannot be modelled; problems name the key."""

    kind = "benchmark result"


@dataclass(frozen=True)
class BenchResult:
    """A validated benchmark result: path, sha256, request_rate (requests/s), burstiness,
    duration_s, completed, mean input / output tokens per request, the statistics
    ({(metric, stat): ms}), model_id and backend (as written, may be None)."""

    path: str
    sha256: str
    request_rate: float
    burstiness: float
    duration_s: float
    completed: int
    input_tokens: float
    output_tokens: float
    stats: dict[tuple[str, str], float]
    model_id: str | None
    backend: str | None

    @property
    def achieved_rps(self) -> float:
        """Completed requests over the run's duration (requests/s)."""
        return self.completed / self.duration_s


def is_vllm_bench(doc: object) -> bool:
    """Whether a parsed JSON document looks like a vLLM serving-benchmark result."""
    return isinstance(doc, dict) and "completed" in doc and "request_rate" in doc and "duration" in doc


def _positive(doc: dict, key: str, unit: str, bad: list[Problem], integer: bool = False) -> float | None:
    v = doc.get(key)
    if v is None:
        bad.append(Problem(key, f"missing; expected {unit}."))
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0 or (integer and v != int(v)):
        bad.append(Problem(key, f"expected {unit}.", short_repr(v)))
        return None
    return float(v)


def load_vllm_bench(path: str) -> BenchResult:
    """Read and check a vLLM serving-benchmark result JSON.

    Raises: :class:`BenchError` naming the key and the expected unit for a missing or
    unreadable file, a value of the wrong type, and for runs fleetplan's open-loop model
    cannot describe: ``request_rate`` inf (every prompt at once: a burst, not a load) or a
    ``max_concurrency`` cap (a closed loop: arrivals wait for completions)."""
    p = Path(path)
    if not p.is_file():
        raise BenchError(path, [Problem("(file)", "no such file (or not a regular file); give the JSON `vllm bench serve --save-result` wrote.")])
    if p.stat().st_size > MAX_BENCH_BYTES:
        raise BenchError(path, [Problem("(file)", f"file is {p.stat().st_size} bytes; a benchmark result is at most {MAX_BENCH_BYTES} bytes.")])
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BenchError(path, [Problem("(file)", f"not a JSON document: {e}.")]) from None
    if not is_vllm_bench(doc):
        raise BenchError(path, [Problem("(document)", "not a vLLM serving-benchmark result: it needs the keys request_rate, completed and "
                                                      "duration (`vllm bench serve --save-result`).")])
    bad: list[Problem] = []
    rate = doc["request_rate"]
    if rate == "inf" or (isinstance(rate, float) and math.isinf(rate)):
        bad.append(Problem("request_rate", "inf: the benchmark sent every prompt at once -- a burst, not a steady load; fleetplan's "
                                           "queueing model needs a run at a finite --request-rate (requests/s).", "inf"))
        rate = None
    else:
        rate = _positive(doc, "request_rate", "requests/s, > 0", bad)
    if doc.get("max_concurrency") is not None:
        bad.append(Problem("max_concurrency", "the run capped the requests in flight (a closed loop: each arrival waits for a completion); "
                                              "fleetplan models an open arrival stream: re-run without --max-concurrency.",
                           short_repr(doc["max_concurrency"])))
    burst = doc.get("burstiness", 1.0)
    if isinstance(burst, bool) or not isinstance(burst, (int, float)) or not math.isfinite(burst) or burst <= 0:
        bad.append(Problem("burstiness", "expected the gamma arrivals' shape, > 0 (1 = Poisson).", short_repr(burst)))
    duration = _positive(doc, "duration", "the run's length in s, > 0", bad)
    completed = _positive(doc, "completed", "completed requests, a whole number > 0", bad, integer=True)
    tin = _positive(doc, "total_input_tokens", "prompt tokens of the completed requests, > 0", bad)
    tout = _positive(doc, "total_output_tokens", "output tokens of the completed requests, > 0", bad)
    stats: dict[tuple[str, str], float] = {}
    for key, v in doc.items():
        m = _STAT.match(key)
        if not m:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            bad.append(Problem(key, "expected ms, >= 0.", short_repr(v)))
            continue
        stat = "p50" if m.group(1) == "median" else m.group(1)
        if stat != "mean" and not 0 < float(stat[1:]) < 100:
            bad.append(Problem(key, "a percentile between 0 and 100 (exclusive).", key))
            continue
        stats[(m.group(2), stat)] = float(v)
    if not any(k[0] in ("ttft", "tpot", "itl") for k in stats):
        bad.append(Problem("(document)", "no latency statistic (mean_ttft_ms, median_tpot_ms, p99_itl_ms, ...): run the benchmark with a "
                                         "tokenizer so it reports TTFT, TPOT and ITL."))
    if bad:
        raise BenchError(path, bad)
    return BenchResult(path, file_sha256(p), rate, float(burst), duration, int(completed), tin / completed, tout / completed, stats,
                       doc.get("model_id"), doc.get("backend"))


def bench_pool(bench: BenchResult, tier: str, slice_label: str, replicas: int = 1, schedule: str | None = None,
               router: str | None = None) -> ObservedPool:
    """The benchmark as one measured pool: ``replicas`` engines of shape ``slice_label``
    (one vLLM server by default) serving tier ``tier`` at the benchmark's rate, mix and
    burstiness. Fitted statistics: TTFT and TPOT (mean, median, every percentile), ITL mean."""
    qs = [Quantity(m, s, v, f"{'median' if s == 'p50' else s}_{m}_ms") for (m, s), v in sorted(bench.stats.items(), key=_order)
          if m != "itl" or s == "mean"]
    notes = (f"benchmark at {bench.request_rate:g} requests/s offered, {bench.achieved_rps:.3g} completed per s over {bench.duration_s:.4g} s "
             f"({bench.completed} requests); mean prompt {bench.input_tokens:.0f}, answer {bench.output_tokens:.0f} tokens.",)
    return ObservedPool("benchmark", "replica", tier, slice_label, replicas, bench.request_rate, tuple(q for q in qs if q.value_ms > 0),
                        schedule=schedule, router=router, prompt_tokens=bench.input_tokens, output_tokens=bench.output_tokens,
                        arrival_scv=1.0 / bench.burstiness, notes=notes)


def _order(item) -> tuple:
    (m, s), _ = item
    return ("ttft", "tpot", "itl").index(m), -1.0 if s == "mean" else float(s[1:])


_PARAMS_B = re.compile(r"(?:^|[-_/ .])(\d+(?:\.\d+)?)[bB](?:$|[-_/ .])")


def check_model(bench: BenchResult, inst, model: str | None = None) -> str | None:
    """Check that the benchmark measured ``inst``'s model: ``model`` (``calibrate --model``: the
    served model as the catalogue names it, for a ``model_id`` that is a served-model-name
    alias) or else the result's ``model_id``, matched against the catalogue's names and
    aliases (then its layers and parameters, as :func:`~fleetplan.workload.calibrate.resolve_target`
    holds a profile to an instance: within 0.8-1.25x), or read for a parameter count
    ("...-8B-...", billions). Returns a note when the name says nothing checkable, None when it
    matches. Raises :class:`BenchError` (``model_id`` or ``--model``) when it names another model."""
    from fleetplan.workload.calibrate import catalogue

    name, key = (model, "--model") if model is not None else (bench.model_id, "model_id")
    if not name:
        return "the benchmark names no model_id: not checked against the instance's model."
    m = inst.model
    low = name.lower()
    entry = next((e for k, e in catalogue()[0].items() if low in {k.lower(), *(a.lower() for a in e.aliases)}
                  or low.rsplit("/", 1)[-1] in {k.lower(), *(a.lower() for a in e.aliases)}), None)
    if entry is not None:
        layers, params = entry.spec.layers, entry.spec.total_params_b
        other = layers != m.layers or not 0.8 <= params / m.total_params_b <= 1.25
        said = f"{params:g} B parameters, {layers} layers"
    else:
        hit = _PARAMS_B.search(name)
        if hit is None:
            return (f"the benchmark's {key} {name!r} is not a model the catalogue knows and names no size: not checked against "
                    f"{inst.name}'s {m.name}.")
        params = float(hit.group(1))
        other, said = not 0.8 <= params / m.total_params_b <= 1.25, f"about {params:g} B parameters by its name"
    if other:
        fix = ("" if key == "--model" else
               " If the name is an alias the server was started with, give the served model with --model (the catalogue's name).")
        raise BenchError(bench.path, [Problem(key, f"the benchmark measured {name} ({said}) but {inst.name} serves {m.name} "
                                                   f"({m.total_params_b:g} B, {m.layers} layers): the fit would book one model's "
                                                   f"latencies against another's step times.{fix}", name)])
    return None

