"""The report's margins figure (issue 40): each pool's latency percentiles against a
multiplier on every step time, with where each physics source sits on that scale.

Data (:func:`margin_curves`, from the evaluator only -- :mod:`fleetplan.results.margins`'s
pool test at the plan's recorded loads): per pool and SLO, in the pool's sizing scenario,
the SLO's percentile over its limit at step-time multipliers m of the instance's own priors
(:data:`SCALES`; its ``prefill_time_scale`` and ``decode_time_scale`` both times m), the m at
which it crosses the limit, and each physics source's place on that scale: its own
percentile at the pool's load (the source's priors, unscaled) and the multiplier of the
instance's priors that gives the same percentile. A source is not a uniform multiple of the
instance's physics (its prefill and decode move apart, its step grows with the batch at its
own rate), so the marks place it; the plan's margins
(:class:`fleetplan.results.plan.SloMargin`, each source scaled itself) measure it.

Figure (:func:`fig_margins`): one panel per pool, the report's style
(:mod:`fleetplan.report.figures`).
"""

from __future__ import annotations

import math

from fleetplan.report.figures import C, SERIES, Figure, _axes_titles, _finish, _footnote, _grid, _renderer, _suptitle, style

__all__ = ["SCALES", "margin_curves", "fig_margins"]

#: the step-time multipliers the curves are evaluated at
SCALES = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.75, 2.0)
#: the most pools drawn (those with the least step-time margin)
MAX_PANELS = 12
_MARKERS = ("s", "^", "D", "v", "P", "X", "*", "h")




def _on_curve(scale, ratio, r: float | None) -> float | None:
    """The multiplier at which the curve (``scale``, ``ratio``: rising) reaches ``r``, linear
    between its points; None off the scale (or for None)."""
    if r is None:
        return None
    pts = [(m, x) for m, x in zip(scale, ratio) if x is not None]
    for (m0, r0), (m1, r1) in zip(pts, pts[1:]):
        if r0 <= r <= r1 and r1 > r0:
            return m0 + (r - r0) / (r1 - r0) * (m1 - m0)
    return None


def margin_curves(inst, plan) -> list:
    """:class:`fleetplan.report.data.MarginCurve` of every pool's SLOs in its sizing scenario (the normal peak
    when none is recorded), from the plan's records and the evaluator; [] for a plan
    without predictions."""
    from fleetplan.instance.physics import physics_instance, sources
    from fleetplan.report.data import MarginCurve
    from fleetplan.results.evaluate import Context
    from fleetplan.results.loads import sizing_records
    from fleetplan.results.margins import _METRICS, STEP_RANGE, _Pool, margin_search, pool_margins, scaled_instance

    if not plan.scenarios or all(pl.withheld for sc in plan.scenarios for pl in sc.pools):
        return []
    base = physics_instance(inst)  # the instance's own priors, one source
    ctxs = {m: Context(scaled_instance(base, m)) for m in SCALES}  # grows with the crossings' searches
    margins = plan.margins if plan.margins is not None else pool_margins(inst, plan.pools, plan.scenarios)
    srcs = sources(inst)
    src_ctx = {x.name: Context(physics_instance(inst, x.name)) for x in srcs}
    sized = sizing_records(plan.scenarios)
    by_name = {sc.name: sc for sc in plan.scenarios}
    normal = next((sc for sc in plan.scenarios if sc.kind == "normal"), None)
    out = []
    for key in sorted({(p.region, p.tier, p.role) for p in plan.pools}):
        sn, rec = sized.get(key, ("normal", None))
        sc = by_name.get(sn) or normal
        if rec is None and sc is not None:
            rec = next((x for x in sc.pools if (x.region, x.tier, x.role) == key), None)
        if rec is None or rec.slices <= 0 or rec.slice is None:
            continue
        pool_obj = _Pool(plan.pools, rec, sc.kind == "loss")
        values = {m: pool_obj.values(c, 1.0) for m, c in ctxs.items()}

        def _value(m: float, slo, pool_obj=pool_obj) -> float:
            if m not in ctxs:
                ctxs[m] = Context(scaled_instance(base, m))
            return pool_obj.values(ctxs[m], 1.0).get((slo.metric, slo.percentile), math.inf)

        if any(v is None for v in values.values()):
            continue
        own = {x.name: pool_obj.values(src_ctx[x.name], 1.0) for x in srcs}
        for s in ctxs[1.0].slos[key[1]]:
            if s.metric not in _METRICS[key[2]]:
                continue
            ratio = [None if not math.isfinite(values[m][(s.metric, s.percentile)]) else values[m][(s.metric, s.percentile)] / s.limit_ms
                     for m in SCALES]
            cross = None
            if any(r is not None and r <= 1.0 for r in ratio) and any(r is None or r > 1.0 for r in ratio):
                # the multiplier itself, by the margins' search (the grid only draws the curve)
                cross = margin_search(lambda m, s=s: _value(m, s) <= s.limit_ms * (1 + 1e-6) + 1e-6, *STEP_RANGE)
            mine = {n: (None if not math.isfinite(v[(s.metric, s.percentile)]) else v[(s.metric, s.percentile)] / s.limit_ms)
                    for n, v in own.items()}
            pm = [m.step_time_margin for m in margins or [] if (m.region, m.tier, m.role, m.scenario, m.metric, m.percentile)
                  == (*key, sn, s.metric, s.percentile)]
            out.append(MarginCurve(region=key[0], tier=key[1], role=key[2], scenario=sn, metric=s.metric, percentile=s.percentile,
                                   limit_ms=s.limit_ms, scale=list(SCALES), ratio=[None if r is None else round(r, 6) for r in ratio],
                                   crossing=cross,
                                   sources={n: (None if (m := _on_curve(SCALES, ratio, r)) is None else round(m, 4)) for n, r in mine.items()},
                                   source_ratio={n: None if r is None else round(r, 6) for n, r in mine.items()},
                                   plan_margin=pm[0] if pm else None))
    return out


