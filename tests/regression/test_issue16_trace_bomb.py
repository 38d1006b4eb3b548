"""Issue 16 (newcomer trial, S3): a gzip trace bomb held its decompressed line whole.

A 1 MB gzip of 1 GiB of spaces made `workload fit` reach 2.39 GB of memory in 10.5 s and
then say "(file): the file is empty"; 2 GiB of 'a' with no newline, 4.48 GB and "line 1:
matches no trace format" (~2.2 bytes of memory per decompressed byte; `simulate
--arrivals trace:` the same). A trace line is now read at most MAX_LINE_BYTES (1 MiB) far
and a longer one refused at once, naming the line and the limit; a run of blank lines is
bounded likewise (MAX_BLANK_RUN_BYTES); a file of blank lines only is not called empty.

The bombs here are gzip files of many members (1 MiB each, concatenated: what gzip reads
as one stream), a few hundred KB on disk, built without holding the decompressed text.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.errors import InputError
from fleetplan.sim.arrivals import read_trace_times
from fleetplan.workload.traces import MAX_BLANK_RUN_BYTES, MAX_LINE_BYTES, MAX_STREAM_CHECK_BYTES, detect_format, iter_requests

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def _bomb(path: Path, chunk: bytes, mib: int) -> Path:
    member = gzip.compress(chunk * ((1 << 20) // len(chunk)), mtime=0)
    path.write_bytes(member * mib)
    return path


def _fit(path: Path, *args: str):
    r = runner.invoke(app, ["workload", "fit", str(path), *args])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r, " ".join(r.stderr.split())


@pytest.mark.parametrize("chunk", [b" ", b"a"])
def test_an_endless_line_is_refused_at_the_limit(tmp_path, chunk):
    p = _bomb(tmp_path / "bomb.jsonl.gz", chunk, 64)  # 64 MiB of one line
    r, err = _fit(p)
    assert r.exit_code == 2, r.output
    assert f"line 1: longer than {MAX_LINE_BYTES:,} bytes, the limit of a trace line" in err, err
    assert "empty" not in err and "matches no trace format" not in err
    r, err = _fit(p, "--format", "mooncake")  # the request reader itself, not only detection
    assert r.exit_code == 2 and f"line 1: longer than {MAX_LINE_BYTES:,} bytes" in err, err
    with pytest.raises(InputError) as e:  # simulate --arrivals trace:FILE reads it so
        read_trace_times(str(p))
    assert e.value.problems[0].path == "line 1" and f"{MAX_LINE_BYTES:,} bytes" in e.value.problems[0].message


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="peak RSS read from /proc (Linux)")
def test_an_endless_line_is_read_in_constant_memory(tmp_path):
    """256 MiB of 'a' without a newline: before the fix ~560 MB of memory (and ~3 s)."""
    p = _bomb(tmp_path / "bomb.jsonl.gz", b"a", 256)
    # VmHWM, this process's peak RSS (KiB): ru_maxrss would carry the test process's own
    # peak across the fork and exec
    code = ("import sys\n"
            "from fleetplan.workload.traces import TraceError, detect_format, iter_requests\n"
            "for call in (lambda: detect_format(sys.argv[1]), lambda: list(iter_requests(sys.argv[1], 'csv'))):\n"
            "    try:\n"
            "        call()\n"
            "    except TraceError as e:\n"
            "        print(e.problems[0].path)\n"
            "print(next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM:')))\n")
    out = subprocess.run([sys.executable, "-c", code, str(p)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    *paths, rss_kib = out.stdout.splitlines()
    assert int(rss_kib) < 250_000, f"max RSS {int(rss_kib) / 1024:.0f} MiB reading a 256 MiB line"  # imports ~60 MiB
    assert paths == ["line 1", "line 1"]


def test_a_flood_of_blank_lines_is_refused_not_called_empty(tmp_path):
    p = _bomb(tmp_path / "blank.jsonl.gz", b"\n", 64)  # 64 Mi newlines
    r, err = _fit(p)
    assert r.exit_code == 2, r.output
    assert f"line {MAX_BLANK_RUN_BYTES + 1}: more than {MAX_BLANK_RUN_BYTES:,} bytes of blank lines in a row" in err, err
    assert "empty" not in err
    with pytest.raises(InputError) as e:
        list(iter_requests(p, "csv"))
    assert "blank lines in a row" in e.value.problems[0].message


def test_a_file_of_a_few_blank_lines_holds_no_records_it_is_not_empty(tmp_path):
    p = tmp_path / "blank.jsonl"
    p.write_text("\n  \n\t\r\n")
    r, err = _fit(p)
    assert r.exit_code == 2, r.output
    assert "(file): no request records (3 blank lines)" in err and "empty" not in err, err
    (tmp_path / "none.csv").write_text("")
    assert "the file is empty" in " ".join(_fit(tmp_path / "none.csv")[1].split())


def test_a_long_real_record_is_within_the_limit(tmp_path):
    """10,000,000 input tokens with their 19,532 hash_ids (512-token blocks): ~140 KB."""
    ids = list(range(100_000, 100_000 + 19_532))
    lines = [json.dumps({"timestamp": 1000 * i, "input_length": 10_000_000, "output_length": 100, "hash_ids": ids}) for i in range(3)]
    assert 100_000 < len(lines[0]) < MAX_LINE_BYTES
    p = tmp_path / "big.jsonl"
    p.write_text("\n".join(lines) + "\n")
    assert detect_format(p) == "mooncake"
    assert [r.input_tokens for r in iter_requests(p, "mooncake")] == [10_000_000] * 3


def test_a_refused_line_of_a_bomb_does_not_read_the_stream_to_its_end(tmp_path):
    """After a refused line the gzip stream is read on for its CRC (a corrupt stream's
    garbage is blamed on the stream) -- at most MAX_STREAM_CHECK_BYTES: a 1 MB bomb of
    short lines is 1 GiB, 3 s to read to its end. Here the bomb's last CRC is broken: read
    to the end (before) the reader said 'not a valid gzip stream'; now line 1 is refused
    for what it is, after at most 256 MiB."""
    member = gzip.compress(b"a\n" * (1 << 19), mtime=0)  # 1 MiB of short lines
    bad = bytearray(member)
    bad[-8] ^= 0x01  # its CRC
    p = tmp_path / "bomb.jsonl.gz"
    p.write_bytes(member * (MAX_STREAM_CHECK_BYTES // (1 << 20) + 64) + bytes(bad))
    r, err = _fit(p)
    assert r.exit_code == 2, r.output
    assert "line 1: matches no trace format" in err and "not a valid gzip stream" not in err, err
