"""A plan's own records checked before anyone stands on them: its structure, its arithmetic
(chips, costs, fleet rows, totals) and every number it states about its fleet at work,
rebuilt from the instance, its pools, routing, recorded mitigations and pods with the same
functions that wrote them (:mod:`fleetplan.results.loads`). The readers (what-if, place,
export, report, simulate) call :func:`check_plan_contents`; a plan edited after it was
solved is refused naming the field. Sits above :mod:`fleetplan.results.verify` (which
re-proves the plan's SLOs): a plan recorded as having violations is checked against the
verifier's own finding; the verifier needs only the pods' check of :mod:`fleetplan.results.pods`."""

from __future__ import annotations

import math

from fleetplan.errors import InputError, Problem
from fleetplan.instance.io import instance_hash
from fleetplan.instance.modes import MIXABLE_ROLES
from fleetplan.instance.schema import Instance
from fleetplan.results.evaluate import Context
from fleetplan.results.modes import mode_record_problems, plan_modes, roles_at
from fleetplan.results.precision import SIGNIFICANT_DIGITS, stored_error
from fleetplan.results.plan import Plan
from fleetplan.results.pods import pod_problems, pods_used
from fleetplan.results.verify import verify

__all__ = ["check_plan_contents", "check_plan_records", "fleet_row_problems", "pod_problems", "pods_used", "sized_for_problems", "dcn_share_levels",
           "RECORD_DIGITS"]


def _tol(*values: float) -> float:
    """The plan's stored precision (:func:`~fleetplan.results.precision.stored_error`)."""
    return stored_error(*values)


def _close(have: float, want: float, parts: tuple[float, ...] = (), factors: int = 0) -> bool:
    """``have`` (stated) equals ``want`` to the plan's precision. ``want`` is rebuilt from
    exact instance data, from the sum of the stated numbers ``parts`` (their errors add),
    or as a product or ratio of ``factors`` stated numbers (their relative errors add)."""
    return abs(have - want) <= _tol(have, want, *parts) + factors * _tol(want)


def _money(probs: list[Problem], where: str, v: float, unit: str) -> bool:
    """A cost or rate the plan states must be a finite number >= 0."""
    if not math.isfinite(v) or v < 0:
        probs.append(Problem(where, f"{v}: a finite number at least 0 ({unit})."))
        return False
    return True


def _price(inst: Instance, region: str, label: str) -> float:
    """USD per slice-hour of shape ``label`` ('chip x chips') in ``region``."""
    chip, _, n = label.rpartition("x")
    return inst.regions[region].price_per_chip_hour_usd.get(chip, inst.chips[chip].price_per_chip_hour_usd) * int(n)


