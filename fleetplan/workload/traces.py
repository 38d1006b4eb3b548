"""Streaming readers for request traces: one request at a time, validated, with its line number.

Formats (``--format``; detected from the first line when not given):

``azure``
    The Azure LLM inference trace 2023 (Patel et al., Splitwise, ISCA 2024):
    ``TIMESTAMP,ContextTokens,GeneratedTokens`` with wall-clock timestamps
    ``YYYY-MM-DD hh:mm:ss.fffffff`` (UTC).
``mooncake``
    The Mooncake FAST'25 traces (Qin et al.): JSON lines
    ``{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]}``;
    ``hash_ids`` are the prompt's prefix blocks of ``block_tokens`` (512) tokens, equal
    ids being the same reusable KV block.
``csv``
    fleetplan's generic trace: header ``timestamp_s,input_tokens,output_tokens`` and an
    optional ``hash_ids`` column (block ids separated by spaces), seconds and tokens.
``servegen``
    Not a per-request trace: ServeGen's aggregated 600 s window rates
    (``<model>_aggregate_rate.csv``) with the length histograms beside it; read by
    :func:`read_servegen`.

Every reader raises :class:`TraceError` at the first bad line, naming the line number,
the column and the unit expected: missing columns, non-numbers, negative or zero
lengths, timestamps going backwards, an empty file, or a line of another format.
"""

from __future__ import annotations

import csv
import gzip
import zlib
import hashlib
import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Iterator

import numpy as np

from fleetplan.errors import InputError, Problem

__all__ = ["file_sha256", "TraceError", "UnreadColumnWarning", "TraceRequest", "FORMATS", "detect_format", "iter_requests", "ServeGenTrace", "read_servegen"]

