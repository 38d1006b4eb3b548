"""The purchase report (``fleetplan purchase FILE --report DIR``): three figures and a page.

* ``fan.png``: per region, the demand fan (the quarter's peak requests/s: each scenario's
  path, the band between the lowest and the highest scenario, the probability-weighted
  mean) against the capacity in service (chips in service per region, right axis: the
  band over the scenarios and the expectation; chips running at the peak dashed);
* ``orders.png``: pods ordered per order quarter, the expectation over the tree (each node's
  orders weighted by its path probability) stacked by region x chip, the whiskers the
  fewest and most pods any scenario orders in that quarter;
* ``costs.png``: the discounted cost of each scenario (bars, sorted, labelled with their
  probability), the expected cost, and each scenario's wait-and-see cost when computed;
* ``report.md``: the order sheet, the contingency table, the chips per pool per scenario and quarter, and the figures.

Reads only the plan document (:class:`~fleetplan.purchase.result.PurchasePlan`); drawn with
the report's matplotlib style (:mod:`fleetplan.report.figures`: object-oriented, Agg,
deterministic bytes). Every file is written with the caller's atomic writer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from matplotlib.figure import Figure

from fleetplan.purchase.result import PurchasePlan
from fleetplan.purchase.sheet import commitment, need_words, neutral_words, node_probability, quarter_summary
from fleetplan.report.figures import C, SERIES, _finish, _renderer, _suptitle, _thousands, style, to_bytes

__all__ = ["fig_fan", "fig_orders", "fig_costs", "render_page", "write_report", "FIGURES"]

FIGURES = ("fan", "orders", "costs")


def _regions(plan: PurchasePlan) -> list[str]:
    return sorted(plan.scenarios[0].quarters[0].peak_rps)


def fig_fan(plan: PurchasePlan) -> Figure:
    """Demand (peak requests/s, left axis) against chips in service (right axis) per
    region over the quarters, over every scenario."""
    regions = _regions(plan)
    qs = plan.quarters
    x = list(range(len(qs)))
    with style():
        fig = Figure(figsize=(4.2 * len(regions), 4.1))
        twins = []
        for i, r in enumerate(regions):
            ax = fig.add_subplot(1, len(regions), i + 1)
            ax2 = ax.twinx()
            twins.append(ax2)
            dem = [[q.peak_rps[r] for q in s.quarters] for s in plan.scenarios]
            chips = [[sum(p.chips for p in q.pods_in_service if p.region == r) for q in s.quarters] for s in plan.scenarios]
            run = [[sum(p.chips_running for p in q.pods_in_service if p.region == r) for q in s.quarters] for s in plan.scenarios]
            w = [s.probability for s in plan.scenarios]
            tot = sum(w) or 1.0
            lo = [min(d[j] for d in dem) for j in x]
            hi = [max(d[j] for d in dem) for j in x]
            ax.fill_between(x, lo, hi, color=C["blue"], alpha=0.15, label="demand, scenario range")
            for d in dem:
                ax.plot(x, d, color=C["blue"], lw=0.6, alpha=0.5)
            ax.plot(x, [sum(wi * d[j] for wi, d in zip(w, dem)) / tot for j in x], color=C["blue"], lw=2, label="demand, expected")
            clo = [min(c[j] for c in chips) for j in x]
            chi = [max(c[j] for c in chips) for j in x]
            ax2.fill_between(x, clo, chi, step="mid", color=C["orange"], alpha=0.2, label="chips in service, range")
            ax2.step(x, [sum(wi * c[j] for wi, c in zip(w, chips)) / tot for j in x], where="mid", color=C["orange"], lw=2, label="chips in service, expected")
            ax2.plot(x, [sum(wi * c[j] for wi, c in zip(w, run)) / tot for j in x], color=C["red"], lw=1.2, ls="--", label="chips running at the peak, expected")
            ax.set_title(r)
            ax.set_xticks(x)
            ax.set_xticklabels(qs, rotation=45, ha="right")
            ax.set_ylabel("peak demand (requests/s)")
            ax2.set_ylabel("chips")
            ax2.grid(False)
            ax2.spines["right"].set_visible(True)
            ax.set_ylim(bottom=0)
            ax2.set_ylim(bottom=0)
            _thousands(ax)
            _thousands(ax2)
            if i == 0:
                h1, l1 = ax.get_legend_handles_labels()
                h2, l2 = ax2.get_legend_handles_labels()
        top = max(a.get_ylim()[1] for a in twins)
        for a in twins:  # one chips scale for every region, so the panels compare
            a.set_ylim(0, top)
        # one legend under the panels: inside an axes it hid the capacity lines of the first region
        # (as many columns as the figure's width holds: 5 entries in one row for 3 regions, 3 rows for 1)
        leg = fig.legend(h1 + h2, l1 + l2, loc="lower center", ncol={1: 2, 2: 3}.get(len(regions), 5), fontsize=7, frameon=False,
                         bbox_to_anchor=(0.5, 0.0))
        _suptitle(fig, f"{plan.name}: demand fan against capacity in service, {len(plan.scenarios)} scenarios")
        _finish(fig, rect=(0, leg.get_window_extent(_renderer(fig)).height / fig.bbox.height + 0.01, 1, 1))
    return fig


def _node_probability(plan: PurchasePlan, scenarios: list[str]) -> float:
    p = {s.name: s.probability for s in plan.scenarios}
    return sum(p.get(s, 0.0) for s in scenarios)


def fig_orders(plan: PurchasePlan) -> Figure:
    """Pods ordered per order quarter: the expectation over the tree stacked by region x
    chip; whiskers from the fewest to the most any scenario orders then."""
    qs = plan.quarters
    keys = sorted({(o.region, o.chip) for o in plan.order_sheet + plan.contingency + plan.fixed_orders})
    names = {s.name for s in plan.scenarios}
    exp = {(q, k): 0.0 for q in qs for k in keys}
    per_scen = {(q, s): 0 for q in qs for s in names}
    sheet_scen = sorted(names)
    for o in plan.order_sheet:
        exp[(o.order_quarter, (o.region, o.chip))] += o.pods * _node_probability(plan, sheet_scen)
        for s in sheet_scen:
            per_scen[(o.order_quarter, s)] += o.pods
    for o in plan.contingency + plan.fixed_orders:
        exp[(o.order_quarter, (o.region, o.chip))] += o.pods * _node_probability(plan, o.scenarios)
        for s in o.scenarios:
            per_scen[(o.order_quarter, s)] += o.pods
    x = list(range(len(qs)))
    with style():
        fig = Figure(figsize=(8.6, 3.8))
        ax = fig.add_subplot()
        bottom = [0.0] * len(qs)
        for i, k in enumerate(keys):
            v = [exp[(q, k)] for q in qs]
            ax.bar(x, v, bottom=bottom, color=SERIES[i % len(SERIES)], label=f"{k[0]} / {k[1]}", edgecolor="white")
            bottom = [b + vi for b, vi in zip(bottom, v)]
        lo = [min(per_scen[(q, s)] for s in names) for q in qs]
        hi = [max(per_scen[(q, s)] for s in names) for q in qs]
        ax.errorbar(x, bottom, yerr=[[max(b - lo_, 0) for b, lo_ in zip(bottom, lo)], [max(hi_ - b, 0) for b, hi_ in zip(bottom, hi)]],
                    fmt="none", ecolor=C["black"], capsize=4, lw=1, label="fewest .. most over the scenarios")
        ax.set_xticks(x)
        ax.set_xticklabels(qs)
        ax.set_ylabel("pods ordered (expected over the tree)")
        ax.set_xlabel("order quarter")
        if not keys:
            ax.text(0.5, 0.5, "no orders in any scenario", ha="center", va="center", transform=ax.transAxes)
        # beside the axes: inside, it covered the bars of the last quarters (a 40-quarter file)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
        _suptitle(fig, f"{plan.name}: orders per quarter (the first bar is the order sheet: committed now)")
        _finish(fig)
    return fig


def fig_costs(plan: PurchasePlan) -> Figure:
    """The discounted cost of every scenario, sorted, with the expected cost and the
    wait-and-see costs when computed (USD)."""
    sc = sorted(plan.scenarios, key=lambda s: s.cost_usd)
    with style():
        fig = Figure(figsize=(8.6, max(2.6, 0.45 * len(sc) + 1.4)))
        ax = fig.add_subplot()
        y = list(range(len(sc)))
        ax.barh(y, [s.cost_usd for s in sc], color=C["blue"], height=0.6, label="cost under this plan")
        ws = [(i, s.wait_and_see_usd) for i, s in enumerate(sc) if s.wait_and_see_usd is not None]
        if ws:
            ax.scatter([v for _i, v in ws], [i for i, _v in ws], marker="|", s=200, color=C["orange"], zorder=3, label="wait-and-see (perfect foresight)")
        ax.axvline(plan.expected_cost_usd, color=C["red"], lw=1.5, ls="--", label=f"expected {plan.expected_cost_usd:,.0f}")
        ax.set_yticks(y)
        ax.set_yticklabels([f"{s.name} (p {s.probability:.3g})" for s in sc])
        ax.set_xlabel("discounted cost over the horizon (USD)")
        _thousands(ax, "x")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
        _suptitle(fig, f"{plan.name}: cost distribution over the scenarios")
        _finish(fig)
    return fig


def _md_row(cells) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def render_page(plan: PurchasePlan) -> str:
    """report.md: headline, order sheet, contingency table, value of information, figures."""
    when = plan.replan["now"] if plan.replan else plan.quarters[0]
    out = [f"# Purchase plan: {plan.name}", "",
           f"Base instance {plan.base_instance}; {plan.quarters[0]}..{plan.quarters[-1]}; {len(plan.scenarios)} scenarios; "
           f"status **{plan.status}**; expected discounted cost **{plan.expected_cost_usd:,.0f} USD**; unserved demand {plan.unserved_policy}.", ""]
    peak = [(sc.name, q.quarter, q.unserved_rps) for sc in plan.scenarios for q in sc.quarters if q.unserved_rps > 1e-6]
    loss = [(sc.name, q.quarter, q.unserved_in_region_loss_rps) for sc in plan.scenarios for q in sc.quarters if q.unserved_in_region_loss_rps > 1e-6]
    if peak:
        w = max(peak, key=lambda x: x[2])
        out += [f"**Unserved demand at the normal peak** in {len(peak)} (scenario, quarter)s, at most {w[2]:,.4g} requests/s ({w[0]}, {w[1]}).", ""]
    if loss:
        w = max(loss, key=lambda x: x[2])
        out += [f"**Unserved demand in a region loss** in {len(loss)} (scenario, quarter)s, at most {w[2]:,.4g} requests/s ({w[0]}, {w[1]}).", ""]
    if plan.replan:
        out += [f"A re-plan at {plan.replan['now']} after demand followed `{plan.replan['path']}`: the earlier orders are fixed.", ""]
    if plan.risk is not None and neutral_words(plan.risk) is not None:
        out += [f"Risk: {neutral_words(plan.risk)}.", ""]
    out += [f"## Order sheet: commit now ({when})", ""]
    if plan.order_sheet:
        out += [_md_row(["ordered", "delivered", "region", "chip", "pods", "commitment", "order's price USD", "discounted USD", "needed first"]),
                _md_row(["---"] * 9)]
        for o in plan.order_sheet:
            out.append(_md_row([o.order_quarter, o.delivery_quarter, o.region, o.chip, o.pods, commitment(o, plan.quarters), f"{o.price_usd:,.0f}",
                                f"{o.cost_usd:,.0f}", need_words(o)]))
    else:
        out.append(plan.nothing_to_order_why or "nothing to order now")
    for title, orders in (("Fixed: orders already placed (the previous plan's, on the realised path)", plan.fixed_orders),
                          ("Contingency: later orders, if demand follows the branch", plan.contingency)):
        if not orders:
            continue
        out += ["", f"## {title}", "", _md_row(["if demand tracks", "branch p", "ordered", "delivered", "region", "chip", "pods", "commitment",
                                                 "discounted USD", "needed first"]), _md_row(["---"] * 10)]
        for o in orders:
            out.append(_md_row(["every path" if o.node == "root" else o.node, f"{node_probability(o, plan):.3g}", o.order_quarter, o.delivery_quarter,
                                o.region, o.chip, o.pods, commitment(o, plan.quarters), f"{o.cost_usd:,.0f}", need_words(o)]))
    out += ["", "*needed first*: the first quarter a verified fleet runs on the order's pods, its most probable scenario then (p: of the "
            "scenarios that ever do), and that fleet's chips of the order's chip running in its region > those the pods hold without the order."]
    rows = quarter_summary(plan)
    if rows:
        out += ["", "## Fleets per quarter over the scenarios", "",
                "min..max over the scenarios (chips running: min / median / max); peak rps summed over the regions.", "",
                _md_row(list(rows[0])), _md_row(["---"] * len(rows[0]))]
        out += [_md_row(list(r.values())) for r in rows]
    out += ["", "## Chips per pool, per scenario and quarter", "",
            "Slices x shape of every pool at the quarter's peak (a pool mixing shapes and chip types lists each; policy.mixed_shapes); "
            "the warm pool (weight-loaded slices kept for a region loss) is its own row, so the rows add up to the chips running.", "",
            _md_row(["scenario", "quarter", "region", "tier", "role", "slices per shape", "chips", "USD/h"]), _md_row(["---"] * 8)]
    for sc in plan.scenarios:
        for q in sc.quarters:
            by: dict[tuple[str, str, str], list] = {}
            for pl in q.pools:
                by.setdefault((pl.region, pl.tier, pl.role), []).append(pl)
            for (r, t, ro), pls in sorted(by.items()):
                out.append(_md_row([sc.name, q.quarter, r, t, ro, " + ".join(f"{x.slices} {x.slice}" for x in pls),
                                    sum(x.chips for x in pls), f"{sum(x.cost_per_hour_usd for x in pls):,.2f}"]))
            warm: dict[str, list] = {}
            for w in q.warm_pool:
                warm.setdefault(w.region, []).append(w)
            for r, ws in sorted(warm.items()):
                out.append(_md_row([sc.name, q.quarter, r, "-", "warm pool", " + ".join(f"{x.slices} {x.slice}" for x in ws),
                                    sum(x.chips for x in ws), f"{sum(x.cost_per_hour_usd for x in ws):,.2f}"]))
    v = plan.value
    if v is not None:
        def usd(x):
            return "-" if x is None else f"{x:,.0f}"
        out += ["", "## Value of planning under uncertainty (USD, discounted)", "",
                f"RP {usd(v.rp.objective_usd)} (gap {(v.rp.gap or 0):.2%}); EEV {usd(v.eev.objective_usd if v.eev else None)}; "
                f"VSS {usd(v.vss_usd)}; WS {usd(v.ws_usd)}; EVPI {usd(v.evpi_usd)}."]
    if plan.notes:
        out += ["", "## Notes", ""] + [f"* {n}" for n in plan.notes]
    out += ["", "## Figures", "", "![demand fan against capacity](figures/fan.png)", "", "![orders per quarter](figures/orders.png)", "",
            "![cost over the scenarios](figures/costs.png)", ""]
    return "\n".join(out)


def write_report(plan: PurchasePlan, directory: str | Path, write: Callable[[Path, bytes | str], object]) -> Path:
    """Draw the figures and write DIR/figures/{fan,orders,costs}.png and DIR/report.md
    with ``write`` (an atomic writer: path, bytes or text). Returns the page's path."""
    d = Path(directory)
    (d / "figures").mkdir(parents=True, exist_ok=True)
    for name, draw in (("fan", fig_fan), ("orders", fig_orders), ("costs", fig_costs)):
        write(d / "figures" / f"{name}.png", to_bytes(draw(plan), "png"))
    page = d / "report.md"
    write(page, render_page(plan))
    return page
