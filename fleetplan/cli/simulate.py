"""``fleetplan simulate``: run one region's planned pools in a discrete-event simulation
and set every measured latency beside the plan's prediction; ``--sweep-load`` draws the
TTFT-vs-utilisation curve from the simulation beside the queueing models."""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich import box
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fleetplan.cli.common import PhaseLines, fraction_parser, number_parser
from fleetplan.cli.common import check_distinct_outputs, check_output_path, console, emit_document, err_console, input_errors, load_json_document, plan_and_instance, violation_problems, write_atomic
from fleetplan.errors import InputError, Problem


def _v(x, unit: str = "") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else "-"
    if unit.startswith("fraction"):
        return f"{x:.1%}" if abs(x) >= 0.001 or x == 0 else f"{x:.3%}"
    a = abs(x)
    out = f"{x:,.0f}" if a >= 1000 else f"{x:,.1f}" if a >= 10 else f"{x:,.2f}"
    return out[1:] if out.startswith("-") and float(out.replace(",", "")) == 0 else out  # no '-0.00'


def _unit(u: str) -> str:
    return "%" if u.startswith("fraction") else u


def _ratio(r) -> str:
    """A ratio; more than TOLERANCE from 1 it is red and marked '!' (the mark survives a pipe)."""
    from fleetplan.sim.report import RATIO_TOLERANCE as TOLERANCE  # here, not at the top: --help stays light

    if r is None:
        return "-"
    s = f"{r:.2f}"
    return f"[bold red]{s}![/]" if abs(r - 1.0) > TOLERANCE else s


def _progress():
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                    console=err_console, transient=True)


@contextmanager
def _phases():
    """Progress on stderr: ``update(phase, fraction)``. A bar when stderr is a terminal;
    otherwise (a log file, CI, a pipe: the bar would print nothing) one line when a phase
    starts, with the wall time since the simulation began -- a whole region's sizing
    scenario runs for minutes."""
    if err_console.is_terminal:
        with _progress() as prog:
            tasks: dict[str, object] = {}

            def bar(phase: str, fraction: float, task: str = "simulating") -> None:
                if task not in tasks:
                    tasks[task] = prog.add_task(escape(task), total=1.0)
                prog.update(tasks[task], completed=fraction, description=escape(phase))

            yield bar
        return
    lines = PhaseLines("simulate")
    yield lambda phase, fraction, task="simulating": lines.update(phase)


