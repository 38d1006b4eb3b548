"""``fleetplan solve``: size the fleet, verify the plan, print it and write plan.json."""

from __future__ import annotations

import math
import os
import time
from contextlib import nullcontext
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from fleetplan import interrupts
from fleetplan.cli.common import fraction_parser, phase_status, seconds_parser
from fleetplan.cli.common import (EXIT_INFEASIBLE, EXIT_INPUT, check_output_path, console, dumps_json, err_console, input_errors, print_json,
                                  warn_cache, write_atomic)
from fleetplan.solvers.base import SolveOptions, gap_words

if TYPE_CHECKING:  # the instance schema, the plan and the solve path are imported by the command, not here:
    from fleetplan.results.plan import Plan  # `fleetplan --help` and every command import this module


def _f(x, nd=1, unit="") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf"
    if abs(x) >= 1e4:
        return f"{x:,.0f}{unit}"
    return f"{x:,.{nd}f}{unit}"


def solve_command(
    instance: Annotated[Optional[str], typer.Argument(help="Instance YAML path or bundled name (default: gemini-ironwood).")] = None,
    output: Annotated[Optional[str], typer.Option("-o", "--output", help="Write the plan as JSON to this file (atomically); it carries the instance solved for (overlays applied), so report, whatif, place and simulate need nothing else.")] = None,
    solver: Annotated[str, typer.Option("--solver", help="highs (default) or cpsat: the same model through OR-Tools CP-SAT, for cross-checking small instances (8 workers, not bit-reproducible; on the Gemini instance slower and dearer than HiGHS: README, docs/cli.md). A plan stopped above --mip-gap is said in a warning.")] = "highs",
    time_limit: Annotated[float, typer.Option("--time-limit", help="Wall-clock limit for the whole solve (seconds); a time-limited plan is reported with its gap.", parser=seconds_parser("--time-limit"))] = 300.0,
    mip_gap: Annotated[float, typer.Option("--mip-gap", help="Relative MIP gap at which to stop (fraction; 0.01 = 1%; 1% is read as 0.01).", parser=fraction_parser("--mip-gap"))] = 0.01,
    threads: Annotated[int, typer.Option("--threads", help="Solver threads (1 keeps runs deterministic).", min=1, max=256)] = 1,
    rounding_start: Annotated[bool, typer.Option("--rounding-start", help="Start HiGHS from an LP-guided rounded fleet (helps very large instances; docs/benchmarks.md).")] = False,
    component_start: Annotated[str, typer.Option("--component-start", help="auto (default), on or off: start HiGHS from the regions' MIPs solved one by one with the LP's failover routing fixed; auto turns it on for models of 2,000 integer variables or more (docs/formulation.md).")] = "auto",
    json_out: Annotated[bool, typer.Option("--json", help="Print the plan as JSON instead of tables.")] = False,
    write_unverified: Annotated[bool, typer.Option("--write-unverified", help="Write -o even when the plan is not verified (shortfall or violations); by default a failed run leaves the file as it was.")] = False,
    baseline: Annotated[bool, typer.Option("--baseline", help="Also build the brief's hand plan, verify it and print it beside the optimised plan.")] = False,
    compare_stratification: Annotated[bool, typer.Option("--compare-stratification", help="Also solve with all tiers merged into one mixed pool per region.")] = False,
    workload: Annotated[Optional[str], typer.Option("--workload", help="Workload YAML (from `fleetplan workload fit -o`): its workload: block replaces those fields of the instance.")] = None,
    priors: Annotated[Optional[str], typer.Option("--priors", help="Priors YAML (from `fleetplan calibrate -o`): its priors: block replaces those priors of the instance. On an instance with a physics: block the plan then holds under these priors alone (the instance's physics sources are dropped; a note says so).")] = None,
    compare: Annotated[Optional[str], typer.Option("--compare", help="Also solve this base instance and show how chips, pods and $/1M tokens moved, and which input moved them (one re-solve per changed input).")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Compute every candidate table afresh and keep none (as FLEETPLAN_CACHE=0). By default the tables' pieces are kept in ~/.cache/fleetplan (FLEETPLAN_CACHE_DIR), so a re-solve after editing one number recomputes only what that number reaches; the plan is the same bytes either way (docs/cli.md, 'The table cache').")] = False,
    physics: Annotated[Optional[str], typer.Option("--physics", help="Which physics sources the plan holds under, overriding the instance's physics.hold: 'all' (every source), 'slowest', or a source's name (docs/instance.md, physics:).")] = None,
    router: Annotated[Optional[str], typer.Option("--router", help="Size for this router, overriding the instance's serving.router: 'least-work' (one FCFS queue per pool, G/G/c), 'round-robin' (a G/G/1 per replica or prefill slice at C_a^2 / c), 'random' or 'prefix-aware' (a random split's G/G/1). The plan records it and carries the instance with it, so simulate and the exports follow it.")] = None,
    source_plans: Annotated[bool, typer.Option("--source-plans/--no-source-plans", help="With several physics sources (the default: on), also solve the instance once per single source and print each plan's chips and $/1M tokens beside this one's, with the sources each holds under.")] = True,
) -> None:
    """Size prefill/decode slices per region and tier under TTFT/TPOT SLOs and N-1 failover at minimum cost."""
    from fleetplan.deadline import command_start

    started = command_start()
    if no_cache:
        from fleetplan.tables.store import ENV_SWITCH

        os.environ[ENV_SWITCH] = "0"  # this process and any it starts
    if time.monotonic() >= started + time_limit:  # spent in start-up already: stop before the heavy imports
        err_console.print(f"[bold red]no plan:[/] no incumbent within the limit ({time_limit:g} s of wall clock from the command's start; "
                          f"{time.monotonic() - started:.1f} s have passed): the time limit passed during start-up. Raise --time-limit.", soft_wrap=True)
        raise typer.Exit(EXIT_INFEASIBLE)
    # Pyomo first: its import hook on SciPy is then disarmed before fleetplan's first SciPy
    # import (fleetplan/imports.py), so scipy.stats & co. (~0.4 s) never load; imported
    # after SciPy, Pyomo would load them at once. pyomo.core, not pyomo.environ: the solve
    # uses none of environ's plugins (fleetplan/imports.py)
    import pyomo.core  # noqa: F401

    from fleetplan.sizing import solve

    _check_choices(solver, component_start)
    inst, base_inst = _inputs(instance, output, workload, priors, compare, physics, router)
    # --time-limit is the wall clock of the whole command, from process start (imports,
    # reading the instance and the candidate tables count); the extra solves of --compare
    # and --compare-stratification share what is left
    opts = SolveOptions(solver=solver, time_limit_s=time_limit, mip_gap=mip_gap, threads=threads, rounding_start=rounding_start,
                        component_start={"auto": None, "on": True, "off": False}[component_start],
                        deadline=started + time_limit)
    out = _solve_with_spinner(solve, inst, opts, output)
    wall = time.monotonic() - started
    if out.cut_after_solve is not None:
        _post_solve_cut(out, time_limit, wall, output, write_unverified)
    if out.plan is None:
        _no_plan(out, time_limit, wall)
    plan = out.plan
    _warn_time_notes(plan)
    written = False
    if output and (plan.status == "verified" or write_unverified):
        with input_errors():
            write_atomic(output, dumps_json(plan.model_dump(mode="json")))
        written = True
    extras, attribution = _extra_solves(solve, inst, base_inst, opts, baseline, compare_stratification)
    by_source, source_cut = None, {}
    if source_plans and inst.physics is not None and len(_source_names(inst)) > 1:
        by_source, source_cut = _plans_per_source(solve, inst, plan, opts, time_limit)
    if json_out:
        doc = plan.model_dump(mode="json")
        for k, p in extras.items():
            doc[k] = p.model_dump(mode="json") if p is not None else None
        if attribution is not None:
            doc["attribution"] = [a.to_dict() for a in attribution]
        if by_source is not None:
            doc["source_plans"] = [_source_plan_doc(r, source_cut) for r in by_source]
        print_json(doc)
    else:
        _render_all(inst, plan, out, opts, time_limit, wall, extras, attribution, by_source, source_cut, compare)
        if written:
            console.print(f"plan written to {escape(output)}")
    if output and not written:
        err_console.print(f"plan NOT written to {escape(output)}: its status is {plan.status} (any earlier file is left as it was); "
                          "use --write-unverified to write it anyway")
    if plan.status != "verified":
        raise typer.Exit(EXIT_INFEASIBLE)


def _check_choices(solver: str, component_start: str) -> None:
    """Exit 2 naming the option when --solver or --component-start is none of its choices."""
    if solver not in ("highs", "cpsat"):
        err_console.print(f"[bold red]error:[/] --solver must be 'highs' or 'cpsat', got {escape(repr(solver))}.")
        raise typer.Exit(EXIT_INPUT)
    if component_start not in ("auto", "on", "off"):
        err_console.print(f"[bold red]error:[/] --component-start must be 'auto', 'on' or 'off', got {escape(repr(component_start))}.")
        raise typer.Exit(EXIT_INPUT)


def _inputs(instance: str | None, output: str | None, workload: str | None, priors: str | None, compare: str | None,
            physics: str | None, router: str | None):
    """The instance to solve (its --workload and --priors overlays, --router and --physics
    applied; each overlay's fields and notes printed) and the --compare base instance (or
    None). ``-o``'s path is checked before any work. Exit 2 on bad input."""
    from fleetplan.instance.io import DEFAULT_INSTANCE, instance_files, load_instance, load_instance_overlaid

    with input_errors():
        inst, overlays = load_instance_overlaid(instance or DEFAULT_INSTANCE, workload, priors)
        base_inst = load_instance(compare) if compare is not None else None
        if output is not None:  # before any work, whatever the other options (not only with --physics)
            check_output_path(output, (*instance_files(instance or DEFAULT_INSTANCE, inst, overlays), compare or ""), "the plan")
    if router is not None:
        inst = _with_router_option(inst, router)
    if physics is not None:
        from fleetplan.instance.io import PRIORS_ALONE

        if any(n.startswith(PRIORS_ALONE) for o in overlays for n in o.notes):
            err_console.print(f"[bold red]error:[/] --physics {escape(physics)} with --priors: the plan holds under your priors alone "
                              "(--priors drops the instance's physics sources), so there is no source to choose. Add the priors file "
                              "as a source in the instance's physics.sources to hold it beside the others, or leave out one option.",
                              soft_wrap=True)
            raise typer.Exit(EXIT_INPUT)
        inst = _with_physics_option(inst, physics)
    for o in overlays:
        if o.fields:
            err_console.print(f"{o.section} from {escape(o.path)}: {', '.join(o.fields)}")
        for note in o.notes:
            err_console.print(f"  note: {escape(note)}")
    return inst, base_inst


def _solve_with_spinner(solve, inst, opts: SolveOptions, output: str | None):
    """``solve(inst, opts)`` under a spinner showing its phases, its warnings printed at once
    and the table cache's reuse noted after; interrupted, exit with the interrupt's status
    and no plan written."""
    from fleetplan.tables.cache import default_tables

    tables = default_tables()
    try:
        with phase_status("solving", "solve") as st, (tables.counting() if tables is not None else nullcontext()) as counted:
            out = solve(inst, opts, progress=st.update,
                        warn=lambda msg: err_console.print(f"[bold yellow]warning:[/] {escape(msg)}", soft_wrap=True))
        _cache_note(tables, counted)
    except KeyboardInterrupt:
        err_console.print(f"[bold yellow]interrupted[/]: the solve was stopped ({interrupts.cause()}); no plan" +
                          (f", {escape(output)} left as it was." if output else "."))
        raise typer.Exit(interrupts.exit_status()) from None
    return out


def _no_plan(out, time_limit: float, wall: float) -> None:
    """Exit 3 with why the solve gave no plan: the time limit (its phase; a certain shortfall
    named) or a solver ending without a fleet (a bug)."""
    if out.result.termination == "time_limit":
        why = "; ".join(n for n in out.result.notes if "time limit" in n) or "the solver found no feasible fleet in the time it had"
        certain = [n for n in (out.data.notes if out.data is not None else []) if n.startswith("SHORTFALL CERTAIN")]
        err_console.print(f"[bold red]no plan:[/] no incumbent within the limit ({time_limit:g} s of wall clock from the command's "
                          f"start; {wall:.1f} s have passed): {escape(why)}. Raise --time-limit"
                          + (" -- or check the demand: " + escape(" ".join(certain)) if certain else "") + ".")
    else:
        err_console.print(f"[bold red]no plan:[/] the solver ended '{out.result.termination}' without a feasible fleet after {wall:.1f} s. "
                          "The model should always be feasible (shortfall is allowed); this is a bug, please report it with the instance.")
    raise typer.Exit(EXIT_INFEASIBLE)


def _warn_time_notes(plan: Plan) -> None:
    """Print as warnings the plan's notes that a time limit left it further from its bound
    than asked, made it depend on the load, or cut its pods."""
    from fleetplan.sizing import GAP_NOTE, NOT_REPRODUCIBLE, NOT_SIZED_WITH_PODS

    for note in plan.diagnostics:
        if note.startswith((GAP_NOTE, NOT_REPRODUCIBLE, NOT_SIZED_WITH_PODS)):
            err_console.print(f"[bold yellow]warning:[/] {escape(note)}", soft_wrap=True)


def _extra_solves(solve, inst, base_inst, opts: SolveOptions, baseline: bool, compare_stratification: bool):
    """The plans beside this one -- --baseline's hand plan, --compare-stratification's
    unstratified plan, --compare's base plan -- as ``{name: plan}``, and --compare's
    attribution of the change to each input (None without --compare)."""
    extras = {}
    if baseline:
        from fleetplan.results.baseline import hand_plan

        with err_console.status("building and verifying the hand plan", spinner="dots"):
            extras["baseline"] = hand_plan(inst)
    if compare_stratification:
        from fleetplan.instance.variants import merge_tiers

        with err_console.status("solving the unstratified fleet", spinner="dots") as st:
            extras["unstratified"] = solve(merge_tiers(inst), opts, progress=lambda msg: st.update("unstratified: " + escape(msg))).plan
    attribution = None
    if base_inst is not None:
        from fleetplan.workload.compare import attribute

        with err_console.status("solving the base instance", spinner="dots") as st:
            extras["base"] = solve(base_inst, opts, progress=lambda msg: st.update("base: " + escape(msg))).plan
            attribution = attribute(base_inst, inst, lambda i: solve(i, opts).plan, progress=lambda msg: st.update(escape(msg)))
    return extras, attribution


def _plans_per_source(solve, inst, plan: Plan, opts: SolveOptions, time_limit: float):
    """One plan per physics source of ``inst`` beside ``plan`` (:func:`fleetplan.sizing.source_plans.plans_per_source`)
    and, per source whose solve the time limit cut, why it has no plan."""
    from fleetplan.sizing.source_plans import plans_per_source

    source_cut: dict[str, str] = {}

    def solve_source(i):
        o = solve(i, opts)
        if o.plan is None and (o.result.termination == "time_limit" or o.cut_after_solve is not None):
            source_cut[i.physics.hold if i.physics is not None else "?"] = (
                f"no plan: --time-limit {time_limit:g} s (the whole command's) passed first; --no-source-plans skips these solves")
        return o.plan

    with err_console.status("solving once per physics source", spinner="dots") as st:
        by_source = plans_per_source(inst, solve_source, plan, progress=lambda msg: st.update(escape(msg)))
    return by_source, source_cut


def _render_all(inst, plan: Plan, out, opts: SolveOptions, time_limit: float, wall: float, extras: dict, attribution, by_source,
                source_cut: dict[str, str], compare: str | None) -> None:
    """The plan's tables (its SLO margins within the time limit, else a note), then the source
    plans, the hand plan, the unstratified plan and the --compare attribution beside it."""
    from fleetplan.cli.physics_view import plan_margins

    from fleetplan.deadline import TimeLimitReached, deadline_scope

    try:  # the table's margins are work after the solve: within --time-limit too (a second kept for the tables), else left out and said
        with deadline_scope(None if opts.deadline is None else opts.deadline - 1.0):
            margins, margins_cut = plan_margins(inst, plan), False
    except TimeLimitReached:
        margins, margins_cut = None, True
    note = (f"margins (step time / load at which each SLO breaks): not shown -- computing them after the solve would have run past "
            f"--time-limit {time_limit:g} s (they stop a second before it, leaving that second for these tables); `fleetplan report "
            "PLAN` draws them, or re-solve with a larger --time-limit") if margins_cut else None
    render_plan(plan, wall, out.timings_s, margins, note)
    if by_source is not None:
        from fleetplan.cli.physics_view import render_source_plans

        render_source_plans(by_source, source_cut)
    if "baseline" in extras:
        render_comparison(plan, extras["baseline"], "hand plan (the design brief's method)", "optimised")
    if "unstratified" in extras and extras["unstratified"] is not None:
        render_comparison(plan, extras["unstratified"], "unstratified (one mixed pool per region)", "stratified")
        a, b = plan.cost.fleet_cost_per_hour_usd, extras["unstratified"].cost.fleet_cost_per_hour_usd
        gap = max(plan.solver.gap or 0, extras["unstratified"].solver.gap or 0)
        if abs(a - b) <= gap * max(a, b):
            console.print(f"  The two costs differ by {abs(a - b) / max(a, b):.2%}, within the MIP gap ({gap:.2%}): on cost alone "
                          "neither wins; stratification still isolates long prompts from short ones. Re-run with a smaller "
                          "--mip-gap to separate them.")
    if attribution is not None:
        render_input_comparison(plan, extras["base"], attribution, compare)


def _with_router_option(inst, value: str):
    """``inst`` with serving.router = ``value`` (--router); exit 2 naming the option and the
    routers when it names none."""
    from fleetplan.perf.queueing import ROUTERS

    if value not in ROUTERS:
        err_console.print(f"[bold red]error:[/] --router {escape(repr(value))}: expected one of {', '.join(ROUTERS)}.", soft_wrap=True)
        raise typer.Exit(EXIT_INPUT)
    return inst.model_copy(update={"serving": inst.serving.model_copy(update={"router": value})})


def _cache_note(tables, counted) -> None:
    """One line on stderr: how many of the candidate tables' pieces the solve reused from
    the table cache (docs/cli.md, 'The table cache'); nothing with the cache off."""
    if tables is None or counted is None or counted.total == 0:
        return
    warn_cache()  # beside the count it explains (a folder nothing can be stored in)
    where = f" ({escape(str(tables.disk.root))})" if tables.disk is not None else " (in memory only)"
    grown = (f"; {counted.extended} of the reused replica rate searches went on to pool sizes not searched before"
             if counted.extended else "")
    err_console.print(f"candidate tables: {counted.reused} of {counted.total} pieces reused from the table cache{where}, "
                      f"{counted.computed} computed{grown}", soft_wrap=True, highlight=False)


def _with_physics_option(inst, value: str):
    """``inst`` with physics.hold = ``value`` (--physics); exit 2 naming the option when it names no source."""
    from fleetplan.errors import InstanceError
    from fleetplan.instance.physics import with_hold

    try:
        return with_hold(inst, value)
    except InstanceError as e:
        err_console.print(f"[bold red]error:[/] --physics {escape(value)}: " + escape("; ".join(p.message for p in e.problems)), soft_wrap=True)
        raise typer.Exit(EXIT_INPUT) from None


def _source_names(inst) -> list[str]:
    from fleetplan.instance.physics import sources

    return [s.name for s in sources(inst)]


def _source_plan_doc(r, why_none: dict[str, str]) -> dict:
    """One row of `solve --json`'s source_plans: a single source's plan in brief (``no_plan``:
    why there is none, when the time limit cut its solve)."""
    c = r.plan.cost if r.plan is not None else None
    return {"hold": r.hold, "no_plan": why_none.get(r.hold) if r.plan is None else None, "chips": c.chips if c else None, "fleet_cost_per_hour_usd": c.fleet_cost_per_hour_usd if c else None,
            "cost_per_1m_output_tokens_usd": c.cost_per_1m_output_tokens_usd if c else None, "status": r.plan.status if r.plan else None,
            "holds_under": list(r.holds), "breaks_under": [{"source": n, "first_finding": m} for n, m in r.breaks]}


def _post_solve_cut(out, time_limit: float, wall: float, output: str | None, write_unverified: bool) -> None:
    """The time limit passed after the solve, while the incumbent was extracted or verified
    (a slower machine than estimated): exit 3 with what happened; -o only with --write-unverified and a plan
    to write (status 'unverified'), else any earlier file stays as it was."""
    kind = "a shortfall plan" if out.shortfall else "a plan"
    what = "verification" if out.cut_after_solve.startswith("verifying") else "extraction and verification"
    err_console.print(f"[bold red]no verified plan:[/] {kind} was found but its {what} did not finish within --time-limit {time_limit:g} s "
                      f"({wall:.1f} s of wall clock from the command's start; the time limit passed while {escape(out.cut_after_solve)}); "
                      "raise --time-limit.", soft_wrap=True)
    if output and write_unverified and out.plan is not None:
        with input_errors():
            write_atomic(output, dumps_json(out.plan.model_dump(mode="json")))
        err_console.print(f"plan written to {escape(output)} with status 'unverified' (--write-unverified): the solver's incumbent, "
                          "not re-proved by the verifier", soft_wrap=True)
    elif output:
        why = "the plan's predictions were not computed, so there is nothing to write" if out.plan is None else "it is not verified"
        err_console.print(f"plan NOT written to {escape(output)}: {why} (any earlier file is left as it was)"
                          + ("" if (write_unverified or out.plan is None) else "; use --write-unverified to write it anyway"), soft_wrap=True)
    raise typer.Exit(EXIT_INFEASIBLE)


def _render_pods(plan: Plan) -> None:
    """A plan sized with its pods: per region x tier the DCN share it allows, the share its TTFT
    was sized for and the shares its pods give at the normal peak and in the worst region
    loss; per region the pods in use, their distinct contents and the largest DCN egress."""
    if plan.dcn is None:
        return
    t = _table("KV over the DCN: share of each tier's requests whose prefill and decode sit in different pods (ICI domains)")
    for c in ("region", "tier", "ceiling", "TTFT sized for", "normal peak", "worst region loss", "in"):
        t.add_column(c, justify="left" if c in ("region", "tier", "in") else "right", overflow="fold")
    for x in plan.dcn:
        over = x.sized_for > x.dcn_share_max
        t.add_row(x.region, x.tier, f"{x.dcn_share_max:.1%}", ("[bold yellow]any share[/]" if over else f"{x.sized_for:.1%}"),
                  f"{x.normal:.2%}", "-" if x.worst_loss is None else f"{x.worst_loss:.2%}", x.worst_loss_scenario or "-")
    console.print(t)
    over = [x for x in plan.dcn if x.sized_for > x.dcn_share_max]
    overall = [x for x in plan.dcn if x.why and x not in over]  # a region over its overall ceiling, declared on these tiers
    if overall:
        console.print("[bold yellow]Region DCN share above the overall ceiling[/] (placement.dcn_share_max) in "
                      + ", ".join(sorted({x.region for x in overall})) + ", declared on " + ", ".join(f"{x.region}/{x.tier}" for x in overall))
        for x in overall:
            console.print(f"  {x.region}/{x.tier}: {x.why}")
    if over:
        console.print("[bold yellow]DCN share above its ceiling[/] in " + ", ".join(f"{x.region}/{x.tier}" for x in over)
                      + ": no placement within the region's pods keeps it (see Notes); those pools' TTFT is sized with every request's "
                      "KV crossing the DCN")
        whys: dict[str, list[str]] = {}
        for x in over:
            if x.why:
                whys.setdefault(x.why, []).append(f"{x.region}/{x.tier}")
        for why, where in whys.items():
            console.print(f"  {', '.join(where)}: {why}")
    per = {}
    for pc in plan.pods or []:
        g = per.setdefault((pc.region, pc.chip), [0, set(), 0.0])
        g[0] += 1
        g[1].add(tuple(sorted(pc.slices.items())))
        g[2] = max(g[2], pc.dcn_egress_gbytes_per_s)
    if per:
        inst = plan.instance or {}
        chips = inst.get("chips", {})
        net = inst.get("network", {}).get("dcn_gbytes_per_s_per_slice")
        parts = []
        for (r, k), (n, kinds, eg) in sorted(per.items()):
            ch = chips.get(k, {})
            cap = ch.get("pod_dcn_egress_gbytes_per_s") or ((net or 0) * (ch.get("chips_per_pod", 0) // max(min(ch.get("slice_shapes") or [1]), 1)))
            parts.append(f"{r} {n} pods of {k} in use ({len(kinds)} distinct contents), largest DCN egress {eg:,.3g} GB/s"
                         + (f" of {cap:,.4g}" if cap else ""))
        console.print("Pods (counted by the sizing; `fleetplan place` names them and their VMs): " + "; ".join(parts))


def _status_line(plan: Plan) -> str:
    if plan.status == "violations" and plan.violations and all(v.check == "placement" and v.where == "plan" for v in plan.violations):
        # the pod stage found no plan (its note says why: the time limit, or no fleet within the ceilings and egress)
        why = next((n for n in plan.diagnostics if n.startswith(("placement-aware sizing found no plan", "placement-aware sizing did not run"))),
                   "the pod stage found no plan (see Notes)")
        return ("[bold red]not sized with its pods[/]: " + escape(why) + " -- the instance sizes with them (placement.size_with_pods), so "
                "this plan does not bound the DCN share and is not verified; raise --time-limit, loosen the DCN ceilings or the pods' "
                "egress, or set placement.size_with_pods false")
    losses = any(sc.kind == "loss" for sc in plan.scenarios)
    scope = "every hour and region-loss scenario" if losses else "every hour (no region-loss scenario: the instance plans no N-1 failover)"
    if plan.status == "verified" and plan.pods is None and plan.solver.pod_stage_termination == "time_limit":
        # the time limit cut the pod stage (or its plan's verification); the plain plan is written
        return (f"[bold green]verified[/]: every SLO holds in {scope} (independent check) -- [bold yellow]not sized with its pods[/]: the "
                "time limit cut placement-aware sizing, so this is the plain sizing's plan and its DCN share is not bounded (see Notes; "
                "`fleetplan place` minimises it); raise --time-limit for a plan sized with its pods")
    return {"verified": f"[bold green]verified[/]: every SLO holds in {scope} (independent check)",
            "shortfall": "[bold yellow]cannot meet the SLOs[/]: no fleet within the inventory and the physics serves all the load; "
                         "the plan leaves the least load unserved (see Notes for each shortfall's cause), and what it serves is checked",
            "violations": "[bold red]violations[/]: the independent checker disagrees with the plan -- a bug or an "
                          "unconverged run (see Violations)",
            "unverified": "[bold red]not verified[/]: the time limit passed before the independent checker finished (see Notes)"}.get(plan.status, plan.status)


#: How each router's pools were sized (the CLI's router line).
ROUTER_SIZING = {"least-work": "each pool's prompts queue FCFS for its first free replica or prefill slice (G/G/c)",
                 "round-robin": "each replica or prefill slice gets every c-th request and queues its own (G/G/1 at C_a^2 / c)",
                 "random": "each replica or prefill slice gets a random share and queues its own (G/G/1 at a random split's C_a^2: "
                           "M/G/1 for Poisson arrivals)",
                 "prefix-aware": "requests follow their prefix, blind to load: queued as a random split (G/G/1 per replica or slice), "
                                 "at the tier's prefix hit rate"}


def router_line(router: str) -> str:
    """The line that states the router a plan was sized for (the solve table)."""
    return (f"router: [bold]{router}[/] (serving.router): {ROUTER_SIZING[router]}; deploy this router, or one that balances "
            "at least as well (docs/architecture.md, 'The router')")


def render_plan(plan: Plan, wall_s: float | None = None, timings: dict | None = None, margins=None, margins_note: str | None = None) -> None:
    """The plan as tables; ``margins`` (the plan's, or computed: results/margins.py) fill the
    latencies table's margins column; ``margins_note`` (when they are left out) is printed
    under that table."""
    s = plan.solver
    console.print(f"[bold]{escape(plan.instance_name)}[/] -- {_status_line(plan)}")
    t_note = f" in {wall_s:.1f} s" if wall_s is not None else ""
    term = {"optimal": "proved optimal (the best bound meets the plan's cost)",
            "gap_reached": f"stopped at the MIP gap asked for, {gap_words(s.gap or 0, 'the best bound')} (--mip-gap 0 to prove optimality)",
            "time_limit": f"stopped at the time limit, {gap_words(s.gap or 0, 'the best bound')}"}.get(s.termination, s.termination)
    proved = s.bound is not None and math.isfinite(s.bound) and s.gap is not None and math.isfinite(s.gap)
    if s.termination in ("gap_reached", "time_limit") and not proved:
        # a shortfall plan's cost stage can stop before HiGHS proves any bound: "0.00% above
        # the best bound ... best bound inf" read as a contradiction
        term = "stopped at the time limit before a bound on the cost was proved (the plan's cost is an upper bound only)"
    extra = (s.objective or 0) - plan.cost.fleet_cost_per_hour_usd
    obj_note = (f" = fleet {_f(plan.cost.fleet_cost_per_hour_usd, 0)} $/h + {_f(extra, 0)} $/h of failover shedding (the shed load priced, weighted by the share of hours spent in a region-loss event)"
                if abs(extra) >= 0.5 else "")
    if s.pod_stage_termination is not None and plan.pods is not None and proved:  # placement-aware: two bounds, two gaps
        # each gap ((cost - bound) / cost, as --mip-gap) with the cost above its bound: "within 0.64%" had read as "cost 0.65% above"
        asked = plan.options.get("mip_gap")
        own = gap_words(s.pod_stage_gap or 0, "its own bound")
        stage = {"optimal": "proved optimal", "gap_reached": f"at {own}, within the --mip-gap asked for",
                 "time_limit": f"at {own} when the time limit passed",
                 "work_limit": f"at {own} at its work limit (branch-and-bound nodes per region)"
                 }.get(s.pod_stage_termination, s.pod_stage_termination)
        plain = gap_words(s.gap or 0, "the plain sizing's bound")
        over = (f", above the --mip-gap asked for ({asked:.2%}; the warning says why)" if isinstance(asked, (int, float)) and s.gap is not None
                and s.gap > asked + 1e-12 else "")
        if s.pod_stage_termination == "gap_reached" and abs((s.pod_stage_gap or 0) - (s.gap or 0)) < 5e-7:  # one bound: say it once
            term = (f"placed fleet at {plain}, its own bound too, within the --mip-gap asked for, the failover routing fixed at the "
                    "plain sizing's (whose bound ignores the pods: the placement's cost is in that gap)")
        else:
            term = (f"placed fleet {stage}, the failover routing fixed at the plain sizing's; {plain} "
                    f", which ignores the pods: the placement's cost is in that gap{over}")
    console.print(f"solver {s.solver}: {term}{t_note}; objective {_f(s.objective, 0)} $/h{obj_note}, best bound {_f(s.bound, 0) + ' $/h' if proved or s.termination == 'optimal' else 'none proved'}; "
                  f"{s.iterations} solve(s) of {s.variables:,} variables ({s.integer_variables:,} integer), {s.constraints:,} constraints")
    t = _table("Fleet: pods and chips per region")
    for c in ("region", "chip", "pods installed", "pods new", "chips in pods", "chips in slices", "warm-pool chips", "cost $/h"):
        t.add_column(c, justify="right", overflow="fold")
    for f in plan.fleet:
        t.add_row(f.region, f.chip, str(f.pods_installed), str(f.pods_new), f"{f.chips_in_pods:,}", f"{f.chips_in_slices:,}",
                  f"{f.chips_in_warm_pool:,}", _f(f.cost_per_hour_usd, 0))
    console.print(t)

    normal = next((sc for sc in plan.scenarios if sc.kind == "normal"), None)
    t = _table("Pools: slices per region x tier x role and their operating points")
    colocated = any(p.role == "replica" for p in plan.pools)
    last = "decode batch cap, draft k, handoffs held (normal / failover)" if not colocated else "replica schedule (engine token budget per step)"
    for c in ("region", "tier", "role", "slice", "slices", "chips", "$/h", last):
        t.add_column(c, justify="right" if c in ("slices", "chips", "$/h") else "left", overflow="fold")
    for p in plan.pools:
        op = "-"
        if p.decode_normal:
            op = _op_text(p.decode_normal) + (" / " + _op_text(p.decode_failover) if p.decode_failover else "")
        elif p.role == "replica" and p.schedule:
            op = (f"chunked prefill, {p.chunk_tokens:,} tokens per step (decode first)" if p.chunk_tokens else
                  "prefill-first (whole prompts before decode steps)")
        t.add_row(p.region, p.tier, p.role, p.slice, str(p.slices), f"{p.chips:,}", _f(p.cost_per_hour_usd, 0), op)
    console.print(t)
    if any(p.role in ("replica", "prefill") for p in plan.pools):  # every plan states its router (least-work when not recorded)
        console.print(router_line(plan.router or "least-work"))
    if plan.serving_modes:  # serving.mode auto: which mode each region x tier runs, and why
        t = _table("Serving mode per region x tier (serving.mode auto): chosen by the sizing model")
        for c in ("region", "tier", "mode", "$/h in the plan", "normal-peak estimate $/h: disaggregated / colocated", "why"):
            t.add_column(c, justify="right" if "$/h" in c else "left", overflow="fold")
        for m in plan.serving_modes:
            est = m.estimate_per_hour_usd
            t.add_row(m.region, m.tier, m.mode, _f(m.cost_per_hour_usd, 0),
                      " / ".join("-" if est.get(k) is None else _f(est[k], 0) for k in ("disaggregated", "colocated")), escape(m.reason))
        console.print(t)
    _render_pods(plan)
    specs = sorted({(sp.draft_tokens, tuple(sp.speculating_classes), tuple(sp.off_classes), sp.switch_off_batch, p.tier)
                    for p in plan.pools if (sp := p.speculation)})
    for k, on, off, sw, tier in specs:
        stop = "pays at every batch up to the cap" if sw is None else f"switched off at {sw} residents per slice and above"
        console.print(f"Speculation, tier {tier}: draft length {k} for {', '.join(on)}"
                      + (f"; never for {', '.join(off)} (acceptance below the threshold)" if off else "") + f"; {stop}.")
    from fleetplan.cli.physics_view import MARGIN_LEGEND, margin_text, render_physics
    from fleetplan.results.loads import sizing_records

    render_physics(plan)
    records = sizing_records(plan.scenarios)
    t = _table("Predicted latencies: at the normal peak and in the scenario that sizes each pool")
    cols = ("region", "tier", "role", "normal peak", "sizing scenario", "in that scenario", "load growth absorbed (normal / sizing)")
    for c in cols + (("margins in the sizing scenario: step time / load",) if margins is not None else ()):
        t.add_column(c, overflow="fold")
    for p in plan.pools:
        worst, wname = _worst(plan, p, records)
        row = [p.region, p.tier, p.role, _pred(normal, p, plan), wname or "-", worst,
               f"{_growth_text(_load_of(normal, p))} / {_growth_text(_load_of(next((s for s in plan.scenarios if s.name == wname), None), p))}"]
        if margins is not None:
            row.append(margin_text(margins, p.region, p.tier, p.role, wname or "normal"))
        t.add_row(*row)
    console.print(t)
    if margins is not None:
        console.print(MARGIN_LEGEND, style="dim")
    elif margins_note:
        console.print(margins_note, soft_wrap=True)
    console.print(_margin_line(plan))
    if plan.warm_pool:
        console.print("Warm pool: " + ", ".join(f"{w.region} {w.slices} x {w.slice}" for w in plan.warm_pool))
    if plan.routing:
        rows = {}
        for r in plan.routing:
            rows.setdefault((r.lost, r.tier), []).append(f"{r.share:.0%} to {r.to}")
        console.print("Failover routing: " + escape("; ".join(f"lose {x} [{t}]: {', '.join(v)}" for (x, t), v in sorted(rows.items()))))
    losses = [sc for sc in plan.scenarios if sc.kind == "loss"]
    if losses:
        t = _table("Region-loss scenarios (the hours that dominate the rest)")
        for c in ("scenario", "warm slices used", "batch shed req/s", "clamped req/s", "shed + clamp $/h while it lasts",
                  "prefill shortfall req/s", "decode shortfall tok/s", "not served end to end req/s"):
            t.add_column(c, justify="right", overflow="fold")
        for sc in losses:
            t.add_row(sc.name, str(sc.warm_slices_used), _f(sc.shed_rps), _f(sc.clamped_rps),
                      _f(sc.shed_cost_per_hour_usd + sc.clamp_cost_per_hour_usd, 0), _f(sc.prefill_shortfall_rps),
                      _f(sc.decode_shortfall_tokens_per_s), _f(sc.unserved_rps))
        console.print(t)
    if normal is not None and normal.unserved_rps > 0:
        demand = sum(p.arrivals_rps for p in normal.pools if p.role in ("prefill", "replica"))
        console.print(f"[bold yellow]Not served end to end at the normal peak[/]: {_f(normal.unserved_rps)} of {_f(demand)} requests/s "
                      "(a request needs both its prefill and its decode)")
    c = plan.cost
    console.print(
        f"[bold]Cost[/]: {_f(c.fleet_cost_per_hour_usd, 0)} $/h for {c.chips:,} chips (prefill {_f(c.prefill_cost_per_hour_usd, 0)}, "
        f"decode {_f(c.decode_cost_per_hour_usd, 0)}, replicas {_f(c.replica_cost_per_hour_usd, 0)}, warm pool {_f(c.warm_pool_cost_per_hour_usd, 0)}, "
        f"new pods {_f(c.pods_cost_per_hour_usd, 0)} $/h)")
    if c.per_1m_withheld:
        console.print(f"  $ per 1M tokens withheld: {escape(c.per_1m_withheld)}")
    else:
        _per_1m_lines(c)
    _rest_of_plan(plan)


def _per_1m_lines(c) -> None:
    console.print(
        f"  ${c.cost_per_1m_output_tokens_usd:.3f} per 1M output tokens, all cost carried by output tokens at the daily mean demand "
        f"(${c.cost_per_1m_output_tokens_at_peak_usd:.3f} at the sum of the regions' peaks, the design brief's convention)")
    console.print(
        f"  by role (warm pool and pods shared pro rata): ${c.cost_per_1m_input_tokens_usd:.4f} per 1M input tokens (prefill), "
        f"${c.cost_per_1m_output_tokens_decode_usd:.3f} per 1M output tokens (decode); ${c.cost_per_1m_tokens_blended_usd:.4f} per 1M "
        f"input+output tokens blended (prompts outnumber answers {c.mean_input_tokens_per_s / max(c.mean_output_tokens_per_s, 1e-9):.0f} to 1)")
    console.print(
        f"  idle trough capacity could serve {c.batch_infill_output_tokens_per_day / 1e9:,.1f}B batch output tokens/day: "
        f"${c.cost_per_1m_output_tokens_with_infill_usd:.3f} per 1M output tokens once they are counted")


def _rest_of_plan(plan: Plan) -> None:
    if plan.binding:
        console.print("[bold]Binding[/]:")
        for b in plan.binding:
            console.print("  " + escape(b))
    notes = [d for d in plan.diagnostics if not d.startswith("demand margin:")]  # that one opens the line above the latency table's notes
    if notes:
        console.print("[bold]Notes[/]:")
        for dgn in notes:
            console.print("  " + escape(dgn))
    console.print(LEGEND, style="dim")
    if plan.violations:
        console.print(f"[bold red]Violations ({len(plan.violations)})[/]:")
        for v in plan.violations[:30]:
            console.print(f"  [{escape(v.check)}] {escape(v.where)}: {escape(v.message)}")
        if len(plan.violations) > 30:
            console.print(f"  ... and {len(plan.violations) - 30} more (see plan.json)")


def _load_of(sc, p):
    """The pool's load record in scenario ``sc`` (None when absent)."""
    if sc is None:
        return None
    return next((x for x in sc.pools if (x.region, x.tier, x.role) == (p.region, p.tier, p.role)), None)


def _growth_text(pl) -> str:
    """The load growth a pool absorbs before an SLO breaks, as +x%."""
    if pl is None or pl.growth_absorbed is None:
        return "-"
    g = pl.growth_absorbed
    return f">= +{g:.0%}" if g >= 99.0 - 1e-9 else (f"+{g:.2%}" if g < 0.01 else f"+{g:.1%}")


def _margin_line(plan: Plan) -> str:
    """The plan's demand-margin note, or the absorbed-growth summary when it has none."""
    note = next((d for d in plan.diagnostics if d.startswith("demand margin:")), None)
    least = min(((pl.growth_absorbed, sc.name, pl) for sc in plan.scenarios for pl in sc.pools if pl.growth_absorbed is not None),
                key=lambda x: (x[0], x[1]), default=None)
    tail = f" The least growth any pool absorbs: {_growth_text(least[2])} ({least[2].role}[{least[2].region},{least[2].tier}] in {least[1]})." if least else ""
    return escape(((note[0].upper() + note[1:]) if note else "Demand margin: not recorded in this plan.") + "." + tail)


def _usd(x: float | None, nd: int = 3) -> str:
    """A $ per 1M tokens figure, or 'withheld' (the plan's cost.per_1m_withheld says why)."""
    return "withheld" if x is None else f"{x:.{nd}f}"


def _op_text(op) -> str:
    """'B<=283 k=4 +7 handoffs': the batch cap, the draft length and the handoffs in flight it keeps decode KV for."""
    return (f"B<={op.batch_cap}" + (f" k={op.draft_tokens}" if op.draft_tokens else "")
            + (f" +{op.handoff_reserve_requests} handoff{'s' if op.handoff_reserve_requests != 1 else ''}" if op.handoff_reserve_requests else ""))


def _table(title: str) -> Table:
    return Table(title=title, title_justify="left")


def _tail_key(d: dict) -> str:
    """The tail percentile key of a latency dict ('p99' of {'p50', 'p99'}): the SLO's, which the
    dicts carry beside p50 (not the first key, which may be p50)."""
    keys = [k for k in d if k.startswith("p")]
    return max(keys, key=lambda k: float(k[1:])) if keys else "p99"


def _pred(sc, p, plan: Plan) -> str:
    if sc is None:
        return "-"
    pl = next((x for x in sc.pools if x.region == p.region and x.tier == p.tier and x.role == p.role), None)
    if pl is None:
        return "-"
    if pl.withheld:
        return f"withheld: {pl.withheld}"
    from fleetplan.results.loads import pct_text

    load = f"; load {pct_text(pl.pressure)}" if pl.pressure is not None else ""
    if p.role == "prefill":
        k = _tail_key(pl.ttft_ms)
        est = pl.ttft_estimate_ms
        e = f" (estimate {_f(est.get('p50'), 0)}/{_f(est.get(k), 0)})" if est else ""
        return f"TTFT p50/{k} {_f(pl.ttft_p50_ms, 0)}/{_f(pl.ttft_ms.get(k), 0)}{e} ms{load}"
    if p.role == "decode":
        op = p.decode_normal if sc.kind == "normal" else p.decode_failover
        if op is None:
            return load.lstrip("; ")
        k = _tail_key(op.tpot_ms)
        itl = f", ITL {k} {_f(op.itl_ms.get(k))}" if op.itl_ms.get(k) is not None else ""
        return f"TPOT p50/{k} {_f(op.tpot_p50_ms)}/{_f(op.tpot_ms.get(k))}{itl} ms; {_f(pl.occupancy, 0)} residents/slice{load}"
    k = _tail_key(pl.tpot_ms)
    kt = _tail_key(pl.ttft_ms)
    e = f" (estimate {_f(pl.ttft_estimate_ms.get(kt), 0)})" if pl.ttft_estimate_ms.get(kt) is not None else ""
    return f"TTFT {kt} {_f(pl.ttft_ms.get(kt), 0)}{e} ms, TPOT {k} {_f(pl.tpot_ms.get(k))} ms{load}"


def _worst(plan: Plan, p, records: dict) -> tuple[str, str]:
    """The scenario that sizes the pool -- the highest load over what its SLOs allow, a tie
    kept by scenario order -- from ``records`` (:func:`fleetplan.results.loads.sizing_records`
    of the plan's scenarios): the one Binding names and the margins are computed in (the table
    took the highest by 1e-12 and named another scenario than Binding for pools at 99.96% in
    several losses, with no margins shown)."""
    got = records.get((p.region, p.tier, p.role))
    if got is None:
        return "-", ""
    sc = next(s for s in plan.scenarios if s.name == got[0])
    return _pred(sc, p, plan), sc.name


LEGEND = (
    "Legend: lose:X@HH = region X lost at hour HH (UTC), one of the hours that dominate the others; load = the scenario's load "
    "over the most the pool carries within its SLOs (100% = sized exactly for it); TTFT = the sum of its components' percentiles (path, "
    "queue wait, compute, KV), an upper bound, with the percentile of their sum as the estimate (what a simulation measures and "
    "prefill pools are sized against); latencies of decode are at a full batch; residents/slice by Little's law; warm pool = "
    "weight-loaded idle slices that join pools in a region loss; shed = batch-class (sheddable) requests dropped in a loss; "
    "clamped = cold diverted prompts at or above the admission clamp's length, rejected fast (the stratified SLO); B<=n = "
    "batch cap, k = speculative draft length, +n handoffs = the handoffs in flight the decode slice keeps KV for beside the batch (p99)."
)


def render_comparison(a: Plan, b: Plan, b_name: str, a_name: str) -> None:
    t = Table(title=f"{a_name} vs {b_name}")
    for c in ("", a_name, b_name):
        t.add_column(c, justify="right")
    ca, cb = a.cost, b.cost
    rows = [
        ("status", a.status, b.status),
        ("chips", f"{ca.chips:,}", f"{cb.chips:,}"),
        ("prefill slices", str(sum(p.slices for p in a.pools if p.role == "prefill")), str(sum(p.slices for p in b.pools if p.role == "prefill"))),
        ("decode slices", str(sum(p.slices for p in a.pools if p.role == "decode")), str(sum(p.slices for p in b.pools if p.role == "decode"))),
        ("replicas", str(sum(p.slices for p in a.pools if p.role == "replica")), str(sum(p.slices for p in b.pools if p.role == "replica"))),
        ("fleet $/h", _f(ca.fleet_cost_per_hour_usd, 0), _f(cb.fleet_cost_per_hour_usd, 0)),
        ("$ / 1M output tokens (daily mean)", _usd(ca.cost_per_1m_output_tokens_usd), _usd(cb.cost_per_1m_output_tokens_usd)),
        ("$ / 1M output tokens (peak)", _usd(ca.cost_per_1m_output_tokens_at_peak_usd), _usd(cb.cost_per_1m_output_tokens_at_peak_usd)),
        ("checks failed", str(len(a.violations)), str(len(b.violations))),
    ]
    for r in rows:
        t.add_row(*r)
    console.print(t)
    if b.violations:
        by: dict[str, list] = {}
        for v in b.violations:
            by.setdefault(v.check, []).append(v)
        console.print(f"[bold]{escape(b_name)} fails[/]:")
        for check, vs in sorted(by.items()):
            console.print(f"  {check}: {len(vs)} finding(s), e.g. {escape(vs[0].where)}: {escape(vs[0].message)}")
    for dgn in b.diagnostics[:6]:
        console.print("  note: " + escape(dgn))


def render_input_comparison(plan: Plan, base: Plan | None, attribution, base_name: str) -> None:
    """How the plan moved from the base instance's plan, and which input moved it."""
    from fleetplan.workload.compare import figures

    if base is None:
        console.print(f"[bold red]the base instance {escape(base_name)} has no plan[/]: nothing to compare.")
        return
    a, b = figures(plan), figures(base)
    t = Table(title=f"This instance vs the base {escape(base_name)}", title_justify="left")
    for c in ("", "base", "this", "change"):
        t.add_column(c, justify="right")
    rows = [("chips", b.chips, a.chips, "{:,}"), ("pods", b.pods, a.pods, "{:,}"), ("prefill slices", b.prefill_slices, a.prefill_slices, "{:,}"),
            ("decode slices", b.decode_slices, a.decode_slices, "{:,}"), ("replicas", b.replicas, a.replicas, "{:,}"),
            ("fleet $/h", b.cost_per_hour_usd, a.cost_per_hour_usd, "{:,.0f}"),
            ("$ / 1M output tokens", b.usd_per_1m_output, a.usd_per_1m_output, "{:.3f}"),
            ("$ / 1M input+output tokens", b.usd_per_1m_blended, a.usd_per_1m_blended, "{:.4f}")]
    for name, x, y, f in rows:
        if x is None or y is None:  # a $ per 1M figure the plan withholds (it does not serve all the demand)
            t.add_row(name, "withheld" if x is None else f.format(x), "withheld" if y is None else f.format(y), "-")
            continue
        rel = f" ({(y - x) / x:+.1%})" if x else ""
        t.add_row(name, f.format(x), f.format(y), (("+" if y - x >= 0 else "") + f.format(y - x)) + rel)
    t.add_row("status", b.status, a.status, "")
    console.print(t)
    if not attribution:
        console.print("  the two instances have the same inputs.")
        return
    other = [x.group for x in attribution if x.group in ("model", "chips", "network", "regions")]
    if other:
        console.print(f"  [bold]note[/]: the base differs in {', '.join(other)}: it is another fleet, not the same fleet on other "
                      "inputs; the attribution below is only as meaningful as that comparison.")
    at = Table(title="Which input moved it: the base re-solved with each changed input alone", title_justify="left")
    for c in ("input", "change", "chips", "change in chips", "$ / 1M output", "change in $ / 1M output", "plan"):
        at.add_column(c, justify="left" if c in ("input", "change", "plan") else "right")
    total_chips, total_usd = 0.0, 0.0
    for x in attribution:
        if x.figures is None:
            at.add_row(escape(x.group), escape(x.description), "-", "-", "-", "-", escape(x.error or ""))
            continue
        dc = x.figures.chips - b.chips
        du = x.figures.usd_per_1m_output - b.usd_per_1m_output if None not in (x.figures.usd_per_1m_output, b.usd_per_1m_output) else None
        total_chips += dc
        total_usd = total_usd + du if (du is not None and total_usd is not None) else None
        state = x.figures.status + (f", gap {x.gap:.0%}" if x.gap is not None and x.gap > 0.05 else "")
        at.add_row(escape(x.group), escape(x.description), f"{x.figures.chips:,}", f"{dc:+,}", _usd(x.figures.usd_per_1m_output),
                   "-" if du is None else f"{du:+.3f}",
                   state if x.figures.status == "verified" and "gap" not in state else f"[bold yellow]{state}[/]")
    both = None not in (a.usd_per_1m_output, b.usd_per_1m_output)
    at.add_row("all together", "", f"{a.chips:,}", f"{a.chips - b.chips:+,}", _usd(a.usd_per_1m_output),
               f"{a.usd_per_1m_output - b.usd_per_1m_output:+.3f}" if both else "-", a.status)
    at.add_row("interaction", "together minus the sum alone", "", f"{a.chips - b.chips - total_chips:+,.0f}", "",
               f"{a.usd_per_1m_output - b.usd_per_1m_output - total_usd:+.3f}" if (both and total_usd is not None) else "-", "")
    console.print(at)
    if any(x.figures is not None and x.figures.status != "verified" for x in attribution):
        console.print("  an input that cannot be served alone (shortfall) has no cost of its own: its row is the incumbent of a plan that "
                      "leaves load unserved, and the interaction row absorbs the rest.")
    gaps = [g for g in [plan.solver.gap, base.solver.gap] + [x.gap for x in attribution if x.figures] if g is not None]
    if gaps:
        console.print(f"  each solve stops at its MIP gap (largest here {max(gaps):.2%}): moves smaller than that share of the cost are noise.")
