"""``fleetplan perf``: the closed-form performance model of an instance, as tables or JSON."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from fleetplan.cli.common import console, err_console, input_errors, print_json

# The instance schema and the performance model are imported by the command, not here:
# `fleetplan --help` and every other command import this module (tests/cli/test_lazy_imports.py).


def _f(x, nd=1) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if abs(x) >= 1e5:
        return f"{x:,.0f}"
    return f"{x:,.{nd}f}"


def perf_command(
    instance: Annotated[Optional[str], typer.Argument(help="Instance YAML path or bundled name (default: gemini-ironwood).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON document (keys in docs/cli.md) instead of tables.")] = False,
    all_slices: Annotated[bool, typer.Option("--all-slices", help="Show decode curves for every slice shape, not only the smallest of each chip.")] = False,
) -> None:
    """Print the performance model: memory maps, decode curves, prefill times, KV transfers, speculation."""
    from fleetplan.instance.io import DEFAULT_INSTANCE, load_instance_overlaid
    from fleetplan.tables.summary import perf_summary

    with input_errors():
        inst, overlays = load_instance_overlaid(instance or DEFAULT_INSTANCE)
    for o in overlays:
        for note in o.notes:
            err_console.print(f"note: {escape(note)}", soft_wrap=True)
    s = perf_summary(inst)
    if json_out:
        print_json(s)
        return
    _render(s, all_slices)


def _render(s: dict, all_slices: bool) -> None:
    """Print the `fleetplan perf` document ``s`` (``perf_summary``) as tables, section by section."""
    _render_header(s)
    _render_tiers(s)
    _render_memory(s)
    if s["decode"]:
        _render_decode(s, all_slices)
    _render_longest_fit(s)
    _render_prefill(s)
    _render_kv_transfer(s)
    if s["speculation"]:
        _render_speculation(s)
    if "physics" in s:
        _render_physics(s["physics"])
    for c in s.get("colocated", []):
        _render_colocated(c)


def _render_header(s: dict) -> None:
    """The instance line, the model (KV per token, weights, attention/FFN crossover) and the input mix."""
    m, w = s["model"], s["workload"]
    console.print(f"[bold]{s['instance']}[/]  ({s['serving_mode']}, fleetplan {s['fleetplan_version']}, instance sha256 {s['instance_hash'][:12]})")
    console.print(
        f"KV {m['kv_kib_per_token']:.0f} KiB/token; weights {m['weights_gb']:.0f} GB "
        f"(shared {m['shared_params_b']:.1f}B + experts {m['expert_params_b']:.1f}B params); "
        f"attention = FFN FLOPs at {m['attention_ffn_crossover_tokens']:,.0f} tokens."
    )
    console.print(
        f"Input mix: mean {w['mean_input_tokens']:,.0f} tokens vs p50 {w['p50_input_tokens']:,.0f} "
        f"(mean/p50 = {w['mean_over_p50']:.2f}; plan on the mean); blended KV {w['blended_kv_gb_per_request']:.2f} GB/request "
        f"({w['blended_kv_gb_per_request_with_slack']:.2f} GB with paging slack); output {w['output_tokens']:.0f} tokens; "
        f"prefix hit rate {w['prefix_hit_rate']:.0%}."
    )


def _render_tiers(s: dict) -> None:
    """The tiers: request share, mean input, hit rate and SLOs."""
    t = Table(title="Tiers")
    for c in ("tier", "share of requests", "mean input (tokens)", "hit rate", "SLOs"):
        t.add_column(c)
    for r in s["tiers"]:
        slos = ", ".join(f"{x['metric'].upper()} p{x['percentile']:g} <= {x['limit_ms']:g} ms" for x in r["slos"])
        t.add_row(r["name"], f"{r['request_share']:.1%}", f"{r['mean_input_tokens']:,.0f}", f"{r['prefix_hit_rate']:.0%}", slos)
    console.print(t)


def _render_memory(s: dict) -> None:
    """Each slice shape's peaks and memory map (GB) and the residents of the blended mix it holds."""
    t = Table(title="Slice memory map (GB)")
    for c in ("slice", "HBM", "TB/s", "TFLOP/s", "weights", "workspace", "headroom", "KV pool", "residents of the blended mix (count)"):
        t.add_column(c, justify="right", overflow="fold")
    for r in s["slices"]:
        mm = r["memory_map_gb"]
        native = "" if r["dtype_native"] else " (non-native dtype)"
        t.add_row(r["slice"] + native, _f(r["hbm_gb"], 0), _f(r["hbm_tbps"]), _f(r["peak_tflops"], 0), _f(mm["weights"], 0),
                  _f(mm["workspace"], 0), _f(mm["headroom"], 0), _f(mm["kv_pool"], 0), f"{r['resident_capacity_blended']:,}")
    console.print(t)


