"""A Pyomo model as HiGHS's arrays, without the MPS text between them.

:func:`fleetplan.solvers.highs.write_mps` writes a model with Pyomo's MPS writer and HiGHS
reads the file back; for the pod stage's model of the brief's instance that round trip was
~0.3 s of CPU of a ~5 s solve (the generated 10-region pod model: 1.6 s per write), most of
it formatting and parsing text. :func:`highs_lp` builds the ``highspy.HighsLp`` the reader
would build from that file, directly: the same columns and rows in the same order, the same
names (Pyomo's numeric labels: ``x1``, ``x2``, ... for the variables, then the objective,
then the constraints as written; rows ``c_l_``/``c_u_``/``c_e_``/``r_l_``/``r_u_`` + label +
``_``), the same coefficients from the writer's own representations
(``generate_standard_repn``, or a constraint's canonical form; the cache of representations
:func:`fleetplan.solvers.highs._reuse_constraint_repns` fills is read the same way), the same
bounds and integrality, and the objective's constant as the writer's ``ONE_VAR_CONSTANT``
column and row. The file's numbers are ``%.17g``, which a double survives exactly, so the
arrays are bit for bit those HiGHS reads from the file (``tests/unit/test_lparrays.py``
compares ``Highs.getLp()`` of both on the bundled models) and the solves are the same.

What the MPS writer refuses this refuses too (ValueError / RuntimeError): more than one
active objective or none, a nonlinear (or quadratic) term, a fixed variable's bound or a
non-fixed bound. SOS constraints are not written by fleetplan's models and are refused.
"""

from __future__ import annotations

import math

import numpy as np
import pyomo.core as pyo  # not pyomo.environ, whose plugins this does not use (fleetplan/imports.py)
from pyomo.common.numeric_types import native_types
from pyomo.core.base.block import SortComponents
from pyomo.repn import generate_standard_repn

__all__ = ["highs_lp", "SymbolTable"]

#: what the MPS writer writes for an integer variable's missing bound (``10E20``)
_MPS_INT_INF = 10e20


class SymbolTable:
    """The names of a model's columns and rows (the MPS writer's numeric labels) to its
    components: ``bySymbol`` as Pyomo's ``SymbolMap`` (variables and constraints by their
    labels; the objective by its label and ``__default_objective__``; unreferenced variables
    left out, as the writer does)."""

    def __init__(self) -> None:
        self.bySymbol: dict[str, object] = {}


def _bound(v) -> float | None:
    """A fixed bound's value (the writer's ``_get_bound``)."""
    if v is None:
        return None
    if v.__class__ in (int, float):
        return v
    if not pyo.is_fixed(v):
        raise ValueError("non-fixed bound or weight: " + str(v))
    return pyo.value(v)


def _nz(v: float) -> float:
    """The writer's ``_no_negative_zero``: -0 becomes 0."""
    return 0.0 if v == 0 else v


