"""The discrete-event core: a FCFS prefill pool with its KV links, decode slices with
continuous batching, and colocated replicas that interleave the two.

Everything here works on plain arrays (times in ms since the start of the run, sizes in
tokens and bytes) and knows nothing of plans or instances; :mod:`fleetplan.sim.run`
builds the arrays from a plan. Step times come from :class:`fleetplan.perf.speculation.StepKernel`
(the roofline with the residents' own KV), prefill times are given per request by the
caller (from :func:`fleetplan.perf.roofline.prefill_time_ms`).

The pieces the loops drive live below them: speculative acceptance, a pure function of
(seed, request, step), in :mod:`fleetplan.sim.acceptance`; a decode slice's continuous batch
and the :class:`DecodeLog` in :mod:`fleetplan.sim.batch` (both re-exported here).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from fleetplan.perf.speculation import StepKernel
from fleetplan.sim.acceptance import _hash_base, _mix, accepted_drafts, log_acceptance, uniform_hash  # noqa: F401 -- re-exported
from fleetplan.sim.batch import DecodeLog, DecodeSlice, _Batch, _decode_log, _Shared
from fleetplan.sim.handoff import Handoffs
from fleetplan.sim.routing import SplitRouter

if TYPE_CHECKING:
    from fleetplan.perf.colocated import MixedKernel

__all__ = ["uniform_hash", "accepted_drafts", "log_acceptance", "PrefillPass", "prefill_pass", "DecodeSlice", "DecodeLog", "decode_des", "Replica",
           "replica_des"]

#: Requests per chunk of the simulator's Python loops (their per-request lists are made a
#: chunk at a time: a few MB, not ~0.4 KB per request of the whole run).
_CHUNK = 1 << 16


# ----------------------------------------------------------------------------- prefill


@dataclass(frozen=True)
class PrefillPass:
    """Outcome of :func:`prefill_pass`, arrays (n,) in the order given (ms since the start).

    start_ms / end_ms: compute start and end; kv_done_ms: the last KV byte delivered to
    decode (= first token, server side); server: slice index (-1 not admitted);
    admitted: bool; dcn: KV crossed the DCN; decode_pod: the pod the KV went to (-1 when
    there is no placement)."""

    start_ms: np.ndarray
    end_ms: np.ndarray
    kv_done_ms: np.ndarray
    server: np.ndarray
    admitted: np.ndarray
    dcn: np.ndarray
    decode_pod: np.ndarray


def prefill_pass(
    queue_in_ms: np.ndarray,
    service_ms: np.ndarray,
    servers: int,
    eligible: np.ndarray | None = None,
    xfer_ici_ms: np.ndarray | None = None,
    xfer_dcn_ms: np.ndarray | None = None,
    overlap: float = 0.0,
    limit_ms: np.ndarray | None = None,
    est_extra_ms: np.ndarray | None = None,
    server_pod: np.ndarray | None = None,
    route_cdf: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
    route_u: np.ndarray | None = None,
    progress: Callable[[int], None] | None = None,
    router: str = "least-work",
    seed: int = 0,
    route_key: np.ndarray | None = None,
) -> PrefillPass:
    """FCFS over ``servers`` identical prefill slices, requests taken in the order of
    ``queue_in_ms`` (sorted ascending): each goes to the slice whose work ends first
    (``router`` 'least-work': least work left, which is exactly FCFS with a central queue
    when service times are known) or to the slice another router picks
    (:class:`fleetplan.sim.routing.SplitRouter`: 'round-robin', 'random' by a uniform of
    (``seed``, request), 'prefix-aware' to a slice holding the prefix of ``route_key``
    (n,) capped by the slices' queued work), where it queues FCFS; it computes for ``service_ms``, then
    sends its KV.

    KV: a slice's link carries one transfer at a time; the transfer of T ms (ICI, or DCN
    when the KV goes to another pod) may start ``overlap`` x T before the compute ends
    (layer-wise streaming), never before the compute starts nor before the link is free;
    the first token leaves when the last byte lands.

    Admission: with ``limit_ms``, a request whose estimated TTFT -- its exact queue wait
    plus ``est_extra_ms`` (path so far, compute, the exposed transfer, the rest of the
    path at p50) -- exceeds its limit is rejected at once and takes no slot (nan limit:
    never rejected). ``eligible`` False: the request never reaches the pool (clamped or
    shed at the gateway).

    Placement: ``server_pod`` (servers,) the pod of each slice; ``route_cdf[pod]`` =
    (decode pods, cumulative shares) of that pod's KV; ``route_u`` (n,) uniforms choose.
    Returns :class:`PrefillPass`.
    """
    n = queue_in_ms.size
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    kv_done = np.full(n, np.nan)
    server = np.full(n, -1, dtype=np.int64)
    dcn = np.zeros(n, dtype=bool)
    dpod = np.full(n, -1, dtype=np.int64)
    elig = np.ones(n, dtype=bool) if eligible is None else eligible
    ici = np.zeros(n) if xfer_ici_ms is None else xfer_ici_ms
    dcn_ms = ici if xfer_dcn_ms is None else xfer_dcn_ms
    lim = limit_ms
    extra = est_extra_ms
    heap = [(0.0, j) for j in range(servers)]
    split = _split_router(router, servers, seed, n, route_key)
    free_at = [0.0] * servers  # under a split router: when each slice finishes its queue
    link_ici = [0.0] * servers
    link_dcn = [0.0] * servers
    pods = server_pod.tolist() if server_pod is not None else None
    heapreplace = heapq.heapreplace
    # the loop runs on Python lists (far faster per element than numpy scalars), a chunk of
    # requests at a time: lists of the whole run cost ~30 bytes per element each, 0.4 KB per
    # request over the dozen of them (2 GB of a region's sizing scenario when they were)
    for lo in range(0, n, _CHUNK):
        hi = min(lo + _CHUNK, n)
        q_l, s_l, e_l = queue_in_ms[lo:hi].tolist(), service_ms[lo:hi].tolist(), elig[lo:hi].tolist()
        ici_l, dcn_l = ici[lo:hi].tolist(), dcn_ms[lo:hi].tolist()
        lim_l = lim[lo:hi].tolist() if lim is not None else None
        ex_l = extra[lo:hi].tolist() if extra is not None else None
        u_l = route_u[lo:hi].tolist() if route_u is not None else None
        st_l, en_l, kv_l = start[lo:hi].tolist(), end[lo:hi].tolist(), kv_done[lo:hi].tolist()
        sv_l, dc_l, dp_l = server[lo:hi].tolist(), dcn[lo:hi].tolist(), dpod[lo:hi].tolist()
        for c in range(hi - lo):
            if not e_l[c]:
                continue
            q = q_l[c]
            if split is None:
                free, j = heap[0]
            else:
                j = split.pick(lo + c, lambda: [f - q if f > q else 0.0 for f in free_at], s_l[c])
                free = free_at[j]
            t0 = free if free > q else q
            if lim_l is not None:
                li = lim_l[c]
                if li == li and (t0 - q) + ex_l[c] > li:  # li == li: not nan
                    continue
            t1 = t0 + s_l[c]
            if split is None:
                heapreplace(heap, (t1, j))
            else:
                free_at[j] = t1
            cross = False
            if pods is not None:
                pods_to, cdf = route_cdf[pods[j]]
                to = int(pods_to[min(int(np.searchsorted(cdf, u_l[c], side="right")), len(pods_to) - 1)])
                dp_l[c] = to
                cross = to != pods[j]
            x = dcn_l[c] if cross else ici_l[c]
            hide = overlap * x
            if hide > s_l[c]:
                hide = s_l[c]
            link = link_dcn if cross else link_ici
            xs = t1 - hide
            if link[j] > xs:
                xs = link[j]
            xe = xs + x
            link[j] = xe
            st_l[c], en_l[c], kv_l[c], sv_l[c], dc_l[c] = t0, t1, xe, j, cross
            if progress is not None and ((lo + c) & 0xFFFF) == 0:
                progress(lo + c)
        start[lo:hi], end[lo:hi], kv_done[lo:hi] = st_l, en_l, kv_l
        server[lo:hi], dcn[lo:hi], dpod[lo:hi] = sv_l, dc_l, dp_l
    return PrefillPass(start, end, kv_done, server, server >= 0, dcn, dpod)


def _split_router(router: str, servers: int, seed: int, n: int, route_key: np.ndarray | None) -> SplitRouter | None:
    """The :class:`~fleetplan.sim.routing.SplitRouter` of a pool of ``servers`` under
    ``router`` (None for least-work): under 'random' a uniform per request (the same the
    replicas' random split has always drawn), under 'prefix-aware' the routing keys
    ``route_key`` (n,) (none: each request its own key)."""
    if router == "least-work":
        return None
    u = uniform_hash(seed ^ 0x5EED, np.arange(n), np.zeros(n, dtype=np.int64)) if router == "random" else None
    keys = (np.arange(n) if route_key is None else np.asarray(route_key, dtype=np.int64)) if router == "prefix-aware" else None
    return SplitRouter(router, servers, u, keys)


# ----------------------------------------------------------------------------- decode


def decode_des(
    ready_ms: np.ndarray,
    prompt_tokens: np.ndarray,
    out_tokens: np.ndarray,
    speculates: np.ndarray,
    log_p: dict[int, np.ndarray],
    slices: list[DecodeSlice],
    kv_of: Callable[[np.ndarray], np.ndarray],
    kv_per_token: float | None,
    seed: int,
    pod_of_request: np.ndarray | None = None,
    progress: Callable[[float], None] | None = None,
    xfer_ms: np.ndarray | None = None,
) -> DecodeLog:
    """Continuous batching on decode slices, request by request and step by step.

    A request whose KV lands at ``ready_ms[i]`` goes to the slice with the fewest
    residents (joined or joining) among those of its pod (``pod_of_request``; any pod
    when none has room) with room under the batch cap and in the KV pool; when no slice
    has room it waits, first come first served, for the first slice that frees a place.
    It joins at the slice's next step start (at once when the slice is idle). A step's
    time is the slice's :class:`StepKernel` for its residents, their KV and the drafters
    among them (speculation on while occupancy is below the switch-off batch); at its end
    every resident gains 1 token, or 1 + accepted drafts, until it has ``out_tokens``
    (the first came from prefill). Residents hold ``kv_of(prompt + tokens so far)`` bytes
    (linear with ``kv_per_token`` when given: an incremental sum). ``log_p``: ln of each
    request's per-token acceptance probability (:func:`log_acceptance`), by draft length:
    {k: (n,)} for every k the slices draft (p depends on k for a given acceptance rate).

    Handoffs (``xfer_ms`` (n,) given, ms): the KV may start moving at ``ready_ms``; the decode
    allocates it then where its page pool has room, the request joins that slice when it has
    landed ``xfer_ms`` later, and a handoff with no room waits -- prefill stalls
    (``DecodeLog.handoffs``: :class:`fleetplan.sim.handoff.Handoffs`).

    Args: arrays (n,) in any order; requests with ``out_tokens`` <= 1 or nan ready time
    never decode. Returns :class:`DecodeLog`.
    """
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return _decode_des(ready_ms, prompt_tokens, out_tokens, speculates, log_p, slices, kv_of, kv_per_token, seed, pod_of_request, progress,
                           xfer_ms)


def _decode_des(ready_ms, prompt_tokens, out_tokens, speculates, log_p, slices, kv_of, kv_per_token, seed, pod_of_request, progress,
                xfer_ms=None):
    n = ready_ms.size
    sh = _Shared(n, prompt_tokens, out_tokens, speculates, log_p, kv_of, kv_per_token, seed)
    go = np.flatnonzero(np.isfinite(ready_ms) & (out_tokens > 1))
    go = go[np.argsort(ready_ms[go], kind="stable")]
    st = [_Batch(i, c.kernel, c.batch_cap, c.kv_capacity_bytes, c.draft_tokens, c.switch_off_batch, sh) for i, c in enumerate(slices)]
    busy = [False] * len(st)
    occ = np.zeros(len(st))
    kvocc = np.zeros(len(st))
    cap = np.array([c.batch_cap for c in slices], dtype=float)
    kvcap = np.array([c.kv_capacity_bytes for c in slices], dtype=float)
    pod = np.array([c.pod for c in slices])
    multi_pod = pod_of_request is not None and len(set(pod.tolist())) > 1
    pod_mask = {p: pod == p for p in set(pod.tolist())}
    kv_new = kv_of(prompt_tokens + 1.0)
    sl_of = sh.slice
    queued = np.zeros(n, dtype=bool)
    waitq: deque[int] = deque()
    heap: list[tuple[float, int, int]] = []
    seq = 0
    inf = math.inf
    push, pop = heapq.heappush, heapq.heappop

    def start(k: int, t: float) -> None:
        nonlocal seq
        busy[k] = True
        seq += 1
        push(heap, (t + st[k].begin(t), seq, k))

    def add(k: int, i: int, held: bool = False) -> None:
        s = st[k]
        s.pending.append(i)
        s.pending_kv += float(kv_new[i])
        occ[k] += 1
        if not held:  # a handoff's KV is counted from its allocation
            kvocc[k] += kv_new[i]
        sl_of[i] = k

    def land_event(t: float, i: int) -> None:  # the heap's entries: (ms, seq, slice whose step ends | ~request whose KV lands)
        nonlocal seq
        seq += 1
        push(heap, (t, seq, ~i))

    def join(k: int, i: int, t: float) -> None:
        add(k, i, True)
        if not busy[k]:
            start(k, t)

    ho = Handoffs(ready_ms, xfer_ms, kv_new, occ, kvocc, cap, kvcap, sl_of, queued, land_event, join) if xfer_ms is not None else None

    def place(i: int, t: float) -> bool:
        if ho is None and not multi_pod:
            # the first slice of fewest residents, when it has room, is the masked argmin below (any slice before it
            # holds more residents): one argmin instead of four array operations per arrival
            k = int(occ.argmin())
            if occ[k] < cap[k] and kvocc[k] + kv_new[i] <= kvcap[k]:
                add(k, i)
                if not busy[k]:
                    start(k, t)
                return True
        fits, load = ((occ < cap) & (kvocc + kv_new[i] <= kvcap), occ) if ho is None else ho.candidates(i)
        if multi_pod:
            inpod = fits & pod_mask.get(int(pod_of_request[i]), fits)
            if inpod.any():
                fits = inpod
        masked = np.where(fits, load, inf)
        k = int(masked.argmin())
        if masked[k] == inf:
            return False
        if ho is not None:
            ho.hold(k, i, t)
        else:
            add(k, i)
            if not busy[k]:
                start(k, t)
        return True

    ptr = 0
    ng = go.size
    ready_g = ready_ms[go]
    # the arrivals as Python lists a chunk at a time (as prefill_pass: not ~70 bytes per request of the run)
    base, ready_l, go_l = 0, ready_g[:_CHUNK].tolist(), go[:_CHUNK].tolist()
    events = 0
    while ptr < ng or heap:
        if ptr < ng and (not heap or ready_l[ptr - base] <= heap[0][0]):
            i = go_l[ptr - base]
            if not place(i, ready_l[ptr - base]):
                waitq.append(i)  # with handoffs: stalled, waiting for decode KV
                queued[i] = ho is None
            ptr += 1
            if ptr - base == len(go_l) and ptr < ng:
                base, ready_l, go_l = ptr, ready_g[ptr:ptr + _CHUNK].tolist(), go[ptr:ptr + _CHUNK].tolist()
        else:
            t, _, k = pop(heap)
            if k < 0:  # a handoff's KV landed
                ho.land(~k, t)
                continue
            s = st[k]
            s.end(t)
            occ[k] = s.b + len(s.pending)
            kvocc[k] = s.kv + s.pending_kv
            if ho is not None:
                kvocc[k] += ho.held[k]
                ho.after_step(k, t, waitq)
            while ho is None and waitq and occ[k] < cap[k] and kvocc[k] + kv_new[waitq[0]] <= kvcap[k]:
                add(k, waitq.popleft())
            if s.b or s.pending:
                start(k, t)
            else:
                busy[k] = False
        events += 1
        if progress is not None and (events & 0x3FFF) == 0:
            progress(heap[0][0] if heap else (float(ready_g[ptr - 1]) if ptr else 0.0))
    return _decode_log(sh, st, ready_ms if ho is None else ho.landed_ms, queued, ho)


# ----------------------------------------------------------------------------- colocated


@dataclass
class Replica:
    """A colocated replica: its step kernel, KV page pool less paging slack (bytes), the
    most residents it holds (its KV pool's request capacity at the tier's mean KV), and
    draft length / switch-off batch as for a decode slice."""

    kernel: StepKernel
    kv_capacity_bytes: float
    max_residents: int
    draft_tokens: int = 0
    switch_off_batch: int | None = None


@dataclass
class ReplicaLog:
    """:class:`DecodeLog` of the replicas' decode steps plus, per request (n,), the
    prefill start and end (ms; nan when not admitted), the replica (-1 when rejected) and
    admitted (bool)."""

    decode: DecodeLog
    prefill_start_ms: np.ndarray
    prefill_end_ms: np.ndarray
    replica: np.ndarray
    admitted: np.ndarray


def replica_des(
    queue_in_ms: np.ndarray,
    chunks_ms: list[np.ndarray],
    req_type: np.ndarray,
    prompt_tokens: np.ndarray,
    out_tokens: np.ndarray,
    speculates: np.ndarray,
    log_p: dict[int, np.ndarray],
    replicas: list[Replica],
    kv_of: Callable[[np.ndarray], np.ndarray],
    kv_per_token: float | None,
    seed: int,
    eligible: np.ndarray | None = None,
    limit_ms: np.ndarray | None = None,
    est_extra_ms: np.ndarray | None = None,
    router: str = "least-work",
    progress: Callable[[float], None] | None = None,
    chunk_budget: int | None = None,
    mixed: "MixedKernel | None" = None,
    cached_tokens: np.ndarray | None = None,
    route_key: np.ndarray | None = None,
) -> ReplicaLog:
    """Colocated replicas that interleave prefill and decode, prefill first (vLLM's
    default scheduler): at each decision point a replica runs the next prefill chunk of
    the request at the head of its queue (chunks of ``chunks_ms[req_type[i]]``, ms) if it
    has one and its KV fits, else a decode step of its residents (as in
    :func:`decode_des`), else idles. A request's first token leaves at its prefill's
    end, and it joins the replica's decode batch at the next step.

    Routing at ``queue_in_ms`` (sorted): ``least-work`` sends a request to the replica
    that can start its prefill first -- the least prefill work queued plus what is left
    of the step or chunk in progress (then the fewest residents); ``round-robin``,
    ``random`` (a uniformly random replica: the split the M/G/1-per-replica model assumes)
    and ``prefix-aware`` (to a replica holding the prefix of ``route_key`` (n,), capped
    by the least-work router's measure) as :class:`fleetplan.sim.routing.SplitRouter`. Admission
    as :func:`prefill_pass`: the queue wait estimate is the replica's queued prefill work
    plus what is left of its current step or chunk. Returns :class:`ReplicaLog`.

    With ``chunk_budget`` C (and ``mixed``, a :class:`fleetplan.perf.colocated.MixedKernel`,
    and ``cached_tokens`` (n,)) the replicas run chunked prefill with mixed batches
    (Sarathi-Serve): while a prompt is in progress every step carries the residents'
    decode tokens and min(what is left of the head prompt, C - residents) (at least 1) of
    its uncached tokens, priced by ``mixed`` (the prompt's first chunk also pays
    prefill_overhead_ms); the prompt's first token leaves at the end of its last chunk's
    step, and it decodes from the next step. ``chunks_ms`` then only weighs the queued
    work for routing and admission (a prompt's share of it leaves with each chunk).
    """
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return _Replicas(_ReplicaRun(queue_in_ms, chunks_ms, req_type, prompt_tokens, out_tokens, speculates, log_p, replicas, kv_of, kv_per_token,
                                     seed, eligible, limit_ms, est_extra_ms, router, progress, chunk_budget, mixed, cached_tokens, route_key)).run()


@dataclass(frozen=True)
class _ReplicaRun:
    """The inputs of one colocated run, as :func:`replica_des` takes them."""

    queue_in_ms: np.ndarray
    chunks_ms: list[np.ndarray]
    req_type: np.ndarray
    prompt_tokens: np.ndarray
    out_tokens: np.ndarray
    speculates: np.ndarray
    log_p: dict[int, np.ndarray]
    replicas: list[Replica]
    kv_of: Callable[[np.ndarray], np.ndarray]
    kv_per_token: float | None
    seed: int
    eligible: np.ndarray | None = None
    limit_ms: np.ndarray | None = None
    est_extra_ms: np.ndarray | None = None
    router: str = "least-work"
    progress: Callable[[float], None] | None = None
    chunk_budget: int | None = None
    mixed: "MixedKernel | None" = None
    cached_tokens: np.ndarray | None = None
    route_key: np.ndarray | None = None


class _Replicas:
    """The state of a colocated run (:func:`replica_des`) and its event handlers: per replica
    r its queue of requests, the prefill work queued (ms), when its step or chunk in progress
    ends and what it is (``doing[r]``: ("chunk", rid, index), ("mixed"/"solo", rid, tokens) or
    ("step",)), its decode batch; per request its prefill start and end and replica."""

    def __init__(self, cfg: _ReplicaRun):
        self.cfg = cfg
        n = self.n = cfg.queue_in_ms.size
        self.sh = _Shared(n, cfg.prompt_tokens, cfg.out_tokens, cfg.speculates, cfg.log_p, cfg.kv_of, cfg.kv_per_token, cfg.seed)
        R = self.R = len(cfg.replicas)
        self.bt = [_Batch(i, r.kernel, r.max_residents, r.kv_capacity_bytes, r.draft_tokens, r.switch_off_batch, self.sh)
                   for i, r in enumerate(cfg.replicas)]
        self.queues: list[deque[int]] = [deque() for _ in range(R)]
        self.work = [0.0] * R  # prefill ms queued, and the chunks not yet started of the request in progress
        self.busy_until = [0.0] * R
        self.doing: list[tuple | None] = [None] * R  # ("chunk", rid, index) or ("step",)
        self.kv_new = cfg.kv_of(cfg.prompt_tokens + 1.0)
        self.total = np.array([float(np.sum(c)) for c in cfg.chunks_ms])
        self.pstart = np.full(n, np.nan)
        self.pend = np.full(n, np.nan)
        self.rep = np.full(n, -1, dtype=np.int64)
        self.heap: list[tuple[float, int, int]] = []
        self.seq = 0
        self.split = _split_router(cfg.router, R, cfg.seed, n, cfg.route_key)
        self.step_next = self.decide
        if cfg.chunk_budget is not None:
            if cfg.mixed is None or cfg.cached_tokens is None:
                raise ValueError("a chunked schedule needs the mixed-step kernel and the cached tokens")
            self.newtok = np.maximum(cfg.prompt_tokens - cfg.cached_tokens, 1.0).tolist()
            self.cached_l = cfg.cached_tokens.tolist()
            self.cur = [-1] * R  # the prompt each replica is chunking
            self.prog = [0.0] * R  # its tokens done
            self.step_next = self.decide_chunked

    def run(self) -> ReplicaLog:
        """The event loop: arrivals in ``queue_in_ms`` order, interleaved with the replicas'
        decisions in time order (an arrival first at a tie)."""
        cfg, n, heap = self.cfg, self.n, self.heap
        elig = np.ones(n, dtype=bool) if cfg.eligible is None else cfg.eligible
        q_l = cfg.queue_in_ms.tolist()
        progress = cfg.progress
        ptr = 0
        events = 0
        while ptr < n or heap:
            if ptr < n and (not heap or q_l[ptr] <= heap[0][0]):
                i = ptr
                ptr += 1
                if not elig[i] or not self.arrive(i, q_l[i]):
                    continue
            else:
                t, _, r = heapq.heappop(heap)
                if self.doing[r] is not None and self.doing[r][0] == "step":
                    self.bt[r].end(t)
                self.step_next(r, t)
            events += 1
            if progress is not None and (events & 0x3FFF) == 0:
                progress(heap[0][0] if heap else 0.0)
        return ReplicaLog(_decode_log(self.sh, self.bt, self.pend.copy(), np.zeros(n, dtype=bool)), self.pstart, self.pend, self.rep, self.rep >= 0)

    def arrive(self, i: int, t: float) -> bool:
        """Request i arrives at t: routed to a replica, refused (False) when its queue wait
        estimate passes its limit, else queued (and started on an idle replica)."""
        cfg, work, busy_until, doing, bt, R = self.cfg, self.work, self.busy_until, self.doing, self.bt, self.R
        total, req_type = self.total, cfg.req_type
        if self.split is not None:
            r = self.split.pick(i, lambda: [work[x] + (max(busy_until[x] - t, 0.0) if doing[x] is not None else 0.0) for x in range(R)],
                                total[req_type[i]])
        else:  # the replica that can start this prefill first: queued prefill work plus what is left of its step or chunk
            r = min(range(R), key=lambda x: (work[x] + (max(busy_until[x] - t, 0.0) if doing[x] is not None else 0.0),
                                             bt[x].b + len(bt[x].pending), x))
        lim, ex = cfg.limit_ms, cfg.est_extra_ms
        if lim is not None and lim[i] == lim[i]:
            left = max(busy_until[r] - t, 0.0) if doing[r] is not None else 0.0
            if work[r] + left + ex[i] > lim[i]:
                return False
        self.rep[i] = r
        self.queues[r].append(i)
        work[r] += total[req_type[i]]
        if doing[r] is None:
            self.step_next(r, t)
        return True

    def first_token(self, b, rid: int, r: int, t: float) -> None:
        """Request rid's prefill ended on replica r at t: its first token leaves now; with more
        to say it joins the decode batch ``b`` at the next step, else it is done."""
        self.pend[rid] = t
        if self.cfg.out_tokens[rid] > 1:
            b.pending.append(rid)
            b.pending_kv += float(self.kv_new[rid])
            self.sh.slice[rid] = r
        else:
            self.sh.done[rid] = t

    def decode_step(self, b, r: int, t: float) -> None:
        """Replica r starts a decode step of its batch ``b`` at t."""
        self.doing[r] = ("step",)
        self.busy(r, t, b.begin(t))

    def busy(self, r: int, t: float, d: float) -> None:
        """Replica r works on what ``doing[r]`` says from t for d ms: its next decision at t + d."""
        self.seq += 1
        self.busy_until[r] = t + d
        heapq.heappush(self.heap, (t + d, self.seq, r))

    def admissible(self, r: int, head: int) -> bool:
        """Request ``head`` may start on replica r: a resident slot and KV for it, or an empty replica."""
        b = self.bt[r]
        rp = self.cfg.replicas[r]
        return (b.b + len(b.pending) < rp.max_residents and b.kv + b.pending_kv + self.kv_new[head] <= rp.kv_capacity_bytes
                or (b.b + len(b.pending) == 0))

    def decide(self, r: int, t: float) -> None:
        """Replica r's next step at t, prefill first: the next chunk of the prompt in progress,
        else the head of its queue's first chunk when it is admissible, else a decode step."""
        b = self.bt[r]
        q = self.queues[r]
        act = self.doing[r]
        chunks_ms, req_type = self.cfg.chunks_ms, self.cfg.req_type
        if act is not None and act[0] == "chunk":
            rid, c = act[1], act[2] + 1
            ch = chunks_ms[req_type[rid]]
            if c < len(ch):
                self.doing[r] = ("chunk", rid, c)
                d = float(ch[c])
                self.work[r] -= d
                self.busy(r, t, d)
                return
            # prefill done: first token now, decode from the next step
            self.first_token(b, rid, r, t)
        self.doing[r] = None
        if q:
            head = q[0]
            if self.admissible(r, head):
                q.popleft()
                self.pstart[head] = t
                ch = chunks_ms[req_type[head]]
                self.doing[r] = ("chunk", head, 0)
                d = float(ch[0])
                self.work[r] -= d
                self.busy(r, t, d)
                return
        if b.b or b.pending:
            self.decode_step(b, r, t)

    def decide_chunked(self, r: int, t: float) -> None:
        """Replica r's next step at t under chunked prefill: a step that carries the residents'
        decode tokens and the next chunk of the prompt in progress (or of the admissible head of
        its queue), else a decode step."""
        cfg, b, q, act = self.cfg, self.bt[r], self.queues[r], self.doing[r]
        cur, prog, newtok = self.cur, self.prog, self.newtok
        if act is not None and act[0] in ("mixed", "solo"):
            rid, ch = act[1], act[2]
            if act[0] == "mixed":
                b.end(t)
            prog[r] += ch
            if prog[r] >= newtok[rid] - 1e-9:
                cur[r] = -1
                self.first_token(b, rid, r, t)
        self.doing[r] = None
        if cur[r] < 0 and q and self.admissible(r, q[0]):
            head = q.popleft()
            self.pstart[head] = t
            cur[r] = head
            prog[r] = 0.0
        if cur[r] >= 0:
            rid = cur[r]
            nres = b.b + len(b.pending)
            ch = int(min(newtok[rid] - prog[r], max(cfg.chunk_budget - nres, 1)))
            # the chunk leaves the queued work as it starts: from now on the router sees
            # it as what is left of the step in progress (busy_until), not twice
            self.work[r] -= self.total[cfg.req_type[rid]] * ch / newtok[rid]
            ctx = self.cached_l[rid] + prog[r]
            if nres:
                b.begin(t)  # the residents (and joiners) decode in this step
                d = cfg.mixed.step_ms(b.b, b.kv, ch, ctx)
                self.doing[r] = ("mixed", rid, ch)
            else:
                d = cfg.mixed.step_ms(0, 0.0, ch, ctx)
                self.doing[r] = ("solo", rid, ch)
            if prog[r] == 0.0:
                d += cfg.mixed.prefill_overhead_ms
            self.busy(r, t, d)
            return
        if b.b or b.pending:
            self.decode_step(b, r, t)

