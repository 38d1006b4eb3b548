"""KV over the DCN in the simulator (issue 20): the measured share of requests whose KV
crossed pods beside the plan's prediction, the TTFT of those requests against those over
ICI, the routing the run used (the placement's weights -- those of the scenario when the
placement carries them, else the normal peak's held --, or the plan's rule on the placed
pods), the warm slices' pods in a region loss, and the command line."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.cli.common import dumps_json
from fleetplan.instance.io import parse_instance
from fleetplan.results.dcn import tier_flow
from fleetplan.placement.document import RouteWeight
from fleetplan.results.plan import PodContent
from fleetplan.sim.dcn import complete_routes, plan_pods, routes_share, rule_routes
from fleetplan.sim.report import SimReport
from fleetplan.sim.run import simulate
from fleetplan.sim.setup import tier_setups
from fleetplan.sizing import solve
from tests.conftest import tiny_data

runner = CliRunner()


def _pods_instance(rps: float, two_regions: bool = False, dcn_gbytes_per_s: float = 2.0):
    """The tiny instance sized with pods of 4 one-chip slots and a DCN ceiling of 30%: at 40
    req/s its plan puts 1 decode + 3 prefill slices in one pod and the fourth prefill slice
    alone in another, so a quarter of the KV crosses the DCN (a slow one, 2 GB/s per slice:
    the 131 MB of a 2,000-token prompt take 66 ms)."""
    over = dict(chips={"acc": {"chips_per_pod": 4, "chips_per_vm": 1, "slice_shapes": [1, 2]}},
                network={"dcn_gbytes_per_s_per_slice": dcn_gbytes_per_s}, placement={"dcn_share_max": 0.3},
                regions={"a": {"peak_rps": rps, "pods": {"acc": {"installed": 0, "available_new": 10}}, "failover_to": ["b"] if two_regions else []}})
    if two_regions:
        over["regions"]["b"] = {"peak_rps": rps, "pods": {"acc": {"installed": 0, "available_new": 10}}}
        over["failover"] = {"n_minus_1": True}
    data = tiny_data(**over)
    if not two_regions:
        del data["regions"]["b"]
    return parse_instance(data, "pods-dcn")


@pytest.fixture(scope="module")
def quarter():
    inst = _pods_instance(40)
    plan = solve(inst).plan
    assert plan.status == "verified"
    return inst, plan


def _row(rep, key, tier=None):
    t = next(t for t in rep.tiers if tier is None or t.tier == tier)
    return next(m for p in t.pools if p.role == "prefill" for m in p.metrics if m.key == key)


def test_the_measured_dcn_share_is_the_plans_prediction(quarter):
    """The plan predicts 25% of the requests cross (one of four prefill slices has no decode
    slice in its pod); the simulation with the plan's pods measures it within its interval,
    and the routes it ran send what the plan's rule does."""
    inst, plan = quarter
    pred = next(p.dcn_share for sc in plan.scenarios for p in sc.pools if p.role == "prefill")
    assert pred == pytest.approx(0.25)
    rep = simulate(inst, plan, "a", duration_s=200, warmup_s=20, placement=plan_pods(plan), seed=1)
    row = _row(rep, "dcn_share")
    assert row.plan == pytest.approx(0.25) and row.model == pytest.approx(0.25)
    assert row.simulated == pytest.approx(0.25, abs=0.02) and row.ci95[0] <= row.simulated <= row.ci95[1]
    d = rep.tiers[0].dcn
    assert d.routing == "rule" and d.rule_share == pytest.approx(0.25) and d.pods_differing == 0 and d.decode_elsewhere == 0
    assert d.crossed / d.prefilled == pytest.approx(row.simulated, rel=1e-5) and rep.kv_routing == "rule" and rep.placement is None


def test_the_dcn_cost_in_ttft_is_measured_and_predicted(quarter):
    """Requests whose KV crossed the 2 GB/s DCN pay ~66 ms more (less the overlap) than
    those over ICI: the simulated split agrees with the plan's evaluator and the model at
    a share of 1 and 0 within 5% at p50, and the p99 the DCN adds is what the plan said
    within a few ms (its p99 moves by ~24 ms)."""
    inst, plan = quarter
    rep = simulate(inst, plan, "a", duration_s=200, warmup_s=20, placement=plan_pods(plan), seed=1)
    dcn50, ici50 = _row(rep, "ttft_dcn_p50_ms"), _row(rep, "ttft_ici_p50_ms")
    for r in (dcn50, ici50):
        assert r.simulated == pytest.approx(r.plan, rel=0.05) and r.model == pytest.approx(r.plan, rel=1e-3)
    assert dcn50.simulated - ici50.simulated == pytest.approx(dcn50.plan - ici50.plan, rel=0.1)
    assert dcn50.plan - ici50.plan > 40.0
    cost = _row(rep, "ttft_dcn_cost_p99_ms")
    assert cost.plan > 10.0 and cost.model == pytest.approx(cost.plan, rel=0.01)
    assert cost.simulated == pytest.approx(cost.plan, abs=8.0)
    # the overall TTFT's model column pays the share the routes send: it is the plan's estimate
    assert _row(rep, "ttft_p50_ms").model == pytest.approx(_row(rep, "ttft_p50_ms").plan, rel=1e-3)


