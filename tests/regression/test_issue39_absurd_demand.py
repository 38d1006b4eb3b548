"""Issue 39 item 13: absurd but valid demand was a dead end -- ``peak_rps: 600000000`` (a typo
for 6,000) in two Gemini regions, ``solve --time-limit 90``: 89.8 s, exit 3, "no incumbent ...
Raise --time-limit".

Why: with 1.6e11 output tokens/s in the model's bounds, every incumbent HiGHS found for the
least-shortfall stage was refused for a residual of 6.8e-6 to 3.1e-5 -- one or two units in
the last place of those numbers, above HiGHS's absolute 1e-6 MIP feasibility tolerance. The
tolerance now scales with the model's largest bound (what double precision can meet), and
the documented least-shortfall plan comes back in seconds. Before any solve the candidate
tables also say at once that the shortfall is certain, with how many pods the demand needs
against what the inventory allows.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.tables.derived import build_model_data
from fleetplan.instance.io import parse_instance
from fleetplan.sizing import solve
from fleetplan.solvers.base import SolveOptions
from fleetplan.solvers.components import MIP_FEASIBILITY_TOLERANCE, mip_feasibility_tolerance

ABSURD = 600_000_000.0


@pytest.fixture(scope="module")
def absurd_data(gemini_data):
    data = yaml.safe_load(yaml.safe_dump(gemini_data))
    for r in ("us-east", "us-central"):
        data["regions"][r]["peak_rps"] = ABSURD
    return data


@pytest.fixture(scope="module")
def absurd(absurd_data):
    return parse_instance(absurd_data, "absurd")


def test_the_tolerance_is_what_double_precision_can_meet():
    lp = SimpleNamespace(row_lower_=np.array([-np.inf, 1e4]), row_upper_=np.array([1.62e11, np.inf]),
                         col_lower_=np.zeros(2), col_upper_=np.array([3.24e11, 1e30]))  # 1e30: HiGHS's infinity
    assert mip_feasibility_tolerance(lp) == pytest.approx(3.24e-4)  # 1e-15 x the largest finite bound
    bundled = SimpleNamespace(row_lower_=np.array([1e4]), row_upper_=np.array([1.8e6]), col_lower_=np.zeros(1), col_upper_=np.array([3.6e6]))
    assert mip_feasibility_tolerance(bundled) == MIP_FEASIBILITY_TOLERANCE  # the bundled instances' bounds keep HiGHS's default


def test_the_tables_say_at_once_that_the_shortfall_is_certain(absurd, gemini):
    d = build_model_data(absurd)
    certain = [n for n in d.notes if n.startswith("SHORTFALL CERTAIN")]
    assert len(certain) == 2 and all("the inventory allows 60 (15,360 chips)" in n for n in certain), certain
    assert any("us-east's own demand (regions.us-east.peak_rps 600,000,000 requests/s) needs at least" in n for n in certain)
    # the bound: every decode token needs a slice's capacity at its operating point -- at least the decode pools' chips
    need = int(next(n for n in certain if n.startswith("SHORTFALL CERTAIN: us-east")).split("needs at least ")[1].split(" pods")[0].replace(",", ""))
    s0 = d.SCENARIOS[0]
    decode = sum(min(-(-d.own_rps(s0, "us-east", t) * d.p_output_tokens // d.decode[(t, c, "normal")].tokens_per_s) * d.slices[c].chips
                     for c in d.CONFIGS if d.decode[(t, c, "normal")].tokens_per_s > 0) for t in d.TIERS)
    assert need * 256 >= decode > 60 * 256
    assert not any(n.startswith("SHORTFALL CERTAIN") for n in build_model_data(gemini).notes)


def test_absurd_demand_gets_the_least_shortfall_plan(absurd):
    out = solve(absurd, SolveOptions(time_limit_s=120))
    assert out.plan is not None, out.result  # before: no incumbent in the whole limit
    assert out.plan.status == "shortfall"
    assert out.plan.diagnostics[0].startswith("SHORTFALL CERTAIN: us-central") and out.plan.diagnostics[1].startswith("SHORTFALL CERTAIN: us-east")
    # the regions' pods are used: what the inventory allows is served
    normal = next(s for s in out.plan.scenarios if s.name == "normal")
    served = sum(p.arrivals_rps - p.shed_rps - p.shortfall for p in normal.pools if p.role == "prefill" and p.region == "us-east")
    assert served > 1000.0


def test_solve_warns_before_the_solve(absurd_data, tmp_path):
    (tmp_path / "absurd.yaml").write_text(yaml.safe_dump(absurd_data), encoding="utf-8")
    r = CliRunner().invoke(app, ["solve", str(tmp_path / "absurd.yaml"), "--time-limit", "120"])
    err = " ".join(r.stderr.split())
    assert r.exit_code == 3, r.output  # a shortfall plan, as documented
    assert "warning: SHORTFALL CERTAIN: us-east's own demand" in err and "needs at least" in err and "pods of ironwood" in err, err
    assert "cannot meet the SLOs" in r.stdout
