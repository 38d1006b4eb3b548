"""Issue 39 item 22: the purchase output a planner reads. Per order: when, where, how many,
the commitment, the probability of the branch it hedges and what needs it (read from the
verified fleets); why nothing is ordered now; a terminal-sized summary of the fleets instead of
a scenario x quarter table of ~900 lines with cut columns; the orders as CSV for finance."""

from __future__ import annotations

import copy
import csv
import io
import json

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.purchase.io import parse_purchase
from fleetplan.purchase.result import ContingentOrder, Order, OrderNeed, PodsInService, PurchasePlan, QuarterPool, QuarterResult, ScenarioPlan
from fleetplan.purchase.solve import solve_purchase
from fleetplan.solvers.base import SolveOptions
from tests.purchase.helpers import two_paths, write_base

EXACT = SolveOptions(mip_gap=0.0)


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """The worked example (orders its pod now) and the same tree with the root's pod at 13,000 USD
    (it waits: the high branch orders in 2027Q2), solved once each: (file docs, plans)."""
    base = write_base(tmp_path_factory.mktemp("sheet"))
    now = two_paths(base)
    wait = two_paths(base)
    wait["supply"][0]["price"] = {"kind": "capital", "usd_per_pod": 13000}
    return (now, wait), tuple(solve_purchase(parse_purchase(copy.deepcopy(d)), EXACT, value=False) for d in (now, wait))


def test_each_order_says_what_needs_it(plans):
    (_docs, (plan, _w)) = plans
    o = plan.order_sheet[0]
    # recomputed from the verified fleets: in high's 2027Q3 the fleet runs 6 chips, and the 3 pods in service
    # without the order's 1 pod hold (3 - 1) x 2 = 4; the low path never runs more than 4 chips
    high = next(s for s in plan.scenarios if s.name == "high")
    row = high.quarters[2].pods_in_service[0]
    assert (row.chips_running, (row.pods - o.pods) * 2) == (6, 4)
    assert all(q.pods_in_service[0].chips_running <= 4 for s in plan.scenarios if s.name == "low" for q in s.quarters)
    n = o.needed
    assert (n.quarter, n.scenario, n.chips_running, n.chips_without, n.peak_rps) == ("2027Q3", "high", 6, 4, 45.0)
    assert n.probability == pytest.approx(0.4)


def test_nothing_to_order_now_says_why_and_contingent_orders_carry_their_branch(plans, tmp_path):
    (docs, (_p, plan)) = plans
    assert plan.order_sheet == [] and [(o.node, o.order_quarter, o.pods) for o in plan.contingency] == [("high", "2027Q2", 1)]
    why = plan.nothing_to_order_why
    # the fleets run on the installed pods through 2027Q2; high's 2027Q3 fleet needs the pod high orders in 2027Q2; an
    # order placed now (lead time 1) would arrive in 2027Q2
    assert "through 2027Q2" in why and "high's in 2027Q3" in why and "ordered in 2027Q2 if demand tracks high" in why, why
    assert "would arrive in 2027Q2 at the earliest" in why, why
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(docs[1]))
    r = CliRunner().invoke(app, ["purchase", str(f), "--no-value"])
    assert r.exit_code == 0, r.output
    out = " ".join(r.stdout.split())
    assert "nothing to order now: the pods in service" in out, out
    # the contingency row: branch high, its probability 0.4, what needs it
    line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("high "))
    assert line.split()[:9] == ["high", "0.4", "2027Q2", "2027Q3", "a", "acc", "1", "kept", "30,000"], line
    assert line.rstrip().endswith("2027Q3 high (p 0.4): 6 > 4 chips"), line


def _big_plan(base: PurchasePlan) -> PurchasePlan:
    """A plan of the bundled example's shape -- 9 scenarios over 8 quarters, 3 regions, 2 chips, 2 tiers --
    built from the worked example's document (the rendering is under test, not the numbers)."""
    quarters = [f"{y}Q{q}" for y in (2027, 2028) for q in (1, 2, 3, 4)]
    regions, chips = ("us-central", "us-east", "us-west"), ("ironwood", "trillium")
    names = [f"{a}/{b}" for a in ("low", "mid", "high") for b in ("low", "mid", "high")]
    scen = []
    for j, name in enumerate(names):
        qs = []
        for i, q in enumerate(quarters):
            pods = [PodsInService(region=r, chip=k, pods=14 + i + j, chips=256 * (14 + i + j), chips_running=200 * (14 + i + j)) for r in regions for k in chips]
            pools = [QuarterPool(region=r, tier=t, role=ro, slice="ironwoodx64", slices=10 + i, chips=64 * (10 + i), cost_per_hour_usd=1000.0 + i)
                     for r in regions for t in ("short", "long") for ro in ("prefill", "decode")]
            qs.append(QuarterResult(quarter=q, node=name if i > 2 else "root", demand_multiplier={r: 1.0 + 0.1 * i for r in regions},
                                    peak_rps={r: 3000.0 * (1 + 0.07 * i + 0.01 * j) for r in regions}, pods_in_service=pods, pools=pools,
                                    utilisation=0.8, fleet_cost_per_hour_usd=4903.2 + i, run_cost_usd=1e7, order_cost_usd=0.0, unserved_rps=0.0,
                                    unserved_cost_usd=0.0, plan_status="verified", violations=[]))
        scen.append(ScenarioPlan(name=name, probability=1 / 9, cost_usd=4.9e8, wait_and_see_usd=None, regret_usd=None, quarters=qs))
    need = OrderNeed(quarter="2028Q2", scenario="high/high", peak_rps=5235.0, chips_running=21344, chips_without=20736, probability=0.04)
    sheet = [Order(region="us-central", chip="ironwood", order_quarter="2027Q1", delivery_quarter="2027Q3", in_service_until="2030Q2", pods=3,
                   chips=768, price_usd=30_295_300.0, cost_usd=26_282_300.0, needed=need)]
    # the bundled example's contingency table: 20 orders over the branches, each a 12-quarter commitment
    later = [ContingentOrder(**{**sheet[0].model_dump(), "region": r, "order_quarter": q, "delivery_quarter": d, "in_service_until": "2030Q4",
                                "node": node, "scenarios": [n for n in names if node == "root" or n.startswith(node)]})
             for node, q, d in (("root", "2027Q2", "2027Q4"), ("root", "2027Q3", "2028Q1"), ("high", "2027Q4", "2028Q2"), ("high", "2028Q1", "2028Q3"),
                                ("mid", "2028Q1", "2028Q3"), ("high", "2028Q2", "2028Q4"), ("mid", "2028Q2", "2028Q4"))
             for r in regions][:20]
    return base.model_copy(update={"quarters": quarters, "scenarios": scen, "order_sheet": sheet, "contingency": later})


