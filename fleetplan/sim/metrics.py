"""Measuring a simulated region-tier and setting each metric beside the predictions.

:func:`measure_tier` turns a :class:`fleetplan.sim.tierrun.TierRun` into a
:class:`fleetplan.sim.report.SimTier`: TTFT, queue waits, busy fractions, TPOT, ITL,
occupancy and goodput of the requests that arrived in the window, measured with
:mod:`fleetplan.perf.metrics`, each beside the plan's prediction (full scale, the
scenario's pool load) and the closed-form model recomputed with :mod:`fleetplan.perf` at
the simulated slices and load (:func:`prefill_model`, :func:`replica_model`: M/G/c and
M/M/c queues; decode at the occupancy the load reaches rather than at a full batch), and
the notes that say when a number should not be read at face value (a scaled pool, a
window too short for its queue or its decode residences).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from fleetplan.instance.schema import Instance
from fleetplan.perf.colocated import CHUNKED, Schedule
from fleetplan.perf.handoff import HANDOFF_PERCENTILE
from fleetplan.perf.metrics import RequestMetrics, goodput, percentile
from fleetplan.perf.pools import decode_at_load
from fleetplan.sim.closed_form import admitted_classes, admitted_mix, path_components, prefill_model, replica_model  # noqa: F401 -- re-exported
from fleetplan.sim.dcn_measure import measure_dcn
from fleetplan.sim.report import RATIO_TOLERANCE, SimMetric, SimPool, SimTier
from fleetplan.sim.rows import MIN_RATIO_MS, _ci, _clean, _pct, _pl, _row, _secs  # noqa: F401 -- re-exported
from fleetplan.sim.setup import TierSetup

if TYPE_CHECKING:
    from fleetplan.sim.handoff import Handoffs
    from fleetplan.sim.tierrun import TierRun

__all__ = ["path_components", "measure_tier", "prefill_model", "replica_model", "admitted_mix", "admitted_classes", "queue_relaxation",
           "settling_note", "range_max", "MIN_RATIO_MS", "SETTLE_RELAXATIONS"]


def range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max(values[lo_i .. hi_i]) for every i (inclusive bounds, lo <= hi), by a sparse
    table (O(n log n) build, O(1) per query); -inf where lo > hi."""
    out = np.full(lo.size, -np.inf)
    ok = lo <= hi
    if not ok.any() or values.size == 0:
        return out
    levels = [values]
    while (1 << len(levels)) <= values.size:
        prev, h = levels[-1], 1 << (len(levels) - 1)
        levels.append(np.maximum(prev[:-h], prev[h:]))
    length = hi[ok] - lo[ok] + 1
    lv = np.floor(np.log2(length)).astype(np.int64)
    res = np.empty(length.size)
    l0, h0 = lo[ok], hi[ok]
    for k in np.unique(lv):
        sel = lv == k
        tab = levels[k]
        res[sel] = np.maximum(tab[l0[sel]], tab[h0[sel] - (1 << k) + 1])
    out[ok] = res
    return out


@dataclass
class _Decoded:
    """Per request (n,): TPOT, largest ITL gap and first gap (first token -> end of its
    first decode step), ms; per slice: the step gaps and how many window requests each
    gap is a gap of."""

    tpot_ms: np.ndarray
    itl_max_ms: np.ndarray
    first_gap_ms: np.ndarray
    gaps: dict[int, tuple[np.ndarray, np.ndarray]]


def _decoded(run: TierRun, win: np.ndarray) -> _Decoded:
    """TPOT and ITL of every request from the step log: a request's gaps are the time
    from its first token to the end of its first decode step, then its slice's step
    end-to-end intervals while it stays (it is in every step from j0 to j1)."""
    n = run.req.out.size
    tpot = np.full(n, np.nan)
    itl_max = np.full(n, np.nan)
    first_gap = np.full(n, np.nan)
    d = run.decode
    gaps_by: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    if d is None:
        return _Decoded(tpot, itl_max, first_gap, gaps_by)
    ok = (d.slice >= 0) & np.isfinite(d.done_ms)
    tpot[ok] = (d.done_ms[ok] - run.first_ms[ok]) / (run.req.out[ok] - 1)
    for s in range(len(d.ends_ms)):
        ends = d.ends_ms[s]
        mine = np.flatnonzero(ok & (d.slice == s))
        if mine.size == 0 or ends.size == 0:
            continue
        gaps = np.diff(ends, prepend=-np.inf)
        first_gap[mine] = ends[d.j0[mine]] - run.first_ms[mine]
        itl_max[mine] = np.maximum(first_gap[mine], range_max(gaps, d.j0[mine] + 1, d.j1[mine]))
        wm = mine[win[mine]]
        cnt = np.zeros(ends.size + 1)
        np.add.at(cnt, d.j0[wm] + 1, 1.0)
        np.add.at(cnt, d.j1[wm] + 1, -1.0)
        w = np.cumsum(cnt)[:-1]
        keep = w > 0
        gaps_by[s] = (gaps[keep], w[keep])
    return _Decoded(tpot, itl_max, first_gap, gaps_by)