def simulate_command(
    plan: Annotated[str, typer.Argument(help="Plan JSON written by `fleetplan solve -o plan.json`.")],
    region: Annotated[str, typer.Option("--region", "-r", help="Region whose pools to simulate.")],
    tier: Annotated[Optional[list[str]], typer.Option("--tier", "-t", help="Context tier to simulate (repeatable; default: every tier with pools in the region).")] = None,
    scenario: Annotated[str, typer.Option("--scenario", help="The scenario: 'normal' (each region at its own peak), a region loss at any hour such as 'lose:us-central@01' (an hour the plan does not list is built from the instance's loads that hour, the plan's failover routing held and the what-if's mitigations), or 'sizing' (per tier, the scenario that sizes its prefill or replica pool).")] = "normal",
    duration: Annotated[Optional[float], typer.Option("--duration", help="Simulated seconds of arrivals measured, after the warm-up (default 600; 120 per point with --sweep-load).", parser=number_parser("--duration", "seconds", "600 for 10 minutes"))] = None,
    warmup: Annotated[float, typer.Option("--warmup", help="Simulated seconds before the measurement window, excluded from the metrics (the pools start empty).", parser=number_parser("--warmup", "seconds", "30", least=0.0))] = 30.0,
    arrivals: Annotated[str, typer.Option("--arrivals", help="'poisson' at the plan's load, or 'trace:FILE': a request trace (azure, mooncake or csv; trace:sample:mooncake for the shipped one) whose timestamps are rescaled to the plan's rate (lengths stay the instance's).")] = "poisson",
    trace_format: Annotated[Optional[str], typer.Option("--trace-format", help="The trace's format: azure, mooncake or csv (default: detected from its first line).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Random seed: the same seed gives the same report, byte for byte.", min=0)] = 0,
    scale: Annotated[float, typer.Option("--scale", help="Simulate this fraction of the region's slices and load (0 < F <= 1): fast, and pessimistic for queueing (see docs/validation.md).", parser=fraction_parser("--scale", "a fraction of the slices and load"))] = 1.0,
    output_lengths: Annotated[Optional[str], typer.Option("--output-lengths", help="'fixed': every answer has the instance's mean output tokens; 'geometric': random with that mean; default: what the plan was sized for (its instance's workload.output_length_distribution).")] = None,
    router: Annotated[Optional[str], typer.Option("--router", help="How colocated replicas and prefill slices are picked: 'least-work' (the one that frees up first), 'round-robin', 'random' or 'prefix-aware' (to one holding the prefix of the request's SLO class, unless it queues more than the least-loaded plus the request's own prefill); default: the router the plan was sized for (its instance's serving.router).")] = None,
    placement: Annotated[Optional[str], typer.Option("--placement", help="Placement JSON (`fleetplan place -o`), or 'plan' for the plan's own pods (plan.pods): KV goes over ICI inside a pod and over the DCN between pods, as placed; the DCN share and its TTFT cost are measured beside the plan's prediction.")] = None,
    kv_routing: Annotated[Optional[str], typer.Option("--kv-routing", help="With --placement: 'placement' (the default for a placement file) routes KV by its weights -- in a region loss the scenario's when the placement carries them (a plan sized with its pods), else the normal peak's, held (a note says so); 'rule' (the only one for --placement plan) by the plan's rule on the placed pods at the scenario's load: each pod's decode slices take its prefill's KV up to their operating point's rate, the rest crosses.")] = None,
    instance: Annotated[Optional[str], typer.Option("--instance", "-i", help="Instance the plan was solved for; its hash must match (default: the one the plan carries, overlays applied; an older plan without one: the bundled instance it names).")] = None,
    sweep_load: Annotated[bool, typer.Option("--sweep-load", help="Instead: sweep the load of each tier's prefill (or replica) pool and draw TTFT vs utilisation beside Erlang C / M/G/c.")] = False,
    png: Annotated[Optional[str], typer.Option("--png", help="With --sweep-load: write the figure here (default sweep-REGION.png).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON instead of tables.")] = False,
    output: Annotated[Optional[str], typer.Option("-o", "--output", help="Also write the report as JSON to this file (atomically).")] = None,
    physics: Annotated[Optional[str], typer.Option("--physics", help="A plan whose instance has a physics: block: run with this source's step times (its name; default: the held source that binds the plan's pools in the region, printed; 'instance' only where the instance's own priors are a source); the model's predictions beside the metrics are under it too.")] = None,
) -> None:
    """Simulate a region's planned pools request by request and token by token; compare with the plan's predictions."""
    from fleetplan.sim.run import simulate

    with input_errors():
        if arrivals.startswith("trace:"):
            from fleetplan.samples import resolve

            arrivals = "trace:" + resolve(arrivals[6:])  # trace:sample:NAME names a shipped trace
        pl, inst = plan_and_instance(plan, instance, contents=True)
        if physics is not None:
            from fleetplan.instance.physics import physics_instance

            physics_instance(inst, physics)  # an unknown source: exit 2 naming --physics, before any work
        elif inst.physics is not None:  # the plan's binding source for the region, said
            from fleetplan.instance.physics import default_source

            physics = default_source(inst, pl, region)
            err_console.print(f"physics: source {escape(physics)} (the held source binding the plan's pools in {escape(region)}; "
                              "--physics NAME runs another)", soft_wrap=True)
        if router is None:  # simulate the routing the plan was sized for
            router = pl.router or inst.serving.router
        if output_lengths is None:  # and the answer lengths
            output_lengths = inst.workload.output_length_distribution
        placed = _placement(placement, inst, pl) if placement else None
        if kv_routing is None:
            kv_routing = "rule" if placement == "plan" else "placement"
        elif placement == "plan" and kv_routing != "rule":
            raise InputError("--kv-routing", [Problem("--kv-routing", "with --placement plan the KV follows the plan's rule ('rule'): the plan's "
                                                                      "pods carry no routing weights.", repr(kv_routing))])
        if duration is not None and not (math.isfinite(duration) and duration > 0):
            raise InputError("--duration", [Problem("--duration", "must be a positive number of simulated seconds.", repr(duration))])
        inputs = (plan, instance or "", placement if placement not in (None, "plan") else "", arrivals[6:] if arrivals.startswith("trace:") else "")
        if output is not None:
            check_output_path(output, inputs, "the report")
        if sweep_load:
            png_path = _sweep_figure_path(png, region, inputs, output)
        elif png is not None:
            raise InputError("--png", [Problem("--png", "draws the --sweep-load figure; add --sweep-load.")])
        if placement and scale < 1.0:
            raise InputError("--placement", [Problem("--placement", "needs --scale 1: a scaled pool does not have the placement's pods and KV routes.")])
        from fleetplan.sim.run import check_options

        check_options(1.0, 0.0, "poisson", "fixed", "least-work", None, kv_routing, placement is not None)
    dur = duration if duration is not None else (120.0 if sweep_load else 600.0)
    t0 = time.perf_counter()
    if sweep_load:
        if inst.physics is not None:  # one source's step times (the binding source unless --physics names one)
            from fleetplan.instance.physics import physics_instance

            inst = physics_instance(inst, physics)
        _sweep(inst, pl, region, tier, scenario, dur, warmup, arrivals, trace_format, seed, scale, output_lengths, router, placed, placement, png_path,
               json_out, output, kv_routing)
        return
    with input_errors(), _phases() as update:
        rep = simulate(inst, pl, region, list(tier) if tier else None, scenario, dur, warmup, arrivals, seed, scale, output_lengths, router,
                       placed, progress=update, trace_format=trace_format, placement_path=placement, kv_routing=kv_routing, physics=physics)
    wall = time.perf_counter() - t0
    if emit_document(rep.model_dump(), output, json_out):
        return
    _print(rep, wall)
    if output is not None:
        console.print(f"report written to {escape(output)}")


