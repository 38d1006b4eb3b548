"""The steady state of one colocated replica and its latency percentiles: the fixed point
in the residents b (:func:`colocated_state`), the TTFT bound (queue wait, own compute, the
step in progress), the TPOT over the occupancy distribution, the ITL, and the percentiles
of a pool (:func:`colocated_latency`). The derivations are :mod:`fleetplan.perf.colocated`'s
module docstring; the step physics :mod:`fleetplan.perf.replica_steps`; every public name
here is re-exported by :mod:`fleetplan.perf.colocated`.

Units: requests/s, ms, tokens, bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from statistics import NormalDist

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fleetplan.imports import scipy_special
from fleetplan.perf.inputs import ModelSpec, Priors
from fleetplan.perf.queueing import ROUTERS, path_sum_distribution, server_ca2, wait_percentile_ms
from fleetplan.perf.replica_steps import CHUNKED, PromptTypes, Schedule, ServiceKernel, prompt_service_grid
from fleetplan.perf.roofline import SliceSpec, decode_step
from fleetplan.perf.ttft_tail import PercentilesOfSum

__all__ = [
    "CHUNK_BUDGET_DECODE_SHARE",
    "ColocatedState",
    "ReplicaTables",
    "rowdot",
    "colocated_state",
    "colocated_states",
    "ColocatedLatency",
    "colocated_latency",
    "tpot_dispersion",
    "ttft_bound_ms",
    "own_compute_quantiles",
    "own_compute_percentiles",
    "itl_ms",
    "tpot_percentile_ms",
    "tpot_percentiles_ms",
    "tpot_exceeds",
    "queued_behind_prefill",
    "OCCUPANCY_EDGES",
]

_SQRT2 = math.sqrt(2.0)  # statistics.NormalDist.cdf's
_SQRT2PI = math.sqrt(2.0 * math.pi)


# --------------------------------------------------------------------------- steady state


@dataclass(frozen=True)
class ColocatedState:
    """Steady state of one colocated replica (units in the names). ``service_ms`` / ``delta_ms``
    / ``steps`` per prompt type at the fixed point (:func:`prompt_service`)."""

    rps: float
    schedule: Schedule
    prefill_share: float
    sequences_decoding: float
    step_ms: float
    tpot_ms: float
    service_ms: NDArray[np.float64]
    delta_ms: NDArray[np.float64]
    steps: NDArray[np.float64]
    weight: NDArray[np.float64]
    stable: bool
    reason: str
    prompts: PromptTypes | None = None

    @cached_property
    def service_mean_ms(self) -> float:
        return float(np.dot(self.weight, self.service_ms))

    @cached_property
    def service_cs2(self) -> float:
        m = self.service_mean_ms
        return float(np.dot(self.weight, (self.service_ms - m) ** 2)) / m**2 if m > 0 else 0.0

    @property
    def chunk_step_share(self) -> float:
        """Share of the replica's steps that carry a chunk (chunked) or a prefill (fraction)."""
        if not self.stable or self.rps <= 0:
            return 0.0
        n = float(np.dot(self.weight, self.steps)) if self.schedule.kind == CHUNKED else 1.0
        return min(self.rps * n * self.tpot_ms / 1e3, 1.0)


def rowdot(a: NDArray[np.float64], w: NDArray[np.float64]) -> NDArray[np.float64]:
    """a @ w row by row ((rows, n) x (n,) -> (rows,)), each row's sum the same floats whatever
    rows stand beside it (``np.vecdot``, a generalised ufunc: one dot product per row; BLAS's
    matrix-vector product may round a row differently in a different batch)."""
    return np.vecdot(a, w)


class ReplicaTables:
    """The tables of one replica (model, slice, priors, schedule, prompt types, KV per
    resident) that do not depend on its arrival rate, kept by a caller that evaluates it at
    many rates (:class:`ReplicaRates`): the :class:`ServiceKernel`, the step times of
    :func:`colocated_state`'s search grid and refinement brackets (``grid_memo``), the
    prompts' service at each whole number of residents an arrival may find
    (:func:`_own_compute`'s batches) and the own compute's percentiles at each set of such
    numbers (:func:`own_compute_percentiles`), each computed once. Every entry is the same
    whatever order the rates come in (row by row: a batch's rows are each row alone)."""

    def __init__(self, kernel: ServiceKernel):
        self.kernel = kernel
        self.grid_memo: dict[tuple, object] = {}
        self._rows: dict[float, NDArray[np.float64]] = {}
        self.own_memo: dict[tuple, list[float]] = {}  # own_compute_percentiles by the residents' whole numbers

    def service_rows(self, batch: NDArray[np.float64]) -> NDArray[np.float64]:
        """S (ms, (len(batch), types)) of :func:`prompt_service_grid` at each of ``batch``."""
        keys = np.asarray(batch, dtype=float).ravel().tolist()
        missing = sorted({x for x in keys if x not in self._rows})  # np.unique's order
        if missing:
            self._rows.update(zip(missing, self.kernel.grid(np.array(missing))[0]))
        return np.array([self._rows[x] for x in keys])


def _unstable(rps, schedule, u, reason, S, n, D, w) -> ColocatedState:
    return ColocatedState(rps, schedule, u, math.inf, math.inf, math.inf, S, D, n, w, False, reason)


#: A chunked replica is taken as unstable once its decode tokens fill more than this share of
#: the token budget (chunks of under 1/8 of it: the prompt would crawl).
CHUNK_BUDGET_DECODE_SHARE = 0.875


