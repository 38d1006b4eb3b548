"""``fleetplan whatif``: lose regions or pods at an hour, re-optimise operations on the
installed fleet of a plan, and account for every slice."""

from __future__ import annotations

import math
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich import box
from rich.table import Table

from fleetplan.cli.common import EXIT_INFEASIBLE, check_output_path, console, emit_document, err_console, input_errors, plan_and_instance
from fleetplan.cli.physics_view import least_margins


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
    hour: Annotated[str, typer.Option("--hour", help="Hour of the loss, 0-23 UTC; 'peak' (the hour of the largest lost load), 'worst' (the hour with the largest residual, else the most mitigation) or 'all' (every hour, summarised).")] = "peak",
    phase: Annotated[str, typer.Option("--phase", help="steady (post-failover), transient (cache re-warm dip) or both.")] = "both",
    routing: Annotated[str, typer.Option("--routing", help="optimise (the model re-routes the lost traffic), proportional (shares fixed to the survivors' own load), plan (the plan's failover shares held: what is deployed) or controller:FILE (a controller document's failover shares held, from `fleetplan export`).")] = "optimise",
    placement: Annotated[Optional[str], typer.Option("--placement", help="Placement JSON of this plan (`fleetplan place PLAN -o placement.json`, schema_version 2: a plan sized with its pods): a region loss also reports, per surviving region x tier, the share of requests whose KV crosses the DCN by the placement's routing in that loss, beside its ceiling and the plan's prediction.")] = None,
    instance: Annotated[Optional[str], typer.Option("--instance", "-i", help="Instance the plan was solved for; its hash must match (default: the one the plan carries, overlays applied; an older plan without one: the bundled instance it names).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON instead of tables.")] = False,
    output: Annotated[Optional[str], typer.Option("-o", "--output", help="Also write the report as JSON to this file (atomically).")] = None,
) -> None:
    """Lose regions (N-1, N-2) or pods at an hour: re-route, shed, clamp and use warm slices on the installed fleet; account for every slice."""
    import pyomo.environ  # noqa: F401  (before SciPy: see solve.py)

    from fleetplan.results.plan import status_note
    from fleetplan.whatif import PHASES, WhatIfUnsolved, parse_event, whatif

    with input_errors():
        pl, inst = plan_and_instance(plan, instance)
        held, doc_note, ctrl_path = None, None, ""
        if routing.startswith("controller:"):
            ctrl_path = routing[len("controller:"):]
            held, doc_note = _controller_routing(ctrl_path, pl)
            routing = "controller"
        placed = _placement(placement, inst, pl) if placement is not None else None
        phases = list(PHASES) if phase == "both" else [phase]
        events = []
        for ph in phases:
            events += parse_event(inst, pl, list(lose or []), list(lose_pods or []), "all" if hour == "worst" else hour, ph, routing, held)
        if output is not None:
            check_output_path(output, (plan, ctrl_path, placement or ""), "the report")
    note = status_note(pl)
    if note is not None:
        err_console.print(f"[bold yellow]warning:[/] {escape(note)}; the what-if runs on it as it is (plan_status, plan_note in --json).")
    try:
        with err_console.status("what-if", spinner="dots") as st:
            rep = whatif(inst, pl, events, progress=lambda m: st.update(escape(m)), placement=placed)
    except WhatIfUnsolved as e:
        err_console.print(f"[bold red]no what-if:[/] {escape(str(e))}; nothing written.")
        raise typer.Exit(EXIT_INFEASIBLE) from None
    if doc_note is not None:
        rep = rep.model_copy(update={"events": [e.model_copy(update={"notes": [doc_note] + e.notes}) for e in rep.events]})
    if hour == "worst":
        rep = _worst(rep)
    if emit_document(rep.model_dump(mode="json"), output, json_out):
        return
    if hour == "all":
        _print_hours(rep)
    else:
        for ev in rep.events:
            _print_event(ev, ev.margins)
    if output is not None:
        console.print(f"report written to {escape(output)}")


