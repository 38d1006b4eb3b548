"""Simulate one region's pools of a plan and compare with the plan's predictions.

For each region-tier (:mod:`fleetplan.sim.setup`) the run draws the requests -- arrival
times (Poisson or a rescaled trace), source (own or diverted users), class, prompt
length from the tier's mix, prefix-cache hits (each prompt has the hit rate of its
source cached, as the plan assumes), output length, and every fixed path component of
the TTFT budget (a shifted exponential through the instance's p50 and p99) -- then runs
the gateway (admission clamp, batch shed), the prefill pool (FCFS, admission control,
KV links, :func:`engine.prefill_pass`) and the decode slices (:func:`engine.decode_des`),
or the colocated replicas (:func:`engine.replica_des`), and measures the requests that
arrived in the window with :mod:`fleetplan.perf.metrics`.

Beside each measured metric it puts the plan's prediction (full scale, the scenario's
pool load) and the closed-form model recomputed with :mod:`fleetplan.perf` at the
simulated slices and load (M/G/c and M/M/c queues; decode at the occupancy the load
reaches rather than at a full batch): :mod:`fleetplan.sim.metrics`.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from fleetplan.instance.schema import HybridAttention, Instance
from fleetplan.perf.colocated import CHUNKED, MixedKernel, Schedule
from fleetplan.perf.roofline import kv_bytes_per_request, kv_bytes_per_token, kv_transfer_ms, prefill_time_ms, slice_memory_map
from fleetplan.perf.queueing import MIN_PATH_SPREAD_MS, ROUTERS
from fleetplan.perf.speculation import StepKernel
from fleetplan.results.plan import status_note
from fleetplan.sim import arrivals as arr
from fleetplan.sim.dcn import PlanPods
from fleetplan.sim.engine import DecodeSlice, Replica, decode_des, log_acceptance, prefill_pass, replica_des
from fleetplan.sim.metrics import (MIN_RATIO_MS, _ci, _decoded, _row, _secs, measure_tier, path_components, prefill_model,  # noqa: F401 -- re-exported
                                   replica_model, settling_note)
from fleetplan.sim.report import SimReport
from fleetplan.sim.setup import TierSetup, tier_setups
from fleetplan.sim.tierrun import Requests, TierRun

__all__ = ["Requests", "TierRun", "draw_requests", "run_tier", "measure_tier", "resolve_scenarios", "simulate", "path_components", "prefill_model", "replica_model"]


# ----------------------------------------------------------------------------- requests


def sample_path_ms(p50: float, p99: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """Draws of a path component known by its p50 and p99 (ms): the shifted exponential
    through both, X = shift + E / rate with rate = ln 50 / (p99 - p50) and shift = p50 -
    ln 2 / rate, floored at 0 -- the distribution whose upper percentiles
    :func:`fleetplan.perf.queueing.path_latency_ms` gives (exact at p50 and p99)."""
    if p99 - p50 <= MIN_PATH_SPREAD_MS:  # as the planner's path sum: under 1 ns of spread is a constant
        return np.full(size, p50)
    rate = math.log(50.0) / (p99 - p50)
    shift = p50 - math.log(2.0) / rate
    return np.maximum(shift + rng.exponential(1.0 / rate, size=size), 0.0)


def draw_requests(inst: Instance, su: TierSetup, stream: arr.ArrivalStream, output_lengths: str, rng: np.random.Generator) -> Requests:
    """Attributes of every arrival of ``stream`` (see the module docstring)."""
    n = stream.t_s.size
    arrival = stream.t_s * 1e3
    lam = su.load_rps
    source = (rng.random(n) >= (su.own_rps / lam if lam > 0 else 1.0)).astype(np.int8)
    shares = np.array([c.share for c in su.classes])
    cls = np.searchsorted(np.cumsum(shares) / shares.sum(), rng.random(n), side="right").clip(0, len(shares) - 1).astype(np.int16)
    tm = su.mix
    bucket = np.searchsorted(np.cumsum(tm.shares) / tm.shares.sum(), rng.random(n), side="right").clip(0, tm.tokens.size - 1)
    prompt = tm.tokens[bucket]
    hit = np.where(source == 0, su.own_hit, su.div_hit)
    cached = hit * prompt
    o = inst.workload.output_tokens
    if output_lengths == "geometric":
        out = rng.geometric(min(1.0 / o, 1.0), size=n).astype(np.int64)
    else:
        out = np.full(n, max(1, int(round(o))), dtype=np.int64)
    pre = np.zeros(n)
    post = np.zeros(n)
    for _, p50, p99, after in path_components(inst):
        x = sample_path_ms(p50, p99, n, rng)
        if after:
            post += x
        else:
            pre += x
    sheddable = np.array([c.sheddable for c in su.classes])[cls]
    shed_u = rng.random(n)
    shed = sheddable & (shed_u < np.where(source == 0, su.shed_prob_own, su.shed_prob_div))
    clamped = (source == 1) & (prompt >= su.clamp_min_tokens) if su.clamp_min_tokens is not None else np.zeros(n, dtype=bool)
    queue_in = arrival + pre
    order = np.argsort(queue_in, kind="stable")
    keys = np.stack([bucket[order], source[order]], axis=1)
    uniq, rtype = np.unique(keys, axis=0, return_inverse=True)
    types = [(float(tm.tokens[b]), float((su.own_hit if s == 0 else su.div_hit) * tm.tokens[b])) for b, s in uniq]
    return Requests(arrival[order], queue_in[order], pre[order], post[order], source[order], cls[order], prompt[order], cached[order],
                    out[order], rtype.ravel().astype(np.int64), types, clamped[order], shed[order])


# ----------------------------------------------------------------------------- a tier's run


def _types_service(inst: Instance, sl, types: list[tuple[float, float]]) -> np.ndarray:
    return np.array([float(prefill_time_ms(inst.model, sl, inst.priors, s, c)) for s, c in types])


def _chunks(inst: Instance, sl, s: float, c: float) -> np.ndarray:
    """Chunk times (ms) of a prompt of s tokens with c cached, in chunks of
    ``prefill_chunk_tokens`` uncached tokens: chunk i costs the FLOPs of its tokens
    attending over everything before them (prefill_time_ms(s_i, s_{i-1}) without the
    per-request overhead, which the first chunk carries). Their FLOPs sum to the whole
    prefill's; each chunk being a forward pass of its own, it also pays the per-pass terms
    (per-layer overhead, collective latencies, the weight-read floor), so several chunks
    take a little longer than one pass -- equal when the prompt fits one chunk."""
    step = inst.priors.prefill_chunk_tokens
    bounds = [c]
    while bounds[-1] < s - 1e-9:
        bounds.append(min(bounds[-1] + step, s))
    if len(bounds) == 1:
        bounds.append(s)
    ov = inst.priors.prefill_overhead_ms * inst.priors.prefill_time_scale  # as prefill_time_ms charges it
    t = [float(prefill_time_ms(inst.model, sl, inst.priors, b1, b0)) - ov for b0, b1 in zip(bounds[:-1], bounds[1:])]
    t[0] += ov
    return np.array(t)


def _log_p(su: TierSetup, req: Requests, drafts: set[int]) -> dict[int, np.ndarray]:
    out = {0: np.zeros(req.cls.size)}
    for k in drafts:
        if k > 0:
            per = np.array([float(log_acceptance(c.token_probability(k))) for c in su.classes])
            out[k] = per[req.cls]
    return out


def _est_extra(inst: Instance, req: Requests, service: np.ndarray, xfer_ici: np.ndarray) -> np.ndarray:
    post50 = sum(p50 for _, p50, _, after in path_components(inst) if after)
    return req.pre_ms + service + (1.0 - inst.priors.kv_transfer_overlap) * xfer_ici + post50


def _kv(inst: Instance):
    lin = None if isinstance(inst.model.attention, HybridAttention) else kv_bytes_per_token(inst.model)
    return (lambda ctx: kv_bytes_per_request(inst.model, ctx)), lin


def run_tier(inst: Instance, su: TierSetup, duration_s: float, warmup_s: float, seed: int, arrivals: str = "poisson",
             trace: arr.TraceTimes | None = None, output_lengths: str = "fixed", router: str = "least-work",
             progress: Callable[[str, float], None] | None = None, decode: bool = True, admission: bool = True) -> TierRun:
    """Run one region-tier: requests, gateway, prefill and decode (or replicas).
    Deterministic for a seed (streams spawned per tier from the seed). ``decode`` False
    stops after prefill (TTFT needs nothing after it); ``admission`` False turns
    admission control off (a load sweep traces the queue's own curve)."""
    ss = np.random.SeedSequence([seed, int.from_bytes(su.tier.encode()[:8].ljust(8, b"\0"), "little")])
    rng_arr, rng_req, rng_route = (np.random.default_rng(s) for s in ss.spawn(3))
    horizon = warmup_s + duration_s
    if arrivals == "poisson":
        stream = arr.poisson_arrivals(su.load_rps, horizon, rng_arr)
    else:
        stream = arr.trace_arrivals(trace, su.load_rps, horizon, rng_arr)
    if progress:
        progress("requests", 0.0)
    req = draw_requests(inst, su, stream, output_lengths, rng_req)
    n = req.arrival_ms.size
    kv_of, kv_lin = _kv(inst)
    seed_h = int(ss.generate_state(1, dtype=np.uint64)[0])
    if su.mode == "disaggregated":
        label, sl, _, n_pre, pods_pre = su.prefill
        svc_t = _types_service(inst, sl, req.types)
        service = svc_t[req.rtype]
        kvb = kv_bytes_per_request(inst.model, np.array([t[0] for t in req.types]))
        ici = np.asarray(kv_transfer_ms(kvb, inst.network.kv_ici_gbytes_per_s_per_slice))[req.rtype]
        dcn = np.asarray(kv_transfer_ms(kvb, inst.network.dcn_gbytes_per_s_per_slice))[req.rtype]
        limits = np.array([c.ttft_limit_ms if (c.ttft_limit_ms is not None and admission) else np.nan for c in su.classes])[req.cls]
        pod_ids: dict[str, int] = {}
        dec_pods = [p for d in su.decode for p in d.pods]
        for p in list(pods_pre) + dec_pods:
            pod_ids.setdefault(p, len(pod_ids))
        server_pod = route_cdf = route_u = None
        if pods_pre and dec_pods:
            server_pod = np.array([pod_ids[p] for p in pods_pre], dtype=np.int64)
            present = {pod_ids[p] for p in dec_pods}
            route_cdf = {}
            for p in set(pods_pre):
                ws = [(pod_ids[to], w) for to, w in su.route.get(p, []) if to in pod_ids and pod_ids[to] in present]
                if not ws:
                    ws = [(pod_ids[p], 1.0)] if pod_ids[p] in present else [(q, 1.0) for q in sorted(present)]
                to = np.array([a for a, _ in ws], dtype=np.int64)
                cdf = np.cumsum([w for _, w in ws])
                route_cdf[pod_ids[p]] = (to, cdf / cdf[-1])
            route_u = rng_route.random(n)
        if progress:
            progress("prefill", 0.0)  # each phase announced as it starts (a log line per phase when stderr is not a terminal)
        pp = prefill_pass(req.queue_in_ms, service, n_pre, req.eligible, ici, dcn, inst.priors.kv_transfer_overlap, limits,
                          _est_extra(inst, req, service, ici), server_pod, route_cdf, route_u,
                          progress=(lambda i: progress("prefill", i / max(n, 1))) if progress else None,
                          router=router, seed=seed_h, route_key=req.cls)
        slices: list[DecodeSlice] = []
        pool_of: list[int] = []
        for di, d in enumerate(su.decode):
            mm = slice_memory_map(inst.model, d.slice, inst.priors)
            ker = StepKernel.of(inst.model, d.slice, inst.priors, d.batch_cap, d.draft_tokens, inst.speculation.draft_step_ms)
            kvcap = mm.kv_pool_gb * 1e9 / (1.0 + inst.priors.kv_paging_slack)
            for j in range(d.slices):
                pod = pod_ids.get(d.pods[j], -1) if j < len(d.pods) else -1
                slices.append(DecodeSlice(ker, d.batch_cap, kvcap, d.draft_tokens, d.switch_off_batch, pod))
                pool_of.append(di)
        dlog = None
        if slices and decode:
            spec_names = set().union(*[set(d.speculating) for d in su.decode])
            speculates = np.array([c.name in spec_names for c in su.classes])[req.cls]
            lp = _log_p(su, req, {d.draft_tokens for d in su.decode})
            h = float(slices and max(1.0, horizon * 1e3))
            # handoffs: the decode allocates each prompt's KV when its transfer may start and holds it until it lands
            xfer = np.where(pp.dcn, dcn, ici)
            if progress:
                progress("decode", 0.0)
            dlog = decode_des(pp.kv_done_ms - xfer, req.prompt, req.out, speculates, lp, slices, kv_of, kv_lin, seed_h,
                              pp.decode_pod if server_pod is not None else None,
                              progress=(lambda t: progress("decode", min(t / h, 1.0))) if progress else None, xfer_ms=xfer)
        # a handoff that waited for decode KV lands (its first token) later than the prefill pass had it
        first = pp.kv_done_ms if dlog is None else np.where(np.isfinite(dlog.handoffs.landed_ms), dlog.handoffs.landed_ms, pp.kv_done_ms)
        return TierRun(su, req, service, pp.start_ms, pp.end_ms, first, pp.server, pp.admitted, pp.dcn, dlog, pool_of,
                       warmup_s * 1e3, horizon * 1e3, stream.notes, router, kv_pod=pp.decode_pod if server_pod is not None else None,
                       slice_pod=np.array([s.pod for s in slices], dtype=np.int64) if server_pod is not None else None)
    # colocated replicas
    label, sl, _, n_rep, _, sched_label = su.replica
    sched = Schedule.parse(sched_label)
    chunks = [_chunks(inst, sl, s, c) for s, c in req.types]
    service = np.array([float(c.sum()) for c in chunks])[req.rtype]
    kv_mean, _ = su.mix.resident_kv(inst)
    mm = slice_memory_map(inst.model, sl, inst.priors)
    cap = max(1, mm.resident_capacity(kv_mean, inst.priors.kv_paging_slack))
    ker = StepKernel.of(inst.model, sl, inst.priors, cap, 0)
    reps = [Replica(ker, mm.kv_pool_gb * 1e9 / (1.0 + inst.priors.kv_paging_slack), cap) for _ in range(n_rep)]
    limits = np.array([c.ttft_limit_ms if (c.ttft_limit_ms is not None and admission) else np.nan for c in su.classes])[req.cls]
    h = max(1.0, horizon * 1e3)
    chunked = sched.kind == CHUNKED
    mixed = MixedKernel.of(inst.model, sl, inst.priors, cap + sched.chunk_tokens) if chunked else None
    cached = np.array([c for _, c in req.types])[req.rtype] if chunked else None
    if progress:
        progress("replicas", 0.0)
    rl = replica_des(req.queue_in_ms, chunks, req.rtype, req.prompt, req.out, np.zeros(n, dtype=bool), {0: np.zeros(n)}, reps, kv_of, kv_lin,
                     seed_h, req.eligible, limits, _est_extra(inst, req, service, np.zeros(n)), router,
                     progress=(lambda t: progress("replicas", min(t / h, 1.0))) if progress else None,
                     chunk_budget=sched.chunk_tokens if chunked else None, mixed=mixed, cached_tokens=cached, route_key=req.cls)
    return TierRun(su, req, service, rl.prefill_start_ms, rl.prefill_end_ms, rl.prefill_end_ms, rl.replica, rl.admitted, np.zeros(n, dtype=bool),
                   rl.decode, [0] * n_rep, warmup_s * 1e3, horizon * 1e3, stream.notes, router)


# ----------------------------------------------------------------------------- the whole run


def _decode_sizing(plan, region: str, tier: str) -> str | None:
    best = (None, -1.0)
    for sc in plan.scenarios:
        for p in sc.pools:
            if p.region == region and p.tier == tier and p.role == "decode" and p.pressure is not None and p.pressure > best[1] + 1e-12:
                best = (sc.name, p.pressure)
    return best[0]


def resolve_scenarios(inst: Instance, plan, region: str, tiers: list[str] | None, scenario: str) -> list[tuple[str, str]]:
    """(tier, scenario name) to simulate: every tier with pools in ``region`` (or
    ``tiers``) in ``scenario``; 'sizing' picks, per tier, the scenario with the highest
    pressure on the tier's prefill (or replica) pool -- the one that sizes it. Raises
    InputError for an unknown region or tier (via :func:`tier_setups` otherwise)."""
    from fleetplan.errors import InputError, Problem
    from fleetplan.perf.pools import tier_mixes

    if region not in inst.regions:
        raise InputError("--region", [Problem("--region", f"unknown region {region!r}; the plan's instance has {', '.join(sorted(inst.regions))}.")])
    names = [t.name for t in tier_mixes(inst)]
    if tiers:
        bad = [t for t in tiers if t not in names]
        if bad:
            raise InputError("--tier", [Problem("--tier", f"unknown tier {bad[0]!r}; the instance has {', '.join(names)}.")])
    want = list(dict.fromkeys(tiers)) if tiers else [t for t in names if any(p.region == region and p.tier == t for p in plan.pools)]
    if not want:
        raise InputError("--region", [Problem("--region", f"{region} has no pool in the plan.")])
    if scenario != "sizing":
        return [(t, scenario) for t in want]
    out = []
    for t in want:
        best = ("normal", -1.0)
        for sc in plan.scenarios:
            for p in sc.pools:
                # the tie rule of the plan's binding lines (results.loads.binding): within 1e-5 the earlier scenario
                if p.region == region and p.tier == t and p.role in ("prefill", "replica") and p.pressure is not None \
                        and p.pressure > best[1] * (1 + 1e-5) + 1e-12:
                    best = (sc.name, p.pressure)
        out.append((t, best[0]))
    return out


#: What each router does in the simulator and how the model queues the prompts under it (a run's notes).
ROUTED = {"least-work": "requests routed to the replica or prefill slice that frees up first (queued prefill work and the step or chunk "
                        "in progress)",
          "round-robin": "requests routed round robin (the k-th to replica or prefill slice k mod c)",
          "random": "requests routed to a uniformly random replica or prefill slice",
          "prefix-aware": "requests routed to a replica or prefill slice that holds the prefix of their routing key (their SLO class, "
                          "standing in for the prompt's first block) unless it has more work queued than the least-loaded plus the "
                          "request's own prefill (then to the least-loaded, which then holds it)"}
QUEUED = {"least-work": "G/G/c over the pool's replicas or slices (one FCFS queue)",
          "round-robin": "G/G/1 per replica or slice with the arrivals' C_a^2 / c (Erlang-c arrivals)",
          "random": "G/G/1 per replica or slice at a random split's C_a^2 (M/G/1 for Poisson arrivals)",
          "prefix-aware": "as under random routing (affinity ignores load: an upper bound when a load cap stands beside it)"}


def check_options(duration_s: float, warmup_s: float, arrivals: str, output_lengths: str, router: str, trace_format: str | None = None,
                  kv_routing: str = "placement", placed: bool = True) -> None:
    """Raise InputError (every problem at once, each naming its option) for options the
    simulator cannot run with."""
    from fleetplan.errors import InputError, Problem

    probs = []
    if not (math.isfinite(duration_s) and duration_s > 0):
        probs.append(Problem("--duration", "must be a positive, finite number of simulated seconds.", f"{duration_s:.4g}"))
    if not (math.isfinite(warmup_s) and warmup_s >= 0):
        probs.append(Problem("--warmup", "must be a finite number of simulated seconds >= 0.", f"{warmup_s:.4g}"))
    if output_lengths not in ("fixed", "geometric"):
        probs.append(Problem("--output-lengths", "must be 'fixed' or 'geometric'.", repr(output_lengths)))
    if router not in ROUTERS:
        probs.append(Problem("--router", f"must be one of {', '.join(ROUTERS)} (serving.router).", repr(router)))
    if arrivals != "poisson" and not arrivals.startswith("trace:"):
        probs.append(Problem("--arrivals", "must be 'poisson' or 'trace:FILE' (an azure, mooncake or csv request trace).", repr(arrivals)))
    elif arrivals == "trace:":
        probs.append(Problem("--arrivals", "give the trace file after 'trace:', e.g. trace:conv.csv."))
    if trace_format is not None and trace_format not in ("azure", "mooncake", "csv"):
        probs.append(Problem("--trace-format", "must be azure, mooncake or csv (a servegen file has no request timestamps).", repr(trace_format)))
    if trace_format is not None and not arrivals.startswith("trace:"):
        probs.append(Problem("--trace-format", "goes with --arrivals trace:FILE."))
    if kv_routing not in ("placement", "rule"):
        probs.append(Problem("--kv-routing", "must be 'placement' (the placement's routing weights) or 'rule' (the plan's rule on the placed "
                                             "pods).", repr(kv_routing)))
    elif kv_routing != "placement" and not placed:
        probs.append(Problem("--kv-routing", "goes with --placement: without one the simulator runs one ICI domain and no KV crosses the DCN."))
    if probs:
        raise InputError("options", probs)


def simulate(inst: Instance, plan, region: str, tiers: list[str] | None = None, scenario: str = "normal", duration_s: float = 600.0,
             warmup_s: float = 30.0, arrivals: str = "poisson", seed: int = 0, scale: float = 1.0, output_lengths: str = "fixed",
             router: str | None = None, placement=None, progress: Callable[[str, float], None] | None = None,
             trace_format: str | None = None, placement_path: str | None = None, kv_routing: str = "placement",
             physics: str | None = None) -> SimReport:
    """Simulate ``region``'s pools of ``plan`` (every tier, or ``tiers``) in ``scenario``
    for ``warmup_s`` + ``duration_s`` seconds of arrivals (every admitted request is run
    to its last token) and report the window's metrics beside the predictions.

    Args: arrivals 'poisson' or 'trace:FILE' (azure, mooncake or csv; rescaled to the
    plan's rate); scale in (0, 1]: the fraction of slices and load; output_lengths
    'fixed' (the instance's mean) or 'geometric' (that mean); router, how colocated
    replicas and prefill slices are picked: 'least-work', 'round-robin', 'random' or
    'prefix-aware' (:mod:`fleetplan.sim.routing`; a request's routing key is its SLO
    class), None (the default) the plan's (``plan.router``, else ``serving.router``); placement: a checked :class:`Placement` (pods and
    KV routing), :func:`fleetplan.sim.dcn.plan_pods` (the plan's own pods, KV routed by the
    plan's rule) or None (one ICI domain); kv_routing with a placement: 'placement' (its
    routing weights; the normal peak's in a scenario it has none for) or 'rule' (the plan's
    rule on the placed pods at the scenario's load; :mod:`fleetplan.sim.dcn`).
    ``progress(phase, fraction)`` is called as the run goes. ``physics``: an instance with a
    physics: block runs with that source's priors (its name; None: the plan's binding source
    for the region, :func:`fleetplan.instance.physics.default_source`), the model's
    predictions beside the metrics under it too
    (:func:`fleetplan.instance.physics.physics_instance`).
    Returns: :class:`SimReport`. Raises InputError (exit 2) for options that do not fit
    the plan; TraceError for an unreadable trace.
    """
    from fleetplan import __version__
    from fleetplan.instance.io import instance_hash
    from fleetplan.instance.physics import default_source, physics_instance
    from fleetplan.results.evaluate import Context
    from fleetplan.placement.document import plan_hash

    if router is None:
        router = getattr(plan, "router", None) or inst.serving.router
    plan_inst_hash = instance_hash(inst)
    source = None
    if inst.physics is not None or physics is not None:
        source = physics or default_source(inst, plan, region)
        inst = physics_instance(inst, source)  # the step times this run uses: one source's

    if isinstance(placement, PlanPods):
        kv_routing = "rule"  # the plan's pods carry no routing weights: the plan's rule routes their KV
    check_options(duration_s, warmup_s, arrivals, output_lengths, router, trace_format, kv_routing, placement is not None)
    trace = arr.read_trace_times(arrivals[len("trace:"):], trace_format) if arrivals.startswith("trace:") else None
    from fleetplan.errors import InputError, Problem

    setups, idle = [], []
    for t, sc in resolve_scenarios(inst, plan, region, tiers, scenario):
        got = tier_setups(inst, plan, region, [t], sc, scale, placement, required=bool(tiers), kv_routing=kv_routing)
        setups += got
        if not got:
            idle.append(f"{t} ({sc})")
    if not setups:
        hint = ""
        if inst.regions[region].peak_rps <= 0:
            losses = sorted(sc.name for sc in plan.scenarios if sc.kind == "loss" and any(p.region == region and p.arrivals_rps > 0 for p in sc.pools))
            hint = (f" {region} has no traffic of its own (peak_rps 0)" + (f"; it carries load only when another region is lost: try --scenario "
                    f"{losses[0]}." if losses else ", and absorbs none in the plan's scenarios."))
        raise InputError("--scenario", [Problem("--scenario", f"no tier of {region} has traffic in {scenario}: nothing to simulate.{hint}")])

    for su in setups:
        if su.load_rps * duration_s < 1.0:
            raise InputError("--duration", [Problem("--duration/--scale", f"{su.tier}: {su.load_rps:.3g} req/s for {duration_s:.3g} s is fewer than "
                                                    "one request in the window; raise --duration or --scale.")])
    ctx = Context(inst)
    out = []
    for i, su in enumerate(setups):
        def prog(phase, frac, i=i, su=su):
            if progress:
                progress(f"{su.tier}: {phase}", (i + frac) / len(setups))
        run = run_tier(inst, su, duration_s, warmup_s, seed, "poisson" if trace is None else "trace", trace, output_lengths, router, prog)
        prog("measuring", 1.0)
        out.append(measure_tier(inst, run, ctx))
        del run  # a tier's arrays (~0.3 KB per request) are freed before the next tier's run
    notes = [f"no traffic in {x}: not simulated" for x in idle]
    notes.append(f"{ROUTED[router]}; the model here queues the prompts {QUEUED[router]}")
    status = status_note(plan)  # the same words report, whatif and place use (a shortfall is not a violation)
    if status is not None:
        notes.append(status)
    dist = inst.workload.output_length_distribution
    if output_lengths != dist:
        notes.append(f"answers here have {output_lengths} lengths but the plan was sized for {dist} ones "
                     "(workload.output_length_distribution): the colocated TPOT tail of the plan and model columns assumes "
                     + ("every answer has the mean length, so a TPOT tail measured here that includes short answers (a few token gaps, "
                        "one stall weighing on each) is not the one the plan bounds; set output_length_distribution: geometric to size for it"
                        if dist == "fixed" else "geometric answers, so it is wider than this run's")
                     + (" (disaggregated decode is sized at a full batch either way)" if any(su.mode == "disaggregated" for su in setups) else ""))
    if router != inst.serving.router:
        notes.append(f"requests routed '{router}' but the plan was sized for '{inst.serving.router}' routing "
                     "(serving.router): the plan column is for that router, the model column for this run's, so sim/plan "
                     "ratios far from 1 are the router's, not the plan's error")
    ca2 = inst.workload.arrival_scv
    if ca2 != 1.0 and arrivals == "poisson":
        notes.append(f"the plan was sized for arrivals of index of dispersion {ca2:g} (workload.arrival_scv) and this run's are Poisson: "
                     "its queues here are shorter than the plan's model assumes, so sim/plan ratios below 1 are expected; replay the "
                     "trace the SCV was fitted to (--arrivals trace:FILE) to check the plan")
    if scenario == "sizing":
        for t in out:
            dec_sc = _decode_sizing(plan, region, t.tier)
            if dec_sc and dec_sc != t.scenario:
                notes.append(f"{t.tier}: 'sizing' runs the scenario that sizes the prefill pool ({t.scenario}); the decode pool is sized by {dec_sc}")
    from fleetplan.workload.traces import file_sha256

    if source is not None:
        notes.append(f"run with physics source '{source}' (its step times in the simulator and in the model's predictions beside it; "
                     "the plan's bound is the least favourable of the sources it holds under): simulate --physics NAME for another")
    return SimReport(fleetplan_version=__version__, instance_name=inst.name, instance_hash=plan_inst_hash, plan_hash=plan_hash(plan),
                     region=region, scenario=scenario, arrivals=arrivals, output_lengths=output_lengths, router=router,
                     trace_format=trace.fmt if trace is not None else None, trace_sha256=file_sha256(trace.path) if trace is not None else None,
                     placement=placement_path if placement is not None else None,
                     placement_hash=_doc_hash(placement) if (placement is not None and not isinstance(placement, PlanPods)) else None,
                     kv_routing=kv_routing if placement is not None else None, seed=seed,
                     scale=scale, duration_s=duration_s, warmup_s=warmup_s, tiers=out, notes=notes, physics_source=source)


def _doc_hash(doc) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(doc.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()
