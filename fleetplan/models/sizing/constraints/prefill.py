r"""Prefill TTFT: each prefill pool carries its work within the TTFT percentile budget.

For pool (r, t) on shape c in scenario s (requests/s, ms, Erlangs):

.. math::

   \sum_{c} v\_serve_{r,t,c,q,s} + v\_shed_{r,t,q,s} + v\_short\_prefill_{r,t,q,s}
   \ge \lambda^{q}_{r,t,s}  \qquad q \in \{own, div\}       \quad (c\_prefill\_balance)

   v\_serve_{r,t,c,q,s} \le \lceil\bar\lambda^{q}_{r,t,s}\rceil_{\epsilon}\, v\_select_{r,t,\mathrm{prefill},c}   \quad (c\_prefill\_shape)

   e\_work_{r,t,c,s} = \sum_q v\_serve_{r,t,c,q,s}\, \bar S^{q}_{t,c,g} / 1000

   e\_work_{r,t,c,s} \le A_k + (A_{k+1} - A_k)\,(n_{r,t,c,s} - k) + R_k\,(1 - v\_select_{r,t,\mathrm{prefill},c})
                                                             \quad (c\_prefill\_ttft)

(an inequality: serving more than arrives only costs capacity, and it lets an integer
grid -- the CP-SAT backend's -- meet a fractional arrival rate without a spurious
shortfall). :math:`\bar\lambda^{q}_{r,t,s}` is the most source q can bring: the own
arrivals :math:`\lambda^{own}_{r,t,s}`, or for the diverted source the lost region's whole
kept arrivals :math:`\mathit{peak}_X \ell_{X,h(s)} \sigma_t (1 - \kappa_t)` (every routing
share is at most 1); :math:`\lceil x\rceil_{\epsilon} = \max(1.001\,x + 0.001,\; \epsilon \lceil x / \epsilon\rceil + 10^{-6})`
req/s: a margin of 0.1% (``SERVE_MARGIN``), and at least the rate rounded up to the CP-SAT
backend's grid of :math:`\epsilon` = 0.1 req/s (``SERVE_GRID_RPS``; a served rate there is a
multiple of it, so it may round up past a fractional arrival rate -- with the margin alone an
arrival rate under 100 req/s off the grid got a shortfall plan).
Valid: a plan serves no source beyond its arrivals but by that rounding, and at most one
prefill shape is selected, so its serve variables meet the row at ``v_select`` = 1. It is
also the tightest big-M the data gives: with a global one (twice the largest peak) the LP
relaxation carried a small pool's whole load at ``v_select`` far below 1 and dropped most
of its chord's intercept :math:`R_k (1 - v\_select)` (below); with it, a shape serving a
share v of a source's own arrivals has ``v_select`` >= v (up to the rounding). Here :math:`n = v\_slices_{r,t,\mathrm{prefill},c} + v\_warm\_use_{r,t,\mathrm{prefill},c,s}`,
:math:`\bar S^{q}` is the mean prefill service time of a request of source q on one
slice (roofline: FFN term on the uncached tokens plus causal attention of the new tokens
over the whole context, at the regime's hit rates) and :math:`A_n` is the most work
(busy slices) n slices carry while the queue-wait percentile stays within
budget = TTFT limit - path latency - prefill compute of the percentile request - exposed
KV transfer (G/G/c: Erlang C and the Allen-Cunneen (C_a^2 + C_s^2)/2 scaling; C_a^2 the
arrivals' SCV, ``workload.arrival_scv``, 1 = Poisson).
:math:`R_k = \max(0, k (A_{k+1} - A_k) - A_k)` switches the row off for an unused shape.

Linearisation (docs/formulation.md): :math:`A_n` is convex in n -- bigger pools run
hotter at the same wait percentile (economy of scale, A_n ~ n - beta sqrt(n)) -- and the
code checks discrete convexity of every curve it builds. For a convex sequence the chord
through two consecutive points, extended, lies below every other point, so one chord
per pool-scenario is a safe (conservative) linear restriction that is exact at
n = k and n = k + 1. This is an *iterated capacity cap*: the model is solved, each
used pool's chord is moved to k = n* - 1 (exact at its size n* and at one slice fewer),
and the model is solved again until no chord moves; the final plan therefore meets
the exact Erlang C curve at its own pool sizes, and no pool could drop a slice in its
scenario. Unused shapes keep a chord at their estimated size. Applies in disaggregated mode
(and in auto mode, the balance switched off where a region x tier runs colocated: mode.py).

One shape per pool, also with ``serving.mixed_shapes`` (fleet.py keeps c_fleet_one_shape
for prefill): A_n is the Erlang C capacity of n identical servers, and independent
per-shape sub-pools with a load split would give up the pooling A_n prices (two half pools
carry less at the same wait percentile than one whole) and need a split the plan would
have to record and the router enforce.

Shapes: a prefill slice serves one prompt at a time and holds its whole KV (the cached
prefix too) until the transfer to decode; chunked prefill bounds a step's activations,
not the KV, since each chunk attends over the KV of the chunks before it. A shape whose
KV page pool (HBM - weights - workspace - headroom) cannot hold the KV of the tier's
longest prompt, with the paging slack, has no candidate (:math:`M_{r,t,\mathrm{prefill},c} = 0`;
``perf.pools.longest_request_fit``, reported in the plan's notes and by ``fleetplan perf``).

Placement-aware sizing (``d.pods``) adds the TTFT composition of the DCN share a region-tier
is sized for: a binary :math:`v\_dcn\_level_{r,t,\ell}` per DCN share level (exactly one,
c_prefill_dcn_level_one) and, for each level :math:`\ell \ge 1`, every pool-scenario's chord
row of that level's curve :math:`A^{\ell}` (the wait budget less the DCN transfer the share
pays at the percentile; :math:`A^{\ell} \le A^0`), off unless its level is picked:

.. math::

   e\_work_{r,t,c,s} \le A^{\ell}_k + (A^{\ell}_{k+1} - A^{\ell}_k)(n - k) + R^{\ell}_k (1 - v\_select)
   + (W_{r,t,c,s} + R^{\ell}_k)(1 - v\_dcn\_level_{r,t,\ell})          \quad (c\_prefill\_ttft\_dcn)

with W the most work the pool can see; the driver moves these chords with the others. The
DCN family (dcn.py) caps the share at the level's in every scenario.

Prefill shapes whose KV always crosses the DCN (placement-aware sizing, in the plain sizing
too: :func:`fleetplan.tables.pods.size_crossing_shapes`). A pod holds one chip type, so
where no decode shape :math:`c'` of the tier on the prefill shape's chip type k fits a pod beside
it, every pod content (kit) holding shape c has :math:`D = 0` decode slices and sends all its KV
over the DCN:

.. math::

   \mathit{chips}_c + \mathit{chips}_{c'} > \mathit{pod\_chips}_k \;\; \forall c' \in k
   \;\Rightarrow\; x_\kappa(n) = P_\kappa \;\Rightarrow\;
   \frac{\sum_\kappa v\_pod\_kits_\kappa\, x_\kappa(n)}{n} = 1
   \;\Rightarrow\; A_n := A^{1}_n

-- the only TTFT composition such a pool can be sized for is every request crossing (share 1,
the overage level's, or the ceiling's where it is 100%), whatever the counts and the routing.
So its curve :math:`A` in c_prefill_ttft is :math:`A^{1} \le A^{0}` in every model, the plain sizing's
included: valid for every placed plan (it removes only fleets no placement serves), and the
plain sizing's bound -- the plan's bound -- then holds the DCN transfer's cost of those pools.
The generated instances' 72-chip H200 pods with 72-chip prefill slices are such shapes; the
bundled instances have none.
"""

