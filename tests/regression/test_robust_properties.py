"""Properties of robust sizing (issue 40's acceptance), on generated spreads of physics
sources over small instances (two regions, a few tens of slices; each solve well under a
second):

* a wider spread never lowers cost: adding a source to the held set (a plain range whose
  decode step is slower than every source held so far, its prefill anywhere in the range)
  leaves the optimum where it was or above it -- compared on what the solver proves, the
  wider plan's objective against the narrower plan's bound (both solves stop within the
  MIP gap);
* a plan robust to a set of sources is feasible for each single source of it: the verifier,
  run on the plan with that source's priors as the instance's one physics, finds no
  violation (only the plan's records of its operating points, which are the binding
  source's numbers, differ from a faster source's).

The spreads are drawn from a seeded generator, so the cases are the same on every run."""

from __future__ import annotations

import random

import pyomo.environ  # noqa: F401 -- before SciPy, as the CLI does
import pytest

from fleetplan.instance.io import instance_hash, parse_instance
from fleetplan.instance.physics import held_sources, physics_instance
from fleetplan.results.verify import verify
from fleetplan.sizing import solve
from tests.conftest import tiny_data

#: (serving mode, held sources before, the source that widens the spread)
CASES = []
_rng = random.Random(40)
for _k in range(6):
    _mode = ("disaggregated", "colocated")[_k % 2]
    _narrow = [{"name": f"s{i}", "step_time_scale": {"prefill": round(_rng.uniform(0.8, 1.4), 2),
                                                      "decode": round(_rng.uniform(0.8, 1.4), 2)}} for i in range(_k % 3)]
    _top = max([1.0] + [s["step_time_scale"]["decode"] for s in _narrow])
    _wide = {"name": "wider", "step_time_scale": {"prefill": round(_rng.uniform(0.8, 1.4), 2),
                                                   "decode": round(_top + _rng.uniform(0.05, 0.4), 2)}}
    CASES.append((_mode, _narrow, _wide))


def _instance(mode: str, srcs: list[dict]):
    d = tiny_data(regions={"a": {"peak_rps": 150, "failover_to": []}, "b": {"peak_rps": 60, "failover_to": []}},
                  serving={"mode": mode})
    if srcs:
        d["physics"] = {"hold": "all", "sources": srcs}
    return parse_instance(d, "tiny")


def _ids(case):
    mode, narrow, wide = case
    sc = lambda s: f"{s['step_time_scale']['prefill']}/{s['step_time_scale']['decode']}"  # noqa: E731
    return f"{mode}-[{','.join(sc(s) for s in narrow)}]+{sc(wide)}"


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_a_wider_spread_never_lowers_cost_and_holds_under_each_source(case):
    mode, narrow, wide = case
    inst_n, inst_w = _instance(mode, narrow), _instance(mode, narrow + [wide])
    assert [s.name for s in held_sources(inst_w)] == ["instance"] + [s["name"] for s in narrow] + ["wider"]
    pn, pw = solve(inst_n).plan, solve(inst_w).plan
    assert pn.status == pw.status == "verified"
    assert pw.solver.objective >= pn.solver.bound - 1e-6 * pn.solver.objective, (pn.solver, pw.solver)
    for s in held_sources(inst_w):
        single = physics_instance(inst_w, s.name)
        found = [(v.check, v.where, v.message) for v in verify(single, pw.model_copy(update={"instance_hash": instance_hash(single)}))
                 if not (v.check == "operating_point" and " claims " in v.message)]
        assert found == [], f"the plan held under every source breaks under {s.name}: {found}"


def test_the_generated_spreads_widen_the_decode_step():
    """The cases are what the properties need: each wider source's decode step is slower
    than every source held before it, and both serving modes appear."""
    assert {c[0] for c in CASES} == {"disaggregated", "colocated"}
    for _, narrow, wide in CASES:
        assert wide["step_time_scale"]["decode"] > max([1.0] + [s["step_time_scale"]["decode"] for s in narrow])
