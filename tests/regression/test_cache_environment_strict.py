"""A newcomer's findings on the table cache's environment (main a025c48): FLEETPLAN_CACHE=abc,
2 or yes were taken silently (anything but 0/off/false/no meant "on") while
FLEETPLAN_CACHE_MAX_MB was refused with exit 2; FLEETPLAN_CACHE_MAX_MB=1e-9 was accepted (a
bound of one thousandth of a byte: every write emptied the cache); and a FLEETPLAN_CACHE_DIR
nothing can be written to (under a file, or in /proc) exited 0 saying "0 of 10 pieces
reused" on every run, with no word that nothing could be stored."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.tables import store
from tests.conftest import tiny_data

pytestmark = pytest.mark.fresh_table_cache  # tests/conftest.py: its own empty table-cache folder


@pytest.mark.parametrize("value", ["abc", "2", "onn", "-1"])
def test_an_unknown_cache_switch_is_refused_naming_the_accepted_values(value, monkeypatch):
    monkeypatch.setenv("FLEETPLAN_CACHE", value)
    r = CliRunner().invoke(app, ["perf"])
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())
    assert f"FLEETPLAN_CACHE={value!r}" in text and "0, off, false or no" in text and "1, on, true or yes" in text


@pytest.mark.parametrize("value", ["1", "on", "TRUE", "yes", "0", "Off", "false", "no"])
def test_the_switch_values_accepted_before_still_are(value, monkeypatch):
    monkeypatch.setenv("FLEETPLAN_CACHE", value)
    assert store.environment_problem() is None
    assert store.cache_enabled() == (value.lower() in ("1", "on", "true", "yes"))


@pytest.mark.parametrize("value", ["1e-9", "0.5", "0.999"])
def test_a_size_bound_below_the_floor_is_refused(value, monkeypatch):
    monkeypatch.setenv("FLEETPLAN_CACHE_MAX_MB", value)
    r = CliRunner().invoke(app, ["perf"])
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())
    assert f"FLEETPLAN_CACHE_MAX_MB={value!r}" in text and "at least 1 MB" in text
    monkeypatch.setenv("FLEETPLAN_CACHE_MAX_MB", "1")
    assert store.environment_problem() is None


def _solve(tmp_path, monkeypatch, folder: str):
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(tiny_data()))
    monkeypatch.setenv("FLEETPLAN_CACHE_DIR", folder)
    from fleetplan.tables.cache import reset_default_tables

    reset_default_tables()
    return CliRunner().invoke(app, ["solve", str(tmp_path / "t.yaml"), "-o", str(tmp_path / "p.json")])


@pytest.mark.parametrize("where", ["under-a-file", "/proc/nonexist"])
def test_a_cache_folder_nothing_can_be_stored_in_is_warned_once(tmp_path, monkeypatch, where):
    if where == "under-a-file":
        (tmp_path / "afile").write_text("not a folder")
        folder = str(tmp_path / "afile" / "sub")
    else:
        folder = where
    r = _solve(tmp_path, monkeypatch, folder)
    assert r.exit_code == 0, r.output  # the tables are computed: still a plan
    text = " ".join(r.output.split())
    assert text.count("warning:") == 1 and f"FLEETPLAN_CACHE_DIR={folder!r}" in text, text
    assert "nothing can be stored" in text and "every run computes" in text
    assert (tmp_path / "afile").read_text() == "not a folder" if where == "under-a-file" else True


def test_a_writable_cache_folder_is_not_warned(tmp_path, monkeypatch):
    r = _solve(tmp_path, monkeypatch, str(tmp_path / "cache"))
    assert r.exit_code == 0 and "warning:" not in r.output and "nothing can be stored" not in r.output, r.output


def test_a_bound_smaller_than_one_commands_tables_is_said_once(tmp_path):
    """FLEETPLAN_CACHE_MAX_MB=1 with gemini-ironwood (9.8 MB of tables) emptied the cache at
    every run without a word; here a 60 kB bound and ~200 kB written by one store."""
    store.take_warnings()
    s = store.DiskStore(tmp_path, "f" * 64, max_bytes=60_000)
    for i in range(20):
        assert s.put(("piece", i), bytes(10_000))
    assert s.evict() > 0 or s.size_bytes() <= 60_000
    notes = store.take_warnings()
    assert len(notes) == 1 and "FLEETPLAN_CACHE_MAX_MB" in notes[0] and "0.06 MB" in notes[0], notes
    assert "a run may remove what earlier runs kept" in notes[0]
    s.put(("piece", 99), bytes(10_000)), s.evict()
    assert store.take_warnings() == []  # once
    big = store.DiskStore(tmp_path / "big", "f" * 64, max_bytes=10**9)
    big.put(("piece", 0), bytes(10_000)), big.evict()
    assert store.take_warnings() == []


def test_a_cache_folder_with_stray_spaces_is_the_folder_without_them(tmp_path, monkeypatch):
    """FLEETPLAN_CACHE_DIR=' /tmp/x/c1' (a stray space) made a folder tree named ' ' in the
    working directory -- inside a git clone, in a newcomer's trial; the spaces are dropped."""
    from fleetplan.tables.store import cache_root

    monkeypatch.setenv("FLEETPLAN_CACHE_DIR", f"  {tmp_path / 'c1'} ")
    assert cache_root() == tmp_path / "c1"