def _placement(path: str, inst, plan):
    """The placement at ``path``, checked: made for ``plan`` (plan_hash), carrying the
    routing of the plan's scenarios (schema_version 2) and passing the independent
    checker. Raises InputError naming --placement (exit 2)."""
    from fleetplan.cli.common import load_json_document, violation_problems
    from fleetplan.errors import InputError, Problem
    from fleetplan.results.placement import Placement, verify_placement
    from fleetplan.whatif import check_placement

    if not path.strip():
        raise InputError("--placement", [Problem("--placement", "give the placement JSON (`fleetplan place PLAN -o placement.json`).")])
    try:
        placed = load_json_document(path, Placement, "placement", "fleetplan place PLAN -o placement.json")
        check_placement(plan, placed)
    except InputError as e:
        raise InputError("--placement", [Problem("--placement", f"{path}: " + (p.message if p.path == "--placement" else f"{p.path}: {p.message}"),
                                                 p.value) for p in e.problems]) from None
    broken = verify_placement(inst, plan, placed)
    if broken:
        raise InputError("--placement", violation_problems(broken))
    return placed


def _controller_routing(path: str, plan):
    """The failover shares of the controller document at ``path`` as (lost, absorber,
    tier, share) rows, and a note when it was exported for another plan (its routing is
    then held on this plan's fleet). Raises InputError naming the file."""
    from fleetplan.cli.common import load_json_document
    from fleetplan.errors import InputError, Problem
    from fleetplan.export.controller import ControllerExport
    from fleetplan.results.placement import plan_hash

    if not path.strip():
        raise InputError("--routing", [Problem("--routing", "give the controller document after 'controller:', e.g. controller:controller.json.")])
    doc = load_json_document(path, ControllerExport, "controller document", "fleetplan export PLACEMENT --plan PLAN -o controller.json")
    rows = [(x, s.to, s.tier, s.share) for x, shares in sorted(doc.failover_routing.items()) for s in shares]
    note = None
    if doc.plan_hash != plan_hash(plan):
        note = (f"the controller document {path} was exported for another plan ({doc.plan_hash[:12]}..., instance '{doc.instance_name}'): "
                "its failover routing is held on this plan's fleet")
    return rows, note


def _worst(rep):
    """Keep, per phase, the hour with the largest residual, else the most mitigation
    (warm slices, then clamped + shed req/s), and say so in its notes."""
    best = {}
    for e in rep.events:
        score = (e.residual_request_equivalents, e.residual_slices, e.warm_slices, e.clamped_rps + e.shed_rps)
        if e.phase not in best or score > best[e.phase][0]:
            best[e.phase] = (score, e)
    keep = []
    for ph in ("steady", "transient"):
        if ph in best:
            score, e = best[ph]
            why = ("the hour with the largest residual" if score[0] > 0 else
                   "the hour with the most mitigation (warm slices, then clamped + shed req/s)" if any(score[1:]) else
                   "every hour is served without residual or mitigation; the first is shown")
            keep.append(e.model_copy(update={"notes": [f"--hour worst: {why} of the 24"] + e.notes}))
    return rep.model_copy(update={"events": keep})


def _print_hours(rep) -> None:
    for ph in ("steady", "transient"):
        evs = [e for e in rep.events if e.phase == ph]
        if not evs:
            continue
        tab = Table(title=f"{evs[0].label.rsplit(' at ', 1)[0]} -- every hour ({ph})", title_justify="left")
        dcn = any(e.placement_dcn is not None for e in evs)
        cols = ("hour\nUTC", "lost\nreq/s", "shed\nreq/s", "clamped\nreq/s", "warm\nslices", "short\nslices") + (("DCN share\nmost",) if dcn else ()) \
            + ("worst pool", "impact")
        for c in cols:
            tab.add_column(c, justify="right" if c not in ("worst pool", "impact") else "left", overflow="fold",
                           no_wrap=c not in ("worst pool", "impact"))
        for e in evs:
            pools = [p for s in e.survivors for p in s.pools]
            worst = max(pools, key=lambda p: (p.residual_slices, p.reject_share), default=None)
            lost = sum(r.rps for r in e.routes) + e.dropped_rps
            bad = worst is not None and worst.residual_slices > 0
            most = []
            if dcn:
                t = max(e.placement_dcn.tiers, key=lambda t: t.dcn_share, default=None) if e.placement_dcn is not None else None
                most = ["-" if t is None else (f"[bold red]{_share(t.dcn_share)}[/]" if t.above_ceiling else _share(t.dcn_share))
                        + f" {escape(t.region)} {escape(t.tier)}"]
            tab.add_row(f"{e.hour:02d}", _num(lost), _num(e.shed_rps), _num(e.clamped_rps), f"{e.warm_slices:,}",
                        f"[bold red]{e.residual_slices:,}[/]" if e.residual_slices else "0", *most,
                        f"{worst.region} {worst.tier} {worst.role}" if bad else "-", escape(worst.impact) if bad else "none")
        console.print(tab)
    console.print("Run with --hour H for the accounting of one hour.")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:.2%}"


