"""Sweep charts drawn from a base with no plan: no bars measured from a base that does
not exist, the base's status and why instead; the levers chart keeps every value
label inside the plot; the tornado draws the flags its table shows (beyond the pod
inventory, not verified, not applicable) with labels that do not overlap; and every
report figure of every bundled instance keeps its text inside the figure, its titles
and tick labels apart, and its in-bar labels inside their bars and legible."""

from __future__ import annotations

import io

import pytest
from matplotlib.patches import Rectangle
from PIL import Image

from fleetplan.instance.io import bundled_instances, parse_instance
from fleetplan.report import figures as F
from fleetplan.report.render import FIGURES
from fleetplan.report.executor import SerialExecutor
from fleetplan.report.levers import run_levers
from fleetplan.report.sensitivity import parse_params, run_sensitivity
from fleetplan.report.sweep import SolveSummary
from tests.conftest import tiny_data

SWEEP = dict(regions={"a": {"peak_rps": 200}, "b": {"peak_rps": 150}}, chips={"acc": {"slice_shapes": [1]}})
NO_PLAN = SolveSummary(key="base", status="no_solution", message="the solver found no feasible fleet in the time limit", wall_s=1.0)


@pytest.fixture(scope="module")
def reports():
    data = tiny_data(**SWEEP)
    inst = parse_instance(data, "sweep")
    ex = SerialExecutor()
    lev = run_levers(inst, ex, {"mip_gap": 0.0}, keep_inventory=True)
    sens = run_sensitivity(inst, parse_params(["mfu=0.2:0.4"], data), ex, {"mip_gap": 0.0}, keep_inventory=True)
    return lev, sens


@pytest.fixture(scope="module")
def lifted():
    """A sweep with the pod inventory lifted: prefill MFU 5% needs more pods than the
    instance allows (18 and 14 of 10); alpha does not apply (speculation is off); the
    MFU range's high end is the base."""
    data = tiny_data(**SWEEP)
    inst = parse_instance(data, "sweep")
    return run_sensitivity(inst, parse_params(["mfu=0.05:0.4", "alpha", "output=150:250"], data), SerialExecutor(), {"mip_gap": 0.0})


def _bars(fig):
    return [p for ax in fig.axes for p in ax.patches if isinstance(p, Rectangle) and p.get_width() != 0]


def _texts(fig):
    return " ".join(t.get_text() for ax in fig.axes for t in ax.texts) + " " + (fig._suptitle.get_text() if fig._suptitle else "")


@pytest.mark.parametrize("which", ["levers", "tornado"])
def test_a_base_without_a_plan_draws_no_bars_and_says_why(reports, which):
    lev, sens = reports
    rep, draw = (lev, F.fig_levers) if which == "levers" else (sens, F.fig_tornado)
    assert _bars(draw(rep)), "the solved base draws bars"
    fig = draw(rep.model_copy(update={"base": NO_PLAN}))
    assert not _bars(fig)
    text = _texts(fig)
    assert "no_solution" in text and "The solver found no feasible fleet" in text and rep.instance_name in text
    Image.open(io.BytesIO(F.to_bytes(fig))).verify()


def test_levers_value_labels_stay_inside_the_axes(reports):
    lev, _ = reports
    fig = F.fig_levers(lev)
    r = F._renderer(fig)
    ax = fig.axes[0]
    box = ax.get_window_extent(r)
    assert ax.texts, "every lever row is labelled"
    for t in ax.texts:
        e = t.get_window_extent(r)
        assert box.x0 - 1 <= e.x0 and e.x1 <= box.x1 + 1, t.get_text()


# ----------------------------------------------------------------------------- tornado


def _row_y(fig, label: str) -> float:
    ax = fig.axes[0]
    return next(y for y, t in zip(ax.get_yticks(), ax.get_yticklabels()) if t.get_text().startswith(label + "\n"))


def _near(y0: float, y: float) -> bool:
    return abs(y - y0) < 0.45


