"""``fleetplan calibrate``: fit the step priors to measurements -- a latency profile
(Splitwise, Vidur or the generic CSV), end-to-end static batches (LLM-Inference-Bench), a
vLLM serving benchmark or a deployment's Prometheus metrics -- report the fit and write the
priors block."""

from __future__ import annotations

import math
from typing import Annotated, Optional

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from fleetplan.cli.common import check_output_path, console, input_errors, print_json, seconds_parser, write_atomic
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
    profile: Annotated[str, typer.Argument(help="Measurements: a latency profile CSV (Splitwise perf_model.csv, a Vidur mlp.csv, the generic CSV), an LLM-Inference-Bench CSV, a `vllm bench serve` result JSON, or vLLM's Prometheus metrics (a /metrics scrape or a query_range JSON export) (docs/calibration.md); sample:splitwise for the shipped Splitwise profile (`fleetplan samples`).")],
    fmt: Annotated[str, typer.Option("--format", help="auto (from the file), splitwise, vidur, csv, llm-inference-bench, vllm-bench or prometheus.")] = "auto",
    model: Annotated[Optional[str], typer.Option("--model", help="Catalogue model (e.g. llama2-70b, bloom-176b, Llama-2-7b-hf); with --instance, the profile's model name to select. Default: the profile's only model. vllm-bench: the served model (a catalogue name), checked against --instance in place of the result's model_id.")] = None,
    chip: Annotated[Optional[str], typer.Option("--chip", help="Catalogue chip (a100-80gb, h100-80gb, h100-80gb-pcap, a40); with --instance, the profile's chip name to select. Default: the profile's only chip.")] = None,
    tp: Annotated[Optional[list[int]], typer.Option("--tp", help="Tensor-parallel size (chips per slice) to fit; repeat for several (fitted jointly). Default: all in the profile.", min=1)] = None,
    instance: Annotated[Optional[str], typer.Option("--instance", "-i", help="Take the model, chip and base priors from this instance (YAML path or bundled name) instead of the catalogue; for vllm-bench and prometheus, the deployment measured (required).")] = None,
    instance_chip: Annotated[Optional[str], typer.Option("--instance-chip", help="The instance's chip type to fit (default: its only one).")] = None,
    terms: Annotated[str, typer.Option("--terms", help="roofline: fit prefill/decode MFU, HBM bandwidth and the two overheads, holding the other step terms (collectives, per-layer overhead) at the base priors; physics: fit every step prior the data identify (attention efficiencies, collective bandwidth and latency, per-layer overhead too) jointly. Profiles only.")] = "roofline",
    framework: Annotated[Optional[str], typer.Option("--framework", help="llm-inference-bench: the engine's rows to fit (vLLM, TensorRT-LLM, ...); default: the selection's only one.")] = None,
    slice_label: Annotated[Optional[str], typer.Option("--slice", help="vllm-bench, prometheus: the engines' slice shape on --instance, chip x chips (e.g. h100x4); default: the instance's only shape.")] = None,
    tier: Annotated[Optional[str], typer.Option("--tier", help="vllm-bench, prometheus: the instance's tier the traffic belongs to; default: its only tier.")] = None,
    schedule: Annotated[Optional[str], typer.Option("--schedule", help="vllm-bench, prometheus: the engines' schedule, prefill-first or chunked-<tokens> (vLLM's --max-num-batched-tokens); default: the instance's only one.")] = None,
    replicas: Annotated[Optional[int], typer.Option("--replicas", help="vllm-bench: engines behind the benchmarked endpoint (default 1); prometheus: overrides the count of engine series.", min=1)] = None,
    pool: Annotated[Optional[str], typer.Option("--pool", help="prometheus: the pool to fit, REGION/TIER/ROLE as the fleetplan_* labels name it (needed when the metrics hold several).")] = None,
    baseline: Annotated[Optional[str], typer.Option("--baseline", help="prometheus: the earlier text scrape; counters and histograms are taken as their increase since it.")] = None,
    window: Annotated[Optional[float], typer.Option("--window", help="prometheus: the window in seconds (between the scrapes, or since the engines started for a single scrape); default: from the samples' timestamps or the range export.", parser=seconds_parser("--window", least=1.0), metavar="SECONDS")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the priors document (priors, source, fit) as JSON instead of tables.")] = False,
    output: Annotated[Optional[str], typer.Option("-o", "--output", help="Write the priors document as YAML to this file (atomically); nothing is written on any error.")] = None,
) -> None:
    """Fit the step priors to measurements by least squares through fleetplan's own model: step profiles against the roofline, end-to-end batches as sums of steps, loaded engines through the queueing model."""
    import dataclasses

    from fleetplan.samples import resolve
    from fleetplan.workload.calibrate import calibrate, dump_priors_yaml, load_profile, resolve_target
    from fleetplan.workload.formats import detect

    load_opts = {"--slice": slice_label, "--tier": tier, "--schedule": schedule, "--replicas": replicas}
    with input_errors():
        given, profile = profile, resolve(profile)  # sample:NAME names a shipped profile
        kind = (detect(profile) or "auto") if fmt == "auto" else fmt
        _check_options(kind, {**load_opts, "--pool": pool, "--baseline": baseline, "--window": window, "--framework": framework},
                       instance, instance_chip, terms)
        if output is not None:
            check_output_path(output, tuple(x for x in (profile, baseline) if x), "the priors")
        if kind in ("vllm-bench", "prometheus"):
            doc, fit, text = _load_fit(kind, profile, given, instance, slice_label, tier, schedule, replicas, pool, baseline, window, model)
        else:
            if kind == "llm-inference-bench":
                from fleetplan.workload.e2e import fit_e2e, load_llm_inference_bench

                raw = load_llm_inference_bench(profile)
                cal = fit_e2e(raw, resolve_target(raw, model, chip, instance, instance_chip), tp, framework)
            else:
                raw = load_profile(profile, fmt)
                cal = calibrate(raw, resolve_target(raw, model, chip, instance, instance_chip), tp, terms)
            cal = dataclasses.replace(cal, path=given)  # recorded as named (sample:NAME, not the install path)
            doc, fit, text = cal.document(), None, dump_priors_yaml(cal)
        if output is not None:
            write_atomic(output, text)
    if json_out:
        print_json(doc)
        return
    if fit is not None:
        print_load_fit(fit, doc["source"])
    else:
        _print(cal)
    if output is not None:
        console.print(f"priors written to {escape(output)} (overlay on an instance with `fleetplan solve INSTANCE --priors {escape(output)}`)")


