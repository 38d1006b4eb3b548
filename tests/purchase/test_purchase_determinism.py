"""The purchase plan does not depend on the machine's speed or load (issue 41).

A run under load (load average 8-12 on two cores) gave another plan of the bundled
example (3 pods ordered now, 488,481,000 USD) than the documented one: the pod-floor
decomposition gave every node-block solve 30 s of wall clock (FLEET_TIME_S), so on a slow
enough machine a run-cost floor, a pod floor or a node fleet stopped at its clock instead
of its gap, a weaker bound or another incumbent led the master elsewhere, and the plan
moved. Now every sub-solve stops on work (its gap, its proof, a node limit) and the wall
clock is an outer guard whose cut the plan reports. No test here reads a real clock: the
slow machine is a solver whose time limits are short by a fixed amount.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from fleetplan.purchase import floors
from fleetplan.purchase import solve as purchase_solve
from fleetplan.purchase.io import parse_purchase
from fleetplan.purchase.result import NOT_REPRODUCIBLE
from fleetplan.purchase.solve import solve_purchase
from fleetplan.solvers import highs, persistent
from fleetplan.solvers.base import SolveOptions
from tests.purchase.test_purchase_floors import TIGHT, late_clock, tree_doc, two_region_base


def slow_machine(monkeypatch, seconds: float) -> None:
    """A machine on which every HiGHS solve takes ``seconds`` of wall clock more than here: each
    solve's own time limit is that much shorter when it starts (a limit below ``seconds`` is used
    up before the solve can begin; no limit stays no limit)."""
    real = highs.solver_seconds

    def slow(options, started):
        left = real(options, started)
        return None if left is None else left - seconds

    monkeypatch.setattr(highs, "solver_seconds", slow)
    monkeypatch.setattr(persistent, "solver_seconds", slow)


def _plan(doc: dict, opts: SolveOptions, value: bool):
    return solve_purchase(parse_purchase(copy.deepcopy(doc)), opts, value=value)


@pytest.mark.parametrize("value", [False, True])
def test_a_machine_too_slow_for_30_s_a_solve_gives_the_same_plan_bytes(tmp_path, monkeypatch, value):
    # with the old 30 s per block solve the floors ended without a bound, HiGHS solved the tree in their place and
    # the plan (its notes and figures) came out other than on a fast machine with the same --time-limit
    monkeypatch.setattr(purchase_solve, "SNAPSHOT_START_INTEGERS", 0)
    doc = tree_doc(two_region_base(tmp_path, old_usd_per_chip_hour=8.0))
    opts = replace(TIGHT, time_limit_s=1000.0)
    fast = _plan(doc, opts, value)
    assert fast.status == "verified" and fast.solve.pod_floors is not None and fast.solve.pod_floors.complete
    assert fast.solve.clock_limited is None and not any(n.startswith(NOT_REPRODUCIBLE) for n in fast.notes)
    slow_machine(monkeypatch, 100.0)  # any solve given less than 100 s cannot finish; the command's 1000 s suffice
    slow = _plan(doc, opts, value)
    assert slow.model_dump_json() == fast.model_dump_json()


def test_a_plan_the_clock_cut_says_it_is_not_reproducible(tmp_path, monkeypatch):
    # the deadline passes once the first node fleet is in: the decomposition keeps its round (its fleets all came),
    # and the plan says the clock cut it -- another machine can give another plan
    monkeypatch.setattr(purchase_solve, "SNAPSHOT_START_INTEGERS", 0)
    doc = tree_doc(two_region_base(tmp_path, old_usd_per_chip_hour=8.0))
    late, Clock = late_clock()
    fleet = floors._fleet

    def fleet_then_late(*a, **k):
        out = fleet(*a, **k)
        late["on"] = True
        return out

    monkeypatch.setattr(floors, "time", Clock)
    monkeypatch.setattr(floors, "_fleet", fleet_then_late)
    plan = _plan(doc, replace(TIGHT, time_limit_s=1000.0), False)
    assert plan.status == "verified"
    assert plan.solve.clock_limited and "time limit" in plan.solve.clock_limited
    note = next(n for n in plan.notes if n.startswith(NOT_REPRODUCIBLE))
    assert "another machine" in note and plan.solve.clock_limited in note


def test_a_node_limit_is_a_work_limit_not_a_time_limit():
    # HiGHS ends a solve at mip_max_nodes with 'solution limit reached'; read as a time limit, a node-limited
    # floor would be reported as cut by the clock
    import pyomo.environ as pyo

    m = pyo.ConcreteModel()
    m.x = pyo.Var(range(12), domain=pyo.Binary)
    w = [1031, 1523, 2011, 2503, 3001, 3511, 4001, 4513, 1103, 1709, 2111, 2707]
    m.c = pyo.Constraint(expr=sum(w[i] * m.x[i] for i in range(12)) == sum(w) // 2)
    m.o = pyo.Objective(expr=sum(m.x[i] for i in range(12)))
    h = persistent.PersistentHighs(m)
    res = h.solve(SolveOptions(mip_gap=0.0), max_nodes=0)
    assert res.termination == "work_limit" and not res.has_incumbent
    assert h.solve(SolveOptions(mip_gap=0.0)).termination in ("optimal", "infeasible")


def test_the_command_warns_when_the_clock_cut_its_plan(tmp_path, monkeypatch):
    # the same clock-cut plan from the command line: the plan is written (verified) and stderr says it is not reproducible
    import yaml
    from typer.testing import CliRunner

    from fleetplan.cli.app import app

    monkeypatch.setattr(purchase_solve, "SNAPSHOT_START_INTEGERS", 0)
    f = tmp_path / "tree.yaml"
    f.write_text(yaml.safe_dump(tree_doc(two_region_base(tmp_path, old_usd_per_chip_hour=8.0))))
    late, Clock = late_clock()
    fleet = floors._fleet
    monkeypatch.setattr(floors, "time", Clock)
    monkeypatch.setattr(floors, "_fleet", lambda *a, **k: (fleet(*a, **k), late.update(on=True))[0])
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(app, ["purchase", str(f), "--no-value", "--time-limit", "1000", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "warning:" in r.stderr and NOT_REPRODUCIBLE in " ".join(r.stderr.split()) and out.exists()
