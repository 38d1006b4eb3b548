"""Arrival processes for the simulator: Poisson at a rate, or a production trace's
timestamps rescaled to a rate.

Rescaling a trace to a higher rate superposes k = ceil(rate / trace rate) copies of it,
each shifted by a random offset cyclically over the trace's span, and stretches the
union's time axis by k x trace rate / rate (between 1 and 2) to land on the rate.
Superposing independent copies keeps the index of dispersion of counts per window
(var/mean of k independent copies is that of one copy), so a bursty trace stays bursty;
the stretch only relabels the window length (a 1 s window is a 0.5-1 s window of the
copies). Thinning instead would pull the dispersion towards 1 by (1 - q)(1 - D), and
time compression -- the other way to raise the rate -- would fold the trace's
minute-scale drift into the seconds a prefill queue reacts to. Only the timestamps are
replayed: prompt lengths, hits and outputs come from the plan's instance. Source: the
superposition of point processes, Cox & Isham, *Point Processes* (1980), section 4.1.

Units: seconds in and out, rates in requests/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fleetplan.errors import InputError, Problem

__all__ = ["ArrivalStream", "poisson_arrivals", "TraceTimes", "read_trace_times", "trace_arrivals", "dispersion"]

#: Most arrivals one run generates (requests): a run holds about 0.3 KB per arrival while
#: it goes (measured on the bundled Gemini plan's us-east sizing scenario, 5.6 million
#: arrivals in 1.8 GB; 1.2 KB before the simulator's Python loops ran a chunk of requests at
#: a time), so 10 million is ~3 GB; beyond this the run needs --scale
#: or a shorter --duration.
MAX_ARRIVALS = 10_000_000


@dataclass(frozen=True)
class ArrivalStream:
    """Arrival times (s, sorted, in [0, horizon_s)) and how they were made."""

    t_s: np.ndarray
    horizon_s: float
    rate_rps: float
    source: str
    notes: list[str] = field(default_factory=list)


def _check_count(rate_rps: float, horizon_s: float) -> None:
    n = rate_rps * horizon_s
    if not math.isfinite(n) or n > MAX_ARRIVALS:
        raise InputError("--duration", [Problem("--duration/--warmup", f"{rate_rps:,.4g} req/s for {horizon_s:.4g} s (warm-up and window) is "
                                                f"{n:.3g} arrivals, more than the {MAX_ARRIVALS:,} one run holds (~0.3 KB each in memory); shorten "
                                                "--duration or --warmup, or simulate a slice of the region with --scale.")])


def poisson_arrivals(rate_rps: float, horizon_s: float, rng: np.random.Generator) -> ArrivalStream:
    """Homogeneous Poisson arrivals at ``rate_rps`` over [0, ``horizon_s``): a Poisson
    count, then uniform order statistics (exact, vectorised).

    Raises: InputError (--duration) when the run would exceed ``MAX_ARRIVALS``."""
    _check_count(rate_rps, horizon_s)
    n = int(rng.poisson(rate_rps * horizon_s)) if rate_rps > 0 else 0
    t = np.sort(rng.uniform(0.0, horizon_s, size=n))
    return ArrivalStream(t, horizon_s, rate_rps, "poisson")


@dataclass(frozen=True)
class TraceTimes:
    """A trace's arrival times (s from its first request), its file and its format."""

    t_s: np.ndarray
    path: str
    fmt: str
    quantised: bool

    @property
    def span_s(self) -> float:
        return float(self.t_s[-1] - self.t_s[0]) if self.t_s.size else 0.0

    @property
    def rate_rps(self) -> float:
        return (self.t_s.size - 1) / self.span_s if self.span_s > 0 else math.inf


def read_trace_times(path: str, fmt: str | None = None) -> TraceTimes:
    """Read only the timestamps of a request trace (azure, mooncake or csv; detected when
    ``fmt`` is None) with :mod:`fleetplan.workload.traces`' validating readers.

    A trace whose inter-arrival gaps are mostly 0 has quantised timestamps (Mooncake's
    ~3 s buckets): each bucket's requests are spread uniformly at random over the gap to
    the next distinct timestamp (seeded, so the same file gives the same times; evenly
    spaced would be smoother than Poisson), and ``quantised`` is set.
    Raises: TraceError (exit 2) for an unreadable or malformed trace, a servegen file
    (rates per window, not requests) or a trace without two distinct instants.
    """
    from fleetplan.workload.traces import TraceError, detect_format, iter_requests

    try:
        f = fmt or detect_format(path)
        if f == "servegen":
            raise TraceError(path, [Problem("--arrivals", "a servegen file holds rates per 600 s window, not request timestamps; give a "
                                                         "per-request trace (azure, mooncake or csv).")])
        t = np.fromiter((r.t_s for r in iter_requests(path, f)), dtype=float)
    except TraceError as e:  # the simulator's option is --trace-format, and it takes no servegen files
        raise TraceError(e.source, [Problem(q.path, q.message.replace("pass --format", "pass --trace-format").replace("--format ", "--trace-format ")
                                            .replace("azure, mooncake, servegen, csv", "azure, mooncake, csv"), q.value) for q in e.problems]) from None
    t = t - t[0]
    if t.size < 2 or t[-1] <= 0:
        raise TraceError(path, [Problem("(file)", "the trace needs requests at two or more distinct instants to have a rate.")])
    gaps = np.diff(t)
    quantised = bool(np.mean(gaps == 0) > 0.5)
    if quantised:
        uniq, start, count = np.unique(t, return_index=True, return_counts=True)
        nxt = np.append(uniq[1:], uniq[-1] + np.median(np.diff(uniq)) if uniq.size > 1 else uniq[-1] + 1.0)
        g = np.searchsorted(uniq, t)  # t is sorted: each request's instant
        u = np.random.default_rng(0x5EED).random(t.size)
        spread = np.sort(uniq[g] + u * (nxt[g] - uniq[g]))
        t = spread - spread[0]
    return TraceTimes(t, str(Path(path)), f, quantised)


