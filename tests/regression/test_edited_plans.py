"""A plan edited by hand after the solve is refused (exit 2, the field named, nothing
written) by the commands that stand on it: each edit below was simulated, reported or
what-if'ed at its word before ``check_plan_records`` rebuilt the plan's records from
its pools (a doubled arrival rate simulated at 40 req/s, negative estimates printed as
ratios of -27, a faked batch-infill saving in the report, a verified plan relabelled
'shortfall')."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app

runner = CliRunner()


@pytest.fixture(scope="module")
def plans(plan_file):
    return {name: json.loads(plan_file(name).read_text()) for name in ("llama70b-h100", "gemini-ironwood")}


def _pool(doc, role, scenario=0):
    return next(q for q in doc["scenarios"][scenario]["pools"] if q["role"] == role)


def _dec(doc):
    return next(p for p in doc["pools"] if p["role"] == "decode")


def _double_infill(c):
    c["batch_infill_output_tokens_per_day"] *= 2
    c["cost_per_1m_output_tokens_with_infill_usd"] = (c["fleet_cost_per_hour_usd"] * 24 / (c["mean_output_tokens_per_s"] * 86400
                                                      + c["batch_infill_output_tokens_per_day"]) * 1e6)


EDITS = {
    "arrivals doubled": ("llama70b-h100", lambda d: _pool(d, "replica").update(arrivals_rps=_pool(d, "replica")["arrivals_rps"] * 2),
                         "scenarios[0].pools[0].arrivals_rps"),
    "negative TTFT estimate": ("llama70b-h100", lambda d: _pool(d, "replica")["ttft_estimate_ms"].update(p95=-5.0),
                               "scenarios[0].pools[0].ttft_estimate_ms.p95"),
    "status relabelled": ("llama70b-h100", lambda d: d.update(status="shortfall"), "status"),
    "infill doubled, its $/1M made to match": ("gemini-ironwood", lambda d: _double_infill(d["cost"]), "cost.batch_infill_output_tokens_per_day"),
    "negative occupancy": ("gemini-ironwood", lambda d: _pool(d, "decode").update(occupancy=-5.0), ".occupancy"),
    "TPOT estimate shrunk": ("gemini-ironwood", lambda d: _pool(d, "decode")["tpot_estimate_ms"].update(p50=0.001), ".tpot_estimate_ms.p50"),
    "speculation switched off in one place": ("gemini-ironwood", lambda d: _dec(d)["speculation"].update(draft_tokens=0), ".speculation.draft_tokens"),
    "batch cap 1": ("gemini-ironwood", lambda d: _dec(d)["decode_normal"].update(batch_cap=1), ".decode_normal."),
    # issue 39 item 20: the handoff reserve recorded beside the operating point is rebuilt too
    "handoff reserve zeroed": ("gemini-ironwood", lambda d: _dec(d)["decode_failover"].update(handoff_reserve_requests=0, handoff_reserve_gb=0.0),
                               ".decode_failover.handoff_reserve_"),
    "loss scenarios deleted": ("gemini-ironwood", lambda d: d.update(scenarios=d["scenarios"][:1]), "scenarios: the plan records 1 scenarios"),
    "a scenario given twice": ("gemini-ironwood", lambda d: d["scenarios"].append(d["scenarios"][1]), "given twice: lose:"),
    "status relabelled violations": ("llama70b-h100", lambda d: d.update(status="violations"), "the independent verifier finds no violation"),
    "binding rewritten": ("gemini-ironwood", lambda d: d.update(binding=[b.replace("sized by", "sized (it says) by") for b in d["binding"]]), "binding"),
}


#: every edit through simulate; report and whatif (the same check, another command) on three of them
CASES = [(c, "simulate") for c in EDITS] + [(c, cmd) for c in ("arrivals doubled", "infill doubled, its $/1M made to match", "loss scenarios deleted")
                                            for cmd in ("report", "whatif")]


@pytest.mark.parametrize("case,command", CASES)
def test_an_edited_plan_is_refused_naming_the_field(plans, tmp_path, case, command):
    name, edit, field = EDITS[case]
    doc = json.loads(json.dumps(plans[name]))
    edit(doc)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "out.json"
    region = doc["pools"][0]["region"]
    args = {"simulate": ["simulate", str(path), "--region", region, "--duration", "2", "--warmup", "1", "--scale", "0.05", "-o", str(out)],
            "report": ["report", str(path), "-o", str(tmp_path / "r.html")],
            "whatif": ["whatif", str(path), "--lose", region, "--json"]}[command]
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert field in r.output and "edited after it was solved" in r.output and "Traceback" not in r.output
    assert not out.exists() and not (tmp_path / "r.html").exists()


def test_the_unedited_plans_pass(plans):
    from fleetplan.instance.io import load_instance
    from fleetplan.results.plan import Plan
    from fleetplan.results.records import check_plan_records

    for name, doc in plans.items():
        assert check_plan_records(load_instance(name), Plan.model_validate(doc)) == []
