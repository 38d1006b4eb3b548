"""Step times composed the way Vidur's simulator composes them, from its measured H100 profiles.

Vidur (Agrawal et al., MLSys'24; github.com/microsoft/vidur, MIT) predicts a forward pass as
``layers x block`` (``vidur/entities/execution_time.py``, ``model_time``), where a block is

    input_layernorm + attn_pre_proj (QKV GEMM) + attn_rope + kv_cache_save + attention (decode / prefill)
    + attn_post_proj (O GEMM) + all-reduce + post_attention_layernorm + mlp_up_proj + mlp_act
    + mlp_down_proj + all-reduce + add

each operation looked up at the batch's token count rounded up to a multiple of 8
(``Batch._total_num_tokens_rounded``), and each tensor-parallel all-reduce costs NCCL's measured
time for ``tokens x d_model x 2`` bytes plus ``nccl_cpu_launch_overhead_ms`` (0.02 ms, the default
of ``BaseExecutionTimePredictorConfig``: the eager engine's launch of each call). The embedding,
the LM head and the CPU overheads are not counted (``skip_cpu_overhead_modeling`` defaults to
True). This module reproduces that rule with the profiles in ``shared/data/vidur-profiling``:

* the layer operations from ``compute/h100/meta-llama/Llama-2-70b-hf/mlp.csv`` (medians; linear
  interpolation between the profiled token counts, where Vidur fits a regressor; above 4,096
  tokens, the largest profiled, linear in tokens -- the GEMMs are compute-bound there, and
  Vidur itself stops at 4,096);
* the all-reduce from ``network/h100_dgx/all_reduce.csv`` (one node, rank 0: the median of the
  measured sizes within +-30% of the message, at least the 5 nearest, since neighbouring sizes
  scatter by 2x at 8 GPUs; above 64 MiB, the largest profiled, linear in bytes);
* **attention from the roofline, not from Vidur**: its ``attention.csv`` profiles are not in the
  data set (Git LFS). Decode attention reads the residents' KV at ``attention_bw_fraction`` and
  prefill attention runs its causal FLOPs at ``attention_mfu`` -- the priors passed in (the
  benchmark passes AIConfigurator's fit: 0.884 of HBM, 0.613 of peak), through fleetplan's own
  decode_step / prefill_breakdown -- times Vidur's ``attention_decode_batching_overhead_fraction``
  (1.1 for a GQA decode batch of more than one request). ``kv_cache_save`` is an attention
  profile too and is left out (a few microseconds per layer).

Vidur's H100 profiles are Llama-2-70B's: the same layer shapes as Llama-3-70B (d_model 8192,
64 query and 8 KV heads, FFN 28,672, 80 layers); Llama-3 differs in its vocabulary (128,256 vs
32,000 tokens: the LM head, which Vidur does not count anyway) and its RoPE base (a different
constant in the same kernel).
"""

from __future__ import annotations