def _row_texts(ax, y):
    return [t for t in ax.texts if _near(y, (t.xy if hasattr(t, "xy") else t.get_position())[1])]


def _row_bars(ax, y):
    return [p for p in ax.patches if isinstance(p, Rectangle) and _near(y, p.get_y() + p.get_height() / 2)]


def test_tornado_marks_points_beyond_the_pod_inventory(lifted):
    row = next(r for r in lifted.rows if r.param == "prefill_mfu")
    assert row.low.beyond_inventory and not row.high.beyond_inventory
    fig = F.fig_tornado(lifted)
    y = _row_y(fig, row.label)
    for ax in fig.axes:
        marked = [t for t in ax.texts if F.BEYOND_MARK in t.get_text()]
        assert len(marked) == 1 and _near(y, marked[0].get_position()[1]) and "5%" in marked[0].get_text()
        outlines = [p for p in _row_bars(ax, y) if not p.get_fill() and p.get_linestyle() not in ("-", "solid")]
        assert len(outlines) == 1 and outlines[0].get_width() != 0  # the bar of the point beyond the inventory, outlined
    legend = " ".join(t.get_text() for leg in fig.legends for t in leg.get_texts())
    assert "beyond the instance's pod inventory" in legend
    notes = " ".join(t.get_text().replace("\n", " ") for t in fig.texts)
    for where in row.low.beyond_inventory:
        assert where in notes


def test_tornado_draws_no_bar_for_a_prior_that_does_not_apply(lifted):
    row = next(r for r in lifted.rows if r.param == "spec_acceptance")
    assert not row.applicable and "speculation is off" in row.note
    fig = F.fig_tornado(lifted)
    y = _row_y(fig, row.label)
    for ax in fig.axes:
        assert not _row_bars(ax, y), "no bar, not even a zero-width one"
        texts = [t.get_text().replace("\n", " ") for t in _row_texts(ax, y)]
        assert len(texts) == 1 and texts[0].startswith("not applicable: ") and "speculation is off" in texts[0]
    assert _bars(fig), "the priors that apply are drawn"


def _flat(rep, param, low_status="verified"):
    """``rep`` with ``param``'s two ends at the base plan, the low end with ``low_status``."""
    rows = [r.model_copy(update={"low": rep.base.model_copy(update={"key": "lo", "status": low_status}),
                                 "high": rep.base.model_copy(update={"key": "hi"})}) if r.param == param else r for r in rep.rows]
    return rep.model_copy(update={"rows": rows})


def _overlaps(ax, r):
    es = [(t.get_text(), t.get_window_extent(r)) for t in ax.texts]
    return [(a, b) for i, (a, ea) in enumerate(es) for b, eb in es[i + 1:] if ea.overlaps(eb)]


def test_tornado_ends_equal_to_the_base_share_one_label_and_an_unverified_one_is_marked(lifted):
    rep = _flat(lifted, "output_tokens", low_status="shortfall")
    row = next(r for r in rep.rows if r.param == "output_tokens")
    fig = F.fig_tornado(rep)
    r = F._renderer(fig)
    y = _row_y(fig, row.label)
    for ax in fig.axes:
        assert not [p for p in _row_bars(ax, y) if p.get_width() != 0]
        (t,) = _row_texts(ax, y)
        text = t.get_text()
        assert "no change" in text and "low 150 [shortfall]" in text and "high 250" in text
        xs = [ln for ln in ax.lines if ln.get_marker() == "X" and _near(y, ln.get_ydata()[0])]
        assert len(xs) == 1, "the unverified end with no width to hatch is marked"
        assert not _overlaps(ax, r)
        box = ax.get_window_extent(r)
        for t in ax.texts:
            e = t.get_window_extent(r)
            assert box.x0 - 1 <= e.x0 and e.x1 <= box.x1 + 1, t.get_text()
    legend = " ".join(t.get_text() for leg in fig.legends for t in leg.get_texts())
    assert "no bar to hatch" in legend


