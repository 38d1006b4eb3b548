"""Queueing models of a prefill pool: Erlang C (M/M/c), an M/G/c approximation, wait-time
percentiles, TTFT percentiles, the largest rate c servers carry within a budget and the
fewest servers for a rate.

Erlang B is computed as the ratio of a Poisson pmf to its cdf, P(N = c) / P(N <= c)
for N ~ Poisson(a), through the regularised incomplete gamma function (no factorials,
exact and finite for c up to 10^5 and beyond); Erlang C follows from it:
C(c, a) = c B / (c - a (1 - B)). Source: Kleinrock, *Queueing Systems* vol. 1 (1975),
section 3.5; the incomplete-gamma form of Erlang B is Jagerman (1974).

G/G/c: the M/M/c waiting time is scaled by (C_a^2 + C_s^2) / 2, where C_a^2 is the
squared coefficient of variation of the inter-arrival times (``ca2``; 1 = Poisson, the
default, which is M/G/c) and C_s^2 that of the service time (``cs2``) -- the
Allen-Cunneen approximation (Allen, *Probability, Statistics and Queueing Theory*, 2nd
ed. 1990, section 6.3; Kingman's heavy-traffic G/G/1 formula at c = 1). The probability
of waiting is kept at Erlang C (Allen-Cunneen's own choice) and the conditional wait is
taken as exponential with the scaled mean, so
P(W > t) = C exp(-2 (c mu - lambda) t / (C_a^2 + C_s^2)). With C_a^2 = C_s^2 = 1 this is
exact M/M/c; with C_a^2 = 1 it is today's M/G/c, number for number. For an arrival
stream that is not a renewal process, C_a^2 is its asymptotic index of dispersion of
counts (Whitt, "Approximating a point process by a renewal process, I: two basic
methods", Operations Research 30(1), 1982: the asymptotic method, the one right in
heavy traffic), which is what ``fleetplan workload fit`` estimates.

Routers (``serving.router``; every wait function takes ``router``, default 'least-work').
The c servers of a pool are fed by a router, which decides what queue a request waits in:

* ``least-work``: to the server that can start the request first. With known service
  times least-work-left is FCFS with one central queue (Kiefer & Wolfowitz 1955; Wolff,
  *Stochastic Modeling and the Theory of Queues*, 1989, section 4-11): the G/G/c above.
* ``round-robin``: server k gets arrivals k, k + c, k + 2c, ... For a renewal input with
  inter-arrival SCV C_a^2 a server's inter-arrival time is the sum of c of them, SCV
  C_a^2 / c (Erlang-c, SCV 1/c, for Poisson input); for a stream read as its asymptotic
  index of dispersion I, a server's counts are the stream's divided by c, so I / c. Each
  server is a G/G/1 at lambda / c with that C_a^2 (Allen-Cunneen, which is Kingman's
  heavy-traffic formula at c = 1: Kingman, "The single server queue in heavy traffic",
  Proc. Cambridge Phil. Soc. 57, 1961).
* ``random``: a Bernoulli split with p = 1/c, C_a^2 -> 1 + p (C_a^2 - 1) (Whitt, "The
  Queueing Network Analyzer", Bell System Technical Journal 62(9), 1983, the splitting
  rule): Poisson input stays Poisson and each server is an M/G/1 at lambda / c
  (Pollaczek-Khinchine). For smooth input (C_a^2 < 1) the split's SCV rises towards 1
  with c; it is taken as 1 for every c (an upper bound), so that the wait never
  lengthens as the pool grows -- what the capacity curves and rate searches assume.
* ``prefix-aware``: affinity by the prompt's first block (llm-d's prefix-cache scorer,
  vLLM's and SGLang's cache-aware routers). Queued as ``random``: the affinity ignores
  the servers' load, so at best it spreads like a random split (a hot prefix can do
  worse; a load term beside it, as llm-d's default profile has, does better). The hit
  rate is the tier's ``prefix_hit_rate``, measured under the deployment's router.

The single server's wait percentile uses the same exponential tail as the c-server one:
Erlang C at c = 1 is rho, so P(W > t) = rho exp(-2 (mu - lambda) t / (C_a^2 + C_s^2))
(:func:`routed_queue` maps (c, lambda, C_a^2) to the queue a request waits in).

Units: rates in requests/s, times in ms, servers as counts (a slice is one server).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fleetplan.imports import linear_filter, scipy_special

__all__ = [
    "ROUTERS",
    "LOAD_AWARE_ROUTERS",
    "server_ca2",
    "routed_queue",
    "erlang_b",
    "erlang_c",
    "ErlangCOf",
    "wait_probability_exceeds",
    "wait_percentile_ms",
    "wait_percentiles_of",
    "wait_mean_ms",
    "variability_factor",
    "ttft_percentile_ms",
    "max_arrival_rate",
    "fewest_servers",
    "min_servers",
    "path_latency_ms",
    "path_sum_distribution",
    "ttft_percentile_of_sum_ms",
    "ttft_percentiles_of_sum_ms",
    "bisect_tree",
    "tree_mids",
]


#: The routers a pool's requests can be spread by (``serving.router``).
ROUTERS = ("least-work", "round-robin", "random", "prefix-aware")
#: Routers that look at the servers' load (one shared queue in the model); the others are
#: blind to it: each server has a queue of its own.
LOAD_AWARE_ROUTERS = ("least-work",)


def server_ca2(router: str, servers: ArrayLike, ca2: ArrayLike = 1.0):
    """The SCV of the inter-arrival times one of ``servers`` servers sees (dimensionless)
    when ``router`` spreads a stream of SCV ``ca2`` over them (the module docstring):
    ``ca2`` under least-work (the shared queue sees the whole stream), ``ca2 / c`` under
    round-robin, ``1 + max(ca2 - 1, 0) / c`` under random and prefix-aware. Scalars in,
    a scalar out; arrays broadcast.
    Raises: ValueError for an unknown router."""
    if router == "least-work":
        return ca2
    if router == "round-robin":
        return ca2 / np.asarray(servers, dtype=float) if np.ndim(servers) else ca2 / float(servers)
    if router in ("random", "prefix-aware"):
        more = np.maximum(np.asarray(ca2, dtype=float) - 1.0, 0.0)
        out = 1.0 + more / np.asarray(servers, dtype=float)
        return out if np.ndim(out) else np.float64(out)
    raise ValueError(f"router must be one of {', '.join(ROUTERS)}, not {router!r}")


def routed_queue(router: str, c, lam, ca2=1.0):
    """(servers, arrivals requests/s, arrival SCV) of the queue a request waits in when
    ``router`` spreads ``lam`` requests/s of SCV ``ca2`` over ``c`` servers: the pool's
    (c, lam, ca2) under least-work (one FCFS queue, G/G/c); one server's (1, lam / c,
    :func:`server_ca2`) under round-robin, random and prefix-aware (a G/G/1 each).
    Raises: ValueError for an unknown router or servers below 1."""
    if router == "least-work":
        return c, lam, ca2
    if np.any(np.asarray(c, dtype=float) < 1):
        raise ValueError("need servers c >= 1 and offered load a >= 0 (Erlangs)")
    cf = np.asarray(c, dtype=float) if np.ndim(c) else float(c)
    one = np.ones_like(cf) if np.ndim(cf) else 1.0
    return one, lam / cf, server_ca2(router, cf, ca2)


def erlang_b(c: ArrayLike, a: ArrayLike) -> NDArray[np.float64]:
    """Erlang B blocking probability for c servers and offered load a = lambda E[S] (Erlangs).

    Args: c: servers (array, >= 1; real values allowed). a: offered load (array, >= 0).
    Returns: array in [0, 1] broadcast from the inputs.
    Raises: ValueError for c < 1 or a < 0.
    """
    sp = scipy_special()  # imported late, and lighter (fleetplan/imports.py): keeps `fleetplan --help` fast
    gammaincc, gammaln = sp.gammaincc, sp.gammaln

    c = np.asarray(c, dtype=float)
    a = np.asarray(a, dtype=float)
    if np.any(c < 1) or np.any(a < 0):
        raise ValueError("need servers c >= 1 and offered load a >= 0 (Erlangs)")
    c, a = np.broadcast_arrays(c, a)
    out = np.zeros(c.shape)
    pos = a > 0
    cc, aa = c[pos], a[pos]
    log_pmf = cc * np.log(aa) - aa - gammaln(cc + 1.0)
    cdf = gammaincc(cc + 1.0, aa)
    with np.errstate(divide="ignore"):
        val = np.exp(log_pmf - np.log(cdf))
    # a >> c: cdf underflows; blocking tends to 1 - c/a.
    val = np.where(cdf > 0, val, 1.0 - cc / aa)
    out[pos] = np.clip(val, 0.0, 1.0)
    return out


def erlang_c(c: ArrayLike, a: ArrayLike) -> NDArray[np.float64]:
    """Erlang C: probability an arrival waits in M/M/c with offered load a (Erlangs).

    C = c B / (c - a (1 - B)) for a < c; 1 for a >= c (unstable queue).
    Returns: array in [0, 1]. Raises ValueError like :func:`erlang_b`.
    """
    if _scalars(c, a):
        return np.asarray(_erlang_c_scalar(c, a))
    c = np.asarray(c, dtype=float)
    a = np.asarray(a, dtype=float)
    b = erlang_b(c, a)
    c, a = np.broadcast_arrays(c, a)
    with np.errstate(divide="ignore", invalid="ignore"):
        val = c * b / (c - a * (1.0 - b))
    return np.where(a < c, np.clip(val, 0.0, 1.0), 1.0)


class ErlangCOf:
    """:func:`erlang_c` at fixed server counts ``c`` (a number or an array, >= 1) for many offered loads,
    as a bisection on the load asks for it: the same float64 operations as
    :func:`erlang_b` and :func:`erlang_c`, element for element, with what does not
    depend on the load -- log Gamma(c + 1), c + 1, the input checks -- computed once
    instead of at every call. Calling it with loads ``a`` (an array shaped as ``c``, or any
    shape for a number ``c``; Erlangs) returns C(c, a) (probability); loads of which one is
    not positive take :func:`erlang_c` itself. Raises ValueError for c < 1."""

    def __init__(self, c: ArrayLike):
        sp = scipy_special()
        self._gammaincc = sp.gammaincc
        self.c = np.asarray(c, dtype=float)
        if (self.c < 1).any():
            raise ValueError("need servers c >= 1 and offered load a >= 0 (Erlangs)")
        self._c1 = self.c + 1.0
        self._lgamma = sp.gammaln(self._c1)

    def __call__(self, a: NDArray[np.float64]) -> NDArray[np.float64]:
        c = self.c
        if (c.ndim and a.shape != c.shape) or not np.all(a > 0):
            return erlang_c(c, a)
        # erlang_b on every element (a > 0: its mask selects them all)
        log_pmf = c * np.log(a) - a - self._lgamma
        cdf = self._gammaincc(self._c1, a)
        with np.errstate(divide="ignore"):
            val = np.exp(log_pmf - np.log(cdf))
        b = np.clip(np.where(cdf > 0, val, 1.0 - c / a), 0.0, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            val = c * b / (c - a * (1.0 - b))
        return np.where(a < c, np.clip(val, 0.0, 1.0), 1.0)


def variability_factor(cs2: ArrayLike = 1.0, ca2: ArrayLike = 1.0) -> NDArray[np.float64]:
    """Allen-Cunneen's factor (C_a^2 + C_s^2) / 2 on the M/M/c wait (dimensionless).

    Args: cs2 service-time SCV, ca2 inter-arrival SCV (both >= 0, not both 0).
    Raises: ValueError for a negative SCV or both 0 (D/D/c has no queue to scale)."""
    cs2 = np.asarray(cs2, dtype=float)
    ca2 = np.asarray(ca2, dtype=float)
    if (cs2 < 0).any() or (ca2 < 0).any() or (cs2 + ca2 <= 0).any():
        raise ValueError("need squared coefficients of variation cs2 >= 0 and ca2 >= 0 (dimensionless), not both 0")
    return (ca2 + cs2) / 2.0


def _rate_gap(c, lam, mean_service_ms, cs2, ca2=1.0):
    """Decay rate of the waiting-time tail, 2 (c mu - lambda) / (C_a^2 + C_s^2), in 1/ms."""
    mu = 1.0 / np.asarray(mean_service_ms, dtype=float)  # per ms
    lam_ms = np.asarray(lam, dtype=float) / 1e3
    return (np.asarray(c, dtype=float) * mu - lam_ms) / variability_factor(cs2, ca2)


def wait_probability_exceeds(c: ArrayLike, lam: ArrayLike, mean_service_ms: ArrayLike, t_ms: ArrayLike, cs2: ArrayLike = 1.0,
                             ca2: ArrayLike = 1.0, router: str = "least-work") -> NDArray[np.float64]:
    """P(W > t) = C(c, a) exp(-2 (c mu - lambda) t / (C_a^2 + C_s^2)); 1 when unstable.

    Args: c servers; lam arrivals (requests/s); mean_service_ms E[S] (ms); t_ms (ms);
    cs2 squared coefficient of variation of S (1 = exponential); ca2 that of the
    inter-arrival times (1 = Poisson); router as :func:`routed_queue` (the pool's c and
    lam; the queue is one server's under a load-blind router). Arrays broadcast.
    """
    c, lam, ca2 = routed_queue(router, c, lam, ca2)
    a = np.asarray(lam, dtype=float) * np.asarray(mean_service_ms, dtype=float) / 1e3
    cw = erlang_c(c, a)
    gap = _rate_gap(c, lam, mean_service_ms, cs2, ca2)
    with np.errstate(over="ignore", invalid="ignore"):
        val = cw * np.exp(-np.maximum(gap, 0.0) * np.asarray(t_ms, dtype=float))
    return np.where(gap > 0, val, 1.0)


def wait_percentile_ms(c: ArrayLike, lam: ArrayLike, mean_service_ms: ArrayLike, percentile: float, cs2: ArrayLike = 1.0,
                       ca2: ArrayLike = 1.0, router: str = "least-work") -> NDArray[np.float64]:
    """Queue-wait percentile (ms): the t with P(W > t) = 1 - p, or 0 when P(wait) <= 1 - p.

    t_p = max(0, ln(C / (1 - p)) (C_a^2 + C_s^2) / (2 (c mu - lambda))); inf when lambda >= c mu.
    Args as :func:`wait_probability_exceeds` (``router`` too); percentile in (0, 100).
    """
    if not 0.0 < percentile < 100.0:
        raise ValueError("percentile must be in (0, 100)")
    c, lam, ca2 = routed_queue(router, c, lam, ca2)
    if _scalars(c, lam, mean_service_ms, cs2, ca2):
        return np.asarray(_wait_percentile_scalar(c, lam, mean_service_ms, percentile, cs2, ca2))
    a = np.asarray(lam, dtype=float) * np.asarray(mean_service_ms, dtype=float) / 1e3
    return _wait_percentile_of(erlang_c(c, a), c, lam, mean_service_ms, percentile, cs2, ca2)


def wait_percentiles_of(erlang: "ErlangCOf", lam: NDArray[np.float64], mean_service_ms: ArrayLike, percentile: float,
                        cs2: ArrayLike = 1.0, ca2: float = 1.0) -> NDArray[np.float64]:
    """:func:`wait_percentile_ms` (least-work: the G/G/c of ``erlang.c`` servers) at each
    arrival rate of ``lam`` (array, requests/s), Erlang C from ``erlang``
    (:class:`ErlangCOf`, kept by a caller that asks at many rates for one server count):
    the same floats. Raises ValueError as :func:`wait_percentile_ms`."""
    if not 0.0 < percentile < 100.0:
        raise ValueError("percentile must be in (0, 100)")
    a = lam * np.asarray(mean_service_ms, dtype=float) / 1e3
    return _wait_percentile_of(erlang(a), erlang.c, lam, mean_service_ms, percentile, cs2, ca2)


def _wait_percentile_of(cw, c, lam, mean_service_ms, percentile, cs2, ca2) -> NDArray[np.float64]:
    """:func:`wait_percentile_ms`'s array path from the Erlang C ``cw`` of its queue."""
    gap = _rate_gap(c, lam, mean_service_ms, cs2, ca2)
    tail = 1.0 - percentile / 100.0
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.log(np.maximum(cw, 1e-300) / tail) / gap
    t = np.where(cw <= tail, 0.0, t)
    return np.where(gap > 0, np.maximum(t, 0.0), np.inf)


_SCALAR_TYPES = (int, float, np.floating, np.integer)


def _scalars(*xs) -> bool:
    """Whether every argument is a plain number (not an array, not a bool)."""
    return all(isinstance(x, _SCALAR_TYPES) and not isinstance(x, (bool, np.bool_)) for x in xs)


def _max(x, y):
    """``np.maximum`` of two float64 scalars, NaN and signed zeros alike (x if x > y or x is NaN, else y)."""
    return x if (x > y or x != x) else y


def _clip01(x):
    """``np.clip(x, 0, 1)`` of a float64 scalar (NaN stays NaN, -0.0 stays -0.0)."""
    return x if not (x < 0.0 or x > 1.0) else (np.float64(0.0) if x < 0.0 else np.float64(1.0))


def _erlang_c_scalar(c, a):
    """:func:`erlang_c` of one (servers, Erlangs) pair: the same float64 operations in the
    same order without the array machinery (numpy's per-call overhead is ~20x the
    arithmetic here; the what-if's and the colocated pools' scalar calls are most calls).
    Raises ValueError like :func:`erlang_b`."""
    sp = scipy_special()  # imported late, and lighter (fleetplan/imports.py): keeps `fleetplan --help` fast
    gammaincc, gammaln = sp.gammaincc, sp.gammaln

    c, a = np.float64(c), np.float64(a)
    if c < 1 or a < 0:
        raise ValueError("need servers c >= 1 and offered load a >= 0 (Erlangs)")
    b = np.float64(0.0)
    if a > 0:
        cdf = gammaincc(c + 1.0, a)
        if cdf > 0:
            b = _clip01(np.exp(c * np.log(a) - a - gammaln(c + 1.0) - np.log(cdf)))
        else:
            b = _clip01(1.0 - c / a)  # a >> c: cdf underflows; blocking tends to 1 - c/a
    if not a < c:
        return np.float64(1.0)
    return _clip01(c * b / (c - a * (1.0 - b)))


def _wait_percentile_scalar(c, lam, mean_service_ms, percentile, cs2, ca2):
    """:func:`wait_percentile_ms` of scalars, operation for operation (a test compares them
    bit for bit)."""
    c, lam, mean, cs2, ca2 = (np.float64(x) for x in (c, lam, mean_service_ms, cs2, ca2))
    a = lam * mean / 1e3
    cw = _erlang_c_scalar(c, a)
    if cs2 < 0 or ca2 < 0 or cs2 + ca2 <= 0:
        raise ValueError("need squared coefficients of variation cs2 >= 0 and ca2 >= 0 (dimensionless), not both 0")
    gap = (c * (1.0 / mean) - lam / 1e3) / ((ca2 + cs2) / 2.0)
    if not gap > 0:
        return np.float64(np.inf)
    tail = 1.0 - percentile / 100.0
    if cw <= tail:
        return _max(np.float64(0.0), np.float64(0.0))
    return _max(np.log(_max(cw, 1e-300) / tail) / gap, 0.0)


def wait_mean_ms(c: ArrayLike, lam: ArrayLike, mean_service_ms: ArrayLike, cs2: ArrayLike = 1.0, ca2: ArrayLike = 1.0,
                 router: str = "least-work") -> NDArray[np.float64]:
    """Mean queue wait (ms): C (C_a^2 + C_s^2) / (2 (c mu - lambda)) = W_MMc (C_a^2 + C_s^2) / 2
    (Allen-Cunneen; at c = 1, M/G/1's Pollaczek-Khinchine mean when C_a^2 = 1); inf when
    unstable. ``router`` as :func:`routed_queue`."""
    c, lam, ca2 = routed_queue(router, c, lam, ca2)
    a = np.asarray(lam, dtype=float) * np.asarray(mean_service_ms, dtype=float) / 1e3
    cw = erlang_c(c, a)
    gap = _rate_gap(c, lam, mean_service_ms, cs2, ca2)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(gap > 0, cw / gap, np.inf)


def ttft_percentile_ms(path_ms: float, wait_ms: ArrayLike, prefill_ms: ArrayLike, kv_transfer_ms: ArrayLike = 0.0) -> NDArray[np.float64]:
    """TTFT percentile as the sum of component percentiles (ms): fixed path + queue wait +
    prefill compute of the percentile request + exposed KV transfer. A sum of
    percentiles bounds the percentile of the sum from above (conservative). The brief
    section 2, "SLO budget"."""
    return path_ms + np.asarray(wait_ms, dtype=float) + np.asarray(prefill_ms, dtype=float) + np.asarray(kv_transfer_ms, dtype=float)


def max_arrival_rate(
    c: ArrayLike, mean_service_ms: float, wait_budget_ms: float, percentile: float, cs2: float = 1.0, iterations: int = 45,
    ca2: ArrayLike = 1.0, router: str = "least-work",
) -> NDArray[np.float64]:
    """Largest arrival rate (requests/s) c servers carry with the wait percentile <= budget.

    Bisection on utilisation rho in [0, 1) for every c at once (the wait percentile is
    increasing in lambda). Returns 0 where the budget is negative.
    Args: c: servers (array of counts >= 1); mean_service_ms (ms); wait_budget_ms (ms);
    cs2, ca2: service and inter-arrival SCVs (as :func:`wait_percentile_ms`; ``ca2`` a
    number, or an array shaped as ``c``); router as :func:`routed_queue`: under a
    load-blind router the pool carries c x what one server carries at its own C_a^2
    (:func:`server_ca2`), one bisection per distinct C_a^2.
    Raises: ValueError as :func:`wait_percentile_ms` (servers below 1, a percentile
    outside (0, 100), a negative SCV, an unknown router).

    Each step evaluates :func:`wait_percentile_ms` at ``lambda = rho c mu`` with the
    same floating-point operations in the same order, fused into one pass: the parts
    that do not depend on rho (log Gamma(c + 1), c mu, the Allen-Cunneen factor, the
    input checks) are computed once per call instead of once per step, so the result
    is bit for bit :func:`wait_percentile_ms`'s bisection (``_max_arrival_rate_reference``)
    at a quarter of its cost (the capacity curves of every solve and what-if event).
    """
    c = np.atleast_1d(np.asarray(c, dtype=float))
    if router != "least-work":
        if np.any(c < 1):
            raise ValueError("need servers c >= 1 and offered load a >= 0 (Erlangs)")
        per = np.broadcast_to(np.asarray(server_ca2(router, c, ca2), dtype=float), c.shape)
        vals, inv = np.unique(per, return_inverse=True)
        one = max_arrival_rate(np.ones(vals.size), mean_service_ms, wait_budget_ms, percentile, cs2, iterations, vals)
        return c * one[inv.ravel()]
    if wait_budget_ms < 0:
        return np.zeros_like(c)
    mean = float(mean_service_ms)
    if (iterations < 1 or not 1e-9 < mean < 1e12 or c.size == 0 or not np.all(np.isfinite(c))
            or not np.isscalar(cs2) or not (np.isscalar(ca2) or np.shape(ca2) == c.shape)):
        return _max_arrival_rate_reference(c, mean_service_ms, wait_budget_ms, percentile, cs2, iterations, ca2)
    sp = scipy_special()  # imported late, and lighter (fleetplan/imports.py): keeps `fleetplan --help` fast
    gammaincc, gammaln = sp.gammaincc, sp.gammaln

    if not 0.0 < percentile < 100.0:
        raise ValueError("percentile must be in (0, 100)")
    if np.any(c < 1):
        raise ValueError("need servers c >= 1 and offered load a >= 0 (Erlangs)")
    vf = variability_factor(cs2, ca2)  # raises for a bad SCV, as wait_percentile_ms does; a number or one per c
    tail = 1.0 - percentile / 100.0
    mu = 1e3 / mean_service_ms  # per s
    c1 = c + 1.0
    log_gamma = gammaln(c1)  # erlang_b's gammaln(c + 1)
    c_mu_ms = c * (1.0 / np.asarray(mean_service_ms, dtype=float))  # _rate_gap's c mu (per ms)

    def ok_at(mid):
        """Whether the wait percentile at rho = mid meets the budget (mid broadcast against c)."""
        lam = mid * c * mu
        a = lam * mean_service_ms / 1e3  # > 0: mid >= 2^-iterations, c >= 1
        # erlang_b: P(N = c) / P(N <= c), N ~ Poisson(a); 1 - c/a where the cdf underflows
        cdf = gammaincc(c1, a)
        b = np.exp(c * np.log(a) - a - log_gamma - np.log(cdf))
        b = np.clip(np.where(cdf > 0, b, 1.0 - c / a), 0.0, 1.0)
        # erlang_c
        cw = np.where(a < c, np.clip(c * b / (c - a * (1.0 - b)), 0.0, 1.0), 1.0)
        # wait_percentile_ms
        gap = (c_mu_ms - lam / 1e3) / vf
        t = np.where(cw <= tail, 0.0, np.log(np.maximum(cw, 1e-300) / tail) / gap)
        w = np.where(gap > 0, np.maximum(t, 0.0), np.inf)
        return w <= wait_budget_ms

    lo = np.zeros_like(c)
    hi = np.ones_like(c)
    with np.errstate(all="ignore"):
        if c.size <= _TREE_MAX_SERVERS:
            # few server counts (the evaluator's one pool): a step's numpy overhead is most of
            # its cost, so the mids of _TREE_LEVELS steps are evaluated in one pass -- the
            # 2^levels - 1 points either outcome may lead to, per c -- the same mids, the
            # same floats (a test compares the one-step loop bit for bit)
            c, c1, log_gamma, c_mu_ms = c[:, None], c1[:, None], log_gamma[:, None], c_mu_ms[:, None]
            vf = vf[:, None] if np.ndim(vf) else vf
            los, his = lo.tolist(), hi.tolist()
            left = iterations
            while left > 0:
                k = min(_TREE_LEVELS, left)
                trees = [tree_mids(x, z, k) for x, z in zip(los, his)]
                good = ok_at(np.array([m for m, _ in trees])).tolist()
                for r, (mids, nodes) in enumerate(trees):
                    i = 0
                    for _ in range(k):
                        if good[r][i]:
                            los[r], his[r], i = mids[i], nodes[i][1], 2 * i + 2
                        else:
                            los[r], his[r], i = nodes[i][0], mids[i], 2 * i + 1
                left -= k
            lo = np.array(los, dtype=float)
            c = c[:, 0]
        else:
            for _ in range(iterations):
                mid = 0.5 * (lo + hi)
                ok = ok_at(mid)
                lo = np.where(ok, mid, lo)
                hi = np.where(ok, hi, mid)
    return lo * c * mu


def tree_mids(lo: float, hi: float, k: int) -> tuple[list[float], list[tuple[float, float]]]:
    """The mids of the next k bisection steps from [lo, hi], breadth first (node i's
    children are 2i + 1, taken when the step sets hi = mid, and 2i + 2, lo = mid), and each
    node's interval: Python floats, the same IEEE operations as numpy's 0.5 * (lo + hi)."""
    nodes = [(lo, hi)]
    mids = []
    for i in range(2**k - 1):
        a, z = nodes[i]
        m = 0.5 * (a + z)
        mids.append(m)
        if 2 * i + 2 < 2**k - 1:
            nodes.append((a, m))
            nodes.append((m, z))
    return mids, nodes


_TREE_MAX_SERVERS = 8  # server arrays up to this size take max_arrival_rate's batched-steps path
_TREE_LEVELS = 5  # its steps per pass (31 points per server count)


def _max_arrival_rate_reference(
    c: ArrayLike, mean_service_ms: float, wait_budget_ms: float, percentile: float, cs2: float = 1.0, iterations: int = 45,
    ca2: ArrayLike = 1.0,
) -> NDArray[np.float64]:
    """:func:`max_arrival_rate` as the plain bisection on :func:`wait_percentile_ms`: the
    definition the fused loop reproduces bit for bit (tests/unit/test_queueing.py), and
    the path for inputs outside the fused loop's range."""
    c = np.atleast_1d(np.asarray(c, dtype=float))
    if wait_budget_ms < 0:
        return np.zeros_like(c)
    lo = np.zeros_like(c)
    hi = np.ones_like(c)
    mu = 1e3 / mean_service_ms  # per s
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        w = wait_percentile_ms(c, mid * c * mu, mean_service_ms, percentile, cs2, ca2)
        ok = w <= wait_budget_ms
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return lo * c * mu


def min_servers(lam: float, mean_service_ms: float, wait_budget_ms: float, percentile: float, cs2: float = 1.0, max_servers: int = 10_000_000,
                ca2: float = 1.0, router: str = "least-work") -> int | None:
    """Fewest servers whose wait percentile at ``lam`` (requests/s) is within the budget (ms);
    cs2, ca2 the service and inter-arrival SCVs, router the spread (as :func:`wait_percentile_ms`).

    Exponential search then bisection (the wait percentile is non-increasing in c, under
    every router: :func:`server_ca2` never rises with c).
    Returns None when the budget is negative or more than ``max_servers`` would be needed.
    """
    if lam <= 0:
        return 0
    if wait_budget_ms < 0:
        return None

    def ok(c: int) -> bool:
        return bool(wait_percentile_ms(c, lam, mean_service_ms, percentile, cs2, ca2, router) <= wait_budget_ms)

    return fewest_servers(ok, max(1, int(np.floor(lam * mean_service_ms / 1e3))), max_servers)  # below the floor it is unstable


def fewest_servers(ok, lo: int, max_servers: int = 10_000_000) -> int | None:
    """The fewest servers c >= ``lo`` with ``ok(c)`` (``ok`` false below a point, true from
    it on): exponential search then bisection. None when more than ``max_servers`` would be
    needed."""
    if ok(lo):
        return lo
    hi = lo + 1
    while not ok(hi):
        lo = hi
        hi = min(2 * hi, max_servers)
        if lo >= max_servers:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def path_latency_ms(p50_ms: ArrayLike, p99_ms: ArrayLike, percentile: float) -> NDArray[np.float64]:
    """Percentile of a fixed path component known by its p50 and p99 (ms).

    Assumes a shifted exponential through both points: t_p = p50 + (p99 - p50) x
    ln(0.5 / (1 - p)) / ln(50), exact at p = 50 and p = 99. For p < 50 returns p50.
    """
    if not 0.0 < percentile < 100.0:
        raise ValueError("percentile must be in (0, 100)")
    p50 = np.asarray(p50_ms, dtype=float)
    p99 = np.asarray(p99_ms, dtype=float)
    if percentile <= 50.0:
        return p50 + 0.0
    return p50 + (p99 - p50) * np.log(0.5 / (1.0 - percentile / 100.0)) / np.log(50.0)


#: The least p99 - p50 of a path component taken as spread (ms): 1 ns. Below it the
#: component is a constant at its p50 (its p99 is less than 1 ns away).
MIN_PATH_SPREAD_MS = 1e-6


def path_sum_distribution(components: list[tuple[float, float]], step_ms: float | None = None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Distribution of the sum of fixed path components, each the shifted exponential
    through its (p50_ms, p99_ms) (:func:`path_latency_ms`) floored at 0, as a pmf on a
    uniform grid: (cell midpoints in ms, probabilities), by numerical convolution of the
    discretised components (an error of at most half a cell). ``step_ms`` defaults to
    1/100 of the smallest component's p99 - p50, coarsened to keep under 4,000 cells.
    A component whose p99 - p50 is at most :data:`MIN_PATH_SPREAD_MS` is a constant at its
    p50. No components: a point mass at 0.
    """
    comps = [(float(a), float(b)) for a, b in components]
    # a spread below MIN_PATH_SPREAD_MS is a constant at its p50: the exponential's rate,
    # ln 50 / (p99 - p50), overflows for a denormal spread (p99 = p50 + 1e-320: an empty grid,
    # an IndexError, exit 1, found by fuzzing the instance's figures)
    var = [(a, b) for a, b in comps if b - a > MIN_PATH_SPREAD_MS]
    const = sum(a for a, b in comps if b - a <= MIN_PATH_SPREAD_MS)
    if not var:
        return np.array([const]), np.ones(1)
    rates = [np.log(50.0) / (b - a) for a, b in var]
    span = sum(25.0 / r + np.log(2.0) / r for r in rates)
    h = step_ms or max(min(b - a for a, b in var) / 100.0, span / 4000.0)
    total = np.ones(1)
    origin = const
    for (p50, p99), rate in zip(var, rates):
        raw = p50 - np.log(2.0) / rate  # the shift; below 0 the mass is floored at 0
        lo = max(raw, 0.0)
        edges = np.arange(lo, p50 + 25.0 / rate + h, h)
        cdf = 1.0 - np.exp(-rate * (edges - raw))
        pmf = np.diff(cdf)
        pmf[0] += cdf[0]  # the floored mass (0 unless raw < 0)
        pmf[-1] += 1.0 - cdf[-1]
        origin += lo
        total = np.convolve(total, pmf)
    return origin + h * (np.arange(total.size) + 0.5 * len(var)), total / total.sum()


def bisect_tree(pred, lo: float, hi: float, iterations: int, levels: int = 6, stop=None) -> tuple[float, float]:
    """(lo, hi) after ``iterations`` steps of the bisection ``mid = (lo + hi) / 2; lo = mid if
    pred(mid) else hi = mid`` -- the same mids, the same result -- with ``pred`` (vectorised
    over an array of points, element-wise the scalar predicate, returning booleans) asked
    for the mids of ``levels`` steps at once: the 2^levels - 1 points either outcome may
    lead to (one call for six steps instead of six: a step's numpy overhead is most of its
    cost when the predicate is a small array program). ``stop(lo, hi)``, when given, is
    asked before each pass: True ends the bisection there (a caller whose question the
    bracket already answers)."""
    left = iterations
    while left > 0:
        if stop is not None and stop(lo, hi):
            break
        k = min(levels, left)
        # the mids of the next k steps, breadth first: node i's children are 2i + 1 (pred false: hi = mid) and 2i + 2 (lo = mid)
        mids, nodes = tree_mids(lo, hi, k)
        ok = pred(np.array(mids))
        i = 0
        for _ in range(k):
            a, z = nodes[i]
            if ok[i]:
                lo, hi, i = mids[i], z, 2 * i + 2
            else:
                lo, hi, i = a, mids[i], 2 * i + 1
        left -= k
    return lo, hi


def _bisect_up(excess_at, lo: float, hi: float, iterations: int, levels: int = 6) -> float:
    """``hi`` after ``iterations`` steps of the bisection ``mid = (lo + hi) / 2; lo = mid if
    excess(mid) > 0 else hi = mid`` (:func:`bisect_tree`; decode_at_load's step time is
    numpy overhead at one point)."""
    return bisect_tree(lambda t: excess_at(t) > 0, lo, hi, iterations, levels)[1]


def _decayed_cumsum(x: NDArray[np.float64], r: float) -> NDArray[np.float64]:
    """y_j = x_j + r y_{j-1}, y_0 = x_0 (dimensionless weights; r the decay per grid step):
    ``scipy.signal.lfilter([1], [1, -r], x)``, by its own compiled routine loaded without
    ``scipy.signal`` (which loads scipy.stats, scipy.optimize and more, ~0.4 s of start-up:
    :func:`fleetplan.imports.linear_filter`), else :func:`_decayed_cumsum_py`, operation for
    operation the same floats (a test compares both with lfilter bit for bit)."""
    f = linear_filter()
    if f is None:
        return _decayed_cumsum_py(x, r)
    return f(_ONE, np.array([1.0, -float(r)]), np.asarray(x, dtype=float), -1)


_ONE = np.array([1.0])


def _decayed_cumsum_py(x: NDArray[np.float64], r: float) -> NDArray[np.float64]:
    """:func:`_decayed_cumsum` in Python: lfilter's direct form II transposed state for one
    pole is 0 x_j - (-r) y_j = r y_j exactly, then y_j = state + 1 x_j, so bit for bit its
    result (20x slower at 4,000 points)."""
    out: list[float] = []
    keep = out.append  # a list, not out[j] = y into an array: half the time per point, the same floats
    y = 0.0
    r = float(r)
    for v in x.tolist():
        y = r * y + v
        keep(y)
    return np.array(out, dtype=float)


def ttft_percentile_of_sum_ms(
    percentile: float,
    path: tuple[NDArray[np.float64], NDArray[np.float64]],
    c: float,
    lam: float,
    mean_service_ms: float,
    cs2: float,
    own_ms: ArrayLike,
    own_weight: ArrayLike,
    ca2: float = 1.0,
    router: str = "least-work",
) -> float:
    """TTFT percentile as the percentile of the sum path + wait + own compute (ms), the
    components independent -- where :func:`ttft_percentile_ms` adds their percentiles
    (an upper bound, since a request with a long wait is seldom also the longest prompt).

    TTFT = P + W + S: P the path (``path``, from :func:`path_sum_distribution`); W the
    queue wait of the G/G/c model, 0 with probability 1 - C and otherwise exponential
    with rate 2 (c mu - lambda) / (C_a^2 + C_s^2) (Allen-Cunneen, as
    :func:`wait_probability_exceeds`); S the request's own compute and exposed KV,
    ``own_ms`` with probabilities ``own_weight``. P(TTFT > t) = sum_i w_i [(1 - C)
    P(P > t - s_i) + C P(P + E > t - s_i)], solved for the percentile by bisection.
    Args: c servers, lam requests/s, mean_service_ms E[S] (ms), cs2 C_s^2, ca2 C_a^2
    (inter-arrival SCV, 1 = Poisson), router the spread (:func:`routed_queue`).
    Returns: ms; inf when the queue is unstable.
    """
    return ttft_percentiles_of_sum_ms([percentile], path, c, lam, mean_service_ms, cs2, own_ms, own_weight, ca2, router)[percentile]


def ttft_percentiles_of_sum_ms(
    percentiles: list[float],
    path: tuple[NDArray[np.float64], NDArray[np.float64]],
    c: float,
    lam: float,
    mean_service_ms: float,
    cs2: float,
    own_ms: ArrayLike,
    own_weight: ArrayLike,
    ca2: float = 1.0,
    router: str = "least-work",
) -> dict[float, float]:
    """:func:`ttft_percentile_of_sum_ms` at each of ``percentiles`` (percentile -> ms):
    the tail (Erlang C, the decay rate, the decayed path sums) is built once for all of
    them -- the same floats as one call per percentile, at a fraction of the cost."""
    for percentile in percentiles:
        if not 0.0 < percentile < 100.0:
            raise ValueError("percentile must be in (0, 100)")
    tails, start = _sum_tail(path, c, lam, mean_service_ms, cs2, own_ms, own_weight, ca2, router)
    if tails is None:
        return {p: float("inf") for p in percentiles}

    def bisect(percentile: float) -> float:
        target = 1.0 - percentile / 100.0
        lo, hi = 0.0, start
        while tails(np.array([hi]))[0] > target:
            hi *= 2.0
        # 50 steps of "mid = (lo + hi) / 2; lo = mid if tail(mid) > target else hi = mid", three at a time
        return _bisect_up(lambda t: (tails(t) > target).astype(float), lo, hi, 50, levels=3)

    return {p: bisect(p) for p in percentiles}


def ttft_percentile_of_sum_within(
    percentile: float,
    limit_ms: float,
    path: tuple[NDArray[np.float64], NDArray[np.float64]],
    c: float,
    lam: float,
    mean_service_ms: float,
    cs2: float,
    own_ms: ArrayLike,
    own_weight: ArrayLike,
    ca2: float = 1.0,
    router: str = "least-work",
) -> bool:
    """Whether :func:`ttft_percentile_of_sum_ms` (same arguments) <= ``limit_ms`` (ms) -- the
    same answer, found with fewer steps: the same bisection, its steps the same points and
    decisions, stopped once its bracket [lo, hi] leaves the limit out (hi only falls and lo
    only rises, so the 50th step's hi, the percentile, is <= hi and >= lo: hi <= limit
    answers yes, lo > limit no). A margin search asks only this of the TTFT, at loads and
    step times near where it crosses its limit: ~10-20 of the 50 steps instead of all 50.
    Raises ValueError for a percentile outside (0, 100)."""
    if not 0.0 < percentile < 100.0:
        raise ValueError("percentile must be in (0, 100)")
    tails, start = _sum_tail(path, c, lam, mean_service_ms, cs2, own_ms, own_weight, ca2, router)
    if tails is None:
        return float("inf") <= limit_ms
    target = 1.0 - percentile / 100.0
    hi = start
    while tails(np.array([hi]))[0] > target:
        hi *= 2.0
    # the percentile's bisection (as _bisect_up runs it above), stopped once the bracket leaves the limit out
    lo, hi = bisect_tree(lambda t: tails(t) > target, 0.0, hi, 50, 3, stop=lambda lo, hi: hi <= limit_ms or lo > limit_ms)
    return hi <= limit_ms


def _sum_tail(path, c, lam, mean_service_ms, cs2, own_ms, own_weight, ca2, router):
    """(tails, start) of :func:`ttft_percentiles_of_sum_ms`: ``tails(t)`` P(TTFT > t) at each
    point of the array ``t`` (ms) and the bisection's first upper end (ms); (None, None) when
    the queue is unstable (every percentile infinite)."""
    c, lam, ca2 = routed_queue(router, c, lam, ca2)
    xs, pm = path
    s = np.asarray(own_ms, dtype=float)
    w = np.asarray(own_weight, dtype=float)
    w = w / w.sum()
    a = lam * mean_service_ms / 1e3
    if lam > 0:
        cw = float(erlang_c(c, a))
        theta = float(_rate_gap(c, lam, mean_service_ms, cs2, ca2))
        if theta <= 0:
            return None, None
    else:
        cw, theta = 0.0, 1.0
    surv = 1.0 - np.cumsum(pm)  # P(P > xs[j])
    h = float(xs[1] - xs[0]) if xs.size > 1 else 1.0
    # H[j] = sum_{i <= j} pm_i exp(-theta (xs_j - xs_i)), the recurrence H_j = H_{j-1} e^{-theta h} + pm_j
    hexp = _decayed_cumsum(pm, np.exp(-theta * h)) if cw > 0 else np.zeros_like(pm)

    def tails(t: NDArray[np.float64]) -> NDArray[np.float64]:
        """P(TTFT > t) at each point of ``t`` (ms): element-wise the same operations per
        point, one dot product per point as before (the bisection below asks for many)."""
        x = t[:, None] - s[None, :]  # (points, types)
        j = np.searchsorted(xs, x, side="right") - 1  # last path point <= x
        inside = j >= 0
        jj = np.maximum(j, 0)
        fbar = np.where(inside, surv[jj], 1.0)
        # P(P + E > x) = P(P > x) + sum_{xs <= x} pm e^{-theta (x - xs)}
        g = fbar + np.where(inside, hexp[jj] * np.exp(-theta * np.maximum(x - xs[jj], 0.0)), 0.0)
        mix = (1.0 - cw) * fbar + cw * g
        return np.fromiter(map(w.dot, mix), float, count=len(mix))  # np.dot(w, row) per row, without the list

    return tails, float(xs[-1] + s.max() + (50.0 / theta if cw > 0 else 0.0) + 1.0)
