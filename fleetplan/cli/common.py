"""Shared CLI plumbing: exit codes, error rendering, JSON output, atomic writes."""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import typer
from rich.console import Console
from rich.markup import escape

from fleetplan import interrupts
from fleetplan.percent import fraction_text
from fleetplan.errors import InputError, Problem, short_repr
from fleetplan.tempfiles import sibling_temp

EXIT_OK = 0
EXIT_INPUT = 2
EXIT_INFEASIBLE = 3
EXIT_INTERRUPTED = interrupts.EXIT_INTERRUPTED  # 130 = 128 + SIGINT, what a shell reports for a process Ctrl-C stopped
EXIT_TERMINATED = interrupts.EXIT_TERMINATED  # 143 = 128 + SIGTERM (timeout, Kubernetes, systemd): the same paths as Ctrl-C

#: Placeholders of value options that read better than the option's name.
_METAVAR = {"OUTPUT": "FILE", "LOSE": "REGION", "LOSE_PODS": "REGION[:CHIP]:N", "PARAM": "NAME[=LO:HI]", "CURRENT": "PLACEMENT"}


def _set_metavar(p) -> None:
    """Help placeholders in the shell's convention instead of typer's Python types
    (``<bool>``, ``<list[str]>``, ``<str>``): nothing after a flag, NAME after a value
    option (``--time-limit TIME_LIMIT``, ``-o FILE``), an argument by its NAME."""
    if p.metavar is not None:
        return
    if getattr(p, "param_type_name", "") == "argument":
        p.metavar = p.name.upper()
        p.display_type_rich = lambda ctx=None: None  # the name says it; no '<str>' beside it
    elif getattr(p, "is_flag", False) or getattr(p, "count", False):
        p.metavar = ""
    else:
        long = max((o for o in p.opts if o.startswith("--")), key=len, default=p.opts[0])
        name = long.lstrip("-").replace("-", "_").upper()
        p.metavar = _METAVAR.get(name, name)


class _Metavars:
    def get_params(self, ctx):
        params = super().get_params(ctx)
        for p in params:
            _set_metavar(p)
        return params


#: The commands whose invocation began in this process (:class:`Command`): empty while the
#: command line is still starting (typer building it, click parsing the arguments).
COMMAND_STARTED: list[str] = []


def warn_cache() -> None:
    """Print once on stderr each table-cache warning not yet told
    (:func:`fleetplan.tables.store.take_warnings`: a cache folder nothing can be stored in)."""
    from fleetplan.tables.store import take_warnings

    for note in take_warnings():
        err_console.print(f"[bold yellow]warning:[/] {escape(note)}", soft_wrap=True)


class Command(_Metavars, typer.core.TyperCommand):
    """A fleetplan command: typer's, with shell-style help placeholders (:func:`_set_metavar`).

    Interrupted -- Ctrl-C, or SIGTERM, which :func:`fleetplan.interrupts.install` turns into
    the same KeyboardInterrupt -- a command exits with :func:`fleetplan.interrupts.exit_status`
    (130 after Ctrl-C, 143 after SIGTERM) and one line on stderr: the command's own (it
    says what was written) or, for one that has none, this one (outputs are written
    atomically, so none is partial). Not click's 'Aborted!' with exit 1."""

    def invoke(self, ctx):
        COMMAND_STARTED.append(ctx.command_path)
        from fleetplan.tables.store import environment_problem, take_warnings

        take_warnings()  # this command's warnings only (an earlier command of the same process, in tests, told its own)
        problem = environment_problem()
        if problem is not None:  # before any work: a bad size bound emptied a warm cache silently (newcomer trial)
            err_console.print(f"[bold red]error:[/] {escape(problem)}", soft_wrap=True)
            raise typer.Exit(EXIT_INPUT)
        try:
            return self._invoke(ctx)
        finally:
            warn_cache()  # a cache folder nothing could be stored in, if the command's own output did not say it

    def _invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            self._interrupted(ctx)
        except typer.Exit as e:
            if e.exit_code == EXIT_INTERRUPTED and interrupts.exit_status() != EXIT_INTERRUPTED:
                raise typer.Exit(interrupts.exit_status()) from None  # the command's own Ctrl-C path, after a SIGTERM
            raise
        except Exception as e:
            if interrupts.wraps_interrupt(e):  # a library's exception around a Ctrl-C (pydantic_core's SchemaError) is the Ctrl-C
                self._interrupted(ctx)
            raise

    @staticmethod
    def _interrupted(ctx):
        err_console.print(f"[bold yellow]interrupted[/] ({interrupts.cause()}): fleetplan {escape(ctx.command_path.split()[-1])} stopped; "
                          "outputs are written atomically, so none was left partly written.")
        raise typer.Exit(interrupts.exit_status()) from None