def _chunk_share(run: TierRun, slices: list[int], t0: float, t1: float) -> float:
    """Share of the replicas' time in [t0, t1) spent in steps that carry a prompt chunk
    (chunked schedule): each prompt's [prefill start, first token) spans its chunk steps."""
    a, e = run.start_ms, run.compute_end_ms
    ok = np.isfinite(a) & np.isfinite(e)
    inside = np.clip(np.minimum(e[ok], t1) - np.maximum(a[ok], t0), 0.0, None)
    return float(inside.sum()) / ((t1 - t0) * len(slices)) if slices else math.nan


def _occupancy_distribution(run: TierRun, slices: list[int], t0: float, t1: float, win: np.ndarray) -> tuple[float, float, float]:
    """(p50, p99 of the residents per step weighted by the step's time inside [t0, t1), sd of
    a request's lifetime-mean residents over the requests of ``win``) on ``slices``."""
    d = run.decode
    if d is None or not slices:
        return math.nan, math.nan, math.nan
    sizes, weights = [], []
    for s in slices:
        a, e = d.starts_ms[s], d.ends_ms[s]
        if a.size:
            sizes.append(np.asarray(d.sizes[s], dtype=float))
            weights.append(np.clip(np.minimum(e, t1) - np.maximum(a, t0), 0.0, None))
    if not sizes:
        return math.nan, math.nan, math.nan
    sz, w = np.concatenate(sizes), np.concatenate(weights)
    order = np.argsort(sz, kind="stable")
    cum = np.cumsum(w[order])
    if cum[-1] <= 0:
        return math.nan, math.nan, math.nan
    p50 = float(sz[order][np.searchsorted(cum, 0.5 * cum[-1])])
    p99 = float(sz[order][min(np.searchsorted(cum, 0.99 * cum[-1]), sz.size - 1)])
    means = []
    for s in slices:
        if not d.starts_ms[s].size:
            continue
        cs = np.concatenate([[0.0], np.cumsum(np.asarray(d.sizes[s], dtype=float))])
        mine = win & (d.slice == s) & np.isfinite(d.done_ms) & (d.j1 >= d.j0)
        j0, j1 = d.j0[mine], d.j1[mine]
        means.append((cs[j1 + 1] - cs[j0]) / (j1 - j0 + 1))
    allm = np.concatenate(means) if means else np.array([])
    return p50, p99, float(np.std(allm)) if allm.size > 1 else math.nan


def _occupancy(run: TierRun, slices: list[int] | np.ndarray, t0: float, t1: float) -> tuple[float, float]:
    """(time-mean residents per slice, output tokens/s) of ``slices`` over [t0, t1).
    Residents: each request counts from the step it joined to the end of its last step
    (on a colocated replica also while the replica runs a prefill); tokens: each step's
    tokens, in proportion to the part of the step inside the window."""
    d = run.decode
    if d is None or len(slices) == 0:
        return math.nan, math.nan
    mine = np.isin(d.slice, np.asarray(slices)) & np.isfinite(d.done_ms)
    inside = np.clip(np.minimum(d.done_ms[mine], t1) - np.maximum(d.join_ms[mine], t0), 0.0, None)
    tok = 0.0
    for s in slices:
        a, e = d.starts_ms[s], d.ends_ms[s]
        if a.size:
            part = np.clip(np.minimum(e, t1) - np.maximum(a, t0), 0.0, None) / np.maximum(e - a, 1e-12)
            tok += float(np.dot(d.tokens[s], part))
    span = t1 - t0
    return float(inside.sum()) / (span * len(slices)), tok / (span / 1e3)


