"""Issue 16, rows 6-9: plans `solve` wrote that its own readers refused, a negative cost
written, and hostile plan files that crashed every reader or passed its checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.instance.io import parse_instance
from fleetplan.results.evaluate import Context
from fleetplan.results.loads import cost_summary
from fleetplan.sizing import solve
from fleetplan.solvers.base import SolveOptions
from tests.conftest import tiny_data

runner = CliRunner()


def _no_decode_tier() -> dict:
    """Two tiers; no slice meets the long tier's 2 ms TPOT, so no decode (nor prefill) pool
    serves it and the plan is a shortfall plan with no pool for that tier."""
    d = tiny_data(failover={"n_minus_1": True})
    d["workload"]["input_mix"] = [{"share": 0.9, "tokens": 2000}, {"share": 0.1, "tokens": 60000}]
    d["workload"]["tiers"] = [{"name": "short", "max_input_tokens": 8192},
                              {"name": "long", "max_input_tokens": None, "slo_overrides": [{"metric": "tpot", "percentile": 99, "limit_ms": 2}]}]
    return d


@pytest.fixture(scope="module")
def shortfall_plan(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("i16plans")
    inst = d / "nodecode.yaml"
    inst.write_text(yaml.safe_dump(_no_decode_tier()), encoding="utf-8")
    out = d / "nodecode.json"
    r = runner.invoke(app, ["solve", str(inst), "--write-unverified", "-o", str(out)])
    assert r.exit_code == 3 and out.exists(), r.output
    assert json.loads(out.read_text())["status"] == "shortfall"
    return out


# Row 6: a file `solve` wrote, unchanged, passes every reader's checks; report shows a
# shortfall plan as it is, with a note -- also when a tier has no decode pool.
@pytest.mark.parametrize("argv", [["whatif", "{p}", "--lose", "a"], ["place", "{p}"], ["report", "{p}", "--json"]],
                         ids=["whatif", "place", "report"])
def test_row6_a_shortfall_plan_with_a_tier_without_pools_is_read(shortfall_plan: Path, argv, tmp_path):
    r = runner.invoke(app, [a.format(p=shortfall_plan, d=tmp_path) for a in argv])
    assert "serves none of that traffic" not in r.output and "edited after" not in r.output, r.output
    assert r.exit_code in (0, 3), r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    if argv[0] == "report":
        assert r.exit_code == 0 and "shortfall" in r.stderr


# Row 7: a colocated replica past 100% load has an evaluator prefill share above 1, and the
# decode side of the $ per 1M tokens went negative (llama70b-h100 at 100,000 req/s: -1.12).
def test_row7_no_negative_cost_per_1m_tokens():
    inst = parse_instance(tiny_data(serving={"mode": "colocated"}, regions={"a": {"peak_rps": 100000}}), "tiny")
    plan = solve(inst, SolveOptions(time_limit_s=60)).plan
    assert plan is not None
    c = cost_summary(inst, Context(inst), plan.pools, plan.warm_pool, plan.fleet)  # the figures, not withheld
    for name, v in c.model_dump().items():
        if isinstance(v, float):
            assert v >= 0, (name, v)


def _edited(plan: Path, tmp_path: Path, edit) -> Path:
    doc = json.loads(plan.read_text())
    text = edit(doc)
    out = tmp_path / "edited.json"
    out.write_text(text if isinstance(text, str) else json.dumps(doc), encoding="utf-8")
    return out


def _refused(path: Path, *expect: str) -> None:
    for argv in (["whatif", str(path), "--lose", "a"], ["place", str(path)], ["report", str(path), "--json"],
                 ["simulate", str(path), "-r", "a"]):
        r = runner.invoke(app, argv)
        assert r.exit_code == 2, (argv[0], r.output)
        assert isinstance(r.exception, SystemExit), (argv[0], repr(r.exception))
        for e in expect:
            assert e in r.stderr, (argv[0], r.stderr)


# Row 8: a 5,000-digit schema_version, a lone surrogate, shed_rps 1e308 (and 1e17, past
# the arrivals): tracebacks in every reader before; now exit 2 naming the field.
def test_row8_a_5000_digit_integer(shortfall_plan, tmp_path):
    p = _edited(shortfall_plan, tmp_path, lambda d: json.dumps(d).replace('"schema_version": ' + json.dumps(d["schema_version"]),
                                                                          '"schema_version": ' + "9" * 5000))
    _refused(p, "5,000 digits")


def test_row8_a_lone_surrogate(shortfall_plan, tmp_path):
    p = _edited(shortfall_plan, tmp_path, lambda d: d.update(instance_name="\ud800"))
    _refused(p, "instance_name", "lone surrogate")


@pytest.mark.parametrize("value,expect", [(1e308, "out of range"), (1e17, "shed_rps <= arrivals_rps")])
def test_row8_shed_out_of_range(shortfall_plan, tmp_path, value, expect):
    p = _edited(shortfall_plan, tmp_path, lambda d: d["scenarios"][0]["pools"][0].update(shed_rps=value))
    _refused(p, "scenarios[0].pools[0]", expect)


# Row 9: one scenario's pools repeated: the records check read each pool once and passed.
def test_row9_a_scenario_pool_given_twice(shortfall_plan, tmp_path):
    p = _edited(shortfall_plan, tmp_path, lambda d: d["scenarios"][0].update(pools=d["scenarios"][0]["pools"] * 3))
    _refused(p, "given twice")
