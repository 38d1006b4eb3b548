"""The component start (fleetplan.solvers.components): fix the coupling columns at the
LP's values, solve what is left component by component; and the sizing model's first
HiGHS solve from it (issue 19)."""

from __future__ import annotations

import itertools

import highspy
import numpy as np
import pytest

from fleetplan.instance.io import parse_instance
from fleetplan.sizing import solve
from fleetplan.solvers.base import SolveOptions
from fleetplan.solvers.components import component_start
from tests.conftest import tiny_data


def _lp(cost, lo, up, integ, rows):
    """A HighsLp: rows as (lower, {col: coef}, upper)."""
    lp = highspy.HighsLp()
    n = len(cost)
    lp.num_col_, lp.num_row_ = n, len(rows)
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = np.array(cost, float), np.array(lo, float), np.array(up, float)
    lp.row_lower_ = np.array([r[0] for r in rows], float)
    lp.row_upper_ = np.array([r[2] for r in rows], float)
    start, index, value = [0], [], []
    for j in range(n):
        for i, r in enumerate(rows):
            if j in r[1]:
                index.append(i)
                value.append(r[1][j])
        start.append(len(index))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = start, index, value
    lp.integrality_ = [highspy.HighsVarType.kInteger if t else highspy.HighsVarType.kContinuous for t in integ]
    return lp


INF = highspy.kHighsInf


def test_two_regions_coupled_by_a_routing_share_split_into_two_exact_mips():
    # columns: 0 = share s of a load of 10 sent to region a (1 - s to b), continuous in [0, 1];
    # 1, 2 = slices in a (capacity 3 each, cost 5), in b (capacity 4 each, cost 6), integer.
    # rows: 3 n_a - 10 s >= 0 ; 4 n_b + 10 s >= 10
    lp = _lp([0, 5, 6], [0, 0, 0], [1, 10, 10], [False, True, True],
             [(0, {1: 3, 0: -10}, INF), (10, {2: 4, 0: 10}, INF)])
    st = component_start(lp, np.array([True, False, False]), None)
    assert st.values is not None and st.components == 2, st.why
    s, na, nb = st.values
    # each component is the exact integer optimum for the LP's share
    assert na == int(np.ceil(10 * s / 3 - 1e-9)) and nb == int(np.ceil(10 * (1 - s) / 4 - 1e-9))
    assert 3 * na - 10 * s >= -1e-9 and 4 * nb + 10 * s >= 10 - 1e-9  # feasible for every row
    assert st.objective == pytest.approx(5 * na + 6 * nb)
    # and no better than the true optimum, found by enumeration
    best = min(5 * a + 6 * b for a, b in itertools.product(range(11), repeat=2) if 3 * a + 4 * b >= 10)
    assert st.objective >= best - 1e-9


def test_nothing_to_split_gives_no_start_and_says_why():
    lp = _lp([1, 1], [0, 0], [5, 5], [True, True], [(3, {0: 1, 1: 1}, INF)])
    st = component_start(lp, np.array([False, False]), None)
    assert st.values is None and "no column to fix" in st.why
    lp = _lp([0, 1, 1], [0, 0, 0], [1, 5, 5], [False, True, True], [(3, {0: 1, 1: 1, 2: 1}, INF)])
    st = component_start(lp, np.array([True, False, False]), None)
    assert st.values is None and "one component" in st.why


def test_a_deadline_already_past_gives_no_start():
    lp = _lp([0, 5, 6], [0, 0, 0], [1, 10, 10], [False, True, True],
             [(0, {1: 3, 0: -10}, INF), (10, {2: 4, 0: 10}, INF)])
    import time

    st = component_start(lp, np.array([True, False, False]), time.monotonic() - 1)
    assert st.values is None and "time" in st.why


def _three_regions():
    regions = {r: {"peak_rps": p, "hourly_load": [1.0] * 24, "pods": {"acc": {"installed": 0, "available_new": 40}}, "failover_to": [x for x in "abc" if x != r]}
               for r, p in zip("abc", (30.0, 45.0, 60.0))}
    data = tiny_data(chips={"acc": {"slice_shapes": [1, 2, 4]}}, failover={"n_minus_1": True})
    data["regions"] = regions
    return parse_instance(data, "three")


def test_the_sizing_solve_from_the_component_start_is_verified_and_within_the_gap():
    inst = _three_regions()
    on = solve(inst, SolveOptions(component_start=True))
    off = solve(inst, SolveOptions(component_start=False))
    assert on.plan.status == off.plan.status == "verified"
    assert any(n.startswith("started from the component start: the LP's failover routing fixed, 3 components") for n in on.result.notes), on.result.notes
    assert not any("component start" in n for n in off.result.notes)
    assert any(n.startswith("started from the component start") for n in on.plan.diagnostics), on.plan.diagnostics
    # both proved within 1% of a bound: their intervals [bound, objective] overlap
    assert on.result.bound <= off.result.objective * (1 + 1e-9) and off.result.bound <= on.result.objective * (1 + 1e-9)
    assert on.result.gap <= 0.01 + 1e-9


def test_auto_leaves_small_models_alone():
    """The bundled instances' size: auto is off, the plan is the cold solve's, byte for byte."""
    inst = _three_regions()
    auto = solve(inst, SolveOptions())
    off = solve(inst, SolveOptions(component_start=False))
    assert auto.plan.model_dump_json() == off.plan.model_dump_json()


def test_the_cli_option_is_checked():
    from typer.testing import CliRunner

    from fleetplan.cli.app import app

    r = CliRunner().invoke(app, ["solve", "llama70b-h100", "--component-start", "maybe"])
    assert r.exit_code == 2 and "--component-start must be 'auto', 'on' or 'off'" in r.stderr, r.output


@pytest.mark.slow  # ~15 s: two solves of benchmarks/generate.py's 3-region instance; `pytest -m slow` runs it
def test_a_generated_instance_from_the_component_start_reaches_the_same_optimum_within_the_gap():
    from tests.families.test_strengthening import generated_instance

    inst = generated_instance()
    on = solve(inst, SolveOptions(component_start=True))
    off = solve(inst, SolveOptions(component_start=False))
    assert on.plan.status == off.plan.status == "verified"
    assert any(n.startswith("started from the component start: the LP's failover routing fixed, 3 components") for n in on.plan.diagnostics)
    assert on.result.bound <= off.result.objective * (1 + 1e-9) and off.result.bound <= on.result.objective * (1 + 1e-9)


def test_asked_for_where_it_cannot_apply_the_plan_says_why():
    """Newcomer trial: `--component-start on` with CP-SAT, with --rounding-start or without
    failover routing was ignored without a word."""
    inst = parse_instance(tiny_data(), "tiny")  # no N-1: no routing to fix
    out = solve(inst, SolveOptions(component_start=True))
    assert "--component-start on was not applied: the model has no failover routing to fix" in out.plan.diagnostics
    out = solve(_three_regions(), SolveOptions(component_start=True, rounding_start=True))
    assert "--component-start on was not applied: --rounding-start offers its own start" in out.plan.diagnostics
