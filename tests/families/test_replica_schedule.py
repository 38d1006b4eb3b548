"""The colocated engine schedule is a decision of the sizing model per replica pool
(region x tier x shape; issue 17), not one per (tier, shape) fixed in the tables.

One small instance, solved once: colocated mode, one tier, one shape (1 chip), two regions
of very different demand (a: 6 req/s, b: 80 req/s), schedules prefill-first and chunked at
256 and 2,048 tokens, p99 TPOT <= 20 ms and p99 TTFT <= 500 ms. Prefill-first is held by
TPOT and gains nothing from pooling; chunked-256 meets the TPOT easily but its TTFT needs a
pooled prompt queue (least-work M/G/c), so its rate assumes a pool of n_ref = 2. The small
region wants the schedule that one replica can run, the large one the higher pooled rate.
The optimum is found here by enumerating schedule x count per region from the same
candidate rates (regions are independent: no N-1), and the solver must match it exactly."""

from __future__ import annotations

import pytest

from fleetplan.tables.derived import NORMAL
from fleetplan.instance.io import parse_instance
from tests.conftest import tiny_data

SCHEDULES = dict(
    serving={"mode": "colocated", "colocated_schedules": ["prefill-first", "chunked"], "chunk_tokens": [256, 2048]},
    regions={"a": {"peak_rps": 7}, "b": {"peak_rps": 83}},
    chips={"acc": {"slice_shapes": [1]}},
    workload={"classes": {"std": {"share": 1.0, "spec_acceptance": 0.5,
                                  "slos": [{"metric": "ttft", "percentile": 99, "limit_ms": 500},
                                           {"metric": "tpot", "percentile": 99, "limit_ms": 20}]}}},
)


@pytest.fixture(scope="module")
def two_regions():
    from fleetplan.sizing import solve

    inst = parse_instance(tiny_data(**SCHEDULES), "schedules")
    out = solve(inst)
    return inst, out.data, out.plan


def _enumerate(d, schedules=None):
    """Per region: every (schedule, count) the candidate tables allow -- count at least the
    schedule's n_ref, within the region's pods, carrying the region's peak at the
    schedule's rate -- and its cost; the cheapest per region. ``schedules`` restricts the
    choice (None: every schedule the tables hold, dominated or not)."""
    t, c = "all", "accx1"
    best = {}
    for r in d.REGIONS:
        lam = d.p_peak_rps[r] * d.tiers[t].tier_share
        pods = (d.p_installed_pods[(r, "acc")] + d.p_available_pods[(r, "acc")]) * d.p_pod_chips["acc"] // d.slices[c].chips
        opts = []
        for h in schedules or d.SCHEDULES:
            cand = d.replica_cand(t, c, h, (NORMAL,), r)  # the region's own where its pool is larger
            if cand.rps_per_replica <= 0:
                continue
            for n in range(cand.min_replicas, pods + 1):  # every count, not a formula for the least
                if n * cand.rps_per_replica >= lam:
                    opts.append((n * d.p_price_per_slice_hour_usd[(r, c)], h, n))
        best[r] = sorted(opts)
    return best


def test_regions_pick_different_schedules_at_the_enumerated_optimum(two_regions):
    inst, d, plan = two_regions
    assert plan.status == "verified", plan.violations  # the independent verifier accepts it
    opts = _enumerate(d)
    for r in d.REGIONS:
        assert len(opts[r]) > 1 and opts[r][0][0] < opts[r][1][0], opts[r]  # a unique optimum per region
    want = {r: opts[r][0] for r in d.REGIONS}
    assert want["a"][1] != want["b"][1], want  # the optimum needs a different schedule per region
    got = {p.region: (p.cost_per_hour_usd, p.schedule, p.slices) for p in plan.pools if p.role == "replica"}
    assert got == {r: (pytest.approx(w[0]), w[1], w[2]) for r, w in want.items()}
    assert plan.cost.fleet_cost_per_hour_usd == pytest.approx(sum(w[0] for w in want.values()))
    # one schedule for every region (what the tables imposed before) costs strictly more
    single = min(sum(_enumerate(d, [h])[r][0][0] for r in d.REGIONS) for h in d.SCHEDULES
                 if all(_enumerate(d, [h])[r] for r in d.REGIONS))
    assert single > plan.cost.fleet_cost_per_hour_usd + 1e-9
    # issue-17 trial: b's pool is rated at its own least-work pool size, not held to the rate of the
    # small region's pool (which cost b an 11th replica, and 22% on a 1.5 + 60 req/s GPU instance)
    own_b = d.replica_cand("all", "accx1", want["b"][1], (NORMAL,), "b")
    assert own_b.min_replicas > d.replica_cand("all", "accx1", want["b"][1], (NORMAL,)).min_replicas
    assert own_b.rps_per_replica > d.replica_cand("all", "accx1", want["b"][1], (NORMAL,)).rps_per_replica
    # each schedule's rate assumes its own pool size
    assert len({d.replica[("all", "accx1", h, (NORMAL,))].min_replicas for h in (want["a"][1], want["b"][1])}) == 2


def test_readers_take_each_pools_own_schedule(two_regions):
    """The verifier rates each region's pool at its own schedule (the other region's
    schedule on b's count fails b's SLO-limited capacity) and the simulator sets each
    region up with its pool's schedule."""
    from fleetplan.results.verify import verify
    from fleetplan.sim.setup import tier_setups

    inst, d, plan = two_regions
    sched = {p.region: p.schedule for p in plan.pools}
    for r in d.REGIONS:
        (su,) = tier_setups(inst, plan, r)
        assert su.replica[5] == sched[r]
    # b's pool relabelled with a's schedule: same count, the other schedule's rate
    pools = [p.model_copy(update={"schedule": sched["a"]}) if p.region == "b" else p for p in plan.pools]
    bad = verify(inst, plan.model_copy(update={"pools": pools}))
    cap = [v for v in bad if v.check in ("replica_slo", "replica_headroom") and "replica[b," in v.where]
    b = next(p for p in plan.pools if p.region == "b")
    rate_a = d.replica_cand("all", "accx1", sched["a"], (NORMAL,), "b").rps_per_replica
    assert b.slices * rate_a < d.p_peak_rps["b"] * (1 - 1e-9)  # the tables say it cannot carry b's peak
    assert cap, bad
    assert not [v for v in bad if v.check in ("replica_slo", "replica_headroom") and "replica[a," in v.where]
