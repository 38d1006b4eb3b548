"""The TTFT tail's capacity-curve points and Erlang C as they were before issue 41's fused
loop (``fleetplan/perf/ttft_tail.py`` and ``fleetplan/perf/queueing.py`` at main 769183e):
:func:`sum_curve_points` with :meth:`TtftTail.phi_table`'s clamp and :func:`erlang_c` at
every step, verbatim but for the names. A reference for tests only
(tests/unit/test_ttft_tail_reference.py): the fused loop must give the same points bit for
bit. Not imported by fleetplan.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from fleetplan.perf.queueing import erlang_c, server_ca2, variability_factor


def phi_table(tail, theta) -> NDArray[np.float64]:
    """:meth:`fleetplan.perf.ttft_tail.TtftTail.phi_table` at 769183e (the clamp, then the chord)."""
    tail.phi_table(np.zeros(1))  # the table itself is built as before
    grid, logv = tail._table[0]
    th = np.clip(np.asarray(theta, dtype=float), 0.0, grid[-1])
    return np.exp(np.interp(th, grid, logv))


def sum_curve_points(mixes, percentile: float, n_max: int, iterations: int = 45, router: str = "least-work",
                     start: int = 0) -> NDArray[np.float64]:
    """:func:`fleetplan.perf.ttft_tail.sum_curve_points` at 769183e."""
    start = max(int(start), 0)
    if n_max <= 0 or start > n_max:
        return np.zeros(1 if start == 0 else 0)
    size = int(n_max) - start + 1
    if not 0.0 < percentile < 100.0:
        raise ValueError("percentile must be in (0, 100)")
    q = 1.0 - percentile / 100.0
    if any(m.tail.over >= q for m in mixes):
        return np.zeros(size)
    n = np.arange(max(start, 1), n_max + 1, dtype=float)
    blind = router != "least-work"
    c = np.ones_like(n) if blind else n  # the servers of the queue a request waits in
    scale = [1.0 / m.mean_ms / np.asarray(variability_factor(m.cs2, server_ca2(router, n, m.ca2) if blind else m.ca2), dtype=float)
             for m in mixes]
    lo = np.zeros_like(c)
    hi = np.ones_like(c)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        cw = erlang_c(c, mid * c)
        free = c * (1.0 - mid)
        ok = np.ones(c.shape, dtype=bool)
        for m, k in zip(mixes, scale):
            ok &= m.tail.over + cw * phi_table(m.tail, free * k) <= q
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return np.concatenate([[0.0], lo * n]) if start == 0 else lo * n