def _check_totals(inst: Instance, plan: Plan, probs: list[Problem]) -> None:
    """The plan's own arithmetic: every pool's and warm entry's chips and $/h, the fleet
    rows, and the cost summary (totals, token rates from the instance, $/1M) must follow
    from its slices -- an edited plan whose header and tables disagree is refused."""
    for i, p in enumerate(plan.pools):
        if p.chips != p.slices * p.chips_per_slice:
            probs.append(Problem(f"pools[{i}].chips", f"{p.chips:,} chips, but {p.slices:,} slices x {p.chips_per_slice} chips per slice = "
                                                      f"{p.slices * p.chips_per_slice:,}."))
        if p.chip != p.slice.rpartition("x")[0]:
            probs.append(Problem(f"pools[{i}].chip", f"{p.chip!r} is not the chip of the shape {p.slice}."))
        if _money(probs, f"pools[{i}].cost_per_hour_usd", p.cost_per_hour_usd, "USD/h") and \
                not _close(p.cost_per_hour_usd, want := p.slices * _price(inst, p.region, p.slice)):
            probs.append(Problem(f"pools[{i}].cost_per_hour_usd", f"{p.cost_per_hour_usd:,.6g} USD/h, but {p.slices:,} slices of {p.slice} in "
                                                                  f"{p.region} cost {want:,.6g} USD/h."))
    for i, w in enumerate(plan.warm_pool):
        n = int(w.slice.rpartition("x")[2])
        if w.chips != w.slices * n:
            probs.append(Problem(f"warm_pool[{i}].chips", f"{w.chips:,} chips, but {w.slices:,} slices x {n} chips = {w.slices * n:,}."))
        if _money(probs, f"warm_pool[{i}].cost_per_hour_usd", w.cost_per_hour_usd, "USD/h") and \
                not _close(w.cost_per_hour_usd, want := w.slices * _price(inst, w.region, w.slice)):
            probs.append(Problem(f"warm_pool[{i}].cost_per_hour_usd", f"{w.cost_per_hour_usd:,.6g} USD/h, but {w.slices:,} warm slices of "
                                                                      f"{w.slice} cost {want:,.6g} USD/h."))
    pods_cost = 0.0
    for f in plan.fleet:
        where = f"fleet[{f.region}/{f.chip}]"
        if f.region not in inst.regions or f.chip not in inst.chips:
            probs.append(Problem(where, f"no such region and chip in the instance ({', '.join(sorted(inst.regions))}; {', '.join(sorted(inst.chips))})."))
            continue
        # every total from the slices (the plan's decisions), so one edited field is one problem
        in_slices = sum(p.slices * p.chips_per_slice for p in plan.pools if (p.region, p.chip) == (f.region, f.chip))
        in_warm = sum(w.slices * int(w.slice.rpartition("x")[2]) for w in plan.warm_pool if w.region == f.region and w.slice.rpartition("x")[0] == f.chip)
        for name, have, want in (("pods_total", f.pods_total, f.pods_installed + f.pods_new),
                                 ("chips_in_pods", f.chips_in_pods, f.pods_total * inst.chips[f.chip].chips_per_pod),
                                 ("chips_in_slices", f.chips_in_slices, in_slices), ("chips_in_warm_pool", f.chips_in_warm_pool, in_warm)):
            if have != want:
                probs.append(Problem(f"{where}.{name}", f"{have:,}, but the plan's pools and pods give {want:,}."))
        new = f.pods_new * inst.chips[f.chip].new_pod_cost_per_hour_usd
        pods_cost += new
        cost = sum(p.slices * _price(inst, p.region, p.slice) for p in plan.pools if (p.region, p.chip) == (f.region, f.chip)) + \
            sum(w.slices * _price(inst, w.region, w.slice) for w in plan.warm_pool if w.region == f.region and w.slice.rpartition("x")[0] == f.chip) + new
        # the row is the rounded sum of its rounded pool and warm costs: their errors add up
        parts = [p.cost_per_hour_usd for p in plan.pools if (p.region, p.chip) == (f.region, f.chip)] + \
            [w.cost_per_hour_usd for w in plan.warm_pool if w.region == f.region and w.slice.rpartition("x")[0] == f.chip]
        if _money(probs, f"{where}.cost_per_hour_usd", f.cost_per_hour_usd, "USD/h") and not _close(f.cost_per_hour_usd, cost, tuple(parts)):
            probs.append(Problem(f"{where}.cost_per_hour_usd", f"{f.cost_per_hour_usd:,.6g} USD/h, but its pools, warm slices and new pods cost {cost:,.6g}."))
    c = plan.cost
    ok = True
    for name, value in c:
        if isinstance(value, float):
            unit = "USD/h" if name.endswith("per_hour_usd") else "USD" if name.endswith("_usd") else "tokens/day" if name.endswith("per_day") else "tokens/s"
            ok = _money(probs, f"cost.{name}", value, unit) and ok
    chips = sum(p.slices * p.chips_per_slice for p in plan.pools) + sum(w.slices * int(w.slice.rpartition("x")[2]) for w in plan.warm_pool)
    if c.chips != chips:
        probs.append(Problem("cost.chips", f"{c.chips:,} chips, but the pools and the warm pool hold {chips:,}."))
    if not ok:
        return
    role = {ro: sum(p.slices * _price(inst, p.region, p.slice) for p in plan.pools if p.role == ro) for ro in ("prefill", "decode", "replica")}
    warm = sum(w.slices * _price(inst, w.region, w.slice) for w in plan.warm_pool)
    total = sum(role.values()) + warm + pods_cost
    o = inst.workload.output_tokens
    peak_rps = sum(r.peak_rps for r in inst.regions.values())
    mean_rps = sum(r.peak_rps * sum(r.hourly_load) / 24 for r in inst.regions.values())
    mean_in = mean_rps * sum(b.share * b.tokens for b in inst.workload.input_mix)
    per_m = lambda cost_h, tok_s: cost_h / (tok_s * 3600) * 1e6 if tok_s > 0 else 0.0  # noqa: E731
    fill = (c.fleet_cost_per_hour_usd * 24 / (c.mean_output_tokens_per_s * 86400 + c.batch_infill_output_tokens_per_day) * 1e6
            if c.mean_output_tokens_per_s > 0 else 0.0)
    pool_costs = {ro: tuple(p.cost_per_hour_usd for p in plan.pools if p.role == ro) for ro in ("prefill", "decode", "replica")}
    warm_costs = tuple(w.cost_per_hour_usd for w in plan.warm_pool)
    # (field, rebuilt value, what gives it, stated numbers it sums, stated numbers it is a ratio of)
    for name, want, what, parts, factors in (
            ("fleet_cost_per_hour_usd", total, "its pools, warm slices and new pods cost", sum(pool_costs.values(), ()) + warm_costs, 0),
            ("prefill_cost_per_hour_usd", role["prefill"], "its prefill pools cost", pool_costs["prefill"], 0),
            ("decode_cost_per_hour_usd", role["decode"], "its decode pools cost", pool_costs["decode"], 0),
            ("replica_cost_per_hour_usd", role["replica"], "its replica pools cost", pool_costs["replica"], 0),
            ("warm_pool_cost_per_hour_usd", warm, "its warm slices cost", warm_costs, 0),
            ("pods_cost_per_hour_usd", pods_cost, "its new pods cost", (), 0),
            ("peak_output_tokens_per_s", peak_rps * o, "the instance's peaks give", (), 0),
            ("mean_output_tokens_per_s", mean_rps * o, "the instance's hourly loads give", (), 0),
            ("mean_input_tokens_per_s", mean_in, "the instance's hourly loads give", (), 0),
            ("cost_per_1m_output_tokens_usd", per_m(c.fleet_cost_per_hour_usd, c.mean_output_tokens_per_s), "its fleet cost over its mean output gives", (), 2),
            ("cost_per_1m_output_tokens_at_peak_usd", per_m(c.fleet_cost_per_hour_usd, c.peak_output_tokens_per_s), "its fleet cost over its peak output gives", (), 2),
            ("cost_per_1m_tokens_blended_usd", per_m(c.fleet_cost_per_hour_usd, c.mean_input_tokens_per_s + c.mean_output_tokens_per_s),
             "its fleet cost over its mean input and output gives", (), 3),
            ("cost_per_1m_output_tokens_with_infill_usd", fill, "its fleet cost over its output and batch infill gives", (), 3)):
        have = getattr(c, name)
        if name.startswith("cost_per_1m") and (have is None or c.per_1m_withheld is not None):
            # withheld figures are null, given ones numbers (whether they should be withheld is a record: check_plan_records)
            if (have is None) != (c.per_1m_withheld is not None):
                probs.append(Problem(f"cost.{name}", f"{have}, but cost.per_1m_withheld is {c.per_1m_withheld!r}: a figure is null exactly when withheld."))
            continue
        if not _close(have, want, parts, factors):
            probs.append(Problem(f"cost.{name}", f"{have:,.6g}, but {what} {want:,.6g}."))


