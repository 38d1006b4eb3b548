"""The candidate-table pieces a purchase build shares between its nodes
(fleetplan.tables.cache.TableCache, issue 18) change no number: the purchase model of a
tree with per-region demand, a workload shift and a repeated node is the same, written
as an LP file, with the shared tables and with every node's tables built from scratch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from fleetplan.purchase.io import parse_purchase
from fleetplan.purchase.model import TABLES_KEY, build_purchase_model

MID = Path(__file__).resolve().parents[2] / "benchmarks" / "purchase"


def _doc() -> dict:
    """mid-tree-3's problem (three regions with N-1 failover, two tiers, two chips,
    disaggregated) over three quarters and an explicit tree: regions at other multipliers
    (the failover mixes' diverted shares differ), a node with a workload shift (its own
    physics) and a leaf at the root's demand (a repeated node instance)."""
    doc = yaml.safe_load((MID / "mid-tree-3.yaml").read_text())
    doc["base"] = str(MID / "mid-base.yaml")
    doc["quarters"]["labels"] = doc["quarters"]["labels"][:3]
    one = {"a": 1.0, "b": 1.0, "c": 1.0}
    doc["demand"] = {"kind": "tree", "root": {"demand": one, "children": [
        {"name": "lo", "probability": 0.5, "demand": {"a": 1.1, "b": 0.8, "c": 1.3},
         "children": [{"demand": one}]},
        {"name": "hi", "probability": 0.5, "demand": {"a": 1.6, "b": 1.4, "c": 1.9},
         "workload": {"prefix_hit_rate": 0.35, "output_tokens": 300.0}, "children": [{"demand": {"a": 2.2, "b": 1.9, "c": 2.6}}]},
    ]}}
    return doc


def _lp(pm, path: Path) -> str:
    pm.m.write(str(path), io_options={"symbolic_solver_labels": True})
    return path.read_text()


def test_shared_tables_build_the_same_model(tmp_path):
    p = parse_purchase(_doc())
    cache: dict = {}
    shared = build_purchase_model(p, cache=cache)
    alone = build_purchase_model(p, cache={}, share_tables=False)
    tables = cache[TABLES_KEY]
    assert tables.hits > 0  # the nodes did share: the cache is not inert
    a, b = _lp(shared, tmp_path / "shared.lp"), _lp(alone, tmp_path / "alone.lp")
    assert len(a) > 10_000 and a == b
    # and the tables themselves, bit for bit (the LP holds what the model uses of them)
    for n in shared.data:
        d1, d2 = shared.data[n], alone.data[n]
        assert d1.decode == d2.decode and d1.excluded == d2.excluded
        assert d1.p_max_slices == d2.p_max_slices and d1.p_min_slices == d2.p_min_slices
        assert sorted(d1.prefill) == sorted(d2.prefill)
        for key, c1 in d1.prefill.items():
            c2 = d2.prefill[key]
            assert np.array_equal(c1.capacity_erlangs, c2.capacity_erlangs), (n, key)
            assert (c1.service_ms, c1.profile, c1.budget_ms, c1.percentile, c1.ttft_limit_ms) == \
                   (c2.service_ms, c2.profile, c2.budget_ms, c2.percentile, c2.ttft_limit_ms)


def test_a_workload_shift_gets_its_own_tables():
    # the shifted node's decode tables differ from the root's (another output length and hit
    # rate): a key that left the workload out would have handed it the root's
    p = parse_purchase(_doc())
    pm = build_purchase_model(p)
    root, hi = pm.data[0], pm.data[2]
    assert hi.inst.workload.output_tokens == 300.0 and root.inst.workload.output_tokens != 300.0
    assert any(root.decode[k].tokens_per_s != hi.decode[k].tokens_per_s for k in root.decode)
    assert any(root.prefill[k].service_ms != hi.prefill[k].service_ms for k in root.prefill)
