"""Candidate-table pieces shared between ModelData builds of instances that differ only in
demand and pods (the nodes of a purchase tree, issue 18).

A purchase tree's nodes are the base instance at other ``peak_rps`` (and, for nodes with
a workload shift, another workload); :func:`fleetplan.instance.derived.build_model_data`
recomputes every candidate table per node although most of the physics does not read
the regions at all: the performance models (:mod:`fleetplan.perf.pools`,
:mod:`~fleetplan.perf.roofline`, :mod:`~fleetplan.perf.speculation`,
:mod:`~fleetplan.perf.comm`, :mod:`~fleetplan.perf.queueing`) take the model, chips,
network, workload, priors, speculation, failover and serving sections, never
``regions`` (no ``peak_rps``, pods, prices or hourly loads). A :class:`TableCache` keys
each piece by exactly that: :func:`physics_key` (the instance without its regions)
plus the piece's own arguments (tier, slice shape, the prefill traffic mixes), so equal
keys mean equal inputs and the cached value is the value the uncached build computes --
not an approximation. The pieces that do depend on demand (how long a prefill curve is,
the diverted shares of a failover mix, the slice bounds) stay per node; the mixes enter
the prefill keys exactly (every weight and hit rate).

Prefill capacity curves A(n) (:func:`fleetplan.instance.derived.workload_capacity_curve`)
depend on the scaled wait budget, the percentile and their length n_max; nodes of other
demand ask for the same curve at other lengths. The bisection that computes them
(:func:`fleetplan.perf.queueing.max_arrival_rate`) runs the same fixed number of steps
for every server count independently (element-wise float64 operations only), so A(0..n)
is a prefix of A(0..N) for N >= n, bit for bit; :meth:`TableCache.curve` keeps the
longest curve per (budget, percentile) and slices it (``tests/unit/test_table_cache.py``
checks the prefix property on this machine's numpy, and the purchase tests compare the
whole model built with and without the cache).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from fleetplan.instance.schema import Instance

__all__ = ["TableCache", "physics_key"]


def physics_key(inst: Instance) -> str:
    """What the candidate tables' physics reads of ``inst``: its canonical JSON without
    ``regions`` (demand, pods, prices, hourly loads) and without the name and description
    (labels). Raises nothing."""
    return inst.model_dump_json(exclude={"regions", "name", "description"})


class TableCache:
    """Memo of candidate-table pieces for ModelData builds that share their physics.

    ``memo(key, compute)`` returns the value stored under ``key`` (any hashable; callers
    put :func:`physics_key` first) or stores ``compute()``; ``curve(tau, percentile,
    n_max, compute)`` returns A(0..n_max) (Erlangs, shape (n_max + 1,), a fresh copy)
    from the longest curve of that (scaled budget, percentile) computed so far, computing
    ``compute(N)`` (a curve of N + 1 points, N >= n_max, at least twice the stored length
    so a growing sequence of requests costs few computations) when it is too short.
    ``hits`` / ``misses`` count both. Not thread-safe; holds plain data (picklable).
    """

    def __init__(self) -> None:
        self._memo: dict[Hashable, Any] = {}
        self._curves: dict[tuple[float, float], np.ndarray] = {}
        self.hits = 0
        self.misses = 0

    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        try:
            value = self._memo[key]
        except KeyError:
            self.misses += 1
            value = self._memo[key] = compute()
            return value
        self.hits += 1
        return value

    def curve(self, tau_scaled: float, percentile: float, n_max: int, compute: Callable[[int], np.ndarray]) -> np.ndarray:
        key = (tau_scaled, percentile)
        got = self._curves.get(key)
        if got is None or len(got) <= n_max:
            self.misses += 1
            size = n_max if got is None else max(n_max, 2 * (len(got) - 1))
            got = compute(size)
            if len(got) != size + 1:
                raise ValueError(f"a capacity curve of {size} slices has {len(got)} points, not {size + 1}")
            self._curves[key] = got
        else:
            self.hits += 1
        return got[: n_max + 1].copy()

    def __len__(self) -> int:
        return len(self._memo) + len(self._curves)
