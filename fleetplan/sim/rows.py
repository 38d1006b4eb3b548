"""Rows of the simulation report: a measured value beside the plan's and the closed
form's (:class:`fleetplan.sim.report.SimMetric`), its batch-means confidence interval,
and the small formatting helpers the measuring modules share."""

from __future__ import annotations

import math

import numpy as np

from fleetplan.perf.metrics import percentile
from fleetplan.sim.report import SimMetric

T95_9 = 2.2622  # Student t, 9 degrees of freedom, two-sided 95% (10 batch means)


def _ci(values: np.ndarray, t_ms: np.ndarray, t0: float, t1: float, p: float) -> list[float] | None:
    """95% interval of a percentile of the window: the pooled estimate +- t(9) x the
    standard error from the spread of the percentile over 10 consecutive batches of the
    window (the batch-means method; Law, *Simulation Modeling and Analysis*, 5th ed.,
    section 9.5.3). None when a batch is empty. Near saturation the batches are not
    independent and the interval is too narrow: run longer."""
    if values.size < 10:
        return None
    edges = np.linspace(t0, t1, 11)
    b = np.clip(np.searchsorted(edges, t_ms, side="right") - 1, 0, 9)
    est = np.array([percentile(values[b == i], p) for i in range(10)])
    if not np.all(np.isfinite(est)):
        return None
    h = T95_9 * est.std(ddof=1) / math.sqrt(est.size)
    mid = percentile(values, p)
    return [max(float(mid - h), 0.0), float(mid + h)]  # every metric it is used for is >= 0


def _clean(x) -> float | None:
    """6 significant digits; inf kept (printed as "inf" in JSON), nan -> None."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return None
    return float(f"{x:.6g}") if math.isfinite(x) else x


#: Times both under this (ms) get no ratio: a sub-millisecond wait against another is noise.
MIN_RATIO_MS = 1.0


def _row(key: str, name: str, unit: str, sim, plan=None, model=None, mmc=None, ci=None, bound=None, plan_bound=None) -> SimMetric:
    s, p, m = _clean(sim), _clean(plan), _clean(model)

    def ratio(a, b):
        if a is None or b is None or b == 0.0 or not math.isfinite(b):
            return None
        if unit == "ms" and abs(a) < MIN_RATIO_MS and abs(b) < MIN_RATIO_MS:
            return None  # 0.00 against 0.98 ms of queue wait is no discrepancy
        return _clean(a / b)

    if ci is not None and unit == "ms":
        ci = [max(ci[0], 0.0), ci[1]]  # times are >= 0
    return SimMetric(key=key, name=name, unit=unit, simulated=s, ci95=[_clean(x) for x in ci] if ci else None, plan=p, plan_bound=_clean(plan_bound),
                     model=m, model_mmc=_clean(mmc), model_bound=_clean(bound), ratio_plan=ratio(s, p), ratio_model=ratio(s, m))


def _pct(p: dict[str, float] | None, q: float):
    return (p or {}).get(f"p{q:g}")


def _secs(x: float, up: bool = False) -> str:
    """Seconds to the precision that keeps small values apart (0.4 s, 12 s, 1,234 s)."""
    if up:
        x = math.ceil(x) if x >= 10 else math.ceil(x * 10) / 10
    return f"{x:,.0f} s" if x >= 10 else f"{x:.1f} s"


def _pl(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")