from __future__ import annotations

import math

import numpy as np
import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.deadline import check
from fleetplan.tables.derived import ModelData
from fleetplan.models.sizing.constraints.mode import mode_relax

#: requests/s: the CP-SAT backend's grid step for continuous variables (1 / solvers.cpsat.CONTINUOUS_SCALING; a test
#: keeps the two in step): there a served rate is a multiple of it, so c_prefill_shape's bound is the arrival rate
#: rounded up to the grid (a served rate may round up past a fractional arrival rate)
SERVE_GRID_RPS = 0.1
#: c_prefill_shape's margin over the arrival rate: 0.1% plus 0.001 req/s (the grid's rounding where that is more)
SERVE_MARGIN, SERVE_MARGIN_RPS = 1e-3, 1e-3


def prefill_keys(d: ModelData):
    """(r, t, c, s) for every prefill pool-shape that may be used in scenario s."""
    for s in d.SCENARIOS:
        for r in s.active:
            for t in d.TIERS:
                for c in d.CONFIGS:
                    if d.p_max_slices[(r, t, "prefill", c)] > 0:
                        yield (r, t, c, s.name)


def estimated_chord(d: ModelData, r: str, t: str, c: str, sn: str, level: int = 0) -> int:
    """Start point k of a pool-scenario's chord: one below the smallest n whose A(n)
    carries the scenario's work at the reference routing (``level``: the DCN level's curve,
    placement-aware sizing)."""
    s = next(x for x in d.SCENARIOS if x.name == sn)
    cand = _candidate(d, (r, t, c, sn, level))
    A = cand.capacity_erlangs
    work = d.own_rps(s, r, t) * cand.service_ms["own"] / 1e3
    if s.kind == "loss":
        work += d.lost_rps(s, t) * d.routing_reference[(s.lost, r)] * (1 - d.p_clamped_share[t]) * cand.service_ms["div"] / 1e3
    est = int(np.searchsorted(A, work - 1e-12))
    return int(min(max(est - 1, 0), len(A) - 2))


