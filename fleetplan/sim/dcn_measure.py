"""Measuring a run with a placement against the DCN: the share of requests whose KV
crossed the DCN, TTFT of those and of the ones over ICI, each beside the plan's
evaluator and the closed form at a DCN share of 1 and 0 (:func:`measure_dcn`)."""

from __future__ import annotations

import math

import numpy as np

from fleetplan.perf.metrics import percentile
from fleetplan.sim.closed_form import prefill_model
from fleetplan.sim.report import SimDcn
from fleetplan.sim.rows import T95_9, _ci, _pl, _row


def _share_ci(hit: np.ndarray, t_ms: np.ndarray, t0: float, t1: float) -> list[float] | None:
    """95% interval of a share (the mean of ``hit``) by 10 batch means over [t0, t1) (as
    :func:`fleetplan.sim.rows._ci`); None when a batch is empty."""
    if hit.size < 10:
        return None
    edges = np.linspace(t0, t1, 11)
    b = np.clip(np.searchsorted(edges, t_ms, side="right") - 1, 0, 9)
    est = []
    for i in range(10):
        m = b == i
        if not m.any():
            return None
        est.append(float(hit[m].mean()))
    h = T95_9 * float(np.std(est, ddof=1)) / math.sqrt(10)
    mid = float(hit.mean())
    return [max(mid - h, 0.0), min(mid + h, 1.0)]


def plan_ttft_estimate(ctx, rec, failover: bool, share: float) -> dict[float, float]:
    """The plan's TTFT estimate (p50, p99; ms) of prefill record ``rec`` had ``share`` of
    its requests sent their KV over the DCN: the evaluator the plan's ``ttft_estimate_ms``
    comes from (:meth:`fleetplan.results.evaluate.Context.ttft_estimate`), at the record's
    served own and diverted loads (as :func:`fleetplan.results.loads.record_flow` reads
    them). Empty when the record's predictions are withheld."""
    if rec is None or rec.withheld is not None or rec.slice is None or rec.slices <= 0:
        return {}
    own = (rec.arrivals_rps - rec.diverted_rps) - (rec.shed_rps - rec.shed_diverted_rps)
    div = rec.diverted_rps - rec.shed_diverted_rps
    lam = max(own, 0.0) + max(div, 0.0)
    frac = max(0.0, 1.0 - rec.shortfall / lam) if lam > 0 else 1.0
    return ctx.ttft_estimate(rec.tier, rec.slice, rec.slices, max(own, 0.0) * frac, max(div, 0.0) * frac, failover, [50.0, 99.0],
                             dcn_share=share)


