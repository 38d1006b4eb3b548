"""``fleetplan report``: one self-contained HTML page (figures embedded as PNG data URIs,
inline CSS, no script, nothing fetched) or Markdown with the figures beside it.

:func:`build_report` computes the data (:mod:`fleetplan.report.data`) and draws every
figure (:mod:`fleetplan.report.figures`); :func:`render_html` and
:func:`render_markdown` lay them out with a table under each figure. Same plan, same
bytes: no timestamp anywhere, figures saved without metadata.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from typing import Callable

from fleetplan.report import figures as F
from fleetplan.report.data import ReportData, build_report_data
from fleetplan.report.margins_figure import fig_margins
from fleetplan.results.loads import pct_text

__all__ = ["Report", "FIGURES", "build_report", "render_html", "render_markdown", "figure_names"]

#: (file stem, title, drawing function, applies to the data)
FIGURES: list[tuple[str, str, Callable, Callable[[ReportData], bool]]] = [
    ("fleet", "Fleet by region, tier and role", F.fig_fleet, lambda d: bool(d.fleet)),
    ("memory-map", "Slice memory map", F.fig_memory_map, lambda d: bool(d.memory)),
    ("decode-tpot", "Decode: batch against TPOT", F.fig_decode_curves, lambda d: bool(d.decode_curves)),
    ("ttft-utilisation", "Prefill: TTFT against utilisation", F.fig_ttft, lambda d: bool(d.ttft_curves)),
    ("hourly-capacity", "Hourly load against capacity", F.fig_hourly, lambda d: bool(d.hourly)),
    ("region-loss-cascade", "Region-loss cascade", F.fig_cascade, lambda d: bool(d.cascade)),
    ("cost-per-token", "Cost per 1M tokens", F.fig_cost, lambda d: bool(d.cost_segments)),
    ("step-time-margins", "Margins against a step-time scale", fig_margins, lambda d: bool(d.margin_curves)),
]


@dataclass
class Report:
    """The report's data and its figures as PNG bytes, by file stem."""

    data: ReportData
    figures: dict[str, bytes]


def figure_names(d: ReportData) -> list[str]:
    return [name for name, _t, _f, ok in FIGURES if ok(d)]


def build_report(inst, plan, progress: Callable[[str], None] | None = None, draw: bool = True,
                 on_figure: Callable[[str, object], None] | None = None) -> Report:
    """Compute the report of ``plan`` (solved for ``inst``) and draw its figures (with
    ``draw=False`` none: ``report --json`` without a page, where drawing was most of the
    time, prints the numbers alone).

    ``on_figure(stem, figure)``, when given, is called with each matplotlib Figure just after
    it is saved as PNG, laid out as the bytes show it (the tests measure its text there
    instead of drawing it again)."""
    say = progress or (lambda _m: None)
    d = build_report_data(inst, plan, say)
    figs = {}
    for name, title, fn, ok in FIGURES:
        if draw and ok(d):
            say(f"drawing: {title.lower()}")
            fig = fn(d)
            figs[name] = F.to_bytes(fig, "png")
            if on_figure is not None:
                on_figure(name, fig)
    return Report(d, figs)


# ----------------------------------------------------------------------------- text helpers


def _n(x, nd: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{nd}f}"


def _usd(x, nd: int = 3) -> str:
    return "-" if x is None else f"${x:,.{nd}f}"


def _x(m) -> str:
    """A multiplier; '-' where the survivor had none of that load of its own (no traffic: undefined)."""
    return "- (no own traffic)" if m is None else f"x{m:.2f}"


def _growth(x) -> str:
    """Load growth absorbed (fraction) as +x%."""
    if x is None:
        return "-"
    return f">= +{x:.0%}" if x >= 99.0 - 1e-9 else (f"+{x:.2%}" if x < 0.01 else f"+{x:.1%}")


