r"""Placing a plan sized with its pods (``Plan.pods``): every slice in the pod
the plan counts it in, the prefill -> decode routing of every scenario of the plan, and
-- in a region loss -- which warm slices join which pool.

**Counts.** Pod k of a region's chip type (``PodContent.pod``) is pod id
``REGION/CHIP/kk`` (:func:`fleetplan.placement.pod_ids`); with a current placement the
plan's pods are mapped onto the up pods -- identical pods, any permutation -- that need the
fewest slices to arrive (an assignment problem, OR-Tools' linear sum assignment).
:func:`improve` may then empty pods the sizing left nearly empty (warm slices only, or a
stray slice) into the free chips of other pods, keeping a move only when no tier's DCN
share rises in any scenario and no pod's egress leaves its capacity.

**Routing rule** (as :mod:`fleetplan.results.dcn`, the plan's own): a region-tier's prefill
pool of n slices (warm slices that joined included) serves lambda requests/s spread
evenly, so a pod with P of them produces lambda P / n requests/s of KV; the pod's decode
slices of the tier (and the warm slices that joined its decode pool) take up to their
operating point's rate -- normal or failover -- and keep it on the ICI; the excess crosses
the DCN to pods with spare decode capacity (filled in pod order: few routes).

**Warm slices in a region loss.** The plan records per pool how many warm slices join and
their shape (``PoolLoad.warm_slices``, ``PoolLoad.slice``), not which. Per scenario and
surviving region a small MIP (HiGHS) picks them, with :math:`y_{p,j}` the warm slices of
pod j joining pool p (integer), :math:`e_{t,j}` the tier-t KV leaving pod j (req/s),
:math:`W_{s,j}` the warm slices of shape s in pod j, :math:`\pi_t = \lambda_t / n_t`,
:math:`P_{t,j}`, :math:`C_{t,j}` the pod's prefill slices and decode rate (req/s),
:math:`\mu_t` the rate of a warm decode slice, :math:`g_t` the mean KV per request (GB),
:math:`E_j` the pod's DCN egress (GB/s):

.. math::

   \min \sum_t \frac{1}{\lambda_t} \sum_j e_{t,j} \quad\text{s.t.}\quad
   \sum_j y_{p,j} = w_p, \qquad \sum_{p: s_p = s} y_{p,j} \le W_{s,j},

   e_{t,j} \ge \pi_t \big(P_{t,j} + \textstyle\sum_{p \in \mathrm{pre}(t)} y_{p,j}\big)
              - C_{t,j} - \mu_t \textstyle\sum_{p \in \mathrm{dec}(t)} y_{p,j}, \qquad
   \sum_t g_t\, e_{t,j} \le E_j .

Any choice gives each tier at most the share the plan predicts (the plan counts every warm
prefill slice as crossing; here one crosses at most its own load), so the placement's
shares are never above the plan's. The MIP is built as arrays and passed to highspy
directly: a placement solves one per scenario and region (and again for each improvement
tried), where Pyomo's model build and MPS export would cost ~50 ms each
(docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetplan.instance.schema import Instance
from fleetplan.placement.document import (PlacedSlice, PlacedTierDcn, PodSlots, RouteWeight, ScenarioRouting, TierScenarioDcn,
                                         WarmJoin)
from fleetplan.placement.packing import PlacementInfeasible, allocate
from fleetplan.placement.weights import normalise_shares
from fleetplan.results.plan import Plan

__all__ = ["TierLoad", "Join", "ScenarioLoad", "region_loads", "plan_counts", "improve", "map_to_current", "route_scenario",
           "scenario_routing", "Flows"]

Key = tuple  # (tier, role, shape); warm slices: (None, "warm", shape)
Content = dict[str, dict[Key, int]]  # pod id -> slices per key

EPS_RPS = 1e-9  # requests/s below which a flow is rounding, not traffic


@dataclass(frozen=True)
class TierLoad:
    """A region x tier's prefill pool in one scenario (the plan's record): ``rps`` served
    (own ``own_rps`` + diverted ``div_rps``, requests/s), ``slices`` (warm ones joined
    included), ``kv_gbytes`` the mean KV per request (GB), ``rates`` the requests/s one
    decode slice of each shape takes at the scenario's operating point, ``plan_share`` the
    plan's DCN share for it (fraction; None when the plan records none)."""

    tier: str
    rps: float
    own_rps: float
    div_rps: float
    slices: int
    kv_gbytes: float
    rates: dict[str, float]
    plan_share: float | None

    @property
    def per_slice_rps(self) -> float:
        return self.rps / self.slices if self.slices > 0 else 0.0