def _render_decode(s: dict, all_slices: bool) -> None:
    """The decode slices' KV at the SLO knee and each decode curve (batch against step, TPOT, ITL and throughput, speculation off and at the longest draft); the smallest slice per chip unless ``all_slices``."""
    smallest = {}
    for r in s["slices"]:
        smallest.setdefault(r["chip"], r["slice"])
    shown = [d for d in s["decode"] if all_slices or d["slice"] in smallest.values()]
    _render_handoff(shown, {r["slice"]: r["memory_map_gb"]["kv_pool"] for r in s["slices"]})
    for d in shown:
        pct = next((f"p{x['percentile']:g}" for x in d["slos"] if x["metric"] == "tpot"), None) or \
            next((f"p{x['percentile']:g}" for x in d["slos"] if x["metric"] == "itl"), "p99")
        ks = sorted({p["draft_tokens"] for p in d["points"]})
        kmax = ks[-1]
        knees = ", ".join(("without speculation" if k == "off" else f"with draft {k}") + f" B={v:,}" for k, v in d["knee_batch"].items())
        t = Table(title=f"Decode curve: tier {d['tier']} on {d['slice']} (resident KV {d['resident_kv_gb_mean']:.2f} GB/request; "
                        f"SLO knee, the largest legal batch: {knees})")
        cols = ["batch", "step ms", "TPOT p50 ms", f"TPOT {pct} ms (prior / KV spread)", f"ITL {pct} ms", "tok/s/chip", "SLO-legal"]
        if kmax:
            cols += [f"spec k={kmax}: TPOT {pct}", f"ITL {pct}", "tok/s/chip", "legal"]
        for c in cols:
            t.add_column(c, justify="right")
        by = {}
        for p in d["points"]:
            by.setdefault(p["batch"], {})[p["draft_tokens"]] = p
        for b in sorted(by):
            off = by[b][0]
            row = [str(b), _f(off["step_ms"]), _f(off["tpot_p50_ms"]),
                   f"{_f(off['tpot_ms'].get(pct))} ({_f(off['tpot_prior_ms'].get(pct))} / {_f(off['tpot_kv_spread_ms'].get(pct))})",
                   _f(off["itl_ms"].get(pct)),
                   _f(off["tokens_per_s_per_chip"], 0), "[green]yes[/]" if off["legal"] else "[red]no[/]"]
            if kmax:
                sp = by[b].get(kmax)
                row += ([_f(sp["tpot_ms"].get(pct)), _f(sp["itl_ms"].get(pct)), _f(sp["tokens_per_s_per_chip"], 0),
                         "[green]yes[/]" if sp["legal"] else "[red]no[/]"] if sp else ["-"] * 4)
            t.add_row(*row)
        console.print(t)


def _render_longest_fit(s: dict) -> None:
    """The slices that cannot hold a tier's longest request in a role, or that every one can."""
    misfits = [r for r in s.get("longest_request_fit", []) if not r["fits"]]
    if misfits:
        t = Table(title="Slices that cannot hold a tier's longest request (not used for that role)")
        for c in ("tier", "role", "slice", "holds at once (tokens)", "KV needed GB", "KV pool GB"):
            t.add_column(c, justify="left" if c in ("tier", "role", "slice") else "right")
        for r in misfits:
            t.add_row(r["tier"], r["role"], r["slice"], f"{r['context_tokens']:,.0f}", _f(r["kv_need_gb"]), _f(r["kv_pool_gb"]))
        console.print(t)
        for r in misfits:
            console.print("  " + r["reason"], markup=False)
    elif s.get("longest_request_fit"):
        console.print("Every slice shape holds the KV of every tier's longest request in every role (prefill: the prompt; "
                      "decode / replica: prompt + output).")


