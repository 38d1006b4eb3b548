"""A prefill pool's TTFT tail at its SLO limit: sizing against the percentile of the sum
of the TTFT's components instead of the sum of their percentiles.

A request's TTFT is T = P + W + X, independent parts: P the fixed path (gateway, router,
egress: a pmf on a grid, :func:`fleetplan.perf.queueing.path_sum_distribution`), W the
prefill queue's wait (0 with probability 1 - C, otherwise exponential with rate theta =
2 (c mu - lambda) / (C_a^2 + C_s^2) per ms: Erlang C's C(c, a) and Allen-Cunneen's
scaling, as :func:`fleetplan.perf.queueing.wait_probability_exceeds`), and X the
request's own compute and exposed KV transfer (its type's, over the pool's mix:
``PrefillProfile.type_ms`` / ``type_weight``). In an FCFS queue a request's wait does not
depend on its own service time, so W and X are independent, and at a limit L

    P(T > L) = P(P + X > L) + C(c, a) Phi(theta),   Phi(theta) = E[exp(-theta (L - P - X)); P + X <= L],

the Laplace transform of the slack L - P - X left for the wait (the first term: the
requests past the limit without waiting; the second: those whose exponential wait eats
their slack). The pool meets "p-th percentile of TTFT <= L" exactly when P(T > L) <= q =
1 - p/100 -- the statement :func:`fleetplan.perf.queueing.ttft_percentile_of_sum_ms`
(the plan's ``ttft_estimate_ms``) computes the percentile of. The sum of the components'
percentiles (``ttft_ms``, :func:`fleetplan.perf.queueing.ttft_percentile_ms`) puts every
component at its p-th percentile at once; it is what pools were sized against before, and
docs/validation.md measures it 8-33% above the simulated p99 at the normal peak and up to
~30% in the loaded long tiers, where the percentile of the sum is within a few %.

Two conservative approximations keep the sizing fast and never optimistic:

* the slack L - P - X is floored to a grid of L / :data:`SLACK_BINS` ms (a smaller slack,
  a larger exp(-theta d): Phi is over-estimated by at most a factor exp(theta L / 1024));
* the capacity curves of many server counts (:func:`max_arrival_rate_of_sum` with
  ``table=True``) read Phi from a table on a geometric grid of theta, between two grid
  points the chord of log Phi -- above log Phi, which is convex in theta (a Laplace
  transform is log-convex: Hoelder's inequality), so the chord over-estimates it too.

A capacity from the table is therefore at most the one from the direct sum, which is at
most the exact one: the optimiser's curves never promise what the verifier's check (the
direct sum) refuses. Units: ms, requests/s, probabilities; servers as counts.

Routers (``serving.router``, :func:`fleetplan.perf.queueing.routed_queue`): under
least-work the queue is the pool's G/G/c; under a load-blind router (round-robin, random,
prefix-aware) each slice is its own G/G/1 with lambda / c and the arrival SCV
:func:`fleetplan.perf.queueing.server_ca2`, so C = rho and theta is one server's -- the
same formula with those (c, lambda, C_a^2), and a pool's capacity c times one server's.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fleetplan.perf.queueing import (
    ErlangCOf,
    erlang_c,
    fewest_servers,
    path_sum_distribution,
    routed_queue,
    server_ca2,
    ttft_percentiles_of_sum_ms,
    variability_factor,
)

__all__ = ["SLACK_BINS", "TtftTail", "MixTail", "ttft_tail", "tail_exceeds", "meets_percentile_of_sum", "max_arrival_rate_of_sum",
           "min_servers_of_sum", "capacity_curve_of_sum", "sum_curve_points", "convex_minorant", "path_distribution", "mix_tail", "PercentilesOfSum"]

#: The slack L - P - X is floored to multiples of L / SLACK_BINS ms (conservative).
SLACK_BINS = 1024
#: Ratio of consecutive points of the theta table (the chord's error shrinks with it).
THETA_RATIO = 1.05


@dataclass(frozen=True, eq=False)
class TtftTail:
    """P(TTFT > ``limit_ms``) of a pool as a function of its queue (see the module docstring).

    ``over`` = P(P + X > L) (probability); ``slack_ms`` (K,) the slack L - P - X of the
    requests within the limit without waiting, floored to the grid, ascending, and
    ``weight`` (K,) their probabilities (summing to 1 - ``over``)."""

    limit_ms: float
    over: float
    slack_ms: NDArray[np.float64]
    weight: NDArray[np.float64]
    _table: list = field(default_factory=list, compare=False, repr=False)

    def phi(self, theta: ArrayLike) -> NDArray[np.float64]:
        """Phi(theta) = sum_k weight_k exp(-theta slack_k), theta in 1/ms (array, >= 0)."""
        x = np.multiply.outer(np.asarray(theta, dtype=float), self.slack_ms)
        np.negative(x, out=x)  # exp(-theta slack), in place: a table's build is (~360 x ~500) of them
        np.exp(x, out=x)
        return x @ self.weight

    def phi_table(self, theta: ArrayLike) -> NDArray[np.float64]:
        """Phi read from a table on a geometric grid of theta (ratio :data:`THETA_RATIO`),
        the chord of log Phi between grid points: >= :meth:`phi` (log Phi is convex);
        below the grid Phi(0) = 1 - over, above it Phi at the grid's end (Phi decreases)."""
        if not self._table:
            h = self.limit_ms / SLACK_BINS
            lo = 1e-3 / self.limit_ms  # below it Phi is within 0.1% of Phi(0) (the chord from 0 covers it)
            hi = 40.0 / h  # past it exp(-theta h) < 5e-18: Phi is the weight at slack 0
            n = int(math.ceil(math.log(hi / lo) / math.log(THETA_RATIO))) + 1
            grid = np.concatenate([[0.0], lo * THETA_RATIO ** np.arange(n)])
            vals = self.phi(grid)
            self._table.append((grid, np.log(np.maximum(vals, 1e-300))))
        grid, logv = self._table[0]
        # np.interp holds its end values outside the grid (fp[0] below grid[0] = 0, fp[-1] above
        # the end, the same at the end points): the clamp to [0, grid[-1]] the docstring states,
        # without a pass of np.clip (the curves' bisection reads Phi millions of times)
        return np.exp(np.interp(np.asarray(theta, dtype=float), grid, logv))