def add_prefill_ttft(m: pyo.ConcreteModel, d: ModelData) -> None:
    S = {s.name: s for s in d.SCENARIOS}
    keys = list(prefill_keys(d))
    serve = [(r, t, c, q, sn) for (r, t, c, sn) in keys for q in (("own", "div") if S[sn].kind == "loss" else ("own",))]
    m.PREFILL_SERVE = pyo.Set(initialize=serve, dimen=5, ordered=True)
    m.v_serve_rps = pyo.Var(m.PREFILL_SERVE, domain=pyo.NonNegativeReals, bounds=lambda _m, r, t, c, q, sn: (0.0, d.max_rps(r, t)))
    m.v_short_prefill = pyo.Var(m.SOURCES, domain=pyo.NonNegativeReals, bounds=lambda _m, r, t, q, sn: (0.0, d.max_rps(r, t)))

    by_src: dict[tuple, list] = {}
    for (r, t, c, q, sn) in serve:
        by_src.setdefault((r, t, q, sn), []).append((r, t, c, q, sn))

    def balance(_m, r, t, q, sn):
        shed = m.v_shed_rps[r, t, q, sn] if (r, t, q, sn) in m.SHED else 0
        relax = mode_relax(m, d, r, t, "disaggregated")  # 0 unless serving.mode is auto (mode.py)
        return sum(m.v_serve_rps[k] for k in by_src.get((r, t, q, sn), [])) + shed + m.v_short_prefill[r, t, q, sn] + relax >= m.e_arrivals_rps[r, t, q, sn]

    m.c_prefill_balance = pyo.Constraint(m.SOURCES, rule=balance)

    def lam_max(r, t, q, sn):  # requests/s: the most source q can bring (own: its arrivals; div: the lost region's whole)
        s = S[sn]
        lam = d.own_rps(s, r, t) if q == "own" else d.lost_rps(s, t) * (1.0 - d.p_clamped_share[t])
        return max(lam * (1 + SERVE_MARGIN) + SERVE_MARGIN_RPS, math.ceil(lam / SERVE_GRID_RPS) * SERVE_GRID_RPS + 1e-6)

    m.c_prefill_shape = pyo.Constraint(m.PREFILL_SERVE, rule=lambda _m, r, t, c, q, sn: m.v_serve_rps[r, t, c, q, sn] <= lam_max(r, t, q, sn) * m.v_select[r, t, "prefill", c])

    def work(_m, r, t, c, sn):
        cand = d.prefill[(t, c, d.regime(S[sn], r))]
        qs = ("own", "div") if S[sn].kind == "loss" else ("own",)
        return sum(m.v_serve_rps[r, t, c, q, sn] * cand.service_ms[q] / 1e3 for q in qs)

    m.PREFILL_KEYS = pyo.Set(initialize=keys, dimen=4, ordered=True)
    m.e_prefill_work = pyo.Expression(m.PREFILL_KEYS, rule=work)

    m.p_chord_k = {key: estimated_chord(d, *key) for key in keys}
    m.p_chord_a = pyo.Param(m.PREFILL_KEYS, mutable=True, initialize=0.0)
    m.p_chord_slope = pyo.Param(m.PREFILL_KEYS, mutable=True, initialize=0.0)
    m.p_chord_relax = pyo.Param(m.PREFILL_KEYS, mutable=True, initialize=0.0)
    for key in keys:
        set_chord(m, d, key, m.p_chord_k[key])

    def ttft(_m, r, t, c, sn):
        key = (r, t, c, sn)
        return m.e_prefill_work[key] <= m.p_chord_a[key] + m.p_chord_slope[key] * pool_slices_expr(m, r, t, c, sn) + \
            m.p_chord_relax[key] * (1 - m.v_select[r, t, "prefill", c])

    m.c_prefill_ttft = pyo.Constraint(m.PREFILL_KEYS, rule=ttft)
    check("building the model")  # a command's --time-limit between this family's larger blocks (fleetplan.deadline)
    _add_dcn_levels(m, d, keys)
    for (r, t, sn) in m.ACTIVE:  # requests/s, for the end-to-end count (unserved.py)
        m.shortfall_by_key.setdefault((r, t, sn), {})["prefill"] = sum(m.v_short_prefill[r, t, q, sn] for q in ("own", "div") if (r, t, q, sn) in m.SOURCES)


