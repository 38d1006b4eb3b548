"""The router is part of the plan (issue 40): ``serving.router`` and the queue each router
gives a request -- the formulas against cases worked by hand, the capacity curves and
replica rates they feed, and the instance field (alias, hash).

Hand-worked pool used throughout: c = 4 servers, lambda = 30 req/s, E[S] = 100 ms
(mu = 10 /s per server), C_s^2 = 0.5, p99. Per server lambda / c = 7.5 /s, rho = 0.75,
mu - lambda/c = 2.5 /s = 0.0025 /ms; Erlang C at one server is rho, so the G/G/1 wait
percentile is ln(rho / 0.01) (C_a^2 + C_s^2) / (2 (mu - lambda/c)) = ln 75 x 200 (C_a^2 + 0.5) ms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetplan.instance.io import instance_hash, parse_instance
from fleetplan.perf.queueing import (
    ROUTERS,
    erlang_c,
    max_arrival_rate,
    min_servers,
    routed_queue,
    server_ca2,
    wait_mean_ms,
    wait_percentile_ms,
)
from tests.conftest import tiny_data

LN75 = math.log(75.0)


@pytest.mark.parametrize("router,ca2,scv_per_server", [
    ("round-robin", 1.0, 0.25),   # Erlang-4 inter-arrivals: SCV 1/4
    ("round-robin", 2.0, 0.5),    # a bursty stream's index of dispersion, divided by c
    ("random", 1.0, 1.0),         # a Poisson split stays Poisson: M/G/1 per server
    ("random", 2.0, 1.25),        # Whitt's splitting rule 1 + p (C_a^2 - 1), p = 1/4
    ("prefix-aware", 2.0, 1.25),  # queued as random
])
def test_load_blind_wait_percentiles_are_the_hand_worked_g_g_1(router, ca2, scv_per_server):
    want = LN75 * 200.0 * (scv_per_server + 0.5)
    assert server_ca2(router, 4, ca2) == pytest.approx(scv_per_server)
    assert float(wait_percentile_ms(4, 30.0, 100.0, 99.0, 0.5, ca2, router)) == pytest.approx(want, rel=1e-12)
    # the same through the single-server call: what routed_queue maps the pool to
    one = float(wait_percentile_ms(1, 7.5, 100.0, 99.0, 0.5, scv_per_server))
    assert one == pytest.approx(want, rel=1e-12)
    assert routed_queue(router, 4, 30.0, ca2)[:2] == (1.0, 7.5)


def test_least_work_is_the_pooled_queue_unchanged():
    """The default router is today's G/G/c, number for number, and it queues least."""
    for ca2 in (0.5, 1.0, 2.0):
        assert float(wait_percentile_ms(4, 30.0, 100.0, 99.0, 0.5, ca2, "least-work")) == float(wait_percentile_ms(4, 30.0, 100.0, 99.0, 0.5, ca2))
    lw, rr, rnd = (float(wait_percentile_ms(4, 30.0, 100.0, 99.0, 0.5, 1.0, r)) for r in ("least-work", "round-robin", "random"))
    assert lw < rr < rnd


def test_one_server_erlang_c_is_rho_and_the_random_mean_is_pollaczek_khinchine():
    """The single-server tail the load-blind routers use: P(wait) = rho; the random split's
    mean wait is M/G/1's lambda E[S^2] / (2 (1 - rho)) with E[S^2] = E[S]^2 (1 + C_s^2):
    7.5 /s x 0.015 s^2 / 0.5 = 0.225 s."""
    assert float(erlang_c(1, 0.75)) == pytest.approx(0.75, rel=1e-12)
    assert float(wait_mean_ms(4, 30.0, 100.0, 0.5, 1.0, "random")) == pytest.approx(225.0, rel=1e-12)


def test_unknown_router_and_servers_below_one_are_refused():
    with pytest.raises(ValueError, match="router"):
        wait_percentile_ms(4, 30.0, 100.0, 99.0, 0.5, 1.0, "sticky")
    with pytest.raises(ValueError, match="servers"):
        wait_percentile_ms(0.5, 30.0, 100.0, 99.0, 0.5, 1.0, "round-robin")


