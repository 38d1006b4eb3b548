"""A purchase plan's quarter figures add up (newcomer trial of issue 18): the pools and the warm
pool make the chips running and the fleet's USD/h, the run cost is the fleet's and the shed's USD/h
over the quarter's hours, discounted, and the pod-floor decomposition is on record in the JSON."""

from __future__ import annotations

import pytest
import yaml

from fleetplan.purchase import solve as purchase_solve
from fleetplan.purchase.io import parse_purchase
from fleetplan.purchase.solve import solve_purchase
from tests.purchase.test_purchase_floors import TIGHT, tree_doc, two_region_base


def _with_warm_pool(tmp_path) -> str:
    path = two_region_base(tmp_path)
    d = yaml.safe_load(open(path))
    d["failover"]["warm_pool"] = {"min_slices_per_region": 1, "max_slices_per_region": 2}
    out = tmp_path / "warm-base.yaml"
    out.write_text(yaml.safe_dump(d))
    return str(out)


def test_a_quarters_pools_warm_pool_and_costs_add_up(tmp_path, monkeypatch):
    monkeypatch.setattr(purchase_solve, "SNAPSHOT_START_INTEGERS", 0)  # through the decomposition
    p = parse_purchase(tree_doc(_with_warm_pool(tmp_path)))
    plan = solve_purchase(p, TIGHT, value=False)
    assert plan.status == "verified"
    # the decomposition is on record, not only in the notes: its plan is the one reported, no HiGHS run on the tree
    f = plan.solve.pod_floors
    assert f is not None and f.complete and f.proven and f.stopped is None and plan.solve.solves == 0
    assert f.upper_usd == pytest.approx(plan.solve.objective_usd) and f.lower_usd == pytest.approx(plan.solve.bound_usd)
    assert f.node_solves > 0 and f.master_solves >= 1 and f.floors > 0
    warm_seen = 0
    for s in plan.scenarios:
        for i, q in enumerate(s.quarters):
            for r in ("a", "b"):
                pooled = sum(x.chips for x in q.pools if x.region == r)
                warm = sum(w.chips for w in q.warm_pool if w.region == r)
                warm_seen += warm
                assert pooled + warm == sum(x.chips_running for x in q.pods_in_service if x.region == r), (s.name, q.quarter, r)
            usd_h = sum(x.cost_per_hour_usd for x in q.pools) + sum(w.cost_per_hour_usd for w in q.warm_pool)
            assert usd_h == pytest.approx(q.fleet_cost_per_hour_usd, rel=1e-5)
            expect = (q.fleet_cost_per_hour_usd + q.shed_cost_per_hour_usd) * plan.hours_per_quarter * p.discount(i)
            assert q.run_cost_usd == pytest.approx(expect, rel=1e-5), (s.name, q.quarter)
    assert warm_seen > 0, "the case must hold a warm pool"
    # report.md's chips-per-pool table adds up to the chips running too: the warm pool is its own row (newcomer trial 5)
    from fleetplan.purchase.report import render_page

    rows = [line.split("|")[1:-1] for line in render_page(plan).splitlines() if line.startswith("| ")]
    for s in plan.scenarios:
        for q in s.quarters:
            listed = sum(int(c[6]) for c in rows if c[0].strip() == s.name and c[1].strip() == q.quarter)
            assert listed == sum(x.chips_running for x in q.pods_in_service), (s.name, q.quarter)
    assert any(c[4].strip() == "warm pool" for c in rows)
