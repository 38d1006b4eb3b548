"""`whatif`'s slice table printed slice counts without thousands separators ("have
1234567") while every rate beside them had them (issue 16 newcomer trial, noticed with a
region at 1e8 req/s): counts of four digits and more now read "1,234"."""

from __future__ import annotations

import re

import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from tests.conftest import tiny_data

runner = CliRunner()


def test_large_slice_counts_have_separators(tmp_path):
    big = {"installed": 0, "available_new": 20000}
    data = tiny_data(regions={"a": {"peak_rps": 20000, "pods": {"acc": big}}, "b": {"peak_rps": 20000, "pods": {"acc": big}}},
                     failover={"n_minus_1": True})
    (tmp_path / "inst.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    r = runner.invoke(app, ["solve", str(tmp_path / "inst.yaml"), "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["whatif", str(tmp_path / "p.json"), "--lose", "a"], terminal_width=200)
    assert r.exit_code == 0, r.output
    rows = [ln for ln in r.stdout.splitlines() if re.match(r"\s*all (prefill|decode) x\d", ln)]
    assert rows, r.stdout
    counts = [tok for ln in rows for tok in ln.split()[3:] if re.fullmatch(r"[\d,]+", tok)]
    assert any(int(c.replace(",", "")) >= 1000 for c in counts), rows  # the case has counts of four digits
    assert not [c for c in counts if re.fullmatch(r"\d{4,}", c)], rows