def colocated_state(model: ModelSpec, sl: SliceSpec, priors: Priors, schedule: Schedule, prompts: PromptTypes, rps: float,
                    output_tokens: float, kv_bytes_per_request: float, kv_capacity_requests: int, grid_points: int = 129,
                    grid_memo: dict | None = None, kernel: ServiceKernel | None = None) -> ColocatedState:
    """Solve one replica at ``rps`` (requests/s) under ``schedule`` (:mod:`fleetplan.perf.colocated`):
    the smallest b >= 0 with b = rps x output_tokens x d(b) / (1 - rps E[Delta(b)]),
    searched on a grid of ``grid_points`` over [0, cap], refined on 33 points inside the
    first bracket and interpolated linearly (to ~1e-3 of a resident), where cap is the
    KV capacity (requests), and for a chunked schedule :data:`CHUNK_BUDGET_DECODE_SHARE`
    of its token budget.

    ``grid_memo``: a dict kept by the caller across calls with the same replica (every
    argument but ``rps`` the same, as :class:`ReplicaRates` calls it): the step times at
    b = 0, on the search grid and on each refinement bracket do not depend on ``rps``, so
    they are computed once and looked up after (the same arrays, bit for bit). ``kernel``:
    the replica's :class:`ServiceKernel` (the same for every ``rps``; built when None).

    Returns :class:`ColocatedState`; ``stable`` False with a reason when it diverges.
    Raises ValueError for rps < 0 or output_tokens <= 0. :func:`colocated_states` at one rate.
    """
    return colocated_states(model, sl, priors, schedule, prompts, [rps], output_tokens, kv_bytes_per_request, kv_capacity_requests,
                            grid_points, grid_memo, kernel)[0]


def colocated_states(model: ModelSpec, sl: SliceSpec, priors: Priors, schedule: Schedule, prompts: PromptTypes, rps: list[float],
                     output_tokens: float, kv_bytes_per_request: float, kv_capacity_requests: int, grid_points: int = 129,
                     grid_memo: dict | None = None, kernel: ServiceKernel | None = None) -> list[ColocatedState]:
    """:func:`colocated_state` at each rate of ``rps`` (requests/s, a list): one array program
    for all of them -- the search grid's residual as a (rates, grid) array, each rate's
    refinement bracket, and the service at every rate's fixed point in one
    :meth:`ServiceKernel.grid` call -- each state the one :func:`colocated_state` gives
    alone, bit for bit (every operation is row by row: :func:`rowdot`, not a matrix-vector
    product whose rounding may depend on the rows beside). Raises ValueError as
    :func:`colocated_state`."""
    R = [float(r) for r in rps]
    if any(r < 0 for r in R) or output_tokens <= 0:
        raise ValueError("need rps >= 0 (requests/s) and output_tokens > 0 (tokens)")
    w = prompts.weight / prompts.weight.sum()
    cap = float(max(kv_capacity_requests, 0))
    if schedule.kind == CHUNKED:
        cap = min(cap, math.floor(CHUNK_BUDGET_DECODE_SHARE * schedule.chunk_tokens))

    kern = kernel if kernel is not None else ServiceKernel(model, sl, priors, schedule, prompts, kv_bytes_per_request)

    def service(key: tuple, batches) -> tuple:
        """(B, S, n, D, d, S @ w, D @ w) at the batches ``batches()`` (a float array that does
        not depend on rps), from ``grid_memo`` under ``key`` when it holds them."""
        hit = grid_memo.get(key) if grid_memo is not None else None
        if hit is None:
            B = batches()
            S, n, D, d = kern.grid(B)
            hit = (B, S, n, D, d, rowdot(S, w), rowdot(D, w))
            for x in hit:
                x.flags.writeable = False  # shared by the states built from it
            if grid_memo is not None:
                grid_memo[key] = hit
        return hit

    def g(hit, rates: NDArray[np.float64]) -> NDArray[np.float64]:
        """The fixed point's residual b' - b at the batches of ``hit`` for each rate, (rates, batches)."""
        B, S, n, D, d, Sw, Dw = hit
        r = rates[:, None]
        frac = r * Dw / 1e3
        u = r * Sw / 1e3
        val = r * output_tokens * d / 1e3 / (1.0 - frac) - B
        return np.where((frac >= 1.0) | (u >= 1.0), np.inf, val)

    _, S0, n0, D0, d0, _, _ = service(("b=0",), lambda: np.zeros(1))
    s0w = float(S0[0] @ w)
    out: list[ColocatedState | None] = [None] * len(R)
    todo = []
    for k, r in enumerate(R):
        u0 = r * s0w / 1e3
        if r == 0:
            out[k] = ColocatedState(0.0, schedule, 0.0, 0.0, float(d0[0]), float(d0[0]), S0[0], D0[0], n0[0], w, True, "")
        elif u0 >= 1.0:
            out[k] = _unstable(r, schedule, u0, f"prefill alone needs {u0:.2f} of the replica's time", S0[0], n0[0], D0[0], w)
        elif cap < 1.0:
            out[k] = _unstable(r, schedule, u0, "the replica holds no resident request (KV capacity or token budget)",
                               S0[0], n0[0], D0[0], w)
        else:
            todo.append(k)
    if not todo:
        return out
    hit = service(("grid", cap, grid_points), lambda: np.linspace(0.0, cap, grid_points))
    grid = hit[0]
    rates = np.array([R[k] for k in todo])
    with np.errstate(divide="ignore", invalid="ignore"):
        neg = g(hit, rates) <= 0
        first = np.argmax(neg, axis=1)  # the first grid point with g <= 0
        has = neg.any(axis=1)
        b = np.zeros(rates.size)
        rows = np.nonzero(has & (first > 0))[0]
        if rows.size:
            # refine each bracket on a finer grid, then interpolate g linearly inside it
            fine = grid_memo.get(("fine", cap, grid_points)) if grid_memo is not None else None
            if fine is None:  # every bracket's 33 points, each bracket's filled when a rate first needs it
                fine = {"filled": np.zeros(grid_points, dtype=bool), "B": np.zeros((grid_points, 33)), "d": np.zeros((grid_points, 33)),
                        "Sw": np.zeros((grid_points, 33)), "Dw": np.zeros((grid_points, 33))}
                if grid_memo is not None:
                    grid_memo[("fine", cap, grid_points)] = fine
            need = np.zeros(grid_points, dtype=bool)  # the brackets asked, ascending, each once (np.unique's
            need[first[rows]] = True  # result without its np.ma.is_masked, whose first call imports numpy.ma)
            need = np.flatnonzero(need & ~fine["filled"])
            if need.size:
                Bf = np.array([np.linspace(float(grid[i - 1]), float(grid[i]), 33) for i in need.tolist()])
                S, _, D, d = kern.grid(Bf.ravel())
                for name, x in (("B", Bf.ravel()), ("d", d), ("Sw", rowdot(S, w)), ("Dw", rowdot(D, w))):
                    fine[name][need] = x.reshape(need.size, 33)
                fine["filled"][need] = True
            at = first[rows]
            fh = (fine["B"][at], None, None, None, fine["d"][at], fine["Sw"][at], fine["Dw"][at])  # each row's bracket, (rows, 33)
            fv = g(fh, rates[rows])
            j = np.maximum(np.argmax(fv <= 0, axis=1), 1)
            r_ = np.arange(rows.size)
            x0, x1 = fh[0][r_, j - 1], fh[0][r_, j]
            g0, g1 = fv[r_, j - 1], fv[r_, j]
            bi = np.where(~np.isfinite(g0 - g1) | (g0 == g1), x1, x0 + (x1 - x0) * g0 / (g0 - g1))
            b[rows] = np.minimum(np.maximum(bi, x0), x1)
    for k in [todo[m] for m in np.nonzero(~has)[0]]:
        r = R[k]
        out[k] = _unstable(r, schedule, r * s0w / 1e3, f"sequences decoding would exceed the replica's capacity of {cap:.0f} requests "
                           + ("(KV pool or token budget)" if schedule.kind == CHUNKED else "(KV pool)"), S0[0], n0[0], D0[0], w)
    live = np.nonzero(has)[0]
    if live.size:
        S, n, D, d = kern.grid(b[live])
        for x in (S, n, D):
            x.flags.writeable = False  # rows shared by the states
        rl = rates[live]
        u = (rl * rowdot(S, w) / 1e3).tolist()
        tpot = (d / (1.0 - rl * rowdot(D, w) / 1e3)).tolist()
        for row, (m, dr, br) in enumerate(zip(live.tolist(), d.tolist(), b[live].tolist())):
            k = todo[m]
            out[k] = ColocatedState(R[k], schedule, u[row], br, dr, tpot[row], S[row], D[row], n[row], w, True, "", prompts)
    return out


