"""Generated passages of docs/reports.md and the README drawn from the studies that take
minutes -- `fleetplan sensitivity gemini-ironwood`, `fleetplan levers gemini-ironwood`
(``benchmarks/results/gemini_sensitivity.json``, ``gemini_levers.json``: ``python
benchmarks/docs_figures.py``) and the hit-rate study (``hit_rate_study.json``: ``python
benchmarks/hit_rate_study.py``) -- set beside the brief's section 7 and `fleetplan perf`.

Where the text argues from the numbers (which prior moves the fleet least, whether a lever's
saving is inside the brief's range, whether the failover reserve grows with the hit rate),
the argument is computed with them, so a re-run that changes the conclusion changes the
sentence."""

from __future__ import annotations

from fleetplan.report.docnumbers.registry import block
from fleetplan.report.docnumbers.fmt import n, pct, span, table, usd, words

SENS, LEVERS, HIT = "gemini_sensitivity.json", "gemini_levers.json", "hit_rate_study.json"
G = "gemini-ironwood"

#: Short names of the priors, as the prose uses them.
LABEL = {"prefill_mfu": "prefill MFU", "mean_input_tokens": "prompt length", "output_tokens": "output length",
         "prefix_hit_rate": "prefix hit rate", "hbm_bw_fraction": "HBM bandwidth", "spec_acceptance": "acceptance alpha",
         "decode_mfu": "decode MFU", "tpot_p99_inflation": "TPOT inflation"}
DECODE_PRIORS = {"hbm_bw_fraction", "spec_acceptance"}


def _swing(row: dict) -> int:
    return abs(row["high"]["chips"] - row["low"]["chips"])


def _ranked(sens: dict) -> list[dict]:
    """The applicable priors, the largest move in chips first."""
    return sorted((r for r in sens["rows"] if r["applicable"]), key=lambda r: (-_swing(r), r["param"]))


def _value(row: dict, end: str, unit: bool = True) -> str:
    """A prior's value at one end in its unit: '20%', '31.4%', '15,780 tokens' (``unit`` False: '15,780')."""
    v = row[f"{end}_value"]
    if row["unit"] == "fraction":
        return pct(v, 0 if abs(100 * v - round(100 * v)) < 1e-9 else 1)
    return n(v) + (" tokens" if row["unit"] == "tokens" and unit else "")


@block("readme-tornado")
def readme_tornado(src) -> str:
    """README: which priors move the fleet most and least (chips between the two ends)."""
    r = _ranked(src.study(SENS))
    top = r[:2]
    short = [f"{LABEL[x['param']]} {_value(x, e)}" for x in top for e in ("low", "high") if x[e]["status"] != "verified"]
    most = max((x[e]["shortfall_rps"] for x in top for e in ("low", "high") if x[e]["status"] != "verified"), default=0)
    tail = f" (at {words(short)} the plan leaves up to {n(most)} req/s unserved in some scenario)" if short else ""
    return f"{words([LABEL[x['param']] for x in top])} move the fleet most{tail}, {LABEL[r[-1]['param']]} least"


@block("readme-decode")
def readme_decode(src) -> str:
    """README: where the Gemini plan's widest decode pool runs on its batch -> TPOT curve."""
    c = max(src.report(G).decode_curves, key=lambda c: max(p.batch for p in c.points))
    p = c.points[0]
    knee = c.spec_knee if p.draft_tokens else c.knee
    spec = f"with speculation (draft k = {p.draft_tokens})" if p.draft_tokens else "without speculation"
    return (f"where the plan's {c.tier} tier rides to batch {p.batch:,.0f} {spec}: {p.tpot_ms:.1f} ms TPOT p{c.percentile:g} against "
            f"the {c.tpot_limit_ms:g} ms SLO, {'short of' if knee and knee > p.batch else 'at'} the knee ({knee:,})")


@block("reports-plan")
def reports_plan(src) -> str:
    """docs/reports.md: which plan the page's numbers are of."""
    _, plan = src.plan(G)
    c = plan.cost
    return (f"The figures and numbers below are of the bundled Gemini plan as `fleetplan solve` writes it: {n(c.chips)} chips, "
            f"{n(c.fleet_cost_per_hour_usd)} $/h, ${usd(c.cost_per_1m_output_tokens_usd)} per 1M output tokens at the daily mean demand. "
            "The passages with numbers are rendered from today's plan and from the studies' JSON by `python -m "
            "fleetplan.report.docnumbers`, and `tests/report/test_docs_numbers.py` fails when they differ, or when the studies were run "
            "against another plan than today's (then re-run the two scripts above).")


# ----------------------------------------------------------------------------- the report's figures


def _curve(rd, tier: str):
    return next(c for c in rd.decode_curves if c.tier == tier)


