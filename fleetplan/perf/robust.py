"""The least favourable of several physics sources: how a candidate table holds
under every held source (:mod:`fleetplan.instance.physics`).

Pure combinators over what the single-source physics computes per source:

* :func:`least_fit` -- a shape serves a role only when the longest request fits under every
  source;
* :func:`min_capacity` -- a prefill pool's capacity curve A(n) (Erlangs) under every source,
  in the units of one set of service times;
* :class:`MinRates` -- a colocated replica's SLO-limited rate under every source.

Units: ms, Erlangs (busy slices), requests/s.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["fit_under", "least_fit", "min_capacity", "MinRates", "rates_under"]


def fit_under(pairs: Sequence, tm, sl, role: str):
    """:func:`fleetplan.perf.pools.longest_request_fit` under each (name, instance) of
    ``pairs`` (the held sources): the first that does not fit (:func:`least_fit`)."""
    from fleetplan.perf.pools import longest_request_fit

    if len(pairs) == 1:
        return longest_request_fit(pairs[0][1], tm, sl, role)
    return least_fit([longest_request_fit(si, tm, sl, role) for _, si in pairs], [n for n, _ in pairs])


def least_fit(fits: Sequence, names: Sequence[str]):
    """The first of ``fits`` (:class:`fleetplan.perf.pools.KVFit`, one per source named in
    ``names``) that does not fit, its reason naming the source; else the first."""
    for f, name in zip(fits, names):
        if not f.fits:
            from dataclasses import replace

            return replace(f, reason=f"under physics source '{name}': {f.reason}")
    return fits[0]


def min_capacity(services: Sequence[dict[str, float]], curves: Sequence[NDArray[np.float64]]
                 ) -> tuple[dict[str, float], NDArray[np.float64], list[float]]:
    """A prefill capacity curve that holds under every source, in the units of one set of
    per-traffic-source service times.

    Source s has mean service S_s[q] per request of traffic source q ('own', 'div'; ms) and
    curve A_s(n) (Erlangs): the pool holds its TTFT SLO under s when sum_q lam_q S_s[q] /
    1e3 <= A_s(n). With S[q] = max_s S_s[q] (the service times returned) and k_s = max_q
    S_s[q] / S[q] <= 1, sum_q lam_q S_s[q] <= k_s sum_q lam_q S[q], so

        sum_q lam_q S[q] / 1e3 <= A(n) = min_s A_s(n) / k_s

    implies every source's condition: the returned curve (exact when each source's service
    times are proportional to the largest, as with one traffic source). The least of
    concave curves scaled by positive constants is concave, so a chord of it stays below
    it. A traffic source no request of which reaches the pool under some source (service 0)
    is left out of k_s. Curves must have equal lengths.

    Returns: (S, A as a new array, the factors 1 / k_s per source)."""
    keys = list(services[0])
    top = {q: max(float(s.get(q, 0.0)) for s in services) for q in keys}
    factors = []
    for s in services:
        ratios = [float(s.get(q, 0.0)) / top[q] for q in keys if top[q] > 0]
        k = max(ratios) if ratios else 1.0
        factors.append(1.0 / k if k > 0 else 1.0)
    n = {len(c) for c in curves}
    if len(n) != 1:
        raise ValueError(f"capacity curves of {sorted(n)} points: one length expected")
    cap = np.min(np.stack([np.asarray(c, dtype=float) * f for c, f in zip(curves, factors)]), axis=0)
    return top, cap, factors


class MinRates:
    """The rate search of colocated replicas (:class:`fleetplan.perf.colocated.ReplicaRates`'s
    interface: :meth:`rate`, :meth:`replicas_for`, :attr:`top`) under several sources at once:
    rate(n) is the largest per-replica rate at which every source meets the SLOs.

    The first part (callers put the slowest source first) is searched; every other part is
    checked at the rate found (one evaluation of its predicate,
    :meth:`~fleetplan.perf.replica_rates.ReplicaRates.holds`, kept in its memo: a warm table
    cache evaluates none) and searched only when it fails there, lowering the rate to its
    own -- the same rate as the least of the parts' searches (each predicate holds below a
    rate that holds), for about one search.
    """

    def __init__(self, parts: Sequence):
        if not parts:
            raise ValueError("MinRates needs at least one part")
        self.parts = list(parts)
        self._rates: dict[int, float] = {}
        self._bound: dict[int, int] = {}  # n -> the part whose rate it is

    @property
    def top(self) -> float:
        """The per-replica rate TPOT, ITL and stability allow under every source (requests/s)."""
        return min(p.top for p in self.parts)

    def rate(self, n: int) -> float:
        """Largest per-replica rate of a pool of ``n`` replicas every source allows (requests/s)."""
        n = int(n)
        if n in self._rates:
            return self._rates[n]
        r, who = self.parts[0].rate(n), 0
        for i, p in enumerate(self.parts[1:], start=1):
            if r <= 0:
                break
            if not p.holds(r, n):
                got = p.rate(n)
                if got < r:
                    r, who = got, i
        self._rates[n] = r
        self._bound[n] = who
        return r

    def bound_at(self, n: int) -> int:
        """The index in ``parts`` of the source whose rate :meth:`rate` (n) is (the binding one)."""
        self.rate(n)
        return self._bound[int(n)]

    def part_at(self, n: int):
        """The part (one source's rate search) whose rate :meth:`rate` (n) is: its latencies
        and states are the pool's under the binding source."""
        self.rate(n)
        return self.parts[self._bound[int(n)]]

    def replicas_for(self, demand_rps: float, headroom: float = 1.0, max_replicas: int = 100_000) -> int | None:
        """Fewest replicas n with n x rate(n) x headroom >= ``demand_rps`` (count; None when no
        pool up to ``max_replicas`` carries it): :func:`fleetplan.perf.replica_rates.fewest_replicas`
        with the least rate; its search's lower end from the first part's top rate (at least
        the least top, so the end stays below the answer) -- the other parts' tops are not searched."""
        from fleetplan.perf.replica_rates import fewest_replicas

        return fewest_replicas(self.rate, self.parts[0].top_bound, demand_rps, headroom, max_replicas)


def rates_under(insts: Sequence, tm, sl, sources, schedule, memos: Sequence | None = None):
    """:func:`fleetplan.perf.colocated.replica_rates` of tier mix ``tm`` on ``sl`` under each
    instance of ``insts`` (one per held source, the slowest first:
    :func:`fleetplan.instance.physics.held_slowest_first`): the one search, or their
    :class:`MinRates`. ``memos``: one :class:`~fleetplan.perf.replica_rates.RateMemo` (or
    None) per instance, each source's search's own (:func:`fleetplan.tables.cache.rate_memos`:
    keyed by that source's priors); the same rates as without them."""
    from fleetplan.perf.replica_rates import replica_rates

    memos = list(memos) if memos is not None else [None] * len(insts)
    if len(insts) == 1:
        return replica_rates(insts[0], tm, sl, sources, schedule, memo=memos[0])
    return MinRates([replica_rates(si, tm, sl, sources, schedule, memo=m) for si, m in zip(insts, memos)])