def _placement(path: str, inst, plan):
    from fleetplan.placement.check import verify_placement
    from fleetplan.placement.document import Placement, plan_hash
    from fleetplan.sim.dcn import PLAN_PODS, plan_pods

    if path == PLAN_PODS:
        if plan.pods is None:
            raise InputError("--placement", [Problem("--placement", "'plan' simulates the plan's own pods, and this plan was sized without "
                                                                    "them (placement.size_with_pods false, or its pod stage found no plan: its notes say): give a placement file "
                                                                    "(`fleetplan place PLAN -o placement.json`).")])
        return plan_pods(plan)
    placed = load_json_document(path, Placement, "placement", "fleetplan place PLAN -o placement.json")
    if placed.plan_hash != plan_hash(plan):
        raise InputError(path, [Problem("plan_hash", "the placement was made for another plan; place this plan first (`fleetplan place PLAN -o`).")])
    broken = verify_placement(inst, plan, placed)
    if broken:
        raise InputError(path, violation_problems(broken))
    return placed


def _print(rep, wall: float) -> None:
    from fleetplan.sim.report import RATIO_TOLERANCE as TOLERANCE

    console.rule(f"[bold]simulation of {escape(rep.instance_name)}, region {escape(rep.region)}, scenario {escape(rep.scenario)}")
    console.print(f"{rep.duration_s:,.0f} s measured after a {rep.warmup_s:,.0f} s warm-up; arrivals {escape(rep.arrivals)}; output lengths "
                  f"{rep.output_lengths}; seed {rep.seed}; scale {rep.scale:g}; {wall:.1f} s of wall time")
    for t in rep.tiers:
        console.print()
        good = f"{t.goodput:.2%}" if t.goodput is not None else "-"
        per = ", ".join(f"{escape(k)} {v:.2%}" for k, v in t.goodput_by_class.items())
        console.print(f"[bold]{escape(t.region)} {escape(t.tier)}[/] ({escape(t.scenario)}): {t.load_rps:,.1f} req/s offered at the gateway, "
                      f"{t.arrived_rps:,.1f} arrived in the window; {t.requests:,} request{'s' if t.requests != 1 else ''}: {t.admitted:,} served, "
                      f"{t.rejected_admission:,} rejected by admission control, {t.clamped:,} clamped, {t.shed:,} shed. Goodput {good}"
                      + (f" ({per})" if per else "") + ": of the SLO-class requests served or rejected by admission control (clamped and shed "
                      "left out), the share served within both their TTFT and TPOT limits.")
        for p in t.pools:
            tab = Table(title=f"{p.role}: {p.slices} x {escape(p.slice)}" + (f" (of {p.slices_planned} planned)" if p.slices != p.slices_planned else ""),
                        title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
            for c in ("metric", "unit", "simulated", "95% interval", "plan", "plan bound", "model here", "M/M/c", "sim/plan", "sim/model"):
                tab.add_column(c, justify="left" if c in ("metric", "unit") else "right", overflow="fold")
            for m in p.metrics:
                ci = f"[{_v(m.ci95[0], m.unit)}, {_v(m.ci95[1], m.unit)}]" if m.ci95 else "-"
                tab.add_row(escape(m.name), escape(_unit(m.unit)), _v(m.simulated, m.unit), ci, _v(m.plan, m.unit), _v(m.plan_bound, m.unit),
                            _v(m.model, m.unit), _v(m.model_mmc, m.unit), _ratio(m.ratio_plan), _ratio(m.ratio_model))
            console.print(tab)
            if p.role == "prefill" and t.dcn is not None:
                console.print(_dcn_line(t, p, rep.placement == "plan"))
        for n in t.notes:
            console.print(f"[yellow]note:[/] {escape(n)}")
    for n in rep.notes:
        console.print(f"[yellow]note:[/] {escape(n)}")
    if any(p.role == "replica" for t in rep.tiers for p in t.pools):
        console.print("Replicas: 'model here' is the pool's schedule (perf.colocated) with its prompts queued M/G/c over the replicas "
                      "(--router least-work) or M/G/1 per replica (--router random); TPOT over the occupancy distribution.")
    console.print(f"Columns: plan = the plan's estimate for the whole pool in this scenario (TTFT: the percentile of the sum of path, queue wait "
                  f"and compute; TPOT: at the occupancy the load reaches); plan bound = the plan's bound (TTFT: the sum of those "
                  f"components' percentiles, above the estimate prefill pools are sized against; TPOT and ITL: at a full batch); model here = the closed-form estimate at the simulated slices and load "
                  f"(queues M/G/c, Allen-Cunneen); M/M/c = the same with exponential service (Erlang C); ratios are simulated / plan and "
                  f"simulated / model, marked ! and red when more than {TOLERANCE:.0%} from 1 (docs/validation.md explains where and why).")


def _dcn_line(t, pool, plan_pods: bool = False) -> str:
    """The DCN summary under a prefill table run with a placement (``plan_pods``: the plan's own pods)."""
    d = t.dcn
    row = next((m for m in pool.metrics if m.key == "dcn_share"), None)
    cost = next((m for m in pool.metrics if m.key == "ttft_dcn_cost_p99_ms"), None)
    how = {"placement": "the placement's routing weights", "placement-normal": "the placement's normal-peak weights, held in this scenario",
           "rule": "the plan's rule on the plan's pods" if plan_pods else "the plan's rule on the placed pods"}[d.routing]
    got = f"{d.crossed:,} of {d.prefilled:,} requests prefilled ({_v(row.simulated, 'fraction') if row else '-'})"
    plan = f"the plan predicts {_v(row.plan, 'fraction')}" + (f" (sim/plan {_ratio(row.ratio_plan)})" if row.ratio_plan is not None else "") \
        if row is not None and row.plan is not None else "the plan predicts none (sized without pods)"
    parts = [f"[bold]KV over the DCN[/]: {got}; {plan}; routed by {how}, which send {_v(d.routed_share, 'fraction')}"]
    if d.rule_share is not None and not plan_pods:
        parts.append(f"the plan's rule on the placed pods gives {_v(d.rule_share, 'fraction')}")
    if d.pods_differing:
        parts.append(f"{d.pods_differing:,} pod{'s' if d.pods_differing != 1 else ''} hold this tier's slices unlike the plan's pods")
    if cost is not None and cost.simulated is not None:
        parts.append(f"TTFT p99 the DCN adds: {_v(cost.simulated, 'ms')} ms simulated, {_v(cost.plan, 'ms')} ms in the plan")
    if d.decode_elsewhere:
        parts.append(f"{d.decode_elsewhere:,} ({d.decode_elsewhere / max(d.prefilled, 1):.1%}) joined a decode slice outside the pod their KV went to")
    return "; ".join(parts) + "."


def _sweep_figure_path(png: str | None, region: str, inputs: tuple[str, ...], output: str | None) -> str:
    """The --png path of a sweep (default sweep-REGION.png), refused before any work when
    it is empty, not writable, an input, the -o file, or not .png or .svg."""
    from fleetplan.sim.sweep import FIGURE_SUFFIXES

    path = f"sweep-{region}.png" if png is None else png
    check_output_path(path, inputs, "the figure", option="--png")
    check_distinct_outputs({"--png": path, "-o": output}, "the report")
    suffix = Path(path).suffix.lower()
    if suffix not in FIGURE_SUFFIXES:
        raise InputError(path, [Problem("--png", f"the figure is written as {' or '.join(FIGURE_SUFFIXES)}; give a file name ending in one of "
                                                 f"them (this one ends in {repr(suffix) if suffix else 'no suffix'}).")])
    return path


def _sweep(inst, pl, region, tier, scenario, dur, warmup, arrivals, trace_format, seed, scale, output_lengths, router, placed, placement, png_path,
           json_out, output, kv_routing="placement"):
    from fleetplan import __version__
    from fleetplan.instance.io import instance_hash
    from fleetplan.placement.document import plan_hash
    from fleetplan.sim import arrivals as arr
    from fleetplan.sim.run import check_options, resolve_scenarios
    from fleetplan.sim.setup import tier_setups
    from fleetplan.sim.sweep import load_sweep, plan_marks, sweep_figure, sweep_report, tpot_crossing

    with input_errors():
        check_options(dur, warmup, arrivals, output_lengths, router, trace_format)
        trace = arr.read_trace_times(arrivals[6:], trace_format) if arrivals.startswith("trace:") else None
        todo = resolve_scenarios(inst, pl, region, list(tier) if tier else None, scenario)
        setups = []
        for t, sc in todo:
            setups += tier_setups(inst, pl, region, [t], sc, scale, placed, kv_routing=kv_routing)
    sweeps = []
    with input_errors(), _phases() as update:
        for su in setups:
            name = f"{su.tier}: sweeping the load"
            update(name, 0.0, name)
            sweeps.append(load_sweep(inst, su, plan_marks(inst, pl, su, placed), duration_s=dur, warmup_s=warmup, seed=seed, trace=trace,
                                     output_lengths=output_lengths, router=router,
                                     progress=lambda f, name=name: update(f"{name}, {f:.0%} of the points done" if f < 1 else name, f, name)))
    title = (f"{inst.name}: simulated TTFT vs utilisation ({dur:,.0f} s per point, seed {seed}" + (f", scale {scale:g}" if scale < 1 else "")
             + (f", arrivals {Path(arrivals[6:]).name}" if trace is not None else "") + ")")
    with input_errors():
        write_atomic(png_path, sweep_figure(sweeps, title, Path(png_path).suffix.lower().lstrip(".")))
    from fleetplan.workload.traces import file_sha256

    doc = sweep_report(sweeps, fleetplan_version=__version__, instance_name=inst.name, instance_hash=instance_hash(inst), plan_hash=plan_hash(pl),
                       region=region, scenario=scenario, duration_s=dur, warmup_s=warmup, seed=seed, scale=scale, arrivals=arrivals,
                       trace_format=trace.fmt if trace is not None else None, trace_sha256=file_sha256(trace.path) if trace is not None else None,
                       output_lengths=output_lengths, router=router, placement=placement, figure=png_path).model_dump()
    if emit_document(doc, output, json_out):
        return
    for s in sweeps:
        p = f"p{s.percentile:g}"
        unit = "replicas" if s.role == "replica" else "slices"
        bound = "plan bound" if s.scale >= 1.0 else f"bound at {s.slices}"
        tab = Table(title=f"{escape(s.region)} {escape(s.tier)} {s.role}: {s.slices} x {escape(s.slice)}"
                          + (f" (of {s.slices_planned} planned)" if s.scale < 1.0 else "")
                          + (f", {s.schedule} schedule" if s.role == "replica" and s.schedule else "")
                          + (f", {s.router} routing" if s.router else "")
                          + f", TTFT and queue wait {p} vs utilisation (service C_s^2 {s.cs2:.2f}; admission control off)",
                    title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        # a pool's model wait follows its router: least-work pools the prompts over the replicas or
        # slices (M/G/c), a load-blind router gives each its own queue (G/G/1); no M/M curve is defined for replicas
        single = s.router not in (None, "least-work")
        g, m = ((("G/G/1" if single else "M/G/c") + " model", "M/M (n/a)") if s.role == "replica" else
                ("G/G/1 per slice", "M/M/1 per slice") if single else ("M/G/c", "M/M/c"))
        tp = f"p{s.tpot_percentile:g}" if s.role == "replica" and s.tpot_percentile is not None else None
        for c in ("target", "measured", "queue", "req/s", f"sim TTFT {p} ms", "model", m, bound, f"sim wait {p} ms", g, m + " ",
                  "sim/model TTFT", *((f"sim TPOT {tp} ms", "model ", "sim/model TPOT") if tp else ())):
            tab.add_column(c, justify="right")
        for pt in s.points:
            r = pt.ttft_ms / pt.model_ttft_ms if pt.model_ttft_ms else None
            state = ("sat." if pt.saturated else "over." if pt.overloaded else "at cap." if pt.near_capacity else "unsettled" if not pt.settled
                     else "steady")
            low = "" if pt.stationary else ">="  # not stationary: a lower bound
            tab.add_row(f"{pt.target_utilisation:.1%}", f"{pt.utilisation:.1%}", state, f"{pt.rps:,.1f}", low + _v(pt.ttft_ms),
                        _v(pt.model_ttft_ms), _v(pt.mmc_ttft_ms), _v(pt.bound_ttft_ms), low + _v(pt.wait_ms), _v(pt.model_wait_ms), _v(pt.mmc_wait_ms),
                        _ratio(r) if pt.stationary else "-",
                        *((low + _v(pt.tpot_ms), _v(pt.model_tpot_ms),
                           _ratio(pt.tpot_ms / pt.model_tpot_ms) if pt.stationary and pt.model_tpot_ms and math.isfinite(pt.model_tpot_ms) else "-")
                          if tp else ()))
        console.print(tab)
        console.print("queue: steady = settled and stationary; sat. = saturated, its wait grew through the window (the last third of its "
                      "requests waited significantly longer than the first), so its TTFT and wait grow with --duration; over. = overloaded, offered above the capacity the saturated "
                      "points measured, at cap. = within its margin (see the note); unsettled = the window is shorter than three of the queue's relaxation times, 1 / (c mu (1 - sqrt rho))^2. '>=' marks the values of "
                      "the points that are not steady: a pool that starts empty only fills, so they are lower bounds.")
        for n_ in s.notes:
            console.print(f"[yellow]note:[/] {escape(n_)}")
        if s.limit_ms:
            console.print(f"SLO: TTFT {p} <= {s.limit_ms:g} ms. " + _crossing(s, unit))
        if tp and tpot_crossing(s):
            console.print(tpot_crossing(s))
        if tp:
            console.print(f"TPOT {tp}: the SLO-class requests' simulated TPOT and the colocated model's at each load (over the occupancy "
                          "distribution, perf.colocated); a replica's TPOT rises with its prefill share, so either SLO can bind.")
    replicas = any(s.role == "replica" for s in sweeps)
    console.print("Utilisation: target = the load offered (load x mean service / slices), measured = the simulated busy fraction. model = the percentile of the sum of path, "
                  + ("the pool's schedule (perf.colocated) with its prompts' wait M/G/c over the replicas under least-work routing, "
                     "M/G/1 per replica under random routing (as each table's title router says)" if replicas else "M/G/c wait")
                  + " and compute; plan bound = the sum of their percentiles (an upper bound; prefill pools are sized against the percentile of the sum"
                  + ("; with --scale < 1 at the simulated slices" if any(s.scale < 1.0 for s in sweeps) else "") + ").")
    console.print(f"figure written to {escape(png_path)}")


def _crossing(s, unit: str = "slices") -> str:
    """Where the bound, the model and the simulation cross the SLO limit, in words."""
    top = float(s.grid[-1])
    swept = max(p.target_utilisation for p in s.points)
    parts = []
    for c in s.crossings:
        if c.curve == "simulation":
            if c.utilisation is not None:
                parts.append(f"the simulation at {c.utilisation:.1%} (between its stationary points at {c.lower:.0%} and {c.upper:.0%})")
            elif c.upper is None:
                parts.append(f"the simulation stays under it at every point swept (up to {swept:.0%} offered)" if c.lower == swept else
                             f"the simulation stays under it at every point that settled (to {c.lower:.0%} offered); above that the "
                             f"{s.duration_s or 0:,.0f} s window is too short to say: lengthen --duration" if c.lower is not None else
                             f"no simulated point settled under it and none measured above it: the {s.duration_s or 0:,.0f} s window is too "
                             "short to say; lengthen --duration")
            elif c.lower is None:
                first = min(p.target_utilisation for p in s.points)
                parts.append(f"the simulation is above it from the first point swept ({c.upper:.0%} offered)" if c.upper == first else
                             f"the simulation at or below {c.upper:.0%} offered (the first point above it; none below it settled)")
            else:
                between = [p for p in s.points if c.lower < p.target_utilisation < c.upper]
                above = next(p for p in s.points if p.target_utilisation == c.upper)
                groups: dict[str, list[str]] = {}
                for q in between:
                    k = "saturated" if q.saturated else "at the pool's measured capacity" if q.near_capacity else "did not settle in the window"
                    groups.setdefault(k, []).append(f"{q.target_utilisation:.0%}")
                why = ("between them " + "; ".join(f"{', '.join(us)} " + (k if k.startswith("did") else ("is " if len(us) == 1 else "are ") + k)
                                                   for k, us in groups.items())
                       + (", so their values are only lower bounds" if len(between) > 1 else ", so its value is only a lower bound") if between else
                       f"the point at {c.upper:.0%} " + ("is saturated (its queue grew through the window)" if above.saturated else
                                                         "is above the pool's measured capacity" if above.overloaded else
                                                         "is at the pool's measured capacity" if above.near_capacity else
                                                         "did not settle in the window") + ", so its value is only a lower bound")
                parts.append(f"the simulation between {c.lower:.0%} (the last stationary point under it) and {c.upper:.0%} offered (the first "
                             f"point above it), not interpolated: {why}")
            continue
        name = {"bound": "the plan's bound" if s.scale >= 1.0 else f"the bound at the {s.slices} {unit} simulated",
                "bound full scale": f"the plan's bound at its {c.slices} {unit}", "model": "the model (percentile of the sum)"}[c.curve]
        if c.utilisation is not None:
            parts.append(f"{name} reaches it at {c.utilisation:.1%} offered")
        elif c.upper is None:
            parts.append(f"{name} stays under it on the whole curve (to {top:.1%})")
        else:
            parts.append(f"{name} is above it from {c.upper:.1%}")
    text = "; ".join(parts) + "."
    return text[:1].upper() + text[1:]
