"""The per-pool rate search of colocated replicas: the largest per-replica arrival rate a
pool of n replicas carries within its SLOs (:class:`ReplicaRates`), the fewest replicas
for a demand, and the schedules an instance offers. The model it searches is
:mod:`fleetplan.perf.replica_state` (derivations in :mod:`fleetplan.perf.colocated`'s
docstring); every public name here is re-exported by :mod:`fleetplan.perf.colocated`.

Units: requests/s, ms, tokens, bytes.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fleetplan.deadline import check as deadline_check
from fleetplan.instance.schema import ModelSpec, Priors
from fleetplan.perf.queueing import bisect_tree, tree_mids, wait_percentile_ms
from fleetplan.perf.replica_state import (
    ColocatedLatency,
    ColocatedState,
    ReplicaTables,
    colocated_latency,
    colocated_states,
    itl_ms,
    own_compute_percentiles,
    rowdot,
    tpot_exceeds,
)
from fleetplan.perf.replica_steps import CHUNKED, PREFILL_FIRST, PromptTypes, Schedule, ServiceKernel, prompt_types
from fleetplan.perf.roofline import SliceSpec

__all__ = ["ReplicaRates", "replica_rates", "max_rps_colocated", "schedules_of", "fewest_replicas"]

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


def replica_rates(inst, tm, sl: SliceSpec, sources, schedule: Schedule, router: str | None = None) -> "ReplicaRates":
    """:class:`ReplicaRates` of tier mix ``tm`` on shape ``sl`` fed by ``sources`` under
    ``schedule``, from the instance: its SLOs (:func:`fleetplan.perf.pools.tier_slos`), the
    residents' mean KV and the KV pool's request capacity, the fixed path, and the
    instance's ``serving.replica_router`` unless ``router`` is given. A colocated replica
    moves no KV, so no transfer is added to its TTFT."""
    from fleetplan.perf.pools import path_ms, tier_slos
    from fleetplan.perf.roofline import slice_memory_map

    kv_mean, _ = tm.resident_kv(inst)
    cap = slice_memory_map(inst.model, sl, inst.priors).resident_capacity(kv_mean, inst.priors.kv_paging_slack)
    slos = [(s.metric, float(s.percentile), float(s.limit_ms)) for s in tier_slos(inst, tm.name)]
    pcts = sorted({p for _, p, _ in slos} | {50.0, 95.0, 99.0})
    comps = [(c.p50_ms, c.p99_ms) for c in inst.priors.path_latency]
    return ReplicaRates(inst.model, sl, inst.priors, schedule, prompt_types(tm, sources), tm.output_tokens, kv_mean, cap, slos,
                        comps, {p: path_ms(inst, p) for p in pcts}, 0.0, router or inst.serving.replica_router,
                        ca2=inst.workload.arrival_scv, output_lengths=inst.workload.output_length_distribution)


class ReplicaRates:
    """The largest per-replica arrival rate (requests/s) at which a pool of n replicas is
    stable and meets ``slos`` ([(metric 'ttft'|'tpot'|'itl', percentile, limit_ms)]) under
    ``schedule``, for any n (:meth:`rate`, memoised), and the fewest replicas for a demand
    (:meth:`replicas_for`).

    The per-replica state depends on the per-replica rate only, so TPOT, ITL and stability
    give one limit for every n (:attr:`top`: bisection on lambda in (0, 1/E[S at b = 0]),
    the metrics rising with the load); the TTFT percentile bound (:func:`colocated_latency`)
    lowers it per n. ``router`` 'least-work' queues the pool's prompts M/G/c over its n
    replicas, so the rate rises with n (pooling); n = 1, or 'random', is the M/G/1 per
    replica -- an upper bound on the least-work wait for any pool size (pooling never
    lengthens the FCFS wait at the same load per server), so the n = 1 rate holds for
    every count and rate(n) holds for every count >= n. A rate is 0 when even a trickle fails.

    Every evaluation of a search's predicate (a few rates at once) calls
    :func:`fleetplan.deadline.check` (a no-op outside a deadline scope): under
    ``--time-limit`` a search stops within one evaluation of the deadline, raising
    :class:`~fleetplan.deadline.TimeLimitReached` named for the enclosing phase.
    """

    def __init__(self, model: ModelSpec, sl: SliceSpec, priors: Priors, schedule: Schedule, prompts: PromptTypes,
                 output_tokens: float, kv_bytes_per_request: float, kv_capacity_requests: int,
                 slos: list[tuple[str, float, float]], path_components: list[tuple[float, float]],
                 path_pct_ms: dict[float, float], extra_ms: ArrayLike = 0.0, router: str = "least-work", iterations: int = 22,
                 ca2: float = 1.0, output_lengths: str = "fixed"):
        self.args = (model, sl, priors)
        self.output_lengths = output_lengths  # 'fixed' or 'geometric' (workload.output_length_distribution)
        self.schedule, self.prompts, self.o, self.kv, self.cap = schedule, prompts, output_tokens, kv_bytes_per_request, kv_capacity_requests
        self.slos, self.comps, self.path_pct, self.extra, self.router, self.iterations = slos, path_components, path_pct_ms, extra_ms, router, iterations
        self.ca2 = ca2  # the arrivals' SCV within the hour (Allen-Cunneen, workload.arrival_scv)
        self._states: dict[float, ColocatedState] = {}
        # the rps-free tables: the step kernel, colocated_state's grid, the service by residents
        self.tables = ReplicaTables(ServiceKernel(model, sl, priors, schedule, prompts, kv_bytes_per_request))
        self._rates: dict[int, float] = {}
        self._top_rate: float | None = None
        self._checked: dict = {}  # (pool size or "state") -> {rate: SLOs met}
        self._fixed: tuple | None = None  # prefill-first: (service mean ms, its SCV, own compute percentiles), every state's

    @property
    def top(self) -> float:
        """The per-replica rate TPOT, ITL and stability allow (requests/s), for any pool size."""
        if self._top_rate is None:
            self._top_rate = self._top()
        return self._top_rate

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

    def _ok_state(self, lams) -> NDArray[np.bool_]:
        """:meth:`_state_ok` at each rate of ``lams``, memoised."""
        return self._check("state", lams, self._state_ok)

    def _ok_ttft(self, lams, n: int) -> NDArray[np.bool_]:
        """:meth:`_ttft_ok` in a pool of ``n`` at each rate of ``lams``, memoised."""
        return self._check(n, lams, lambda x: self._ttft_ok(x, n))

    def _state_ok(self, lams: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Stable and within the TPOT and ITL SLOs (they do not depend on the pool size), at
        each rate of ``lams``."""
        sts = self.states(lams.tolist())
        ok = np.array([st.stable for st in sts], dtype=bool)
        for metric, p, limit in self.slos:
            if metric == "tpot" and ok.any():
                ok &= ~tpot_exceeds(*self.args, sts, self.o, self.kv, p, limit, self.ca2, self.router, self.output_lengths,
                                    self.tables.kernel)
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
        c = n if self.router == "least-work" else 1
        lam = np.array([st.rps for st in sts]) * c
        step = np.array([st.step_ms for st in sts])
        if self.schedule.kind == PREFILL_FIRST:
            # a whole prompt's pass does not depend on the residents: the same service and own
            # compute in every state
            if self._fixed is None:
                st = sts[0]
                self._fixed = (st.service_mean_ms, st.service_cs2, own_compute_percentiles([st], self.tables, self.extra, pcts))
            mean, cs2, own = self._fixed
        else:
            own = own_compute_percentiles(sts, self.tables, self.extra, pcts)
            S, weight = np.array([st.service_ms for st in sts]), sts[0].weight  # one replica's states: the same prompt weights
            mean = rowdot(S, weight)  # ColocatedState.service_mean_ms and service_cs2, every state at once
            cs2 = rowdot((S - mean[:, None]) ** 2, weight) / mean**2
        good = np.ones(live.size, dtype=bool)
        for p, limit in tt:
            good &= self.path_pct[p] + self._wait(c, lam, mean, p, cs2) + own[p] + step <= limit
        ok[live] = good
        return ok

    def _wait(self, c: int, lam: NDArray[np.float64], mean, p: float, cs2) -> NDArray[np.float64]:
        """The queue wait's percentile ``p`` (ms) at each arrival rate of ``lam`` (0 where no
        arrivals): :func:`wait_percentile_ms`, one array call -- or, for a few rates, its
        scalar path (the same floats, a tenth of the overhead)."""
        mean, cs2 = np.broadcast_to(mean, lam.shape), np.broadcast_to(cs2, lam.shape)
        if lam.size <= 4:
            return np.array([float(wait_percentile_ms(c, x, m, p, s, self.ca2)) if x > 0 else 0.0
                             for x, m, s in zip(lam.tolist(), mean.tolist(), cs2.tolist())])
        with np.errstate(all="ignore"):
            return np.where(lam > 0, wait_percentile_ms(c, lam, mean, p, cs2, self.ca2), 0.0)

    def _top(self) -> float:
        S0 = self.tables.kernel.grid(np.zeros(1), padded_sums=True)[0][0]  # prompt_service at b = 0
        hi = 1e3 / float(np.dot(self.prompts.weight / self.prompts.weight.sum(), S0))
        lo = hi * 1e-6
        # the bisection, its steps evaluated _LEVELS at a time (the same mids and decisions); its
        # first pass with the trickle it starts from
        if not self._ok_state([lo] + tree_mids(lo, hi, _LEVELS)[0])[0]:
            return 0.0
        return bisect_tree(self._ok_state, lo, hi, self.iterations, _LEVELS)[0]

    def rate(self, n: int) -> float:
        """Largest per-replica rate of a pool of ``n`` (>= 1) replicas (requests/s): the top
        rate if it meets the TTFT SLOs there, else a bisection between the largest rate of a
        smaller pool (or a trickle) and the smallest of a larger one (or the top)."""
        n = int(n)
        if n < 1:
            raise ValueError("replicas must be >= 1")
        if self.router == "random":
            n = 1
        if n in self._rates:
            return self._rates[n]
        top = self.top
        below = [v for k, v in self._rates.items() if k < n]
        a = max(below) if below else top * 1e-6
        b = min([v for k, v in self._rates.items() if k > n] + [top])
        if top <= 0:
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
        self._rates[n] = r
        return r

    def replicas_for(self, demand_rps: float, headroom: float = 1.0, max_replicas: int = 100_000) -> int | None:
        """Fewest replicas n with n x rate(n) x headroom >= ``demand_rps`` (count; 0 for no
        demand; None when no pool up to ``max_replicas`` carries it): :func:`fewest_replicas`."""
        return fewest_replicas(self.rate, lambda: self.top, demand_rps, headroom, max_replicas)


def fewest_replicas(rate, top, demand_rps: float, headroom: float = 1.0, max_replicas: int = 100_000) -> int | None:
    """Fewest replicas n with n x ``rate``(n) x headroom >= ``demand_rps`` (count; 0 for no
    demand; None when no pool up to ``max_replicas`` carries it). Binary search: n x rate(n)
    rises with n. ``top()`` is an upper bound on every rate(n) (requests/s): the search's
    lower end."""
    if demand_rps <= 0:
        return 0
    r1 = rate(1) * headroom
    if r1 <= 0:
        return None
    ok = lambda n: n * rate(n) * headroom >= demand_rps * (1 - 1e-12)  # noqa: E731
    hi = min(int(math.ceil(demand_rps / r1 - 1e-9)), max_replicas)
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