@pytest.mark.parametrize("router", ROUTERS)
def test_max_rate_and_fewest_servers_invert_the_wait(router):
    """The largest arrival rate c servers carry within a 300 ms p99 wait meets the budget and
    1e-6 more does not; min_servers at that rate gives c back (monotone in c under every
    router: a split's C_a^2 never rises with c)."""
    c = np.arange(1, 9, dtype=float)
    lam = max_arrival_rate(c, 100.0, 300.0, 99.0, 0.5, ca2=1.3, router=router)
    for n, x in zip(c, lam):
        assert float(wait_percentile_ms(n, x, 100.0, 99.0, 0.5, 1.3, router)) <= 300.0 + 1e-9
        assert float(wait_percentile_ms(n, x * (1 + 1e-6), 100.0, 99.0, 0.5, 1.3, router)) > 300.0
        assert min_servers(x * (1 - 1e-9), 100.0, 300.0, 99.0, 0.5, ca2=1.3, router=router) <= n
    if router in ("random", "prefix-aware"):
        # a split of a bursty stream gets smoother with c, never burstier: the rate per server rises
        assert np.all(np.diff(lam / c) >= -1e-9)


def test_capacity_curves_order_and_shape_by_router():
    """A(n) of the prefill capacity tables (Erlangs): least-work pools (most), round robin
    smooths each slice's arrivals (between, convex), a random split is n times one slice
    (linear, for Poisson arrivals) -- so the chords the MILP uses stay valid."""
    from fleetplan.tables.derived import workload_capacity_curve

    curves = {r: workload_capacity_curve(300.0, 100.0, 0.5, 99.0, 12, 1.0, router=r) for r in ROUTERS}
    n = np.arange(13)
    assert np.allclose(curves["random"], n * curves["random"][1], rtol=1e-12)
    assert np.array_equal(curves["prefix-aware"], curves["random"])
    assert np.all(curves["least-work"][2:] > curves["round-robin"][2:]) and np.all(curves["round-robin"][2:] > curves["random"][2:])
    assert curves["round-robin"][1] == pytest.approx(curves["random"][1])  # one server: no split
    assert np.all(np.diff(curves["round-robin"], 2) >= -1e-9)
    assert np.array_equal(curves["least-work"], workload_capacity_curve(300.0, 100.0, 0.5, 99.0, 12, 1.0))


@pytest.fixture(scope="module")
def bf16_pool():
    from fleetplan.instance.io import load_instance
    from fleetplan.perf.colocated import CHUNKED, Schedule, replica_rates
    from fleetplan.perf.pools import PrefillSource, slice_specs, tier_mixes

    inst = load_instance("llama70b-h100-bf16-p99")
    tm = tier_mixes(inst)[0]
    sl = next(s for s in slice_specs(inst) if s.label == "h100x4")
    return {r: replica_rates(inst, tm, sl, [PrefillSource(1.0, 0.0)], Schedule(CHUNKED, 512), r) for r in ROUTERS}


def test_replica_rates_by_router_on_the_bf16_pool(bf16_pool):
    """The GPU scenario's chunked-512 TP4 replicas: least-work pools the prompts and carries
    the most per replica; round robin's rate rises with the pool (C_a^2 / n); a random split
    of Poisson arrivals is one replica's rate at every pool size; prefix-aware is random's."""
    rates = {r: [rr.rate(n) for n in (1, 2, 4, 6, 8)] for r, rr in bf16_pool.items()}
    assert rates["random"] == [rates["random"][0]] * 5 and rates["prefix-aware"] == rates["random"]
    assert np.all(np.diff(rates["round-robin"]) >= 0) and rates["round-robin"][-1] > rates["round-robin"][0]
    for k in range(1, 5):
        assert rates["least-work"][k] >= rates["round-robin"][k] >= rates["random"][k]
    assert rates["round-robin"][0] == rates["random"][0] <= rates["least-work"][0]  # one replica: no split, the same queue