def _scale_notes(inst: Instance, su: TierSetup, dec_loads: list[tuple[str, float, float]], router: str = "least-work") -> list[str]:
    """What simulating a scaled slice of the region does: each pool's slices round to a
    share of the pool that is not quite the load's share (so it runs hotter or cooler than
    the whole pool -- overloaded at or above 100%), and fewer servers queue more at the same
    utilisation (the M/G/c model at both sizes)."""
    out = []
    pool = su.prefill if su.mode == "disaggregated" else su.replica
    if pool is not None:
        label, sl, n_plan, n = pool[:4]
        full = replace(su, own_rps=su.own_rps / su.scale, div_rps=su.div_rps / su.scale, scale=1.0)
        if su.mode == "disaggregated":
            small, _ = prefill_model(inst, su, sl, n, router=router)
            big, _ = prefill_model(inst, full, sl, n_plan, router=router)
            u_small, u_big = small["util"], big["util"]
        else:
            small, _ = prefill_model(inst, replace(su, own_rps=su.own_rps / n, div_rps=su.div_rps / n), sl, 1)
            big, _ = prefill_model(inst, replace(full, own_rps=full.own_rps / n_plan, div_rps=full.div_rps / n_plan), sl, 1)
            u_small, u_big = small["util"], big["util"]
        role, rounds, model = (("prefill", "rounds", "M/G/c model" if router == "least-work" else "G/G/1 model (per slice)")
                               if su.mode == "disaggregated" else
                               ("replicas", "round", "M/G/1 model (per replica)"))
        if u_small >= 1.0:
            out.append(f"scale {su.scale:g}: OVERLOADED -- {role} {rounds} to {_pl(n, 'slice')} of {n_plan} ({n / n_plan:.1%} of the pool) for "
                       f"{su.scale:.1%} of the load: {u_small:.1%} offered, so its queue grows for as long as the run lasts and every "
                       "queue figure depends on --duration; use a scale that rounds closer, or --scale 1")
        elif abs(u_small - u_big) > 0.005:
            out.append(f"scale {su.scale:g}: {role} {rounds} to {_pl(n, 'slice')} of {n_plan} ({n / n_plan:.1%} of the pool) for {su.scale:.1%} of the "
                       f"load: {u_small:.1%} offered against the whole pool's {u_big:.1%}; compare with 'model here', not 'plan'")
        if u_small < 1.0:
            d = small["ttft_mgc_99"] - big["ttft_mgc_99"]
            if abs(d) >= 0.05:
                why = ("fewer servers share less randomness" if d > 0 and u_small >= u_big - 0.005 else
                       "the rounding changed its utilisation" if d < 0 else "fewer servers, and the rounding")
                out.append(f"scale {su.scale:g}: the {model}'s wait p99 is {small['wait_mgc_99']:,.1f} ms here against {big['wait_mgc_99']:,.1f} ms "
                           f"for the whole pool, and its TTFT p99 {small['ttft_mgc_99']:,.1f} against {big['ttft_mgc_99']:,.1f} ms: the simulated pool is "
                           f"{'pessimistic' if d > 0 else 'optimistic'} by {abs(d):,.1f} ms at p99 ({why}; docs/validation.md)")
    for label, mine, whole in dec_loads:
        if mine >= 1.0:
            out.append(f"scale {su.scale:g}: OVERLOADED -- decode {label} rounds to a larger share of the load than of the pool: {mine:.1%} of its "
                       "capacity, so requests queue for decode slots and TPOT and ITL grow with --duration")
        elif whole and abs(mine - whole) > 0.02:
            out.append(f"scale {su.scale:g}: decode {label} rounds to a different share of the pool than of the load: its load is {mine:.1%} of "
                       f"capacity against the whole pool's {whole:.1%}")
    return out


#: A window this many relaxation times long measures a stationary queue's tail.
SETTLE_RELAXATIONS = 3


def queue_relaxation(inst: Instance, su: TierSetup) -> tuple[float, float] | None:
    """(offered utilisation, relaxation time in s) of the tier's prefill queue (one
    replica's for colocated serving): 1 / (c mu (1 - sqrt(rho))^2), the time scale on
    which a queue's waits forget their start (Whitt, "Planning queueing simulations",
    Management Science 35, 1989). None without a pool, or at rho = 0 or >= 1 (no bound)."""
    pool = su.prefill if su.mode == "disaggregated" else su.replica
    if pool is None:
        return None
    label, sl, _, n = pool[:4]
    servers = n if su.mode == "disaggregated" else 1
    s2 = su if su.mode == "disaggregated" else replace(su, own_rps=su.own_rps / n, div_rps=su.div_rps / n)
    m, prof = prefill_model(inst, s2, sl, servers)
    if not 0 < m["util"] < 1.0:
        return None
    return m["util"], 1.0 / (servers / prof.mean_ms * (1.0 - math.sqrt(m["util"])) ** 2) / 1e3


def settling_note(inst: Instance, su: TierSetup, dur_s: float) -> str | None:
    """The note when a window of ``dur_s`` s is shorter than SETTLE_RELAXATIONS
    relaxation times of the prefill queue (its tail under-measured), else None."""
    q = queue_relaxation(inst, su)
    if q is None or q[1] <= dur_s / SETTLE_RELAXATIONS:
        return None
    util, relax_s = q
    return (f"the prefill queue ({util:.2%} offered) relaxes in about {_secs(relax_s)} (1/(c mu (1 - sqrt(rho))^2), Whitt) and "
            f"the window is {_secs(dur_s)}, under the {SETTLE_RELAXATIONS} relaxation times a stationary tail needs: its tail is "
            f"under-measured; use --duration {_secs(SETTLE_RELAXATIONS * relax_s, up=True).removesuffix(' s')} or more (docs/validation.md)")