def _pct(x) -> str:
    """0 decimals, 1 below 10%, and from 99% the precision near the limit of pct_text
    (99.95% is not '100.0%')."""
    if x is None:
        return "-"
    if 0.99 <= x < 1.01:
        return pct_text(x)
    return f"{x:.1%}" if x < 0.1 else f"{x:,.0%}"


@dataclass
class _Table:
    head: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class _Section:
    key: str
    title: str
    intro: str
    figure: str | None
    caption: str
    tables: list[_Table]


def _sections(d: ReportData) -> list[_Section]:
    """The report's sections, in order: fleet, memory map, decode, TTFT, hourly load, region-loss
    cascade, cost, and the step-time margins when the plan has them."""
    disagg = d.serving_mode != "colocated"  # a mixed plan's tables carry the disaggregated columns
    out = [_fleet_section(d), _memory_section(d), _decode_section(d, disagg), _ttft_section(d, disagg), _hourly_section(d),
           _cascade_section(d, disagg), _cost_section(d)]
    if d.margin_curves:
        out.append(_margins_section(d))
    return out


def _fleet_section(d: ReportData) -> _Section:
    """The fleet by region, tier and role: slices, chips, $/h and the load growth each pool absorbs."""
    c = d.cost
    t = _Table(["region", "tier", "role", "slice", "slices", "chips", "$/h", "load growth absorbed: normal peak", "least, in"],
               [[r.region, r.tier, r.role + (f" ({r.schedule})" if r.schedule else ""), r.slice, _n(r.slices), _n(r.chips), _n(r.cost_per_hour_usd), _growth(r.growth_absorbed_normal),
                 f"{_growth(r.growth_absorbed_least)} ({r.growth_scenario})" if r.growth_scenario else "-"] for r in d.fleet])
    t.rows.append(["all", "", "", "", _n(sum(r.slices for r in d.fleet)), _n(sum(r.chips for r in d.fleet)), _n(sum(r.cost_per_hour_usd for r in d.fleet)), "", ""])
    margin = next((n for n in d.notes if n.startswith("demand margin:")), "")
    return _Section("fleet", "Fleet by region, tier and role",
                        f"{c['chips']:,} chips for {_n(c['fleet_cost_per_hour_usd'])} $/h. Every pool is one slice shape (a region x tier's decode or replica pool that mixes shapes, serving.mixed_shapes, is one row per shape); the warm pool is "
                        "weight-loaded, traffic-less slices that join pools in a region loss. Load growth absorbed: how much more load each "
                        "pool takes (every source alike) before an SLO breaks, at the normal peak and in its tightest scenario. "
                        + (margin[0].upper() + margin[1:] + "." if margin else ""),
                        "fleet", "Chips per region, stacked by tier and role (warm pool on top).", [t])


def _memory_section(d: ReportData) -> _Section:
    """Each slice shape's HBM: weights, workspace, headroom and the KV page pool, and the KV in use at the plan's operating points."""
    rows = []
    for m in d.memory:
        rows.append([m.slice, _n(m.total_gb), _n(m.weights_gb), _n(m.workspace_gb), _n(m.headroom_gb), _n(m.kv_pool_gb),
                     "; ".join(f"{u.tier} {u.role} B={u.batch:,.0f}: {u.kv_gb:,.0f} GB ({u.kv_gb / max(m.kv_pool_gb, 1e-9):.0%}), room for {u.capacity_requests:,}"
                               for u in m.in_use) or "-"])
    lr = d.memory[0] if d.memory else None
    return _Section("memory", "Slice memory map",
                        "Where each slice shape's HBM goes (perf: slice_memory_map). The KV page pool is what is left after the weights, the "
                        "workspace (activations, collectives, compile buffers) and the headroom (paging slack, OOM guard)." +
                        (f" One request of the longest bucket ({lr.longest_request_tokens:,.0f} tokens with its output) holds {lr.longest_request_kv_gb:,.1f} GB of KV."
                         if lr else ""),
                        "memory-map", "HBM per slice (GB = 1e9 bytes); green: the KV the pool's residents hold at the plan's operating point "
                        "(with paging slack); red: one longest request.",
                        [_Table(["slice", "HBM GB", "weights GB", "workspace GB", "headroom GB", "KV pool GB", "KV in use at the operating point"], rows)])


