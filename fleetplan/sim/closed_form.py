"""The closed-form model at the simulated slices and load, set beside each measured
metric: the prefill pool's G/G/c, Poisson and M/M/c TTFT and wait percentiles, the
colocated replicas' rates, and the length mix and classes that reach the servers once
the gateway has shed and clamped (:mod:`fleetplan.perf`)."""

from __future__ import annotations

import numpy as np

from fleetplan.instance.schema import Instance
from fleetplan.perf.colocated import Schedule, replica_rates
from fleetplan.perf.pools import PrefillSource, TierMix, path_ms, prefill_profile
from fleetplan.perf.queueing import path_sum_distribution, ttft_percentile_of_sum_ms, wait_percentile_ms
from fleetplan.sim.setup import TierSetup


def path_components(inst: Instance) -> list[tuple[str, float, float, bool]]:
    """(name, p50_ms, p99_ms, after_first_token) of each fixed TTFT path component; a
    component whose name contains 'egress' happens after the first token leaves the
    server, the others before the request reaches the prefill queue."""
    return [(p.name, p.p50_ms, p.p99_ms, "egress" in p.name) for p in inst.priors.path_latency]


def _offered(su: TierSetup) -> tuple[float, float]:
    """(own, diverted-before-clamp) requests/s reaching the gateway net of the batch shed."""
    batch = sum(c.share for c in su.classes if c.sheddable)
    return su.own_rps * (1.0 - batch * su.shed_prob_own), su.div_rps * (1.0 - batch * su.shed_prob_div)


def prefill_model(inst: Instance, su: TierSetup, sl, n: int, percentiles=(50.0, 95.0, 99.0), dcn_share: float = 0.0,
                  router: str = "least-work") -> tuple[dict, object]:
    """The closed-form prediction for ``n`` prefill slices (or one colocated replica's
    prefill queue, ``n`` = 1) at the setup's load: TTFT and queue-wait percentiles under
    the plan's G/G/c (Allen-Cunneen with the service's C_s^2 and the instance's arrival
    C_a^2; tag 'mgc'), the same with Poisson arrivals (C_a^2 = 1; tag 'poisson', equal to
    'mgc' when the instance's C_a^2 is 1) and M/M/c (tag 'mmc'), each spread by ``router``
    (:func:`fleetplan.perf.queueing.routed_queue`: a G/G/1 per slice under a load-blind
    one), utilisation and exposed KV, by :func:`fleetplan.perf.pools.prefill_profile` and
    :mod:`fleetplan.perf.queueing`. Returns (dict, PrefillProfile); ``lam`` is the
    admitted requests/s."""
    own, div = _offered(su)
    srcs = []
    if own > 0:
        srcs.append(PrefillSource(own, su.own_hit))
    if div > 0:
        srcs.append(PrefillSource(div, su.div_hit, su.clamp_min_tokens))
    prof = prefill_profile(inst, su.mix, sl, srcs, list(percentiles), dcn_share)
    lam = (own + div) * prof.kept_share
    out = {"util": lam * prof.mean_ms / 1e3 / n, "cs2": prof.cs2, "ca2": prof.ca2, "mean_ms": prof.mean_ms, "lam": lam}
    path = path_sum_distribution([(a, b) for _, a, b, _ in path_components(inst)])
    for p in percentiles:
        for tag, cs2, ca2 in (("mgc", prof.cs2, prof.ca2), ("poisson", prof.cs2, 1.0), ("mmc", 1.0, 1.0)):
            w = float(wait_percentile_ms(n, lam, prof.mean_ms, p, cs2, ca2, router)) if lam > 0 else 0.0
            out[f"wait_{tag}_{p:g}"] = w
            out[f"bound_{tag}_{p:g}"] = path_ms(inst, p) + w + prof.pct_ms[p] + prof.kv_exposed_ms[p]
            out[f"ttft_{tag}_{p:g}"] = ttft_percentile_of_sum_ms(p, path, n, lam, prof.mean_ms, cs2, prof.type_ms, prof.type_weight, ca2, router)
        out[f"kv_{p:g}"] = prof.kv_exposed_ms[p]
    return out, prof


def replica_model(inst: Instance, su: TierSetup, router: str):
    """The closed form of the setup's colocated replicas: :class:`fleetplan.perf.colocated.ReplicaRates`
    of the pool's shape under its schedule, fed by its own and diverted traffic (their hit
    rates, the clamp) and routed by ``router`` -- the model the plan is sized and verified
    with. Take ``.latency(lam_per_replica, replicas, percentiles)``."""
    _, sl, _, _, _, sched_label = su.replica[:6]
    srcs = [x for x in [PrefillSource(su.own_rps, su.own_hit)] + ([PrefillSource(su.div_rps, su.div_hit, su.clamp_min_tokens)]
                                                                  if su.div_rps > 0 else []) if x.weight > 0]
    return replica_rates(inst, su.mix, sl, srcs or [PrefillSource(1.0, su.own_hit)], Schedule.parse(sched_label), router)


def admitted_mix(su: TierSetup) -> TierMix:
    """The tier's length mix as decode sees it: own and diverted traffic net of the batch
    shed, diverted prompts at or above the admission clamp removed. (The plan prices
    decode on the tier's whole mix, so in a region loss its decode predictions are
    for longer residents than the clamp lets through.)"""
    own, div = _offered(su)
    tm = su.mix
    w = own * tm.shares
    if div > 0:
        keep = tm.tokens < su.clamp_min_tokens if su.clamp_min_tokens is not None else np.ones(tm.tokens.size, dtype=bool)
        w = w + div * tm.shares * keep
    if w.sum() <= 0:
        return tm
    return TierMix(tm.name, tm.tokens, w / w.sum(), tm.tier_share, tm.hit_rate, tm.output_tokens)


def admitted_classes(su: TierSetup) -> dict[str, float]:
    """Class shares of the requests past the gateway (the batch shed removes sheddable ones)."""
    lam = su.load_rps
    if lam <= 0:
        return {c.name: c.share for c in su.classes}
    p = (su.own_rps * su.shed_prob_own + su.div_rps * su.shed_prob_div) / lam
    w = {c.name: c.share * (1.0 - p if c.sheddable else 1.0) for c in su.classes}
    tot = sum(w.values())
    return {k: v / tot for k, v in w.items()} if tot > 0 else w
