"""``fleetplan whatif``: lose regions or pods at an hour, re-optimise operations on the
installed fleet of a plan, and account for every slice."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Optional

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich import box
from rich.table import Table

from fleetplan.cli.common import EXIT_INPUT, console, dumps_json, err_console, input_errors, print_json, write_atomic
from fleetplan.errors import InputError, Problem


def load_plan(path: str):
    """Read a plan JSON file. Raises InputError naming the file and what is wrong."""
    from fleetplan.instance.io import validation_problems
    from fleetplan.results.plan import Plan

    p = Path(path)
    if not p.is_file():
        raise InputError(path, [Problem("(file)", "no such file; give the JSON written by `fleetplan solve -o plan.json`.")])
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(path, [Problem("(file)", f"not a JSON plan: {e}.")]) from None
    try:
        return Plan.model_validate(data)
    except ValidationError as e:
        raise InputError(path, validation_problems(e)) from None


def _pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.1 or x == 0 else f"{x:.1%}"


def _num(x: float | None, nd: int = 0) -> str:
    if x is None:
        return "-"
    if not math.isfinite(x):
        return "inf"
    return f"{x:,.{nd}f}"


def whatif_command(
    plan: Annotated[str, typer.Argument(help="Plan JSON written by `fleetplan solve -o plan.json`.")],
    lose: Annotated[Optional[list[str]], typer.Option("--lose", help="Region to lose whole (repeat for N-2).")] = None,
    lose_pods: Annotated[Optional[list[str]], typer.Option("--lose-pods", help="Pods to lose inside a region: REGION:N or REGION:CHIP:N (repeatable).")] = None,
    hour: Annotated[str, typer.Option("--hour", help="Hour of the loss, 0-23 UTC; 'peak' (the hour of the largest lost load) or 'all' (every hour, summarised).")] = "peak",
    phase: Annotated[str, typer.Option("--phase", help="steady (post-failover), transient (cache re-warm dip) or both.")] = "both",
    routing: Annotated[str, typer.Option("--routing", help="optimise (the model re-routes the lost traffic) or proportional (shares fixed to the survivors' own load).")] = "optimise",
    instance: Annotated[Optional[str], typer.Option("--instance", "-i", help="Instance the plan was solved for (default: the bundled instance of the plan's name).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON instead of tables.")] = False,
    output: Annotated[Optional[str], typer.Option("-o", "--output", help="Also write the report as JSON to this file (atomically).")] = None,
) -> None:
    """Lose regions (N-1, N-2) or pods at an hour: re-route, shed, clamp and use warm slices on the installed fleet; account for every slice."""
    import pyomo.environ  # noqa: F401  (before SciPy: see solve.py)

    from fleetplan.instance.io import bundled_instances, load_instance
    from fleetplan.whatif import PHASES, parse_event, whatif

    with input_errors():
        pl = load_plan(plan)
        if instance is None:
            if pl.instance_name not in bundled_instances():
                raise InputError(plan, [Problem("--instance", f"the plan was solved for instance '{pl.instance_name}', which is not bundled; "
                                                 "pass its YAML with --instance.")])
            instance = pl.instance_name
        inst = load_instance(instance)
        from fleetplan.results.verify import check_plan_matches

        check_plan_matches(inst, pl)
        phases = list(PHASES) if phase == "both" else [phase]
        events = []
        for ph in phases:
            events += parse_event(inst, pl, list(lose or []), list(lose_pods or []), hour, ph, routing)
        if output:
            from fleetplan.cli.solve import _check_output

            _check_output(output)
    with err_console.status("what-if", spinner="dots") as st:
        rep = whatif(inst, pl, events, progress=lambda m: st.update(escape(m)))
    doc = rep.model_dump(mode="json")
    if output:
        with input_errors():
            write_atomic(output, dumps_json(doc))
    if json_out:
        print_json(doc)
        return
    if hour == "all":
        _print_hours(rep)
    else:
        for ev in rep.events:
            _print_event(ev)
    if output:
        console.print(f"report written to {escape(output)}")


def _print_hours(rep) -> None:
    for ph in ("steady", "transient"):
        evs = [e for e in rep.events if e.phase == ph]
        if not evs:
            continue
        tab = Table(title=f"{evs[0].label.rsplit(' at ', 1)[0]} -- every hour ({ph})", title_justify="left")
        for c in ("hour UTC", "lost req/s", "shed req/s", "clamped req/s", "warm slices", "residual slices", "worst pool", "impact"):
            tab.add_column(c, justify="right" if c not in ("worst pool", "impact") else "left", overflow="fold")
        for e in evs:
            pools = [p for s in e.survivors for p in s.pools]
            worst = max(pools, key=lambda p: (p.residual_slices, p.reject_share), default=None)
            lost = sum(r.rps for r in e.routes) + e.dropped_rps
            bad = worst is not None and worst.residual_slices > 0
            tab.add_row(f"{e.hour:02d}", _num(lost), _num(e.shed_rps), _num(e.clamped_rps), str(e.warm_slices),
                        f"[bold red]{e.residual_slices}[/]" if e.residual_slices else "0",
                        f"{worst.region} {worst.tier} {worst.role}" if bad else "-", escape(worst.impact) if bad else "none")
        console.print(tab)
    console.print("Run with --hour H for the accounting of one hour.")


def _print_event(ev) -> None:
    console.rule(f"[bold]what-if: {escape(ev.label)}")
    if ev.routes:
        by = {}
        for r in ev.routes:
            by.setdefault((r.lost, r.to), []).append(f"{r.tier} {_pct(r.share)} ({_num(r.rps)} req/s)")
        for (x, a), parts in by.items():
            console.print(f"routing: {escape(x)} -> {escape(a)}: " + ", ".join(parts))
    for n in ev.notes:
        console.print(f"[yellow]note:[/] {escape(n)}")
    for s in ev.survivors:
        console.print()
        console.print(f"[bold]{escape(s.region)}[/]  {escape(s.traffic.explain)}")
        console.print(f"  prefix hit rate {_pct(s.hit_rate_before)} before -> {_pct(s.hit_rate_steady)} steady -> {_pct(s.hit_rate_transient)} during re-warm "
                      "(diverted users arrive with a cold cache)")
        console.print(f"  {escape(s.prefill_demand_steady.explain)}")
        console.print(f"  {escape(s.prefill_demand_transient.explain)}")
        console.print(f"  {escape(s.decode_demand.explain)}")
        tab = Table(show_lines=False, title=f"{s.region}: slices ({ev.phase})", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1))
        wide = console.width >= 110  # the shape column only where it fits; the step lines below name it
        cols = ["pool"] + (["shape"] if wide else []) + ["have", "need\nown", "need\nloss", "gap", "knee", "shed", "clamp", "warm", "resid-\nual"]
        for c in cols:
            tab.add_column(c, justify="left" if c in ("pool", "shape") else "right", no_wrap=True)
        names = {"ride to the knee": "knee", "batch shed": "shed", "admission clamp": "clamp"}
        for p in s.pools:
            mit = {names[st.name]: str(st.slices) for st in p.steps if st.name in names}
            have = str(p.installed) + (f" (-{p.lost_to_pods})" if p.lost_to_pods else "")
            res = f"[bold red]{p.residual_slices}[/]" if p.residual_slices else "0"
            tab.add_row(f"{p.tier} {p.role}", *([p.slice] if wide else []), have, _num(p.need_normal), _num(p.need_failover), str(p.gap),
                        mit.get("knee", "-"), mit.get("shed", "-"), mit.get("clamp", "-"), str(p.warm_slices), res)
        console.print(tab)
        for p in s.pools:
            for st in p.steps:
                console.print(f"  {p.tier} {p.role}: {escape(st.explain)}")
            style = "bold red" if p.residual > 0 else "green"
            console.print(f"  {p.tier} {p.role}: users see [{style}]{escape(p.impact)}[/]")
        if s.rewarm is not None:
            rw = s.rewarm
            console.print(f"  re-warm: {escape(rw.explain)}")
            t2 = Table(title=None, show_header=True, box=None, padding=(0, 2))
            for c in ("t after loss", "hit rate", "prefill demand", "prefill slices needed", "in service"):
                t2.add_column(c, justify="right")
            for pt in rw.points:
                need = pt.prefill_slices_needed
                short = need is not None and need > pt.prefill_slices_in_service
                t2.add_row(f"{pt.t_s / 60:,.1f} min", _pct(pt.hit_rate), f"x{pt.prefill_demand_multiplier:.2f}",
                           (f"[bold red]{need}[/]" if short else str(need)) if need is not None else "-", str(pt.prefill_slices_in_service))
            console.print(t2)
        elif s.rewarm_note:
            console.print(f"  re-warm: {escape(s.rewarm_note)}")
    console.print()
    total = f"[bold red]{ev.residual_slices} slices short[/]" if ev.residual_slices else "[green]no residual[/]"
    console.print(f"total: shed {_num(ev.shed_rps)} req/s, clamped {_num(ev.clamped_rps)} req/s, {ev.warm_slices} warm slices, {total}"
                  + (f", {_num(ev.dropped_rps)} req/s dropped" if ev.dropped_rps else "") + f"  (solved in {ev.solve_s:.2f} s, {ev.mix_iterations} mix iterations)")
    console.print("Legend: slices of the pool's shape. have = in service after the loss (minus those lost with pods); need own = fewest slices "
                  "holding the SLO for this hour's own load before the loss; need loss = the same for the failover load before mitigations "
                  "(prefill: M/G/c TTFT percentile; decode: tokens/s at the knee operating point); gap = need loss - have; then the slices "
                  "each mitigation frees, in the brief's order: knee = decode rides to its SLO knee, shed = sheddable (batch) class, clamp = "
                  "admission clamp of cold long prompts, warm = warm-pool slices joined; residual = still missing.")
