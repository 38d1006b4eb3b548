"""Serving engines: the Prometheus metric names and server flags of each engine the
Kubernetes export knows, and the PromQL of the brief's section 5 signals built on them.

vLLM's names are those of vLLM 0.11 and later (the V1 engine): ``vllm:kv_cache_usage_perc``
replaced ``vllm:gpu_cache_usage_perc`` (deprecated in 0.10, removed in 0.12) and the
prefix-cache counters lost their ``gpu_`` prefix; counters are exposed by
prometheus_client with a ``_total`` suffix. Source: vLLM's docs/design/metrics.md and
vllm/v1/metrics/loggers.py.

Series labels: the export's pods carry ``fleetplan/region``, ``fleetplan/tier``,
``fleetplan/role`` and ``fleetplan/unit`` labels; the scrape configuration must copy them
onto the engine's series as ``fleetplan_region`` ... (Prometheus Operator PodMonitor
``podTargetLabels``, Google Managed Prometheus PodMonitoring ``targetLabels.fromPod``),
and the scraper adds ``namespace``. docs/controller.md shows both.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Engine", "ENGINES", "selector", "SIGNAL_WINDOW", "KV_TRANSFERS_METRIC"]

SIGNAL_WINDOW = "10m"  # rate window of the slow signals (hit rate, acceptance, DCN share)
QUEUE_WINDOW = "2m"  # rate window of the queue-wait histogram: short, it is a leading signal
# No engine or router metric says whether a request's KV went over ICI or the DCN (vLLM's
# NIXL metrics carry no peer; llm-d's endpoint picker records no pair). The DCN-share signal
# reads this counter, which the routing layer must supply (docs/controller.md); an alert says
# when it is absent.
KV_TRANSFERS_METRIC = "fleetplan_kv_transfers_total"


def selector(**labels: str) -> str:
    """A PromQL label matcher ``{k="v",...}`` (sorted keys; a value starting with '~' is a regex match)."""
    parts = []
    for k in sorted(labels):
        v = labels[k]
        parts.append(f'{k}=~"{v[1:]}"' if v.startswith("~") else f'{k}="{v}"')
    return "{" + ",".join(parts) + "}"


@dataclass(frozen=True)
class Engine:
    """One serving engine's metric names (Prometheus) and server flags.

    queue_time_bucket: histogram of the time a request waits in the scheduler queue
    (seconds). running: gauge of requests resident in the running batch (count, per
    server = per slice; at most the server's ``flag_max_seqs``). waiting: gauge of requests
    queued for a seat in the batch (count, per server; unbounded). kv_usage: gauge of the used share of KV-cache pages (fraction).
    prefix_hits / prefix_queries: counters of prompt tokens found in / looked up in the
    prefix cache (tokens). spec_accepted / spec_draft: counters of accepted and proposed
    draft tokens (tokens). flag_*: the server flags fleetplan sets from the plan."""

    name: str
    version: str
    queue_time_bucket: str
    running: str
    waiting: str
    kv_usage: str
    prefix_hits: str
    prefix_queries: str
    spec_accepted: str
    spec_draft: str
    flag_max_seqs: str
    flag_chunk_tokens: str
    flag_kv_transfer: str
    kv_transfer_config: str
    port: int
    flag_enable_chunked: str = "--enable-chunked-prefill"
    flag_disable_chunked: str = "--no-enable-chunked-prefill"
    flag_quantization: str = "--quantization"
    flag_kv_cache_dtype: str = "--kv-cache-dtype"
    flag_dtype: str = "--dtype"
    flag_tensor_parallel: str = "--tensor-parallel-size"

    # --------------------------------------------------------------- signals (PromQL)
    def queue_wait_p95_ms(self, sel: str, by: str) -> str:
        """p95 queue wait (ms) over the matched servers, grouped ``by`` (comma-separated labels)."""
        return f"1000 * histogram_quantile(0.95, sum by ({by}, le) (rate({self.queue_time_bucket}{sel}[{QUEUE_WINDOW}])))"

    def residents_per_slice(self, sel: str, by: str) -> str:
        """Mean requests resident per server (= per slice) (count)."""
        return f"avg by ({by}) ({self.running}{sel})"

    def decode_demand_total(self, sel: str, by: str) -> str:
        """Requests running or queued over the matched servers (count): the decode seats
        asked for. Running requests alone cannot pass the servers' ``--max-num-seqs``; at a
        full batch demand beyond it shows as queued requests, so this can exceed the batch
        cap and an autoscaler or alert on it can fire."""
        return f"sum by ({by}) ({self.running}{sel}) + sum by ({by}) ({self.waiting}{sel})"

    def decode_demand_per_slice(self, sel: str, by: str) -> str:
        """Mean requests running or queued per server (= per slice) (count)."""
        return f"({self.decode_demand_total(sel, by)}) / count by ({by}) ({self.running}{sel})"

    def kv_usage_max(self, sel: str, by: str) -> str:
        """Used share of the fullest server's KV pages (fraction)."""
        return f"max by ({by}) ({self.kv_usage}{sel})"

    def kv_headroom_min(self, sel: str, by: str) -> str:
        """Free share of the fullest server's KV pages (fraction)."""
        return f"1 - max by ({by}) ({self.kv_usage}{sel})"

    def prefix_hit_rate(self, sel: str, by: str) -> str:
        """Prompt tokens served from the prefix cache over prompt tokens looked up (fraction)."""
        return (f"sum by ({by}) (rate({self.prefix_hits}{sel}[{SIGNAL_WINDOW}])) / "
                f"sum by ({by}) (rate({self.prefix_queries}{sel}[{SIGNAL_WINDOW}]))")

    def acceptance_rate(self, sel: str, by: str) -> str:
        """Accepted over proposed draft tokens: the acceptance rate alpha (fraction)."""
        return (f"sum by ({by}) (rate({self.spec_accepted}{sel}[{SIGNAL_WINDOW}])) / "
                f"sum by ({by}) (rate({self.spec_draft}{sel}[{SIGNAL_WINDOW}]))")

    # --------------------------------------------------------------- flags
    def parallel_args(self, chips: int) -> list[str]:
        """The slice's parallelism: the plan's step times split every layer over the slice's
        ``chips`` (tensor parallelism across the slice, its all-reduces on the ICI or
        NVLink; perf.roofline), so the engine runs ``--tensor-parallel-size`` = chips (a
        multi-host slice included: one engine over the LeaderWorkerSet group). Without it
        vLLM starts at TP 1, where a 70B model's weights do not fit one chip."""
        return [f"{self.flag_tensor_parallel}={int(chips)}"]

    def precision_args(self, bytes_per_weight: float, bytes_per_kv_element: float) -> tuple[list[str], list[str]]:
        """(flags, notes): the engine flags that make it serve at the plan's precision.

        The plan's step times assume ``model.bytes_per_weight`` and
        ``model.bytes_per_kv_element``; an engine left at its defaults serves a BF16
        checkpoint in BF16 with a BF16 KV cache, so an FP8 plan exported without flags would
        run at twice the weight and KV bytes it was sized for. 1 byte per weight gives
        ``--quantization=fp8`` (vLLM's FP8 W8A8: dynamic per-tensor activation scales, or a
        pre-quantized FP8 checkpoint's own scales); 2 gives ``--dtype=bfloat16``. 1 byte per
        KV element gives ``--kv-cache-dtype=fp8``; 2 gives ``--kv-cache-dtype=auto`` (the
        model's dtype). Any other width (e.g. 0.5: INT4 AWQ/GPTQ) needs a checkpoint
        quantized offline, which no flag selects: no flag, and a note says so.
        Source: vLLM's docs/features/quantization/fp8.md and quantized_kvcache.md."""
        weight = {1: f"{self.flag_quantization}=fp8", 2: f"{self.flag_dtype}=bfloat16"}
        kv = {1: f"{self.flag_kv_cache_dtype}=fp8", 2: f"{self.flag_kv_cache_dtype}=auto"}
        out = [f for f in (weight.get(bytes_per_weight), kv.get(bytes_per_kv_element)) if f is not None]
        notes: list[str] = []
        if bytes_per_weight not in weight:
            notes.append(f"model.bytes_per_weight is {bytes_per_weight:g} B: no {self.name} flag selects that format; serve a "
                         f"checkpoint quantized offline to {bytes_per_weight:g} B per weight (e.g. AWQ or GPTQ) or the plan's "
                         "step times do not hold.")
        if bytes_per_kv_element not in kv:
            notes.append(f"model.bytes_per_kv_element is {bytes_per_kv_element:g} B: {self.name}'s KV cache is FP8 (1 B) or "
                         "the model's dtype (2 B); the plan's KV capacity does not hold at another width.")
        return out, notes

    def server_args(self, role: str, max_seqs: int | None, chunk_tokens: int, schedule: str | None = None) -> list[str]:
        """Flags set from the plan: the batch a decode slice may hold (the failover cap: a
        region loss may ride to the knee; normal hours stay under the knee less its margin
        by autoscaling on decode demand, running plus queued), the prefill chunk, and P/D KV transfer.

        A replica pool's ``schedule`` (the plan's label) sets the engine's scheduler:
        'chunked-C' gives ``--enable-chunked-prefill --max-num-batched-tokens=C`` (the token
        budget per step, decode tokens first); 'prefill-first' gives
        ``--no-enable-chunked-prefill`` with ``chunk_tokens`` as the step's token limit."""
        out = [f"--port={self.port}"]
        if max_seqs is not None:
            out.append(f"{self.flag_max_seqs}={max_seqs}")
        if role == "replica" and schedule is not None and schedule.startswith("chunked-"):
            out += [self.flag_enable_chunked, f"{self.flag_chunk_tokens}={int(schedule.split('-', 1)[1])}"]
        elif role == "replica" and schedule == "prefill-first":
            out += [self.flag_disable_chunked, f"{self.flag_chunk_tokens}={chunk_tokens}"]
        elif role in ("prefill", "replica", "warm"):
            out.append(f"{self.flag_chunk_tokens}={chunk_tokens}")
        if role in ("prefill", "decode", "warm"):
            out.append(f"{self.flag_kv_transfer}={self.kv_transfer_config}")
        return out


ENGINES: dict[str, Engine] = {
    "vllm": Engine(
        name="vllm", version="0.11",
        queue_time_bucket="vllm:request_queue_time_seconds_bucket",
        running="vllm:num_requests_running",
        waiting="vllm:num_requests_waiting",
        kv_usage="vllm:kv_cache_usage_perc",
        prefix_hits="vllm:prefix_cache_hits_total",
        prefix_queries="vllm:prefix_cache_queries_total",
        spec_accepted="vllm:spec_decode_num_accepted_tokens_total",
        spec_draft="vllm:spec_decode_num_draft_tokens_total",
        flag_max_seqs="--max-num-seqs",
        flag_chunk_tokens="--max-num-batched-tokens",
        flag_kv_transfer="--kv-transfer-config",
        # kv_both: the same server can prefill or decode, so a warm slice joins either role
        kv_transfer_config='{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
        port=8000,
    ),
}