_PROFILE_KINDS = ("auto", "splitwise", "vidur", "csv")


def _check_options(kind: str, given: dict, instance, instance_chip, terms: str) -> None:
    """Refuse an option the format does not read (exit 2), naming the formats that do."""
    from fleetplan.workload.formats import MEASUREMENT_FORMATS

    if kind not in _PROFILE_KINDS + MEASUREMENT_FORMATS:
        raise InputError("--format", [Problem("--format", f"unknown format {kind!r}; expected auto, {', '.join(_PROFILE_KINDS[1:] + MEASUREMENT_FORMATS)}.", kind)])
    reads = {"--framework": ("llm-inference-bench",), "--slice": ("vllm-bench", "prometheus"), "--tier": ("vllm-bench", "prometheus"),
             "--schedule": ("vllm-bench", "prometheus"), "--replicas": ("vllm-bench", "prometheus"), "--pool": ("prometheus",),
             "--baseline": ("prometheus",), "--window": ("prometheus",)}
    bad = [Problem(opt, f"applies to --format {' or '.join(reads[opt])}, not to this {kind} file.", str(v)) for opt, v in given.items()
           if v is not None and kind not in reads[opt]]
    if instance_chip is not None and instance is None:
        bad.append(Problem("--instance-chip", "names a chip type of --instance; give --instance too (without it, --chip names the "
                                              "catalogue's chip).", instance_chip))
    if terms != "roofline" and kind in MEASUREMENT_FORMATS:
        bad.append(Problem("--terms", f"applies to step profiles; a {kind} fit chooses its own terms (docs/calibration.md).", terms))
    if kind in ("vllm-bench", "prometheus") and instance is None:
        bad.append(Problem("--instance", f"a {kind} fit runs the deployment's queueing model: give the instance it was served by "
                                         "(model, chips, SLOs, traffic) with --instance."))
    if bad:
        raise InputError("calibrate", bad)


