"""The independent check of a placement's scenario routing (a plan sized with its pods,
``Placement.scenarios``): recomputed from the placement's own slices, warm joins and
routing rows and from the plan's scenario records, with the instance's physics
(:mod:`fleetplan.results.evaluate`, :mod:`fleetplan.results.dcn`'s rates and KV sizes) --
never from the placer's code or the optimisation models. Called by
:func:`fleetplan.placement.check.verify_placement`.

In every scenario of the plan, per surviving region and tier: the warm slices that join
each pool are warm slices of that region, in the pod stated, each used once, as many and
of the shape the plan's record says; the routing carries the tier's load -- every pod with
prefill slices (the joined warm ones included) routes lambda / n per slice, shares summing
to 1, to pods whose decode slices (joined warm ones included) take it at the scenario's
operating point; the DCN share it gives is within the tier's ceiling (unless the plan
declares the overage: ``plan.dcn[].sized_for`` above it) and the region's within the
overall ceiling; where it is above the share the plan's TTFT prediction paid, the TTFT is
recomputed at the placement's share against the SLO; every pod's KV leaving over the DCN
is within its egress (``ChipType.pod_egress_gbytes_per_s``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetplan.instance.schema import Instance
from fleetplan.results.plan import Plan, Violation
from fleetplan.results.precision import stored_error

__all__ = ["scenario_problems"]

REL = 1e-6  # relative tolerance of the stated figures (shares to 9 digits, req/s to 6 decimals)


def _close(a: float, b: float, n: int = 1) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b), 1.0) + 1e-6 * n


def scenario_problems(inst: Instance, plan: Plan, pl) -> list[Violation]:
    """The violations of ``pl``'s scenario routing against ``plan`` (empty: it holds); see
    the module docstring. Violations come in the order found: the scenario records, then
    per scenario of the plan its joins, tiers, egress and region ceilings, then the
    placement's per region x tier DCN summary."""
    if plan.pods is None:
        if pl.scenarios is not None:
            return [Violation(check="scenarios", where="placement",
                              message="carries scenario routing (schema_version 2), but the plan was sized without its pods")]
        return []
    if pl.scenarios is None:
        return [Violation(check="scenarios", where="placement",
                          message="the plan is sized with its pods, but the placement carries no routing of its scenarios (schema_version 1: "
                                  "made by the online placer or an earlier fleetplan); place the plan again with `fleetplan place`")]
    c = _ScenarioCheck(inst, plan, pl)
    by_name = c.records_by_name()
    top = sorted((w.region, w.tier, w.from_pod, w.to_pod, w.share, w.rps) for w in pl.routing)
    for sc in plan.scenarios:
        rec = by_name.get(sc.name)
        if rec is None:
            c.v("scenarios", sc.name, "the placement has no routing for this scenario of the plan")
            continue
        c.scenario(sc, rec, top)
    c.dcn_summary()
    return c.out


@dataclass
class _Tally:
    """What one scenario's tiers add up to: KV leaving each pod over the DCN (GB/s), per
    region the requests/s whose KV crosses the DCN and the requests/s served ([cross,
    all]), and the regions where the plan declares a tier's DCN overage."""

    egress: dict[str, float] = field(default_factory=dict)
    region_tot: dict[str, list[float]] = field(default_factory=dict)
    declared: set[str] = field(default_factory=set)