class Group(_Metavars, typer.core.TyperGroup):
    """A fleetplan command group, with the same help placeholders."""


def _console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    # Not a terminal (a pipe, a file, a test runner): use a wide page instead of 80 columns.
    width = None if stream.isatty() else int(os.environ.get("COLUMNS", "160"))
    # no emoji codes: a user's value such as --risk cvar:a:b was printed as "cvar🅰b"
    return Console(highlight=False, stderr=stderr, width=width, emoji=False)


console = _console()
err_console = _console(stderr=True)


class PhaseLines:
    """Progress where a spinner or bar would print nothing (a log, CI, a pipe): one stderr
    line per new phase, ``solve: building the model (at 0.1 s)``, the wall seconds since it
    began; ``update(phase)`` with plain text (not markup)."""

    def __init__(self, command: str) -> None:
        import time

        self._clock, self.command, self.last = time.perf_counter, command, None
        self.t0 = self._clock()

    def update(self, phase: str) -> None:
        if phase != self.last:
            self.last = phase
            err_console.print(f"{self.command}: {phase} (at {self._clock() - self.t0:,.1f} s)", markup=False, highlight=False, soft_wrap=True)


class _Spinner:
    """rich's status spinner behind :class:`PhaseLines`'s ``update(phase)`` (plain text)."""

    def __init__(self, status) -> None:
        self.status = status

    def update(self, phase: str) -> None:
        self.status.update(escape(phase))


@contextmanager
def phase_status(label: str, command: str) -> Iterator[Any]:
    """Progress of a long command on stderr, as ``.update(phase)`` (plain text): rich's
    spinner on a terminal, else :class:`PhaseLines`."""
    if err_console.is_terminal:
        with err_console.status(escape(label), spinner="dots") as st:
            yield _Spinner(st)
        return
    yield PhaseLines(command)


