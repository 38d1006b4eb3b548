"""Colocated replicas: one replica interleaves prefill and decode (no disaggregation).

Steady state at arrival rate lambda (requests/s) per replica:
  prefill share        u = lambda x E[prefill time]                    (time fraction)
  effective TPOT       TPOT = step(b) / (1 - u)                        (decode runs 1 - u of the time)
  Little's law         b = lambda x output_tokens x TPOT               (sequences decoding)
solved as a fixed point in b; unstable when u >= 1, when no fixed point exists (decode
cannot keep up) or when b exceeds the KV capacity. TTFT = path + M/G/1 queue wait of
the prefill work + prefill time (prefill has priority over decode steps, as in vLLM's
default scheduler). Source: Little (1961) for b; the interleaving model is the one the
brief section 4 argues against for long prompts (LANE 3) and the Splitwise/DistServe
papers use for colocated baselines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fleetplan.instance.schema import ModelSpec, Priors
from fleetplan.perf.pools import tail_factor
from fleetplan.perf.queueing import wait_percentile_ms
from fleetplan.perf.roofline import SliceSpec, decode_step

__all__ = ["ReplicaState", "replica_steady_state", "max_rps_per_replica", "replicas_needed", "tail_factor"]


@dataclass(frozen=True)
class ReplicaState:
    """Steady state of one colocated replica (units in the names)."""

    rps: float
    prefill_share: float
    sequences_decoding: float
    step_ms: float
    tpot_ms: float
    prefill_ms_mean: float
    stable: bool
    reason: str


def replica_steady_state(
    model: ModelSpec,
    sl: SliceSpec,
    priors: Priors,
    rps: float,
    prefill_ms_mean: float,
    output_tokens: float,
    kv_bytes_per_request: float,
    kv_capacity_requests: int,
) -> ReplicaState:
    """Solve the interleaved replica at ``rps`` (requests/s per replica).

    Args:
        prefill_ms_mean: mean prefill time of one request on the replica (ms).
        output_tokens: mean output tokens per request (tokens).
        kv_bytes_per_request: mean KV streamed per resident request (bytes).
        kv_capacity_requests: resident requests the KV pool holds (count).
    Returns: :class:`ReplicaState`; ``stable`` False with a reason when it diverges.
    """
    if rps < 0 or prefill_ms_mean <= 0 or output_tokens <= 0:
        raise ValueError("need rps >= 0 (requests/s), prefill_ms_mean > 0 (ms), output_tokens > 0")
    u = rps * prefill_ms_mean / 1e3
    if rps == 0:
        s0 = float(decode_step(model, sl, priors, 0.0, kv_bytes_per_request).step_ms)
        return ReplicaState(0.0, 0.0, 0.0, s0, s0, prefill_ms_mean, True, "")
    if u >= 1.0:
        return ReplicaState(rps, u, math.inf, math.inf, math.inf, prefill_ms_mean, False, f"prefill alone needs {u:.2f} of the replica's time")
    cap = max(kv_capacity_requests, 0)

    def g(b):
        step = decode_step(model, sl, priors, b, kv_bytes_per_request).step_ms
        return rps * output_tokens * step / 1e3 / (1.0 - u) - b

    grid = np.linspace(0.0, max(cap, 1), 4097)
    vals = g(grid)
    neg = np.nonzero(vals <= 0)[0]
    if cap == 0 or neg.size == 0:
        return ReplicaState(rps, u, math.inf, math.inf, math.inf, prefill_ms_mean, False,
                            f"sequences decoding would exceed the KV capacity of {cap} requests")
    i = int(neg[0])
    lo, hi = (grid[i - 1], grid[i]) if i > 0 else (0.0, 0.0)
    for _ in range(60):
        if hi - lo < 1e-9:
            break
        mid = 0.5 * (lo + hi)
        if g(mid) > 0:
            lo = mid
        else:
            hi = mid
    b = float(hi)
    step = float(decode_step(model, sl, priors, b, kv_bytes_per_request).step_ms)
    return ReplicaState(rps, u, b, step, step / (1.0 - u), prefill_ms_mean, True, "")


def max_rps_per_replica(
    model: ModelSpec,
    sl: SliceSpec,
    priors: Priors,
    prefill_ms_mean: float,
    prefill_ms_pct: float,
    prefill_cs2: float,
    output_tokens: float,
    kv_bytes_per_request: float,
    kv_capacity_requests: int,
    tpot_limit_ms: float | None,
    tpot_percentile: float,
    ttft_limit_ms: float | None,
    ttft_percentile: float,
    path_ms: float = 0.0,
) -> float:
    """Largest per-replica arrival rate (requests/s) that is stable and meets the SLOs.

    TPOT pXX = effective TPOT x :func:`tail_factor`; TTFT pXX = path + M/G/1 wait
    percentile of the prefill work (C_s^2 ``prefill_cs2``) + ``prefill_ms_pct``.
    Bisection on lambda in (0, 1/E[prefill]). Returns 0 when even a trickle fails.
    """
    factor = tail_factor(priors.tpot_p99_inflation, tpot_percentile)

    def ok(lam: float) -> bool:
        st = replica_steady_state(model, sl, priors, lam, prefill_ms_mean, output_tokens, kv_bytes_per_request, kv_capacity_requests)
        if not st.stable:
            return False
        if tpot_limit_ms is not None and st.tpot_ms * factor > tpot_limit_ms:
            return False
        if ttft_limit_ms is not None:
            w = float(wait_percentile_ms(1, lam, prefill_ms_mean, ttft_percentile, prefill_cs2))
            if path_ms + w + prefill_ms_pct > ttft_limit_ms:
                return False
        return True

    hi = 1e3 / prefill_ms_mean
    lo = 0.0
    if not ok(hi * 1e-6):
        return 0.0
    lo = hi * 1e-6
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def replicas_needed(peak_rps: float, max_rps_per_replica: float, utilisation_headroom: float) -> int:
    """Replicas = ceil(peak / (max per replica x headroom)) (count). Raises ValueError when
    a replica carries nothing."""
    if max_rps_per_replica <= 0:
        raise ValueError("a replica carries no load within the SLOs")
    return int(math.ceil(peak_rps / (max_rps_per_replica * utilisation_headroom) - 1e-9))
