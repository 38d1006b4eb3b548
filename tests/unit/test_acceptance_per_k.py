"""Speculative acceptance per draft length: the geometric model of Leviathan et al. (2023),
what an instance's number means, and the planner and the simulator reading it alike."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetplan.perf.pools import decode_table, slice_specs, tier_mixes
from fleetplan.perf.speculation import (
    acceptance_rate_from_token_probability,
    class_acceptance_rate,
    class_token_probability,
    expected_tokens_per_step,
)
from fleetplan.sim.engine import accepted_drafts, log_acceptance, uniform_hash
from fleetplan.sim.setup import class_specs


def test_geometric_tokens_per_step_by_hand():
    """a = 0.8: k = 1 -> 1.8; k = 2 -> 1 + 0.8 + 0.64 = 2.44; k = 4 -> 1 + .8 + .64 + .512 + .4096 = 3.3616;
    a = 1 -> k + 1; a = 0 -> 1."""
    assert float(expected_tokens_per_step(0.8, 1)) == pytest.approx(1.8, rel=1e-12)
    assert float(expected_tokens_per_step(0.8, 2)) == pytest.approx(2.44, rel=1e-12)
    assert float(expected_tokens_per_step(0.8, 4)) == pytest.approx(3.3616, rel=1e-12)
    assert float(expected_tokens_per_step(1.0, 4)) == 5.0 and float(expected_tokens_per_step(0.0, 4)) == 1.0
    with pytest.raises(ValueError):
        expected_tokens_per_step(1.1, 2)


def test_rate_measured_at_k2_used_at_k4_by_hand():
    """The issue's case: alpha = 0.7 measured at k = 2 is a = (-1 + sqrt(1 + 4 x 1.4)) / 2 = 0.78452
    ((a + a^2) / 2 = 0.7); at k = 4, alpha(4) = (a + a^2 + a^3 + a^4) / 4 = 0.5654, so 3.2617 tokens per
    verify step where reading 0.7 at every k says 3.8 (16.5% over)."""
    a = (-1.0 + np.sqrt(1.0 + 4.0 * 1.4)) / 2.0
    assert class_token_probability(0.7, "rate", 2, 4) == pytest.approx(a, abs=1e-10)
    r4 = (a + a**2 + a**3 + a**4) / 4.0
    assert class_acceptance_rate(0.7, "rate", 2, 4) == pytest.approx(r4, abs=1e-10)
    assert r4 * 4 + 1 == pytest.approx(3.2617, abs=1e-4)
    assert class_acceptance_rate(0.7, "rate", 2, 2) == 0.7  # at its own k: the number itself
    assert class_acceptance_rate(0.7, "rate", None, 4) == 0.7  # no k named: the same at every k (the old reading)
    assert class_acceptance_rate(0.8, "per_token", None, 4) == pytest.approx(0.5904, abs=1e-12)  # (3.3616 - 1) / 4


@settings(max_examples=60, deadline=None)
@given(a=st.floats(0.1, 0.99), k=st.integers(1, 12))  # a^(k+1) >= 1e-13: resolvable against 1 in float64
def test_longer_drafts_more_tokens_lower_rate(a, k):
    """For a per-token a: E[tokens per step] rises with k, the acceptance rate per draft token falls."""
    t1, t2 = float(expected_tokens_per_step(a, k)), float(expected_tokens_per_step(a, k + 1))
    r1, r2 = (class_acceptance_rate(a, "per_token", None, k), class_acceptance_rate(a, "per_token", None, k + 1))
    assert t2 > t1
    assert r2 < r1
    assert r1 * k + 1 == pytest.approx(t1, rel=1e-12)
    assert float(acceptance_rate_from_token_probability(a, k)) == pytest.approx(r1, rel=1e-12)


def test_planner_and_simulator_read_the_number_alike(tiny_instance):
    """One class, per-token a = 0.8, draft lengths 2 and 4: the decode table's tokens per step
    (alpha(k) k + 1) and the simulator's hashed draws (mean 1 + accepted drafts) are the geometric
    2.44 and 3.3616."""
    inst = tiny_instance(workload={"classes": {"std": {"share": 1.0, "spec_acceptance": 0.8, "spec_acceptance_kind": "per_token",
                                                       "slos": [{"metric": "tpot", "percentile": 99, "limit_ms": 1e6}]}}},
                         speculation={"enabled": True, "draft_tokens": [2, 4], "alpha_threshold": 0.1})
    tm = tier_mixes(inst)[0]
    sl = slice_specs(inst)[0]
    ops = {(o.batch, o.draft_tokens): o for o in decode_table(inst, tm, sl, [8])}
    step_off = ops[(8, 0)]
    for k, want in ((2, 2.44), (4, 3.3616)):
        op = ops[(8, k)]
        # tokens/s of a full slice = batch x tokens per step / step
        assert op.tokens_per_s * op.step_ms / 1e3 / 8 == pytest.approx(want, rel=1e-9)
        cls = class_specs(inst, tm.name)[0]
        p = cls.token_probability(k)
        assert p == pytest.approx(0.8, abs=1e-12)
        n = 100_000
        draws = accepted_drafts(uniform_hash(3, np.arange(n), np.full(n, k, dtype=np.int64)), np.full(n, float(log_acceptance(p))), k)
        assert 1.0 + draws.mean() == pytest.approx(want, abs=5 * np.sqrt(draws.var() / n))
    assert step_off.draft_tokens == 0


def test_per_token_with_a_k_is_refused(tiny_instance):
    from fleetplan.instance.io import InstanceError

    with pytest.raises(InstanceError, match="spec_acceptance_at_k"):
        tiny_instance(workload={"classes": {"std": {"share": 1.0, "spec_acceptance": 0.8, "spec_acceptance_kind": "per_token",
                                                    "spec_acceptance_at_k": 2, "slos": [{"metric": "tpot", "percentile": 99, "limit_ms": 50}]}}})