def _add_dcn_levels(m: pyo.ConcreteModel, d: ModelData, keys: list) -> None:
    r"""Placement-aware sizing (``d.pods``): the TTFT composition of the DCN share a pool is
    sized for. A binary per region-tier and level picks the level,
    :math:`\sum_\ell v\_dcn\_level_{r,t,\ell} = 1` (c_prefill_dcn_level_one), and each level
    :math:`\ell \ge 1` adds, for every pool-scenario, the chord row of its own capacity curve
    :math:`A^{\ell}` (the budget less the DCN transfer the share pays at the percentile):

    .. math::

       e\_work_{r,t,c,s} \le A^{\ell}_k + (A^{\ell}_{k+1} - A^{\ell}_k)(n - k) + R^{\ell}_k (1 - v\_select)
       + (W_{r,t,c,s} + R^{\ell}_k)(1 - v\_dcn\_level_{r,t,\ell})          \quad (c\_prefill\_ttft\_dcn)

    with W the most work the pool can see (its largest arrivals times the slower source's
    service time), so the row is off unless its level is picked; the level-0 row
    (c_prefill_ttft, the tables' ICI-only composition) holds at every level, and
    :math:`A^{\ell} \le A^0`. The DCN family (dcn.py) caps the region-tier's DCN share at the
    level's share in every scenario."""
    if getattr(d, "pods", None) is None:
        m.PREFILL_DCN_KEYS = pyo.Set(initialize=[], dimen=5, ordered=True)
        return
    pods = d.pods
    rt = sorted({(r, t) for (r, t, c, sn) in keys})
    m.DCN_LEVELS = pyo.Set(initialize=[(r, t, li) for (r, t) in rt for li in range(len(pods.levels.get(t, [0.0])))], dimen=3, ordered=True)
    m.v_dcn_level = pyo.Var(m.DCN_LEVELS, domain=pyo.Binary)
    m.c_prefill_dcn_level_one = pyo.Constraint(rt, rule=lambda _m, r, t: sum(m.v_dcn_level[r, t, li] for li in range(len(pods.levels.get(t, [0.0])))) == 1)
    lkeys = [(r, t, c, sn, li) for (r, t, c, sn) in keys for li in range(1, len(pods.levels.get(t, [0.0])))]
    m.PREFILL_DCN_KEYS = pyo.Set(initialize=lkeys, dimen=5, ordered=True)
    S = {s.name: s for s in d.SCENARIOS}

    def most_work(r, t, c, sn):
        cand = d.prefill[(t, c, d.regime(S[sn], r))]
        return d.max_rps(r, t) * max(cand.service_ms.values(), default=0.0) / 1e3

    check("building the model")
    m.p_chord_k_dcn = {key: estimated_chord(d, *key[:4], level=key[4]) for key in lkeys}
    m.p_chord_a_dcn = pyo.Param(m.PREFILL_DCN_KEYS, mutable=True, initialize=0.0)
    m.p_chord_slope_dcn = pyo.Param(m.PREFILL_DCN_KEYS, mutable=True, initialize=0.0)
    m.p_chord_relax_dcn = pyo.Param(m.PREFILL_DCN_KEYS, mutable=True, initialize=0.0)
    m.p_most_work_dcn = {key: most_work(*key[:4]) for key in lkeys}
    check("building the model")
    for key in lkeys:
        set_chord(m, d, key, m.p_chord_k_dcn[key])
    check("building the model")

    def ttft(_m, r, t, c, sn, li):
        key = (r, t, c, sn, li)
        return m.e_prefill_work[(r, t, c, sn)] <= m.p_chord_a_dcn[key] + m.p_chord_slope_dcn[key] * pool_slices_expr(m, r, t, c, sn) + \
            m.p_chord_relax_dcn[key] * (1 - m.v_select[r, t, "prefill", c]) + \
            (m.p_most_work_dcn[key] + m.p_chord_relax_dcn[key]) * (1 - m.v_dcn_level[r, t, li])

    m.c_prefill_ttft_dcn = pyo.Constraint(m.PREFILL_DCN_KEYS, rule=ttft)


