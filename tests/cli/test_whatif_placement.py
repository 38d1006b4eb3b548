"""``fleetplan whatif --placement``: a region loss reports, per surviving region x tier, the
DCN share by the placement's routing in that loss beside its ceiling and the plan's
prediction (issue 20). The shares are recomputed here from the placement's routing rows
and warm joins, not copied from its records; a placement of another plan, or one without
scenario routing, is exit 2 naming --placement. The small two-region instance of the
Kubernetes tests (its tier routes more than its 5% ceiling over the DCN: the plan
declares the overage), solved and placed once per module."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.whatif.report import WhatIfReport
from tests.k8s.conftest import small_data

runner = CliRunner()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(directory, instance, plan, placement) with small.yaml, plan.json, placement.json in it."""
    import pyomo.environ  # noqa: F401 -- before SciPy, as the CLI does

    from fleetplan.instance.io import parse_instance
    from fleetplan.placement import place
    from fleetplan.sizing import solve

    inst = parse_instance(small_data(), "small")
    plan = solve(inst).plan
    pl = place(inst, plan)
    assert plan.pods is not None and pl.schema_version == 2
    d = tmp_path_factory.mktemp("whatif-placement")
    (d / "small.yaml").write_text(yaml.safe_dump(small_data()))
    (d / "plan.json").write_text(json.dumps(plan.model_dump(mode="json")))
    (d / "placement.json").write_text(json.dumps(pl.model_dump(mode="json")))
    return d, inst, plan, pl


def _run(d, *args):
    return runner.invoke(app, ["whatif", str(d / "plan.json"), "-i", str(d / "small.yaml"), *args])


def _independent(inst, pl, scenario: str, region: str, tier: str) -> tuple[float, float, dict]:
    """(DCN share, req/s prefilled, {(pod, role): warm slices joined}) of ``region`` x
    ``tier`` in the placement's ``scenario``, from its routing rows and warm joins: the rows
    must carry lambda / n per prefill slice of each pod (the warm slices that join counted
    in their pods), and the share is the req/s routed to another pod over all."""
    sc = next(s for s in pl.scenarios if s.scenario == scenario)
    rows = [w for w in sc.routing if (w.region, w.tier) == (region, tier)]
    joins: dict[tuple[str, str], int] = {}
    for w in sc.warm:
        if (w.region, w.tier) == (region, tier):
            joins[(w.pod, w.role)] = joins.get((w.pod, w.role), 0) + 1
    pre: dict[str, int] = {}
    for s in pl.slices:
        if (s.region, s.tier, s.role) == (region, tier, "prefill"):
            pre[s.pod] = pre.get(s.pod, 0) + 1
    for (pod, role), n in joins.items():
        if role == "prefill":
            pre[pod] = pre.get(pod, 0) + n
    lam = sum(w.rps for w in rows)
    per = lam / sum(pre.values())
    for pod, n in pre.items():
        assert sum(w.rps for w in rows if w.from_pod == pod) == pytest.approx(per * n, rel=1e-6)
        assert sum(w.share for w in rows if w.from_pod == pod) == pytest.approx(1.0, abs=1e-6)
    return sum(w.rps for w in rows if w.from_pod != w.to_pod) / lam, lam, joins


def test_loss_reports_the_placements_shares(files):
    d, inst, plan, pl = files
    r = _run(d, "--lose", "a", "--hour", "11", "--placement", str(d / "placement.json"), "--json")
    assert r.exit_code == 0, r.output
    rep = WhatIfReport.model_validate_json(r.output)
    assert sorted(e.phase for e in rep.events) == ["steady", "transient"]
    record = next(s for s in plan.scenarios if s.name == "lose:a@11")
    for ev in rep.events:
        pd = ev.placement_dcn
        assert pd is not None and pd.scenario == "lose:a@11" and pd.same_hour
        assert [(t.region, t.tier) for t in pd.tiers] == [("b", "all")]  # the survivor's tiers only
        for t in pd.tiers:
            share, lam, joins = _independent(inst, pl, "lose:a@11", t.region, t.tier)
            assert t.dcn_share == pytest.approx(share, abs=1e-8) and t.rps == pytest.approx(lam, rel=1e-6)
            assert t.kv_out_rps == pytest.approx(share * lam, rel=1e-6)
            assert {(w.pod, w.role): w.slices for w in t.warm_joins} == joins and sum(joins.values()) == record.warm_slices_used
            assert t.plan_dcn_share == next(p.dcn_share for p in record.pools if (p.region, p.tier, p.role) == ("b", "all", "prefill"))
            assert t.dcn_share_max == inst.dcn_share_max_of(t.tier) == 0.05
            assert t.above_ceiling and t.overage_declared  # 58.8% > 5%, which the plan declares (sized_for)
        assert any("b/all: the placement sends" in n and "above its 5% ceiling" in n for n in ev.notes)
    # the console says the same
    r = _run(d, "--lose", "a", "--hour", "11", "--placement", str(d / "placement.json"), "--phase", "steady")
    assert r.exit_code == 0, r.output
    assert "KV over the DCN by the placement's routing in lose:a@11" in r.output and "(declared)" in r.output


