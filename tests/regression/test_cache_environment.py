"""The table cache's environment variables are input: a bad one is refused with exit 2 naming
it and its unit, before any work (newcomer trial: FLEETPLAN_CACHE_MAX_MB=0 or -5 emptied a
warm cache without a word, 'abc' fell back to the default, and a FLEETPLAN_CACHE_DIR that is
a file was reported as the cache's folder)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app

pytestmark = pytest.mark.fresh_table_cache  # tests/conftest.py: its own empty table-cache folder


@pytest.mark.parametrize("value", ["0", "-5", "abc", "nan", "inf"])
def test_a_bad_size_bound_is_refused(value, monkeypatch):
    monkeypatch.setenv("FLEETPLAN_CACHE_MAX_MB", value)
    r = CliRunner().invoke(app, ["perf"])
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())
    assert f"FLEETPLAN_CACHE_MAX_MB={value!r}" in text and "megabytes (MB)" in text and "FLEETPLAN_CACHE=0" in text


def test_a_cache_folder_that_is_a_file_is_refused_and_the_cache_off_checks_nothing(tmp_path, monkeypatch):
    f = tmp_path / "afile"
    f.write_text("not a folder")
    monkeypatch.setenv("FLEETPLAN_CACHE_DIR", str(f))
    r = CliRunner().invoke(app, ["perf"])
    assert r.exit_code == 2 and "expected a folder" in " ".join(r.output.split())
    assert f.read_text() == "not a folder"
    monkeypatch.setenv("FLEETPLAN_CACHE", "0")
    monkeypatch.setenv("FLEETPLAN_CACHE_MAX_MB", "abc")
    assert CliRunner().invoke(app, ["perf"]).exit_code == 0