def _decode_section(d: ReportData, disagg: bool) -> _Section:
    """Decode TPOT against the batch (disaggregated) or the sequences decoding (colocated replicas), with the knees."""
    rows = []
    for cv in d.decode_curves:
        for p in cv.points:
            rows.append([cv.tier, cv.slice, p.label, _n(p.batch), str(p.draft_tokens), f"{p.tpot_p50_ms:.1f}", f"{p.tpot_ms:.1f}",
                         "-" if cv.tpot_limit_ms is None else f"{cv.tpot_limit_ms:g}", _n(p.tokens_per_s_per_chip),
                         _n(cv.knee) if cv.knee else "-", _n(cv.spec_knee) if cv.spec_knee else "-", _n(cv.kv_capacity)])
    pc = f"p{d.decode_curves[0].percentile:g}" if d.decode_curves else "p99"
    head = ["tier", "slice", "operating point", "batch" if disagg else "sequences decoding", "draft k", "TPOT p50 ms", f"TPOT {pc} ms",
            "SLO ms", "tok/s/chip", "knee (spec off)" if disagg else "at the SLO-limited rate", "knee (spec on)", "KV pool holds"]
    return _Section("decode", "Decode: batch against TPOT",
                        ("TPOT p50 and at the SLO percentile against the batch (perf: decode_table), speculation off and at the plan's draft "
                         "length; the SLO knee is the largest batch at which every SLO holds and the KV fits (perf: decode_knee). Normal hours run "
                         "at most (1 - decode_knee_margin) x the knee and never above the largest batch cap; a failover may ride to the knee.")
                        if disagg else
                        ("Colocated replicas: each replica interleaves prefill and decode under its pool's schedule (prefill-first: TPOT = decode "
                         "step / (1 - prefill share); chunked: decode steps carry chunks of the head prompt, TPOT = d(b) / (1 - lambda E[Delta])); "
                         "the batch is the sequences decoding at the load (Little's law) and the TPOT percentile is over the occupancy "
                         "distribution (perf.colocated, the model the plan is sized and verified with). The curve sweeps one replica's load "
                         "under each pool's schedule (one curve per tier, shape and schedule); the mark is the plan at each region's peak."),
                        "decode-tpot", "Top: TPOT (ms); bottom: output tokens/s per chip; circles: the plan's normal operating point, "
                        "squares: its failover operating point where different.", [_Table(head, rows)])


