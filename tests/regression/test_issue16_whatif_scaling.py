"""Issue 16 (newcomer trial, F1): on the Gemini plan with us-east at `peak_rps: 99999999`
(`solve --write-unverified`: a shortfall plan), `fleetplan whatif --lose us-east` and
`fleetplan report` died with `RuntimeError: what-if stage 'residual shortfall' ended
infeasible without a solution ... so this is a bug` (rc 1, a traceback).

Measured, not the plan's 6-digit rounding: the what-if model is built from the instance's
loads and the plan's whole slice counts, none of them rounded. Lost at 1e8 req/s, the
decode rows carry 3e10 (output tokens x req/s) beside shedding coefficients of 0.03, and
HiGHS 1.16 declares the always-feasible model (any load may go unserved) infeasible -- six
rows suffice: a survivor tier with no slices, its clamp, shedding and decode rows. At other
hours it returned a worse point as 'optimal' (lose us-west at 00:00: 182,171,699 against
182,116,290 req/s-equivalents). Now the model takes rates in a power of ten of req/s above
1e4 req/s (`WhatIfData.rate_unit`; 1, the identity, at every ordinary load), and a first
stage that still ends without a solution is exit 3 naming the loss and why, never a
traceback; the report leaves that loss out of its cascade and says so.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import fleetplan.solvers.highs as highs
from fleetplan.cli.app import app
from fleetplan.instance.io import bundled_instance_path
from fleetplan.models.whatif.build import RATE_UNIT_ABOVE, WhatIfData, WhatIfPool, build_whatif_model
from fleetplan.solvers.base import SolveResult
from fleetplan.whatif.driver import _lexicographic
from tests.conftest import tiny_data

runner = CliRunner()

BATCH, CLAMP, OUTPUT_TOKENS = 0.03, 0.2, 300.0  # the Gemini instance's sheddable share, long-prompt share, output tokens
OWN = {"a": 601.53984, "b": 659.09962}  # the survivors' own long-tier req/s at the hour (us-west, us-central)


def _no_slices_data(lost_rps: float) -> WhatIfData:
    """The six rows HiGHS got wrong: lost region x's long tier (``lost_rps`` req/s) diverted
    to two survivors whose long tier has no slices (the shortfall plan has none), with the
    admission clamp and batch shedding available."""
    pools = {(a, "long"): WhatIfPool(a, "long", {"prefill": (None, 0), "decode": (None, 0)}, {}, own, 0.0, CLAMP) for a, own in OWN.items()}
    return WhatIfData({k: "disaggregated" for k in pools}, ["x"], sorted(OWN), ["long"], {"x": sorted(OWN)}, {("x", "long"): lost_rps},
                      {("x", a): 0.5 for a in OWN}, pools, {}, BATCH, OUTPUT_TOKENS)


@pytest.mark.parametrize("lost_rps", [1e7, 9999999.9, 1e8])
def test_a_huge_loss_onto_pools_without_slices_solves_to_its_least_residual(lost_rps):
    d = _no_slices_data(lost_rps)
    values, _wall, _notes = _lexicographic(build_whatif_model(d), 60.0)
    # nothing can be served: the clamp takes every cold long prompt, shedding the batch share
    # of the rest, and the residual is what is left
    least = (1 - BATCH) * (sum(OWN.values()) + (1 - CLAMP) * lost_rps)
    assert values["e_residual"] * d.rate_unit == pytest.approx(least, rel=1e-6)


def test_the_rate_unit_is_the_identity_at_ordinary_loads_and_a_power_of_ten_above():
    assert _no_slices_data(RATE_UNIT_ABOVE).rate_unit == 1.0  # every plan solved so far is modelled as before
    assert _no_slices_data(50.0).rate_unit == 1.0
    assert _no_slices_data(1e7).rate_unit == 1e3
    assert _no_slices_data(99999999.0).rate_unit == 1e4
    for lost in (2e4, 3.3e6, 1e9):
        d = _no_slices_data(lost)
        assert RATE_UNIT_ABOVE / 10 < lost / d.rate_unit <= RATE_UNIT_ABOVE and math.log10(d.rate_unit).is_integer()


@pytest.fixture(scope="module")
def tiny_plan(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("i16scale")
    (d / "inst.yaml").write_text(yaml.safe_dump(tiny_data(failover={"n_minus_1": True})), encoding="utf-8")
    r = runner.invoke(app, ["solve", str(d / "inst.yaml"), "-o", str(d / "plan.json")])
    assert r.exit_code == 0, r.output
    return d / "plan.json"


def _no_solution(*_a, **_k):
    return SolveResult("infeasible", "Infeasible", False, None, None, None, 0.01, "highs")


def test_a_what_if_without_a_solution_is_exit_3_with_the_reason_not_a_traceback(tiny_plan, monkeypatch):
    monkeypatch.setattr(highs, "solve_highs", _no_solution)
    r = runner.invoke(app, ["whatif", str(tiny_plan), "--lose", "a"])
    assert r.exit_code == 3, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    text = " ".join(r.stderr.split())
    assert "no what-if: lose a at" in text and "'infeasible' without a solution" in text and "failed numerically" in text
    assert "this is a bug" not in r.output


def test_the_report_leaves_an_unsolved_loss_out_of_its_cascade_and_says_why(tiny_plan, monkeypatch):
    monkeypatch.setattr(highs, "solve_highs", _no_solution)
    r = runner.invoke(app, ["report", str(tiny_plan), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["cascade"] == []
    assert doc["cascade_note"].startswith("no region-loss cascade: the what-if could not solve lose a at")


@pytest.mark.slow
def test_gemini_with_a_region_at_1e8_rps_whatif_and_report(tmp_path):
    """The trial's case end to end (a 20 s solve, then the what-if and the report)."""
    data = yaml.safe_load(bundled_instance_path("gemini-ironwood").read_text())
    data["regions"]["us-east"]["peak_rps"] = 99999999
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    plan = tmp_path / "p.json"
    r = runner.invoke(app, ["solve", str(tmp_path / "big.yaml"), "--write-unverified", "--time-limit", "20", "-o", str(plan)])
    assert r.exit_code == 3 and json.loads(plan.read_text())["status"] == "shortfall", r.output
    r = runner.invoke(app, ["whatif", str(plan), "--lose", "us-east", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["plan_status"] == "shortfall" and all(e["residual_request_equivalents"] > 9e7 for e in doc["events"])
    r = runner.invoke(app, ["report", str(plan), "--json"])
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.stdout)["cascade"]) == 3