def fleet_row_problems(inst: Instance, plan: Plan) -> list[Problem]:
    """The plan's fleet rows (``Plan.fleet``) name the instance's regions and chip types,
    each (region, chip) once, and every region and chip type the pools, warm pool and
    pods use has its row. A row edited to name another region is one problem at
    ``fleet[i].region`` listing the instance's regions (and a region it left without a
    row), found before the pods are checked against the rows: an edited ``fleet[1].region``
    was 32 "pods are numbered 0 to -1" problems that never named it."""
    probs: list[Problem] = []
    regions = ", ".join(sorted(inst.regions))
    used = {(p.region, p.chip) for p in plan.pools} | {(w.region, w.slice.rpartition("x")[0]) for w in plan.warm_pool}
    used |= {(pc.region, pc.chip) for pc in plan.pods or []}
    rows = {(f.region, f.chip) for f in plan.fleet}
    missing = sorted(k for k in used if k not in rows and k[0] in inst.regions)
    keys = [(f.region, f.chip) for f in plan.fleet]
    # a row given twice: the plan writes its rows sorted, so the edited one is the copy out of
    # its place among the rows it should have (the missing one's place)
    expected = sorted(set(keys) | set(missing))
    edited = {i for i, k in enumerate(keys) if keys.count(k) > 1 and len(expected) == len(keys) and expected[i] != k}
    seen: dict[tuple[str, str], int] = {}
    for i, f in sorted(enumerate(plan.fleet), key=lambda x: x[0] in edited):
        lost = (" -- no fleet row for " + ", ".join(f"{r} ({k})" for r, k in missing) + ", which its pools use") if missing else ""
        if f.region not in inst.regions:
            probs.append(Problem(f"fleet[{i}].region", f"unknown region {f.region!r}; the instance's regions are {regions}{lost}."))
        elif f.chip not in inst.chips:
            probs.append(Problem(f"fleet[{i}].chip", f"unknown chip type {f.chip!r}; the instance's chip types are {', '.join(sorted(inst.chips))}."))
        elif (f.region, f.chip) in seen:
            probs.append(Problem(f"fleet[{i}].region", f"{f.region} ({f.chip}) is given twice (fleet[{seen[(f.region, f.chip)]}] too); the "
                                                       f"instance's regions are {regions}{lost}."))
        else:
            seen[(f.region, f.chip)] = i
    if missing and not probs:
        probs.append(Problem("fleet", "no fleet row for " + ", ".join(f"{r} ({k})" for r, k in missing) + ", which the plan's pools use."))
    return probs


def dcn_share_levels(inst: Instance, ctx: Context, t: str) -> list[float]:
    """The DCN shares tier ``t``'s TTFT composition can be sized for (fractions, ascending):
    every share below its ceiling where the composition of a prefill pool of any slice shape
    of the instance changes (:func:`fleetplan.perf.pools.dcn_levels`, at the normal peak's
    traffic and the tier's TTFT percentile), the ceiling itself (0 when the ceiling is 0) and
    1, the overage level. A superset of the levels placement-aware sizing picks from
    (:func:`fleetplan.tables.pods.build_pod_data`: the same breakpoints of the shapes that
    can serve the tier, the first few kept), built from the instance alone."""
    from fleetplan.perf.pools import PrefillSource, dcn_levels, slice_specs, tier_slos

    limit = inst.dcn_share_max_of(t)
    found = {max(float(limit), 0.0), 1.0}
    ttft = next((s for s in tier_slos(inst, t) if s.metric == "ttft"), None)
    if limit > 0 and ttft is not None:
        tm = ctx.tiers[t]
        for sl in slice_specs(inst):
            found.update(dcn_levels(inst, tm, sl, [PrefillSource(1.0, tm.hit_rate)], ttft.percentile, limit))
    return sorted(found)


