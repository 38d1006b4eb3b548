"""A newcomer's trial on the Azure case: `peak_rps: 1e-9` crashed `solve` and `perf` with a
traceback ("ValueError: replicas must be >= 1": the fewest-replicas search started at 0 for a
demand far under one replica's rate), and once past that a peak of 1e-9 req/s was served by
no chip and 'verified', while 1e-6 and 1e-5 gave plans the verifier refused -- demand the
sizing cannot tell from none within its solver's tolerances. A (region, tier) peak under
MIN_TIER_PEAK_RPS is now refused as input (exit 2, naming the field and the least peak that
is taken); the search always starts at one replica."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.instance.checks import MIN_TIER_PEAK_RPS
from fleetplan.perf.replica_rates import fewest_replicas

def test_any_demand_needs_a_replica():
    # a replica serves 5 req/s: 1e-9 req/s needs one (the search asked rate(0) before)
    assert fewest_replicas(lambda n: 5.0, lambda: 5.0, 1e-9) == 1
    assert fewest_replicas(lambda n: 5.0, lambda: 5.0, 0.0) == 0
    assert fewest_replicas(lambda n: 5.0, lambda: 5.0, 12.0) == 3

@pytest.mark.parametrize("peak", ["1e-9", "1e-6"])
def test_a_peak_the_solver_cannot_tell_from_none_is_refused(tmp_path, peak):
    from tests.conftest import tiny_data

    data = tiny_data()
    region = next(iter(data["regions"]))
    data["regions"][region]["peak_rps"] = float(peak)
    (tmp_path / "i.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    for cmd in (["solve", str(tmp_path / "i.yaml")], ["perf", str(tmp_path / "i.yaml")]):
        r = CliRunner().invoke(app, cmd)
        text = " ".join(r.output.split())
        assert r.exit_code == 2, r.output
        assert f"regions.{region}.peak_rps" in text and f"under {MIN_TIER_PEAK_RPS:g} requests/s" in text and "Traceback" not in text

def test_zero_is_still_a_region_without_traffic_of_its_own():
    from fleetplan.instance.io import parse_instance
    from tests.conftest import tiny_data

    data = tiny_data(failover={"n_minus_1": True})
    regions = list(data["regions"])
    assert len(regions) >= 2
    data["regions"][regions[1]]["peak_rps"] = 0.0
    parse_instance(data, "zero-peak")  # no error
