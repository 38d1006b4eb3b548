"""The strengthened sizing model reaches the monolithic model's optimum (issue 19).

What `fleetplan solve` adds to the plain formulation to solve faster, each documented in
docs/formulation.md ("Valid inequalities and pruning"), must cut off no optimum:

* ``c_fleet_min_slices``: a chosen shape has at least the slices its normal peak needs;
* dominated decode (and replica) shapes dropped (``derived._prune_dominated_linear``);
* of a region loss's 24 hours only the Pareto-maximal ones kept (``scenarios._pareto_hours``).

"Monolithic" here is the model with all three removed: no valid inequality, every shape,
every hour of every loss. Both are solved to optimality (mip_gap 0) and their objectives
must agree to HiGHS's tolerances; the monolithic model must really be larger (the test
fails if a switch stops removing anything), and its plan is verified like any other.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fleetplan.instance.scenarios as scenarios
import fleetplan.tables.derived as derived
import fleetplan.models.sizing.constraints.fleet as fleet
from fleetplan.instance.io import parse_instance
from fleetplan.sizing import solve
from fleetplan.solvers.base import SolveOptions
from tests.conftest import tiny_data

EXACT = SolveOptions(mip_gap=0.0)
#: objectives of the two models agree to this share (HiGHS' feasibility and integrality tolerances)
REL_TOL = 1e-6


@contextlib.contextmanager
def monolithic():
    """The sizing model without its valid inequality, shape pruning and scenario pruning."""
    saved = fleet.min_slices, derived._prune_dominated_linear, scenarios._pareto_hours
    fleet.min_slices = lambda d: {}
    derived._prune_dominated_linear = lambda d: None
    scenarios._pareto_hours = lambda inst, lost, absorbers: list(range(24))
    try:
        yield
    finally:
        fleet.min_slices, derived._prune_dominated_linear, scenarios._pareto_hours = saved


def both(inst):
    """(strengthened outcome, monolithic outcome), each solved to optimality."""
    strong = solve(inst, EXACT)
    with monolithic():
        plain = solve(inst, EXACT)
    for o in (strong, plain):
        assert o.plan is not None and o.plan.status in ("verified", "shortfall"), o.plan and o.plan.violations
        assert o.result.termination == "optimal", o.result.termination
    return strong, plain


def assert_same_optimum(strong, plain) -> None:
    a, b = strong.plan.solver.objective, plain.plan.solver.objective
    assert abs(a - b) <= REL_TOL * max(abs(a), abs(b), 1.0), (a, b)


def generated_instance():
    """benchmarks/generate.py's instance at 3 regions x 2 tiers x 3 chip types (each region
    two of Ironwood, Trillium and H200; N-1 with two absorbers), scaled down to 150 req/s
    so that it solves to optimality in seconds."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        from generate import generate
    finally:
        sys.path.pop(0)
    doc = generate(3, 2, 3, total_peak_rps=150.0)
    doc["placement"] = {"size_with_pods": False}  # the plain model's strengthening
    return parse_instance(doc, "gen-r3-t2-c3")


@pytest.mark.slow  # 12 s: two optimal solves of a 73-scenario model; `pytest -m slow` runs it
def test_the_generated_instance_strengthened_reaches_the_monolithic_optimum():
    inst = generated_instance()
    strong, plain = both(inst)
    assert_same_optimum(strong, plain)
    # the switches did something: the valid inequality has rows and pruning removed shapes
    assert any(n > 0 for n in fleet.min_slices(strong.data).values())
    assert len(plain.data.p_min_slices) >= len(strong.data.p_min_slices)
    assert sum(1 for v in plain.data.p_max_slices.values() if v > 0) > sum(1 for v in strong.data.p_max_slices.values() if v > 0)


# tiny two- and three-region instances whose regions share one diurnal curve shape (so
# that most hours of a loss are dominated and the Pareto pruning removes them), with
# slice shapes 1, 2 and 4 (so that decode shapes can dominate one another); disaggregated
# only: a colocated draw costs 4-35 s here (its replica tables and verification), the
# replica shapes' pruning is the same function's other role
params = st.fixed_dictionaries({
    "regions": st.sampled_from([2, 3]),
    "peak": st.floats(5, 120),
    "tokens": st.sampled_from([1000, 4000, 12000]),
    "out": st.sampled_from([100, 400]),
    "ttft": st.sampled_from([500.0, 1500.0]),
    "tpot": st.sampled_from([30.0, 60.0]),
    "shift": st.integers(0, 6),
})


def tiny(p):
    names = "abc"[:p["regions"]]
    curve = [round(0.5 + 0.5 * max(0.0, 1 - abs(h - 14) / 8), 3) for h in range(24)]
    regions = {}
    for i, r in enumerate(names):
        load = curve[-i * p["shift"]:] + curve[:-i * p["shift"]] if i * p["shift"] else list(curve)
        regions[r] = {"peak_rps": p["peak"] * (1 + 0.3 * i), "hourly_load": load,
                      "pods": {"acc": {"installed": 0, "available_new": 40}},
                      "failover_to": [x for x in names if x != r]}
    data = tiny_data(
        chips={"acc": {"slice_shapes": [1, 2, 4]}},
        workload={"input_mix": [{"share": 1.0, "tokens": p["tokens"]}], "output_tokens": p["out"],
                  "classes": {"std": {"slos": [{"metric": "ttft", "percentile": 99, "limit_ms": p["ttft"]},
                                               {"metric": "tpot", "percentile": 99, "limit_ms": p["tpot"]}]}}},
        failover={"n_minus_1": True},
        placement={"size_with_pods": False},  # the plain model's strengthening (the pod stage fixes the routing it is given)
    )
    data["regions"] = regions
    return parse_instance(data, "strength")


def _reaches_the_monolithic_optimum(p) -> None:
    strong, plain = both(tiny(p))
    assert_same_optimum(strong, plain)
    assert len(plain.data.SCENARIOS) >= len(strong.data.SCENARIOS)


_TINY = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=5, **_TINY)
@given(params)
def test_tiny_instances_strengthened_reach_the_monolithic_optimum(p):
    """5 draws (~6 s of CPU) by default; 10 under ``-m slow`` (below)."""
    _reaches_the_monolithic_optimum(p)


@pytest.mark.slow
@settings(max_examples=10, **_TINY)
@given(params)
def test_tiny_instances_strengthened_reach_the_monolithic_optimum_ten_draws(p):
    """The 10 draws the default run made until 2026-12-07 (~12 s of CPU)."""
    _reaches_the_monolithic_optimum(p)


def test_the_scenario_pruning_removes_hours_on_a_shared_curve():
    """The switch the property test relies on: with one curve shape, a loss keeps only
    the hours no other hour dominates (here one per loss), the monolithic model all 24."""
    p = {"regions": 2, "peak": 30.0, "tokens": 1000, "out": 100, "ttft": 1500.0, "tpot": 60.0, "shift": 0}
    inst = tiny(p)
    assert len(derived.build_scenarios(inst)) == 1 + 2
    with monolithic():
        assert len(derived.build_scenarios(inst)) == 1 + 2 * 24
