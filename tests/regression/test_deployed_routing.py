"""Issue 15 item 13: the deployed routing can be evaluated.

Before the fix `fleetplan whatif` only re-optimised the routing per hour (or held it
proportional to the survivors' load): `--routing plan` / `controller:FILE` were refused,
so an SRE could not ask what happens with the shares actually deployed; and `fleetplan
simulate --scenario lose:X@HH` refused every hour the plan did not list.

The instance: three regions whose daily peaks come at different hours, so the plan's one
(hour-independent) failover routing is not the best split at every hour: holding it
must cost shedding the re-optimised routing avoids.
"""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.results.plan import Plan
from tests.conftest import tiny_data

runner = CliRunner()
PODS = {"acc": {"installed": 0, "available_new": 20}}


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    d = tmp_path_factory.mktemp("three")
    (d / "three.yaml").write_text(yaml.safe_dump(tiny_data(
        regions={"a": {"peak_rps": 60, "hourly_load": [0.3] * 8 + [1.0] * 8 + [0.6] * 8, "pods": PODS, "failover_to": ["b", "c"]},
                 "b": {"peak_rps": 30, "hourly_load": [1.0] * 8 + [0.6] * 8 + [0.3] * 8, "pods": PODS, "failover_to": ["a", "c"]},
                 "c": {"peak_rps": 30, "hourly_load": [0.6] * 8 + [0.3] * 8 + [1.0] * 8, "pods": PODS, "failover_to": ["a", "b"]}},
        failover={"n_minus_1": True},
        workload={"classes": {"std": {"share": 0.8},
                              "batch": {"share": 0.2, "sheddable": True, "slos": [], "spec_acceptance": 0.5}}})))
    r = run("solve", d / "three.yaml", "-o", d / "plan.json")
    assert r.exit_code == 0, r.output
    return d, Plan.model_validate_json((d / "plan.json").read_text())


def _event(d, *args):
    r = run("whatif", d / "plan.json", "--phase", "steady", "--json", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)["events"][0]


def test_whatif_holds_the_plans_failover_routing(three):
    d, plan = three
    shares = {(x.lost, x.to): x.share for x in plan.routing}
    held = _event(d, "--lose", "a", "--hour", "16", "--routing", "plan")
    assert held["routing"] == "plan" and "routing held at the plan's failover shares" in held["label"]
    assert {(r["lost"], r["to"]): r["share"] for r in held["routes"]} == pytest.approx({k: v for k, v in shares.items() if k[0] == "a"}, abs=1e-6)
    assert any("not re-optimised" in n for n in held["notes"])
    free = _event(d, "--lose", "a", "--hour", "16")
    assert free["routing"] == "optimise" and free["shed_rps"] == pytest.approx(0.0, abs=1e-6)
    # the deployed split sends c more than its share at c's peak hour: batch must be shed there,
    # no more than the plan's own scenario of that hour sheds (one feasible way, same routing)
    sized = next(s for s in plan.scenarios if s.name == "lose:a@16")
    assert 0.5 < held["shed_rps"] <= sized.shed_rps + 1e-6
    assert held["residual_request_equivalents"] == 0.0


def test_a_second_lost_target_gets_no_share(three):
    d, _ = three
    ev = _event(d, "--lose", "a", "--lose", "b", "--hour", "12", "--routing", "plan")
    assert {(r["lost"], r["to"]): r["share"] for r in ev["routes"]} == {("a", "c"): 1.0, ("b", "c"): 1.0}
    assert any("lose a [all]: the held shares to b (lost too) are spread" in n for n in ev["notes"])


def test_whatif_holds_a_controller_documents_routing(three, tmp_path):
    d, plan = three
    assert run("place", d / "plan.json", "-o", tmp_path / "pl.json").exit_code == 0
    assert run("export", tmp_path / "pl.json", "--plan", d / "plan.json", "-o", tmp_path / "c.json").exit_code == 0
    ev = _event(d, "--lose", "a", "--hour", "16", "--routing", f"controller:{tmp_path / 'c.json'}")
    assert ev["routing"] == "controller" and "controller document" in ev["label"]
    want = {(x.lost, x.to): x.share for x in plan.routing if x.lost == "a"}
    assert {(r["lost"], r["to"]): r["share"] for r in ev["routes"]} == pytest.approx(want, abs=1e-6)
    doc = json.loads((tmp_path / "c.json").read_text())
    doc["failover_routing"]["a"] = [{"tier": "all", "to": "b", "share": 0.9}, {"tier": "all", "to": "c", "share": 0.1}]
    (tmp_path / "edited.json").write_text(json.dumps(doc))
    ev = _event(d, "--lose", "a", "--hour", "16", "--routing", f"controller:{tmp_path / 'edited.json'}")
    assert {(r["lost"], r["to"]): r["share"] for r in ev["routes"]} == pytest.approx({("a", "b"): 0.9, ("a", "c"): 0.1})
    doc["failover_routing"]["a"][0]["share"] = 0.5
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    r = run("whatif", d / "plan.json", "--lose", "a", "--routing", f"controller:{tmp_path / 'bad.json'}")
    assert r.exit_code == 2 and "sum to 0.600000, not 1" in r.output


def test_simulate_any_loss_hour(three):
    d, plan = three
    assert "lose:a@13" not in {s.name for s in plan.scenarios}
    r = run("simulate", d / "plan.json", "--region", "c", "--scenario", "lose:a@13", "--duration", "20", "--warmup", "5", "--json")
    assert r.exit_code == 0, r.output
    tier = json.loads(r.stdout)["tiers"][0]
    assert tier["scenario"] == "lose:a@13"
    assert any("not a scenario of the plan" in n and "failover routing held" in n for n in tier["notes"])
    # hours 08-15 have the same loads and the routing is the plan's: the same offered load as its lose:a@08
    at08 = next(p for s in plan.scenarios if s.name == "lose:a@08" for p in s.pools if p.region == "c" and p.role == "prefill")
    assert tier["load_rps"] == pytest.approx(at08.arrivals_rps + at08.clamped_rps, rel=1e-5)
    r = run("simulate", d / "plan.json", "--region", "a", "--scenario", "lose:a@13")
    assert r.exit_code == 2 and "loses a itself" in r.output


def test_a_built_loss_scenario_matches_the_plans_at_a_listed_hour(three):
    """The construction (loads at the hour, routing held) rebuilds a listed scenario's arrivals."""
    from fleetplan.instance.io import load_instance
    from fleetplan.whatif import loss_scenario

    d, plan = three
    inst = load_instance(d / "three.yaml")
    built, notes = loss_scenario(inst, plan, "a", 16)
    listed = next(s for s in plan.scenarios if s.name == "lose:a@16")
    rows = lambda sc: {(p.region, p.tier, p.role, k): getattr(p, k) for p in sc.pools for k in ("arrivals_rps", "diverted_rps")}  # noqa: E731
    assert rows(built) == pytest.approx(rows(listed), rel=1e-5)
    assert built.shed_rps <= listed.shed_rps + 1e-6 and "in the transient phase" in notes[0]
