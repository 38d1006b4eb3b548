"""c_prefill_shape's big-M: a prefill shape serves at most what its source can bring.

The row ``v_serve[r,t,c,q,s] <= M * v_select[r,t,prefill,c]`` had M = 2 x the largest region's
peak x the tier's share for every source. In the LP relaxation a shape could then carry a
small region's whole load at ``v_select ~ serve / M << 1`` and keep most of its TTFT chord's
negative intercept :math:`R_k (1 - v\\_select)` (the purchase tree's root LP bounds were 10-13%
under the optima). M is now the source's own arrivals in that scenario (own) or the lost
region's whole diverted arrivals (div), with a 0.1% margin and at least rounded up to the
CP-SAT backend's grid.

These tests check that M is that bound (tight: it failed with the global one) and that it cuts
off no plan: on the CP-SAT grid (served rates are multiples of 0.1 req/s) a fractional arrival
rate still gets a plan without shortfall, equal in cost to HiGHS's.
"""

from __future__ import annotations

import math

import pytest
from pyomo.repn import generate_standard_repn

from fleetplan.instance.io import parse_instance
from fleetplan.models.sizing.constraints.prefill import SERVE_GRID_RPS
from fleetplan.sizing import solve
from fleetplan.solvers.base import SolveOptions
from fleetplan.solvers.cpsat import CONTINUOUS_SCALING
from tests.conftest import tiny_data


def _model(inst):
    from fleetplan.models.sizing.build import build_sizing_model
    from fleetplan.tables.derived import build_model_data

    d = build_model_data(inst)
    return build_sizing_model(d), d


def _instance(**over):
    # two regions of different peaks with N-1 (own and diverted sources), arrival rates off the
    # 0.1 req/s grid; sized without pods (the one solve is the sizing model)
    data = tiny_data(failover={"n_minus_1": True}, placement={"size_with_pods": False}, **over)
    data["regions"]["a"]["peak_rps"] = 20.03
    data["regions"]["b"]["peak_rps"] = 7.07
    return parse_instance(data, "shape-bound")


def test_the_rounding_is_the_cpsat_grid():
    assert SERVE_GRID_RPS == 1.0 / CONTINUOUS_SCALING


def test_the_big_m_is_the_sources_own_arrivals():
    inst = _instance()
    m, d = _model(inst)
    S = {s.name: s for s in d.SCENARIOS}
    assert len(m.PREFILL_SERVE) > 0 and any(q == "div" for (_r, _t, _c, q, _sn) in m.PREFILL_SERVE)
    for (r, t, c, q, sn) in m.PREFILL_SERVE:
        s = S[sn]
        lam = d.own_rps(s, r, t) if q == "own" else d.lost_rps(s, t) * (1.0 - d.p_clamped_share[t])
        row = m.c_prefill_shape[r, t, c, q, sn]
        # the row reads v_serve - M v_select <= 0: M is minus v_select's coefficient
        repn = generate_standard_repn(row.body)
        coef = {v.name: a for v, a in zip(repn.linear_vars, repn.linear_coefs)}
        big_m = -coef[m.v_select[r, t, "prefill", c].name]
        # the arrival rate with a 0.1% margin, rounded up to the CP-SAT grid where that is more
        assert lam <= big_m <= max(1.001 * lam + 0.001, lam + SERVE_GRID_RPS + 1e-5), (r, t, c, q, sn, lam, big_m)
        assert big_m == pytest.approx(max(1.001 * lam + 0.001, math.ceil(lam / SERVE_GRID_RPS) * SERVE_GRID_RPS + 1e-6), rel=1e-12)
        # region b's own source is far under the global bound 2 x 20.03 the row had
        assert big_m < 2 * max(d.p_peak_rps.values()) * d.tiers[t].tier_share


@pytest.mark.parametrize("over", [
    {},
    {"workload": {"prefix_hit_rate": 0.5, "input_mix": [{"share": 0.7, "tokens": 2000}, {"share": 0.3, "tokens": 12000}],
                  "tiers": [{"name": "short", "max_input_tokens": 4096}, {"name": "long", "max_input_tokens": None}]}},
])
def test_cpsat_meets_fractional_arrivals_without_shortfall(over):
    inst = _instance(**over)
    h = solve(inst, SolveOptions(solver="highs", mip_gap=0.0))
    c = solve(inst, SolveOptions(solver="cpsat", mip_gap=0.0))
    assert h.plan.status == "verified" and c.plan.status == "verified", (h.plan.status, c.plan.status)
    assert c.result.objective == pytest.approx(h.result.objective, rel=1e-6, abs=1e-6)
