"""A first incumbent for the sizing model by LP-guided rounding (greedy first, then exact).

1. Solve the LP relaxation and keep its failover routing shares.
2. With that routing fixed, size every pool on its own: for each allowed slice shape
   the fewest slices that carry the pool's load in every scenario -- decode by
   ceil(demand / tokens per slice), prefill by the exact Erlang C capacity curve --
   and keep the cheapest shape. No warm slice is used and nothing is shed.
3. Buy the fewest pods that hold the slices and the warm-pool minimum.

The result is feasible for the model whenever the pods can hold it (then every chord is
moved to the new pool sizes first, so the model accepts it) and is offered to the
solver as a warm start; it is typically within a few percent of the optimum, which lets
the branch and bound prune from the start. Returns False when no feasible start exists
(inventory too small, or a pool no shape can serve), and the solver starts cold.
"""

from __future__ import annotations

import math

import numpy as np
import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)

from fleetplan.instance.derived import NORMAL, ModelData
from fleetplan.instance.modes import DISAGGREGATED, ROLES_OF
from fleetplan.models.sizing.constraints.prefill import move_chords
from fleetplan.solvers.base import SolveOptions

__all__ = ["round_lp_solution"]


def round_lp_solution(m: pyo.ConcreteModel, d: ModelData, options: SolveOptions) -> bool:
    """Load an LP-guided rounded solution into ``m``; True if it is complete and feasible."""
    from fleetplan.solvers.highs import solve_highs

    lp = solve_highs(m, options, warm_start=False, relax=True)
    if not lp.has_incumbent:
        return False
    route = {k: float(pyo.value(m.e_route_share[k])) for k in m.ROUTES}
    for v in m.component_data_objects(pyo.Var):
        if not v.fixed:
            v.set_value(0.0 if (v.lb is None or v.lb <= 0) else v.lb, skip_validation=True)
    for k in m.ROUTES:
        m.v_route_bp[k].set_value(route[k] * 1e4, skip_validation=True)

    def loads(r, t):
        """(scenario, own rps, diverted kept rps) where pool (r, t) is active."""
        for s in d.SCENARIOS:
            if r not in s.active:
                continue
            own = d.own_rps(s, r, t)
            div = route.get((s.lost, r, t), 0.0) * d.lost_rps(s, t) * (1 - d.p_clamped_share[t]) if s.kind == "loss" else 0.0
            yield s, own, div

    chips_used = {(r, k): 0 for r in d.REGIONS for k in d.CHIPS}
    for r in d.REGIONS:
        for t in d.TIERS:
            sized: dict[str, tuple] = {}
            for ro in d.ROLES:
                best = None
                # a replica pool is sized per schedule it may run (the cheapest (shape, schedule) wins)
                options = [(c, h) for c in d.CONFIGS for h in (d.replica_schedules(t, c) if ro == "replica" else [None])]
                for c, h in options:
                    nmax = d.p_max_slices[(r, t, ro, c)] if h is None else d.p_max_replicas.get((r, t, c, h), 0)
                    if nmax <= 0:
                        continue
                    need = d.p_min_slices.get((r, t, ro, c), 0)
                    if h is not None:
                        need = max(need, d.replica_cand(t, c, h, (NORMAL,), r).min_replicas)
                    ok = True
                    for s, own, div in loads(r, t):
                        lam = own + div
                        if ro == "decode":
                            cap = d.decode[(t, c, d.decode_regime(s))].tokens_per_s
                            n = math.ceil(lam * d.p_output_tokens / cap - 1e-9) if cap > 0 else (0 if lam <= 0 else None)
                        elif ro == "prefill":
                            cand = d.prefill[(t, c, d.regime(s, r))]
                            work = (own * cand.service_ms["own"] + div * cand.service_ms.get("div", 0.0)) / 1e3
                            A = cand.capacity_erlangs
                            n = int(np.searchsorted(A, work - 1e-9 * max(work, 1.0))) if work > 0 else 0
                            n = None if n >= len(A) else n
                        else:
                            cap = d.replica_cand(t, c, h, d.regime(s, r), r).rps_per_replica
                            n = math.ceil(lam / cap - 1e-9) if cap > 0 else (0 if lam <= 0 else None)
                        if n is None or n > nmax:
                            ok = False
                            break
                        need = max(need, n)
                    if ok and (best is None or need * d.p_price_per_slice_hour_usd[(r, c)] < best[0]):
                        best = (need * d.p_price_per_slice_hour_usd[(r, c)], c, need, h)
                sized[ro] = best
            # auto mode: the cheaper mode whose every role has a start (a fixed mode has one)
            modes = [mo for mo in d.MODES if all(sized[ro] is not None for ro in ROLES_OF[mo])]
            if not modes:
                return False
            mode = min(modes, key=lambda mo: sum(sized[ro][0] for ro in ROLES_OF[mo]))
            if d.auto:
                m.v_mode_disagg[r, t].set_value(1 if mode == DISAGGREGATED else 0)
            for ro in ROLES_OF[mode]:
                _, c, n, h = sized[ro]
                if n > 0:
                    m.v_slices[r, t, ro, c].set_value(n)
                    m.v_select[r, t, ro, c].set_value(1)
                    if h is not None:
                        m.v_replicas[r, t, c, h].set_value(n)
                        m.v_replica_schedule[r, t, c, h].set_value(1)
                    chips_used[(r, d.config_chip(c))] += n * d.slices[c].chips
                if ro == "prefill":
                    for s, own, div in loads(r, t):
                        for q, lam in (("own", own), ("div", div)):
                            if (r, t, c, q, s.name) in m.PREFILL_SERVE:
                                m.v_serve_rps[r, t, c, q, s.name].set_value(lam)
                            elif lam > 1e-12:
                                return False
    wmin = d.inst.failover.warm_pool.min_slices_per_region
    for r in d.REGIONS:
        if wmin > 0:
            c = min((c for c in d.CONFIGS if d.p_warm_allowed[(r, c)]), key=lambda c: d.p_price_per_slice_hour_usd[(r, c)], default=None)
            if c is None:
                return False
            m.v_warm[r, c].set_value(wmin)
            chips_used[(r, d.config_chip(c))] += wmin * d.slices[c].chips
        for k in d.CHIPS:
            pods = max(0, math.ceil(chips_used[(r, k)] / d.p_pod_chips[k]) - d.p_installed_pods[(r, k)])
            if pods > d.p_available_pods[(r, k)]:
                return False
            m.v_new_pods[r, k].set_value(pods)
    if hasattr(m, "PREFILL_KEYS"):
        move_chords(m, d)  # chords through the new sizes: the start is feasible for the model
    return True
