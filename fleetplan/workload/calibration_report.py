"""A calibration's result as a document: each fitted value with its standard error and
bound, the fit's error per phase and tensor-parallel degree, every point's measured and
predicted step time, the points left out and why (:class:`Calibration`)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fleetplan.instance.schema import Priors


@dataclass(frozen=True)
class FittedValue:
    """One fitted (or held) prior.

    Attributes: name (a :class:`Priors` field, or ``gemm_launch_overhead_ms`` for Vidur),
    value, unit, stderr (one standard error, same unit; None when not estimable),
    bound (which bound is active, None if interior), written (in the priors block),
    note (what the number means here).
    """

    name: str
    value: float
    unit: str
    stderr: float | None
    bound: str | None
    written: bool
    note: str = ""


@dataclass(frozen=True)
class TPStats:
    """Residuals of one phase at one tensor-parallel size."""

    tp: int
    points: int
    rms_rel_error: float
    max_rel_error: float


@dataclass(frozen=True)
class PhaseStats:
    """Goodness of fit of one phase: points, R^2 on the times, RMS and max relative error, RMS in ms."""

    phase: str
    points: int
    r2: float
    rms_rel_error: float
    max_rel_error: float
    rms_ms: float
    by_tp: tuple[TPStats, ...]


@dataclass(frozen=True)
class PointFit:
    """One point with its prediction (relative error = predicted / measured - 1)."""

    phase: str
    tp: int
    batch: int
    prompt_tokens: float
    context_tokens: float
    measured_ms: float
    predicted_ms: float
    rel_error: float
    line: int


@dataclass(frozen=True)
class Excluded:
    """A point left out of the fit, with the roofline floor it beat and why."""

    phase: str
    tp: int
    batch: int
    prompt_tokens: float
    context_tokens: float
    measured_ms: float
    floor_ms: float
    line: int
    reason: str


@dataclass(frozen=True)
class Calibration:
    """The result of :func:`calibrate`: the fitted priors, the fit's quality and its provenance.

    ``priors`` is the block to write (rounded; only fitted, identified fields; valid as a
    partial :class:`Priors`); ``fitted`` the full Priors the predictions used (``base``
    overlaid with the rounded values, plus any fitted value not written).
    """

    path: str
    format: str
    sha256: str
    model: str
    chip: str
    target_source: str
    profile_model: str | None
    profile_chip: str | None
    tps: tuple[int, ...]
    rows_used: int
    values: tuple[FittedValue, ...]
    phases: tuple[PhaseStats, ...]
    points: tuple[PointFit, ...]
    excluded: tuple[Excluded, ...]
    not_identified: dict[str, str]
    notes: tuple[str, ...]
    priors: dict[str, float]
    fitted: Priors

    def worst(self, k: int = 5) -> list[PointFit]:
        """The ``k`` points with the largest |relative error|, worst first."""
        return sorted(self.points, key=lambda p: (-abs(p.rel_error), p.line))[:k]

    def document(self) -> dict[str, Any]:
        """The ``priors.yaml`` document: ``priors`` (the block to overlay on an instance),
        ``source`` (profile path, format, sha256, selection) and ``fit`` (the report)."""
        return {
            "priors": dict(self.priors),
            "source": {
                "profile": self.path,
                "format": self.format,
                "sha256": self.sha256,
                "model": self.model,
                "chip": self.chip,
                "specs_from": self.target_source,
                "profile_model": self.profile_model,
                "profile_chip": self.profile_chip,
                "tensor_parallel": list(self.tps),
                "rows_used": self.rows_used,
            },
            "fit": {
                "objective": "least squares on relative errors (predicted / measured - 1) over the medians of repeated "
                             "measurements; the model is fleetplan.perf.roofline (prefill_time_ms, decode_step)",
                "points": {ph.phase: ph.points for ph in self.phases},
                "parameters": {v.name: {"value": v.value, "unit": v.unit, "stderr": _sig(v.stderr), "bound": v.bound,
                                        "written": v.written, **({"note": v.note} if v.note else {})} for v in self.values},
                "phases": {ph.phase: {"points": ph.points, "r2": _sig(ph.r2), "rms_rel_error": _sig(ph.rms_rel_error),
                                      "max_rel_error": _sig(ph.max_rel_error), "rms_ms": _sig(ph.rms_ms),
                                      "by_tp": {int(s.tp): {"points": s.points, "rms_rel_error": _sig(s.rms_rel_error),
                                                            "max_rel_error": _sig(s.max_rel_error)} for s in ph.by_tp}}
                           for ph in self.phases},
                "worst_points": [_pf_dict(p) for p in self.worst()],
                "excluded_points": [{k: (_sig(v) if isinstance(v, float) else v) for k, v in asdict(e).items()} for e in self.excluded],
                "not_identified": dict(self.not_identified),
                "notes": list(self.notes),
            },
        }


def _pf_dict(p: PointFit) -> dict[str, Any]:
    return {k: (_sig(v) if isinstance(v, float) else v) for k, v in asdict(p).items()}


def _sig(x: float | None, digits: int = 4) -> float | None:
    """``x`` to ``digits`` significant digits (None and non-finite pass through as None)."""
    if x is None or not math.isfinite(x):
        return None
    if x == 0:
        return 0.0
    return float(f"{x:.{digits}g}")


_UNITS = {
    "prefill_mfu": "fraction of peak_tflops",
    "decode_mfu": "fraction of peak_tflops",
    "hbm_bw_fraction": "fraction of hbm_tbps",
    "prefill_overhead_ms": "ms per request",
    "decode_step_overhead_ms": "ms per decode step",
    "gemm_launch_overhead_ms": "ms per forward pass (the profiled GEMMs of all layers)",
    "attention_bw_fraction": "fraction of hbm_tbps",
    "attention_mfu": "fraction of peak_tflops",
    "collective_bw_fraction": "fraction of ici_gbytes_per_s",
    "all_to_all_bw_fraction": "fraction of ici_gbytes_per_s",
    "collective_latency_us": "us per all-reduce",
    "collective_hop_latency_us": "us per collective step",
    "all_to_all_latency_us": "us per all-to-all",
    "layer_overhead_us": "us per layer per pass",
}


def phase_stats(phase: str, pts: list[PointFit]) -> PhaseStats:
    m = np.array([p.measured_ms for p in pts])
    pr = np.array([p.predicted_ms for p in pts])
    rel = pr / m - 1.0
    ss_tot = float(np.sum((m - m.mean()) ** 2))
    r2 = 1.0 - float(np.sum((pr - m) ** 2)) / ss_tot if ss_tot > 0 else math.nan
    by = []
    for tp in sorted({p.tp for p in pts}):
        rr = np.array([r for p, r in zip(pts, rel) if p.tp == tp])
        by.append(TPStats(tp, len(rr), float(np.sqrt(np.mean(rr ** 2))), float(np.max(np.abs(rr)))))
    return PhaseStats(phase, len(pts), r2, float(np.sqrt(np.mean(rel ** 2))), float(np.max(np.abs(rel))),
                      float(np.sqrt(np.mean((pr - m) ** 2))), tuple(by))


