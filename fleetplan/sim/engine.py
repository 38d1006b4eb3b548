"""The discrete-event core: a FCFS prefill pool with its KV links, decode slices with
continuous batching, and colocated replicas that interleave the two.

Everything here works on plain arrays (times in ms since the start of the run, sizes in
tokens and bytes) and knows nothing of plans or instances; :mod:`fleetplan.sim.run`
builds the arrays from a plan. Step times come from :class:`fleetplan.perf.speculation.StepKernel`
(the roofline with the residents' own KV), prefill times are given per request by the
caller (from :func:`fleetplan.perf.roofline.prefill_time_ms`).

Speculative acceptance is random but reproducible: the drafts request r accepts at its
m-th decode step are a pure function of (seed, r, m) -- a SplitMix64 hash turned into a
uniform u, and A = min(k, floor(ln u / ln p)) accepted drafts, so P(A >= a) = p^a
(drafts accepted until the first rejection, per-token probability p; Leviathan et al.,
ICML 2023). Every token's timestamp can therefore be rebuilt after the run
(:meth:`DecodeLog.token_times_ms`) without storing a token.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from fleetplan.perf.speculation import StepKernel
from fleetplan.sim.handoff import Handoffs
from fleetplan.sim.routing import SplitRouter

if TYPE_CHECKING:
    from fleetplan.perf.colocated import MixedKernel

__all__ = ["uniform_hash", "accepted_drafts", "log_acceptance", "PrefillPass", "prefill_pass", "DecodeSlice", "DecodeLog", "decode_des", "Replica",
           "replica_des"]

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_G = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


def uniform_hash(seed: int, ids: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Uniforms in (0, 1), one per (id, m) pair, a pure function of (seed, id, m):
    SplitMix64 (Steele, Lea & Flood, OOPSLA 2014) of seed x golden + id x C1 + m. Arrays
    of non-negative int64 broadcast together; returns float64."""
    with np.errstate(over="ignore"):
        return _uniform_hash(seed, np.ascontiguousarray(ids, dtype=np.int64), np.ascontiguousarray(m, dtype=np.int64))


def _uniform_hash(seed: int, ids: np.ndarray, m: np.ndarray) -> np.ndarray:
    # int64 arrays reinterpreted as uint64 (no copy); the caller silences overflow warnings
    return _mix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * _G + ids.view(np.uint64) * _C1 + m.view(np.uint64) + _G)


def _hash_base(seed: int, ids: np.ndarray) -> np.ndarray:
    """seed x golden + id x C1 + golden (uint64, mod 2^64): :func:`_uniform_hash` of (seed,
    id, m) is :func:`_mix` of this plus m, bit for bit (addition mod 2^64 is associative), so
    a decode slice keeps it per resident and adds the step count. The caller silences
    overflow warnings."""
    return ids.view(np.uint64) * _C1 + (np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * _G + _G)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser of uint64 ``x`` (modified in place) as uniforms in (0, 1)."""
    x ^= x >> _S30
    x *= _C1
    x ^= x >> _S27
    x *= _C2
    x ^= x >> _S31
    return ((x >> _S11).astype(np.float64) + 0.5) * (1.0 / 9007199254740992.0)


def accepted_drafts(u: np.ndarray, log_p: np.ndarray, k: int) -> np.ndarray:
    """Drafts accepted for uniforms ``u`` and per-token log acceptance probabilities
    ``log_p`` (<= 0): min(k, floor(ln u / ln p)), so P(A >= a) = p^a. int64."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _accepted(u, log_p, k)


def log_acceptance(p: np.ndarray | float) -> np.ndarray:
    """ln p for per-token acceptance probabilities p in [0, 1], kept strictly negative
    (p = 1 gives -1e-300, so ln u / ln p is +inf: every draft accepted; p = 0 gives -inf,
    so none is)."""
    with np.errstate(divide="ignore"):
        return np.minimum(np.log(np.asarray(p, dtype=float)), -1e-300)


def _accepted(u: np.ndarray, log_p: np.ndarray, k: int) -> np.ndarray:
    a = np.log(u) / log_p
    np.minimum(a, k, out=a)
    return a.astype(np.int64)  # floor for non-negative a


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
    # request over the dozen of them (issue 39 item 23: 2 GB of a region's sizing scenario)
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


@dataclass
class DecodeSlice:
    """One decode slice: its step kernel, batch cap (residents), KV page pool less paging
    slack (bytes), draft length k (0 = off), the occupancy at and above which speculation
    switches off (None: never) and its pod (0 without a placement)."""

    kernel: StepKernel
    batch_cap: int
    kv_capacity_bytes: float
    draft_tokens: int = 0
    switch_off_batch: int | None = None
    pod: int = 0