def _settling_notes(inst: Instance, su: TierSetup, run: TierRun) -> list[str]:
    """Warn when the window is too short for the queue to settle (:func:`settling_note`),
    the warm-up too short for the decode batches to fill, or the window too short for
    them to stay full (a request's residence)."""
    dur_s = (run.end_ms - run.warmup_ms) / 1e3
    note = settling_note(inst, su, dur_s)
    out = [note] if note else []
    warm_s = run.warmup_ms / 1e3
    res_s = None
    if su.mode == "disaggregated" and su.decode and run.decode is not None:
        op = su.decode[0].plan_op
        per_resident = op.tokens_per_s_per_slice / op.batch_cap  # tokens/s a resident gets at a full batch
        res_s = max(inst.workload.output_tokens - 1.0, 1.0) / per_resident
    elif su.mode != "disaggregated" and su.loads.get("replica") is not None and su.loads["replica"].tpot_ms:
        # the plan's lowest TPOT percentile (p95 at most): a residence slightly long, never short
        res_s = max(inst.workload.output_tokens - 1.0, 1.0) * min(su.loads["replica"].tpot_ms.values()) / 1e3
    if res_s:
        if warm_s < 2 * res_s:
            out.append(f"the warm-up ({_secs(warm_s)}) is shorter than two decode residences (~{_secs(res_s)} each): the batches are still "
                       "filling when the window opens")
        if dur_s < 10 * res_s:
            out.append(f"the window ({_secs(dur_s)}) is under ten decode residences (~{_secs(res_s)} each): arrivals stop at its end and its "
                       "last requests decode in emptying batches, so TPOT and occupancy read low by up to about "
                       f"{min(res_s / dur_s, 1.0):.0%}; lengthen --duration")
    return out


def _stall_rows(ho: "Handoffs", mask: np.ndarray) -> tuple[list[SimMetric], list[str]]:
    """The handoffs' waits before the decode allocated their KV (:mod:`fleetplan.sim.handoff`) of
    the requests in ``mask``: for room in a page pool while a slot was free (the prefill stall
    the plan's reserve is for: its batch caps leave room for the p99 of the handoffs in flight
    at full load, :mod:`fleetplan.perf.handoff`, so about none -- at most 1% at full load), and
    for a slot under the batch cap (decode saturated: the plan bounds decode at a full batch
    and predicts no queue for it)."""
    ok = mask & np.isfinite(ho.stall_ms)
    if not ok.any():
        return [], []
    wait = ho.stall_ms[ok]
    kv = ho.kv_bound[ok]
    kv_wait = np.where(kv, wait, 0.0)
    slot = (wait > 1e-9) & ~kv
    share = float(np.mean(kv & (wait > 1e-9)))
    rows = [_row("handoff_kv_stall_share", "handoffs that waited for decode KV with a slot free (prefill stalled)", "fraction", share, 0.0,
                 plan_bound=1.0 - HANDOFF_PERCENTILE / 100.0),
            _row("handoff_kv_stall_p99_ms", "prefill stall for decode KV p99 (KV ready to move -> decode KV allocated)", "ms",
                 percentile(kv_wait, 99.0), 0.0),
            _row("handoff_slot_wait_share", "handoffs that waited for a decode slot (batch full), their KV on prefill", "fraction",
                 float(np.mean(slot))),
            _row("handoff_slot_wait_p99_ms", "wait for a decode slot p99 (KV ready to move -> decode KV allocated)", "ms",
                 percentile(np.where(slot, wait, 0.0), 99.0))]
    notes = []
    if share > 1.0 - HANDOFF_PERCENTILE / 100.0:
        notes.append(f"decode: {share:.1%} of handoffs waited for decode KV with a slot free (p99 {percentile(kv_wait, 99.0):,.1f} ms, the "
                     f"longest {float(kv_wait.max()):,.1f} ms): the batch and the handoffs in flight outgrew the KV page pool more often "
                     "than the reserve for the p99 of handoffs in flight allows (fleetplan.perf.handoff)")
    return rows, notes