@dataclass(frozen=True)
class Join:
    """``count`` warm slices of ``shape`` join the (tier, role) pool in a scenario."""

    tier: str
    role: str
    shape: str
    count: int


@dataclass(frozen=True)
class ScenarioLoad:
    """One region's loads in one scenario of the plan."""

    name: str
    kind: str
    lost: str | None
    hour: int | None
    tiers: dict[str, TierLoad]
    joins: list[Join]


def region_loads(inst: Instance, plan: Plan, ctx, region: str, normal_rps: dict[str, float]) -> list[ScenarioLoad]:
    """``region``'s loads in every scenario of ``plan`` it survives (normal first).
    ``normal_rps``: tier -> requests/s the normal routing carries where the plan's normal
    record has none (a region without traffic of its own: :func:`fleetplan.placement.summary.tier_demand`)."""
    from fleetplan.results.dcn import decode_rates, kv_gbytes
    from fleetplan.results.loads import served_rps

    pools = [p for p in plan.pools if p.region == region]
    out = []
    for sc in plan.scenarios:
        fail = sc.kind == "loss"
        if fail and sc.lost_region == region:
            continue
        recs = [pl for pl in sc.pools if pl.region == region]
        if not recs:
            continue
        tiers = {}
        for pl in recs:
            if pl.role != "prefill" or pl.slices <= 0:
                continue
            own, div = served_rps(pl)
            if own + div <= 0 and not fail and normal_rps.get(pl.tier, 0.0) > 0:
                own = normal_rps[pl.tier]
            if own + div <= 0:
                continue
            tiers[pl.tier] = TierLoad(pl.tier, own + div, own, div, pl.slices, kv_gbytes(ctx, pl.tier, own, div),
                                      decode_rates(ctx, pools, pl.tier, fail), pl.dcn_share)
        joins = [Join(pl.tier, pl.role, pl.slice, pl.warm_slices) for pl in recs if fail and pl.warm_slices > 0 and pl.slice]
        out.append(ScenarioLoad(sc.name, sc.kind, sc.lost_region, sc.hour, tiers, joins))
    return out


# ----------------------------------------------------------------------------- counts


def plan_counts(plan: Plan, region: str, up: list[str]) -> Content:
    """The plan's slices per pod id of ``region`` (pod k of a chip type -> 'REGION/CHIP/kk').
    Raises PlacementInfeasible when a pod the plan fills is not up (a current placement
    with pods down: :func:`map_to_current` maps onto the up pods)."""
    out: Content = {}
    for pc in plan.pods or []:
        if pc.region != region:
            continue
        pid = f"{pc.region}/{pc.chip}/{pc.pod:02d}"
        c = {}
        for k, n in pc.slices.items():
            if n <= 0:
                continue
            parts = k.split("/")
            key = (None, "warm", parts[1]) if parts[0] == "warm" else (parts[0], parts[1], parts[2])
            c[key] = c.get(key, 0) + n
        if c:
            out[pid] = c
    down = sorted(set(out) - set(up))
    if down:
        raise PlacementInfeasible(f"{region}: the plan fills pod{'s' if len(down) > 1 else ''} {', '.join(down)}, which "
                                  f"{'are' if len(down) > 1 else 'is'} not up")
    return out


def map_to_current(content: Content, pods: list[tuple[str, str, int]], current: dict[str, dict[Key, int]]) -> Content:
    """The same pod contents on other pods of the same chip type (identical pods), chosen so
    that the fewest slices arrive in a pod where the current placement (``current``: pod id
    -> slices per key) does not have them. ``pods``: the region's up pods (id, chip, chips).
    Raises PlacementInfeasible when the plan fills more pods of a chip type than are up."""
    from ortools.graph.python import linear_sum_assignment

    out: Content = {}
    for chip in sorted({k for _, k, _ in pods}):
        ids = [p for p, k, _ in pods if k == chip]
        full = sorted(p for p in content if p.rsplit("/", 2)[1] == chip)
        if len(full) > len(ids):
            raise PlacementInfeasible(f"the plan fills {len(full)} {chip} pods of {full[0].rsplit('/', 2)[0]}; {len(ids)} are up")
        if not full:
            continue
        a = linear_sum_assignment.SimpleLinearSumAssignment()
        for i in range(len(ids)):  # the pods the plan leaves empty pad the left side: a perfect assignment
            for j, dst in enumerate(ids):
                cur = current.get(dst, {})
                a.add_arc_with_cost(i, j, sum(max(0, n - cur.get(k, 0)) for k, n in content[full[i]].items()) if i < len(full) else 0)
        if a.solve() != a.OPTIMAL:  # pragma: no cover - a complete bipartite graph always has one
            raise RuntimeError("the pod assignment found no solution (a bug)")
        for i, src in enumerate(full):
            out[ids[a.right_mate(i)]] = content[src]
    return out