FORMATS = ("azure", "mooncake", "servegen", "csv")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
CSV_COLUMNS = ("timestamp_s", "input_tokens", "output_tokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
SERVEGEN_RATE_COLUMNS = ("window_start_s", "window_len_s", "total_rate_rps", "active_clients", "top_client_share", "rate_weighted_mean_cv")
SERVEGEN_HIST_COLUMNS = ("model", "field", "bin_lo_incl", "bin_hi_excl", "probability")
MAX_TOKENS = 100_000_000
#: Longest output a request may have (tokens): the instance schema's cap on output_tokens.
MAX_OUTPUT_TOKENS = 10_000_000
#: Longest line a trace may hold (bytes, its line ending included). The longest record of
#: the real traces is 2,029 bytes (Mooncake's conversation trace: 124,847 input tokens and
#: 244 hash_ids, ~8.3 bytes per id); a record of 10,000,000 input tokens with its hash_ids
#: in 512-token blocks is ~20,000 ids, ~200 KB. 1 MiB is 5x that and 500x the longest real
#: line. A line is read at most this far (``readline(limit)``), so a gzip bomb of one
#: endless line is refused at its first MiB, not held whole (it was: 2.2 bytes of memory
#: per decompressed byte, 4.5 GB for a 2 MB file).
MAX_LINE_BYTES = 1 << 20
#: Most bytes of blank (whitespace-only) lines in a row a trace may hold: real traces have
#: none but a trailing line ending. A run of blank lines is skipped one line at a time
#: (constant memory), and past this the file is refused as not a trace rather than read
#: on for gigabytes of nothing (a gzip of 1 GiB of newlines is 1 MB).
MAX_BLANK_RUN_BYTES = 1 << 20


class TraceError(InputError):
    """A trace file that cannot be read; every problem names the line."""

    kind = "trace"


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace.

    Attributes: line (1-based line in the file), t_s (arrival, seconds; absolute epoch
    seconds for wall-clock traces, else seconds from the trace's own origin),
    input_tokens, output_tokens (tokens), hash_ids (prefix block ids, or None).
    """

    line: int
    t_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None = None



def _a(word: str) -> str:
    """The indefinite article and ``word``: 'an azure', 'a mooncake'."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word

class _Lines:
    """The lines of a trace as text, decoded one line at a time so a byte that is not
    UTF-8 is reported with its line (a text stream decodes 8 KiB at a time and names only
    the byte); gzip (by its magic bytes, whatever the name) decompressed, a corrupt gzip
    stream a TraceError; a UTF-8 byte-order mark is skipped. A context manager and an
    iterator of str lines (line endings kept, as ``csv`` expects)."""

    def __init__(self, path: Path):
        self.src = str(path)
        with open(path, "rb") as f:
            magic = f.read(2)
        self.gz = magic == b"\x1f\x8b"
        self._f = gzip.open(path, "rb") if self.gz else open(path, "rb")
        self.n = 0
        self.blank = 0  # blank (whitespace-only) lines read
        self._run = 0  # bytes of blank lines since the last non-blank one
        self._gz_bad = False  # a gzip error was raised already (or the stream is not to be read on)

    def __enter__(self) -> "_Lines":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            # a corrupt deflate stream can decompress to garbage without an error until its
            # CRC at the end: a line that does not parse is checked against the stream first
            if self.gz and isinstance(exc, Exception) and not self._gz_bad:
                bad = _gzip_stream_error(self._f)
                if bad is not None:
                    raise _gzip_trace_error(self.src, self.n, bad, exc) from None
        finally:
            self._f.close()

    def __iter__(self) -> "_Lines":
        return self

    def __next__(self) -> str:
        try:
            raw = self._f.readline(MAX_LINE_BYTES + 1)
        except (zlib.error, gzip.BadGzipFile, EOFError) as e:
            self._gz_bad = True
            raise TraceError(self.src, [Problem(f"line {self.n + 1}" if self.n else "(file)",
                                                f"not a valid gzip stream ({e}); the file is corrupt or truncated.")]) from None
        if not raw:
            raise StopIteration
        self.n += 1
        if len(raw) > MAX_LINE_BYTES:
            self._gz_bad = True  # not read to its end for the CRC: a bomb's end is gigabytes away
            raise TraceError(self.src, [Problem(f"line {self.n}", f"longer than {MAX_LINE_BYTES:,} bytes, the limit of a trace line "
                                                "(a request record is a few KB); the file is not a request trace.", repr(raw[:60])[:80])])
        if raw.isspace():
            self.blank += 1
            self._run += len(raw)
            if self._run > MAX_BLANK_RUN_BYTES:
                self._gz_bad = True
                raise TraceError(self.src, [Problem(f"line {self.n}", f"more than {MAX_BLANK_RUN_BYTES:,} bytes of blank lines in a row "
                                                    f"({self.blank:,} blank lines so far), the limit of a trace; the file is not a request trace.")])
        else:
            self._run = 0
        try:
            text = raw.decode("utf-8-sig" if self.n == 1 else "utf-8")
        except UnicodeDecodeError as e:
            raise TraceError(self.src, [Problem(f"line {self.n}", f"not UTF-8 text (byte {e.start + 1} of the line).",
                                                repr(raw[max(e.start - 20, 0):e.start + 20])[:80])]) from None
        return text


#: How far (decompressed bytes) a gzip stream is read past a refused line to see whether
#: the stream is corrupt (its garbage then blamed on the stream, not the text): ~1 s here.
#: Past it the line's own problem is reported -- a 1 MB gzip bomb of short lines is 1 GiB
#: of them, and reading a 10 MB one to its CRC took ~30 s at constant memory.
MAX_STREAM_CHECK_BYTES = 256 << 20


def _gzip_stream_error(f: IO[bytes], limit: int = MAX_STREAM_CHECK_BYTES) -> str | None:
    """Read a gzip stream to its end, or ``limit`` bytes of it: the zlib or gzip error (a
    bad block, CRC or length) if it is not valid, else None (also when the limit came first)."""
    read = 0
    try:
        while read < limit:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            read += len(chunk)
    except (zlib.error, gzip.BadGzipFile, EOFError) as e:
        return str(e) or type(e).__name__
    return None


def _gzip_trace_error(src: str, line: int, bad: str, parse: BaseException | None = None) -> TraceError:
    """The TraceError of a gzip trace whose stream is not valid, naming the line where
    reading stopped (its text came out of the corrupt stream) and what was wrong there."""
    seen = ""
    if isinstance(parse, InputError) and parse.problems:
        q = parse.problems[0]
        col = q.path[len(f"line {line}"):].lstrip(", ") if q.path.startswith(f"line {line}") else q.path
        seen = f"; the text it decompressed to there is garbage (refused: {col + ': ' if col else ''}{q.message.rstrip('.')})"
    return TraceError(src, [Problem(f"line {line}" if line else "(file)",
                                    f"not a valid gzip stream ({bad}): the file is corrupt or truncated{seen}.")])


def gzip_problem(path: str | Path, line: int, parse: BaseException | None = None) -> TraceError | None:
    """For a gzip trace whose line ``line`` was refused by a reader after the trace
    reader had yielded it: the 'not a valid gzip stream' TraceError when the stream is
    not valid (the refused text is then garbage), else None (not gzip, or valid)."""
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return None
    with gzip.open(path, "rb") as g:
        bad = _gzip_stream_error(g)
    return _gzip_trace_error(str(path), line, bad, parse) if bad is not None else None


def _no_records(f, need: str) -> str:
    """'the file is empty: NEED', or, for a file of blank lines only, 'no request records
    (N blank lines): NEED' -- a file that is not empty is not called empty."""
    blank = getattr(f, "blank", 0)
    if blank:
        return f"no request records ({blank:,} blank line{'s' if blank != 1 else ''}): {need}"
    return f"the file is empty: {need}"


def _open_text(path: Path) -> _Lines:
    """The lines of a trace (:class:`_Lines`)."""
    return _Lines(path)


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_file(path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        raise TraceError(str(p), [Problem("(file)", "is a directory; give a trace file.")])
    if p.exists() and not p.resolve().is_file():
        raise TraceError(str(p), [Problem("(file)", "is not a regular file (a device, pipe or socket); give a trace file.")])
    if not p.is_file():
        raise TraceError(str(p), [Problem("(file)", "no such file; give a trace file (formats: " + ", ".join(FORMATS) + ").")])
    return p


def _looks_like(line: str) -> str | None:
    """The format a single line looks like (for 'a mix of formats' messages)."""
    s = line.strip()
    if s.startswith("{"):
        return "mooncake"
    head = tuple(c.strip() for c in s.split(","))
    if head[:3] == AZURE_COLUMNS:
        return "azure"
    if head[:3] == CSV_COLUMNS:
        return "csv"
    if head[:1] == ("window_start_s",):
        return "servegen"
    return None


def detect_format(path: str | Path) -> str:
    """The format of ``path`` from its first non-empty line. Raises TraceError when the
    file is empty or the line matches no known format."""
    p = _check_file(path)
    try:
        with _open_text(p) as f:
            for n, line in enumerate(f, start=1):
                if line.strip():
                    fmt = _looks_like(line)
                    if fmt is None:
                        raise TraceError(str(p), [Problem(f"line {n}", "matches no trace format: expected a header "
                                                          f"'{','.join(AZURE_COLUMNS)}' (azure), '{','.join(CSV_COLUMNS)}' (csv), "
                                                          "'window_start_s,...' (servegen) or a JSON object (mooncake); or pass --format.",
                                                          line.strip()[:80])])
                    return fmt
    except UnicodeDecodeError as e:
        raise TraceError(str(p), [Problem("(file)", f"not UTF-8 text (byte {e.start}).")]) from None
    except (OSError, EOFError) as e:
        raise TraceError(str(p), [Problem("(file)", f"cannot read: {e}.")]) from None
    raise TraceError(str(p), [Problem("(file)", _no_records(f, "a trace needs at least one request."))])


def _int_field(src: str, n: int, column: str, value, unit: str, minimum: int, maximum: int = MAX_TOKENS) -> int:
    if isinstance(value, bool):
        raise TraceError(src, [Problem(f"line {n}, {column}", f"expected a whole number of {unit}, got a boolean.", repr(value))])
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise TraceError(src, [Problem(f"line {n}, {column}", f"expected a whole number of {unit}.", repr(value)[:80])]) from None
    if not math.isfinite(f) or f != int(f):
        raise TraceError(src, [Problem(f"line {n}, {column}", f"expected a whole number of {unit}.", repr(value)[:80])])
    if f < minimum or f > maximum:
        what = "negative" if f < 0 else ("zero" if f == 0 else "too large")
        raise TraceError(src, [Problem(f"line {n}, {column}", f"{what}: expected {minimum} <= {column} <= {maximum:,} ({unit}).", repr(value)[:80])])
    return int(f)


#: Latest timestamp a trace may hold (seconds from its start, ~317 years): a larger one is a
#: corrupt field, blamed on its own line rather than on the next line "going backwards".
MAX_TIMESTAMP_S = 1e10


def _float_field(src: str, n: int, column: str, value, unit: str, maximum: float | None = None) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise TraceError(src, [Problem(f"line {n}, {column}", f"expected a number ({unit}).", repr(value)[:80])]) from None
    if isinstance(value, bool) or not math.isfinite(f) or f < 0:
        raise TraceError(src, [Problem(f"line {n}, {column}", f"expected a finite number >= 0 ({unit}).", repr(value)[:80])])
    if maximum is not None and f > maximum:
        raise TraceError(src, [Problem(f"line {n}, {column}", f"too large: expected 0 <= {column} <= {maximum:g} ({unit}).", repr(value)[:80])])
    return f


def _wall_clock(src: str, n: int, value: str) -> float:
    try:
        dt = datetime.fromisoformat(value.strip())
    except ValueError:
        raise TraceError(src, [Problem(f"line {n}, TIMESTAMP", "expected a wall-clock time 'YYYY-MM-DD hh:mm:ss[.fffffff]' (UTC).", repr(value)[:80])]) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def _hash_ids(src: str, n: int, raw, input_tokens: int, block_tokens: int) -> tuple[int, ...]:
    if isinstance(raw, str):
        parts = raw.split()
        try:
            ids = tuple(int(x) for x in parts)
        except ValueError:
            raise TraceError(src, [Problem(f"line {n}, hash_ids", "expected block ids: whole numbers separated by spaces.", repr(raw)[:80])]) from None
    elif isinstance(raw, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
        ids = tuple(raw)
    else:
        raise TraceError(src, [Problem(f"line {n}, hash_ids", "expected a list of whole-number block ids.", repr(raw)[:80])])
    need = math.ceil(input_tokens / block_tokens)
    if len(ids) != need:
        raise TraceError(src, [Problem(f"line {n}, hash_ids", f"{len(ids)} block ids for {input_tokens} input tokens; blocks of "
                                       f"{block_tokens} tokens need ceil({input_tokens}/{block_tokens}) = {need} (see --block-tokens).")])
    return ids


def _mixed(src: str, n: int, line: str, fmt: str) -> TraceError | None:
    other = _looks_like(line)
    if other is not None and other != fmt:
        return TraceError(src, [Problem(f"line {n}", f"looks like {_a(other)}-format line inside {_a(fmt)} trace; a trace must be one format.", line.strip()[:80])])
    return None


class UnreadColumnWarning(UserWarning):
    """A trace column or key fleetplan does not read (not a known name, nor close to one):
    left out of the fit, and named in its notes (:func:`fleetplan.workload.fit.fit_trace`)."""


def _unknown(names, columns: tuple[str, ...], optional: tuple[str, ...], fmt: str, what: str = "column") -> str | None:
    """Check the ``names`` of a trace's header (or a JSON line's keys) that fleetplan does not read.

    A name close to one it reads (``hash_id`` for ``hash_ids``: difflib ratio >= 0.6), or
    one it reads in another format (``hash_ids`` in an Azure trace), is a rename or a wrong
    ``--format``: the message to refuse it with is returned (a renamed ``hash_ids`` was
    dropped silently: no prefix hit rate, exit 0). Any other name (``request_id``) is
    ignored with an :class:`UnreadColumnWarning` naming it. None when nothing is refused.
    """
    import difflib
    import warnings

    known = columns + optional
    bad = [n for n in names if n not in known]
    if not bad:
        return None
    elsewhere = set(CSV_COLUMNS + AZURE_COLUMNS + MOONCAKE_KEYS + ("hash_ids",)) - set(known)
    close = {n: m[0] for n in bad if (m := difflib.get_close_matches(n, known, 1, 0.6))}
    refused = [n for n in bad if n in close or n in elsewhere]
    plural = "s" if len(bad) > 1 else ""
    if not refused:
        warnings.warn(UnreadColumnWarning(f"the trace's {what}{plural} {', '.join(map(repr, bad))} "
                                          f"{'are' if plural else 'is'} not read ({_a(fmt)} trace has {', '.join(known)})."),
                      stacklevel=2)
        return None
    guess = [f"{n!r} (did you mean {close[n]!r}?)" if n in close else f"{n!r} (read in another format: is --format right?)" for n in refused]
    opt = f" and optionally {', '.join(optional)}" if optional else ""
    return (f"{what}{'s' if len(refused) > 1 else ''} {', '.join(guess)} not read; {_a(fmt)} trace has {', '.join(columns)}{opt}: "
            f"rename the {what} or give the right --format (a {what} unlike any fleetplan reads is ignored with a note).")


def _cells(src: str, n: int, raw: str) -> list[str]:
    """The fields of CSV line ``n``; a line the csv module refuses is a TraceError naming it."""
    try:
        return next(csv.reader([raw]))
    except csv.Error as e:
        why = (r"a carriage return (\r) inside the line, not at its end: the file mixes line endings, or a field holds one unquoted"
               if "\r" in raw.rstrip("\r\n") else str(e))
        raise TraceError(src, [Problem(f"line {n}", f"malformed CSV: {why}.", repr(raw.strip())[:80])]) from None


def _csv_rows(f: IO[str], src: str, fmt: str, columns: tuple[str, ...], optional: tuple[str, ...] | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, row dict) of a CSV with a header holding ``columns``; with
    ``optional`` (a tuple), a header column in neither is refused (TraceError naming it)."""
    header_line = None
    n = 0
    for raw in f:
        n += 1
        if raw.strip():
            header_line = raw
            break
    if header_line is None:
        raise TraceError(src, [Problem("(file)", _no_records(f, "a trace needs a header line and at least one request."))])
    header = [h.strip() for h in _cells(src, n, header_line)]
    missing = [c for c in columns if c not in header]
    if missing:
        hint = _looks_like(header_line)
        extra = f" This header looks like the {hint} format: pass --format {hint}." if hint and hint != fmt else ""
        raise TraceError(src, [Problem(f"line {n}", f"header lacks column(s) {', '.join(missing)}; {_a(fmt)} trace needs "
                                       f"{', '.join(columns)}.{extra}", header_line.strip()[:80])])
    unknown = _unknown(header, columns, optional, fmt) if optional is not None else None
    if unknown:
        raise TraceError(src, [Problem(f"line {n}", unknown, header_line.strip()[:80])])
    index = {c: header.index(c) for c in header}
    for raw in f:
        n += 1
        if not raw.strip():
            continue
        bad = _mixed(src, n, raw, fmt)
        if bad is not None:
            raise bad
        cells = _cells(src, n, raw)
        if len(cells) != len(header):
            raise TraceError(src, [Problem(f"line {n}", f"{len(cells)} fields, the header has {len(header)} ({', '.join(header)}).", raw.strip()[:80])])
        yield n, {c: cells[i] for c, i in index.items()}


def iter_requests(path: str | Path, fmt: str, block_tokens: int = 512) -> Iterator[TraceRequest]:
    """Yield the requests of a trace one at a time (the file is never held whole).

    Args:
        path: trace file (``.gz`` is read through gzip).
        fmt: 'azure', 'mooncake' or 'csv' (servegen has no requests: :func:`read_servegen`).
        block_tokens: tokens per prefix block of ``hash_ids`` (Mooncake: 512).
    Yields: :class:`TraceRequest`, timestamps non-decreasing.
    Raises: TraceError at the first bad line (line number, column, unit), or for an
    empty file (no request).
    """
    if fmt not in ("azure", "mooncake", "csv"):
        raise ValueError(f"iter_requests reads azure, mooncake or csv traces, not {fmt!r}")
    p = _check_file(path)
    src = str(p)
    last_t = -math.inf
    count = 0
    try:
        with _open_text(p) as f:
            if fmt == "mooncake":
                rows = _mooncake_rows(f, src, block_tokens)
            else:
                rows = _table_rows(f, src, fmt, block_tokens)
            for req in rows:
                if req.t_s < last_t:
                    raise TraceError(src, [Problem(f"line {req.line}, timestamp", f"goes backwards ({req.t_s - last_t:+.3f} s after the previous "
                                                   "request); a trace must be sorted by arrival time.")])
                last_t = req.t_s
                count += 1
                yield req
    except UnicodeDecodeError as e:
        raise TraceError(src, [Problem("(file)", f"not UTF-8 text (byte {e.start}).")]) from None
    except (OSError, EOFError) as e:
        raise TraceError(src, [Problem("(file)", f"cannot read: {e}.")]) from None
    except csv.Error as e:
        raise TraceError(src, [Problem("(file)", f"malformed CSV: {e}.")]) from None
    if count == 0:
        raise TraceError(src, [Problem("(file)", "no request in the file: a trace needs at least one request after its header.")])


def _table_rows(f: IO[str], src: str, fmt: str, block_tokens: int) -> Iterator[TraceRequest]:
    if fmt == "azure":
        for n, row in _csv_rows(f, src, fmt, AZURE_COLUMNS, ()):
            yield TraceRequest(n, _wall_clock(src, n, row["TIMESTAMP"]),
                               _int_field(src, n, "ContextTokens", row["ContextTokens"], "tokens", 1),
                               _int_field(src, n, "GeneratedTokens", row["GeneratedTokens"], "tokens", 1, MAX_OUTPUT_TOKENS))
    else:
        for n, row in _csv_rows(f, src, fmt, CSV_COLUMNS, ("hash_ids",)):
            inp = _int_field(src, n, "input_tokens", row["input_tokens"], "tokens", 1)
            ids = None
            if "hash_ids" in row and row["hash_ids"].strip():
                ids = _hash_ids(src, n, row["hash_ids"], inp, block_tokens)
            yield TraceRequest(n, _float_field(src, n, "timestamp_s", row["timestamp_s"], "seconds", MAX_TIMESTAMP_S), inp,
                               _int_field(src, n, "output_tokens", row["output_tokens"], "tokens", 1, MAX_OUTPUT_TOKENS), ids)


def _mooncake_rows(f: IO[str], src: str, block_tokens: int) -> Iterator[TraceRequest]:
    checked: set[frozenset] = set()
    for n, raw in enumerate(f, start=1):
        s = raw.strip()
        if not s:
            continue
        try:
            obj = json.loads(s)
        except RecursionError:
            raise TraceError(src, [Problem(f"line {n}", "the JSON nests too deeply to be a request record.")]) from None
        except json.JSONDecodeError as e:
            other = _looks_like(raw)
            hint = f" (it looks like a {other}-format line; a trace must be one format)" if other and other != "mooncake" else ""
            raise TraceError(src, [Problem(f"line {n}", f"not a JSON object: {e.msg}{hint}.", s[:80])]) from None
        if not isinstance(obj, dict):
            raise TraceError(src, [Problem(f"line {n}", "expected a JSON object {\"timestamp\": ms, \"input_length\": tokens, ...}.", s[:80])])
        missing = [k for k in MOONCAKE_KEYS if k not in obj]
        if missing:
            raise TraceError(src, [Problem(f"line {n}", f"missing key(s) {', '.join(missing)}; a mooncake line has timestamp (ms), "
                                           "input_length (tokens), output_length (tokens) and optionally hash_ids.", s[:80])])
        keys = frozenset(obj)
        if keys not in checked:  # a trace's lines share their keys: each set is checked (and noted) once
            checked.add(keys)
            unknown = _unknown(obj, MOONCAKE_KEYS, ("hash_ids",), "mooncake", "key")
            if unknown:
                raise TraceError(src, [Problem(f"line {n}", unknown, s[:80])])
        inp = _int_field(src, n, "input_length", obj["input_length"], "tokens", 1)
        ids = _hash_ids(src, n, obj["hash_ids"], inp, block_tokens) if obj.get("hash_ids") is not None else None
        t_ms = _float_field(src, n, "timestamp", obj["timestamp"], "milliseconds since the trace start", MAX_TIMESTAMP_S * 1e3)
        yield TraceRequest(n, t_ms / 1e3, inp, _int_field(src, n, "output_length", obj["output_length"], "tokens", 1, MAX_OUTPUT_TOKENS), ids)


# --------------------------------------------------------------------------- ServeGen


@dataclass(frozen=True)
class ServeGenTrace:
    """ServeGen's aggregated statistics for one model (Xiang et al., arXiv 2505.09999).

    Attributes: model; window_start_s, rate_rps, cv (arrays over the 600 s windows:
    seconds from the trace start, req/s, inter-arrival CV within the window);
    window_s (600); input_bins, output_bins: (lo_incl, hi_excl, probability) arrays of
    the volume-weighted length mixture (tokens).
    """

    model: str
    window_start_s: np.ndarray
    rate_rps: np.ndarray
    cv: np.ndarray
    window_s: float
    input_bins: np.ndarray
    output_bins: np.ndarray


def read_servegen(path: str | Path) -> ServeGenTrace:
    """Read ``<model>_aggregate_rate.csv`` and the ``length_histograms.csv`` beside it.

    Raises: TraceError (line numbers) for a missing column, a negative rate, windows
    out of order or of unequal length, a missing histogram file or model.
    """
    p = _check_file(path)
    src = str(p)
    model = p.name.split("_aggregate_rate")[0] if "_aggregate_rate" in p.name else None
    if model is None:
        raise TraceError(src, [Problem("(file)", "a servegen trace is a '<model>_aggregate_rate.csv' file (with length_histograms.csv beside it).")])
    starts, rates, cvs = [], [], []
    win = 0.0
    try:
        with _open_text(p) as f:
            for n, row in _csv_rows(f, src, "servegen", SERVEGEN_RATE_COLUMNS):
                t = _float_field(src, n, "window_start_s", row["window_start_s"], "seconds")
                w = _float_field(src, n, "window_len_s", row["window_len_s"], "seconds")
                if w <= 0 or (starts and abs(w - win) > 1e-9):
                    raise TraceError(src, [Problem(f"line {n}, window_len_s", "windows must all have the same positive length (seconds).", row["window_len_s"])])
                win = w
                if starts and t < starts[-1] + win - 1e-6:
                    raise TraceError(src, [Problem(f"line {n}, window_start_s", "windows must be sorted and not overlap (seconds).", row["window_start_s"])])
                starts.append(t)
                rates.append(_float_field(src, n, "total_rate_rps", row["total_rate_rps"], "requests/s"))
                cvs.append(_float_field(src, n, "rate_weighted_mean_cv", row["rate_weighted_mean_cv"], "dimensionless"))
    except UnicodeDecodeError as e:
        raise TraceError(src, [Problem("(file)", f"not UTF-8 text (byte {e.start}).")]) from None
    if not starts:
        raise TraceError(src, [Problem("(file)", "no window in the file.")])
    hist = p.with_name("length_histograms.csv")
    if not hist.is_file():
        raise TraceError(src, [Problem("(file)", f"the length histograms {hist} are missing; a servegen trace needs length_histograms.csv beside it.")])
    bins: dict[str, list[tuple[float, float, float]]] = {"input_tokens": [], "output_tokens": []}
    fields: set[str] = set()
    with _open_text(hist) as f:
        for n, row in _csv_rows(f, str(hist), "servegen", SERVEGEN_HIST_COLUMNS):
            if row["model"] == model:
                fields.add(row["field"])
            if row["model"] != model or row["field"] not in bins:
                continue
            lo = _float_field(str(hist), n, "bin_lo_incl", row["bin_lo_incl"], "tokens")
            hi = _float_field(str(hist), n, "bin_hi_excl", row["bin_hi_excl"], "tokens")
            pr = _float_field(str(hist), n, "probability", row["probability"], "fraction")
            if hi <= lo:
                raise TraceError(str(hist), [Problem(f"line {n}", "bin_hi_excl must exceed bin_lo_incl (tokens).")])
            bins[row["field"]].append((lo, hi, pr))
    if "text_tokens" in fields and not bins["input_tokens"]:
        raise TraceError(src, [Problem("(file)", f"'{model}' is a multimodal ServeGen model (text and image tokens in separate histograms); "
                                       "fleetplan fits one prompt-length mix and does not combine them. Use a language model's file.")])
    for field, rows in bins.items():
        if not rows or sum(r[2] for r in rows) <= 0:
            raise TraceError(src, [Problem("(file)", f"{hist.name} has no {field} histogram for model '{model}' (the name before "
                                           "'_aggregate_rate.csv').")])
    return ServeGenTrace(model, np.array(starts), np.array(rates), np.array(cvs), win,
                         np.array(bins["input_tokens"], dtype=float), np.array(bins["output_tokens"], dtype=float))
