r"""Colocated replicas: each replica interleaves prefill and decode, under an engine schedule
the optimiser picks per replica pool (region x tier x shape).

.. math::

   \sum_h v\_replica\_schedule_{r,t,c,h} = v\_select_{r,t,\mathrm{replica},c}
   \qquad \forall (r,t,c): M_{r,t,c} > 0                     \quad (c\_replica\_schedule\_one)

   \sum_h v\_replicas_{r,t,c,h} = v\_slices_{r,t,\mathrm{replica},c}
   \qquad \forall (r,t,c): M_{r,t,c} > 0                     \quad (c\_replica\_schedule\_count)

   n^{ref}_{t,c,h}\, v\_replica\_schedule_{r,t,c,h} \le v\_replicas_{r,t,c,h}
   \le M_{r,t,c,h}\, v\_replica\_schedule_{r,t,c,h}
   \qquad (c\_replica\_schedule\_min,\; c\_replica\_schedule\_max)

   \sum_h v\_warm\_replicas_{r,t,c,h,s} = v\_warm\_use_{r,t,\mathrm{replica},c,s},\quad
   v\_warm\_replicas_{r,t,c,h,s} \le W^{max}_{r,c}\, v\_replica\_schedule_{r,t,c,h}
   \qquad (c\_replica\_warm\_split,\; c\_replica\_warm\_schedule)

   \sum_{c,h} \mathit{cap}^{rep}_{t,c,h,g} \,(v\_replicas_{r,t,c,h} + v\_warm\_replicas_{r,t,c,h,s})
   + v\_short\_replica_{r,t,s} \;\ge\; e\_admitted_{r,t,s}
   \qquad \forall (r,t,s) \in ACTIVE          \quad (c\_replica\_capacity)

h ranges over the engine schedules the instance allows (``serving.colocated_schedules`` x
``serving.chunk_tokens``, :func:`fleetplan.perf.colocated.schedules_of`) that carry the
tier on shape c and that no other schedule dominates (``ModelData.replica_schedules``):
*prefill-first* (whole prompts before decode steps: TPOT = d(b)/(1 - u)) or *chunked*
with a token budget C (Sarathi-Serve mixed steps: the residents' decode tokens plus
C - b tokens of the head prompt per step, TPOT = d(b)/(1 - lambda E[Delta]) with Delta
the time the chunks add). The binary :math:`v\_replica\_schedule` picks one schedule per
chosen pool, so each region's pool of a tier and shape runs its own schedule (regions
and tiers may differ); :math:`v\_replicas` is the pool's count under the schedule
picked (continuous: the one non-zero term equals the integer :math:`v\_slices`).

:math:`\mathit{cap}^{rep}_{t,c,h,g}` (requests/s per replica) is the largest arrival rate at
which a replica under schedule h meets every SLO percentile in regime g, times
``utilisation_headroom`` (:mod:`fleetplan.perf.colocated`): Little's law b = lambda o
TPOT as a fixed point; the TPOT percentile over the occupancy distribution (M/G/infinity
lifetime averages), the TTFT percentile with the pool's prompts queued FCFS over its
replicas (least-work routing = M/G/c; a load-blind ``serving.router`` gives each replica a
G/G/1 of its own: ``round-robin`` at C_a^2 / n, ``random`` and ``prefix-aware`` at a random
split's C_a^2, M/G/1 for Poisson arrivals -- :func:`fleetplan.perf.queueing.routed_queue`).
It is the rate of a pool of :math:`n^{ref}_{t,c,h}` replicas: the fewest
the least favourable normal mix needs under h at the tier's smallest normal-peak demand
over the regions (capped by the smallest pod bound) -- and in a region whose own
normal peak needs a larger pool under h (capped by its pods), that region's own
:math:`n^{ref}_{r,t,c,h}` and the rate of that pool (``ModelData.replica_region``), where
pooling gains anything. The rate rises with the pool under every router (least-work
pools; round robin smooths each replica's arrivals), so it holds for every pool of at least n_ref replicas, and
c_replica_schedule_min holds a pool running h to that size. :math:`M_{r,t,c,h}` is the
pool that carries the most (r, t) can see at that rate (never below n_ref; capped by the
region's pods). 0 (no h) on a shape whose KV page pool cannot hold the tier's longest
request (prompt and output).

**Warm slices** joining a replica pool in a region loss run that pool's schedule: the
warm use of the pool (warm.py, one integer per shape) is split over the schedules by
:math:`v\_warm\_replicas`, which only the schedule picked may carry, so a warm replica is
rated at the pool's own schedule's rate in that regime -- exact, not a rate safe for any
schedule. Capacity is linear in the replica count above n_ref. Applies in colocated mode
(and in auto mode, switched off where a region x tier runs disaggregated: mode.py, whose
:math:`\sum_c v\_select \le 1 - v\_mode\_disagg` also switches the schedule binaries off).

**Mixed shapes** (``serving.mixed_shapes``): several shapes may serve one (r, t); each
shape is its own least-work sub-pool (a router splits the load between shapes in
proportion to their capacity, each sub-pool queues its share FCFS over its own replicas)
running its own schedule, so the row prices the mixture exactly as long as each shape
keeps the n_ref replicas its rate assumes (c_replica_schedule_min keeps that bound per
shape and schedule). One least-work queue over unlike replicas is not modelled: its M/G/c
rate assumes identical servers.
"""

from __future__ import annotations

import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.tables.derived import NORMAL, ModelData
from fleetplan.models.sizing.constraints.mode import mode_relax

__all__ = ["add_replica_capacity", "chosen_schedule"]