# ----------------------------------------------------------------------------- routing of one scenario


@dataclass
class Flows:
    """A region's routing in one scenario: warm joins (pool key (tier, role, shape) -> pod
    -> slices), per tier the pods' prefill load and KV kept in the pod (req/s), the
    cross-pod flows (from, to, req/s), and per pod the KV leaving it (GB/s)."""

    joins: dict[tuple, dict[str, int]]
    load: dict[str, dict[str, float]]
    local: dict[str, dict[str, float]]
    cross: dict[str, list[tuple[str, str, float]]]
    egress: dict[str, float]

    def share(self, tier: str, rps: float) -> float:
        out = sum(x for _, _, x in self.cross.get(tier, []))
        return min(out / rps, 1.0) if rps > 0 else 0.0


class _Highs:
    """One HiGHS instance reused for the small join MIPs (its banner captured once)."""

    def __init__(self):
        import highspy
        from pyomo.common.tee import capture_output
        import io

        with capture_output(io.StringIO(), capture_fd=True):
            self.h = highspy.Highs()
        self.h.setOptionValue("output_flag", False)
        self.h.setOptionValue("threads", 1)
        self.h.setOptionValue("mip_rel_gap", 0.0)
        self.hs = highspy

    def solve(self, cost, lower, upper, integer, rows) -> list[float] | None:
        """min cost.x over lower <= x <= upper (integer where ``integer``), ``rows`` = [(lo,
        hi, {col: coef})]; the solution, or None when infeasible."""
        hs = self.hs
        lp = hs.HighsLp()
        lp.num_col_ = len(cost)
        lp.num_row_ = len(rows)
        lp.col_cost_ = [float(c) for c in cost]
        lp.col_lower_ = [float(x) for x in lower]
        lp.col_upper_ = [float(x) for x in upper]
        lp.row_lower_ = [(-hs.kHighsInf if lo is None else float(lo)) for lo, _, _ in rows]
        lp.row_upper_ = [(hs.kHighsInf if hi is None else float(hi)) for _, hi, _ in rows]
        start, index, value = [0], [], []
        for _, _, coefs in rows:
            for c in sorted(coefs):
                index.append(c)
                value.append(float(coefs[c]))
            start.append(len(index))
        lp.a_matrix_.format_ = hs.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = start
        lp.a_matrix_.index_ = index
        lp.a_matrix_.value_ = value
        lp.integrality_ = [hs.HighsVarType.kInteger if i else hs.HighsVarType.kContinuous for i in integer]
        self.h.clearModel()
        self.h.passModel(lp)
        self.h.run()
        if self.h.getModelStatus() != hs.HighsModelStatus.kOptimal:
            return None
        return list(self.h.getSolution().col_value)


def _pod_rates(content: Content, tier: str, tl: TierLoad) -> tuple[dict[str, float], dict[str, float]]:
    """Per pod: prefill slices of ``tier`` and the requests/s its decode slices take."""
    pre, cap = {}, {}
    for j, c in content.items():
        for (t, role, shape), n in c.items():
            if t != tier:
                continue
            if role == "prefill":
                pre[j] = pre.get(j, 0) + n
            elif role == "decode":
                cap[j] = cap.get(j, 0.0) + n * tl.rates.get(shape, 0.0)
    return pre, cap