def _first_level(inst: Instance, ctx: Context, t: str, slice_label: str) -> float:
    """The first DCN share (fraction) at which the TTFT composition of tier ``t``'s prefill
    pool of ``slice_label`` changes (:func:`fleetplan.perf.pools.dcn_levels`), or the tier's
    ceiling; 0 when the tier has no TTFT SLO or the shape is unknown."""
    from fleetplan.perf.pools import PrefillSource, dcn_levels, slice_specs, tier_slos

    ttft = next((s for s in tier_slos(inst, t) if s.metric == "ttft"), None)
    sl = next((x for x in slice_specs(inst) if x.label == slice_label), None)
    if ttft is None or sl is None or t not in ctx.tiers:
        return 0.0
    lv = dcn_levels(inst, ctx.tiers[t], sl, [PrefillSource(1.0, ctx.tiers[t].hit_rate)], ttft.percentile, inst.dcn_share_max_of(t))
    return float(lv[0]) if lv else 0.0


def sized_for_problems(inst: Instance, ctx: Context, plan: Plan, scenarios: list) -> list[Problem]:
    """Each ``plan.dcn[].sized_for`` -- the DCN share a region-tier's TTFT composition was
    sized for -- against what it claims, from the instance and the plan's rebuilt scenario
    records ``scenarios``, never from the record itself (a rebuild that took
    it from the plan let any value pass, and one above the ceiling declared an overage):

    * one of the tier's levels (:func:`dcn_share_levels`: a share where its TTFT composition
      changes below its ceiling, the ceiling, or 1 -- the overage level, every request's KV
      crossing the DCN, which declares the tier over its ceiling);
    * at least the tier's share in every scenario the plan records, for a plan whose status
      says it holds (verified or shortfall);
    * a share its prefill pools were sized for: wherever a pool meets its TTFT SLO at its
      own share (the pods' share in the scenario record) it meets it at ``sized_for`` too,
      at the load it serves (net of shedding and of its shortfall, :func:`fleetplan.results.loads.served_rps`)
      on its slices -- what the sizing's level constraint guarantees (``c_prefill_ttft_dcn``);
      the composition only grows with the share (:func:`fleetplan.perf.pools.dcn_levels`). A record
      at the pool's first level (up to the first share where its composition changes) is
      checked at share 0, the curve that level is sized with.

    The overage level where the plan's pods keep every share within the ceiling is not a
    declaration the plan makes: :func:`fleetplan.results.loads.pod_dcn_records` records the
    ceiling there, so the rebuilt ``dcn`` refuses a 1 written in its place.

    Returns Problems naming ``dcn[i].sized_for`` (empty when every record holds)."""
    from fleetplan.results.loads import served_rps

    probs: list[Problem] = []
    where: dict[tuple[str, str], tuple[int, float]] = {}
    levels: dict[str, list[float]] = {}
    for i, x in enumerate(plan.dcn or []):
        if x.tier not in ctx.tiers:
            continue  # an unknown tier is the structural checks' to name
        if x.tier not in levels:
            levels[x.tier] = dcn_share_levels(inst, ctx, x.tier)
        ceiling = inst.dcn_share_max_of(x.tier)
        if not (math.isfinite(x.sized_for) and any(abs(x.sized_for - v) <= _tol(v, x.sized_for) for v in levels[x.tier])):
            shown = ", ".join(f"{v:.6g}" for v in levels[x.tier])
            probs.append(Problem(f"dcn[{i}].sized_for", f"{x.sized_for!r}: the DCN share {x.region}/{x.tier}'s TTFT was sized for is one of "
                                                        f"its levels -- a share where its TTFT composition changes below its ceiling "
                                                        f"{ceiling:.6g}, the ceiling, or 1, the overage level (every request's KV crossing "
                                                        f"the DCN): {shown}; the plan was edited after it was solved (re-solve it rather "
                                                        "than edit it)."))
            continue
        where[(x.region, x.tier)] = (i, x.sized_for)
    holds = plan.status in ("verified", "shortfall")
    for s in scenarios:
        fail = s.kind == "loss"
        for pl in s.pools:
            if pl.role != "prefill" or pl.slices <= 0 or not pl.slice or (pl.region, pl.tier) not in where:
                continue
            i, sized = where[(pl.region, pl.tier)]
            if any(p.path == f"dcn[{i}].sized_for" for p in probs):
                continue  # one problem per record
            share = pl.dcn_share or 0.0
            path = f"dcn[{i}].sized_for"
            if holds and share > sized + _tol(sized, share):
                probs.append(Problem(path, f"{sized:.6g}, but {share:.4%} of {pl.region}/{pl.tier}'s requests cross the DCN in {s.name} by "
                                           f"the plan's pods; a {plan.status} plan's TTFT was sized for at least its shares: the plan was "
                                           "edited after it was solved (re-solve it rather than edit it)."))
                continue
            if sized <= share:
                continue
            own, div = served_rps(pl)
            if own + div <= 0:
                continue
            # placement-aware sizing's first level (up to the first share where the percentile request's composition
            # changes, instance/pods._tier_levels) is sized with the tables' own curve, at share 0: the level constraint
            # guarantees the SLO at 0 there, not at the level's upper edge (under the TTFT percentile of the sum any share
            # above 0 lengthens the tail a little: the test's 3-region plan, 0.0100017 against 0.01 at the edge)
            at = 0.0 if sized <= _first_level(inst, ctx, pl.tier, pl.slice) + _tol(sized, sized) else sized
            at_sized = ctx.prefill(pl.tier, pl.slice, pl.slices, own, div, fail, at)
            if at_sized.meets_slo or not ctx.prefill_meets_slo(pl.tier, pl.slice, pl.slices, own, div, fail, share):
                continue
            miss = ", ".join(f"p{q:g} {at_sized.ttft_ms[q]:.1f} ms > {lim:g} ms" for q, lim in at_sized.slo_limit_ms.items()
                             if at_sized.ttft_ms[q] > lim + 1e-6)
            probs.append(Problem(path, f"{sized:.6g}, but {pl.region}/{pl.tier}'s prefill pool ({pl.slices} slices of {pl.slice}, "
                                       f"{own + div:,.6g} req/s in {s.name}) misses its TTFT SLO at that DCN share ({miss}) while it "
                                       f"meets it at its own share {share:.4%}: its TTFT was not sized for {sized:.6g}. The plan was "
                                       "edited after it was solved (re-solve it rather than edit it)."))
    return probs


