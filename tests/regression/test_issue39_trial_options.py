"""Issue 39's newcomer trial, item 5: numeric options given with a unit said only typer's
"Input should be a valid number, unable to parse string as a number" (``simulate
--duration 5m``, ``--warmup 1m``, ``workload fit --hit-rate-cache-gb 10GB``). Each now
says the option and the unit it takes, as --time-limit does (fleetplan/cli/common.py,
number_parser)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app

runner = CliRunner()


@pytest.mark.parametrize("args,option,unit", [
    (["simulate", "plan.json", "--region", "a", "--duration", "5m"], "--duration", "seconds"),
    (["simulate", "plan.json", "--region", "a", "--warmup", "1m"], "--warmup", "seconds"),
    (["simulate", "plan.json", "--region", "a", "--scale", "half"], "--scale", "fraction"),
    (["workload", "fit", "t.csv", "--hit-rate-cache-gb", "10GB"], "--hit-rate-cache-gb", "GB"),
    (["workload", "fit", "t.csv", "--window", "1m"], "--window", "seconds"),
    (["workload", "fit", "t.csv", "--scv-timescale", "1s"], "--scv-timescale", "seconds"),
    (["workload", "fit", "t.csv", "--block-tokens", "512tok"], "--block-tokens", "tokens"),
    (["levers", "--safe-batch", "128req"], "--safe-batch", "requests per slice"),
])
def test_a_numeric_option_with_a_unit_says_the_unit(args, option, unit):
    r = runner.invoke(app, args)
    text = " ".join(r.stderr.replace("│", " ").split())
    assert r.exit_code == 2 and option in text and unit in text and "Input should be" not in text, text
