"""Reading latency profiles (``fleetplan calibrate``): Splitwise's ``perf_model.csv``, Vidur's
per-layer ``mlp.csv`` and the generic CSV, streamed with the csv module and validated row by
row -- every problem names the line, the column and the unit expected (up to 20, then a
count). Moved out of :mod:`fleetplan.workload.calibrate` (which re-exports these names) so
the fits live apart from the readers; the helpers other readers of measurements share
(:class:`Problems`, :func:`parse_number`, :func:`text_lines`, :func:`comment_filter`) are
public here (:mod:`fleetplan.workload.e2e` reads LLM-Inference-Bench with them).

Formats (sources: /work/shared/data/README.md sections 4 and 5; docs/calibration.md):
``splitwise`` (Patel et al., ISCA'24), ``vidur`` (Agrawal et al., MLSys'24), ``csv``
(:data:`CSV_COLUMNS`).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from fleetplan.errors import InputError, Problem, short_repr
from fleetplan.workload.traces import file_sha256

__all__ = ["FORMATS", "MAX_PROFILE_BYTES", "MAX_PROBLEMS", "MAX_PROFILE_VALUE", "ProfileError", "SPLITWISE_COLUMNS", "SPLITWISE_OPTIONAL",
           "VIDUR_GEMMS", "VIDUR_COLUMNS", "CSV_COLUMNS", "CSV_OPTIONAL", "RawProfile", "Problems", "parse_number", "text_lines",
           "comment_filter", "load_profile"]

FORMATS = ("splitwise", "vidur", "csv")
MAX_PROFILE_BYTES = 64 * 1024 * 1024
MAX_PROBLEMS = 20

class ProfileError(InputError):
    """A latency profile (or the selection from it) is malformed; problems name the line and column."""

    kind = "profile"



SPLITWISE_COLUMNS = ("model", "hardware", "prompt_size", "batch_size", "token_size", "prompt_time", "token_time", "e2e_time", "tensor_parallel")
SPLITWISE_OPTIONAL = ("peak_power", "average_power")
VIDUR_GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
VIDUR_COLUMNS = tuple(f"time_stats.{op}.median" for op in VIDUR_GEMMS) + (
    "n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp", "num_tokens", "num_tensor_parallel_workers")
#: The generic format: one measured time per row. ``phase`` prefill: ``time_ms`` is the
#: prefill of ``batch_size`` prompts of ``prompt_tokens`` each (context_tokens blank or 0);
#: decode: ``time_ms`` is one decode step with ``batch_size`` residents each holding
#: ``context_tokens`` of KV (prompt_tokens blank or 0). ``chips``: slice size. Optional
#: ``model`` and ``chip`` columns select rows with --model/--chip. Lines starting with
#: '#' are comments.
CSV_COLUMNS = ("phase", "chips", "batch_size", "prompt_tokens", "context_tokens", "time_ms")
CSV_OPTIONAL = ("model", "chip")
#: Column names that mark each format's header (two or more of them make a header line).
_HEADER_MARKS = {
    "splitwise": {"hardware", "prompt_size", "token_size", "prompt_time", "token_time", "e2e_time", "tensor_parallel"},
    "vidur": {"num_tokens", "num_tensor_parallel_workers", "n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp"},
    "csv": {"phase", "chips", "prompt_tokens", "context_tokens", "time_ms"},
}


@dataclass(frozen=True)
class RawProfile:
    """A validated profile file, before selection.

    Attributes: path (as given), format, sha256 (hex of the file bytes), rows (data rows
    read), records (format-specific tuples, one per row, each starting with its line
    number), models / chips (names the profile holds; empty when it does not say), tps
    (tensor-parallel sizes present), dims (Vidur: the model shape columns).
    """

    path: str
    format: str
    sha256: str
    rows: int
    records: tuple
    models: tuple[str, ...]
    chips: tuple[str, ...]
    tps: tuple[int, ...]
    dims: dict = field(default_factory=dict)


class Problems:
    """Collects problems, keeps the first MAX_PROBLEMS and counts the rest."""

    def __init__(self) -> None:
        self.items: list[Problem] = []
        self.more = 0

    def add(self, line: int, column: str | None, message: str, value: str = "") -> None:
        if len(self.items) >= MAX_PROBLEMS:
            self.more += 1
            return
        where = f"line {line}" + (f", column {column}" if column else "")
        self.items.append(Problem(where, message, value))

    def raise_if_any(self, source: str) -> None:
        if self.items:
            extra = [Problem("...", f"and {self.more} more problems (the first {MAX_PROBLEMS} are listed).")] if self.more else []
            raise ProfileError(source, self.items + extra)


def text_lines(path: Path) -> Iterator[str]:
    with path.open("r", encoding="utf-8-sig", newline="") as f:
        yield from f


def _detect(fields: list[str]) -> str | None:
    """The format whose header ``fields`` look like: the most marker columns, at least two
    (Vidur's ``time_stats.*`` columns count as markers); None when nothing matches."""
    cols = {c.strip() for c in fields}
    hits = {fmt: len(marks & cols) + (sum(c.startswith("time_stats.") for c in cols) if fmt == "vidur" else 0)
            for fmt, marks in _HEADER_MARKS.items()}
    fmt = max(hits, key=lambda k: hits[k])
    return fmt if hits[fmt] >= 2 else None


#: Largest value a profile cell may hold (1e8: 28 hours in ms, 100 M tokens, 100 M chips):
#: anything above is a unit or parsing slip, not a measurement.
MAX_PROFILE_VALUE = 1e8


def parse_number(raw: str | None, line: int, col: str, unit: str, probs: Problems, integer: bool = False,
         positive: bool = True, blank_ok: bool = False) -> float | None:
    """Parse one numeric cell; record a problem naming the line, column and unit on failure."""
    text = (raw or "").strip()
    if not text:
        if blank_ok:
            return None
        probs.add(line, col, f"missing value; expected {unit}.")
        return None
    try:
        v = float(text)
    except ValueError:
        probs.add(line, col, f"not a number; expected {unit}.", short_repr(text))
        return None
    if not math.isfinite(v):
        probs.add(line, col, f"not a finite number; expected {unit}.", short_repr(text))
        return None
    if integer and v != int(v):
        probs.add(line, col, f"not a whole number; expected {unit}.", short_repr(text))
        return None
    if positive and v <= 0:
        probs.add(line, col, f"{'negative' if v < 0 else 'zero'}; expected {unit}.", short_repr(text))
        return None
    if not positive and v < 0:
        probs.add(line, col, f"negative; expected {unit}.", short_repr(text))
        return None
    if v > MAX_PROFILE_VALUE:
        probs.add(line, col, f"implausibly large (over {MAX_PROFILE_VALUE:.0e}); expected {unit}.", short_repr(text))
        return None
    return v


def load_profile(path: str, fmt: str = "auto") -> RawProfile:
    """Read and validate a latency profile, streaming it with the csv module.

    Args:
        path: the profile file (CSV).
        fmt: ``auto`` (from the header), ``splitwise``, ``vidur`` or ``csv``.
    Returns: :class:`RawProfile` (every row validated, nothing selected yet).
    Raises: :class:`ProfileError` naming the line, the column and the expected unit for
        every bad row (up to 20, then a count): a missing file, an empty file, missing
        columns, non-numeric, negative or zero values, a JSON line, another header in the
        middle of the data (two files concatenated), rows of the wrong width, or a header
        of another format than ``fmt``.
    """
    p = Path(path)
    if fmt not in ("auto", *FORMATS):
        raise ProfileError(path, [Problem("--format", f"unknown format {fmt!r}; expected auto, {', '.join(FORMATS)}.")])
    if not p.exists():
        raise ProfileError(path, [Problem("(file)", "no such file; give a latency profile CSV (formats: docs/calibration.md).")])
    if p.is_dir():
        raise ProfileError(path, [Problem("(file)", "is a directory; give the profile CSV file (for Vidur, the mlp.csv file).")])
    if not p.is_file():
        raise ProfileError(path, [Problem("(file)", "is not a regular file (a device, pipe or socket); give the profile CSV file.")])
    size = p.stat().st_size
    if size > MAX_PROFILE_BYTES:
        raise ProfileError(path, [Problem("(file)", f"file is {size} bytes; a profile is at most {MAX_PROFILE_BYTES} bytes.")])
    probs = Problems()
    reader = csv.reader(comment_filter(text_lines(p)))
    counted = [0]

    def records() -> Iterator[tuple[int, list[str]]]:
        for fields in reader:
            if fields and any(f.strip() for f in fields):
                counted[0] += 1
                yield reader.line_num, fields

    rows = records()
    try:
        first = next(rows, None)
        if first is None:
            raise ProfileError(path, [Problem("line 1", "the file is empty (no CSV header; blank and '#' lines do not count); expected e.g. the splitwise header "
                                                        f"{','.join(SPLITWISE_COLUMNS)} or the generic {','.join(CSV_COLUMNS)}.")])
        header_line, header = first[0], [f.strip() for f in first[1]]
        if header[0].startswith(("{", "[")):
            raise ProfileError(path, [Problem(f"line {header_line}", "a JSON line, not a CSV header; a profile is a CSV file "
                                                                     "(formats: docs/calibration.md).", short_repr(",".join(header)[:40]))])
        found = _detect(header)
        if fmt == "auto":
            if found is None:
                raise ProfileError(path, [Problem(f"line {header_line}", "not the header of a known profile format (splitwise, "
                                                                         f"vidur, csv); the generic format's header is {','.join(CSV_COLUMNS)}.",
                                                  short_repr(",".join(header)[:80]))])
            fmt = found
        elif found is not None and found != fmt:
            raise ProfileError(path, [Problem(f"line {header_line}", f"this is a {found} profile header, not {fmt}; use --format {found}.")])
        reader_fn = {"splitwise": _read_splitwise, "vidur": _read_vidur, "csv": _read_csv}[fmt]
        raw = reader_fn(path, header, header_line, rows, probs)
    except UnicodeDecodeError:
        line, col = _first_bad_utf8(p)
        raise ProfileError(path, [Problem(f"line {line}", f"not UTF-8 text (byte {col} of the line): a profile is a CSV text file.")]) from None
    except csv.Error as e:
        raise ProfileError(path, [Problem(f"line {reader.line_num}", f"not readable as CSV: {e}.")]) from None
    if counted[0] == 1:
        raise ProfileError(path, [Problem(f"line {header_line + 1}", "no data rows after the header.")])
    probs.raise_if_any(path)
    return RawProfile(path=path, format=fmt, sha256=file_sha256(p), rows=counted[0] - 1, **raw)


def _first_bad_utf8(path: Path) -> tuple[int, int]:
    """(line, byte in the line), both from 1, of the first byte that is not UTF-8."""
    with path.open("rb") as f:
        for n, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return n, e.start + 1
    return 1, 1


def comment_filter(lines: Iterable[str]) -> Iterator[str]:
    """Blank out '#' comment lines (kept as empty lines so csv line numbers stay the file's)."""
    for ln in lines:
        yield "\n" if ln.lstrip().startswith("#") else ln


def _check_header(header: list[str], header_line: int, required: Sequence[str], optional: Sequence[str], fmt: str,
                  probs: Problems, strict: bool) -> dict[str, int]:
    idx = {c: i for i, c in enumerate(header)}
    missing = [c for c in required if c not in idx]
    if missing:
        probs.add(header_line, None, f"missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}; the {fmt} "
                                     f"header has {','.join(required)}.")
    if strict:
        unknown = [c for c in header if c not in required and c not in optional]
        if unknown:
            probs.add(header_line, None, f"unknown column{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; the {fmt} "
                                         f"columns are {','.join(required)} (optional: {','.join(optional) or 'none'}).")
    dup = sorted({c for c in header if header.count(c) > 1})
    if dup:
        probs.add(header_line, None, f"duplicate column{'s' if len(dup) > 1 else ''} {', '.join(dup)}.")
    return idx


def _row_shape_ok(line: int, fields: list[str], width: int, probs: Problems) -> bool:
    first = fields[0].lstrip() if fields else ""
    if first.startswith(("{", "[")):
        probs.add(line, None, "a JSON line in a CSV profile (two formats mixed?); every data row is comma-separated values.",
                  short_repr(",".join(fields)[:60]))
        return False
    other = _detect(fields)
    if other is not None:
        probs.add(line, None, f"a {other} header line in the middle of the data (two files concatenated?).",
                  short_repr(",".join(fields)[:60]))
        return False
    if len(fields) != width:
        probs.add(line, None, f"{len(fields)} fields, but the header has {width}.")
        return False
    return True


def _read_splitwise(path: str, header: list[str], header_line: int, rows, probs: Problems) -> dict:
    idx = _check_header(header, header_line, SPLITWISE_COLUMNS, SPLITWISE_OPTIONAL, "splitwise", probs, strict=True)
    probs.raise_if_any(path)
    recs = []
    for line, f in rows:
        if not _row_shape_ok(line, f, len(header), probs):
            continue
        model, hw = f[idx["model"]].strip(), f[idx["hardware"]].strip()
        if not model:
            probs.add(line, "model", "missing model name.")
        if not hw:
            probs.add(line, "hardware", "missing hardware name.")
        vals = {
            "prompt_size": parse_number(f[idx["prompt_size"]], line, "prompt_size", "input tokens per request, a whole number > 0", probs, integer=True),
            "batch_size": parse_number(f[idx["batch_size"]], line, "batch_size", "requests in the batch, a whole number > 0", probs, integer=True),
            "token_size": parse_number(f[idx["token_size"]], line, "token_size", "output tokens per request, a whole number > 0", probs, integer=True),
            "tensor_parallel": parse_number(f[idx["tensor_parallel"]], line, "tensor_parallel", "GPUs in the slice, a whole number > 0", probs, integer=True),
            "prompt_time": parse_number(f[idx["prompt_time"]], line, "prompt_time", "the batch's prefill time in ms, > 0", probs),
            "token_time": parse_number(f[idx["token_time"]], line, "token_time", "ms per decode iteration, > 0", probs),
            "e2e_time": parse_number(f[idx["e2e_time"]], line, "e2e_time", "end-to-end time in ms, > 0", probs),
        }
        if not model or not hw or any(v is None for v in vals.values()):
            continue
        recs.append((line, model, hw, int(vals["tensor_parallel"]), int(vals["prompt_size"]), int(vals["batch_size"]),
                     int(vals["token_size"]), vals["prompt_time"], vals["token_time"], vals["e2e_time"]))
    return {"records": tuple(recs), "models": tuple(sorted({r[1] for r in recs})), "chips": tuple(sorted({r[2] for r in recs})),
            "tps": tuple(sorted({r[3] for r in recs}))}


def _vidur_path_names(path: str) -> tuple[str | None, str | None]:
    """(model, hardware) from Vidur's layout compute/<hw>/<org>/<model>/mlp.csv, else (None, None)."""
    parts = Path(path).parts
    if len(parts) >= 4 and parts[-1] == "mlp.csv":
        return parts[-2], parts[-4]
    return None, None


def _read_vidur(path: str, header: list[str], header_line: int, rows, probs: Problems) -> dict:
    idx = _check_header(header, header_line, VIDUR_COLUMNS, (), "vidur", probs, strict=False)
    probs.raise_if_any(path)
    recs = []
    dims_seen: dict[tuple, int] = {}
    for line, f in rows:
        if not _row_shape_ok(line, f, len(header), probs):
            continue
        times = [parse_number(f[idx[c]], line, c, "ms per layer, > 0", probs) for c in VIDUR_COLUMNS[:4]]
        dims = [parse_number(f[idx[c]], line, c, "a whole number > 0", probs, integer=True) for c in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd")]
        gated = f[idx["use_gated_mlp"]].strip()
        if gated not in ("True", "False", "true", "false", "1", "0"):
            probs.add(line, "use_gated_mlp", "expected True or False.", short_repr(gated))
        tokens = parse_number(f[idx["num_tokens"]], line, "num_tokens", "tokens in the batch, a whole number > 0", probs, integer=True)
        tp = parse_number(f[idx["num_tensor_parallel_workers"]], line, "num_tensor_parallel_workers", "GPUs, a whole number > 0", probs, integer=True)
        if any(v is None for v in (*times, *dims, tokens, tp)) or gated not in ("True", "False", "true", "false", "1", "0"):
            continue
        key = (*(int(d) for d in dims), gated.lower() in ("true", "1"))
        dims_seen.setdefault(key, line)
        recs.append((line, int(tp), int(tokens), float(sum(times))))
    if len(dims_seen) > 1:
        lines = sorted(dims_seen.values())
        probs.add(lines[1], "n_embd", "the model shape columns (n_head, n_kv_head, n_embd, n_expanded_embd, use_gated_mlp) "
                                      f"change within the file (first shape at line {lines[0]}); one mlp.csv profiles one model.")
    dims = {}
    if len(dims_seen) == 1:
        h, kv, d, ffn, gated = next(iter(dims_seen))
        dims = {"n_head": h, "n_kv_head": kv, "n_embd": d, "n_expanded_embd": ffn, "use_gated_mlp": gated}
    model, hw = _vidur_path_names(path)
    return {"records": tuple(recs), "models": (model,) if model else (), "chips": (hw,) if hw else (),
            "tps": tuple(sorted({r[1] for r in recs})), "dims": dims}


def _read_csv(path: str, header: list[str], header_line: int, rows, probs: Problems) -> dict:
    idx = _check_header(header, header_line, CSV_COLUMNS, CSV_OPTIONAL, "csv", probs, strict=True)
    probs.raise_if_any(path)
    recs = []
    for line, f in rows:
        if not _row_shape_ok(line, f, len(header), probs):
            continue
        phase = f[idx["phase"]].strip()
        if phase not in ("prefill", "decode"):
            probs.add(line, "phase", "expected prefill or decode.", short_repr(phase))
            continue
        chips = parse_number(f[idx["chips"]], line, "chips", "chips in the slice, a whole number > 0", probs, integer=True)
        batch = parse_number(f[idx["batch_size"]], line, "batch_size", "prompts (prefill) or residents (decode), a whole number > 0", probs, integer=True)
        if phase == "prefill":
            prompt = parse_number(f[idx["prompt_tokens"]], line, "prompt_tokens", "tokens per prompt, > 0", probs)
            ctx = parse_number(f[idx["context_tokens"]], line, "context_tokens", "blank or 0 on a prefill row (tokens)", probs, positive=False, blank_ok=True)
            if ctx:
                probs.add(line, "context_tokens", "a prefill row leaves context_tokens blank (or 0); put the prompt length in prompt_tokens.", short_repr(ctx))
            ctx = 0.0
        else:
            prompt = parse_number(f[idx["prompt_tokens"]], line, "prompt_tokens", "blank, or the residents' prompt length in tokens (>= 0)", probs,
                          positive=False, blank_ok=True)
            ctx = parse_number(f[idx["context_tokens"]], line, "context_tokens", "mean KV context per resident in tokens, > 0", probs)
            prompt = prompt or 0.0
        t = parse_number(f[idx["time_ms"]], line, "time_ms", "ms, > 0 (prefill: the whole batch; decode: one step)", probs)
        model = f[idx["model"]].strip() if "model" in idx else None
        chip = f[idx["chip"]].strip() if "chip" in idx else None
        if model == "":
            probs.add(line, "model", "missing model name (the column is there, so every row names one).")
        if chip == "":
            probs.add(line, "chip", "missing chip name (the column is there, so every row names one).")
        if any(v is None for v in (chips, batch, prompt, ctx, t)) or model == "" or chip == "":
            continue
        recs.append((line, model, chip, int(chips), phase, int(batch), float(prompt), float(ctx), t))
    return {"records": tuple(recs), "models": tuple(sorted({r[1] for r in recs if r[1]})),
            "chips": tuple(sorted({r[2] for r in recs if r[2]})), "tps": tuple(sorted({r[3] for r in recs}))}