def check_plan_contents(inst: Instance, plan: Plan) -> None:
    """Refuse a plan the what-if cannot stand on: no solution, unknown regions, tiers or
    slice shapes, non-positive slice counts, a warm pool beyond the instance's limit, a
    region-tier whose traffic has no pool at all, or contents that do not add up (chips
    = slices x chips per slice, every cost finite and >= 0 and equal to its slices' price,
    fleet rows and cost totals consistent with the pools). Raises InputError naming the
    field."""
    probs: list[Problem] = []
    if plan.status == "no_solution":
        probs.append(Problem("status", "the plan has no solution (status no_solution); re-solve it first."))
    from fleetplan.perf.pools import KNEE_SEARCH_MAX, slice_specs, tier_mixes

    labels = {sl.label for sl in slice_specs(inst)}
    tiers = {t.name for t in tier_mixes(inst)}
    drafts = {0} | (set(inst.speculation.draft_tokens) if inst.speculation.enabled else set())
    modes = plan_modes(inst, plan)
    probs += [Problem(where, msg + ".") for where, msg in mode_record_problems(inst, plan) if where.startswith("serving_modes")]
    have = set()
    for i, p in enumerate(plan.pools):
        where = f"pools[{i}]"
        if p.region not in inst.regions:
            probs.append(Problem(f"{where}.region", f"unknown region {p.region!r}; the instance has {', '.join(sorted(inst.regions))}."))
        if p.tier not in tiers:
            probs.append(Problem(f"{where}.tier", f"unknown tier {p.tier!r}; the instance has {', '.join(sorted(tiers))}."))
        if p.slice not in labels:
            probs.append(Problem(f"{where}.slice", f"unknown slice shape {p.slice!r}; the instance allows {', '.join(sorted(labels))}."))
        roles = set(roles_at(modes, p.region, p.tier))
        if p.role not in roles:
            probs.append(Problem(f"{where}.role", f"{p.role!r} does not fit {modes.get((p.region, p.tier), inst.serving.mode)} serving "
                                                  f"in {p.region}/{p.tier} ({', '.join(sorted(roles))})."))
        if p.slices < 1:
            probs.append(Problem(f"{where}.slices", f"{p.slices}: a pool has at least 1 slice (count)."))
        if p.slice in labels and p.chips_per_slice != int(p.slice.rpartition("x")[2]):
            probs.append(Problem(f"{where}.chips_per_slice", f"{p.chips_per_slice} does not match the shape {p.slice}."))
        for name in ("decode_normal", "decode_failover"):
            op = getattr(p, name)
            if op is None:
                continue
            if not 1 <= op.batch_cap <= KNEE_SEARCH_MAX:
                probs.append(Problem(f"{where}.{name}.batch_cap", f"{op.batch_cap}: between 1 and {KNEE_SEARCH_MAX} resident requests per slice."))
            if op.draft_tokens not in drafts:
                probs.append(Problem(f"{where}.{name}.draft_tokens", f"{op.draft_tokens}: one of {sorted(drafts)} (the instance's draft lengths, 0 = off)."))
        if p.role == "decode" and (p.decode_normal is None or p.decode_failover is None):
            probs.append(Problem(where, "a decode pool needs decode_normal and decode_failover operating points."))
        mixed = inst.serving.mixed_shapes and p.role in MIXABLE_ROLES
        key = (p.region, p.tier, p.role) + ((p.slice,) if mixed else ())
        if key in have:
            probs.append(Problem(where, f"a second {p.role} pool for tier {p.tier!r} in {p.region!r}" +
                                 (f" of shape {p.slice}; a mixed pool has one entry per slice shape." if mixed else
                                  "; a plan has one pool per region, tier and role"
                                  + (" (serving.mixed_shapes is off)." if p.role in MIXABLE_ROLES else " (a prefill pool is one slice shape)."))))
        have.add(key)
    wmax = inst.failover.warm_pool.max_slices_per_region
    seen_warm = set()
    for i, w in enumerate(plan.warm_pool):
        if (w.region, w.slice) in seen_warm:
            probs.append(Problem(f"warm_pool[{i}]", f"a second warm-pool entry for {w.slice} in {w.region!r}."))
        seen_warm.add((w.region, w.slice))
        if w.region not in inst.regions:
            probs.append(Problem(f"warm_pool[{i}].region", f"unknown region {w.region!r}."))
        if w.slice not in labels:
            probs.append(Problem(f"warm_pool[{i}].slice", f"unknown slice shape {w.slice!r}."))
        if not 0 <= w.slices <= wmax:
            probs.append(Problem(f"warm_pool[{i}].slices", f"{w.slices}: between 0 and the instance's max_slices_per_region {wmax} (count)."))
    probs += fleet_row_problems(inst, plan)
    if not probs:
        probs += pod_problems(inst, plan)
    if not probs:
        _check_totals(inst, plan, probs)
    # the slices must fit the pods the plan buys (and the pods what the instance allows)
    if not probs:
        chips: dict[tuple[str, str], int] = {}
        for p in plan.pools:
            k = p.slice.rpartition("x")[0]
            chips[(p.region, k)] = chips.get((p.region, k), 0) + p.slices * p.chips_per_slice
        for w in plan.warm_pool:
            k, _, n = w.slice.rpartition("x")
            chips[(w.region, k)] = chips.get((w.region, k), 0) + w.slices * int(n)
        pods = {(f.region, f.chip): f.pods_total for f in plan.fleet}
        for (r, k), c in sorted(chips.items()):
            inv = inst.regions[r].pods.get(k)
            most = (inv.installed + inv.available_new) if inv else 0
            n = pods.get((r, k), 0)
            if n > most:
                probs.append(Problem(f"fleet[{r}/{k}].pods_total", f"{n} pods; the instance allows {most} in {r}."))
            elif c > n * inst.chips[k].chips_per_pod:
                probs.append(Problem(f"pools ({r}, {k})", f"{c:,} chips of slices in {n} pods of {inst.chips[k].chips_per_pod} chips."))
        shares: dict[tuple[str, str], list[float]] = {}
        for i, rt in enumerate(plan.routing):
            if not 0.0 <= rt.share <= 1.0:
                probs.append(Problem(f"routing[{i}].share", f"{rt.share}: a share between 0 and 1."))
            shares.setdefault((rt.lost, rt.tier), []).append(rt.share)
        for (x, t), vs in sorted(shares.items()):
            v = sum(vs)
            if abs(v - 1.0) > _tol(1.0, *vs):
                probs.append(Problem("routing", f"the shares of {x}'s tier {t} traffic sum to {v:.4f}, not 1."))
    if not probs and plan.status not in ("shortfall", "unverified"):
        # a shortfall plan may leave a tier with no pool at all (no shape serves it): its records
        # say so (the tier's load unserved) and the records check below holds them to the instance (so may an unverified one)
        for r in sorted(inst.regions):
            if inst.regions[r].peak_rps <= 0:
                continue  # no traffic of its own: pools only if it absorbs a loss (the records check says if they add up)
            for t in sorted(tiers):
                for ro in sorted(roles_at(modes, r, t)):
                    if not any(k[:3] == (r, t, ro) for k in have):  # a mixed pool's keys carry the shape too
                        probs.append(Problem("pools", f"no {ro} pool for tier {t!r} in region {r!r}: the plan serves none of that traffic; "
                                                      "give a plan from `fleetplan solve` that serves the normal load."))
    if not probs:
        probs.extend(check_plan_records(inst, plan))
    if probs:
        raise InputError("plan", probs)