def test_a_placement_routed_by_its_weights_measures_what_they_send(quarter):
    """A placement object (pods and routing weights, the fields the simulator reads) that
    sends every prefill pod's KV to the lone decode pod: the run measures the weights'
    share; a weight that sends the 3-slice pod's KV half across raises it accordingly."""
    inst, plan = quarter
    pods = plan_pods(plan)
    lone = next(s.pod for s in pods.slices if s.role == "prefill" and sum(x.pod == s.pod for x in pods.slices) == 1)
    home = next(s.pod for s in pods.slices if s.role == "decode")
    rows = [RouteWeight(region="a", tier="all", from_pod=home, to_pod=home, share=1.0, rps=30.0),
            RouteWeight(region="a", tier="all", from_pod=lone, to_pod=home, share=1.0, rps=10.0)]
    rep = simulate(inst, plan, "a", duration_s=100, warmup_s=10, placement=_Placed(pods.slices, rows), seed=2)
    assert rep.tiers[0].dcn.routing == "placement" and _row(rep, "dcn_share").simulated == pytest.approx(0.25, abs=0.02)
    assert rep.kv_routing == "placement" and rep.placement_hash is not None


@dataclass(frozen=True)
class _Placed:
    """The fields of a placement the simulator reads: slices, the normal peak's routing and
    (a placement of a plan sized with its pods) the routing of each scenario."""

    slices: tuple
    routing: list
    scenarios: list | None = None

    def model_dump(self, mode=None):
        return {"slices": [s.__dict__ for s in self.slices], "routing": [w.model_dump() for w in self.routing]}


@dataclass(frozen=True)
class _ScenarioRouting:
    scenario: str
    routing: list
    warm: list = field(default_factory=list)


@dataclass(frozen=True)
class _WarmJoin:
    slice_id: str
    pod: str
    region: str
    tier: str
    role: str


@pytest.fixture(scope="module")
def seventh():
    """Two regions failing over to each other; each region's 7 prefill slices sit 3 + 3 with a
    decode slice each and 1 alone: 1/7 of the KV crosses."""
    inst = _pods_instance(40, two_regions=True)
    plan = solve(inst).plan
    assert plan.status == "verified"
    return inst, plan


def test_a_region_loss_takes_the_scenarios_routing_or_holds_the_normal_peaks_and_says_so(seventh):
    inst, plan = seventh
    pods = plan_pods(plan)
    pre = sorted({s.pod for s in pods.slices if (s.region, s.role) == ("a", "prefill")})
    dec = sorted({s.pod for s in pods.slices if (s.region, s.role) == ("a", "decode")})
    lone = next(p for p in pre if p not in dec)
    normal = [RouteWeight(region="a", tier="all", from_pod=p, to_pod=p, share=1.0, rps=1.0) for p in dec]
    normal += [RouteWeight(region="a", tier="all", from_pod=lone, to_pod=q, share=0.5, rps=1.0) for q in dec]
    loss = next(sc.name for sc in plan.scenarios if sc.lost_region == "b")
    crossing = [RouteWeight(region="a", tier="all", from_pod=dec[0], to_pod=q, share=0.5, rps=1.0) for q in dec]
    crossing += [w for w in normal if w.from_pod != dec[0]]
    held = tier_setups(inst, plan, "a", None, loss, placement=_Placed(pods.slices, normal))[0]
    own = tier_setups(inst, plan, "a", None, loss, placement=_Placed(pods.slices, normal, [_ScenarioRouting(loss, crossing)]))[0]
    assert held.dcn.routing == "placement-normal" and any("normal peak" in n for n in held.notes)
    assert held.dcn.routed_share == pytest.approx(1 / 7)
    assert own.dcn.routing == "placement" and not any("normal peak" in n for n in own.notes)
    assert own.dcn.routed_share == pytest.approx((3 * 0.5 + 1) / 7)
    rep = simulate(inst, plan, "a", None, loss, duration_s=60, warmup_s=10, placement=_Placed(pods.slices, normal, [_ScenarioRouting(loss, crossing)]),
                   seed=3)
    assert _row(rep, "dcn_share").simulated == pytest.approx(2.5 / 7, abs=0.03)
    # the plan's rule on the same pods: what the plan predicts for the scenario
    rule = tier_setups(inst, plan, "a", None, loss, placement=_Placed(pods.slices, normal), kv_routing="rule")[0]
    rec = next(p for p in rule.scenario.pools if (p.region, p.role) == ("a", "prefill"))
    assert rule.dcn.routing == "rule" and rule.dcn.routed_share == pytest.approx(rec.dcn_share, abs=1e-6) == rule.dcn.rule_share


