"""Pod data for placement-aware sizing: the pods of each region as identical
bins, the pod contents one tier can have ("kits"), the DCN share levels of each tier's TTFT
composition, and the loads the KV flows are sized for.

The sizing model (:mod:`fleetplan.models.sizing.constraints.pods` and ``.dcn``) counts
slices per pod without naming pods: a region's pods of one chip type are identical, so
they are aggregated by an *arc flow* over the chips a pod has filled (Valerio de Carvalho,
"Exact solution of bin-packing problems using column generation and branch-and-bound",
Annals of OR 86, 1999): every pod is a path through one layer per item kind, each layer
adding a block of chips -- a tier's *kit* (its prefill and decode slices in that pod), a
colocated replica pool's slices, or warm slices of one shape. The model's size does not
grow with the number of identical pods. A kit is a tier's content of one pod: ``P`` prefill
slices of one shape and ``D`` decode slices of one shape; its KV that the pod's decode
slices cannot take leaves over the DCN. Whether a kit's decode takes its prefill's KV
depends on the per-slice prefill load, ``lambda / n`` for a pool of ``n`` prefill slices
fed ``lambda`` requests/s (the gateway spreads a pool's requests evenly over its slices:
one M/G/c queue), so the model picks a *level* n_k <= n from :attr:`TierDcn.n_levels` and
counts each kit's excess at the per-slice load ``lambda / n_k`` -- exact where the levels
are every integer (small pools), at most one ladder step conservative where they are a
ladder (large pools).

Everything here is data (numbers, lists); the model only selects and counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import reduce

import numpy as np

from fleetplan.deadline import check
from fleetplan.instance.scenarios import NORMAL
from fleetplan.tables.cache import default_tables
from fleetplan.tables.data import ModelData, PrefillCandidate, pod_bound
from fleetplan.tables.derived import _regime_mixes
from fleetplan.tables.prefill import _prefill_candidate
from fleetplan.perf.pools import PrefillSource, dcn_levels, tier_slos
from fleetplan.perf.roofline import kv_bytes_per_request

__all__ = ["Kit", "PodLayer", "PodGroup", "RegimeDcn", "TierDcn", "PodData", "build_pod_data", "EXACT_LEVELS",
           "MAX_DCN_LEVELS", "LADDER", "crossing_shapes", "size_crossing_shapes"]

#: A tier's prefill pool whose possible sizes span at most this many counts gets one level
#: per count (exact); a larger range gets :data:`LADDER` around the plain solve's size.
EXACT_LEVELS = 48
#: Prefill-count levels of a large pool, as fractions of the size the plain sizing chose
#: (dense around it: the placement-aware plan's pools move by a few slices), plus a
#: geometric ladder of 15% steps over the whole range (a pool that moves far is still sized,
#: a step more conservatively).
LADDER = (0.8, 0.9, 0.95, 0.98, 0.99, 1.0, 1.01, 1.02, 1.05, 1.1, 1.25)
LADDER_STEP = 1.15
#: Most TTFT-composition levels per tier (the DCN share breakpoints below the ceiling, and
#: the ceiling): past it the upper breakpoints are merged into the ceiling's curve (safe:
#: a curve at a larger share carries less).
MAX_DCN_LEVELS = 4


@dataclass(frozen=True)
class Kit:
    """One tier's content of one pod: ``P`` prefill slices of shape ``prefill`` and ``D``
    decode slices of shape ``decode`` (a shape is None when its count is 0); ``chips`` in all."""

    tier: str
    prefill: str | None
    decode: str | None
    P: int
    D: int
    chips: int

    @property
    def key(self) -> str:
        return f"{self.tier}:{self.prefill or '-'}x{self.P}:{self.decode or '-'}x{self.D}"


@dataclass
class PodLayer:
    """A layer of a pod group's arc flow: a tier's kits (``kind`` 'kit'), a replica pool's
    slices ('replica', ``tier`` and ``shape``), a tier's decode slices beyond its kits'
    ('decode', ``tier`` and ``shape``) or warm slices of one shape ('warm'). ``lengths`` are
    the block sizes (chips, 0 included) an arc of the layer may add. A ``loop`` layer (every
    kind but 'kit') adds one slice per arc and stays in the layer (its 0 arc leaves it):
    two arcs per node instead of one per count."""

    kind: str
    tier: str | None
    shape: str | None
    lengths: list[int]
    kits: list[Kit] = field(default_factory=list)
    slice_chips: int = 0
    loop: bool = False


@dataclass
class PodGroup:
    """The identical pods of one chip type in one region: ``pod_chips`` chips each, at most
    ``pods_max`` (installed + available), block sizes in multiples of ``unit`` chips (the
    gcd of the chip type's slice shapes), DCN egress ``egress_gbytes_per_s`` per pod."""

    region: str
    chip: str
    pod_chips: int
    unit: int
    pods_max: int
    egress_gbytes_per_s: float
    layers: list[PodLayer]

    @property
    def name(self) -> str:
        return f"{self.region}/{self.chip}"

    def nodes(self) -> list[int]:
        """The chips a pod may have filled after a layer (0, unit, ..., pod_chips)."""
        return list(range(0, self.pod_chips + 1, self.unit))

    def reachable(self) -> list[list[int]]:
        """Per layer, the chips a pod may have filled on entering it (ascending): 0 for the
        first layer; a kit layer's successors add its block sizes, a loop layer's its slices."""
        out, cur = [], {0}
        for layer in self.layers:
            if layer.loop:
                step = layer.lengths[-1]
                cur = {v for u in cur for v in range(u, self.pod_chips + 1, step)} if step > 0 else cur
            out.append(sorted(cur))
            cur = cur if layer.loop else {u + b for u in cur for b in layer.lengths if u + b <= self.pod_chips}
        return out

    def arcs(self) -> list[tuple[int, int, int]]:
        """Every (layer, chips filled before, block chips) arc of the flow, from reachable nodes
        only. A kit layer's arc goes to the next layer's node u + b; a loop layer's arc of b > 0
        chips to its own node u + b, its 0 arc to the next layer's node u."""
        reach = self.reachable()
        return [(li, u, b) for li, layer in enumerate(self.layers) for u in reach[li] for b in layer.lengths if u + b <= self.pod_chips]

    def arc_head(self, li: int, u: int, b: int) -> tuple[int, int]:
        """The (layer, node) an arc of :meth:`arcs` ends at."""
        return (li, u + b) if (self.layers[li].loop and b > 0) else (li + 1, u + b)


@dataclass
class RegimeDcn:
    """The KV a region-tier's pods must keep local in one regime: ``load_rps`` (requests/s the
    prefill pool carries: the normal peak, or in 'failover' the busiest region-loss scenario's
    arrivals at the plan's routing), the ``scenarios`` of the regime, the req/s one decode
    slice of each shape takes at the regime's operating point (``decode_rps``), and the mean
    KV of a request of the regime's traffic (GB; the larger of own and diverted)."""

    load_rps: float
    scenarios: list[str]
    decode_rps: dict[str, float]
    kv_gbytes: float

    def rho(self, decode: str | None, n: int) -> float:
        """Prefill slices of a pool of ``n`` slices whose KV one ``decode`` slice takes at this
        regime's load: mu n / lambda (0 without a decode shape, or when nothing arrives: no KV)."""
        if decode is None or self.load_rps <= 0:
            return 0.0 if decode is None else math.inf
        return self.decode_rps.get(decode, 0.0) * n / self.load_rps

    def excess_table(self, kits: list[Kit], n_levels: list[int]) -> np.ndarray:
        """:meth:`excess` of every kit at every level: shape (len(kits), len(n_levels)),
        prefill slices."""
        P = np.array([k.P for k in kits], dtype=float)
        D = np.array([k.D for k in kits], dtype=float)
        n = np.asarray(n_levels, dtype=float)
        if self.load_rps <= 0 or not kits:
            return np.zeros((len(kits), len(n_levels)))
        mu = np.array([self.decode_rps.get(k.decode, 0.0) if k.decode is not None else 0.0 for k in kits], dtype=float)
        x = np.maximum(0.0, P[:, None] - (mu[:, None] * n[None, :] / self.load_rps) * D[:, None])
        x[P == 0, :] = 0.0
        return x

    def excess(self, kit: Kit, n: int) -> float:
        """Prefill slices of ``kit`` whose KV leaves the pod over the DCN, in slice units
        (P - rho D, at least 0), when the pool has ``n`` slices."""
        if kit.P == 0 or self.load_rps <= 0:
            return 0.0
        r = self.rho(kit.decode, n)
        return max(0.0, kit.P - r * kit.D) if math.isfinite(r) else 0.0


@dataclass
class TierDcn:
    """A region-tier's DCN share data: its ``limit`` (fraction of requests), the prefill-count
    levels ``n_levels`` the model picks from (ascending), and the regimes it is sized in."""

    region: str
    tier: str
    limit: float
    n_levels: list[int]
    regimes: dict[str, RegimeDcn]
    center: int = 1  # the plain sizing's prefill pool (slices): the overage's weight is the per-slice load there


@dataclass
class PodData:
    """Everything placement-aware sizing adds to :class:`ModelData` (``d.pods``)."""

    routing: dict[tuple[str, str, str], float]
    groups: list[PodGroup]
    tiers: dict[tuple[str, str], TierDcn]
    levels: dict[str, list[float]]
    prefill: dict[tuple, PrefillCandidate]
    overall_limit: float
    notes: list[str] = field(default_factory=list)

    def over_level(self, t: str) -> int | None:
        """The index of tier t's overage level -- a DCN share above its ceiling, sized with the
        TTFT composition of every request crossing (share 1) -- or None (a ceiling of 1)."""
        lv = self.levels.get(t, [])
        return len(lv) - 1 if len(lv) >= 2 and lv[-1] == 1.0 and lv[-2] < 1.0 else None

    def level_candidate(self, d: ModelData, t: str, c: str, regime: tuple, level: int) -> PrefillCandidate:
        """The prefill candidate of (t, c, regime) at DCN level ``level`` (0: the tables' own)."""
        return d.prefill[(t, c, regime)] if level == 0 else self.prefill[(t, c, regime, level)]

    @property
    def overall_binds(self) -> bool:
        """Whether the overall ceiling is tighter than some tier's own (then it is a constraint of its own)."""
        return any(td.limit > self.overall_limit + 1e-12 for td in self.tiers.values())


def _gcd(xs: list[int]) -> int:
    return reduce(math.gcd, xs) if xs else 1


def _decode_enough(td: TierDcn | None, n_low: int, cd: str, P: int) -> int | None:
    """The fewest decode slices of shape ``cd`` that take all the KV of ``P`` prefill slices in
    every regime of ``td`` at any pool of at least ``n_low`` prefill slices (their excess is
    then 0 at every level a plan serving everything reaches: rho grows with n), or None (no
    such count: no regime data, or a pool of 0)."""
    if td is None or n_low <= 0 or not td.regimes:
        return None
    need = 0
    for g in td.regimes.values():
        rho = g.rho(cd, n_low)
        if not math.isfinite(rho):
            continue
        if rho <= 0:
            return None
        need = max(need, math.ceil(P / rho - 1e-9))
    return need


def _prefill_floor(d: ModelData, r: str, t: str, td: TierDcn | None) -> int:
    """Fewest prefill slices region r's tier t has in a plan that serves all its load: its
    pool's busy slices (Erlangs: requests/s times the fastest shape's mean service time) are
    fewer than its slices, at the normal peak, and in the busiest region loss less the
    shed share and the warm pool's most slices. 0 where it may have none (auto serving mode,
    no regime data). Source: a queue is stable only below 100% busy (Little's law)."""
    if td is None or d.auto:
        return 0
    ms = [v for (tt, c, regime), cand in d.prefill.items() if tt == t and cand.capacity_erlangs[-1] > 0
          for v in cand.service_ms.values() if v > 0]
    if not ms:
        return 0
    s_min = min(ms) / 1000.0
    lo = 0.0
    if NORMAL in td.regimes:
        lo = td.regimes[NORMAL].load_rps * s_min
    if "failover" in td.regimes:
        lo = max(lo, td.regimes["failover"].load_rps * (1.0 - d.p_batch_share) * s_min - d.inst.failover.warm_pool.max_slices_per_region)
    return max(0, math.floor(lo))


def _kits(d: ModelData, r: str, k: str, t: str, pod_chips: int, td: TierDcn | None = None) -> list[Kit]:
    """Every content tier t can have in one pod of chip type k in region r -- P prefill slices of
    one shape and D decode slices of one shape, P >= 1, within the pod's chips and the pools'
    bounds -- that the tier's 'decode' loop layers cannot stand for: a kit whose decode takes
    all its prefill's KV (``_decode_enough``) keeps that many decode slices, and the pod's
    further decode slices (and a pod's decode with no prefill) are counted by the loop layer.
    Exact: a pod's (P, D) is the kit (P, min(D, enough)) plus D - min(D, enough) loop slices,
    with the same excess (0 beyond ``enough``)."""
    shapes = [c for c in d.CONFIGS if d.config_chip(c) == k]
    pre = [c for c in shapes if d.p_max_slices[(r, t, "prefill", c)] > 0]
    dec = [c for c in shapes if d.p_max_slices[(r, t, "decode", c)] > 0]
    n_low = _prefill_floor(d, r, t, td)
    out = []
    for cp in pre:
        for cd in dec + [None]:
            sp = d.slices[cp].chips
            sd = d.slices[cd].chips if cd else 0
            pmax = min(pod_chips // sp, d.p_max_slices[(r, t, "prefill", cp)])
            for P in range(1, pmax + 1):
                dmax = min((pod_chips - P * sp) // sd, d.p_max_slices[(r, t, "decode", cd)]) if cd else 0
                enough = _decode_enough(td, n_low, cd, P) if cd else None
                if enough is not None:
                    dmax = min(dmax, enough)
                for D in range(1 if cd else 0, dmax + 1):
                    out.append(Kit(t, cp, cd, P, D, P * sp + D * sd))
    return out


def _count_layer(kind: str, tier: str | None, shape: str, chips: int, most: int, pod_chips: int) -> PodLayer:
    """A loop layer of ``shape`` slices (``chips`` each): one slice per arc, at most ``most``
    (the pool's bound) and a pod's chips."""
    return PodLayer(kind, tier, shape, [0, chips] if min(pod_chips // chips, most) > 0 else [0], slice_chips=chips, loop=True)


def _groups(d: ModelData, tiers: dict[tuple[str, str], TierDcn]) -> list[PodGroup]:
    inst = d.inst
    out = []
    for r in d.REGIONS:
        for k in d.CHIPS:
            check("building the pod tables")
            most = d.p_installed_pods[(r, k)] + d.p_available_pods[(r, k)]
            if most <= 0:
                continue
            chip = inst.chips[k]
            C = chip.chips_per_pod
            shapes = [c for c in d.CONFIGS if d.config_chip(c) == k]
            layers = []
            for t in d.TIERS:
                kits = _kits(d, r, k, t, C, tiers.get((r, t))) if d.disaggregated else []
                if kits:
                    layers.append(PodLayer("kit", t, None, sorted({0} | {kt.chips for kt in kits}), kits))
                if d.disaggregated:
                    for c in shapes:
                        if d.p_max_slices[(r, t, "decode", c)] > 0:
                            layers.append(_count_layer("decode", t, c, d.slices[c].chips, d.p_max_slices[(r, t, "decode", c)], C))
                if d.colocated:
                    for c in shapes:
                        if d.p_max_slices[(r, t, "replica", c)] > 0:
                            layers.append(_count_layer("replica", t, c, d.slices[c].chips, d.p_max_slices[(r, t, "replica", c)], C))
            for c in shapes:
                if d.warm_max(r, c) > 0:
                    layers.append(_count_layer("warm", None, c, d.slices[c].chips, d.warm_max(r, c), C))
            if not layers:
                continue
            unit = _gcd([d.slices[c].chips for c in shapes])
            out.append(PodGroup(r, k, C, unit, most, chip.pod_egress_gbytes_per_s(inst.network.dcn_gbytes_per_s_per_slice), layers))
    return out


def _n_levels(d: ModelData, r: str, t: str, center: int | None) -> list[int]:
    """The prefill-count levels of region-tier (r, t): every count when the range is small
    (exact), else :data:`LADDER` around ``center`` (the plain sizing's pool) and a geometric
    ladder over the range. 0 is a level where the pool may be empty (its KV is then nil)."""
    pre = [c for c in d.CONFIGS if d.p_max_slices[(r, t, "prefill", c)] > 0]
    if not pre:
        return []
    hi = max(d.p_max_slices[(r, t, "prefill", c)] for c in pre)
    lo = min(d.p_min_slices.get((r, t, "prefill", c), 0) for c in pre)
    if d.auto:
        lo = 0
    if hi - lo <= EXACT_LEVELS:
        return list(range(lo, hi + 1))
    levels = {lo, hi}
    if center:
        levels |= {int(round(center * f)) for f in LADDER}
    x = float(max(lo, 1))
    while x < hi:
        levels.add(int(x))
        x = x * LADDER_STEP + 1
    return sorted(v for v in levels if lo <= v <= hi)


def _kv_gbytes(d: ModelData, t: str, clamp: int | None) -> float:
    """Mean KV of a tier-t request (GB), without the prompts at or above ``clamp`` (None: all)."""
    tm = d.tiers[t]
    tok = np.asarray(tm.tokens, dtype=float)
    w = np.asarray(tm.shares, dtype=float)
    if clamp is not None:
        keep = tok < clamp
        if not keep.any():
            return 0.0
        tok, w = tok[keep], w[keep]
    return float(np.dot(w / w.sum(), kv_bytes_per_request(d.inst.model, tok))) / 1e9


def _arrivals(d: ModelData, routing: dict, s, r: str, t: str) -> float:
    """Requests/s of tier t reaching region r's pools in scenario s at the fixed routing (before shedding)."""
    v = d.own_rps(s, r, t)
    if s.kind == "loss":
        v += routing.get((s.lost, r, t), 0.0) * d.lost_rps(s, t) * (1.0 - d.p_clamped_share[t])
    return v


def _tier_levels(d: ModelData, t: str, limit: float, notes: list[str]) -> list[float]:
    """The DCN share levels of tier t up to ``limit``: where the TTFT composition of its prefill
    pools at the normal peak changes (every prefill shape), and ``limit``; at most
    :data:`MAX_DCN_LEVELS`. A region loss's curves are built at the same levels for the least
    favourable mix (safe at any share up to the level: the composition only grows with it)."""
    if limit <= 0:
        return [0.0]
    ttft = next((s for s in tier_slos(d.inst, t) if s.metric == "ttft"), None)
    if ttft is None:
        return [limit]  # no TTFT SLO: the composition does not size the pool
    found = {float(limit)}
    for (tt, c, regime), cand in d.prefill.items():
        check("building the pod tables")
        if tt == t and regime == (NORMAL,) and cand.capacity_erlangs[-1] > 0:
            own = [PrefillSource(1.0, d.tiers[t].hit_rate)]
            found.update(dcn_levels(d.inst, d.tiers[t], d.slices[c], own, ttft.percentile, limit))
    levels = sorted(found)
    if len(levels) > MAX_DCN_LEVELS:
        notes.append(f"tier {t}: its TTFT composition changes at {len(levels) - 1} DCN shares below its ceiling {limit:.1%}; the "
                     f"sizing keeps the first {MAX_DCN_LEVELS - 1} and sizes shares above them with the ceiling's composition")
        levels = levels[:MAX_DCN_LEVELS - 1] + [limit]
    return levels


def build_pod_data(d: ModelData, routing: dict[tuple[str, str, str], float], centers: dict[tuple[str, str], int] | None = None) -> PodData:
    """Placement-aware sizing's data for ``d`` at the failover ``routing`` ((lost, absorber,
    tier) -> share, the plain sizing's; fixed, so a survivor's load in every region loss is a
    constant). ``centers``: (region, tier) -> the plain sizing's prefill pool size (slices),
    where a large pool's level ladder is dense. Raises
    :class:`~fleetplan.deadline.TimeLimitReached` ('building the pod tables') once a deadline
    scope's deadline has passed (checked per candidate and per region x tier)."""
    inst = d.inst
    notes: list[str] = []
    centers = centers or {}
    o = d.p_output_tokens
    # a decode pool may need more slices than its demand to keep its prefill's KV in the pods
    # (a slice in every pod that holds the tier's prefill): its bound is the pods' room for it
    for (r, t, ro, c), n in list(d.p_max_slices.items()):
        if ro == "decode" and n > 0:
            d.p_max_slices[(r, t, ro, c)] = max(n, pod_bound(d, r, c))
    S = {s.name: s for s in d.SCENARIOS}
    normal = S["normal"]
    clamp = inst.failover.admission_clamp.min_input_tokens if inst.failover.admission_clamp.enabled else None
    levels = {t: _tier_levels(d, t, inst.dcn_share_max_of(t), notes) for t in d.TIERS} if d.disaggregated else {}
    # an overage level: where no placement within the pods keeps a share within its ceiling, the sizing
    # may exceed it (declared, least first: dcn.py) with the TTFT of every request crossing
    levels = {t: lv + ([1.0] if lv[-1] < 1.0 else []) for t, lv in levels.items()}
    prefill: dict[tuple, PrefillCandidate] = {}
    if d.disaggregated:
        mixes = {t: dict(_regime_mixes(d, t)) for t in d.TIERS}
        for (t, c, regime), cand in list(d.prefill.items()):
            for li, share in enumerate(levels[t][1:], start=1):
                check("building the pod tables")  # a command's --time-limit (fleetplan.deadline)
                prefill[(t, c, regime, li)] = _prefill_candidate(inst, d.tiers[t], d.slices[c], regime, mixes[t][regime],
                                                                 len(cand.capacity_erlangs) - 1, default_tables(), dcn_share=share)
    tiers: dict[tuple[str, str], TierDcn] = {}
    if d.disaggregated:
        for r in d.REGIONS:
            for t in d.TIERS:
                check("building the pod tables")
                nl = _n_levels(d, r, t, centers.get((r, t)))
                if not nl:
                    continue
                regimes = {}
                lam_n = d.own_rps(normal, r, t)
                if lam_n > 0:
                    regimes[NORMAL] = RegimeDcn(lam_n, ["normal"], {c: d.decode[(t, c, "normal")].tokens_per_s / o for c in d.CONFIGS},
                                                _kv_gbytes(d, t, None))
                losses = [s for s in d.SCENARIOS if s.kind == "loss" and r in s.active]
                lam_f = max((_arrivals(d, routing, s, r, t) for s in losses), default=0.0)
                if lam_f > 0:
                    regimes["failover"] = RegimeDcn(lam_f, [s.name for s in losses],
                                                    {c: d.decode[(t, c, "failover")].tokens_per_s / o for c in d.CONFIGS},
                                                    max(_kv_gbytes(d, t, None), _kv_gbytes(d, t, clamp)))
                tiers[(r, t)] = TierDcn(r, t, inst.dcn_share_max_of(t), nl, regimes, max(int(centers.get((r, t)) or 1), 1))
    return PodData(dict(routing), _groups(d, tiers), tiers, levels, prefill, inst.placement.dcn_share_max, notes)


def crossing_shapes(d: ModelData) -> dict[tuple[str, str], str]:
    """The prefill shapes whose every request's KV crosses the DCN in every placement:
    (tier, shape) -> why. A pod holds slices of one chip type, so the KV of a prefill slice of
    shape c stays on the ICI only when a decode slice of the tier shares its pod; when no
    decode shape of c's chip type that the tier may use (a decode candidate with a positive
    rate) fits a pod beside it -- chips_c + chips_c' > the pod's chips for every such c',
    or there is none -- every kit holding c has D = 0, its excess is P (dcn.py: x = P - rho
    D) and the tier's DCN share is 1 whatever the counts. Only for a disaggregated instance
    (a colocated replica keeps its KV)."""
    if not d.disaggregated:
        return {}
    out: dict[tuple[str, str], str] = {}
    for t in d.TIERS:
        for c in d.CONFIGS:
            cand = d.prefill.get((t, c, (NORMAL,)))
            if cand is None or cand.capacity_erlangs[-1] <= 0:
                continue
            k = d.config_chip(c)
            C = d.p_pod_chips[k]
            dec = [cd for cd in d.CONFIGS if d.config_chip(cd) == k and d.decode[(t, cd, NORMAL)].tokens_per_s > 0]
            if all(d.slices[c].chips + d.slices[cd].chips > C for cd in dec):
                out[(t, c)] = (f"a {c} prefill slice ({d.slices[c].chips} chips) leaves no room in a {C}-chip {k} pod for a decode "
                               f"slice of tier {t}" if dec else f"tier {t} has no decode shape on {k}")
    return out


def size_crossing_shapes(d: ModelData) -> list[str]:
    r"""Size the prefill shapes whose KV always crosses the DCN (:func:`crossing_shapes`) with
    the TTFT composition of every request crossing, before any model is built: ``d.prefill``'s
    level-0 candidate of each such (tier, shape, regime) becomes its share-1 candidate (the
    one the pod stage's overage level, or a ceiling of 100%, uses). Valid for every placed
    plan: such a pool's DCN share is 1 in every placement, so the only DCN level it can be
    sized for is one of share 1, whose curve :math:`A^{1}_n \le A^{0}_n` (a longer TTFT
    composition leaves a smaller wait budget) -- the plain sizing with it is still a
    relaxation of the placement-aware problem, and its bound a bound of that problem that
    holds the DCN transfer's cost. Returns the notes for the plan (one per tier)."""
    shapes = crossing_shapes(d)
    if not shapes:
        return []
    mixes = {t: dict(_regime_mixes(d, t)) for t, _ in shapes}
    prefill = dict(d.prefill)  # a new dict: the candidate tables' own objects are shared (the table cache)
    for (t, c, regime), cand in d.prefill.items():
        if (t, c) in shapes:
            check("building the pod tables")
            prefill[(t, c, regime)] = _prefill_candidate(d.inst, d.tiers[t], d.slices[c], regime, mixes[t][regime],
                                                         len(cand.capacity_erlangs) - 1, default_tables(), dcn_share=1.0)
    d.prefill = prefill
    by_tier: dict[str, list[str]] = {}
    for (t, c), why in shapes.items():
        by_tier.setdefault(t, []).append(why)
    return [f"tier {t}: every request's KV crosses the DCN on its prefill shape{'s' if len(w) > 1 else ''} "
            f"{', '.join(c for (tt, c) in shapes if tt == t)} ({'; '.join(w)}), so those pools are sized with every request's DCN "
            "transfer in the TTFT" for t, w in by_tier.items()]