def add_replica_capacity(m: pyo.Block, d: ModelData) -> None:
    S = {s.name: s for s in d.SCENARIOS}
    keys = [(r, t, c, h) for r in d.REGIONS for t in d.TIERS for c in d.CONFIGS for h in d.replica_schedules(t, c)
            if d.p_max_slices.get((r, t, "replica", c), 0) > 0 and d.p_max_replicas.get((r, t, c, h), 0) > 0]
    pools = sorted({k[:3] for k in keys}, key=lambda k: (d.REGIONS.index(k[0]), d.TIERS.index(k[1]), d.CONFIGS.index(k[2])))
    by_pool: dict[tuple, list[str]] = {}
    for (r, t, c, h) in keys:
        by_pool.setdefault((r, t, c), []).append(h)
    m.REPLICA_SCHEDULES = pyo.Set(initialize=keys, dimen=4, ordered=True)
    m.v_replica_schedule = pyo.Var(m.REPLICA_SCHEDULES, domain=pyo.Binary)
    m.v_replicas = pyo.Var(m.REPLICA_SCHEDULES, domain=pyo.NonNegativeReals, bounds=lambda _m, r, t, c, h: (0, d.p_max_replicas[(r, t, c, h)]))
    m.c_replica_schedule_one = pyo.Constraint(pools, rule=lambda _m, r, t, c: sum(
        m.v_replica_schedule[r, t, c, h] for h in by_pool[(r, t, c)]) == m.v_select[r, t, "replica", c])
    m.c_replica_schedule_count = pyo.Constraint(pools, rule=lambda _m, r, t, c: sum(
        m.v_replicas[r, t, c, h] for h in by_pool[(r, t, c)]) == m.v_slices[r, t, "replica", c])
    m.c_replica_schedule_max = pyo.Constraint(m.REPLICA_SCHEDULES, rule=lambda _m, r, t, c, h: (
        m.v_replicas[r, t, c, h] <= d.p_max_replicas[(r, t, c, h)] * m.v_replica_schedule[r, t, c, h]))
    nref = {k: d.replica_cand(k[1], k[2], k[3], (NORMAL,), k[0]).min_replicas for k in keys}
    m.c_replica_schedule_min = pyo.Constraint([k for k in keys if nref[k] > 1], rule=lambda _m, r, t, c, h: (
        m.v_replicas[r, t, c, h] >= nref[(r, t, c, h)] * m.v_replica_schedule[r, t, c, h]))

    # warm slices joining a pool run its schedule: split the pool's warm use by schedule
    wkeys = [(r, t, c, h, sn) for (r, t, ro, c, sn) in m.WARM_USE if ro == "replica" for h in by_pool.get((r, t, c), [])]
    m.REPLICA_WARM = pyo.Set(initialize=wkeys, dimen=5, ordered=True)
    m.v_warm_replicas = pyo.Var(m.REPLICA_WARM, domain=pyo.NonNegativeReals, bounds=lambda _m, r, t, c, h, sn: (0, d.warm_max(r, c)))
    split = sorted({(r, t, c, sn) for (r, t, c, _, sn) in wkeys}, key=lambda k: tuple(str(x) for x in k))
    m.c_replica_warm_split = pyo.Constraint(split, rule=lambda _m, r, t, c, sn: sum(
        m.v_warm_replicas[r, t, c, h, sn] for h in by_pool[(r, t, c)]) == m.v_warm_use[r, t, "replica", c, sn])
    m.c_replica_warm_schedule = pyo.Constraint(m.REPLICA_WARM, rule=lambda _m, r, t, c, h, sn: (
        m.v_warm_replicas[r, t, c, h, sn] <= d.warm_max(r, c) * m.v_replica_schedule[r, t, c, h]))

    m.v_short_replica = pyo.Var(m.ACTIVE, domain=pyo.NonNegativeReals, bounds=lambda _m, r, t, sn: (0.0, d.max_rps(r, t)))

    def warm(r, t, c, h, sn):
        return m.v_warm_replicas[r, t, c, h, sn] if (r, t, c, h, sn) in m.REPLICA_WARM else 0

    def rule(_m, r, t, sn):
        g = d.regime(S[sn], r)
        cap = sum(d.replica_cand(t, c, h, g, r).rps_per_replica * (m.v_replicas[r, t, c, h] + warm(r, t, c, h, sn))
                  for c in d.CONFIGS for h in by_pool.get((r, t, c), []) if d.replica_cand(t, c, h, g, r).rps_per_replica > 0)
        relax = mode_relax(m, d, r, t, "colocated")  # 0 unless serving.mode is auto (mode.py)
        return cap + m.v_short_replica[r, t, sn] + relax >= m.e_admitted_rps[r, t, sn]

    m.c_replica_capacity = pyo.Constraint(m.ACTIVE, rule=rule)
    for k in m.ACTIVE:  # requests/s, for the end-to-end count (unserved.py)
        m.shortfall_by_key.setdefault(k, {})["replica"] = m.v_short_replica[k]


def chosen_schedule(m: pyo.Block, d: ModelData, r: str, t: str, c: str) -> str | None:
    """The schedule label the solution picks for the replica pool (r, t, c) (the largest
    :math:`v\\_replica\\_schedule`; ties: :attr:`ModelData.SCHEDULES` order), None when the
    pool has no schedule in the model."""
    hs = [h for h in d.SCHEDULES if (r, t, c, h) in m.REPLICA_SCHEDULES]
    if not hs:
        return None
    val = {h: pyo.value(m.v_replica_schedule[r, t, c, h], exception=False) or 0.0 for h in hs}
    return max(hs, key=lambda h: (val[h] > 0.5, val[h], -hs.index(h)))