def _load_fit(kind, path, given, instance, slice_label, tier, schedule, replicas, pool, baseline, window, model=None):
    """The vllm-bench / prometheus fit: (document, LoadFit, YAML text). ``model`` (vllm-bench):
    the served model, checked against the instance in place of the result's model_id."""
    import dataclasses

    from fleetplan.instance.io import load_instance
    from fleetplan.workload.loadfit import fit_phase_scales, fit_yaml, resolve_deployment

    inst = load_instance(instance)
    model_note = None
    if kind == "vllm-bench":
        from fleetplan.workload.servebench import bench_pool, check_model, load_vllm_bench

        bench = load_vllm_bench(path)
        model_note = check_model(bench, inst, model)
        sl, t, sch = resolve_deployment(inst, slice_label, tier, schedule)
        obs = bench_pool(bench, t, sl, replicas or 1, sch)
        source = {"measurements": given, "format": kind, "sha256": bench.sha256, "model_id": bench.model_id, "instance": inst.name,
                  "slice": sl, "tier": t, "schedule": sch, "replicas": obs.replicas, "request_rate": bench.request_rate,
                  "completed": bench.completed, "duration_s": bench.duration_s}
    else:
        from fleetplan.workload.prometheus import no_latency_problem, observed_pool, read_metrics

        pools, source = read_metrics(path, baseline, window)
        pools = [p for p in pools if p.requests > 0]
        if pool is not None:
            pools = [p for p in pools if p.name == pool]
            if not pools:
                raise InputError("--pool", [Problem("--pool", "no such pool in the metrics (pools are REGION/TIER/ROLE from the "
                                                              "fleetplan_* labels).", pool)])
        if len(pools) > 1:
            raise InputError("--pool", [Problem("--pool", f"the metrics hold several pools ({', '.join(p.name for p in pools)}); choose one.")])
        pm = pools[0]
        role = pm.key[2] if pm.key else "replica"
        sl, t, sch = resolve_deployment(inst, slice_label, tier if tier or not pm.key else pm.key[1], schedule, role)
        try:
            obs = observed_pool(pm, role, t, sl, sch, None, replicas)
        except ValueError as e:
            raise InputError(path, [Problem(pm.name, f"{e}; give --replicas.")]) from None
        if not obs.quantities:
            raise InputError(path, [no_latency_problem(f"pool {pm.name} has")])
        source = {**source, "measurements": given, "pool": pm.name, "instance": inst.name, "slice": sl, "tier": t, "schedule": sch,
                  "replicas": obs.replicas}
    try:
        fit = fit_phase_scales(inst, [obs])
    except ValueError as e:
        raise InputError(path, [Problem("(statistics)", f"{e}.")]) from None
    if model_note:
        fit = dataclasses.replace(fit, notes=fit.notes + (model_note,))
    if not fit.priors:
        why = "; ".join(f"{k}: {v}" for k, v in fit.not_identified.items() if k.endswith("multiplier"))
        raise InputError(path, [Problem("(statistics)", "the fit moved no prior (nothing to write; -o left as it was)"
                                                        + (f": {why}" if why else "") + ".")])
    doc = fit.document(source)
    head = (f"fleetplan calibrate: step priors fitted to {given} ({kind}) through {inst.name}'s pool model.\n"
            f"Overlay on that instance with: fleetplan solve {inst.name} --priors FILE")
    return doc, fit, fit_yaml(doc, head)


def print_load_fit(fit, source: dict) -> None:
    """The tables of a load fit (:class:`fleetplan.workload.loadfit.LoadFit`): multipliers,
    step-time ratios, every statistic measured beside the base and the fit, what is not
    identified. Shared with ``fleetplan drift``."""
    where = source.get("pool") or "benchmark"
    console.rule(f"[bold]calibrate: {escape(str(source.get('instance')))} {escape(str(source.get('slice')))}, {escape(where)} "
                 f"({escape(str(source.get('format')))})")
    t = Table(title="what moved: step times against the base priors (1 = unchanged)", title_justify="left", box=box.SIMPLE_HEAD)
    for c in ("phase", "multiplier", "+- 1 s.e.", "bound active", "step-time ratio per pool"):
        t.add_column(c, justify="left" if c in ("phase", "bound active", "step-time ratio per pool") else "right")
    for m in fit.multipliers:
        ratios = ", ".join(f"{escape(k)} {v[m.phase]:.3f}x" for k, v in fit.ratios.items() if math.isfinite(v.get(m.phase, math.nan)))
        t.add_row(m.phase, f"{m.value:.4f}" if m.identified else "1 (held)", "-" if m.stderr is None else f"{m.stderr:.2g}",
                  escape(m.bound) if m.bound else "-", ratios or "-")
    console.print(t)
    t = Table(title="statistics: measured, and predicted at the measured load (engine-side, ms)", title_justify="left", box=box.SIMPLE_HEAD)
    for c in ("pool", "metric", "stat", "measured", "base priors", "fitted", "from"):
        t.add_column(c, justify="right" if c in ("measured", "base priors", "fitted") else "left")
    for p, q, b, f in fit.rows:
        t.add_row(escape(p.name), q.metric.upper(), q.stat, _ms(q.value_ms), _ms(b) if math.isfinite(b) else "unstable",
                  _ms(f) if math.isfinite(f) else "unstable", escape(q.source))
    console.print(t)
    console.print(f"RMS |ln(predicted / measured)|: {fit.rms_log_error_base:.3g} at the base priors, {fit.rms_log_error:.3g} fitted")
    for p, b, f in fit.pools:
        run = "-" if p.running is None else f"{p.running:.1f}"
        console.print(f"{escape(p.name)}: {p.rate_rps:.4g} requests/s on {p.replicas} engine(s) ({p.rate_rps / p.replicas:.3g} each); "
                      f"requests running per engine measured {run}, predicted {b.running:.1f} at the base, {f.running:.1f} fitted")
        for n in p.notes:
            console.print(f"[yellow]note:[/] {escape(n)}")
    _print_tail(fit.not_identified, fit.notes, fit.priors)


def _print_tail(not_identified: dict, notes, priors: dict) -> None:
    """What a fit could not identify, its notes and the priors block it writes."""
    for name, why in not_identified.items():
        console.print(f"[yellow]not identified:[/] {escape(name)}: {escape(why)}")
    for n in notes:
        console.print(f"[yellow]note:[/] {escape(n)}")
    block = ", ".join(f"{k}: {v:g}" for k, v in priors.items())
    console.print(f"priors block: {{{escape(block)}}}")


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
    _print_tail(cal.not_identified, cal.notes, cal.priors)
