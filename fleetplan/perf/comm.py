"""Collective communication inside a slice: all-reduce, all-to-all, point-to-point.

Pure functions of a message size, the slice's chip count, the chip's interconnect
bandwidth (``ici_gbytes_per_s``: NVLink for a GPU node, ICI for a TPU slice) and the
priors. Units: bytes, GB/s (1e9 bytes/s), microseconds for latencies, milliseconds out.

The cost model is the latency-bandwidth (alpha-beta) model of Hockney (Parallel
Computing 20, 1994) with the algorithm costs of Thakur, Rabenseifner & Gropp,
"Optimization of collective communication operations in MPICH" (IJHPCA 19, 2005):

* all-reduce of S bytes on n chips, ring (reduce-scatter + all-gather):
  2 (n - 1) steps, each chip sends 2 (n - 1)/n S bytes;
* all-reduce, tree (Rabenseifner's recursive halving / doubling):
  2 ceil(log2 n) steps, the same 2 (n - 1)/n S bytes;
* all-reduce, one-shot (each chip reads the other n - 1 chips' whole buffers and reduces
  locally; TensorRT-LLM's and vLLM's custom all-reduce for small messages): one step,
  (n - 1) S bytes; ``auto`` takes the faster of one-shot and ring at each size, as those
  libraries' tuners (and NCCL's) choose an algorithm by message size;
* all-to-all (pairwise exchange, ring) n - 1 steps, or (Bruck, tree) ceil(log2 n) steps;
  each chip sends the bytes it holds for the others;
* time = a fixed per-collective latency (launch, synchronisation) + steps x a per-step
  (hop) latency + bytes / (ici_gbytes_per_s x achieved fraction).

A collective on one chip costs nothing. The default priors are fitted to NCCL's
all-reduce and send/recv on DGX-H100 (Vidur's profiles, ``shared/data/vidur-profiling/
network/``; ``benchmarks/fit_collectives.py``, docs/calibration.md): the bandwidth
fraction is of the chip's per-direction figure, so an instance whose ``ici_gbytes_per_s``
is a bidirectional total (the TPU instances) states a fraction of half of it.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fleetplan.perf.inputs import Priors

__all__ = [
    "allreduce_steps",
    "all_to_all_steps",
    "allreduce_ms",
    "all_to_all_ms",
    "p2p_ms",
]

GB = 1e9


def _check_chips(chips: int) -> None:
    if int(chips) != chips or chips < 1:
        raise ValueError(f"chips must be a whole number >= 1 (count), got {chips!r}")


def allreduce_steps(chips: int, algorithm: str) -> int:
    """Latency steps of one all-reduce on ``chips`` chips: ring 2 (n - 1), tree
    2 ceil(log2 n) (Thakur et al. 2005); 0 on one chip. Raises ValueError for an unknown
    algorithm or a chip count below 1."""
    _check_chips(chips)
    if chips == 1:
        return 0
    if algorithm == "ring":
        return 2 * (chips - 1)
    if algorithm == "tree":
        return 2 * math.ceil(math.log2(chips))
    raise ValueError(f"unknown all-reduce algorithm {algorithm!r}; expected 'ring' or 'tree'")


def all_to_all_steps(chips: int, algorithm: str) -> int:
    """Latency steps of one all-to-all: Bruck (``tree``) ceil(log2 n); pairwise exchange
    (``ring``, and with the one-shot / auto all-reduce) n - 1; 0 on one chip."""
    _check_chips(chips)
    if chips == 1:
        return 0
    if algorithm in ("ring", "one_shot", "auto"):
        return chips - 1
    if algorithm == "tree":
        return math.ceil(math.log2(chips))
    raise ValueError(f"unknown collective algorithm {algorithm!r}; expected 'ring', 'tree', 'one_shot' or 'auto'")


def allreduce_ms(message_bytes: ArrayLike, chips: int, ici_gbytes_per_s: float, priors: Priors) -> NDArray[np.float64]:
    """Time of one all-reduce of ``message_bytes`` (bytes, the full tensor each chip holds)
    over ``chips`` chips (ms, the shape of ``message_bytes``).

    ring / tree: t = collective_latency_us + steps x collective_hop_latency_us
                     + 2 (n - 1)/n x S / (ici_gbytes_per_s x collective_bw_fraction),
    steps from :func:`allreduce_steps`; one_shot: t = collective_latency_us +
    collective_hop_latency_us + (n - 1) S / (ici x collective_bw_fraction); auto: the smaller
    of one_shot and ring. 0 when n = 1. Never decreases with n (the steps, 2 (n - 1)/n and
    n - 1 all grow; a min of non-decreasing functions is one). Raises ValueError for a
    negative message or a bandwidth <= 0.
    """
    s = np.asarray(message_bytes, dtype=float)
    if (s < 0).any():
        raise ValueError("message_bytes must be >= 0 (bytes)")
    if ici_gbytes_per_s <= 0:
        raise ValueError("ici_gbytes_per_s must be > 0 (GB/s)")
    n = int(chips)
    if n == 1:
        return np.zeros_like(s)
    bw = ici_gbytes_per_s * GB * priors.collective_bw_fraction
    alg = priors.allreduce_algorithm
    out = None
    for a in (("one_shot", "ring") if alg == "auto" else (alg,)):
        if a == "one_shot":
            t = (priors.collective_latency_us + priors.collective_hop_latency_us) / 1e3 + (n - 1) * s / bw * 1e3
        else:
            steps = allreduce_steps(n, a)
            t = (priors.collective_latency_us + steps * priors.collective_hop_latency_us) / 1e3 + 2.0 * (n - 1) / n * s / bw * 1e3
        out = t if out is None else np.minimum(out, t)
    return out


def all_to_all_ms(bytes_per_chip: ArrayLike, chips: int, ici_gbytes_per_s: float, priors: Priors) -> NDArray[np.float64]:
    """Time of one all-to-all in which every chip sends ``bytes_per_chip`` (bytes, the
    total it sends to the other chips) over ``chips`` chips (ms).

    t = all_to_all_latency_us + steps x collective_hop_latency_us
        + bytes_per_chip / (ici_gbytes_per_s x all_to_all_bw_fraction),
    steps from :func:`all_to_all_steps`; 0 when n = 1. The bandwidth fraction defaults to
    NCCL send/recv's on DGX-H100 (an all-to-all is n - 1 concurrent sends per chip).
    """
    b = np.asarray(bytes_per_chip, dtype=float)
    if (b < 0).any():
        raise ValueError("bytes_per_chip must be >= 0 (bytes)")
    if ici_gbytes_per_s <= 0:
        raise ValueError("ici_gbytes_per_s must be > 0 (GB/s)")
    n = int(chips)
    steps = all_to_all_steps(n, priors.allreduce_algorithm)
    if n == 1:
        return np.zeros_like(b)
    lat_us = priors.all_to_all_latency_us + steps * priors.collective_hop_latency_us
    return lat_us / 1e3 + b / (ici_gbytes_per_s * GB * priors.all_to_all_bw_fraction) * 1e3


def p2p_ms(message_bytes: ArrayLike, ici_gbytes_per_s: float, priors: Priors) -> NDArray[np.float64]:
    """One point-to-point send of ``message_bytes`` to a neighbour (a ring-attention KV
    pass): all_to_all_latency_us + collective_hop_latency_us + S / (ici x
    all_to_all_bw_fraction) (ms). Source: Vidur's send_recv profile sets the defaults."""
    s = np.asarray(message_bytes, dtype=float)
    if (s < 0).any():
        raise ValueError("message_bytes must be >= 0 (bytes)")
    if ici_gbytes_per_s <= 0:
        raise ValueError("ici_gbytes_per_s must be > 0 (GB/s)")
    lat_us = priors.all_to_all_latency_us + priors.collective_hop_latency_us
    return lat_us / 1e3 + s / (ici_gbytes_per_s * GB * priors.all_to_all_bw_fraction) * 1e3