@dataclass
class DecodeLog:
    """What the decode slices did. Per request (n,): slice (-1: never decoded), j0 / j1 the
    first and last step it took part in (steps of its slice), join_ms (the step start it
    joined at), done_ms (its last token, server side), wait_ms (KV landed -> joined),
    queued (found no slot and waited for one); with handoffs, ``handoffs``
    (:class:`fleetplan.sim.handoff.Handoffs`). Per slice s, per step: starts_ms[s],
    ends_ms[s], sizes[s] (residents), joins[s] (of which joined at its start), tokens[s]
    (tokens it produced), spec_on[s] (speculation on). kv_overflow_steps: steps whose
    residents' KV outgrew the page pool (no preemption modelled)."""

    slice: np.ndarray
    j0: np.ndarray
    j1: np.ndarray
    join_ms: np.ndarray
    done_ms: np.ndarray
    wait_ms: np.ndarray
    queued: np.ndarray
    starts_ms: list[np.ndarray]
    ends_ms: list[np.ndarray]
    sizes: list[np.ndarray]
    joins: list[np.ndarray]
    tokens: list[np.ndarray]
    spec_on: list[np.ndarray]
    kv_overflow_steps: int
    seed: int
    draft_tokens: list[int]
    handoffs: Handoffs | None = None  # with handoffs: when each was allocated and landed, which waited for KV

    def token_times_ms(self, i: int, first_token_ms: float, out_tokens: int, speculates: bool, log_p: float) -> np.ndarray:
        """Every token's server-side timestamp (ms) of request i, rebuilt from the step log
        and the acceptance hash: the first token at ``first_token_ms``, then each step's
        1 + accepted drafts (1 when it does not draft), cut at ``out_tokens``. ``log_p``
        as given to :func:`decode_des` (from :func:`log_acceptance`)."""
        s = int(self.slice[i])
        if s < 0 or out_tokens <= 1:
            return np.array([first_token_ms])
        j0, j1 = int(self.j0[i]), int(self.j1[i])
        ends = self.ends_ms[s][j0:j1 + 1]
        on = self.spec_on[s][j0:j1 + 1] & speculates
        m = np.arange(ends.size)
        gains = np.ones(ends.size, dtype=np.int64)
        k = self.draft_tokens[s]
        if k and on.any():
            gains[on] += accepted_drafts(uniform_hash(self.seed, np.full(int(on.sum()), i), m[on]), np.full(int(on.sum()), log_p), k)
        reps = gains.copy()
        cum = np.cumsum(gains)
        last = int(np.searchsorted(cum, out_tokens - 1))
        reps = reps[:last + 1]
        reps[-1] -= cum[last] - (out_tokens - 1)
        return np.concatenate([[first_token_ms], np.repeat(ends[:last + 1], reps)])


_RID, _M, _GOT, _TGT = 0, 1, 2, 3  # rows of a batch's int table
_PROMPT, _LOGP = 0, 1  # rows of its float table


class _Shared:
    """Per-request arrays every batch of a run writes (and the inputs it reads)."""

    def __init__(self, n, prompt_tokens, out_tokens, speculates, log_p, kv_of, kv_per_token, seed):
        self.slice = np.full(n, -1, dtype=np.int64)
        self.j0 = np.full(n, -1, dtype=np.int64)
        self.j1 = np.full(n, -1, dtype=np.int64)
        self.join = np.full(n, np.nan)
        self.done = np.full(n, np.nan)
        self.prompt = prompt_tokens
        self.out = out_tokens
        self.spec = speculates
        self.log_p = log_p
        self.kv_of = kv_of
        self.kv_per_token = kv_per_token
        self.seed = seed
        self.overflow = 0


