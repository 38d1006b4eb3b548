"""Generated passages drawn from today's plans: the bundled plans' headline figures
(docs/benchmarks.md, docs/workloads.md), the Gemini plan beside the brief's hand plan
(docs/gemini-vs-brief.md) and its Kubernetes export (docs/controller.md).

Every function takes :class:`fleetplan.report.docnumbers.Sources` and returns Markdown; the
sources are the plan ``fleetplan solve NAME`` writes, ``fleetplan perf``, ``fleetplan solve
--baseline``'s hand plan and ``fleetplan place`` + ``export --format all`` of the plan."""

from __future__ import annotations

from collections import defaultdict

from fleetplan.instance.io import bundled_instances
from fleetplan.report.docnumbers.registry import block
from fleetplan.report.docnumbers.fmt import hours, n, pct, span, table, usd, words

G = "gemini-ironwood"


def _pods(plan) -> list[int]:
    return [f.pods_total for f in plan.fleet]


def _gap(plan) -> str:
    s = plan.solver
    if s.gap is None:
        return "--"
    own = f" ({pct(s.pod_stage_gap, 2)})" if s.pod_stage_gap is not None else ""
    return f"{pct(s.gap, 2)}{own}"


@block("bundled-plans")
def bundled_plans(src) -> str:
    """docs/benchmarks.md: every bundled instance's plan, as `fleetplan solve NAME` writes it."""
    rows = []
    for name in bundled_instances():
        _, p = src.plan(name)
        c = p.cost
        rows.append([f"`{name}`", p.status, n(c.chips), n(sum(_pods(p))), n(c.fleet_cost_per_hour_usd), usd(c.cost_per_1m_output_tokens_usd),
                     usd(c.cost_per_1m_output_tokens_at_peak_usd), _gap(p)])
    return table(["instance", "plan", "chips", "pods", "fleet $/h", "$/1M output tokens (daily mean)", "$/1M output tokens (at peak)",
                  "gap to the plain sizing's bound (pod stage's own)"], rows)


@block("bundled-gemini-plans")
def bundled_gemini_plans(src) -> str:
    """docs/workloads.md: the two bundled Ironwood plans in a phrase."""
    out = []
    for name in (G, "gemini-ironwood-mooncake"):
        c = src.plan(name)[1].cost
        out.append(f"`{name}` {n(c.chips)} chips ({n(c.fleet_cost_per_hour_usd)} $/h)")
    return words(out)


# ----------------------------------------------------------------------------- docs/controller.md


def _decode_pools(plan, tier: str):
    return [p for p in plan.pools if p.role == "decode" and p.tier == tier]


@block("controller-knees")
def controller_knees(src) -> str:
    """docs/controller.md: the Gemini plan's knees and normal-hours batch caps per tier."""
    _, plan = src.plan(G)
    parts, caps = [], []
    for tier in sorted({p.tier for p in plan.pools if p.role == "decode"}, key=lambda t: -min(p.decode_normal.batch_cap for p in _decode_pools(plan, t))):
        pools = _decode_pools(plan, tier)
        shapes = words(sorted({f"{p.chips_per_slice}-chip" for p in pools}))
        k = words(sorted({str(p.decode_normal.draft_tokens) for p in pools}))
        parts.append(f"{span(p.decode_normal.knee_batch for p in pools)} residents for the {tier} tier on {shapes} slices (draft k = {k})")
        caps.append(span(p.decode_normal.batch_cap for p in pools))
    largest = max(src.plan(G)[0].serving.batch_caps)
    return f"in the Gemini plan the knee is {words(parts)}; the normal-hours caps are {' and '.join(caps)} (the largest allowed batch cap is {largest})"


@block("controller-export")
def controller_export(src) -> str:
    """docs/controller.md: what `fleetplan export --format all` writes for the Gemini plan."""
    from fleetplan.export.k8s.bundle import region_objects

    lws = region_objects(src.export(G))
    dis = region_objects(src.export(G, "disaggregatedset"))
    pairs = span(k.get("DisaggregatedSet", 0) for k, _ in dis.values())
    rows = [[r, ", ".join(f"{c} {kind}" for kind, c in kinds.items()), n(slices)] for r, (kinds, slices) in lws.items()]
    c = src.plan(G)[1].cost
    return (f"For the bundled Gemini plan ({n(c.chips)} chips, the plan `fleetplan solve` writes on the machine the regression pins were "
            "taken on: HiGHS may stop at another incumbent within the 1% gap elsewhere, moving a few slices) this writes, in "
            f"LeaderWorkerSet mode (with `--workload disaggregatedset` the prefill-decode pairs become {pairs} DisaggregatedSets per "
            "region and the rest stay LeaderWorkerSets):\n\n" + table(["region", "objects", "slices"], rows))