def _choose_joins(hs: _Highs, content: Content, sl: ScenarioLoad, egress_cap: dict[str, float], region: str) -> dict[tuple, dict[str, int]]:
    """Which pods' warm slices join each pool of ``sl`` (the module docstring's MIP)."""
    joins = [j for j in sl.joins if j.count > 0]
    if not joins:
        return {}
    warm = {j: {k[2]: n for k, n in c.items() if k[1] == "warm"} for j, c in content.items()}
    for jn in joins:
        have = sum(w.get(jn.shape, 0) for w in warm.values())
        need = sum(x.count for x in joins if x.shape == jn.shape)
        if need > have:
            raise ValueError(f"{sl.name}: {need} warm slices of {jn.shape} join pools of {region} and its pods hold {have}")
    cols_y: list[tuple[int, str]] = []  # (join index, pod)
    for pi, jn in enumerate(joins):
        for j in sorted(warm):
            if warm[j].get(jn.shape, 0) > 0:
                cols_y.append((pi, j))
    ny = len(cols_y)
    cost, lower, upper, integer = [0.0] * ny, [0.0] * ny, [float(min(joins[pi].count, warm[j][joins[pi].shape])) for pi, j in cols_y], [True] * ny
    rows = []
    for pi, jn in enumerate(joins):
        rows.append((jn.count, jn.count, {c: 1.0 for c, (q, _) in enumerate(cols_y) if q == pi}))
    for j in sorted(warm):
        for s in sorted(warm[j]):
            cs = {c: 1.0 for c, (q, jj) in enumerate(cols_y) if jj == j and joins[q].shape == s}
            if len(cs) > 1:
                rows.append((None, warm[j][s], cs))
    # the KV leaving each pod a join may touch, per tier
    ex_cols: dict[tuple[str, str], int] = {}
    const_egress: dict[str, float] = {}
    touched = {j for _, j in cols_y}
    for t, tl in sl.tiers.items():
        pre, cap = _pod_rates(content, t, tl)
        mu = {jn.shape: tl.rates.get(jn.shape, 0.0) for jn in joins if jn.tier == t and jn.role == "decode"}
        for j in sorted(set(pre) | touched):
            ys = {c: (-tl.per_slice_rps if joins[q].role == "prefill" else mu.get(joins[q].shape, 0.0))
                  for c, (q, jj) in enumerate(cols_y) if jj == j and joins[q].tier == t and joins[q].role in ("prefill", "decode")}
            base = tl.per_slice_rps * pre.get(j, 0) - cap.get(j, 0.0)
            if not ys:
                const_egress[j] = const_egress.get(j, 0.0) + max(base, 0.0) * tl.kv_gbytes
                continue
            c = len(cost)
            ex_cols[(t, j)] = c
            cost.append(1.0 / tl.rps)
            lower.append(0.0)
            upper.append(float("inf"))
            integer.append(False)
            ys[c] = 1.0
            rows.append((base, None, ys))  # e - pi*yP + mu*yD >= pi*P - C
    egress_rows = []
    for j in sorted({jj for (_, jj) in ex_cols}):
        if j in egress_cap:
            cs = {c: sl.tiers[t].kv_gbytes for (t, jj), c in ex_cols.items() if jj == j}
            egress_rows.append((None, egress_cap[j] - const_egress.get(j, 0.0), cs))
    x = hs.solve(cost, lower, upper, integer, rows + egress_rows)
    if x is None and egress_rows:  # the egress cannot hold: the least-DCN choice, the checker names the pod
        x = hs.solve(cost, lower, upper, integer, rows)
    if x is None:
        raise RuntimeError(f"{sl.name}: the warm slices of {region} could not be assigned to its pools (a bug)")
    out: dict[tuple, dict[str, int]] = {}
    for c, (pi, j) in enumerate(cols_y):
        n = int(round(x[c]))
        if n > 0:
            jn = joins[pi]
            out.setdefault((jn.tier, jn.role, jn.shape), {})[j] = n
    return out


