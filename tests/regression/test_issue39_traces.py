"""Issue 39 item 15: trace readers.

* A renamed hash-id column (``hash_id`` for ``hash_ids``) was dropped silently: no prefix
  hit rate, exit 0. Every reader (csv, azure, mooncake) now refuses a column or key close
  to one it reads, or one it reads in another format (exit 2), naming it and the names it
  expects; any other column (``request_id``) is not read and the fit's notes say so.
* A bare carriage return inside a CSV line gave "malformed CSV: new-line character seen in
  unquoted field" with no line number; it now names the line.
"""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.workload.traces import TraceError, iter_requests

runner = CliRunner()


def _fit(trace, *extra) -> tuple[int, str]:
    r = runner.invoke(app, ["workload", "fit", str(trace), *extra])
    return r.exit_code, " ".join(r.stderr.split())


def test_a_renamed_hash_ids_column_of_a_csv_trace_is_refused(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("timestamp_s,input_tokens,output_tokens,hash_id\n0,1000,10,1 2\n1,1000,10,1 3\n", encoding="utf-8")
    code, text = _fit(f)
    assert code == 2, text
    assert "line 1" in text and "'hash_id'" in text and "hash_ids" in text and "timestamp_s, input_tokens, output_tokens" in text, text


def test_a_renamed_hash_ids_key_of_a_mooncake_trace_is_refused(tmp_path):
    f = tmp_path / "t.jsonl"
    rows = [{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_id": [1, 2]},
            {"timestamp": 5, "input_length": 1000, "output_length": 10, "hash_id": [1, 3]}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    code, text = _fit(f)
    assert code == 2, text
    assert "line 1" in text and "'hash_id'" in text and "hash_ids" in text, text


def test_an_unknown_column_of_an_azure_trace_is_refused(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,hash_ids\n2023-11-16 18:15:46.68,374,44,1\n", encoding="utf-8")
    code, text = _fit(f)
    assert code == 2, text
    assert "'hash_ids'" in text and "TIMESTAMP, ContextTokens, GeneratedTokens" in text, text


def test_a_column_unlike_any_read_is_named_in_the_notes(tmp_path):
    """An extra column real traces carry (a request id) is no reason to refuse the file,
    but the fit says it did not read it."""
    from fleetplan.workload.fit import fit_trace

    f = tmp_path / "t.csv"
    f.write_text("request_id,timestamp_s,input_tokens,output_tokens\na,0,1000,10\nb,1,1000,10\nc,2,900,12\n", encoding="utf-8")
    fit = fit_trace(f, "csv", [None], 327_680.0)
    assert any("'request_id'" in n and "not read" in n for n in fit.notes), fit.notes
    code, text = _fit(f, "--format", "csv")
    assert code == 0, text


def test_the_known_columns_still_read(tmp_path):
    """hash_ids read from a csv trace, and the bundled Mooncake sample reads whole."""
    f = tmp_path / "t.csv"
    f.write_text("timestamp_s,input_tokens,output_tokens,hash_ids\n0,1000,10,1 2\n1,1000,10,1 3\n", encoding="utf-8")
    reqs = list(iter_requests(f, "csv"))
    assert [r.hash_ids for r in reqs] == [(1, 2), (1, 3)]
    from fleetplan.samples import sample_path

    assert sum(1 for _ in iter_requests(sample_path("mooncake"), "mooncake")) == 3000


@pytest.mark.parametrize("gz", [False, True])
def test_a_bare_cr_inside_a_csv_line_names_the_line(tmp_path, gz):
    text = "timestamp_s,input_tokens,output_tokens\n0,100,10\n1,20\r0,10\n2,100,10\n"
    f = tmp_path / ("t.csv.gz" if gz else "t.csv")
    f.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    with pytest.raises(TraceError) as e:
        list(iter_requests(f, "csv"))
    assert e.value.problems[0].path == "line 3", e.value.render()
    assert "carriage return" in e.value.render()
    code, msg = _fit(f)
    assert code == 2 and "line 3" in msg, msg