@block("reports-decode-caption")
def reports_decode_caption(src) -> str:
    """docs/reports.md: the batch -> TPOT figure's caption (the plan's decode operating points)."""
    inst, _ = src.plan(G)
    rd = src.report(G)
    largest = max(inst.serving.batch_caps)
    out = ["*The Gemini plan's decode pools."]
    for c in sorted(rd.decode_curves, key=lambda c: -max(p.batch for p in c.points)):
        chips = int(c.slice.rsplit("x", 1)[1])
        pts = c.points
        nm, fo = pts[0], pts[-1]
        same = len(pts) == 1 or (nm.batch == fo.batch and nm.draft_tokens == fo.draft_tokens)
        k = f"draft k = {nm.draft_tokens}" if nm.draft_tokens else "no speculation"
        if same:
            s = (f"The {c.tier} tier on {chips}-chip slices rides to batch {nm.batch:,.0f} with {k}: {nm.tpot_ms:.1f} ms TPOT "
                 f"p{c.percentile:g} against the {c.tpot_limit_ms:g} ms SLO, {n(nm.tokens_per_s_per_chip)} tokens/s per chip.")
        else:
            s = (f"The {c.tier} tier on {chips}-chip slices runs at batch {nm.batch:,.0f} in normal hours and {fo.batch:,.0f} in a failover "
                 f"({k}): {nm.tpot_ms:.1f} and {fo.tpot_ms:.1f} ms TPOT p{c.percentile:g} against the {c.tpot_limit_ms:g} ms SLO, "
                 f"{n(nm.tokens_per_s_per_chip)} and {n(fo.tokens_per_s_per_chip)} tokens/s per chip.")
        knee = c.spec_knee if nm.draft_tokens else c.knee
        top = max(p.batch for p in pts)
        if top >= largest and knee is not None and knee > top:
            s += (f" The limit there is the instance's largest batch cap, not the SLO: the k = {nm.draft_tokens} knee is at {knee:,} residents "
                  f"(the KV pool holds {c.kv_capacity:,}).")
        elif knee is not None and knee < c.kv_capacity and fo.tpot_ms < (c.tpot_limit_ms or 0) - 1:
            s += (f" Its knee, {knee:,} residents, is where the KV pool is full: {c.kv_capacity:,} residents less the KV held for the "
                  "handoffs in flight.")
        if nm.draft_tokens and c.knee is not None:
            s += f" Without speculation the knee would be {c.knee:,}."
        out.append(s)
    return " ".join(out) + "*"


def _worst_survivor(rd):
    return max(((ev, s) for ev in rd.cascade for s in ev.survivors if s.traffic_multiplier is not None),
               key=lambda es: (es[1].traffic_multiplier, es[0].lost))


@block("reports-cascade-caption")
def reports_cascade_caption(src) -> str:
    """docs/reports.md: the region-loss cascade's caption (the survivor with the largest traffic multiplier)."""
    inst, _ = src.plan(G)
    ev, s = _worst_survivor(src.report(G))
    clamp = inst.failover.admission_clamp.min_input_tokens
    warm = "no warm slice joins prefill" if s.warm_chips == 0 else f"{n(s.warm_chips)} warm chips join prefill"
    resid = "there is no residual" if s.residual_chips == 0 else f"{n(s.residual_chips)} chips are short (the residual)"
    dwarm = f", and {n(s.decode_warm_chips)} warm chips join the {n(s.decode_installed_chips)} installed" if s.decode_warm_chips else \
        f", against the {n(s.decode_installed_chips)} installed"
    dres = "" if s.decode_residual_chips == 0 else f"; {n(s.decode_residual_chips)} chips short"
    return (f"*The brief's section 5 walkthrough, computed. Losing {ev.lost} at {ev.hour:02d}:00, {s.region} takes x{s.traffic_multiplier:.2f} "
            f"traffic, its hit rate falls {pct(s.hit_rate_before)} -> {pct(s.hit_rate_steady)} steady -> {pct(s.hit_rate_transient)} in the "
            f"re-warm, and its prefill demand goes x{s.prefill_multiplier_steady:.2f} -> x{s.prefill_multiplier_transient:.2f} (the brief: "
            f"x1.5, 60% -> 40% -> 30%, x2.25 -> ~x2.6). The admission clamp of cold prompts of {clamp / 1000:,.0f}K tokens or more frees "
            f"{n(s.clamp_chips)} chips and batch shedding {n(s.shed_chips)}, which brings the re-warm need down to {n(s.need_final_chips)} "
            f"prefill chips against the {n(s.installed_chips)} installed: {warm}, and {resid}. Decode (the lower row) needs "
            f"{n(s.decode_need_own_chips)} -> {n(s.decode_need_failover_chips)} chips; batch shedding frees {n(s.decode_shed_chips)} and the "
            f"clamp {n(s.decode_clamp_chips)}, leaving {n(s.decode_need_final_chips)}{dwarm}{dres}.*")


