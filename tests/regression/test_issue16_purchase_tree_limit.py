"""Issue 16 (newcomer trial, S4a): a purchase tree of 2,187 scenarios was built without bound.

The bundled gemini-ironwood-2027 with ``demand.branch_at`` in 7 of its 8 quarters (3 paths:
3^7 = 2,187 scenarios, 3,280 nodes) ran `fleetplan purchase --time-limit 30` for 300 s,
its memory growing ~20 MB/s to 6.3 GB, nothing printed. The tree's size is now checked
when the file is read, for every form of the demand (growth paths counted before they
are expanded): past MAX_TREE_NODES (200) exit 2, naming the field, the count and the cap,
before any node is built.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.purchase.schema import MAX_TREE_NODES, DemandTree, Fan, GrowthPaths
from fleetplan.purchase.tree import expand_demand

runner = CliRunner()
INSTANCES = Path(__file__).resolve().parents[2] / "fleetplan" / "instances"
LABELS = [f"{y}Q{q}" for y in (2027, 2028) for q in (1, 2, 3, 4)]


@pytest.fixture
def no_build(monkeypatch):
    """Any model build fails the test: the cap must refuse the file before one."""
    def boom(*_a, **_k):
        raise AssertionError("a purchase model was built for a tree over the cap")

    import fleetplan.purchase.solve as solve

    monkeypatch.setattr(solve, "build_purchase_model", boom)


def test_the_trials_2187_scenario_tree_is_refused_before_anything_is_built(tmp_path, no_build):
    shutil.copytree(INSTANCES / "purchase", tmp_path / "purchase")
    doc = yaml.safe_load((INSTANCES / "gemini-ironwood-2027.yaml").read_text())
    doc["demand"]["branch_at"] = ["2027Q2", "2027Q3", "2027Q4", "2028Q1", "2028Q2", "2028Q3", "2028Q4"]
    f = tmp_path / "mb.yaml"
    f.write_text(yaml.safe_dump(doc))
    r = runner.invoke(app, ["purchase", str(f), "--time-limit", "30", "--no-value"])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    err = " ".join(r.stderr.split())
    assert r.exit_code == 2, r.output
    assert "demand.branch_at: the scenario tree has 3,280 nodes (2,187 scenarios)" in err, err
    assert f"a tree is at most {MAX_TREE_NODES} nodes" in err and "sizing model per node" in err and "GB" in err


def test_the_bundled_and_benchmark_trees_are_within_the_cap():
    from fleetplan.purchase.io import load_purchase

    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "purchase"
    sizes = [len(load_purchase(f).tree.nodes) for f in ["gemini-ironwood-2027", *sorted(str(p) for p in bench.glob("*tree*.yaml"))]]
    assert sizes[0] == 30 and max(sizes) <= MAX_TREE_NODES / 4, sizes


def test_a_fan_over_the_cap_names_its_paths():
    fan = Fan(kind="fan", start=1.0, paths=30, growth_per_quarter=0.05, volatility_per_quarter=0.1)  # 1 + 30 x 7 = 211 nodes
    tree, problems = expand_demand(fan, LABELS, ["a"])
    assert tree is None and [p.path for p in problems] == ["demand.paths"]
    assert "211 nodes (30 scenarios)" in problems[0].message
    ok, none = expand_demand(fan.model_copy(update={"paths": 28}), LABELS, ["a"])  # 197 nodes
    assert ok is not None and not none and len(ok.nodes) == 197


def test_growth_paths_are_counted_not_expanded():
    """10 paths branching in 4 quarters: 41,111 nodes, 10,000 scenarios, refused from the count.
    (Kept small enough that the code before the cap, which expanded it, fails the test
    rather than the machine: 100 paths in 7 quarters, 10^14 scenarios, is refused as fast.)"""
    paths = [{"name": f"p{i}", "probability": 0.1, "growth_per_quarter": 0.0} for i in range(10)]
    g = GrowthPaths(kind="growth_paths", paths=paths, branch_at=LABELS[1:5])
    tree, problems = expand_demand(g, LABELS, ["a"])
    assert tree is None and problems[0].path == "demand.branch_at" and "41,111 nodes (10,000 scenarios)" in problems[0].message
    huge = GrowthPaths(kind="growth_paths", paths=[dict(q, name=f"q{i}", probability=0.01) for i, q in enumerate(paths * 10)], branch_at=LABELS[1:])
    assert "(100,000,000,000,000 scenarios)" in expand_demand(huge, LABELS, ["a"])[1][0].message
    few = GrowthPaths(kind="growth_paths", paths=[dict(q, probability=0.2) for q in paths[:5]], branch_at=LABELS[1:3])  # 1 + 5 + 25 x 6
    tree, problems = expand_demand(few, LABELS, ["a"])
    assert not problems and len(tree.nodes) == 156 and len(tree.scenarios) == 25


def test_an_explicit_tree_over_the_cap_names_its_root():
    kids = [{"name": f"b{i}", "probability": 0.01, "demand": 1.0,
             "children": [{"name": "x", "probability": 0.5, "demand": 1.0}, {"name": "y", "probability": 0.5, "demand": 1.0}]} for i in range(100)]
    t = DemandTree.model_validate({"kind": "tree", "root": {"demand": 1.0, "children": kids}})  # 1 + 100 + 200 nodes
    tree, problems = expand_demand(t, LABELS[:3], ["a"])
    assert tree is None and problems[-1].path == "demand.root" and f"more than {MAX_TREE_NODES} nodes" in problems[-1].message
