"""Every statistic `fleetplan workload fit` reports, recomputed independently (plain
Python / numpy written here, not the fitter's code) on a small slice of the real public
traces, and anchored to figures the data's curators computed (shared/data/README.md)."""

from __future__ import annotations

import csv
import json
import math
from datetime import datetime, timezone

import numpy as np
import pytest
from scipy.stats import rankdata

from fleetplan.workload.fit import LengthSample, fit_input_mix, fit_trace
from tests.workload.conftest import AZURE_CODE, AZURE_CONV, MOONCAKE, SERVEGEN, head, need

KV = 131072.0  # gemini-ironwood: 128 KiB of KV per token


def pct(x, p):
    return float(np.percentile(np.asarray(x, dtype=float), p, method="inverted_cdf"))


def read_azure(path):
    t, i, o = [], [], []
    with open(path) as f:
        for row in csv.DictReader(f):
            t.append(datetime.strptime(row["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp())
            i.append(int(row["ContextTokens"]))
            o.append(int(row["GeneratedTokens"]))
    return np.array(t), np.array(i, dtype=float), np.array(o, dtype=float)


def read_mooncake(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return (np.array([r["timestamp"] / 1000 for r in rows]), np.array([r["input_length"] for r in rows], dtype=float),
            np.array([r["output_length"] for r in rows], dtype=float), [r["hash_ids"] for r in rows])


@pytest.fixture(scope="module")
def azure_slice(tmp_path_factory):
    path = head(AZURE_CONV, 3001, tmp_path_factory.mktemp("az") / "conv.csv")
    return path, read_azure(path), fit_trace(path, "azure", [2048, None], KV, window_s=30.0)


@pytest.fixture(scope="module")
def mooncake_slice(tmp_path_factory):
    path = head(MOONCAKE, 2000, tmp_path_factory.mktemp("mc") / "mc.jsonl")
    # 2 GB holds 238 blocks of 512 tokens x 128 KiB: small enough to evict on this slice
    return path, read_mooncake(path), fit_trace(path, "mooncake", [16384, None], KV, window_s=60.0, cache_gb=(2.0, 20.0))


def test_length_statistics_recomputed(azure_slice):
    _, (_, i, o), fit = azure_slice
    for stats, x in ((fit.input, i), (fit.output, o)):
        assert stats.mean == pytest.approx(x.mean(), rel=1e-12)
        assert stats.mean_square == pytest.approx((x ** 2).mean(), rel=1e-12)
        for p in (50, 95, 99):
            assert getattr(stats, f"p{p}") == pct(x, p)
        assert stats.max == x.max()


def test_bucketed_mix_keeps_mean_p99_and_tier_shares(azure_slice):
    _, (_, i, _), fit = azure_slice
    mix = fit.input_mix
    shares = np.array([b.share for b in mix])
    tokens = np.array([b.tokens for b in mix], dtype=float)
    assert math.fsum(shares) == pytest.approx(1.0, abs=1e-9)
    assert np.all(np.diff(tokens) > 0)
    # each bucket's tokens is its members' mean rounded: the bucketed mean is within half a token
    assert abs(float(shares @ tokens) - i.mean()) <= 0.5 + 1e-6 * i.mean()
    # the buckets holding the 50th, 95th and 99th percentiles carry (about) the trace's
    cum = np.cumsum(shares)
    for p in (50, 95, 99):
        bucketed = tokens[np.searchsorted(cum, p / 100 - 1e-9)]
        assert bucketed == pytest.approx(pct(i, p), rel=0.02)
        assert getattr(fit.input_bucketed, f"p{p}") == bucketed
    # no bucket straddles the 2,048-token tier boundary: the tier's request share is the trace's
    short = shares[[b.max_tokens <= 2048 for b in mix]].sum()
    assert short == pytest.approx(np.mean(i <= 2048), abs=2e-6 * len(mix))
    assert all(b.max_tokens <= 2048 or b.min_tokens > 2048 for b in mix)


def test_correlation_recomputed(azure_slice):
    _, (_, i, o), fit = azure_slice
    assert fit.input_output_pearson == pytest.approx(np.corrcoef(i, o)[0, 1], abs=1e-12)
    assert fit.input_output_spearman == pytest.approx(np.corrcoef(rankdata(i), rankdata(o))[0, 1], abs=1e-12)


def test_arrival_statistics_recomputed(azure_slice):
    _, (t, _, _), fit = azure_slice
    a = fit.arrivals
    span = t[-1] - t[0]
    assert a.requests == t.size and a.span_s == pytest.approx(span, abs=1e-5)
    assert a.mean_rps == pytest.approx(t.size / span, rel=1e-9)
    nw = int(span // 30.0)
    counts, _ = np.histogram(t - t[0], bins=np.arange(nw + 1) * 30.0)
    assert a.windows == nw
    assert a.peak_rps == pytest.approx(counts.max() / 30.0)
    assert a.peak_window_start_s == pytest.approx(30.0 * int(np.argmax(counts)))
    assert a.peak_to_mean == pytest.approx(counts.max() / 30.0 / (t.size / span), rel=1e-9)
    assert a.window_rps_p95 == pytest.approx(pct(counts / 30.0, 95))
    assert a.dispersion_window == pytest.approx(counts.var() / counts.mean(), rel=1e-9)
    c1, _ = np.histogram(t - t[0], bins=np.arange(int(span) + 1))
    assert a.dispersion_1s == pytest.approx(c1.var() / c1.mean(), rel=1e-9)
    gaps = np.diff(t)
    assert a.inter_arrival_cv == pytest.approx(gaps.std() / gaps.mean(), rel=1e-6)
    assert a.hourly_load is None  # 25 minutes of trace: no daily profile


def _prefix_hits(hash_lists, inputs, capacity=None, block=512):
    """Independent prefix-cache replay: a plain list as the LRU order (front = oldest)."""
    order: list[int] = []
    seen: set[int] = set()
    hit_tokens = hit_blocks = 0
    for ids, n_tok in zip(hash_lists, inputs):
        store = seen if capacity is None else set(order)
        k = 0
        for b in ids:
            if b not in store:
                break
            k += 1
        hit_blocks += k
        hit_tokens += int(n_tok) if k == len(ids) else k * block
        if capacity is None:
            seen.update(ids)
        else:
            for b in ids:
                if b in order:
                    order.remove(b)
                order.append(b)
            del order[: max(0, len(order) - capacity)]
    return hit_tokens, hit_blocks


def test_prefix_cache_hit_rates_recomputed(mooncake_slice):
    _, (_, inputs, _, hashes), fit = mooncake_slice
    total_tokens, total_blocks = inputs.sum(), sum(len(h) for h in hashes)
    rows = fit.prefix_cache
    assert rows[0].cache_gb is None
    for row, cap in zip(rows, [None, int(2e9 // (KV * 512)), int(20e9 // (KV * 512))]):
        ht, hb = _prefix_hits(hashes, inputs, cap)
        assert row.blocks == cap
        assert row.hit_rate_tokens == pytest.approx(ht / total_tokens, abs=1e-12)
        assert row.hit_rate_blocks == pytest.approx(hb / total_blocks, abs=1e-12)
    # a bigger LRU cache never hits less, and none beats the unbounded one
    rates = [r.hit_rate_tokens for r in rows]
    assert rates[1] <= rates[2] <= rates[0]
    assert rates[1] < rates[0]  # 2 GB really evicts on this slice
    assert fit.workload_block()["prefix_hit_rate"] == round(rates[0], 4)


def test_tier_shares_recomputed(mooncake_slice):
    _, (_, inputs, outputs, hashes), fit = mooncake_slice
    short, long_ = fit.tiers
    m = inputs <= 16384
    assert short.request_share == pytest.approx(m.mean())
    assert short.prefill_token_share == pytest.approx(inputs[m].sum() / inputs.sum())
    assert long_.request_share + short.request_share == pytest.approx(1.0)
    assert long_.mean_input_tokens == pytest.approx(inputs[~m].mean())
    assert long_.mean_output_tokens == pytest.approx(outputs[~m].mean())
    hit = np.array([0.0] * len(inputs))
    seen: set[int] = set()
    for j, (ids, n) in enumerate(zip(hashes, inputs)):
        k = next((x for x, b in enumerate(ids) if b not in seen), len(ids))
        hit[j] = n if k == len(ids) else 512 * k
        seen.update(ids)
    assert long_.hit_rate_tokens == pytest.approx(hit[~m].sum() / inputs[~m].sum())
    assert short.uncached_prefill_token_share == pytest.approx((inputs[m] - hit[m]).sum() / (inputs - hit).sum())


def test_quantised_timestamps_are_flagged(mooncake_slice):
    _, (t, _, _, _), fit = mooncake_slice
    assert fit.arrivals.zero_gap_share == pytest.approx(np.mean(np.diff(t) == 0))
    assert any("quantised" in n for n in fit.notes)


def test_daily_profile_of_a_two_day_trace(tmp_path):
    """A synthetic 48 h trace with (h + 1) x 6 requests in hour h of each day: the
    24-hour profile is (h + 1) / 24 exactly."""
    path = tmp_path / "two_days.csv"
    lines = ["timestamp_s,input_tokens,output_tokens"]
    for day in range(2):
        for h in range(24):
            n = (h + 1) * 6
            for k in range(n):
                lines.append(f"{day * 86400 + h * 3600 + (k + 0.5) * 3600 / n:.3f},100,10")
    path.write_text("\n".join(lines) + "\n")
    fit = fit_trace(path, "csv", [None], KV, window_s=600.0)
    assert fit.arrivals.hourly_basis == "hours from the trace's time origin"
    assert fit.arrivals.hourly_load == pytest.approx([(h + 1) / 24 for h in range(24)], abs=1e-4)


def test_servegen_statistics_recomputed():
    rates_file = need(SERVEGEN / "deepseek-r1_aggregate_rate.csv")
    fit = fit_trace(rates_file, "servegen", [16384, None], KV, window_s=600.0)
    rows = list(csv.DictReader(open(rates_file)))
    rate = np.array([float(r["total_rate_rps"]) for r in rows])
    cv = np.array([float(r["rate_weighted_mean_cv"]) for r in rows])
    a = fit.arrivals
    assert a.mean_rps == pytest.approx(rate.mean())
    assert a.peak_rps == pytest.approx(rate.max())
    assert a.peak_to_mean == pytest.approx(rate.max() / rate.mean())
    assert a.inter_arrival_cv == pytest.approx((rate * cv).sum() / rate.sum())
    hours = (np.array([float(r["window_start_s"]) for r in rows]) + 300) // 3600 % 24
    prof = np.array([rate[hours == h].mean() for h in range(24)])
    assert a.hourly_load == pytest.approx(prof / prof.max(), abs=1e-4)
    bins = [r for r in csv.DictReader(open(SERVEGEN / "length_histograms.csv")) if r["model"] == "deepseek-r1" and r["field"] == "input_tokens"]
    lo, hi, p = (np.array([float(r[k]) for r in bins]) for k in ("bin_lo_incl", "bin_hi_excl", "probability"))
    mean = (p * (lo + hi - 1) / 2).sum() / p.sum()  # uniform within each integer bin
    assert fit.input.mean == pytest.approx(mean, rel=1e-9)
    # a bin edge sits at 16,384: the long tier is the bins from there up (the edge token
    # itself, 1/6,786 of its bin, is below the bin's spread points)
    long_share = p[lo >= 16384].sum() / p.sum()
    assert fit.tiers[1].request_share == pytest.approx(long_share, rel=1e-9)
    # the brief's point, on real data: ~2% of requests are ~39% of the prompt tokens
    assert fit.tiers[1].request_share < 0.03 and fit.tiers[1].prefill_token_share > 0.35


def test_anchors_from_the_data_curators():
    """Figures computed by the people who copied the data (shared/data/README.md), from
    the whole files, with their own code."""
    conv = fit_trace(need(AZURE_CONV), "azure", [16384, None], KV)
    assert round(conv.input.mean) == 1155 and conv.input.p50 == 1020 and conv.input.p99 == 4142
    assert conv.output.mean == pytest.approx(211, abs=0.5)
    assert conv.arrivals.inter_arrival_cv == pytest.approx(1.09, abs=0.005)
    code = fit_trace(need(AZURE_CODE), "azure", [16384, None], KV)
    assert code.arrivals.inter_arrival_cv == pytest.approx(13.2, abs=0.05)
    mc = fit_trace(need(MOONCAKE), "mooncake", [16384, None], KV, cache_gb=(1024.0,))
    assert mc.prefix_cache[0].hit_rate_blocks == pytest.approx(0.366, abs=0.0005)
    assert mc.prefix_cache[0].hit_rate_tokens == pytest.approx(0.374, abs=0.0005)
    assert round(mc.input.mean) == 12035 and mc.output.p99 == pytest.approx(1119, abs=1)
    for fit in (conv, code, mc):  # the bucketed mix keeps the mean, p50, p95 and p99 on the whole files
        assert abs(fit.input_bucketed.mean - fit.input.mean) <= 0.5
        for p in ("p50", "p95", "p99"):
            assert getattr(fit.input_bucketed, p) == pytest.approx(getattr(fit.input, p), rel=0.005)


def test_fit_input_mix_on_a_histogram_matches_its_moments():
    s = LengthSample.of([100] * 50 + [1000] * 45 + [20000] * 5)
    mix = fit_input_mix(s, [16384, None])
    assert {b.tokens: b.share for b in mix} == {100: 0.5, 1000: 0.45, 20000: 0.05}


def test_bundled_mooncake_instance_is_the_fit():
    from fleetplan.instance.io import load_instance

    fit = fit_trace(need(MOONCAKE), "mooncake", [16384, None], KV)
    w = load_instance("gemini-ironwood-mooncake").workload
    block = fit.workload_block()
    assert [(b.share, b.tokens) for b in w.input_mix] == [(b["share"], b["tokens"]) for b in block["input_mix"]]
    assert w.output_tokens == block["output_tokens"] and w.prefix_hit_rate == block["prefix_hit_rate"]
    assert [{"max_input_tokens": t.max_input_tokens, "prefix_hit_rate": t.prefix_hit_rate} for t in w.tiers] == block["tiers"]