def test_replica_latency_by_router_on_the_bf16_pool(bf16_pool):
    """At 20/6 req/s per replica of 6: the TTFT bound's wait is one replica's G/G/1 at the
    split's C_a^2 (1/6 round robin, 1 random) under a load-blind router, and the TPOT tail
    carries the prompts' feedback (variance / (1 - u)^2) under every load-blind router --
    random's at the n = 1 index of dispersion (an upper bound for any pool size), so above
    least-work's; round robin's at its split's, 1/6 in a pool of 6 (at one replica it is
    random's: no split)."""
    lam = 20.0 / 6
    lat = {r: rr.latency(lam, 6, [99.0]) for r, rr in bf16_pool.items()}
    st = lat["round-robin"][0]
    for r, scv in (("round-robin", 1.0 / 6), ("random", 1.0)):
        want = float(wait_percentile_ms(1, st.rps, st.service_mean_ms, 99.0, st.service_cs2, scv))
        assert lat[r][1].wait_ms[99.0] == pytest.approx(want, rel=1e-12)
    assert lat["least-work"][1].wait_ms[99.0] < lat["round-robin"][1].wait_ms[99.0] < lat["random"][1].wait_ms[99.0]
    tp = {r: lat[r][1].tpot_ms[99.0] for r in ROUTERS}
    assert tp["random"] == tp["prefix-aware"] > tp["least-work"]
    assert tp["round-robin"] < tp["random"]
    assert bf16_pool["round-robin"].latency(lam, 1, [99.0])[1].tpot_ms[99.0] == tp["random"]


# ----------------------------------------------------------------------------- the instance field


def test_serving_router_takes_every_router_and_the_old_name():
    for r in ROUTERS:
        assert parse_instance(tiny_data(serving={"router": r}), "t").serving.router == r
    old = parse_instance(tiny_data(serving={"replica_router": "random"}), "t")
    assert old.serving.router == "random" and old.serving.replica_router == "random"
    assert parse_instance(tiny_data(serving={"replica_router": "random", "router": "random"}), "t").serving.router == "random"


def test_serving_router_errors_name_the_field(tmp_path):
    """Bad input: exit 2 with the dotted path; the old and new names disagreeing is named."""
    import yaml
    from typer.testing import CliRunner

    from fleetplan.cli.app import app

    for serving, words in (({"router": "sticky"}, ["serving.router", "least-work", "round-robin"]),
                           ({"router": "random", "replica_router": "least-work"}, ["serving.router", "serving.replica_router", "disagree"])):
        p = tmp_path / "bad.yaml"
        p.write_text(yaml.safe_dump(tiny_data(serving=serving)))
        r = CliRunner().invoke(app, ["solve", str(p), "-o", str(tmp_path / "plan.json")])
        assert r.exit_code == 2, r.output
        text = " ".join(r.output.split())
        assert all(w in text for w in words), text
        assert not (tmp_path / "plan.json").exists()


def test_instance_hash_is_neutral_to_the_rename():
    """An instance hashes as it did before serving.router existed (a plan carries its
    instance's hash; plans solved then must still load): least-work and random -- the old
    field's values -- under the old name, the new routers under the new one. Pinned:
    the hashes main computed before issue 40 for the tiny instance, by default and with
    replica_router: random."""
    assert instance_hash(parse_instance(tiny_data(), "t")) == "59aa343f73048fb647c3d16cbe96cf231075ce03f165792d1684fe6906665554"
    assert instance_hash(parse_instance(tiny_data(serving={"router": "random"}), "t")) == \
        instance_hash(parse_instance(tiny_data(serving={"replica_router": "random"}), "t")) == "83aa5c80f20fad4201126ddd6f1927e09bb549e23f40ec37a9eafb591fcdc280"
    new = {instance_hash(parse_instance(tiny_data(serving={"router": r}), "t")) for r in ROUTERS}
    assert len(new) == 4


# ----------------------------------------------------------------------------- properties


@settings(max_examples=300, deadline=None)
@given(lam=st.floats(0.1, 500.0), mean=st.floats(5.0, 2000.0), budget=st.floats(0.0, 5000.0), cs2=st.floats(0.0, 4.0),
       ca2=st.floats(0.05, 8.0), pct=st.sampled_from([50.0, 90.0, 99.0, 99.9]))
def test_random_never_needs_fewer_servers_than_least_work(lam, mean, budget, cs2, ca2, pct):
    """Property (issue 40): a load-blind split never queues less than the pooled FCFS queue
    at the same servers and load, so random (and prefix-aware, queued as random) never
    needs fewer prefill slices than least-work, and round robin needs at least as many as
    least-work and at most as many as random. By Allen-Cunneen: pooled / split wait =
    [ln(C / (1 - p)) / ln(rho / (1 - p))] x (C_a^2 + C_s^2) / (c C_a'^2 + c C_s^2), each
    factor <= 1 for C_a'^2 >= C_a^2 / c (Erlang C <= rho)."""
    n = {r: min_servers(lam, mean, budget, pct, cs2, max_servers=100_000, ca2=ca2, router=r) for r in ROUTERS}
    if n["least-work"] is None:  # the budget too short for any count: no split does better
        assert n["random"] is None and n["round-robin"] is None
        return
    assert n["random"] is None or n["random"] >= n["round-robin"] >= n["least-work"]
    assert n["prefix-aware"] == n["random"]


