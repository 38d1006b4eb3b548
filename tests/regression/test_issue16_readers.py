"""Issue 16, rows 10-12: huge lists and plans refused fast with the cap named and a
bounded message; corrupt gzip, non-UTF-8 bytes, huge timestamps and zero output lengths
in traces refused naming the line."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.instance import schema
from tests.conftest import tiny_data

runner = CliRunner()


def _write_yaml(tmp_path: Path, doc: dict) -> Path:
    f = tmp_path / "inst.yaml"
    f.write_text(yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False), encoding="utf-8")
    return f


# Row 10: 300,000 draft lengths or failover targets took 34 to over 60 s to refuse (the
# pure-Python YAML parser) and printed MBs of stderr. 5,001 items keep what triggers it
# (one past the 5,000-item parse cap): the list is cut while parsing, and the message is
# one bounded line.
@pytest.mark.parametrize("where", ["draft", "failover", "mix"])
def test_row10_a_list_longer_than_any_instance_holds(tmp_path, where):
    d = tiny_data()
    if where == "draft":
        d["speculation"] = {"enabled": True, "draft_tokens": [4] * 5001}
    elif where == "failover":
        d["regions"]["a"]["failover_to"] = ["b"] * 5001
    else:
        d["workload"]["input_mix"] = [{"share": 1 / 5001, "tokens": 2000 + i} for i in range(5001)]
    r = runner.invoke(app, ["perf", str(_write_yaml(tmp_path, d))])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert "more than 5,000 items" in r.stderr and "input limits" in r.stderr
    assert len(r.stderr) < 1000


def test_row10_a_schema_cap_is_named_with_a_bounded_value(tmp_path):
    MAX_DRAFT_LENGTHS = getattr(schema, "MAX_DRAFT_LENGTHS", 32)  # (the old code has no cap: the test must fail there, not error)
    d = tiny_data(speculation={"enabled": True, "draft_tokens": list(range(1, 2 * MAX_DRAFT_LENGTHS))})
    r = runner.invoke(app, ["perf", str(_write_yaml(tmp_path, d))])
    assert r.exit_code == 2, r.output
    assert "speculation.draft_tokens" in r.stderr and f"at most {MAX_DRAFT_LENGTHS} items" in r.stderr
    assert len(r.stderr) < 1000


def test_row10_a_plan_of_repeated_scenarios_is_refused_before_validation(tmp_path, monkeypatch):
    """The copies are refused before the schema validates every record (the cost was in
    validating and rebuilding them: 83 s, 557 MB for 50,000). A plan `solve` wrote for the
    tiny instance with N-1 (three scenarios) repeated 200 times."""
    from fleetplan.results.plan import Plan

    inst = _write_yaml(tmp_path, tiny_data(failover={"n_minus_1": True}))
    solved = tmp_path / "plan.json"
    r = runner.invoke(app, ["solve", str(inst), "-o", str(solved)])
    assert r.exit_code == 0, r.output
    doc = json.loads(solved.read_text())
    assert len(doc["scenarios"]) == 3
    doc["scenarios"] = doc["scenarios"] * 200
    p = tmp_path / "big.json"
    p.write_text(json.dumps(doc), encoding="utf-8")

    def never(*a, **k):
        raise AssertionError("the plan was validated record by record before the copies were refused")

    monkeypatch.setattr(Plan, "model_validate", never)
    r = runner.invoke(app, ["place", str(p)])
    assert r.exit_code == 2, r.output
    assert "given twice" in r.stderr and len(r.stderr) < 1000


def test_row10_a_document_over_the_size_cap(tmp_path, monkeypatch):
    import fleetplan.cli.common as common

    monkeypatch.setattr(common, "MAX_DOCUMENT_BYTES", 1000)
    p = tmp_path / "plan.json"
    p.write_text(json.dumps({"schema_version": 1, "pad": "x" * 2000}), encoding="utf-8")
    r = runner.invoke(app, ["place", str(p)])
    assert r.exit_code == 2 and "at most 1,000 bytes" in r.stderr, r.output


CSV_HEAD = "timestamp_s,input_tokens,output_tokens\n"


def _fit(path: Path):
    r = runner.invoke(app, ["workload", "fit", str(path)])
    assert isinstance(r.exception, SystemExit) or r.exception is None, repr(r.exception)
    return r


# Row 11: a corrupted gzip trace: zlib.error traceback, rc 1.
def test_row11_a_corrupt_gzip_trace(tmp_path):
    raw = bytearray(gzip.compress((CSV_HEAD + "".join(f"{i},{100 + i},5\n" for i in range(200))).encode(), mtime=0))
    for i in range(12, len(raw) - 8, 7):
        raw[i] ^= 0x5A
    p = tmp_path / "t.csv.gz"
    p.write_bytes(bytes(raw))
    r = _fit(p)
    assert r.exit_code == 2, r.output
    assert "not a valid gzip stream" in r.stderr


# Row 12: a non-UTF-8 byte was reported as "(file): byte N" with no line; a timestamp of
# 1e308 let the next line be blamed for going backwards; an output length of 0 was taken
# though docs/cli.md says zero lengths exit 2.
def test_row12_non_utf8_names_the_line(tmp_path):
    p = tmp_path / "t.csv"
    p.write_bytes((CSV_HEAD + "".join(f"{i},100,5\n" for i in range(3000))).encode() + b"3000,10\xff0,5\n")
    r = _fit(p)
    assert r.exit_code == 2 and "line 3002: not UTF-8" in r.stderr, r.output


def test_row12_a_huge_timestamp_is_blamed_on_its_own_line(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(CSV_HEAD + "0,100,5\n1e308,100,5\n2,100,5\n", encoding="utf-8")
    r = _fit(p)
    assert r.exit_code == 2 and "line 3, timestamp_s: too large" in r.stderr, r.output


@pytest.mark.parametrize("name,text,where", [
    ("t.csv", CSV_HEAD + "0,100,0\n", "line 2, output_tokens"),
    ("t.jsonl", '{"timestamp": 0, "input_length": 100, "output_length": 0}\n', "line 1, output_length"),
])
def test_row12_a_zero_output_length(tmp_path, name, text, where):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    r = _fit(p)
    assert r.exit_code == 2 and where in r.stderr and "zero" in r.stderr, r.output