@block("controller-floors")
def controller_floors(src) -> str:
    """docs/controller.md: one autoscaler's hourly floors and ceiling, the largest us-east short prefill group."""
    b = src.export(G)
    scaled = {o["metadata"]["name"]: o for o in b.objects["us-east/autoscaling.yaml"]}
    groups = {o["metadata"]["name"]: o for o in b.objects["us-east/workloads.yaml"] if o["metadata"]["name"] in scaled
              and o["metadata"]["labels"].get("fleetplan/tier") == "short" and o["metadata"]["labels"].get("fleetplan/role") == "prefill"}
    name = max(sorted(groups), key=lambda k: groups[k]["spec"]["replicas"])
    so = scaled[name]
    floors = [int(x) for x in so["metadata"]["annotations"]["fleetplan/hourly-floors"].split(",")]
    hi, lo = max(floors), min(floors)
    pod = groups[name]["metadata"]["annotations"]["fleetplan/pod"].rsplit("/", 1)[1]
    return (f"The Gemini us-east short prefill group in pod {pod} ({groups[name]['spec']['replicas']} slices placed, the largest): floors "
            f"{hi} at {hours(h for h, f in enumerate(floors) if f == hi)} UTC, falling to {lo} at "
            f"{hours(h for h, f in enumerate(floors) if f == lo)} UTC (the trough: us-east's own load and that of the regions it "
            f"would absorb are lowest then), ceiling {so['spec']['maxReplicaCount']}.")


def _controller(src):
    """The controller document of the Gemini plan's placement (`fleetplan export --format controller`)."""
    from fleetplan.export.controller import build_export

    return src._once(("controller", G), lambda: build_export(*src.plan(G), src.placement(G)))


@block("controller-prefill-target")
def controller_prefill_target(src) -> str:
    """docs/controller.md: the us-east short prefill pool's queue-wait threshold."""
    t = next(t for r in _controller(src).regions if r.region == "us-east" for t in r.thresholds if t.tier == "short")
    return f"us-east short: {t.prefill_queue_wait_p95_ms:,.0f} ms"


@block("controller-decode-target")
def controller_decode_target(src) -> str:
    """docs/controller.md: the decode occupancy targets per tier (the normal-hours batch caps)."""
    knees = defaultdict(set)
    for r in _controller(src).regions:
        for t in r.thresholds:
            knees[t.tier].add(t.decode_occupancy_knee)
    return ", ".join(f"{span(v)} residents per slice for the {tier} tier" for tier, v in sorted(knees.items(), key=lambda kv: -max(kv[1])))


@block("controller-caps")
def controller_caps(src) -> str:
    """docs/controller.md: the tiers whose normal and failover batch caps are both the largest allowed."""
    inst, plan = src.plan(G)
    top = max(inst.serving.batch_caps)
    both = sorted({p.tier for p in plan.pools if p.role == "decode" and p.decode_normal.batch_cap == p.decode_failover.batch_cap == top})
    if not both:
        return "no tier of the Gemini plan has both caps at the instance's largest batch cap"
    return f"in the Gemini plan's {words(both)} tier{'s' if len(both) > 1 else ''} both caps are clamped to the instance's largest batch cap ({top} and {top})"


@block("controller-loss-dcn")
def controller_loss_dcn(src) -> str:
    """docs/controller.md: the largest DCN share the Gemini placement routes in a region loss."""
    worst = max((d.worst_loss for d in src.placement(G).dcn if d.worst_loss is not None), default=0.0)
    ceiling = min(d.dcn_share_max for d in src.placement(G).dcn)
    return f"the Gemini plan: up to {pct(worst, 1)} placed, {'within' if worst <= ceiling + 1e-9 else 'above'} {pct(ceiling)}"


