"""With unserved demand priced, a quarter whose pods in service cannot carry the whole peak
serves what they can and sheds the rest (newcomer trial of issue 18: 2 pods that serve
~34 of 40 requests/s left all 40 unserved, because each node's pool minimum -- the slices
that carry the whole peak -- was kept although the node's pods cannot hold it)."""

from __future__ import annotations

import pytest
import yaml

from fleetplan.instance.io import parse_instance
from fleetplan.purchase.io import parse_purchase
from fleetplan.purchase.solve import solve_purchase
from fleetplan.sizing import solve
from fleetplan.solvers.base import SolveOptions
from tests.purchase.helpers import base_data, write_base

TIGHT = SolveOptions(mip_gap=1e-6)


def _spike(base: str, policy: dict) -> dict:
    """Three quarters, 2 installed pods, nothing deliverable before 2027Q3 (lead time 2),
    demand x2 in 2027Q2 only."""
    return {
        "base": base,
        "quarters": {"labels": ["2027Q1", "2027Q2", "2027Q3"], "discount_rate_per_year": 0.0},
        "installed": [{"region": "a", "chip": "acc", "pods": 2}],
        "supply": [{"chip": "acc", "price": {"kind": "capital", "usd_per_pod": 10000}, "lead_time_quarters": 2, "max_pods_delivered_per_quarter": 4}],
        "demand": {"kind": "tree", "root": {"demand": 1.0, "children": [{"demand": 2.0, "children": [{"demand": 1.0}]}]}},
        "policy": policy,
    }


def _snapshot_unserved(rps: float, pods: int) -> float:
    d = base_data()
    d["regions"]["a"]["peak_rps"] = rps
    d["regions"]["a"]["pods"] = {"acc": {"installed": pods, "available_new": 0}}
    out = solve(parse_instance(d, "snapshot"), TIGHT)
    assert out.plan is not None and out.plan.status == "shortfall"
    return sum(s.unserved_rps for s in out.plan.scenarios if s.name == "normal")


def test_a_short_quarter_serves_what_its_pods_can(tmp_path):
    plan = solve_purchase(parse_purchase(_spike(write_base(tmp_path), {"unserved": {"kind": "priced", "usd_per_1m_tokens": 10}})), TIGHT, value=False)
    q2 = plan.scenarios[0].quarters[1]
    assert q2.quarter == "2027Q2" and q2.peak_rps["a"] == pytest.approx(40.0)
    assert q2.pods_in_service[0].pods == 2 and q2.pods_in_service[0].chips_running == 4  # every chip it has runs
    least = _snapshot_unserved(40.0, 2)
    assert 0 < least < 20  # the snapshot with the same 2 pods serves most of the load
    # the purchase quarter leaves no more unserved than the snapshot's least (at 10 USD per 1M tokens a chip-hour is cheap)
    assert q2.unserved_rps == pytest.approx(least, rel=1e-3, abs=1e-3)
    assert q2.plan_status == "shortfall"


def test_the_hard_tree_names_the_least_unserved_the_pods_can_leave(tmp_path):
    # the same tree with every request required: exit 3's "least unserved" is the snapshot's, not the whole peak
    from fleetplan.purchase.solve import NoPurchasePlan

    with pytest.raises(NoPurchasePlan) as e:
        solve_purchase(parse_purchase(_spike(write_base(tmp_path), {"unserved": {"kind": "hard"}})), TIGHT, value=False)
    import re

    got = re.search(r"still leave ([0-9.]+) requests/s of region a unserved", str(e.value))
    assert got is not None and "2027Q2" in str(e.value), str(e.value)
    assert float(got.group(1)) == pytest.approx(_snapshot_unserved(40.0, 2), rel=1e-2)