def ttft_tail(limit_ms: float, path: tuple[NDArray[np.float64], NDArray[np.float64]], own_ms: ArrayLike, own_weight: ArrayLike) -> TtftTail:
    """The :class:`TtftTail` of a pool at ``limit_ms``: ``path`` the path's (grid ms, pmf)
    (:func:`fleetplan.perf.queueing.path_sum_distribution`), ``own_ms`` / ``own_weight``
    each request type's compute plus exposed KV (ms) and share. The path's grid points are
    its atoms, as in :func:`fleetplan.perf.queueing.ttft_percentile_of_sum_ms` (a type is
    within the limit with a path atom when atom + own <= L). Raises ValueError for a limit
    that is not positive or weights that do not sum to a positive number."""
    if not limit_ms > 0:
        raise ValueError(f"the TTFT limit must be a positive number of ms, got {limit_ms!r}")
    xs, pm = (np.asarray(a, dtype=float) for a in path)
    s = np.asarray(own_ms, dtype=float)
    w = np.asarray(own_weight, dtype=float)
    if not w.sum() > 0:
        raise ValueError("the request types' weights must sum to a positive number")
    w = w / w.sum()
    d = (limit_ms - s)[:, None] - xs[None, :]  # (types, path points): slack with that path atom
    m = w[:, None] * pm[None, :]
    inside = d >= 0.0
    over = float(np.clip(m[~inside].sum(), 0.0, 1.0))
    h = limit_ms / SLACK_BINS
    k = np.floor(d[inside] / h).astype(np.int64)
    wt = np.bincount(k, weights=m[inside]) if k.size else np.zeros(0)
    keep = wt > 0
    return TtftTail(float(limit_ms), over, np.arange(wt.size, dtype=float)[keep] * h, wt[keep])


def tail_exceeds(tail: TtftTail, c: ArrayLike, lam: ArrayLike, mean_service_ms: float, cs2: float = 1.0, ca2: float = 1.0,
                 router: str = "least-work") -> NDArray[np.float64]:
    """P(TTFT > L) of ``c`` servers at ``lam`` requests/s (arrays broadcast), E[S] =
    ``mean_service_ms``, C_s^2 ``cs2``, C_a^2 ``ca2``, spread by ``router``: over + C(c, a)
    Phi(theta), Phi by the direct sum; 1 where the queue is unstable (lambda E[S] >= c)."""
    c, lam, ca2 = routed_queue(router, np.asarray(c, dtype=float), np.asarray(lam, dtype=float), ca2)
    c = np.asarray(c, dtype=float)
    lam = np.asarray(lam, dtype=float)
    a = lam * mean_service_ms / 1e3
    cw = np.where(lam > 0, erlang_c(np.maximum(c, 1.0), a), 0.0)
    theta = (c / mean_service_ms - lam / 1e3) / variability_factor(cs2, ca2)
    th = np.maximum(theta, 0.0)
    out = tail.over + cw * tail.phi(th.ravel()).reshape(th.shape)
    return np.where(theta > 0, np.minimum(out, 1.0), 1.0)