def test_warm_slices_that_join_sit_in_their_pods(solved):
    """Gemini loses a region: warm slices join a survivor's prefill pool (the plan's first
    loss where they do; which one moves with the incumbent, issue 39 item 20 moved it, and
    which tier too: in today's plan the warm pools are ironwoodx8 and the long-tier prefill
    pools ironwoodx32, so warm slices join short-tier prefill pools only). The run no
    longer fails on them (their slices had no pod), they sit in the pods of the placement's
    warm slices (or where the scenario's routing says), and the plan's rule counts them as
    crossing."""
    inst, plan = solved("gemini-ironwood")
    pods = plan_pods(plan)
    sc, rec = next((s, p) for s in plan.scenarios for p in s.pools if s.kind == "loss" and p.role == "prefill" and p.warm_slices >= 1)
    region, tier = rec.region, rec.tier
    warm_ids = sorted(s.id for s in pods.slices if s.region == region and s.role == "warm" and s.slice == rec.slice)
    warm_pods = {s.id: s.pod for s in pods.slices}
    # the placement's warm slices of the shape in slice-id order, the region's records taken by (tier, role): the
    # records before this one (another tier's or decode's pool joined by warm slices of the same shape) take theirs first
    before = sum(p.warm_slices for p in sc.pools if p.region == region and p.slice == rec.slice and p.warm_slices > 0
                 and (p.tier, p.role) < (rec.tier, rec.role))
    su = tier_setups(inst, plan, region, [tier], sc.name, placement=pods)[0]
    assert su.prefill[4][-rec.warm_slices:] == tuple(warm_pods[i] for i in warm_ids[before:before + rec.warm_slices])
    there = next(s.pod for s in pods.slices if (s.region, s.tier, s.role) == (region, tier, "decode"))
    joins = [_WarmJoin(i, there, region, tier, "prefill") for i in warm_ids[:rec.warm_slices]]
    moved = tier_setups(inst, plan, region, [tier], sc.name, placement=_Placed(pods.slices, [], [_ScenarioRouting(sc.name, [], joins)]))[0]
    assert moved.prefill[4][-rec.warm_slices:] == (there,) * rec.warm_slices
    rep = simulate(inst, plan, region, [tier], sc.name, duration_s=4, warmup_s=2, placement=pods, seed=1)
    row = _row(rep, "dcn_share")
    assert row.plan == pytest.approx(rec.dcn_share) and row.simulated == pytest.approx(row.model, abs=0.015)


@pytest.mark.parametrize("pods,rps", [
    # per pod (prefill slices, decode slices of 5 req/s each); the pool's requests/s
    ([(3, 8), (1, 0)], 40.0),
    ([(3, 4), (3, 5), (1, 0)], 70.0),
    ([(4, 1), (2, 6), (2, 0)], 80.0),
    ([(2, 0), (2, 2), (1, 20)], 100.0),  # two pods over their rate, one taking their excess
])
def test_the_rule_routes_send_the_plans_rule_share(pods, rps):
    """rule_routes sends exactly the share results.dcn.tier_flow (the plan's rule) predicts
    for the same pods, every pod's shares summing to 1 (decode carrying the load, as in a
    verified plan)."""
    pre = tuple(p for i, (n, _) in enumerate(pods) for p in [f"a/acc/{i:02d}"] * n)
    rates = {f"a/acc/{i:02d}": 5.0 * d for i, (_, d) in enumerate(pods) if d > 0}
    routes = complete_routes(rule_routes(pre, rates, rps), pre, rates)
    for rows in routes.values():
        assert sum(w for _, w in rows) == pytest.approx(1.0)
    contents = [PodContent(region="a", chip="acc", pod=i, slices={"all/prefill/accx1": n, "all/decode/accx1": d}, chips_used=0,
                           dcn_egress_gbytes_per_s=0.0) for i, (n, d) in enumerate(pods)]
    want = tier_flow(contents, "all", rps, len(pre), 0, None, {"accx1": 5.0}, 0.0).share
    assert routes_share(routes, pre) == pytest.approx(want, abs=1e-12)


def test_plan_pods_need_a_plan_sized_with_pods():
    inst = parse_instance(tiny_data(placement={"size_with_pods": False}), "tiny")
    plan = solve(inst).plan
    assert plan.pods is None
    with pytest.raises(ValueError, match="without pods"):
        plan_pods(plan)


# ----------------------------------------------------------------------------- the command line