def test_tornado_ends_that_move_the_same_way_share_the_row(lifted):
    row = next(r for r in lifted.rows if r.param == "output_tokens")
    b = lifted.base
    up = [b.model_copy(update={"key": k, "chips": b.chips + d, "cost_per_1m_output_tokens_usd": b.cost_per_1m_output_tokens_usd * (1 + d / 100)})
          for k, d in (("lo", 3), ("hi", 5))]
    rep = lifted.model_copy(update={"rows": [x.model_copy(update={"low": up[0], "high": up[1]}) if x is row else x for x in lifted.rows]})
    fig = F.fig_tornado(rep)
    r = F._renderer(fig)
    y = _row_y(fig, row.label)
    for ax in fig.axes:
        bars = sorted((p.get_window_extent(r) for p in _row_bars(ax, y) if p.get_width() != 0), key=lambda e: e.y0)
        assert len(bars) == 2 and bars[0].y1 <= bars[1].y0 + 0.5, "neither bar hides the other"
        assert len(_row_texts(ax, y)) == 2 and not _overlaps(ax, r)


def test_tornado_row_labels_carry_units(lifted):
    fig = F.fig_tornado(lifted)
    labels = {t.get_text().split("\n")[0]: t.get_text() for t in fig.axes[0].get_yticklabels()}
    assert "150 .. 250 tokens (base 200)" in labels["output length"]
    assert "5% .. 40% (base 40%)" in labels["prefill MFU"]


# ----------------------------------------------------------------------------- report figures


@pytest.mark.parametrize("name", bundled_instances())
def test_report_figures_keep_text_inside_apart_and_legible(bundled_reports, bundled_layouts, name):
    """Every figure of the bundled reports, measured as it was saved to the report's PNG
    (tests/report/conftest.py: tests/report/layout.py's rules, run by the report's build
    on each figure instead of drawing it again here)."""
    d = bundled_reports[name].data
    measured = bundled_layouts[name]
    assert sorted(measured) == sorted(f[0] for f in FIGURES if f[3](d)) and len(measured) >= 6
    assert [p for stem in sorted(measured) for p in measured[stem]] == []


def test_layout_rules_catch_text_off_the_figure_colliding_titles_and_an_illegible_bar_label():
    """The rules the test above applies find each breach on a figure built to have it."""
    from matplotlib.figure import Figure

    from tests.report.layout import layout_problems

    fig = Figure(figsize=(6, 4), dpi=F.DPI)
    left, right = fig.subplots(1, 2)
    left.set_title("a title long enough to reach the other panel's title")
    right.set_title("the other panel's title")
    left.bar([0], [1.0], color="#202020")
    left.text(0, 0.5, "dark on dark", ha="center", va="center", color="#303030")
    fig.text(1.2, 0.5, "off the figure")
    found = layout_problems("bad", fig)
    assert any("'off the figure' runs off the figure" in p for p in found), found
    assert any(p.startswith("bad: titles ") and p.endswith(" collide") for p in found), found
    assert "bad: 'dark on dark' on its bar" in found, found


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_to_bytes_draws_a_laid_out_figure_once_and_saves_the_bytes_savefig_does(bundled_reports, fmt, monkeypatch):
    """tight_layout leaves a placeholder layout engine on the figure, for which savefig drew
    the figure twice (once without rendering); to_bytes saves it with one draw, the same
    bytes as a plain savefig, and puts the engine back."""
    from matplotlib.figure import Figure

    d = bundled_reports["llama70b-h100"].data
    ref = F.fig_hourly(d)
    buf = io.BytesIO()
    with F.style():
        ref.savefig(buf, format=fmt, dpi=F.DPI, metadata={"Software": None} if fmt == "png" else {"Date": None, "Creator": None})
    fig = F.fig_hourly(d)
    engine = fig.get_layout_engine()
    draws = []
    real = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: (draws.append(1), real(self, renderer))[1])
    assert F.to_bytes(fig, fmt) == buf.getvalue()
    assert len(draws) == 1
    assert fig.get_layout_engine() is engine