def _print_dcn(pd) -> None:
    """The placement's DCN share per surviving region x tier (``EventResult.placement_dcn``)."""
    console.print()
    tab = Table(title=f"KV over the DCN by the placement's routing in {pd.scenario}" + ("" if pd.same_hour else " (another hour: see the note)"),
                title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for c in ("region", "tier", "DCN share", "ceiling", "plan's", "KV over DCN\nreq/s", "warm slices joined (role count: pods)"):
        tab.add_column(c, justify="left" if c in ("region", "tier") or c.startswith("warm") else "right", overflow="fold")
    for t in pd.tiers:
        share = f"[bold red]{_share(t.dcn_share)}[/]" if t.above_ceiling else _share(t.dcn_share)
        by_role: dict[str, list[str]] = {}
        for w in t.warm_joins:  # pods without their region (the row names it)
            by_role.setdefault(w.role, []).append(w.pod.split("/", 1)[-1] + (f" x{w.slices}" if w.slices > 1 else ""))
        warm = "; ".join(f"{ro} {sum(w.slices for w in t.warm_joins if w.role == ro)}: {', '.join(v)}" for ro, v in sorted(by_role.items())) or "-"
        tab.add_row(escape(t.region), escape(t.tier), share + (" (declared)" if t.above_ceiling and t.overage_declared else ""),
                    _share(t.dcn_share_max), _share(t.plan_dcn_share), _num(t.kv_out_rps, 1), escape(warm))
    console.print(tab)
    console.print(f"  {escape(pd.note)}. DCN share: of the tier's requests, those whose KV crosses the DCN (a share above the ceiling in "
                  "red: the DCN-share alert's level; 'declared': the plan sized the tier's TTFT for it); plan's: the plan's prediction, "
                  "which counts every warm prefill slice as crossing.")


def _print_event(ev, margins=None) -> None:
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
        cold = s.diverted_rps > 0 or any(p.lost_to_pods for p in s.pools)
        if cold and s.hit_rate_before > 0:
            console.print(f"  prefix hit rate {_pct(s.hit_rate_before)} before -> {_pct(s.hit_rate_steady)} steady -> {_pct(s.hit_rate_transient)} during re-warm "
                          "(cold users have no cached prefixes)")
            console.print(f"  {escape(s.prefill_demand_steady.explain)}")
            console.print(f"  {escape(s.prefill_demand_transient.explain)}")
        if s.diverted_rps > 0:
            console.print(f"  {escape(s.decode_demand.explain)}")
        tab = Table(show_lines=False, title=f"{s.region}: slices of each pool's shape ({ev.phase})", title_justify="left",
                    box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, collapse_padding=True)
        names = {"ride to the knee": "knee", "batch shed": "shed", "admission clamp": "clamp"}
        used = [c for c in ("knee", "shed", "clamp") if any(names.get(st.name) == c for p in s.pools for st in p.steps)]
        # empty mitigation columns are left out (the legend names them all)
        cols = ["pool", "have", "need\nown", "need\nloss", "gap"] + used + ["warm", "left\nshort", "spare"] \
            + (["margins here\nstep / load"] if margins is not None else [])
        for c in cols:
            tab.add_column(c, justify="left" if c == "pool" else "right", no_wrap=True)
        for p in s.pools:
            # slice counts with thousands separators, as every other count here: at 1e8 req/s they have 7 digits
            mit = {names[st.name]: f"{st.slices:,}" for st in p.steps if st.name in names}
            have = f"{p.installed:,}" + (f" (-{p.lost_to_pods:,})" if p.lost_to_pods else "")
            res = f"[bold red]{p.residual_slices:,}[/]" if p.residual_slices else "0"
            shape = p.slice.rpartition("x")[2] if "x" in p.slice else p.slice
            extra = [least_margins(margins, p.region, p.tier, p.role)] if margins is not None else []
            tab.add_row(f"{p.tier} {p.role} x{shape}", have, _num(p.need_normal), _num(p.need_failover), f"{p.gap:,}",
                        *[mit.get(c, "-") for c in used], f"{p.warm_slices:,}", res, f"{p.headroom_slices:,}", *extra)
        console.print(tab)
        for p in s.pools:
            for st in p.steps:
                console.print(f"  {p.tier} {p.role}: {escape(st.explain)}")
            style = "bold red" if p.residual > 0 else "green"
            console.print(f"  {p.tier} {p.role} ({escape(p.slice)}): users see [{style}]{escape(p.impact)}[/]")
        if s.rewarm is not None:
            rw = s.rewarm
            console.print(f"  re-warm: {escape(rw.explain)}")
            keys = list(rw.points[0].needed) if rw.points else []
            t2 = Table(title=None, show_header=True, box=None, padding=(0, 2))
            for c in ["t after loss", "hit rate", "prefill demand"] + [f"{k}\nneed/have" for k in keys]:
                t2.add_column(c, justify="right")
            for pt in rw.points:
                cells = []
                for k in keys:
                    need, have = pt.needed[k], pt.in_service[k]
                    txt = f"{need if need is not None else '-'}/{have}"
                    cells.append(f"[bold red]{txt}[/]" if (need is None or need > have) else txt)
                t2.add_row(f"{pt.t_s / 60:,.1f} min", _pct(pt.hit_rate), f"x{pt.prefill_demand_multiplier:.2f}" if pt.prefill_demand_multiplier is not None else "-", *cells)
            console.print(t2)
        elif s.rewarm_note and cold:
            console.print(f"  re-warm: {escape(s.rewarm_note)}")
    if ev.placement_dcn is not None:
        _print_dcn(ev.placement_dcn)
    console.print()
    short = ev.residual_slices > 0 or ev.residual_request_equivalents > 0
    total = (f"[bold red]{_plural(ev.residual_slices, 'slice')} short, {_num(ev.residual_request_equivalents, 1)} req/s-equivalents unserved[/]"
             if short else "[green]no residual[/]")
    console.print(f"total: shed {_num(ev.shed_rps)} req/s, clamped {_num(ev.clamped_rps)} req/s, {_plural(ev.warm_slices, 'warm slice')}, {total}"
                  + (f", {_num(ev.dropped_rps)} req/s dropped" if ev.dropped_rps else "")
                  + f"  (solved in {ev.solve_s:.2f} s, {_plural(ev.mix_iterations, 'capacity-curve refresh')})".replace("refreshs", "refreshes"))
    console.print("Legend (slices of the pool's shape): have = in service after the loss (in brackets: lost with pods); need own = fewest "
                  "slices holding the SLO for this hour's own load before the loss; need loss = the same for the failover load before "
                  "mitigations (prefill: M/G/c TTFT percentile; decode: tokens/s at the SLO-knee operating point, so knee = what riding "
                  "there from the normal operating point already saved); gap = need loss - have, at least 0; then what each mitigation "
                  "frees, in the order they are reached for: shed = sheddable (batch) class, clamp = admission clamp of cold long "
                  "prompts, warm = warm-pool slices joined; left short = still missing; spare = beyond the final need. For every row: "
                  "need loss - have = shed + clamp + warm + left short - spare. req/s-equivalents: requests/s not served within the "
                  "SLOs, counted once per region-tier." + (" Margins here: the pool's least step-time and load multipliers at which an "
                                                          "SLO breaks in this what-if -- at the slices it has left (warm ones joined) and the "
                                                          "load left after shedding and the clamp, failover operating points; below x1 the SLO "
                                                          "does not hold as it is (the plan's own margins: fleetplan solve)."
                                                          if margins is not None else ""))