# --------------------------------------------------------------------------- latency


@dataclass(frozen=True)
class ColocatedLatency:
    """Latency percentiles of a pool of replicas (ms, keyed by percentile): ``ttft_ms`` the sum
    of the components' percentiles (the bound sizing uses), ``ttft_estimate_ms`` the
    percentile of their sum, ``tpot_ms`` over the occupancy distribution, ``itl_ms``."""

    ttft_ms: dict[float, float]
    ttft_estimate_ms: Mapping[float, float]  # a dict, or the estimate computed at its first read (PercentilesOfSum)
    wait_ms: dict[float, float]
    tpot_ms: dict[float, float]
    itl_ms: dict[float, float]
    occupancy_sd: float


@lru_cache(maxsize=256)
def _geometric_gaps(o: float, points: int = 48) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(token gaps, weight) of answers of geometric length with mean ``o`` (P(n) = (1 - q)^(n-1) q,
    q = 1/o, n >= 1; the simulator's ``--output-lengths geometric``) among those with a TPOT
    (n >= 2, n - 1 gaps), in ``points`` bins of equal probability (arrays (points,); each
    bin at its median length)."""
    q = min(1.0 / max(o, 1.0), 1.0)
    if q >= 1.0:
        return np.array([1.0]), np.array([1.0])
    # P(n >= 2) = 1 - q; conditional CDF of n given n >= 2: 1 - (1 - q)^(n - 1)
    probs = (np.arange(points) + 0.5) / points
    n = 1.0 + np.ceil(np.log1p(-probs) / math.log1p(-q))
    out = np.maximum(n - 1.0, 1.0), np.full(points, 1.0 / points)
    for x in out:
        x.flags.writeable = False  # cached: shared by every call with this mean
    return out


def tpot_percentile_ms(model: ModelSpec, sl: SliceSpec, priors: Priors, st: ColocatedState, output_tokens: float,
                       kv_bytes_per_request: float, percentile: float, ca2: float = 1.0, router: str = "least-work",
                       output_lengths: str = "fixed", kernel: ServiceKernel | None = None, servers: int = 1) -> float:
    """A request's TPOT at ``percentile`` over the occupancy distribution (:mod:`fleetplan.perf.colocated`), ms.

    Poisson arrivals (``ca2`` = 1): mean d(b + 1) + b E[Delta]/o, variance
    d'^2 2b/3 + b E[Delta^2]/o^2 + d' E[Delta] b/o. Bursty arrivals with index of dispersion
    of counts I = ``ca2`` (``workload.arrival_scv``; arrivals in clusters of mean size-biased
    size I, i.e. a compound Poisson stream, whose counts over windows longer than a cluster
    have variance I x mean): every count covariance scales by I, so Var(Bbar) = I 2b/3,
    Var(K) = I b and Cov(Bbar, K) = I b/2, and the tagged request's own cluster adds I - 1
    residents (the size-biased cluster less itself) of which half prefill after its first
    token: mean d(b + I) + (b + (I - 1)/2) E[Delta]/o (I >= 1; smooth arrivals see
    b + 1), variance
    I d'^2 2b/3 + b (E[Delta^2] + (I - 1) E[Delta]^2)/o^2 + I d' E[Delta] b/o. I = 1 is the
    Poisson formula exactly; smooth arrivals (I < 1) narrow it. The window that matters is
    the request's lifetime (o x TPOT, seconds), longer than the 1 s at which ``workload fit``
    measures I by default: fit at that timescale (``--scv-timescale``) for bursty traffic.
    Source: the derivation in :mod:`fleetplan.perf.colocated`; compound-Poisson count variance (Daley &
    Vere-Jones, *An Introduction to the Theory of Point Processes*, 2003, section 6.4).

    ``router`` load-blind ('round-robin', 'random', 'prefix-aware'): the replica's own
    arrivals do not depend on its state, and a request whose lifetime holds more prompts
    than the mean lives longer, so more prompts arrive in it: T = T0 + sum over the
    arrivals in T of Delta_k, and a fluctuation dX of the work at a fixed window becomes
    dT = dX + u dT, i.e. dX / (1 - u) with u = lambda E[Delta] (the share of the replica's
    time the prompts add). The variance is divided by (1 - u)^2. Under 'least-work' a
    replica that is stalled on prompts is not the one with the least work, so the prompts
    arriving in its stall go to the others and the loop is cut: no factor (the simulator
    agrees within 5% on the GPU scenario, docs/validation.md; under random routing without
    the factor the p99 was 17% optimistic at 38% prefill share). The replica's index of
    dispersion I is :func:`tpot_dispersion`: under round-robin ``ca2`` / n for the pool's
    n = ``servers`` replicas (every n-th arrival: a replica's counts are the stream's over
    n; it never rises with n, so a rate that meets the TPOT SLO in a pool of n meets it in
    every larger pool); under random and prefix-aware max(``ca2``, 1), the split's at one
    replica -- an upper bound for every pool size, and never below least-work's ``ca2``,
    so with the feedback factor a random split's TPOT is never below least-work's.

    ``output_lengths`` 'geometric' (``workload.output_length_distribution``): answers of
    geometric length with mean o, so a request's window is g = n - 1 gaps of its own, not
    o. Per g (x = g / o, the window over the mean residence): the prompts in the window
    are Poisson(lambda g TPOT), so the stall term's variance is lambda TPOT E[Delta^2] / g
    (and the cross term d' E[Delta] lambda TPOT, as before independent of g); the others'
    residences are exponential-like, so their window average has variance
    2b (x - 1 + e^-x) / x^2 (the M/G/infinity autocovariance lambda T e^(-tau/T)); the
    mean is unchanged but the cluster term ((I - 1)/2) E[Delta] / g. The percentile is of
    the mixture over g (48 equal-probability bins of the answers with a TPOT, n >= 2),
    each normal. Short answers carry the tail: on the FP8 scenario with geometric answers
    the fixed-length model was 1.33 x optimistic at p99 (issue-17 trial). The mixture's
    quantile is the result of a 60-step bisection on sf(t) > tail from [min mean, max (mean
    + 10 sd)] (the normal tail by ``scipy.special.erf``): sf decreases, so each step's
    decision is whether its mid lies below the root, which :func:`_mixture_root` finds
    first (Newton's method, safeguarded); the steps are then replayed on that root -- the
    bisection's mids and result, without 60 evaluations of the mixture. ``kernel``: the
    replica's :class:`ServiceKernel` (for its decode steps; the same numbers as
    :func:`roofline.decode_step`)."""
    return tpot_percentiles_ms(model, sl, priors, st, output_tokens, kv_bytes_per_request, [percentile], ca2, router, output_lengths,
                               kernel, servers)[percentile]


def tpot_percentiles_ms(model: ModelSpec, sl: SliceSpec, priors: Priors, st: ColocatedState, output_tokens: float,
                        kv_bytes_per_request: float, percentiles: list[float], ca2: float = 1.0, router: str = "least-work",
                        output_lengths: str = "fixed", kernel: ServiceKernel | None = None, servers: int = 1) -> dict[float, float]:
    """:func:`tpot_percentile_ms` at each of ``percentiles`` ({percentile: ms}), the same
    floats: geometric answers' mixture of normals, which does not depend on the percentile
    (only its tail does), built once for all of them."""
    out: dict[float, float] = {}
    mix = None
    for p in percentiles:
        if mix is None:  # the first percentile, or a closed form (which depends on the percentile)
            closed, mix = _tpot_tails(model, sl, priors, [st], output_tokens, kv_bytes_per_request, p, ca2, router, output_lengths,
                                      kernel, servers)
        else:
            mix = _Mixtures(mix.means, mix.sd, mix.weight, 1.0 - p / 100.0)
        if mix is None or not math.isnan(closed[0]):
            out[p] = float(closed[0])
            continue
        lo, hi = float(mix.lo[0]), float(mix.hi[0])
        root = _mixture_root(mix.means[0], mix.sd[0], mix.weight, mix.tail, lo, hi)
        for _ in range(60):  # the bisection: lo = mid where sf(mid) > tail, i.e. mid below the root
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if mid < root else (lo, mid)
        out[p] = 0.5 * (lo + hi)
    return out


def _mixture_root(means: NDArray[np.float64], sd: NDArray[np.float64], weight: NDArray[np.float64], tail: float,
                  lo: float, hi: float) -> float:
    """The t in [lo, hi] where sum_g w_g (1 - Phi((t - mean_g) / sd_g)) = ``tail`` (ms): lo if
    the survival is not above the tail there, hi if it still is at hi; otherwise Newton's
    method on the survival (its slope minus the mixture's density), kept inside a bracket
    that every evaluation narrows, bisecting where a step would leave it, to the last
    bits (a step below 1e-15 of t, or the bracket a few ulps wide)."""
    erf = scipy_special().erf  # imported late, and lighter (fleetplan/imports.py): keeps `fleetplan --help` fast

    def f(t: float) -> tuple[float, float]:
        z = (t - means) / sd
        return float(np.dot(weight, 1.0 - 0.5 * (1.0 + erf(z / _SQRT2)))) - tail, -float(np.dot(weight, np.exp(-0.5 * z * z) / sd)) / _SQRT2PI

    if not f(lo)[0] > 0:
        return lo
    if f(hi)[0] > 0:
        return hi
    a, b, t = lo, hi, 0.5 * (lo + hi)
    for _ in range(200):
        v, slope = f(t)
        if v > 0:
            a = t
        else:
            b = t
        step = t - v / slope if slope < 0 else math.nan
        nxt = step if a < step < b else 0.5 * (a + b)
        if abs(nxt - t) <= 1e-15 * abs(t) or b - a <= 4.0 * math.ulp(t):
            return nxt
        t = nxt
    return t


def tpot_exceeds(model: ModelSpec, sl: SliceSpec, priors: Priors, states: list[ColocatedState], output_tokens: float,
                 kv_bytes_per_request: float, percentile: float, limit_ms: float, ca2: float = 1.0, router: str = "least-work",
                 output_lengths: str = "fixed", kernel: ServiceKernel | None = None, servers: int = 1) -> NDArray[np.bool_]:
    """Whether :func:`tpot_percentile_ms` (same arguments) is above ``limit_ms`` -- what a TPOT
    SLO asks -- at each of ``states`` (bools (states,)), without the bisection where the
    percentile is a mixture's quantile: the bisection's result lies in its bracket
    [lo, hi], is above a limit below lo and not above a limit at or past hi, and inside it
    is above the limit exactly when the mixture's survival function at the limit exceeds
    the tail (the function decreases; the two differ only for a limit within a few ulps
    of the quantile)."""
    closed, mix = _tpot_tails(model, sl, priors, states, output_tokens, kv_bytes_per_request, percentile, ca2, router, output_lengths,
                              kernel, servers)
    out = closed > limit_ms
    if mix is not None:
        t = np.full(len(states), float(limit_ms))
        inside = mix.above(t[None, :])[0]
        out = np.where(np.isnan(closed), np.where(t < mix.lo, True, np.where(t >= mix.hi, False, inside)), out)
    return out


@dataclass(frozen=True)
class _Mixtures:
    """Mixtures of normals, one per state (means, sd (states, points), ms; weight (points,)),
    and the tail whose quantile is each state's TPOT percentile."""

    means: NDArray[np.float64]
    sd: NDArray[np.float64]
    weight: NDArray[np.float64]
    tail: float

    @property
    def lo(self) -> NDArray[np.float64]:
        """The quantile bisection's lower start, min mean (ms, (states,))."""
        return self.means.min(axis=1)

    @property
    def hi(self) -> NDArray[np.float64]:
        """... and its upper start, max (mean + 10 sd)."""
        return (self.means + 10.0 * self.sd).max(axis=1)

    def above(self, t: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Whether each state's survival function exceeds the tail at the points ``t`` (ms,
        (points, states)): sum_g w_g (1 - Phi((t - mean_g) / sd_g)), Phi(x) = (1 + erf(x /
        sqrt 2)) / 2. Returns (points, states)."""
        erf = scipy_special().erf  # imported late, and lighter (fleetplan/imports.py): keeps `fleetplan --help` fast

        v = (t[:, :, None] - self.means[None, :, :]) / self.sd[None, :, :]
        sf = 1.0 - 0.5 * (1.0 + erf(v / _SQRT2))
        return rowdot(sf.reshape(-1, sf.shape[-1]), self.weight).reshape(sf.shape[:-1]) > self.tail


def tpot_dispersion(router: str, servers: int, ca2: float) -> float:
    """The index of dispersion I of one replica's arrivals that the TPOT tail takes
    (dimensionless; :func:`tpot_percentile_ms`): ``ca2`` (the stream's) under least-work,
    ``ca2`` / ``servers`` under round-robin (:func:`fleetplan.perf.queueing.server_ca2`),
    max(``ca2``, 1) under random and prefix-aware (the split's at one replica, the most it
    is at any pool size)."""
    if router == "least-work":
        return float(ca2)
    return float(server_ca2(router, servers if router == "round-robin" else 1, ca2))


def _tpot_tails(model, sl, priors, states, output_tokens, kv_bytes_per_request, percentile, ca2, router, output_lengths,
                kernel, servers: int = 1) -> tuple[NDArray[np.float64], _Mixtures | None]:
    """:func:`tpot_percentile_ms` of each state where it is closed form (ms, (states,); NaN
    where it is a mixture's quantile) and, for geometric answers, the mixtures; ``servers``
    the pool's replicas (the split's index of dispersion under round robin)."""
    L = len(states)
    closed = np.full(L, np.nan)
    live = []
    for k, st in enumerate(states):
        if not st.stable:
            closed[k] = math.inf
        elif st.rps <= 0:
            closed[k] = st.step_ms
        else:
            live.append(k)
    if not live:
        return closed, None
    sts = [states[k] for k in live]
    b = np.array([st.sequences_decoding for st in sts])
    rps = np.array([st.rps for st in sts])
    i = max(tpot_dispersion(router, servers, ca2), 0.0)
    seen = b + max(i, 1.0)  # the stationary others, the own cluster's, and itself
    pair = np.stack([seen, seen + 1.0], axis=1)
    d1 = kernel.decode_ms(pair) if kernel is not None else decode_step(model, sl, priors, pair, kv_bytes_per_request).step_ms
    slope = d1[:, 1] - d1[:, 0]
    d0 = d1[:, 0]
    o = output_tokens
    eD = np.array([float(np.dot(st.weight, st.delta_ms)) for st in sts])
    eD2 = np.array([float(np.dot(st.weight, st.delta_ms**2)) for st in sts])
    feedback = 1.0
    if router != "least-work":  # a load-blind router: the prompts' feedback on a request's lifetime
        u = rps * eD / 1e3
        closed[[k for k, x in zip(live, u >= 1.0) if x]] = math.inf
        feedback = (1.0 - u) ** 2
    stalled = np.isinf(closed[live])
    if output_lengths != "geometric":
        z = NormalDist().inv_cdf(percentile / 100.0)
        mean = d0 + (b + max(i - 1.0, 0.0) / 2.0) * eD / o
        var = i * slope**2 * 2.0 * b / 3.0 + b * (eD2 + (i - 1.0) * eD**2) / o**2 + i * slope * eD * b / o
        with np.errstate(invalid="ignore", divide="ignore"):
            closed[live] = np.where(stalled, math.inf, mean + z * np.sqrt(np.maximum(var / feedback, 0.0)))
        return closed, None
    g, w = _geometric_gaps(o)
    col = lambda x: x[:, None] if np.ndim(x) else x  # noqa: E731  (per state, against the gaps)
    lt = col(b / o)  # lambda x TPOT: prompts per token gap (Little: b = lambda o TPOT)
    x = g / o
    occ = 2.0 * col(b) * (x - 1.0 + np.exp(-x)) / x**2
    means = col(d0) + lt * col(eD) + max(i - 1.0, 0.0) / 2.0 * col(eD) / g
    with np.errstate(invalid="ignore", divide="ignore"):
        var = (i * col(slope)**2 * occ + lt * (col(eD2) + (i - 1.0) * col(eD)**2) / g + i * col(slope) * col(eD) * lt) / col(feedback)
    M, S = np.full((L, g.size), np.nan), np.full((L, g.size), np.nan)
    M[live], S[live] = means, np.sqrt(np.maximum(var, 1e-18))
    return closed, _Mixtures(M, S, w, 1.0 - percentile / 100.0)


def queued_behind_prefill(replicas: int, prefill_share: float, prefill_ms: float, step_ms: float, points: int = 400) -> float:
    """Probability that a prompt sent to a prefill-first replica queues behind a prefill in
    progress there, so the two run back to back in one token gap of its residents (fraction).

    Least-work routing sends the prompt to the replica that can start it first: the least
    residual among ``replicas`` replicas, each independently prefilling with probability
    u = ``prefill_share`` (residual uniform on [0, E[S]], ``prefill_ms``) or in a decode
    step (residual uniform on [0, d], ``step_ms``). The probability that the least is a
    prefill's is c u int_0^S (1/S) (1 - F(x))^(c-1) dx with F(x) = u min(x/S, 1) +
    (1 - u) min(x/d, 1), integrated on ``points`` nodes. One replica (or random routing,
    ``replicas`` = 1): u. More than the arrival's Erlang C wait probability, because a
    prefill about to end beats a decode step about to start (the simulator's FP8 plan: 14%
    of its prefills start at the previous one's end, Erlang C says 7%). Source: the
    derivation above (equilibrium residuals of deterministic services)."""
    u = min(max(prefill_share, 0.0), 1.0)
    if replicas <= 1 or prefill_ms <= 0:
        return u
    hi = max(prefill_ms, step_ms)
    x = np.linspace(0.0, hi, points)
    F = u * np.minimum(x / prefill_ms, 1.0) + (1.0 - u) * (np.minimum(x / step_ms, 1.0) if step_ms > 0 else 1.0)
    f = np.where(x <= prefill_ms, u / prefill_ms, 0.0) * (1.0 - F) ** (replicas - 1)
    area = float(np.sum(0.5 * (f[1:] + f[:-1]) * np.diff(x)))  # trapezoid rule (numpy 1.26 has no np.trapezoid)
    return min(max(replicas * area, 0.0), 1.0)


#: residents an arriving prompt finds: bins of their distribution's probability (edges),
#: finer in the upper tail, where a p99 TTFT's extra chunk lives; each bin is represented
#: by the quantile at its middle probability and weighs its width
OCCUPANCY_EDGES = (0.0, 0.25, 0.5, 0.75, 0.9, 0.96, 0.985, 0.995, 0.999, 1.0)


_OCCUPANCY_W = np.diff(np.asarray(OCCUPANCY_EDGES))
#: the standard normal quantile at each bin's middle probability
_OCCUPANCY_Z = np.array([NormalDist().inv_cdf(0.5 * (lo + hi)) for lo, hi in zip(OCCUPANCY_EDGES[:-1], OCCUPANCY_EDGES[1:])])


def _own_compute(model: ModelSpec, sl: SliceSpec, priors: Priors, st: ColocatedState, kv_bytes_per_request: float,
                 tables: ReplicaTables | None = None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(own compute ms, weight) of a prompt over (residents found, prompt type), arrays
    (K, types): the ms of the steps that carry it (:func:`prompt_service_grid`).

    Prefill-first: K = 1 (the pass does not depend on the residents). Chunked with budget
    C: a prompt's chunks are C - B tokens, B the residents decoding when its chunks run, so
    its chunk count (and TTFT) depends on B: a prompt of about C - b new tokens takes one
    step at b residents and two above. B is taken at K = len(:data:`OCCUPANCY_EDGES`) - 1
    quantiles (finer in the upper tail) of the residents an arrival finds, Poisson(b) by PASTA and
    the M/G/infinity occupancy of :mod:`fleetplan.perf.colocated` (normal approximation b + z
    sqrt(b), at least 0), each weighing its bin's probability. Without it the GPU scenario's FP8
    chunked-2048 pool (2,000-token prompts, b = 36) was 37% optimistic at p99 TTFT.
    ``tables``: the replica's :class:`ReplicaTables`, whose rows by residents are reused."""
    if st.schedule.kind != CHUNKED or st.sequences_decoding <= 0 or st.prompts is None:
        return st.service_ms[None, :], st.weight[None, :]
    b = st.sequences_decoding
    B = np.maximum(np.round(b + _OCCUPANCY_Z * math.sqrt(b)), 0.0)
    S = (tables.service_rows(B) if tables is not None
         else prompt_service_grid(model, sl, priors, st.schedule, st.prompts, B, kv_bytes_per_request)[0])
    return S, _OCCUPANCY_W[:, None] * st.weight[None, :]


def own_compute_quantiles(own_ms: NDArray[np.float64], weight: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(own compute sorted, cumulative weight in that order) of :func:`_own_compute`'s
    distribution plus any extra ms (flattened arrays): what :func:`_quantile` reads."""
    own_ms, weight = own_ms.ravel(), weight.ravel()
    order = np.argsort(own_ms, kind="stable")
    return own_ms[order], np.cumsum(weight[order])


def own_compute_percentiles(states: list[ColocatedState], tables: ReplicaTables, extra_ms: ArrayLike,
                            percentiles: list[float]) -> dict[float, NDArray[np.float64]]:
    """The own compute (ms, plus ``extra_ms`` per prompt type) of each of ``states`` (stable,
    one replica's: the same prompt types) at each percentile ({percentile: array
    (states,)}): :func:`_own_compute`, :func:`own_compute_quantiles` and the percentile's
    pick for every state in one array program (the rows sorted and summed one by one, the
    same floats). A chunked state's distribution is a function of the whole numbers of
    residents it is taken at (:data:`OCCUPANCY_EDGES`), so its percentiles are memoised by
    them in ``tables``: the states of a rate search's late passes share them."""
    out = {p: np.empty(len(states)) for p in percentiles}
    extra = np.asarray(extra_ms, dtype=float)
    chunked = [k for k, st in enumerate(states) if st.schedule.kind == CHUNKED and st.sequences_decoding > 0 and st.prompts is not None]
    rest = sorted(set(range(len(states))) - set(chunked))
    T = states[0].weight.size if states else 0
    if chunked:
        b = np.array([states[k].sequences_decoding for k in chunked])
        B = np.maximum(np.round(b[:, None] + _OCCUPANCY_Z[None, :] * np.sqrt(b)[:, None]), 0.0)  # (states, K)
        tag = (np.broadcast_to(extra, (T,)).tobytes(), tuple(percentiles))
        keys = [(row.tobytes(),) + tag for row in B]
        first: dict[tuple, int] = {}
        for m, key in enumerate(keys):
            first.setdefault(key, m)
        new = [m for key, m in first.items() if key not in tables.own_memo]
        if new:
            S = tables.service_rows(B[new].ravel()).reshape(len(new), B.shape[1], T)
            W = np.broadcast_to(_OCCUPANCY_W[None, :, None] * states[chunked[0]].weight[None, None, :], S.shape)
            got = _pick_percentiles(S, W, extra, percentiles)
            for j, m in enumerate(new):
                tables.own_memo[keys[m]] = [got[p][j] for p in percentiles]
        for m, k in enumerate(chunked):
            for p, v in zip(percentiles, tables.own_memo[keys[m]]):
                out[p][k] = v
    if rest:
        sts = [states[k] for k in rest]
        got = _pick_percentiles(np.array([st.service_ms for st in sts])[:, None, :], np.array([st.weight for st in sts])[:, None, :],
                                extra, percentiles)
        for p in percentiles:
            out[p][rest] = got[p]
    return out


def _pick_percentiles(S: NDArray[np.float64], W: NDArray[np.float64], extra: NDArray[np.float64],
                      percentiles: list[float]) -> dict[float, NDArray[np.float64]]:
    """Per row of ``S`` + ``extra`` (ms, (rows, K, types)) with weights ``W`` (same shape): the
    weighted percentiles of its K x types values, as :func:`own_compute_quantiles` and
    :func:`_quantile` take them ({percentile: (rows,)})."""
    n = S.shape[0]
    own = (S + np.broadcast_to(extra, S.shape[2:])[None, None, :]).reshape(n, -1)
    order = np.argsort(own, axis=1, kind="stable")
    srt = np.take_along_axis(own, order, axis=1)
    cum = np.cumsum(np.take_along_axis(W.reshape(n, -1), order, axis=1), axis=1)
    rows = np.arange(n)
    return {p: srt[rows, np.minimum(np.sum(cum < p / 100.0 - 1e-12, axis=1), own.shape[1] - 1)] for p in percentiles}


def _quantile(values_sorted: NDArray[np.float64], cum: NDArray[np.float64], percentile: float) -> float:
    """The ``percentile`` of a discrete distribution given sorted with its cumulative weight."""
    return float(values_sorted[min(int(np.searchsorted(cum, percentile / 100.0 - 1e-12)), values_sorted.size - 1)])


def _pool_queue(st: ColocatedState, replicas: int, router: str, ca2: float = 1.0) -> tuple[int, float, float]:
    """(servers, arrivals requests/s, arrival SCV) of the prompts' queue: the pool's c
    replicas, its arrivals and ``ca2`` under 'least-work' (G/G/c); one replica's arrivals
    and their SCV (:func:`fleetplan.perf.queueing.server_ca2`: C_a^2 / c round robin, a
    Poisson split random and prefix-aware) under a load-blind router (G/G/1)."""
    if router == "least-work":
        return replicas, st.rps * replicas, ca2
    return 1, st.rps, server_ca2(router, replicas, ca2)


def ttft_bound_ms(st: ColocatedState, replicas: int, router: str, percentile: float, path_pct_ms: dict[float, float],
                  own: tuple[NDArray[np.float64], NDArray[np.float64]], ca2: float = 1.0) -> tuple[float, float]:
    """(TTFT bound, queue wait) at ``percentile`` of a pool of ``replicas`` replicas each in
    the stable state ``st`` (ms): the path's percentile + the queue wait's (G/G/c or, under a
    load-blind router, G/G/1: :func:`_pool_queue`, :func:`fleetplan.perf.queueing.wait_percentile_ms`)
    + the own compute's (``own`` from :func:`own_compute_quantiles`) + one decode step (the
    residual of the step in progress)."""
    c, lam, ca2 = _pool_queue(st, replicas, router, ca2)
    w = float(wait_percentile_ms(c, lam, st.service_mean_ms, percentile, st.service_cs2, ca2)) if lam > 0 else 0.0
    return path_pct_ms[percentile] + w + _quantile(*own, percentile) + st.step_ms, w


def itl_ms(st: ColocatedState, replicas: int, router: str, percentiles: list[float], kernel: ServiceKernel | None) -> dict[float, float]:
    """ITL at each of ``percentiles`` of a stable state (ms; :mod:`fleetplan.perf.colocated`): chunked, the
    step-time mixture of the decode steps (1 - share) and every chunk's mixed step
    (``kernel``'s :meth:`ServiceKernel.chunk_steps` at the state's residents, the first of
    each prompt with prefill_overhead_ms; ``kernel`` None only for a state without chunks,
    rps 0); prefill-first, a decode step plus the prompts run back to back in one token gap."""
    share = st.chunk_step_share
    out = {}
    if st.schedule.kind == CHUNKED and share > 0:
        cs = kernel.chunk_steps(np.array([st.sequences_decoding]))
        m = cs.step_ms.copy()
        m[cs.starts] += kernel.prefill_overhead_ms
        nbar = float(np.dot(st.weight, st.steps))
        v = np.concatenate([[st.step_ms], m])
        ww = np.concatenate([[1.0 - share], np.repeat(share * st.weight / max(nbar, 1.0), cs.counts[0].astype(np.int64))])
        o2 = np.argsort(v, kind="stable")
        v, c2 = v[o2], np.cumsum(ww[o2]) / ww.sum()
        return {p: _quantile(v, c2, p) for p in percentiles}
    c = _pool_queue(st, replicas, router)[0]
    for p in percentiles:
        if share >= 1.0 - p / 100.0:
            # prompts run back to back in one token gap: k or more with probability share x pi^(k-1)
            mean = st.service_mean_ms
            pi = queued_behind_prefill(c, min(st.prefill_share, 1.0), mean, st.step_ms)
            k, tail = 1, share * pi
            while tail >= 1.0 - p / 100.0 and k < 64:
                k, tail = k + 1, tail * pi
            out[p] = st.step_ms + k * mean
        else:
            out[p] = st.step_ms
    return out


@lru_cache(maxsize=64)
def _path_sum(components: tuple[tuple[float, float], ...]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """:func:`fleetplan.perf.queueing.path_sum_distribution` of the path's components,
    memoised (every latency of a pool asks for the same; read-only arrays)."""
    out = path_sum_distribution(list(components))
    for x in out:
        x.flags.writeable = False
    return out


def colocated_latency(model: ModelSpec, sl: SliceSpec, priors: Priors, st: ColocatedState, replicas: int, router: str,
                      output_tokens: float, kv_bytes_per_request: float, percentiles: list[float],
                      path_components: list[tuple[float, float]], path_pct_ms: dict[float, float],
                      extra_ms: ArrayLike = 0.0, estimate: bool = True, ca2: float = 1.0, output_lengths: str = "fixed",
                      tables: ReplicaTables | None = None) -> ColocatedLatency:
    """TTFT, TPOT and ITL percentiles of ``replicas`` replicas each in state ``st`` (ms).

    ``router`` 'least-work' (G/G/c over the pool's replicas at the pool's arrivals) or a
    load-blind one, 'round-robin', 'random' or 'prefix-aware' (G/G/1 per replica,
    :func:`_pool_queue`); ``path_components`` the fixed path's (p50, p99) pairs and
    ``path_pct_ms`` its percentiles (the sum of the components'); ``extra_ms`` per prompt
    type, ms added to its own TTFT (the exposed KV transfer of prefill-first). The residual
    of the step in progress is bounded by one decode step d(b) in the bound
    (:func:`ttft_bound_ms`) and taken as d(b)/2 in the estimate (``estimate`` False: left
    out, inf). TPOT: :func:`tpot_percentile_ms`; ITL: :func:`itl_ms`. ``tables``: the
    replica's :class:`ReplicaTables` (built when None).
    """
    if router not in ROUTERS:
        raise ValueError(f"router must be one of {', '.join(ROUTERS)}")
    inf = {p: math.inf for p in percentiles}
    if not st.stable:
        return ColocatedLatency(inf, dict(inf), dict(inf), dict(inf), dict(inf), math.inf)
    if tables is None and st.prompts is not None:  # (a state at rps 0 carries no prompt types: nothing reads them)
        tables = ReplicaTables(ServiceKernel(model, sl, priors, st.schedule, st.prompts, kv_bytes_per_request))
    kernel = tables.kernel if tables is not None else None
    c, lam, qa2 = _pool_queue(st, replicas, router, ca2)
    own, own_w = _own_compute(model, sl, priors, st, kv_bytes_per_request, tables)
    own = own + np.broadcast_to(np.asarray(extra_ms, dtype=float), st.weight.shape)[None, :]
    own, own_w = own.ravel(), own_w.ravel()
    quantiles = own_compute_quantiles(own, own_w)
    est = (PercentilesOfSum(percentiles, _path_sum(tuple(map(tuple, path_components))), c, lam, st.service_mean_ms,
                            st.service_cs2, own + 0.5 * st.step_ms, own_w, qa2) if estimate else {p: math.inf for p in percentiles})
    ttft, wait = {}, {}
    for p in percentiles:
        ttft[p], wait[p] = ttft_bound_ms(st, replicas, router, p, path_pct_ms, quantiles, ca2)
    tpot = tpot_percentiles_ms(model, sl, priors, st, output_tokens, kv_bytes_per_request, percentiles, ca2, router, output_lengths,
                               kernel, replicas)
    itl = itl_ms(st, replicas, router, percentiles, kernel)
    b = st.sequences_decoding
    return ColocatedLatency(ttft, est, wait, tpot, itl, math.sqrt(2.0 * b / 3.0) if b > 0 else 0.0)
