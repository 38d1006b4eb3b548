"""What one region-tier's simulation produced: the requests drawn (:class:`Requests`) and
the run's record of each (:class:`TierRun`), the data :mod:`fleetplan.sim.run` fills and
:mod:`fleetplan.sim.metrics` measures."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleetplan.sim.engine import DecodeLog
from fleetplan.sim.setup import TierSetup


@dataclass
class Requests:
    """The requests of one region-tier run, arrays (n,) in the order they reach the
    prefill queue (ids are positions). Times in ms from the start of the run."""

    arrival_ms: np.ndarray
    queue_in_ms: np.ndarray
    pre_ms: np.ndarray  # path before the queue
    post_ms: np.ndarray  # path after the first token (egress)
    source: np.ndarray  # 0 own users, 1 diverted
    cls: np.ndarray  # index into TierSetup.classes
    prompt: np.ndarray  # prompt tokens
    cached: np.ndarray  # of which served from the prefix cache
    out: np.ndarray  # output tokens (int64, >= 1)
    rtype: np.ndarray  # index into the distinct (prompt, cached) types
    types: list[tuple[float, float]]
    clamped: np.ndarray
    shed: np.ndarray

    @property
    def eligible(self) -> np.ndarray:
        return ~(self.clamped | self.shed)


@dataclass
class TierRun:
    """Everything one region-tier's simulation produced (for measuring and for tests).
    ``first_ms``: first token leaves the server (nan when not admitted); ``start_ms`` /
    ``compute_end_ms``: prefill compute; ``server``: prefill slice or replica (-1 not
    admitted); ``decode``: the decode (or replica decode-step) log; ``decode_pool``:
    index into ``setup.decode`` of each decode slice; ``dcn``: KV crossed the DCN."""

    setup: TierSetup
    req: Requests
    service_ms: np.ndarray
    start_ms: np.ndarray
    compute_end_ms: np.ndarray
    first_ms: np.ndarray
    server: np.ndarray
    admitted: np.ndarray
    dcn: np.ndarray
    decode: DecodeLog | None
    decode_pool: list[int]
    warmup_ms: float
    end_ms: float
    stream_notes: list[str]
    router: str = "least-work"
    kv_pod: np.ndarray | None = None
    slice_pod: np.ndarray | None = None
