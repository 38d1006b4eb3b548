"""Issue 41 (interactive what-ifs) with issue 40's physics sources: the candidate tables of
an instance with a ``physics:`` block are read through its held sources (each the instance
with one source's priors), so the table cache keys them by those sources' priors. A held
source's prior edited re-computes what it reaches -- and the plan is the bytes of a build
without the cache; the other source's pieces are reused; which source ``hold: slowest``
picks (it reads priors a family leaves out of its key) is in the key."""

from __future__ import annotations

import pickle

import pytest

from fleetplan.instance.io import parse_instance
from fleetplan.instance.physics import held_instances
from fleetplan.tables.cache import UNREAD, default_tables, family_key
from tests.conftest import tiny_data
from tests.regression.test_issue41_table_cache import _plan
from tests.unit.test_table_keys import RICH

pytestmark = pytest.mark.fresh_table_cache  # tests/conftest.py: its own empty table-cache folder

SOURCES = {"include_base": False, "sources": [{"name": "kernels", "priors": {"decode_mfu": 0.35}},
                                               {"name": "e2e", "priors": {"prefill_mfu": 0.3, "decode_mfu": 0.45}}]}


def _doc(hold: str = "all") -> dict:
    return parse_instance(tiny_data(**RICH, physics={**SOURCES, "hold": hold}), "robust").model_dump(mode="json")


def _with(doc: dict, path: list, value) -> dict:
    out = pickle.loads(pickle.dumps(doc))
    node = out
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return out


@pytest.fixture(scope="module")
def variants():
    base = _doc()
    changed = _with(base, ["physics", "sources", 0, "priors", "decode_mfu"], 0.3)  # one held source's decode prior
    return {"base": parse_instance(base, "robust"), "changed": parse_instance(changed, "robust")}


@pytest.fixture(scope="module")
def uncached(variants):
    mp = pytest.MonkeyPatch()
    mp.setenv("FLEETPLAN_CACHE", "0")
    try:
        assert default_tables() is None
        return {name: _plan(inst) for name, inst in variants.items()}
    finally:
        mp.undo()


def test_a_held_sources_prior_recomputes_its_pieces_and_the_plan_is_the_uncached_one(variants, uncached):
    base, changed = variants["base"], variants["changed"]
    # the edited source's decode and replica keys move, its prefill key (decode_mfu unread) and the other source's do not
    (_, k0), (_, e0) = held_instances(base)
    (_, k1), (_, e1) = held_instances(changed)
    assert family_key(k1, "decode") != family_key(k0, "decode") and family_key(k1, "replica") != family_key(k0, "replica")
    assert family_key(k1, "prefill") == family_key(k0, "prefill")
    assert all(family_key(e1, f) == family_key(e0, f) for f in UNREAD)
    assert family_key(changed, "decode") != family_key(base, "decode")

    tables = default_tables()
    with tables.counting() as cold:
        assert _plan(base) == uncached["base"]
    assert cold.reused == 0 and cold.computed > 0
    with tables.counting() as again:
        assert _plan(changed) == uncached["changed"]
    fam = again.by_family
    assert set(fam["decode"]) == {"computed"}  # the held sources' least-favourable decode tables
    # every prefill piece -- the capacity curves of the TTFT sum are prefill pieces (tables.prefill._sum_curve) -- reused
    assert fam["prefill"] == {"memory": cold.by_family["prefill"]["computed"]} and "curve" not in fam
    # each source's rate searches are its own: the edited source's anew, the other's reused
    assert fam["replica"].get("computed", 0) > 0 and fam["replica"].get("memory", 0) > 0


def test_which_source_hold_slowest_picks_is_in_the_key():
    # 'kernels' inherits the instance's prefill_mfu (0.4 -> 0.1 makes it the slowest source); prefill_mfu
    # is no part of the decode family's own key, but the decode tables are computed under the picked source
    base = _doc("slowest")
    slower = _with(base, ["priors", "prefill_mfu"], 0.1)
    a, b = parse_instance(base, "robust"), parse_instance(slower, "robust")
    assert [n for n, _ in held_instances(a)] == ["e2e"] and [n for n, _ in held_instances(b)] == ["kernels"]
    for f in UNREAD:
        assert family_key(a, f) != family_key(b, f), f


def test_a_warm_re_solve_from_disk_computes_nothing_also_for_a_source_never_searched(variants, uncached):
    # MinRates searches the slowest source and only checks the others at its rate: their rate
    # memos stay empty; they are written all the same, so a new process reads every piece
    from fleetplan.tables.cache import reset_default_tables

    with default_tables().counting() as cold:
        assert _plan(variants["base"]) == uncached["base"]
    reset_default_tables()  # a new process: the pieces come from disk
    with default_tables().counting() as warm:
        assert _plan(variants["base"]) == uncached["base"]
    assert (warm.disk, warm.computed) == (cold.computed, 0), warm.by_family
