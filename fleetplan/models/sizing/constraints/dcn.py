r"""DCN share: the prefill -> decode KV that leaves a pod, bounded per tier, overall and per pod,
and the TTFT composition each region-tier is sized for.

Placement-aware sizing (``d.pods``). A pool of n prefill slices fed lambda requests/s loads
each slice with lambda / n (the gateway spreads requests evenly: one M/G/c queue); a decode
slice of shape c takes up to mu_c requests/s at the regime's operating point (tokens/s over
the output tokens). A pod whose tier-t kit holds P prefill and D decode slices keeps its KV
on the ICI up to its decode slices' capacity and sends the rest over the DCN: in prefill-
slice units, the kit's excess is

.. math::

   x_\kappa(n) = \max(0,\ P_\kappa - \rho_g(n) D_\kappa),\qquad \rho_g(n) = \mu_{g,c_D}\, n / \lambda_g

(a decode slice takes the KV of rho prefill slices), and the tier's DCN share is
:math:`\sum_\kappa v\_pod\_kits_\kappa\, x_\kappa(n) / n`. rho grows with n, so the model
counts each kit's excess at a level n_i <= n of a ladder n_0 < n_1 < ... -- every count
where the pool's range is at most 48 slices (exact), else dense around the plain sizing's
pool (1-2% steps) and 15% steps elsewhere (at most one step conservative). Binaries
:math:`v\_dcn\_reach_{r,t,i}` (n >= n_i, monotone) choose the level, and the excess at the
highest level reached is the excess at level 0 less each reached level's reduction
(telescoping: no big-M on the excess, each reduction bounded by its own largest value):

.. math::

   n_0 + \sum_{i \ge 1} (n_i - n_{i-1})\, v\_dcn\_reach_{r,t,i} \le \sum_c v\_slices_{r,t,\mathrm{prefill},c},\qquad
   v\_dcn\_reach_{r,t,i} \le v\_dcn\_reach_{r,t,i-1}                                 \quad (c\_dcn\_nlevel)

   v\_dcn\_cut_{r,t,g,i} \le \sum_\kappa (x_\kappa(n_{i-1}) - x_\kappa(n_i))\, v\_pod\_kits_\kappa,\qquad
   v\_dcn\_cut_{r,t,g,i} \le C_i\, v\_dcn\_reach_{r,t,i}                             \quad (c\_dcn\_cut)

   v\_dcn\_kv\_out_{r,t,g} \ge \sum_\kappa x_\kappa(n_0)\, v\_pod\_kits_\kappa - \sum_{i \ge 1} v\_dcn\_cut_{r,t,g,i}
                                                                                      \quad (c\_dcn\_excess)

with C_i the largest reduction a region's pods can give. The TTFT composition's level
:math:`\ell` (share :math:`s_\ell`, picked by :math:`v\_dcn\_level_{r,t,\ell}` in the prefill
family: each level has its own capacity curve, the DCN transfer its share pays at the
percentile in the TTFT budget) caps the share in every scenario; warm slices that join the
prefill pool in a region loss, :math:`W_{r,t,s}`, are counted as crossing (their pods are not
fixed per scenario):

.. math::

   v\_dcn\_kv\_out_{r,t,\mathrm{normal}} \le s_\ell\, n + N^P (1 - v\_dcn\_level_{r,t,\ell})

   v\_dcn\_kv\_out_{r,t,\mathrm{failover}} + W_{r,t,s} \le s_\ell\, (n + W_{r,t,s}) + (N^P + W^{max})(1 - v\_dcn\_level_{r,t,\ell})
   \qquad \forall s                                                                   \quad (c\_dcn\_share)

The regimes: ``normal`` (lambda the region's own peak, decode at its normal operating
point) and ``failover`` (lambda the busiest region-loss scenario's arrivals at the plan's
routing, decode at the failover point; one excess for every loss scenario: the share at a
lighter load is no larger, because the excess is convex in the per-slice load and 0 at
0). The failover routing is fixed (the plain sizing's): with it a survivor's loads are
constants. The ceiling of a tier is ``workload.tiers[].dcn_share_max``, else
``placement.dcn_share_max`` (the brief's 5%); the share levels are at most it.

Overage: where no placement within the pods keeps a share within its ceiling and serves
everything, an overage level (share 1: every request's DCN transfer in the TTFT) allows
:math:`v\_dcn\_over_{r,t,g} \ge 0` prefill slices over the ceiling in its share rows; the
driver fixes it at 0 first and, only when that leaves load unserved, minimises
``e_dcn_over_rps`` (requests/s over the ceilings) before the cost (lexicographic, as the
shortfall), then caps each region's overage at its least (``e_dcn_over_region_rps[r] <=
p_dcn_over_cap[r]``, ``c_dcn_over_cap``: one row per region, so the regions stay separate
blocks of the solve). The plan records it (``plan.dcn[].sized_for`` 1) and says why
(``plan.dcn[].why``).

Overall (per region, all tiers; only where some tier's own ceiling is above the overall
one, else it is implied; :math:`v\_dcn\_over\_overall_{r,g}` its overage in requests/s, fixed
at 0 but in the driver's overage stages, as the tiers'): in requests/s, the excess at the
level reached times lambda / n_i,

.. math::

   v\_dcn\_req_{r,t,g} \ge (\lambda_g / n_i)\, v\_dcn\_kv\_out_{r,t,g} - M (1 - [\text{level } i]),\quad
   \sum_t v\_dcn\_req_{r,t,g} + \ldots \le \delta\, (1 - \beta) \sum_t \lambda_{t,g} + v\_dcn\_over\_overall_{r,g}      \quad (c\_dcn\_overall)

Egress: a pod's cross-pod KV (requests/s times the regime's mean KV per request, GB) may not
exceed its DCN egress B (``chips.*.pod_dcn_egress_gbytes_per_s``). A pod's tiers are
separate layers of the flow, so each kit gets its chips' share of B (a safe split, not an
exact one): a kit whose excess at level i would send more than
:math:`B\, \mathit{chips}_\kappa / C` is allowed only from the level above,

.. math::

   v\_pod\_kits_\kappa \le N_g\, v\_dcn\_reach_{r,t,i+1}
   \qquad \text{where } x_\kappa(n_i)\, (\lambda_g / n_i)\, \mathit{kv}_g > B\, \mathit{chips}_\kappa / C     \quad (c\_dcn\_egress)

and a warm slice whose KV at the pool's busiest per-slice load would exceed its share never
joins the prefill pool in a region loss. Units: prefill slices (excess), requests/s, GB/s.
"""

