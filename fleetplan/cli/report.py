"""``fleetplan report``, ``fleetplan sensitivity`` and ``fleetplan levers``: the plan's
figures as one page, the plan's sensitivity to its priors (tornado), and the cost levers
re-solved and ranked. Exit codes: 0 ok, 2 invalid input (nothing written), 3 the
instance itself cannot meet its SLOs (sensitivity, levers: the table is still printed)."""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from fleetplan.cli.common import fraction_parser, number_parser, seconds_parser
from fleetplan.cli.common import (EXIT_INFEASIBLE, EXIT_INTERRUPTED, check_output_path, console, err_console, input_errors,
                                  plan_and_instance, print_json, violation_problems, write_atomic)
from fleetplan import interrupts
from fleetplan.errors import InputError, Problem

FORMATS = ("html", "md")




def _force_exit(_sig, _frame) -> None:  # pragma: no cover - exercised through a subprocess
    os._exit(EXIT_INTERRUPTED)


@contextmanager
def _progress(total: int, what: str):
    """A rich progress bar on stderr; yields advance(text). Ctrl-C (the executor has
    already cancelled the queued solves and terminated the running ones) prints
    'interrupted' and exits 130 with nothing written; from then on a second Ctrl-C
    ends the process at once."""
    done = [0]
    try:
        with Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.fields[last]}"), console=err_console, transient=False) as prog:
            task = prog.add_task(what, total=total, last="")

            def advance(text: str) -> None:
                done[0] += 1
                prog.update(task, advance=1, last=escape(text))

            yield advance
    except KeyboardInterrupt:
        import signal

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, _force_exit)
        err_console.print(f"[bold yellow]interrupted[/] ({interrupts.cause()}): {done[0]} of {total} solves finished; the queued ones were cancelled and "
                          "the running ones stopped; nothing written.")
        raise typer.Exit(interrupts.exit_status()) from None


# ----------------------------------------------------------------------------- report


def _report_format(fmt: Optional[str], output: Optional[str]) -> str:
    named = bool(output) and output != "-" and not Path(output).is_dir()  # a directory: check_output_path says so
    suffix = Path(output).suffix.lower() if named else ""
    by_suffix = {".md": "md", ".markdown": "md", ".html": "html", ".htm": "html"}.get(suffix)
    if named and by_suffix is None:
        raise InputError("-o", [Problem("-o", f"{output!r}: the report is one HTML page (.html) or Markdown (.md) with PNG figures; "
                                              "name the file .html or .md.")])
    if fmt is not None:
        if fmt not in FORMATS:
            raise InputError("--format", [Problem("--format", f"{fmt!r}; choose html (one self-contained page) or md (Markdown, figures beside it).")])
        if by_suffix is not None and by_suffix != fmt:
            raise InputError("-o", [Problem("-o", f"{output!r} ends in {suffix} but --format is {fmt}; name the file .{fmt} or drop --format.")])
        return fmt
    return by_suffix or "html"


