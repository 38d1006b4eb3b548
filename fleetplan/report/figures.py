"""Matplotlib figures of the report, the tornado chart and the levers chart.

Object-oriented matplotlib only (``matplotlib.figure.Figure``, the Agg canvas): no
pyplot, no display, no global state. Every figure is drawn under matplotlib's default
style (a user's matplotlibrc changes nothing) and saved without a timestamp or
software tag, so the same data give the same bytes (PNG ``metadata={'Software':
None}``; SVG ``metadata={'Date': None}`` with a fixed ``svg.hashsalt``).

Each ``fig_*`` function takes the report data (:mod:`fleetplan.report.data`) or a
sweep report and returns a Figure; :func:`to_bytes` renders it.
"""

from __future__ import annotations

import io
import math
import textwrap

import matplotlib

matplotlib.use("Agg", force=False)

from matplotlib import rc_context  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.layout_engine import PlaceHolderLayoutEngine  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

__all__ = ["to_bytes", "style", "fig_memory_map", "fig_decode_curves", "fig_ttft", "fig_fleet", "fig_hourly", "fig_cascade",
           "fig_cost", "fig_tornado", "fig_levers", "fig_no_solution"]

DPI = 100
RC = {
    "font.family": "DejaVu Sans", "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8,
    "xtick.labelsize": 8, "ytick.labelsize": 8, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
    "axes.spines.right": False, "text.parse_math": False, "svg.hashsalt": "fleetplan", "svg.fonttype": "path", "figure.dpi": DPI,
}
# colour-blind-safe (Okabe-Ito)
C = {"blue": "#0072B2", "orange": "#E69F00", "green": "#009E73", "red": "#D55E00", "purple": "#CC79A7", "sky": "#56B4E9",
     "yellow": "#F0E442", "grey": "#7F7F7F", "black": "#000000", "light": "#D9D9D9"}
SERIES = [C["blue"], C["orange"], C["green"], C["purple"], C["sky"], C["red"], C["yellow"], C["grey"]]


class style:
    """Context manager: matplotlib's defaults plus the report's few settings."""

    def __enter__(self):
        self._ctx = rc_context()
        self._ctx.__enter__()
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(RC)
        return self

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


def to_bytes(fig: Figure, fmt: str = "png") -> bytes:
    """The figure as PNG or SVG bytes, deterministic (no timestamp, no software tag)."""
    buf = io.BytesIO()
    # Figure.tight_layout leaves a PlaceHolderLayoutEngine behind (a layout that does
    # nothing), and savefig draws a figure with any layout engine twice -- once without
    # rendering, for the layout -- which was ~a third of saving a report's figures for
    # nothing: the placeholder is taken off while saving (the same bytes) and put back.
    engine = fig.get_layout_engine()
    with style():
        if isinstance(engine, PlaceHolderLayoutEngine):
            fig.set_layout_engine(None)
        try:
            if fmt == "png":
                fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
            elif fmt == "svg":
                fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
            else:
                raise ValueError(f"figure format must be png or svg, got {fmt!r}")
        finally:
            if isinstance(engine, PlaceHolderLayoutEngine):
                fig.set_layout_engine(engine)
    return buf.getvalue()


def _thousands(ax, axis="y"):
    f = FuncFormatter(lambda v, _p: f"{v:,.0f}")
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(f)


def _pct_axis(ax, axis="x"):
    f = FuncFormatter(lambda v, _p: f"{v:.0%}")
    (ax.xaxis if axis == "x" else ax.yaxis).set_major_formatter(f)


def _renderer(fig: Figure):
    """The Agg renderer of ``fig`` (attached on first use), to measure text."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    return fig.canvas.get_renderer()


def _wrap_to(text_artist, width_px: float, renderer) -> None:
    """Re-break ``text_artist``'s words so that no line is wider than ``width_px``."""
    words = text_artist.get_text().split()
    lines, cur = [], ""
    for w in words:
        trial = f"{cur} {w}" if cur else w
        text_artist.set_text(trial)
        if cur and text_artist.get_window_extent(renderer).width > width_px:
            lines.append(cur)
            cur = w
        else:
            cur = trial
    lines.append(cur)
    text_artist.set_text("\n".join(lines))


def _suptitle(fig: Figure, text: str, fontsize: float = 11, width: float = 0.97):
    """A left-aligned figure title, wrapped to ``width`` of the figure's width
    (tight_layout then leaves room for every line)."""
    t = fig.suptitle(text, x=0.01, ha="left", fontsize=fontsize)
    r = _renderer(fig)
    if t.get_window_extent(r).width > width * fig.bbox.width:
        _wrap_to(t, width * fig.bbox.width, r)
    return t


def _axes_titles(ax):
    """The title Text artists of ``ax`` that carry text (left, centre, right)."""
    return [t for t in (getattr(ax, "_left_title", None), ax.title, getattr(ax, "_right_title", None)) if t is not None and t.get_text()]


def _wrap_axes_titles(fig: Figure) -> bool:
    """Re-break every axes title wider than its axes (a left title would otherwise run
    into the next panel's or off the figure); True when one changed."""
    r = _renderer(fig)
    changed = False
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        box = ax.get_window_extent(r)
        for t in _axes_titles(ax):
            if t.get_window_extent(r).width > box.width + 0.5:
                before = t.get_text()
                _wrap_to(t, box.width, r)
                changed |= t.get_text() != before
    return changed


def _finish(fig: Figure, rect=None) -> None:
    """Lay the figure out: tight_layout, then re-break the axes titles that do not fit
    their axes, tilt the x tick labels of an axes where neighbours collide, and lay out
    again (so no title runs off the figure or into a neighbour, no tick label into the
    next)."""
    kw = {} if rect is None else {"rect": rect}
    fig.tight_layout(**kw)
    changed = _wrap_axes_titles(fig)
    r = _renderer(fig)
    for ax in fig.axes:
        if ax.get_visible() and _xticklabels_overlap(ax, r):
            # one line each (tilted lines of one label would cross the next), tilted, anchored at the tick
            ax.set_xticks(ax.get_xticks(), labels=[" ".join(lab.get_text().split()) for lab in ax.get_xticklabels()])
            for lab in ax.get_xticklabels():
                lab.set_rotation(35)
                lab.set_ha("right")
                lab.set_rotation_mode("anchor")
            changed = True
    if changed:
        fig.tight_layout(**kw)