from __future__ import annotations

import numpy as np
import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.deadline import check
from fleetplan.tables.derived import ModelData

#: excesses below this many prefill slices are round-off, not KV (the kits' coefficients)
EXCESS_TOL = 1e-9


def add_dcn(m: pyo.ConcreteModel, d: ModelData) -> None:
    pods = d.pods
    rts = sorted(pods.tiers)
    kits_of: dict[tuple, list] = {}
    for (gi, li, ki) in m.POD_KITS:
        kt = m.kit_of(gi, li, ki)
        kits_of.setdefault((pods.groups[gi].region, kt.tier), []).append((gi, li, ki, kt))
    _levels(m, d, rts)
    out_keys, table = _excess(m, d, rts, kits_of)
    _overage(m, d, out_keys)
    _share(m, d, out_keys)
    _egress(m, d, kits_of, table)
    _warm_egress(m, d)
    check("building the model")
    if pods.overall_binds:
        _overall(m, d, rts, out_keys)


def _n_prefill(m: pyo.ConcreteModel, d: ModelData, r, t):
    """The region-tier's prefill slices (an expression)."""
    return sum(m.v_slices[r, t, "prefill", c] for c in d.CONFIGS if d.p_max_slices[(r, t, "prefill", c)] > 0)


def _n_max(d: ModelData, r, t) -> float:
    """The most prefill slices of one shape the region-tier may have."""
    return max(d.p_max_slices[(r, t, "prefill", c)] for c in d.CONFIGS)


