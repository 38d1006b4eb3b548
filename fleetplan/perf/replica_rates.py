"""The per-pool rate search of colocated replicas: the largest per-replica arrival rate a
pool of n replicas carries within its SLOs (:class:`ReplicaRates`), the fewest replicas
for a demand, and the schedules an instance offers. The model it searches is
:mod:`fleetplan.perf.replica_state` (derivations in :mod:`fleetplan.perf.colocated`'s
docstring); every public name here is re-exported by :mod:`fleetplan.perf.colocated`.

Units: requests/s, ms, tokens, bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fleetplan.deadline import check as deadline_check
from fleetplan.perf.inputs import ModelSpec, Priors
from fleetplan.perf.queueing import ErlangCOf, bisect_tree, server_ca2, tree_mids, wait_percentile_ms, wait_percentiles_of
from fleetplan.perf.replica_state import (
    ColocatedLatency,
    ColocatedState,
    ReplicaTables,
    colocated_latency,
    colocated_states,
    itl_ms,
    own_compute_percentiles,
    rowdot,
    tpot_dispersion,
    tpot_exceeds,
)
from fleetplan.perf.replica_steps import CHUNKED, PREFILL_FIRST, PromptTypes, Schedule, ServiceKernel, prompt_types
from fleetplan.perf.roofline import SliceSpec

__all__ = ["ReplicaRates", "RateMemo", "replica_rates", "max_rps_colocated", "schedules_of", "fewest_replicas"]

#: the rate searches' bisection steps evaluated per array pass (2^4 - 1 = 15 rates at once)
_LEVELS = 4


def schedules_of(inst) -> list[Schedule]:
    """The colocated schedules an instance lets the optimiser choose from (``serving``):
    prefill-first and/or chunked at every candidate token budget, in that order."""
    out = []
    for kind in inst.serving.colocated_schedules:
        if kind == PREFILL_FIRST:
            out.append(Schedule(PREFILL_FIRST))
        else:
            out += [Schedule(CHUNKED, int(c)) for c in sorted(set(inst.serving.chunk_tokens))]
    return out


@dataclass
class RateMemo:
    """What a :class:`ReplicaRates` search finds that does not depend on the order of its
    calls, shared by the searches of equal inputs (the candidate tables of several builds:
    :mod:`fleetplan.tables.cache`): ``top`` (:attr:`ReplicaRates.top`, requests/s),
    ``fixed`` (a prefill-first schedule's prompt service: mean ms, its SCV, own compute
    percentiles -- the same in every state) and ``rates`` ((n, a, b) -> the rate of a pool of
    n searched between a and b, requests/s). :meth:`ReplicaRates.rate` (n) is a bisection
    between the rates of the pool sizes asked for before it, so its value depends on that
    history -- but only through its bracket (a, b): a pure function of (n, a, b) given the
    inputs, which is what ``rates`` keys. ``holds``: (n, rate) -> whether a pool of n is
    stable and meets every SLO at that rate per replica (:meth:`ReplicaRates.holds`: the
    check :class:`fleetplan.perf.robust.MinRates` makes of every source but the searched
    one). ``changed``: set when a search adds to it."""

    top: float | None = None
    tops: dict[float, float] = field(default_factory=dict)  # round robin: the split's index of dispersion -> top rate
    fixed: tuple | None = None
    rates: dict[tuple[int, float, float], float] = field(default_factory=dict)
    holds: dict[tuple[int, float], bool] = field(default_factory=dict)
    changed: bool = False

    @property
    def size(self) -> int:
        """Results held: the rates and checks, and the top rate and fixed service when known."""
        return len(self.rates) + len(self.holds) + len(self.tops) + (self.top is not None) + (self.fixed is not None)


def replica_rates(inst, tm, sl: SliceSpec, sources, schedule: Schedule, router: str | None = None,
                  memo: RateMemo | None = None) -> "ReplicaRates":
    """:class:`ReplicaRates` of tier mix ``tm`` on shape ``sl`` fed by ``sources`` under
    ``schedule``, from the instance: its SLOs (:func:`fleetplan.perf.pools.tier_slos`), the
    residents' mean KV and the KV pool's request capacity, the fixed path, and the
    instance's ``serving.router`` unless ``router`` is given. A colocated replica
    moves no KV, so no transfer is added to its TTFT. ``memo``: what earlier searches of
    the same inputs found (:class:`RateMemo`; the same rates as without it)."""
    from fleetplan.perf.pools import path_ms, tier_slos
    from fleetplan.perf.roofline import slice_memory_map

    kv_mean, _ = tm.resident_kv(inst)
    cap = slice_memory_map(inst.model, sl, inst.priors).resident_capacity(kv_mean, inst.priors.kv_paging_slack)
    slos = [(s.metric, float(s.percentile), float(s.limit_ms)) for s in tier_slos(inst, tm.name)]
    pcts = sorted({p for _, p, _ in slos} | {50.0, 95.0, 99.0})
    comps = [(c.p50_ms, c.p99_ms) for c in inst.priors.path_latency]
    return ReplicaRates(inst.model, sl, inst.priors, schedule, prompt_types(tm, sources), tm.output_tokens, kv_mean, cap, slos,
                        comps, {p: path_ms(inst, p) for p in pcts}, 0.0, router or inst.serving.router,
                        ca2=inst.workload.arrival_scv, output_lengths=inst.workload.output_length_distribution, memo=memo)


class ReplicaRates:
    """The largest per-replica arrival rate (requests/s) at which a pool of n replicas is
    stable and meets ``slos`` ([(metric 'ttft'|'tpot'|'itl', percentile, limit_ms)]) under
    ``schedule``, for any n (:meth:`rate`, memoised), and the fewest replicas for a demand
    (:meth:`replicas_for`).

    The per-replica state depends on the per-replica rate only, so TPOT, ITL and stability
    give one limit for every n (:attr:`top`: bisection on lambda in (0, 1/E[S at b = 0]),
    the metrics rising with the load) -- except under round robin, whose split makes a
    replica's arrivals smoother in a larger pool (C_a^2 / n), which narrows the TPOT tail
    (:func:`fleetplan.perf.replica_state.tpot_dispersion`): then the limit is per n
    (:meth:`top_at`) and rises with n; the
    TTFT percentile bound (:func:`colocated_latency`) lowers it per n. ``router`` 'least-work' queues the pool's prompts M/G/c over its n
    replicas, so the rate rises with n (pooling); n = 1 is the M/G/1 per replica -- an
    upper bound on the least-work wait for any pool size (pooling never lengthens the FCFS
    wait at the same load per server), so the n = 1 rate holds for every count and rate(n)
    holds for every count >= n. A load-blind router ('round-robin', 'random',
    'prefix-aware') gives each replica a G/G/1 of its own whose arrival SCV
    (:func:`fleetplan.perf.queueing.server_ca2`) never rises with n -- C_a^2 / n round
    robin, a Poisson split random -- so again rate(n) holds for every count >= n; where
    that SCV does not depend on n (random with C_a^2 <= 1) every n has the n = 1 rate.
    A rate is 0 when even a trickle fails.

    ``memo`` (a :class:`RateMemo`, shared with other searches of the same inputs) holds the
    top rate, the fixed prompt service and each rate by its bracket: a search reads what an
    earlier one found for the same bracket instead of bisecting again (the same floats).

    Every evaluation of a search's predicate (a few rates at once) calls
    :func:`fleetplan.deadline.check` (a no-op outside a deadline scope): under
    ``--time-limit`` a search stops within one evaluation of the deadline, raising
    :class:`~fleetplan.deadline.TimeLimitReached` named for the enclosing phase.
    """

    def __init__(self, model: ModelSpec, sl: SliceSpec, priors: Priors, schedule: Schedule, prompts: PromptTypes,
                 output_tokens: float, kv_bytes_per_request: float, kv_capacity_requests: int,
                 slos: list[tuple[str, float, float]], path_components: list[tuple[float, float]],
                 path_pct_ms: dict[float, float], extra_ms: ArrayLike = 0.0, router: str = "least-work", iterations: int = 22,
                 ca2: float = 1.0, output_lengths: str = "fixed", memo: RateMemo | None = None):
        self.args = (model, sl, priors)
        self.output_lengths = output_lengths  # 'fixed' or 'geometric' (workload.output_length_distribution)
        self.schedule, self.prompts, self.o, self.kv, self.cap = schedule, prompts, output_tokens, kv_bytes_per_request, kv_capacity_requests
        self.slos, self.comps, self.path_pct, self.extra, self.router, self.iterations = slos, path_components, path_pct_ms, extra_ms, router, iterations
        self.ca2 = ca2  # the arrivals' SCV within the hour (Allen-Cunneen, workload.arrival_scv)
        self._states: dict[float, ColocatedState] = {}
        # the rps-free tables: the step kernel, colocated_state's grid, the service by residents
        self.tables = ReplicaTables(ServiceKernel(model, sl, priors, schedule, prompts, kv_bytes_per_request))
        self._rates: dict[int, float] = {}
        self._checked: dict = {}  # (pool size or "state") -> {rate: SLOs met}
        self._erlang: dict[int, ErlangCOf] = {}  # the TTFT check's Erlang C by servers
        # the top rate, prefill-first's (service mean ms, its SCV, own compute percentiles) -- every
        # state's -- and each rate by its bracket, shared with other searches of the same inputs
        self.memo = memo if memo is not None else RateMemo()

    @property
    def top(self) -> float:
        """The per-replica rate TPOT, ITL and stability allow (requests/s) in a pool of one
        replica: for any pool size where it does not depend on the size (:meth:`top_at`),
        else the least of them."""
        return self.top_at(1)

    def _split(self, n: int) -> float:
        """The index of dispersion of one replica's arrivals in a pool of ``n`` (the TPOT
        tail's I): the stream's under least-work, the split's under a load-blind router."""
        return tpot_dispersion(self.router, int(n), self.ca2)

    def sized_alike(self, n: int) -> bool:
        """Whether TPOT, ITL and stability allow the same per-replica rate in a pool of ``n``
        as in a pool of one (the split's index of dispersion does not change with n)."""
        return self._split(n) == self._split(1)

    def top_at(self, n: int) -> float:
        """The per-replica rate TPOT, ITL and stability allow in a pool of ``n`` replicas
        (requests/s; non-decreasing in n), memoised per split (:class:`RateMemo`: ``top``
        for a pool of one, ``tops`` for the others' splits)."""
        if self.sized_alike(n):
            if self.memo.top is None:
                self.memo.top = self._top(1)
                self.memo.changed = True
            return self.memo.top
        key = self._split(n)
        if key not in self.memo.tops:
            self.memo.tops[key] = self._top(int(n))
            self.memo.changed = True
        return self.memo.tops[key]

    def top_bound(self) -> float:
        """An upper bound on every pool size's :meth:`top_at` (requests/s), for the replica
        searches' lower end; 0 (no bound) where the top rises with the pool."""
        return self.top if self.sized_alike(10**9) else 0.0

    def latency(self, lam: float, n: int, percentiles: list[float], estimate: bool = True) -> tuple[ColocatedState, ColocatedLatency]:
        """(state, latency) of a pool of ``n`` replicas at ``lam`` requests/s per replica."""
        st = self.state(lam)
        return st, colocated_latency(*self.args, st, n, self.router, self.o, self.kv, percentiles, self.comps, self.path_pct,
                                     self.extra, estimate, self.ca2, self.output_lengths, self.tables)

    def state(self, lam: float) -> ColocatedState:
        """The replica's state at ``lam`` requests/s (memoised)."""
        return self.states([lam])[0]

    def states(self, lams: list[float]) -> list[ColocatedState]:
        """:meth:`state` at each rate of ``lams``; the ones not yet memoised in one
        :func:`colocated_states` call."""
        missing = [x for x in dict.fromkeys(lams) if x not in self._states]
        if missing:
            got = colocated_states(*self.args, self.schedule, self.prompts, missing, self.o, self.kv, self.cap,
                                   grid_memo=self.tables.grid_memo, kernel=self.tables.kernel)
            self._states.update(zip(missing, got))
        return [self._states[x] for x in lams]

    def _check(self, key, lams, fn) -> NDArray[np.bool_]:
        """``fn`` (a predicate vectorised over rates) at each rate of ``lams``, memoised under
        ``key``: a rate checked before (the search's first pass, which prefetches the tree's
        mids with its end points) is not evaluated again."""
        memo = self._checked.setdefault(key, {})
        lams = [float(x) for x in lams]
        todo = [x for x in dict.fromkeys(lams) if x not in memo]
        if todo:
            deadline_check()  # a command's --time-limit (fleetplan.deadline; a no-op outside a deadline scope)
            memo.update(zip(todo, fn(np.array(todo)).tolist()))
        return np.array([memo[x] for x in lams], dtype=bool)

    def holds(self, lam: float, n: int) -> bool:
        """Whether a pool of ``n`` replicas is stable and meets every SLO at ``lam`` requests/s
        per replica (the search's own predicates), memoised in :attr:`memo` (``holds``)."""
        key = (int(n), float(lam))
        got = self.memo.holds.get(key)
        if got is None:
            got = bool(self._ok_state([lam], n)[0]) and bool(self._ok_ttft([lam], n)[0])
            self.memo.holds[key] = got
            self.memo.changed = True
        return got

    def _ok_state(self, lams, n: int = 1) -> NDArray[np.bool_]:
        """:meth:`_state_ok` in a pool of ``n`` at each rate of ``lams``, memoised per split."""
        return self._check(("state", self._split(n)), lams, lambda x: self._state_ok(x, n))

    def _ok_ttft(self, lams, n: int) -> NDArray[np.bool_]:
        """:meth:`_ttft_ok` in a pool of ``n`` at each rate of ``lams``, memoised."""
        return self._check(n, lams, lambda x: self._ttft_ok(x, n))

    def _state_ok(self, lams: NDArray[np.float64], n: int = 1) -> NDArray[np.bool_]:
        """Stable and within the TPOT and ITL SLOs in a pool of ``n`` (only the TPOT tail's
        split depends on it, :meth:`_split`), at each rate of ``lams``."""
        sts = self.states(lams.tolist())
        ok = np.array([st.stable for st in sts], dtype=bool)
        for metric, p, limit in self.slos:
            if metric == "tpot" and ok.any():
                ok &= ~tpot_exceeds(*self.args, sts, self.o, self.kv, p, limit, self.ca2, self.router, self.output_lengths,
                                    self.tables.kernel, n)
            elif metric == "itl":
                ok &= [o and not itl_ms(st, 1, self.router, [p], self.tables.kernel)[p] > limit for o, st in zip(ok, sts)]
        return ok

    def _ttft_ok(self, lams: NDArray[np.float64], n: int) -> NDArray[np.bool_]:
        """Within the TTFT SLOs (:func:`ttft_bound_ms`) in a pool of ``n`` at each rate of
        ``lams``: path + queue wait + own compute + one decode step <= the limit, for all the
        stable states at once."""
        tt = [(p, limit) for m, p, limit in self.slos if m == "ttft"]
        sts = self.states(lams.tolist())
        ok = np.array([st.stable for st in sts], dtype=bool)
        live = np.nonzero(ok)[0]
        if not tt or live.size == 0:
            return ok if tt else np.ones(len(sts), dtype=bool)
        sts = [sts[k] for k in live]
        pcts = sorted({p for p, _ in tt})
        c = n if self.router == "least-work" else 1  # a load-blind router: one replica's own G/G/1
        lam = np.array([st.rps for st in sts]) * c
        ca2 = self.ca2 if self.router == "least-work" else server_ca2(self.router, n, self.ca2)
        step = np.array([st.step_ms for st in sts])
        if self.schedule.kind == PREFILL_FIRST:
            # a whole prompt's pass does not depend on the residents: the same service and own
            # compute in every state
            if self.memo.fixed is None:
                st = sts[0]
                self.memo.fixed = (st.service_mean_ms, st.service_cs2, own_compute_percentiles([st], self.tables, self.extra, pcts))
                self.memo.changed = True
            mean, cs2, own = self.memo.fixed
        else:
            own = own_compute_percentiles(sts, self.tables, self.extra, pcts)
            S, weight = np.array([st.service_ms for st in sts]), sts[0].weight  # one replica's states: the same prompt weights
            mean = rowdot(S, weight)  # ColocatedState.service_mean_ms and service_cs2, every state at once
            cs2 = rowdot((S - mean[:, None]) ** 2, weight) / mean**2
        good = np.ones(live.size, dtype=bool)
        for p, limit in tt:
            good &= self.path_pct[p] + self._wait(c, lam, mean, p, cs2, ca2) + own[p] + step <= limit
        ok[live] = good
        return ok

    def _wait(self, c: int, lam: NDArray[np.float64], mean, p: float, cs2, ca2: float) -> NDArray[np.float64]:
        """The queue wait's percentile ``p`` (ms) at each arrival rate of ``lam`` (0 where no
        arrivals) with arrival SCV ``ca2``: :func:`wait_percentile_ms`, one array call -- or,
        for a few rates, its scalar path (the same floats, a tenth of the overhead)."""
        mean, cs2 = np.broadcast_to(mean, lam.shape), np.broadcast_to(cs2, lam.shape)
        if lam.size <= 4:
            return np.array([float(wait_percentile_ms(c, x, m, p, s, ca2)) if x > 0 else 0.0
                             for x, m, s in zip(lam.tolist(), mean.tolist(), cs2.tolist())])
        erlang = self._erlang.get(c)
        if erlang is None:
            erlang = self._erlang[c] = ErlangCOf(c)  # Erlang C's parts that do not depend on the load, once per c
        with np.errstate(all="ignore"):
            return np.where(lam > 0, wait_percentiles_of(erlang, lam, mean, p, cs2, ca2), 0.0)

    def _top(self, n: int = 1) -> float:
        S0 = self.tables.kernel.grid(np.zeros(1), padded_sums=True)[0][0]  # prompt_service at b = 0
        hi = 1e3 / float(np.dot(self.prompts.weight / self.prompts.weight.sum(), S0))
        lo = hi * 1e-6
        ok = lambda lams: self._ok_state(lams, n)  # noqa: E731
        # the bisection, its steps evaluated _LEVELS at a time (the same mids and decisions); its
        # first pass with the trickle it starts from
        if not ok([lo] + tree_mids(lo, hi, _LEVELS)[0])[0]:
            return 0.0
        return bisect_tree(ok, lo, hi, self.iterations, _LEVELS)[0]

    def rate(self, n: int) -> float:
        """Largest per-replica rate of a pool of ``n`` (>= 1) replicas (requests/s): the top
        rate if it meets the TTFT SLOs there, else a bisection between the largest rate of a
        smaller pool (or a trickle) and the smallest of a larger one (or the top)."""
        n = int(n)
        if n < 1:
            raise ValueError("replicas must be >= 1")
        if self.router != "least-work" and self.sized_alike(n):
            n = 1  # a load-blind router whose split does not depend on the pool size: every n is one replica's
        if n in self._rates:
            return self._rates[n]
        top = self.top_at(n)
        below = [v for k, v in self._rates.items() if k < n]
        a = max(below) if below else top * 1e-6
        b = min([v for k, v in self._rates.items() if k > n] + [top])
        known = self.memo.rates.get((n, a, b))
        if known is not None:
            r = known
        elif top <= 0:
            r = 0.0
        else:
            # one pass for the top, the lower end and the bisection's first mids (read only when
            # the top fails and the lower end holds)
            at_top, at_a = self._ok_ttft([top, a] + tree_mids(a, b, _LEVELS)[0], n)[:2]
            if at_top:
                r = top
            elif not at_a:
                r = 0.0
            else:
                r = bisect_tree(lambda mids: self._ok_ttft(mids, n), a, b, self.iterations - 6, _LEVELS)[0]
        if known is None:
            self.memo.rates[(n, a, b)] = r
            self.memo.changed = True
        self._rates[n] = r
        return r

    def replicas_for(self, demand_rps: float, headroom: float = 1.0, max_replicas: int = 100_000) -> int | None:
        """Fewest replicas n with n x rate(n) x headroom >= ``demand_rps`` (count; 0 for no
        demand; None when no pool up to ``max_replicas`` carries it): :func:`fewest_replicas`."""
        return fewest_replicas(self.rate, self.top_bound, demand_rps, headroom, max_replicas)


