"""The arrival-SCV estimator of `fleetplan workload fit` on synthetic streams whose SCV is known."""

from __future__ import annotations

import numpy as np
import pytest

from fleetplan.workload.fit import arrival_scv, fit_trace, interval_scv


def _gamma_renewal(shape: float, rate_rps: float, span_s: float, seed: int) -> np.ndarray:
    """Renewal process with gamma inter-arrivals: SCV of the gaps = 1 / shape."""
    rng = np.random.default_rng(seed)
    n = int(rate_rps * span_s * 1.2) + 100
    t = np.cumsum(rng.gamma(shape, 1.0 / (shape * rate_rps), size=n))
    return t[t < span_s]


@pytest.mark.parametrize("shape", [4.0, 1.0, 0.25])
def test_gamma_renewal_scv_recovered(shape):
    """I(tau) -> SCV = 1/shape for a renewal process once tau holds many gaps. With 200
    arrivals per 1 s bin the renewal correction (Cox 1962: Var N(t) = c^2 t / m + O(1)) is
    under 5% even for SCV 4 (its constant, 1/12 + 5c^4/4 - 2 E[X^3]/(3 m^3), is -9.9)."""
    t = _gamma_renewal(shape, 200.0, 3600.0, seed=int(shape * 100))
    est = arrival_scv(t, 1.0, 3600.0)
    assert est == pytest.approx(1.0 / shape, rel=0.06)
    assert interval_scv(t) == pytest.approx(1.0 / shape, rel=0.06)


def test_rate_change_between_hours_is_not_burstiness():
    """Poisson streams at 5 and 50 req/s in alternate hours: inside each hour it is Poisson
    (I = 1), though the whole trace's gaps have an SCV far above 1."""
    rng = np.random.default_rng(7)
    parts = []
    for h, rate in enumerate([5.0, 50.0, 5.0, 50.0]):
        n = rng.poisson(rate * 3600)
        parts.append(np.sort(rng.uniform(h * 3600, (h + 1) * 3600, n)))
    t = np.concatenate(parts)
    g = np.diff(t)
    assert g.var() / g.mean() ** 2 > 1.5
    assert arrival_scv(t, 1.0, 3600.0) == pytest.approx(1.0, abs=0.05)
    assert interval_scv(t) == pytest.approx(1.0, abs=0.05)


def test_fit_writes_arrival_scv(tmp_path):
    """A csv trace of a gamma renewal stream (SCV 0.25) through fit_trace: the workload block
    carries the estimate, and the index at 10 s agrees."""
    t = _gamma_renewal(4.0, 100.0, 1800.0, seed=3)
    p = tmp_path / "trace.csv"
    p.write_text("timestamp_s,input_tokens,output_tokens\n" + "".join(f"{x:.6f},100,10\n" for x in t))
    fit = fit_trace(p, "csv", [None], 1000.0)
    a = fit.arrivals
    assert a.arrival_scv == pytest.approx(0.25, rel=0.1)
    assert a.scv_timescale_s == 1.0
    assert a.dispersion_within_hour["10"] == pytest.approx(0.25, rel=0.2)
    assert a.dispersion_within_hour["0.1"] == pytest.approx(arrival_scv(t, 0.1, 1800.0), rel=1e-3)  # (the csv rounds to 1 us) finer than the default bin too
    assert fit.workload_block()["arrival_scv"] == float(f"{a.arrival_scv:.4g}")


def test_bad_timescale():
    with pytest.raises(ValueError, match="time scale"):
        arrival_scv(np.arange(10.0), 0.0)