def _levels(m: pyo.ConcreteModel, d: ModelData, rts: list) -> None:
    """The level reached (c_dcn_nlevel): n_P >= n_i, monotone binaries, level 0 always reached;
    ``m.reach`` and ``m.level_is`` read it for the other rows."""
    pods = d.pods
    # the level reached: n_P >= n_i (monotone binaries; level 0 always reached), and each tier-regime's excess at the
    # highest level reached, by telescoping: the excess at level 0 less each reached level's reduction (no big-M on the
    # excess itself: each reduction is bounded by its own largest value)
    nlev = [(r, t, i) for (r, t) in rts for i in range(1, len(pods.tiers[(r, t)].n_levels))]
    m.DCN_NLEVELS = pyo.Set(initialize=nlev, dimen=3, ordered=True)
    m.v_dcn_reach = pyo.Var(m.DCN_NLEVELS, domain=pyo.Binary)
    m.c_dcn_reach_order = pyo.Constraint([k for k in nlev if k[2] >= 2], rule=lambda _m, r, t, i: m.v_dcn_reach[r, t, i] <= m.v_dcn_reach[r, t, i - 1])

    def reach(r, t, i):
        return 1 if i == 0 else m.v_dcn_reach[r, t, i]

    def level_is(r, t, i):  # 1 exactly at the highest level reached
        top = len(pods.tiers[(r, t)].n_levels) - 1
        return reach(r, t, i) - (reach(r, t, i + 1) if i < top else 0)

    m.reach, m.level_is = reach, level_is
    m.c_dcn_nlevel = pyo.Constraint(rts, rule=lambda _m, r, t: pods.tiers[(r, t)].n_levels[0] + sum(
        (pods.tiers[(r, t)].n_levels[i] - pods.tiers[(r, t)].n_levels[i - 1]) * m.v_dcn_reach[r, t, i]
        for i in range(1, len(pods.tiers[(r, t)].n_levels))) <= _n_prefill(m, d, r, t))


def _excess(m: pyo.ConcreteModel, d: ModelData, rts: list, kits_of: dict) -> tuple[list, dict]:
    """Each tier-regime's excess at the highest level reached (c_dcn_cut, c_dcn_excess).
    Returns (the (region, tier, regime) keys, every kit's excess at every level per key: a
    (kits, levels) array, prefill slices)."""
    pods = d.pods
    out_keys = [(r, t, g) for (r, t) in rts for g in pods.tiers[(r, t)].regimes]
    m.DCN_OUT = pyo.Set(initialize=out_keys, dimen=3, ordered=True)
    m.v_dcn_kv_out = pyo.Var(m.DCN_OUT, domain=pyo.NonNegativeReals)
    cut_keys = [(r, t, g, i) for (r, t, g) in out_keys for i in range(1, len(pods.tiers[(r, t)].n_levels))]
    m.DCN_CUTS = pyo.Set(initialize=cut_keys, dimen=4, ordered=True)
    m.v_dcn_cut = pyo.Var(m.DCN_CUTS, domain=pyo.NonNegativeReals)

    # every kit's excess at every level, per region-tier-regime: (kits, levels) arrays
    table = {(r, t, g): pods.tiers[(r, t)].regimes[g].excess_table([kt for (_, _, _, kt) in kits_of.get((r, t), [])],
                                                                    pods.tiers[(r, t)].n_levels)
             for (r, t, g) in out_keys}
    kit_vars = {(r, t): [m.v_pod_kits[gi, li, ki] for (gi, li, ki, _) in kits_of.get((r, t), [])] for (r, t) in rts}
    pods_max_of = {r: sum(gr.pods_max for gr in pods.groups if gr.region == r) for r in d.REGIONS}

    def cut_room(_m, r, t, g, i):
        drop = table[(r, t, g)][:, i - 1] - table[(r, t, g)][:, i]
        vs = kit_vars[(r, t)]
        return m.v_dcn_cut[r, t, g, i] <= sum(float(drop[k]) * vs[k] for k in np.flatnonzero(drop > EXCESS_TOL))

    def cut_most(_m, r, t, g, i):
        drop = table[(r, t, g)][:, i - 1] - table[(r, t, g)][:, i]
        most = float(drop.max()) if len(drop) else 0.0
        return m.v_dcn_cut[r, t, g, i] <= most * pods_max_of[r] * m.v_dcn_reach[r, t, i]

    check("building the model")  # a command's --time-limit between this family's larger blocks (fleetplan.deadline)
    m.c_dcn_cut_room = pyo.Constraint(m.DCN_CUTS, rule=cut_room)
    check("building the model")
    m.c_dcn_cut_reach = pyo.Constraint(m.DCN_CUTS, rule=cut_most)
    check("building the model")

    def excess(_m, r, t, g):
        # at least (an inequality: the share rows bound it above, and CP-SAT's 0.1 grid for continuous variables
        # could not meet a fractional sum exactly)
        x0, vs = table[(r, t, g)][:, 0], kit_vars[(r, t)]
        return m.v_dcn_kv_out[r, t, g] >= sum(float(x0[k]) * vs[k] for k in np.flatnonzero(x0 > EXCESS_TOL)) - sum(
            m.v_dcn_cut[r, t, g, i] for i in range(1, len(pods.tiers[(r, t)].n_levels)))

    m.c_dcn_excess = pyo.Constraint(m.DCN_OUT, rule=excess)
    return out_keys, table


