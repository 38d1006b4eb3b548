"""The blocks of a model's constraint matrix (fleetplan.solvers.components) are its
connected components, labelled as ``scipy.sparse.csgraph.connected_components`` labels them
(kept here as the reference) -- by :func:`connected_components_of`, which does not import
``scipy.sparse.csgraph`` (it loads ``scipy.sparse.linalg`` and ``scipy.linalg``: ~0.05-0.07 s
of CPU of every solve with the pod stage, issue 41)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from fleetplan.solvers.components import connected_components_of


def _reference(a):
    from scipy.sparse.csgraph import connected_components

    pattern = (a != 0).astype(np.int8)
    return connected_components(sp.bmat([[None, pattern], [pattern.T, None]], format="csr"), directed=False)


@pytest.mark.parametrize("seed", range(6))
def test_the_labels_are_csgraphs(seed):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        m, n = int(rng.integers(1, 70)), int(rng.integers(1, 70))
        a = sp.random(m, n, density=float(rng.choice([0.005, 0.02, 0.05, 0.2])), format="csc", random_state=rng)
        if a.nnz and rng.random() < 0.4:  # explicit zeros are no edge
            a.data[rng.integers(0, a.nnz, size=max(1, a.nnz // 4))] = 0.0
        k, label = connected_components_of(a)
        k_ref, label_ref = _reference(a)
        assert k == k_ref and label.dtype == label_ref.dtype and np.array_equal(label, label_ref)


def test_a_long_chain_and_a_block_diagonal_matrix():
    n = 3000
    chain = sp.csc_matrix((np.ones(2 * n - 1), (np.r_[np.arange(n), np.arange(1, n)], np.r_[np.arange(n), np.arange(n - 1)])), shape=(n, n))
    blocks = sp.block_diag([np.ones((3, 4))] * 50 + [np.zeros((2, 2))], format="csc")
    for a in (chain, blocks, chain[::-1, ::-1].tocsc()):
        k, label = connected_components_of(a)
        k_ref, label_ref = _reference(a)
        assert k == k_ref and np.array_equal(label, label_ref)


def test_splitting_a_model_into_blocks_does_not_load_csgraph():
    """Fails before: solve_blocks imported scipy.sparse.csgraph (and with it scipy.linalg)."""
    code = """
import json, sys
import numpy as np, highspy
from fleetplan.solvers.components import solve_blocks
lp = highspy.HighsLp()
lp.num_col_, lp.num_row_ = 2, 2
lp.col_cost_, lp.col_lower_, lp.col_upper_ = np.array([1.0, 1.0]), np.zeros(2), np.full(2, 10.0)
lp.row_lower_, lp.row_upper_ = np.array([1.0, 2.0]), np.array([np.inf, np.inf])
lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = np.array([0, 1, 2]), np.array([0, 1]), np.array([1.0, 1.0])
lp.integrality_ = [highspy.HighsVarType.kInteger] * 2
got = solve_blocks(lp, None, None, 0.0, single=True)
print(json.dumps({"blocks": got.blocks, "csgraph": "scipy.sparse.csgraph" in sys.modules, "linalg": "scipy.linalg" in sys.modules}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert doc["blocks"] >= 1 and not doc["csgraph"] and not doc["linalg"], doc
