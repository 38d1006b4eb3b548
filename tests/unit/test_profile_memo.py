"""prefill_profile is memoised on what it depends on (perf.pools._PROFILE_MEMO): the same
physics, slice, buckets, source shares and percentiles give the profile computed afresh;
a proportional change of the sources' rates (a uniform demand scale: the purchase model's
nodes, the chord iterations) hits the memo; a change of the physics does not."""

from __future__ import annotations

import dataclasses

import pytest

from fleetplan.perf import pools
from fleetplan.perf.pools import PrefillSource, prefill_profile, tier_mixes
from fleetplan.perf.roofline import SliceSpec

pytestmark = pytest.mark.fresh_table_cache  # tests/conftest.py: its own empty table-cache folder


def test_the_memo_returns_what_a_fresh_computation_gives(tiny_instance):
    inst = tiny_instance()
    tm = tier_mixes(inst)[0]
    sl = SliceSpec.of("acc", inst.chips["acc"], 1)
    srcs = [PrefillSource(3.0, 0.2), PrefillSource(1.0, 0.0, 4000)]
    fresh = pools._prefill_profile(inst, tm, sl, srcs, [50.0, 99.0])
    a = prefill_profile(inst, tm, sl, srcs, [50.0, 99.0])
    b = prefill_profile(inst, tm, sl, [PrefillSource(30.0, 0.2), PrefillSource(10.0, 0.0, 4000)], [50.0, 99.0])
    assert dataclasses.asdict(a) == dataclasses.asdict(fresh)
    assert b is a  # the same shares at ten times the rate: the memo's entry
    other = tiny_instance(priors={"prefill_overhead_ms": 7.0})
    c = prefill_profile(other, tm, sl, srcs, [50.0, 99.0])
    assert c is not a and c.mean_ms == pytest.approx(pools._prefill_profile(other, tm, sl, srcs, [50.0, 99.0]).mean_ms)
    assert c.mean_ms != pytest.approx(a.mean_ms)
