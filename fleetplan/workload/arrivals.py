"""Arrival statistics of a request trace, for :mod:`fleetplan.workload.fit`.

Streaming counters over the arrival times (per second, per window, per hour, the gaps'
moments), and from them the rate per window, peak-to-mean, the inter-arrival CV, the
index of dispersion of counts at several time scales, the arrival SCV the queueing takes
(:func:`arrival_scv`: the index of dispersion at the queue's time scale inside each hour,
against that hour's own rate) and the 24-hour profile. Split from ``fit.py`` (which
re-exports these names) to keep each module to one concern.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from datetime import datetime, timezone

import numpy as np
from pydantic import BaseModel, Field

from fleetplan.errors import Problem
from fleetplan.workload.traces import TraceError

#: Timestamps above this (2001-09-09) are read as wall-clock epoch seconds, below it as
#: seconds from the trace's own origin.
WALL_CLOCK_EPOCH_S = 1e9
#: Most rate windows a trace may span (the window series is held in memory).
MAX_WINDOWS = 1_000_000
#: Stationary window of the arrival-SCV estimate (seconds): the plan's rate is an hour's
#: mean (regions.*.hourly_load), so the variability that matters is inside an hour.
SCV_WINDOW_S = 3600.0
#: Time scale of the arrival-SCV estimate (seconds), the bin of the counts: the order of a
#: TTFT budget (a prefill queue carries waits of up to about the budget, so a surplus of
#: arrivals over about that long is what it must absorb); --scv-timescale changes it.
SCV_TIMESCALE_S = 1.0
#: I(1 s) above this with I(10 s) above twice it: the fit flags the arrivals as batch-like.
BATCH_LIKE_I1 = 3.0
#: Time scales at which the index of dispersion is reported beside it (seconds).
SCV_TIMESCALES_REPORTED_S = (0.1, 1.0, 10.0, 60.0)


class ArrivalStats(BaseModel):
    """Arrival rate and burstiness."""

    requests: int = Field(description="Requests in the trace (count).")
    span_s: float = Field(description="From the first to the last arrival (seconds).")
    start_utc: str | None = Field(None, description="First arrival, ISO 8601 UTC (wall-clock traces only).")
    mean_rps: float = Field(description="Mean arrival rate over the span (requests/s).")
    window_s: float = Field(description="Window of the rate series (seconds).")
    windows: int = Field(description="Complete windows in the span (count).")
    window_rps_p50: float = Field(description="Median window rate (requests/s).")
    window_rps_p95: float = Field(description="95th-percentile window rate (requests/s).")
    peak_rps: float = Field(description="Highest window rate (requests/s).")
    peak_window_start_s: float = Field(description="Start of the peak window, seconds from the first arrival.")
    peak_to_mean: float = Field(description="peak_rps / mean_rps (dimensionless).")
    inter_arrival_cv: float | None = Field(description="Coefficient of variation of inter-arrival times (1 = Poisson); rate-weighted within-window CV for servegen.")
    dispersion_1s: float | None = Field(description="Index of dispersion var/mean of counts per 1 s (1 = Poisson); null when not computable.")
    dispersion_window: float | None = Field(description="Index of dispersion of counts per window (1 = Poisson); null when not computable.")
    zero_gap_share: float | None = Field(description="Share of inter-arrival gaps that are exactly 0 (high = quantised timestamps).")
    arrival_scv: float | None = Field(None, description="The workload block's arrival_scv (dimensionless, 1 = Poisson): the index of dispersion "
                                      "of counts in scv_timescale_s bins inside each hour, against that hour's own rate (fit.arrival_scv); "
                                      "null when not computable.")
    scv_timescale_s: float | None = Field(None, description="The bin of arrival_scv (seconds): --scv-timescale, raised to a whole number of "
                                          "timestamp quanta for quantised traces.")
    dispersion_within_hour: dict[str, float | None] = Field(default_factory=dict, description="The same index at other time scales "
                                                            "(seconds -> dimensionless): how the burstiness grows with the window.")
    interval_scv_within_hour: float | None = Field(None, description="SCV of the inter-arrival gaps inside each hour, each scaled by its hour's "
                                                   "mean gap (the stationary-interval estimate; for servegen the rate-weighted mean of the "
                                                   "600 s windows' CV^2); reported beside arrival_scv, not written.")
    hourly_load: list[float] | None = Field(description="24 hourly multipliers (mean rate per hour of day / the largest), when the trace spans >= 24 h.")
    hourly_basis: str | None = Field(None, description="What hour 0 is: 'UTC' for wall-clock traces, else \"hours from the trace's time origin\" (timestamp 0).")
    window_rps: list[float] = Field(default_factory=list, description="The rate of every complete window in order (requests/s); in --json, not in the workload file.")


def _windows(x: np.ndarray, span: float, window_s: float) -> list[tuple[float, float]]:
    """[start, end) of the stationary windows of a span from 0: whole windows of
    ``window_s``, the last cut at the span (a one-hour trace is one window)."""
    n = max(1, math.ceil(span / window_s - 1e-9))
    return [(k * window_s, min((k + 1) * window_s, span)) for k in range(n)]


def arrival_scv(t_s: np.ndarray, timescale_s: float = SCV_TIMESCALE_S, window_s: float = SCV_WINDOW_S) -> float | None:
    """Arrival SCV for the queueing: the index of dispersion of counts I(tau) = Var N(tau) /
    E N(tau) in bins of ``timescale_s``, inside stationary windows of ``window_s`` (each
    window's bins against that window's own mean, so a change of rate between windows --
    the diurnal swing, a night -- does not count), pooled over windows:

        I = [sum_w sum_b (n_wb - m_w)^2 / sum_w (B_w - 1)] / [sum_w sum_b n_wb / sum_w B_w]

    (the pooled within-window variance over the pooled mean; B_w the whole bins of
    window w, zeros included). For a renewal process I(tau) tends to the inter-arrival SCV
    as tau grows; for any stationary stream its limit is the asymptotic variability
    parameter, the C_a^2 that makes a G/G/c approximation right in heavy traffic (Whitt,
    "Approximating a point process by a renewal process, I", Operations Research 30(1),
    1982; Fendick & Whitt, "Measurements and approximations to describe the offered
    traffic and predict the average workload in a single-server queue", Proc. IEEE 77(1),
    1989, on taking it at the queue's time scale). Unlike the inter-arrival CV it is
    kept by the simulator's rescaling of a trace (superposed copies, docs/validation.md).

    Args: t_s: arrival times (s, any origin, sorted or not), (n,). timescale_s: the bin
    (s, > 0). window_s: the stationary window (s, >= 2 bins).
    Returns: I (dimensionless, 1 = Poisson), or None when no window holds two whole bins
    or no arrival falls in a whole bin. Raises ValueError for a bad bin or window.
    """
    if not (timescale_s > 0 and math.isfinite(timescale_s)) or not (window_s >= 2 * timescale_s):
        raise ValueError("need a time scale > 0 (s) and a window of at least two of them (s)")
    t = np.sort(np.asarray(t_s, dtype=float))
    if t.size < 2:
        return None
    x = t - t[0]
    span = float(x[-1])
    ss = n_tot = 0.0
    dof = bins = 0
    for lo, hi in _windows(x, span, window_s):
        nb = int((hi - lo) // timescale_s + 1e-9)
        if nb < 2:
            continue
        sel = x[(x >= lo) & (x < lo + nb * timescale_s)]
        c = np.bincount(((sel - lo) // timescale_s).astype(np.int64), minlength=nb)[:nb].astype(float)
        ss += float(((c - c.mean()) ** 2).sum())
        n_tot += float(c.sum())
        dof += nb - 1
        bins += nb
    if dof <= 0 or n_tot <= 0:
        return None
    return (ss / dof) / (n_tot / bins)


def interval_scv(t_s: np.ndarray, window_s: float = SCV_WINDOW_S) -> float | None:
    """The stationary-interval estimate beside :func:`arrival_scv`: the SCV of the
    inter-arrival gaps inside each stationary window, each gap scaled by its window's
    mean gap (so rate changes between windows do not count), pooled by gap count. Whitt's
    (1982) other basic method, right in light traffic; reported, not written."""
    t = np.sort(np.asarray(t_s, dtype=float))
    if t.size < 3:
        return None
    x = t - t[0]
    num = den = 0.0
    for lo, hi in _windows(x, float(x[-1]), window_s):
        sel = x[(x >= lo) & (x <= hi)] if hi >= x[-1] else x[(x >= lo) & (x < hi)]
        if sel.size < 3:
            continue
        g = np.diff(sel)
        m = g.mean()
        if m <= 0:
            continue
        num += float(((g / m - 1.0) ** 2).sum())
        den += g.size
    return num / den if den > 0 else None


class ArrivalCounter:
    """Streaming arrival counters (counts per second and per window, gap moments)."""

    def __init__(self, window_s: float, scv_timescale_s: float = SCV_TIMESCALE_S):
        self.window_s = window_s
        self.scv_timescale_s = scv_timescale_s
        self.times = array("d")
        self.n = 0
        self.t0 = self.t_last = None
        self.per_s: Counter = Counter()
        self.per_w: Counter = Counter()
        self.per_h: Counter = Counter()
        self.gap_n = 0
        self.gap_mean = 0.0
        self.gap_m2 = 0.0
        self.zero = 0

    def add(self, t: float) -> None:
        if self.t0 is None:
            self.t0 = t
        else:
            g = t - self.t_last
            self.gap_n += 1
            d = g - self.gap_mean
            self.gap_mean += d / self.gap_n
            self.gap_m2 += d * (g - self.gap_mean)
            self.zero += g == 0
        self.t_last = t
        self.times.append(t)
        x = t - self.t0
        self.per_s[int(x)] += 1
        self.per_w[int(x // self.window_s)] += 1
        self.per_h[int(t // 3600)] += 1
        self.n += 1

    def stats(self) -> tuple[ArrivalStats, list[str]]:
        """The arrival statistics. Raises TraceError when the span holds more than
        MAX_WINDOWS windows (a span in the wrong unit, or a tiny --window)."""
        notes = []
        span = float(self.t_last - self.t0)
        wall = self.t0 >= WALL_CLOCK_EPOCH_S
        nw = int(span // self.window_s)
        if nw > MAX_WINDOWS:
            raise TraceError("--window", [Problem("--window", f"the trace spans {span:,.4g} s ({span / 86400:,.4g} days): {nw:,.4g} windows of "
                                                  f"{self.window_s:g} s, more than {MAX_WINDOWS:,}. Raise --window, or check the timestamps' "
                                                  "unit (seconds for csv, milliseconds for mooncake).")])
        if nw >= 1:
            counts = np.array([self.per_w.get(k, 0) for k in range(nw)], dtype=float)
            tail = span - nw * self.window_s
            if tail > 0:
                notes.append(f"rates use the {nw:,} complete {self.window_s:g} s windows; the last {tail:,.1f} s (a partial window, "
                             f"{self.per_w.get(nw, 0):,} requests) is left out of the window statistics.")
        else:
            counts = np.array([float(self.n)])
            notes.append(f"the trace spans {span:.1f} s, less than one {self.window_s:g} s window: the rate series is one partial window.")
        win_len = self.window_s if nw >= 1 else span
        rates = counts / win_len if win_len > 0 else np.array([float("nan")])
        mean_rps = self.n / span if span > 0 else float("nan")
        if not span > 0:
            notes.append("every request arrives at the same instant: no rate can be measured.")
        n1 = int(span)
        disp1 = None
        if n1 >= 2:  # counts per complete second, zeros included, without materialising them
            c = np.array([v for k, v in self.per_s.items() if k < n1], dtype=float)
            m1 = c.sum() / n1
            disp1 = float((np.dot(c, c) / n1 - m1 * m1) / m1) if m1 > 0 else None
        dispw = float(counts.var() / counts.mean()) if counts.size >= 2 and counts.mean() > 0 else None
        cv = math.sqrt(self.gap_m2 / self.gap_n) / self.gap_mean if self.gap_n >= 2 and self.gap_mean > 0 else None
        zero = self.zero / self.gap_n if self.gap_n else None
        if zero is not None and zero > 0.5:
            notes.append(f"{zero:.0%} of inter-arrival gaps are 0: the timestamps are quantised, so the inter-arrival CV and the "
                         "per-second dispersion describe the quantisation, not the traffic; use the per-window figures.")
        hourly = basis = None
        if span >= 86400 * 365 * 10:
            notes.append(f"the trace spans {span / 86400 / 365:,.0f} years: no 24-hour profile (check the timestamps' unit).")
        elif span >= 86400:
            hourly, basis = _hourly_profile(self.per_h, self.t0, self.t_last, wall)
        else:
            notes.append(f"the trace spans {span / 3600:.2f} h (< 24 h): no 24-hour profile; keep the instance's hourly_load.")
        k = int(np.nanargmax(rates)) if np.isfinite(rates).any() else 0
        times = np.frombuffer(self.times, dtype=float)
        tau, unit, x_scv = self.scv_timescale_s, 1.0, times
        if zero is not None and zero > 0.5:  # quantised: count whole quanta, each instant snapped to its quantum
            uniq = np.unique(times)
            q = float(np.median(np.diff(uniq))) if uniq.size > 1 else 0.0
            if q > 0:
                # in units of one quantum, each instant at the middle of its own: bins of m quanta never split an
                # instant, and the instants' jitter (Mooncake: +-3 ms on 3 s) cannot put two in one bin
                x_scv, unit = np.round((times - times[0]) / q) + 0.5, q
                m = max(1, math.ceil(tau / q - 1e-9))
                if abs(m * q - tau) > 1e-6 * tau:
                    notes.append(f"the timestamps come in ~{q:.3g} s quanta: arrival_scv counts arrivals in bins of {m} quantum"
                                 f"{'s' if m > 1 else ''} ({m * q:.3g} s) instead of {tau:g} s.")
                tau = m * q
        scv, disp_h = None, {}
        if span > 0:
            w = min(SCV_WINDOW_S, max(span, 2 * tau))
            scv = arrival_scv(x_scv, tau / unit, w / unit) if span >= 2 * tau else None
            for ts in SCV_TIMESCALES_REPORTED_S:
                whole_quanta = ts >= unit * (1 - 1e-9) and abs(ts / unit - round(ts / unit)) < 1e-6 * max(1.0, ts / unit)
                ok = span >= 2 * ts and (unit == 1.0 or whole_quanta)
                disp_h[f"{ts:g}"] = arrival_scv(x_scv, ts / unit, w / unit) if ok else None
        i1, i10 = disp_h.get("1"), disp_h.get("10")
        if scv is not None and i1 is not None and i10 is not None and i1 > BATCH_LIKE_I1 and i10 > 2 * i1:
            notes.append(f"the arrivals are batch-like: the index of dispersion is already {i1:,.3g} at 1 s and grows to {i10:,.3g} at 10 s "
                         f"and {disp_h.get('60') or float('nan'):,.3g} at 60 s. On such a trace (Azure code) the simulator's TTFT tail needs "
                         "the long-scale index (--scv-timescale 60), and even then Allen-Cunneen's exponential tail misses the body of the "
                         "wait distribution: docs/validation.md, 'Bursty arrivals'.")
        iscv = interval_scv(times) if unit == 1.0 else None  # quantised gaps describe the quantum
        if scv is not None and cv is not None and cv * cv > 2 * scv and unit == 1.0:
            notes.append(f"the inter-arrival SCV of the whole trace ({cv * cv:,.3g}, CV {cv:.3g}) is far above the arrival_scv written "
                         f"({scv:,.3g}, the index of dispersion of {tau:g} s counts inside each hour): long gaps and the rate's drift "
                         "dominate the raw CV, and the queue sees the burstiness at its own time scale (docs/workloads.md).")
        st = ArrivalStats(
            requests=self.n, span_s=span,
            start_utc=datetime.fromtimestamp(self.t0, tz=timezone.utc).isoformat() if wall else None,
            mean_rps=mean_rps, window_s=self.window_s, windows=nw,
            window_rps_p50=float(np.quantile(rates, 0.5, method="inverted_cdf")),
            window_rps_p95=float(np.quantile(rates, 0.95, method="inverted_cdf")),
            peak_rps=float(rates[k]), peak_window_start_s=k * self.window_s,
            peak_to_mean=float(rates[k] / mean_rps) if mean_rps and mean_rps > 0 else float("nan"),
            inter_arrival_cv=cv, dispersion_1s=disp1, dispersion_window=dispw, zero_gap_share=zero,
            arrival_scv=scv, scv_timescale_s=tau if scv is not None else None, dispersion_within_hour=disp_h, interval_scv_within_hour=iscv,
            hourly_load=hourly, hourly_basis=basis, window_rps=[round(float(x), 6) for x in rates])
        return st, notes


def _hourly_profile(per_h: Counter, t0: float, t_last: float, wall: bool) -> tuple[list[float], str]:
    """Mean arrivals per hour of day over the clock hours wholly inside the trace,
    divided by the largest. Hours are UTC for wall-clock traces (epoch seconds), else
    counted from the trace's time origin (timestamp 0)."""
    tot = np.zeros(24)
    cnt = np.zeros(24)
    for k in range(math.ceil(t0 / 3600), math.floor(t_last / 3600)):
        tot[k % 24] += per_h.get(k, 0)
        cnt[k % 24] += 1
    return normalise_hourly(tot, cnt), ("UTC" if wall else "hours from the trace's time origin")


def normalise_hourly(tot: np.ndarray, cnt: np.ndarray) -> list[float]:
    """24 hourly multipliers from arrivals summed per hour of day (``tot``, shape (24,),
    requests) over ``cnt`` hours of each (shape (24,)): the mean per hour divided by the
    largest, rounded to 4 places; hours never seen are 0 (all 0 for an empty trace)."""
    mean = np.divide(tot, cnt, out=np.zeros(24), where=cnt > 0)
    top = mean.max()
    return [round(float(x / top), 4) if top > 0 else 0.0 for x in mean]