def meets_percentile_of_sum(tail: TtftTail, percentile: float, c: float, lam: float, mean_service_ms: float, cs2: float = 1.0,
                            ca2: float = 1.0, router: str = "least-work") -> bool:
    """Whether the ``percentile``-th percentile of TTFT is within ``tail.limit_ms``:
    P(TTFT > L) <= 1 - p/100 (:func:`tail_exceeds`), with a relative tolerance of 1e-9 on
    the probability (a rate at the edge of :func:`max_arrival_rate_of_sum` meets it)."""
    if not 0.0 < percentile < 100.0:
        raise ValueError("percentile must be in (0, 100)")
    q = 1.0 - percentile / 100.0
    if lam <= 0:
        return tail.over <= q * (1 + 1e-9)
    return bool(tail_exceeds(tail, c, lam, mean_service_ms, cs2, ca2, router) <= q * (1 + 1e-9))


def max_arrival_rate_of_sum(c: ArrayLike, mean_service_ms: float, tail: TtftTail, percentile: float, cs2: float = 1.0, ca2: float = 1.0,
                            iterations: int = 45, table: bool = False, router: str = "least-work") -> NDArray[np.float64]:
    """Largest arrival rate (requests/s) each of ``c`` server counts carries with the
    ``percentile``-th percentile of TTFT within ``tail.limit_ms``: bisection on the
    utilisation rho in [0, 1), every count at once (P(TTFT > L) rises with lambda: C and
    Phi both do). 0 where even an empty queue misses (over >= q: the path and the
    compute alone exceed the limit too often). ``table``: Phi from :meth:`TtftTail.phi_table`
    (for long curves; never above the direct sum's rate). ``router``: under a load-blind
    one c times one server's rate at its own C_a^2. Raises ValueError for servers
    below 1, a percentile outside (0, 100) or a bad SCV."""
    c = np.atleast_1d(np.asarray(c, dtype=float))
    if not 0.0 < percentile < 100.0:
        raise ValueError("percentile must be in (0, 100)")
    if np.any(c < 1):
        raise ValueError("need servers c >= 1")
    if router != "least-work":
        per = np.broadcast_to(np.asarray(server_ca2(router, c, ca2), dtype=float), c.shape)
        vals, inv = np.unique(per, return_inverse=True)
        one = np.array([max_arrival_rate_of_sum([1.0], mean_service_ms, tail, percentile, cs2, float(v), iterations, table)[0] for v in vals])
        return c * one[inv.ravel()].reshape(c.shape)
    vf = float(variability_factor(cs2, ca2))
    q = 1.0 - percentile / 100.0
    if tail.over >= q:
        return np.zeros_like(c)
    phi = tail.phi_table if table else tail.phi
    lo = np.zeros_like(c)
    hi = np.ones_like(c)
    one = c.size == 1  # one server count (a pool's capacity): Erlang C's scalar path, the same floats without numpy's per-call cost
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        cw = erlang_c(float(c.flat[0]), float(mid.flat[0] * c.flat[0])) if one else erlang_c(c, mid * c)
        theta = c * (1.0 - mid) / mean_service_ms / vf
        ok = tail.over + cw * phi(theta) <= q
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return lo * c * 1e3 / mean_service_ms



def min_servers_of_sum(lam: float, mean_service_ms: float, tail: TtftTail, percentile: float, cs2: float = 1.0, ca2: float = 1.0,
                       max_servers: int = 10_000_000, router: str = "least-work") -> int | None:
    """Fewest servers whose ``percentile``-th TTFT percentile of the sum is within
    ``tail.limit_ms`` at ``lam`` requests/s (:func:`meets_percentile_of_sum`): exponential
    search then bisection (P(TTFT > L) does not rise with c). 0 without arrivals; None when
    an empty queue already misses or more than ``max_servers`` would be needed."""
    if lam <= 0:
        return 0
    if tail.over >= 1.0 - percentile / 100.0:
        return None

    def ok(c: int) -> bool:
        return meets_percentile_of_sum(tail, percentile, c, lam, mean_service_ms, cs2, ca2, router)

    return fewest_servers(ok, max(1, int(np.floor(lam * mean_service_ms / 1e3))), max_servers)  # below the floor it is unstable