#: Significant digits to which a recorded number must match its rebuild: the plan's own
#: (:data:`~fleetplan.results.precision.SIGNIFICANT_DIGITS`). The writer computes every record
#: from the decisions as the file stores them (routing shares, shed rates and shortfalls at
#: six digits: :func:`fleetplan.results.loads.as_recorded`), so the reader's rebuild runs the
#: same arithmetic on the same numbers and agrees bit for bit on one machine (every bundled
#: plan does); the stored error of both sides (about 1e-5 of the magnitude) leaves room for a
#: last stored digit that another machine's last-bit float difference rounds the other way
#: (the searches behind capacities and growth stop within 2^-40 to 3e-8 of their bracket),
#: and for nothing more: a record edited by 1e-4 of itself is refused (three
#: digits let a 1% edit through). Decisions (counts, batch caps, draft lengths, names) compare exactly.
RECORD_DIGITS = SIGNIFICANT_DIGITS


def _diff(path: str, have, want, out: list[tuple[str, object, object]]) -> None:
    """Append (path, have, want) for every leaf where two model dumps differ (numbers
    beyond their stored error at RECORD_DIGITS significant digits, each number compared as
    recorded: a growth absorbed g as g, not as the multiplier 1 + g)."""
    if isinstance(want, dict) and isinstance(have, dict):
        for k in sorted(set(want) | set(have)):
            _diff(f"{path}.{k}", have.get(k), want.get(k), out)
    elif isinstance(want, list) and isinstance(have, list) and len(want) == len(have):
        for i, (a, b) in enumerate(zip(have, want)):
            _diff(f"{path}[{i}]", a, b, out)
    elif isinstance(want, (int, float)) and isinstance(have, (int, float)) and not isinstance(want, bool) and not isinstance(have, bool):
        a, b = float(have), float(want)
        if not (a == b or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= stored_error(a, b, digits=RECORD_DIGITS))):
            out.append((path, have, want))
    elif have != want:
        out.append((path, have, want))


