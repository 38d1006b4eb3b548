"""Sweep charts drawn from a base with no plan: no bars measured from a base that does
not exist, the base's status and why instead; and the levers chart keeps every value
label inside the plot."""

from __future__ import annotations

import io

import pytest
from matplotlib.patches import Rectangle
from PIL import Image

from fleetplan.instance.io import parse_instance
from fleetplan.report import figures as F
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
