"""The independent checker: re-prove a plan from the instance alone.

``verify(instance, plan)`` recomputes, with :mod:`fleetplan.perf` through
:mod:`fleetplan.results.evaluate` and never from the optimisation model or its candidate
tables, every condition a plan claims:

* inventory: chips in slices and warm pool fit the pods; new pods within what can be had;
* pools: allowed slice shapes, homogeneous prefill pools (decode and replica pools mix
  shapes only with ``serving.mixed_shapes``: their capacities are summed per shape, a
  mixed replica load split in proportion to each shape's capacity), the mode's roles; every slice
  holds the KV of the longest request its role gives it (prefill: the tier's longest
  prompt; decode and replicas: that prompt and its output);
* decode operating points: every TPOT/ITL SLO and the KV fit at a full batch -- the
  batch's KV and the reserve for handoffs in flight (:mod:`fleetplan.perf.handoff`;
  ``handoff_reserve``, naming the pool) -- normal points within (1 - decode_knee_margin) x the knee;
* every one of the 24 hours in normal operation, for every region, tier and role, at
  the demand the fleet is sized for (the forecast x (1 + the demand margin)):
  prefill TTFT percentile (exact Erlang C / M/G/c at the integer slice count and the
  hour's arrivals), decode tokens/s at the operating point, replica steady state;
* with N-1, every hour of every region loss: the routing shares, the admission clamp,
  the mitigations of the modelled scenario that dominates that hour (shed fractions,
  warm slices), and the failover operating points;
* any load that fails an SLO must be covered by shortfall the plan reports;
* a plan sized with its pods (``Plan.pods``): in every hour of normal operation and of
  every region loss, each tier's share of requests whose KV crosses the DCN (its pods'
  decode slices take their prefill's KV up to their operating point's rate; warm slices
  joining the prefill pool cross) within its ceiling and the share its TTFT was sized for,
  the region's share within the overall ceiling, every pod's cross-pod KV within its DCN
  egress, and the TTFT paying that share's DCN transfer (:mod:`fleetplan.results.dcn`).

Returns a list of :class:`~fleetplan.results.plan.Violation` (empty for a good plan).
Raises :class:`~fleetplan.errors.PlanError` when the plan is for another instance.
"""

from __future__ import annotations

import math

from fleetplan.deadline import check, phase
from fleetplan.errors import PlanError, Problem
from fleetplan.instance.io import instance_hash, require_valid
from fleetplan.instance.schema import Instance
from fleetplan.perf.robust import fit_under
from fleetplan.instance.physics import held_instances
from fleetplan.results.evaluate import Context, tagged
from fleetplan.results.modes import mode_record_problems, plan_modes, roles_at
from fleetplan.results.precision import ZERO_BELOW, stored_error
from fleetplan.results.plan import Plan, PoolLoad, ScenarioResult, Violation

__all__ = ["verify", "check_plan_matches", "check_plan_contents", "check_plan_records", "embedded_instance", "plan_instance"]


