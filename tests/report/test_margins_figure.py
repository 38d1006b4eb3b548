"""The report's margins figure and table (issue 40) on the 70B BF16 plan held under its four
bundled physics sources: the numbers are the plan's and the evaluator's, the figure draws
them."""

from __future__ import annotations

import math

import pytest

from fleetplan.report.margins_figure import SCALES, fig_margins, margin_curves

NAME = "llama70b-h100-bf16-p99"


@pytest.fixture(scope="module")
def bf16(solved):
    return solved(NAME)


@pytest.fixture(scope="module")
def curves(bf16):
    return margin_curves(*bf16)


def test_one_curve_per_slo_of_each_pool_with_the_plans_margins(bf16, curves):
    inst, plan = bf16
    (pool,) = plan.pools
    assert sorted((c.role, c.metric, c.percentile, c.limit_ms) for c in curves) == [("replica", "tpot", 99.0, 50.0),
                                                                                    ("replica", "ttft", 99.0, 1000.0)]
    for c in curves:
        (m,) = [m for m in plan.margins if (m.metric, m.percentile, m.scenario) == (c.metric, c.percentile, c.scenario)]
        assert c.plan_margin == m.step_time_margin
        # the instance's priors are one held source (AIConfigurator), so its own margin -- where the
        # instance's curve breaks -- is at least the plan's, the least over the sources
        assert c.crossing is not None and c.crossing >= c.plan_margin
        assert c.sources["aiconfigurator-trtllm"] == pytest.approx(1.0, abs=1e-3)
        assert len(c.sources) == 4 and all(v is not None and v >= 1.0 for v in c.sources.values())


def test_the_binding_sources_mark_is_the_plans_own_prediction(bf16, curves):
    """Each source's own percentile at the pool's load: the binding source's is the p99 the
    plan records (the evaluator's least favourable answer), read here from the plan."""
    _, plan = bf16
    rec = next(pl for sc in plan.scenarios if sc.kind == "normal" for pl in sc.pools)
    assert rec.source is not None
    got = {c.metric: c.source_ratio[rec.source] * c.limit_ms for c in curves}
    assert got["tpot"] == pytest.approx(rec.tpot_ms["p99"], rel=1e-5)
    assert got["ttft"] == pytest.approx(rec.ttft_ms["p99"], rel=1e-5)
    # the binding source is the slowest on every curve
    for c in curves:
        assert c.source_ratio[rec.source] == max(c.source_ratio.values())


def test_the_curve_rises_with_the_step_time_and_breaks_at_its_crossing(curves):
    for c in curves:
        pts = [r for r in c.ratio if r is not None]
        assert pts == sorted(pts) and len(c.ratio) == len(SCALES)
        at = dict(zip(c.scale, c.ratio))
        assert at[1.0] == pytest.approx(c.source_ratio["aiconfigurator-trtllm"], rel=1e-6)
        below = max(m for m in SCALES if m <= c.crossing)
        above = min((m for m in SCALES if m > c.crossing), default=None)
        assert at[below] <= 1.0
        assert above is None or at[above] is None or at[above] > 1.0
        # each source sits where the curve reaches its own percentile
        for n, x in c.sources.items():
            lo = max(m for m in SCALES if m <= x)
            hi = min(m for m in SCALES if m >= x)
            assert at[lo] - 1e-9 <= c.source_ratio[n] <= at[hi] + 1e-9


def test_the_figure_draws_one_panel_per_pool_with_the_limit_and_the_sources(curves):
    class D:
        margin_curves = curves

    fig = fig_margins(D)
    axs = [a for a in fig.axes if a.get_visible()]
    assert len(axs) == 1
    labels = [t.get_text() for t in axs[0].get_legend().get_texts()]
    assert any(lab.startswith("TPOT p99 (limit 50 ms); margin x") for lab in labels)
    assert {"aiconfigurator-trtllm", "vidur-vllm", "llm-inference-bench-vllm", "llm-inference-bench-trtllm"} <= set(labels)
    # the crossing ticks sit on the limit line at each SLO's crossing
    ticks = [ln for ln in axs[0].get_lines() if ln.get_marker() == "|"]
    assert sorted(round(float(ln.get_xdata()[0]), 4) for ln in ticks) == sorted(round(c.crossing, 4) for c in curves)


def test_the_report_page_carries_the_margins_table(bf16):
    from fleetplan.report.render import build_report, figure_names, render_markdown

    rep = build_report(*bf16, draw=False)
    assert "step-time-margins" in figure_names(rep.data)
    md = render_markdown(rep, lambda stem: f"r_figures/{stem}.png")
    row = next(line for line in md.splitlines() if line.startswith("| replica[us-central,all] | normal | TPOT p99 |"))
    c = next(c for c in rep.data.margin_curves if c.metric == "tpot")
    assert f"x{c.plan_margin:#.3g}" in row and f"x{c.crossing:#.3g}" in row
    assert not math.isnan(c.crossing)


@pytest.mark.parametrize("pools", [1, 3, 14])
def test_the_title_stays_clear_of_the_panels(curves, pools):
    """A one-line title over a row of three panels ran into their titles (tight_layout left
    it no room); 14 pools draw the 12 with the least margin and name the rest."""
    from fleetplan.report.figures import _axes_titles, _renderer

    class D:
        margin_curves = [c.model_copy(update={"region": f"r{i:02d}"}) for i in range(pools) for c in curves]

    fig = fig_margins(D)
    r = _renderer(fig)
    e = fig._suptitle.get_window_extent(r)
    axs = [a for a in fig.axes if a.get_visible()]
    assert len(axs) == min(pools, 12)
    assert not any(e.overlaps(t.get_window_extent(r)) for ax in axs for t in _axes_titles(ax))
    assert ("2 more pools with larger margins not drawn" in " ".join(t.get_text() for t in fig.texts)) == (pools == 14)
