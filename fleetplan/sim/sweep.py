"""The hockey stick, measured: a prefill pool's (or colocated replicas') TTFT percentile
and queue wait against utilisation, simulated at a range of loads beside the Erlang C
(M/M/c) and Allen-Cunneen M/G/c curves the plan sizes with, and drawn as a PNG.

Each point re-runs the region-tier's requests at a multiple of the scenario's load (the
same mix, hits, clamp and shed), with admission control off so the queue shows its own
curve rather than the gateway's rejections; disaggregated pools stop after prefill (the
first token needs nothing after it).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field, replace
from typing import Callable, Literal

import numpy as np

from fleetplan.instance.schema import Instance
from fleetplan.perf.metrics import percentile
from fleetplan.sim.run import _ci, prefill_model, run_tier
from fleetplan.sim.setup import TierSetup

__all__ = ["SweepPoint", "Sweep", "DEFAULT_UTILISATIONS", "plan_marks", "load_sweep", "sweep_figure", "SweepReport", "sweep_report"]

DEFAULT_UTILISATIONS = (0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99)


@dataclass(frozen=True)
class SweepPoint:
    """One load of the sweep: the utilisation asked for, the busy fraction measured and the
    one the window's arrivals offered (fractions; saturated when the pool stayed well
    below what arrived: its queue grows), the simulated TTFT and queue-wait percentile (ms,
    with 95% intervals) and the models' at that load."""

    target_utilisation: float
    utilisation: float
    arrived_utilisation: float
    saturated: bool
    rps: float
    ttft_ms: float
    ttft_ci: list[float] | None
    wait_ms: float
    wait_ci: list[float] | None
    model_ttft_ms: float
    mmc_ttft_ms: float
    bound_ttft_ms: float
    model_wait_ms: float
    mmc_wait_ms: float


@dataclass(frozen=True)
class Sweep:
    """A load sweep of one region-tier's prefill pool (or replicas): the points, the model
    curves on a fine grid (utilisation -> ms), the SLO and the plan's own operating points."""

    region: str
    tier: str
    role: str
    slice: str
    slices: int
    percentile: float
    limit_ms: float | None
    cs2: float
    points: list[SweepPoint]
    grid: np.ndarray
    curve_mgc: np.ndarray
    curve_mmc: np.ndarray
    curve_bound: np.ndarray
    curve_wait_mgc: np.ndarray
    curve_wait_mmc: np.ndarray
    marks: list[tuple[str, float, float | None]]  # (label, utilisation, the plan's TTFT estimate there at the sweep's percentile)
    notes: list[str] = field(default_factory=list)
    scale: float = 1.0


def plan_marks(inst: Instance, plan, su: TierSetup, placement=None) -> list[tuple[str, float, float | None]]:
    """The plan's operating points of ``su``'s prefill (or replica) pool to mark on the
    sweep: the normal peak, the scenario that sizes the pool (highest pressure) and the
    scenario simulated -- each as (scenario, utilisation of the simulated pool at that
    scenario's load, the plan's TTFT p99 there)."""
    from fleetplan.sim.setup import tier_setups

    role = "prefill" if su.mode == "disaggregated" else "replica"
    rows = {s.name: p for s in plan.scenarios for p in s.pools if p.region == su.region and p.tier == su.tier and p.role == role}
    sizing = max(rows, key=lambda k: (rows[k].pressure or 0.0)) if rows else None
    ttft_slos = [x for c in su.classes for x in c.slos if x[0] == "ttft"]
    key = f"p{max((x[1] for x in ttft_slos), default=99.0):g}"
    out = []
    for name in dict.fromkeys(["normal", sizing, su.scenario.name]):
        if name is None or name not in rows:
            continue
        got = tier_setups(inst, plan, su.region, [su.tier], name, su.scale, placement, required=False)
        if not got:
            continue
        s2 = got[0]
        label, sl, _, n, _ = _pool(s2)
        if s2.mode == "disaggregated":
            m, _ = prefill_model(inst, s2, sl, n)
        else:
            m, _ = prefill_model(inst, replace(s2, own_rps=s2.own_rps / n, div_rps=s2.div_rps / n), sl, 1)
        est = rows[name].ttft_estimate_ms or rows[name].ttft_ms or {}
        out.append((name, m["util"], est.get(key)))
    return out


def _at(su: TierSetup, factor: float) -> TierSetup:
    return replace(su, own_rps=su.own_rps * factor, div_rps=su.div_rps * factor)


def _pool(su: TierSetup):
    return su.prefill if su.mode == "disaggregated" else su.replica


