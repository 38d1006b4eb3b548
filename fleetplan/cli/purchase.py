"""``fleetplan purchase``: what to order this quarter, hedged across demand scenarios."""

from __future__ import annotations

import os

from typing import Annotated, Optional

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from fleetplan import interrupts
from fleetplan.errors import InputError, Problem
from fleetplan.cli.common import fraction_parser, seconds_parser
from fleetplan.cli.common import EXIT_INFEASIBLE, EXIT_INPUT, check_distinct_outputs, check_output_path, console, dumps_json, err_console, input_errors, print_json, write_atomic


def _usd(x) -> str:
    return "-" if x is None else f"{x:,.0f}"


def purchase_command(
    file: Annotated[str, typer.Argument(help="Purchase-planning YAML (docs/purchase.md; its JSON Schema: `fleetplan schema purchase`).")],
    output: Annotated[Optional[str], typer.Option("-o", "--output", help="Write the purchase plan as JSON to this file (atomically).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the purchase plan as JSON instead of tables.")] = False,
    time_limit: Annotated[float, typer.Option("--time-limit", help="Wall-clock limit of the whole command from its start (seconds): reading the file, the model builds and all the solves; a time-limited figure is reported with its gap.", parser=seconds_parser("--time-limit"))] = 600.0,
    mip_gap: Annotated[float, typer.Option("--mip-gap", help="Relative MIP gap at which each solve stops (fraction; 0.01 = 1%; 1% is read as 0.01).", parser=fraction_parser("--mip-gap"))] = 0.01,
    no_value: Annotated[bool, typer.Option("--no-value", help="Skip the mean-forecast (EEV, VSS) and wait-and-see (EVPI) solves.")] = False,
    fix_orders: Annotated[Optional[str], typer.Option("--fix-orders", help="Rolling re-plan: a previous purchase plan (JSON, -o) whose orders before --now are fixed.")] = None,
    now: Annotated[Optional[str], typer.Option("--now", help="With --fix-orders: the current quarter (YYYYQn); its orders are the decision.")] = None,
    path: Annotated[Optional[str], typer.Option("--path", help="With --fix-orders: the branch demand followed up to --now (the tree node, branch names joined by '/').")] = None,
    report: Annotated[Optional[str], typer.Option("--report", help="Also write the purchase report (report.md and its PNG figures) into this directory, atomically.")] = None,
    method: Annotated[str, typer.Option("--method", help="ef: the deterministic equivalent by HiGHS; ph: progressive hedging by mpi-sppy (the 'stochastic' extra; run under mpiexec -n 2 or 3 for its bound spokes).")] = "ef",
    risk: Annotated[Optional[str], typer.Option("--risk", help="expectation, or cvar:ALPHA:WEIGHT (fractions, or percentages: cvar:90%:50%): minimise (1 - WEIGHT) E[cost] + WEIGHT CVaR_ALPHA[cost] (overrides policy.risk).")] = None,
    csv_out: Annotated[Optional[str], typer.Option("--csv", help="Also write the orders (commit now, fixed, contingent: when, where, how many, commitment, USD, branch probability, what needs each) as CSV to this file, atomically.")] = None,
    scenarios: Annotated[bool, typer.Option("--scenarios", help="Print the full scenario x quarter x region table of fleets (the default prints one row per quarter over the scenarios; the full table is also in --json and --report).")] = False,
) -> None:
    """Plan quarterly purchases over a demand scenario tree: the order sheet for now, the later orders per scenario, every quarter's fleet verified, VSS and EVPI."""
    import pyomo.environ  # noqa: F401  (before SciPy, as in solve)

    from fleetplan.purchase.io import load_purchase, with_risk
    from fleetplan.purchase.result import NOT_REPRODUCIBLE
    from fleetplan.purchase.solve import NoPurchasePlan, solve_purchase
    from fleetplan.solvers.base import SolveOptions

    if method not in ("ef", "ph"):
        err_console.print(f"[bold red]error:[/] --method: expected ef or ph, got {escape(method)!r}")
        raise typer.Exit(EXIT_INPUT)
    replan = None
    with input_errors():
        problem = load_purchase(file)
        if risk is not None:
            problem = with_risk(problem, risk)
        inputs = (problem.source, *problem.files, fix_orders or "")  # the purchase file, its base instance and what that includes
        if output is not None:
            check_output_path(output, inputs, "the purchase plan")
        if csv_out is not None:
            check_output_path(csv_out, inputs, "the order sheet (CSV)", "--csv")
        check_distinct_outputs([("--report", f) for f in _report_files(report)] + [("-o", output), ("--csv", csv_out)], "each output")
        if fix_orders is None and (now is not None or path is not None):
            raise InputError("--now", [Problem("--now" if now is not None else "--path", "only with --fix-orders PREVIOUS.json (the rolling re-plan).")])
        if fix_orders is not None:
            replan = _replan(problem, fix_orders, now, path)
        if report is not None:
            _check_report_dir(report)
    from fleetplan.deadline import command_start

    # --time-limit is the wall clock of the whole command, from its start (reading the file counts)
    opts = SolveOptions(time_limit_s=time_limit, mip_gap=mip_gap, deadline=None if time_limit is None else command_start() + time_limit)
    tree_solver = None
    if method == "ph":
        from fleetplan.purchase import ph

        why = ph.available()
        if why:
            err_console.print(f"[bold red]error:[/] {escape(why)}")
            raise typer.Exit(EXIT_INPUT)
        if ph.world()[1] != 0:  # under mpiexec: only rank 0 reports; the others serve its PH solves
            ph.serve_ph(problem, opts)
            return
        tree_solver = ph.solve_tree_ph
    try:
        with err_console.status("purchase", spinner="dots") as st:
            try:
                plan = solve_purchase(problem, opts, value=not no_value, progress=lambda msg: st.update(escape(msg)), replan=replan,
                                      tree_solver=tree_solver)
            finally:
                if method == "ph":
                    ph.release_workers()
    except NoPurchasePlan as e:
        err_console.print(f"[bold red]no purchase plan:[/] {escape(str(e))}." + _output_kept(output))
        raise typer.Exit(EXIT_INFEASIBLE) from None
    except KeyboardInterrupt:
        err_console.print(f"[bold yellow]interrupted[/] ({interrupts.cause()}): no purchase plan." + _output_kept(output))
        raise typer.Exit(interrupts.exit_status()) from None
    for note in plan.notes:
        if note.startswith(NOT_REPRODUCIBLE):
            err_console.print(f"[bold yellow]warning:[/] {escape(note)}", soft_wrap=True)
    doc = plan.model_dump(mode="json")
    if output and plan.status == "verified":
        with input_errors():
            write_atomic(output, dumps_json(doc))
    if csv_out and plan.status == "verified":
        from fleetplan.purchase.sheet import orders_csv

        with input_errors():
            write_atomic(csv_out, orders_csv(plan))
    if report is not None and plan.status == "verified":
        from fleetplan.purchase.report import write_report

        with input_errors():
            written = write_report(plan, report, write_atomic)
    if json_out:
        print_json(doc)
    else:
        render(plan, full=scenarios)
        if output and plan.status == "verified":
            console.print(f"purchase plan written to {escape(output)}")
        if csv_out and plan.status == "verified":
            console.print(f"orders written to {escape(csv_out)} (CSV)")
        if report is not None and plan.status == "verified":
            console.print(f"purchase report written to {escape(str(written))}")
    if plan.status != "verified":
        for what in (output, csv_out):
            if what:
                err_console.print(f"NOT written to {escape(what)}: a quarter's fleet failed the verifier (any earlier file is left as it was)")
        raise typer.Exit(EXIT_INFEASIBLE)


