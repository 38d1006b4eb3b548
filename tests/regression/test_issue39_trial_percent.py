"""Issue 39's newcomer trial, item 7: ``--mip-gap 5%`` was read as 0.05 while ``purchase
--risk cvar:90%:0.5`` and ``sensitivity --param mfu=20%:50%`` were refused. A fraction
written as a percentage is read the same way wherever a fraction is expected
(fleetplan/percent.py); a percentage where the unit is not a fraction is refused, naming
the unit."""

from __future__ import annotations

import pytest

from fleetplan.errors import InputError
from fleetplan.report.sensitivity import parse_params
from tests.conftest import tiny_data


def test_risk_takes_percentages():
    from fleetplan.purchase.io import load_purchase, with_risk
    from pathlib import Path

    p = load_purchase(Path(__file__).resolve().parents[2] / "benchmarks" / "purchase" / "worked-example.yaml")
    a, b = with_risk(p, "cvar:90%:50%").spec.policy.risk, with_risk(p, "cvar:0.9:0.5").spec.policy.risk
    assert (a.alpha, a.weight) == pytest.approx((0.9, 0.5)) and (a.alpha, a.weight) == pytest.approx((b.alpha, b.weight))


def test_sensitivity_param_takes_percentages_for_fractions():
    data = tiny_data()
    (r,) = parse_params(["mfu=20%:50%"], data)
    assert (r.param.name, r.low, r.high) == ("prefill_mfu", pytest.approx(0.2), pytest.approx(0.5))
    (r,) = parse_params(["hit_rate=0.1:25%"], data)
    assert (r.low, r.high) == (pytest.approx(0.1), pytest.approx(0.25))


def test_a_percentage_of_tokens_is_refused_naming_the_unit():
    with pytest.raises(InputError) as e:
        parse_params(["output=10%:20%"], tiny_data())
    assert "--param" in e.value.render() and "tokens" in e.value.render()