@block("reports-cost-caption")
def reports_cost_caption(src) -> str:
    """docs/reports.md: the cost-per-token figure's caption."""
    _, plan = src.plan(G)
    rd = src.report(G)
    seg = {s.name: s for s in rd.cost_segments}
    total = plan.cost.fleet_cost_per_hour_usd
    own = (seg["prefill"].cost_per_hour_usd + seg["decode"].cost_per_hour_usd) / total
    res = seg["failover reserve"].cost_per_hour_usd
    steady = [s.prefill_multiplier_steady for ev in rd.cascade for s in ev.survivors if s.prefill_multiplier_steady is not None]
    than = "more" if res / total > 0.30 else "less"
    grows = "more than doubles" if min(steady) > 2 else f"grows x{min(steady):.2f}-x{max(steady):.2f}"
    c = plan.cost
    cut = 1 - c.cost_per_1m_output_tokens_with_infill_usd / c.cost_per_1m_output_tokens_usd
    return (f"*Where the ${usd(c.cost_per_1m_output_tokens_usd, 2)} per 1M output tokens goes. Prefill and decode for each region's own "
            f"peak within the SLOs are {pct(own)} of the fleet; the failover reserve is {pct(res / total)} ({n(res)} of {n(total)} $/h), "
            f"{than} than the brief's flat 30% for everything, because a region loss is a cache-loss event: the survivors' prefill demand "
            f"{grows} (the cascade above). Headroom is {pct(seg['headroom'].cost_per_hour_usd / total)}. Batch infill of the trough (and of "
            f"the idle reserve) cuts the figure by {pct(cut)} (${usd(c.cost_per_1m_output_tokens_usd)} -> "
            f"${usd(c.cost_per_1m_output_tokens_with_infill_usd)}).*")


# ----------------------------------------------------------------------------- sensitivity


@block("sensitivity-base")
def sensitivity_base(src) -> str:
    """docs/reports.md: the sweep's base against the plan solve writes."""
    b = src.study(SENS)["base"]
    c = src.plan(G)[1].cost
    if (b["chips"], b["fleet_cost_per_hour_usd"]) == (c.chips, c.fleet_cost_per_hour_usd):
        return f"{n(c.chips)} chips both"
    return f"{n(b['chips'])} chips against solve's {n(c.chips)}"


def _moves(row: dict, base: dict, levers: dict) -> str:
    lo, hi = row["low"], row["high"]
    parts = []
    for role in ("prefill", "decode", "warm"):
        a, b = lo[f"{role}_chips"], hi[f"{role}_chips"]
        if abs(b - a) >= 0.25 * max(_swing(row), 1):
            parts.append(f"{role} chips {n(a)} .. {n(b)}")
    text = "; ".join(parts)
    p = row["param"]
    ratio = (lo["prefill_chips"] / hi["prefill_chips"]) if hi["prefill_chips"] else 0
    both = lo["status"] == hi["status"] == "verified"
    if p == "prefill_mfu" and both:
        text += f" (x{ratio:.2f} for x{row['high_value'] / row['low_value']:.1f} in MFU)"
    elif p == "mean_input_tokens" and both:
        r = hi["prefill_chips"] / lo["prefill_chips"]
        x = row["high_value"] / row["low_value"]
        text += f" (x{r:.2f} for x{x:.1f} in length{': the attention term is quadratic' if r > x else ''})"
    elif p == "output_tokens" and base["prefill_chips"] > 0.5 * base["chips"]:
        text += "; the fleet is prefill-heavy, so its cost spreads over more output tokens"
    elif p == "spec_acceptance":
        off = next((x["off"] for x in levers["rows"] if x["id"] == "speculation" and x.get("off")), None)
        if off is not None:
            if lo["chips"] < off["chips"]:
                text += f"; at {_value(row, 'low')} speculation still pays: {n(lo['chips'])} chips, below the {n(off['chips'])} without it (levers)"
            else:
                text += f"; at {_value(row, 'low')}: {n(lo['chips'])} chips, no fewer than the {n(off['chips'])} without speculation (levers)"
    for e in ("low", "high"):
        if row[e]["status"] != "verified":
            text += f"; at {_value(row, e)}: {row[e]['status']}, up to {n(row[e]['shortfall_rps'])} req/s unserved in some scenario"
    return text


@block("sensitivity-tornado")
def sensitivity_tornado(src) -> str:
    """docs/reports.md: the tornado's caption, the table and what it says."""
    sens, lev = src.study(SENS), src.study(LEVERS)
    b = sens["base"]
    rows = []
    for r in sorted((r for r in sens["rows"] if r["applicable"]), key=lambda r: -abs(r["high"]["cost_per_1m_output_tokens_usd"]
                                                                                     - r["low"]["cost_per_1m_output_tokens_usd"])):
        star = lambda e: "" if r[f"{e}_vs_base"] == "resolved" else "*"  # noqa: E731
        mark = lambda e: "" if r[e]["status"] == "verified" else f" ({r[e]['status']})"  # noqa: E731
        rows.append([LABEL[r["param"]], f"{_value(r, 'low', False)} .. {_value(r, 'high')}",
                     f"{n(r['low']['chips'])}{mark('low')} .. {n(r['high']['chips'])}{mark('high')}",
                     f"{usd(r['low']['cost_per_1m_output_tokens_usd'])}{star('low')} .. {usd(r['high']['cost_per_1m_output_tokens_usd'])}{star('high')}",
                     _moves(r, b, lev)])
    beyond = [f"{LABEL[r['param']]} {_value(r, e)}" for r in sens["rows"] for e in ("low", "high") if r.get(e) and r[e]["beyond_inventory"]]
    short = [f"{LABEL[r['param']]} {_value(r, e)}" for r in sens["rows"] for e in ("low", "high") if r.get(e) and r[e]["status"] != "verified"]
    marks = []
    if beyond:
        marks.append(f"The points beyond the pod inventory ({words(beyond)}) are outlined and marked with a dagger, their pods per region "
                     "listed under the plot.")
    if short:
        marks.append(f"The points that are not verified ({words(short)}: the fleet leaves load unserved) are hatched.")
    gaps = [x["mip_gap"] for r in sens["rows"] if r["applicable"] for x in (r["low"], r["high"]) if x["mip_gap"] is not None]
    caption = (f"*The Gemini plan ({n(b['chips'])} chips, ${usd(b['cost_per_1m_output_tokens_usd'])} per 1M output tokens) against its "
               f"priors, each bar one re-solve. {' '.join(marks)} A prior that does not apply to the instance draws no bar and says why.*")
    note = (f"(Each end at its gap to the plain sizing's bound, {pct(min(gaps), 2)}-{pct(max(gaps), 2)}; a starred end is within its and "
            "the base's gaps of the base.)")
    return "\n\n".join([caption, table(["prior", "range", "chips", "$/1M output tokens", "what moves"], rows), note, _tornado_says(sens)])