@dataclass
class _Window:
    """The measured window of a run: the requests that arrived in [warm-up, warm-up +
    duration) (``win``), those admitted in an SLO class (``sel``), their TTFT and queue wait
    (ms, per request), the decoded streams, the window's bounds (ms) and the notes so far."""

    run: TierRun
    win: np.ndarray
    sel: np.ndarray
    ttft: np.ndarray
    wait: np.ndarray
    dec: _Decoded
    notes: list

    @property
    def su(self) -> TierSetup:
        return self.run.setup

    @property
    def req(self):
        return self.run.req

    @property
    def t0(self) -> float:
        return self.run.warmup_ms

    @property
    def t1(self) -> float:
        return self.run.end_ms

    @property
    def slo_cls(self) -> list[int]:
        return [i for i, c in enumerate(self.su.classes) if c.slos]

    def busy_of(self, start, end, servers) -> float:
        """Busy fraction of ``servers`` over the window: each compute interval clipped to it."""
        t0, t1 = self.t0, self.t1
        ok = np.isfinite(start) & np.isfinite(end)
        inside = np.clip(np.minimum(end[ok], t1) - np.maximum(start[ok], t0), 0.0, None)
        return float(inside.sum()) / (servers * (t1 - t0))

    def tpot_rows(self, mask, plan_p50, plan_pct, model_p50, model_pct, qs, bound_pct=None, model_bound_pct=None) -> list[SimMetric]:
        """TPOT at each percentile of ``qs`` of the slowest SLO class among the requests in ``mask``."""
        su, req, dec, t0, t1 = self.su, self.req, self.dec, self.t0, self.t1
        rows = []
        for q in qs:
            per = [(percentile(dec.tpot_ms[mask & (req.cls == ci)], q), ci) for ci in self.slo_cls]
            per = [x for x in per if math.isfinite(x[0])]
            worst, wc = max(per) if per else (math.nan, None)
            m = mask & (req.cls == wc) if wc is not None else np.zeros_like(mask)
            rows.append(_row(f"tpot_p{q:g}_ms", f"TPOT p{q:g}, slowest SLO class" + (f" ({su.classes[wc].name})" if wc is not None else ""), "ms",
                             worst, plan_p50 if q == 50.0 else _pct(plan_pct, q), model_p50 if q == 50.0 else (model_pct or {}).get(q),
                             ci=_ci(dec.tpot_ms[m], req.arrival_ms[m], t0, t1, q), plan_bound=None if q == 50.0 else _pct(bound_pct, q),
                             bound=None if q == 50.0 else (model_bound_pct or {}).get(q)))
        return rows

    def itl99(self, slices, mask) -> float:
        """ITL p99 (ms) over the token gaps of ``slices`` and the first gaps of the requests in ``mask``."""
        dec = self.dec
        gv = [dec.gaps[s][0] for s in slices if s in dec.gaps] + [dec.first_gap_ms[mask]]
        gw = [dec.gaps[s][1] for s in slices if s in dec.gaps] + [np.ones(int(mask.sum()))]
        m = RequestMetrics(self.ttft, dec.tpot_ms, np.concatenate(gv), dec.itl_max_ms, np.concatenate(gw))
        return m.itl_percentile_ms(99.0)


def measure_tier(inst: Instance, run: TierRun, ctx=None) -> SimTier:
    """The :class:`SimTier` of a run: metrics of the requests that arrived in the window
    [warm-up, warm-up + duration), every request run to completion."""
    from fleetplan.results.evaluate import Context

    ctx = ctx or Context(inst)
    w = _window(run)
    su, req, win, adm = run.setup, run.req, w.win, run.admitted
    notes = w.notes
    _sample_note(w)
    dec_loads: list[tuple[str, float, float]] = []
    dcn_block = None
    if su.mode == "disaggregated":
        prefill, mod, dcn_block = _prefill_pool(inst, ctx, w)
        pools = [prefill] + _decode_pools(inst, ctx, w, mod, dec_loads)
    else:
        pools = [_replica_pool(inst, w)]
    gp, good = _goodput(w)
    if su.scale < 1.0:
        notes += _scale_notes(inst, su, dec_loads, run.router)
    notes += _settling_notes(inst, su, run)
    waited = int((run.decode.queued & win & adm).sum()) if (run.decode is not None and su.mode == "disaggregated") else 0
    if waited:
        notes.append(f"{_pl(waited, 'request')} found every decode slot taken and queued for one (the wait is in their first ITL gap and TPOT)")
    return SimTier(region=su.region, tier=su.tier, scenario=su.scenario.name, load_rps=_clean(su.load_rps),
                   arrived_rps=_clean(float(win.sum()) / ((w.t1 - w.t0) / 1e3)), requests=int(win.sum()),
                   admitted=int((win & adm).sum()), rejected_admission=int((win & req.eligible & ~adm).sum()), clamped=int((win & req.clamped).sum()),
                   shed=int((win & req.shed).sum()), waited_for_decode=waited, goodput=good,
                   goodput_by_class=gp, pools=pools, notes=notes, dcn=dcn_block)


def _window(run: TierRun) -> _Window:
    """The run's measured window (:class:`_Window`), its notes starting with the setup's and the streams'."""
    su, req = run.setup, run.req
    win = (req.arrival_ms >= run.warmup_ms) & (req.arrival_ms < run.end_ms)
    slo = np.array([bool(c.slos) for c in su.classes])[req.cls]
    ttft = run.first_ms + req.post_ms - req.arrival_ms
    wait = run.start_ms - req.queue_in_ms
    dec = _decoded(run, win)
    notes = list(su.notes) + list(run.stream_notes)
    return _Window(run, win, win & run.admitted & slo, ttft, wait, dec, notes)