@dataclass(frozen=True, eq=False)
class MixTail:
    """One traffic mix a prefill pool may carry: its service time's mean (ms) and SCV, the
    arrivals' SCV and its :class:`TtftTail` at the SLO limit."""

    mean_ms: float
    cs2: float
    ca2: float
    tail: TtftTail


def capacity_curve_of_sum(mixes: list[MixTail], percentile: float, n_max: int, iterations: int = 45,
                          router: str = "least-work") -> NDArray[np.float64]:
    """A(n), n = 0..n_max: the most work (Erlangs = busy slices) n slices carry with the
    ``percentile``-th percentile of TTFT within the limit for every mix of ``mixes``
    (:func:`sum_curve_points`), then the lower convex envelope of the points
    (:func:`convex_minorant`: the sizing model's chords need a discretely convex curve; the
    least of convex curves need not be one, and its envelope is below it). Zeros when a
    mix misses the limit with an empty queue. Raises ValueError as :func:`max_arrival_rate_of_sum`."""
    return convex_minorant(sum_curve_points(mixes, percentile, n_max, iterations, router))


def sum_curve_points(mixes: list[MixTail], percentile: float, n_max: int, iterations: int = 45, router: str = "least-work",
                     start: int = 0) -> NDArray[np.float64]:
    """The points A(n), n = ``start``..n_max (shape (n_max - start + 1,), Erlangs) of
    :func:`capacity_curve_of_sum` before its convex envelope: the least of the mixes'
    capacities, by one bisection on the utilisation with every mix's test at each step
    (Erlang C is the mixes' only shared part), Phi from the tables
    (:meth:`TtftTail.phi_table`, conservative); A(0) = 0, and zeros when a mix misses the
    limit with an empty queue. ``router``: under a load-blind one each of the n slices is
    a G/G/1 at its own C_a^2 (:func:`fleetplan.perf.queueing.server_ca2` of n), so the
    bisection runs on one server per count. Every server count is bisected on its own
    (element-wise float64 operations only), so the points of ``start``..n_max are those of
    0..n_max from ``start`` on, bit for bit: a longer curve extends a shorter one
    (:meth:`fleetplan.tables.cache.TableCache.points`). Raises ValueError for a
    percentile outside (0, 100)."""
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
    erlang = ErlangCOf(c)
    for m in mixes:
        m.tail.phi_table(np.zeros(1))  # build each table once, before the loop reads them directly
    tests = [(m.tail.over, *m.tail._table[0], k, np.ndim(k) > 0) for m, k in zip(mixes, scale)]
    fails = [0] * len(tests)  # each mix's failures in the last step: the likeliest to fail is tested first
    lo = np.zeros_like(c)
    hi = np.ones_like(c)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        cw = erlang(mid * c)
        free = c * (1.0 - mid)
        # every mix's test at every count, as "ok &= over + cw Phi(free k) <= q" over the mixes:
        # a count a mix fails is not tested again (an element-wise AND: the same booleans)
        at = None  # the counts still passing (None: all)
        cw_at, free_at = cw, free
        order = sorted(range(len(tests)), key=lambda i: -fails[i])
        for i in order:
            over, grid, logv, k, per_count = tests[i]
            kk = (k if at is None else k[at]) if per_count else k
            good = over + cw_at * np.exp(np.interp(free_at * kk, grid, logv)) <= q
            fails[i] = good.size - int(np.count_nonzero(good))
            if fails[i]:
                keep = np.flatnonzero(good)
                at = keep if at is None else at[keep]
                cw_at, free_at = cw_at[keep], free_at[keep]
                if at.size == 0:
                    break
        if at is None:
            lo = mid
        else:
            ok = np.zeros(c.shape, dtype=bool)
            ok[at] = True
            lo = np.where(ok, mid, lo)
            hi = np.where(ok, hi, mid)
    return np.concatenate([[0.0], lo * n]) if start == 0 else lo * n


