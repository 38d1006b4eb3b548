"""Decode KV held for requests mid-handoff: the reserve a disaggregated decode slice keeps
beside its running batch for requests whose prompt KV is still arriving from prefill.

What the engines do. A decode worker allocates a request's whole prompt KV *before* the KV
arrives, from the same page pool as its running batch, and holds it for the transfer:

* vLLM's NIXL connector (``vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py``):
  ``NixlConnectorScheduler.get_num_new_matched_tokens`` answers, for a request with
  ``do_remote_prefill``, "all prompt tokens, loaded asynchronously" (``len(prompt) -
  num_computed_tokens, True``); the scheduler (``vllm/v1/core/sched/scheduler.py``,
  ``Scheduler.schedule``) then ``allocate_slots`` for them from its ``kv_cache_manager`` with
  ``load_kv_async`` set, ``update_state_after_alloc`` queues the NIXL read into those blocks
  (``start_load_kv`` on the worker), and the request waits as ``WAITING_FOR_REMOTE_KVS``,
  its blocks held, until ``get_finished`` reports the read done; only then does it join the
  running batch (``max_num_seqs`` counts the running requests, not the ones loading).
* SGLang's PD decode server (``python/sglang/srt/disaggregation/decode.py``): a request waits
  in the ``DecodePreallocQueue`` until its prompt length (plus ``num_reserved_decode_tokens``)
  can be allocated from ``token_to_kv_pool_allocator`` -- the running batch's pool -- then in
  the ``DecodeTransferQueue`` while prefill writes the KV into those pages, then joins the
  running batch. SGLang allocates before the prefill runs, so it holds the pages longer
  (prefill wait + compute + transfer); fleetplan models vLLM's order (allocate when the KV is
  ready to move), the shorter hold, and says so.

So a batch cap B that fills the page pool with B residents leaves no room for handoffs in
flight: a new handoff finds no pages, the KV stays on the prefill slice and the request's
first token waits (prefill stalls). The legal batch cap must leave the reserve below free.

The reserve (per decode slice, at a decode operating point of tier t):

1. Arrivals per slice at full load, by Little's law (L = lambda W; Little, Operations
   Research 9(3), 1961): a slice holds B residents, each for the time its o output tokens
   take, W = o / (tokens/s per slice / B); so lambda = B / W = (tokens/s per slice) / o
   requests/s. It is the most a slice of this operating point is ever sent (the sizing's
   decode row is lambda_pool x o <= slices x tokens/s), a property of the candidate and not of
   the pool's size, so the model stays linear: a pool below full load holds fewer in flight.
   With o <= 1 no request reaches decode (its one token is prefill's; the simulator's rule
   too): no handoff, no reserve.
2. Holding time T (ms): from allocation until the KV has landed = the transfer of the tier's
   p99 prompt's whole KV (the decode allocates the full prompt; a prefix cached on prefill is
   sent too), at the tier's DCN ceiling's mix of paths: T = (1 - d) KV / ici + d KV / dcn
   (``network.kv_ici_gbytes_per_s_per_slice``, ``dcn_gbytes_per_s_per_slice``, d =
   ``Instance.dcn_share_max_of(tier)``). The link queue before a transfer starts is not part of
   T: the decode allocates when the transfer can start (the simulator queues the link first).
3. In flight: handoffs arrive Poisson at lambda and each holds for its own T, an M/G/infinity
   system, whose number in service is Poisson with mean lambda E[T] whatever T's distribution
   (Palm's theorem, 1943; the M/G/infinity queue in Gross & Harris, *Fundamentals of Queueing
   Theory*). E[T] is replaced by the p99 prompt's T (>= E[T]: conservative).
4. Reserve: N = the p-quantile of Poisson(lambda T) (as ``scipy.stats.poisson.ppf``, p = 99%:
   :func:`poisson_quantile`),
   each holding the p99 prompt's KV x (1 + ``priors.kv_paging_slack``) -- the prompt's KV,
   not the mean resident KV (a handoff brings the whole prompt at once; residents hold on
   average half their output too). Taking the p99 prompt for every handoff in flight is
   conservative: in-flight handoffs are length-biased (a long prompt is in flight longer), and
   the p99 prompt bounds all but 1% of them.

Legal: B x resident KV x (1 + slack) + N x prompt KV x (1 + slack) <= the KV page pool
(weights, workspace and headroom already out: :func:`fleetplan.perf.roofline.slice_memory_map`).
N grows with B (through tokens/s), so the fit is monotone in B and the SLO knee search stays
valid. Colocated replicas do not hand off: no reserve.

Units: requests/s, ms, requests, bytes and GB (1e9 bytes) as named.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fleetplan.perf.inputs import Instance
from fleetplan.perf.roofline import kv_bytes_per_request, kv_transfer_ms

__all__ = ["HANDOFF_PERCENTILE", "HandoffReserve", "poisson_quantile", "handoff_prompt_tokens", "handoff_holding_ms", "handoff_reserve", "no_room_text"]

#: The percentile of handoffs in flight a decode slice reserves KV for (%), and of the tier's
#: prompt lengths whose KV and transfer time stand for every handoff.
HANDOFF_PERCENTILE = 99.0


@dataclass(frozen=True)
class HandoffReserve:
    """The KV reserve of one decode slice for handoffs in flight (arrays of the batches' shape).

    Attributes: arrivals_rps (requests/s per slice at full load, Little's law); holding_ms (the
    transfer holding time, ms); mean_in_flight (lambda x T, requests); requests (the Poisson
    ``percentile`` quantile, requests, int64); prompt_tokens (the tier's p99 prompt, tokens);
    kv_per_request_bytes (that prompt's KV with the paging slack, bytes); bytes (requests x
    kv_per_request_bytes); percentile (%)."""

    arrivals_rps: NDArray[np.float64]
    holding_ms: float
    mean_in_flight: NDArray[np.float64]
    requests: NDArray[np.int64]
    prompt_tokens: float
    kv_per_request_bytes: float
    bytes: NDArray[np.float64]
    percentile: float

    @property
    def gb(self) -> NDArray[np.float64]:
        """The reserve in GB (1e9 bytes)."""
        return self.bytes / 1e9


def poisson_quantile(q: float, mean: ArrayLike) -> NDArray[np.int64]:
    """The q-quantile of Poisson(mean) as ``scipy.stats.poisson.ppf`` defines it -- the smallest n
    with P(N <= n) >= q -- for an array of means (>= 0; 0 gives 0), by summing the pmf in log
    space (numpy only: ``fleetplan perf`` loads no SciPy, tests/cli/test_lazy_imports.py; a unit
    test holds it equal to SciPy's). Returns int64 of the means' shape. Raises ValueError for q
    outside (0, 1) or a negative or non-finite mean."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"q must be in (0, 1), got {q!r}")
    m = np.asarray(mean, dtype=float)
    if np.any(~np.isfinite(m)) or np.any(m < 0):
        raise ValueError("Poisson means must be finite and >= 0")
    flat = m.ravel()
    out = np.zeros(flat.size, dtype=np.int64)
    pos = np.flatnonzero(flat > 0)
    if pos.size:
        top = float(flat[pos].max())
        k = np.arange(int(np.ceil(top + 12.0 * np.sqrt(top) + 30.0)) + 1, dtype=float)
        log_fact = np.concatenate([[0.0], np.cumsum(np.log(k[1:]))])
        step = max(1, 2_000_000 // k.size)  # columns per block: at most ~2e6 terms at once
        for a in range(0, pos.size, step):
            mu = flat[pos[a:a + step]]
            cdf = np.cumsum(np.exp(k[:, None] * np.log(mu)[None, :] - mu[None, :] - log_fact[:, None]), axis=0)
            reached = cdf >= q
            out[pos[a:a + step]] = np.where(reached[-1], np.argmax(reached, axis=0), k.size - 1)  # 12 sd + 30 past the mean: reached
    return out.reshape(m.shape)


def handoff_prompt_tokens(tokens: ArrayLike, shares: ArrayLike, percentile: float = HANDOFF_PERCENTILE) -> float:
    """The ``percentile`` prompt of a bucketed length mix (tokens): the shortest bucket whose
    cumulative share of requests reaches it (the discrete percentile, as
    :func:`fleetplan.perf.roofline.mix_moments` takes the p50). Raises ValueError for an
    empty mix or a percentile outside (0, 100]."""
    s = np.asarray(tokens, dtype=float)
    w = np.asarray(shares, dtype=float)
    if s.size == 0 or s.size != w.size:
        raise ValueError("need one share per bucket and at least one bucket")
    if not 0.0 < percentile <= 100.0:
        raise ValueError(f"percentile must be in (0, 100], got {percentile!r}")
    order = np.argsort(s, kind="stable")
    cum = np.cumsum(w[order]) / float(w.sum())
    return float(s[order][min(int(np.searchsorted(cum, percentile / 100.0 - 1e-12)), s.size - 1)])


def handoff_holding_ms(inst: Instance, tier: str, prompt_tokens: float) -> float:
    """The transfer holding time of a handoff of ``prompt_tokens`` in ``tier`` (ms): its whole
    prompt KV over the ICI, or over the DCN for the tier's DCN ceiling's share of requests,
    (1 - d) KV / ici + d KV / dcn (:func:`fleetplan.perf.roofline.kv_transfer_ms`)."""
    kv = float(kv_bytes_per_request(inst.model, prompt_tokens))
    d = float(inst.dcn_share_max_of(tier))
    net = inst.network
    return float((1.0 - d) * kv_transfer_ms(kv, net.kv_ici_gbytes_per_s_per_slice) + d * kv_transfer_ms(kv, net.dcn_gbytes_per_s_per_slice))


def handoff_reserve(inst: Instance, tier: str, tokens: ArrayLike, shares: ArrayLike, output_tokens: float,
                    tokens_per_s: ArrayLike, percentile: float = HANDOFF_PERCENTILE) -> HandoffReserve:
    """The KV a decode slice reserves for handoffs in flight at operating points of
    ``tokens_per_s`` output tokens/s per slice (an array: one per batch cap), for ``tier``
    with prompt lengths ``tokens`` (tokens) of ``shares`` and ``output_tokens`` per request.

    lambda = tokens_per_s / output_tokens (Little's law at full load), T =
    :func:`handoff_holding_ms` of the tier's ``percentile`` prompt, N = Poisson(lambda T)'s
    ``percentile`` quantile, bytes = N x that prompt's KV x (1 + kv_paging_slack); the module
    docstring derives each step and cites the engines; ``output_tokens`` <= 1 reserves nothing
    (no request reaches decode). Returns :class:`HandoffReserve`.
    Raises ValueError for output_tokens <= 0 or a negative rate.
    """
    if not output_tokens > 0:
        raise ValueError(f"output_tokens must be > 0 (tokens per request), got {output_tokens!r}")
    tps = np.asarray(tokens_per_s, dtype=float)
    if np.any(tps < 0) or not np.all(np.isfinite(tps)):
        raise ValueError("tokens_per_s must be finite and >= 0 (output tokens/s per slice)")
    prompt = handoff_prompt_tokens(tokens, shares, percentile)
    hold = handoff_holding_ms(inst, tier, prompt)
    # a request whose output is only its first token (prefill's) never reaches decode: nothing hands off
    lam = tps / float(output_tokens) if output_tokens > 1 else np.zeros_like(tps)
    mean = lam * hold / 1e3
    n = poisson_quantile(percentile / 100.0, mean)
    per = float(kv_bytes_per_request(inst.model, prompt)) * (1.0 + inst.priors.kv_paging_slack)
    return HandoffReserve(lam, hold, mean, n, prompt, per, n * per, percentile)


def no_room_text(h: HandoffReserve, j: int, batch: int, resident_bytes: float, pool_gb: float) -> str:
    """Why batch cap ``batch`` (entry ``j`` of ``h``) leaves no room for the handoffs in flight,
    with the arithmetic: ``resident_bytes`` is one resident's KV with the paging slack (bytes),
    ``pool_gb`` the slice's KV page pool (GB)."""
    per = resident_bytes / 1e9
    return (f"KV of {batch} residents x {per:.2f} GB ({batch * per:,.0f} GB) + the reserve for handoffs in flight "
            f"({int(h.requests[j])} x {h.kv_per_request_bytes / 1e9:.2f} GB = {float(h.gb[j]):,.1f} GB: p{h.percentile:g} of Poisson"
            f"({float(h.mean_in_flight[j]):.3g}) = {float(h.arrivals_rps[j]):.3g} req/s x {h.holding_ms:.3g} ms transfer of a "
            f"{h.prompt_tokens:,.0f}-token prompt) exceeds the {pool_gb:,.0f} GB page pool: prefill would stall waiting for decode KV")
