"""Re-warm time constant and duration (fleetplan.perf.rewarm), worked by hand."""

import math

import pytest

from fleetplan.perf.rewarm import cache_tokens, rewarm


def test_brief_scale_rewarm_is_minutes():
    # 2,000 prefill chips x 256 GB at 128 KiB/token, 30M cold tokens/s (brief s5)
    c = cache_tokens(2000 * 256, 131072)
    assert c == pytest.approx(512e12 / 131072)
    rw = rewarm(c, 30e6, 0.30, 0.40)
    assert rw.tau_s == pytest.approx(c / 30e6)
    assert rw.done_s == pytest.approx(rw.tau_s * math.log(0.10 / 0.01))
    assert 60 < rw.done_s < 600  # "single-digit minutes"
    assert float(rw.hit_at(0.0)) == pytest.approx(0.30)
    assert float(rw.hit_at(rw.tau_s)) == pytest.approx(0.40 - 0.10 / math.e)
    assert float(rw.hit_at(rw.done_s)) == pytest.approx(0.39)


def test_no_dip_and_no_cold_traffic():
    assert rewarm(1e9, 1e6, 0.4, 0.4).done_s == 0.0
    assert math.isinf(rewarm(1e9, 0.0, 0.3, 0.4).done_s)


@pytest.mark.parametrize("args", [(0.0, 1.0, 0.3, 0.4), (-1.0, 1.0, 0.3, 0.4)])
def test_bad_cache_raises(args):
    with pytest.raises(ValueError, match="cache_tokens"):
        rewarm(*args)


def test_bad_kv_size_raises():
    with pytest.raises(ValueError, match="kv_bytes_per_token"):
        cache_tokens(1.0, 0.0)