def _ttft_section(d: ReportData, disagg: bool) -> _Section:
    """Prefill TTFT against utilisation, per pool, with the queueing model of the router in use."""
    rows = []
    for cv in d.ttft_curves:
        for p in cv.points:
            rows.append([cv.region, cv.tier, f"{cv.slices} x {cv.slice}", p.label, _pct(p.utilisation), _n(p.ttft_ms),
                         "-" if cv.ttft_limit_ms is None else f"{cv.ttft_limit_ms:g}"])
    pc = f"p{d.ttft_curves[0].percentile:g}" if d.ttft_curves else "p99"
    return _Section("ttft", "Prefill: TTFT against utilisation",
                        (("TTFT at the SLO percentile = path latency + M/G/c queue wait (Erlang C with the Allen-Cunneen correction) + the "
                          if d.replica_router == "least-work" else
                          f"TTFT at the SLO percentile = path latency + the queue wait of one slice's own G/G/1 (the {d.replica_router} router: "
                          "Allen-Cunneen at the split's C_a^2) + the ")
                         + "percentile prompt's compute + its exposed KV transfer (results.evaluate, the verifier's evaluator). Flat while the queue "
                         "is short, then the hockey stick" + ("; the larger the pool, the later it turns" if d.replica_router == "least-work" else "")
                         + ". The dashed curve is the same pool, warm slices "
                         "joined, on the colder traffic mix of the scenario that sizes it (diverted users with no cached prefix, the re-warm dip).")
                        if disagg else
                        ("Replica TTFT = path + the queue wait of the prefill work + the percentile prompt's prefill under the pool's schedule "
                         + ("(M/G/c over the pool's replicas, Allen-Cunneen: the least-work router sends each prompt to the replica with the "
                            "least prefill queued)" if d.replica_router == "least-work" else
                            ("(G/G/1 per replica at C_a^2 / n: the round-robin router gives each replica every n-th prompt and its own queue, "
                             "with no pooling)" if d.replica_router == "round-robin" else
                             f"(M/G/1 per replica for Poisson arrivals, G/G/1 at a random split's C_a^2: the {d.replica_router} router gives "
                             "each replica its own queue, with no pooling)"))
                         + "; the x axis is the share of a replica's time spent prefilling."),
                        "ttft-utilisation", f"TTFT {pc} (solid) and p50 (dotted) in ms.",
                        [_Table(["region", "tier", "pool", "point", "utilisation", f"TTFT {pc} ms", "SLO ms"], rows)])


def _hourly_section(d: ReportData) -> _Section:
    """Each region's hourly load against its normal capacity, and its largest region-loss load."""
    c = d.cost
    rows = []
    for h in d.hourly:
        lo, hi = min(h.load_rps), max(h.load_rps)
        worst = max(h.losses, key=lambda m: m.offered_rps, default=None)
        loss = "-"
        if worst:
            cut = ", ".join(x for x in ((f"{_n(worst.clamped_rps)} clamped" if worst.clamped_rps > 0 else ""),
                                       (f"{_n(worst.shed_rps)} batch shed" if worst.shed_rps > 0 else "")) if x)
            joined = f", {worst.warm_slices} warm slice{'s' if worst.warm_slices != 1 else ''} joined" if worst.warm_slices else ""
            loss = (f"{worst.scenario}: {_n(worst.offered_rps)} req/s offered" + (f" ({cut})" if cut else "") + f", {_n(worst.carried_rps)} carried: "
                    + (f"{_pct(worst.pressure)} of the loss capacity {_n(worst.capacity_rps)} req/s ({worst.binding} binds{joined})"
                       if worst.capacity_rps is not None else "no capacity in the loss"))
        rows.append([h.region, _n(hi), _n(lo), _n(h.capacity_rps), h.binding, _pct(hi / h.capacity_rps if h.capacity_rps else None),
                     _pct(lo / h.capacity_rps if h.capacity_rps else None), loss])
    return _Section("hourly", "Hourly load against capacity",
                        "Each region's 24 hourly loads against the requests/s of its traffic mix its installed pools carry within the SLOs in "
                        "normal operation (the tightest tier and role binds). The shaded gap is idle capacity: the batch class can fill it "
                        f"({c['batch_infill_output_tokens_per_day'] / 1e9:,.1f}B output tokens/day over the fleet, counted per tier as the smaller "
                        "of the prefill and decode spare). Triangles: the loads the plan's region-loss scenarios offer the region (its own and "
                        "the diverted users). They can sit above the normal capacity without breaching an SLO: in a loss the admission clamp "
                        "rejects cold long prompts and the batch class is shed (the dots: what the region carries), warm slices join and decode "
                        "runs at its failover operating points, on the loss's own traffic mix (the dashes: the region's capacity in that loss; "
                        "zoomed in the strip above each panel).",
                        "hourly-capacity", "Requests/s; hours in UTC.",
                        [_Table(["region", "peak req/s", "trough req/s", "normal capacity req/s", "binds", "peak / capacity", "trough / capacity",
                                 "largest region-loss load"], rows)])


