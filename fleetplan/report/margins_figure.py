"""The report's margins figure: each pool's latency percentiles against a
multiplier on every step time, with where each physics source sits on that scale.

Data (:func:`fleetplan.report.margin_curves.margin_curves`, from the evaluator only -- :mod:`fleetplan.results.margins`'s
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

from fleetplan.report.margin_curves import SCALES, margin_curves  # noqa: F401 -- re-exported
from fleetplan.report.figures import C, SERIES, Figure, _axes_titles, _finish, _footnote, _grid, _renderer, _suptitle, style

__all__ = ["SCALES", "margin_curves", "fig_margins"]

#: the most pools drawn (those with the least step-time margin)
MAX_PANELS = 12
_MARKERS = ("s", "^", "D", "v", "P", "X", "*", "h")


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