def route_scenario(hs: _Highs, content: Content, sl: ScenarioLoad, egress_cap: dict[str, float], region: str) -> Flows:
    """The routing of one region in scenario ``sl`` with the pods holding ``content``: the
    warm joins (:func:`_choose_joins`), then per tier each pod keeps what its decode takes
    and sends the rest to pods with spare decode capacity, filled in pod order."""
    joins = _choose_joins(hs, content, sl, egress_cap, region)
    fl = Flows(joins, {}, {}, {}, {})
    for t, tl in sl.tiers.items():
        pre, cap = _pod_rates(content, t, tl)
        for (jt, role, shape), at in joins.items():
            if jt != t:
                continue
            for j, n in at.items():
                if role == "prefill":
                    pre[j] = pre.get(j, 0) + n
                elif role == "decode":
                    cap[j] = cap.get(j, 0.0) + n * tl.rates.get(shape, 0.0)
        per = tl.per_slice_rps
        load = {j: per * n for j, n in pre.items() if n > 0}
        local = {j: min(x, cap.get(j, 0.0)) for j, x in load.items()}
        out = sorted((j, load[j] - local[j]) for j in load if load[j] - local[j] > EPS_RPS * max(tl.rps, 1.0))
        spare = sorted((j, c - local.get(j, 0.0)) for j, c in cap.items() if c - local.get(j, 0.0) > EPS_RPS * max(tl.rps, 1.0))
        total_spare = sum(x for _, x in spare)
        total_out = sum(x for _, x in out)
        if total_out > total_spare and total_spare > 0:
            # the decode slices do not take the tier's KV: spread over them in proportion (the checker names it)
            spare = [(j, x * total_out / total_spare) for j, x in spare]
        cross = []
        k, room = 0, (spare[0][1] if spare else 0.0)
        for i, x in out:
            while x > 0 and k < len(spare):
                f = min(x, room)
                if f > 0:
                    cross.append((i, spare[k][0], f))
                x -= f
                room -= f
                if room <= 1e-12 * max(tl.rps, 1.0):
                    k += 1
                    room = spare[k][1] if k < len(spare) else 0.0
        fl.load[t], fl.local[t], fl.cross[t] = load, local, cross
        for i, _, f in cross:
            fl.egress[i] = fl.egress.get(i, 0.0) + f * tl.kv_gbytes
    return fl


def _evaluate(hs: _Highs, content: Content, loads: list[ScenarioLoad], egress_cap: dict[str, float], region: str):
    """Per (scenario, tier) the DCN share, and the largest egress over capacity (GB/s, 0 when every pod is within)."""
    shares, over = {}, 0.0
    for sl in loads:
        fl = route_scenario(hs, content, sl, egress_cap, region)
        for t, tl in sl.tiers.items():
            shares[(sl.name, t)] = fl.share(t, tl.rps)
        for j, g in fl.egress.items():
            over = max(over, g - egress_cap.get(j, float("inf")))
    return shares, over


# ----------------------------------------------------------------------------- improvement