def _tornado_says(sens: dict) -> str:
    r = _ranked(sens)
    top, last2 = r[:2], r[-2:]
    b = sens["base"]
    dec = b["decode_chips"] / b["chips"]
    lead = words([LABEL[x['param']] for x in top])
    s = (f"{lead[0].upper()}{lead[1:]} dominate the chips, as the brief's \"every fleet number below grows "
         "~1.3x at 30% MFU\" implies")
    if {x["param"] for x in last2} == DECODE_PRIORS:
        s += (f"; the two decode priors, acceptance alpha and bandwidth (the brief's \"sensitive\" decode prior), move the plan least, "
              f"{LABEL[r[-1]['param']]} the least of all, because in this plan decode is {pct(dec)} of the chips (speculation and "
              "stratification, `docs/gemini-vs-brief.md`)")
    else:
        s += f"; {LABEL[r[-1]['param']]} moves the plan least (decode is {pct(dec)} of the chips)"
    return (s + ". Moves of about 1% of the fleet cost (the MIP gap) are solver noise, and so are trades between prefill and warm "
            "slices of equal cost.")


# ----------------------------------------------------------------------------- levers

BRIEF = {"batch_infill": (1, "-0.35 to -0.45 (\"can halve effective cost\")"), "hit_rate": (2, "-0.09 per 10 pts (60% -> 80% = -0.18)"),
         "decode_occupancy": (3, "-0.12 to -0.18"), "speculation": (4, "-0.03 to -0.08, \"negative at saturation\""),
         "kv_fp8": (5, "\"small after 1-3\"")}


def _lever(lev: dict, lid: str) -> dict:
    return next(r for r in lev["rows"] if r["id"] == lid)


def _chips(r: dict) -> str:
    return "same fleet" if r["off"]["chips"] == r["on"]["chips"] else f"{n(r['off']['chips'])} -> {n(r['on']['chips'])}"


def _d(x: float | None) -> str:
    """A signed $/1M figure for the table: '-0.096'."""
    return "--" if x is None else f"{x:+.3f}".replace("+-", "-")


def _dd(x: float) -> str:
    """The same in prose: '-$0.096'."""
    return f"{'-' if x < 0 else '+'}${abs(x):.3f}"


@block("levers-table")
def levers_table(src) -> str:
    """docs/reports.md: the levers beside the brief's section 7, and the note under the table."""
    lev = src.study(LEVERS)
    b = lev["base"]
    h10, h20 = _lever(lev, "hit_rate_10"), _lever(lev, "hit_rate_20")
    rows = []
    for lid, (brank, btext) in BRIEF.items():
        if lid == "hit_rate":
            rows.append([str(brank), "prefix hit rate", btext, f"{h10['rank']} (+10), {h20['rank']} (+20)",
                         f"**{_d(h10['delta_usd_per_1m_output_at_peak'])}** (+10), **{_d(h20['delta_usd_per_1m_output_at_peak'])}** (+20)",
                         f"{_d(h10['delta_usd_per_1m_output'])}, {_d(h20['delta_usd_per_1m_output'])}",
                         f"{n(h10['off']['chips'])} -> {n(h10['on']['chips'])}, -> {n(h20['on']['chips'])}"])
            continue
        r = _lever(lev, lid)
        peak = "not defined (see below)" if r["delta_usd_per_1m_output_at_peak"] is None else f"**{_d(r['delta_usd_per_1m_output_at_peak'])}**"
        mean = _d(r["delta_usd_per_1m_output"])
        if lid == "batch_infill":
            mean = f"**{mean}** ({usd(r['off_usd_per_1m_output'])} -> {usd(r['on_usd_per_1m_output'])})"
        rows.append([str(brank), r["name"], btext, str(r["rank"]), peak, mean, _chips(r)])
    ranked = sorted((r for r in lev["rows"] if r["rank"] is not None), key=lambda r: r["rank"])
    gap = lev["options"]["mip_gap"]
    noise = gap * b["cost_per_1m_output_tokens_usd"]
    ties = [f"{ranked[i]['name']} and {ranked[i + 1]['name']} tie" for i in range(len(ranked) - 1)
            if abs(ranked[i]["delta_usd_per_1m_output"] - ranked[i + 1]["delta_usd_per_1m_output"]) < noise]
    tie = f": {'; '.join(ties)}" if ties else ""
    note = (f"({pct(gap)} MIP gap per solve, i.e. about +-${noise:.2f} per 1M{tie}. The base is the plan `fleetplan solve` writes: "
            f"{n(b['chips'])} chips, ${usd(b['cost_per_1m_output_tokens_usd'])} per 1M at the daily mean, "
            f"${usd(b['cost_per_1m_output_tokens_at_peak_usd'])} over the sum of peaks, against the brief's 13.5K chips and $1.18.)")
    return table(["brief's rank", "lever", "brief's section 7 ($/1M output, its convention: cost over peak output)", "computed rank",
                  "computed, brief's convention", "computed, daily mean", "chips off -> on"], rows) + "\n\n" + note


