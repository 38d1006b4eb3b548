"""Issue 16 newcomer trial S2: `solve --write-unverified` wrote a shortfall plan whose
pool for `lose:us-east@02` recorded ``"shortfall": -2.29161e-08`` -- HiGHS's value of a
variable bounded below by 0, inside its 1e-7 feasibility tolerance -- and every reader
(`report`, `whatif`, `place`, `simulate`) refused the file as edited ("sheds, shortfall
or warm slices out of range"). The extraction now snaps such noise to the bound; the
readers' message quotes the shortfall and warm slices it checks."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.cli.common import dumps_json
from fleetplan.instance.derived import build_model_data
from fleetplan.instance.io import parse_instance
from fleetplan.models.sizing.build import build_sizing_model
from fleetplan.sizing.extract import extract_plan
from fleetplan.results.verify import verify
from fleetplan.solvers.base import SolveOptions
from fleetplan.solvers.highs import solve_highs
from tests.conftest import tiny_data

runner = CliRunner()


def test_solver_noise_below_zero_is_not_written_and_the_plan_reads_back(tmp_path):
    data = tiny_data(failover={"n_minus_1": True}, placement={"size_with_pods": False})  # the plain model, extracted directly
    inst = parse_instance(data, "noise")
    d = build_model_data(inst)
    m = build_sizing_model(d)
    res = solve_highs(m, SolveOptions())
    assert res.has_incumbent
    # what HiGHS returned in the trial: a shortfall of -2.29e-08 within its tolerance, and a shed too
    for v in list(m.v_short_decode.values()) + list(m.v_shed_rps.values()):
        v.set_value(-2.29161e-08, skip_validation=True)
    plan = extract_plan(d, m, res, {"solver": "highs"}, 1)
    pools = [p for s in plan.scenarios for p in s.pools]
    assert all(p.shortfall >= 0 and p.shed_rps >= 0 and p.shed_diverted_rps >= 0 for p in pools)
    assert verify(inst, plan) == []
    (tmp_path / "p.json").write_text(dumps_json(plan.model_dump(mode="json")), encoding="utf-8")
    r = runner.invoke(app, ["report", str(tmp_path / "p.json"), "--json"])
    assert r.exit_code == 0, r.output


def test_a_negative_shortfall_is_quoted_when_refused(tmp_path):
    (tmp_path / "inst.yaml").write_text(yaml.safe_dump(tiny_data(failover={"n_minus_1": True})), encoding="utf-8")
    assert runner.invoke(app, ["solve", str(tmp_path / "inst.yaml"), "-o", str(tmp_path / "p.json")]).exit_code == 0
    doc = json.loads((tmp_path / "p.json").read_text())
    doc["scenarios"][0]["pools"][0]["shortfall"] = -0.5
    (tmp_path / "bad.json").write_text(json.dumps(doc), encoding="utf-8")
    r = runner.invoke(app, ["report", str(tmp_path / "bad.json")])
    assert r.exit_code == 2 and "shortfall -0.5" in " ".join(r.stderr.split()), r.output


def test_an_edited_instance_name_and_non_utf8_bytes_are_refused_in_words(tmp_path):
    """Newcomer trial N3/N4: a plan whose instance_name was replaced (by 5,000,000 'A's) was
    accepted and the name ignored; a byte 0xff gave the codec's own text."""
    (tmp_path / "inst.yaml").write_text(yaml.safe_dump(tiny_data()), encoding="utf-8")
    assert runner.invoke(app, ["solve", str(tmp_path / "inst.yaml"), "-o", str(tmp_path / "p.json")]).exit_code == 0
    doc = json.loads((tmp_path / "p.json").read_text())
    doc["instance_name"] = "A" * 100_000
    (tmp_path / "name.json").write_text(json.dumps(doc), encoding="utf-8")
    r = runner.invoke(app, ["report", str(tmp_path / "name.json")])
    text = " ".join(r.stderr.split())
    assert r.exit_code == 2 and "instance_name" in text and "is not the embedded instance's name 'tiny'" in text, r.output
    assert len(r.stderr) < 2000  # the value quoted is bounded
    raw = (tmp_path / "p.json").read_bytes()
    (tmp_path / "ff.json").write_bytes(raw[:100] + b"\xff" + raw[100:])
    for cmd in (["report", str(tmp_path / "ff.json")], ["whatif", str(tmp_path / "ff.json"), "--lose", "a"]):
        r = runner.invoke(app, cmd)
        assert r.exit_code == 2 and "not UTF-8 text (byte 100)" in " ".join(r.stderr.split()), r.output
