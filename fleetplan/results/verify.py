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
* decode operating points: every TPOT/ITL SLO and the KV fit at a full batch, normal
  points within (1 - decode_knee_margin) x the knee;
* every one of the 24 hours in normal operation, for every region, tier and role, at
  the demand the fleet is sized for (the forecast x (1 + the demand margin)):
  prefill TTFT percentile (exact Erlang C / M/G/c at the integer slice count and the
  hour's arrivals), decode tokens/s at the operating point, replica steady state;
* with N-1, every hour of every region loss: the routing shares, the admission clamp,
  the mitigations of the modelled scenario that dominates that hour (shed fractions,
  warm slices), and the failover operating points;
* any load that fails an SLO must be covered by shortfall the plan reports.

Returns a list of :class:`~fleetplan.results.plan.Violation` (empty for a good plan).
Raises :class:`~fleetplan.errors.PlanError` when the plan is for another instance.
"""

from __future__ import annotations

import math

from fleetplan.deadline import check
from fleetplan.errors import InputError, PlanError, Problem
from fleetplan.instance.io import instance_hash, require_valid
from fleetplan.instance.modes import MIXABLE_ROLES
from fleetplan.instance.schema import Instance
from fleetplan.perf.pools import longest_request_fit
from fleetplan.results.evaluate import Context
from fleetplan.results.modes import mode_record_problems, plan_modes, roles_at
from fleetplan.results.precision import SIGNIFICANT_DIGITS, ZERO_BELOW, stored_error
from fleetplan.results.plan import Plan, PoolLoad, ScenarioResult, Violation

__all__ = ["verify", "check_plan_matches", "check_plan_contents", "check_plan_records", "embedded_instance", "plan_instance"]

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
    if plan.instance_name != inst.name:  # a 5,000,000-character name was accepted and ignored (issue 16 newcomer trial N3)
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
        self.ctx = Context(inst)
        self.out: list[Violation] = []
        self.pools = plan.pools
        self.warm = {(w.region, w.slice): w.slices for w in plan.warm_pool}
        self.route = {(r.lost, r.to, r.tier): r.share for r in plan.routing}
        self.modes = plan_modes(inst, plan)  # (region, tier) -> serving mode, from the plan (auto) or the instance
        self._route_err: dict[tuple[str, str, str], float] = {}  # (label, absorber, tier) -> req/s the stated share may be off by

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
                fit = longest_request_fit(inst, self.ctx.tiers[t], self.ctx.slice(label), ro)
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
                if not o.legal:
                    self.v("operating_point", where, f"{label} point B={op.batch_cap}, k={op.draft_tokens} is not legal: {'; '.join(o.violations)}")
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
        check("verifying the plan")  # solve's deadline (issue 16 row 4); a no-op outside its scope, as for every reader
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
                allowed = claimed_short + _tol(lam, claimed_short) + err
                # decided at the threshold; the least shortfall (three bisections) only for a violation's message
                if shape is None or n == 0:
                    over = lam > allowed
                else:
                    over = not self.ctx.prefill_shortfall_within(t, shape, n, own_a, div_a, failover, allowed)
                if over:
                    short = lam if (shape is None or n == 0) else self.ctx.prefill_min_shortfall(t, shape, n, own_a, div_a, failover)
                    ev = self.ctx.prefill(t, shape, n, own_a, div_a, failover) if (shape and n) else None
                    what = ", ".join(f"TTFT p{p:g} {ev.ttft_ms[p]:.0f} ms > {lim:g} ms" for p, lim in ev.slo_limit_ms.items() if ev.ttft_ms[p] > lim) if ev else "no prefill slices"
                    self.v("prefill_ttft", where, f"{what} at {lam:.4g} req/s on {n} slices; {short:.4g} req/s over the SLO, the plan reports {claimed_short:.4g}")
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
                    self.v("replica_slo", where, f"{short_slo:.4g} req/s miss the SLOs on {n} replicas; the plan reports {claimed_short:.4g}")
                elif over:
                    short = lam if (not subs or n == 0) else (1.0 - self._replica_theta(t, subs, own_a / head, div_a / head, failover)) * lam
                    self.v("replica_headroom", where, f"{lam:.4g} req/s on {n} replicas runs above {head:.0%} of their SLO-limited rate: "
                           f"{short:.4g} req/s over it, the plan reports {claimed_short:.4g}")

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
    c.inventory()
    c.shapes()
    c.operating_points()
    c.hours()
    c.failovers()
    c.status()
    # deduplicate identical messages (the same dominated hour can repeat a finding)
    seen, out = set(), []
    for v in c.out:
        key = (v.check, v.where, v.message)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


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


#: Significant digits to which a recorded number must match its rebuild. The rebuild
#: starts from the plan's rounded decisions (routing shares, shed rates), and some
#: records are steep functions of them (a TTFT percentile near saturation moves many
#: times faster than the load): six digits in, three digits out.
RECORD_DIGITS = SIGNIFICANT_DIGITS // 2


def _diff(path: str, have, want, out: list[tuple[str, object, object]]) -> None:
    """Append (path, have, want) for every leaf where two model dumps differ (numbers
    beyond their stored error at RECORD_DIGITS significant digits)."""
    if isinstance(want, dict) and isinstance(have, dict):
        for k in sorted(set(want) | set(have)):
            _diff(f"{path}.{k}", have.get(k), want.get(k), out)
    elif isinstance(want, list) and isinstance(have, list) and len(want) == len(have):
        for i, (a, b) in enumerate(zip(have, want)):
            _diff(f"{path}[{i}]", a, b, out)
    elif isinstance(want, (int, float)) and isinstance(have, (int, float)) and not isinstance(want, bool) and not isinstance(have, bool):
        a, b = float(have), float(want)
        if path.endswith(".growth_absorbed"):  # g - 1: known as well as the load multiplier g it comes from
            a, b = 1.0 + a, 1.0 + b
        if not (a == b or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= stored_error(a, b, digits=RECORD_DIGITS))):
            out.append((path, have, want))
    elif have != want:
        out.append((path, have, want))


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
    from fleetplan.instance.derived import build_scenarios
    from fleetplan.results.loads import binding, cost_summary, fleet_rows, make_pool, recorded_decisions, scenario_results

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
    fleet = fleet_rows(inst, ctx, plan.pools, plan.warm_pool)
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
            if key in seen_keys:  # a pool given twice was read once and the copies passed (issue 16 row 9)
                probs.append(Problem(f"scenarios[{i}].pools[{j}]", f"the {pl.role} pool of tier {pl.tier!r} in {pl.region!r} is given twice in "
                                                                   f"scenario {s.name!r}; the plan was edited after it was solved."))
            seen_keys.add(key)
            # the decisions the rebuild starts from must be possible: shed within the arrivals
            # (a shed of 1e308 req/s reached the physics as a negative rate -- issue 16 row 8)
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
    rebuilt = scenario_results(inst, ctx, [known[s.name] for s in plan.scenarios], plan.pools, routing, decisions, plan_modes(inst, plan))
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
    if plan.status == "violations" and not verify(inst, plan):
        diffs.append(("status", "violations", "verified or shortfall (the independent verifier finds no violation)"))
    out = [Problem(path, f"the plan records {have!r}; its pools, routing and mitigations on this instance give {want!r}: "
                         "the plan was edited after it was solved (re-solve it rather than edit it).") for path, have, want in diffs[:most]]
    if len(diffs) > most:
        out.append(Problem("...", f"and {len(diffs) - most} more recorded numbers that differ"))
    return out