@pytest.fixture(scope="module")
def quarter_file(quarter, tmp_path_factory):
    _, plan = quarter
    p = tmp_path_factory.mktemp("dcn") / "plan.json"
    p.write_text(dumps_json(plan.model_dump(mode="json")))
    return p


def test_the_table_and_json_carry_the_dcn_rows(quarter_file):
    import jsonschema

    args = ["simulate", str(quarter_file), "-r", "a", "--placement", "plan", "--duration", "60", "--warmup", "5"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    for text in ("KV over the DCN (of the requests prefilled)", "TTFT p99, requests with KV over the DCN", "TTFT p99 the DCN adds",
                 "KV over the DCN:", "the plan predicts 25.0%", "the plan's rule on the plan's pods"):
        assert text in r.output, text
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SimReport.model_json_schema())
    t = doc["tiers"][0]
    assert t["dcn"]["routing"] == "rule" and doc["kv_routing"] == "rule" and doc["placement"] == "plan"
    keys = {m["key"] for p in t["pools"] for m in p["metrics"]}
    assert {"dcn_share", "ttft_dcn_p50_ms", "ttft_dcn_p99_ms", "ttft_ici_p50_ms", "ttft_ici_p99_ms", "ttft_dcn_cost_p99_ms"} <= keys


@pytest.mark.parametrize("args,needle", [
    (["--kv-routing", "nearest"], "--kv-routing"),
    (["--kv-routing", "rule"], "goes with --placement"),
    (["--placement", "plan", "--kv-routing", "placement"], "no routing weights"),
])
def test_bad_kv_routing_is_exit_2_naming_the_option(quarter_file, args, needle):
    r = runner.invoke(app, ["simulate", str(quarter_file), "-r", "a", "--duration", "5", *args])
    assert r.exit_code == 2 and needle in r.output, r.output


def test_plan_pods_of_a_plan_sized_without_pods_is_exit_2(tmp_path):
    inst = parse_instance(tiny_data(placement={"size_with_pods": False}), "tiny")
    p = tmp_path / "plan.json"
    p.write_text(dumps_json(solve(inst).plan.model_dump(mode="json")))
    r = runner.invoke(app, ["simulate", str(p), "-r", "a", "--placement", "plan", "--duration", "5"])
    assert r.exit_code == 2 and "--placement" in r.output and "sized without" in r.output, r.output


def test_every_report_field_and_dcn_row_is_documented():
    """docs/cli.md's simulate section names every field of the report (SimReport, SimTier,
    SimDcn) and every DCN row key."""
    from pathlib import Path

    from fleetplan.sim.report import SimDcn, SimTier

    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    sec = text[text.index("## `fleetplan simulate"):]
    sec = sec[:sec.index("\n## ", 10)]
    names = set(SimReport.model_fields) | set(SimTier.model_fields) | set(SimDcn.model_fields)
    names |= {"dcn_share", "ttft_dcn_p50_ms", "ttft_dcn_p99_ms", "ttft_ici_p50_ms", "ttft_ici_p99_ms", "ttft_dcn_cost_p99_ms"}
    missing = sorted(n for n in names if f"`{n}`" not in sec)
    assert not missing, f"undocumented simulation report keys in docs/cli.md: {missing}"


def test_the_python_api_simulates_the_plans_pods(quarter):
    import fleetplan

    inst, plan = quarter
    rep = fleetplan.simulate(plan, "a", duration_s=30, warmup_s=5, placement="plan", instance=inst)
    assert rep.tiers[0].dcn.routing == "rule" and _row(rep, "dcn_share").plan == pytest.approx(0.25)


def test_the_validation_page_has_the_dcn_section_the_cli_page_points_to():
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    title = "KV over the DCN: simulated vs predicted"
    assert f"## {title}" in (docs / "validation.md").read_text()
    assert title in (docs / "cli.md").read_text()


def test_a_sweep_with_a_placement_models_the_routes_dcn_share(quarter):
    """The load sweep's model curve pays the DCN share the placement's routes send: on the
    slow DCN its TTFT p99 is above the same sweep's without pods, as the simulated points are."""
    from fleetplan.sim.sweep import load_sweep

    inst, plan = quarter
    placed = tier_setups(inst, plan, "a", placement=plan_pods(plan))[0]
    bare = tier_setups(inst, plan, "a")[0]
    a = load_sweep(inst, placed, [], utilisations=(0.3,), duration_s=60, warmup_s=5)
    b = load_sweep(inst, bare, [], utilisations=(0.3,), duration_s=60, warmup_s=5)
    assert a.points[0].model_ttft_ms > b.points[0].model_ttft_ms + 5.0
    assert a.points[0].ttft_ms == pytest.approx(a.points[0].model_ttft_ms, rel=0.15)