def _sample_note(w: _Window) -> None:
    """A note when the window holds too few SLO-class requests for its highest percentile
    (or the p95) to mean much: a p_q needs 100 / (1 - q/100) requests."""
    n_sel = int(w.sel.sum())
    top_q = max((x[1] for c in w.su.classes for x in c.slos), default=99.0)
    for q in sorted({top_q, 95.0}, reverse=True):
        need = int(round(100 / (1 - q / 100)))
        if 0 < n_sel < need:
            w.notes.append(f"only {_pl(n_sel, 'SLO-class request')} in the window: a p{q:g} needs at least {need:,} to mean much; lengthen --duration "
                           "or raise --scale")
            break


def _prefill_pool(inst: Instance, ctx, w: _Window) -> tuple[SimPool, dict, object]:
    """The disaggregated prefill pool's metrics (TTFT, queue wait, busy fraction, exposed KV
    transfer, handoff stalls, DCN) beside the plan and the M/G/c and M/M/c models; returns the
    pool, the prefill model's figures (:func:`prefill_model`) and the DCN block (or None)."""
    run, su, sel, ttft, wait = w.run, w.su, w.sel, w.ttft, w.wait
    ta, t0, t1 = w.req.arrival_ms, w.t0, w.t1
    label, sl, n_plan, n, _ = su.prefill
    pl = su.loads.get("prefill")
    dcn_block = None
    # with a placement the model pays the DCN share the run's routes send (sim.dcn)
    mod, prof = prefill_model(inst, su, sl, n, dcn_share=su.dcn.routed_share if su.dcn is not None else 0.0, router=run.router)
    rows = []
    for q in (50.0, 95.0, 99.0):
        plan_v = _pct(pl.ttft_estimate_ms, q) if pl.ttft_estimate_ms else None
        plan_b = pl.ttft_p50_ms if q == 50.0 else _pct(pl.ttft_ms, q)
        rows.append(_row(f"ttft_p{q:g}_ms", f"TTFT p{q:g}", "ms", percentile(ttft[sel], q), plan_v, mod[f"ttft_mgc_{q:g}"],
                         mod[f"ttft_mmc_{q:g}"], _ci(ttft[sel], ta[sel], t0, t1, q), mod[f"bound_mgc_{q:g}"], plan_b))
    for q in (95.0, 99.0):
        rows.append(_row(f"queue_wait_p{q:g}_ms", f"prefill queue wait p{q:g}", "ms", percentile(wait[sel], q), None, mod[f"wait_mgc_{q:g}"],
                         mod[f"wait_mmc_{q:g}"], _ci(wait[sel], ta[sel], t0, t1, q)))
    rows.append(_row("utilisation", "prefill busy", "fraction of slice-time", w.busy_of(run.start_ms, run.compute_end_ms, n), pl.utilisation,
                     mod["util"]))
    rows.append(_row("kv_exposed_p99_ms", "KV transfer exposed p99", "ms", percentile((run.first_ms - run.compute_end_ms)[sel], 99.0), None,
                     mod["kv_99"]))
    if run.decode is not None and run.decode.handoffs is not None:
        more, stall_notes = _stall_rows(run.decode.handoffs, w.win & run.admitted)
        rows += more
        w.notes += stall_notes
    if su.dcn is not None:
        more, dcn_block, dcn_notes = measure_dcn(inst, ctx, run, w.win & run.admitted, sel, ttft, mod, t0, t1)
        rows += more
        w.notes += dcn_notes
    elif pl is not None and pl.dcn_share:
        w.notes.append(f"the plan predicts {pl.dcn_share:.2%} of this pool's requests send their KV over the DCN (plan.pods) and pays it in "
                       "its TTFT; without --placement the simulator runs one ICI domain, so the TTFT here has no DCN transfer: simulate "
                       "with --placement to measure it")
    return SimPool(role="prefill", slice=label, slices_planned=n_plan, slices=n, metrics=rows), mod, dcn_block


def _decode_pools(inst: Instance, ctx, w: _Window, mod: dict, dec_loads: list) -> list[SimPool]:
    """The disaggregated decode pools, each at its share of the arrival rate ``mod["lam"]`` (by
    capacity at its operating point); each pool's (label, simulated load, planned load) is
    appended to ``dec_loads``."""
    run, su = w.run, w.su
    ops = [ctx.decode_op(su.tier, d.label, d.batch_cap, d.draft_tokens) for d in su.decode]
    cap_total = sum(op.tokens_per_s * d.slices for op, d in zip(ops, su.decode))
    pool_of = np.array(run.decode_pool, dtype=np.int64)
    if run.decode is None and su.decode:
        w.notes.append("decode not simulated")
    pools = []
    for di, (d, op) in enumerate(zip(su.decode, ops)):
        if run.decode is None:
            break
        share = op.tokens_per_s * d.slices / cap_total if cap_total > 0 else 0.0
        pools.append(_decode_pool(inst, w, d, op, np.flatnonzero(pool_of == di), mod["lam"] * share, dec_loads))
    if run.decode is not None and run.decode.kv_overflow_steps:
        w.notes.append(f"decode: {_pl(run.decode.kv_overflow_steps, 'step')} ran with the residents' KV above the page pool (growth after "
                       "admission; a real engine would preempt)")
    return pools


