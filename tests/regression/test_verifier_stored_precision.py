"""Issue 15 item 4: the verifier refused correct colocated plans.

* ``colocated-headroom-n1.yaml`` (15/10/5 req/s, three regions, N-1, utilisation_headroom
  0.8) exited 3 with "replica_headroom" violations: the routing shares are stored to six
  significant digits and the headroom check had no tolerance at all.
* In a plan with declared shortfall the same check ignored the shortfall and reported
  "violations -- a bug".
* With a headroom under 0.25 every binding line read "load at 25.0%, sized by normal"
  (the load search stopped at 4x).

Tolerances now come from the stored precision (``fleetplan.results.precision``), the same
in every check; and an error above it is still caught.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetplan.instance.io import load_instance, parse_instance
from fleetplan.results.verify import verify
from fleetplan.sizing import solve
from tests.conftest import tiny_data

CASE = Path(__file__).parent / "cases" / "colocated-headroom-n1.yaml"


@pytest.fixture(scope="module")
def headroom_case():
    inst = load_instance(CASE)
    return inst, solve(inst).plan


def test_colocated_headroom_plan_verifies(headroom_case):
    inst, plan = headroom_case
    assert plan.status == "verified", plan.violations
    # B carries its own 10 req/s plus a fractional share of A's 15 at exactly 80% of its SLO-limited rate
    share = next(r.share for r in plan.routing if (r.lost, r.to) == ("A", "B"))
    assert 0.0 < share < 1.0 and share != round(share, 3)
    assert "replica[B,all] sized by lose:A@00: load at 80.0% of the load its SLOs allow" in " ".join(plan.binding)


def test_a_share_off_by_more_than_its_precision_is_still_refused(headroom_case):
    inst, plan = headroom_case
    nudged = []
    for r in plan.routing:
        if r.lost == "A":
            r = r.model_copy(update={"share": round(r.share + (2e-4 if r.to == "B" else -2e-4), 6)})
        nudged.append(r)
    v = verify(inst, plan.model_copy(update={"routing": nudged}))
    assert {x.check for x in v} == {"replica_headroom"}
    assert all("replica[B,all]" in x.where and "above 80%" in x.message for x in v)


def _colocated(head: float, pods: int, rps: float):
    d = tiny_data(serving={"mode": "colocated", "utilisation_headroom": head},
                  regions={r: {"peak_rps": rps, "pods": {"acc": {"installed": 0, "available_new": pods}}} for r in ("a", "b")})
    d["chips"]["acc"]["slice_shapes"] = [1]
    return parse_instance(d, "tiny colocated")


def test_declared_shortfall_covers_the_headroom():
    # 8 one-chip replicas carry ~70.8 req/s within the SLOs, ~56.6 within the 80% headroom:
    # 65 req/s meet the SLOs but not the headroom, and the plan declares the difference
    inst = _colocated(0.8, 1, 65.0)
    plan = solve(inst).plan
    assert plan.status == "shortfall", plan.violations
    normal = plan.scenarios[0]
    for p in normal.pools:  # capacity: req/s the 8 replicas carry within the SLOs
        assert p.shortfall == pytest.approx(65.0 - 0.8 * p.capacity, rel=1e-4) and p.shortfall > 0
    # without the declared shortfall the verifier objects, naming the headroom
    bare = normal.model_copy(update={"pools": [p.model_copy(update={"shortfall": 0.0}) for p in normal.pools]})
    v = verify(inst, plan.model_copy(update={"scenarios": [bare], "status": "verified"}))
    assert {x.check for x in v} >= {"replica_headroom"}
    assert not any(x.check == "replica_slo" for x in v)


def test_binding_lines_under_a_quarter_headroom():
    plan = solve(_colocated(0.2, 10, 20.0)).plan
    assert plan.status == "verified"
    lines = [b for b in plan.binding if b.startswith("replica[")]
    assert lines and not any("25.0%" in b for b in lines)
    for b in lines:
        assert "sized to run at most 20.0% of it: the utilisation headroom" in b
        pct = float(b.split("load at ")[1].split("%")[0])
        assert 15.0 < pct <= 20.0