def _render_prefill(s: dict) -> None:
    """Prefill of an uncached prompt per length (FLOPs and ms by term) and the sustained prefill throughput per slice, with why."""
    t = Table(title="Prefill, uncached prompt on one slice (ms; CP = context-parallel groups, 1 = tensor parallel)")
    for c in ("slice", "prompt tokens", "FFN PFLOP", "attention PFLOP", "FFN ms", "attention ms", "comm ms", "CP", "total ms"):
        t.add_column(c, justify="right")
    for r in s["prefill_lengths"]:
        t.add_row(r["slice"], f"{r['prompt_tokens']:,}", _f(r["ffn_pflop"], 2), _f(r["attention_pflop"], 2), _f(r["ffn_ms"]),
                  _f(r["attention_ms"]), _f(r["comm_ms"]), str(r["context_parallel"]), _f(r["total_ms"]))
    console.print(t)

    t = Table(title="Sustained prefill, computed tokens/s per slice")
    for c in ("slice", "FFN FLOPs only", "at mean length, FLOPs only", "at mean length, every term", "over the mix",
              "over the mix, with prefix hits"):
        t.add_column(c, justify="right")
    for r in s["prefill_sustained"]:
        t.add_row(r["slice"], _f(r["ffn_only_tokens_per_s"], 0), _f(r["at_mean_length_tokens_per_s"], 0),
                  _f(r["at_mean_length_all_terms_tokens_per_s"], 0), _f(r["over_mix_tokens_per_s"], 0),
                  _f(r["over_mix_with_hits_tokens_per_s"], 0))
    console.print(t)
    for r in s["prefill_sustained"]:
        console.print(f"Why ({r['slice']}): " + r["why"], markup=False)


def _render_kv_transfer(s: dict) -> None:
    """The KV transfer prefill -> decode per context length (GB; ICI, exposed ICI and DCN ms)."""
    t = Table(title="KV transfer prefill -> decode")
    for c in ("context tokens", "KV GB", "ICI ms", "ICI exposed ms", "DCN ms"):
        t.add_column(c, justify="right")
    for r in s["kv_transfer"]:
        t.add_row(f"{r['context_tokens']:,}", _f(r["kv_gb"], 2), _f(r["ici_ms"]), _f(r["ici_exposed_ms"]), _f(r["dcn_ms"]))
    console.print(t)


def _render_speculation(s: dict) -> None:
    """Speculation economics on the first slice: acceptance, tokens per verify step, slot efficiency and switch-off batch."""
    first = s["speculation"][0]["slice"]
    t = Table(title=f"Speculation economics on {first} (alpha = accepted / drafted)")
    for c in ("tier", "class", "k", "alpha", "tokens/step", "slot efficiency", "speculates", "switch-off batch"):
        t.add_column(c, justify="right")
    for r in s["speculation"]:
        if r["slice"] != first:
            continue
        t.add_row(r["tier"], r["class"], str(r["draft_tokens"]), f"{r['alpha']:.2f}", _f(r["tokens_per_verify_step"], 2),
                  _f(r["slot_efficiency"], 2), "yes" if r["speculates"] else "no (alpha below threshold)",
                  "-" if not r["speculates"] else ("none: pays at every batch searched (to 4,096)" if r["switch_off_batch"] is None else f"B={r['switch_off_batch']:,}"))
    console.print(t)


def _render_colocated(c: dict) -> None:
    """One colocated tier and slice: each schedule's replicas per region and the load table of the chosen one (or why it does not fit)."""
    if not c["fits"]:
        console.print(f"Colocated replicas: tier {c['tier']} on {c['slice']}: {c['reason']}", markup=False)
        return
    t = Table(title=f"Colocated replica schedules: tier {c['tier']} on {c['slice']} ({c['router']} routing; replicas for each region's "
                    f"sized peak at {c['utilisation_headroom']:.0%} headroom)")
    for col in ("schedule", "req/s per replica alone", *c["peak_rps_by_region"], "replicas", "fewest"):
        t.add_column(col, justify="right")
    for o in c["schedules"]:
        t.add_row(o["schedule"], _f(o["rps_per_replica_alone"], 2),
                  *["-" if o["replicas_by_region"][r] is None else str(o["replicas_by_region"][r]) for r in c["peak_rps_by_region"]],
                  "-" if o["replicas_needed"] is None else str(o["replicas_needed"]),
                  (("tie (load table below)" if sum(x["fewest_replicas"] for x in c["schedules"]) > 1 else "yes (load table below)")
                   if o["chosen"] else "tie") if o["fewest_replicas"] else "")
    console.print(t)
    if sum(o["fewest_replicas"] for o in c["schedules"]) > 1:
        console.print("  schedules marked 'tie' need as many replicas on this shape, so they cost the same here: `fleetplan solve` may run "
                      "either (its plan's pools name the schedule); the load table shows the one with the highest rate per replica in that pool.",
                      markup=False)
    if not c["load_table"]:
        console.print("  no schedule carries every region's peak within the SLOs on this shape", markup=False)
        return
    under = (f" under physics source {c['load_table_source']} (the held source whose rate binds at this pool size; the max is "
             "the least over the held sources)") if c.get("load_table_source") else ""
    t = Table(title=f"Colocated replica load: tier {c['tier']} on {c['slice']}, {c['schedule']}, a pool of {c['load_table_replicas']} "
                    f"(max {c['max_rps_per_replica']:.2f} req/s per replica within SLO; {c['replicas_needed']} replicas for "
                    f"{c['peak_rps']:.1f} req/s){under}")
    keys = [k for k in c["load_table"][0] if k.startswith(("tpot_p", "ttft_p", "itl_p"))]
    for col in ("req/s", "prefill share", "sequences decoding", "effective TPOT ms",
                *[k.replace("_ms", " ms").replace("_p", " p").replace("tpot", "TPOT").replace("ttft", "TTFT").replace("itl", "ITL") for k in keys],
                "over SLO"):
        t.add_column(col, justify="right")
    for r in c["load_table"]:
        t.add_row(_f(r["rps"], 2), f"{r['prefill_share']:.0%}" if r["prefill_share"] is not None else "-", _f(r["sequences_decoding"]),
                  _f(r["effective_tpot_ms"]), *[_f(r[k]) for k in keys],
                  "[red]yes[/]" + (f" ({r['reason']})" if r["reason"] else "") if r["over_slo"] else "no")
    console.print(t)
    if c["cost_per_1m_input_tokens_usd"] is not None:
        console.print(f"  cost per 1M input tokens ${c['cost_per_1m_input_tokens_usd']:.3f}, per 1M output tokens ${c['cost_per_1m_output_tokens_usd']:.3f} "
                      f"(replica cost split by prefill/decode time share)")