def _overage(m: pyo.ConcreteModel, d: ModelData, out_keys: list) -> None:
    """The declared overage: v_dcn_over per tier-regime, v_dcn_over_overall per region-regime,
    their requests/s (e_dcn_over_rps, the inactive objective obj_dcn_over) and the per-region
    cap c_dcn_over_cap (inactive until the driver's overage stage)."""
    pods = d.pods
    wmax = d.inst.failover.warm_pool.max_slices_per_region
    # the overage: a share above the ceiling, declared (least first: the driver's lexicographic stage) and
    # allowed only at the overage level, whose TTFT composition has every request crossing
    m.v_dcn_over = pyo.Var(m.DCN_OUT, domain=pyo.NonNegativeReals, bounds=lambda _m, r, t, g: (0.0, _n_max(d, r, t) + wmax))
    over_keys = [(r, t, g) for (r, t, g) in out_keys if pods.over_level(t) is not None]
    m.c_dcn_over_level = pyo.Constraint(over_keys, rule=lambda _m, r, t, g: m.v_dcn_over[r, t, g]
                                        <= (_n_max(d, r, t) + wmax) * m.v_dcn_level[r, t, pods.over_level(t)])
    for k in out_keys:
        if pods.over_level(k[1]) is None:
            m.v_dcn_over[k].fix(0.0)
    # in requests/s (the per-slice load at the plain sizing's pool): what the lexicographic stage minimises; capped
    # per region (the regions' pods are independent once the routing is fixed, so the stage stays one MIP per region)
    # the overall ceiling's overage (requests/s of the region's, per regime): where a tier's own ceiling is above the
    # overall one, the region's share over all tiers may pass it only as a declared overage, as a tier's may
    regimes_of = sorted({(r, g) for (r, t, g) in out_keys}) if pods.overall_binds else []
    m.DCN_OVER_OVERALL = pyo.Set(initialize=regimes_of, dimen=2, ordered=True)
    m.v_dcn_over_overall = pyo.Var(m.DCN_OVER_OVERALL, domain=pyo.NonNegativeReals)

    def over_rps(r):
        return (sum(pods.tiers[(r, t)].regimes[g].load_rps / pods.tiers[(r, t)].center * m.v_dcn_over[r, t, g]
                    for (rr, t, g) in out_keys if rr == r)
                + sum(m.v_dcn_over_overall[rr, g] for (rr, g) in regimes_of if rr == r))

    m.e_dcn_over_region_rps = pyo.Expression(d.REGIONS, rule=lambda _m, r: over_rps(r))
    m.e_dcn_over_rps = pyo.Expression(expr=sum(m.e_dcn_over_region_rps[r] for r in d.REGIONS))
    m.obj_dcn_over = pyo.Objective(expr=m.e_dcn_over_rps, sense=pyo.minimize)
    m.obj_dcn_over.deactivate()
    m.p_dcn_over_cap = pyo.Param(d.REGIONS, mutable=True, initialize=0.0)
    m.c_dcn_over_cap = pyo.Constraint(d.REGIONS, rule=lambda _m, r: m.e_dcn_over_region_rps[r] <= m.p_dcn_over_cap[r])
    m.c_dcn_over_cap.deactivate()


