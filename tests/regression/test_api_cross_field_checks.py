"""Issue 15 item 1: the Python API refused nothing the CLI refuses.

``Instance.model_validate(d)`` accepted input-mix shares summing to 0.6 (or class shares
to 1.47), ``fleetplan.solve`` returned a 'verified' plan for it and ``fleetplan.verify``
found nothing; only ``parse_instance`` (the loader, the CLI) ran the cross-field checks.
Now the constructor runs them, and solve / verify re-check an instance built without
validation (``model_copy(update=...)``).
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

import fleetplan
from fleetplan.cli.app import app
from fleetplan.errors import InstanceError
from tests.conftest import tiny_data


def _problems(err: ValidationError):
    cause = (err.errors()[0].get("ctx") or {}).get("error")
    assert isinstance(cause, InstanceError), err  # fleetplan.errors.InconsistentInstanceError
    return cause.problems


def test_model_validate_refuses_input_mix_shares_summing_to_0_6():
    d = tiny_data(workload={"input_mix": [{"share": 0.4, "tokens": 2000}, {"share": 0.2, "tokens": 500}]})
    with pytest.raises(ValidationError) as e:
        fleetplan.Instance.model_validate(d)
    (p,) = _problems(e.value)
    assert p.path == "workload.input_mix"
    assert "sum to 1 (fractions of requests)" in p.message and "0.6" in p.message


def test_model_validate_refuses_class_shares_summing_to_1_47():
    d = tiny_data()
    d["workload"]["classes"]["std"]["share"] = 1.47
    with pytest.raises(ValidationError) as e:
        fleetplan.Instance.model_validate(d)
    # one class over 1 is the schema's own field-range error (what the CLI reports too)
    assert "workload.classes.std.share" in str(e.value) and "less than or equal to 1" in str(e.value)
    d["workload"]["classes"]["std"]["share"] = 0.7
    d["workload"]["classes"]["batch"] = {"share": 0.77, "slos": [], "sheddable": True, "spec_acceptance": 0.5}
    with pytest.raises(ValidationError) as e:
        fleetplan.Instance.model_validate(d)
    (p,) = _problems(e.value)
    assert p.path == "workload.classes" and "1.47" in p.message


def test_solve_and_verify_refuse_an_instance_built_without_validation():
    good = fleetplan.Instance.model_validate(tiny_data())
    plan = fleetplan.solve(good).plan
    assert plan is not None and plan.status == "verified"
    bad = good.model_copy(update={"workload": good.workload.model_copy(update={"input_mix": [
        good.workload.input_mix[0].model_copy(update={"share": 0.6})]})})
    with pytest.raises(InstanceError, match=r"workload\.input_mix: input-mix shares must sum to 1"):
        fleetplan.solve(bad)
    with pytest.raises(InstanceError, match=r"workload\.input_mix"):
        fleetplan.verify(bad, plan)


def test_cli_message_is_unchanged(tmp_path):
    import yaml

    d = tiny_data(workload={"input_mix": [{"share": 0.6, "tokens": 2000}]})
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(d))
    r = CliRunner().invoke(app, ["solve", str(f)])
    assert r.exit_code == 2
    assert f"invalid instance {f}: 1 problem" in r.output
    assert "workload.input_mix: input-mix shares must sum to 1 (fractions of requests); they sum to 0.6." in r.output
