"""solve_blocks (fleetplan.solvers.components): a MIP whose rows split into independent
blocks, solved one block at a time, has the whole MIP's optimum; a block with no solution
is named and the others keep theirs. Checked against HiGHS on the whole model."""

from __future__ import annotations

import highspy
import numpy as np
import pytest

import fleetplan.solvers.components as components
from fleetplan.solvers.components import solve_blocks


@pytest.fixture(autouse=True)
def _every_component_a_block(monkeypatch):
    """These blocks are a few columns each; the product gathers components under
    BLOCK_MIN_COLUMNS into shared MIPs (tested last)."""
    monkeypatch.setattr(components, "BLOCK_MIN_COLUMNS", 1)


def _lp(blocks: list[tuple[list[float], list[float], float, float]]):
    """A MIP of independent covering blocks: block i has integer columns with costs c_i and
    weights w_i, one row lo_i <= w_i . x <= up_i; every column in [0, 10]."""
    costs, lower, upper, starts, index, value, rlo, rup = [], [], [], [0], [], [], [], []
    for i, (c, w, lo, up) in enumerate(blocks):
        for cj, wj in zip(c, w):
            costs.append(cj)
            lower.append(0.0)
            upper.append(10.0)
            index.append(i)
            value.append(wj)
            starts.append(len(index))
        rlo.append(lo)
        rup.append(up)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = len(costs), len(blocks)
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = np.array(costs), np.array(lower), np.array(upper)
    lp.row_lower_, lp.row_upper_ = np.array(rlo), np.array(rup)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = np.array(starts), np.array(index), np.array(value)
    lp.integrality_ = [highspy.HighsVarType.kInteger] * len(costs)
    return lp


def _whole(lp) -> float:
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.passModel(lp)
    h.run()
    return h.getInfo().objective_function_value


BLOCKS = [([3.0, 5.0, 7.0], [2.0, 3.0, 5.0], 17.0, np.inf) for _ in range(3)] + [([1.0, 4.0], [1.0, 3.0], 7.0, 9.0)]


def test_the_blocks_optimum_is_the_whole_models():
    lp = _lp(BLOCKS)
    got = solve_blocks(lp, None, None, 0.0)
    assert got is not None and got.termination == "optimal" and not got.failed
    assert got.blocks >= 2
    assert got.objective == pytest.approx(_whole(lp), abs=1e-6)
    assert got.bound == pytest.approx(got.objective, abs=1e-6)
    x = np.array(got.values)
    for i, (c, w, lo, up) in enumerate(BLOCKS):  # every row holds
        cols = slice(3 * i, 3 * i + len(c)) if i < 3 else slice(9, 11)
        assert lo - 1e-9 <= float(np.dot(w, x[cols])) <= up + 1e-9


def test_an_infeasible_block_is_named_and_the_others_keep_their_solution():
    blocks = BLOCKS[:3] + [([1.0, 4.0], [1.0, 3.0], 100.0, np.inf)]  # at most 10 + 30 < 100: infeasible
    lp = _lp(blocks)
    got = solve_blocks(lp, None, None, 0.0)
    assert got.termination == "infeasible" and got.objective is None
    assert [list(cols) for cols, _ in got.failed] == [[9, 10]]
    assert got.values[9] is None and got.values[10] is None
    assert all(v is not None for v in got.values[:9])


def test_a_model_that_does_not_split_is_left_to_the_caller():
    lp = _lp([BLOCKS[0]])
    assert solve_blocks(lp, None, None, 0.0) is None


def test_small_components_are_gathered_into_one_block(monkeypatch):
    monkeypatch.setattr(components, "BLOCK_MIN_COLUMNS", 200)
    lp = _lp(BLOCKS)
    got = solve_blocks(lp, None, None, 0.0)
    assert got.blocks == 1 and got.objective == pytest.approx(_whole(lp), abs=1e-6)


def _with_empty_row(lp, upper: float):
    """``lp`` with one more row that has no columns, ``-inf <= 0 <= upper``: what the Pyomo
    export leaves of a row whose every column is fixed, its fixed activity moved into its bound."""
    lp.num_row_ += 1
    lp.row_lower_ = np.append(np.asarray(lp.row_lower_, dtype=float), -np.inf)
    lp.row_upper_ = np.append(np.asarray(lp.row_upper_, dtype=float), upper)
    return lp


def test_a_row_of_fixed_columns_within_the_feasibility_tolerance_is_met():
    """Issue 41 regression: the pod stage's overage start holds the other regions at the placed
    start's values; one of their TTFT rows (c_prefill_ttft_dcn, every column held) was over its
    bound by 6.3e-9 -- the placed start's own HiGHS residual, 160 times below HiGHS's MIP
    feasibility tolerance -- and the solve was declared infeasible ('a row without columns
    excludes 0'), which sent the generated 10-region instance to the whole model's overage stage."""
    lp = _with_empty_row(_lp(BLOCKS), -6.3e-9)
    got = solve_blocks(lp, None, None, 0.0)
    assert got.termination == "optimal" and got.values is not None
    assert got.objective == pytest.approx(_whole(_lp(BLOCKS)))


def test_a_row_of_fixed_columns_beyond_the_tolerance_is_infeasible():
    lp = _with_empty_row(_lp(BLOCKS), -1e-3)
    got = solve_blocks(lp, None, None, 0.0)
    assert got.termination == "infeasible" and got.values is None


def _covering(seed: int = 4, n: int = 30, m: int = 15):
    """A random covering MIP (integer columns in [0, 3]) that HiGHS branches on: seed 4's LP
    relaxation is 91.35, its optimum 105 after a few hundred nodes."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    a = rng.integers(0, 10, size=(m, n)).astype(float)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n, m
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = rng.integers(10, 30, size=n).astype(float), np.zeros(n), np.full(n, 3.0)
    lp.row_lower_, lp.row_upper_ = a.sum(1) * 0.21 + 0.5, np.full(m, np.inf)
    s = sp.csc_matrix(a)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = s.indptr, s.indices, s.data
    lp.integrality_ = [highspy.HighsVarType.kInteger] * n
    return lp, a


def test_a_block_whose_bound_passes_stop_above_stops_with_its_fleet():
    """The placed start's restricted MIPs (fleetplan.sizing.pods.placed_start): one whose dual
    bound passes (1 + gap) x its LP bound is solved again with every kit whatever it finds, so
    its search stops there with the incumbent it has (a 'work_limit' part), not at its gap."""
    lp, a = _covering()
    whole = _whole(lp)
    got = solve_blocks(lp, None, None, 0.0, single=True, stop_above={0: 1.01 * 91.35})
    assert not got.failed and got.termination == "work_limit"
    x = np.array(got.values)
    assert np.all(a @ x >= np.asarray(lp.row_lower_) - 1e-9)  # a fleet of the model, costlier than its optimum or equal
    assert got.objective >= whole - 1e-6
    assert got.bound is not None and got.bound > 1.01 * 91.35  # stopped only once its bound was past the value


def test_a_block_that_reaches_its_gap_below_stop_above_is_solved_as_without_it():
    """A value above the block's optimum never stops it: the same search, the same solution."""
    lp, _ = _covering()
    plain = solve_blocks(lp, None, None, 0.0, single=True)
    got = solve_blocks(lp, None, None, 0.0, single=True, stop_above={0: 106.0})
    assert got.termination == plain.termination == "optimal"
    assert got.values == plain.values and got.objective == plain.objective == pytest.approx(_whole(lp))