def fewest_replicas(rate, top, demand_rps: float, headroom: float = 1.0, max_replicas: int = 100_000) -> int | None:
    """Fewest replicas n with n x ``rate``(n) x headroom >= ``demand_rps`` (count; 0 for no
    demand; None when no pool up to ``max_replicas`` carries it). Binary search: n x rate(n)
    rises with n. ``top()`` is an upper bound on every rate(n) (requests/s): the search's
    lower end (0: none, the search starts at 0)."""
    if demand_rps <= 0:
        return 0
    r1 = rate(1) * headroom
    if r1 <= 0:
        return None
    ok = lambda n: n * rate(n) * headroom >= demand_rps * (1 - 1e-12)  # noqa: E731
    hi = min(max(int(math.ceil(demand_rps / r1 - 1e-9)), 1), max_replicas)  # any demand needs a replica (1e-9 req/s: ceil(-1e-9) was 0)
    if not ok(hi):
        return None
    t = top() * headroom
    lo = max(int(math.ceil(demand_rps / t - 1e-9)) - 1, 0) if t > 0 else 0
    while hi - lo > 1:
        deadline_check()
        mid = (lo + hi) // 2
        if mid >= 1 and ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def max_rps_colocated(model: ModelSpec, sl: SliceSpec, priors: Priors, schedule: Schedule, prompts: PromptTypes,
                      output_tokens: float, kv_bytes_per_request: float, kv_capacity_requests: int,
                      slos: list[tuple[str, float, float]], path_components: list[tuple[float, float]],
                      path_pct_ms: dict[float, float], extra_ms: ArrayLike = 0.0, replicas: list[int] | int = 1,
                      router: str = "least-work") -> dict[int, float]:
    """{n: :meth:`ReplicaRates.rate` (n)} for every n of ``replicas`` (requests/s per replica)."""
    rr = ReplicaRates(model, sl, priors, schedule, prompts, output_tokens, kv_bytes_per_request, kv_capacity_requests, slos,
                      path_components, path_pct_ms, extra_ms, router)
    return {int(n): rr.rate(int(n)) for n in sorted({int(x) for x in np.atleast_1d(replicas)})}