def _ink(colour, alpha: float = 1.0) -> str:
    """'white' or 'black', whichever contrasts more (WCAG relative luminance) with
    ``colour`` drawn at ``alpha`` over a white background."""
    from matplotlib.colors import to_rgb

    rgb = [alpha * c + (1 - alpha) for c in to_rgb(colour)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    lum = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return "white" if 1.05 / (lum + 0.05) > (lum + 0.05) / 0.05 else "black"


def _fits(text_artist, patch, renderer, pad_px: float = 2.0) -> bool:
    """The text lies inside the patch's box (both measured in display pixels)."""
    e, b = text_artist.get_window_extent(renderer), patch.get_window_extent(renderer)
    return e.x0 >= b.x0 + pad_px and e.x1 <= b.x1 - pad_px and e.y0 >= b.y0 - 1 and e.y1 <= b.y1 + 1


def _xticklabels_overlap(ax, renderer, pad_px: float = 3.0) -> bool:
    """Two neighbouring x tick labels (of the ticks in view) collide: their boxes
    overlap, or -- labels tilted alike -- the strips of text lie closer than a line."""
    lo, hi = sorted(ax.get_xlim())
    labs = [lab for lab, x in zip(ax.get_xticklabels(), ax.get_xticks()) if lab.get_text() and lo <= x <= hi]
    if len(labs) < 2:
        return False
    angle = labs[0].get_rotation() % 180
    if angle:
        lines = max(lab.get_text().count("\n") + 1 for lab in labs)
        line_px = max(lab.get_fontsize() for lab in labs) * ax.get_figure().dpi / 72 * 1.2 * lines
        xs = sorted(ax.transData.transform((x, 0))[0] for lab, x in zip(ax.get_xticklabels(), ax.get_xticks()) if lab in labs)
        return any((b - a) * math.sin(math.radians(angle)) < line_px + pad_px for a, b in zip(xs, xs[1:]))
    es = sorted((lab.get_window_extent(renderer) for lab in labs), key=lambda e: e.x0)
    return any(a.x1 + pad_px > b.x0 for a, b in zip(es, es[1:]))


def _footnote(fig: Figure, lines: list[str], fontsize: float = 7.5) -> float:
    """Notes under the plot, each wrapped to the figure's width; the figure grows by
    their height. Returns the fraction of the (new) height they take, for
    tight_layout's rect."""
    if not lines:
        return 0.0
    r = _renderer(fig)
    t = fig.text(0.01, 0.0, "", ha="left", va="bottom", fontsize=fontsize, color=C["grey"])
    out = []
    for line in lines:
        t.set_text(line)
        _wrap_to(t, 0.97 * fig.bbox.width, r)
        out.append(t.get_text())
    t.set_text("\n".join(out))
    h_px = t.get_window_extent(r).height + 10
    fig.set_figheight(fig.get_figheight() + h_px / fig.dpi)
    t.set_y(4 / fig.bbox.height)
    return h_px / fig.bbox.height


def _fit_texts_x(ax, texts, pad_px: float = 4.0) -> None:
    """Widen a linear x axis until every text anchored in its data coordinates lies
    inside it (the labels at bar ends never run off the plot or into the tick labels)."""
    fig = ax.get_figure()
    r = _renderer(fig)
    for _ in range(3):
        lo, hi = ax.get_xlim()
        box = ax.get_window_extent(r)
        w = box.width
        new_lo, new_hi = lo, hi
        for t in texts:
            e = t.get_window_extent(r)
            left_px, right_px = e.x0 - box.x0, e.x1 - box.x0
            xa = t.xy[0] if hasattr(t, "xy") else t.get_position()[0]  # an Annotation's anchor, not its offset
            if right_px > w - pad_px and e.width < w:
                # keep the anchor's share of the text fixed: R so that px(xa) + (right - px(xa)) <= w
                anchor_px = (xa - lo) / (hi - lo) * w
                need = right_px - anchor_px + pad_px
                new_hi = max(new_hi, lo + (xa - lo) * w / max(w - need, 1.0))
            if left_px < pad_px and e.width < w:
                anchor_px = (xa - lo) / (hi - lo) * w
                need = anchor_px - left_px + pad_px
                new_lo = min(new_lo, hi - (hi - xa) * w / max(w - need, 1.0))
        if (new_lo, new_hi) == (lo, hi):
            return
        ax.set_xlim(new_lo, new_hi)


def _grid(n: int, cols: int) -> tuple[int, int]:
    cols = max(1, min(cols, n))
    return int(math.ceil(n / cols)), cols


# ----------------------------------------------------------------------------- report figures


def fig_memory_map(d) -> Figure:
    """One panel per slice shape: its HBM (GB) split into weights, workspace, headroom and
    the KV page pool; below, the KV each pool keeps resident at its operating point (and a
    decode pool's reserve for handoffs in flight beside it, fleetplan.perf.handoff), and
    what one request of the longest bucket takes of the pool. A segment too narrow for
    its label is named in the panel's title instead."""
    with style():
        n = len(d.memory)
        heights = [1.6 + 0.5 * len(m.in_use) for m in d.memory]
        fig = Figure(figsize=(9.5, sum(heights) * 0.62 + 1.0))
        axs = [a[0] for a in fig.subplots(n, 1, squeeze=False, gridspec_kw={"height_ratios": heights})]
        segs = (("weights", C["blue"]), ("workspace", C["grey"]), ("headroom", C["orange"]), ("KV page pool", C["sky"]))
        labels = []  # (panel, text, its segment, what the title says when it does not fit)
        for k, (ax, m) in enumerate(zip(axs, d.memory)):
            rows = ["HBM"] + [f"{u.tier} {'decode' if u.role == 'decode' else 'replica'}" for u in m.in_use] + ["longest request"]
            ys = list(range(len(rows)))[::-1]
            left = 0.0
            kv = max(m.kv_pool_gb, 0.0)
            for (name, col), val in zip(segs, (m.weights_gb, m.workspace_gb, m.headroom_gb, kv)):
                bar = ax.barh(ys[0], val, left=left, color=col, edgecolor="white", height=0.7)
                if val > 0:
                    txt = f"{name} {val:,.0f} GB"
                    t = ax.text(left + val / 2, ys[0], txt, ha="center", va="center", fontsize=7.5, color=_ink(col))
                    labels.append((k, t, bar.patches[0], txt))
                left += val
            start = m.weights_gb + m.workspace_gb + m.headroom_gb

            def pool_row(y, used, text, col, extra=0.0):
                ax.barh(y, kv, left=start, color=C["light"], height=0.5)
                ax.barh(y, min(used, kv), left=start, color=col, height=0.5)
                if extra > 0:  # the decode KV held for handoffs in flight, beside the batch
                    ax.barh(y, min(extra, max(kv - used, 0.0)), left=start + min(used, kv), color=C["purple"], height=0.5)
                right = used + extra < 0.5 * kv  # the label after the bars, else inside the batch's
                x = start + min(used + extra if right else used, kv) + (0.005 if right else -0.005) * m.total_gb
                ax.text(x, y, text, ha="left" if right else "right", va="center", fontsize=7.5, color=_ink(C["light"] if right else col))

            for y, u in zip(ys[1:], m.in_use):
                hand = (f" + {u.handoff_reserve_requests} handoffs in flight {u.handoff_reserve_gb:,.0f} GB" if u.handoff_reserve_gb > 0 else "")
                pool_row(y, u.kv_gb, f"B={u.batch:,.0f}: {u.kv_gb:,.0f} GB{hand}, {(u.kv_gb + u.handoff_reserve_gb) / max(kv, 1e-9):.0%} "
                                     f"of the pool (room for {u.capacity_requests:,}{' alone' if hand else ''})", C["green"], u.handoff_reserve_gb)
            pool_row(ys[-1], m.longest_request_kv_gb, f"one {m.longest_request_tokens:,.0f}-token request: {m.longest_request_kv_gb:,.1f} GB, "
                                                      f"{m.longest_request_kv_gb / max(kv, 1e-9):.1%} of the pool", C["red"])
            ax.set_yticks(ys)
            ax.set_yticklabels(rows)
            ax.set_xlim(0, m.total_gb)
            _thousands(ax, "x")
            ax.grid(axis="y", visible=False)
        axs[-1].set_xlabel("HBM per slice (GB = 1e9 bytes)")
        held = any(u.handoff_reserve_gb > 0 for m in d.memory for u in m.in_use)
        fig.legend(handles=[Patch(color=c, label=n) for n, c in segs] + [Patch(color=C["green"], label="KV resident at the operating point")]
                   + ([Patch(color=C["purple"], label="KV held for handoffs in flight (p99)")] if held else []),
                   loc="upper right", ncol=3 if held else 5, fontsize=7.5, frameon=False)
        _suptitle(fig, "Slice memory map", width=0.25)
        small: dict[int, list[str]] = {k: [] for k in range(n)}
        for _ in range(3):
            for k, (ax, m) in enumerate(zip(axs, d.memory)):
                ax.set_title(f"{m.slice}: {m.total_gb:,.0f} GB of HBM" + (f" ({', '.join(small[k])})" if small[k] else ""), loc="left")
            _finish(fig, rect=(0, 0, 1, 0.96))
            r = _renderer(fig)
            cut = [x for x in labels if not _fits(x[1], x[2], r)]
            if not cut:
                break
            for x in cut:
                x[1].remove()
                labels.remove(x)
                small[x[0]].append(x[3])
        return fig


def fig_decode_curves(d) -> Figure:
    """Per tier and slice shape: TPOT p50 and at the SLO percentile against the batch,
    speculation off and at the plan's draft length, with the SLO line, the knees and the
    plan's operating points (top); output tokens/s per chip (bottom)."""
    curves = d.decode_curves
    with style():
        n = len(curves)
        fig = Figure(figsize=(5.0 * n + 0.6, 7.6))
        axs = fig.subplots(2, n, squeeze=False, sharex="col")
        for j, c in enumerate(curves):
            a, b = axs[0][j], axs[1][j]
            pc = f"p{c.percentile:g}"
            xlab = "sequences decoding per replica" if c.mode == "replica" else "batch (resident requests per slice)"
            a.plot(c.batch, c.tpot_p50_ms, color=C["blue"], lw=1.2, ls="--", label="TPOT p50" + (" (with prefill interleaved)" if c.mode == "replica" else ", speculation off"))
            a.plot(c.batch, c.tpot_ms, color=C["blue"], lw=1.8, label=f"TPOT {pc}" + ("" if c.mode == "replica" else ", speculation off"))
            b.plot(c.batch, c.tokens_per_s_per_chip, color=C["blue"], lw=1.8, label="speculation off" if c.spec_draft_tokens else "output tokens/s per chip")
            if c.spec_draft_tokens:
                a.plot(c.batch, c.spec_tpot_p50_ms, color=C["orange"], lw=1.2, ls="--", label=f"TPOT p50, draft k={c.spec_draft_tokens}")
                a.plot(c.batch, c.spec_tpot_ms, color=C["orange"], lw=1.8, label=f"TPOT {pc}, draft k={c.spec_draft_tokens}")
                b.plot(c.batch, c.spec_tokens_per_s_per_chip, color=C["orange"], lw=1.8, label=f"draft k={c.spec_draft_tokens}")
            if c.tpot_limit_ms is not None:
                a.axhline(c.tpot_limit_ms, color=C["red"], lw=1.2, label=f"{pc} TPOT SLO {c.tpot_limit_ms:g} ms")
            full = c.kv_capacity if (c.kv_capacity and c.kv_capacity <= c.batch[-1]) else None
            for knee, col, name in ((c.knee, C["blue"], "knee" if c.mode == "decode" else "SLO-limited rate"),
                                    (c.spec_knee, C["orange"], f"knee k={c.spec_draft_tokens}")):
                if knee:
                    tag = " = KV pool full" if knee == full else ""
                    b.axvline(knee, color=col, lw=1.0, ls=":", label=f"{name}{tag}: B={knee:,}")
                    a.axvline(knee, color=col, lw=1.0, ls=":")
            if full and full not in (c.knee, c.spec_knee):
                b.axvline(full, color=C["grey"], lw=1.0, ls="-.", label=f"KV pool full: B={full:,}")
                a.axvline(full, color=C["grey"], lw=1.0, ls="-.")
            marks = []
            for p in c.points:
                same = next((m for m in marks if (m[0].batch, m[0].draft_tokens) == (p.batch, p.draft_tokens)), None)
                if same is not None:
                    same[1] = same[1].replace("normal:", "normal and failover:")
                    continue
                marks.append([p, p.label])
            for p, label in marks:
                mk = "o" if label.startswith("normal") or c.mode == "replica" else "s"
                col = C["orange"] if p.draft_tokens else C["blue"]
                a.plot([p.batch], [p.tpot_ms], marker=mk, ms=8, mfc="none" if mk == "s" else col, mec=C["black"], mew=1.2, ls="none",
                       label=f"plan, {label}: {p.tpot_ms:.1f} ms")
                b.plot([p.batch], [p.tokens_per_s_per_chip], marker=mk, ms=8, mfc="none" if mk == "s" else col, mec=C["black"], mew=1.2, ls="none",
                       label=f"plan, {label}: {p.tokens_per_s_per_chip:,.0f} tok/s/chip")
            hi = max([*c.tpot_ms, *(c.spec_tpot_ms or [0])])
            lim = c.tpot_limit_ms or hi
            a.set_ylim(0, min(hi, 3 * lim) * 1.05)
            a.set_ylabel("TPOT (ms)")
            b.set_ylabel("output tokens/s per chip")
            b.set_xlabel(xlab)
            b.set_ylim(bottom=0)
            _thousands(b)
            _thousands(b, "x")
            regions = ", ".join(c.regions)
            a.set_title(f"tier {c.tier} on {c.slice}" + (f", {c.schedule}" if c.schedule else "") + f" ({regions})", loc="left")
            lo, hi = a.get_ylim()
            a.set_ylim(lo, lo + (hi - lo) * 1.8)  # headroom above the curves: the legend sits there, over none of them
            a.legend(loc="upper left", framealpha=0.9)
            b.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=7.5, frameon=False)
        _suptitle(fig, "Decode: batch -> TPOT, the SLO knee and the plan's operating points")
        _finish(fig)
        return fig