def load_sweep(inst: Instance, su: TierSetup, marks: list[tuple[str, float, float | None]], utilisations=DEFAULT_UTILISATIONS,
               duration_s: float = 120.0, warmup_s: float = 10.0, seed: int = 0, arrivals: str = "poisson", trace=None,
               output_lengths: str = "fixed", router: str = "least-work", progress: Callable[[float], None] | None = None) -> Sweep:
    """Simulate ``su`` at each target utilisation of its prefill pool (replicas: of their
    prefill share) and compute the model curves. ``marks``: (label, utilisation, TTFT)
    of the plan's operating points to draw. Raises ValueError for a utilisation outside
    (0, 1)."""
    if any(not 0.0 < u < 1.0 for u in utilisations):
        raise ValueError("utilisations must be in (0, 1)")
    label, sl, _, n, _ = _pool(su)
    from fleetplan.sim import arrivals as arr

    base0, _ = prefill_model(inst, su, sl, n if su.mode == "disaggregated" else 1)
    u_now = base0["util"] / (1.0 if su.mode == "disaggregated" else n)
    arr._check_count(su.load_rps * max(utilisations) / max(u_now, 1e-12), warmup_s + duration_s)  # the heaviest point, before any runs
    servers = n if su.mode == "disaggregated" else 1
    ttft_slos = [s for c in su.classes for s in c.slos if s[0] == "ttft"]
    pct = max((s[1] for s in ttft_slos), default=99.0)
    limit = max((s[2] for s in ttft_slos if s[1] == pct), default=None)
    base, _ = prefill_model(inst, su, sl, servers, (pct,))
    per_server = base["util"] / (1.0 if su.mode == "disaggregated" else n)  # replicas: the load is split n ways
    u0 = per_server if su.mode == "colocated" else base["util"]
    pts = []
    for i, u in enumerate(utilisations):
        f = u / u0 if u0 > 0 else 1.0
        s2 = _at(su, f)
        run = run_tier(inst, s2, duration_s, warmup_s, seed + i, "poisson" if trace is None else "trace", trace, output_lengths, router,
                       decode=su.mode == "colocated", admission=False)
        req = run.req
        win = (req.arrival_ms >= run.warmup_ms) & (req.arrival_ms < run.end_ms)
        slo = np.array([bool(c.slos) for c in su.classes])[req.cls]
        sel = win & run.admitted & slo
        ttft = (run.first_ms + req.post_ms - req.arrival_ms)[sel]
        wait = (run.start_ms - req.queue_in_ms)[sel]
        ok = np.isfinite(run.start_ms) & np.isfinite(run.compute_end_ms)
        inside = np.clip(np.minimum(run.compute_end_ms[ok], run.end_ms) - np.maximum(run.start_ms[ok], run.warmup_ms), 0.0, None)
        span = n * (run.end_ms - run.warmup_ms)
        busy = float(inside.sum()) / span
        offered = float(run.service_ms[win & req.eligible].sum()) / span  # what the window's own arrivals brought
        saturated = busy < offered - max(0.02, 3.0 * math.sqrt(max(offered, 1e-9) / max(int((win & req.eligible).sum()), 1)))
        if su.mode == "colocated":
            m, _ = prefill_model(inst, _at(su, f / n), sl, 1, (pct,))
        else:
            m, _ = prefill_model(inst, s2, sl, n, (pct,))
        ta = req.arrival_ms[sel]
        pts.append(SweepPoint(u, busy, offered, bool(saturated), s2.load_rps, percentile(ttft, pct), _ci(ttft, ta, run.warmup_ms, run.end_ms, pct),
                              percentile(wait, pct), _ci(wait, ta, run.warmup_ms, run.end_ms, pct), m[f"ttft_mgc_{pct:g}"],
                              m[f"ttft_mmc_{pct:g}"], m[f"bound_mgc_{pct:g}"], m[f"wait_mgc_{pct:g}"], m[f"wait_mmc_{pct:g}"]))
        if progress:
            progress((i + 1) / len(utilisations))
    grid = np.linspace(0.02, 0.995, 200)
    curves = {k: [] for k in ("mgc", "mmc", "bound", "wmgc", "wmmc")}
    for u in grid:
        f = u / u0 if u0 > 0 else 1.0
        m, _ = prefill_model(inst, _at(su, f / (n if su.mode == "colocated" else 1)), sl, servers, (pct,))
        curves["mgc"].append(m[f"ttft_mgc_{pct:g}"])
        curves["mmc"].append(m[f"ttft_mmc_{pct:g}"])
        curves["bound"].append(m[f"bound_mgc_{pct:g}"])
        curves["wmgc"].append(m[f"wait_mgc_{pct:g}"])
        curves["wmmc"].append(m[f"wait_mmc_{pct:g}"])
    return Sweep(su.region, su.tier, "prefill" if su.mode == "disaggregated" else "replica", label, n, pct, limit, base["cs2"], pts, grid,
                 *(np.array(curves[k]) for k in ("mgc", "mmc", "bound", "wmgc", "wmmc")), marks, list(run.stream_notes) if pts else [], su.scale)


