"""fleetplan.solvers.lparrays: a Pyomo model handed to HiGHS as arrays is, bit for bit, the
model HiGHS reads from Pyomo's MPS export of it (issue 41: the text round trip was ~0.3 s of
CPU of the brief's solve, most of it the pod stage's model) -- columns, rows, names, costs,
bounds, coefficients and integrality compared through ``Highs.getLp()`` (only the model's
name differs: the reader takes the file's)."""

from __future__ import annotations

import os

import highspy
import numpy as np
import pyomo.environ as pyo
import pytest

from fleetplan.solvers.highs import write_mps
from fleetplan.solvers.lparrays import highs_lp


def _fields(lp) -> dict:
    a = lp.a_matrix_
    out = {"num_col": lp.num_col_, "num_row": lp.num_row_, "format": a.format_, "offset": lp.offset_, "sense": lp.sense_,
           "integrality": [int(x) for x in lp.integrality_], "col_names": list(lp.col_names_), "row_names": list(lp.row_names_)}
    for k, v in (("cost", lp.col_cost_), ("col_lower", lp.col_lower_), ("col_upper", lp.col_upper_), ("row_lower", lp.row_lower_),
                 ("row_upper", lp.row_upper_), ("value", a.value_)):
        out[k] = np.asarray(v, dtype=float).tobytes()  # bit for bit (0.0 and -0.0 differ)
    out["start"], out["index"] = list(a.start_), list(a.index_)
    return out


def assert_same_as_mps(m) -> tuple[int, int]:
    """HiGHS's model from the MPS export of ``m`` and from :func:`highs_lp` of it are the same,
    and both symbol tables name the same components; returns (columns, rows)."""
    path, smap = write_mps(m)
    try:
        h1 = highspy.Highs()
        h1.setOptionValue("output_flag", False)
        assert h1.readModel(path) != highspy.HighsStatus.kError
    finally:
        os.unlink(path)
    lp, table = highs_lp(m)
    h2 = highspy.Highs()
    h2.setOptionValue("output_flag", False)
    assert h2.passModel(lp) != highspy.HighsStatus.kError
    a, b = _fields(h1.getLp()), _fields(h2.getLp())
    assert a == b
    for name in a["col_names"] + [r[4:-1] for r in a["row_names"] if r != "c_e_ONE_VAR_CONSTANT"]:
        assert smap.bySymbol.get(name) is table.bySymbol.get(name), name
    return a["num_col"], a["num_row"]


def test_every_kind_of_row_column_and_bound_is_the_exports():
    m = pyo.ConcreteModel()
    m.zero = pyo.Param(mutable=True, initialize=0.0)
    m.negzero = pyo.Param(mutable=True, initialize=-0.0)
    m.I = pyo.RangeSet(3)
    m.x = pyo.Var(m.I, within=pyo.NonNegativeIntegers)  # LI 0 / UI 10E20
    m.y = pyo.Var(bounds=(-1.5, 5.25))
    m.z = pyo.Var(within=pyo.Binary)  # BV
    m.b = pyo.Var(within=pyo.Binary, bounds=(0, 0))  # a binary with other bounds: LI / UI
    m.w = pyo.Var(within=pyo.Integers)  # unbounded integer
    m.up = pyo.Var(bounds=(None, 3.0))  # MI / UP
    m.free = pyo.Var()  # FR
    m.f = pyo.Var(initialize=2.0)
    m.f.fix()  # a constant in the rows
    m.unused = pyo.Var()  # no column, but a label
    m.o = pyo.Objective(expr=3 * m.x[1] + 0.1 * m.y + 7.25 + m.w - m.up + 1e-17 * m.free)
    m.c_ge = pyo.Constraint(expr=m.zero * m.x[2] + m.y >= m.negzero)
    m.c_range = pyo.Constraint(expr=pyo.inequality(1, m.x[1] + 2 * m.z + m.f + m.b, 9))
    m.c_eq = pyo.Constraint(expr=m.x[1] - m.y == 1 / 3)
    m.c_trivial = pyo.Constraint(expr=m.f <= 5)  # no variable: an empty row
    m.c_none = pyo.Constraint(m.I, rule=lambda m, i: pyo.Constraint.Skip if i == 2 else m.x[i] + m.free <= 4 * i)
    m.c_lhs = pyo.Constraint(expr=2.5 >= m.up + m.x[3] * 0.3)
    m.c_both = pyo.Constraint(expr=m.x[3] + m.w == m.y + m.free)
    m.sub = pyo.Block()
    m.sub.v = pyo.Var(bounds=(0, 1))
    m.sub.c = pyo.Constraint(expr=m.sub.v + m.x[1] >= 0.5)
    m.sub.off = pyo.Constraint(expr=m.sub.v <= 0.5)
    m.sub.off.deactivate()
    assert assert_same_as_mps(m) == (10, 11)  # nine variables with a coefficient (x[2] has a zero one) and ONE_VAR_CONSTANT; ten rows and its own


def test_an_objective_without_a_constant_has_no_constant_column_and_a_maximum_is_kept():
    m = pyo.ConcreteModel()
    m.x = pyo.Var(bounds=(0, 4))
    m.o = pyo.Objective(expr=2 * m.x, sense=pyo.maximize)
    m.c = pyo.Constraint(expr=m.x <= 3)
    assert assert_same_as_mps(m) == (1, 1)


def test_reused_representations_are_read_as_the_writer_reads_them():
    from fleetplan.solvers.highs import model_arrays

    m = pyo.ConcreteModel()
    m.x = pyo.Var(pyo.RangeSet(4), within=pyo.NonNegativeIntegers, bounds=(0, 9))
    m.o = pyo.Objective(expr=sum(m.x.values()))
    m.c = pyo.Constraint(expr=sum(i * m.x[i] for i in m.x) >= 7)
    first, _ = model_arrays(m)
    m.o2 = pyo.Objective(expr=sum(i * m.x[i] for i in m.x))  # what a lexicographic driver does: another objective, a cap
    m.o.deactivate()
    m.cap = pyo.Constraint(expr=m.x[1] + m.x[2] <= 5)
    again, _ = model_arrays(m, reuse_repn=True)
    assert again.num_row_ == first.num_row_ + 1
    assert_same_as_mps(m)


def test_more_than_one_objective_is_refused_as_the_writer_refuses_it():
    m = pyo.ConcreteModel()
    m.x = pyo.Var()
    m.a = pyo.Objective(expr=m.x)
    m.b = pyo.Objective(expr=2 * m.x)
    with pytest.raises(ValueError, match="More than one active objective"):
        highs_lp(m)


@pytest.mark.parametrize("name", ["gemini-ironwood", "llama70b-h100-bf16-p99"])
def test_every_model_a_solve_hands_to_highs_is_its_mps_export(name, monkeypatch):
    # the plain sizing's model (and, for the Gemini instance, the pod stage's: solvers/blockmodel.py) as they are solved
    import fleetplan.solvers.highs as highs
    from fleetplan.instance.io import load_instance
    from fleetplan.sizing import solve

    seen = []
    real = highs.highs_lp

    def checked(m):
        seen.append(assert_same_as_mps(m))
        return real(m)

    monkeypatch.setattr(highs, "highs_lp", checked)
    out = solve(load_instance(name))
    assert out.plan is not None and out.plan.status == "verified"
    assert len(seen) >= (2 if name.startswith("gemini") else 1), seen