def _decode_pool(inst: Instance, w: _Window, d, op, slices: np.ndarray, lam: float, dec_loads: list) -> SimPool:
    """One decode pool (``slices``, arrival rate ``lam`` 1/s): TPOT, ITL, occupancy, load and
    the wait to join a step, beside the plan and :func:`fleetplan.perf.pools.decode_at_load`
    at that load and at a full batch."""
    run, su, t0, t1 = w.run, w.su, w.t0, w.t1
    dec = w.dec
    mine = np.isin(run.decode.slice, slices)
    am, ac = admitted_mix(su), admitted_classes(su)
    at = decode_at_load(inst, am, d.slice, d.batch_cap, d.draft_tokens, lam / d.slices, class_shares=ac)
    full = decode_at_load(inst, am, d.slice, d.batch_cap, d.draft_tokens, 1e9, class_shares=ac)
    pl_d = su.loads.get("decode")
    m = w.win & mine
    est = pl_d.tpot_estimate_ms if (pl_d is not None and len(su.decode) == 1) else {}
    rows = w.tpot_rows(m, est.get("p50"), est, at.tpot_p50_ms, at.tpot_ms, (50.0, 99.0), d.plan_op.tpot_ms, full.tpot_ms)
    rows.append(_row("tpot_p99_physics_ms", "TPOT p99 by the physics alone (KV spread, acceptance spread; no prior)", "ms",
                     rows[1].simulated, None, at.tpot_kv_spread_ms.get(99.0)))
    if rows[1].ratio_plan is not None and rows[1].ratio_plan < 1.0 - RATIO_TOLERANCE:
        phys = rows[-1].ratio_model
        out_note = (f"decode {d.label}: TPOT p99 is {rows[1].ratio_plan:.2f} of the plan's estimate because the estimate carries the "
                    f"priors' tpot_p99_inflation ({inst.priors.tpot_p99_inflation:g}x at p99 over p50) for what the simulator does not "
                    "model (stragglers, preemption, host jitter)")
        w.notes.append(out_note + (f"; by the physics alone the simulation is {phys:.2f} of the model" if phys is not None else "")
                       + " (docs/validation.md)")
    i99 = w.itl99(slices.tolist(), m)
    rows.append(_row("itl_p99_ms", "ITL p99 (gap between token bursts)", "ms", i99, None, at.itl_ms.get(99.0),
                     plan_bound=_pct(d.plan_op.itl_ms, 99.0), bound=full.itl_ms.get(99.0)))
    rows.append(_row("itl_p99_physics_ms", "ITL p99 by the physics alone (the step at the residents' KV spread; no prior)", "ms", i99, None,
                     at.itl_kv_spread_ms.get(99.0)))
    rows.append(_row("itl_max_ms", "ITL max", "ms", float(np.nanmax(dec.itl_max_ms[m])) if m.any() else None))
    occ, toks = _occupancy(run, slices, t0, t1)
    rows.append(_row("occupancy", "residents per slice (time mean)", "requests", occ, pl_d.occupancy if pl_d else None, at.occupancy))
    per_slice = [_occupancy(run, [s], t0, t1)[0] for s in slices]
    rows.append(_row("occupancy_max", "residents per slice, the busiest slice (time mean)", "requests", max(per_slice) if per_slice else None))
    capd = op.tokens_per_s * d.slices
    load_m = lam * inst.workload.output_tokens / capd
    rows.append(_row("utilisation", "decode load: output tokens/s over capacity at the operating point", "fraction", toks / capd,
                     pl_d.utilisation if pl_d else None, load_m))
    rows.append(_row("decode_wait_p99_ms", "wait to join a decode step p99 (KV landed -> step start)", "ms", percentile(run.decode.wait_ms[m], 99.0)))
    dec_loads.append((d.label, load_m, (pl_d.utilisation or 0.0) if pl_d else 0.0))
    if at.saturated:
        w.notes.append(f"decode {d.label}: by Little's law this load needs more than the {d.batch_cap}-resident cap per slice; a queue for "
                       "decode slots builds")
    if per_slice and occ > 0 and max(per_slice) > 1.2 * occ:
        w.notes.append(f"decode {d.label}: the busiest slice holds {max(per_slice):,.0f} residents against a mean of {occ:,.0f}"
                       + (" -- the placement's KV routing sends more to some pods" if d.pods else ""))
    return SimPool(role="decode", slice=d.label, slices_planned=d.slices_planned, slices=d.slices, metrics=rows)