def fig_margins(d) -> Figure:
    """One panel per pool (the MAX_PANELS with the least margin): each SLO's percentile over
    its limit against a multiplier on every step time (1 = the instance's own priors), the
    limit at 1, and each physics source marked where it sits on the scale."""
    curves = d.margin_curves
    pools = sorted({(c.region, c.tier, c.role) for c in curves},
                   key=lambda k: (min((c.crossing if c.crossing is not None else 99.0) for c in curves if (c.region, c.tier, c.role) == k), k))
    shown, hidden = pools[:MAX_PANELS], pools[MAX_PANELS:]
    names = list(dict.fromkeys(n for c in curves for n in c.sources))
    with style():
        rows, cols = _grid(len(shown), 3)
        fig = Figure(figsize=(4.4 * cols + 0.4, 3.6 * rows + 0.8))
        axs = fig.subplots(rows, cols, squeeze=False)
        for k, key in enumerate(shown):
            ax = axs[k // cols][k % cols]
            cs = [c for c in curves if (c.region, c.tier, c.role) == key]
            top, ends = 1.6, []
            for i, c in enumerate(cs):
                xs = [m for m, r in zip(c.scale, c.ratio) if r is not None]
                ys = [r for r in c.ratio if r is not None]
                col = SERIES[i % len(SERIES)]
                lab = f"{c.metric.upper()} p{c.percentile:g} (limit {c.limit_ms:g} ms)"
                if c.plan_margin is not None:
                    lab += f"; margin x{c.plan_margin:#.3g}"
                ax.plot(xs, ys, color=col, lw=1.8, marker="o", ms=3, label=lab)
                top = max(top, min(max(ys, default=1.0), 3.0) * 1.05)
                if c.crossing is not None and xs and c.crossing <= max(c.scale):
                    if c.ratio[-1] is None and ys[-1] <= 1.0:  # the curve ends: beyond it no steady state / too few tokens/s
                        ends.append((c.crossing, ys[-1], col))
                    ax.plot([c.crossing], [1.0], marker="|", ms=12, mew=2, color=col, ls="none")
            for x, y, col in ends:
                ax.plot([x, x], [y, top], color=col, lw=1.4, ls="--")
            ax.axhline(1.0, color=C["red"], lw=1.2)
            ax.axvline(1.0, color=C["grey"], lw=0.8, ls=":")
            for j, n in enumerate(names):  # each source where its own percentile lands on each curve
                mk = _MARKERS[j % len(_MARKERS)]
                for c in cs:
                    x, y = c.sources.get(n), c.source_ratio.get(n)
                    if x is not None and y is not None:
                        ax.plot([x], [y], marker=mk, ms=7, mfc="none", mec=C["black"], ls="none",
                                label=n if c is cs[0] or all(cc.sources.get(n) is None for cc in cs[:cs.index(c)]) else None)
            ax.set_xlim(min(cs[0].scale), max(cs[0].scale))
            ax.set_ylim(0, top)
            ax.set_xlabel("multiplier on every step time (1 = the instance's priors)")
            ax.set_ylabel("percentile / SLO limit")
            ax.set_title(f"{key[2]}[{key[0]},{key[1]}] in {cs[0].scenario}", loc="left")
            ax.legend(loc="upper left", fontsize=7, frameon=False)
        for k in range(len(shown), rows * cols):
            axs[k // cols][k % cols].set_visible(False)
        notes = ["Open markers: each physics source's own percentile at the pool's load, placed on the curve where the instance's "
                 "priors scaled give the same (a source is not a uniform multiple of the instance's physics: its prefill and decode "
                 "move apart); the margin in the legend is the plan's, the least over the sources it holds under, each scaled itself. "
                 "Tick on the limit: where the SLO breaks; a dashed rise: the curve ends there -- beyond it the pool has no steady "
                 "state (or its decode tokens/s fall short of its load), so the SLO breaks though the last percentile drawn is "
                 "within its limit."]
        if hidden:
            notes.append(f"{len(hidden)} more pools with larger margins not drawn: " + ", ".join(f"{ro}[{r},{t}]" for r, t, ro in hidden[:8])
                         + (" ..." if len(hidden) > 8 else ""))
        bottom = _footnote(fig, notes)
        t = _suptitle(fig, "Margins: each pool's latency percentiles against a multiplier on every step time, the physics sources "
                           "marked where they sit (the SLO breaks where a curve crosses 1)")
        _finish(fig, rect=(0, bottom, 1, 1))
        r = _renderer(fig)
        e = t.get_window_extent(r)
        if any(e.overlaps(x.get_window_extent(r)) for ax in fig.axes if ax.get_visible() for x in _axes_titles(ax)):
            # tight_layout left a one-line title no room over the panels' own titles
            _finish(fig, rect=(0, bottom, 1, 1 - (e.height + 8) / fig.bbox.height))
        return fig