def _chord_params(m, key: tuple):
    """(k dict, intercept, slope, relax) parameters of a chord key: level 0 or a DCN level."""
    if len(key) > 4:
        return m.p_chord_k_dcn, m.p_chord_a_dcn, m.p_chord_slope_dcn, m.p_chord_relax_dcn
    return m.p_chord_k, m.p_chord_a, m.p_chord_slope, m.p_chord_relax


def _chord_keys(m):
    """Every chord key of the model: the pool-scenarios (level 0) and, with placement-aware
    sizing, the pool-scenario-levels."""
    yield from m.PREFILL_KEYS
    if hasattr(m, "PREFILL_DCN_KEYS"):
        yield from m.PREFILL_DCN_KEYS


def _key_active(m, key: tuple) -> bool:
    """Whether the chord row of ``key`` binds at the current solution: its pool's shape is
    picked and (a DCN level's row) its level is."""
    r, t, c = key[:3]
    if pyo.value(m.v_select[r, t, "prefill", c]) < 0.5:
        return False
    return len(key) <= 4 or pyo.value(m.v_dcn_level[r, t, key[4]]) >= 0.5


def pool_slices_expr(m, r, t, c, sn):
    return m.v_slices[r, t, "prefill", c] + m.warm_use(r, t, "prefill", c, sn)


def _candidate(d: ModelData, key: tuple):
    """The prefill candidate of a chord key: (r, t, c, s) at DCN level 0 (the tables'), or
    (r, t, c, s, level) at a placement-aware DCN level (``d.pods``)."""
    r, t, c, sn = key[:4]
    level = key[4] if len(key) > 4 else 0
    s = next(x for x in d.SCENARIOS if x.name == sn)
    if level == 0:
        return d.prefill[(t, c, d.regime(s, r))]
    return d.pods.level_candidate(d, t, c, d.regime(s, r), level)