def _flow(d) -> str:
    """A mapping in YAML flow style, strings quoted: {limits: {google.com/tpu: "4"}}."""
    if isinstance(d, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in d.items()) + "}"
    return f'"{d}"' if isinstance(d, str) else str(d)


@block("controller-lws-example")
def controller_lws_example(src) -> str:
    """docs/controller.md: an excerpt of the Gemini us-east export's first short prefill LeaderWorkerSet, from the export itself."""
    inst, _ = src.plan(G)
    o = next(o for o in src.export(G).objects["us-east/workloads.yaml"] if o["metadata"]["name"] == "us-east-short-prefill-ironwoodx8-00")
    md, spec = o["metadata"], o["spec"]
    tpl = spec["leaderWorkerTemplate"]
    w = tpl["workerTemplate"]
    c = w["spec"]["containers"][0]
    lab = w["metadata"]["labels"]
    chip = next(ch for ch in inst.chips.values() if ch.kubernetes is not None and ch.kubernetes.accelerator == w["spec"]["nodeSelector"][ch.kubernetes.accelerator_label])
    k = chip.kubernetes
    chips = int(md["labels"]["fleetplan/shape"].rsplit("x", 1)[1])
    pod = md["annotations"]["fleetplan/pod"]
    term = w["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    topo = md["annotations"]["leaderworkerset.sigs.k8s.io/exclusive-topology"]
    args = ", ".join(a if "{" not in a else f"'{a}'" for a in c["args"])
    lines = [
        "```yaml",
        f"apiVersion: {o['apiVersion']}",
        f"kind: {o['kind']}",
        "metadata:",
        f"  name: {md['name']}",
        "  annotations:",
        f"    fleetplan/pod: {pod}",
        f"    leaderworkerset.sigs.k8s.io/exclusive-topology: {topo}   # a slice never straddles two node pools",
        f"  labels: {{fleetplan/plan-hash: ..., fleetplan/placement-hash: ..., fleetplan/region: {md['labels']['fleetplan/region']}, "
        f"fleetplan/tier: {md['labels']['fleetplan/tier']}, ...}}",
        "spec:",
        f"  replicas: {spec['replicas']}".ljust(36) + f"# the placement's {spec['replicas']} prefill slices in pod {pod}",
        "  leaderWorkerTemplate:",
        f"    size: {tpl['size']}".ljust(36) + f"# {chips} chips / {k.chips_per_host} chips per host",
        "    workerTemplate:",
        "      metadata:",
        f"        labels: {{fleetplan/role: {lab['fleetplan/role']}, llm-d.ai/role: {lab['llm-d.ai/role']}, fleetplan/traffic: \"{lab['fleetplan/traffic']}\", "
        f"fleetplan/ici-domain: {lab['fleetplan/ici-domain']}, ...}}",
        "      spec:",
        "        nodeSelector:",
        *[f"          {key}: {v}" for key, v in w["spec"]["nodeSelector"].items()],
        "        affinity:",
        "          nodeAffinity:",
        "            requiredDuringSchedulingIgnoredDuringExecution:",
        "              nodeSelectorTerms:",
        f"              - matchExpressions: [{{key: {term['key']}, operator: {term['operator']}, values: [{', '.join(term['values'])}]}}]",
        "        containers:",
        f"        - name: {c['name']}",
        f"          image: {c['image']}     # set by the kustomization's images:",
        f"          args: [{args}]",
        f"          resources: {_flow(c['resources'])}",
        "```",
    ]
    return "\n".join(lines)


@block("placement-gemini")
def placement_gemini(src) -> str:
    """docs/placement.md: the Gemini plan placed -- pods, slices and each tier's DCN share, placed and predicted."""
    _, plan = src.plan(G)
    pl = src.placement(G)
    roles = defaultdict(int)
    for x in pl.slices:
        roles[x.role] += 1
    bought = sum(_pods(plan))
    over = [d for d in pl.dcn if d.normal > 0]
    crossing = [f"{d.region}/{d.tier} {pct(d.normal, 2)}" for d in over]
    within = "within" if all(d.normal <= d.dcn_share_max + 1e-9 for d in over) else "not all within"
    normal = ("Every tier's prefill and decode share pods: nothing crosses the DCN at the normal peak." if not crossing else
              f"At the normal peak {words(crossing)} of {'its' if len(crossing) == 1 else 'their'} tier's requests cross the DCN, "
              f"as the plan predicted ({within} the {pct(over[0].dcn_share_max)} ceiling); every other tier's prefill and decode share pods.")
    rows = [[f"{d.region}/{d.tier}", f"{pct(d.normal, 2)} ({pct(d.plan_normal or 0.0, 2)})",
             "--" if d.worst_loss is None else f"{pct(d.worst_loss, 2)} ({pct(d.plan_worst_loss or 0.0, 2)}), {d.worst_loss_scenario}"]
            for d in pl.dcn]
    return (f"Sized with its pods (the default; the plan `fleetplan solve` writes): {bought} pods bought, "
            f"{n(roles['prefill'] + roles['decode'])} slices and {roles['warm']} warm slices; `fleetplan place` uses {pl.pods_used} "
            f"of the pods. {normal} In a region loss the survivors' pools run at their failover points and take diverted load, so "
            "some pods' prefill outruns their decode; the worst losses (the placement's share, the plan's prediction in brackets):"
            "\n\n" + table(["region/tier", "normal peak", "worst region loss"], rows))


# ----------------------------------------------------------------------------- docs/gemini-vs-brief.md


def _role(plan, role: str, what: str = "chips") -> float:
    return sum(getattr(p, what) for p in plan.pools if p.role == role)


def _tiers(plan, role: str) -> str:
    """'short tier 1,157 x 8 chips (386 / 381 / 390 by region); long tier ...'."""
    by = defaultdict(lambda: defaultdict(list))
    for p in plan.pools:
        if p.role == role:
            by[p.tier][p.chips_per_slice].append(p.slices)
    out = []
    for tier in sorted(by, key=lambda t: -sum(sum(v) for v in by[t].values())):
        for chips, counts in sorted(by[tier].items()):
            out.append(f"{tier} tier {n(sum(counts))} x {chips} chips ({' / '.join(n(c) for c in counts)} by region)")
    return "; ".join(out)


@block("brief-two-plans")
def brief_two_plans(src) -> str:
    """docs/gemini-vs-brief.md: the hand plan and the optimised plan, side by side."""
    inst, plan = src.plan(G)
    hand = src.hand_plan(G)
    hc, pc = hand.cost, plan.cost
    hd = {p.chips_per_slice for p in hand.pools}
    shape = f"{words(sorted(str(x) for x in hd))} chips"
    warm = sum(w.slices for w in plan.warm_pool)
    verdict = ("verified: every SLO in every hour and every single-region loss; every tier's DCN share within its ceiling (issue 20, last section)"
               if plan.status == "verified" else f"**{plan.status}**")
    pods = _pods(plan)
    rows = [
        ["decode slices", "~750 (+30%)", f"{n(_role(hand, 'decode', 'slices'))} x {shape} (blended pool, batch 128, no speculation)", _tiers(plan, "decode")],
        ["prefill slices", "~550 (+30%)", f"{n(_role(hand, 'prefill', 'slices'))} x {shape} (mean-length rate, 160K tokens/s)", _tiers(plan, "prefill")],
        ["warm pool", "~30 per region (section 5)", "none" if not hand.warm_pool else f"{sum(w.slices for w in hand.warm_pool)} slices",
         f"{warm} slices ({n(sum(w.chips for w in plan.warm_pool))} chips) across the regions"],
        ["chips", "~13.5K", n(hc.chips), f"{n(pc.chips)} ({', '.join(n(x) for x in pods[:-1])} and {n(pods[-1])} pods)"],
        ["fleet $/h at $2/chip-hour", "~27K", n(hc.fleet_cost_per_hour_usd),
         f"{n(pc.fleet_cost_per_hour_usd)} (prefill {n(pc.prefill_cost_per_hour_usd)}, decode {n(pc.decode_cost_per_hour_usd)}, "
         f"warm pool {n(pc.warm_pool_cost_per_hour_usd)})"],
        ["$/1M output tokens, at peak (the brief's convention)", "~1.18", usd(hc.cost_per_1m_output_tokens_at_peak_usd), usd(pc.cost_per_1m_output_tokens_at_peak_usd)],
        ["$/1M output tokens at the daily mean demand", "--", usd(hc.cost_per_1m_output_tokens_usd), usd(pc.cost_per_1m_output_tokens_usd)],
        ["verifier", "--", f"**fails {n(len(hand.violations))} checks**", verdict],
    ]
    return table(["", "brief's text", "hand plan (brief's method, computed)", "fleetplan"], rows)


_CHECKS = {"prefill_ttft": "prefill", "decode_capacity": "decode", "warm_pool": "warm pool", "placement": "placement"}


@block("brief-hand-fails")
def brief_hand_fails(src) -> str:
    """docs/gemini-vs-brief.md: why the hand plan is cheaper (its verifier's findings by kind)."""
    inst, _ = src.plan(G)
    hand = src.hand_plan(G)
    by = defaultdict(list)
    for v in hand.violations:
        by[v.check].append(v)
    parts = []
    if by["prefill_ttft"]:
        normal = [v for v in by["prefill_ttft"] if v.where.startswith("normal")]
        ex = (normal or by["prefill_ttft"])[0].message.split(";")[0]
        when = "even at the normal peak" if normal else "in the region losses"
        parts.append(f"its prefill pools miss the TTFT SLO {when} ({n(len(by['prefill_ttft']))} prefill findings, e.g. \"{ex}\" -- "
                     "the pool is over 100% busy)")
    if by["decode_capacity"]:
        parts.append(f"its decode pools run out of tokens/s when a region is lost ({n(len(by['decode_capacity']))} findings)")
    if by["warm_pool"]:
        lo = inst.failover.warm_pool.min_slices_per_region
        parts.append(f"it holds no warm pool ({n(len(by['warm_pool']))} findings against the instance's policy of at least {lo} per region)")
    if by["placement"]:
        parts.append("and it has no pods, so its DCN share is not bounded (1 finding: the instance sizes with its pods)")
    rest = sorted(set(by) - set(_CHECKS))
    if rest:
        parts.append(f"and {sum(len(by[k]) for k in rest)} findings of other kinds ({', '.join(rest)})")
    return f"The hand plan is cheaper because it does not hold the SLOs: {'; '.join(parts)}."


def _perf_row(perf: dict, key: str, slice_: str) -> dict:
    return next(r for r in perf[key] if r["slice"] == slice_)


@block("brief-prefill-ratio")
def brief_prefill_ratio(src) -> str:
    """docs/gemini-vs-brief.md: the plan's prefill chips over the hand plan's."""
    _, plan = src.plan(G)
    return f"{_role(plan, 'prefill') / _role(src.hand_plan(G), 'prefill'):.1f} times"


@block("brief-prefill-collectives")
def brief_prefill_collectives(src) -> str:
    """docs/gemini-vs-brief.md: the sustained prefill rates with the collectives, and the plan's short-tier prefill."""
    perf = src.perf(G)
    _, plan = src.plan(G)
    small = min((s for s in perf["slices"]), key=lambda s: s["chips"])
    r = _perf_row(perf, "prefill_sustained", small["slice"])
    p8k = next(x for x in perf["prefill_lengths"] if x["slice"] == small["slice"] and x["prompt_tokens"] == 8192)
    short = sum(p.slices for p in plan.pools if p.role == "prefill" and p.tier == "short")
    return (f"* Both are the brief's collective-free step. With the all-reduces and all-to-alls an {small['chips']}-chip slice computes "
            f"{n(r['over_mix_tokens_per_s'])} tokens/s over the mix and {n(r['over_mix_with_hits_tokens_per_s'])} with the hits (`fleetplan perf`; "
            f"an 8K-token prompt takes {p8k['total_ms']:.1f} ms, {p8k['comm_ms']:.1f} ms of it collectives), which is why the plan's "
            f"short-tier prefill is {n(short)} slices, not ~858.")


@block("brief-long-tier")
def brief_long_tier(src) -> str:
    """docs/gemini-vs-brief.md, section 2: the long tier's p99 prompt on each slice shape."""
    from fleetplan.perf.pools import slice_specs
    from fleetplan.perf.roofline import prefill_breakdown

    inst, plan = src.plan(G)
    perf = src.perf(G)
    tier = next(t for t in perf["tiers"] if t["name"] == "long")
    s = next(d["handoff"]["prompt_tokens"] for d in perf["decode"] if d["tier"] == "long")
    c = s * tier["prefix_hit_rate"]
    times = {sl.chips: (sl, prefill_breakdown(inst.model, sl, inst.priors, s, c)) for sl in slice_specs(inst)}
    smallest = min(times)
    sl0, b0 = times[smallest]
    limit = next(x["limit_ms"] for x in tier["slos"] if x["metric"] == "ttft")
    used = sorted({p.chips_per_slice for p in plan.pools if p.role == "prefill" and p.tier == "long"})
    big = max(used)
    slb, bb = times[big]
    others = [f"{float(times[k][1].total_ms):,.0f} ms on {k} chips" for k in sorted(times) if k not in (smallest, big)]
    over = "over" if float(b0.total_ms) > limit else "within"
    return (f"**2. The long tier needs context-parallel prefill.** The long tier's p99 prompt is {s / 1000:,.0f}K tokens, {pct(tier['prefix_hit_rate'])} cached: {float(b0.total_ms):,.0f} ms on an "
            f"{smallest}-chip slice with its collectives ({float(b0.compute_ms):,.0f} ms of compute alone), {over} the {limit:g} ms budget before "
            "any queueing (the brief's \"LANE 2\" puts it at ~280 ms by counting only the FFN term of the uncached tokens). fleetplan says so "
            f"in the plan's notes and puts long-tier prefill on {words([f'{k}-chip' for k in used])} slices, where the prompt is split over "
            f"{int(bb.context_parallel)} context-parallel groups of {big // int(bb.context_parallel)} chips (ring attention, its exposed "
            f"communication in the step): {float(bb.total_ms):,.0f} ms{', ' + ', '.join(others) if others else ''}. The uncached diverted "
            "prompts at the admission clamp's length are clamped in a failover as the brief's stratified SLO allows.")


@block("brief-decode")
def brief_decode(src) -> str:
    """docs/gemini-vs-brief.md, section 3's heading: decode against the hand plan's."""
    _, plan = src.plan(G)
    hand = src.hand_plan(G)
    pc, hc = plan.cost.decode_cost_per_hour_usd, hand.cost.decode_cost_per_hour_usd
    return (f"**3. Decode costs {pct(pc / hc)} of the hand plan's** ({n(_role(plan, 'decode'))} chips against {n(_role(hand, 'decode'))}; "
            f"{n(pc)} $/h against {n(hc)}). Three levers the brief ranks but does not apply in its sizing:")


@block("brief-knees")
def brief_knees(src) -> str:
    """docs/gemini-vs-brief.md: the short tier's knees with the collectives and the plan's operating point."""
    perf = src.perf(G)
    _, plan = src.plan(G)
    d = next(x for x in perf["decode"] if x["tier"] == "short" and x["slice"] == min(perf["slices"], key=lambda s: s["chips"])["slice"])
    ks = {k: v for k, v in d["knee_batch"].items() if k != "off"}
    knees = words([f"{d['knee_batch']['off']:,} without speculation"] + [f"{v:,} with draft length {k.partition('=')[2]}" for k, v in ks.items()])
    pools = _decode_pools(plan, "short")
    caps = {p.decode_normal.batch_cap for p in pools}
    k = words(sorted({str(p.decode_normal.draft_tokens) for p in pools}))
    return (f"With the all-to-alls in the step the short tier's knee is {knees} "
            f"(`fleetplan perf`). The plan runs short-tier decode at batch {span(caps)} with draft length {k} in normal hours")


@block("brief-spec-rate")
def brief_spec_rate(src) -> str:
    """docs/gemini-vs-brief.md: the short tier's output tokens/s per slice at the plan's operating point."""
    _, plan = src.plan(G)
    p = _decode_pools(plan, "short")[0]
    op = p.decode_normal
    return (f"{n(op.tokens_per_s_per_slice)} output tokens/s per {p.chips_per_slice}-chip slice at batch {op.batch_cap} on the short tier "
            f"({n(op.tokens_per_s_per_slice / p.chips_per_slice)} per chip)")


@block("brief-failover")
def brief_failover(src) -> str:
    """docs/gemini-vs-brief.md, section 4: how the plan carries a region loss."""
    inst, plan = src.plan(G)
    losses = [s for s in plan.scenarios if s.kind == "loss"]
    per_lost = defaultdict(set)
    for s in losses:
        per_lost[s.lost_region].add(s.hour)
    splits = []
    for (lost, tier), routes in _group(plan.routing).items():
        shares = sorted(r.share for r in routes)
        if len(shares) == 2:
            splits.append(round(100 * shares[0]))
    lo, hi = min(splits), max(splits)
    split = f"{lo}/{100 - lo} to {hi}/{100 - hi}" if lo != hi else f"{lo}/{100 - lo}"
    clamp = inst.failover.admission_clamp.min_input_tokens
    sized_by = [b for b in plan.binding if " sized by " in b]
    by_loss = [b for b in sized_by if " sized by lose:" in b]
    sized = ("all decode and prefill pools are sized by a region loss, none by the normal peak" if len(by_loss) == len(sized_by)
             else f"{len(by_loss)} of the {len(sized_by)} pools are sized by a region loss, the others by the normal peak")
    return (f"**4. N-1 is sized per scenario, not with a flat margin.** The three regions' peaks are one to three hours apart; the optimiser "
            f"checks every hour of every region loss ({span(len(h) for h in per_lost.values())} Pareto-maximal hours per lost region remain "
            f"after pruning), routes the lost traffic between the two survivors ({split} by tier -- shares in the plan), sheds the batch "
            f"class ({span(s.shed_rps for s in losses)} req/s), clamps uncached >= {clamp / 1000:,.0f}K-token diverted prompts "
            f"({span(s.clamped_rps for s in losses)} req/s per loss) and brings {span(s.warm_slices_used for s in losses)} warm-pool slices into "
            f"whichever pools need them. Every pool's binding scenario is listed under \"Binding\": {sized} -- the flat 30% would not have "
            "been enough for prefill (the cold diverted traffic is the brief's x2.25 cache crater) and is far too much for decode.")


def _group(routing) -> dict:
    out = defaultdict(list)
    for r in routing:
        out[(r.lost, r.tier)].append(r)
    return out


@block("brief-takeaway")
def brief_takeaway(src) -> str:
    """docs/gemini-vs-brief.md: the two largest moves against the hand plan, as ratios."""
    _, plan = src.plan(G)
    hand = src.hand_plan(G)
    pre = plan.cost.prefill_cost_per_hour_usd / hand.cost.prefill_cost_per_hour_usd
    dec = hand.cost.decode_cost_per_hour_usd / plan.cost.decode_cost_per_hour_usd
    return f"prefill {pre:.1f} times as expensive, decode {dec:.1f} times cheaper"


# ----------------------------------------------------------------------------- docs/gpu-scenario.md


def _replica_fleet(src, name: str) -> str:
    _, plan = src.plan(name)
    by = defaultdict(int)
    for p in plan.pools:
        if p.role == "replica":
            by[(p.slice, p.chips_per_slice)] += p.slices
    parts = [f"{k} x {shape}" for (shape, _), k in sorted(by.items())]
    return f"{' + '.join(parts)} = {n(sum(k * c for (_, c), k in by.items()))} GPUs"


@block("gpu-fleet-bf16")
def gpu_fleet_bf16(src) -> str:
    """docs/gpu-scenario.md: the BF16 plan's replicas."""
    return _replica_fleet(src, "llama70b-h100-bf16-p99")


@block("gpu-fleet-fp8")
def gpu_fleet_fp8(src) -> str:
    """docs/gpu-scenario.md: the FP8 plan's replicas."""
    return _replica_fleet(src, "llama70b-h100-fp8-p99")


# ----------------------------------------------------------------------------- docs/cli.md


@block("cli-shortfall-certain")
def cli_shortfall_certain(src) -> str:
    """docs/cli.md, 'Time limits': the SHORTFALL CERTAIN figures of the Gemini instance with
    ``peak_rps: 600000000`` in us-east and us-west (a demand no fleet can serve), from
    the candidate tables alone (``build_model_data``, no solve; about a second)."""
    import yaml

    from fleetplan.tables.derived import build_model_data
    from fleetplan.instance.io import bundled_instance_path, parse_instance

    data = yaml.safe_load(bundled_instance_path(G).read_text(encoding="utf-8"))
    for r in ("us-east", "us-west"):
        data["regions"][r]["peak_rps"] = 600_000_000
    notes = build_model_data(parse_instance(data, G), tables=False).notes
    note = next(x for x in notes if x.startswith("SHORTFALL CERTAIN: us-east"))
    return note[note.index("needs at least"):note.index(" -- each pool's")]
