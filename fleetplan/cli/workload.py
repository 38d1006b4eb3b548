"""``fleetplan workload fit``: a workload block for an instance, fitted from a request trace."""

from __future__ import annotations

import math
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from fleetplan.cli.common import number_parser
from fleetplan.cli.common import Command, Group, check_output_path, console, err_console, input_errors, print_json, write_atomic
from fleetplan.errors import InputError, Problem
from fleetplan.results.precision import r6  # not results.loads (the plan evaluation): --help stays light

workload_app = typer.Typer(help="Fit an instance's workload from a production trace.", no_args_is_help=True, cls=Group)

WORKLOAD_FILE_FORMAT = "fleetplan-workload/1"


def _parse_tiers(text: str) -> list[int | None]:
    out: list[int | None] = []
    for part in text.split(","):
        part = part.strip().replace("_", "")
        try:
            v = int(part)
        except ValueError:
            raise InputError("--tiers", [Problem("--tiers", "expected comma-separated ascending upper bounds of the tiers (tokens), "
                                                 "e.g. 16384,262144; the last tier is unbounded.", text)]) from None
        out.append(v)
    if any(b <= a for a, b in zip(out, out[1:])) or any(v <= 0 for v in out):
        raise InputError("--tiers", [Problem("--tiers", "tier bounds must be positive and ascending (tokens).", text)])
    return out + [None]


