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
from dataclasses import dataclass, field

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
    acc = _Rows(variables, highspy.kHighsInf)
    objective, const_obj, sense_min = _objective_entries(m, blocks, acc)
    _constraint_rows(blocks, acc)
    c = _columns(m, variables, acc, const_obj)
    acc.table.bySymbol["__default_objective__"] = objective

    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = len(c.names), len(acc.names)
    lp.col_cost_ = np.array(c.cost, dtype=float)
    lp.col_lower_ = np.array(c.lower, dtype=float)
    lp.col_upper_ = np.array(c.upper, dtype=float)
    lp.row_lower_ = np.array(acc.lo, dtype=float)
    lp.row_upper_ = np.array(acc.up, dtype=float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.array(c.start, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(c.index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(c.value, dtype=float)
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = lp.num_col_, lp.num_row_
    if any(c.integer):
        lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous for i in c.integer]
    lp.sense_ = highspy.ObjSense.kMinimize if sense_min else highspy.ObjSense.kMaximize
    lp.model_name_ = m.name
    lp.col_names_ = c.names
    lp.row_names_ = acc.names
    assert all(math.isfinite(x) or abs(x) == acc.inf for x in lp.col_cost_)
    return lp, acc.table


class _Rows:
    """The export's rows as they are read: per column its (row, coefficient) entries (row -1:
    the objective), the rows' names and bounds, the symbol table and the last ``x<label>``
    given (x1..xV are the variables', in the model's order, unreferenced ones included)."""

    def __init__(self, variables: list, inf: float) -> None:
        self.col_of = {id(v): j for j, v in enumerate(variables)}
        self.entries: list[list[tuple[int, float]]] = [[] for _ in variables]
        self.table = SymbolTable()
        self.names: list[str] = []
        self.lo: list[float] = []
        self.up: list[float] = []
        self.label = len(variables)
        self.inf = inf

    def symbol(self, component) -> str:
        """The next ``x<label>``, recorded for ``component``."""
        self.label += 1
        sym = f"x{self.label}"
        self.table.bySymbol[sym] = component
        return sym

    def linear(self, repn, row: int) -> float:
        """Record ``repn``'s linear terms in ``row`` (-1: the objective); returns its constant.
        Raises RuntimeError for a nonlinear term."""
        if repn.quadratic_vars or repn.nonlinear_expr is not None:
            raise RuntimeError("Cannot write the model's arrays: a term is not linear")
        for v, coef in zip(repn.linear_vars, repn.linear_coefs):
            self.entries[self.col_of[id(v)]].append((row, coef))
        return repn.constant

    def add_row(self, repn, name: str, lo: float | None, up: float | None) -> None:
        """A row ``lo - constant <= repn's terms <= up - constant`` (None: unbounded)."""
        offset = self.linear(repn, len(self.names))
        self.names.append(name)
        self.lo.append(-self.inf if lo is None else _nz(lo - offset))
        self.up.append(self.inf if up is None else _nz(up - offset))


def _objective_entries(m, blocks: list, acc: _Rows):
    """The one active objective of ``m``'s ``blocks``, its terms recorded in ``acc``: (the
    objective, its constant for the ONE_VAR_CONSTANT column or None, whether it minimises).
    Raises ValueError for none or more than one, RuntimeError for a nonlinear one."""
    order = SortComponents.indices
    objectives = []
    for b in blocks:
        if not hasattr(b, "_repn"):
            b._repn = pyo.ComponentMap()
        for o in b.component_data_objects(pyo.Objective, active=True, sort=order, descend_into=False):
            objectives.append(o)
            if len(objectives) > 1:
                raise ValueError(f"More than one active objective defined for input model '{m.name}'; Cannot write legal MPS file")
            acc.symbol(o)
            if getattr(b, "_gen_obj_repn", True):
                repn = generate_standard_repn(o.expr)
                b._repn[o] = repn
            else:
                repn = b._repn[o]
            degree = repn.polynomial_degree()
            if degree is None:
                raise RuntimeError(f"Cannot write legal MPS file. Objective '{o.name}' has nonlinear terms that are not quadratic.")
            constant = acc.linear(repn, -1)
            sense_min = o.is_minimizing()
    if not objectives:
        raise ValueError(f"Cannot write legal MPS file: No objective defined for input model '{m}'.")
    return objectives[0], (constant if (degree == 0 or constant != 0.0) else None), sense_min


def _constraint_rows(blocks: list, acc: _Rows) -> None:
    """Every active constraint of ``blocks`` as rows of ``acc``: an equality one row, a
    ranged one two (its lower, then its upper), as Pyomo's MPS writer names them."""
    order = SortComponents.indices
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
            sym = acc.symbol(c)
            if c.equality:
                acc.add_row(repn, f"c_e_{sym}_", lbv, lbv)
                continue
            if has_lb:
                acc.add_row(repn, f"{'r_l_' if has_ub else 'c_l_'}{sym}_", lbv, None)
            if has_ub:
                acc.add_row(repn, f"{'r_u_' if has_lb else 'c_u_'}{sym}_", None, ubv)


@dataclass
class _Columns:
    """The columns in HiGHS's column-wise form: names, costs, bounds, integrality and the
    matrix's start/index/value arrays."""

    names: list[str] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    integer: list[bool] = field(default_factory=list)
    start: list[int] = field(default_factory=lambda: [0])
    index: list[int] = field(default_factory=list)
    value: list[float] = field(default_factory=list)


def _columns(m, variables: list, acc: _Rows, const_obj: float | None) -> _Columns:
    """The columns: the variables with an entry, in order, then ONE_VAR_CONSTANT (the
    objective's constant ``const_obj``, when not None; its row is added to ``acc``). Raises
    ValueError for a fixed variable in a row or a non-fixed bound."""
    inf = acc.inf
    c = _Columns()
    for j in [j for j, e in enumerate(acc.entries) if e]:
        v = variables[j]
        name = f"x{j + 1}"
        acc.table.bySymbol[name] = v
        c.names.append(name)
        cst = 0.0
        for row, coef in acc.entries[j]:
            coef = _nz(coef)
            if row < 0:
                cst = coef
            elif coef != 0:  # HiGHS's reader drops an explicit zero
                c.index.append(row)
                c.value.append(coef)
        c.start.append(len(c.index))
        c.cost.append(cst)
        if v.fixed:
            raise ValueError(f"Encountered a fixed variable ({v.name}) inside an active objective or constraint expression on model {m.name}")
        lb, ub = _bound(v.lb), _bound(v.ub)
        lb = None if lb is None else _nz(lb)
        ub = None if ub is None else _nz(ub)
        if v.is_binary() and lb == 0 and ub == 1:
            c.lower.append(0.0)
            c.upper.append(1.0)
            c.integer.append(True)
        elif v.is_binary() or v.is_integer():
            c.lower.append(-_MPS_INT_INF if lb is None else lb)
            c.upper.append(_MPS_INT_INF if ub is None else ub)
            c.integer.append(True)
        else:
            c.lower.append(-inf if lb is None else lb)
            c.upper.append(inf if ub is None else ub)
            c.integer.append(False)
    if const_obj is not None:
        row = len(acc.names)
        acc.names.append("c_e_ONE_VAR_CONSTANT")
        acc.lo.append(1.0)
        acc.up.append(1.0)
        c.names.append("ONE_VAR_CONSTANT")
        c.cost.append(_nz(const_obj))
        c.index.append(row)
        c.value.append(1.0)
        c.start.append(len(c.index))
        c.lower.append(0.0)
        c.upper.append(inf)
        c.integer.append(False)
    return c