def convex_minorant(a: ArrayLike) -> NDArray[np.float64]:
    """The greatest discretely convex sequence <= ``a`` (points at 0, 1, 2, ...): the lower
    convex hull of the points (Andrew's monotone chain), read at every index. ``a``
    itself when it is convex."""
    a = np.asarray(a, dtype=float)
    if a.size < 3 or np.all(np.diff(a, 2) >= 0.0):
        return a.copy()
    hull: list[int] = []
    for i in range(a.size):
        while len(hull) >= 2:
            j, k = hull[-2], hull[-1]
            # k is above the chord from j to i: drop it
            if (a[k] - a[j]) * (i - j) >= (a[i] - a[j]) * (k - j):
                hull.pop()
            else:
                break
        hull.append(i)
    return np.interp(np.arange(a.size, dtype=float), np.array(hull, dtype=float), a[hull])


_PATHS: dict[tuple, tuple[NDArray[np.float64], NDArray[np.float64]]] = {}


def _path_key(inst) -> tuple:
    """What the instance's TTFT path depends on: its components' (p50, p99) ms."""
    return tuple((float(c.p50_ms), float(c.p99_ms)) for c in inst.priors.path_latency)


def path_distribution(inst, key: tuple | None = None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The instance's fixed TTFT path as (grid ms, pmf): :func:`path_sum_distribution` of
    ``priors.path_latency``, memoised on the components' (p50, p99) (read-only arrays;
    ``key``: :func:`_path_key` of ``inst`` when already known)."""
    key = _path_key(inst) if key is None else key
    got = _PATHS.get(key)
    if got is None:
        xs, pm = path_sum_distribution(list(key))
        xs.flags.writeable = False
        pm.flags.writeable = False
        got = _PATHS[key] = (xs, pm)
    return got


#: (limit ms, path key, request types' ms, their weights) -> TtftTail: :func:`mix_tail`'s tails,
#: shared by whoever asks -- the candidate tables' profiles and the verifier's are different
#: objects (other percentiles) with the same request types, and the purchase tree's node
#: tables and the check of every quarter's fleet asked the same tails again (each building
#: its Phi table again). Least recently used go first past :data:`_TAILS_SIZE`.
_TAILS: OrderedDict = OrderedDict()
_TAILS_SIZE = 20_000
_TAILS_LOCK = threading.Lock()


def mix_tail(inst, prof, limit_ms: float) -> MixTail:
    """The :class:`MixTail` of a prefill pool's traffic mix with profile ``prof``
    (:class:`fleetplan.perf.pools.PrefillProfile`: mean, SCVs, every request type's compute
    plus exposed KV) at the TTFT limit ``limit_ms`` of ``inst``'s path. Its
    :class:`TtftTail` (:func:`ttft_tail`) is memoised on the limit, the path and the request
    types (:data:`_TAILS`; shared: do not mutate it), so the same floats as computed alone."""
    path = _path_key(inst)
    key = (float(limit_ms), path, tuple(prof.type_ms), tuple(prof.type_weight))
    with _TAILS_LOCK:
        tail = _TAILS.get(key)
        if tail is not None:
            _TAILS.move_to_end(key)
    if tail is None:
        tail = ttft_tail(limit_ms, path_distribution(inst, path), prof.type_ms, prof.type_weight)
        with _TAILS_LOCK:
            tail = _TAILS.setdefault(key, tail)
            if len(_TAILS) > _TAILS_SIZE:
                _TAILS.popitem(last=False)
    return MixTail(prof.mean_ms, prof.cs2, prof.ca2, tail)


class PercentilesOfSum(Mapping):
    """{percentile: ms} of :func:`fleetplan.perf.queueing.ttft_percentiles_of_sum_ms` at its
    arguments, computed when first read (the same floats as computed at once). Most latencies
    of a pool are asked for whether the SLOs hold -- the TTFT bound, the TPOT, the ITL --
    and never read the estimate: a search's probes (the margins', the batch infill's, a
    robust plan's every source) then skip its bisections, two thirds of a chunked
    latency's time. Raises ValueError at once for a percentile outside (0, 100)."""

    def __init__(self, percentiles: list[float], *args):
        for p in percentiles:
            if not 0.0 < p < 100.0:
                raise ValueError("percentile must be in (0, 100)")
        self._keys, self._args, self._values = list(percentiles), args, None

    def _get(self) -> dict[float, float]:
        if self._values is None:
            self._values, self._args = ttft_percentiles_of_sum_ms(self._keys, *self._args), None
        return self._values

    def __getitem__(self, p: float) -> float:
        return self._get()[p]

    def __iter__(self):
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return repr(self._get())
