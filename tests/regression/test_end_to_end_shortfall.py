"""Issue 15 item 3: shortfall plans that serve nothing.

Gemini at 1e7 req/s per region got a least-shortfall fleet of 952 decode slices per
region and no prefill; a 0.04 ms TPOT limit got prefill and no decode; both printed
$/1M tokens and latencies at 6,641% load. The first stage summed each role's shortfall,
so decode slices (many requests per chip) "reduced the shortfall" though no request
reached them. It now minimises the requests not served end to end -- min(prefill
served, decode served) per region-tier-scenario -- and withholds $/1M and latency
figures of pools over 100% load, with the reason.

The structure is reproduced on the tiny instance: one 8-chip pod per region.
"""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.tables.derived import FAILOVER, NORMAL, best_decode_op
from fleetplan.instance.io import parse_instance
from fleetplan.perf.pools import slice_specs, tier_mixes
from fleetplan.results.evaluate import Context
from fleetplan.sizing import solve
from tests.conftest import tiny_data

ONE_POD = {r: {"peak_rps": 1000.0, "pods": {"acc": {"installed": 0, "available_new": 1}}} for r in ("a", "b")}


@pytest.fixture(scope="module")
def overloaded(tmp_path_factory):
    """`fleetplan solve` of the tiny instance at 1,000 req/s per region on one pod each."""
    d = tmp_path_factory.mktemp("e2e")
    data = tiny_data(regions=ONE_POD)
    (d / "inst.yaml").write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(app, ["solve", str(d / "inst.yaml"), "-o", str(d / "plan.json"), "--write-unverified"])
    assert r.exit_code == 3, r.output
    from fleetplan.results.plan import Plan

    return parse_instance(data), Plan.model_validate(json.loads((d / "plan.json").read_text())), r.output


def _most_served_end_to_end(inst) -> float:
    """Brute force over every fleet of one pod (8 chips): the most requests/s a region
    serves end to end, min(prefill within the TTFT SLO, decode at its best legal point)."""
    ctx = Context(inst)
    (tm,) = tier_mixes(inst)
    lam = 1000.0
    pre, dec = {0: 0.0}, {0: 0.0}
    for sl in slice_specs(inst):
        op, _ = best_decode_op(inst, tm, sl, NORMAL)
        for n in range(1, 8 // sl.chips + 1):
            c = n * sl.chips
            pre[c] = max(pre.get(c, 0.0), ctx.prefill_max_scale(tm.name, sl.label, n, lam, 0.0, False) * lam)
            dec[c] = max(dec.get(c, 0.0), n * op.tokens_per_s / inst.workload.output_tokens if op else 0.0)
    return max(min(pre[a], dec[b]) for a in pre for b in dec if a + b <= 8)


def test_the_least_unserved_fleet_has_both_roles(overloaded):
    inst, plan, _ = overloaded
    assert plan.status == "shortfall"
    for r in ("a", "b"):
        assert {p.role for p in plan.pools if p.region == r} == {"prefill", "decode"}
    normal = plan.scenarios[0]
    best = _most_served_end_to_end(inst)
    assert 0 < best < 1000
    # what the plan serves end to end is the most any one-pod fleet serves (to the MIP's precision)
    assert normal.unserved_rps == pytest.approx(2 * (1000.0 - best), rel=2e-3)
    for p in normal.pools:  # each role's shortfall is at most the unserved, in requests
        short_req = p.shortfall / inst.workload.output_tokens if p.role == "decode" else p.shortfall
        assert short_req <= normal.unserved_rps / 2 * (1 + 1e-5)


def test_figures_over_full_load_are_withheld(overloaded):
    _, plan, out = overloaded
    c = plan.cost
    assert c.per_1m_withheld and "does not serve" in c.per_1m_withheld
    assert c.cost_per_1m_output_tokens_usd is None and c.cost_per_1m_tokens_blended_usd is None
    for p in plan.scenarios[0].pools:
        assert p.pressure > 1.0
        assert p.withheld.startswith("load at ") and not p.ttft_ms and not p.tpot_ms and p.occupancy is None
    flat = " ".join(out.split())
    assert "$ per 1M tokens withheld: in normal operation the fleet does not serve" in flat
    assert "per 1M output tokens, all cost carried" not in flat
    assert "withheld: load at" in flat and "Not served end to end at the normal peak" in flat


def test_the_report_withholds_them_too(overloaded):
    from fleetplan.report.data import build_report_data

    inst, plan, _ = overloaded
    d = build_report_data(inst, plan)
    assert any(n.startswith("$ per 1M tokens withheld") for n in d.notes)
    assert any("latencies withheld" in n for n in d.notes)
    assert all(s.usd_per_1m_output_daily_mean is None for s in d.cost_segments)


def test_no_prefill_when_no_decode_can_meet_the_tpot():
    # a 0.04 ms TPOT: no decode operating point is legal, so no request can be served at all
    data = tiny_data(regions={r: {"peak_rps": 20.0} for r in ("a", "b")})
    data["workload"]["classes"]["std"]["slos"][1]["limit_ms"] = 0.04
    inst = parse_instance(data)
    (tm,) = tier_mixes(inst)
    assert all(best_decode_op(inst, tm, sl, g)[0] is None for sl in slice_specs(inst) for g in (NORMAL, FAILOVER))
    plan = solve(inst).plan
    assert plan.status == "shortfall"
    assert plan.pools == [] and plan.cost.chips == 0
    assert plan.scenarios[0].unserved_rps == pytest.approx(40.0)
    assert plan.cost.per_1m_withheld is not None
    assert any("no slice shape can serve this tier's decode" in n for n in plan.diagnostics)
