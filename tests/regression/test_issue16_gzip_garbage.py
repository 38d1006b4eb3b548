"""Issue 16 (newcomer trial, F5): a corrupted -- not truncated -- gzip trace was blamed on its text.

Bytes flipped inside a gzip trace's deflate stream often decompress to garbage with no
zlib error until the CRC at the end: `workload fit` then said "line 995: not a JSON
object: Expecting ',' delimiter" (mooncake) or "line 1492, ContextTokens: expected a
whole number of tokens" (azure), blaming the text, where a truncated stream already said
"not a valid gzip stream". A line refused in a gzip trace is now checked against the
stream first: exit 2, "not a valid gzip stream", with the file and the line.
"""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.workload.traces import gzip_problem

runner = CliRunner()
MOONCAKE = "".join(json.dumps({"timestamp": i * 50, "input_length": 513 + 37 * i % 500, "output_length": 10 + i % 13,
                               "hash_ids": [0, i % 50 + 1]}) + "\n" for i in range(3000)).encode()  # 2 blocks of 512 tokens each


def _garbage_gzip(raw: bytes) -> bytes:
    """gzip of ``raw`` with bytes flipped mid-stream where the deflate data still decodes
    (to garbage) and only the CRC at the end fails -- the case that was blamed on the text."""
    packed = gzip.compress(raw, mtime=0)
    for at in range(len(packed) // 2, len(packed) - 8):
        bad = bytearray(packed)
        for i in range(at, at + 4):
            bad[i] ^= 0xA5
        try:
            gzip.decompress(bytes(bad))
        except gzip.BadGzipFile as e:  # CRC or length: the stream decoded to the end
            if "CRC" in str(e):
                return bytes(bad)
        except (zlib.error, EOFError):
            continue
    raise AssertionError("no flip position decodes to garbage")  # pragma: no cover - zlib always has one


def _fit(path):
    r = runner.invoke(app, ["workload", "fit", str(path)])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r


@pytest.mark.parametrize("fmt", ["mooncake", "csv"])
def test_a_corrupt_stream_is_named_not_its_garbage_text(tmp_path, fmt):
    raw = MOONCAKE if fmt == "mooncake" else ("timestamp_s,input_tokens,output_tokens\n"
                                                + "".join(f"{i * 0.05:.2f},{300 + 41 * (i % 97)},{10 + i % 13}\n" for i in range(3000))).encode()
    p = tmp_path / f"t.{fmt}.gz"
    p.write_bytes(_garbage_gzip(raw))
    r = _fit(p)
    assert r.exit_code == 2, r.output
    err = " ".join(r.stderr.split())
    assert str(p) in err and "not a valid gzip stream (CRC check failed" in err, err
    assert "- line " in err and "the file is corrupt or truncated" in err
    assert "not a JSON object:" not in err.split("garbage")[0] and "matches no trace format" not in err


def test_a_bad_crc_or_length_at_the_end(tmp_path):
    packed = gzip.compress(MOONCAKE, mtime=0)
    (tmp_path / "ok.jsonl.gz").write_bytes(packed)
    assert _fit(tmp_path / "ok.jsonl.gz").exit_code == 0  # the trace itself is valid
    for at, what in ((-8, "CRC check failed"), (-2, "Incorrect length")):
        bad = bytearray(packed)
        bad[at] ^= 0x01
        p = tmp_path / "t.jsonl.gz"
        p.write_bytes(bytes(bad))
        r = _fit(p)
        assert r.exit_code == 2 and "not a valid gzip stream" in r.stderr and what in r.stderr, r.output


def test_gzip_problem_checks_the_stream_a_reader_refused(tmp_path):
    good, bad, plain = tmp_path / "good.gz", tmp_path / "bad.gz", tmp_path / "plain.jsonl"
    good.write_bytes(gzip.compress(MOONCAKE, mtime=0))
    bad.write_bytes(_garbage_gzip(MOONCAKE))
    plain.write_bytes(MOONCAKE)
    assert gzip_problem(good, 7) is None and gzip_problem(plain, 7) is None
    e = gzip_problem(bad, 7)
    assert e is not None and e.problems[0].path == "line 7" and "not a valid gzip stream" in e.problems[0].message