class _StderrHandler(logging.StreamHandler):
    """A logging handler writing to the current ``sys.stderr`` (a test runner's capture too)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.setStream(sys.stderr)
        super().emit(record)


def _not_while_interrupted(record: logging.LogRecord) -> bool:
    """False for a record logged while a KeyboardInterrupt (Ctrl-C, or SIGTERM as
    :mod:`fleetplan.interrupts` raises it) unwinds -- Pyomo's 'Constructing component ...
    failed: KeyboardInterrupt' -- or one carrying it: the command's own 'interrupted' line
    says what happened."""
    exc = record.exc_info[1] if record.exc_info else sys.exc_info()[1]
    return not isinstance(exc, KeyboardInterrupt)


def route_library_logs() -> None:
    """Send every library's log records (Pyomo, HiGHS's and OR-Tools' wrappers, Ray,
    matplotlib ...) to stderr, WARNING and above, as ``WARNING (logger): message``; once
    per process, at the command line's start (:func:`fleetplan.cli.app.main`).

    Pyomo's logger has a handler of its own that writes to stdout, in front of a
    ``--json`` document (which then does not parse); Pyomo silences it when the root logger
    has a handler (``pyomo.common.log._GlobalLogFilter``), which this one is. Done without
    importing Pyomo (the command line's start-up stays light). Records logged while an
    interrupt unwinds are dropped (:func:`_not_while_interrupted`)."""
    root = logging.getLogger()
    if any(isinstance(h, _StderrHandler) for h in root.handlers):
        return
    h = _StderrHandler(sys.stderr)
    h.setLevel(logging.WARNING)
    h.setFormatter(logging.Formatter("%(levelname)s (%(name)s): %(message)s"))
    h.addFilter(_not_while_interrupted)
    root.addHandler(h)


def _number(value) -> float | None:
    """``value`` (the option's text, or its default) as a float; None when it is not a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        return None


def number_parser(option: str, unit: str, example: str, least: float | None = None, most: float | None = None,
                  integer: bool = False) -> Callable[[Any], float]:
    """The parser of a numeric option given in ``unit`` (``--duration`` seconds,
    ``--hit-rate-cache-gb`` GB, ``--block-tokens`` tokens): a finite number (a whole one
    with ``integer``), from ``least`` to ``most`` when given. Its errors name the option
    and the unit and give ``example`` (``--duration 5m``: "'5m' is not a number of seconds;
    --duration takes seconds, without a unit (e.g. 300 for 5 minutes)"), where typer and
    pydantic said only 'Input should be a valid number'.
    Other range checks stay with the code that reads the value.
    Raises typer.BadParameter (exit 2)."""
    kind = "a whole number" if integer else "a number"

    def parse(value) -> float:
        x = _number(value)
        if x is None:
            raise typer.BadParameter(f"{str(value)!r} is not {kind} of {unit}; {option} takes {unit}, without a unit (e.g. {example}).")
        if not math.isfinite(x) or (least is not None and x < least) or (most is not None and x > most) or (integer and x != int(x)):
            bounds = ", ".join(f"{w} {b:,.0f}" if b == int(b) else f"{w} {b:g}" for w, b in (("at least", least), ("at most", most)) if b is not None)
            raise typer.BadParameter(f"{value} {unit} is out of range; {option} takes {'a whole' if integer else 'a finite'} number of {unit}"
                                     + (f", {bounds}" if bounds else "") + f" (e.g. {example}).")
        return int(x) if integer else x

    return parse


def seconds_parser(option: str, least: float = 0.01) -> Callable[[Any], float]:
    """The parser of a seconds option (``--time-limit``, ``--ray-connect-timeout``): a
    finite number of seconds, at least ``least`` (:func:`number_parser`; ``--time-limit
    5m``: "'5m' is not a number of seconds; give seconds, e.g. 300 for 5 minutes").
    Raises typer.BadParameter (exit 2)."""
    return number_parser(option, "seconds", "300 for 5 minutes, 3600 for an hour", least)


def fraction_parser(option: str, what: str = "a fraction") -> Callable[[Any], float]:
    """The parser of a fraction option (``--mip-gap``, ``--dcn-slack``): a fraction from 0
    to 1, or a percentage written with '%' (``5%`` is 0.05). Its errors name the option and
    say it is a fraction, 0.05 = 5% (``--mip-gap 5``), with the fraction
    meant when the value reads as a percentage. Raises typer.BadParameter (exit 2)."""

    def parse(value) -> float:
        text = str(value).strip()
        try:
            x, pct = fraction_text(text) if isinstance(value, str) else (_number(value), False)
        except ValueError:
            x, pct = None, text.endswith("%")
        if x is not None and math.isfinite(x) and 0.0 <= x <= 1.0:
            return x
        hint = f"; for {x:g}% give {x / 100:g}" if x is not None and 1.0 < x <= 100.0 and not pct else ""
        raise typer.BadParameter(f"{text!r} is not {what} from 0 to 1: {option} is {what}, 0.05 = 5% (or write 5%){hint}.")

    return parse


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


def emit_document(doc: dict, output: str | None, json_out: bool) -> bool:
    """Write ``doc`` as JSON to ``output`` (atomically) when given, and print it when
    ``json_out``; True when it was printed (the caller then prints nothing else)."""
    if output is not None:
        with input_errors():
            write_atomic(output, dumps_json(doc))
    if json_out:
        print_json(doc)
    return json_out


def write_atomic(path: str | Path, text: str | bytes) -> Path:
    """Write ``text`` (str as UTF-8, or bytes: a PNG ...) to ``path`` atomically: a
    temporary file in the same directory (``.NAME.fleetplan-HOST-PID-XXXXXXXX.tmp``, see
    :mod:`fleetplan.tempfiles`; a killed writer's are swept by the next write there), fsync,
    then rename. A failure leaves any earlier file at ``path`` untouched.

    Raises: :class:`InputError` for a path :func:`check_output_path` refuses, or a
    directory that is not writable.
    """
    check_output_path(str(path))
    p = Path(path)
    if p.is_symlink():
        p = p.resolve()  # write the file the link points to, not over the link
    parent = p.parent if str(p.parent) else Path(".")
    try:
        fd, tmp = sibling_temp(p)
    except OSError as e:
        raise InputError(str(p), [Problem("(output)", f"cannot write here: {e.strerror}.")]) from None
    try:
        with (os.fdopen(fd, "wb") if isinstance(text, bytes) else os.fdopen(fd, "w", encoding="utf-8")) as f:
            f.write(text)
            f.flush()
            interrupts.debug_pause("before-rename", str(p))
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


def check_output_path(path: str, inputs: tuple[str, ...] = (), what: str = "the output", option: str = "-o") -> None:
    """Refuse an output path before any work: empty or '-', a directory (or a path ending
    in '/'), an existing device/pipe/socket, a missing or unwritable directory, or one of
    the command's input files.
    Raises InputError naming ``option`` (-o unless the command's option is another)."""
    if not str(path).strip() or str(path) == "-":
        raise InputError(option, [Problem(option, f"give a file path for {what}" + (" (use --json to print to stdout)." if option == "-o" else "."))])
    p = Path(path)
    if p.is_dir():
        raise InputError(path, [Problem(option, f"is a directory; give a file path for {what}.")])
    if p.exists() and not p.resolve().is_file():
        raise InputError(path, [Problem(option, "exists and is not a regular file (a device, pipe or socket); give a file path.")])
    if str(path).endswith(("/", os.sep)):
        raise InputError(path, [Problem(option, f"ends in '/', a directory that does not exist; give a file path for {what}.")])
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        up = next((a for a in parent.parents if a.exists()), None) if not parent.exists() else parent
        if up is not None and up.exists() and not up.is_dir():
            raise InputError(path, [Problem(option, f"{up} is a file, not a directory; give a file path for {what} in a directory.")])
        raise InputError(path, [Problem(option, f"directory {parent} does not exist.")])
    try:  # the directory takes a new file (permissions, read-only mounts): found now, not after the work
        fd, probe = sibling_temp(p, suffix=".probe")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise InputError(path, [Problem(option, f"cannot write in {parent}: {e.strerror}.")]) from None
    for src in inputs:
        if src and Path(src).exists() and p.exists() and Path(src).resolve() == p.resolve():
            raise InputError(path, [Problem(option, f"is the input file {src}; write {what} to another file.")])


def check_distinct_outputs(outputs: dict[str, str | None] | list[tuple[str, str | Path | None]], what: str = "each output") -> None:
    """Refuse two output options naming one file, whether it exists yet or not (``-o
    same.json --csv same.json`` left only the CSV). ``outputs``: each option and a path it
    writes (None or '' when not given; an option that writes several files, several
    pairs), in the order given. Raises InputError naming the later option and the earlier one."""
    seen: dict[Path, str] = {}
    for option, path in (outputs.items() if isinstance(outputs, dict) else outputs):
        if not path:
            continue
        key = Path(path).resolve()
        if key in seen:
            raise InputError(str(path), [Problem(option, f"is the {seen[key]} file {path}; write {what} to a file of its own.")])
        seen[key] = option


def load_json_document(path: str, model, what: str, made_by: str):
    """Read a fleetplan JSON document (a plan, a placement ...) into ``model``.
    Raises InputError naming the file: missing, a directory, not JSON, another kind of
    fleetplan document, or fields that do not validate."""
    from pydantic import ValidationError

    from fleetplan.documents import document_kind
    from fleetplan.instance.io import validation_problems

    p = Path(path)
    if p.is_dir():
        raise InputError(path, [Problem("(file)", f"is a directory; give the {what} JSON written by `{made_by}`.")])
    if p.exists() and not p.resolve().is_file():
        raise InputError(path, [Problem("(file)", f"is not a regular file (a device, pipe or socket); give the {what} JSON written by `{made_by}`.")])
    if not p.is_file():
        raise InputError(path, [Problem("(file)", f"no such file; give the {what} JSON written by `{made_by}`.")])
    if not p.resolve().is_file():
        raise InputError(path, [Problem("(file)", f"is not a regular file (a device, pipe or socket); give the {what} JSON written by `{made_by}`.")])
    size = p.stat().st_size
    if size > MAX_DOCUMENT_BYTES:
        raise InputError(path, [Problem("(file)", f"is {size:,} bytes; a fleetplan {what} is at most {MAX_DOCUMENT_BYTES:,} bytes "
                                                  f"({MAX_DOCUMENT_BYTES >> 20} MiB; docs/cli.md, input limits).")])
    try:
        data = json.loads(p.read_text(encoding="utf-8-sig"), parse_int=_bounded_int)  # a BOM an editor added is not an edit
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        if p.suffix.lower() in (".yaml", ".yml"):
            raise InputError(path, [Problem("(file)", f"is YAML (an instance?), not the JSON {what}; give the {what} JSON written by "
                                                      f"`{made_by}`.")]) from None
        if isinstance(e, UnicodeDecodeError):  # in the instance reader's words, not the codec's
            raise InputError(path, [Problem("(file)", f"not UTF-8 text (byte {e.start}); give the {what} JSON written by `{made_by}`.")]) from None
        raise InputError(path, [Problem("(file)", f"not a JSON {what}: {e}.")]) from None
    except _NumberOutOfRange as e:
        raise InputError(path, [Problem("(file)", f"holds an integer of {e.digits:,} digits; no number in a {what} has more than "
                                                  f"{MAX_INT_DIGITS} (it was edited or is not a fleetplan {what}).")]) from None
    except RecursionError:
        raise InputError(path, [Problem("(file)", f"the JSON nests too deeply to be a {what}.")]) from None
    bad = _out_of_range(data)
    if bad:
        raise InputError(path, bad)
    if not isinstance(data, dict) or "schema_version" not in data:
        raise InputError(path, [Problem("(file)", f"is JSON but not a fleetplan {what}; give the file written by `{made_by}` "
                                                  f"(schema: `fleetplan schema {what.split()[0]}`).")])
    if what == "plan" and isinstance(data.get("scenarios"), list):
        # before the schema validates every record (a 44 MB plan of 50,000 copies of its
        # scenarios took 83 s and 557 MB to refuse): a scenario given twice is an edit
        names = [s.get("name") for s in data["scenarios"] if isinstance(s, dict)]
        twice = sorted(n for n, c in Counter(x for x in names if isinstance(x, str)).items() if c > 1)
        if twice:
            raise InputError(path, [Problem("scenarios", f"{len(twice)} scenario(s) given twice: {', '.join(twice[:5])}"
                                                         f"{' ...' if len(twice) > 5 else ''}; the plan was edited after it was solved "
                                                         "(re-solve it rather than edit it).")])
    kind = document_kind(data)  # the instance reader's detection too (fleetplan/documents.py)
    if kind is not None and kind != what:
        raise InputError(path, [Problem("(file)", f"is a fleetplan {kind}, not a {what}; give the file written by `{made_by}`.")])
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise InputError(path, validation_problems(e, reference=f"`fleetplan schema {what.split()[0]}`")) from None


#: The largest plan, placement or other fleetplan JSON document a reader opens (bytes).
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
#: Digits of the longest integer a document may hold (a count of chips or slices).
MAX_INT_DIGITS = 20
#: The largest magnitude of any number in a document: above the largest quantity a plan
#: records (tokens/day of a fleet at the instance schema's caps).
MAX_NUMBER = 1e18


class _NumberOutOfRange(Exception):
    def __init__(self, digits: int):
        self.digits = digits


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _NumberOutOfRange(digits)  # before int(): Python refuses > 4300 digits with a ValueError
    return int(text)


def _out_of_range(data: Any, most: int = 10) -> list[Problem]:
    """Numbers a fleetplan document can never hold (NaN/inf from non-standard JSON
    literals, magnitudes above :data:`MAX_NUMBER`) and text that is not valid Unicode (a
    lone surrogate escape such as "\\ud800"), each named by its path; at most ``most``."""
    out: list[Problem] = []
    stack: list[tuple[str, Any]] = [("", data)]
    while stack and len(out) < most:
        where, v = stack.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                if not _utf8(k):
                    out.append(Problem(where or "(top level)", "a key is not valid Unicode text (a lone surrogate).", short_repr(k)))
                stack.append((f"{where}.{k}" if where else str(k), x))
        elif isinstance(v, list):
            stack.extend((f"{where}[{i}]", x) for i, x in enumerate(v))
        elif isinstance(v, str):
            if not _utf8(v):
                out.append(Problem(where, "not valid Unicode text (a lone surrogate escape); the document was edited.", short_repr(v)))
        elif isinstance(v, float) and not (math.isfinite(v) and abs(v) <= MAX_NUMBER):
            out.append(Problem(where, f"out of range: every number in a fleetplan document is finite and at most {MAX_NUMBER:g} in magnitude.", repr(v)))
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_NUMBER:
            out.append(Problem(where, f"out of range: every number in a fleetplan document is at most {MAX_NUMBER:g} in magnitude.", short_repr(v)))
    return out


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def load_plan(path: str):
    """A plan file (see :func:`load_json_document`)."""
    from fleetplan.results.plan import Plan

    return load_json_document(path, Plan, "plan", "fleetplan solve -o plan.json")


def plan_and_instance(plan_path: str, instance: str | None, contents: bool = True):
    """The plan at ``plan_path`` and the instance it was solved for: ``instance`` when
    given (its hash must match), else the one the plan embeds, else (an older plan) the
    bundled one it names (:func:`fleetplan.results.verify.plan_instance`); with
    ``contents``, checked to be a plan the what-if and placement can stand on. Raises
    InputError naming the file."""
    from fleetplan.errors import InstanceError
    from fleetplan.instance.io import load_instance
    from fleetplan.results.records import check_plan_contents
    from fleetplan.results.verify import plan_instance

    plan = load_plan(plan_path)
    inst = load_instance(instance) if instance is not None else None  # an unreadable --instance is named as itself
    try:
        inst = plan_instance(plan, inst)
        if contents:
            check_plan_contents(inst, plan)
    except InstanceError:
        raise
    except InputError as e:
        raise InputError(plan_path, e.problems) from None
    return plan, inst


def violation_problems(violations, most: int = 20) -> list[Problem]:
    """A checker's violations as input problems (the first ``most``, then a count)."""
    out = [Problem(f"{v.check} {v.where}", v.message) for v in violations[:most]]
    if len(violations) > most:
        out.append(Problem("...", f"and {len(violations) - most} more"))
    return out