def _accept_older_margins(have: list[dict], want: list[dict]) -> None:
    """Plans written before the margins kept four digits (a 1e-3 search floored to three)
    and named one source per SLO: a recorded margin of three significant digits at most 1.2%
    under the rebuilt one (never over it) is the older search's, and a record without
    ``load_source`` predates it; both are taken as the rebuilt values (in place)."""
    from fleetplan.results.precision import floor_digits

    if len(have) != len(want):
        return
    for h, w in zip(have, want):
        if "load_source" not in h and "load_source" in w and h.get("source") is not None:
            h["load_source"] = w["load_source"]
        for k in ("step_time_margin", "load_margin"):
            a, b = h.get(k), w.get(k)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and a == floor_digits(a, 3) \
                    and b * (1 - 0.012) <= a <= b * (1 + 1e-9):
                h[k] = b


def check_plan_records(inst: Instance, plan: Plan, most: int = 12) -> list[Problem]:
    """The numbers a plan records about its fleet at work -- each pool's operating points
    and speculation switch, the fleet rows, the cost summary (batch infill included), the
    status, and every scenario's loads, capacities and TTFT/TPOT predictions -- rebuilt from the instance, the plan's pools, routing and recorded
    mitigations (shed rates, warm slices, shortfall) with the same functions that wrote
    them (:mod:`fleetplan.results.loads`), and compared. A plan edited by hand after the
    solve (a doubled arrival rate, a negative estimate, a batch cap that no longer matches
    its step time) fails here: the simulator, the what-if and the report would otherwise
    take the edited numbers at their word.

    Returns the first ``most`` differences as Problems naming the field (plus a count);
    empty when the records are the instance's and the pools'. Assumes the structural
    checks of :func:`check_plan_contents` passed (known regions, tiers, shapes, roles).
    """
    import hashlib

    key = (instance_hash(inst), hashlib.sha256(plan.model_dump_json().encode()).hexdigest(), most)
    if key not in _RECORDS_CHECKED:
        if len(_RECORDS_CHECKED) >= 16:
            _RECORDS_CHECKED.pop(next(iter(_RECORDS_CHECKED)))
        _RECORDS_CHECKED[key] = _check_plan_records(inst, plan, most)
    return list(_RECORDS_CHECKED[key])


#: (instance hash, plan JSON hash, most) -> problems: a plan checked once per process
#: (a report that runs the what-if, a test session) is not rebuilt again (~0.4 s each).
_RECORDS_CHECKED: dict[tuple, list[Problem]] = {}


