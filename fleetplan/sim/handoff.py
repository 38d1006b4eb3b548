"""Prefill -> decode handoffs in the decode simulation: the decode slice holds a request's
prompt KV from the moment its transfer starts until it has landed, from the page pool its
batch uses, and a handoff that finds no slice with room waits (prefill stalls).

What the engines do (:mod:`fleetplan.perf.handoff` cites them): vLLM's NIXL connector
allocates the remote-prefilled prompt's blocks in ``Scheduler.schedule``
(``get_num_new_matched_tokens`` -> ``allocate_slots`` -> ``update_state_after_alloc``), the
request waits as ``WAITING_FOR_REMOTE_KVS`` while the worker's ``start_load_kv`` reads it,
then joins the running batch; SGLang's decode server holds it in its pre-allocation queue
until the prompt's pages can be allocated, then in its transfer queue.

:class:`Handoffs` is the bookkeeping :func:`fleetplan.sim.engine.decode_des` runs with when
it is given transfer times: which slice holds which handoff's KV, when each was allocated
(the stall is allocation - ready) and landed, and the landed requests waiting for a slot
under their slice's batch cap. Not modelled: a stalled handoff's KV stays on its prefill
slice, which here goes on computing the next prompts (its link and KV are not held), so a
stall delays that request's first token but not the prefill queue behind it -- optimistic
when stalls are frequent, exact when there are none (what a plan with the reserve predicts).
"""

from __future__ import annotations

from collections import deque
from typing import Callable

import numpy as np

__all__ = ["Handoffs"]


class Handoffs:
    """The handoffs of one decode run (arrays (n,) by request, (slices,) by slice).

    ``ready_ms`` (n,): when each request's KV may start moving (ms); ``xfer_ms`` (n,): its
    transfer time once it starts (ms); ``kv_new`` (n,): the
    KV it brings (bytes). ``occ``, ``kvocc``, ``cap``, ``kvcap`` are the run's own per-slice
    arrays (residents and joiners; KV held, bytes -- this object adds the handoffs it holds;
    batch cap; KV page pool less slack, bytes), ``slice_of`` (n,) the run's slice of each
    request, ``queued`` (n,) its 'waited for a slot' flags, ``event(t, i)`` schedules request
    i's landing at t and ``join(k, i, t)`` puts it in slice k's next step."""

    def __init__(self, ready_ms: np.ndarray, xfer_ms: np.ndarray, kv_new: np.ndarray, occ: np.ndarray, kvocc: np.ndarray, cap: np.ndarray, kvcap: np.ndarray,
                 slice_of: np.ndarray, queued: np.ndarray, event: Callable[[float, int], None], join: Callable[[int, int, float], None]):
        n, s = xfer_ms.size, occ.size
        self.ready_ms = ready_ms
        self.xfer = xfer_ms.tolist()
        self.kv_new = kv_new
        self.occ, self.kvocc, self.cap, self.kvcap = occ, kvocc, cap, kvcap
        self.slice_of, self.queued = slice_of, queued
        self.event, self.join = event, join
        self.held = np.zeros(s)  # KV of the handoffs a slice holds, in flight or landed and waiting for a slot (bytes)
        self.count = np.zeros(s)  # how many
        self.waiting: list[deque[int]] = [deque() for _ in range(s)]  # landed, waiting for a slot under the cap
        self.alloc_ms = np.full(n, np.nan)
        self.kv_bound = np.zeros(n, dtype=bool)  # waited while a slot was free but no page pool had room for its KV
        self.landed_ms = np.full(n, np.nan)

    def candidates(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(slices that may take request i's handoff now -- a slot under the batch cap and room for its
        KV in the page pool --, their load: residents, joiners and handoffs held). When a slot is
        free somewhere but no page pool has room, the handoff is marked as waiting for KV."""
        slot = self.occ < self.cap
        fits = slot & (self.kvocc + self.kv_new[i] <= self.kvcap)
        if not fits.any() and slot.any():
            self.kv_bound[i] = True
        return fits, self.occ + self.count

    def hold(self, k: int, i: int, t: float) -> None:
        """Allocate request i's KV on slice k at t; it lands after its transfer."""
        kv = float(self.kv_new[i])
        self.kvocc[k] += kv
        self.held[k] += kv
        self.count[k] += 1
        self.slice_of[i] = k
        self.alloc_ms[i] = t
        self.event(t + self.xfer[i], i)

    def land(self, i: int, t: float) -> None:
        """Request i's KV has landed on its slice at t: it joins the batch, or waits for a slot."""
        k = int(self.slice_of[i])
        self.landed_ms[i] = t
        if self.occ[k] < self.cap[k]:
            self._join(k, i, t)
        else:
            self.waiting[k].append(i)
            self.queued[i] = True

    def _join(self, k: int, i: int, t: float) -> None:
        self.held[k] -= float(self.kv_new[i])
        self.count[k] -= 1
        self.join(k, i, t)

    def after_step(self, k: int, t: float, stalled: deque[int]) -> None:
        """Slice k finished a step at t (its ``occ`` and ``kvocc`` refreshed, the handoffs it holds
        included): landed requests take the slots under its cap, then stalled handoffs (first
        come, first served) the room in its page pool."""
        w = self.waiting[k]
        while w and self.occ[k] < self.cap[k]:
            self._join(k, w.popleft(), t)
        while stalled and self.occ[k] < self.cap[k]:
            if self.kvocc[k] + self.kv_new[stalled[0]] > self.kvcap[k]:
                self.kv_bound[stalled[0]] = True  # a slot, but no room for its KV
                break
            self.hold(k, stalled.popleft(), t)

    @property
    def stall_ms(self) -> np.ndarray:
        """(n,) How long each handoff waited before the decode allocated its KV: allocation - ready (ms; nan
        when it never decoded) -- for a slot under the batch cap, or for room in the page pool (``kv_bound``)."""
        return self.alloc_ms - self.ready_ms