def report_command(
    plan: Annotated[str, typer.Argument(help="Plan JSON written by `fleetplan solve -o plan.json`.")],
    output: Annotated[Optional[str], typer.Option("-o", "--output", help="Report file (default report.html, or report.md with --format md); '-' writes to stdout. Written atomically.")] = None,
    fmt: Annotated[Optional[str], typer.Option("--format", help="html (one self-contained page, figures embedded) or md (Markdown; the figures go to <name>_figures/ beside it). Default: from the -o suffix, else html.")] = None,
    instance: Annotated[Optional[str], typer.Option("--instance", "-i", help="Instance the plan was solved for; its hash must match (default: the one the plan carries, overlays applied; an older plan without one: the bundled instance it names).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the numbers behind every figure as JSON (stdout); the page is written only with -o.")] = False,
) -> None:
    """One page planners look at: fleet, slice memory map, batch -> TPOT with the knee, TTFT vs utilisation, hourly load vs capacity, region-loss cascade, cost per 1M tokens, margins against a step-time scale (the physics sources marked)."""
    import pyomo.environ  # noqa: F401  (before SciPy: see solve.py)

    from fleetplan.report.render import build_report, render_html, render_markdown
    from fleetplan.results.plan import status_note

    with input_errors():
        pl, inst = plan_and_instance(plan, instance)
        kind = _report_format(fmt, output)
        if json_out and output is None:
            target = None
        else:
            target = output if output is not None else f"report.{kind}"
        if target == "-" and json_out:
            raise InputError("-o", [Problem("-o", "'-' (stdout) and --json both print to stdout; write the report to a file or drop --json.")])
        fig_dir = None
        if target is not None and target != "-":
            check_output_path(target, (plan, instance or ""), "the report")
            if kind == "md":
                fig_dir = Path(target).with_name(Path(target).stem + "_figures")
                if fig_dir.exists() and not fig_dir.is_dir():
                    raise InputError(target, [Problem("-o", f"the figures go to {fig_dir}, which exists and is not a directory.")])
        # the page draws the plan's numbers: re-prove them with the independent verifier first
        from fleetplan.results.verify import verify

        broken = verify(inst, pl)
        if broken:
            raise InputError(plan, [Problem("(verify)", f"the independent verifier (fleetplan.results.verify) finds {len(broken)} violation(s): the "
                                                        "report draws only plans that verify; re-solve with `fleetplan solve`.")]
                             + violation_problems(broken))
    t0 = time.perf_counter()
    with err_console.status("report", spinner="dots") as st:
        rep = build_report(inst, pl, progress=lambda m: st.update(escape(m)), draw=target is not None)
    note = status_note(pl)
    if note is not None:
        err_console.print(f"[bold yellow]warning:[/] {escape(note)}; the report shows it as it is.")
    if target == "-":
        if kind == "html":
            sys.stdout.write(render_html(rep))
        else:
            import base64

            sys.stdout.write(render_markdown(rep, lambda s: "data:image/png;base64," + base64.b64encode(rep.figures[s]).decode("ascii")))
        sys.stdout.flush()
    elif target is not None:
        with input_errors():
            if kind == "html":
                write_atomic(target, render_html(rep))
            else:
                from fleetplan.report.render import FIGURES

                fig_dir.mkdir(exist_ok=True)
                for name, png in sorted(rep.figures.items()):
                    write_atomic(fig_dir / f"{name}.png", png)
                write_atomic(target, render_markdown(rep, lambda s: f"{fig_dir.name}/{s}.png"))
                for stem, *_ in FIGURES:  # a figure an earlier report wrote here and this one has not: not left to be taken for this plan's
                    if stem not in rep.figures:
                        (fig_dir / f"{stem}.png").unlink(missing_ok=True)
        where = f"{target}" + (f" (figures in {fig_dir}/)" if fig_dir else "")
        err_console.print(f"report written to {escape(where)}: {len(rep.figures)} figures, {time.perf_counter() - t0:.1f} s")
    if json_out:
        print_json(rep.data.model_dump(mode="json"))


# ----------------------------------------------------------------------------- sweeps

# the options every sweep takes
WorkersOpt = Annotated[Optional[int], typer.Option("--workers", help="Solver processes in parallel (default 2, or fewer cores).")]
ExecutorOpt = Annotated[str, typer.Option("--executor", help="local (a process pool, default), serial, ray (a Ray cluster: pip install 'fleetplan\\[ray]'), or package.module:factory for another engine.")]
RayAddressOpt = Annotated[Optional[str], typer.Option("--ray-address", help="With --executor ray: ray://HOST:PORT (Ray Client, port 10001), HOST:PORT (the head's GCS port), auto (the cluster `ray start` runs here) or local (a cluster of --workers CPUs started for the run and stopped after). Default: $RAY_ADDRESS, else local.")]
RayTimeoutOpt = Annotated[Optional[float], typer.Option("--ray-connect-timeout", help="With --executor ray: seconds to reach an existing cluster before giving up (default 20).", parser=seconds_parser("--ray-connect-timeout", 0.1))]
MipGapOpt = Annotated[float, typer.Option("--mip-gap", help="Relative MIP gap of every solve (fraction; 0.01 = 1%; 1% is read as 0.01).", parser=fraction_parser("--mip-gap"))]
TimeLimitOpt = Annotated[float, typer.Option("--time-limit", help="Wall-clock guard per solve (seconds; `fleetplan solve`'s default). Solves run to --mip-gap on deterministic work, the same on any machine; one the guard stops keeps its plan, marked 'cut' (not reproducible, not compared).", parser=seconds_parser("--time-limit"))]


