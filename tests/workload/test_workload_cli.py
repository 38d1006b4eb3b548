"""`fleetplan workload fit` and the overlays it feeds (`solve --workload/--priors`,
`include:`, `solve --compare`): malformed traces get the line number and nothing is
written; overlays replace exactly the fields they name."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.instance.io import bundled_instance_path, load_instance, load_instance_overlaid
from tests.workload.conftest import AZURE_CONV, MOONCAKE, head, need

runner = CliRunner()

AZ_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZ_ROWS = ["2023-11-16 18:15:46.6805900,374,44\n", "2023-11-16 18:15:50.9951690,396,109\n", "2023-11-16 18:15:51.0000000,1200,20\n"]


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("name,text,line,words", [
    ("missing_column.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,374\n", "line 1", "GeneratedTokens"),
    ("negative.csv", AZ_HEADER + AZ_ROWS[0] + "2023-11-16 18:15:50.99,-5,109\n", "line 3, ContextTokens", "negative"),
    ("unsorted.csv", AZ_HEADER + AZ_ROWS[1] + AZ_ROWS[0], "line 3, timestamp", "backwards"),
    ("empty.csv", "", "(file)", "empty"),
    ("header_only.csv", AZ_HEADER, "(file)", "no request"),
    ("mixed.csv", AZ_HEADER + AZ_ROWS[0] + '{"timestamp": 0, "input_length": 5, "output_length": 1}\n', "line 3", "mooncake-format line"),
    ("text.csv", AZ_HEADER + "2023-11-16 18:15:46.68,many,44\n", "line 2, ContextTokens", "whole number of tokens"),
    ("fields.csv", AZ_HEADER + "2023-11-16 18:15:46.68,374\n", "line 2", "2 fields"),
    ("bad_time.csv", AZ_HEADER + "yesterday,374,44\n", "line 2, TIMESTAMP", "wall-clock"),
    ("mixed.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n' + "timestamp_s,input_tokens,output_tokens\n", "line 2", "csv-format line"),
    ("hash.jsonl", '{"timestamp": 0, "input_length": 1500, "output_length": 1, "hash_ids": [1, 2]}\n', "line 1, hash_ids", "ceil(1500/512) = 3"),
    ("nokey.jsonl", '{"timestamp": 0, "input_length": 15}\n', "line 1", "output_length"),
    ("back.jsonl", '{"timestamp": 10, "input_length": 5, "output_length": 1}\n{"timestamp": 3, "input_length": 5, "output_length": 1}\n', "line 2, timestamp", "backwards"),
    ("zero.csv", "timestamp_s,input_tokens,output_tokens\n0,0,5\n", "line 2, input_tokens", "zero"),
    ("garbage.txt", "hello world\n", "line 1", "matches no trace format"),
    ("millis.csv", "timestamp_s,input_tokens,output_tokens\n0,100,10\n1e10,200,10\n", "--window", "check the timestamps' unit"),
    ("no_output.csv", "timestamp_s,input_tokens,output_tokens\n0,100,0\n1,200,0\n", "line 2, output_tokens", "zero"),  # zero lengths exit 2 at their line (issue 16 row 12)
])
def test_malformed_traces_name_the_line_and_write_nothing(tmp_path, name, text, line, words):
    trace = tmp_path / name
    trace.write_text(text)
    out = tmp_path / "workload.yaml"
    out.write_text("earlier output\n")
    r = run("workload", "fit", trace, "-o", out)
    assert r.exit_code == 2, r.output
    assert line in r.output and words in r.output, r.output
    assert "Traceback" not in r.output
    assert out.read_text() == "earlier output\n"  # a failed run leaves earlier outputs intact


def test_fit_writes_a_workload_that_solve_accepts(tmp_path):
    trace = head(AZURE_CONV, 2001, tmp_path / "conv.csv")
    out = tmp_path / "w.yaml"
    r = run("workload", "fit", trace, "-o", out)
    assert r.exit_code == 0, r.output
    assert "plan on the mean, not the median" in r.output and "Fitted input mix" in r.output
    doc = yaml.safe_load(out.read_text())
    assert doc["format"] == "fleetplan-workload/1" and doc["source"]["requests"] == 2000
    assert set(doc["workload"]) == {"input_mix", "output_tokens", "arrival_scv"}  # no hashes: the hit rate stays the instance's
    inst, overlays = load_instance_overlaid("gemini-ironwood", workload=out)
    assert inst.workload.arrival_scv == doc["workload"]["arrival_scv"] > 0
    base = load_instance("gemini-ironwood")
    assert [b.tokens for b in inst.workload.input_mix] == [b["tokens"] for b in doc["workload"]["input_mix"]]
    assert inst.workload.prefix_hit_rate == base.workload.prefix_hit_rate and inst.workload.classes == base.workload.classes
    assert inst.priors == base.priors and inst.regions == base.regions
    # the trace has no prompt above 16K: the long tier is dropped, with a note
    assert [t.name for t in inst.workload.tiers] == ["short"] and inst.workload.tiers[0].max_input_tokens is None
    assert any("dropped" in n for n in overlays[0].notes)


def test_fit_json_and_tiers_option(tmp_path):
    trace = head(MOONCAKE, 600, tmp_path / "mc.jsonl")
    r = run("workload", "fit", trace, "--tiers", "8192,65536", "--cache-gb", "64,512", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [t["max_input_tokens"] for t in doc["tiers"]] == [8192, 65536, None]
    assert [c["cache_gb"] for c in doc["prefix_cache"]] == [None, 64.0, 512.0]
    assert 0 < doc["workload"]["prefix_hit_rate"] < 1


@pytest.mark.parametrize("args,words", [
    (["--tiers", "16384,100"], "ascending"),
    (["--tiers", "big"], "upper bounds"),
    (["--cache-gb", "-4"], "positive cache sizes"),
    (["--format", "parquet"], "expected one of"),
    (["--window", "0"], "positive number of seconds"),
])
def test_bad_options(tmp_path, args, words):
    trace = head(AZURE_CONV, 50, tmp_path / "conv.csv")
    r = run("workload", "fit", trace, *args)
    assert r.exit_code == 2 and words in r.output, r.output


def test_missing_trace_and_servegen_window(tmp_path):
    r = run("workload", "fit", tmp_path / "nope.csv")
    assert r.exit_code == 2 and "no such file" in r.output
    from tests.workload.conftest import SERVEGEN

    r = run("workload", "fit", need(SERVEGEN / "m-large_aggregate_rate.csv"), "--window", "60")
    assert r.exit_code == 2 and "multiple" in r.output


def _instance_with_include(tmp_path, include: dict) -> str:
    data = yaml.safe_load(bundled_instance_path("llama70b-h100").read_text())
    data["include"] = include
    p = tmp_path / "inst.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def test_include_and_priors_overlay(tmp_path):
    (tmp_path / "pri.yaml").write_text(yaml.safe_dump({"priors": {"prefill_mfu": 0.3, "hbm_bw_fraction": 0.5}, "source": {"profile": "x"}}))
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump({"workload": {"output_tokens": 250}}))
    inst, overlays = load_instance_overlaid(_instance_with_include(tmp_path, {"priors": "pri.yaml", "workload": "wl.yaml"}))
    base = load_instance("llama70b-h100")
    assert inst.priors.prefill_mfu == 0.3 and inst.priors.hbm_bw_fraction == 0.5
    assert inst.priors.decode_mfu == base.priors.decode_mfu  # untouched fields stay
    assert inst.workload.output_tokens == 250 and inst.workload.input_mix == base.workload.input_mix
    assert [o.section for o in overlays] == ["priors", "workload"]


@pytest.mark.parametrize("content,words", [
    ({"priors": {"prefill_mfu": 1.7}}, "priors.prefill_mfu"),
    ({"priors": {"mfu": 0.3}}, "unknown priors field"),
    ({"workload": {"output_tokens": 5}}, "this is a workload file"),
    ({"fit": {"x": 1}}, "needs a 'priors:' mapping"),
    ({"priors": {}}, "empty"),
])
def test_bad_overlays_are_refused(tmp_path, content, words):
    p = tmp_path / "pri.yaml"
    p.write_text(yaml.safe_dump(content))
    out = tmp_path / "plan.json"
    r = run("solve", "llama70b-h100", "--priors", p, "-o", out)
    assert r.exit_code == 2 and words in r.output, r.output
    assert not out.exists()


def test_bad_include_is_refused(tmp_path):
    r = run("solve", _instance_with_include(tmp_path, {"model": "x.yaml"}))
    assert r.exit_code == 2 and "include" in r.output
    r = run("solve", _instance_with_include(tmp_path, {"priors": "missing.yaml"}))
    assert r.exit_code == 2 and "no such priors file" in r.output


def test_solve_compare_attributes_the_move_to_each_input(tmp_path):
    (tmp_path / "pri.yaml").write_text(yaml.safe_dump({"priors": {"prefill_mfu": 0.2}}))
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump({"workload": {"output_tokens": 3000}}))
    r = run("solve", "llama70b-h100", "--priors", tmp_path / "pri.yaml", "--workload", tmp_path / "wl.yaml", "--compare", "llama70b-h100", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    rows = {a["input"]: a for a in doc["attribution"]}
    assert set(rows) == {"priors.prefill_mfu", "workload.output_tokens"}
    base_chips = doc["base"]["cost"]["chips"]
    # physics: half the prefill MFU or 7.5x the output never needs fewer chips
    assert rows["priors.prefill_mfu"]["figures"]["chips"] >= base_chips
    assert rows["workload.output_tokens"]["figures"]["chips"] > base_chips
    assert doc["cost"]["chips"] >= max(r["figures"]["chips"] for r in rows.values())
    r = run("solve", "llama70b-h100", "--priors", tmp_path / "pri.yaml", "--compare", "llama70b-h100")
    assert r.exit_code == 0 and "Which input moved it" in r.output and "priors.prefill_mfu" in r.output and "0.5795 -> 0.2" in r.output


def test_gzip_and_byte_order_mark_are_read(tmp_path):
    import gzip

    text = "\ufeff" + AZ_HEADER + "".join(AZ_ROWS)
    plain = tmp_path / "bom.csv"
    plain.write_text(text.replace("\n", "\r\n"), encoding="utf-8")
    packed = tmp_path / "trace.data"  # gzip found by its magic bytes, not its name
    packed.write_bytes(gzip.compress(text.encode("utf-8")))
    for path in (plain, packed):
        r = run("workload", "fit", path, "--json")
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["arrivals"]["requests"] == 3


def test_hit_rate_of_a_chosen_cache_is_written(tmp_path):
    trace = head(MOONCAKE, 800, tmp_path / "mc.jsonl")
    out = tmp_path / "w.yaml"
    r = run("workload", "fit", trace, "--hit-rate-cache-gb", "2", "-o", out)
    assert r.exit_code == 0, r.output
    assert "an LRU cache of 2 GB" in r.output
    doc = yaml.safe_load(out.read_text())
    row = next(c for c in doc["statistics"]["prefix_cache"] if c["cache_gb"] == 2.0)
    assert doc["workload"]["prefix_hit_rate"] == round(row["hit_rate_tokens"], 4)
    assert doc["workload"]["prefix_hit_rate"] < doc["statistics"]["prefix_cache"][0]["hit_rate_tokens"]  # below the unbounded cache's


def test_servegen_collection_gaps_are_left_out():
    from fleetplan.workload.fit import fit_trace
    from tests.workload.conftest import SERVEGEN

    f = need(SERVEGEN / "m-mid_aggregate_rate.csv")
    import csv as _csv

    rates = [float(r["total_rate_rps"]) for r in _csv.DictReader(open(f))]
    live = [x for x in rates if x > 0]
    fit = fit_trace(f, "servegen", [16384, None], 131072.0, window_s=600.0)
    assert len(rates) - len(live) == 84  # the data README's collection gaps
    assert fit.arrivals.mean_rps == pytest.approx(sum(live) / len(live))
    assert fit.arrivals.peak_to_mean == pytest.approx(max(live) / (sum(live) / len(live)))
    assert any("collection gaps" in n for n in fit.notes)


def test_multimodal_servegen_is_refused_by_name():
    from tests.workload.conftest import SERVEGEN

    r = run("workload", "fit", need(SERVEGEN / "mm-image_aggregate_rate.csv"))
    assert r.exit_code == 2 and "multimodal" in r.output


def test_workload_file_is_deterministic(tmp_path):
    trace = head(AZURE_CONV, 300, tmp_path / "conv.csv")
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    assert run("workload", "fit", trace, "-o", a).exit_code == 0
    assert run("workload", "fit", trace, "-o", b).exit_code == 0
    assert a.read_bytes() == b.read_bytes()


def test_priors_fitted_elsewhere_are_flagged(tmp_path):
    p = tmp_path / "pri.yaml"
    p.write_text(yaml.safe_dump({"priors": {"prefill_mfu": 0.3}, "source": {"model": "llama2-70b", "chip": "a100-80gb", "tensor_parallel": [8]}}))
    _, overlays = load_instance_overlaid("gemini-ironwood", priors=p)
    assert any("fitted for llama2-70b on a100-80gb x 8" in n for n in overlays[0].notes)


def test_overlays_from_devices_aliases_and_clobbering_are_refused(tmp_path):
    inst = _instance_with_include(tmp_path, {"workload": "wl.yaml"})
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump({"workload": {"output_tokens": 250}}))
    before = (tmp_path / "wl.yaml").read_text()
    r = run("solve", inst, "-o", tmp_path / "wl.yaml")  # the included file is an input too
    assert r.exit_code == 2 and "is the input file" in r.output
    assert (tmp_path / "wl.yaml").read_text() == before
    r = run("solve", "llama70b-h100", "--priors", "/dev/zero")
    assert r.exit_code == 2 and "not a regular file" in r.output
    bomb = tmp_path / "bomb.yaml"
    lines = ["source:", "  a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for k, name in enumerate("bcde"):
        prev = "abcde"[k]
        lines.append(f"  {name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    lines.append("workload: {output_tokens: 300}")
    bomb.write_text("\n".join(lines) + "\n")
    r = run("solve", "llama70b-h100", "--workload", bomb)
    assert r.exit_code == 2 and "aliases" in r.output
    odd = tmp_path / "odd.yaml"
    odd.write_text(yaml.safe_dump({"workload": {"output_tokens": 250}, "include": {"priors": "x.yaml"}}))
    r = run("solve", "llama70b-h100", "--workload", odd)
    assert r.exit_code == 2 and "unknown top-level key" in r.output
    r = run("solve", _instance_with_include(tmp_path, {}))
    assert r.exit_code == 2 and "include" in r.output


def test_deeply_nested_json_is_a_clear_error(tmp_path):
    trace = tmp_path / "deep.jsonl"
    trace.write_text("[" * 100000 + "\n")
    r = run("workload", "fit", trace, "--format", "mooncake")
    assert r.exit_code == 2 and "nests too deeply" in r.output
    plan = tmp_path / "deep.json"
    plan.write_text("[" * 100000)
    r = run("whatif", plan, "--lose", "us-east")
    assert r.exit_code == 2 and "nests too deeply" in r.output