def _share(m: pyo.ConcreteModel, d: ModelData, out_keys: list) -> None:
    """The share rows (c_dcn_share): per tier-regime, TTFT composition level and scenario, the
    excess (with the warm prefill slices of a region loss) within the level's share."""
    pods = d.pods
    wmax = d.inst.failover.warm_pool.max_slices_per_region
    share_rows = []
    for (r, t, g) in out_keys:
        reg = pods.tiers[(r, t)].regimes[g]
        for li in range(len(pods.levels.get(t, [0.0]))):
            for sn in reg.scenarios:
                share_rows.append((r, t, g, li, sn))

    def share(_m, r, t, g, li, sn):
        over = li == pods.over_level(t)
        s_l = pods.levels[t][li - 1] if over else pods.levels[t][li]  # the overage level: the ceiling plus the overage
        off = 1 - m.v_dcn_level[r, t, li]
        n = _n_prefill(m, d, r, t)
        extra = m.v_dcn_over[r, t, g] if over else 0
        if g == "normal":
            return m.v_dcn_kv_out[r, t, g] <= s_l * n + extra + _n_max(d, r, t) * off
        w = sum(m.warm_use(r, t, "prefill", c, sn) for c in d.CONFIGS)
        return m.v_dcn_kv_out[r, t, g] + w <= s_l * (n + w) + extra + (_n_max(d, r, t) + wmax) * off

    check("building the model")
    m.DCN_SHARE = pyo.Set(initialize=share_rows, dimen=5, ordered=True)
    m.c_dcn_share = pyo.Constraint(m.DCN_SHARE, rule=share)
    check("building the model")


def _egress(m: pyo.ConcreteModel, d: ModelData, kits_of: dict, table: dict) -> None:
    """Each kit's chips' share of its pod's DCN egress, at the level's per-slice load
    (c_dcn_egress): a kit that would send more at level i is allowed only from level i + 1."""
    pods = d.pods
    groups = pods.groups
    egress = []
    for (r, t), items in kits_of.items():
        td = pods.tiers.get((r, t))
        if td is None or not items:
            continue
        budget = np.array([groups[gi].egress_gbytes_per_s * kt.chips / groups[gi].pod_chips for (gi, li, ki, kt) in items])
        n = np.asarray(td.n_levels, dtype=float)
        over = np.zeros((len(items), len(n)), dtype=bool)
        for g, reg in td.regimes.items():
            with np.errstate(divide="ignore", invalid="ignore"):
                gbs = table[(r, t, g)] * np.where(n > 0, reg.load_rps / np.where(n > 0, n, 1.0), 0.0)[None, :] * reg.kv_gbytes
            over |= gbs > budget[:, None] * (1 + 1e-9)
        over[:, n <= 0] = False
        for k, i in zip(*np.nonzero(over)):
            gi, li, ki, _ = items[k]
            egress.append((gi, li, ki, int(i)))
    last: dict[tuple, int] = {}
    for (gi, li, ki, i) in egress:  # the excess falls with the level: a kit is allowed from the level above its last violating one
        last[(gi, li, ki)] = max(last.get((gi, li, ki), -1), i)

    def egress_row(_m, gi, li, ki):
        r, t = groups[gi].region, m.kit_of(gi, li, ki).tier
        top = len(pods.tiers[(r, t)].n_levels) - 1
        i = last[(gi, li, ki)]
        return m.v_pod_kits[gi, li, ki] <= (groups[gi].pods_max * m.reach(r, t, i + 1) if i < top else 0)

    m.DCN_EGRESS = pyo.Set(initialize=sorted(last), dimen=3, ordered=True)
    m.c_dcn_egress = pyo.Constraint(m.DCN_EGRESS, rule=egress_row)