def _parse_gb(text: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        vals = ()
    if not vals or any(not (v > 0 and math.isfinite(v)) for v in vals):
        raise InputError("--cache-gb", [Problem("--cache-gb", "expected comma-separated positive cache sizes (GB), e.g. 256,1024,4096.", text)])
    return tuple(sorted(set(vals)))


def fit_command(
    trace: Annotated[str, typer.Argument(help="Trace file: Azure LLM CSV, Mooncake JSON lines, fleetplan CSV, or a ServeGen <model>_aggregate_rate.csv; sample:mooncake for the shipped sample (`fleetplan samples`).")],
    fmt: Annotated[Optional[str], typer.Option("--format", help="azure | mooncake | servegen | csv (default: detected from the first line).")] = None,
    tiers: Annotated[Optional[str], typer.Option("--tiers", help="Tier upper bounds (tokens), comma-separated; the last tier is unbounded (default: the instance's tiers).")] = None,
    window: Annotated[Optional[float], typer.Option("--window", help="Rate window (seconds; default 60, servegen 600).", parser=number_parser("--window", "seconds", "60 for a minute"))] = None,
    instance: Annotated[str, typer.Option("--instance", help="Instance whose model sets KV bytes per token (cache sizes) and whose tiers are the default.")] = "gemini-ironwood",
    cache_gb: Annotated[str, typer.Option("--cache-gb", help="LRU prefix-cache sizes to replay (GB, comma-separated), for traces with block hashes.")] = "256,1024,4096,16384,65536",
    block_tokens: Annotated[int, typer.Option("--block-tokens", help="Tokens per prefix block of the hash ids (Mooncake: 512).", parser=number_parser("--block-tokens", "tokens", "512 for Mooncake's blocks", integer=True))] = 512,
    hit_rate_cache_gb: Annotated[Optional[float], typer.Option("--hit-rate-cache-gb", help="Write the prefix hit rate of an LRU cache of this size (GB) instead of the unbounded cache's (an upper bound).", parser=number_parser("--hit-rate-cache-gb", "GB", "10 for 10 GB"))] = None,
    scv_timescale: Annotated[float, typer.Option("--scv-timescale", help="Time scale of the arrival SCV written as workload.arrival_scv (seconds): the index of dispersion of counts in bins this long, inside each hour (docs/workloads.md).", parser=number_parser("--scv-timescale", "seconds", "1 for one second"))] = 1.0,
    output: Annotated[Optional[str], typer.Option("-o", "--output", help="Write the workload YAML here (atomically); use it with `fleetplan solve --workload`.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print every statistic as JSON.")] = False,
) -> None:
    """Fit the input-length mix, output lengths, arrival burstiness, prefix-cache hit rates and tier shares of a trace."""
    from fleetplan.instance.io import load_instance
    from fleetplan.perf.roofline import kv_bytes_per_token
    from fleetplan.workload.fit import fit_trace
    from fleetplan.workload.traces import FORMATS, detect_format

    from fleetplan.samples import resolve

    with input_errors():
        given, trace = trace, resolve(trace)  # sample:NAME names a shipped trace
        if fmt is not None and fmt not in FORMATS:
            raise InputError("--format", [Problem("--format", f"expected one of {', '.join(FORMATS)}.", fmt)])
        if output is not None:
            check_output_path(output, (trace,), "the workload")
        inst = load_instance(instance)
        if tiers is not None:
            bounds, names = _parse_tiers(tiers), None
        else:
            bounds = [t.max_input_tokens for t in inst.workload.tiers]
            names = [t.name for t in inst.workload.tiers]
        kind = fmt or detect_format(trace)
        win = window if window is not None else (600.0 if kind == "servegen" else 60.0)
        with err_console.status("reading the trace", spinner="dots") as st:
            fit = fit_trace(trace, kind, bounds, kv_bytes_per_token(inst.model), win, _parse_gb(cache_gb), block_tokens, names,
                            progress=lambda n: st.update(f"read {n:,} requests"), hit_rate_cache_gb=hit_rate_cache_gb,
                            scv_timescale_s=scv_timescale)
        fit = fit.model_copy(update={"trace": given})  # recorded as named (sample:NAME, not the install path)
        text = workload_yaml(fit, instance)
        if output is not None:
            write_atomic(output, text)
    if json_out:
        doc = fit.model_dump(mode="json")
        doc["workload"] = fit.workload_block()
        print_json(doc)
    else:
        render_fit(fit)
        if output:
            console.print(f"workload written to {escape(output)} (use: fleetplan solve INSTANCE --workload {escape(output)})")
        else:
            console.print("(pass -o workload.yaml to write the workload block)")


workload_app.command("fit", cls=Command)(fit_command)


def workload_yaml(fit, instance: str) -> str:
    """The workload file: a commented header, ``format``, ``source``, the ``workload``
    block that overlays an instance's, and every statistic under ``statistics``."""
    import yaml

    a = fit.arrivals
    head = [
        "# fitted by `fleetplan workload fit` (the same trace and options give the same bytes)",
        f"# from {fit.trace} ({fit.format}, sha256 {fit.sha256[:16]}...): {a.requests:,} requests over {a.span_s / 3600:.2f} h",
        f"# input tokens: mean {fit.input.mean:,.0f} (bucketed {fit.input_bucketed.mean:,.0f}), p50 {fit.input.p50:,.0f}, "
        f"p99 {fit.input.p99:,.0f} (bucketed {fit.input_bucketed.p99:,.0f}); output mean {fit.output.mean:,.1f}",
        "# `workload:` replaces those fields of an instance (fleetplan solve INSTANCE --workload THIS, or include: {workload: THIS});",
        "# the instance keeps its classes, tiers, rates and everything else. `statistics:` is for reading.",
    ]
    doc = {
        "format": WORKLOAD_FILE_FORMAT,
        "source": {"trace": fit.trace, "format": fit.format, "sha256": fit.sha256, "requests": a.requests,
                   "span_s": round(a.span_s, 3), "instance_for_kv_bytes": instance,
                   "tier_bounds_tokens": [t.max_input_tokens for t in fit.tiers]},
        "workload": fit.workload_block(),
        "statistics": _rounded(fit.model_dump(mode="json", exclude={"trace": True, "format": True, "sha256": True, "input_mix": True,
                                                                    "arrivals": {"window_rps"}})),
    }
    return "\n".join(head) + "\n" + yaml.safe_dump(doc, sort_keys=False, width=120, default_flow_style=None)


def _rounded(obj):
    """Floats to 6 significant digits (non-finite to null), through dicts and lists."""
    if isinstance(obj, float):
        return r6(obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return obj


def _n(x, nd=0, unit="") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:,.{nd}f}{unit}"


def render_fit(fit) -> None:
    a = fit.arrivals
    console.print(f"[bold]{escape(fit.trace)}[/] ({fit.format}): {a.requests:,} request{'s' if a.requests != 1 else ''} over {a.span_s / 3600:.2f} h"
                  + (f" from {a.start_utc}" if a.start_utc else ""))
    t = Table(title="Lengths (tokens): plan on the mean, not the median", title_justify="left")
    for c in ("", "mean", "p50", "p95", "p99", "max", "rms = sqrt(E(len^2))"):
        t.add_column(c, justify="right" if c else "left")
    for name, s in (("input, trace", fit.input), ("input, bucketed mix", fit.input_bucketed), ("output, trace", fit.output)):
        t.add_row(name, _n(s.mean), _n(s.p50), _n(s.p95), _n(s.p99), _n(s.max), _n(math.sqrt(s.mean_square)))
    console.print(t)
    if fit.input_output_pearson is not None:
        console.print(f"input/output correlation: Pearson {fit.input_output_pearson:+.3f}, Spearman {fit.input_output_spearman:+.3f}")
    m = Table(title="Fitted input mix (workload.input_mix)", title_justify="left")
    for c in ("share", "tokens (bucket mean)", "range (tokens)", "share of prompt tokens"):
        m.add_column(c, justify="right")
    total = sum(b.share * b.tokens for b in fit.input_mix)
    for b in fit.input_mix:
        m.add_row(f"{b.share:.2%}" if b.share >= 1e-4 else f"{b.share:.4%}", f"{b.tokens:,}", f"{b.min_tokens:,.0f} - {b.max_tokens:,.0f}", f"{b.share * b.tokens / total:.1%}")
    console.print(m)
    tt = Table(title="Tiers", title_justify="left")
    for c in ("tier", "max input (tokens)", "requests", "prompt tokens", "uncached prompt tokens", "mean input", "mean output", "hit rate"):
        tt.add_column(c, justify="left" if c == "tier" else "right")
    for s in fit.tiers:
        tt.add_row(escape(s.name), _n(s.max_input_tokens) if s.max_input_tokens else "unbounded", f"{s.request_share:.2%}",
                   f"{s.prefill_token_share:.2%}", f"{s.uncached_prefill_token_share:.2%}" if s.uncached_prefill_token_share is not None else "-",
                   _n(s.mean_input_tokens), _n(s.mean_output_tokens, 1), f"{s.hit_rate_tokens:.1%}" if s.hit_rate_tokens is not None else "-")
    console.print(tt)
    at = Table(title=f"Arrivals ({a.window_s:g} s windows)", title_justify="left")
    for c in ("mean", "window p50", "window p95", "peak", "peak at", "peak/mean", "inter-arrival CV", "dispersion 1 s", f"dispersion {a.window_s:g} s"):
        at.add_column(c, justify="right")
    at.add_row(_n(a.mean_rps, 2, " req/s"), _n(a.window_rps_p50, 2, " req/s"), _n(a.window_rps_p95, 2, " req/s"), _n(a.peak_rps, 2, " req/s"),
               f"+{a.peak_window_start_s:,.0f} s", _n(a.peak_to_mean, 2), _n(a.inter_arrival_cv, 2), _n(a.dispersion_1s, 2), _n(a.dispersion_window, 1))
    console.print(at)
    if a.arrival_scv is not None:
        others = ", ".join(f"{k} s {v:,.3g}" for k, v in a.dispersion_within_hour.items() if v is not None)
        console.print(f"arrival SCV for the queueing (workload.arrival_scv): {a.arrival_scv:,.3g} = index of dispersion of "
                      f"{a.scv_timescale_s:g} s counts inside each hour (at other scales: {others}); inter-arrival SCV inside each hour "
                      + (f"{a.interval_scv_within_hour:,.3g}" if a.interval_scv_within_hour is not None else "-"))
    elif a.interval_scv_within_hour is not None:
        console.print(f"arrival SCV for the queueing (workload.arrival_scv): {a.interval_scv_within_hour:,.3g} (600 s windows' CV^2, rate-weighted)")
    if a.hourly_load:
        console.print(f"24-hour profile (hour 0 = {a.hourly_basis}): " + ", ".join(f"{x:.2f}" for x in a.hourly_load))
    if fit.prefix_cache:
        ct = Table(title=f"Prefix-cache hit rate vs cache size (LRU, {fit.block_tokens}-token blocks, {fit.kv_bytes_per_token / 1024:,.0f} KiB KV/token)",
                   title_justify="left")
        for c in ("cache", "blocks", "hit rate (tokens)", "hit rate (blocks)", *(f"tier {t.name} (tokens)" for t in fit.tiers)):
            ct.add_column(escape(c), justify="right")
        for r in fit.prefix_cache:
            ct.add_row("unbounded" if r.cache_gb is None else f"{r.cache_gb:,.0f} GB", "-" if r.blocks is None else f"{r.blocks:,}",
                       f"{r.hit_rate_tokens:.1%}", f"{r.hit_rate_blocks:.1%}", *("-" if x is None else f"{x:.1%}" for x in r.tier_hit_rate_tokens))
        console.print(ct)
    row = fit.hit_rate_row()
    if row is not None:
        where = "the unbounded cache (the trace's own reuse: an upper bound; --hit-rate-cache-gb G writes an LRU cache's)" \
            if row.cache_gb is None else f"an LRU cache of {row.cache_gb:,.0f} GB"
        console.print(f"workload.prefix_hit_rate = {row.hit_rate_tokens:.4f}: the hit rate of {where}")
        per_tier = [f"{escape(t.name)} {t.hit_rate_tokens:.4f}" for t in fit.tiers if t.hit_rate_tokens is not None]
        if per_tier:
            console.print(f"workload.tiers[].prefix_hit_rate (each tier's own prompts, the same cache; matched to the instance's tiers by "
                          f"max_input_tokens): {', '.join(per_tier)}")
    elif fit.format != "servegen":
        console.print("no prefix block hashes in this trace: the instance keeps its own prefix_hit_rate (an assumption).")
    else:
        console.print("servegen has no prefix block hashes: the instance keeps its own prefix_hit_rate (an assumption).")
    for note in fit.notes:
        console.print(f"  note: {escape(note)}")
