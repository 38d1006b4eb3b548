"""Issue 16 (newcomer trial, F3): `fleetplan place` refused a shortfall plan, blaming chip fit.

A plan `solve --write-unverified` wrote with status shortfall (the Gemini instance with
us-east at peak_rps 666,700: 15,360 chips of slices in 60 pods of 15,360 chips) ended
"no placement: us-east: the plan's slices (15,360 chips) do not fit the 60 up pods
(15,360 chips)". The chips fitted; the placement model sent the KV of the region-tier's
whole demand (600,030 req/s) to decode slices that take 38,848: the KV constraints were
infeasible and the message blamed the chips. A shortfall plan's KV is the KV of the
requests it serves (demand less unserved, at most what its decode slices take); place
now places the fleet as sized with a note, and names the chips only when they do not fit.

Reproduced on the tiny instance at 1,000 req/s per region on one 8-chip pod each.
"""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.models.placement.build import PlacementItem, RegionPlacementData
from fleetplan.placement.driver import PlacementInfeasible, _solve_region
from tests.conftest import tiny_data

runner = CliRunner()
ONE_POD = {r: {"peak_rps": 1000.0, "pods": {"acc": {"installed": 0, "available_new": 1}}} for r in ("a", "b")}


@pytest.fixture(scope="module")
def shortfall_plan(tmp_path_factory):
    d = tmp_path_factory.mktemp("i16place")
    (d / "inst.yaml").write_text(yaml.safe_dump(tiny_data(regions=ONE_POD)), encoding="utf-8")
    r = runner.invoke(app, ["solve", str(d / "inst.yaml"), "-o", str(d / "plan.json"), "--write-unverified"])
    assert r.exit_code == 3, r.output
    plan = json.loads((d / "plan.json").read_text())
    assert plan["status"] == "shortfall" and plan["scenarios"][0]["unserved_rps"] > 0
    return d / "plan.json", plan


def test_a_shortfall_plan_is_placed_as_sized_with_a_note(shortfall_plan, tmp_path):
    path, plan = shortfall_plan
    r = runner.invoke(app, ["place", str(path), "--json", "-o", str(tmp_path / "pl.json")])
    assert "do not fit" not in r.output, r.output
    assert r.exit_code == 0, r.output
    pl = json.loads((tmp_path / "pl.json").read_text())
    # every slice of the plan, in the pods the plan has
    assert len(pl["slices"]) == sum(p["slices"] for p in plan["pools"])
    assert {p["id"] for p in pl["pods"]} == {"a/acc/00", "b/acc/00"}
    o = plan["instance"]["workload"]["output_tokens"]
    normal = plan["scenarios"][0]
    for d in pl["demand"]:
        pools = [p for p in normal["pools"] if (p["region"], p["tier"]) == (d["region"], d["tier"])]
        unserved = max(p["shortfall"] / (o if p["role"] == "decode" else 1.0) for p in pools)
        decode_cap = sum(p["slices"] * p["decode_normal"]["tokens_per_s_per_slice"] / o for p in plan["pools"]
                         if (p["region"], p["tier"], p["role"]) == (d["region"], d["tier"], "decode"))
        # what the placement carries is what the plan serves, within what its decode slices take
        assert d["rps"] == pytest.approx(min(1000.0 - unserved, decode_cap), rel=1e-9)
        assert 0 < d["rps"] <= decode_cap * (1 + 1e-12)
        routed = sum(w["rps"] for w in pl["routing"] if (w["region"], w["tier"]) == (d["region"], d["tier"]))
        assert routed == pytest.approx(d["rps"], rel=1e-6)
    note = next(n for n in pl["notes"] if "shortfall plan" in n)
    assert "fleet as sized" in note and f"{normal['unserved_rps']:,.6g}" in note


def test_the_table_says_so_too(shortfall_plan):
    r = runner.invoke(app, ["place", str(shortfall_plan[0])])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "note: a shortfall plan" in flat and "places the fleet as sized" in flat and "checked" in flat


def _region(items, tier_rps=None, rate=10.0) -> RegionPlacementData:
    d = RegionPlacementData("a", [("a/acc/00", "acc", 8)], items)
    for t, v in (tier_rps or {}).items():
        d.tier_rps[t] = v
        d.decode_rps_per_slice[t] = rate
    return d


def test_chips_are_blamed_only_when_they_do_not_fit():
    # 10 chips of slices in one 8-chip pod: the chips
    d = _region([PlacementItem("all", "prefill", "accx1", "acc", 1, 6), PlacementItem("all", "decode", "accx1", "acc", 1, 4)],
                {"all": 10.0})
    with pytest.raises(PlacementInfeasible, match=r"slices \(10 chips\) do not fit the 1 up pods \(8 chips\)"):
        _solve_region(d, 10.0, 0.0)
    # 6 chips fit; 1,000 req/s of KV into 2 decode slices of 10 req/s do not: the KV is named, not the chips
    d = _region([PlacementItem("all", "prefill", "accx1", "acc", 1, 4), PlacementItem("all", "decode", "accx1", "acc", 1, 2)],
                {"all": 1000.0})
    with pytest.raises(PlacementInfeasible) as e:
        _solve_region(d, 10.0, 0.0)
    msg = str(e.value)
    assert "do not fit" not in msg and "chips)" not in msg
    assert "the slices fit the 1 up pods" in msg and "tier all 1,000 req/s, its decode slices 20 req/s" in msg