@pytest.mark.parametrize("width", [100, 160])
def test_the_default_output_fits_a_terminal(plans, monkeypatch, width):
    # the bundled example printed ~900 lines at 160 columns, its cells cut ('us-central/ironwo…')
    from fleetplan.cli import purchase as cli

    plan = _big_plan(plans[1][0])
    buf = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=buf, width=width, highlight=False, emoji=False))
    cli.render(plan)
    lines = buf.getvalue().splitlines()
    assert max(len(ln) for ln in lines) <= width
    assert not any("…" in ln for ln in lines), "a cell was cut"
    assert len(lines) <= (70 if width == 160 else 110), len(lines)  # a screen or two
    assert sum(1 for ln in lines if ln.rstrip().endswith("9/9")) == 8  # one row per quarter over the 9 scenarios
    if width == 160:  # every order on one line
        assert sum(1 for ln in lines if "(p 0.04): 21,344 > 20,736 chips" in ln) == 21
    # the full table is behind --scenarios: one row per scenario x quarter x region, nothing cut
    buf.seek(0)
    buf.truncate()
    cli.render(plan, full=True)
    full = buf.getvalue().splitlines()
    assert max(len(ln) for ln in full) <= width and not any("…" in ln for ln in full)
    assert sum(1 for ln in full if " us-central " in ln or " us-east " in ln or " us-west " in ln) >= 9 * 8 * 3


def test_the_orders_csv(plans, tmp_path):
    from fleetplan.purchase.sheet import CSV_COLUMNS

    (docs, _plans) = plans
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(docs[0]))
    out = tmp_path / "orders.csv"
    r = CliRunner().invoke(app, ["purchase", str(f), "--no-value", "--csv", str(out), "-o", str(tmp_path / "plan.json")])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(out.open()))
    assert tuple(rows[0]) == CSV_COLUMNS and len(rows) == 1
    row = rows[0]
    assert (row["status"], row["node"], row["branch_probability"], row["order_quarter"], row["delivery_quarter"], row["region"], row["chip"],
            row["pods"], row["commitment"], row["price_usd"], row["needed_quarter"], row["needed_scenario"]) == \
        ("commit now", "root", "1", "2027Q1", "2027Q2", "a", "acc", "1", "capital, kept", "10000.00", "2027Q3", "high")
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert float(row["discounted_usd"]) == pytest.approx(plan["order_sheet"][0]["cost_usd"])
    # no plan: an earlier CSV is left as it was; a directory is refused before the solve, naming --csv
    bad = copy.deepcopy(docs[0])
    bad["supply"][0]["max_pods_delivered_per_quarter"] = 0
    f.write_text(yaml.safe_dump(bad))
    out.write_text("earlier")
    r = CliRunner().invoke(app, ["purchase", str(f), "--no-value", "--csv", str(out)])
    assert r.exit_code == 3 and out.read_text() == "earlier"
    r = CliRunner().invoke(app, ["purchase", str(f), "--no-value", "--csv", str(tmp_path)])
    assert r.exit_code == 2 and "--csv" in r.output


def test_the_report_page_has_the_branch_and_the_need(plans):
    from fleetplan.purchase.report import render_page

    (_docs, (now, wait)) = plans
    page = render_page(now)
    assert "| 2027Q1 | 2027Q2 | a | acc | 1 | capital, kept | 10,000 | 10,000 | 2027Q3 high (p 0.4): 6 > 4 chips |" in page, page
    assert "## Fleets per quarter over the scenarios" in page
    page = render_page(wait)
    assert "nothing to order now: the pods in service" in page and "| high | 0.4 | 2027Q2 | 2027Q3 | a | acc | 1 |" in page, page