def improve(content: Content, pods: list[tuple[str, str, int]], chips_per_vm: dict[str, int], loads: list[ScenarioLoad],
            egress_cap: dict[str, float], region: str, max_slices: int = 4, deadline: float | None = None) -> tuple[Content, list[str]]:
    """Empty pods the sizing left nearly empty: a used pod of at most ``max_slices`` slices
    (fewest chips first) whose slices all fit the free aligned chips of the region's other
    used pods -- warm slices into pods holding only warm slices first, a prefill slice where
    its tier's decode has the most spare rate, a decode slice where its tier's prefill most
    exceeds the decode -- is emptied when, in every scenario, no tier's DCN share rises and
    no pod's egress leaves its capacity (or goes further over). It stops at ``deadline``
    (a :func:`time.monotonic` timestamp), keeping what it has, and says so. Returns the
    contents and the notes saying what moved."""
    import time

    stopped = [f"{region}: the time limit stopped the search for nearly empty pods to empty; the placement keeps what it found"]
    if deadline is not None and time.monotonic() >= deadline:
        return content, stopped
    hs = _Highs()
    base, over = _evaluate(hs, content, loads, egress_cap, region)
    cap_of = {p: c for p, _, c in pods}
    chip_of = {p: k for p, k, _ in pods}
    size = {}
    for p, c in content.items():
        for k in c:
            size[k] = int(k[2].rpartition("x")[2])
    normal = next((sl for sl in loads if sl.kind == "normal"), None)
    moved_notes = []
    emptied = []

    def chips(c: dict[Key, int]) -> int:
        return sum(size[k] * n for k, n in c.items())

    def fits(c: dict[Key, int], pod: str) -> bool:
        return chips(c) <= cap_of[pod] and allocate(cap_of[pod], chips_per_vm[chip_of[pod]], [size[k] for k, n in c.items() for _ in range(n)]) is not None

    def balance(c: dict[Key, int], tier: str) -> float:
        """Normal peak: decode rate less prefill load of ``tier`` in a pod (req/s)."""
        tl = normal.tiers.get(tier) if normal else None
        if tl is None:
            return 0.0
        pre = sum(n for k, n in c.items() if k[0] == tier and k[1] == "prefill")
        dec = sum(n * tl.rates.get(k[2], 0.0) for k, n in c.items() if k[0] == tier and k[1] == "decode")
        return dec - tl.per_slice_rps * pre

    candidates = sorted((p for p, c in content.items() if 0 < sum(c.values()) <= max_slices and p in cap_of),
                        key=lambda p: (sum(size[k] * n for k, n in content[p].items()), p))
    cut = False
    for src in candidates:
        if src not in content or sum(content[src].values()) > max_slices:  # it took in slices of a pod emptied before it
            continue
        if deadline is not None and time.monotonic() >= deadline:
            cut = True
            break
        need = chips(content[src])
        if need > sum(cap_of[p] - chips(c) for p, c in content.items() if p != src and chip_of.get(p) == chip_of[src] and c):
            continue  # the other used pods have not the free chips
        trial = {p: dict(c) for p, c in content.items() if p != src}
        ok = True
        for k, n in sorted(content[src].items(), key=lambda kn: (-size[kn[0]], str(kn[0]))):
            for _ in range(n):
                dests = [p for p, c in trial.items() if p != src and chip_of.get(p) == chip_of[src] and c
                         and cap_of[p] - chips(c) >= size[k]]
                if k[1] == "warm":
                    rank = lambda p: (0 if all(q[1] == "warm" for q in trial[p]) else 1, -sum(size[q] * m for q, m in trial[p].items()), p)  # noqa: E731
                elif k[1] == "prefill":
                    rank = lambda p: (-balance(trial[p], k[0]), p)  # noqa: E731
                elif k[1] == "decode":
                    rank = lambda p: (balance(trial[p], k[0]), p)  # noqa: E731
                else:
                    rank = lambda p: (-sum(size[q] * m for q, m in trial[p].items()), p)  # noqa: E731
                for p in sorted(dests, key=rank):
                    c = dict(trial[p])
                    c[k] = c.get(k, 0) + 1
                    if fits(c, p):
                        trial[p] = c
                        break
                else:
                    ok = False
                    break
            if not ok:
                break
        if not ok:
            continue
        shares, tover = _evaluate(hs, trial, loads, egress_cap, region)
        if tover > max(over, 0.0) + 1e-9 or any(shares[x] > base[x] + 1e-9 for x in base):
            continue
        lower = sorted({x for x in base if shares[x] < base[x] - 1e-9})
        what = ", ".join(f"{'warm' if k[0] is None else k[0] + ' ' + k[1]} {k[2]} x{n}" for k, n in sorted(content[src].items(), key=str))
        moved_notes.append(f"{src} ({what})" + (f", lowering the DCN share in {len(lower)} scenario-tier(s)" if lower else ""))
        content, base, over = trial, shares, min(over, tover)
        emptied.append(src)
    notes = []
    if emptied:
        notes.append(f"{region}: {len(emptied)} pod{'s' if len(emptied) > 1 else ''} the plan's pods left nearly empty "
                     f"{'were' if len(emptied) > 1 else 'was'} emptied into the free chips of other pods, no tier's DCN share rising "
                     f"in any scenario: " + "; ".join(moved_notes)
                     + " (the plan still counts the emptied pods in its fleet)")
    return content, notes + (stopped if cut else [])


# ----------------------------------------------------------------------------- the placement's routing records


def _rows(region: str, tier: str, load: dict[str, float], local: dict[str, float], cross: list[tuple[str, str, float]]) -> list[RouteWeight]:
    """Route weights of one region-tier from per-pod flows (req/s), shares normalised to 1 per pod."""
    parts: dict[str, dict[str, float]] = {}
    for j, x in local.items():
        if x > 0 and load.get(j, 0.0) > 0:
            parts.setdefault(j, {})[j] = x
    for i, j, f in cross:
        parts.setdefault(i, {})[j] = parts.get(i, {}).get(j, 0.0) + f
    rows = []
    for i in sorted(parts):
        s = sum(parts[i].values())
        for j in sorted(parts[i]):
            rows.append(RouteWeight(region=region, tier=tier, from_pod=i, to_pod=j, share=round(parts[i][j] / s, 9),
                                    rps=round(parts[i][j] / s * load[i], 6)))
    return normalise_shares(rows)


