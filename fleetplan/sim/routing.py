"""The simulator's routers other than least-work: which of a pool's servers (prefill
slices or colocated replicas) an arriving request goes to under ``round-robin``,
``random`` and ``prefix-aware`` routing (``serving.router``). Least-work stays with each
pool's own loop in :mod:`fleetplan.sim.engine` (the slice whose work ends first; the
replica that can start the prefill first), since it reads the pool's state in the
pool's terms; prefix-aware reads the same measure when it spills.

* ``round-robin``: server k mod c for the k-th request routed (the vLLM production-stack
  router's ``routingLogic: roundrobin``; Vidur's default global scheduler,
  ``_request_counter % num_replicas``); a request the admission control then rejects
  still took its turn.
* ``random``: server floor(u c) for the request's uniform u (Vidur's ``randint``; the
  Gateway API inference extension's ``random-picker``).
* ``prefix-aware``: the simulator has no prompt text, so a request's first block is its
  *routing key* (:mod:`fleetplan.sim.run` uses its SLO class: one system prompt per
  class). The router remembers which servers hold each key's prefix (those it sent the
  key to; never evicted), as llm-d's approximate prefix-cache index does, and sends a
  request to the least-loaded holder of its key unless that costs it more than its own
  prefill time of extra wait: when the holder's queued work (what the least-work router
  reads) is more than the least-loaded server's plus the request's own prefill (ms), or
  no server holds the key yet, it goes to the least-loaded server, which then holds it.
  Affinity with a load cap, as llm-d's prefix-cache scorer beside its queue scorer and
  SGLang's cache-aware router with its balance thresholds; the hit rate stays the
  tier's (the model's rule). A key whose holders keep spilling ends up held everywhere,
  and the router is then least-work. Two simpler designs were tried first and failed on
  the bundled 70B pool (one class, so one key): a fixed home by the key's hash capped by
  in-flight counts (consistent hashing with bounded loads, Mirrokni, Thorup &
  Zadimoghaddam, SODA 2018, factor 1.25) fills the ring in order and lets the last
  servers idle while the first queue (8 slices at 90% busy: p99 wait 17 s against an
  M/M/1's 0.45 s); capped by queued work instead, the home replica ran hot: the pool's
  residents 7% and its TPOT p99 28% above the model's.

The uniforms come from the caller (:func:`fleetplan.sim.engine.uniform_hash`), so a
run stays a pure function of its seed.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

__all__ = ["SPLIT_ROUTERS", "SplitRouter"]

#: The routers :class:`SplitRouter` picks for (least-work is each pool's own loop).
SPLIT_ROUTERS = ("round-robin", "random", "prefix-aware")


class SplitRouter:
    """Picks the server of each arrival under ``router`` (one of :data:`SPLIT_ROUTERS`)
    over ``servers`` servers. ``u`` (n,) uniforms in (0, 1) per request (by request
    index): the pick under ``random``; ``keys`` (n,) the routing keys under
    ``prefix-aware``.
    Raises: ValueError for another router, no servers or missing uniforms or keys."""

    def __init__(self, router: str, servers: int, u: np.ndarray | None = None, keys: np.ndarray | None = None):
        if router not in SPLIT_ROUTERS:
            raise ValueError(f"a split router is one of {', '.join(SPLIT_ROUTERS)}, not {router!r}")
        if servers < 1:
            raise ValueError("need at least one server")
        if router == "random" and u is None:
            raise ValueError("router 'random' needs a uniform per request")
        if router == "prefix-aware" and keys is None:
            raise ValueError("router 'prefix-aware' needs a routing key per request")
        self.router, self.servers, self.turn = router, int(servers), 0
        self.u = u.tolist() if u is not None else None
        self.keys = keys.tolist() if keys is not None else None
        self.holders: dict[int, list[int]] = {}  # prefix-aware: the servers that hold each key's prefix

    def pick(self, i: int, work_ms: Callable[[], Sequence[float]] | None = None, own_ms: float = 0.0) -> int:
        """The server (index) for request ``i``. Prefix-aware only: ``work_ms()`` the
        servers' queued work now (ms, as the least-work router measures it; called once)
        and ``own_ms`` the request's own prefill (ms)."""
        c = self.servers
        if self.router == "round-robin":
            j = self.turn % c
            self.turn += 1
            return j
        if self.router == "random":
            return min(int(self.u[i] * c), c - 1)
        work = work_ms()
        least = min(range(c), key=work.__getitem__)
        held = self.holders.setdefault(self.keys[i], [])
        if held:
            h = min(held, key=work.__getitem__)
            if work[h] <= work[least] + own_ms:
                return h
        if least not in held:
            held.append(least)
        return least