def _figure_path(output: Optional[str], inputs: tuple[str, ...]) -> str | None:
    if output is None:
        return None
    check_output_path(output, inputs, "the chart")
    suffix = Path(output).suffix.lower()
    if suffix not in (".png", ".svg"):
        raise InputError("-o", [Problem("-o", f"{output!r}: the chart is written as PNG or SVG; name the file .png or .svg.")])
    return output


def _executor(executor: str, workers: Optional[int], ray_address: Optional[str] = None, ray_timeout: Optional[float] = None):
    """The sweep's executor, opened (a Ray cluster reached or started: a failure is exit
    2 before any solve); a local pool is held to the machine's cores (each solve is one
    single-threaded HiGHS process of ~150 MB: more processes than cores only share the
    cores and add memory). Call inside input_errors()."""
    from fleetplan.report.executor import get_executor

    cores = os.cpu_count() or 1
    if executor == "local" and workers is not None and workers > cores:
        err_console.print(f"[bold yellow]note:[/] --workers {workers} on {cores} cores: the local pool runs {cores} (each solve is single-threaded; "
                          "more processes than cores are no faster and each holds ~150 MB).")
        workers = cores
    ex = get_executor(executor, workers, ray_address, ray_timeout)
    try:
        if executor == "ray":  # reaching a cluster, or starting one, takes seconds
            with err_console.status(f"connecting: {escape(ex.description)}", spinner="dots"):
                ex.open()
        else:
            ex.open()
    except KeyboardInterrupt:
        ex.close()
        err_console.print(f"[bold yellow]interrupted[/] ({interrupts.cause()}) while the executor was starting; nothing solved or written.")
        raise typer.Exit(interrupts.exit_status()) from None
    return ex


@contextmanager
def _executor_output_to_stderr(executor: str):
    """While an executor that is not ours runs (``ray``: from connecting until it is
    closed), what it prints on ``sys.stdout`` goes to stderr: the driver's Ray prints its
    cluster's error messages there whatever ``log_to_driver`` says (``(raylet) A worker
    died or was killed ...``, ``Task run_checked failed. There are 3 retries remaining
    ...``, from a background thread), and stdout is the command's JSON or table only.
    Nothing of the command's own is printed on stdout meanwhile; the results are
    published after the executor is closed (a cluster connection or a local cluster shut
    down, Ray's threads stopped)."""
    if executor in ("local", "serial"):
        yield
        return
    real = sys.stdout
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = real


def _options(mip_gap: float, time_limit: float) -> dict:
    return {"solver": "highs", "mip_gap": mip_gap, "time_limit_s": time_limit, "threads": 1}


def _status(s) -> str:
    """A point's status: verified or not, cut by the --time-limit guard (its gap is in the
    gap column), solved beyond the pod inventory."""
    cut = ", cut at the time limit" if (s.time_limited or s.termination == "time_limit") else ""
    beyond = f" (beyond the pod inventory, {s.inventory})" if s.beyond_inventory or s.inventory != "instance" else ""
    if s.status == "verified" and not cut:
        return "verified" + beyond
    return f"[bold yellow]{s.status}{cut}[/]{beyond}"


def _gap(s) -> str:
    """A point's gap to its bound, '-' without a plan or a known gap."""
    return "-" if s.status in ("no_solution", "invalid") or s.mip_gap is None else f"{s.mip_gap:.2%}"


def _base_line(b) -> str:
    """What the base of a sweep is, for the table's first line."""
    gap = f", {_gap(b)} gap" if _gap(b) != "-" else ""
    return (f"base: the plan `fleetplan solve` writes for the instance, {_chips(b)} chips, ${_fmt_usd(b.cost_per_1m_output_tokens_usd)} "
            f"per 1M output tokens, {b.status}{gap}")


