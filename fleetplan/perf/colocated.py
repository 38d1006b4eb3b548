r"""Colocated replicas as the engine schedules them: prefill-first whole prompts or chunked
prefill with mixed batches, from the same step physics, with least-work or random routing.

Schedules (:class:`Schedule`):

* ``prefill-first`` (vLLM's scheduler without chunking): a queued prompt runs whole, in
  one forward pass, before the next decode step; decode stalls for it.
* ``chunked`` with a token budget C (vLLM's ``max_num_batched_tokens``; Sarathi-Serve,
  Agrawal et al., OSDI'24): every engine step carries the residents' B decode tokens
  first and then C - B tokens of the head prompt, so decode never stalls for a whole
  prompt; a step with a chunk inside costs both (:func:`mixed_step`). One prompt is
  chunked at a time (FCFS); a step's chunk never mixes two prompts.

Per-replica steady state at arrival rate lambda (requests/s per replica). A prompt of
type i costs the replica S_i(b) ms of steps that carry it (prefill-first: its whole
prefill; chunked: its ceil((s - c)/(C - b)) mixed steps) and Delta_i(b) = S_i(b) - n_i d(b)
ms more than the n_i decode steps it rides on (prefill-first: n_i = 0), with d(b) the
decode step at b residents (:func:`fleetplan.perf.roofline.decode_step`). A resident gets
one token per step, so the steps per second are (1 - lambda E[S])/d + lambda E[n] and

  TPOT  = d(b) / (1 - lambda E[Delta(b)])          (mean, time average)
  b     = lambda x output_tokens x TPOT              (Little's law, a fixed point in b)

-- prefill-first gives the classical d / (1 - u), u = lambda E[S]. Unstable when the
prefill share u = lambda E[S] >= 1, when no fixed point exists or when b passes the KV
capacity (or, chunked, reaches the token budget).

TPOT percentile over requests (occupancy distribution). A request's TPOT averages the
steps of its lifetime T = o TPOT: TPOT_req = d(Bbar) + (1/o) sum_k Delta_k, with Bbar the
lifetime-average residents and k the prompts the replica prefills during T. With
Poisson arrivals the residents form an M/G/infinity process (Palm: a resident sees
itself plus a stationary Poisson(b) of others, mean b + 1); with deterministic residence
T its autocovariance is lambda (T - |tau|)^+, so the lifetime average of the others has
variance (1/T^2) int int lambda (T - |s - t|) ds dt = 2 lambda T / 3 = 2b/3. The prompts
arriving during T are Poisson with mean lambda T = b (Little), so sum_k Delta_k is
compound Poisson with variance b E[Delta^2]; an arrival at offset a stays resident for
the rest of the window, adding (T - a)/T to Bbar, so Cov(Bbar, K) = b/2. Linearising d
at b + 1 (slope d'): mean = d(b + 1) + b E[Delta]/o, variance = d'^2 2b/3 + b E[Delta^2]/o^2
+ d' E[Delta] b/o, and the percentile is the normal one (central limit theorem over the
lifetime). Least-work routing smooths a replica's arrivals (narrower than Poisson), so
this is an upper bound there. Random routing (a Poisson split) adds a feedback: a lifetime
that holds more prompts is longer, so more prompts arrive in it; the variance is divided
by (1 - u)^2 with u = lambda E[Delta] (:func:`tpot_percentile_ms`). A chunked prompt's own
compute depends on the residents it finds (its chunks are C - B tokens), taken over
their Poisson(b) distribution (:func:`_own_compute`). Bursty arrivals (``workload.arrival_scv`` = I, read as an
index of dispersion of counts) scale every count covariance by I and add I - 1
cluster-mates (:func:`tpot_percentile_ms`). Source: Takacs (1962) and Eick, Massey & Whitt
(1993) for M/G/infinity; the derivation above.

TTFT = path + queue wait + the prompt's own S_i + the residual of the step in progress
(at most one decode step d(b)). The queue wait: ``least-work`` routing (the router sends
to the replica that can start the prefill first: the Gateway API inference extension's
endpoint picker, fleetplan's simulator) is a central FCFS queue over the pool's c
replicas -- least-work-left is FCFS M/G/c (Kiefer & Wolfowitz 1955; Wolff, *Stochastic
Modeling and the Theory of Queues*, 1989, section 4-11) -- evaluated by
:mod:`fleetplan.perf.queueing` (Erlang C with the Allen-Cunneen scaling); ``random``
splits the arrivals, an M/G/1 per replica. ITL pXX: the chunk-carrying step (chunked)
or, prefill-first, a decode step plus the prompts the replica runs back to back in one
token gap: a gap holds one with probability g (the prompts per token gap) and each next
prompt is already queued with probability pi (a least-work pick landing behind a prefill
about to end, :func:`queued_behind_prefill`; u per replica under random), so a gap holds
k or more with
probability g pi^(k-1), and ITL pXX = d(b) + k E[S] at the largest k with g pi^(k-1) >=
1 - p (the first, k = 0, when g < 1 - p).

Units: requests/s, ms, tokens, bytes.

The code is in three modules, each re-exported here (import from here):
:mod:`fleetplan.perf.replica_steps` (schedules, the mixed step, prompt types, the service
grids and their array program :class:`ServiceKernel`, the simulator's
:class:`MixedKernel`), :mod:`fleetplan.perf.replica_state` (the steady state and the
latency percentiles) and :mod:`fleetplan.perf.replica_rates` (the per-pool rate search
:class:`ReplicaRates`).
"""

from __future__ import annotations

from fleetplan.perf.replica_rates import ReplicaRates, max_rps_colocated, replica_rates, schedules_of
from fleetplan.perf.replica_state import (
    CHUNK_BUDGET_DECODE_SHARE,
    OCCUPANCY_EDGES,
    ColocatedLatency,
    ColocatedState,
    ReplicaTables,
    _geometric_gaps,
    _own_compute,
    colocated_latency,
    colocated_state,
    colocated_states,
    itl_ms,
    own_compute_quantiles,
    queued_behind_prefill,
    tpot_exceeds,
    tpot_percentile_ms,
    ttft_bound_ms,
)
from fleetplan.perf.replica_steps import (
    CHUNKED,
    PREFILL_FIRST,
    ChunkSteps,
    MixedKernel,
    MixedStep,
    PromptTypes,
    Schedule,
    ServiceKernel,
    chunk_plan,
    mixed_step,
    own_compute_share,
    prompt_service,
    prompt_service_grid,
    prompt_types,
)

__all__ = [
    "PREFILL_FIRST",
    "CHUNKED",
    "Schedule",
    "MixedStep",
    "mixed_step",
    "PromptTypes",
    "prompt_types",
    "chunk_plan",
    "prompt_service",
    "own_compute_share",
    "prompt_service_grid",
    "ChunkSteps",
    "ServiceKernel",
    "CHUNK_BUDGET_DECODE_SHARE",
    "ColocatedState",
    "ReplicaTables",
    "colocated_state",
    "colocated_states",
    "ColocatedLatency",
    "colocated_latency",
    "ttft_bound_ms",
    "own_compute_quantiles",
    "itl_ms",
    "max_rps_colocated",
    "ReplicaRates",
    "MixedKernel",
    "replica_rates",
    "schedules_of",
    "tpot_percentile_ms",
    "tpot_exceeds",
    "queued_behind_prefill",
    "OCCUPANCY_EDGES",
    "_geometric_gaps",  # private, imported by tests
    "_own_compute",
]