def _replica_pool(inst: Instance, w: _Window) -> SimPool:
    """The colocated replica pool's metrics (TTFT, wait, TPOT, ITL, prefill share, occupancy
    and its spread) beside the plan and the replica's closed form (:func:`replica_model`)."""
    run, su, sel, ttft, win = w.run, w.su, w.sel, w.ttft, w.win
    ta, t0, t1 = w.req.arrival_ms, w.t0, w.t1
    label, sl, n_plan, n = su.replica[:4]
    sched_label = su.replica[5]
    pl = su.loads.get("replica")
    mod, prof = prefill_model(inst, su, sl, 1)
    per = mod["lam"] / n
    rr = replica_model(inst, su, run.router)  # the closed form here: this pool's replicas under its schedule, routed as the run was
    qs = (50.0, 95.0, 99.0)
    stt, lat = rr.latency(per, n, list(qs))
    rows = []
    for q in qs:
        plan_v = _pct(pl.ttft_estimate_ms, q) if pl.ttft_estimate_ms else None
        rows.append(_row(f"ttft_p{q:g}_ms", f"TTFT p{q:g}", "ms", percentile(ttft[sel], q), plan_v, lat.ttft_estimate_ms[q],
                         None, _ci(ttft[sel], ta[sel], t0, t1, q), lat.ttft_ms[q], _pct(pl.ttft_ms, q)))
    rows.append(_row("queue_wait_p95_ms", "wait for the replica p95 (queued prefills and the step in progress)", "ms", percentile(w.wait[sel], 95.0),
                     None, lat.wait_ms[95.0] + 0.5 * stt.step_ms if stt.stable else None))
    model_t = {q: lat.tpot_ms[q] for q in qs} if stt.stable else {}
    rows += w.tpot_rows(win, None, pl.tpot_ms, model_t.get(50.0), model_t, qs)
    allr = list(range(n))
    rows.append(_row("itl_p99_ms", "ITL p99", "ms", w.itl99(allr, win), _pct(getattr(pl, "itl_ms", None) or {}, 99.0), lat.itl_ms[99.0]))
    rows.append(_row("itl_max_ms", "ITL max (decode stalled behind prefills, or a chunk's mixed step)", "ms",
                     float(np.nanmax(w.dec.itl_max_ms[win])) if win.any() else None))
    rows.append(_row("prefill_share", "replica time in steps that carry a prefill or a chunk", "fraction",
                     w.busy_of(run.start_ms, run.compute_end_ms, n) if Schedule.parse(sched_label).kind != CHUNKED else _chunk_share(run, allr, t0, t1),
                     None, stt.prefill_share))
    occ, _ = _occupancy(run, allr, t0, t1)
    rows.append(_row("occupancy", "sequences decoding per replica (time mean)", "requests", occ, pl.occupancy,
                     stt.sequences_decoding if stt.stable else None))
    dist = _occupancy_distribution(run, allr, t0, t1, win)
    b = stt.sequences_decoding if stt.stable else None
    z99 = 2.3263478740408408
    rows.append(_row("occupancy_p50", "residents per step p50 (time-weighted; model: Poisson(b) around the mean)", "requests", dist[0], None, b))
    rows.append(_row("occupancy_p99", "residents per step p99 (time-weighted; model: b + 2.33 sqrt(b))", "requests", dist[1], None,
                     b + z99 * math.sqrt(b) if b else None))
    rows.append(_row("lifetime_occupancy_sd", "sd of a request's lifetime-mean residents (model: sqrt(2b/3), M/G/infinity)", "requests",
                     dist[2], None, lat.occupancy_sd if stt.stable else None))
    return SimPool(role="replica", slice=label, slices_planned=n_plan, slices=n, metrics=rows)


def _goodput(w: _Window) -> tuple[dict[str, float], float | None]:
    """Goodput per SLO class (the share of the window's intended requests -- not clamped, not
    shed -- that met its TTFT and TPOT limits; one not admitted misses) and over every class
    together (None without an SLO-class request)."""
    req, run, dec = w.req, w.run, w.dec
    gp: dict[str, float] = {}
    counted = 0
    good = 0.0
    intended = w.win & ~req.clamped & ~req.shed
    for ci, c in enumerate(w.su.classes):
        m = intended & (req.cls == ci)
        if not c.slos or not m.any():
            continue
        t = np.where(run.admitted[m], w.ttft[m], np.inf)
        tp = np.where(run.admitted[m], dec.tpot_ms[m], np.inf)
        g = goodput(RequestMetrics(t, tp, np.empty(0), np.full(t.size, np.nan)), c.ttft_limit_ms, c.tpot_limit_ms)
        gp[c.name] = _clean(g)
        good += g * int(m.sum())
        counted += int(m.sum())
    return gp, _clean(good / counted) if counted else None


