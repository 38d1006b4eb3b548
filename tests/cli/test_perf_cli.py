"""``fleetplan perf`` and ``fleetplan schema`` on the bundled instances; docs in step with the code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.instance.docgen import render_instance_doc
from fleetplan.instance.io import bundled_instances

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.mark.parametrize("name", bundled_instances())
def test_perf_tables_and_json(name):
    r = runner.invoke(app, ["perf", name])
    assert r.exit_code == 0, r.output
    assert "memory map" in r.output
    r = runner.invoke(app, ["perf", name, "--json"])
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert doc["instance"] == name
    assert len(doc["instance_hash"]) == 64


def test_perf_default_is_gemini_and_shows_the_brief():
    r = runner.invoke(app, ["perf"])
    assert r.exit_code == 0
    out = r.output
    assert "gemini-ironwood" in out
    assert "128 KiB/token" in out
    assert "1,536" in out  # 8-chip slice HBM
    assert "over the mix" in out


def _keys(o, prefix=""):
    if isinstance(o, dict):
        for k, v in o.items():
            yield prefix + k, k
            yield from _keys(v, prefix + k + ".")
    elif isinstance(o, list) and o:
        yield from _keys(o[0], prefix.rstrip(".") + "[].")


@pytest.mark.parametrize("name", ["gemini-ironwood", "llama70b-h100"])
def test_every_json_key_is_documented(name):
    doc = json.loads(runner.invoke(app, ["perf", name, "--json"]).stdout)
    text = (ROOT / "docs" / "cli.md").read_text()
    missing = set()
    for path, leaf in _keys(doc):
        if re.fullmatch(r"p\d+(\.\d+)?|k=\d+|off|(tpot|ttft|itl)_p\d+(\.\d+)?_ms", leaf):
            continue  # families documented by pattern (p99, k=4, tpot_pXX_ms)
        if re.search(r"_by_region\.[^.]+$", path):
            continue  # keyed by region name (documented as ..._by_region)
        forms = (f"`{leaf}`", f"{leaf}`", f".{leaf}", f"`{leaf}[]", f"`{leaf}.", f"{leaf}[]`")
        if not any(f in text for f in forms):
            missing.add(path)
    assert not missing, f"undocumented perf JSON keys in docs/cli.md: {sorted(missing)}"


def test_instance_doc_is_current():
    assert (ROOT / "docs" / "instance.md").read_text() == render_instance_doc(), (
        "docs/instance.md is stale: run `python -m fleetplan.instance.docgen > docs/instance.md`")


def test_schema_command(tmp_path):
    r = runner.invoke(app, ["schema"])
    assert r.exit_code == 0
    s = json.loads(r.stdout)
    assert s["title"] == "Instance"
    out = tmp_path / "s.json"
    r = runner.invoke(app, ["schema", "instance", "-o", str(out)])
    assert r.exit_code == 0 and json.loads(out.read_text()) == s
    r = runner.invoke(app, ["schema", "nonsense"])
    assert r.exit_code == 2


def test_version():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and "fleetplan" in r.output


def test_formulation_doc_is_current():
    from fleetplan.models.sizing.docgen import render

    assert (ROOT / "docs" / "formulation.md").read_text() == render(), (
        "docs/formulation.md is stale: run `python -m fleetplan.models.sizing.docgen > docs/formulation.md`")


def test_perf_rates_colocated_replicas_with_the_model_the_plan_is_sized_with():
    """Regression (issue 17): ``fleetplan perf`` rated colocated replicas with a second,
    older replica model (prefill-first, M/G/1 of one replica, a p99/p50 prior for the TPOT
    tail) while sizing and verification use perf.colocated; on the GPU scenario it
    disagreed with the plan. Now every schedule is listed and the fewest replicas any of
    them needs is the plan's count (tests/regression/bundled_plans.json)."""
    pins = json.loads((ROOT / "tests" / "regression" / "bundled_plans.json").read_text())["llama70b-h100-bf16-p99"]
    doc = json.loads(runner.invoke(app, ["perf", "llama70b-h100-bf16-p99", "--json"]).stdout)
    row = next(c for c in doc["colocated"] if c["slice"] == "h100x4")
    assert {o["schedule"] for o in row["schedules"]} >= {"prefill-first", "chunked-512"}
    assert row["replicas_needed"] == pins["slices"]["us-central/all/replica/h100x4"]
    at_max = next(r for r in row["load_table"] if abs(r["rps"] - row["max_rps_per_replica"]) < 1e-9 * max(row["max_rps_per_replica"], 1))
    assert not at_max["over_slo"] and at_max["tpot_p99_ms"] <= 50.0 + 1e-6 and at_max["ttft_p99_ms"] <= 1000.0 + 1e-6
    assert row["load_table"][-1]["over_slo"]  # 1.25 x the largest rate misses an SLO


def test_perf_marks_every_schedule_that_ties_for_fewest_replicas():
    """Regression (issue-17 trial): on the BF16 scenario chunked-512 and chunked-1024 both
    need 6 TP4 replicas; perf marked only chunked-1024 'chosen' while solve ran
    chunked-512, at the same cost. Every tied schedule is marked, and a line says solve may
    run either."""
    doc = json.loads(runner.invoke(app, ["perf", "llama70b-h100-bf16-p99", "--json"]).stdout)

    def ties(row):
        fewest = min(o["replicas_needed"] for o in row["schedules"] if o["replicas_needed"] is not None)
        return {o["schedule"] for o in row["schedules"] if o["replicas_needed"] == fewest}

    # the premise: a tie on some shape (on h100x8 since the plan holds under every physics source, issue 40)
    row = next(c for c in doc["colocated"] if len(ties(c)) > 1)
    tied = ties(row)
    assert {o["schedule"] for o in row["schedules"] if o["fewest_replicas"]} == tied
    assert sum(o["chosen"] for o in row["schedules"]) == 1
    out = runner.invoke(app, ["perf", "llama70b-h100-bf16-p99"], env={"COLUMNS": "250"}).output
    assert "marked 'tie'" in out and "tie" in out


def test_sustained_prefill_says_what_the_flop_only_figures_leave_out():
    """Regression (issue-17 trial): with one 2,000-token prompt (E[s^2] = E[s]^2) perf said the
    over-the-mix rate was 73% of the at-mean-length one 'because attention grows with s^2';
    the gap is the all-reduces and overheads the FLOP-only columns leave out. The table now
    has the mean-length prompt with every term, and the mix equals it for one length."""
    doc = json.loads(runner.invoke(app, ["perf", "llama70b-h100-bf16-p99", "--json"]).stdout)
    r = next(x for x in doc["prefill_sustained"] if x["slice"] == "h100x4")
    assert r["at_mean_length_all_terms_tokens_per_s"] == pytest.approx(r["over_mix_tokens_per_s"], rel=1e-3)
    assert r["at_mean_length_all_terms_tokens_per_s"] < 0.9 * r["at_mean_length_tokens_per_s"]
    assert "all-reduces" in r["why"]