@pytest.fixture(scope="module")
def bf16_by_scv():
    """The BF16 pool's rate searches under least-work and random, for Poisson, smooth and
    bursty arrivals (workload.arrival_scv)."""
    from fleetplan.instance.io import load_instance
    from fleetplan.perf.colocated import CHUNKED, Schedule, replica_rates
    from fleetplan.perf.pools import PrefillSource, slice_specs, tier_mixes

    base = load_instance("llama70b-h100-bf16-p99")
    out = {}
    for scv in (0.5, 1.0, 4.0):
        inst = base.model_copy(update={"workload": base.workload.model_copy(update={"arrival_scv": scv})})
        tm = tier_mixes(inst)[0]
        sl = next(s for s in slice_specs(inst) if s.label == "h100x4")
        out[scv] = {r: replica_rates(inst, tm, sl, [PrefillSource(1.0, 0.0)], Schedule(CHUNKED, 512), r) for r in ("least-work", "random")}
    return out


@pytest.mark.parametrize("scv", [0.5, 1.0, 4.0])
def test_random_never_needs_fewer_replicas_than_least_work(bf16_by_scv, scv):
    """Property (issue 40), colocated: at every demand the fewest replicas a random split
    needs are at least least-work's -- its TTFT queue is a G/G/1 per replica, and its TPOT
    tail takes the split's index of dispersion at one replica, max(C_a^2, 1) >= least-work's
    C_a^2, with the prompts' feedback on top, so the rate TPOT allows a replica is never
    above least-work's either, at any pool size. (With the split's dispersion at the pool's
    size, 1 + (C_a^2 - 1) / n, bursty arrivals (C_a^2 = 4) gave random a TPOT-limited rate
    above least-work's in a pool of 50: 4.66 against 4.59 req/s a replica.)"""
    rr = bf16_by_scv[scv]
    for demand in (2.0, 8.0, 20.0, 30.0, 60.0):
        lw, rnd = (rr[r].replicas_for(demand, 0.8) for r in ("least-work", "random"))
        assert lw is not None and (rnd is None or rnd >= lw), (demand, lw, rnd)
    for n in (1, 8, 50):
        assert rr["random"].top_at(n) <= rr["least-work"].top_at(n), n


def test_solve_router_option_sizes_for_it_and_the_plan_records_it(tmp_path):
    """`solve --router` overrides serving.router: the plan records it (plan.router, and the
    instance it carries, so simulate and the exports follow it); a random split of the tiny
    disaggregated instance needs more prefill than the default least-work; a router that is
    none of the four is exit 2 naming the option, no plan written."""
    import json

    import yaml
    from typer.testing import CliRunner

    from fleetplan.cli.app import app

    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump(tiny_data(regions={"a": {"peak_rps": 120}, "b": {"peak_rps": 120}})))
    plans = {}
    for r in ("least-work", "random"):
        out = tmp_path / f"{r}.json"
        res = CliRunner().invoke(app, ["solve", str(p), "--router", r, "-o", str(out)])
        assert res.exit_code == 0, res.output
        assert f"router: {r} (serving.router)" in " ".join(res.output.split())
        plans[r] = json.loads(out.read_text())
        assert plans[r]["instance"]["serving"]["replica_router"] == r  # embedded under the old name for its old values (plan bytes kept)
    assert "router" not in plans["least-work"] and plans["random"]["router"] == "random"  # least-work, the default, is not written
    pre = {r: sum(x["chips"] for x in pl["pools"] if x["role"] == "prefill") for r, pl in plans.items()}
    assert pre["random"] > pre["least-work"], pre
    res = CliRunner().invoke(app, ["solve", str(p), "--router", "sticky", "-o", str(tmp_path / "bad.json")])
    assert res.exit_code == 2 and "--router" in res.output and "round-robin" in res.output
    assert not (tmp_path / "bad.json").exists()