def _warm_egress(m: pyo.ConcreteModel, d: ModelData) -> None:
    """A warm slice that would send more KV at its pool's busiest per-slice load than its
    chips' share of its pod's egress never joins that prefill pool (its use fixed at 0)."""
    pods = d.pods
    egress = {(g.region, g.chip): g.egress_gbytes_per_s / g.pod_chips for g in pods.groups}
    for (r, t, ro, c, sn) in list(m.WARM_USE):
        if ro != "prefill" or (r, t) not in pods.tiers:
            continue
        reg = pods.tiers[(r, t)].regimes.get("failover")
        lo = [n for n in pods.tiers[(r, t)].n_levels if n > 0]
        if reg is None or not lo:
            continue
        per_slice = reg.load_rps / lo[0] * reg.kv_gbytes
        if per_slice > egress.get((r, d.config_chip(c)), 0.0) * d.slices[c].chips * (1 + 1e-9):
            m.v_warm_use[r, t, ro, c, sn].fix(0)


def _overall(m: pyo.ConcreteModel, d: ModelData, rts: list, out_keys: list) -> None:
    """The overall ceiling per region and scenario, in requests/s (see the module docstring)."""
    pods = d.pods
    beta = d.p_batch_share
    m.v_dcn_req = pyo.Var(m.DCN_OUT, domain=pyo.NonNegativeReals)
    rows = [(r, t, g, i) for (r, t, g) in out_keys for i, n in enumerate(pods.tiers[(r, t)].n_levels) if n > 0]

    def req(_m, r, t, g, i):
        td = pods.tiers[(r, t)]
        lam, n = td.regimes[g].load_rps, td.n_levels[i]
        big = lam / n * max(d.p_max_slices[(r, t, "prefill", c)] for c in d.CONFIGS)
        return m.v_dcn_req[r, t, g] >= lam / n * m.v_dcn_kv_out[r, t, g] - big * (1 - m.level_is(r, t, i))

    m.c_dcn_req = pyo.Constraint(rows, rule=req)  # at the level reached: its per-slice load lambda / n_i bounds the real one
    check("building the model")
    S = {s.name: s for s in d.SCENARIOS}
    per = []
    for (r, t, g) in out_keys:
        for sn in pods.tiers[(r, t)].regimes[g].scenarios:
            per.append((r, g, sn))
    per = sorted(set(per))

    def overall(_m, r, g, sn):
        s = S[sn]
        terms, demand = 0, 0.0
        for t in d.TIERS:
            td = pods.tiers.get((r, t))
            if td is None or g not in td.regimes:
                continue
            reg = td.regimes[g]
            terms = terms + m.v_dcn_req[r, t, g]
            if g == "failover":
                lo = [n for n in td.n_levels if n > 0]
                w = sum(m.warm_use(r, t, "prefill", c, sn) for c in d.CONFIGS)
                terms = terms + (reg.load_rps / lo[0] if lo else 0.0) * w
            demand += d.own_rps(s, r, t) + (pods.routing.get((s.lost, r, t), 0.0) * d.lost_rps(s, t) * (1 - d.p_clamped_share[t])
                                            if s.kind == "loss" else 0.0)
        return terms <= pods.overall_limit * (1 - beta if g == "failover" else 1.0) * demand + m.v_dcn_over_overall[r, g]

    m.c_dcn_overall = pyo.Constraint(per, rule=overall)