import csv
import hashlib
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: the operations of one transformer block in Vidur's ExecutionTime (mlp.csv columns)
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
SMALL_OPS = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
#: Vidur's defaults (vidur/config/config.py, BaseExecutionTimePredictorConfig)
NCCL_LAUNCH_MS = 0.02
DECODE_BATCHING_OVERHEAD = 0.1
AR_WINDOW = 1.3
AR_MIN_NEIGHBOURS = 5


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def round8(tokens: float) -> int:
    """Vidur's ``_total_num_tokens_rounded``: up to a multiple of 8."""
    return int((int(np.ceil(tokens)) + 7) // 8 * 8)


@dataclass(frozen=True)
class VidurStep:
    """One composed step (ms): the GEMMs, the small per-layer operations, the all-reduces
    (NCCL plus launch) and attention, each summed over the layers; ``total_ms`` their sum."""

    gemm_ms: float
    small_ops_ms: float
    allreduce_ms: float
    attention_ms: float
    allreduce_call_ms: float

    @property
    def total_ms(self) -> float:
        return self.gemm_ms + self.small_ops_ms + self.allreduce_ms + self.attention_ms


class VidurProfiles:
    """The measured layer operations and all-reduces of one model on one node type.

    Args: mlp: ``mlp.csv`` path; all_reduce: ``all_reduce.csv`` path; d_model: the model's
    hidden size (the all-reduce message is tokens x d_model x 2 bytes); layers: its layer count.
    """

    def __init__(self, mlp: Path, all_reduce: Path, d_model: int, layers: int):
        self.mlp_path, self.ar_path, self.d_model, self.layers = mlp, all_reduce, d_model, layers
        ops: dict[tuple[int, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        dims = set()
        with mlp.open(newline="", encoding="utf-8") as f:
            for r in csv.DictReader(f):
                dims.add((int(r["n_embd"]), int(r["n_head"]), int(r["n_kv_head"]), int(r["n_expanded_embd"])))
                key = (int(r["num_tensor_parallel_workers"]), int(r["num_tokens"]))
                for op in GEMMS + SMALL_OPS:
                    ops[key][op].append(float(r[f"time_stats.{op}.median"]))
        self.dims = sorted(dims)
        self.mlp_rows = sum(len(v[GEMMS[0]]) for v in ops.values())
        self._ops: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for tp in sorted({k[0] for k in ops}):
            toks = np.array(sorted(k[1] for k in ops if k[0] == tp), dtype=float)
            g = np.array([sum(statistics.median(ops[(tp, int(t))][o]) for o in GEMMS) for t in toks])
            s = np.array([sum(statistics.median(ops[(tp, int(t))][o]) for o in SMALL_OPS) for t in toks])
            self._ops[tp] = (toks, g, s)
        ar: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        with all_reduce.open(newline="", encoding="utf-8") as f:
            for r in csv.DictReader(f):
                n = int(r["num_workers"])
                if n == int(r["devices_per_node"]) and r["collective"] == "all_reduce":
                    ar[n][int(r["size"])].append(float(r["time_stats.all_reduce.median"]))
        self.ar_rows = sum(len(v) for d in ar.values() for v in d.values())
        self._ar = {n: (np.array(sorted(d), dtype=float), np.array([statistics.median(d[s]) for s in sorted(d)])) for n, d in ar.items()}

    @property
    def tensor_parallel(self) -> list[int]:
        return sorted(self._ops)

    @property
    def max_tokens(self) -> int:
        return int(max(t[-1] for t, _, _ in self._ops.values()))

    def layer_ops_ms(self, tp: int, tokens: float) -> tuple[float, float]:
        """(GEMMs, small operations) of one layer at ``tokens`` (rounded up to 8), ms."""
        toks, g, s = self._ops[tp]
        t = float(round8(tokens))
        if t > toks[-1]:
            return float(g[-1] * t / toks[-1]), float(s[-1] * t / toks[-1])
        return float(np.interp(t, toks, g)), float(np.interp(t, toks, s))

    def allreduce_call_ms(self, tp: int, tokens: float) -> float:
        """One all-reduce of the activations of ``tokens`` tokens (rounded up to 8) on ``tp``
        GPUs of a node: NCCL's measured time plus Vidur's launch overhead (ms); 0 on one GPU."""
        if tp <= 1:
            return 0.0
        sizes, t = self._ar[tp]
        msg = round8(tokens) * self.d_model * 2.0
        if msg > sizes[-1]:
            nccl = float(t[-1] * msg / sizes[-1])
        else:
            d = np.abs(np.log(sizes / msg))
            k = max(AR_MIN_NEIGHBOURS, int((d <= np.log(AR_WINDOW)).sum()))
            nccl = float(np.median(t[np.argsort(d, kind="stable")[:k]]))
        return nccl + NCCL_LAUNCH_MS

    def step(self, tp: int, tokens: float, attention_ms: float, decode_batch: int = 0) -> VidurStep:
        """A forward pass over ``tokens`` tokens on ``tp`` GPUs with the given attention time
        (ms, all layers; multiplied by Vidur's batching overhead when ``decode_batch`` > 1)."""
        g, s = self.layer_ops_ms(tp, tokens)
        call = self.allreduce_call_ms(tp, tokens)
        att = attention_ms * (1.0 + DECODE_BATCHING_OVERHEAD * (decode_batch > 1))
        return VidurStep(self.layers * g, self.layers * s, 2.0 * self.layers * call, att, call)