def _ordinal(k: int) -> str:
    return {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth"}.get(k, f"rank {k}")


@block("levers-infill")
def levers_infill(src) -> str:
    """docs/reports.md: batch infill against the brief's arithmetic."""
    _, plan = src.plan(G)
    r = _lever(src.study(LEVERS), "batch_infill")
    c = plan.cost
    d = -r["delta_usd_per_1m_output"]
    share = 1 - r["on_usd_per_1m_output"] / r["off_usd_per_1m_output"]
    reserve = next(s for s in src.report(G).cost_segments if s.name == "failover reserve").cost_per_hour_usd / c.fleet_cost_per_hour_usd
    interactive = c.mean_output_tokens_per_s * 86400
    halve = "\"can halve effective cost\" holds" if share >= 0.45 else "less than the brief's \"can halve effective cost\""
    same = abs(r["on_usd_per_1m_output"] - c.cost_per_1m_output_tokens_with_infill_usd) < 5e-4
    base = "" if same else (f" The levers' base sells a little {'more' if r['on_usd_per_1m_output'] < c.cost_per_1m_output_tokens_with_infill_usd else 'less'}"
                            f" (${usd(r['on_usd_per_1m_output'])}).")
    return (f"**Batch infill: {_ordinal(r['rank'])}, at {d / 0.40:.1f}x the brief's dollars, and the brief's arithmetic slips.** The brief's "
            "$1.18 divides the fleet's cost by *peak* output (6M tokens/s, as if every hour were the peak). At that convention there is no "
            "idle trough to sell: the saving is zero by construction, so -$0.35 .. -0.45 cannot be a saving at the convention it is quoted "
            "in. At the daily mean (the fleet serves two thirds of its peak over a 3:1 diurnal day) the brief's own fleet costs $1.18 / "
            "0.667 = **$1.77**, and filling the trough back to peak takes it back to $1.18: -$0.59 in its own numbers, a third of the cost. "
            f"fleetplan computes -${d:.2f} (-{pct(share)}, {halve}) because the idle capacity it sells is not only the trough: the failover "
            f"reserve ({pct(reserve)} of the plan's fleet) is idle in every hour no region is lost, and the infill counts it hour by hour "
            f"within each pool's TTFT budget and decode tokens/s: {c.batch_infill_output_tokens_per_day / 1e9:,.1f}B batch output tokens per "
            f"day against {interactive / 1e9:,.1f}B interactive in the plan `fleetplan solve` writes "
            f"(`cost.batch_infill_output_tokens_per_day`; ${usd(c.cost_per_1m_output_tokens_usd)} -> "
            f"${usd(c.cost_per_1m_output_tokens_with_infill_usd)}).{base}")


@block("levers-hit-rate")
def levers_hit_rate(src) -> str:
    """docs/reports.md: +10 and +20 points of hit rate against the brief's -$0.09 per 10 points."""
    lev = src.study(LEVERS)
    h10, h20 = _lever(lev, "hit_rate_10"), _lever(lev, "hit_rate_20")
    p10, p20 = h10["delta_usd_per_1m_output_at_peak"], h20["delta_usd_per_1m_output_at_peak"]
    holds = abs(p10 / -0.09 - 1) <= 0.25
    slope = src.study(HIT)["slopes"]["failover_reserve_chips_per_10_points"]
    why = ("fewer than the raw demand of the tokens a hit saves, for a reason the brief states itself in section 5" if slope > 0
           else "how they compare with the brief's arithmetic")
    return (f"**Hit rate: the brief's dollars {'hold' if holds else 'do not hold'}; its slices are another matter.** Computed {_dd(p10)} per 10 "
            f"points at the brief's convention ({_dd(p20)} for 20), against its -$0.09 (-$0.18). The fleet saves "
            f"{n(-h10['delta_chips'])} chips (+10) and {n(-h20['delta_chips'])} (+20): ${n(-h10['delta_fleet_cost_per_hour_usd'])}/h and "
            f"${n(-h20['delta_fleet_cost_per_hour_usd'])}/h, against the brief's \"~950 chips ~ $1,900/hr\". The slices behind it are "
            f"discussed below: {why}.")


def _short_decode(src):
    _, plan = src.plan(G)
    p = next(p for p in plan.pools if p.role == "decode" and p.tier == "short")
    d = next(x for x in src.perf(G)["decode"] if x["tier"] == "short" and x["slice"] == p.slice)
    return p, d


def _point(d: dict, batch: int, k: int) -> dict:
    return next(x for x in d["points"] if x["batch"] == batch and x["draft_tokens"] == k)


@block("levers-occupancy")
def levers_occupancy(src) -> str:
    """docs/reports.md: decode occupancy to the knee against the brief's -$0.12 .. -0.18."""
    r = _lever(src.study(LEVERS), "decode_occupancy")
    p, d = _short_decode(src)
    k = p.decode_normal.draft_tokens
    cap = p.decode_normal.batch_cap
    safe = src.study(LEVERS)["options"].get("safe_batch", 128)
    a, b = _point(d, safe, k), _point(d, cap, k)
    blended = next(x for x in src.perf(G)["decode"] if x["tier"] == "blended")["resident_kv_gb_mean"]
    x = r["delta_usd_per_1m_output_at_peak"]
    where = ("inside the brief's range" if -0.18 <= x <= -0.12 else
             ("a larger saving than the brief's range" if x < -0.18 else "a smaller saving than the brief's range"))
    dec = r["on"]["decode_chips"]
    spec = f" and {d['knee_batch'][f'k={k}']:,} with k = {k}" if k else ""
    return (f"**Decode occupancy: {where}.** Computed {_dd(x)}, against -$0.12 .. -0.18. The brief rides batch 128 -> ~250 "
            f"for x1.5 tokens/s per chip. In fleetplan's stratified plan the short tier's knee is at {d['knee_batch']['off']:,} without "
            f"speculation{spec} (its residents hold {d['resident_kv_gb_mean']:.2f} GB of KV, not the blended {blended:.2f} GB), so riding "
            f"from {safe} to the plan's batch cap, {cap}, is x{b['tokens_per_s_per_chip'] / a['tokens_per_s_per_chip']:.1f} "
            f"({n(a['tokens_per_s_per_chip'])} -> {n(b['tokens_per_s_per_chip'])} tokens/s per chip{f' at k = {k}' if k else ''}, "
            f"`fleetplan perf`); decode chips fall {n(r['off']['decode_chips'])} -> {n(dec)} ({n(dec - r['off']['decode_chips'])}), where "
            "the brief's x1.5 on its 6,000 decode chips would save 2,000.")


@block("levers-speculation")
def levers_speculation(src) -> str:
    """docs/reports.md: speculation below the knee against the brief's -$0.03 .. -0.08."""
    inst, _ = src.plan(G)
    lev, sens = src.study(LEVERS), src.study(SENS)
    r = _lever(lev, "speculation")
    p, d = _short_decode(src)
    k, cap = p.decode_normal.draft_tokens, p.decode_normal.batch_cap
    plain, sp = _point(d, cap, 0), _point(d, cap, k)
    draft = k * inst.speculation.draft_step_ms
    verify = sp["step_ms"] - plain["step_ms"] - draft
    spec_rows = [x for x in src.perf(G)["speculation"] if x["tier"] == "short" and x["slice"] == p.slice and x["draft_tokens"] == k]
    drafting = [x for x in spec_rows if x["speculates"]]
    share = sum(inst.workload.classes[x["class"]].share for x in drafting)
    toks = words([f"{x['tokens_per_verify_step']:.1f}" for x in sorted(drafting, key=lambda x: -x["tokens_per_verify_step"])])
    eff = span([x["slot_efficiency"] for x in drafting], fmt=lambda v: f"{v:.2f}")
    alphas = span([x["alpha"] for x in drafting], fmt=lambda v: f"{v:.1f}")
    switch = [x["switch_off_batch"] for x in drafting]
    switch_text = ("finds no switch-off batch (where speculation stops raising tokens/s) up to 4,096 for these alphas" if all(s is None for s in switch)
                   else f"finds the switch-off batch at {span([s for s in switch if s is not None])}")
    alpha = next(x for x in sens["rows"] if x["param"] == "spec_acceptance")
    lo = alpha["low"]
    off = r["off"]
    caveat = (f"at a mean alpha of {_value(alpha, 'low')} the plan is {n(lo['chips'])} chips, "
              + ("exactly the no-speculation plan" if lo["chips"] == off["chips"] else
                 f"{'still below' if lo['chips'] < off['chips'] else 'above'} the {n(off['chips'])} without speculation"))
    prefill_off = off["prefill_chips"] + off["warm_chips"]
    prefill_on = r["on"]["prefill_chips"] + r["on"]["warm_chips"]
    rank = f"rank {r['rank']}, not 4" if r["rank"] != 4 else "rank 4, as the brief has it"
    off_by = {lid: _off_range(_lever(lev, lid)["delta_usd_per_1m_output_at_peak"], lo_hi) for lid, lo_hi in
              (("speculation", (-0.08, -0.03)), ("decode_occupancy", (-0.18, -0.12)), ("hit_rate_10", (-0.09, -0.09)))}
    most = "; the biggest disagreement in dollars" if max(off_by, key=off_by.get) == "speculation" else ""
    return (f"**Speculation: {rank}{most}.** Computed {_dd(r['delta_usd_per_1m_output_at_peak'])} "
            f"at the brief's convention ({_dd(r['delta_usd_per_1m_output'])} at the daily mean; {n(r['delta_chips'])} chips: decode "
            f"{n(off['decode_chips'])} -> {n(r['on']['decode_chips'])}, and prefill plus warm pool {n(prefill_off)} -> {n(prefill_on)}), against "
            f"-$0.03 .. -0.08. The brief ranks it last because \"at saturation ... wasted rejected tokens reduce goodput\": slot efficiency "
            f"(alpha k + 1)/(k + 1) is {eff} for alpha {alphas} at k = {k}. That is the right measure when slots are the limit. Here they "
            f"are not: a k = {k} verify step at batch {cap} takes {sp['step_ms']:.1f} ms against "
            f"{plain['step_ms']:.1f} ms for a plain step ({pct(sp['step_ms'] / plain['step_ms'] - 1)} more: {draft:g} ms of drafting, k x "
            f"`draft_step_ms`, and {verify:.1f} ms of verify work with the step's collectives) and yields {toks} tokens per step for the classes that "
            f"draft ({pct(share)} of requests): x{sp['tokens_per_s_per_slice'] / plain['tokens_per_s_per_slice']:.2f} tokens/s per slice at "
            f"the same batch ({n(sp['tokens_per_s_per_slice'])} against {n(plain['tokens_per_s_per_slice'])}, `fleetplan perf`). And since "
            f"TPOT = step / (alpha k + 1), the SLO knee moves from {d['knee_batch']['off']:,} to {d['knee_batch'][f'k={k}']:,}: speculation "
            f"lets the batch ride further too. `fleetplan perf` {switch_text}. The brief's caveat survives as a sensitivity: {caveat}. "
            f"Speculation is worth this much only if the measured acceptance is near the priors, and `draft_step_ms` "
            f"({inst.speculation.draft_step_ms:g} ms) and the decode MFU ({pct(inst.priors.decode_mfu)}) of the verify step are priors too.")


def _off_range(x: float | None, lo_hi: tuple[float, float]) -> float:
    """How far a saving lies outside the brief's range ($/1M; 0 inside)."""
    if x is None:
        return 0.0
    lo, hi = lo_hi
    return max(lo - x, x - hi, 0.0)


@block("levers-fp8")
def levers_fp8(src) -> str:
    """docs/reports.md: FP8 KV against the brief's "small after 1-3"."""
    lev = src.study(LEVERS)
    r, h10 = _lever(lev, "kv_fp8"), _lever(lev, "hit_rate_10")
    rd = src.report(G)
    big = max((m for m in rd.memory if m.in_use), key=lambda m: max(u.kv_gb for u in m.in_use))
    use = max(big.in_use, key=lambda u: u.kv_gb)
    fits = 2 * use.kv_gb <= big.kv_pool_gb
    cmp = "more than" if r["delta_usd_per_1m_output"] < h10["delta_usd_per_1m_output"] else "less than"
    small = "small" if abs(r["delta_usd_per_1m_output"]) < 0.02 else "not small"
    return (f"**FP8 KV: {small}.** Computed {_dd(r['delta_usd_per_1m_output'])} ({n(r['delta_chips'])} chips), {cmp} +10 points of hit "
            f"rate ({_dd(h10['delta_usd_per_1m_output'])}). With BF16 KV the decode step streams twice the KV and the page pool holds half "
            f"the residents: the {use.tier} tier's {use.batch:,.0f} residents on a {big.chips}-chip slice hold {use.kv_gb / 1000:.1f} TB of "
            f"its {big.kv_pool_gb / 1000:.1f} TB pool in FP8 and {'would fit' if fits else 'would not fit'} in BF16"
            f"{'' if fits else ', so its batch halves'}; decode chips {n(r['on']['decode_chips'])} -> {n(r['off']['decode_chips'])}. The "
            "brief is right that it is \"already assumed in the baseline\" (the instance is FP8): the lever prices the alternative.")


# ----------------------------------------------------------------------------- hit rate


def _raw_slices(src) -> float:
    """The brief's 22M tokens/s of 10 points over fleetplan perf's rate with hits on the smallest slice (slices)."""
    perf = src.perf(G)
    small = min(perf["slices"], key=lambda s: s["chips"])
    return 22e6 / next(x for x in perf["prefill_sustained"] if x["slice"] == small["slice"])["over_mix_with_hits_tokens_per_s"]


@block("hit-rate-arithmetic")
def hit_rate_arithmetic(src) -> str:
    """docs/reports.md: the brief's "~120 slices per 10 points" arithmetic, with fleetplan perf's rates."""
    perf = src.perf(G)
    small = min(perf["slices"], key=lambda s: s["chips"])
    r = next(x for x in perf["prefill_sustained"] if x["slice"] == small["slice"])
    ten = 22e6  # the brief: 10 points of 220M prompt tokens/s
    return ("The brief (sections 2, 5 and 7): 20K req/s x 11K tokens = 220M prompt tokens/s; 10 points of hit rate is 22M tokens/s; "
            f"\"~120 prefill slices\". The arithmetic slips once: 22M / {r['at_mean_length_tokens_per_s'] / 1e3:,.0f}K tokens/s per slice (the "
            f"brief's own sizing rate at the mean length) is **{ten / r['at_mean_length_tokens_per_s']:.0f}** slices; 120 is 22M / "
            f"{r['ffn_only_tokens_per_s'] / 1e3:,.0f}K, the FFN-only rate. Over the mix with prefix hits, and with the step's collectives, an "
            f"{small['chips']}-chip slice computes {n(r['over_mix_with_hits_tokens_per_s'])} tokens/s (`fleetplan perf`: the attention term "
            "bills E[s^2], new tokens attend over the cached prefix, and every layer pays its all-reduces and all-to-alls), so the raw "
            f"demand of 10 points is **{_raw_slices(src):.0f}** {small['chips']}-chip slices at the normal peak.")


@block("hit-rate-study")
def hit_rate_study(src) -> str:
    """docs/reports.md: the sensitivity's per-10-points figures, the hit-rate study's table and what it says."""
    sens, hit = src.study(SENS), src.study(HIT)
    h = sens["hit_rate_slices"]
    small = h["smallest_shape_chips"]
    pw = h["prefill_chips_per_10_points"]
    less = "less" if pw / small < _raw_slices(src) else "more"
    head = (f"The computed plans save {less} than that. `fleetplan sensitivity` (hit rate {pct(h['low_hit_rate'])} .. "
            f"{pct(h['high_hit_rate'])}, {pct(sens['options']['mip_gap'])} gap): {n(pw)} prefill chips per 10 points -- "
            f"**{pw / small:.0f}** slices of {small} chips -- and {n(h['fleet_chips_per_10_points'])} chips for the whole fleet, "
            f"${n(h['fleet_cost_per_hour_usd_per_10_points'])}/h, ${usd(h['cost_per_1m_output_tokens_usd_per_10_points'])} per 1M output "
            f"tokens. `benchmarks/hit_rate_study.py` re-solves {pct(hit['rows'][0]['hit_rate'])} .. {pct(hit['rows'][-1]['hit_rate'])} in "
            f"5-point steps at a {pct(hit['mip_gap'], 1)} gap and fits the slope:")
    rows = [[pct(r["hit_rate"]), n(r["chips"]), n(r["prefill_chips"]), n(r["warm_chips"]), n(r["prefill_normal_need_chips"]),
             n(r["failover_reserve_chips"]), n(r["fleet_cost_per_hour_usd"]), usd(r["usd_per_1m_output"]), usd(r["usd_per_1m_output_at_peak"])]
            for r in hit["rows"]]
    s = hit["slopes"]

    def sl(k, f=n):
        v = s[k + "_per_10_points"]
        return f"**{'+' if v > 0 else '-'}{f(abs(v))}**"

    rows.append(["**per 10 points** (least squares)", sl("chips"), sl("prefill_chips"), "", sl("prefill_normal_need_chips"),
                 sl("failover_reserve_chips"), sl("fleet_cost_per_hour_usd"), sl("usd_per_1m_output", usd), sl("usd_per_1m_output_at_peak", usd)])
    tab = table(["hit rate", "chips", "prefill chips", "warm chips", "prefill the normal peak needs", "failover reserve", "$/h",
                 "$/1M output (daily mean)", "$/1M output (peak)"], rows)
    ok = all(r["status"] == "verified" for r in hit["rows"])
    gaps = [r["mip_gap"] for r in hit["rows"]]
    foot = (f"({'Every plan verified' if ok else 'Not every plan verified'}; each {pct(min(gaps), 2)}-{pct(max(gaps), 2)} from the plain "
            "sizing's bound, the pod stage's own gap being the one asked for; \"failover reserve\" counts the prefill, decode and warm slices "
            f"beyond each pool's normal-peak need, `fleetplan.report.data.cost_segments`; {hit['wall_s']:.0f} s on 2 workers.)")
    need, res, fleet = -s["prefill_normal_need_chips_per_10_points"], s["failover_reserve_chips_per_10_points"], -s["chips_per_10_points"]
    raw = _raw_slices(src)
    grows = "*grows*" if res > 0 else "shrinks"
    fewer = (f", fewer than the {raw:.0f} of raw demand: the tokens a higher hit rate removes are the cheapest of each prompt (the first "
             "uncached ones, which attend over the shortest prefix), and the per-request overheads and weight reads do not shrink with "
             "the hit rate" if need / small < raw else f", against {raw:.0f} of raw demand")
    say = (f"So per 10 points of hit rate the prefill the normal peak needs falls by {n(need)} chips -- **{need / small:.0f}** slices of "
           f"{small} chips{fewer} -- but the failover reserve {grows} by {n(abs(res))} chips, and the fleet saves {n(fleet)} chips "
           f"(**{fleet / small:.0f}** slices), ${n(-s['fleet_cost_per_hour_usd_per_10_points'])}/h, "
           f"${usd(-s['usd_per_1m_output_at_peak_per_10_points'])} per 1M output tokens at the brief's convention.")
    if res > 0:
        say += ("\n\nThe reason for the reserve is the brief's own section 5: the plan is sized by the region-loss transient, and there the "
                "survivors' diverted users arrive with no cached prefix. Their demand does not shrink with the hit rate, so the pools a "
                "loss sizes shrink much less than the normal-peak need, and the gap between the two -- the reserve -- widens. A plan "
                f"sized without N-1 would save the {need / fleet:.1f}x larger normal-peak figure. The brief's \"~120 slices\" per 10 "
                f"points is {fleet / small:.0f} slices for the whole fleet here, and its \"$1,900/hr\" "
                f"${n(-s['fleet_cost_per_hour_usd_per_10_points'])}/h; its -$0.09 per 1M is "
                f"-${usd(-s['usd_per_1m_output_at_peak_per_10_points'])}.")
    return "\n\n".join([head, tab, foot, say])