def _fmt_usd(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def _chips(s, field: str = "chips") -> str:
    """A solve's chip count, '-' when it has no plan (no_solution, invalid): not 0."""
    return "-" if s.status in ("no_solution", "invalid") else f"{getattr(s, field):,}"


def _base_hint(b) -> str:
    """What to do when the sweep's base has no plan."""
    if b.status not in ("no_solution", "invalid"):
        return ""
    tl = " Raise --time-limit (the solve stopped at it)." if b.termination == "time_limit" else ""
    return f"\n[bold yellow]The base has no plan[/] ({escape(b.message or b.status)}): every row is measured from it.{tl}"


def sensitivity_command(
    instance: Annotated[Optional[str], typer.Argument(help="Instance YAML path or bundled name (default: gemini-ironwood).")] = None,
    param: Annotated[Optional[list[str]], typer.Option("--param", "-p", help="A prior and its range in the field's unit, NAME=LO:HI (e.g. mfu=0.2:0.5, or a fraction as a percentage: mfu=20%:50%), or NAME alone for its default range; repeat. Names: mfu (prefill MFU), bandwidth (achieved HBM bandwidth fraction), hit_rate (prefix-cache hit rate), alpha (mean acceptance rate), output (mean output tokens), input (mean input tokens), decode_mfu, tpot_inflation. Default: the first six.")] = None,
    output: Annotated[Optional[str], typer.Option("-o", "--output", help="Write the tornado chart to this file (.png or .svg), atomically.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the sweep as JSON instead of the table.")] = False,
    workers: WorkersOpt = None,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    ray_timeout: RayTimeoutOpt = None,
    mip_gap: MipGapOpt = 0.01,
    time_limit: TimeLimitOpt = 300.0,
    keep_inventory: Annotated[bool, typer.Option("--keep-inventory", help="Keep the instance's pod inventory for every point (one beyond it comes back as shortfall) instead of solving such a point again with 4x the pods (flagged). The base is always the instance as given.")] = False,
) -> None:
    """Re-solve across the range of each prior; print the table and draw a tornado chart of chips and $/1M output tokens."""
    import pyomo.environ  # noqa: F401

    from fleetplan.instance.io import DEFAULT_INSTANCE, load_instance
    from fleetplan.report.sensitivity import parse_params, run_sensitivity, sensitivity_tasks
    from fleetplan.report.sweep import instance_data

    with input_errors():
        inst = load_instance(instance or DEFAULT_INSTANCE)
        ranges = parse_params(list(param or []), instance_data(inst))
        fig_path = _figure_path(output, (instance or "",))
    opts = _options(mip_gap, time_limit)
    n = len(sensitivity_tasks(inst, ranges, opts, keep_inventory)[0])
    rep, wall = _run_sweep(executor, workers, ray_address, ray_timeout, n, "sensitivity",
                           lambda ex, advance: run_sensitivity(inst, ranges, ex, opts, progress=advance, keep_inventory=keep_inventory))
    from fleetplan.report.figures import fig_tornado

    _publish(rep, wall, fig_path, fig_tornado, "tornado chart", json_out, _render_sensitivity)


def _run_sweep(executor: str, workers, ray_address, ray_timeout, n: int, label: str, run):
    """(report, wall s) of ``run(ex, advance)`` on the executor asked for, with a progress
    bar of ``n`` solves; Ray's own output kept off stdout while it runs, the executor closed
    after; an executor's own failure (a Ray worker with another fleetplan, a task lost past
    its retries) is exit 2."""
    with _executor_output_to_stderr(executor):
        with input_errors():
            ex = _executor(executor, workers, ray_address, ray_timeout)
        t0 = time.perf_counter()
        try:
            with input_errors(), _progress(n, f"{label}: {n} solves on {ex.description}") as advance:
                rep = run(ex, advance)
        finally:
            ex.close()
    return rep, time.perf_counter() - t0


def _publish(rep, wall: float, fig_path: Optional[str], draw, what: str, json_out: bool, render) -> None:
    """A sweep's outputs: the chart ``draw(rep)`` written atomically to ``fig_path``
    (PNG or SVG by its suffix), then the JSON or the table ``render(rep, wall)``; exit 3
    when the instance's own plan is not verified."""
    if fig_path is not None:
        from fleetplan.report.figures import to_bytes

        with input_errors():
            write_atomic(fig_path, to_bytes(draw(rep), Path(fig_path).suffix.lower()[1:]))
        err_console.print(f"{what} written to {escape(fig_path)}")
    if json_out:
        print_json(rep.model_dump(mode="json"))
    else:
        render(rep, wall)
    if rep.base.status != "verified":
        raise typer.Exit(EXIT_INFEASIBLE)


def _render_sensitivity(rep, wall: float) -> None:
    from fleetplan.report.sensitivity import PARAMS

    b = rep.base
    console.print(f"[bold]{escape(rep.instance_name)}[/]: sensitivity to the priors, {1 + 2 * len(rep.rows)} points in {wall:.1f} s "
                  f"({escape(_base_line(b))})" + _base_hint(b))
    colocated = b.replicas > 0 and b.prefill_slices == 0
    t = Table(title="Each prior moved alone and the fleet re-solved (sorted by the swing in $/1M output tokens; * not resolved against the "
                    "base, see the notes)", title_justify="left")
    cols = ["parameter", "low .. high (base)", "chips: low / high", "$/1M output: low / high",
            "replica chips: low / high" if colocated else "prefill chips: low / high"] + ([] if colocated else ["decode chips: low / high"]) + [
            "gap: low / high", "status: low / high"]
    for c in cols:
        t.add_column(c, justify="left" if c.startswith(("parameter", "status", "low")) else "right")
    for r in rep.rows:
        p = PARAMS[r.param]
        rng = f"{p.fmt(r.low_value)} .. {p.fmt(r.high_value)} ({p.fmt(r.base_value)})"
        if not r.applicable:
            t.add_row(escape(r.label), rng, *(["-"] * (len(cols) - 3)), escape(r.note))
            continue
        lo, hi = r.low, r.high
        first = (lambda s: _chips(s) if s.status in ("no_solution", "invalid") else f"{s.prefill_chips + s.replica_chips:,}")
        star = {e: "" if getattr(r, e + "_vs_base") == "resolved" else "*" for e in ("low", "high")}
        cells = [f"{_chips(lo)} / {_chips(hi)}",
                 f"{_fmt_usd(lo.cost_per_1m_output_tokens_usd)}{star['low']} / {_fmt_usd(hi.cost_per_1m_output_tokens_usd)}{star['high']}",
                 f"{first(lo)} / {first(hi)}"]
        if not colocated:
            cells.append(f"{_chips(lo, 'decode_chips')} / {_chips(hi, 'decode_chips')}")
        t.add_row(escape(r.label), rng, *cells, f"{_gap(lo)} / {_gap(hi)}", f"{_status(lo)} / {_status(hi)}")
    console.print(t)
    h = rep.hit_rate_slices
    if h is not None:
        console.print(hit_rate_slices_text(h))
    for n in rep.notes:
        console.print("  note: " + escape(n))


def hit_rate_slices_text(h) -> str:
    """The hit-rate line of ``sensitivity``: what each +10 points of hit rate changes, as
    signed changes (a saving is negative: '-2,168 prefill chips'); the report stores
    savings (positive = saved), so every figure is negated here."""
    def ch(v, nd=0, pre="", unit=""):
        if v is None:
            return "-"
        d = -v
        return f"{'-' if d < 0 else '+'}{pre}{abs(d):,.{nd}f}{unit}"
    return (f"Prefix hit rate {h.low_hit_rate:.0%} -> {h.high_hit_rate:.0%}: each +10 points changes prefill by "
            f"{ch(h.prefill_chips_per_10_points)} chips ({ch(h.smallest_shape_slices_per_10_points)} slices of {h.smallest_shape_chips} chips; "
            f"{ch(h.prefill_slices_per_10_points, 1)} slices of the shapes chosen), the fleet by {ch(h.fleet_chips_per_10_points)} chips, "
            f"{ch(h.fleet_cost_per_hour_usd_per_10_points, unit=' $/h')} and {ch(h.cost_per_1m_output_tokens_usd_per_10_points, 3, '$')} per 1M "
            "output tokens" + ("" if h.both_verified else " (a point is not verified)"))


def levers_command(
    instance: Annotated[Optional[str], typer.Argument(help="Instance YAML path or bundled name (default: gemini-ironwood).")] = None,
    output: Annotated[Optional[str], typer.Option("-o", "--output", help="Write the ranked levers chart to this file (.png or .svg), atomically.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the levers as JSON instead of the table.")] = False,
    safe_batch: Annotated[int, typer.Option("--safe-batch", help="The fixed decode batch the occupancy lever is measured against (requests per slice; the brief's 128).", parser=number_parser("--safe-batch", "requests per slice", "128", least=1, most=1_000_000, integer=True))] = 128,
    workers: WorkersOpt = None,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    ray_timeout: RayTimeoutOpt = None,
    mip_gap: MipGapOpt = 0.01,
    time_limit: TimeLimitOpt = 300.0,
    keep_inventory: Annotated[bool, typer.Option("--keep-inventory", help="Keep the instance's pod inventory for every side (one beyond it comes back as shortfall) instead of solving such a side again with 4x the pods (flagged).")] = False,
) -> None:
    """Re-solve with each cost lever off and on (batch infill, +10/+20 points of hit rate, decode to the knee, speculation, FP8 KV) and rank the $/1M output tokens each saves."""
    import pyomo.environ  # noqa: F401

    from fleetplan.instance.io import DEFAULT_INSTANCE, load_instance
    from fleetplan.report.levers import lever_tasks, run_levers

    with input_errors():
        inst = load_instance(instance or DEFAULT_INSTANCE)
        fig_path = _figure_path(output, (instance or "",))
    opts = _options(mip_gap, time_limit)
    n = len(lever_tasks(inst, opts, safe_batch, keep_inventory))
    rep, wall = _run_sweep(executor, workers, ray_address, ray_timeout, n, "levers",
                           lambda ex, advance: run_levers(inst, ex, opts, safe_batch, progress=advance, keep_inventory=keep_inventory))
    from fleetplan.report.figures import fig_levers

    _publish(rep, wall, fig_path, fig_levers, "levers chart", json_out, _render_levers)


def _render_levers(rep, wall: float) -> None:
    b = rep.base
    console.print(f"[bold]{escape(rep.instance_name)}[/]: cost levers, each re-solved, in {wall:.1f} s ({escape(_base_line(b))}; "
                  f"${_fmt_usd(b.cost_per_1m_output_tokens_at_peak_usd)} over the sum of peaks)" + _base_hint(b))
    t = Table(title="Levers ranked by the $/1M output tokens they save (on - off; negative saves)", title_justify="left")
    for c in ("rank", "lever", "off", "on", "$/1M out: off -> on", "saved $/1M out", "saved at peak convention", "chips: off -> on",
              "gap: off / on", "status / note"):
        t.add_column(c, justify="right" if c in ("rank", "saved $/1M out", "saved at peak convention") else "left", overflow="fold",
                     no_wrap=c in ("lever", "gap: off / on"))
    for r in rep.rows:
        if not r.applicable:
            t.add_row("-", escape(r.name), "", "", "", "", "", "", "", escape(r.note))
            continue
        gap = " (within the solver gap)" if r.within_solver_gap else (" (no change)" if r.delta_fleet_cost_per_hour_usd == 0 and r.id != "batch_infill" else "")
        chips = "same fleet" if r.id == "batch_infill" else f"{_chips(r.off)} -> {_chips(r.on)}"
        note = escape(r.note) if r.note else ("verified" + gap + (" (beyond the pod inventory)" if any(s.beyond_inventory for s in (r.off, r.on)) else ""))
        t.add_row(str(r.rank) if r.rank else "-", escape(r.name), escape(r.off_label), escape(r.on_label),
                  f"{_fmt_usd(r.off_usd_per_1m_output)} -> {_fmt_usd(r.on_usd_per_1m_output)}",
                  "-" if r.delta_usd_per_1m_output is None else f"{r.delta_usd_per_1m_output:+.3f}",
                  "-" if r.delta_usd_per_1m_output_at_peak is None else f"{r.delta_usd_per_1m_output_at_peak:+.3f}", chips,
                  f"{_gap(r.off)} / {_gap(r.on)}", note)
    console.print(t)
    for r in rep.rows:
        if r.applicable:
            console.print(f"  {escape(r.name)}: {escape(r.mechanism)}")
    for n in rep.notes:
        console.print("  note: " + escape(n))