def trace_arrivals(tr: TraceTimes, rate_rps: float, horizon_s: float, rng: np.random.Generator) -> ArrivalStream:
    """The trace's arrival process at ``rate_rps`` over [0, ``horizon_s``): k copies, each
    cyclically shifted by a uniform offset over the trace's span, superposed, the time
    axis stretched to the rate and the result repeated to cover the horizon (see the
    module docstring).

    Returns an :class:`ArrivalStream` whose notes say how it was made and give the
    dispersion per 1 s of the trace and of the result. Raises InputError like
    :func:`poisson_arrivals`, and (--arrivals) when the trace is too sparse for the rate
    (more than ``MAX_ARRIVALS`` copies)."""
    _check_count(rate_rps, horizon_s)
    span = tr.span_s
    base = tr.t_s[:-1]  # the cycle is [0, span): the last instant is the first of the next cycle
    r = base.size / span
    k = max(1, math.ceil(rate_rps / r))
    if k > MAX_ARRIVALS:
        raise InputError("--arrivals", [Problem("--arrivals", f"the trace has {tr.t_s.size:,} requests over {span:,.0f} s ({r:.3g} req/s): "
                                                              f"{k:,} copies would be needed for {rate_rps:,.4g} req/s; give a denser trace.")])
    stretch = k * r / rate_rps  # >= 1: the superposed copies' time axis, stretched onto the rate
    offsets = rng.uniform(0.0, span, size=k)
    cyc = np.sort(np.mod(base[None, :] + offsets[:, None], span).ravel())  # k copies in one cycle of the trace
    period = span * stretch
    reps = math.ceil(horizon_s / period)
    t = (cyc[None, :] * stretch + period * np.arange(reps)[:, None]).ravel()
    t = t[t < horizon_s]
    copies = f"{k:,} cyclically shifted copies superposed" if k > 1 else "one cyclically shifted copy"
    notes = [f"trace {Path(tr.path).name} ({tr.fmt}, {tr.t_s.size:,} requests over {span:,.0f} s, {r:,.4g} req/s) rescaled to "
             f"{rate_rps:,.4g} req/s: {copies}, time stretched x{stretch:.3f}; only the timestamps are replayed "
             "(lengths, hits and outputs are the plan's instance's)"]
    if tr.quantised:
        notes.append("the trace's timestamps are quantised (most inter-arrival gaps are 0): requests of one instant were spread at random "
                     "to the next instant")
    if horizon_s > period:
        notes.append(f"the run ({horizon_s:,.0f} s) is longer than the stretched trace ({period:,.0f} s): it repeats")
    dt, ds = dispersion(tr.t_s, 1.0), dispersion(t, 1.0)
    notes.append("index of dispersion per 1 s (var/mean of counts; Poisson = 1): "
                 + (f"trace {dt:.3g}" if math.isfinite(dt) else "trace too short to tell") + ", "
                 + (f"simulated arrivals {ds:.3g}" if math.isfinite(ds) else "simulated arrivals too few to tell"))
    return ArrivalStream(t, horizon_s, rate_rps, f"trace:{tr.path}", notes)


def dispersion(t_s: np.ndarray, window_s: float) -> float:
    """Index of dispersion var/mean of the counts of ``t_s`` in consecutive windows of
    ``window_s`` seconds (1 for Poisson); nan with fewer than two windows."""
    if t_s.size == 0:
        return math.nan
    n_w = int((t_s[-1] - t_s[0]) // window_s)
    if n_w < 2:
        return math.nan
    c = np.bincount(((t_s - t_s[0]) // window_s).astype(np.int64), minlength=n_w)[:n_w]
    m = c.mean()
    return float(c.var() / m) if m > 0 else math.nan