def _render_physics(ph: dict) -> None:
    """Each physics source's step times side by side per slice shape, and the spread."""
    names = [x["name"] for x in ph["sources"]]
    held = ", ".join(ph["held"])
    console.print(f"Physics sources (physics.hold: {ph['hold']}; the plan holds under {held}):", markup=False)
    for x in ph["sources"]:
        console.print(f"  {x['name']}{'' if x['held'] else ' (not held)'}: {x['description'] or x['origin']}", markup=False)
    for label in dict.fromkeys(c["slice"] for c in ph["cells"]):
        t = Table(title=f"Step times by physics source on {label} (ms; decode at {ph['context_tokens']:,.0f} tokens of context; "
                        "† outside the source's data)")
        for col in ("cell", *names, "spread (max/min)", "spread in data"):
            t.add_column(col, justify="left" if col == "cell" else "right")
        for c in ph["cells"]:
            if c["slice"] != label:
                continue
            cell = f"decode, batch {c['batch']}" if c["phase"] == "decode" else f"prefill, {c['tokens']:,.0f} tokens"
            t.add_row(cell, *[_f(c["step_ms"][n], 2) + ("†" if n in c["outside_data"] else "") for n in names],
                      _f(c["spread"], 2), "-" if c["spread_in_data"] is None else _f(c["spread_in_data"], 2))
        console.print(t)


def _render_handoff(shown: list[dict], pools: dict[str, float]) -> None:
    """The decode slices' KV page pool at each SLO knee: the batch and the reserve for handoffs in flight (perf.handoff)."""
    t = Table(title="Decode slice KV at the SLO knee (GB): the batch, and the reserve for handoffs in flight "
                    "(p99 of Poisson(arrivals per slice x transfer time), each the tier's p99 prompt's KV)")
    for c in ("tier", "slice", "draft", "batch (knee)", "batch KV", "arrivals req/s/slice", "in flight, mean", "reserve (requests)",
              "reserve", "left", "KV pool"):
        t.add_column(c, justify="left" if c in ("tier", "slice") else "right")
    notes = {}
    for d in shown:
        h = d["handoff"]
        notes[d["tier"]] = (f"  {d['tier']}: p{h['percentile']:g} prompt {h['prompt_tokens']:,.0f} tokens = {h['kv_per_request_gb']:.2f} GB of KV "
                            f"with slack, {h['holding_ms']:.1f} ms to transfer ({h['dcn_share']:.0%} of handoffs over the DCN)")
        for label, r in h["at_knee"].items():
            t.add_row(d["tier"], d["slice"], label, f"{r['batch']:,}", _f(r["batch_kv_gb"], 0), _f(r["arrivals_rps_per_slice"]),
                      _f(r["mean_in_flight"], 2), str(r["reserve_requests"]), _f(r["reserve_gb"]), _f(r["free_gb"]), _f(pools[d["slice"]], 0))
    console.print(t)
    for line in notes.values():
        console.print(line, markup=False)
