"""Fuzz every reader of a file `fleetplan` did not write itself (issue 16): plans into
`whatif`, `place`, `simulate`, `report` and `export`, traces into `workload fit`,
profiles into `calibrate`.

The oracle, for every input: exit 0, 2 or 3 -- never a traceback, never another exit
code -- and the command returns within a stated bound (a SIGALRM hang guard of
``PER_INPUT_S`` seconds; the verdict is "returned", not a timing) with the process's
peak resident memory below ``PEAK_RSS_MB`` afterwards (the reader limits of docs/cli.md
bound what one file can cost).

Plans start from a tiny two-region plan `solve` wrote (one solve per module) and get
1-3 mutations of the instance fuzz's kinds (tests/cli/test_fuzz_instances.py: wrong
types, NaN/inf, huge numbers, deleted/unknown keys, duplicated list items ...). Traces
and profiles start from a few valid lines and get byte- and line-level damage (flipped
bytes, cut lines, non-UTF-8, gzip of a truncated stream or with flipped bytes -- a trace
whose gzip stream is not valid must say so, not blame its garbage text --, huge and
negative numbers).
Most mutated plans are refused at the checks that every plan reader shares (hash,
records), so each example runs one reader, chosen by hypothesis.

Default: 40 plans + 40 traces + 25 profiles (about 5 s of CPU with the module's tiny solve,
the click command built once per session by tests/conftest.py);
``FLEETPLAN_FUZZ_EXAMPLES=N`` runs N of each for a longer hunt, as the instance fuzz does.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import resource
import signal
import zlib
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from fleetplan.cli.app import app
from tests.cli.test_fuzz_instances import _mutate
from tests.conftest import tiny_data

runner = CliRunner()
PER_INPUT_S = 120
PEAK_RSS_MB = 4096
_N = os.environ.get("FLEETPLAN_FUZZ_EXAMPLES")


def _examples(default: int) -> int:
    return int(_N) if _N else default


SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])


@contextmanager
def _hang_guard(seconds: int):
    def boom(_signum, _frame):
        raise AssertionError(f"a reader ran past the {seconds} s hang guard on one input")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _oracle(argv: list[str]):
    with _hang_guard(PER_INPUT_S):
        r = runner.invoke(app, argv)
    assert r.exception is None or isinstance(r.exception, SystemExit), (argv[0], repr(r.exception))
    assert r.exit_code in (0, 2, 3), (argv[0], r.exit_code, r.output[-2000:])
    assert "Traceback" not in r.output
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 < PEAK_RSS_MB
    return r


# ----------------------------------------------------------------------------- plans


@pytest.fixture(scope="module")
def tiny_plan(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("fuzzplan")
    inst = d / "tiny.yaml"
    inst.write_text(yaml.safe_dump(tiny_data()), encoding="utf-8")
    out = d / "plan.json"
    r = runner.invoke(app, ["solve", str(inst), "-o", str(out)])
    assert r.exit_code == 0, r.output
    pl = d / "placement.json"
    r = runner.invoke(app, ["place", str(out), "-o", str(pl)])
    assert r.exit_code == 0, r.output
    return {"plan": json.loads(out.read_text()), "placement": pl}


READERS = st.sampled_from(["whatif", "place", "simulate", "report", "export"])


@settings(max_examples=_examples(40), **SETTINGS)
@given(data=st.data())
def test_mutated_plans_never_crash_a_reader(tiny_plan, tmp_path, data):
    doc = copy.deepcopy(tiny_plan["plan"])
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        doc = _mutate(doc, data)
    p = tmp_path / "plan.json"
    try:
        text = json.dumps(doc, allow_nan=True)
    except (TypeError, ValueError, OverflowError):  # a key json cannot write (hypothesis built it)
        return
    p.write_text(text, encoding="utf-8", errors="surrogatepass")
    cmd = data.draw(READERS, label="reader")
    argv = {"whatif": ["whatif", str(p), "--lose", "a"], "place": ["place", str(p)], "simulate": ["simulate", str(p), "-r", "a"],
            "report": ["report", str(p), "--json"], "export": ["export", str(tiny_plan["placement"]), "--plan", str(p)]}[cmd]
    _oracle(argv)


# ----------------------------------------------------------------------------- traces

CSV = "timestamp_s,input_tokens,output_tokens\n" + "".join(f"{i * 0.5},{200 + 37 * i},{20 + i}\n" for i in range(30))
MOONCAKE = "".join(json.dumps({"timestamp": i * 500, "input_length": 300 + 41 * i, "output_length": 10 + i, "hash_ids": [0, i + 1]}) + "\n"
                   for i in range(30))
JUNK = st.sampled_from([b"\xff", b"\x00", b"\xed\xa0\x80", b"-1", b"1e308", b"nan", b"99999999999999999999999", b",", b"\n", b"{", b'"', b"\r"])


def _damage(raw: bytes, data: st.DataObject) -> bytes:
    for _ in range(data.draw(st.integers(1, 3), label="damages")):
        how = data.draw(st.sampled_from(["flip", "insert", "cut", "drop_line", "dup_line", "swap_lines"]), label="how")
        lines = raw.split(b"\n")
        if how == "flip" and raw:
            i = data.draw(st.integers(0, len(raw) - 1), label="at")
            raw = raw[:i] + bytes([raw[i] ^ data.draw(st.integers(1, 255), label="xor")]) + raw[i + 1:]
        elif how == "insert":
            i = data.draw(st.integers(0, len(raw)), label="at")
            raw = raw[:i] + data.draw(JUNK, label="junk") + raw[i:]
        elif how == "cut":
            raw = raw[: data.draw(st.integers(0, len(raw)), label="keep")]
        elif how == "drop_line" and len(lines) > 1:
            del lines[data.draw(st.integers(0, len(lines) - 1), label="line")]
            raw = b"\n".join(lines)
        elif how == "dup_line" and lines:
            i = data.draw(st.integers(0, len(lines) - 1), label="line")
            raw = b"\n".join(lines[:i] + [lines[i]] * data.draw(st.integers(2, 50), label="times") + lines[i + 1:])
        elif how == "swap_lines" and len(lines) > 2:
            i = data.draw(st.integers(0, len(lines) - 2), label="line")
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
            raw = b"\n".join(lines)
    return raw


@settings(max_examples=_examples(40), **SETTINGS)
@given(data=st.data())
def test_damaged_traces_never_crash_workload_fit(tmp_path, data):
    fmt = data.draw(st.sampled_from(["csv", "mooncake"]), label="format")
    raw = _damage((CSV if fmt == "csv" else MOONCAKE).encode(), data)
    name = "t.csv" if fmt == "csv" else "t.jsonl"
    gz = data.draw(st.sampled_from([None, "truncated", "flipped", "trailer"]), label="gzip")
    if gz is not None:
        packed = bytearray(gzip.compress(raw, mtime=0))
        if gz == "truncated":
            packed = packed[: data.draw(st.integers(10, len(packed)), label="gzip bytes kept")]
        else:  # bytes flipped in the deflate stream (which can decompress to garbage up to its CRC) or in the CRC / length trailer
            lo, hi = (10, max(len(packed) - 9, 10)) if gz == "flipped" else (len(packed) - 8, len(packed) - 1)
            for _ in range(data.draw(st.integers(1, 4), label="bytes flipped")):
                packed[data.draw(st.integers(lo, hi), label="at")] ^= data.draw(st.integers(1, 255), label="xor")
        raw, name = bytes(packed), name + ".gz"
    p = tmp_path / name
    p.write_bytes(raw)
    r = _oracle(["workload", "fit", str(p)] + (["--format", fmt] if data.draw(st.booleans(), label="explicit format") else []))
    if gz is not None:
        try:
            gzip.decompress(raw)
        except (OSError, EOFError, zlib.error):  # not a valid gzip stream: said so, whatever its text decompressed to
            assert r.exit_code == 2 and "not a valid gzip stream" in r.stderr, r.output[-2000:]


# ----------------------------------------------------------------------------- profiles

SPLITWISE = Path(__file__).resolve().parents[2] / "fleetplan" / "samples" / "splitwise-perf_model.csv"
_PROFILE = b"\n".join(SPLITWISE.read_bytes().split(b"\n")[:120]) + b"\n"  # the header and the llama2-70b a100 rows


@settings(max_examples=_examples(25), **SETTINGS)
@given(data=st.data())
def test_damaged_profiles_never_crash_calibrate(tmp_path, data):
    p = tmp_path / "profile.csv"
    p.write_bytes(_damage(_PROFILE, data))
    _oracle(["calibrate", str(p), "--model", "llama2-70b", "--chip", "a100-80gb", "--tp", "8"])