def _cascade_section(d: ReportData, disagg: bool) -> _Section:
    """The region-loss cascade: each survivor's need, what shedding, the clamp and the warm pool close, and the residual."""
    if d.cascade:
        rows = []
        for e in d.cascade:
            for s in e.survivors:
                rows.append([f"lose {e.lost} @{e.hour:02d}", s.region, _x(s.traffic_multiplier),
                             f"{s.hit_rate_before:.0%} / {s.hit_rate_steady:.0%} / {s.hit_rate_transient:.0%}",
                             f"{_x(s.prefill_multiplier_steady)} / {_x(s.prefill_multiplier_transient)}", _n(s.need_own_chips),
                             _n(s.need_steady_chips) if s.need_steady_chips is not None else "no size holds",
                             _n(s.need_transient_chips) if s.need_transient_chips is not None else "no size holds", _n(s.shed_chips), _n(s.clamp_chips), _n(s.installed_chips),
                             _n(s.warm_chips), _n(s.residual_chips),
                             f"{_n(s.decode_need_own_chips)} -> {_n(s.decode_need_failover_chips)} - {_n(s.decode_shed_chips)} shed - "
                             f"{_n(s.decode_clamp_chips)} clamp = {_n(s.decode_need_final_chips)}; {_n(s.decode_installed_chips)} installed + "
                             f"{_n(s.decode_warm_chips)} warm" + (f"; {_n(s.decode_residual_chips)} short" if s.decode_residual_chips else "")])
        front = "prefill" if disagg else "replica"
        return _Section("cascade", "Region-loss cascade",
                            "The brief's section 5 walkthrough, computed by the what-if for each region lost at its peak hour: the survivors take "
                            "its traffic (routing re-optimised), diverted users arrive with no cached prefix, and during the cache re-warm every "
                            "hit rate dips further; batch shedding, the admission clamp of cold long prompts and the warm pool close the gap, and "
                            f"what is left is the residual. In {front} chips of each survivor (slices x chips per slice, over its tiers); "
                            "'no size holds': a pool's unmitigated mix meets its TTFT SLO at no pool size (its cold long prompts' compute "
                            "alone exceeds it), so that phase's need has no chip count until the clamp changes the mix.",
                            "region-loss-cascade", f"Top, in {front} chips, bars from left: the hour's own need; the failover's steady-state need; "
                            "the re-warm need; what batch shedding and the clamp take off (hatched); the chips installed; the warm slices that join. "
                            + ("Below, the same walk in decode chips (the failover need at the failover operating points; decode demand does not "
                               "depend on the hit rate, so it has no re-warm step)." if disagg else ""),
                            [_Table(["loss", "survivor", "traffic", "hit before / steady / re-warm", "prefill demand steady / re-warm",
                                     f"{front} chips: own need", "steady need", "re-warm need", "shed frees", "clamp frees", "installed", "warm join",
                                     "residual", "decode chips: own -> loss need - shed - clamp = final need; installed + warm"], rows)])
    else:
        return _Section("cascade", "Region-loss cascade", d.cascade_note + ".", None, "", [])


