r"""Placement of one region's slices into its pods (ICI domains).

Slices of one pool are interchangeable, so the model counts them per pod instead of
naming each one (:math:`v\_place_{i,j}`, integer); which VMs each occupies is assigned
afterwards by aligned first-fit, which packs any set of power-of-two shapes that fits
the pod's chips (the buddy-allocator argument), so chip capacity is the only packing
constraint the model needs. Regions do not share pods or KV traffic: one model per region.

.. math::

   \sum_j v\_place_{i,j} = n_i \quad (c\_place\_all)
   \qquad
   \sum_i \mathit{chips}_i\, v\_place_{i,j} \le C_j\, v\_used_j \quad (c\_place\_capacity)

KV traffic of tier t at the normal peak (:math:`\lambda_t` req/s, spread evenly over the
tier's :math:`n^P_t` prefill slices; a decode slice of item D takes up to :math:`\mu_D` req/s at
its shape's normal operating point; a mixed decode pool, ``serving.mixed_shapes``, is one item per shape):

.. math::

   \frac{\lambda_t}{n^P_t} v\_place_{P_t,j} = v\_kv\_local_{t,j} + v\_kv\_out_{t,j}
   \quad (c\_kv\_source)

   v\_kv\_local_{t,j} + v\_kv\_in_{t,j} \le \sum_{D \in D_t} \mu_D\, v\_place_{D,j} \quad (c\_kv\_sink)
   \qquad
   \sum_j v\_kv\_out_{t,j} = \sum_j v\_kv\_in_{t,j} \quad (c\_kv\_dcn)

In-pod KV (``v_kv_local``) rides the ICI and is free; what leaves a pod crosses the DCN
(``e_dcn_rps`` = sum of v_kv_out). With a current placement, :math:`v\_moves_{i,j} \ge
v\_place_{i,j} - x^0_{i,j}` counts slices that arrive in a pod.

Objective, lexicographic (:func:`fleetplan.placement.place`): least DCN traffic; then
(re-placement only) fewest moves within a DCN slack; then fewest pods used (free chips
stay in whole pods, where any later slice fits).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyomo.environ as pyo

__all__ = ["PlacementItem", "RegionPlacementData", "build_placement_model"]


@dataclass(frozen=True)
class PlacementItem:
    """Slices of one kind in a region: a pool (tier, role, shape) or warm slices of a shape."""

    tier: str | None
    role: str
    shape: str
    chip: str
    chips: int
    count: int

    @property
    def key(self) -> tuple:
        return (self.tier, self.role, self.shape)


@dataclass
class RegionPlacementData:
    region: str
    pods: list[tuple[str, str, int]]  # (pod id, chip, chips)
    items: list[PlacementItem]
    tier_rps: dict[str, float] = field(default_factory=dict)  # tier -> req/s at the normal peak
    decode_rps_per_slice: dict[str, float] = field(default_factory=dict)  # tier -> req/s one decode slice takes (the least of its shapes)
    current: dict[tuple[int, str], int] | None = None  # (item index, pod id) -> slices there now
    decode_rps_per_shape: dict[tuple[str, str], float] = field(default_factory=dict)  # (tier, shape) -> req/s one decode slice takes

    def item_index(self, tier: str, role: str) -> int | None:
        return next((i for i, it in enumerate(self.items) if it.tier == tier and it.role == role), None)

    def items_of(self, tier: str, role: str) -> list[int]:
        """Indices of every item of (tier, role): one per slice shape (a mixed pool, ``serving.mixed_shapes``, has several)."""
        return [i for i, it in enumerate(self.items) if it.tier == tier and it.role == role]

    def decode_rate(self, i: int) -> float:
        """Req/s one slice of decode item i takes: its shape's own, else the tier's least."""
        it = self.items[i]
        return self.decode_rps_per_shape.get((it.tier, it.shape), self.decode_rps_per_slice.get(it.tier, 0.0))


def build_placement_model(d: RegionPlacementData) -> pyo.ConcreteModel:
    m = pyo.ConcreteModel(name=f"placement[{d.region}]")
    pods = [p[0] for p in d.pods]
    chip_of = {p[0]: p[1] for p in d.pods}
    cap_of = {p[0]: p[2] for p in d.pods}
    keys = [(i, j) for i, it in enumerate(d.items) for j in pods if chip_of[j] == it.chip]
    m.PLACE = pyo.Set(initialize=keys, dimen=2, ordered=True)
    m.PODS = pyo.Set(initialize=pods, ordered=True)
    m.v_place = pyo.Var(m.PLACE, domain=pyo.NonNegativeIntegers, bounds=lambda _m, i, j: (0, d.items[i].count))
    m.v_used = pyo.Var(m.PODS, domain=pyo.Binary)
    by_item: dict[int, list] = {}
    by_pod: dict[str, list] = {}
    for (i, j) in keys:
        by_item.setdefault(i, []).append(j)
        by_pod.setdefault(j, []).append(i)
    m.c_place_all = pyo.Constraint(range(len(d.items)), rule=lambda _m, i: sum(m.v_place[i, j] for j in by_item.get(i, [])) == d.items[i].count
                                   if by_item.get(i) else pyo.Constraint.Infeasible if d.items[i].count > 0 else pyo.Constraint.Skip)
    m.c_place_capacity = pyo.Constraint(m.PODS, rule=lambda _m, j: sum(d.items[i].chips * m.v_place[i, j] for i in by_pod.get(j, []))
                                        <= cap_of[j] * m.v_used[j])
    if d.current is None:
        # identical pods of a chip type: use them in order (symmetry breaking)
        order = [(a, b) for a, b in zip(pods, pods[1:]) if chip_of[a] == chip_of[b]]
        m.c_place_order = pyo.Constraint(range(len(order)), rule=lambda _m, k: m.v_used[order[k][0]] >= m.v_used[order[k][1]])
    tiers = [t for t in d.tier_rps if d.item_index(t, "prefill") is not None and d.item_index(t, "decode") is not None]
    m.KV = pyo.Set(initialize=[(t, j) for t in tiers for j in pods if chip_of[j] == d.items[d.item_index(t, "prefill")].chip
                               or chip_of[j] in {d.items[D].chip for D in d.items_of(t, "decode")}], dimen=2, ordered=True)
    m.v_kv_local = pyo.Var(m.KV, domain=pyo.NonNegativeReals)
    m.v_kv_out = pyo.Var(m.KV, domain=pyo.NonNegativeReals)
    m.v_kv_in = pyo.Var(m.KV, domain=pyo.NonNegativeReals)

    def placed(i, j):
        return m.v_place[i, j] if (i, j) in m.PLACE else 0

    def src(_m, t, j):
        P = d.item_index(t, "prefill")
        return d.tier_rps[t] / d.items[P].count * placed(P, j) == m.v_kv_local[t, j] + m.v_kv_out[t, j]

    def sink(_m, t, j):  # every decode shape of the tier takes KV at its own rate (a mixed pool has several)
        return m.v_kv_local[t, j] + m.v_kv_in[t, j] <= sum(d.decode_rate(D) * placed(D, j) for D in d.items_of(t, "decode"))

    m.c_kv_source = pyo.Constraint(m.KV, rule=src)
    m.c_kv_sink = pyo.Constraint(m.KV, rule=sink)
    m.c_kv_dcn = pyo.Constraint(tiers, rule=lambda _m, t: sum(m.v_kv_out[t, j] for (tt, j) in m.KV if tt == t)
                                == sum(m.v_kv_in[t, j] for (tt, j) in m.KV if tt == t))
    m.e_dcn_rps = pyo.Expression(expr=sum(m.v_kv_out[k] for k in m.KV))
    m.e_pods_used = pyo.Expression(expr=sum(m.v_used[j] for j in pods))
    if d.current is not None:
        m.v_moves = pyo.Var(m.PLACE, domain=pyo.NonNegativeReals)
        m.c_place_moves = pyo.Constraint(m.PLACE, rule=lambda _m, i, j: m.v_moves[i, j] >= m.v_place[i, j] - d.current.get((i, j), 0))
        m.e_moves = pyo.Expression(expr=sum(m.v_moves[k] for k in m.PLACE))
    for name in ("dcn_rps", "pods_used") + (("moves",) if d.current is not None else ()):
        obj = pyo.Objective(expr=getattr(m, f"e_{name}"), sense=pyo.minimize)
        setattr(m, f"obj_{name}", obj)
        obj.deactivate()
    return m
