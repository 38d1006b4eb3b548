"""A decode slice's continuous batch (:class:`_Batch`: its residents in compact tables, one
step at a time, with their speculative acceptance from :mod:`fleetplan.sim.acceptance`), the
per-request arrays every batch of a run writes (:class:`_Shared`), and the log of what the
slices did (:class:`DecodeLog`). The event loops that drive them are in :mod:`fleetplan.sim.engine`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleetplan.perf.speculation import StepKernel
from fleetplan.sim.acceptance import _accepted, _hash_base, _mix, accepted_drafts, uniform_hash
from fleetplan.sim.handoff import Handoffs

__all__ = ["DecodeSlice", "DecodeLog"]


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
