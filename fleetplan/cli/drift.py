"""``fleetplan drift PLAN --metrics FILE``: a running deployment's vLLM metrics beside its plan --
what is measured, what the plan's physics predicts at that load, which step prior moved and
whether the plan still holds at its sizing loads (fleetplan.workload.drift)."""

from __future__ import annotations

import math
from typing import Annotated, Optional

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from fleetplan.cli.common import EXIT_INFEASIBLE, check_output_path, console, input_errors, plan_and_instance, print_json, seconds_parser, write_atomic


#: violations printed (the JSON has all)
SHOWN = 12


def _ms(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-" if x is None or math.isnan(x) else "unstable"
    return f"{x:,.1f}" if x >= 10 else f"{x:,.2f}"


def drift_command(
    plan: Annotated[str, typer.Argument(help="Plan JSON written by `fleetplan solve -o plan.json`.")],
    metrics: Annotated[str, typer.Option("--metrics", help="The deployment's vLLM metrics: a /metrics (or /federate) text scrape, or a Prometheus query_range JSON export (docs/calibration.md).")],
    baseline: Annotated[Optional[str], typer.Option("--baseline", help="The earlier text scrape: counters and histograms are taken as their increase since it.")] = None,
    window: Annotated[Optional[float], typer.Option("--window", help="The window in seconds (between the scrapes, or since the engines started for a single scrape); default: from the samples' timestamps or the range export.", parser=seconds_parser("--window", least=1.0), metavar="SECONDS")] = None,
    instance: Annotated[Optional[str], typer.Option("--instance", "-i", help="The plan's instance (default: the one the plan embeds).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the drift report as JSON instead of tables.")] = False,
    output: Annotated[Optional[str], typer.Option("-o", "--output", help="Write the refitted priors document as YAML (overlay with `fleetplan solve --priors`), atomically.")] = None,
) -> None:
    """Set a deployment's measured p99s, rates and batch occupancy beside the plan's predictions at the measured load, say which step prior moved, and whether the plan still holds (exit 0 holds, 3 no longer holds, 2 bad input)."""
    from fleetplan.workload.drift import drift
    from fleetplan.workload.loadfit import fit_yaml

    with input_errors():
        if output is not None:
            check_output_path(output, tuple(x for x in (plan, metrics, baseline) if x), "the priors")
        p, inst = plan_and_instance(plan, instance)
        rep = drift(p, inst, metrics, baseline, window)
        doc = rep.document()
        if output is not None:
            head = (f"fleetplan drift: step priors refitted to {metrics} from the priors of plan {p.instance_name}.\n"
                    f"Overlay with: fleetplan solve INSTANCE --priors FILE")
            write_atomic(output, fit_yaml({"priors": doc["priors"], "source": rep.source, "fit": doc["fit"]}, head))
    if json_out:
        print_json(doc)
    else:
        _print(rep)
        if output is not None:
            console.print(f"refitted priors written to {escape(output)}")
    if not rep.holds:
        raise typer.Exit(EXIT_INFEASIBLE)


def _print(rep) -> None:
    from fleetplan.cli.calibrate import print_load_fit

    src = rep.source
    console.rule(f"[bold]drift: plan {escape(rep.plan_name)} against {escape(src['metrics'])}")
    console.print(f"{escape(src['format'])}, window {src['window_s']:,.0f} s (from {escape(src['window_from'])})")
    t = Table(title="measured beside the plan's physics at the measured load (engine-side: no path latency)", title_justify="left",
              box=box.SIMPLE_HEAD)
    for c in ("pool", "quantity", "measured", "plan priors", "refitted"):
        t.add_column(c, justify="left" if c in ("pool", "quantity") else "right")
    for p in rep.pools:
        name = escape(p.name)
        t.add_row(name, "requests/s (per engine)", f"{p.rate_rps:.4g} ({p.rate_rps / p.replicas:.3g})",
                  f"normal peak {p.plan_rps:.4g} ({p.plan_rps / p.replicas_plan:.3g})", "")
        t.add_row("", "engines", str(p.replicas), str(p.replicas_plan), "")
        t.add_row("", "requests running per engine", "-" if p.running is None else f"{p.running:.1f}", f"{p.running_plan:.1f}", f"{p.running_fit:.1f}")
        t.add_row("", "mean prompt / answer (tokens)", f"{_tok(p.prompt_tokens)} / {_tok(p.output_tokens)}",
                  f"{p.prompt_tokens_plan:,.0f} / {p.output_tokens_plan:,.0f}", "")
        for m, (v, lo, hi, b, f) in p.p99.items():
            t.add_row("", f"{m.upper()} p99 (ms)", f"{_ms(v)} (bucket {_ms(lo)}-{_ms(hi)})", _ms(b), _ms(f))
        for m, (v, b, f) in p.mean.items():
            t.add_row("", f"{m.upper()} mean (ms)", _ms(v), _ms(b), _ms(f))
        t.add_row("", "step-time ratio prefill / decode", "", "1 / 1", f"{p.ratios['prefill']:.3f} / {p.ratios['decode']:.3f}")
    console.print(t)
    console.print("p99 measured = PromQL's histogram_quantile (linear inside its bucket): the truth lies anywhere in the bucket shown.")
    for ph, r, moved in rep.moved():
        m = rep.fit.multiplier(ph)
        se = f" +- {m.stderr:.2g}" if m.stderr is not None else ""
        word = (f"[bold]at the fit's {escape(m.bound)} bound[/]: the step moved at least this far" if m.bound
                else "[bold]moved[/]" if moved else "unchanged (within 3% or 2 s.e.)")
        console.print(f"{ph} step time: {r:.3f}x the plan's (multiplier {m.value:.4f}{se}): {word}")
    t = Table(title="the plan at its sizing loads, plan priors -> refitted (every step time's margin under the plan's priors)",
              title_justify="left", box=box.SIMPLE_HEAD)
    for c in ("pool", "scenario", "SLO", "plan priors", "refitted", "step-time margin", "verdict"):
        t.add_column(c, justify="left" if c in ("pool", "scenario", "SLO", "verdict") else "right")
    for s in rep.margins:
        margin = "fails at 1x" if s.margin is None else f"{s.margin:#.3g}x"
        t.add_row(escape(s.pool), escape(s.scenario), f"{s.metric.upper()} p{s.percentile:g} <= {s.limit_ms:g} ms", _ms(s.plan_ms),
                  _ms(s.refit_ms), margin, "holds" if s.holds else "[bold red]margin spent[/]")
    console.print(t)
    for c, w, msg in rep.violations[:SHOWN]:
        console.print(f"[red]violation ({escape(c)}):[/] {escape(w)}: {escape(msg)}")
    if len(rep.violations) > SHOWN:
        console.print(f"[red]... and {len(rep.violations) - SHOWN} more violations[/] (--json lists every one)")
    for c, w, msg in rep.headroom:
        console.print(f"[yellow]headroom spent ({escape(c)}):[/] {escape(w)}: {escape(msg)}")
    for n in rep.notes:
        console.print(f"[yellow]note:[/] {escape(n)}")
    print_load_fit(rep.fit, {**rep.source, "instance": rep.plan_name, "slice": ", ".join(sorted({p.slice for p in rep.pools})),
                             "pool": ", ".join(p.name for p in rep.pools)})
    if rep.holds:
        console.print("[bold green]the plan holds[/] at its sizing loads with the refitted step times" + (" (its utilisation headroom is spent)" if rep.headroom else ""))
    else:
        console.print("[bold red]the plan no longer holds[/] at its sizing loads with the refitted step times: re-solve with "
                      "`fleetplan solve INSTANCE --priors` the refitted priors (-o), or re-size the pools named above")


def _tok(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"
