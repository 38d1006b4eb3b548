"""Issue 40 trial B, item 6: ``perf``'s colocated load table names the physics source it is
under. On the bundled BF16 instance ('max 3.11 req/s per replica') the table is the binding
source's -- the held source whose rate is the least at that pool size -- and said nothing."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from fleetplan.cli.app import app

runner = CliRunner()


def test_the_colocated_load_table_names_its_source():
    r = runner.invoke(app, ["perf", "llama70b-h100-bf16-p99", "--json"])
    assert r.exit_code == 0, r.output
    [c] = [c for c in json.loads(r.stdout)["colocated"] if c["load_table"]][:1]
    assert c["load_table_source"] == "llm-inference-bench-vllm"  # failed before: no such key
    r = runner.invoke(app, ["perf", "llama70b-h100-bf16-p99"])
    out = " ".join(r.stdout.split())
    assert "under physics source llm-inference-bench-vllm" in out
    one = json.loads(runner.invoke(app, ["perf", "llama70b-h100", "--json"]).stdout)
    assert all(c.get("load_table_source") is None for c in one.get("colocated", []))  # one source: nothing to name
