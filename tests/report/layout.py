"""What a report figure's text must do, measured on the figure as laid out: every text
inside the figure, titles apart, x tick labels apart, and a label centred in a bar inside
that bar and legible on it (WCAG contrast >= 4.5). :func:`layout_problems` names each
breach; tests/report/conftest.py measures the bundled reports' figures with it as they are
saved (``build_report(on_figure=...)``), tests/report/test_figures.py asserts none."""

from __future__ import annotations

import math

from matplotlib.colors import to_rgb, to_rgba
from matplotlib.patches import Rectangle

from fleetplan.report import figures as F


def _luminance(rgb) -> float:
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _contrast(text_colour, face_rgba) -> float:
    """WCAG contrast ratio of text on a face drawn with alpha over white."""
    *rgb, a = face_rgba
    bg = [a * c + (1 - a) for c in rgb]
    la, lb = _luminance(to_rgb(text_colour)), _luminance(bg)
    return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)


def _text_artists(fig):
    out = [("suptitle", fig._suptitle)] + [("figure text", t) for t in fig.texts] + [("figure legend", g) for g in fig.legends]
    for ax in fig.axes:
        if ax.get_visible():
            out += [("title", t) for t in F._axes_titles(ax)] + [("text", t) for t in ax.texts]
            out += [("legend", ax.get_legend()), ("x axis", ax.xaxis), ("y axis", ax.yaxis)]
    return [(w, a) for w, a in out if a is not None and a.get_visible() and (not hasattr(a, "get_text") or a.get_text().strip())]


def _tick_collisions(ax, r) -> list:
    """Neighbouring x tick labels that collide: upright boxes less than 3 px apart
    (they read as one label), or tilted labels whose parallel lines lie closer than a
    label's own (upright) height."""
    lo, hi = sorted(ax.get_xlim())
    labs = [(x, t) for x, t in zip(ax.get_xticks(), ax.get_xticklabels()) if t.get_text() and lo <= x <= hi]
    out = []
    for (x0, a), (x1, b) in zip(labs, labs[1:]):
        angle = a.get_rotation() % 180
        if not angle:
            if a.get_window_extent(r).x1 + 3 > b.get_window_extent(r).x0:
                out.append((a.get_text(), b.get_text()))
            continue
        a.set_rotation(0)
        h = a.get_window_extent(r).height
        a.set_rotation(angle)
        dx = ax.transData.transform((x1, 0))[0] - ax.transData.transform((x0, 0))[0]
        if dx * math.sin(math.radians(angle)) < h:
            out.append((a.get_text(), b.get_text()))
    return out


def layout_problems(stem: str, fig) -> list[str]:
    """Every breach of the rules above in ``fig`` (a laid-out matplotlib Figure: drawn or
    saved), one sentence each naming the figure ``stem`` and the text; [] for a good one."""
    r = F._renderer(fig)
    out = []
    W, H = fig.bbox.width, fig.bbox.height
    for what, a in _text_artists(fig):
        e = a.get_window_extent(r) if hasattr(a, "get_text") else a.get_tightbbox(r)
        if e is None:  # an axis that draws nothing (no ticks, no label)
            continue
        label = a.get_text()[:50] if hasattr(a, "get_text") else ""
        if not (e.x0 >= -1 and e.y0 >= -1 and e.x1 <= W + 1 and e.y1 <= H + 1):
            out.append(f"{stem}: {what} {label!r} runs off the figure")
    titles = [(t.get_text(), t.get_window_extent(r)) for ax in fig.axes if ax.get_visible() for t in F._axes_titles(ax)]
    for i, (ta, ea) in enumerate(titles):
        for tb, eb in titles[i + 1:]:
            if ea.overlaps(eb):
                out.append(f"{stem}: titles {ta!r} and {tb!r} collide")
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        hits = _tick_collisions(ax, r)
        if hits:
            out.append(f"{stem}: x tick labels collide: {hits}")
        for t in ax.texts:  # a label centred in a bar stays inside it and reads against it
            if (t.get_ha(), t.get_va()) != ("center", "center"):
                continue
            px = ax.transData.transform(t.get_position())
            bars = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_fill() and p.get_window_extent(r).contains(*px)]
            if not bars:
                continue
            bar, e = bars[-1], t.get_window_extent(r)
            b = bar.get_window_extent(r)
            if not (b.x0 <= e.x0 and e.x1 <= b.x1 and b.y0 - 1 <= e.y0 and e.y1 <= b.y1 + 1):
                out.append(f"{stem}: {t.get_text()!r} spills out of its bar")
            if _contrast(t.get_color(), to_rgba(bar.get_facecolor())) < 4.5:
                out.append(f"{stem}: {t.get_text()!r} on its bar")
    return out