def test_an_hour_the_plan_does_not_list_uses_a_dominating_one(files):
    d, inst, plan, pl = files
    from fleetplan.whatif import placement_scenario

    listed = sorted(s.hour for s in plan.scenarios if s.lost_region == "a")
    h = next(h for h in range(24) if h not in listed)
    sc, how = placement_scenario(inst, pl, "a", h)
    assert how == "dominating" and sc.lost_region == "a" and sc.hour in listed
    assert all(inst.regions[r].hourly_load[sc.hour] >= inst.regions[r].hourly_load[h] for r in inst.regions)
    r = _run(d, "--lose", "a", "--hour", str(h), "--phase", "steady", "--placement", str(d / "placement.json"), "--json")
    assert r.exit_code == 0, r.output
    pd = WhatIfReport.model_validate_json(r.output).events[0].placement_dcn
    assert pd.scenario == sc.scenario and not pd.same_hour and f"no loss of a at {h:02d}:00 UTC" in pd.note and "at least that hour's" in pd.note
    share, _, _ = _independent(inst, pl, sc.scenario, "b", "all")
    assert pd.tiers[0].dcn_share == pytest.approx(share, abs=1e-8)


def test_pod_losses_get_a_note_and_no_share(files):
    d, *_ = files
    r = _run(d, "--lose-pods", "b:1", "--phase", "steady", "--placement", str(d / "placement.json"), "--json")
    assert r.exit_code == 0, r.output
    ev = WhatIfReport.model_validate_json(r.output).events[0]
    assert ev.placement_dcn is None and any("does not yet choose which pods are lost" in n for n in ev.notes)


def test_without_a_placement_the_report_is_unchanged(files):
    d, *_ = files
    r = _run(d, "--lose", "a", "--phase", "steady", "--json")
    assert r.exit_code == 0, r.output
    assert all("placement_dcn" not in e for e in json.loads(r.output)["events"])


def test_a_placement_of_another_plan_or_without_scenario_routing_exits_2(files, tmp_path):
    d, *_ = files
    doc = json.loads((d / "placement.json").read_text())
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc | {"plan_hash": "0" * 64}))
    r = _run(d, "--lose", "a", "--placement", str(other))
    assert r.exit_code == 2, r.output
    assert "--placement" in r.output and "another plan" in r.output and "fleetplan place" in r.output
    v1 = tmp_path / "v1.json"
    v1.write_text(json.dumps({k: v for k, v in doc.items() if k not in ("scenarios", "dcn")} | {"schema_version": 1}))
    r = _run(d, "--lose", "a", "--placement", str(v1))
    assert r.exit_code == 2, r.output
    assert "--placement" in r.output and "schema_version 1" in r.output
    r = _run(d, "--lose", "a", "--placement", str(tmp_path / "missing.json"))
    assert r.exit_code == 2 and "--placement" in r.output and "no such file" in r.output


def test_the_api_takes_the_placement_as_the_cli_does(files):
    """``fleetplan.api.what_if(..., placement=)`` gives the CLI's ``placement_dcn``, and a
    placement of another plan is an InputError naming --placement."""
    from fleetplan import api
    from fleetplan.errors import InputError

    d, inst, plan, pl = files
    rep = api.what_if(plan, lose=["b"], hour=11, phase="steady", routing="plan", instance=inst, placement=pl)
    cli = WhatIfReport.model_validate_json(_run(d, "--lose", "b", "--hour", "11", "--phase", "steady", "--routing", "plan",
                                                "--placement", str(d / "placement.json"), "--json").output)
    assert rep.events[0].placement_dcn is not None
    assert rep.events[0].placement_dcn == cli.events[0].placement_dcn
    other = pl.model_copy(update={"plan_hash": "0" * 64})
    with pytest.raises(InputError, match="--placement"):
        api.what_if(plan, lose=["b"], hour=11, phase="steady", instance=inst, placement=other)
