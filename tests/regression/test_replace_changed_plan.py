"""Issue 15 item 9: `place --current` re-places a placement of an earlier plan.

Before the fix every changed plan was refused: a plan re-solved for a grown load is of
another instance hash ("the current placement was made for another instance"), and
``verify_placement(..., counts=False)`` still checked the slice counts (a local dict
shadowed the argument), so even a plan of the same instance with other counts failed.
Now a current placement of the same regions and pods is accepted; one of another fleet
is refused naming what differs.
"""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.instance.io import parse_instance
from fleetplan.placement.check import verify_placement
from fleetplan.placement.document import Placement
from fleetplan.results.plan import Plan
from tests.conftest import tiny_data

runner = CliRunner()
PODS = {"acc": {"installed": 0, "available_new": 4}}


def _data(peak: float, **over) -> dict:
    # one slice shape, 4-chip pods: growth adds slices of the same pools (and pods)
    base = dict(chips={"acc": {"chips_per_pod": 4, "slice_shapes": [1]}},
                regions={"a": {"peak_rps": peak, "hourly_load": [0.5] * 12 + [1.0] * 12, "pods": PODS, "failover_to": ["b"]},
                         "b": {"peak_rps": peak, "hourly_load": [1.0] * 12 + [0.5] * 12, "pods": PODS, "failover_to": ["a"]}},
                failover={"n_minus_1": True})
    return tiny_data(**{**base, **over})


def _ok(args):
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """A plan and its placement, then the plan re-solved for 60% more load."""
    d = tmp_path_factory.mktemp("grown")
    for name, peak in (("i1", 20), ("i2", 32)):
        (d / f"{name}.yaml").write_text(yaml.safe_dump(_data(peak)))
    _ok(["solve", str(d / "i1.yaml"), "-o", str(d / "p1.json")])
    _ok(["place", str(d / "p1.json"), "-i", str(d / "i1.yaml"), "-o", str(d / "pl1.json")])
    _ok(["solve", str(d / "i2.yaml"), "-o", str(d / "p2.json")])
    return d


def test_replace_after_the_load_grew_keeps_the_slices_in_place(grown):
    d = grown
    p1, p2 = (Plan.model_validate_json((d / f).read_text()) for f in ("p1.json", "p2.json"))
    assert p1.instance_hash != p2.instance_hash
    assert sum(p.slices for p in p2.pools) > sum(p.slices for p in p1.pools)
    r = _ok(["place", str(d / "p2.json"), "-i", str(d / "i2.yaml"), "--current", str(d / "pl1.json"), "-o", str(d / "pl2.json")])
    assert "an earlier instance with the same regions and pods" in r.output
    old = Placement.model_validate_json((d / "pl1.json").read_text())
    new = Placement.model_validate_json((d / "pl2.json").read_text())
    assert new.instance_hash == p2.instance_hash and new.moves is not None
    # every slice of the old placement is still there, in its pod: growth only adds
    by_id = {s.id: s for s in new.slices}
    stayed = sum(1 for s in old.slices if s.id in by_id and by_id[s.id].pod == s.pod)
    assert new.moves <= 1 and stayed >= len(old.slices) - 1
    added = len(new.slices) - len(old.slices)
    assert added == sum(p.slices for p in p2.pools) - sum(p.slices for p in p1.pools)
    r = _ok(["diff", str(d / "pl1.json"), str(d / "pl2.json"), "--json"])
    diff = json.loads(r.output)
    assert len(diff["moved"]) == new.moves and len(diff["added"]) == added and diff["removed"] == []
    r = _ok(["diff", str(d / "pl1.json"), str(d / "pl2.json")])
    assert "same regions and pods" in r.output and f"{added} added" in r.output


def test_the_count_check_is_off_for_a_current_placement(grown):
    """verify_placement(counts=False) used to check the counts anyway (shadowed argument)."""
    d = grown
    inst2 = parse_instance(_data(32))
    p2 = Plan.model_validate_json((d / "p2.json").read_text())
    old = Placement.model_validate_json((d / "pl1.json").read_text())
    assert any(v.check == "count" for v in verify_placement(inst2, p2, old))
    assert verify_placement(inst2, p2, old, counts=False) == []
    from fleetplan.placement.check import current_placement_problems

    assert current_placement_problems(inst2, old) == []


def test_a_placement_of_another_fleet_is_refused(grown, tmp_path):
    d = grown
    other = dict(_data(32))
    other["regions"] = {"a": other["regions"]["a"], "c": {**other["regions"]["b"], "failover_to": ["a"]}}
    other["regions"]["a"] = {**other["regions"]["a"], "failover_to": ["c"]}
    (tmp_path / "o.yaml").write_text(yaml.safe_dump(other))
    _ok(["solve", str(tmp_path / "o.yaml"), "-o", str(tmp_path / "po.json")])
    r = runner.invoke(app, ["place", str(tmp_path / "po.json"), "-i", str(tmp_path / "o.yaml"), "--current", str(d / "pl1.json")])
    assert r.exit_code == 2 and "regions a, b" in r.output and "drop --current" in r.output
    # the same regions, pods of another size: not the same pods
    from fleetplan.placement.check import current_placement_problems

    big = _data(32, chips={"acc": {"chips_per_pod": 8, "slice_shapes": [1]}})
    probs = current_placement_problems(parse_instance(big), Placement.model_validate_json((d / "pl1.json").read_text()))
    assert probs and all(v.check == "instance" for v in probs) and "4 chips" in probs[0].message