def scenario_routing(inst: Instance, plan: Plan, loads: dict[str, list[ScenarioLoad]], pods: list[PodSlots],
                     slices: list[PlacedSlice]) -> tuple[list[RouteWeight], list[ScenarioRouting], list[PlacedTierDcn]]:
    """The placed fleet's routing in every scenario of the plan (``loads``: region -> its
    scenario loads, :func:`region_loads`): the normal routing rows, the per-scenario records
    (warm joins by slice id) and the per region x tier DCN summary."""
    hs = _Highs()
    content: dict[str, Content] = {}
    warm_ids: dict[tuple[str, str], list[str]] = {}  # (pod, shape) -> warm slice ids
    for s in slices:
        key = (None, "warm", s.slice) if s.role == "warm" else (s.tier, s.role, s.slice)
        c = content.setdefault(s.region, {}).setdefault(s.pod, {})
        c[key] = c.get(key, 0) + 1
        if s.role == "warm":
            warm_ids.setdefault((s.pod, s.slice), []).append(s.id)
    for v in warm_ids.values():
        v.sort()
    egress_cap = {p.id: inst.chips[p.chip].pod_egress_gbytes_per_s(inst.network.dcn_gbytes_per_s_per_slice) for p in pods}
    by_name: dict[str, dict] = {}
    for sc in plan.scenarios:
        by_name[sc.name] = {"sc": sc, "warm": [], "routing": [], "tiers": [], "egress": {}}
    for r in sorted(loads):
        for sl in loads[r]:
            fl = route_scenario(hs, content.get(r, {}), sl, egress_cap, r)
            rec = by_name[sl.name]
            for (t, role, shape), at in sorted(fl.joins.items(), key=str):
                for j, n in sorted(at.items()):
                    ids = warm_ids[(j, shape)]
                    used = {w.slice_id for w in rec["warm"]}
                    free = [i for i in ids if i not in used][:n]
                    rec["warm"] += [WarmJoin(slice_id=i, pod=j, region=r, tier=t, role=role) for i in free]
            for t, tl in sorted(sl.tiers.items()):
                rows = _rows(r, t, fl.load[t], fl.local[t], fl.cross[t])
                rec["routing"] += rows
                out = sum(f for _, _, f in fl.cross[t])
                rec["tiers"].append(TierScenarioDcn(region=r, tier=t, rps=round(tl.rps, 6), prefill_slices=tl.slices,
                                                    kv_out_rps=round(out, 6), dcn_share=round(min(out / tl.rps, 1.0), 9),
                                                    plan_dcn_share=tl.plan_share, kv_gbytes_per_request=round(tl.kv_gbytes, 9)))
            for j, g in fl.egress.items():
                if g > 0:
                    rec["egress"][j] = round(rec["egress"].get(j, 0.0) + g, 6)
    scenarios = []
    for sc in plan.scenarios:
        rec = by_name[sc.name]
        scenarios.append(ScenarioRouting(scenario=sc.name, kind=sc.kind, lost_region=sc.lost_region, hour=sc.hour,
                                         warm=sorted(rec["warm"], key=lambda w: w.slice_id), routing=rec["routing"],
                                         tiers=rec["tiers"], pod_dcn_egress_gbytes_per_s=dict(sorted(rec["egress"].items()))))
    normal = next((s for s in scenarios if s.kind == "normal"), None)
    routing = list(normal.routing) if normal is not None else []
    sized = {(x.region, x.tier): x.sized_for for x in plan.dcn or []}
    summary = []
    keys = sorted({(x.region, x.tier) for s in scenarios for x in s.tiers})
    for r, t in keys:
        at = [(s, x) for s in scenarios for x in s.tiers if (x.region, x.tier) == (r, t)]
        nrm = next((x for s, x in at if s.kind == "normal"), None)
        loss = [(x.dcn_share, s.scenario, x) for s, x in at if s.kind == "loss"]
        worst = max(loss, key=lambda z: (z[0], z[1]), default=None)
        summary.append(PlacedTierDcn(region=r, tier=t, dcn_share_max=inst.dcn_share_max_of(t), sized_for=sized.get((r, t)),
                                     normal=nrm.dcn_share if nrm else 0.0, worst_loss=worst[0] if worst else None,
                                     worst_loss_scenario=worst[1] if worst else None, plan_normal=nrm.plan_dcn_share if nrm else None,
                                     plan_worst_loss=worst[2].plan_dcn_share if worst else None))
    return routing, scenarios, summary
