"""``fleetplan calibrate``: fit the roofline's efficiency priors to a measured latency
profile (Splitwise, Vidur or the generic CSV), report the fit and write the priors block."""

from __future__ import annotations

import math
from typing import Annotated, Optional

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from fleetplan.cli.common import check_output_path, console, input_errors, print_json, write_atomic
from fleetplan.errors import InputError, Problem


def _pct(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:+.1%}" if abs(x) < 10 else f"{x:+.0%}"


def _ms(x: float) -> str:
    return f"{x:,.1f} ms" if x >= 10 else f"{x:,.3f} ms"


def _tok(x: float) -> str:
    return "-" if x == 0 else f"{x:,.0f}"


def calibrate_command(
    profile: Annotated[str, typer.Argument(help="Latency profile CSV: Splitwise perf_model.csv, a Vidur mlp.csv, or the generic CSV (docs/calibration.md); sample:splitwise for the shipped Splitwise profile (`fleetplan samples`).")],
    fmt: Annotated[str, typer.Option("--format", help="auto (from the header), splitwise, vidur or csv.")] = "auto",
    model: Annotated[Optional[str], typer.Option("--model", help="Catalogue model (e.g. llama2-70b, bloom-176b, Llama-2-7b-hf); with --instance, the profile's model name to select. Default: the profile's only model.")] = None,
    chip: Annotated[Optional[str], typer.Option("--chip", help="Catalogue chip (a100-80gb, h100-80gb, h100-80gb-pcap, a40); with --instance, the profile's chip name to select. Default: the profile's only chip.")] = None,
    tp: Annotated[Optional[list[int]], typer.Option("--tp", help="Tensor-parallel size (chips per slice) to fit; repeat for several (fitted jointly). Default: all in the profile.", min=1)] = None,
    instance: Annotated[Optional[str], typer.Option("--instance", "-i", help="Take the model, chip and base priors from this instance (YAML path or bundled name) instead of the catalogue.")] = None,
    instance_chip: Annotated[Optional[str], typer.Option("--instance-chip", help="The instance's chip type to fit (default: its only one).")] = None,
    terms: Annotated[str, typer.Option("--terms", help="roofline: fit prefill/decode MFU, HBM bandwidth and the two overheads, holding the other step terms (collectives, per-layer overhead) at the base priors; physics: fit every step prior the data identify (attention efficiencies, collective bandwidth and latency, per-layer overhead too) jointly.")] = "roofline",
    json_out: Annotated[bool, typer.Option("--json", help="Print the priors document (priors, source, fit) as JSON instead of tables.")] = False,
    output: Annotated[Optional[str], typer.Option("-o", "--output", help="Write the priors document as YAML to this file (atomically); nothing is written on any error.")] = None,
) -> None:
    """Fit prefill MFU, achieved HBM bandwidth and fixed overheads to measured prefill and decode times by least squares against the roofline."""
    import dataclasses

    from fleetplan.samples import resolve
    from fleetplan.workload.calibrate import calibrate, dump_priors_yaml, load_profile, resolve_target

    with input_errors():
        given, profile = profile, resolve(profile)  # sample:NAME names a shipped profile
        if instance_chip is not None and instance is None:
            raise InputError("--instance-chip", [Problem("--instance-chip", "names a chip type of --instance; give --instance too "
                                                         "(without it, --chip names the catalogue's chip).", instance_chip)])
        if output is not None:
            check_output_path(output, (profile,), "the priors")
        raw = load_profile(profile, fmt)
        target = resolve_target(raw, model, chip, instance, instance_chip)
        cal = dataclasses.replace(calibrate(raw, target, tp, terms), path=given)  # recorded as named (sample:NAME, not the install path)
        text = dump_priors_yaml(cal)
        if output is not None:
            write_atomic(output, text)
    if json_out:
        print_json(cal.document())
        return
    _print(cal)
    if output is not None:
        console.print(f"priors written to {escape(output)} (overlay on an instance with `fleetplan solve INSTANCE --priors {escape(output)}`)")


def _print(cal) -> None:
    pts = sum(ph.points for ph in cal.phases)
    console.rule(f"[bold]calibrate: {escape(cal.model)} on {escape(cal.chip)} x {', '.join(map(str, cal.tps))}")
    console.print(f"profile {escape(cal.path)} ({cal.format}, sha256 {cal.sha256[:16]}...); specs from the {escape(cal.target_source)}; "
                  f"{pts} points (medians of repeats) from {cal.rows_used} rows"
                  + (f"; profile names: {escape(str(cal.profile_model))} / {escape(str(cal.profile_chip))}" if cal.profile_model or cal.profile_chip else ""))
    t = Table(title="fitted priors", title_justify="left", box=box.SIMPLE_HEAD)
    for c in ("prior", "value", "+- 1 s.e.", "unit", "bound active", "written"):
        t.add_column(c, justify="right" if c in ("value", "+- 1 s.e.") else "left")
    for v in cal.values:
        val = f"{v.value:.4g}" if not v.name.endswith("_ms") else f"{v.value:,.3f}"
        t.add_row(v.name, val, "-" if v.stderr is None else f"{v.stderr:.2g}", v.unit,
                  f"[yellow]{escape(v.bound)}[/]" if v.bound else "-", "yes" if v.written else f"no ({escape(v.note)})" if v.note else "no")
    console.print(t)
    t = Table(title="fit quality (relative error = predicted / measured - 1)", title_justify="left", box=box.SIMPLE_HEAD)
    for c in ("phase", "TP", "points", "R^2", "RMS rel. error", "max |rel. error|", "RMS error"):
        t.add_column(c, justify="left" if c == "phase" else "right")
    for ph in cal.phases:
        t.add_row(ph.phase, "all", str(ph.points), "-" if not math.isfinite(ph.r2) else f"{ph.r2:.3f}",
                  f"{ph.rms_rel_error:.1%}", f"{ph.max_rel_error:.1%}", _ms(ph.rms_ms))
        if len(ph.by_tp) > 1:
            for s in ph.by_tp:
                t.add_row("", str(s.tp), str(s.points), "", f"{s.rms_rel_error:.1%}", f"{s.max_rel_error:.1%}", "")
    console.print(t)
    t = Table(title="worst-fitted points", title_justify="left", box=box.SIMPLE_HEAD)
    for c in ("phase", "TP", "batch", "prompt\ntokens", "context\ntokens", "measured", "predicted", "rel.\nerror", "line"):
        t.add_column(c, justify="left" if c == "phase" else "right")
    for p in cal.worst(5):
        t.add_row(p.phase, str(p.tp), str(p.batch), _tok(p.prompt_tokens), _tok(p.context_tokens), _ms(p.measured_ms),
                  _ms(p.predicted_ms), _pct(p.rel_error), str(p.line))
    console.print(t)
    if cal.excluded:
        console.print(f"[yellow]excluded:[/] {len(cal.excluded)} point(s)")
        for e in cal.excluded:
            console.print(f"  {e.phase} TP {e.tp} batch {e.batch} prompt {_tok(e.prompt_tokens)} (line {e.line}): measured {_ms(e.measured_ms)}, "
                          f"roofline floor {_ms(e.floor_ms)}: {escape(e.reason)}")
    for name, why in cal.not_identified.items():
        console.print(f"[yellow]not identified:[/] {name}: {escape(why)}")
    for n in cal.notes:
        console.print(f"[yellow]note:[/] {escape(n)}")
    block = ", ".join(f"{k}: {v:g}" for k, v in cal.priors.items())
    console.print(f"priors block: {{{escape(block)}}}")
