"""Shared CLI plumbing: exit codes, error rendering, JSON output, atomic writes."""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import typer
from rich.console import Console
from rich.markup import escape

from fleetplan.errors import InputError, Problem

EXIT_OK = 0
EXIT_INPUT = 2
EXIT_INFEASIBLE = 3

def _console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    # Not a terminal (a pipe, a file, a test runner): use a wide page instead of 80 columns.
    width = None if stream.isatty() else int(os.environ.get("COLUMNS", "160"))
    return Console(highlight=False, stderr=stderr, width=width)


console = _console()
err_console = _console(stderr=True)


@contextmanager
def input_errors() -> Iterator[None]:
    """Turn :class:`InputError` into a readable message on stderr and exit code 2."""
    try:
        yield
    except InputError as e:
        # The message quotes the user's keys and values: escape them so '[...]' is not read as rich markup.
        err_console.print(f"[bold red]error:[/] {escape(e.render())}", markup=True, soft_wrap=True)
        raise typer.Exit(EXIT_INPUT) from None


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def dumps_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, inf as the string 'inf', nan as null)."""
    return json.dumps(_clean(obj), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def print_json(obj: Any) -> None:
    sys.stdout.write(dumps_json(obj))
    sys.stdout.flush()


def write_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically: a temporary file in the same directory,
    fsync, then rename. A failure leaves any earlier file at ``path`` untouched.

    Raises: :class:`InputError` when the directory does not exist or is not writable.
    """
    p = Path(path)
    if not str(path).strip() or str(path) == "-":
        raise InputError(str(path), [Problem("(output)", "give a file path for the output (use --json to print to stdout).")])
    if p.is_symlink():
        p = p.resolve()  # write the file the link points to, not over the link
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise InputError(str(p), [Problem("(output)", "is a directory; give a file path for the output.")])
    if p.exists() and not p.is_file():
        raise InputError(str(path), [Problem("(output)", "exists and is not a regular file (a device, pipe or socket); give a file path.")])
    if not parent.is_dir():
        raise InputError(str(p), [Problem("(output)", f"directory {parent} does not exist.")])
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent)
    except OSError as e:
        raise InputError(str(p), [Problem("(output)", f"cannot write here: {e.strerror}.")]) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes the file private (0600); give it the mode a plain open() would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return p


def check_output_path(path: str, inputs: tuple[str, ...] = (), what: str = "the output") -> None:
    """Refuse an output path before any work: empty or '-', a directory, an existing
    device/pipe/socket, a missing directory, or one of the command's input files.
    Raises InputError naming -o."""
    if not str(path).strip() or str(path) == "-":
        raise InputError("-o", [Problem("-o", f"give a file path for {what} (use --json to print to stdout).")])
    p = Path(path)
    if p.is_dir():
        raise InputError(path, [Problem("-o", f"is a directory; give a file path for {what}.")])
    if p.exists() and not p.resolve().is_file():
        raise InputError(path, [Problem("-o", "exists and is not a regular file (a device, pipe or socket); give a file path.")])
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(path, [Problem("-o", f"directory {parent} does not exist.")])
    for src in inputs:
        if src and Path(src).exists() and p.exists() and Path(src).resolve() == p.resolve():
            raise InputError(path, [Problem("-o", f"is the input file {src}; write {what} to another file.")])
