"""Issue 15 item 14: pools sized to 99.95% busy in failover with no margin for forecast error.

An instance now states a demand margin (``workload.demand_margin``, per region
``regions.*.demand_margin``; default 0, and then the plan says the fleet is sized to the
forecast exactly): the sizing and the verifier use (1 + margin) x the forecast, and every
pool reports the load growth over the forecast it absorbs before an SLO breaks, computed
by the evaluator (``growth_absorbed``), in the plan, the `solve` tables and the report.
"""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.instance.io import instance_hash, parse_instance
from fleetplan.results.evaluate import Context
from fleetplan.results.plan import Plan
from fleetplan.results.verify import verify
from fleetplan.sizing import solve
from tests.conftest import tiny_data

MARGIN = {"workload": {"demand_margin": 0.25}, "regions": {"b": {"demand_margin": 0.0}}}


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    base = parse_instance(tiny_data())
    d = tmp_path_factory.mktemp("margin")
    data = tiny_data(**MARGIN)
    (d / "m.yaml").write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(app, ["solve", str(d / "m.yaml"), "-o", str(d / "m.json")])
    assert r.exit_code == 0, r.output
    return base, solve(base).plan, parse_instance(data), Plan.model_validate(json.loads((d / "m.json").read_text())), r.output


def _slices(plan, region):
    return {p.role: p.slices for p in plan.pools if p.region == region}


def test_the_margin_sizes_its_region_and_only_it(plans):
    base, p0, inst, p1, _ = plans
    assert inst.sized_peak_rps("a") == pytest.approx(25.0) and inst.sized_peak_rps("b") == pytest.approx(20.0)
    normal = {(q.region, q.role): q for q in p1.scenarios[0].pools}
    assert normal[("a", "prefill")].arrivals_rps == pytest.approx(25.0) and normal[("b", "prefill")].arrivals_rps == pytest.approx(20.0)
    assert _slices(p1, "b") == _slices(p0, "b")
    assert sum(_slices(p1, "a").values()) > sum(_slices(p0, "a").values())
    # cost per token stays at the forecast: same tokens, more chips
    assert p1.cost.mean_output_tokens_per_s == p0.cost.mean_output_tokens_per_s
    assert p1.cost.cost_per_1m_output_tokens_usd > p0.cost.cost_per_1m_output_tokens_usd


def test_the_verifier_checks_the_margin(plans):
    base, p0, inst, p1, _ = plans
    assert p1.status == "verified" and verify(inst, p1) == []
    # the fleet sized for the forecast alone, presented for the instance with the margin, is refused
    forged = p0.model_copy(update={"instance_hash": instance_hash(inst)})
    v = verify(inst, forged)
    assert v and all("[a," in x.where for x in v) and {x.check for x in v} <= {"prefill_ttft", "decode_capacity"}


def test_growth_absorbed_is_where_an_slo_breaks(plans):
    base, p0, inst, p1, _ = plans
    ctx = Context(base)
    pre = next(q for q in p0.scenarios[0].pools if (q.region, q.role) == ("a", "prefill"))
    dec = next(q for q in p0.scenarios[0].pools if (q.region, q.role) == ("a", "decode"))
    g = 1.0 + pre.growth_absorbed
    assert 0.0 < pre.growth_absorbed < 1.0
    assert ctx.prefill("all", pre.slice, pre.slices, 20.0 * g * (1 - 1e-5), 0.0, False).meets_slo
    assert not ctx.prefill("all", pre.slice, pre.slices, 20.0 * g * (1 + 1e-4), 0.0, False).meets_slo
    assert dec.growth_absorbed == pytest.approx(dec.capacity / (20.0 * base.workload.output_tokens) - 1.0, rel=1e-5)
    # and agrees with the pressure, found by another route (the Erlang C capacity inverted)
    assert pre.growth_absorbed == pytest.approx(1.0 / pre.pressure - 1.0, rel=1e-4)
    # with a 25% margin in a, a's pools absorb at least 25% over the forecast
    for q in p1.scenarios[0].pools:
        assert q.growth_absorbed >= (0.25 if q.region == "a" else 0.0) - 1e-6


def test_the_margin_is_stated_in_the_plan_the_tables_and_the_report(plans):
    from fleetplan.report.data import build_report_data

    base, p0, inst, p1, out = plans
    assert p0.diagnostics[0].startswith("demand margin: none (workload.demand_margin 0, the default)")
    assert p1.diagnostics[0] == "demand margin: regions are sized and verified for a 125%, b 100% of their forecast peak_rps (forecast-error margins)"
    flat = " ".join(out.split())
    assert "Demand margin: regions are sized and verified for a 125%, b 100%" in flat
    assert "load growth absorbed" in flat and "The least growth any pool absorbs: +" in flat
    rep = build_report_data(inst, p1)
    assert rep.notes[0] == p1.diagnostics[0]
    rows = {(r.region, r.role): r for r in rep.fleet}
    assert rows[("a", "prefill")].growth_absorbed_least >= 0.25 - 1e-6 and rows[("a", "prefill")].growth_scenario == "normal"