def __getattr__(name: str):
    """Deprecated import path for the checks of a plan's own records (its structure, arithmetic
    and every number it states, rebuilt): moved to :mod:`fleetplan.results.records`, which sits
    above this module (it asks the verifier whether a plan's recorded violations are real);
    kept so old imports of ``check_plan_contents``, ``check_plan_records`` and
    ``_check_plan_records`` from here work. Raises AttributeError for any other name."""
    if name in _MOVED_TO_RECORDS:
        import importlib
        import warnings

        warnings.warn(f"fleetplan.results.verify.{name} is a deprecated import path: import it from fleetplan.results.records",
                      DeprecationWarning, stacklevel=2)

        return getattr(importlib.import_module("fleetplan.results.records"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_MOVED_TO_RECORDS = ("check_plan_contents", "check_plan_records", "_check_plan_records")

def check_plan_matches(inst: Instance, plan: Plan) -> None:
    """Raise PlanError when ``plan`` was not solved for ``inst``."""
    h = instance_hash(inst)
    if plan.instance_hash != h:
        fix = ("The plan carries the instance it was solved for (overlays applied): leave the instance out to use it, or re-solve."
               if plan.instance is not None else
               "Re-solve, or pass the instance the plan was made from (a plan solved with --workload/--priors needs "
               "an instance file that includes them: include: {workload: FILE, priors: FILE}).")
        raise PlanError("plan", [Problem("instance_hash", f"the plan was solved for instance '{plan.instance_name}' with hash "
                                         f"{plan.instance_hash[:12]}..., not for this instance ({inst.name}, {h[:12]}...). " + fix,
                                         plan.instance_hash[:12])])


def embedded_instance(plan: Plan) -> Instance | None:
    """The instance ``plan`` carries (``plan.instance``: what ``solve`` was given, overlays
    applied), validated like any instance file (schema and cross-field checks) and checked
    to hash to ``plan.instance_hash``; None for a plan written before instances were
    embedded.

    Raises: PlanError naming ``instance.<field>`` when it does not validate, or when its
    hash is not the plan's (the plan was edited after the solve)."""
    if plan.instance is None:
        return None
    from fleetplan.errors import InstanceError
    from fleetplan.instance.io import parse_instance

    try:
        inst = parse_instance(plan.instance, "plan.instance")
    except InstanceError as e:
        raise PlanError("plan", [Problem(f"instance.{p.path}" if p.path else "instance", p.message, p.value) for p in e.problems]) from None
    h = instance_hash(inst)
    if h != plan.instance_hash:
        raise PlanError("plan", [Problem("instance", f"the embedded instance hashes to {h[:12]}..., not to the plan's instance_hash "
                                                     f"{plan.instance_hash[:12]}...: the plan was edited after it was solved; re-solve.")])
    if plan.instance_name != inst.name:  # a 5,000,000-character name was accepted and ignored
        raise PlanError("plan", [Problem("instance_name", f"is not the embedded instance's name {inst.name!r}: the plan was edited after "
                                                          "it was solved.", plan.instance_name[:80])])
    return inst


def plan_instance(plan: Plan, instance=None) -> Instance:
    """The instance ``plan`` was solved for, checked to match its hash.

    Args: instance: an :class:`Instance`, or a YAML path / bundled name (loaded with
    :func:`fleetplan.instance.io.load_instance`, ``include:`` overlays applied); None
    takes the instance the plan embeds (:func:`embedded_instance`), and for a plan
    without one the bundled instance it names.
    Raises: InstanceError when the given instance does not load; PlanError when it is not
    the plan's (another hash), when the embedded one was edited, or when the plan embeds
    none and names no bundled instance."""
    from fleetplan.instance.io import bundled_instances, load_instance

    if instance is None:
        inst = embedded_instance(plan)
        if inst is not None:
            return inst
        if plan.instance_name not in bundled_instances():
            raise PlanError("plan", [Problem("instance", f"the plan was solved for instance '{plan.instance_name}', which is not bundled, "
                                                         "and carries no copy of it (written before plans embedded their instance); "
                                                         "give its YAML (--instance), or re-solve.")])
        instance = plan.instance_name
    inst = instance if isinstance(instance, Instance) else load_instance(instance)
    check_plan_matches(inst, plan)
    return inst


def _tol(*values: float) -> float:
    """The tolerance of a comparison between the stated numbers ``values`` (and whatever
    it was computed from): the plan's stored precision, :func:`~fleetplan.results.precision.stored_error`.
    Every check below uses it, nothing else."""
    return stored_error(*values)


class _Checker:
    def __init__(self, inst: Instance, plan: Plan):
        self.inst = inst
        self.plan = plan
        self.ctx = Context(inst)  # under several held physics sources, each answer the least favourable (results/evaluate.py, RobustContext)
        self.sources = held_instances(inst)
        self.out: list[Violation] = []
        self.pools = plan.pools
        self.warm = {(w.region, w.slice): w.slices for w in plan.warm_pool}
        self.route = {(r.lost, r.to, r.tier): r.share for r in plan.routing}
        self.modes = plan_modes(inst, plan)  # (region, tier) -> serving mode, from the plan (auto) or the instance
        self._route_err: dict[tuple[str, str, str], float] = {}  # (label, absorber, tier) -> req/s the stated share may be off by
        self.sized = {(x.region, x.tier): x.sized_for for x in plan.dcn or []}  # the DCN share each region-tier's TTFT was sized for
        self.egress: dict[tuple[str, str, str, int], float] = {}  # (label, region, chip, pod) -> GB/s of KV leaving the pod
        self.crossing: dict[tuple[str, str], list[float]] = {}  # (label, region) -> [requests/s crossing, requests/s prefilled]
        self.declared: set[tuple[str, str]] = set()  # (label, region) with a tier over its ceiling as the plan declares (plan.dcn)
        self.dcn_findings: dict[tuple, tuple[str, float, str]] = {}  # (scenario kind, region, tier) -> the worst (label, share, message)

    def v(self, check: str, where: str, msg: str) -> None:
        self.out.append(Violation(check=check, where=where, message=msg))

    # ---------------------------------------------------------------- static
    def inventory(self) -> None:
        inst = self.inst
        for f in self.plan.fleet:
            reg = inst.regions[f.region]
            inv = reg.pods.get(f.chip)
            installed = inv.installed if inv else 0
            avail = inv.available_new if inv else 0
            if f.pods_installed != installed:
                self.v("inventory", f"{f.region}/{f.chip}", f"plan keeps {f.pods_installed} installed pods, the instance has {installed}")
            if f.pods_new > avail:
                self.v("inventory", f"{f.region}/{f.chip}", f"{f.pods_new} new pods exceed the {avail} available")
            chips = sum(p.chips_per_slice * p.slices for p in self.pools if p.region == f.region and p.chip == f.chip)
            chips += sum(n * self.ctx.slice(s).chips for (r, s), n in self.warm.items() if r == f.region and self.ctx.slice(s).chip == f.chip)
            cap = (installed + f.pods_new) * inst.chips[f.chip].chips_per_pod
            if chips > cap:
                self.v("pod_capacity", f"{f.region}/{f.chip}", f"{chips} chips in slices and warm pool exceed {cap} chips in {installed + f.pods_new} pods")
        for p in self.pools:
            if not any(f.region == p.region and f.chip == p.chip for f in self.plan.fleet):
                self.v("pod_capacity", f"{p.region}/{p.chip}", "slices placed in a region with no pods of their chip")
        wp = inst.failover.warm_pool
        for r in inst.regions:
            n = sum(k for (rr, _), k in self.warm.items() if rr == r)
            if n > wp.max_slices_per_region or (wp.max_slices_per_region > 0 and n < wp.min_slices_per_region):
                self.v("warm_pool", r, f"{n} warm slices outside [{wp.min_slices_per_region}, {wp.max_slices_per_region}]")

    def shapes(self) -> None:
        inst = self.inst
        for where, msg in mode_record_problems(inst, self.plan):
            self.v("serving_mode", where, msg)
        seen: dict[tuple, set] = {}
        for p in self.pools:
            where = f"{p.role}[{p.region},{p.tier}]"
            if p.chip not in inst.chips or p.chips_per_slice not in inst.chips[p.chip].slice_shapes:
                self.v("pool", where, f"slice shape {p.slice} is not allowed by the instance")
            if p.role == "replica" and p.schedule not in self._schedules():
                self.v("pool", where, f"schedule {p.schedule!r} is not one the instance allows ({', '.join(sorted(self._schedules()))}: "
                       "serving.colocated_schedules and serving.chunk_tokens)")
            if p.tier not in self.ctx.tiers:
                self.v("pool", where, f"unknown tier {p.tier}")
            if p.slices < 0 or p.chips != p.slices * p.chips_per_slice:
                self.v("pool", where, "slice and chip counts disagree")
            seen.setdefault((p.region, p.tier, p.role), set()).add(p.slice)
        for (r, t, ro), shapes in seen.items():
            if ro == "prefill" and len(shapes) > 1:
                self.v("pool", f"prefill[{r},{t}]", f"a prefill pool must have one slice shape, has {sorted(shapes)}")
            elif len(shapes) > 1 and not inst.serving.mixed_shapes:
                self.v("pool", f"{ro}[{r},{t}]", f"a {ro} pool mixes slice shapes {sorted(shapes)} but serving.mixed_shapes is off")
        # every slice, warm ones joining a pool included, must hold the longest request its role gives it
        used = {(p.region, p.tier, p.role, p.slice) for p in self.pools}
        used |= {(q.region, q.tier, q.role, q.slice) for sc in self.plan.scenarios for q in sc.pools if q.warm_slices > 0 and q.slice}
        for r, t, ro, label in sorted(used):
            if t in self.ctx.tiers and label.rpartition("x")[0] in inst.chips and ro in roles_at(self.modes, r, t):
                fit = fit_under(self.sources, self.ctx.tiers[t], self.ctx.slice(label), ro)  # under every held source
                if not fit.fits:
                    self.v("kv_fit", f"{ro}[{r},{t}]", fit.reason)

    def operating_points(self) -> None:
        margin = self.inst.serving.decode_knee_margin
        for p in self.pools:
            if p.role != "decode":
                continue
            where = f"decode[{p.region},{p.tier},{p.slice}]"
            for label, op in (("normal", p.decode_normal), ("failover", p.decode_failover)):
                if op is None:
                    self.v("operating_point", where, f"no {label} operating point")
                    continue
                o = self.ctx.decode_op(p.tier, p.slice, op.batch_cap, op.draft_tokens)
                if o.handoff_violation:  # a cap that leaves no room for the handoffs in flight (fleetplan.perf.handoff)
                    self.v("handoff_reserve", where, f"{label} point B={op.batch_cap}, k={op.draft_tokens}: {o.handoff_violation}")
                other = [x for x in o.violations if x != o.handoff_violation]
                if other:
                    self.v("operating_point", where, f"{label} point B={op.batch_cap}, k={op.draft_tokens} is not legal: {'; '.join(other)}")
                if abs(o.tokens_per_s - op.tokens_per_s_per_slice) > _tol(op.tokens_per_s_per_slice):
                    self.v("operating_point", where, f"{label} point claims {op.tokens_per_s_per_slice:.6g} tokens/s per slice, physics gives {o.tokens_per_s:.6g}")
                if op.batch_cap > max(self.inst.serving.batch_caps):
                    self.v("operating_point", where, f"{label} batch {op.batch_cap} exceeds the largest batch cap {max(self.inst.serving.batch_caps)}")
                if label == "normal":
                    knee = self.ctx.decode_knee(p.tier, p.slice, op.draft_tokens)
                    if op.batch_cap > max(1, math.floor((1 - margin) * knee)):
                        self.v("operating_point", where, f"normal batch {op.batch_cap} exceeds (1 - {margin:g}) x knee {knee}")

    # ---------------------------------------------------------------- loads
    def _pools_of(self, r: str, t: str, role: str):
        return [p for p in self.pools if p.region == r and p.tier == t and p.role == role]

    def _claimed(self, sc: ScenarioResult | None, r: str, t: str, role: str) -> PoolLoad | None:
        if sc is None:
            return None
        return next((p for p in sc.pools if p.region == r and p.tier == t and p.role == role), None)

    def _check_region_tier(self, label: str, r: str, t: str, own: float, div: float, failover: bool, sc: ScenarioResult | None) -> None:
        check("verifying the plan")  # solve's deadline (a post-solve check must not overrun it); a no-op outside its scope, as for every reader
        inst = self.inst
        o = inst.workload.output_tokens
        roles = roles_at(self.modes, r, t)  # the plan's mode of this region x tier
        first = self._claimed(sc, r, t, roles[0])
        f_own = f_div = 0.0
        # What the loads below may be off by because they are computed from numbers the
        # plan states to its precision: the routing share (diverted = share x the lost
        # region's tier traffic) and, in a loss, the shed and arrival rates behind the shed fractions.
        err = self._route_err.get((label, r, t), 0.0)
        if failover and first is not None:
            own_dom = first.arrivals_rps - first.diverted_rps
            shed_own = first.shed_rps - first.shed_diverted_rps
            stated = _tol(first.arrivals_rps, first.diverted_rps, first.shed_rps, first.shed_diverted_rps)
            err += stated
            for what, shed, arr in (("own", shed_own, own_dom), ("diverted", first.shed_diverted_rps, first.diverted_rps)):
                # own = arrivals - diverted and shed_own = shed - shed_diverted are differences of
                # stated numbers: each carries the errors of both
                if shed > self.ctx.batch_share * arr + stated:
                    self.v("shed", f"{label} {r}/{t}", f"sheds {shed:.4g} of {arr:.4g} {what} requests/s, more than the sheddable share "
                           f"{self.ctx.batch_share:.2%}")
            f_own = min(shed_own / own_dom, self.ctx.batch_share) if own_dom > ZERO_BELOW else 0.0
            f_div = min(first.shed_diverted_rps / first.diverted_rps, self.ctx.batch_share) if first.diverted_rps > ZERO_BELOW else 0.0
        own_a, div_a = own * (1 - f_own), div * (1 - f_div)
        for role in roles:
            claim = self._claimed(sc, r, t, role)
            warm = claim.warm_slices if (claim is not None and failover) else 0
            claimed_short = claim.shortfall if claim is not None else 0.0
            pools = self._pools_of(r, t, role)
            where = f"{label} {role}[{r},{t}]"
            if role == "prefill":
                shape = pools[0].slice if pools else (claim.slice if claim is not None else None)
                n = sum(p.slices for p in pools) + warm
                lam = own_a + div_a
                if lam <= 0:
                    continue
                ds = self._dcn(label, r, t, failover, own_a, div_a, n, warm, claim, claimed_short)  # the TTFT pays the pods' DCN share
                allowed = claimed_short + _tol(lam, claimed_short) + err
                # decided at the threshold; the least shortfall (three bisections) only for a violation's message
                if shape is None or n == 0:
                    over = lam > allowed
                else:
                    over = not self.ctx.prefill_shortfall_within(t, shape, n, own_a, div_a, failover, allowed, dcn_share=ds)
                if over:
                    short = lam if (shape is None or n == 0) else self.ctx.prefill_min_shortfall(t, shape, n, own_a, div_a, failover, ds)
                    ev = self.ctx.prefill(t, shape, n, own_a, div_a, failover, ds) if (shape and n) else None
                    what = ", ".join(f"TTFT p{p:g} {ev.ttft_ms[p]:.0f} ms > {lim:g} ms" for p, lim in ev.slo_limit_ms.items() if ev.ttft_ms[p] > lim) if ev else "no prefill slices"
                    msg = f"{what} at {lam:.4g} req/s on {n} slices; {short:.4g} req/s over the SLO, the plan reports {claimed_short:.4g}"
                    self.v("prefill_ttft", where, tagged(ev.source, msg) if (ev is not None and ev.source) else msg)
            elif role == "decode":
                demand = o * (own_a + div_a)
                cap = 0.0
                for p in pools:
                    op = p.decode_failover if failover else p.decode_normal
                    if op is None:
                        continue
                    # warm slices join the pool of their shape (the claim's slice; one shape, pools[0], when it names none)
                    joins = p.slice == claim.slice if (warm and claim is not None and claim.slice) else p is pools[0]
                    cap += self.ctx.decode_op(t, p.slice, op.batch_cap, op.draft_tokens).tokens_per_s * (p.slices + (warm if joins else 0))
                if warm and claim is not None and claim.slice and claim.slice not in {p.slice for p in pools}:
                    cap += warm * self.ctx.decode_op(t, claim.slice, *self._fallback_op(t, claim.slice)).tokens_per_s
                short = max(demand - cap, 0.0)
                if short > claimed_short + _tol(demand, cap, claimed_short) + o * err:
                    self.v("decode_capacity", where, f"demand {demand:.6g} output tokens/s exceeds capacity {cap:.6g}; the plan reports a shortfall of {claimed_short:.6g}")
            else:
                lam = own_a + div_a
                if lam <= 0:
                    continue
                subs = _replica_subpools(pools, warm, claim.slice if claim is not None else None)
                n = sum(k for _, k, _ in subs)
                head = self.inst.serving.utilisation_headroom
                allowed = claimed_short + _tol(lam, claimed_short) + err
                # the plan promises the replicas run at most `head` of their SLO-limited rate:
                # what must go unserved for the rest to stay within that, and within the SLOs alone
                if not subs or n == 0:
                    over_slo = over = lam > allowed
                else:
                    over_slo = self._replica_short_over(t, subs, own_a, div_a, failover, lam, allowed)
                    over = over_slo if head >= 1.0 else self._replica_short_over(t, subs, own_a / head, div_a / head, failover, lam, allowed)
                if over_slo:
                    short_slo = lam if (not subs or n == 0) else (1.0 - self._replica_theta(t, subs, own_a, div_a, failover)) * lam
                    self.v("replica_slo", where, self._under(t, subs, own_a, div_a, failover,
                                                              f"{short_slo:.4g} req/s miss the SLOs on {n} replicas; the plan reports {claimed_short:.4g}"))
                elif over:
                    short = lam if (not subs or n == 0) else (1.0 - self._replica_theta(t, subs, own_a / head, div_a / head, failover)) * lam
                    self.v("replica_headroom", where, self._under(t, subs, own_a / head, div_a / head, failover,
                                                                   f"{lam:.4g} req/s on {n} replicas runs above {head:.0%} of their SLO-limited "
                                                                   f"rate: {short:.4g} req/s over it, the plan reports {claimed_short:.4g}"))

    def _dcn(self, label: str, r: str, t: str, failover: bool, own: float, div: float, n: int, warm: int, claim, short: float) -> float:
        """The DCN share of region r's tier-t prefill pool at these admitted loads (requests/s)
        and ``n`` slices (``warm`` of them warm), from the plan's pods (0 without pods):
        checked against the tier's ceiling and the share its TTFT was sized for; each pod's
        egress and the region's crossing requests are kept for :meth:`dcn_totals`."""
        if self.plan.pods is None:
            return 0.0
        from fleetplan.results.loads import dcn_of

        lam = own + div
        frac = max(0.0, 1.0 - short / lam) if lam > 0 else 1.0
        fl = dcn_of(self.ctx, self.plan.pods, self.pools, r, t, failover, own * frac, div * frac, n, warm,
                    claim.slice if (claim is not None and warm) else None)
        limit = self.inst.dcn_share_max_of(t)
        sized = self.sized.get((r, t))
        declared = sized is not None and sized > limit  # the plan says no placement keeps it within (its TTFT sized for every request crossing)
        group = (label.split("@")[0].split(" ")[0], r, t)
        if fl.share > limit + _tol(limit, fl.share) and not declared:
            self._worst(group, label, fl.share, f"of the tier's requests send their KV over the DCN ({fl.kv_out_rps:.4g} of {fl.rps:.4g} "
                        f"req/s), above its ceiling {limit:.2%}")
        if sized is not None and fl.share > sized + _tol(sized, fl.share):
            self._worst(group, label, fl.share, f"of the tier's requests cross the DCN; its TTFT was sized for {sized:.2%} (plan.dcn)")
        if declared:
            self.declared.add((label, r))
        for (chip, i), g in fl.egress_gbytes_per_s.items():
            key = (label, r, chip, i)
            self.egress[key] = self.egress.get(key, 0.0) + g
        acc = self.crossing.setdefault((label, r), [0.0, 0.0])
        acc[0] += fl.kv_out_rps
        acc[1] += fl.rps
        return fl.share

    def _worst(self, group: tuple, label: str, share: float, msg: str) -> None:
        """Keep the worst DCN share finding of a (scenario kind or lost region, region, tier)
        group: its hours would repeat one finding (the dominating scenario's)."""
        got = self.dcn_findings.get(group)
        if got is None or share > got[1]:
            self.dcn_findings[group] = (label, share, msg)

    def dcn_totals(self) -> None:
        """Per pod and scenario-hour, the KV every tier sends over the DCN within the pod's
        egress; per region and scenario-hour, the share of all requests crossing within the
        overall ceiling; and a plan of an instance sized with its pods must carry them."""
        inst = self.inst
        if self.plan.pods is None:
            short = any(p.shortfall > 1e-6 for sc in self.plan.scenarios for p in sc.pools)  # a shortfall plan is sized without its pods
            # a plan whose pod stage the time limit cut is the plain sizing's, as a size_with_pods-false plan is (it says so:
            # its diagnostics and solver.pod_stage_termination 'time_limit')
            cut = self.plan.solver.pod_stage_termination == "time_limit"
            if inst.placement.size_with_pods and any(m == "disaggregated" for m in self.modes.values()) and not short and not cut:
                self.v("placement", "plan", "the instance sizes with its pods (placement.size_with_pods) but the plan has none: its DCN share "
                       "is not bounded (a plan solved before placement-aware sizing, or whose pod stage found no plan -- its diagnostics say); "
                       "re-solve it, or set placement.size_with_pods false")
            return
        from fleetplan.results.pods import pod_problems

        for pr in pod_problems(inst, self.plan):  # the pods must hold exactly the pools' slices, within their chips
            self.v("placement", pr.path, pr.message)
        for (label, r, chip, i), g in sorted(self.egress.items()):
            cap = inst.chips[chip].pod_egress_gbytes_per_s(inst.network.dcn_gbytes_per_s_per_slice)
            if g > cap + _tol(cap, g):
                self.v("dcn_egress", f"{label} {r}/{chip}/{i:02d}", f"{g:.4g} GB/s of KV leave the pod over the DCN, above its egress {cap:.4g} GB/s")
        limit = inst.placement.dcn_share_max
        # a region the plan declares over its overall ceiling (a tier whose own ceiling is above it, with a why: plan.dcn)
        overall_declared = {x.region for x in self.plan.dcn or [] if x.why and x.dcn_share_max > limit + 1e-12}
        for (label, r), (out, tot) in sorted(self.crossing.items()):
            if tot > 0 and out / tot > limit + _tol(limit, out / tot) and (label, r) not in self.declared and r not in overall_declared:
                self._worst((label.split("@")[0].split(" ")[0], r, ""), label, out / tot,
                            f"of the region's requests send their KV over the DCN, above the overall ceiling {limit:.2%} (placement.dcn_share_max)")
        for (_, r, t), (label, share, msg) in sorted(self.dcn_findings.items()):
            self.v("dcn_share", f"{label} {r}" + (f"/{t}" if t else ""), f"{share:.2%} {msg} (the worst hour of its scenarios)")

    def _under(self, t: str, subs: list[tuple[str, int, str | None]], own: float, div: float, failover: bool, msg: str) -> str:
        """``msg`` tagged with the physics source the replicas miss their SLOs under at these
        arrivals (requests/s), when the plan holds under several; ``msg`` itself otherwise."""
        if len(self.sources) < 2 or not subs:
            return msg
        shape, n, sch = subs[0]
        ev = self.ctx.replica(t, shape, n, own, div, failover, sch)
        return tagged(ev.source, msg) if ev.source else msg

    def _replica_short_over(self, t: str, subs: list[tuple[str, int, str | None]], own: float, div: float, failover: bool,
                            lam: float, allowed: float) -> bool:
        """Whether (1 - :meth:`_replica_theta`) x ``lam`` exceeds ``allowed`` (requests/s):
        one shape is decided at the threshold share 1 - allowed / lam
        (:meth:`~fleetplan.results.evaluate.Context.replica_scale_within`, one evaluation for
        a 40-step bisection); mixed shapes sum their sub-pools' shares, so their bisections run."""
        if len(subs) == 1:
            shape, n, sch = subs[0]
            return not self.ctx.replica_scale_within(t, shape, n, own, div, failover, 1.0 - allowed / lam, schedule=sch)
        return (1.0 - self._replica_theta(t, subs, own, div, failover)) * lam > allowed

    def _replica_theta(self, t: str, subs: list[tuple[str, int, str | None]], own: float, div: float, failover: bool) -> float:
        """Largest share theta <= 1 of the arrivals (own, div requests/s) the replica
        sub-pools carry within the SLOs. One shape: the pool's own M/G/c (or M/G/1) search.
        Several (``serving.mixed_shapes``): each shape is its own pool and the router splits
        the load in proportion to their capacities, so theta is the sum of each sub-pool's
        theta at the whole load (theta_c x load is sub-pool c's capacity, whatever the load)."""
        if len(subs) == 1:
            shape, n, sch = subs[0]
            return self.ctx.replica_max_scale(t, shape, n, own, div, failover, hi=1.0, schedule=sch)
        return min(1.0, sum(self.ctx.replica_max_scale(t, shape, n, own, div, failover, hi=None, schedule=sch) for shape, n, sch in subs))

    def _schedules(self) -> set[str]:
        """Schedule labels the instance allows a replica pool (recomputed from ``serving``)."""
        sv = self.inst.serving
        out = {"prefill-first"} if "prefill-first" in sv.colocated_schedules else set()
        if "chunked" in sv.colocated_schedules:
            out |= {f"chunked-{c}" for c in sv.chunk_tokens}
        return out

    def _fallback_op(self, t: str, shape: str):
        """The operating point of warm decode slices joining a region with no decode pool
        of this tier: a failover point the plan uses for that tier and shape elsewhere,
        else the legal candidate (batch cap or SLO knee x draft length) carrying the most tokens/s,
        found here by brute force with the perf models (else the smallest cap, plain)."""
        p = next((p for p in self.pools if p.tier == t and p.slice == shape and p.role == "decode" and p.decode_failover), None)
        if p:
            return p.decode_failover.batch_cap, p.decode_failover.draft_tokens
        spec = self.inst.speculation
        drafts = [0] + (list(spec.draft_tokens) if spec.enabled else [])
        best, best_tps = (min(self.inst.serving.batch_caps), 0), 0.0
        for k in drafts:
            knee = self.ctx.decode_knee(t, shape, k)
            for b in sorted({*self.inst.serving.batch_caps, *([knee] if 0 < knee <= max(self.inst.serving.batch_caps) else [])}):
                op = self.ctx.decode_op(t, shape, b, k)
                if op.legal and op.tokens_per_s > best_tps:
                    best, best_tps = (b, k), op.tokens_per_s
        return best

    def hours(self) -> None:
        inst = self.inst
        normal = next((s for s in self.plan.scenarios if s.kind == "normal"), None)
        for r, reg in inst.regions.items():
            for t, tm in self.ctx.tiers.items():
                peak = inst.sized_peak_rps(r) * tm.tier_share  # the forecast peak x (1 + the demand margin)
                # the normal scenario is every region at its peak; every hour is at most that
                self._check_region_tier("normal", r, t, peak, 0.0, False, normal)
                for h in range(24):
                    if reg.hourly_load[h] > 1.0 + 1e-12:
                        self.v("hours", f"{r}@{h:02d}", "hourly load above the peak")

    def failovers(self) -> None:
        inst = self.inst
        if not inst.failover.n_minus_1 or len(inst.regions) < 2:
            return
        losses = [s for s in self.plan.scenarios if s.kind == "loss"]
        for x, reg in inst.regions.items():
            absorbers = list(reg.failover_to)
            for t in self.ctx.tiers:
                shares = [self.route.get((x, a, t), 0.0) for a in absorbers]
                tot = sum(shares)
                if abs(tot - 1.0) > _tol(1.0, *shares):
                    self.v("routing", f"lose:{x}/{t}", f"routing shares of {x}'s {t} traffic sum to {tot:.6g}, not 1")
                for (lx, a, tt), sh in self.route.items():
                    if lx == x and tt == t and a not in absorbers:
                        self.v("routing", f"lose:{x}/{t}", f"routes to {a}, which may not absorb {x}")
            for h in range(24):
                loads = {r: inst.regions[r].hourly_load[h] for r in [x] + absorbers}
                dom = [s for s in losses if s.lost_region == x and all(inst.regions[r].hourly_load[s.hour] >= loads[r] - 1e-12 for r in loads)]
                if not dom:
                    self.v("scenarios", f"lose:{x}@{h:02d}", "no modelled scenario dominates this hour")
                    continue
                sc = min(dom, key=lambda s: sum(inst.regions[r].hourly_load[s.hour] for r in loads))
                for a in absorbers:
                    for t, tm in self.ctx.tiers.items():
                        own = inst.sized_peak_rps(a) * loads[a] * tm.tier_share
                        lost = inst.sized_peak_rps(x) * loads[x] * tm.tier_share
                        share = self.route.get((x, a, t), 0.0)
                        div = share * lost * (1 - self.ctx.clamped_share[t])
                        label = f"lose:{x}@{h:02d} (as {sc.name})"
                        self._route_err[(label, a, t)] = _tol(share) * lost * (1 - self.ctx.clamped_share[t])
                        self._check_region_tier(label, a, t, own, div, True, sc)

    def status(self) -> None:
        short = any(p.shortfall > 1e-6 for s in self.plan.scenarios for p in s.pools)
        if self.plan.status == "verified" and short:
            self.v("status", "plan", "status says verified but the plan reports shortfall")


def verify(inst: Instance, plan: Plan) -> list[Violation]:
    """Every violated condition of ``plan`` for ``inst`` (empty list: the plan holds).

    Raises: :class:`~fleetplan.errors.InstanceError` when ``inst`` fails the schema or the
    cross-field checks (an instance built with ``model_copy(update=...)`` skipped them);
    :class:`~fleetplan.errors.PlanError` when the plan was solved for another instance.
    """
    require_valid(inst)
    check_plan_matches(inst, plan)
    c = _Checker(inst, plan)
    with phase("verifying the plan"):  # names a deadline passed inside the physics (fleetplan.deadline)
        c.inventory()
        c.shapes()
        c.operating_points()
        c.hours()
        c.failovers()
        c.dcn_totals()
        c.status()
    # deduplicate identical messages (the same dominated hour can repeat a finding)
    seen, out = set(), []
    for v in c.out:
        key = (v.check, v.where, v.message)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def _replica_subpools(pools, warm: int, warm_shape: str | None) -> list[tuple[str, int, str | None]]:
    """(shape, replicas, schedule) per replica shape of a (region, tier): the plan's pools,
    the warm slices joining the pool of their shape (``warm_shape``, else the first pool)."""
    subs = [[p.slice, p.slices, p.schedule] for p in pools]
    if warm:
        at = next((x for x in subs if x[0] == warm_shape), None) if warm_shape else (subs[0] if subs else None)
        if at is None:
            subs.append([warm_shape, warm, None])
        else:
            at[1] += warm
    return [(a, b, c) for a, b, c in subs if a is not None and b > 0]