class _ScenarioCheck:
    """The scenario check of one placement under way: the instance, the plan and the
    placement, the instance's physics context (:class:`fleetplan.results.evaluate.Context`),
    the violations found (in the order found) and each (scenario, region, tier)'s DCN share
    and scenario kind, which the summary rows are checked against."""

    def __init__(self, inst: Instance, plan: Plan, pl):
        from fleetplan.results.evaluate import Context

        self.inst, self.plan, self.pl = inst, plan, pl
        self.ctx = Context(inst)
        self.slices = {s.id: s for s in pl.slices}
        self.pods = {p.id: p for p in pl.pods}
        self.sized = {(x.region, x.tier): x.sized_for for x in plan.dcn or []}
        self.out: list[Violation] = []
        self.seen: dict[tuple, tuple] = {}

    def v(self, check: str, where: str, msg: str) -> None:
        self.out.append(Violation(check=check, where=where, message=msg))

    def records_by_name(self) -> dict:
        """The placement's scenario records by name; a name twice or one the plan does not have is a violation."""
        by_name = {}
        for s in self.pl.scenarios:
            if s.scenario in by_name:
                self.v("scenarios", s.scenario, "appears twice")
            by_name[s.scenario] = s
        names = {sc.name for sc in self.plan.scenarios}
        for s in sorted(set(by_name) - names):
            self.v("scenarios", s, "is not a scenario of the plan")
        return by_name

    def scenario(self, sc, rec, top: list) -> None:
        """Scenario ``sc`` of the plan against the placement's record ``rec`` of it
        (``top``: the placement's own routing rows, sorted, which the normal record repeats)."""
        label = sc.name
        if (rec.kind, rec.lost_region, rec.hour) != (sc.kind, sc.lost_region, sc.hour):
            self.v("scenarios", label, f"kind/lost region/hour {rec.kind}/{rec.lost_region}/{rec.hour}, the plan's {sc.kind}/{sc.lost_region}/{sc.hour}")
        fail = sc.kind == "loss"
        if not fail and sorted((w.region, w.tier, w.from_pod, w.to_pod, w.share, w.rps) for w in rec.routing) != top:
            self.v("routing", label, "the normal scenario's routing is not the placement's routing")
        joined = self.warm_joins(sc, rec)
        # per region x tier: the load carried, the shares, the ceiling, the TTFT
        rows: dict[tuple, list] = {}
        for w in rec.routing:
            rows.setdefault((w.region, w.tier), []).append(w)
        stated = {(x.region, x.tier): x for x in rec.tiers}
        tally = _Tally()
        for p in sc.pools:
            if p.role != "prefill" or p.slices <= 0:
                continue
            self.tier(sc, p, rows.pop((p.region, p.tier), []), joined, stated.get((p.region, p.tier)), tally)
        for (r, t), ws in sorted(rows.items()):
            if ws:
                self.v("routing", f"{label} {r}/{t}", "routes a tier-region whose prefill pool serves nothing in this scenario")
        self.egress(label, rec, tally)
        self.region_ceilings(label, tally)

    def warm_joins(self, sc, rec) -> dict[tuple, list]:
        """The warm slices joining pools in scenario ``sc`` (record ``rec``): each a warm
        slice of the placement, in the pod stated, used once, of a surviving region in a
        loss, as many per pool and of the shape the plan's record says. Returns (region,
        tier, role) -> the joining slices."""
        label, fail = sc.name, sc.kind == "loss"
        joined: dict[tuple, list] = {}
        used = set()
        for w in rec.warm:
            s = self.slices.get(w.slice_id)
            if s is None or s.role != "warm":
                self.v("warm", f"{label} {w.slice_id}", "is not a warm slice of the placement")
                continue
            if w.slice_id in used:
                self.v("warm", f"{label} {w.slice_id}", "joins two pools")
            used.add(w.slice_id)
            if s.pod != w.pod or s.region != w.region:
                self.v("warm", f"{label} {w.slice_id}", f"sits in {s.pod}, not {w.pod}")
            if not fail or w.region == sc.lost_region:
                self.v("warm", f"{label} {w.slice_id}", "joins a pool of a region that is lost (or at the normal peak, where none joins)")
            joined.setdefault((w.region, w.tier, w.role), []).append(s)
        recs = {(p.region, p.tier, p.role): p for p in sc.pools}
        for key in sorted(set(joined) | {k for k, p in recs.items() if fail and p.warm_slices > 0}, key=str):
            want = recs[key].warm_slices if (key in recs and fail) else 0
            got = joined.get(key, [])
            if len(got) != want:
                self.v("warm", f"{label} {key[2]}[{key[0]},{key[1]}]", f"{len(got)} warm slices join, the plan's record says {want}")
            elif got and any(s.slice != recs[key].slice for s in got):
                self.v("warm", f"{label} {key[2]}[{key[0]},{key[1]}]", f"warm slices of {sorted({s.slice for s in got})} join; the plan's are {recs[key].slice}")
        return joined

    def tier(self, sc, p, mine: list, joined: dict[tuple, list], got, tally: _Tally) -> None:
        """The prefill pool record ``p`` of scenario ``sc`` (a region x tier) against its
        routing rows ``mine`` and its stated DCN record ``got``: the rows carry its load to
        decode capacity, its DCN share within its ceiling, its TTFT at that share when above
        the plan's prediction; its egress and region totals go to ``tally``."""
        from fleetplan.results.dcn import decode_rates, kv_gbytes
        from fleetplan.results.loads import served_rps

        r, t, fail = p.region, p.tier, sc.kind == "loss"
        where = f"{sc.name} {r}/{t}"
        own, div = served_rps(p)
        lam = own + div
        if lam <= 0:
            return
        pre: dict[str, int] = {}
        for s in self.pl.slices:
            if (s.region, s.tier, s.role) == (r, t, "prefill"):
                pre[s.pod] = pre.get(s.pod, 0) + 1
        for s in joined.get((r, t, "prefill"), []):
            pre[s.pod] = pre.get(s.pod, 0) + 1
        n = sum(pre.values())
        if n != p.slices:
            self.v("routing", where, f"{n} prefill slices in the placement (warm ones joined included), the plan's record has {p.slices}")
            return
        rates = decode_rates(self.ctx, [q for q in self.plan.pools if q.region == r], t, fail)
        cap: dict[str, float] = {}
        for s in self.pl.slices:
            if (s.region, s.tier, s.role) == (r, t, "decode"):
                cap[s.pod] = cap.get(s.pod, 0.0) + rates.get(s.slice, 0.0)
        for s in joined.get((r, t, "decode"), []):
            cap[s.pod] = cap.get(s.pod, 0.0) + rates.get(s.slice, 0.0)
        cross, out_of = self.rows(where, p, mine, pre, cap, lam / n, fail)
        share = min(cross / lam, 1.0)
        kv = kv_gbytes(self.ctx, t, own, div)
        for j, x in out_of.items():
            tally.egress[j] = tally.egress.get(j, 0.0) + x * kv
        acc = tally.region_tot.setdefault(r, [0.0, 0.0])
        acc[0] += cross
        acc[1] += lam
        limit = self.inst.dcn_share_max_of(t)
        over = self.sized.get((r, t)) is not None and self.sized[(r, t)] > limit
        if over:
            tally.declared.add(r)
        if share > limit + stored_error(limit, share) and not over:  # the plan verifier's tolerance: the sizing bounds it to that
            self.v("dcn_share", where, f"{share:.2%} of the tier's requests send their KV over the DCN ({cross:.6g} of {lam:.6g} req/s), "
                   f"above its ceiling {limit:.2%}")
        if p.dcn_share is not None and share > p.dcn_share + 1e-6 and p.slice:
            ev = self.ctx.prefill(t, p.slice, n, own, div, fail, share)
            if not ev.meets_slo:  # the percentile of the sum, as sized (perf.ttft_tail)
                est = self.ctx.ttft_estimate(t, p.slice, n, own, div, fail, sorted(ev.slo_limit_ms), share)
                bad = [f"p{q:g} {ms:.0f} ms > {ev.slo_limit_ms[q]:g} ms" for q, ms in est.items() if ms > ev.slo_limit_ms[q]]
                self.v("ttft", where, f"TTFT {', '.join(bad) or 'percentile of the sum at its limit'} with {share:.2%} of the KV over the DCN (the plan's prediction paid {p.dcn_share:.2%})")
        if got is None:
            self.v("dcn", where, "the scenario record lists no DCN share for this tier")
        elif abs(got.dcn_share - share) > 1e-6 or not _close(got.rps, lam) or got.prefill_slices != n:
            self.v("dcn", where, f"records share {got.dcn_share:.6f} of {got.rps:.6g} req/s on {got.prefill_slices} slices; the routing gives "
                   f"{share:.6f} of {lam:.6g} req/s on {n}")
        self.seen[(sc.name, r, t)] = (share, sc.kind)

    def rows(self, where: str, p, mine: list, pre: dict[str, int], cap: dict[str, float], per: float,
             fail: bool) -> tuple[float, dict[str, float]]:
        """The routing rows ``mine`` of prefill pool record ``p``: each from a pod with
        prefill slices (``pre``: pod -> slices) to one with decode capacity (``cap``: pod
        -> req/s), its req/s its share of the pod's load (``per`` req/s per prefill slice),
        each pod's shares summing to 1, no pod's decode taking more than its capacity.
        Returns the req/s crossing the DCN and per pod the req/s leaving it."""
        sent: dict[str, float] = {}
        share_of: dict[str, float] = {}
        intake: dict[str, float] = {}
        cross = 0.0
        out_of: dict[str, float] = {}
        for w in mine:
            if pre.get(w.from_pod, 0) == 0:
                self.v("routing", f"{where} {w.from_pod}->{w.to_pod}", "routes from a pod with no prefill slice of the tier in this scenario")
            if cap.get(w.to_pod, 0.0) <= 0:
                self.v("routing", f"{where} {w.from_pod}->{w.to_pod}", "sends KV to a pod with no decode capacity of the tier in this scenario")
            sent[w.from_pod] = sent.get(w.from_pod, 0.0) + w.rps
            share_of[w.from_pod] = share_of.get(w.from_pod, 0.0) + w.share
            intake[w.to_pod] = intake.get(w.to_pod, 0.0) + w.rps
            if not _close(w.rps, w.share * per * pre.get(w.from_pod, 0)):
                self.v("routing", f"{where} {w.from_pod}->{w.to_pod}", f"{w.rps:.6g} req/s is not its share {w.share:.6g} of the pod's "
                       f"{per * pre.get(w.from_pod, 0):.6g} req/s")
            if w.from_pod != w.to_pod:
                cross += w.rps
                out_of[w.from_pod] = out_of.get(w.from_pod, 0.0) + w.rps
        for j, k in sorted(pre.items()):
            if j not in share_of:
                self.v("routing", f"{where} {j}", f"{k} prefill slice(s) and no routing")
            elif abs(share_of[j] - 1.0) > 1e-6:
                self.v("routing", f"{where} {j}", f"shares sum to {share_of[j]:.6f}, not 1")
            elif not _close(sent[j], per * k, len(mine)):
                self.v("routing", f"{where} {j}", f"routes {sent[j]:.6g} req/s; its {k} prefill slice(s) serve {per * k:.6g}")
        # lambda comes from the record's figures, each stored to six digits: the decode slices
        # may take up to their error less than the routing carries (at 100% load, one pod may
        # receive all of it)
        err = stored_error(p.arrivals_rps, p.diverted_rps, p.shed_rps, p.shed_diverted_rps, p.shortfall)
        for j, x in sorted(intake.items()):
            if x > cap.get(j, 0.0) * (1 + REL) + err + 1e-6 * len(mine):
                self.v("decode_intake", f"{where} {j}", f"takes {x:.6g} req/s of KV; its decode slices take {cap.get(j, 0.0):.6g} at the "
                       f"{'failover' if fail else 'normal'} operating point")
        return cross, out_of

    def egress(self, label: str, rec, tally: _Tally) -> None:
        """Each pod's KV leaving over the DCN in the scenario (GB/s): as the record states it, and within the pod's egress."""
        stated_egress = rec.pod_dcn_egress_gbytes_per_s
        egress = tally.egress
        for j in sorted(set(egress) | set(stated_egress)):
            g, said = egress.get(j, 0.0), stated_egress.get(j, 0.0)
            if abs(said - g) > max(1e-6, stored_error(g, said)):
                self.v("dcn_egress", f"{label} {j}", f"records {said:.6g} GB/s of KV leaving the pod over the DCN; the routing gives {g:.6g} GB/s")
        inst = self.inst
        for j, g in sorted(egress.items()):
            pod = self.pods.get(j)
            if pod is None:
                continue
            capg = inst.chips[pod.chip].pod_egress_gbytes_per_s(inst.network.dcn_gbytes_per_s_per_slice)
            if g > capg + stored_error(capg, g):
                self.v("dcn_egress", f"{label} {j}", f"{g:.4g} GB/s of KV leave the pod over the DCN, above its egress {capg:.4g} GB/s")

    def region_ceilings(self, label: str, tally: _Tally) -> None:
        """Each region's share of requests crossing the DCN within the overall ceiling
        (``placement.dcn_share_max``), unless the plan declares an overage there."""
        limit = self.inst.placement.dcn_share_max
        overall_declared = {y.region for y in self.plan.dcn or [] if y.why and y.dcn_share_max > limit + 1e-12}  # as the plan verifier
        for r, (x, tot) in sorted(tally.region_tot.items()):
            if tot > 0 and x / tot > limit + stored_error(limit, x / tot) and r not in tally.declared and r not in overall_declared:
                self.v("dcn_share", f"{label} {r}", f"{x / tot:.2%} of the region's requests send their KV over the DCN, above the overall "
                       f"ceiling {limit:.2%} (placement.dcn_share_max)")

    def dcn_summary(self) -> None:
        """The placement's per region x tier DCN rows (``Placement.dcn``): the ceiling and the
        share the plan sized for as the instance and the plan say, the normal and worst-loss
        shares as the scenarios' routing gives them."""
        seen = self.seen
        plan_dcn = {(y.region, y.tier): y for y in self.plan.dcn or []}
        for x in self.pl.dcn or []:
            # the ceiling and the share the plan sized for are the instance's and the plan's, not the file's to say
            ceiling, y = self.inst.dcn_share_max_of(x.tier), plan_dcn.get((x.region, x.tier))
            if abs(x.dcn_share_max - ceiling) > 1e-9:
                self.v("dcn", f"{x.region}/{x.tier}", f"states a ceiling of {x.dcn_share_max:.6g}; the instance's is {ceiling:.6g} "
                       "(workload.tiers[].dcn_share_max, else placement.dcn_share_max)")
            if y is not None and (x.sized_for is None or abs(x.sized_for - y.sized_for) > 1e-9):
                self.v("dcn", f"{x.region}/{x.tier}", f"states the plan sized for {x.sized_for}; the plan's record (plan.dcn) says {y.sized_for:.6g}")
            got = [(share, name) for (name, r, t), (share, kind) in seen.items() if (r, t) == (x.region, x.tier) and kind == "loss"]
            nrm = next((share for (name, r, t), (share, kind) in seen.items() if (r, t) == (x.region, x.tier) and kind == "normal"), 0.0)
            worst = max((s for s, _ in got), default=None)
            if abs(x.normal - nrm) > 1e-6 or (worst is None) != (x.worst_loss is None) or (worst is not None and abs(worst - x.worst_loss) > 1e-6):
                self.v("dcn", f"{x.region}/{x.tier}", f"the summary says {x.normal:.6f} at normal and {x.worst_loss} in the worst loss; the routing gives "
                       f"{nrm:.6f} and {worst}")
