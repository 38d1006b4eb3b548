"""Issue 41, interactive what-ifs: "a re-solve after changing one number (a region's peak,
a prior) reuses the tables that did not change". The plan is the same bytes with and
without the table cache -- computed afresh, read from memory, read from disk in a new
process -- for the instance, for it with one region's peak changed and for it with a prior
changed; a re-solve reuses what the change does not reach (a peak: the decode pieces and the
normal regime's prefill pieces and rate searches; priors.decode_mfu: every prefill piece and
curve) and
computes the rest; ``solve`` says how many it reused on stderr, and ``--no-cache`` reads and
writes nothing."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.instance.io import parse_instance
from fleetplan.tables.cache import default_tables, reset_default_tables
from fleetplan.sizing import solve
from tests.conftest import tiny_data
from tests.unit.test_table_keys import RICH

pytestmark = pytest.mark.fresh_table_cache  # tests/conftest.py: its own empty table-cache folder


def _doc() -> dict:
    return parse_instance(tiny_data(**RICH), "rich").model_dump(mode="json")


def _variants() -> dict:
    base = _doc()
    peak = pickle.loads(pickle.dumps(base))
    peak["regions"]["a"]["peak_rps"] = 31.0
    prior = pickle.loads(pickle.dumps(base))
    prior["priors"]["decode_mfu"] = 0.3
    return {name: parse_instance(doc, "rich") for name, doc in (("base", base), ("peak", peak), ("prior", prior))}


def _plan(inst) -> str:
    out = solve(inst)
    assert out.plan is not None and out.plan.status == "verified"
    return out.plan.model_dump_json()


@pytest.fixture(scope="module")
def uncached():
    """Each variant's plan solved with no cache at all (FLEETPLAN_CACHE=0)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("FLEETPLAN_CACHE", "0")
    try:
        assert default_tables() is None
        return {name: _plan(inst) for name, inst in _variants().items()}
    finally:
        mp.undo()


def test_plans_are_the_same_bytes_with_the_cache_and_reuse_what_did_not_change(uncached):
    v = _variants()
    tables = default_tables()
    with tables.counting() as cold:
        assert _plan(v["base"]) == uncached["base"]
    assert cold.reused == 0 and cold.computed > 50
    with tables.counting() as warm:
        assert _plan(v["base"]) == uncached["base"]
    assert (warm.memory, warm.computed, warm.extended) == (cold.computed, 0, 0)
    reset_default_tables()  # a new process: the pieces come from disk
    tables = default_tables()
    with tables.counting() as disk:
        assert _plan(v["base"]) == uncached["base"]
    assert (disk.disk, disk.computed) == (cold.computed, 0)

    # one region's peak: the decode pieces read no demand; the normal regime's prefill pieces
    # neither (the failover mixes' diverted shares and the pools' sizes are what changes)
    with tables.counting() as peak:
        assert _plan(v["peak"]) == uncached["peak"]
    # (nor the normal regime's replica rate searches, which go on to the new pool sizes; a failover
    # mix's are new: its own and diverted prompts' weights follow the peaks)
    fam = peak.by_family
    assert set(fam["decode"]) == {"memory"}
    assert fam["prefill"].get("memory", 0) > 0 and fam["prefill"].get("computed", 0) > 0
    assert fam["replica"].get("memory", 0) > 0 and fam["replica"].get("extended", 0) > 0

    # a decode prior: every prefill piece and capacity curve reused, the decode and replica pieces computed.
    # A prefill pool's capacity curve is the TTFT percentile of the sum's (issue 40), a prefill piece
    # under the prefill family's key (tables.prefill._sum_curve), not a by-value 'curve' piece: every prefill
    # piece the cold build computed, its curves among them, is read from memory, and no curve apart
    with tables.counting() as prior:
        assert _plan(v["prior"]) == uncached["prior"]
    fam = prior.by_family
    assert fam["prefill"] == {"memory": cold.by_family["prefill"]["computed"]} and "curve" not in fam
    assert set(fam["decode"]) == {"computed"} and set(fam["replica"]) == {"computed"}


def _solve_cli(args: list[str]):
    r = CliRunner().invoke(app, ["solve", *args])
    assert r.exit_code == 0, r.output
    return r


def test_solve_says_what_it_reused_and_no_cache_keeps_nothing(tmp_path):
    path = tmp_path / "rich.yaml"
    import yaml

    path.write_text(yaml.safe_dump(_doc()))
    cache = Path(default_tables().disk.root)
    first = _solve_cli([str(path), "-o", str(tmp_path / "a.json")])
    assert "candidate tables: 0 of " in first.stderr and "reused from the table cache" in first.stderr
    entries = sorted(p for p in cache.rglob("*") if p.is_file())
    assert entries
    reset_default_tables()
    again = _solve_cli([str(path), "-o", str(tmp_path / "b.json")])
    n = first.stderr.split("candidate tables: 0 of ")[1].split()[0]
    assert f"candidate tables: {n} of {n} pieces reused" in again.stderr and ", 0 computed" in again.stderr
    # --no-cache: no note, no entry read or written, the same plan
    for p in entries:
        p.unlink()
    reset_default_tables()
    off = _solve_cli([str(path), "-o", str(tmp_path / "c.json"), "--no-cache"])
    assert not any(x.startswith("candidate tables") for x in off.stderr.splitlines())  # the note (progress lines name the phase)
    assert not [p for p in cache.rglob("*") if p.is_file()]
    a, b, c = ((tmp_path / f"{x}.json").read_bytes() for x in "abc")
    assert a == b == c