def _output_kept(output: str | None) -> str:
    """What became of ``-o`` when no plan was written: an earlier file is left as it was, or none was written."""
    from pathlib import Path

    if not output:
        return ""
    return f" {escape(output)} left as it was." if Path(output).exists() else f" {escape(output)} not written."


def _replan(problem, fix_orders: str, now: str | None, path: str | None):
    """Read the previous plan and check the re-plan inputs (exit 2 naming the option)."""
    import json
    from pathlib import Path

    from fleetplan.purchase.replan import plan_replan

    if now is None:
        raise InputError("--now", [Problem("--now", "the re-plan needs the current quarter (YYYYQn): --fix-orders PREVIOUS.json --now 2027Q2 --path high.")])
    try:
        doc = json.loads(Path(fix_orders).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(fix_orders, [Problem("--fix-orders", "no such file (a purchase plan written by `fleetplan purchase -o`).", fix_orders)]) from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(fix_orders, [Problem("--fix-orders", f"not readable as JSON: {e}.", fix_orders)]) from None
    return plan_replan(problem, doc, now, path, fix_orders)


def _report_files(report: str | None) -> list:
    """The files ``--report DIR`` writes (fleetplan.purchase.report.write_report), none without it
    (and then the report's module, matplotlib with it, is not imported)."""
    if report is None:
        return []
    from pathlib import Path

    from fleetplan.purchase.report import FIGURES

    return [Path(report) / "report.md", *(Path(report) / "figures" / f"{n}.png" for n in FIGURES)]


def _check_report_dir(report: str) -> None:
    from pathlib import Path

    d = Path(report)
    if d.exists() and not d.is_dir():
        raise InputError(report, [Problem("--report", "exists and is not a directory; give a directory for report.md and its figures.", report)])
    if not d.exists() and not d.parent.exists():
        raise InputError(report, [Problem("--report", f"its parent directory {str(d.parent)!r} does not exist.", report)])
    # can it be written? probed now, not after the solve (it was three tracebacks and exit 1 then, with -o already written)
    import tempfile

    where = d if d.exists() else d.parent
    try:
        probe = tempfile.mkdtemp(prefix=".fleetplan-probe-", dir=where)
        os.rmdir(probe)
    except OSError as e:
        raise InputError(report, [Problem("--report", f"cannot write in {str(where)!r} ({e.strerror or e}); give a writable directory.", report)]) from None


#: columns whose cells may wrap at their spaces; every other column keeps its cells on one line, so
#: a narrow terminal wraps the words of these and cuts nothing
_WRAP = {"needed first", "if demand tracks", "pods in service", "chips by role", "pods", "unserved rps (peak; loss)", "branch", "when", "terms, USD"}


def _table(title: str, columns: tuple[str, ...], right: tuple[str, ...] = ()) -> Table:
    """A table in the house style (``box.SIMPLE_HEAD``, left title, no edge padding): the columns
    of :data:`_WRAP` wrap, the others do not, and nothing is cut with an ellipsis."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for c in columns:
        t.add_column(c, justify="right" if c in right else "left", no_wrap=c not in _WRAP, overflow="fold")
    return t


def _orders_table(title: str, plan, orders, branch: bool) -> Table:
    """Orders, one per row: with ``branch`` the tree node and its probability (contingent or fixed
    orders), when, where, how many, the commitment, the USD and what needs it. One line per order
    where the console is wide enough; else two lines per order in fewer, narrower columns."""
    from fleetplan.purchase.sheet import need_words, node_probability

    def fields(o):
        # a node before the first branching is on every path: say so rather than 'if demand tracks root'
        where = "every path" if getattr(o, "node", "root") == "root" else escape(o.node)
        when, _, chips = need_words(o).partition(": ")
        return where, f"{node_probability(o, plan):.3g}", escape(when), escape(chips)

    wide = ((("if demand tracks", "branch p") if branch else ()) + ("ordered", "delivered", "region", "chip", "pods")
            + (() if branch else ("chips",)) + ("commitment",) + (() if branch else ("price USD",)) + ("PV USD", "needed first"))
    t = _table(title, wide, ("branch p", "pods", "chips", "price USD", "PV USD"))
    for o in orders:
        where, prob, when, chips = fields(o)
        t.add_row(*(((where, prob) if branch else ()) + (o.order_quarter, o.delivery_quarter, o.region, o.chip, str(o.pods))
                    + (() if branch else (f"{o.chips:,}",)) + (_commit(o),) + (() if branch else (_usd(o.price_usd),))
                    + (_usd(o.cost_usd), f"{when}: {chips}" if chips else when)))
    if console.measure(t, options=console.options.update_width(10_000)).maximum <= console.width:  # its one-line width
        return t
    # narrow: two or three lines per order, five short columns (the legend under the tables says what each holds)
    t = _table(title, (("branch",) if branch else ()) + ("when", "pods", "terms, USD", "needed first"))
    for o in orders:
        where, prob, when, chips = fields(o)
        usd = f"PV {_usd(o.cost_usd)}" if branch else f"{_usd(o.price_usd)} price\nPV {_usd(o.cost_usd)}"
        t.add_row(*(((f"{where}\np {prob}",) if branch else ()) + (f"{o.order_quarter} ordered\n{o.delivery_quarter} delivered",
                                                                 f"{o.pods} {o.chip}\n{o.region}", f"{_commit(o)}\n{usd}", f"{when}\n{chips}")))
    return t


def _commit(o) -> str:
    """An order's commitment in a table cell: a capital pod is kept; a committed term is paid and in service to its last quarter."""
    return "kept" if o.in_service_until is None else f"to {o.in_service_until}"


def render(plan, full: bool = False) -> None:
    """The purchase plan as tables: order sheet (or why nothing is ordered now), contingency,
    one row per quarter over the scenarios (``full``: every scenario x quarter x region), value
    of information. Fits 100-160 columns."""
    short = [(sc.name, q.quarter) for sc in plan.scenarios for q in sc.quarters if q.plan_status == "shortfall" and q.unserved_rps > 1e-6]
    in_loss = [(sc.name, q.quarter) for sc in plan.scenarios for q in sc.quarters if q.plan_status == "shortfall" and q.unserved_rps <= 1e-6]
    if plan.status != "verified":
        head = "[bold red]violations[/]: the verifier refused some quarter's fleet (see the table)"
    elif short:
        lossy = sum(1 for sc in plan.scenarios for q in sc.quarters if q.unserved_in_region_loss_rps > 1e-6)
        head = (f"[bold yellow]verified, with unserved demand[/]: every fleet passed the independent verifier; {len(short)} (scenario, "
                f"quarter){'s' if len(short) != 1 else ''} leave demand unserved at the normal peak (priced; first: {escape(short[0][0])} in "
                f"{short[0][1]})" + (f" and {lossy} in a region loss" if lossy else "") + " (the 'unserved rps' column)")
    elif in_loss:
        head = (f"[bold yellow]verified, with unserved demand in region losses[/]: every fleet passed the independent verifier and serves "
                f"the normal peak; {len(in_loss)} (scenario, quarter){'s' if len(in_loss) != 1 else ''} leave demand unserved when a region "
                "is lost (priced; the 'unserved rps' column's second figure)")
    else:
        head = "[bold green]verified[/]: every scenario's fleet in every quarter passed the independent verifier"
    console.print(f"[bold]{escape(plan.name)}[/] on {escape(plan.base_instance)} -- {head}")
    console.print(f"expected discounted cost {_usd(plan.expected_cost_usd)} USD over {plan.quarters[0]}..{plan.quarters[-1]} "
                  f"(discount {plan.discount_rate_per_year:.1%}/year; unserved demand: {plan.unserved_policy})")
    sv = plan.solve
    if sv.bound_usd is not None:
        # with --risk the bound is of the minimised objective (1 - w) E + w CVaR, which can lie above the expected cost
        of = "" if plan.risk is None else f"the minimised risk objective {_usd(sv.objective_usd)} USD (below); its "
        console.print(f"{of}proven lower bound {_usd(sv.bound_usd)} USD: gap {sv.gap:.2%} ({sv.termination})" if sv.gap is not None else
                      f"{of}proven lower bound {_usd(sv.bound_usd)} USD ({sv.termination})")
    when = plan.replan["now"] if plan.replan else plan.quarters[0]
    if plan.replan:
        console.print(f"re-plan at {plan.replan['now']} after demand followed {escape(plan.replan['path'])}: the earlier orders are fixed")
    if plan.risk is not None:
        r = plan.risk
        console.print(f"risk: minimised (1 - {r.weight:.10g}) E + {r.weight:.10g} CVaR_{r.alpha:.10g} = {_usd(r.objective_usd)} USD; "
                      f"the plan's expected cost {_usd(r.expected_cost_usd)}, its CVaR_{r.alpha:.10g} {_usd(r.cvar_usd)} USD")
        from fleetplan.purchase.sheet import neutral_words

        words = neutral_words(r)
        if words is not None:
            console.print(("[bold]risk: " if r.neutral.same_orders else "risk: ") + escape(words) + ("[/]" if r.neutral.same_orders else ""))
    if plan.decomposition is not None:
        d = plan.decomposition
        console.print(f"progressive hedging (mpi-sppy; {', '.join(d.cylinders)}; {d.processes} process{'es' if d.processes != 1 else ''}): "
                      f"{d.iterations} iteration{'s' if d.iterations != 1 else ''}, incumbent {_usd(d.incumbent_usd)} from the {d.incumbent_from}, lower bound "
                      f"{_usd(d.outer_bound_usd)}, gap " + ("-" if d.gap is None else f"{d.gap:.2%}"))
    t = _orders_table(f"Order sheet: commit now ({when})", plan, plan.order_sheet, branch=False)
    if plan.order_sheet:
        console.print(t)
    else:
        console.print(f"[bold]Order sheet ({when})[/]: {escape(plan.nothing_to_order_why or 'nothing to order now')}")
    if plan.fixed_orders:
        console.print(_orders_table("Fixed: orders already placed (the previous plan's, on the realised path)", plan, plan.fixed_orders, branch=True))
    if plan.contingency:
        console.print(_orders_table("Contingency: later orders, if demand follows the branch", plan, plan.contingency, branch=True))
    if plan.order_sheet or plan.fixed_orders or plan.contingency:
        console.print("commitment: a capital pod is kept; a committed term is paid for, and in service, to the quarter shown. price USD: "
                      "undiscounted (capital, or the term's total); PV USD: discounted to the first quarter. needed first: the first quarter a "
                      "verified fleet runs on the order's pods, its most probable scenario then (p: of the scenarios that ever do), and that "
                      "fleet's chips of the order's chip running in its region > those the pods hold without the order. --csv writes them all.")
    if full:
        console.print(_full_table(plan))
    else:
        console.print(_summary_table(plan, len(plan.scenarios)))
        console.print("peak rps: summed over the regions; pods in service: summed over the regions per chip; chips running at the peak: min / "
                      "median / max over the scenarios. Every scenario x quarter x region: --scenarios, --json or --report.")
    refused = [(sc.name, q) for sc in plan.scenarios for q in sc.quarters if q.plan_status == "violations"]
    if refused:
        console.print(f"[bold red]What the verifier refused[/] ({len(refused)} (scenario, quarter){'s' if len(refused) != 1 else ''}):")
        for name, q in refused[:10]:
            for line in q.violations[:3]:
                console.print(f"  {escape(name)} {q.quarter}: {escape(line)}")
            if len(q.violations) > 3:
                console.print(f"  {escape(name)} {q.quarter}: ... and {len(q.violations) - 3} more (--json)")
        if len(refused) > 10:
            console.print(f"  ... and {len(refused) - 10} more (scenario, quarter)s (--json)")
    v = plan.value
    if v is not None:
        console.print("[bold]Value of planning under uncertainty[/] (USD, discounted; MIP gaps in brackets)")
        console.print(f"  RP (this plan)        {_usd(v.rp.objective_usd)}  \\[gap {(v.rp.gap or 0):.2%}]")
        if v.mean_forecast.objective_usd is None:
            console.print(f"  mean-forecast plan    not computed ({escape(v.mean_forecast.termination)}; raise --time-limit)")
        else:
            console.print(f"  mean-forecast plan    {_usd(v.mean_forecast.objective_usd)} on its own forecast; root orders: "
                          + (", ".join(f"{o.pods} {o.chip} in {o.region}" for o in v.mean_forecast_root_orders) or "none"))
        if v.eev_feasible:
            console.print(f"  EEV                   {_usd(v.eev.objective_usd)}  \\[gap {(v.eev.gap or 0):.2%}]")
            console.print(f"  VSS = EEV - RP        {_usd(v.vss_usd)}  (within {_usd(v.vss_interval_usd[0])} .. {_usd(v.vss_interval_usd[1])})")
        elif v.eev is not None and v.eev.termination in ("infeasible", "infeasible_or_unbounded"):
            console.print("  EEV                   infeasible: the mean-forecast orders leave some scenario unservable (VSS unbounded)")
        else:
            why = v.eev.termination if v.eev is not None else f"the mean forecast ended '{v.mean_forecast.termination}'"
            console.print(f"  EEV                   not computed ({escape(why)}; raise --time-limit)")
        if v.ws_usd is None:
            console.print("  WS, EVPI              not computed: a wait-and-see solve ended without a plan (" + escape(", ".join(
                f"{k}: {f.termination}" for k, f in v.wait_and_see.items() if f.objective_usd is None)) + ")")
        if v.ws_usd is not None:
            console.print(f"  WS (perfect foresight) {_usd(v.ws_usd)}")
            console.print(f"  EVPI = RP - WS        {_usd(v.evpi_usd)}  (within {_usd(v.evpi_interval_usd[0])} .. {_usd(v.evpi_interval_usd[1])})")
        for sc in plan.scenarios:
            if sc.regret_usd is not None:
                console.print(f"  regret in {escape(sc.name)}: {_usd(sc.regret_usd)} (cost {_usd(sc.cost_usd)}, wait-and-see {_usd(sc.wait_and_see_usd)})")
    for n in plan.notes:
        console.print(f"note: {escape(n)}")


def _summary_table(plan, n: int) -> Table:
    """One row per quarter over the plan's scenarios (:func:`fleetplan.purchase.sheet.quarter_summary`);
    the unserved column only when some fleet leaves demand unserved."""
    from fleetplan.purchase.sheet import quarter_summary

    rows = quarter_summary(plan)
    cols = tuple(c for c in (rows[0] if rows else {}) if c != "unserved rps (peak; loss)" or any(r[c] != "0" for r in rows))
    t = _table(f"Fleets per quarter over the {n} scenario{'s' if n != 1 else ''} (min..max)", cols,
               tuple(c for c in cols if c not in ("quarter", "pods in service")))
    for r in rows:
        t.add_row(*(escape(r[c]) for c in cols))
    return t


def _full_table(plan) -> Table:
    """Every scenario x quarter x region: peak demand, pods in service per chip, chips running and in
    service, chips by role, the region's USD/h; unserved demand and the verifier's verdict per quarter."""
    t = _table("Scenarios x quarters x regions (pods in service; chips running at the peak)",
               ("scenario", "p", "quarter", "region", "peak rps", "pods", "chips run/in service", "chips by role", "USD/h", "unserved rps (peak; loss)",
                "verifier"), ("p", "peak rps", "USD/h"))
    for sc in plan.scenarios:
        for i, q in enumerate(sc.quarters):
            for j, region in enumerate(sorted(q.peak_rps)):
                rows = [r for r in q.pods_in_service if r.region == region]
                pods = ", ".join(f"{r.chip} {r.pods}" for r in rows) or "0"
                chips = f"{sum(r.chips_running for r in rows):,}/{sum(r.chips for r in rows):,}"
                burst = sum(b.chips for b in q.burst if b.region == region)
                if burst:  # burst pods run beside the pods in service (chips running counts both)
                    chips += f" +{burst:,} burst"
                pools = [x for x in q.pools if x.region == region]
                warm = [w for w in q.warm_pool if w.region == region]
                usd = sum(x.cost_per_hour_usd for x in pools) + sum(w.cost_per_hour_usd for w in warm)
                first = i == 0 and j == 0
                t.add_row(escape(sc.name) if first else "", f"{sc.probability:.3g}" if first else "", q.quarter if j == 0 else "", region,
                          f"{q.peak_rps[region]:,.4g}", pods, chips, escape(_roles_text(pools, warm)), f"{usd:,.2f}",
                          ((f"{q.unserved_rps:,.4g}" + (f"; {q.unserved_in_region_loss_rps:,.4g}" if q.unserved_in_region_loss_rps > 1e-6 else ""))
                           if j == 0 else ""), q.plan_status if j == 0 else "")
    return t


def _roles_text(pools, warm=()) -> str:
    """Chips running at the peak per role over the regions, then the warm pool's ('prefill 5,376, decode 1,024,
    warm 96'); the pools one by one are in --json and --report."""
    by: dict[str, int] = {}
    for q in pools:
        by[q.role] = by.get(q.role, 0) + q.chips
    w = sum(x.chips for x in warm)
    parts = [f"{role} {by[role]:,}" for role in ("prefill", "decode", "replica") if by.get(role)] + ([f"warm {w:,}"] if w else [])
    return ", ".join(parts) or "-"