def fig_ttft(d) -> Figure:
    """TTFT at the SLO percentile against prefill utilisation (the hockey stick), one
    panel per tier, one curve per region's pool; the plan's normal-peak and sizing
    points marked, and the sizing scenario's own (colder) traffic-mix curve dashed."""
    tiers = sorted({c.tier for c in d.ttft_curves}, key=lambda t: [x.tier for x in d.ttft_curves].index(t))
    with style():
        rows, cols = _grid(len(tiers), 2)
        fig = Figure(figsize=(5.6 * cols + 0.4, 5.6 * rows))
        axs = fig.subplots(rows, cols, squeeze=False)
        for k, t in enumerate(tiers):
            ax = axs[k // cols][k % cols]
            cs = [c for c in d.ttft_curves if c.tier == t]
            lim = cs[0].ttft_limit_ms
            for i, c in enumerate(cs):
                col = SERIES[i % len(SERIES)]
                pc = f"p{c.percentile:g}"
                who = f"{c.region}: {c.slices} x {c.slice}" if c.mode == "prefill" else f"{c.region}: {c.slices} replicas of {c.slice}"
                ax.plot(c.utilisation, c.ttft_ms, color=col, lw=1.8, label=f"{who}, TTFT {pc}")
                if c.ttft_p50_ms:
                    ax.plot(c.utilisation, c.ttft_p50_ms, color=col, lw=1.0, ls=":")
                if c.sizing_utilisation:
                    ax.plot(c.sizing_utilisation, c.sizing_ttft_ms, color=col, lw=1.2, ls="--",
                            label=f"  its sizing mix ({c.sizing_label}, {c.sizing_slices} slices)")
                for p in c.points:
                    if p.ttft_ms is None:
                        continue
                    mk = "o" if p.label.startswith("normal") else "s"
                    ax.plot([p.utilisation], [p.ttft_ms], marker=mk, ms=7, mfc=col if mk == "o" else "none", mec=C["black"], ls="none")
            if lim is not None:
                ax.axhline(lim, color=C["red"], lw=1.2)
                ax.text(0.01, lim, f" TTFT SLO {lim:g} ms", color=C["red"], va="bottom", fontsize=7.5, transform=ax.get_yaxis_transform())
            ax.set_ylim(0, (lim or max(max(c.ttft_ms) for c in cs)) * 1.6)
            mode = cs[0].mode
            if mode == "prefill":
                # logit scale: 50%, 90%, 99%, 99.9% evenly spaced -- a pool of hundreds of slices turns its stick past 99%
                ax.set_xscale("logit")
                ax.set_xlim(0.05, 0.9999)
                ax.set_xticks([0.1, 0.5, 0.9, 0.99, 0.999, 0.9999])
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v * 100:.4g}%"))
                ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _p: ""))
                ax.set_xlabel("prefill utilisation, busy fraction of the pool (logit scale)")
            else:
                ax.set_xlim(0, 1)
                _pct_axis(ax)
                ax.set_xlabel("prefill share of replica time (the rest decodes)")
                for c in cs:
                    if c.limit_utilisation is not None:
                        ax.axvline(c.limit_utilisation, color=C["grey"], lw=1.0, ls="--",
                                   label=f"{c.region}: the SLO-limited rate ({c.limit_binds} binds)")
                    if c.utilisation:
                        ax.annotate("beyond: decode cannot keep up\n(no steady state)", (c.utilisation[-1], c.ttft_ms[-1]),
                                    xytext=(8, 0), textcoords="offset points", fontsize=7, va="center")
            ax.set_ylabel("TTFT (ms)")
            ax.set_title(f"tier {t}", loc="left")
            h, lab = ax.get_legend_handles_labels()
            from matplotlib.lines import Line2D

            h += [Line2D([], [], marker="o", ls="none", mfc=C["grey"], mec=C["black"])]
            lab += ["plan at the normal peak"]
            if any(c.sizing_utilisation for c in cs):
                h += [Line2D([], [], marker="s", ls="none", mfc="none", mec=C["black"])]
                lab += ["plan in its sizing scenario"]
            ax.legend(h, lab, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=7.5, frameon=False)
        for k in range(len(tiers), rows * cols):
            axs[k // cols][k % cols].set_visible(False)
        _suptitle(fig, "Prefill: TTFT against utilisation (dotted: p50); the queue's hockey stick and where the plan sits on it")
        _finish(fig)
        return fig


def fig_fleet(d) -> Figure:
    """Chips per region, stacked by tier x role, warm pool on top."""
    with style():
        regions = sorted({r.region for r in d.fleet})
        keys = []
        for r in d.fleet:
            k = (r.tier, r.role)
            if k not in keys:
                keys.append(k)
        keys.sort(key=lambda k: (k[1] == "warm pool", k[1], k[0]))
        fig = Figure(figsize=(max(5.0, 1.6 * len(regions) + 3.5), 4.4))
        ax = fig.add_subplot()
        bottom = [0.0] * len(regions)
        for i, k in enumerate(keys):
            vals = [sum(r.chips for r in d.fleet if r.region == g and (r.tier, r.role) == k) for g in regions]
            col = C["light"] if k[1] == "warm pool" else SERIES[i % len(SERIES)]
            ax.bar(regions, vals, bottom=bottom, color=col, edgecolor="white", label="warm pool" if k[1] == "warm pool" else f"{k[0]} {k[1]}", width=0.6)
            for x, (v, b0) in enumerate(zip(vals, bottom)):
                if v > 0.05 * max(1, max(sum(r.chips for r in d.fleet if r.region == g) for g in regions)):
                    ax.text(x, b0 + v / 2, f"{v:,}", ha="center", va="center", fontsize=7.5, color=_ink(col))
            bottom = [b0 + v for b0, v in zip(bottom, vals)]
        for x, tot in enumerate(bottom):
            ax.text(x, tot, f"{tot:,.0f}", ha="center", va="bottom", fontsize=8, fontweight="bold")
        ax.set_ylabel("chips")
        _thousands(ax)
        ax.set_title("Fleet: chips per region by tier and role", loc="left")
        h, lab = ax.get_legend_handles_labels()
        ax.legend(h[::-1], lab[::-1], loc="upper left", bbox_to_anchor=(1.0, 1.0))
        ax.grid(axis="x", visible=False)
        _finish(fig)
        return fig


def fig_hourly(d) -> Figure:
    """Per region: the 24 hourly loads against the requests/s its installed pools carry
    within the SLOs on its own traffic mix (normal operation); the gap below is idle
    capacity (batch infill). The region-loss scenarios (triangles: the load each offers
    the survivor) are zoomed in a strip above with what carries them: what the survivor
    carries after the admission clamp and batch shedding (dot) and its capacity in that
    loss, warm slices joined, at the failover operating points, on the loss's own traffic
    mix (dash) -- a loss load above the normal capacity line is not an SLO breach."""
    from matplotlib.lines import Line2D

    with style():
        rows, cols = _grid(len(d.hourly), 3)
        zoom = any(h.losses for h in d.hourly)
        fig = Figure(figsize=(4.6 * cols + 0.4, (6.1 if zoom else 4.6) * rows + 0.4))
        if zoom:
            grid = fig.subplots(2 * rows, cols, squeeze=False, gridspec_kw={"height_ratios": [1.5, 3.0] * rows})
            strips, axs = [g for g in grid[0::2]], [g for g in grid[1::2]]
        else:
            axs, strips = fig.subplots(rows, cols, squeeze=False), None
        main0, strip0 = axs[0][0], strips[0][0] if zoom else None
        hours = list(range(24))
        lost_all = sorted({m.lost for h in d.hourly for m in h.losses})
        colour = {x: SERIES[(i + 1) % len(SERIES)] for i, x in enumerate(lost_all)}
        for k, h in enumerate(d.hourly):
            ax = axs[k // cols][k % cols]
            if ax is not main0:
                ax.sharey(main0)
            ax.fill_between(hours, h.load_rps, [h.capacity_rps] * 24, color=C["green"], alpha=0.15, step="mid", label="idle capacity (batch infill)")
            ax.step(hours, h.load_rps, where="mid", color=C["blue"], lw=1.8, label="own load")
            ax.axhline(h.capacity_rps, color=C["black"], lw=1.2, label=f"normal-operation capacity: installed slices, own mix ({h.binding} binds)")
            if abs(h.policy_capacity_rps - h.capacity_rps) > 1e-6 * max(h.capacity_rps, 1.0):
                ax.axhline(h.policy_capacity_rps, color=C["grey"], lw=1.0, ls="--", label="the same at the plan's normal operating policy")
            handles, labels = ax.get_legend_handles_labels()
            title = f"{h.region}: normal capacity {h.capacity_rps:,.0f} req/s"
            if h.losses:
                st = strips[k // cols][k % cols]
                hs = sorted({m.hour for m in h.losses})
                st.set_xlim(hs[0] - 0.6, hs[-1] + 0.6)
                st.set_xticks(hs)
                st.set_xticklabels([f"{x:02d}:00" for x in hs])
                st.grid(axis="x", visible=False)
                if st is not strip0:
                    st.sharey(strip0)
                st.axhline(h.capacity_rps, color=C["black"], lw=1.2)
                lost = sorted({m.lost for m in h.losses})
                for i, x in enumerate(lost):
                    ms = [m for m in h.losses if m.lost == x]
                    col = colour[x]
                    off = (i - (len(lost) - 1) / 2) * 0.7 / max(len(lost), 1)
                    xs = [m.hour + off for m in ms]
                    for m, xx in zip(ms, xs):
                        st.plot([xx] * 2, [m.carried_rps, m.offered_rps], color=col, lw=1.0)
                    st.plot(xs, [m.offered_rps for m in ms], marker="^", ms=6, mfc="none", mec=col, mew=1.3, ls="none")
                    st.plot(xs, [m.carried_rps for m in ms], marker="o", ms=4.5, color=col, ls="none")
                    st.plot([xx for m, xx in zip(ms, xs) if m.capacity_rps is not None], [m.capacity_rps for m in ms if m.capacity_rps is not None],
                            marker="_", ms=14, mew=2.0, color=C["black"], ls="none")
                    ax.plot(xs, [m.offered_rps for m in ms], marker="^", ms=5, mfc="none", mec=col, mew=1.2, ls="none")
                    handles.append(Line2D([], [], marker="^", mfc="none", mec=col, mew=1.3, ls="none"))
                    labels.append(f"{x} lost: load offered (own + diverted)")
                handles += [Line2D([], [], marker="o", ms=4.5, color=C["grey"], ls="none"),
                            Line2D([], [], marker="_", ms=14, mew=2.0, color=C["black"], ls="none")]
                labels += ["carried, after the admission clamp and batch shed",
                           "capacity in that loss: warm slices joined, failover operating points, the loss's mix"]
                st.set_ylabel("req/s")
                st.set_xlabel("the region-loss hours, zoomed (UTC)", fontsize=7.5, labelpad=1)
                _thousands(st)
                caps = [m.capacity_rps for m in h.losses if m.capacity_rps is not None]
                if caps:
                    lo, hi = min(caps), max(caps)
                    title += f"; in a region loss {lo:,.0f}" + (f"-{hi:,.0f}" if round(hi) != round(lo) else "") + " req/s"
                st.set_title(title, loc="left")
            else:
                if zoom:
                    strips[k // cols][k % cols].set_visible(False)
                ax.set_title(title, loc="left")
            ax.set_xlim(-0.5, 23.5)
            ax.set_xticks(range(0, 24, 3))
            ax.set_xlabel("hour (UTC)")
            ax.set_ylabel("requests/s")
            _thousands(ax)
            ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=7, frameon=False)
        top = max([max(h.load_rps) for h in d.hourly] + [h.capacity_rps for h in d.hourly] + [m.offered_rps for h in d.hourly for m in h.losses])
        main0.set_ylim(0, top * 1.08)
        if zoom:
            ys = [y for h in d.hourly if h.losses for y in [h.capacity_rps] + [v for m in h.losses for v in (m.offered_rps, m.carried_rps, m.capacity_rps)
                                                                                  if v is not None]]
            pad = max(max(ys) - min(ys), 1.0) * 0.12
            strip0.set_ylim(min(ys) - pad, max(ys) + pad)
        for k in range(len(d.hourly), rows * cols):
            axs[k // cols][k % cols].set_visible(False)
            if zoom:
                strips[k // cols][k % cols].set_visible(False)
        _suptitle(fig, "Hourly load against capacity per region (capacity: the requests/s of a traffic mix the region's pools carry within the SLOs)")
        _finish(fig)
        return fig


def _cascade_panel(ax, survivors, steps: list[str], walk, legend) -> None:
    """One waterfall of a region loss: per survivor (one colour each) ``walk(s)`` gives
    the bars as (low, high, kind) per step -- kind 'need' (solid), 'add' (pale),
    'free' (hatched: a mitigation) -- plus the need after the mitigations (dashed, from
    the first mitigation on) and the residual (red, on top of the last bar)."""
    width = 0.8 / max(len(survivors), 1)
    for i, s in enumerate(survivors):
        off = (i - (len(survivors) - 1) / 2) * width
        col = SERIES[i % len(SERIES)]
        bars, final, residual = walk(s)
        for x, (lo, hi, kind) in enumerate(bars):
            ax.bar(x + off, hi - lo, bottom=lo, width=width * 0.92, color=col, alpha=1.0 if kind == "need" else 0.55, edgecolor=col,
                   hatch="//" if kind == "free" else None, label=legend(s) if x == 0 else None)
        first_free = next((x for x, b in enumerate(bars) if b[2] == "free"), len(bars) - 2)
        ax.plot([first_free - 1 + off - width / 2, len(bars) - 1 + off + width / 2], [final] * 2, color=col, lw=1.0, ls="--")
        if residual > 0:
            top = bars[-1][1]
            ax.bar(len(bars) - 1 + off, residual, bottom=top, width=width * 0.92, color=C["red"], alpha=0.8)
            ax.text(len(bars) - 1 + off, top + residual, f"short\n{residual:,}", ha="center", va="bottom", fontsize=7, color=C["red"])
    ax.set_xticks(range(len(steps)))
    ax.set_xticklabels(steps, fontsize=7.5)
    _thousands(ax)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=7, frameon=False)
    ax.grid(axis="x", visible=False)


def fig_cascade(d) -> Figure:
    """Per lost region (its peak hour) and survivor: the prefill (or replica) chips the
    survivor's own load needs, what the failover adds in the steady state and during
    the cache re-warm, what batch shedding and the admission clamp take off, against
    the chips installed and the warm slices that join; a residual in red. Below, the
    same walk for the decode chips (own need, failover need at the failover operating
    points, shed, clamp, installed, warm), so every step that closes a gap is drawn."""
    ev = d.cascade
    with style():
        rows, cols = _grid(len(ev), 3)
        decode = any(s.decode_need_failover_chips or s.decode_installed_chips for e in ev for s in e.survivors)
        sub = 2 if decode else 1
        fig = Figure(figsize=(5.2 * cols + 0.4, (9.6 if decode else 5.0) * rows + 0.5))
        grid = fig.subplots(rows * sub, cols, squeeze=False, gridspec_kw={"height_ratios": [1.0, 0.9][:sub] * rows})
        front = "replica" if d.serving_mode == "colocated" else "prefill"
        steps = ["own\nload", "+ failover\nsteady", "+ re-warm\ndip", "- batch\nshed", "- clamp", "installed", "+ warm\nslices"]

        def front_walk(s):
            if s.need_transient_chips is None:  # no pool size holds some pool's unmitigated mix: no failover bars to draw (the legend says)
                own = s.need_own_chips
                steady = own if s.need_steady_chips is None else s.need_steady_chips
                return ([(0, own, "need"), (own, steady, "add"), (own, own, "add"), (own, own, "free"), (own, own, "free"),
                         (0, s.installed_chips, "need"), (s.installed_chips, s.installed_chips + s.warm_chips, "add")], s.need_final_chips, s.residual_chips)
            return ([(0, s.need_own_chips, "need"), (s.need_own_chips, s.need_steady_chips, "add"), (s.need_steady_chips, s.need_transient_chips, "add"),
                     (s.need_transient_chips - s.shed_chips, s.need_transient_chips, "free"),
                     (s.need_transient_chips - s.shed_chips - s.clamp_chips, s.need_transient_chips - s.shed_chips, "free"),
                     (0, s.installed_chips, "need"), (s.installed_chips, s.installed_chips + s.warm_chips, "add")], s.need_final_chips, s.residual_chips)

        def front_legend(s):
            tail = f"\n{', '.join(s.unbounded_pools)}: no size holds before the mitigations" if s.unbounded_pools else ""
            if s.traffic_multiplier is None:  # no traffic of its own: every request is diverted
                return (f"{s.region}: no traffic of its own, all of it diverted; hit rate {s.hit_rate_steady:.0%} steady -> "
                        f"{s.hit_rate_transient:.0%} re-warm" + tail)
            return (f"{s.region}: traffic x{s.traffic_multiplier:.2f}, hit rate {s.hit_rate_before:.0%} -> {s.hit_rate_steady:.0%} steady -> "
                    f"{s.hit_rate_transient:.0%} re-warm, prefill x{s.prefill_multiplier_steady:.2f} -> x{s.prefill_multiplier_transient:.2f}" + tail)

        def decode_walk(s):
            need = s.decode_need_failover_chips
            return ([(0, s.decode_need_own_chips, "need"), (s.decode_need_own_chips, need, "add"), (need - s.decode_shed_chips, need, "free"),
                     (need - s.decode_shed_chips - s.decode_clamp_chips, need - s.decode_shed_chips, "free"), (0, s.decode_installed_chips, "need"),
                     (s.decode_installed_chips, s.decode_installed_chips + s.decode_warm_chips, "add")], s.decode_need_final_chips, s.decode_residual_chips)

        def decode_legend(s):
            return (f"{s.region}: {s.decode_need_own_chips:,} -> {s.decode_need_failover_chips:,} - {s.decode_shed_chips:,} shed - "
                    f"{s.decode_clamp_chips:,} clamp = {s.decode_need_final_chips:,} needed; {s.decode_installed_chips:,} installed + "
                    f"{s.decode_warm_chips:,} warm" + (f", {s.decode_residual_chips:,} short" if s.decode_residual_chips else ""))

        first = {}
        for k, e in enumerate(ev):
            for j in range(sub):
                ax = grid[(k // cols) * sub + j][k % cols]
                if j in first:
                    ax.sharey(first[j])
                else:
                    first[j] = ax
                if j == 0:
                    _cascade_panel(ax, e.survivors, steps, front_walk, front_legend)
                    ax.set_ylabel(f"{front} chips")
                    res = "no residual" if e.residual_request_equivalents <= 0 else f"residual {e.residual_request_equivalents:,.3g} req/s"
                    ax.set_title(f"lose {e.lost} at {e.hour:02d}:00 UTC: {front} chips, {res}", loc="left")
                else:
                    _cascade_panel(ax, e.survivors, ["own\nload", "+ failover", "- batch\nshed", "- clamp", "installed", "+ warm\nslices"],
                                   decode_walk, decode_legend)
                    ax.set_ylabel("decode chips")
                    short = sum(s.decode_residual_chips for s in e.survivors)
                    ax.set_title(f"lose {e.lost} at {e.hour:02d}:00 UTC: decode chips, " + (f"{short:,} short" if short else "no residual"), loc="left")
        for k in range(len(ev), rows * cols):
            for j in range(sub):
                grid[(k // cols) * sub + j][k % cols].set_visible(False)
        for j, ax in first.items():
            ax.set_ylim(bottom=0)
        _suptitle(fig, "Region-loss cascade per survivor at the lost region's peak hour (dashed: the need after batch shed and the clamp)")
        _finish(fig)
        return fig


def fig_cost(d) -> Figure:
    """$ per 1M output tokens stacked by what the chips are for, three ways: at the
    daily mean demand (the plan's headline), at the sum of regional peaks (the brief's
    convention), and with the batch infill of the trough counted."""
    segs = d.cost_segments
    cols = {"prefill": C["blue"], "decode": C["orange"], "replicas": C["purple"], "headroom": C["yellow"], "failover reserve": C["red"],
            "new pods": C["grey"]}
    if d.cost.get("per_1m_withheld"):  # the plan does not serve all the demand: no $ per 1M figure holds
        with style():
            fig = Figure(figsize=(8.6, 2.0))
            ax = fig.add_subplot()
            ax.axis("off")
            ax.text(0.5, 0.5, "$ per 1M tokens withheld:\n" + textwrap.fill(d.cost["per_1m_withheld"], 110), ha="center", va="center",
                    fontsize=8.5, transform=ax.transAxes)
            _suptitle(fig, "Cost per 1M tokens")
            _finish(fig)
            return fig
    with style():
        fig = Figure(figsize=(8.6, 4.2))
        ax = fig.add_subplot()
        bars = [("daily mean demand", "usd_per_1m_output_daily_mean"), ("sum of regional peaks\n(the brief's convention)", "usd_per_1m_output_at_peak"),
                ("with batch infill\nof the trough", "usd_per_1m_output_with_infill")]
        biggest = max(sum(getattr(t, f) for t in segs) for _n, f in bars)
        inside = []  # (value label, its segment): a label wider than its segment is dropped (the table has it)
        for x, (_name, f) in enumerate(bars):
            left = 0.0
            for s in segs:
                v = getattr(s, f)
                col = cols.get(s.name, C["grey"])
                bar = ax.barh(x, v, left=left, color=col, edgecolor="white", label=s.name if x == 0 else None, height=0.6)
                if v >= 0.05 * biggest:
                    inside.append((ax.text(left + v / 2, x, f"${v:.2f}", ha="center", va="center", fontsize=7.5, color=_ink(col)),
                                   bar.patches[0]))
                left += v
            ax.text(left, x, f"  ${left:.3f}", va="center", fontsize=8.5, fontweight="bold")
        ax.set_yticks(range(len(bars)))
        ax.set_yticklabels([b[0] for b in bars])
        ax.invert_yaxis()
        ax.set_xlabel("USD per 1M output tokens (all fleet cost carried by output tokens)")
        ax.set_xlim(0, max(sum(getattr(s, bars[0][1]) for s in segs), 1e-9) * 1.25)
        ax.legend(loc="lower right", framealpha=0.9)
        ax.set_title("Cost per 1M output tokens: what the chips are for", loc="left")
        ax.grid(axis="y", visible=False)
        _finish(fig)
        r = _renderer(fig)
        for t, patch in inside:
            if not _fits(t, patch, r):
                t.remove()
        return fig


# ----------------------------------------------------------------------------- sweeps


def _status_mark(s) -> str:
    cut = "cut at the time limit" if getattr(s, "time_limited", False) else ""  # not reproducible: the table's notes say so
    return "" if s.status == "verified" and not cut else f" [{', '.join(filter(None, [s.status if s.status != 'verified' else '', cut]))}]"


def fig_no_solution(rep, what: str) -> Figure:
    """What a sweep draws when its base has no plan: no bars (there is nothing to move
    from), the base's status and why."""
    b = rep.base
    with style():
        fig = Figure(figsize=(9.5, 2.6))
        ax = fig.add_subplot()
        ax.set_axis_off()
        msg = b.message or f"status {b.status}"
        msg = msg[:1].upper() + msg[1:]
        t = ax.text(0.0, 0.75, f"No chart: the base instance has no solution ({b.status}{', time limit' if b.termination == 'time_limit' else ''}).",
                    fontsize=11, fontweight="bold", transform=ax.transAxes, va="top")
        t2 = ax.text(0.0, 0.45, f"{msg}. Every bar is measured from the base; re-run with a longer --time-limit or fix the instance.",
                     fontsize=9, transform=ax.transAxes, va="top", color=C["red"])
        _wrap_to(t2, 0.95 * fig.bbox.width, _renderer(fig))
        del t
        _suptitle(fig, f"{what} of {rep.instance_name}")
        fig.tight_layout()
        return fig


#: The mark of a sweep point that needs more pods than the instance allows (the sweeps
#: lift the pod inventory, so the point solves, and is flagged instead).
BEYOND_MARK = "\u2020"


def _with_unit(p, v: float) -> str:
    """A parameter value with its unit: '300 tokens', '40%', '1.6x'."""
    t = p.fmt(v)
    return f"{t} tokens" if p.unit == "tokens" else f"{t}x" if p.unit == "ratio" else t


def _range_label(r, p) -> str:
    """A tornado row's label: the prior, its range and base value, in its unit."""
    lo, hi, b = p.fmt(r.low_value), p.fmt(r.high_value), p.fmt(r.base_value)
    if p.unit == "tokens":
        return f"{r.label}\n{lo} .. {hi} tokens (base {b})"
    if p.unit == "ratio":
        return f"{r.label}\n{lo}x .. {hi}x (base {b}x)"
    return f"{r.label}\n{lo} .. {hi} (base {b})"


def fig_tornado(rep) -> Figure:
    """Tornado: per prior, the plan's chips and $/1M output tokens at the low (blue) and
    high (orange) end of its range, as bars from the base; rows sorted by the $/1M swing.

    Points that are not verified are hatched and labelled with their status, and marked
    with an X where the bar has no width; points beyond the instance's pod inventory get
    a dashed red outline and a dagger, their regions listed under the plot. A prior that
    moves nothing here draws no bar: the row says 'not applicable' and why. An end equal
    to the base has no bar; when neither end moves, one label names both; when both
    ends move the same way, each gets half the row."""
    from matplotlib.lines import Line2D

    from fleetplan.report.sensitivity import PARAMS

    if rep.base.status in ("no_solution", "invalid"):
        return fig_no_solution(rep, "Sensitivity")
    rows = list(reversed(rep.rows))
    base = rep.base
    beyond = [f"{BEYOND_MARK} {r.label} at {_with_unit(PARAMS[r.param], getattr(r, e + '_value'))}: {'; '.join(getattr(r, e).beyond_inventory)}"
              for r in rep.rows if r.applicable for e in ("low", "high") if getattr(r, e).beyond_inventory]
    flat_unverified = False
    with style():
        fig = Figure(figsize=(12.0, 0.62 * len(rows) + 1.8))
        axs = fig.subplots(1, 2, sharey=True)
        anchored, na = {0: [], 1: []}, []
        for k, (ax, f, unit, fmt) in enumerate(((axs[0], "chips", "chips", "{:,.0f}"),
                                                (axs[1], "cost_per_1m_output_tokens_usd", "$ per 1M output tokens (daily mean)", "${:.3f}"))):
            b0 = getattr(base, f) or 0.0
            vals = [b0] + [getattr(getattr(r, e), f) for r in rows if r.applicable for e in ("low", "high")
                           if getattr(getattr(r, e), f) is not None and getattr(r, e).status not in ("no_solution", "invalid")]
            span = max(max(vals) - min(vals), 1e-9)
            eps = 1e-9 * max(abs(b0), 1.0)
            for y, r in enumerate(rows):
                p = PARAMS[r.param]
                if not r.applicable:
                    why = r.note.removeprefix("not applicable: ") or "the prior moves nothing in this instance"
                    na.append(ax.text(0.02, y, f"not applicable: {why}", transform=ax.get_yaxis_transform(), ha="left", va="center", fontsize=7.5,
                                      color=C["grey"], style="italic", bbox=dict(facecolor="white", edgecolor="none", pad=1.5), zorder=4))
                    continue
                ends = []
                for e, col in (("low", C["blue"]), ("high", C["orange"])):
                    s = getattr(r, e)
                    v = None if s.status in ("no_solution", "invalid") else getattr(s, f)  # no plan: its zeros are no value
                    kind = "none" if v is None else "flat" if abs(v - b0) <= eps else "bar"
                    dagger = f" {BEYOND_MARK}" if s.beyond_inventory else ""
                    mark = (_status_mark(s) if kind != "none" else "") + dagger
                    ends.append(dict(end=e, col=col, s=s, v=v, kind=kind, mark=mark, value=p.fmt(getattr(r, e + "_value"))))
                moved = [x for x in ends if x["kind"] == "bar"]
                same_side = len(moved) == 2 and (moved[0]["v"] - b0) * (moved[1]["v"] - b0) > 0
                for i, x in enumerate(ends):
                    x["y"], x["h"] = ((y + 0.15, 0.3) if i == 0 else (y - 0.15, 0.3)) if same_side else (y, 0.6)
                    ok = x["s"].status == "verified"
                    if x["kind"] == "bar":
                        ax.barh(x["y"], x["v"] - b0, left=b0, height=x["h"], color=x["col"], alpha=0.85 if ok else 0.35, hatch=None if ok else "xx",
                                edgecolor=x["col"])
                        if x["s"].beyond_inventory:
                            ax.barh(x["y"], x["v"] - b0, left=b0, height=x["h"], fill=False, edgecolor=C["black"], lw=1.4, ls="--")
                    elif x["kind"] == "flat" and not ok:
                        # no width to hatch: an X on the base line says the point is not verified
                        ax.plot([b0], [y + (0.12 if i == 0 else -0.12)], marker="X", ms=8, color=x["col"], mec=C["black"], mew=0.8, ls="none", zorder=3)
                        flat_unverified = x["x_mark"] = True
                still = [x for x in ends if x["kind"] != "bar"]
                # a label that starts at the base line clears an X drawn there
                gap = 7 if any(x.get("x_mark") for x in ends) else 0

                def at_base(txt, ha):
                    return ax.annotate(txt, (b0, y), xytext=(gap if ha == "left" else -gap, 0), textcoords="offset points", ha=ha, va="center",
                                       fontsize=7)

                if not moved:
                    flats = [x for x in still if x["kind"] == "flat"]
                    parts = []
                    if flats:
                        parts.append(" / ".join(f"{x['end']} {x['value']}{x['mark']}" for x in flats) + f":\n{fmt.format(flats[0]['v'])} (no change)")
                    parts += [f"{x['end']} {x['value']}: {x['s'].status}{x['mark']}" for x in still if x["kind"] == "none"]
                    anchored[k].append(at_base("\n".join(" " + p_ + " " for p_ in "\n".join(parts).split("\n")), "left"))
                    continue
                for x in moved:
                    ha = "left" if x["v"] >= b0 else "right"
                    anchored[k].append(ax.text(x["v"], x["y"], f" {x['value']}: {fmt.format(x['v'])}{x['mark']} ", ha=ha, va="center", fontsize=7))
                for x in still:  # on the side away from the end that moved
                    ha = "right" if moved[0]["v"] >= b0 else "left"
                    txt = (f" {x['value']}: {fmt.format(x['v'])}{x['mark']} (no change) " if x["kind"] == "flat"
                           else f" {x['end']} {x['value']}: {x['s'].status}{x['mark']} ")
                    anchored[k].append(at_base(txt, ha))
            ax.axvline(b0, color=C["black"], lw=1.0)
            ax.set_xlim(max(0.0, min(vals) - 0.45 * span), max(vals) + 0.45 * span)
            ax.set_xlabel(unit)
            ax.set_title(f"{unit.split(' (')[0]}: base {fmt.format(b0)}", loc="left")
            # chips and dollars are never negative: an axis widened left of 0 for a label has no ticks there
            ax.xaxis.set_major_formatter(FuncFormatter((lambda v, _p: "" if v < 0 else f"{v:,.0f}") if f == "chips" else
                                                       (lambda v, _p: "" if v < 0 else f"{v:g}")))
            ax.grid(axis="y", visible=False)
        axs[0].set_yticks(range(len(rows)))
        axs[0].set_yticklabels([_range_label(r, PARAMS[r.param]) for r in rows], fontsize=8)
        axs[0].set_ylim(-0.6, len(rows) - 0.4)
        handles = [Patch(color=C["blue"], label="low end of the range"), Patch(color=C["orange"], label="high end of the range"),
                   Patch(facecolor="white", edgecolor=C["grey"], hatch="xx", label="not verified (shortfall / invalid)")]
        if flat_unverified:
            handles.append(Line2D([], [], marker="X", ms=8, color=C["grey"], mec=C["black"], mew=0.8, ls="none",
                                  label="not verified, no change from the base (no bar to hatch)"))
        if beyond:
            handles.append(Patch(facecolor="white", edgecolor=C["black"], lw=1.4, ls="--",
                                 label=f"{BEYOND_MARK} beyond the instance's pod inventory (listed below)"))
        bottom = _footnote(fig, beyond)
        t = _suptitle(fig, f"Sensitivity of the {rep.instance_name} plan to its priors (each bar one re-solve)")
        r = _renderer(fig)
        H = fig.bbox.height
        th = t.get_window_extent(r).height
        leg = fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.005, 1 - (th + 8) / H), ncol=len(handles), fontsize=8, frameon=False)
        if leg.get_window_extent(r).width > 0.97 * fig.bbox.width:
            leg.remove()
            leg = fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.005, 1 - (th + 8) / H), ncol=math.ceil(len(handles) / 2),
                             fontsize=8, frameon=False)
        top = 1 - (th + leg.get_window_extent(r).height + 16) / H
        _finish(fig, rect=(0, bottom, 1, top))
        for ax in axs:
            _fit_texts_x(ax, anchored[list(axs).index(ax)])
        for t in na:
            _wrap_to(t, 0.95 * t.axes.get_window_extent(r).width, r)
        return fig


def fig_levers(rep) -> Figure:
    """The levers ranked: $/1M output tokens each saves (on - off), largest first;
    savings within the solver gap hatched, levers whose sides are not verified pale.
    Every value label sits right of the zero line (or of a bar that costs more), the
    axis widened to hold it; levers that do not apply, and why, are listed under the
    plot instead of drawn."""
    if rep.base.status in ("no_solution", "invalid"):
        return fig_no_solution(rep, "Cost levers")
    rows = [r for r in rep.rows if r.delta_usd_per_1m_output is not None]
    na = [r for r in rep.rows if r.delta_usd_per_1m_output is None]
    with style():
        fig = Figure(figsize=(9.5, 0.62 * max(len(rows), 1) + 1.9))
        ax = fig.add_subplot()
        notes, texts = [], []
        for y, r in enumerate(rows):
            v = r.delta_usd_per_1m_output
            col = C["green"] if v < 0 else C["red"]
            pale = r.within_solver_gap or bool(r.note)
            ax.barh(y, v, color=col, alpha=0.5 if pale else 0.85, hatch="//" if r.within_solver_gap else None, edgecolor=col, height=0.6)
            same = r.delta_fleet_cost_per_hour_usd == 0 and r.id != "batch_infill"
            mark = (" (within the solver gap)" if r.within_solver_gap else " (no change)" if same else "")
            if r.note:
                notes.append(f"{r.name}: {r.note}")
                mark += f" (see note {len(notes)})"
            first = f"{v:+.3f} $/1M" + (f", {r.delta_usd_per_1m_output_at_peak:+.3f} over the peaks" if r.delta_usd_per_1m_output_at_peak is not None else "")
            second = ("same fleet" if r.id == "batch_infill" else f"{r.delta_chips:+,} chips" if r.delta_chips else "same chips") + mark
            texts.append(ax.annotate(f"{first}\n{second}", (max(v, 0.0), y), xytext=(4, 0), textcoords="offset points",
                                     ha="left", va="center", fontsize=7.5))
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([f"{r.rank}. {r.name}" if r.rank else r.name for r in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.axvline(0, color=C["black"], lw=1.0)
        lo = min([r.delta_usd_per_1m_output for r in rows] + [0.0])
        hi = max([r.delta_usd_per_1m_output for r in rows] + [0.0])
        span = max(hi - lo, 1e-3)
        ax.set_xlim(lo - span * 0.05, hi + span * 0.05)
        ax.set_xlabel("change in USD per 1M output tokens when the lever is switched on (negative: saves; daily mean demand)")
        base = rep.base.cost_per_1m_output_tokens_usd
        ax.set_title(f"Cost levers on {rep.instance_name}, each re-solved (the plan: ${base:.3f} per 1M output tokens)" if base is not None
                     else f"Cost levers on {rep.instance_name}", loc="left")
        ax.grid(axis="y", visible=False)
        foot = [f"note {i}: {n}" for i, n in enumerate(notes, 1)] + [f"not applicable here -- {r.name}: {r.note.removeprefix('not applicable: ')}"
                                                                     for r in na]
        bottom = _footnote(fig, foot)
        fig.tight_layout(rect=(0, bottom, 1, 1))
        _fit_texts_x(ax, texts)
        fig.tight_layout(rect=(0, bottom, 1, 1))
        _fit_texts_x(ax, texts)
        return fig