class _Batch:
    """The residents of one decode slice (or replica) in compact tables -- ints (rid,
    m = steps taken, got = tokens so far, tgt = tokens wanted) and floats (prompt tokens,
    ln p) by resident, spec (drafts?) -- with the pending joiners, the KV held and the
    step log. :meth:`begin` starts a step and returns its time (ms); :meth:`end` hands
    out the step's tokens, logs the step and removes the finished."""

    __slots__ = ("idx", "kernel", "draft", "switch_off", "kv_cap", "ints", "flts", "spec", "h0", "b", "n_spec", "kv", "pending", "pending_kv",
                 "j", "starts", "ends", "sizes", "joins", "tokens", "spec_flags", "cur_on", "cur_join", "cur_start", "sh")

    def __init__(self, idx: int, kernel: StepKernel, cap: int, kv_cap: float, draft: int, switch_off: int | None, sh: _Shared):
        self.idx = idx
        self.kernel = kernel
        self.draft = draft
        self.switch_off = switch_off
        self.kv_cap = kv_cap
        self.ints = np.zeros((4, cap), dtype=np.int64)
        self.flts = np.zeros((2, cap))
        self.spec = np.zeros(cap, dtype=bool)
        self.h0 = np.zeros(cap, dtype=np.uint64)  # each resident's acceptance-hash base (_hash_base)
        self.b = 0
        self.n_spec = 0
        self.kv = 0.0
        self.pending: list[int] = []
        self.pending_kv = 0.0
        self.j = 0
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.sizes: list[int] = []
        self.joins: list[int] = []
        self.tokens: list[int] = []
        self.spec_flags: list[bool] = []
        self.cur_on = False
        self.cur_join = 0
        self.cur_start = 0.0
        self.sh = sh

    def begin(self, t: float) -> float:
        sh = self.sh
        joined = len(self.pending)
        if joined:
            b = self.b
            e = b + joined
            ids = np.array(self.pending, dtype=np.int64)
            it = self.ints
            it[_RID, b:e] = ids
            it[_M, b:e] = 0
            it[_GOT, b:e] = 1
            it[_TGT, b:e] = sh.out[ids]
            self.flts[_PROMPT, b:e] = sh.prompt[ids]
            self.flts[_LOGP, b:e] = sh.log_p[self.draft][ids] if self.draft else 0.0
            sp = sh.spec[ids]
            self.spec[b:e] = sp
            if self.draft:
                self.h0[b:e] = _hash_base(sh.seed, ids)
            self.n_spec += int(np.count_nonzero(sp))
            self.b = e
            self.kv += self.pending_kv
            sh.j0[ids] = self.j
            sh.join[ids] = t
            self.pending = []
            self.pending_kv = 0.0
        off = self.switch_off
        on = self.draft > 0 and self.n_spec > 0 and (off is None or self.b < off)
        if self.kv > self.kv_cap:
            sh.overflow += 1
        self.cur_on = on
        self.cur_join = joined
        self.cur_start = t
        return self.kernel.step_ms(self.b, self.n_spec if on else 0, self.kv)

    def end(self, t: float) -> None:
        sh = self.sh
        b = self.b
        it = self.ints
        got = it[_GOT, :b]
        if self.cur_on:
            # the drafts each drafting resident accepts this step: uniform_hash(seed, rid, m) (its base + m)
            m = it[_M, :b]
            if self.n_spec == b:  # all draft (the usual case): slices, no index arrays
                gains = _accepted(_mix(self.h0[:b] + m.view(np.uint64)), self.flts[_LOGP, :b], self.draft)
                gains += 1
            else:
                idx = np.flatnonzero(self.spec[:b])
                gains = np.ones(b, dtype=np.int64)
                gains[idx] += _accepted(_mix(self.h0[idx] + m[idx].view(np.uint64)), self.flts[_LOGP, idx], self.draft)
            rem = it[_TGT, :b] - got  # >= 1: a resident leaves at its last token
            np.minimum(gains, rem, out=gains)
            got += gains
            m += 1
            grown = int(gains.sum())
            fin = gains == rem  # got reached its target
        else:
            got += 1
            it[_M, :b] += 1
            grown = b
            fin = got >= it[_TGT, :b]
        self.starts.append(self.cur_start)
        self.ends.append(t)
        self.sizes.append(b)
        self.joins.append(self.cur_join)
        self.tokens.append(grown)
        self.spec_flags.append(self.cur_on)
        linear = sh.kv_per_token is not None
        if linear:
            self.kv += grown * sh.kv_per_token
        nf = int(np.count_nonzero(fin))
        if nf == 1:  # the usual finish: one resident, scalar updates (the same numbers as the general case below)
            g = int(fin.argmax())
            rid = int(it[_RID, g])
            sh.j1[rid] = self.j
            sh.done[rid] = t
            if linear:
                self.kv -= float(self.flts[_PROMPT, g] + got[g]) * sh.kv_per_token
            if self.spec[g]:
                self.n_spec -= 1
            nb = b - 1
            if g < nb:  # swap-remove: the last resident fills the hole
                it[:, g] = it[:, nb]
                self.flts[:, g] = self.flts[:, nb]
                self.spec[g] = self.spec[nb]
                self.h0[g] = self.h0[nb]
            self.b = nb
        elif nf:
            ids = it[_RID, :b][fin]
            sh.j1[ids] = self.j
            sh.done[ids] = t
            if linear:
                self.kv -= float(self.flts[_PROMPT, :b][fin].sum() + got[fin].sum()) * sh.kv_per_token
            self.n_spec -= int(np.count_nonzero(self.spec[:b][fin]))
            nb = b - nf
            # swap-remove: the survivors beyond the new end fill the holes below it
            gone = np.flatnonzero(fin)
            holes = gone[gone < nb]
            if holes.size:
                movers = np.flatnonzero(~fin[nb:]) + nb
                it[:, holes] = it[:, movers]
                self.flts[:, holes] = self.flts[:, movers]
                self.spec[holes] = self.spec[movers]
                self.h0[holes] = self.h0[movers]
            self.b = nb
        if not linear:
            self.kv = float(sh.kv_of(self.flts[_PROMPT, :self.b] + it[_GOT, :self.b]).sum()) if self.b else 0.0
        self.j += 1



