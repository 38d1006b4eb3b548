r"""Pods: every slice counted in a pod (ICI domain), identical pods aggregated by an arc flow.

Placement-aware sizing (``placement.size_with_pods``, the default; ``d.pods``,
:mod:`fleetplan.tables.pods`). The pods of chip type k in region r are identical bins of
C chips; a pod's content is a path through one layer per item kind -- a tier's *kit* (its P
prefill and D decode slices in that pod), a colocated replica pool's slices, warm slices of
one shape -- each layer adding a block of b chips. With g the group, l the layer and u the
chips filled before it (multiples of the shapes' gcd):

.. math::

   \sum_b v\_pod\_flow_{g,0,0,b} = v\_pods\_placed_g,\qquad
   \sum_b v\_pod\_flow_{g,l,u,b} = \sum_{b} v\_pod\_flow_{g,l-1,u-b,b}          \quad (c\_pods\_flow)

   v\_pods\_placed_g \le p\_installed_{r,k} + v\_new\_pods_{r,k}                  \quad (c\_pods\_service)

   \sum_{\kappa \in K_{g,l}:\ \mathit{chips}_\kappa = b} v\_pod\_kits_{g,l,\kappa} = \sum_u v\_pod\_flow_{g,l,u,b}
   \qquad b > 0                                                                     \quad (c\_pods\_kit\_size)

   \sum_{g \in r} \sum_{\kappa} P_\kappa [\mathit{prefill}_\kappa = c]\, v\_pod\_kits_{g,l(t),\kappa} = v\_slices_{r,t,\mathrm{prefill},c},
   \ \text{likewise decode}                                                        \quad (c\_pods\_slices)

   \sum_{u,b} (b / \mathit{chips}_c)\, v\_pod\_flow_{g,l(c),u,b} = v\_warm_{r,c}\ \text{(or a replica pool's slices)}
                                                                                    \quad (c\_pods\_count)

A path from the first layer's node 0 to the last layer's is one pod; its blocks add to at
most C chips by construction. Slice shapes that are powers of two and divide the pod
(every bundled chip) pack onto whole aligned VMs whenever their chips fit (the buddy
argument; ``fleetplan place`` assigns the VMs), so chips are the only packing constraint.
The flow's size depends on C / gcd and the item kinds, not on the number of pods: 30 and
60 identical pods are the same model. Exact: every multiset of pod contents is a flow
(Valerio de Carvalho, Annals of OR 86, 1999, for bin packing). A kit is a tier's whole
content of a pod (its enumeration, :func:`fleetplan.tables.pods._kits`, is every (P, D)
of one prefill and one decode shape that fits), so the DCN family (dcn.py) can count what
leaves each kit. Units: slices, pods, chips. Applies with ``placement.size_with_pods`` and
at least one region with pods; ``fleetplan purchase`` sizes without pods.

Size. Count layers -- a tier's decode slices beyond its kits' (one 'decode' layer per shape),
a replica pool's slices, warm slices -- are *loop* layers: an arc adds one slice and stays in
the layer, its 0 arc leaves it (two arcs per node, not one per count), and arcs start only
at nodes a path can reach. A kit has at least one prefill slice and at most the decode
slices that take all its KV at the fewest prefill slices a plan serving its load can have
(:func:`fleetplan.tables.pods._prefill_floor`: the pool's Erlangs at the normal peak and
in the busiest loss, less the batch share shed and the warm pool, at the fastest shape's
service time); a pod's further decode slices are the loop layer's. Exact at every pool of at
least that floor (a kit's excess is 0 beyond that decode count, and a pool below the floor
would be over 100% busy); where a coarse level ladder's level lies below the floor, a
pruned kit counts the excess of its own decode count at that level (conservative, never
optimistic).
"""

from __future__ import annotations

import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.deadline import check
from fleetplan.tables.derived import ModelData


