"""The hockey stick, measured: a prefill pool's (or colocated replicas') TTFT percentile
and queue wait against utilisation, simulated at a range of loads beside the Erlang C
(M/M/c) and Allen-Cunneen M/G/c curves the plan sizes with, and drawn as a PNG or SVG.

Each point re-runs the region-tier's requests at a multiple of the scenario's load (the
same mix, hits, clamp and shed), with admission control off so the queue shows its own
curve rather than the gateway's rejections; disaggregated pools stop after prefill (the
first token needs nothing after it).

A finite window measures a stationary queue only when it is several of the queue's
relaxation times long (~ 1 / (c mu (1 - sqrt rho))^2: hours at 99% on one server); a
pool that starts empty fills towards its stationary tail, so before that its measured
percentiles are lower bounds. Each point is therefore judged twice: *settled* (the
window is at least three relaxation times, the note of :mod:`fleetplan.sim.metrics`) and
*saturated* (measured: its queue wait grew through the window). The saturated points
also measure the pool's capacity -- what it serves while it always has work (100% for a
prefill pool; less for colocated replicas, whose decode steps take a share) -- and a load above it is *overloaded* whatever its window showed.
The simulated SLO crossing is interpolated only between settled, stationary points;
otherwise it is bracketed by the points that can say (:func:`sweep_crossings`).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from fleetplan.instance.schema import Instance
from fleetplan.perf.metrics import percentile
from fleetplan.results.loads import r6
from fleetplan.sim.closed_form import prefill_model, replica_model
from fleetplan.sim.metrics import _decoded, settling_note
from fleetplan.sim.rows import _ci
from fleetplan.sim.run import run_tier
from fleetplan.sim.setup import TierSetup
from fleetplan.sim.sweep_doc import SweepCrossing, SweepDoc, SweepMark, SweepPointDoc, SweepReport  # noqa: F401 -- SweepReport re-exported

__all__ = ["SweepPoint", "Sweep", "Crossing", "DEFAULT_UTILISATIONS", "FIGURE_SUFFIXES", "plan_marks", "load_sweep", "queue_growth",
           "sweep_crossings", "sweep_figure", "SweepReport", "sweep_report"]

DEFAULT_UTILISATIONS = (0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99)
FIGURE_SUFFIXES = (".png", ".svg")  # what sweep_figure writes
T995_8 = 3.3554  # Student t, 8 degrees of freedom, one-sided 99.5% (slope of 10 batch means)


@dataclass(frozen=True)
class SweepPoint:
    """One load of the sweep: the utilisation asked for, the busy fraction measured and the
    one the window's arrivals offered (fractions), the simulated TTFT and queue-wait
    percentile (ms, with 95% intervals) and the models' at that load.

    ``saturated``: the queue grew through the window (:func:`queue_growth`: the mean wait
    of the window's last third against its first, or the pool served less work than
    arrived) -- not stationary. ``settled``: the window is at least three of the queue's
    relaxation times (the model's), so a stationary queue would have reached its tail.
    A point that is not both settled and unsaturated measured a lower bound (a queue
    started empty only fills). ``wait_first_ms``/``wait_last_ms``: mean queue wait of the
    requests arriving in the window's first and last thirds; ``growth_t``: t statistic
    of the slope of 10 batch means of the wait. ``backlogged``: the share of the window
    during which a request waited in the queue; ``held_busy`` the busy fraction over that
    time (the pool's capacity, when it is long). ``overloaded``: the load asked for is
    above the pool's measured capacity (:func:`measured_capacity`), so the queue grows
    without bound in the long run whatever its window showed; ``near_capacity``: within
    the measurement's margin of it, where the effective utilisation is ~1 and the
    relaxation time diverges: no window settles it."""

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
    settled: bool = True
    wait_first_ms: float = math.nan
    wait_last_ms: float = math.nan
    growth_t: float = math.nan
    bound_full_ttft_ms: float | None = None
    backlogged: float = math.nan
    held_busy: float = math.nan
    overloaded: bool = False
    near_capacity: bool = False
    tpot_ms: float = math.nan
    tpot_ci: list[float] | None = None
    model_tpot_ms: float = math.nan

    @property
    def stationary(self) -> bool:
        """Settled, not saturated, not overloaded and not at the measured capacity: the
        measured percentiles estimate the stationary ones."""
        return self.settled and not self.saturated and not self.overloaded and not self.near_capacity


@dataclass(frozen=True)
class Crossing:
    """Where a curve crosses the TTFT SLO: in (``lower``, ``upper``] of utilisation, with
    ``utilisation`` the interpolated crossing when the two points around it can give one
    (None otherwise). ``lower`` None: above the limit from the first point; ``upper``
    None: under it everywhere it is known (the simulation: at every point that can say).
    ``curve``: 'bound' (the plan's sum of percentiles at the simulated slices), 'bound
    full scale' (at the plan's slices, with --scale < 1), 'model' (the percentile of the
    sum, M/G/c) or 'simulation'; ``slices`` the pool size it is at."""

    curve: str
    slices: int
    utilisation: float | None
    lower: float | None
    upper: float | None


@dataclass(frozen=True)
class Sweep:
    """A load sweep of one region-tier's prefill pool (or replicas): the points, the model
    curves on a fine grid (utilisation -> ms), the SLO and the plan's own operating points.
    ``slices_planned``/``curve_bound_full``: the plan's pool size and the bound there
    (differs from ``curve_bound`` with --scale < 1)."""

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
    slices_planned: int | None = None
    curve_bound_full: np.ndarray | None = None
    duration_s: float | None = None
    schedule: str | None = None  # colocated: the pool's engine schedule the model curves use
    router: str | None = None  # the router the run and the model curves use (replicas or prefill slices)
    tpot_percentile: float | None = None  # colocated: the percentile of the points' TPOT columns
    tpot_limit_ms: float | None = None  # colocated: the tightest TPOT SLO's limit (ms)

    @property
    def crossings(self) -> list[Crossing]:
        return sweep_crossings(self)


def plan_marks(inst: Instance, plan, su: TierSetup, placement=None) -> list[tuple[str, float, float | None]]:
    """The plan's operating points of ``su``'s prefill (or replica) pool to mark on the
    sweep: the normal peak, the scenario that sizes the pool (highest pressure) and the
    scenario simulated -- each as (scenario, utilisation of the simulated pool at that
    scenario's load, the plan's TTFT p99 there)."""
    from fleetplan.sim.setup import tier_setups

    role = "prefill" if su.mode == "disaggregated" else "replica"
    rows = {s.name: p for s in plan.scenarios for p in s.pools if p.region == su.region and p.tier == su.tier and p.role == role}
    sizing = max(rows, key=lambda k: (rows[k].pressure or 0.0)) if rows else None
    if su.scenario.name not in rows and role in su.loads:  # a loss hour the plan does not list (sim.setup.pick_scenario)
        rows[su.scenario.name] = su.loads[role]
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
        label, sl, _, n = _pool(s2)[:4]
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


def queue_growth(wait_ms: np.ndarray, t_ms: np.ndarray, mean_service_ms: float) -> tuple[float, float, float, bool]:
    """Did the queue grow through the window? ``wait_ms``: the queue wait of the window's
    requests, ``t_ms`` their arrival times. Returns (mean wait of the first third of the
    requests, of the last third, t statistic of the slope of 10 batch means of the wait in
    arrival order, grew). It grew when the slope is significant (one-sided 0.5%, 8 degrees
    of freedom) *and* material: the last third waited at least one mean service and half
    the first third's wait longer than the first. A stationary queue's thirds differ by
    noise; one that grows without bound gains (1 - capacity / load) of the window in wait.
    A request that never started (infinite wait) counts as growth. Fewer than 30 requests
    cannot say (no growth)."""
    n = wait_ms.size
    if n < 30:
        return math.nan, math.nan, math.nan, False
    w = np.asarray(wait_ms, dtype=float)[np.argsort(t_ms, kind="stable")]
    if not np.all(np.isfinite(w)):
        return float(np.mean(w[: n // 3])), math.inf, math.inf, True
    first, last = float(w[: n // 3].mean()), float(w[n - n // 3:].mean())
    bm = np.array([b.mean() for b in np.array_split(w, 10)])
    x = np.arange(10.0) - 4.5
    slope = float(np.dot(x, bm) / np.dot(x, x))
    res = bm - bm.mean() - slope * x
    se = math.sqrt(float(np.dot(res, res)) / 8.0 / float(np.dot(x, x)))
    t = slope / se if se > 0 else (0.0 if slope == 0 else math.copysign(math.inf, slope))
    grew = t > T995_8 and last - first >= max(mean_service_ms, 0.5 * first)
    return first, last, float(t), bool(grew)


def _backlogged(queue_in_ms: np.ndarray, start_ms: np.ndarray, span_start_ms: np.ndarray, span_end_ms: np.ndarray, servers: int,
                t0: float, t1: float) -> tuple[float, float]:
    """(share of [t0, t1) during which at least one request waited in the queue -- the
    union of the requests' [queue in, start) intervals, a request that never started
    waiting to the end --, the busy fraction of the ``servers`` over that time: the
    [span start, span end) intervals' overlap with it / (servers x its length); nan when
    it never waited)."""
    a = np.clip(queue_in_ms, t0, t1)
    b = np.clip(np.where(np.isfinite(start_ms), start_ms, t1), t0, t1)
    keep = b > a
    if not keep.any() or t1 <= t0:
        return 0.0, math.nan
    o = np.argsort(a[keep], kind="stable")
    a, b = a[keep][o], b[keep][o]
    reach = np.maximum.accumulate(b)
    new = np.ones(a.size, dtype=bool)
    new[1:] = a[1:] > reach[:-1]  # a segment of the union starts where no earlier interval reaches
    starts = np.flatnonzero(new)
    lo, hi = a[starts], np.maximum.reduceat(b, starts)
    held = float((hi - lo).sum())
    # covered(t): backlogged time in [t0, t], piecewise linear through the segments' ends
    xs = np.concatenate([[t0], np.column_stack([lo, hi]).ravel(), [t1]])
    ys = np.concatenate([[0.0], np.column_stack([np.zeros_like(lo), hi - lo]).ravel(), [0.0]]).cumsum()
    ok = np.isfinite(span_start_ms) & np.isfinite(span_end_ms)
    s0, s1 = np.clip(span_start_ms[ok], t0, t1), np.clip(span_end_ms[ok], t0, t1)
    busy = float((np.interp(s1, xs, ys) - np.interp(s0, xs, ys)).sum())
    return held / (t1 - t0), busy / (servers * held)


HELD = 0.5  # a point whose queue held a request this share of the window measured the pool's capacity


def measured_capacity(points: list[SweepPoint]) -> tuple[float, float] | None:
    """The pool's capacity as the simulation measured it: the busy fraction, while a
    request was waiting, of the saturated points whose queue held one through at least
    half the window -- a pool that always has work serves at its capacity, so it can
    sustain no load above that. Returns (the highest such busy fraction, a margin: 2
    points of utilisation or 3 standard deviations of them, whichever is larger), or
    None when no point was held. For a prefill pool it is 100% (every slice is busy while
    a request waits); a colocated replica's decode steps take their share.

    The model curves of a colocated sweep are the model the plan is sized with
    (:func:`fleetplan.sim.metrics.replica_model`: the pool's schedule, the occupancy TPOT, the
    prompts queued under the router); a prefill pool's are G/G/c (Allen-Cunneen) and M/M/c
    (under a load-blind router a G/G/1 and M/M/1 per slice, :func:`fleetplan.perf.queueing.routed_queue`)."""
    held = [p.held_busy for p in points if p.saturated and p.backlogged >= HELD and math.isfinite(p.held_busy)]
    if not held:
        return None
    sd = float(np.std(held, ddof=1)) if len(held) > 1 else 0.0
    return max(held), max(0.02, 3.0 * sd)


def load_sweep(inst: Instance, su: TierSetup, marks: list[tuple[str, float, float | None]], utilisations=DEFAULT_UTILISATIONS,
               duration_s: float = 120.0, warmup_s: float = 10.0, seed: int = 0, arrivals: str = "poisson", trace=None,
               output_lengths: str = "fixed", router: str = "least-work", progress: Callable[[float], None] | None = None) -> Sweep:
    """Simulate ``su`` at each target utilisation of its prefill pool (replicas: of their
    prefill share) and compute the model curves. ``marks``: (label, utilisation, TTFT)
    of the plan's operating points to draw. Raises ValueError for a utilisation outside
    (0, 1)."""
    if any(not 0.0 < u < 1.0 for u in utilisations):
        raise ValueError("utilisations must be in (0, 1)")
    utilisations = sorted(utilisations)
    label, sl, n_plan, n = _pool(su)[:4]
    from fleetplan.sim import arrivals as arr

    colo = su.mode == "colocated"
    rr = replica_model(inst, su, router) if colo else None

    def model_at(s_at: TierSetup, servers_at: int, factor: float) -> dict:
        """The closed-form TTFT and wait at ``factor`` x the load of ``s_at`` on ``servers_at``
        slices (prefill: G/G/c, perf.queueing) or replicas (colocated: perf.colocated under the
        pool's schedule and the router, M/M curves not defined: nan)."""
        if not colo:
            return prefill_model(inst, _at(s_at, factor), sl, servers_at, (pct,), s_at.dcn.routed_share if s_at.dcn else 0.0,  # routes held
                                 router)[0]
        lam = prefill_model(inst, s_at, sl, 1, (pct,))[0]["lam"] * factor / servers_at
        st, lat = rr.latency(lam, servers_at, sorted({pct, tpct}))
        return {f"ttft_mgc_{pct:g}": lat.ttft_estimate_ms[pct], f"bound_mgc_{pct:g}": lat.ttft_ms[pct], f"wait_mgc_{pct:g}": lat.wait_ms[pct],
                f"ttft_mmc_{pct:g}": math.nan, f"wait_mmc_{pct:g}": math.nan, "tpot": lat.tpot_ms[tpct]}

    base0, _ = prefill_model(inst, su, sl, n if su.mode == "disaggregated" else 1)
    u_now = base0["util"] / (1.0 if su.mode == "disaggregated" else n)
    arr._check_count(su.load_rps * max(utilisations) / max(u_now, 1e-12), warmup_s + duration_s)  # the heaviest point, before any runs
    servers = n if su.mode == "disaggregated" else 1
    ttft_slos = [s for c in su.classes for s in c.slos if s[0] == "ttft"]
    pct = max((s[1] for s in ttft_slos), default=99.0)
    limit = max((s[2] for s in ttft_slos if s[1] == pct), default=None)
    # replicas: TPOT at the tightest TPOT SLO's percentile (the replicas' TPOT rises with their load)
    tpot_slos = [s for c in su.classes for s in c.slos if s[0] == "tpot"]
    tpct = min(tpot_slos, key=lambda s: s[2])[1] if tpot_slos else 99.0
    tlimit = min(tpot_slos, key=lambda s: s[2])[2] if tpot_slos else None
    base, _ = prefill_model(inst, su, sl, servers, (pct,))
    per_server = base["util"] / (1.0 if su.mode == "disaggregated" else n)  # replicas: the load is split n ways
    u0 = per_server if su.mode == "colocated" else base["util"]
    # the plan's own pool: all its slices at the whole load (differs from the simulated one with --scale < 1)
    full = replace(su, own_rps=su.own_rps / su.scale, div_rps=su.div_rps / su.scale, scale=1.0) if su.scale < 1.0 else None

    if full is not None:  # the full pool's utilisation at the whole load (colocated: one replica's share of it)
        u0_full = prefill_model(inst, _at(full, 1.0 / n_plan) if su.mode == "colocated" else full, sl,
                                1 if su.mode == "colocated" else n_plan)[0]["util"]

    def bound_full(u: float) -> float:
        f = u / u0_full if u0_full > 0 else 1.0
        return model_at(full, n_plan, f)[f"bound_mgc_{pct:g}"]

    pts, notes = [], []
    settle_notes: list[tuple[float, str]] = []  # (target utilisation, note): kept only for points a longer window could settle
    run = None
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
        # the work backlog grew (served less than arrived), or the waits rose through the window
        short = busy < offered - max(0.02, 3.0 * math.sqrt(max(offered, 1e-9) / max(int((win & req.eligible).sum()), 1)))
        queued = win & req.eligible & run.admitted
        mine = req.eligible & run.admitted
        held, held_busy = _backlogged(req.queue_in_ms[mine], run.start_ms[mine], run.start_ms[mine], run.compute_end_ms[mine], n,
                                      run.warmup_ms, run.end_ms)
        first, last, t_stat, grew = queue_growth((run.start_ms - req.queue_in_ms)[queued], req.arrival_ms[queued],
                                                 float(run.service_ms[queued].mean()) if queued.any() else 0.0)
        note = settling_note(inst, s2, (run.end_ms - run.warmup_ms) / 1e3)
        settling = [note] if note else []
        if note:
            settle_notes.append((float(u), note))
        m = model_at(su, n, f)
        ta = req.arrival_ms[sel]
        tp, tp_ci = math.nan, None
        if colo and run.decode is not None:
            tpot = _decoded(run, win).tpot_ms
            has = sel & np.isfinite(tpot)
            if has.any():
                tp, tp_ci = percentile(tpot[has], tpct), _ci(tpot[has], req.arrival_ms[has], run.warmup_ms, run.end_ms, tpct)
        pts.append(SweepPoint(u, busy, offered, bool(short or grew), s2.load_rps, percentile(ttft, pct), _ci(ttft, ta, run.warmup_ms, run.end_ms, pct),
                              percentile(wait, pct), _ci(wait, ta, run.warmup_ms, run.end_ms, pct), m[f"ttft_mgc_{pct:g}"],
                              m[f"ttft_mmc_{pct:g}"], m[f"bound_mgc_{pct:g}"], m[f"wait_mgc_{pct:g}"], m[f"wait_mmc_{pct:g}"],
                              settled=not settling, wait_first_ms=first, wait_last_ms=last, growth_t=t_stat,
                              bound_full_ttft_ms=bound_full(u) if full is not None else None, backlogged=held, held_busy=held_busy,
                              tpot_ms=tp, tpot_ci=tp_ci, model_tpot_ms=m.get("tpot", math.nan)))
        if progress:
            progress((i + 1) / len(utilisations))
    grid = np.linspace(0.02, 0.995, 200)
    curves = {k: [] for k in ("mgc", "mmc", "bound", "wmgc", "wmmc", "full")}
    for u in grid:
        f = u / u0 if u0 > 0 else 1.0
        m = model_at(su, n, f)
        curves["mgc"].append(m[f"ttft_mgc_{pct:g}"])
        curves["mmc"].append(m[f"ttft_mmc_{pct:g}"])
        curves["bound"].append(m[f"bound_mgc_{pct:g}"])
        curves["wmgc"].append(m[f"wait_mgc_{pct:g}"])
        curves["wmmc"].append(m[f"wait_mmc_{pct:g}"])
        if full is not None:
            curves["full"].append(bound_full(float(u)))
    cap = measured_capacity(pts)
    if cap is not None:
        pts = [replace(p, overloaded=p.target_utilisation > cap[0] + cap[1], near_capacity=abs(p.target_utilisation - cap[0]) <= cap[1])
               for p in pts]
    role = "prefill" if su.mode == "disaggregated" else "replica"
    sw = Sweep(su.region, su.tier, role, label, n, pct, limit, base["cs2"], pts, grid,
               *(np.array(curves[k]) for k in ("mgc", "mmc", "bound", "wmgc", "wmmc")), marks, [], su.scale, n_plan,
               np.array(curves["full"]) if full is not None else None, duration_s,
               su.replica[5] if colo else None, router, tpct if colo else None, tlimit if colo else None)
    stream = list(run.stream_notes) if run is not None else []
    hopeless = {p.target_utilisation for p in pts if p.saturated or p.overloaded or p.near_capacity}
    notes += [n for u, n in settle_notes if u not in hopeless]
    return replace(sw, notes=stream + notes + _sweep_notes(sw))


def _pct_list(us) -> str:
    return ", ".join(f"{u:.0%}" for u in us)


def _sweep_notes(sw: Sweep) -> list[str]:
    """What the sweep's own points and the scale mean: points that grew although the
    window was long enough to settle (overloaded), and the scaled pool's bound against
    the plan's."""
    out = []
    grown = [p.target_utilisation for p in sw.points if p.saturated and p.settled]
    if grown:
        why = ""
        out.append(f"at {_pct_list(grown)} offered the queue grew through the window although a stationary queue would have settled in it: "
                   f"the pool is overloaded there{why}, and its TTFT and wait grow with --duration")
    cap = measured_capacity(sw.points)
    over = [p for p in sw.points if p.overloaded and not p.saturated]
    near = [p for p in sw.points if p.near_capacity and not p.saturated]
    if cap is not None and (over or near):
        txt = (f"the saturated points kept the pool busy at most {cap[0]:.1%} of the time while a request waited: its capacity (a pool "
               f"that always has work serves at capacity; the margin of the measurement is {cap[1]:.1%})")
        if over:
            txt += (f"; at {_pct_list(p.target_utilisation for p in over)} offered the load is above it, so the queue grows without bound in the "
                    f"long run although the window did not show it (its arrivals offered {', '.join(f'{p.arrived_utilisation:.1%}' for p in over)}): "
                    "counted above the SLO")
        if near:
            txt += (f"; at {_pct_list(p.target_utilisation for p in near)} offered the load is within the margin of it: utilisation ~1, where "
                    "the queue's relaxation time has no bound, so no window settles it: not used for the crossing")
        out.append(txt)
        if any(p.settled is False for p in over + near):
            out.append(f"no --duration settles the points at or above that capacity ({_pct_list(p.target_utilisation for p in over + near)}): "
                       "their queue has no steady state to measure")
        beyond = [(name, c.utilisation) for c in sweep_crossings(sw) for name in [{"bound": "the plan's bound", "model": "the model",
                  "bound full scale": "the plan's bound at full scale"}.get(c.curve)]
                  if name and c.utilisation is not None and c.utilisation > cap[0] + cap[1]]
        if beyond:
            out.append("; ".join(f"{n} crosses the SLO at {x:.1%} offered" for n, x in beyond)
                       + f", beyond the {cap[0]:.1%} the pool can serve: "
                       + "the closed form is optimistic there (docs/validation.md finding 7)")
    if sw.scale < 1.0 and sw.slices_planned:
        if sw.role == "replica" and sw.router not in (None, "least-work"):
            out.append(f"scale {sw.scale:g}: {sw.slices} of the plan's {sw.slices_planned} replicas simulated; under {sw.router} routing each "
                       "replica is its own G/G/1 queue, so the curves change with the count only through the split's C_a^2")
        elif sw.role == "replica":
            out.append(f"scale {sw.scale:g}: {sw.slices} of the plan's {sw.slices_planned} replicas simulated at the same load per replica; "
                       "least-work routing queues the prompts over the pool (M/G/c), so fewer replicas pool less and the simulated "
                       "crossing is pessimistic for the whole pool (the plan's bound at its own count is drawn too)")
        else:
            cs = {c.curve: c for c in sweep_crossings(sw)}
            b, bf = cs.get("bound"), cs.get("bound full scale")
            at = ""
            if b is not None and bf is not None:
                at = (f": the bound at {sw.slices} slices reaches the SLO at {_where(b)}, the plan's at its {sw.slices_planned} at {_where(bf)}")
            out.append(f"scale {sw.scale:g}: {sw.slices} of the plan's {sw.slices_planned} prefill slices simulated at the same utilisation; "
                       f"fewer servers share less randomness, so queue waits grow roughly as 1 / slices{at}; the simulated crossing is "
                       "pessimistic for the whole pool (docs/validation.md, --scale)")
    return out


def _where(c: Crossing) -> str:
    if c.utilisation is not None:
        return f"{c.utilisation:.1%} offered"
    if c.upper is None:
        return f"no point (under it to {c.lower:.1%})"
    return f"between {c.lower:.0%} and {c.upper:.0%}" if c.lower is not None else f"{c.upper:.1%} or below"


def _interp(x0: float, y0: float, x1: float, y1: float, limit: float) -> float:
    return float(x0 + (limit - y0) * (x1 - x0) / (y1 - y0)) if y1 != y0 else float(x1)


def _curve_crossing(name: str, slices: int, xs: np.ndarray, ys: np.ndarray, limit: float) -> Crossing:
    above = np.nonzero(np.asarray(ys) > limit)[0]
    if above.size == 0:
        return Crossing(name, slices, None, float(xs[-1]), None)
    i = int(above[0])
    if i == 0:
        return Crossing(name, slices, None, None, float(xs[0]))
    return Crossing(name, slices, _interp(xs[i - 1], ys[i - 1], xs[i], ys[i], limit), float(xs[i - 1]), float(xs[i]))


def sweep_crossings(sw: Sweep) -> list[Crossing]:
    """Where the bound, the model and the simulation cross the TTFT limit (none without
    one). The simulation's: a point measured above the limit is above it (a queue that is
    not stationary only rises towards its stationary tail); a point under it says so only
    when it is settled and stationary; the others cannot say. The crossing lies between
    the last point known under the limit and the first known above it, and is
    interpolated only when those two are adjacent in the sweep and both stationary. A
    point above the pool's measured capacity (``overloaded``) is above the limit whatever
    its window measured."""
    if not sw.limit_ms:
        return []
    lim = sw.limit_ms
    out = [_curve_crossing("bound", sw.slices, sw.grid, sw.curve_bound, lim)]
    if sw.curve_bound_full is not None and sw.slices_planned:
        out.append(_curve_crossing("bound full scale", sw.slices_planned, sw.grid, sw.curve_bound_full, lim))
    out.append(_curve_crossing("model", sw.slices, sw.grid, sw.curve_mgc, lim))
    pts = sorted(sw.points, key=lambda p: p.target_utilisation)
    lo = hi = None
    for i, p in enumerate(pts):
        if p.overloaded or (not math.isnan(p.ttft_ms) and not p.ttft_ms <= lim):
            hi = i  # above it: measured so, or its queue grows without bound
            break
        if p.stationary:
            lo = i
    if hi is None:
        out.append(Crossing("simulation", sw.slices, None, pts[lo].target_utilisation if lo is not None else None, None))
        return out
    x_hi = pts[hi].target_utilisation
    if lo is None:
        out.append(Crossing("simulation", sw.slices, None, None, x_hi))
        return out
    a, b = pts[lo], pts[hi]
    at = _interp(a.target_utilisation, a.ttft_ms, b.target_utilisation, b.ttft_ms, lim) if hi == lo + 1 and b.stationary else None
    out.append(Crossing("simulation", sw.slices, at, a.target_utilisation, x_hi))
    return out


def sweep_figure(sweeps: list[Sweep], title: str, fmt: str = "png") -> bytes:
    """The figure of the sweeps as PNG or SVG (``fmt``; one row per region-tier: TTFT
    percentile and queue-wait percentile against utilisation), deterministic bytes (no
    timestamp or software tag). Points are drawn at the offered utilisation (what the
    models take). Stationary points carry their 95% interval; a point whose window did not
    settle is an open triangle at its value (a lower bound); a saturated point (its queue
    grew through the window), an overloaded one (above the measured capacity) and any
    point above the axis sit at the top edge. The axes
    are scaled to the models and the stationary points only: TTFT to 1.8 x the SLO, the
    wait to at most 3 x the SLO."""
    if fmt not in ("png", "svg"):
        raise ValueError("fmt must be 'png' or 'svg'")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    with matplotlib.rc_context({"svg.hashsalt": "fleetplan-sweep"}):
        rows = len(sweeps)
        fig, axes = plt.subplots(rows, 2, figsize=(11.5, 5.6 * rows), squeeze=False)
        for r, sw in enumerate(sweeps):
            _sweep_row(sw, *axes[r], Line2D)
        fig.suptitle(title, fontsize=11)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=110, metadata={"Software": None} if fmt == "png" else {"Date": None, "Creator": None})
        plt.close(fig)
    return buf.getvalue()


_MARK_STYLES = ("-", "--", ":", "-.")


def _sweep_row(sw: Sweep, ax, aw, Line2D) -> None:
    p = f"p{sw.percentile:g}"
    xs = np.array([pt.target_utilisation for pt in sw.points])  # offered load, as the models take it
    xmax = max(1.0, float(xs.max()) + 0.02 if xs.size else 1.0)
    stat = np.array([pt.stationary for pt in sw.points], dtype=bool)
    sat = np.array([pt.saturated for pt in sw.points], dtype=bool)
    over = np.array([pt.overloaded for pt in sw.points], dtype=bool)
    top_t = (sw.limit_ms or float(np.nanmax(sw.curve_mgc[np.isfinite(sw.curve_mgc)], initial=1.0))) * 1.8
    waits = [pt.wait_ms for pt, ok in zip(sw.points, stat) if ok and math.isfinite(pt.wait_ms)]
    models = [pt.model_wait_ms for pt, ok in zip(sw.points, stat) if ok and math.isfinite(pt.model_wait_ms)]
    top_w = max(max(waits + models, default=1.0) * 1.4, 5.0)
    if sw.limit_ms:
        top_w = min(top_w, 3.0 * sw.limit_ms)
    g, e = ((f"the colocated model ({sw.schedule}, {sw.router} routing)", None) if sw.role == "replica" else
            ("M/G/c", "M/M/c") if sw.router in (None, "least-work") else (f"G/G/1 per slice, {sw.router}", f"M/M/1 per slice, {sw.router}"))
    unit = "replicas" if sw.role == "replica" else "slices"
    if sw.scale < 1.0 and sw.curve_bound_full is not None:
        ax.plot(sw.grid, sw.curve_bound, color="C1", lw=1.4, ls="-.", label=f"the bound at the {sw.slices} {unit} simulated: sum of the components' {p} ({g} wait)")
        ax.plot(sw.grid, sw.curve_bound_full, color="C1", lw=1.0, ls=":", label=f"the plan's bound, at its {sw.slices_planned} {unit}")
    else:
        ax.plot(sw.grid, sw.curve_bound, color="C1", lw=1.4, ls="-.", label=f"the plan's bound: sum of the components' {p} ({g} wait)")
    for a, y_mgc, y_mmc, key, lab, top in ((ax, sw.curve_mgc, sw.curve_mmc, "ttft", f"TTFT {p}", top_t),
                                           (aw, sw.curve_wait_mgc, sw.curve_wait_mmc, "wait", f"prefill queue wait {p}", top_w)):
        what = "percentile of the sum, " if key == "ttft" else ""
        if e is None:  # colocated: the model sizing uses; no M/M analogue
            a.plot(sw.grid, y_mgc, color="C0", lw=1.8, label=f"model: {what}{g} wait")
        else:
            a.plot(sw.grid, y_mgc, color="C0", lw=1.8, label=f"model: {what}{g} wait (Allen-Cunneen, C_s^2 = {sw.cs2:.2f})")
            a.plot(sw.grid, y_mmc, color="C0", lw=1.2, ls="--", label=f"model: {what}{e} wait (Erlang C)")
        ys = np.array([getattr(pt, f"{key}_ms") for pt in sw.points], dtype=float)
        cis = [getattr(pt, f"{key}_ci") for pt in sw.points]
        beyond = sat | over | ~(ys <= top)  # its queue grows, above the axis, or inf/nan
        beyond &= ~np.isnan(ys)
        ok = stat & ~beyond
        low = ~stat & ~beyond  # not settled: a lower bound
        lo = np.array([y - c[0] if c else 0.0 for y, c in zip(ys, cis)])
        hi = np.array([c[1] - y if c else 0.0 for y, c in zip(ys, cis)])
        a.errorbar(xs[ok], ys[ok], yerr=[np.maximum(lo[ok], 0), np.maximum(hi[ok], 0)], fmt="o", color="C3", ms=4, capsize=2,
                   label="simulated, stationary (95% interval)")
        if low.any():
            a.plot(xs[low], ys[low], "^", mfc="none", color="C3", ms=6, label="simulated, not settled (window too short, or at the measured capacity): a lower bound")
        if beyond.any():
            a.plot(xs[beyond], np.full(int(beyond.sum()), top), "^", color="C3", ms=7, clip_on=False,
                   label="simulated, the queue grows (saturated or overloaded) or above the axis: at the top edge")
        a.set_xlabel(f"offered utilisation of the {sw.role} pool (load x mean service / slices)")
        a.set_ylabel(f"{lab} (ms)")
        a.set_xlim(0, xmax)
        a.set_ylim(0, top)
        a.grid(alpha=0.3)
    if sw.limit_ms:
        ax.axhline(sw.limit_ms, color="k", lw=1, ls=":", label=f"SLO: TTFT {p} <= {sw.limit_ms:g} ms")
    # the plan's operating points: vertical lines named in the legend (a label on the plot crosses the points)
    at = "" if sw.scale >= 1.0 else f", at scale {sw.scale:g}"
    marks = []
    for k, (name, u, y) in enumerate(sw.marks):
        ls = _MARK_STYLES[k % len(_MARK_STYLES)]
        for a in (ax, aw):
            a.axvline(u, color="C2", lw=0.9, ls=ls, alpha=0.8)
        marks.append((Line2D([0], [0], color="C2", lw=0.9, ls=ls), f"the plan at {name}{at}: {u:.1%}"))
    for a in (ax, aw):
        h, lbl = a.get_legend_handles_labels()
        # under the axes: inside, the legend would cover the SLO line or the points near saturation
        a.legend(h + [m[0] for m in marks], lbl + [m[1] for m in marks], fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15),
                 frameon=False)
    ax.set_title(f"{sw.region} {sw.tier}: {sw.slices} x {sw.slice} {sw.role}" + (f" (of {sw.slices_planned} planned)" if sw.scale < 1.0 else ""),
                 fontsize=10)
    aw.set_title("queueing alone (the hockey stick)", fontsize=10)


# ----------------------------------------------------------------------------- the JSON document


def _r(x):
    """r6, through lists; nan -> None (as the simulation report)."""
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return [_r(v) for v in x]
    x = float(x)
    return None if math.isnan(x) else r6(x)


def tpot_crossing(sw: Sweep) -> str | None:
    """Where a replica sweep's TPOT crosses its SLO, in words (None for a prefill pool or no
    TPOT SLO): the model's, interpolated between the points; the simulation's between the
    last stationary point under the limit and the first point above it."""
    if sw.tpot_limit_ms is None or sw.tpot_percentile is None:
        return None
    lim, pts = sw.tpot_limit_ms, sw.points
    model = None
    for a, b in zip(pts, pts[1:]):
        ya, yb = a.model_tpot_ms, b.model_tpot_ms
        if math.isfinite(ya) and ya <= lim and (not math.isfinite(yb) or yb > lim):
            model = (a.target_utilisation + (b.target_utilisation - a.target_utilisation) * (lim - ya) / (yb - ya)
                     if math.isfinite(yb) else None, a.target_utilisation, b.target_utilisation)
            break
    under = [p for p in pts if p.stationary and math.isfinite(p.tpot_ms) and p.tpot_ms <= lim]
    over = [p for p in pts if math.isfinite(p.tpot_ms) and p.tpot_ms > lim]
    parts = []
    if model is not None:
        parts.append(f"the model reaches it at {model[0]:.1%} offered" if model[0] is not None
                     else f"the model reaches it between {model[1]:.0%} and {model[2]:.0%} offered (the replica is unstable above)")
    elif all(math.isfinite(p.model_tpot_ms) and p.model_tpot_ms <= lim for p in pts):
        parts.append("the model stays under it at every point")
    if over:
        lo = max((p.target_utilisation for p in under if p.target_utilisation < over[0].target_utilisation), default=None)
        parts.append(f"the simulation between {lo:.0%} and {over[0].target_utilisation:.0%} offered" if lo is not None
                     else f"the simulation is over it from {over[0].target_utilisation:.0%} offered")
    else:
        parts.append("the simulation stays under it at every point it measured")
    return f"TPOT p{sw.tpot_percentile:g} <= {lim:g} ms: " + "; ".join(parts) + "."


def sweep_report(sweeps: list[Sweep], **head) -> SweepReport:
    def pt(p: SweepPoint, s: Sweep) -> SweepPointDoc:
        return SweepPointDoc(target_utilisation=_r(p.target_utilisation), utilisation=_r(p.utilisation), arrived_utilisation=_r(p.arrived_utilisation),
                             saturated=p.saturated, settled=p.settled, wait_first_third_ms=_r(p.wait_first_ms), wait_last_third_ms=_r(p.wait_last_ms),
                             wait_growth_t=_r(p.growth_t), backlogged=_r(p.backlogged), busy_while_backlogged=_r(p.held_busy), overloaded=p.overloaded,
                             near_capacity=p.near_capacity, rps=_r(p.rps), ttft_ms=_r(p.ttft_ms), ttft_ci95=_r(p.ttft_ci), wait_ms=_r(p.wait_ms),
                             wait_ci95=_r(p.wait_ci), model_ttft_ms=_r(p.model_ttft_ms), mmc_ttft_ms=_r(p.mmc_ttft_ms), bound_ttft_ms=_r(p.bound_ttft_ms),
                             bound_full_scale_ttft_ms=_r(p.bound_full_ttft_ms), model_wait_ms=_r(p.model_wait_ms), mmc_wait_ms=_r(p.mmc_wait_ms),
                             **({"tpot_percentile": s.tpot_percentile, "tpot_ms": _r(p.tpot_ms), "tpot_ci95": _r(p.tpot_ci),
                                 "model_tpot_ms": _r(p.model_tpot_ms)} if s.role == "replica" else {}))

    def cross(c: Crossing) -> SweepCrossing:
        return SweepCrossing(curve=c.curve, slices=c.slices, utilisation=_r(c.utilisation), lower=_r(c.lower), upper=_r(c.upper))

    return SweepReport(sweeps=[SweepDoc(region=s.region, tier=s.tier, role=s.role, slice=s.slice, slices=s.slices, slices_planned=s.slices_planned,
                                        percentile=s.percentile, limit_ms=_r(s.limit_ms), service_cs2=_r(s.cs2), schedule=s.schedule, router=s.router, points=[pt(p, s) for p in s.points],
                                        marks=[SweepMark(scenario=a, utilisation=_r(u), percentile=s.percentile, plan_ttft_estimate_ms=_r(y))
                                               for a, u, y in s.marks],
                                        measured_capacity=_r((measured_capacity(s.points) or (None, None))[0]),
                                        measured_capacity_margin=_r((measured_capacity(s.points) or (None, None))[1]),
                                        crossings=[cross(c) for c in s.crossings], notes=s.notes) for s in sweeps], **head)
