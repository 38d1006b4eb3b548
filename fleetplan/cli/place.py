"""``fleetplan place``, ``fleetplan export`` and ``fleetplan diff``: slices into pods,
the controller document, and the moves between two placements."""

from __future__ import annotations

import os
import time

from typing import Annotated, Optional

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from fleetplan.cli.common import fraction_parser, seconds_parser
from fleetplan.cli.common import (EXIT_INFEASIBLE, check_output_path, console, dumps_json, err_console, input_errors, load_json_document,
                                  plan_and_instance, print_json, violation_problems, write_atomic)
from fleetplan.errors import InputError, Problem
from fleetplan.export.k8s.common import DEFAULT_ICI_DOMAIN_LABEL, DEFAULT_NAMESPACE, DEFAULT_PROMETHEUS_URL

MADE_BY = "fleetplan place PLAN -o placement.json"


def place_command(
    plan: Annotated[str, typer.Argument(help="Plan JSON written by `fleetplan solve -o plan.json`.")],
    output: Annotated[Optional[str], typer.Option("-o", "--output", help="Write the placement as JSON (atomically).")] = None,
    current: Annotated[Optional[str], typer.Option("--current", help="The placement in force: re-place moving as few slices as possible.")] = None,
    dcn_slack: Annotated[float, typer.Option("--dcn-slack", help="Only with --current: DCN share (fraction of requests) the placement may give up to avoid moves.", parser=fraction_parser("--dcn-slack"))] = 0.01,
    instance: Annotated[Optional[str], typer.Option("--instance", "-i", help="Instance the plan was solved for; its hash must match (default: the one the plan carries, overlays applied; an older plan without one: the bundled instance it names).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the placement as JSON.")] = False,
    time_limit: Annotated[Optional[float], typer.Option("--time-limit", parser=seconds_parser("--time-limit"), help="Wall-clock limit of the whole command from its start (seconds; "
                                                           "default none: each solve stage of a region has 60 s). A stage cut by it keeps the "
                                                           "placement it has (the notes say so); exit 3 when one has none yet.")] = None,
) -> None:
    """Place every slice of a plan into a pod (ICI domain) and whole VMs, keeping prefill->decode KV off the DCN."""
    from fleetplan.deadline import TimeLimitReached, check, command_start, deadline_scope, phase

    started = command_start()
    import pyomo.environ  # noqa: F401

    from fleetplan.placement import PlacementTimeLimit, place
    from fleetplan.results.placement import Placement, current_placement_problems, verify_placement

    try:
        # the plan's checks (its records rebuilt from the instance: seconds on a 20-region plan) count against
        # --time-limit too, and stop at its deadline (issue 39: 5.8 s for --time-limit 1)
        with input_errors(), deadline_scope(None if time_limit is None else started + time_limit), \
                phase("checking the plan against its instance (its records rebuilt)"):
            check("starting up (imports)")
            pl, inst = plan_and_instance(plan, instance)
            cur = load_json_document(current, Placement, "placement", MADE_BY) if current else None
            if cur is not None:
                broken = current_placement_problems(inst, cur)
                if broken:
                    raise InputError(current, violation_problems(broken))
            if output is not None:
                check_output_path(output, (plan, current or ""), "the placement")
            check()  # the checks' own work may be cached and never reach a check inside them
    except TimeLimitReached as e:
        _out_of_time(str(e), time_limit, started, output)
    from fleetplan.placement import PlacementInfeasible
    from fleetplan.results.plan import status_note

    if pl.pods is not None and dcn_slack != 0.01:
        err_console.print("[yellow]note:[/] --dcn-slack applies only to a plan sized without its pods (this plan's pods fix the counts per "
                          "pod); ignored.")
    elif current is None and dcn_slack != 0.01:
        err_console.print("[yellow]note:[/] --dcn-slack applies only with --current (placing from scratch minimises the DCN share exactly); ignored.")

    note = status_note(pl)
    if note is not None:
        err_console.print(f"[bold yellow]warning:[/] {escape(note)}; its slices are placed as they are (the placement's notes say so too).")
    try:
        with err_console.status("placing", spinner="dots") as st:
            placement = place(inst, pl, current=cur, dcn_slack=dcn_slack, progress=lambda m: st.update(escape(m)),
                              deadline=None if time_limit is None else started + time_limit)
    except PlacementInfeasible as e:
        err_console.print(f"[bold red]no placement:[/] {escape(str(e))}")
        raise typer.Exit(EXIT_INFEASIBLE) from None
    except InputError as e:  # a plan whose pods do not hold its slices (an edited plan)
        with input_errors():
            raise InputError(plan, e.problems) from None
    except PlacementTimeLimit as e:
        _out_of_time(str(e), time_limit, started, output)
    bad = verify_placement(inst, pl, placement)
    if output is not None and not bad:
        with input_errors():
            write_atomic(output, dumps_json(placement.model_dump(mode="json")))
    if json_out:
        print_json(placement.model_dump(mode="json"))
    else:
        _print_placement(placement, bad, inst.placement.dcn_share_max)
        if output is not None and not bad:
            console.print(f"placement written to {escape(output)}")
    if bad:
        raise typer.Exit(EXIT_INFEASIBLE)


