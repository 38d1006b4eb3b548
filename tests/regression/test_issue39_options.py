"""Issue 39 item 17: option values got weaker errors than instance fields. ``--mip-gap 5``
said only "less than or equal to 1" (not that the gap is a fraction, 0.05 = 5%);
``--time-limit 5m`` said "unable to parse string as a number" (not that it takes
seconds); ``whatif --hour worst`` worked but docs/cli.md and the README did not list it.
Every command's --mip-gap, --time-limit (and the other fraction and seconds options)
now share one parser (fleetplan/cli/common.py) whose errors say the unit."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def _err(args: list[str]) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    return " ".join(r.stderr.replace("│", " ").split())


@pytest.mark.parametrize("command", [["solve"], ["purchase"], ["sensitivity"], ["levers"]])
def test_a_mip_gap_above_one_says_it_is_a_fraction(command):
    text = _err(command + ["--mip-gap", "5"])
    assert "--mip-gap" in text and "fraction" in text and "0.05 = 5%" in text, text


@pytest.mark.parametrize("command", [["solve"], ["purchase"], ["sensitivity"], ["levers"], ["place", "plan.json"]])
def test_a_time_limit_with_a_unit_says_it_takes_seconds(command):
    text = _err(command + ["--time-limit", "5m"])
    assert "--time-limit" in text and "seconds" in text and "'5m'" in text, text


@pytest.mark.parametrize("value", ["nan", "0", "-3"])
def test_a_time_limit_out_of_range_says_seconds(value):
    text = _err(["solve", "--time-limit", value])
    assert "--time-limit" in text and "seconds" in text, text


def test_a_negative_or_nan_mip_gap_says_fraction():
    for value in ("-0.1", "nan"):
        text = _err(["solve", "--mip-gap", value])
        assert "fraction" in text and "0.05 = 5%" in text, text


def test_a_percentage_is_read_as_the_fraction(monkeypatch):
    """``--mip-gap 5%`` is the fraction 0.05 (what a planner types), read by the shared parser."""
    from fleetplan.cli.common import fraction_parser

    assert fraction_parser("--mip-gap")("5%") == pytest.approx(0.05)
    assert fraction_parser("--mip-gap")("0.01") == pytest.approx(0.01)


def test_hour_worst_is_documented():
    r = runner.invoke(app, ["whatif", "--help"])
    assert "worst" in " ".join(r.output.split())
    for page in ("docs/cli.md", "README.md"):
        text = (ROOT / page).read_text()
        hour_lines = [ln for ln in text.splitlines() if "--hour" in ln]
        assert hour_lines and any("worst" in ln for ln in hour_lines), page