def _cost_section(d: ReportData) -> _Section:
    """Cost per 1M output tokens by segment, at the daily mean, at peak and with the batch infill."""
    c = d.cost
    rows = [[s.name, _n(s.chips), _n(s.cost_per_hour_usd), _usd(s.usd_per_1m_output_daily_mean), _usd(s.usd_per_1m_output_at_peak),
             _usd(s.usd_per_1m_output_with_infill), s.explain] for s in d.cost_segments]
    rows.append(["all", _n(sum(s.chips for s in d.cost_segments)), _n(sum(s.cost_per_hour_usd for s in d.cost_segments)), _usd(c["cost_per_1m_output_tokens_usd"]),
                 _usd(c["cost_per_1m_output_tokens_at_peak_usd"]), _usd(c["cost_per_1m_output_tokens_with_infill_usd"]), "the plan's cost summary"])
    withheld = f"Withheld: {c['per_1m_withheld']}. " if c.get("per_1m_withheld") else ""
    return _Section("cost", "Cost per 1M tokens",
                        withheld + f"All fleet cost carried by output tokens, split by what the chips are for (each pool's normal-peak need recomputed with "
                        f"the evaluator: prefill the fewest slices whose TTFT meets the SLO, decode at the knee operating point, replicas at their "
                        f"SLO-limited rate). By role instead: {_usd(c['cost_per_1m_input_tokens_usd'], 4)} per 1M input tokens (prefill side), "
                        f"{_usd(c['cost_per_1m_output_tokens_decode_usd'])} per 1M output tokens (decode side), "
                        f"{_usd(c['cost_per_1m_tokens_blended_usd'], 4)} per 1M input+output tokens blended.",
                        "cost-per-token", "USD per 1M output tokens at the daily mean demand (the plan's headline), over the sum of the regional "
                        "peaks (the brief's convention), and with the trough's batch infill counted.",
                        [_Table(["segment", "chips", "$/h", "$/1M out (daily mean)", "$/1M out (at peak)", "$/1M out (with infill)", "what it is"], rows)])


def _margins_section(d: ReportData) -> _Section:
    """Each pool's step-time margin against its SLOs, and where each physics source sits on that scale."""
    names = list(dict.fromkeys(n for m in d.margin_curves for n in m.sources))
    rows = [[f"{m.role}[{m.region},{m.tier}]", m.scenario, f"{m.metric.upper()} p{m.percentile:g}", _n(m.limit_ms),
             "-" if m.plan_margin is None else f"x{m.plan_margin:#.3g}", "-" if m.crossing is None else f"x{m.crossing:#.3g}",
             *["off the scale" if m.sources.get(n) is None else f"x{m.sources[n]:.2f}" for n in names]] for m in d.margin_curves]
    return _Section("margins", "Margins against a step-time scale",
                        "How much slower every step (prefill and decode together) may be before each pool's SLOs break, at the load of "
                        "its sizing scenario: the plan's step-time margin (the least over the physics sources it holds under, each "
                        "source's steps scaled), the multiplier of the instance's own priors at which the SLO breaks, and where each "
                        "physics source sits on that scale: the multiplier of the instance's priors that gives the source's own "
                        "percentile at the pool's load ('off the scale': beyond the curve drawn, or no steady state).",
                        "step-time-margins", "Each SLO's percentile over its limit against a multiplier on every step time (1 = the "
                        "instance's priors); open markers: the physics sources; ticks: where each SLO breaks.",
                        [_Table(["pool", "scenario", "SLO", "limit ms", "plan's step-time margin", "breaks at (instance priors)",
                                 *[f"{n} at" for n in names]], rows)])


def _headline(d: ReportData) -> list[tuple[str, str]]:
    c = d.cost
    per = [("$ / 1M tokens", "withheld (see the notes)")] if c.get("per_1m_withheld") else [
        ("$ / 1M output tokens (daily mean)", _usd(c["cost_per_1m_output_tokens_usd"])),
        ("$ / 1M output tokens (sum of peaks)", _usd(c["cost_per_1m_output_tokens_at_peak_usd"])),
        ("$ / 1M output tokens with batch infill", _usd(c["cost_per_1m_output_tokens_with_infill_usd"])),
        ("$ / 1M input tokens (prefill side)", _usd(c["cost_per_1m_input_tokens_usd"], 4))]
    return [("plan status", d.plan_status), ("chips", f"{c['chips']:,}"), ("fleet cost", f"{_n(c['fleet_cost_per_hour_usd'])} $/h")] + per + [
        ("serving", d.serving_mode), ("instance sha256", d.instance_hash[:12]), ("fleetplan", d.fleetplan_version)]


# ----------------------------------------------------------------------------- HTML