def sweep_figure(sweeps: list[Sweep], title: str) -> bytes:
    """PNG of the sweeps (one row per region-tier: TTFT percentile and queue-wait
    percentile against utilisation), deterministic bytes (no timestamp or software tag).
    Points are drawn at the offered utilisation (what the models take); simulated points
    above the top of an axis are drawn at the top as open triangles."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    rows = len(sweeps)
    fig, axes = plt.subplots(rows, 2, figsize=(11.5, 4.1 * rows), squeeze=False)
    for r, sw in enumerate(sweeps):
        ax, aw = axes[r]
        p = f"p{sw.percentile:g}"
        xs = np.array([pt.target_utilisation for pt in sw.points])  # offered load, as the models take it
        xmax = max(1.0, float(xs.max()) + 0.02 if xs.size else 1.0)
        top_t = (sw.limit_ms or float(np.nanmax(sw.curve_mgc[np.isfinite(sw.curve_mgc)], initial=1.0))) * 1.8
        waits = [pt.wait_ms for pt in sw.points if math.isfinite(pt.wait_ms)]
        top_w = max(max(waits, default=1.0) * 1.4, 5.0)
        g, e = ("M/G/1 per replica", "M/M/1 per replica") if sw.role == "replica" else ("M/G/c", "M/M/c")
        ax.plot(sw.grid, sw.curve_bound, color="C1", lw=1.4, ls="-.", label=f"the plan's bound: sum of the components' {p} ({g} wait)")
        for a, y_mgc, y_mmc, key, lab, top in ((ax, sw.curve_mgc, sw.curve_mmc, "ttft", f"TTFT {p}", top_t),
                                               (aw, sw.curve_wait_mgc, sw.curve_wait_mmc, "wait", f"prefill queue wait {p}", top_w)):
            what = "percentile of the sum, " if key == "ttft" else ""
            a.plot(sw.grid, y_mgc, color="C0", lw=1.8, label=f"model: {what}{g} wait (Allen-Cunneen, C_s^2 = {sw.cs2:.2f})")
            a.plot(sw.grid, y_mmc, color="C0", lw=1.2, ls="--", label=f"model: {what}{e} wait (Erlang C)")
            ys = np.array([getattr(pt, f"{key}_ms") for pt in sw.points])
            cis = [getattr(pt, f"{key}_ci") for pt in sw.points]
            inside = ys <= top
            lo = np.array([y - c[0] if c else 0.0 for y, c in zip(ys, cis)])
            hi = np.array([c[1] - y if c else 0.0 for y, c in zip(ys, cis)])
            a.errorbar(xs[inside], ys[inside], yerr=[np.maximum(lo[inside], 0), np.maximum(hi[inside], 0)], fmt="o", color="C3", ms=4, capsize=2,
                       label="simulated (95% interval)")
            if (~inside).any():
                a.plot(xs[~inside], np.full(int((~inside).sum()), top * 0.985), "^", mfc="none", color="C3", ms=7,
                       label="simulated, above the axis")
            a.set_xlabel(f"offered utilisation of the {sw.role} pool (load x mean service / slices)")
            a.set_ylabel(f"{lab} (ms)")
            a.set_xlim(0, xmax)
            a.set_ylim(0, top)
            a.grid(alpha=0.3)
        if sw.limit_ms:
            ax.axhline(sw.limit_ms, color="k", lw=1, ls=":", label=f"SLO: TTFT {p} <= {sw.limit_ms:g} ms")
        for name, u, y in sw.marks:
            for a in (ax, aw):
                a.axvline(u, color="C2", lw=0.8, alpha=0.7)
            ax.annotate(name, (u, top_t * 0.03), rotation=90, va="bottom", ha="right", fontsize=7, color="C2")
        mark = [Line2D([0], [0], color="C2", lw=0.8)] if sw.marks else []
        h, lbl = ax.get_legend_handles_labels()
        at = "" if sw.scale >= 1.0 else f", at scale {sw.scale:g}"
        ax.legend(h + mark, lbl + ([f"the plan's operating points (scenario{at})"] if mark else []), fontsize=7, loc="upper left")
        h, lbl = aw.get_legend_handles_labels()
        aw.legend(h + mark, lbl + ([f"the plan's operating points{at}"] if mark else []), fontsize=7, loc="upper left")
        ax.set_title(f"{sw.region} {sw.tier}: {sw.slices} x {sw.slice} {sw.role}", fontsize=10)
        aw.set_title("queueing alone (the hockey stick)", fontsize=10)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


# ----------------------------------------------------------------------------- the JSON document

from pydantic import BaseModel, ConfigDict, Field  # noqa: E402

from fleetplan.sim.report import Num  # noqa: E402


class _D(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SweepPointDoc(_D):
    target_utilisation: float = Field(description="Offered utilisation asked for (load x mean service / slices).")
    utilisation: float = Field(description="Busy fraction measured over the window.")
    arrived_utilisation: float = Field(description="The busy fraction the window's own arrivals would need.")
    saturated: bool = Field(description="Busy well below what arrived: the queue grows for as long as the run lasts.")
    rps: float = Field(description="Requests/s offered (simulated slice).")
    ttft_ms: Num = Field(description="Simulated TTFT at the sweep's percentile (ms).")
    ttft_ci95: list[Num] | None = None
    wait_ms: Num = Field(description="Simulated prefill queue wait at the sweep's percentile (ms).")
    wait_ci95: list[Num] | None = None
    model_ttft_ms: Num = Field(description="The estimate: percentile of the sum, M/G/c wait (ms).")
    mmc_ttft_ms: Num = Field(description="The same with M/M/c (ms).")
    bound_ttft_ms: Num = Field(description="The plan's bound: sum of the components' percentiles (ms).")
    model_wait_ms: Num = Field(description="M/G/c (Allen-Cunneen) wait percentile (ms).")
    mmc_wait_ms: Num = Field(description="M/M/c (Erlang C) wait percentile (ms).")


class SweepMark(_D):
    scenario: str
    utilisation: float = Field(description="Offered utilisation of the simulated pool at that scenario's load.")
    percentile: float
    plan_ttft_estimate_ms: Num = Field(description="The plan's TTFT estimate there at the sweep's percentile (ms).")


class SweepDoc(_D):
    region: str
    tier: str
    role: str
    slice: str
    slices: int
    percentile: float
    limit_ms: float | None
    service_cs2: float
    points: list[SweepPointDoc]
    marks: list[SweepMark]
    notes: list[str]


class SweepReport(_D):
    """``fleetplan simulate --sweep-load --json``: the load sweep of each tier's prefill (or
    replica) pool, the models beside it, every option and the hashes of what it ran on."""

    kind: Literal["load sweep"] = "load sweep"
    fleetplan_version: str
    instance_name: str
    instance_hash: str
    plan_hash: str
    region: str
    scenario: str
    duration_s: float
    warmup_s: float
    seed: int
    scale: float
    arrivals: str
    trace_format: str | None = None
    trace_sha256: str | None = None
    output_lengths: str
    router: str
    placement: str | None = None
    admission_control: bool = Field(False, description="Always off in a sweep: the queue shows its own curve.")
    figure: str
    sweeps: list[SweepDoc]


def sweep_report(sweeps: list[Sweep], **head) -> SweepReport:
    def pt(p: SweepPoint) -> SweepPointDoc:
        return SweepPointDoc(target_utilisation=p.target_utilisation, utilisation=p.utilisation, arrived_utilisation=p.arrived_utilisation,
                             saturated=p.saturated, rps=p.rps, ttft_ms=p.ttft_ms, ttft_ci95=p.ttft_ci, wait_ms=p.wait_ms, wait_ci95=p.wait_ci,
                             model_ttft_ms=p.model_ttft_ms, mmc_ttft_ms=p.mmc_ttft_ms, bound_ttft_ms=p.bound_ttft_ms, model_wait_ms=p.model_wait_ms,
                             mmc_wait_ms=p.mmc_wait_ms)

    return SweepReport(sweeps=[SweepDoc(region=s.region, tier=s.tier, role=s.role, slice=s.slice, slices=s.slices, percentile=s.percentile,
                                        limit_ms=s.limit_ms, service_cs2=s.cs2, points=[pt(p) for p in s.points],
                                        marks=[SweepMark(scenario=a, utilisation=u, percentile=s.percentile, plan_ttft_estimate_ms=y) for a, u, y in s.marks],
                                        notes=s.notes) for s in sweeps], **head)
