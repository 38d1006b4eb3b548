"""Pool-level physics: what one tier's decode and prefill pools see on a given slice.

Built from :mod:`roofline`, :mod:`speculation` and :mod:`queueing`; used by
``fleetplan perf``, by the candidate tables the optimiser chooses from
(:mod:`fleetplan.tables.derived`) and, independently of the model, by the verifier
(:mod:`fleetplan.results.verify`).

Conventions: a *tier* serves the input-mix buckets in its length range; the class mix is
the same in every tier; the prefix-cache hit rate h applies to every request's prompt
(c = h s cached tokens), the token-weighted rate the brief plans with.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from fleetplan.perf.inputs import SLO, Instance
from fleetplan.perf.handoff import HandoffReserve, handoff_reserve, no_room_text
from fleetplan.perf.queueing import _bisect_up, path_latency_ms  # noqa: F401  (_bisect_up: tests import it from here)
from fleetplan.perf.roofline import (
    SliceSpec,
    decode_step,
    kv_bytes_per_request,
    kv_transfer_ms,
    prefill_time_ms,
    slice_memory_map,
    tpot_p99_kv_spread_ms,
)
from fleetplan.perf.speculation import class_acceptance_rate, steps_cv, verify_step

__all__ = [
    "KNEE_SEARCH_MAX",
    "split_sources",
    "TierMix",
    "tier_mixes",
    "tier_slos",
    "slice_specs",
    "DecodeOp",
    "decode_table",
    "decode_knee",
    "DecodeAtLoad",
    "decode_at_load",
    "PrefillSource",
    "PrefillProfile",
    "prefill_profile",
    "path_ms",
    "tail_factor",
    "KVFit",
    "longest_request_fit",
]


@dataclass(frozen=True)
class TierMix:
    """One tier's slice of the workload.

    Attributes:
        name: tier name. tokens: (n,) prompt lengths of its buckets (tokens).
        shares: (n,) shares within the tier (sum 1). tier_share: the tier's share of all
        requests. hit_rate: prefix-cache hit rate (fraction of prompt tokens).
        output_tokens: mean output tokens per request.
    """

    name: str
    tokens: NDArray[np.float64]
    shares: NDArray[np.float64]
    tier_share: float
    hit_rate: float
    output_tokens: float

    @property
    def mean_tokens(self) -> float:
        return float(np.dot(self.shares, self.tokens))

    def resident_kv(self, inst: Instance) -> tuple[float, float]:
        """(mean, std) KV bytes a resident decoding request streams per step: its prompt
        plus on average half its output (bytes)."""
        ctx = self.tokens + (self.output_tokens + 1.0) / 2.0
        kv = kv_bytes_per_request(inst.model, ctx)
        mean = float(np.dot(self.shares, kv))
        var = float(np.dot(self.shares, (kv - mean) ** 2))
        return mean, math.sqrt(max(var, 0.0))


def tier_mixes(inst: Instance) -> list[TierMix]:
    """The tiers of ``inst`` with their buckets (a bucket belongs to the first tier whose
    max_input_tokens is >= its tokens). Tiers that receive no bucket are omitted."""
    w = inst.workload
    out = []
    lo = 0
    for t in w.tiers:
        hi = t.max_input_tokens if t.max_input_tokens is not None else math.inf
        idx = [i for i, b in enumerate(w.input_mix) if lo < b.tokens <= hi]
        lo = hi
        if not idx:
            continue
        tok = np.array([w.input_mix[i].tokens for i in idx], dtype=float)
        sh = np.array([w.input_mix[i].share for i in idx], dtype=float)
        total = float(sh.sum())
        if total <= 0:
            continue
        hit = t.prefix_hit_rate if t.prefix_hit_rate is not None else w.prefix_hit_rate
        out.append(TierMix(t.name, tok, sh / total, total, hit, w.output_tokens))
    return out


@dataclass(frozen=True)
class KVFit:
    """Whether a slice's KV page pool holds the longest request a pool gives it.

    Attributes: role ('prefill', 'decode', 'replica'); prompt_tokens (the tier's longest
    prompt, tokens); context_tokens (what the slice holds at once: the prompt for prefill,
    prompt + mean output for decode and replicas, tokens); need_gb (that context's KV
    with the paging slack, GB); pool_gb (the slice's KV page pool, GB); fits (bool);
    reason (why the shape cannot serve the role, '' when it fits).
    """

    role: str
    prompt_tokens: float
    context_tokens: float
    need_gb: float
    pool_gb: float
    fits: bool
    reason: str


def longest_request_fit(inst: Instance, tm: TierMix, sl: SliceSpec, role: str) -> KVFit:
    """Does shape ``sl`` hold the KV of the longest request of tier ``tm`` in ``role``?

    A prefill slice serves one prompt at a time and holds its whole KV -- the cached
    prefix as well, since the new tokens attend over it -- until it is sent to decode:
    chunked prefill (``priors.prefill_chunk_tokens``) bounds the activations of a step,
    which live in the workspace, not the KV, because every chunk attends over the KV of
    the chunks before it. A decode slice or colocated replica holds the prompt and the
    tokens it generates (the mean output, as everywhere in the plan). Need = KV bytes of
    that context x (1 + kv_paging_slack); pool = :func:`roofline.slice_memory_map` KV pool.
    A shape that fails cannot serve the tier in that role at any load: the candidate
    tables leave it out and the verifier refuses a plan that uses it.
    """
    prompt = float(np.max(tm.tokens))
    context = prompt + (tm.output_tokens if role in ("decode", "replica") else 0.0)
    need = float(kv_bytes_per_request(inst.model, context)) * (1.0 + inst.priors.kv_paging_slack) / 1e9
    mm = slice_memory_map(inst.model, sl, inst.priors)
    fits = mm.kv_pool_gb > 0 and need <= mm.kv_pool_gb * (1 + 1e-12)
    reason = ""
    if not fits:
        what = f"longest prompt ({prompt:,.0f} tokens)" if role == "prefill" else \
            f"longest request ({prompt:,.0f} prompt + {tm.output_tokens:,.0f} output tokens)"
        slack = " with the paging slack" if inst.priors.kv_paging_slack > 0 else ""
        reason = (f"the '{tm.name}' tier's {what} needs {need:,.1f} GB of KV{slack}, but {sl.label} leaves {max(mm.kv_pool_gb, 0.0):,.1f} GB "
                  f"for KV ({mm.total_gb:,.0f} GB HBM - {mm.weights_gb:,.0f} GB weights - {mm.workspace_gb:,.0f} GB workspace - "
                  f"{mm.headroom_gb:,.0f} GB headroom), so {sl.label} cannot serve this tier's {role}")
        if role == "prefill":
            reason += " (chunked prefill does not help: each chunk attends over the KV of the chunks before it)"
    return KVFit(role, prompt, context, need, mm.kv_pool_gb, fits, reason)


def tier_slos(inst: Instance, tier: str) -> list[SLO]:
    """The SLOs a tier's pools must meet: every class's SLOs with the tier's overrides
    applied, deduplicated to the strictest limit per (metric, percentile). A name that
    is not a tier (the blended, unstratified pool) gets the classes' SLOs unchanged."""
    t = next((x for x in inst.workload.tiers if x.name == tier), None)
    over = {s.metric: s for s in t.slo_overrides} if t is not None else {}
    best: dict[tuple[str, float], SLO] = {}
    for c in inst.workload.classes.values():
        if not c.slos:
            continue
        metrics = {s.metric: s for s in c.slos}
        for s in list(metrics.values()) + [o for m, o in over.items() if m not in metrics]:
            s = over.get(s.metric, s)
            key = (s.metric, s.percentile)
            if key not in best or s.limit_ms < best[key].limit_ms:
                best[key] = s
    return [best[k] for k in sorted(best)]


def slice_specs(inst: Instance) -> list[SliceSpec]:
    """Every (chip type, slice shape) the instance allows, in a stable order."""
    return [SliceSpec.of(n, c, s) for n, c in sorted(inst.chips.items()) for s in sorted(c.slice_shapes)]


def tail_factor(inflation_p99: float, percentile: float) -> float:
    """pXX / p50 step-time ratio from the prior p99 / p50 ratio, on the shifted
    exponential through (p50, 1) and (p99, inflation) -- see :func:`queueing.path_latency_ms`."""
    return float(path_latency_ms(1.0, inflation_p99, percentile))


def path_ms(inst: Instance, percentile: float) -> float:
    """Fixed TTFT path latency at a percentile: the sum of the components' percentiles (ms)."""
    return float(sum(path_latency_ms(p.p50_ms, p.p99_ms, percentile) for p in inst.priors.path_latency))


# --------------------------------------------------------------------------- decode


@dataclass(frozen=True)
class DecodeOp:
    """A decode operating point of one tier on one slice shape.

    Attributes:
        batch: batch cap (resident requests). draft_tokens: k, 0 when speculation is off.
        step_ms: p50 step (verify step when speculating). tokens_per_s: slice output
        tokens/s at full occupancy. tpot_ms / itl_ms: {(percentile): worst over SLO
        classes} (ms), by the instance's tail method; tpot_prior_ms / tpot_kv_spread_ms:
        the same TPOT by the prior alone and by the physics alone (the residents' KV
        spread and the spread of speculative acceptance over the request's tokens). kv_fit: the batch's KV fits the page pool,
        and the tier's longest request alone does (:func:`longest_request_fit`). handoff_fit: the batch's KV and the
        reserve for handoffs in flight fit it together (:mod:`fleetplan.perf.handoff`); handoff_requests /
        handoff_gb: that reserve (requests, GB); handoff_violation: why it does not fit ('' when it does).
        legal: kv_fit, handoff_fit and every tier SLO met. speculating_classes: classes that draft at this point.
        violations: why it is not legal (empty when legal; the handoff_violation among them).
    """

    batch: int
    draft_tokens: int
    step_ms: float
    tokens_per_s: float
    tpot_p50_ms: float
    tpot_ms: dict[float, float]
    itl_ms: dict[float, float]
    kv_fit: bool
    legal: bool
    speculating_classes: tuple[str, ...] = ()
    violations: tuple[str, ...] = field(default=())
    tpot_prior_ms: dict[float, float] = field(default_factory=dict)
    tpot_kv_spread_ms: dict[float, float] = field(default_factory=dict)
    handoff_fit: bool = True
    handoff_requests: int = 0
    handoff_gb: float = 0.0
    handoff_violation: str = ""
    source: str = ""  # several held physics sources: the one whose point this is (the least tokens/s; results.evaluate.RobustContext)


def _class_arrays(inst: Instance, k: int = 0):
    """(names, shares, acceptance rate alpha(k) of each class at draft length k, has SLOs)."""
    names = sorted(inst.workload.classes)
    cl = [inst.workload.classes[n] for n in names]
    share = np.array([c.share for c in cl])
    alpha = np.array([class_acceptance_rate(c.spec_acceptance, c.spec_acceptance_kind, c.spec_acceptance_at_k, k) for c in cl])
    has_slo = np.array([bool(c.slos) for c in cl])
    return names, share, alpha, has_slo


def _tails(inst: Instance, sl: SliceSpec, tm: TierMix, batch: NDArray, percentile: float, accept_cv: float = 0.0):
    """pXX / p50 ratios: (prior inflation, KV spread of the step, physics TPOT, the TPOT
    ratio ``tpot_tail_method`` uses, the ITL ratio it uses).

    The prior interpolates ``tpot_p99_inflation`` on a shifted exponential. The KV-spread
    ratio is the step at the percentile of the residents' summed KV
    (:func:`roofline.tpot_p99_kv_spread_ms`) over the step at their mean: it widens the
    gap between tokens (ITL). A request's TPOT also spreads because speculation yields a
    random number of tokens per step: ``accept_cv`` (:func:`speculation.steps_cv`), the
    CV of the steps it needs. The physics TPOT ratio combines the two independent
    spreads, 1 + sqrt((spread - 1)^2 + (z accept_cv)^2), z the standard normal
    percentile; the 'kv_spread' method uses it for TPOT and the KV spread for ITL."""
    from statistics import NormalDist

    pr = inst.priors
    prior = np.full(batch.shape, tail_factor(pr.tpot_p99_inflation, percentile))
    mean, std = tm.resident_kv(inst)
    p50 = decode_step(inst.model, sl, pr, batch, mean).step_ms
    spread = tpot_p99_kv_spread_ms(inst.model, sl, pr, batch, mean, std, percentile) / p50
    z = NormalDist().inv_cdf(percentile / 100.0) if percentile > 50 else 0.0
    physics = 1.0 + np.sqrt((spread - 1.0) ** 2 + (z * accept_cv) ** 2)
    m = pr.tpot_tail_method
    used_tpot = prior if m == "prior" else physics if m == "kv_spread" else np.maximum(prior, physics)
    used_itl = prior if m == "prior" else spread if m == "kv_spread" else np.maximum(prior, spread)
    return prior, spread, physics, used_tpot, used_itl


def _accept_cv(inst: Instance, tm: TierMix, alpha: NDArray, per_tok: NDArray, has_slo: NDArray, spec_mask: NDArray, k: int) -> float:
    """Steps CV of the slowest SLO class (the one TPOT is quoted for) at draft length k."""
    if k <= 0 or not has_slo.any():
        return 0.0
    idx = np.flatnonzero(has_slo)
    worst = idx[int(np.argmin(per_tok[idx]))]
    return steps_cv(float(alpha[worst]), k, max(tm.output_tokens - 1.0, 1.0)) if spec_mask[worst] else 0.0


@dataclass(frozen=True)
class _DecodeArrays:
    batch: NDArray
    step: NDArray
    tokens_per_s: NDArray
    tpot_p50: NDArray
    tpot: dict[float, NDArray]
    itl: dict[float, NDArray]
    tpot_prior: dict[float, NDArray]
    tpot_kv_spread: dict[float, NDArray]
    fit: NDArray
    legal: NDArray
    spec_classes: tuple[str, ...]
    handoff: HandoffReserve
    handoff_fit: NDArray


def _decode_arrays(inst: Instance, tm: TierMix, sl: SliceSpec, b: NDArray, k: int) -> _DecodeArrays | None:
    """Vectorised core of :func:`decode_table` for one draft length (0 = off); None when
    no class speculates at this k."""
    pr = inst.priors
    names, share, alpha, has_slo = _class_arrays(inst, k)
    kv_mean, _ = tm.resident_kv(inst)
    mm = slice_memory_map(inst.model, sl, pr)
    # the batch's KV fits the page pool, and so does the tier's longest request on its own
    batch_kv = b * kv_mean * (1 + pr.kv_paging_slack)
    fit = (batch_kv <= mm.kv_pool_gb * 1e9 + 1e-6) & longest_request_fit(inst, tm, sl, "decode").fits
    slos = tier_slos(inst, tm.name)
    pcts = sorted({s.percentile for s in slos if s.metric in ("tpot", "itl")})
    if k == 0:
        step = decode_step(inst.model, sl, pr, b, kv_mean).step_ms
        per_tok = np.ones(len(names))
        spec_mask = np.zeros(len(names), dtype=bool)
    else:
        spec_mask = alpha >= inst.speculation.alpha_threshold
        if float(share[spec_mask].sum()) <= 0:
            return None
        per_tok = np.where(spec_mask, alpha * k + 1.0, 1.0)
        resident = share / per_tok  # residents of each class ~ share x steps it stays (Little's law per class)
        s_share = float(resident[spec_mask].sum() / resident.sum())
        step = verify_step(inst.model, sl, pr, b, kv_mean, k, s_share, inst.speculation.draft_step_ms).step_ms
    # A full slice yields, per step, the residents' mean tokens per step; residents are
    # weighted by how long they stay (a class drafting 3 tokens a step stays a third as
    # long), so the mean is the share-weighted harmonic mean 1 / sum(share / per_tok),
    # not sum(share x per_tok) -- which overstated a mixed pool's tokens/s by ~3%
    # (found by the simulator, docs/validation.md).
    tokens_per_s = b / float(np.sum(share / per_tok)) / (step / 1e3)
    worst_tok = float(np.min(per_tok[has_slo])) if has_slo.any() else 1.0  # slowest SLO class
    tpot_p50 = step / worst_tok
    tpot, itl, t_prior, t_spread = {}, {}, {}, {}
    # and beside the batch, the prompt KV of the handoffs in flight at this point's full load (perf.handoff)
    handoff = handoff_reserve(inst, tm.name, tm.tokens, tm.shares, tm.output_tokens, tokens_per_s)
    handoff_fit = batch_kv + handoff.bytes <= mm.kv_pool_gb * 1e9 + 1e-6
    legal = fit & handoff_fit
    cv = _accept_cv(inst, tm, alpha, per_tok, has_slo, spec_mask, k)
    for p in pcts:
        prior, spread, physics, tail_tpot, tail_itl = _tails(inst, sl, tm, b, p, cv)
        tpot[p] = tpot_p50 * tail_tpot
        itl[p] = step * tail_itl
        t_prior[p] = tpot_p50 * prior
        t_spread[p] = tpot_p50 * physics
    for s in slos:
        if s.metric == "tpot":
            legal &= tpot[s.percentile] <= s.limit_ms + 1e-9
        elif s.metric == "itl":
            legal &= itl[s.percentile] <= s.limit_ms + 1e-9
    return _DecodeArrays(b, step, tokens_per_s, tpot_p50, tpot, itl, t_prior, t_spread, fit, legal,
                         tuple(n for n, m in zip(names, spec_mask) if m), handoff, handoff_fit)


def _draft_options(inst: Instance, draft_options: list[int] | None, with_off: bool = True) -> list[int]:
    if draft_options is not None:
        return ([0] if with_off or 0 in draft_options else []) + [k for k in draft_options if k > 0]
    return [0] + (list(inst.speculation.draft_tokens) if inst.speculation.enabled else [])


def decode_table(inst: Instance, tm: TierMix, sl: SliceSpec, batches: NDArray | list[int] | None = None, draft_options: list[int] | None = None,
                 with_off: bool = True) -> list[DecodeOp]:
    """Every operating point (batch cap x speculation off / on with each draft length) of
    tier ``tm`` on slice ``sl``, with its TPOT/ITL percentiles, KV fit and legality.

    TPOT pXX is the slowest SLO class's p50 time per token (step / tokens per step,
    alpha k + 1 for a speculating class, 1 otherwise) times the tail factor of the
    instance's ``tpot_tail_method``; ITL pXX is the step (the gap between token bursts)
    times the same factor. Classes without SLOs (the scavenger class) count for
    capacity, not for legality.

    Args:
        batches: batch caps (default: the instance's ``serving.batch_caps``).
        draft_options: draft lengths k to consider (default: the instance's, when
            speculation is enabled); k = 0 (off) is always included, unless ``with_off``
            is False and ``draft_options`` (given) leaves it out: then only the lengths
            listed (each length's points do not depend on the others').
    Returns: a list of :class:`DecodeOp`, sorted by (batch, draft length).
    """
    b = np.asarray(batches if batches is not None else inst.serving.batch_caps, dtype=float)
    kv_mean, _ = tm.resident_kv(inst)
    mm = slice_memory_map(inst.model, sl, inst.priors)
    longest = longest_request_fit(inst, tm, sl, "decode")
    slos = tier_slos(inst, tm.name)
    out: list[DecodeOp] = []
    for k in _draft_options(inst, draft_options, with_off):
        a = _decode_arrays(inst, tm, sl, b, k)
        if a is None:
            continue
        for j in range(b.size):
            viol = []
            if not longest.fits:
                viol.append(longest.reason)
            elif not a.fit[j]:
                viol.append(f"KV of {int(b[j])} residents x {kv_mean / 1e9:.2f} GB exceeds the {mm.kv_pool_gb:.0f} GB page pool")
            h_viol = "" if (a.handoff_fit[j] or not a.fit[j] or not longest.fits) else no_room_text(a.handoff, j, int(b[j]), kv_mean * (1 + inst.priors.kv_paging_slack), mm.kv_pool_gb)
            if h_viol:
                viol.append(h_viol)
            for s in slos:
                if s.metric == "tpot" and a.tpot[s.percentile][j] > s.limit_ms + 1e-9:
                    viol.append(f"TPOT p{s.percentile:g} {a.tpot[s.percentile][j]:.1f} ms > {s.limit_ms:g} ms")
                if s.metric == "itl" and a.itl[s.percentile][j] > s.limit_ms + 1e-9:
                    viol.append(f"ITL p{s.percentile:g} {a.itl[s.percentile][j]:.1f} ms > {s.limit_ms:g} ms")
            out.append(DecodeOp(int(b[j]), int(k), float(a.step[j]), float(a.tokens_per_s[j]), float(a.tpot_p50[j]),
                                {p: float(v[j]) for p, v in a.tpot.items()}, {p: float(v[j]) for p, v in a.itl.items()},
                                bool(a.fit[j]), bool(a.legal[j]) and not viol, a.spec_classes if k else (), tuple(viol),
                                {p: float(v[j]) for p, v in a.tpot_prior.items()}, {p: float(v[j]) for p, v in a.tpot_kv_spread.items()},
                                bool(a.handoff_fit[j]), int(a.handoff.requests[j]), float(a.handoff.gb[j]), h_viol))
    out.sort(key=lambda o: (o.batch, o.draft_tokens))
    return out



KNEE_SEARCH_MAX = 4096  # batches searched for the SLO knee (residents per slice)


def decode_knee(inst: Instance, tm: TierMix, sl: SliceSpec, draft_tokens: int = 0, max_batch: int = KNEE_SEARCH_MAX) -> int:
    """The SLO knee: the largest batch b such that every batch 1 .. b with draft length
    ``draft_tokens`` (0 = off) is legal -- every TPOT/ITL SLO and the KV fit hold.
    Returns 0 when batch 1 is not legal (or no class speculates at that k)."""
    b = np.arange(1, max_batch + 1, dtype=float)
    a = _decode_arrays(inst, tm, sl, b, draft_tokens)
    if a is None or not a.legal[0]:
        return 0
    bad = np.nonzero(~a.legal)[0]
    return int(b[bad[0] - 1]) if bad.size else int(b[-1])


@dataclass(frozen=True)
class DecodeAtLoad:
    """A decode slice at an arrival rate, below its batch cap (units in the names).

    occupancy: mean residents (Little's law); saturated: the rate needs more than the cap
    (occupancy is then the cap and a queue for decode slots grows); step_ms: the p50
    (verify) step at that occupancy; tpot_p50_ms: the slowest SLO class's p50 TPOT;
    tpot_ms / tpot_prior_ms / tpot_kv_spread_ms: {percentile: ms} by the instance's tail
    method, the prior alone and the physics alone (KV spread and speculative acceptance,
    as :class:`DecodeOp`); itl_ms: the gap between token bursts at the percentile, by
    the tail method; itl_kv_spread_ms: the same by the residents' KV spread alone."""

    rps: float
    occupancy: float
    saturated: bool
    step_ms: float
    tpot_p50_ms: float
    tpot_ms: dict[float, float]
    tpot_prior_ms: dict[float, float]
    tpot_kv_spread_ms: dict[float, float]
    itl_ms: dict[float, float]
    itl_kv_spread_ms: dict[float, float]


def decode_at_load(inst: Instance, tm: TierMix, sl: SliceSpec, batch_cap: int, draft_tokens: int, rps: float,
                   percentiles: list[float] | None = None, class_shares: dict[str, float] | None = None) -> DecodeAtLoad:
    """The decode operating point a slice settles at when ``rps`` requests/s join it.

    A request decodes o - 1 tokens (the first came from prefill) in (o - 1) / (alpha_q k
    + 1) steps when its class q speculates, o - 1 otherwise; the residents are
    b = rps x E[steps] x step(b) (Little's law), solved by bisection on b in [0, cap]
    with step(b) the (verify) step at b residents of the tier's mean resident KV, the
    drafting share weighted by time in residence. TPOT at b as :func:`decode_table`
    computes it at a full batch. The plan quotes the full batch (an upper bound); this
    is the point the load actually reaches, for comparison with a simulation.

    Args: batch_cap (residents), draft_tokens (k, 0 = off), rps (requests/s per slice,
    >= 0), percentiles (default: the tier's TPOT SLO percentiles and 99), class_shares
    (the classes' shares of the requests that reach decode, when shedding changed them;
    default the instance's).
    Returns: :class:`DecodeAtLoad`. Raises ValueError for rps < 0 or batch_cap < 1.
    """
    if rps < 0 or batch_cap < 1:
        raise ValueError("need rps >= 0 (requests/s) and batch_cap >= 1 (residents)")
    pr = inst.priors
    names, share, alpha, has_slo = _class_arrays(inst, draft_tokens)
    if class_shares is not None:
        share = np.array([class_shares.get(n, 0.0) for n in names], dtype=float)
        if share.sum() <= 0:
            raise ValueError("class_shares must give some class a positive share")
        share = share / share.sum()
    o = max(tm.output_tokens - 1.0, 0.0)
    spec = (alpha >= inst.speculation.alpha_threshold) if draft_tokens > 0 else np.zeros(len(names), dtype=bool)
    per_step = np.where(spec, alpha * draft_tokens + 1.0, 1.0)
    steps = share * o / per_step
    e_steps = float(steps.sum())
    spec_share = float(steps[spec].sum() / e_steps) if e_steps > 0 else 0.0
    kv_mean, _ = tm.resident_kv(inst)

    def step(b):
        b = np.asarray(b, dtype=float)
        if draft_tokens > 0 and spec_share > 0:
            return verify_step(inst.model, sl, pr, b, kv_mean, draft_tokens, spec_share, inst.speculation.draft_step_ms).step_ms
        return decode_step(inst.model, sl, pr, b, kv_mean).step_ms

    def excess(b):
        return rps * e_steps * float(step(b)) / 1e3 - b

    cap = float(batch_cap)
    saturated = excess(cap) > 0
    if saturated:
        b = cap
    else:
        b = _bisect_up(lambda x: rps * e_steps * np.asarray(step(x), dtype=float) / 1e3 - x, 0.0, cap, 60)
    pcts = percentiles if percentiles is not None else sorted({s.percentile for s in tier_slos(inst, tm.name) if s.metric == "tpot"} | {99.0})
    st = float(step(max(b, 1e-9)))
    worst = float(np.min(per_step[has_slo])) if has_slo.any() else 1.0
    p50 = st / worst
    arr = np.array([max(b, 1.0)])
    cv = _accept_cv(inst, tm, alpha, per_step, has_slo, spec, draft_tokens)
    tp, tprior, tspread, itl, itl_sp = {}, {}, {}, {}, {}
    for p in pcts:
        prior, spread, physics, used, used_itl = _tails(inst, sl, tm, arr, p, cv)
        tp[p] = float(p50 * used[0])
        tprior[p] = float(p50 * prior[0])
        tspread[p] = float(p50 * physics[0])
        itl[p] = float(st * used_itl[0])
        itl_sp[p] = float(st * spread[0])
    return DecodeAtLoad(rps, float(b), bool(saturated), st, p50, tp, tprior, tspread, itl, itl_sp)


# --------------------------------------------------------------------------- prefill


@dataclass(frozen=True)
class PrefillSource:
    """A stream of prefill requests of one tier: its share of the pool's requests, its
    prefix hit rate, and whether prompts at or above ``clamp_min_tokens`` are clamped
    (removed) -- the admission clamp applies to diverted, cold-cache traffic; with
    ``only_min_tokens`` only the prompts at or above it are kept (the clampable part of a
    source, used by the what-if when the clamp is partial). ``weight`` is the source's
    rate before either filter."""

    weight: float
    hit_rate: float
    clamp_min_tokens: int | None = None
    only_min_tokens: int | None = None  # keep only prompts at or above this (the clampable part of a source)


@dataclass(frozen=True)
class PrefillProfile:
    """Service-time profile of a prefill pool on one slice shape (ms unless named).

    Attributes:
        mean_ms: E[S] per admitted request. cs2: squared coefficient of variation of S.
        ca2: squared coefficient of variation of the pool's inter-arrival times (the
        instance's ``workload.arrival_scv``; 1 = Poisson): the queueing functions take
        both (Allen-Cunneen, :mod:`queueing`).
        pct_ms: {percentile: S at that percentile of admitted requests}.
        kv_exposed_ms: {percentile: exposed ICI KV transfer of that request}.
        kept_share: share of requests admitted (1 - clamped).
        new_tokens_mean: mean uncached tokens per admitted request (tokens).
        pct_tokens: {percentile: (prompt tokens, cached tokens) of that request}.
        type_ms / type_weight: every request type's compute plus exposed KV (ms) and its
        share of admitted requests, (types,) -- the distribution the percentile of a sum
        needs (:func:`queueing.ttft_percentile_of_sum_ms`).
    """

    mean_ms: float
    cs2: float
    pct_ms: dict[float, float]
    kv_exposed_ms: dict[float, float]
    kept_share: float
    new_tokens_mean: float
    pct_tokens: dict[float, tuple[float, float]]
    type_ms: tuple[float, ...] = ()
    type_weight: tuple[float, ...] = ()
    ca2: float = 1.0


#: prefill_profile's memo (least recently used first): a profile depends only on the model,
#: the priors, the network, the arrival SCV, the slice, the tier's buckets, the sources and
#: the percentiles -- not on demand, pods or failover -- so the purchase model's per-node
#: candidate tables, the chord iterations and the sweeps' copies of an instance share it.
_PROFILE_MEMO: OrderedDict = OrderedDict()
_PROFILE_MEMO_SIZE = 50_000
_PHYSICS_KEYS: OrderedDict = OrderedDict()  # id(inst) -> (inst, key): the instance is held, so its id is not reused


def _physics_key(inst: Instance) -> tuple:
    """What of ``inst`` a prefill profile depends on, as a hashable key (computed once per instance object)."""
    got = _PHYSICS_KEYS.get(id(inst))
    if got is not None and got[0] is inst:
        _PHYSICS_KEYS.move_to_end(id(inst))
        return got[1]
    key = (inst.model.model_dump_json(), inst.priors.model_dump_json(), inst.network.model_dump_json(), float(inst.workload.arrival_scv))
    _PHYSICS_KEYS[id(inst)] = (inst, key)
    if len(_PHYSICS_KEYS) > 64:
        _PHYSICS_KEYS.popitem(last=False)
    return key

#: (id of the model, id of the priors, slice, prompt tokens, cached tokens) -> (model, priors,
#: prefill times): prefill_profile's pools see the same few (bucket, hit rate) sets at many
#: source weights (a gemini-ironwood solve: 2,482 calls, 18 distinct; a what-if hour: ~10
#: calls per set), so each set's :func:`roofline.prefill_time_ms` is computed once. The
#: model and priors are kept with their ids so that a recycled id is never taken for them.
_PREFILL_TIMES: dict[tuple, tuple] = {}


def _prefill_times(model, sl: SliceSpec, pr, s_arr: NDArray[np.float64], c_arr: NDArray[np.float64]) -> NDArray[np.float64]:
    """``np.atleast_1d(prefill_time_ms(model, sl, pr, s_arr, c_arr))`` (ms), remembered
    (:data:`_PREFILL_TIMES`; the array is read-only)."""
    key = (id(model), id(pr), sl, s_arr.tobytes(), c_arr.tobytes())
    hit = _PREFILL_TIMES.get(key)
    if hit is None or hit[0] is not model or hit[1] is not pr:
        if len(_PREFILL_TIMES) >= 4096:
            _PREFILL_TIMES.pop(next(iter(_PREFILL_TIMES)))
        t = np.array(np.atleast_1d(prefill_time_ms(model, sl, pr, s_arr, c_arr)), dtype=float)
        t.flags.writeable = False
        hit = _PREFILL_TIMES[key] = (model, pr, t)
    return hit[2]


def prefill_profile(inst: Instance, tm: TierMix, sl: SliceSpec, sources: list[PrefillSource], percentiles: list[float],
                    dcn_share: float = 0.0) -> PrefillProfile:
    """Service-time distribution of a prefill pool fed by ``sources`` (memoised on what it
    depends on: :data:`_PROFILE_MEMO`; the result is shared -- do not mutate it).

    Each (source, bucket) is a request type with prompt s, cached c = h s, time
    :func:`roofline.prefill_time_ms`; the percentile request is the discrete percentile
    of that mixture (the brief: "prefill compute at the tier's p99 length after cache
    hits"); the exposed KV transfer is its KV over ICI times (1 - kv_transfer_overlap).

    ``dcn_share`` (fraction of the pool's requests, in [0, 1]): that share of every request
    type sends its KV over the DCN (``network.dcn_gbytes_per_s_per_slice``, less the same
    overlap) instead of the ICI -- the request's path, placement-aware sizing (the
    brief s4: "DCN fallback: +60-120 ms"). The percentile request is then the
    percentile of the compute + exposed KV over the mixture of (type, path), where it is
    larger than the ICI-only one (so the composition never falls as the share grows), and
    ``type_ms``/``type_weight`` hold both paths of every type. 0 gives the ICI-only profile
    exactly.
    The arrivals' SCV is the instance's ``workload.arrival_scv`` for every source: own and
    diverted streams are independent, and the index of dispersion of a superposition of
    independent streams is their rate-weighted mean (Whitt 1982), so one value for all is
    the value of their sum.
    Raises ValueError when every request is clamped or the weights are not positive.
    """
    total = sum(x.weight for x in sources)
    # the sources by their shares of the pool (the profile normalises the weights): a uniform demand scale hits
    srcs = tuple((round(x.weight / total, 12), x.hit_rate, x.clamp_min_tokens, x.only_min_tokens) for x in sources) if total > 0 else tuple(sources)
    if not 0.0 <= dcn_share <= 1.0:
        raise ValueError(f"dcn_share must be a fraction in [0, 1], got {dcn_share!r}")
    key = (_physics_key(inst), sl, np.asarray(tm.tokens, dtype=float).tobytes(), np.asarray(tm.shares, dtype=float).tobytes(),
           srcs, tuple(float(p) for p in percentiles), float(dcn_share))
    got = _PROFILE_MEMO.get(key)
    if got is not None:
        _PROFILE_MEMO.move_to_end(key)
        return got
    prof = _prefill_profile(inst, tm, sl, sources, percentiles, float(dcn_share))
    _PROFILE_MEMO[key] = prof
    if len(_PROFILE_MEMO) > _PROFILE_MEMO_SIZE:
        _PROFILE_MEMO.popitem(last=False)
    return prof


def _prefill_types(inst: Instance, tm: TierMix, sl: SliceSpec, sources: list[PrefillSource]):
    """The request types of a prefill pool fed by ``sources``: (compute ms, share of admitted
    requests, prompt tokens, cached tokens) with one entry per (source, bucket) kept, and the
    share of the sources' requests kept (admitted: 1 - clamped)."""
    pr = inst.priors
    types_t, types_w, types_s, types_c = [], [], [], []
    total_w = sum(s.weight for s in sources)
    if total_w <= 0:
        raise ValueError("prefill sources need a positive total weight")
    kept = 0.0
    for src in sources:
        sel = [(s, w) for s, w in zip(tm.tokens, tm.shares)
               if not (src.clamp_min_tokens is not None and s >= src.clamp_min_tokens)
               and not (src.only_min_tokens is not None and s < src.only_min_tokens)]
        if not sel:
            continue
        s_arr = np.array([float(s) for s, _ in sel])
        c_arr = src.hit_rate * s_arr
        t_arr = _prefill_times(inst.model, sl, pr, s_arr, c_arr)
        for (s, w), ts, cs in zip(sel, t_arr, c_arr):
            ww = src.weight / total_w * w
            types_t.append(float(ts))
            types_w.append(ww)
            types_s.append(float(s))
            types_c.append(float(cs))
            kept += ww
    if kept <= 0:
        raise ValueError("every request of this pool is clamped")
    return np.array(types_t), np.array(types_w) / kept, types_s, types_c, kept


def _prefill_profile(inst: Instance, tm: TierMix, sl: SliceSpec, sources: list[PrefillSource], percentiles: list[float],
                     dcn_share: float = 0.0) -> PrefillProfile:
    pr = inst.priors
    t, w, types_s, types_c, kept = _prefill_types(inst, tm, sl, sources)
    mean = float(np.dot(w, t))
    var = float(np.dot(w, (t - mean) ** 2))
    cs2 = var / mean**2 if mean > 0 else 0.0
    order = np.argsort(t, kind="stable")
    cum = np.cumsum(w[order])
    pct, kvx, ptok = {}, {}, {}
    for p in percentiles:
        i = order[min(int(np.searchsorted(cum, p / 100.0 - 1e-12)), len(order) - 1)]
        pct[p] = float(t[i])
        kv = float(kv_bytes_per_request(inst.model, types_s[i]))
        kvx[p] = float(kv_transfer_ms(kv, inst.network.kv_ici_gbytes_per_s_per_slice)) * (1.0 - pr.kv_transfer_overlap)
        ptok[p] = (types_s[i], types_c[i])
    new_tok = float(np.dot(w, np.array(types_s) - np.array(types_c)))
    kv_types = kv_bytes_per_request(inst.model, np.array(types_s))
    kv_all = kv_transfer_ms(kv_types, inst.network.kv_ici_gbytes_per_s_per_slice) * (1.0 - pr.kv_transfer_overlap)
    type_ms, type_w = t + kv_all, w
    if dcn_share > 0.0:
        kv_dcn = kv_transfer_ms(kv_types, inst.network.dcn_gbytes_per_s_per_slice) * (1.0 - pr.kv_transfer_overlap)
        tot = np.concatenate([t + kv_all, t + kv_dcn])
        comp = np.concatenate([t, t])
        kvp = np.concatenate([kv_all, kv_dcn])
        mw = np.concatenate([w * (1.0 - dcn_share), w * dcn_share])
        o2 = np.argsort(tot, kind="stable")
        cum2 = np.cumsum(mw[o2])
        for p in percentiles:
            j = o2[min(int(np.searchsorted(cum2, p / 100.0 - 1e-12)), len(o2) - 1)]
            if tot[j] > pct[p] + kvx[p]:
                pct[p], kvx[p] = float(comp[j]), float(kvp[j])
                ptok[p] = (types_s[j % len(t)], types_c[j % len(t)])
        type_ms, type_w = tot, mw
    return PrefillProfile(mean, cs2, pct, kvx, kept, new_tok, ptok, tuple(float(x) for x in type_ms), tuple(float(x) for x in type_w),
                          float(inst.workload.arrival_scv))


def dcn_levels(inst: Instance, tm: TierMix, sl: SliceSpec, sources: list[PrefillSource], percentile: float,
               limit: float) -> list[float]:
    """The DCN shares in (0, ``limit``] at which the TTFT composition of a prefill pool fed by
    ``sources`` changes, and ``limit`` (fractions, ascending): the ``percentile`` request's
    compute + exposed KV (:func:`prefill_profile` with ``dcn_share``) is a nondecreasing step
    function of the share d, constant on each interval (previous level, level]. Placement-
    aware sizing builds one capacity curve per level, so a pool whose DCN share stays at or
    below a level is sized with exactly that level's composition (and a tighter ceiling only
    removes levels: it never lowers the cost). Empty when ``limit`` is 0.

    Exact: with type i's totals a_i (ICI path) <= b_i (DCN path) and weights w_i, the mass at
    or below x is F_x(d) = A_x - d (A_x - B_x) (A_x, B_x the weights of the types whose a_i,
    b_i <= x), so the percentile request can only change where F_x(d) crosses the percentile
    p: at d_x = (A_x - p) / (A_x - B_x). Each candidate is kept where the composition just
    after it is larger than at it."""
    if limit <= 0.0:
        return []
    t, w, s_tok, _, _ = _prefill_types(inst, tm, sl, sources)
    if len(t) == 0:
        return [float(limit)]
    kv = kv_bytes_per_request(inst.model, np.array(s_tok))
    hide = 1.0 - inst.priors.kv_transfer_overlap
    a = t + kv_transfer_ms(kv, inst.network.kv_ici_gbytes_per_s_per_slice) * hide
    b = t + kv_transfer_ms(kv, inst.network.dcn_gbytes_per_s_per_slice) * hide
    q = percentile / 100.0
    cands = set()
    for x in np.unique(np.concatenate([a, b])):
        A, B = float(w[a <= x].sum()), float(w[b <= x].sum())
        if A >= q > B and A > B:
            d = (A - q) / (A - B)
            if 0.0 < d < limit:
                cands.add(d)

    def comp(x: float) -> float:
        prof = prefill_profile(inst, tm, sl, sources, [percentile], x)
        return prof.pct_ms[percentile] + prof.kv_exposed_ms[percentile]

    out = [d for d in sorted(cands) if comp(min(d * (1 + 1e-7) + 1e-12, limit)) > comp(d) + 1e-9]
    return sorted(set(round(x, 12) for x in out) | {float(limit)})



# a tier whose clamp_share is within this of 1 has no prompt below the clamp (shares summed in float)
ALL_CLAMPED_TOLERANCE = 1e-9


def split_sources(rates: dict[str, float], hit_own: float, hit_cold: float, clamp_min_tokens: int | None, clamp_share: float) -> list[PrefillSource]:
    """Prefill sources of a survivor's tier pool from per-source request rates (req/s).

    Keys of ``rates``: 'own' (warm users, ``hit_own``), 'own_cold' (own users whose cache
    was lost, ``hit_cold``), 'div' (diverted users' prompts below the clamp length,
    ``hit_cold``), 'div_long' (diverted prompts at or above it, ``hit_cold``). The rates
    are of the requests that reach the pool; weights are scaled back to each source's
    rate before its length filter, as :func:`prefill_profile` expects. Sources with no
    traffic are left out. ``clamp_share``: share of the tier's prompts at or above
    ``clamp_min_tokens`` (0 when the clamp is off). When it is 1 (to
    ``ALL_CLAMPED_TOLERANCE``: a sum of bucket shares) no prompt is below the clamp, so
    'div' carries none and is left out too (a 'div' rate there is a probe or rounding; the
    diverted prompts are all in 'div_long').
    """
    out = []
    if rates.get("own", 0.0) > 0:
        out.append(PrefillSource(rates["own"], hit_own))
    if rates.get("own_cold", 0.0) > 0:
        out.append(PrefillSource(rates["own_cold"], hit_cold))
    clamp = clamp_min_tokens if clamp_share > 0 else None
    if rates.get("div", 0.0) > 0 and not (clamp is not None and clamp_share >= 1.0 - ALL_CLAMPED_TOLERANCE):
        w = rates["div"] / (1.0 - clamp_share) if clamp is not None else rates["div"]
        out.append(PrefillSource(w, hit_cold, clamp))
    if rates.get("div_long", 0.0) > 0 and clamp is not None:
        out.append(PrefillSource(rates["div_long"] / clamp_share, hit_cold, None, clamp))
    return out