def _decode_log(sh: _Shared, batches: list[_Batch], ready_ms: np.ndarray, queued: np.ndarray, ho: Handoffs | None = None) -> DecodeLog:
    i64 = np.int64
    return DecodeLog(sh.slice, sh.j0, sh.j1, sh.join, sh.done, sh.join - ready_ms, queued, [np.array(b.starts) for b in batches],
                     [np.array(b.ends) for b in batches], [np.array(b.sizes, dtype=i64) for b in batches],
                     [np.array(b.joins, dtype=i64) for b in batches], [np.array(b.tokens, dtype=i64) for b in batches],
                     [np.array(b.spec_flags, dtype=bool) for b in batches], sh.overflow, sh.seed, [b.draft for b in batches],
                     ho)


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
        return _replica_des(queue_in_ms, chunks_ms, req_type, prompt_tokens, out_tokens, speculates, log_p, replicas, kv_of, kv_per_token,
                            seed, eligible, limit_ms, est_extra_ms, router, progress, chunk_budget, mixed, cached_tokens, route_key)


def _replica_des(queue_in_ms, chunks_ms, req_type, prompt_tokens, out_tokens, speculates, log_p, replicas, kv_of, kv_per_token, seed,
                 eligible, limit_ms, est_extra_ms, router, progress, chunk_budget=None, mixed=None, cached_tokens=None, route_key=None):
    n = queue_in_ms.size
    sh = _Shared(n, prompt_tokens, out_tokens, speculates, log_p, kv_of, kv_per_token, seed)
    R = len(replicas)
    bt = [_Batch(i, r.kernel, r.max_residents, r.kv_capacity_bytes, r.draft_tokens, r.switch_off_batch, sh) for i, r in enumerate(replicas)]
    queues: list[deque[int]] = [deque() for _ in range(R)]
    work = [0.0] * R  # prefill ms queued, and the chunks not yet started of the request in progress
    busy_until = [0.0] * R
    doing: list[tuple | None] = [None] * R  # ("chunk", rid, index) or ("step",)
    kv_new = kv_of(prompt_tokens + 1.0)
    total = np.array([float(np.sum(c)) for c in chunks_ms])
    pstart = np.full(n, np.nan)
    pend = np.full(n, np.nan)
    rep = np.full(n, -1, dtype=np.int64)
    elig = np.ones(n, dtype=bool) if eligible is None else eligible
    heap: list[tuple[float, int, int]] = []
    seq = 0
    split = _split_router(router, R, seed, n, route_key)

    def first_token(b, rid: int, r: int, t: float) -> None:
        """Request rid's prefill ended on replica r at t: its first token leaves now; with more
        to say it joins the decode batch ``b`` at the next step, else it is done."""
        pend[rid] = t
        if out_tokens[rid] > 1:
            b.pending.append(rid)
            b.pending_kv += float(kv_new[rid])
            sh.slice[rid] = r
        else:
            sh.done[rid] = t

    def decode_step(b, r: int, t: float) -> None:
        """Replica r starts a decode step of its batch ``b`` at t."""
        doing[r] = ("step",)
        busy(r, t, b.begin(t))

    def busy(r: int, t: float, d: float) -> None:
        """Replica r works on what ``doing[r]`` says from t for d ms: its next decision at t + d."""
        nonlocal seq
        seq += 1
        busy_until[r] = t + d
        heapq.heappush(heap, (t + d, seq, r))

    def decide(r: int, t: float) -> None:
        b = bt[r]
        q = queues[r]
        act = doing[r]
        if act is not None and act[0] == "chunk":
            rid, c = act[1], act[2] + 1
            ch = chunks_ms[req_type[rid]]
            if c < len(ch):
                doing[r] = ("chunk", rid, c)
                d = float(ch[c])
                work[r] -= d
                busy(r, t, d)
                return
            # prefill done: first token now, decode from the next step
            first_token(b, rid, r, t)
        doing[r] = None
        if q:
            head = q[0]
            if b.b + len(b.pending) < replicas[r].max_residents and b.kv + b.pending_kv + kv_new[head] <= replicas[r].kv_capacity_bytes or (b.b + len(b.pending) == 0):
                q.popleft()
                pstart[head] = t
                ch = chunks_ms[req_type[head]]
                doing[r] = ("chunk", head, 0)
                d = float(ch[0])
                work[r] -= d
                busy(r, t, d)
                return
        if b.b or b.pending:
            decode_step(b, r, t)

    chunked = chunk_budget is not None
    if chunked:
        if mixed is None or cached_tokens is None:
            raise ValueError("a chunked schedule needs the mixed-step kernel and the cached tokens")
        newtok = np.maximum(prompt_tokens - cached_tokens, 1.0).tolist()
        cached_l = cached_tokens.tolist()
        cur = [-1] * R  # the prompt each replica is chunking
        prog = [0.0] * R  # its tokens done

        def admissible(r: int, head: int) -> bool:
            b = bt[r]
            return (b.b + len(b.pending) < replicas[r].max_residents and b.kv + b.pending_kv + kv_new[head] <= replicas[r].kv_capacity_bytes
                    or (b.b + len(b.pending) == 0))

        def decide_chunked(r: int, t: float) -> None:
            b = bt[r]
            q = queues[r]
            act = doing[r]
            if act is not None and act[0] in ("mixed", "solo"):
                rid, ch = act[1], act[2]
                if act[0] == "mixed":
                    b.end(t)
                prog[r] += ch
                if prog[r] >= newtok[rid] - 1e-9:
                    cur[r] = -1
                    first_token(b, rid, r, t)
            doing[r] = None
            if cur[r] < 0 and q and admissible(r, q[0]):
                head = q.popleft()
                pstart[head] = t
                cur[r] = head
                prog[r] = 0.0
            if cur[r] >= 0:
                rid = cur[r]
                nres = b.b + len(b.pending)
                ch = int(min(newtok[rid] - prog[r], max(chunk_budget - nres, 1)))
                # the chunk leaves the queued work as it starts: from now on the router sees
                # it as what is left of the step in progress (busy_until), not twice
                work[r] -= total[req_type[rid]] * ch / newtok[rid]
                ctx = cached_l[rid] + prog[r]
                if nres:
                    b.begin(t)  # the residents (and joiners) decode in this step
                    d = mixed.step_ms(b.b, b.kv, ch, ctx)
                    doing[r] = ("mixed", rid, ch)
                else:
                    d = mixed.step_ms(0, 0.0, ch, ctx)
                    doing[r] = ("solo", rid, ch)
                if prog[r] == 0.0:
                    d += mixed.prefill_overhead_ms
                busy(r, t, d)
                return
            if b.b or b.pending:
                decode_step(b, r, t)

    step_next = decide_chunked if chunked else decide
    lim = limit_ms
    ex = est_extra_ms
    q_l = queue_in_ms.tolist()
    ptr = 0
    events = 0
    while ptr < n or heap:
        if ptr < n and (not heap or q_l[ptr] <= heap[0][0]):
            i = ptr
            ptr += 1
            if not elig[i]:
                continue
            t = q_l[i]
            if split is not None:
                r = split.pick(i, lambda: [work[x] + (max(busy_until[x] - t, 0.0) if doing[x] is not None else 0.0) for x in range(R)],
                               total[req_type[i]])
            else:  # the replica that can start this prefill first: queued prefill work plus what is left of its step or chunk
                r = min(range(R), key=lambda x: (work[x] + (max(busy_until[x] - t, 0.0) if doing[x] is not None else 0.0),
                                                 bt[x].b + len(bt[x].pending), x))
            if lim is not None and lim[i] == lim[i]:
                left = max(busy_until[r] - t, 0.0) if doing[r] is not None else 0.0
                if work[r] + left + ex[i] > lim[i]:
                    continue
            rep[i] = r
            queues[r].append(i)
            work[r] += total[req_type[i]]
            if doing[r] is None:
                step_next(r, t)
        else:
            t, _, r = heapq.heappop(heap)
            if doing[r] is not None and doing[r][0] == "step":
                bt[r].end(t)
            step_next(r, t)
        events += 1
        if progress is not None and (events & 0x3FFF) == 0:
            progress(heap[0][0] if heap else 0.0)
    return ReplicaLog(_decode_log(sh, bt, pend.copy(), np.zeros(n, dtype=bool)), pstart, pend, rep, rep >= 0)