def _check_plan_records(inst: Instance, plan: Plan, most: int) -> list[Problem]:
    from fleetplan.instance.scenarios import build_scenarios
    from fleetplan.results.loads import binding, cost_summary, fleet_rows, make_pool, pod_dcn_records, recorded_decisions, scenario_results
    from fleetplan.results.margins import pool_margins
    from fleetplan.results.loads import physics_record

    ctx = Context(inst)
    odd = [Problem(f"pools[{i}].tier", f"{p.tier!r} is not a tier of this instance ({', '.join(ctx.tiers)}).")
           for i, p in enumerate(plan.pools) if p.tier not in ctx.tiers]
    if odd:
        return odd
    diffs: list[tuple[str, object, object]] = []
    for i, p in enumerate(plan.pools):
        pair = (lambda op: (op.batch_cap, op.draft_tokens) if op is not None else None)
        want = make_pool(inst, ctx, p.region, p.tier, p.role, p.slice, p.slices, pair(p.decode_normal), pair(p.decode_failover), p.schedule)
        _diff(f"pools[{i}]", p.model_dump(mode="json"), want.model_dump(mode="json"), diffs)
    fleet = fleet_rows(inst, ctx, plan.pools, plan.warm_pool, pods_used(plan))
    _diff("fleet", [f.model_dump(mode="json") for f in plan.fleet], [f.model_dump(mode="json") for f in fleet], diffs)
    short = any(q.shortfall > 1e-6 for s in plan.scenarios for q in s.pools)
    if plan.status == "shortfall" and not short:
        diffs.append(("status", "shortfall", "verified (no scenario records a shortfall)"))
    elif plan.status == "verified" and short:
        diffs.append(("status", "verified", "shortfall (a scenario records load unserved within the SLOs)"))
    known = {s.name: s for s in build_scenarios(inst)}
    probs = [Problem(f"scenarios[{i}].name", f"{s.name!r} is not a scenario of this instance (normal, or lose:REGION@HH of its N-1 losses).")
             for i, s in enumerate(plan.scenarios) if s.name not in known]
    names = [s.name for s in plan.scenarios]
    if not probs and names != list(known):
        missing = [n for n in known if n not in names]
        twice = sorted({n for n in names if names.count(n) > 1})
        what = "; ".join(([f"missing {', '.join(missing)}"] if missing else []) + ([f"given twice: {', '.join(twice)}"] if twice else [])
                         + ([] if (missing or twice) else ["in another order"]))
        probs.append(Problem("scenarios", f"the plan records {len(names)} scenarios, the instance's are {len(known)} ({', '.join(known)}): {what}. "
                                          "The plan was edited after it was solved (re-solve it rather than edit it)."))
    for i, s in enumerate(plan.scenarios):
        seen_keys = set()
        for j, pl in enumerate(s.pools):
            key = (pl.region, pl.tier, pl.role)
            if key in seen_keys:  # a pool given twice was read once and the copies passed
                probs.append(Problem(f"scenarios[{i}].pools[{j}]", f"the {pl.role} pool of tier {pl.tier!r} in {pl.region!r} is given twice in "
                                                                   f"scenario {s.name!r}; the plan was edited after it was solved."))
            seen_keys.add(key)
            # the decisions the rebuild starts from must be possible: shed within the arrivals
            # (a shed of 1e308 req/s reached the physics as a negative rate)
            if not (0.0 <= pl.shed_diverted_rps <= pl.shed_rps * (1 + 1e-5) + 1e-9 and pl.shed_rps <= pl.arrivals_rps * (1 + 1e-5) + 1e-9) \
                    or pl.shortfall < 0 or pl.warm_slices < 0:
                probs.append(Problem(f"scenarios[{i}].pools[{j}]", "sheds, shortfall or warm slices out of range: 0 <= shed_diverted_rps <= shed_rps "
                                                                   "<= arrivals_rps (requests/s), shortfall >= 0, warm_slices >= 0; the plan was "
                                                                   "edited after it was solved.",
                                     f"shed_rps {pl.shed_rps!r}, shed_diverted_rps {pl.shed_diverted_rps!r}, arrivals_rps {pl.arrivals_rps!r}, "
                                     f"shortfall {pl.shortfall!r}, warm_slices {pl.warm_slices!r}"))
            if len(probs) >= most:
                return probs
    if probs:
        return probs
    routing = {(r.lost, r.to, r.tier): r.share for r in plan.routing}
    decisions = recorded_decisions(plan.scenarios)
    rebuilt = scenario_results(inst, ctx, [known[s.name] for s in plan.scenarios], plan.pools, routing, decisions, plan_modes(inst, plan),
                               pods=plan.pods)
    if plan.pods is not None:
        sized = {(x.region, x.tier): x.sized_for for x in plan.dcn or []}
        pods, dcn = pod_dcn_records(inst, ctx, plan.pods, plan.pools, rebuilt, sized)
        _diff("pods", [p.model_dump(mode="json") for p in plan.pods], [p.model_dump(mode="json") for p in pods], diffs)
        _diff("dcn", [x.model_dump(mode="json") for x in plan.dcn or []], [x.model_dump(mode="json") for x in dcn], diffs)
    elif plan.dcn is not None:
        diffs.append(("dcn", "(records)", "(none: the plan has no pods)"))
    _diff("cost", plan.cost.model_dump(mode="json"), cost_summary(inst, ctx, plan.pools, plan.warm_pool, fleet, rebuilt).model_dump(mode="json"), diffs)
    for i, (have, want) in enumerate(zip(plan.scenarios, rebuilt)):
        h, w = have.model_dump(mode="json"), want.model_dump(mode="json")
        hp = {(q["region"], q["tier"], q["role"]): (j, q) for j, q in enumerate(h.pop("pools"))}
        wp = {(q["region"], q["tier"], q["role"]): q for q in w.pop("pools")}
        _diff(f"scenarios[{i}]", h, w, diffs)
        for key, q in wp.items():
            if key not in hp:
                diffs.append((f"scenarios[{i}].pools", "(missing)", f"{key[2]} {key[0]}/{key[1]}"))
                continue
            j, got = hp.pop(key)
            _diff(f"scenarios[{i}].pools[{j}]", got, q, diffs)
        for key, (j, _) in hp.items():
            diffs.append((f"scenarios[{i}].pools[{j}]", f"{key[2]} {key[0]}/{key[1]}", "(not a pool of this scenario)"))
    want_binding = binding(inst, ctx, rebuilt, fleet)
    if list(plan.binding) != want_binding:
        diffs.append(("binding", plan.binding, want_binding))
    # the physics sources and the margins: instances with a physics block carry them
    physics = physics_record(inst, rebuilt)
    _diff("physics", plan.physics.model_dump(mode="json") if plan.physics else None, physics.model_dump(mode="json") if physics else None, diffs)
    margins = pool_margins(inst, plan.pools, rebuilt) if (physics is not None and plan.margins is not None) else None
    if physics is not None and plan.margins is None:
        diffs.append(("margins", None, "(the margins of every pool: the instance has a physics block)"))
    have_m, want_m = [m.model_dump(mode="json") for m in plan.margins or []], [m.model_dump(mode="json") for m in margins or []]
    _accept_older_margins(have_m, want_m)
    _diff("margins", have_m, want_m, diffs)
    if plan.status == "violations" and not verify(inst, plan):
        diffs.append(("status", "violations", "verified or shortfall (the independent verifier finds no violation)"))
    out = [Problem(path, f"the plan records {have!r}; its pools, routing and mitigations on this instance give {want!r}: "
                         "the plan was edited after it was solved (re-solve it rather than edit it).") for path, have, want in diffs[:most]]
    if len(diffs) > most:
        out.append(Problem("...", f"and {len(diffs) - most} more recorded numbers that differ"))
    if plan.pods is not None and len(out) < most:
        # the share each tier's TTFT was sized for, held to the instance and the rebuilt records (after the
        # records themselves: an edited decision shows first where it was made)
        out += sized_for_problems(inst, ctx, plan, rebuilt)[:most - len(out)]
    return out