def curve(d: ModelData, key: tuple) -> np.ndarray:
    return _candidate(d, key).capacity_erlangs


def set_chord(m: pyo.ConcreteModel, d: ModelData, key: tuple, k: int) -> None:
    """Place the pool-scenario's chord through (k, A_k) and (k + 1, A_k+1) (a 5-tuple key: its DCN level's curve)."""
    A = curve(d, key)
    k = int(min(max(k, 0), len(A) - 2))
    slope = float(A[k + 1] - A[k])
    intercept = float(A[k]) - slope * k  # the chord's value at n = 0 (<= 0 for a convex curve)
    pk, pa, ps, pr = _chord_params(m, key)
    pk[key] = k
    pa[key] = intercept
    ps[key] = slope
    pr[key] = max(0.0, -intercept)


def move_chords(m: pyo.ConcreteModel, d: ModelData) -> int:
    """Move every used pool-scenario's chord (and DCN level's) to k = n* - 1; returns how many moved."""
    moved = 0
    for key in list(_chord_keys(m)):
        r, t, c, sn = key[:4]
        if pyo.value(m.v_select[r, t, "prefill", c]) < 0.5:
            continue
        n = int(round(pyo.value(pool_slices_expr(m, r, t, c, sn))))
        k = int(min(max(n - 1, 0), len(curve(d, key)) - 2))
        if k != _chord_params(m, key)[0][key]:
            set_chord(m, d, key, k)
            moved += 1
    return moved


def violated_pools(m: pyo.ConcreteModel, d: ModelData, tol: float = 1e-6) -> list[tuple[str, str, str, str, int]]:
    """Pool-scenarios whose work at the current solution exceeds the exact A(n) (of the DCN
    level picked, with placement-aware sizing)."""
    out = []
    for key in _chord_keys(m):
        r, t, c, sn = key[:4]
        if len(key) > 4 and not _key_active(m, key):
            continue
        w = pyo.value(m.e_prefill_work[key[:4]])
        if w <= tol:
            continue
        n = int(round(pyo.value(pool_slices_expr(m, r, t, c, sn))))
        A = curve(d, key)
        cap = float(A[min(n, len(A) - 1)])
        if w > cap + tol * max(1.0, cap) and (r, t, c, sn, n) not in out:
            out.append((r, t, c, sn, n))
    return out


def nonconvex_curves(d: ModelData) -> list[tuple]:
    """Prefill curves that are not discretely convex (the chord argument needs convexity)."""
    bad = []
    for key, cand in d.prefill.items():
        d2 = np.diff(cand.capacity_erlangs, 2)
        if np.any(d2 < -1e-9 * max(1.0, float(cand.capacity_erlangs[-1]))):
            bad.append(key)
    return bad


def chord_slack_usd(m: pyo.ConcreteModel, d: ModelData) -> float:
    """What the chords' conservatism can still cost at the current solution (USD/h): for
    every used prefill pool, the slices the exact curve would let it drop in every
    scenario at the same work, priced. Zero once every chord sits at its pool's size."""
    drop: dict[tuple, int] = {}
    for key in _chord_keys(m):
        r, t, c, sn = key[:4]
        if not _key_active(m, key):
            continue
        n = int(round(pyo.value(pool_slices_expr(m, r, t, c, sn))))
        w = pyo.value(m.e_prefill_work[key[:4]])
        A = curve(d, key)
        need = int(np.searchsorted(A, w - 1e-9 * max(w, 1.0))) if w > 0 else 0
        pool = (r, t, c)
        drop[pool] = min(drop.get(pool, n), max(n - need, 0))
    return sum(k * d.p_price_per_slice_hour_usd[(r, c)] for (r, t, c), k in drop.items())