def measure_dcn(inst, ctx, run, prefilled: np.ndarray, sel: np.ndarray, ttft: np.ndarray, mod: dict, t0: float, t1: float):
    """The prefill pool's DCN rows of a run with a placement, its :class:`SimDcn` and notes.

    Rows: ``dcn_share`` (requests whose KV crossed over those prefilled in the window --
    ``prefilled`` -- against the plan's prediction and the share the run's routes send),
    TTFT p50/p99 of the SLO-class requests (``sel``) whose KV crossed (``ttft_dcn_*``) and
    of those over ICI (``ttft_ici_*``: the TTFT with no DCN), each beside the plan's
    evaluator and the model at a DCN share of 1 and 0, and ``ttft_dcn_cost_p99_ms`` (TTFT
    p99 of all less that of the ICI ones: what the DCN costs; the plan's and the model's
    at their share less at 0). ``mod``: :func:`fleetplan.sim.closed_form.prefill_model` at
    the routes' share."""
    su, req = run.setup, run.req
    d = su.dcn
    label, sl, n_plan, n, _ = su.prefill
    rec = su.loads.get("prefill")
    ta = req.arrival_ms
    crossed = run.dcn & prefilled
    k, m = int(crossed.sum()), int(prefilled.sum())
    share = k / m if m else None
    rows = [_row("dcn_share", "KV over the DCN (of the requests prefilled)", "fraction of requests", share, d.plan_share, d.routed_share,
                 ci=_share_ci(run.dcn[prefilled].astype(float), ta[prefilled], t0, t1))]
    est = {s: plan_ttft_estimate(ctx, rec, su.failover, s) for s in (0.0, 1.0)}
    models = {s: prefill_model(inst, su, sl, n, (50.0, 99.0), dcn_share=s)[0] for s in (0.0, 1.0)}
    for tag, mask, s, what in (("dcn", sel & run.dcn, 1.0, "KV over the DCN"), ("ici", sel & ~run.dcn, 0.0, "KV over ICI (TTFT with no DCN)")):
        for q in (50.0, 99.0):
            rows.append(_row(f"ttft_{tag}_p{q:g}_ms", f"TTFT p{q:g}, requests with {what}", "ms", percentile(ttft[mask], q), est[s].get(q),
                             models[s][f"ttft_mgc_{q:g}"], ci=_ci(ttft[mask], ta[mask], t0, t1, q)))
    p99_all, p99_ici = percentile(ttft[sel], 99.0), percentile(ttft[sel & ~run.dcn], 99.0)
    plan_p99 = (rec.ttft_estimate_ms or {}).get("p99") if rec is not None else None
    rows.append(_row("ttft_dcn_cost_p99_ms", "TTFT p99 the DCN adds (all requests less those over ICI)", "ms", p99_all - p99_ici,
                     plan_p99 - est[0.0][99.0] if (plan_p99 is not None and 99.0 in est[0.0]) else None,
                     mod["ttft_mgc_99"] - models[0.0]["ttft_mgc_99"]))
    elsewhere = 0
    if run.decode is not None and run.kv_pod is not None and run.slice_pod is not None:
        ds = run.decode.slice
        ok = prefilled & (ds >= 0) & (run.kv_pod >= 0)
        elsewhere = int((run.slice_pod[ds[ok]] != run.kv_pod[ok]).sum())
    block = SimDcn(routing=d.routing, prefilled=m, crossed=k, routed_share=float(f"{d.routed_share:.6g}"),
                   rule_share=float(f"{d.rule_share:.6g}") if d.rule_share is not None else None, pods_differing=d.pods_differing,
                   decode_elsewhere=elsewhere)
    notes = []
    if 0 < int((sel & run.dcn).sum()) < 100:
        notes.append(f"only {_pl(int((sel & run.dcn).sum()), 'SLO-class request')} sent KV over the DCN in the window: the DCN rows' p99 "
                     "rests on few samples; lengthen --duration")
    plan_s = d.plan_share
    if share is not None and plan_s is not None and (abs(share - plan_s) > 0.2 * max(plan_s, 0.0) and abs(share - plan_s) > 0.001):
        why = []
        if d.pods_differing:
            why.append(f"the placement holds this tier's slices differently from the plan's pods in {_pl(d.pods_differing, 'pod')}, and the "
                       f"plan's rule on the placed pods gives {d.rule_share:.2%}" if d.rule_share is not None else "")
        if d.rule_share is not None and abs(d.routed_share - d.rule_share) > 0.001:
            why.append(f"the routes the run used send {d.routed_share:.2%} where the plan's rule on these pods sends {d.rule_share:.2%}"
                       + (" (the placement's normal-peak weights held in this scenario)" if d.routing == "placement-normal" else ""))
        if abs(share - d.routed_share) > 0.001:
            why.append(f"the run measured {share:.2%} of the {d.routed_share:.2%} its routes send (sampling, and prefill slices not exactly "
                       "evenly loaded)")
        notes.append(f"KV over the DCN: {share:.2%} measured against the plan's {plan_s:.2%}" + (": " + "; ".join(w for w in why if w) if any(why) else ""))
    if elsewhere:
        notes.append(f"{_pl(elsewhere, 'request')} found no decode slot free in the pod its KV went to and joined a slice in another pod "
                     "(the simulator moves it without a second transfer, so its TTFT has no DCN for that move)")
    return rows, block, notes