def _out_of_time(what: str, time_limit: float, started: float, output: str | None) -> None:
    """``place --time-limit`` passed (``what``: while or before which step) with no placement: exit 3, -o as it was."""
    err_console.print(f"[bold red]no placement:[/] {escape(what)} (--time-limit {time_limit:g} s of wall clock from the command's start; "
                      f"{time.monotonic() - started:.1f} s have passed); raise --time-limit"
                      + (f", {escape(output)} left as it was." if output and os.path.exists(output) else "; nothing written."), soft_wrap=True)
    raise typer.Exit(EXIT_INFEASIBLE) from None


def _print_placement(pl, bad, overall: float = 0.05) -> None:
    console.rule(f"[bold]placement of {escape(pl.instance_name)}")
    tab = Table(title="pods (ICI domains)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for c in ("region", "chip", "pods", "used", "chips used", "slices by pool"):
        tab.add_column(c, justify="left" if c in ("region", "chip", "slices by pool") else "right", overflow="fold")
    groups: dict[tuple, list] = {}
    for p in pl.pods:
        groups.setdefault((p.region, p.chip), []).append(p)
    for (r, k), pods in groups.items():
        ids = {p.id for p in pods}
        per: dict[str, int] = {}
        for s in pl.slices:
            if s.pod in ids:
                key = f"{s.tier + ' ' if s.tier else ''}{s.role} {s.slice}"
                per[key] = per.get(key, 0) + 1
        used = [p for p in pods if p.chips_used > 0]
        tab.add_row(r, k, str(len(pods)), str(len(used)), f"{sum(p.chips_used for p in pods):,} / {sum(p.chips for p in pods):,}",
                    ", ".join(f"{k2} x{n}" for k2, n in sorted(per.items())))
    console.print(tab)
    if pl.dcn is not None:
        _print_dcn(pl, overall)
    elif pl.dcn_share_by_tier:
        t2 = Table(title="KV traffic crossing the DCN (share of the tier's requests at the normal peak)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for c in ("region/tier", "DCN share"):
            t2.add_column(c, justify="left" if c == "region/tier" else "right")
        for k, v in sorted(pl.dcn_share_by_tier.items()):
            t2.add_row(k, f"[bold red]{v:.1%}[/]" if v > 0.05 else f"{v:.1%}")
        console.print(t2)
        over = pl.dcn_share > 0.05
        tiers_over = sorted(k for k, v in pl.dcn_share_by_tier.items() if v > 0.05)
        console.print("DCN share overall: " + (f"[bold red]{pl.dcn_share:.2%}[/], above" if over else f"{pl.dcn_share:.2%}, within")
                      + " the 5% ceiling of the brief (section 5)" + (" -- see the notes for why" if over else "")
                      + (f"; [bold red]{len(tiers_over)} region-tier(s) above 5%[/] ({', '.join(tiers_over)}: see the notes)"
                         if tiers_over and not over else ""))
    else:
        console.print("no prefill -> decode KV traffic (colocated replicas)")
    console.print(f"pods used {pl.pods_used} of {len(pl.pods)}; free chips outside whole aligned blocks of the largest slice shape "
                  f"(unusable for it) {pl.fragmented_free_chips}" + (f"; {pl.moves} slices moved to another pod" if pl.moves is not None else ""))
    for n in pl.notes:
        console.print(f"[yellow]note:[/] {escape(n)}")
    if bad:
        console.print(f"[bold red]the independent check found {len(bad)} problem(s):[/]")
        for v in bad[:20]:
            console.print(f"  {escape(v.check)} {escape(v.where)}: {escape(v.message)}")
    elif pl.scenarios is not None:
        console.print(f"[green]checked[/]: every slice placed once, inside one pod on whole adjacent VMs, no pod over its chips; in each of the "
                      f"plan's {len(pl.scenarios)} scenarios the warm slices the plan adds join their pools, the routing carries every "
                      "tier's load to decode capacity (shares sum to 1), each tier's DCN share is within its ceiling "
                      + ("(or above it where the plan declares the overage, its TTFT sized for every request crossing) "
                         if any(x.sized_for is not None and x.sized_for > x.dcn_share_max for x in pl.dcn or []) else "")
                      + "and each pod's DCN egress within its capacity.")
    else:
        console.print("[green]checked[/]: every slice placed once, inside one pod on whole adjacent VMs, no pod over its chips, routing sums to 1.")


def _print_dcn(pl, overall: float = 0.05) -> None:
    """The DCN shares of a placement of a plan sized with its pods: per region x tier at the
    normal peak and in the worst region loss, beside the ceiling and the plan's prediction;
    per region its share over all tiers where above ``overall`` (placement.dcn_share_max)."""
    t2 = Table(title="KV crossing the DCN (share of the tier's requests; the plan's prediction in brackets: it counts every warm prefill "
                     "slice as crossing)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for c in ("region/tier", "ceiling", "normal peak", "worst region loss", "scenario"):
        t2.add_column(c, justify="left" if c in ("region/tier", "scenario") else "right")

    def cell(v, plan_v, ceiling):
        if v is None:
            return "-"
        txt = f"{v:.2%}" + (f" ({plan_v:.2%})" if plan_v is not None else "")
        return f"[bold red]{txt}[/]" if v > ceiling + 1e-9 else txt

    for x in pl.dcn:
        ceiling = f"{x.dcn_share_max:.2%}"
        ceiling += " (over, declared)" if x.sized_for is not None and x.sized_for > x.dcn_share_max else ""
        t2.add_row(f"{x.region}/{x.tier}", ceiling, cell(x.normal, x.plan_normal, x.dcn_share_max),
                   cell(x.worst_loss, x.plan_worst_loss, x.dcn_share_max), escape(x.worst_loss_scenario or "-"))
    console.print(t2)
    over = [x for x in pl.dcn if max(x.normal, x.worst_loss or 0.0) > x.dcn_share_max + 1e-9]
    joins = sum(len(s.warm) for s in pl.scenarios or [])
    region: dict[str, tuple[float, str]] = {}
    for sc in pl.scenarios or []:
        tot: dict[str, list[float]] = {}
        for x in sc.tiers:
            acc = tot.setdefault(x.region, [0.0, 0.0])
            acc[0] += x.kv_out_rps
            acc[1] += x.rps
        for r, (x, n) in tot.items():
            if n > 0 and x / n > region.get(r, (-1.0, ""))[0]:
                region[r] = (x / n, sc.scenario)
    above = {r: v for r, v in sorted(region.items()) if v[0] > overall + 1e-9}
    if above:
        console.print(f"[bold red]region share over all tiers above the overall ceiling[/] ({overall:.1%}, placement.dcn_share_max): "
                      + ", ".join(f"{r} {v:.2%} in {escape(name)}" for r, (v, name) in above.items())
                      + " (declared by the plan where a tier's own ceiling is above the overall one: plan.dcn[].why)")
    console.print(f"DCN share overall at the normal peak: {pl.dcn_share:.2%}; "
                  + (f"[bold red]{len(over)} region-tier(s) above their ceiling[/] (see the notes)" if over else
                     "every tier within its ceiling at the normal peak and in every region loss")
                  + f"; {joins} warm-slice joins placed over the {sum(1 for s in pl.scenarios or [] if s.kind == 'loss')} region-loss scenarios "
                  "(placement.json: scenarios[].warm)")


def export_command(
    placement: Annotated[str, typer.Argument(help="Placement JSON written by `fleetplan place PLAN -o placement.json`.")],
    plan: Annotated[str, typer.Option("--plan", help="The plan the placement was made from.")],
    fmt: Annotated[str, typer.Option("--format", help="controller (fleetplan's JSON document), or for Kubernetes: k8s (workloads and "
                                                      "routing), keda (autoscalers), prometheus (rule files) or all.")] = "controller",
    output: Annotated[Optional[str], typer.Option("-o", "--output", metavar="FILE|DIR", help="controller: write the document to this file (atomically) instead "
                                                                        "of stdout. Kubernetes formats: the directory to write (created, or "
                                                                        "an earlier export replaced, atomically).")] = None,
    instance: Annotated[Optional[str], typer.Option("--instance", "-i", help="Instance the plan was solved for; its hash must match (default: the one the plan carries, overlays applied; an older plan without one: the bundled instance it names).")] = None,
    workload: Annotated[str, typer.Option("--workload", help="Kubernetes: leaderworkerset (one object per pool and ICI domain) or "
                                                            "disaggregatedset (one per ICI-domain prefill-decode unit).")] = "leaderworkerset",
    scaler: Annotated[str, typer.Option("--scaler", help="Kubernetes: the autoscaler --format keda writes: keda (ScaledObjects with hourly "
                                                        "floors) or hpa (autoscaling/v2 via prometheus-adapter).")] = "keda",
    engine: Annotated[str, typer.Option("--engine", help="Kubernetes: the serving engine whose metric names and flags to use (vllm: "
                                                        "vLLM 0.11 or later).")] = "vllm",
    ici_domain_label: Annotated[str, typer.Option("--ici-domain-label", help="Kubernetes: the node label whose value names a placement "
                                                                            "pod (ICI domain); label each pod's nodes with it.")] = DEFAULT_ICI_DOMAIN_LABEL,
    namespace: Annotated[str, typer.Option("--namespace", help="Kubernetes: the namespace of every object.")] = DEFAULT_NAMESPACE,
    prometheus_url: Annotated[str, typer.Option("--prometheus-url", help="Kubernetes: the Prometheus the autoscalers query.")] = DEFAULT_PROMETHEUS_URL,
) -> None:
    """Export a placement: the serving controller's JSON document (schema in docs/controller-schema.json), or the Kubernetes objects, autoscalers and Prometheus rules of the placed fleet (docs/controller.md)."""
    from fleetplan.export.controller import build_export
    from fleetplan.results.placement import Placement, plan_hash, verify_placement

    try:
        kube = fmt in ("k8s", "keda", "prometheus", "all")
        with input_errors():
            if fmt != "controller" and not kube:
                raise InputError("--format", [Problem("--format", f"{fmt!r}; give controller, k8s, keda, prometheus or all.")])
            if kube:
                from fleetplan.cli.export_k8s import export_kubernetes, kubernetes_options

                opts, target = kubernetes_options(fmt, output, (plan, placement, instance or ""), workload=workload, scaler=scaler,
                                                  engine=engine, ici_domain_label=ici_domain_label, namespace=namespace,
                                                  prometheus_url=prometheus_url)
            pl, inst = plan_and_instance(plan, instance)  # its records checked as every reader does (issue 39 items 7, 10)
            placed = load_json_document(placement, Placement, "placement", MADE_BY)
            if placed.plan_hash != plan_hash(pl):
                raise InputError(placement, [Problem("plan_hash", f"the placement was made for another plan than {plan}.")])
            broken = verify_placement(inst, pl, placed)
            if broken:
                raise InputError(placement, violation_problems(broken))
            from fleetplan.results.plan import status_note

            note = status_note(pl)
            if note is not None:  # as report, whatif, place and simulate warn (issue 16 newcomer trial M2)
                err_console.print(f"[bold yellow]warning:[/] {escape(note)}; the export deploys it as it is"
                                  + ("" if kube else " (the controller document's plan_status and plan_note say so)") + ".")
            if kube:
                export_kubernetes(inst, pl, placed, opts, target)
                return
            if output is not None:
                check_output_path(output, (plan, placement), "the controller document")
        defaults = {"workload": "leaderworkerset", "scaler": "keda", "engine": "vllm", "ici_domain_label": DEFAULT_ICI_DOMAIN_LABEL,
                    "namespace": DEFAULT_NAMESPACE, "prometheus_url": DEFAULT_PROMETHEUS_URL}
        given = [k for k, v in dict(workload=workload, scaler=scaler, engine=engine, ici_domain_label=ici_domain_label, namespace=namespace,
                                    prometheus_url=prometheus_url).items() if v != defaults[k]]
        if given:
            err_console.print(f"[yellow]note:[/] {', '.join('--' + g.replace('_', '-') for g in given)} appl"
                              f"{'ies' if len(given) == 1 else 'y'} only to the Kubernetes formats; ignored.")
        doc = build_export(inst, pl, placed).model_dump(mode="json")
        if output is not None:
            with input_errors():
                write_atomic(output, dumps_json(doc))
            console.print(f"controller document written to {escape(output)}")
        else:
            print_json(doc)
    except KeyboardInterrupt:
        # every write is atomic (a temporary renamed into place): nothing is half-written
        from fleetplan.cli.export_k8s import interrupted

        raise interrupted(output, "export" if fmt != "controller" else "controller document") from None


def diff_command(
    a: Annotated[str, typer.Argument(help="The placement before, or a directory `fleetplan export --format k8s -o DIR` wrote (what is deployed).")],
    b: Annotated[str, typer.Argument(help="The placement after.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the diff as JSON.")] = False,
) -> None:
    """List the slice moves between two placements, or the groups an export of B would change against a Kubernetes export A."""
    from pathlib import Path

    from fleetplan.results.placement import Placement, placement_diff

    if Path(a).is_dir():
        _diff_deployed(a, b, json_out)
        return
    with input_errors():
        pa = load_json_document(a, Placement, "placement", MADE_BY)
        pb = load_json_document(b, Placement, "placement", MADE_BY)
        from fleetplan.instance.io import bundled_instances, instance_hash, load_instance
        from fleetplan.results.placement import same_fleet_problems, verify_placement

        if pa.instance_hash != pb.instance_hash:
            # a re-placement after a plan change (grown load, new priors) is of another instance
            # but the same fleet: compare slices by id as long as the regions and pods agree
            differ = same_fleet_problems(pa, pb)
            if differ:
                raise InputError(b, [Problem("instance_hash", f"made for another instance than {a} and not the same fleet: {d}; a diff "
                                                              "compares placements of the same regions and pods.") for d in differ])
        for path, pp in ((a, pa), (b, pb)):
            if pp.instance_name in bundled_instances():
                inst = load_instance(pp.instance_name)
                if instance_hash(inst) == pp.instance_hash:
                    broken = verify_placement(inst, None, pp)
                    if broken:
                        raise InputError(path, violation_problems(broken))
    d = placement_diff(pa, pb)
    if json_out:
        print_json(d)
        return
    if pa.instance_hash != pb.instance_hash:
        console.print(f"placements of two instances ({escape(pa.instance_name)} {pa.instance_hash[:12]}..., {escape(pb.instance_name)} "
                      f"{pb.instance_hash[:12]}...) with the same regions and pods: slices compared by id")
    console.print(f"{len(d['moved'])} slices moved between pods, {len(d['shifted_within_pod'])} shifted within their pod, "
                  f"{len(d['added'])} added, {len(d['removed'])} removed; DCN share {d['dcn_share_before']:.2%} -> {d['dcn_share_after']:.2%}")
    for m in d["moved"]:
        console.print(f"  move {escape(m['id'])}: {escape(m['from'])} -> {escape(m['to'])}")
    for i in d["added"]:
        console.print(f"  add {escape(i)}")
    for i in d["removed"]:
        console.print(f"  remove {escape(i)}")


def _diff_deployed(a: str, b: str, json_out: bool) -> None:
    from fleetplan.export.k8s.bundle import deployed_diff
    from fleetplan.results.placement import Placement

    with input_errors():
        pb = load_json_document(b, Placement, "placement", MADE_BY)
        d = deployed_diff(a, pb)
    if json_out:
        print_json(d)
        return
    same = d["deployed_placement_hash"] == d["placement_hash"]
    console.print(f"deployed: plan {d['deployed_plan_hash'][:16]}, placement {d['deployed_placement_hash'][:16]}; "
                  f"{escape(b)}: plan {d['plan_hash'][:16]}, placement {d['placement_hash'][:16]}"
                  + (" (the same placement)" if same else ""))
    console.print(f"{len(d['changes'])} groups change; slices {d['slices_deployed']} -> {d['slices_placed']}")
    for c in d["changes"]:
        what = f"{c['tier'] + ' ' if c['tier'] else ''}{c['role']} {c['shape']}"
        console.print(f"  {escape(c['region'])} {escape(what)} in {escape(c['pod'])}: {c['deployed']} -> {c['placed']}")