def highs_lp(m: pyo.ConcreteModel):
    """(``highspy.HighsLp``, :class:`SymbolTable`) of ``m`` -- what ``Highs.readModel`` builds
    from the MPS file :func:`fleetplan.solvers.highs.write_mps` writes (module docstring).
    Raises ValueError for no active objective or more than one, a fixed variable in a row
    (the representations hold fixed variables as constants, so it does not arise), an SOS
    constraint or a non-fixed bound; RuntimeError for a nonlinear term."""
    import highspy

    order = SortComponents.indices
    blocks = list(m.block_data_objects(active=True, sort=order))
    if any(True for b in blocks for _ in b.component_data_objects(pyo.SOSConstraint, active=True, descend_into=False)):
        raise ValueError("SOS constraints are not supported by the array export; write the model to MPS")
    variables = [v for b in blocks for v in b.component_data_objects(pyo.Var, active=True, sort=order, descend_into=False)]
    col_of = {id(v): j for j, v in enumerate(variables)}
    label = len(variables)  # x1..xV are the variables', in this order (unreferenced ones included)
    entries: list[list[tuple[int, float]]] = [[] for _ in variables]  # per column: (row, coefficient); row -1 = objective
    table = SymbolTable()
    row_names: list[str] = []
    row_lo: list[float] = []
    row_up: list[float] = []
    inf = highspy.kHighsInf

    def linear(repn, row: int) -> float:
        if repn.quadratic_vars or repn.nonlinear_expr is not None:
            raise RuntimeError("Cannot write the model's arrays: a term is not linear")
        for v, coef in zip(repn.linear_vars, repn.linear_coefs):
            entries[col_of[id(v)]].append((row, coef))
        return repn.constant

    objectives = []
    for b in blocks:
        if not hasattr(b, "_repn"):
            b._repn = pyo.ComponentMap()
        for o in b.component_data_objects(pyo.Objective, active=True, sort=order, descend_into=False):
            objectives.append(o)
            if len(objectives) > 1:
                raise ValueError(f"More than one active objective defined for input model '{m.name}'; Cannot write legal MPS file")
            label += 1
            obj_label = f"x{label}"
            table.bySymbol[obj_label] = o
            if getattr(b, "_gen_obj_repn", True):
                repn = generate_standard_repn(o.expr)
                b._repn[o] = repn
            else:
                repn = b._repn[o]
            degree = repn.polynomial_degree()
            if degree is None:
                raise RuntimeError(f"Cannot write legal MPS file. Objective '{o.name}' has nonlinear terms that are not quadratic.")
            constant = linear(repn, -1)
            sense_min = o.is_minimizing()
    if not objectives:
        raise ValueError(f"Cannot write legal MPS file: No objective defined for input model '{m}'.")
    const_obj = constant if (degree == 0 or constant != 0.0) else None

    for b in blocks:
        gen = getattr(b, "_gen_con_repn", True)
        for c in b.component_data_objects(pyo.Constraint, active=True, sort=order, descend_into=False):
            # the bounds' values once (has_lb, has_ub, lower and upper each standardise the expression again, and a
            # row with variables on both sides builds its lhs - rhs each time: a third of this export's time)
            lbv, body, ubv = c.to_bounded_expression(evaluate_bounds=True)
            has_lb, has_ub = lbv is not None, ubv is not None
            if not has_lb and not has_ub:
                continue
            if c._linear_canonical_form:
                repn = c.canonical_form()
            elif gen:
                repn = generate_standard_repn(c.body if body.__class__ in native_types else body)
                b._repn[c] = repn
            else:
                repn = b._repn[c]
            if repn.polynomial_degree() is None:
                raise RuntimeError(f"Cannot write legal MPS file. Constraint '{c.name}' has nonlinear terms that are not quadratic.")
            label += 1
            sym = f"x{label}"
            table.bySymbol[sym] = c
            if c.equality:
                row = len(row_names)
                offset = linear(repn, row)
                rhs = _nz(lbv - offset)
                row_names.append(f"c_e_{sym}_")
                row_lo.append(rhs)
                row_up.append(rhs)
                continue
            if has_lb:
                row = len(row_names)
                offset = linear(repn, row)
                row_names.append(f"{'r_l_' if has_ub else 'c_l_'}{sym}_")
                row_lo.append(_nz(lbv - offset))
                row_up.append(inf)
            if has_ub:
                row = len(row_names)
                offset = linear(repn, row)
                row_names.append(f"{'r_u_' if has_lb else 'c_u_'}{sym}_")
                row_lo.append(-inf)
                row_up.append(_nz(ubv - offset))

    # columns: the variables with an entry, in order, then ONE_VAR_CONSTANT (the objective's constant)
    cols = [j for j, e in enumerate(entries) if e]
    names, cost, lower, upper, integer, start, index, value = [], [], [], [], [], [0], [], []
    for j in cols:
        v = variables[j]
        name = f"x{j + 1}"
        table.bySymbol[name] = v
        names.append(name)
        cst = 0.0
        for row, coef in entries[j]:
            coef = _nz(coef)
            if row < 0:
                cst = coef
            elif coef != 0:  # HiGHS's reader drops an explicit zero
                index.append(row)
                value.append(coef)
        start.append(len(index))
        cost.append(cst)
        if v.fixed:
            raise ValueError(f"Encountered a fixed variable ({v.name}) inside an active objective or constraint expression on model {m.name}")
        lb, ub = _bound(v.lb), _bound(v.ub)
        lb = None if lb is None else _nz(lb)
        ub = None if ub is None else _nz(ub)
        if v.is_binary() and lb == 0 and ub == 1:
            lower.append(0.0)
            upper.append(1.0)
            integer.append(True)
        elif v.is_binary() or v.is_integer():
            lower.append(-_MPS_INT_INF if lb is None else lb)
            upper.append(_MPS_INT_INF if ub is None else ub)
            integer.append(True)
        else:
            lower.append(-inf if lb is None else lb)
            upper.append(inf if ub is None else ub)
            integer.append(False)
    if const_obj is not None:
        row = len(row_names)
        row_names.append("c_e_ONE_VAR_CONSTANT")
        row_lo.append(1.0)
        row_up.append(1.0)
        names.append("ONE_VAR_CONSTANT")
        cost.append(_nz(const_obj))
        index.append(row)
        value.append(1.0)
        start.append(len(index))
        lower.append(0.0)
        upper.append(inf)
        integer.append(False)
    table.bySymbol["__default_objective__"] = objectives[0]

    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = len(names), len(row_names)
    lp.col_cost_ = np.array(cost, dtype=float)
    lp.col_lower_ = np.array(lower, dtype=float)
    lp.col_upper_ = np.array(upper, dtype=float)
    lp.row_lower_ = np.array(row_lo, dtype=float)
    lp.row_upper_ = np.array(row_up, dtype=float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.array(start, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(value, dtype=float)
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = lp.num_col_, lp.num_row_
    if any(integer):
        lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous for i in integer]
    lp.sense_ = highspy.ObjSense.kMinimize if sense_min else highspy.ObjSense.kMaximize
    lp.model_name_ = m.name
    lp.col_names_ = names
    lp.row_names_ = row_names
    assert all(math.isfinite(x) or abs(x) == inf for x in lp.col_cost_)
    return lp, table