def add_pods(m: pyo.ConcreteModel, d: ModelData) -> None:
    pods = d.pods
    groups = pods.groups
    arcs = [(gi,) + a for gi, g in enumerate(groups) for a in g.arcs()]
    arc_set = {}  # (group, layer) -> its arcs (the count layers' slices)
    for a in arcs:
        arc_set.setdefault(a[:2], []).append(a)
    m.POD_ARCS = pyo.Set(initialize=arcs, dimen=4, ordered=True)
    m.POD_GROUPS = pyo.Set(initialize=range(len(groups)), ordered=True)
    m.v_pod_flow = pyo.Var(m.POD_ARCS, domain=pyo.NonNegativeIntegers, bounds=lambda _m, gi, li, u, b: (0, groups[gi].pods_max))
    m.v_pods_placed = pyo.Var(m.POD_GROUPS, domain=pyo.NonNegativeIntegers, bounds=lambda _m, gi: (0, groups[gi].pods_max))

    out: dict[tuple, list] = {}
    into: dict[tuple, list] = {}
    for a in arcs:
        gi, li, u, b = a
        out.setdefault((gi, li, u), []).append(a)
        into.setdefault((gi,) + groups[gi].arc_head(li, u, b), []).append(a)
    nodes = [(gi, li, u) for gi, g in enumerate(groups) for li, reach in enumerate(g.reachable()) for u in reach]

    def flow(_m, gi, li, u):
        lhs = sum(m.v_pod_flow[a] for a in out.get((gi, li, u), []))
        rhs = sum(m.v_pod_flow[a] for a in into.get((gi, li, u), []))
        return lhs == (m.v_pods_placed[gi] + rhs if (li, u) == (0, 0) else rhs)

    check("building the model")  # a command's --time-limit between this family's larger blocks (fleetplan.deadline)
    m.c_pods_flow = pyo.Constraint(nodes, rule=flow)
    check("building the model")
    m.c_pods_service = pyo.Constraint(m.POD_GROUPS, rule=lambda _m, gi: m.v_pods_placed[gi] <= d.p_installed_pods[(groups[gi].region, groups[gi].chip)]
                                      + m.v_new_pods[groups[gi].region, groups[gi].chip])

    kits = [(gi, li, ki) for gi, g in enumerate(groups) for li, layer in enumerate(g.layers) if layer.kind == "kit" for ki in range(len(layer.kits))]
    m.POD_KITS = pyo.Set(initialize=kits, dimen=3, ordered=True)
    m.v_pod_kits = pyo.Var(m.POD_KITS, domain=pyo.NonNegativeIntegers, bounds=lambda _m, gi, li, ki: (0, groups[gi].pods_max))
    m.kit_of = lambda gi, li, ki: groups[gi].layers[li].kits[ki]

    sizes = sorted({(gi, li, b) for (gi, li, u, b) in arcs if b > 0 and groups[gi].layers[li].kind == "kit"})
    by_size: dict[tuple, list] = {}
    for (gi, li, ki) in kits:
        by_size.setdefault((gi, li, groups[gi].layers[li].kits[ki].chips), []).append((gi, li, ki))
    arcs_of: dict[tuple, list] = {}
    for a in arcs:
        arcs_of.setdefault((a[0], a[1], a[3]), []).append(a)
    m.c_pods_kit_size = pyo.Constraint(sizes, rule=lambda _m, gi, li, b: sum(m.v_pod_kits[k] for k in by_size.get((gi, li, b), []))
                                       == sum(m.v_pod_flow[a] for a in arcs_of[(gi, li, b)]))

    check("building the model")
    # every pool's slices are the slices its kits (or count layers) hold, over the region's pod groups
    held: dict[tuple, list] = {}
    for (gi, li, ki) in kits:
        kt = groups[gi].layers[li].kits[ki]
        r = groups[gi].region
        if kt.prefill is not None:
            held.setdefault((r, kt.tier, "prefill", kt.prefill), []).append((kt.P, m.v_pod_kits[gi, li, ki]))
        if kt.decode is not None:
            held.setdefault((r, kt.tier, "decode", kt.decode), []).append((kt.D, m.v_pod_kits[gi, li, ki]))
    warm_held: dict[tuple, list] = {}
    for gi, g in enumerate(groups):
        for li, layer in enumerate(g.layers):
            if layer.kind == "kit":
                continue
            terms = [(a[3] // layer.slice_chips, m.v_pod_flow[a]) for a in arc_set.get((gi, li), []) if a[3] > 0]
            if layer.kind == "warm":
                warm_held.setdefault((g.region, layer.shape), []).extend(terms)
            else:  # 'replica', or 'decode': a tier's decode slices beyond its kits'
                held.setdefault((g.region, layer.tier, layer.kind, layer.shape), []).extend(terms)
    pools = [(r, t, ro, c) for (r, t, ro, c) in m.POOLS if d.p_max_slices[(r, t, ro, c)] > 0]
    m.c_pods_slices = pyo.Constraint(pools, rule=lambda _m, r, t, ro, c: sum(k * v for k, v in held.get((r, t, ro, c), []))
                                     == m.v_slices[r, t, ro, c])
    warm = [(r, c) for r in d.REGIONS for c in d.CONFIGS if d.warm_max(r, c) > 0]
    m.c_pods_count = pyo.Constraint(warm, rule=lambda _m, r, c: sum(k * v for k, v in warm_held.get((r, c), [])) == m.v_warm[r, c])