_CSS = """body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;max-width:1200px;margin:24px auto;padding:0 16px;color:#222;line-height:1.4}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:2px;margin-top:32px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}th,td{border:1px solid #ccc;padding:3px 6px;text-align:right;vertical-align:top}
th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}td.t{text-align:left}
figure{margin:8px 0}figure img{max-width:100%;height:auto;border:1px solid #eee}figcaption{font-size:12px;color:#555}
.warn{background:#fff4e5;border:1px solid #e69f00;padding:6px 10px}.kv td{text-align:left}.kv td:first-child{font-weight:bold}
nav a{margin-right:12px;font-size:13px}"""


def _esc(s: str) -> str:
    return html.escape(str(s), quote=True)


def _html_table(t: _Table) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in t.head)
    body = "".join("<tr>" + "".join(f'<td{" class=t" if not _numeric(v) else ""}>{_esc(v)}</td>' for v in r) + "</tr>" for r in t.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _numeric(v: str) -> bool:
    s = v.replace(",", "").replace("$", "").replace("%", "").replace("x", "").strip()
    try:
        float(s)
        return True
    except ValueError:
        return s == "-"


def render_html(rep: Report) -> str:
    """One self-contained HTML page (UTF-8): inline CSS, figures as PNG data URIs."""
    d = rep.data
    secs = _sections(d)
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>fleetplan report: {_esc(d.instance_name)}</title>", f"<style>{_CSS}</style></head><body>",
             f"<h1>fleetplan report: {_esc(d.instance_name)}</h1>", f"<p>{_esc(d.description)}</p>"]
    for n in d.notes:
        parts.append(f'<p class="warn">{_esc(n)}</p>')
    parts.append('<table class="kv"><tbody>' + "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(v)}</td></tr>" for k, v in _headline(d)) + "</tbody></table>")
    parts.append("<nav>" + "".join(f'<a href="#{s.key}">{_esc(s.title)}</a>' for s in secs) + "</nav>")
    for s in secs:
        parts.append(f'<h2 id="{s.key}">{_esc(s.title)}</h2>')
        parts.append(f"<p>{_esc(s.intro)}</p>")
        if s.figure and s.figure in rep.figures:
            b64 = base64.b64encode(rep.figures[s.figure]).decode("ascii")
            parts.append(f'<figure><img alt="{_esc(s.title)}" src="data:image/png;base64,{b64}"><figcaption>{_esc(s.caption)}</figcaption></figure>')
        for t in s.tables:
            parts.append(_html_table(t))
    parts.append("<p><small>Every number comes from the plan and its instance through fleetplan's perf model and independent evaluator "
                 "(docs/reports.md); regenerate with <code>fleetplan report PLAN</code>.</small></p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# ----------------------------------------------------------------------------- Markdown


def _md_cell(v: str) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _md_table(t: _Table) -> str:
    lines = ["| " + " | ".join(_md_cell(h) for h in t.head) + " |", "|" + "|".join("---" for _ in t.head) + "|"]
    lines += ["| " + " | ".join(_md_cell(v) for v in r) + " |" for r in t.rows]
    return "\n".join(lines)


def render_markdown(rep: Report, figure_ref: Callable[[str], str]) -> str:
    """Markdown; ``figure_ref(stem)`` gives each figure's link (a relative file path, or a
    data URI when the document goes to stdout)."""
    d = rep.data
    secs = _sections(d)
    out = [f"# fleetplan report: {d.instance_name}", "", d.description, ""]
    for n in d.notes:
        out += [f"> **note:** {n}", ""]
    out += ["| | |", "|---|---|"] + [f"| {_md_cell(k)} | {_md_cell(v)} |" for k, v in _headline(d)] + [""]
    for s in secs:
        out += [f"## {s.title}", "", s.intro, ""]
        if s.figure and s.figure in rep.figures:
            out += [f"![{s.title}]({figure_ref(s.figure)})", "", f"*{s.caption}*", ""]
        for t in s.tables:
            out += [_md_table(t), ""]
    return "\n".join(out)
