"""The prefill -> decode KV a plan's pods send over the DCN, from the plan and the instance
alone (no optimisation model): what the plan's predictions and the verifier use.

Routing rule (the brief, s4: "the router picks a (prefill, decode) pair inside one ICI
domain; DCN transfer is the fallback"): a region-tier's prefill pool of n slices (warm
slices that join it included) carries lambda requests/s spread evenly over its slices (one
M/G/c queue), so a pod holding P of them produces lambda P / n requests/s of KV; its own
decode slices of the tier take up to their operating point's rate (output tokens/s over
the output tokens per request, at the scenario's point: normal or failover), the rest
leaves the pod over the DCN. Warm slices that join the prefill pool in a region loss are
counted as crossing (a plan does not say which pods' warm slices join). The share is the
requests whose KV crosses over the requests prefilled; a pod's DCN egress is its crossing
requests/s times the mean KV of the traffic (GB per request, own and diverted weighted).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleetplan.perf.roofline import kv_bytes_per_request
from fleetplan.results.evaluate import Context
from fleetplan.results.plan import PodContent, Pool

__all__ = ["DcnFlow", "tier_flow", "pod_rows", "decode_rates", "kv_gbytes", "region_pods", "prefill_slices_in"]


@dataclass(frozen=True)
class DcnFlow:
    """A region-tier's KV in one scenario: ``share`` (fraction of the requests prefilled),
    ``kv_out_rps`` (requests/s whose KV crosses the DCN), ``rps`` (requests/s prefilled) and
    ``egress_gbytes_per_s`` ((chip, pod index) -> GB/s this tier sends from that pod, warm
    slices that may join counted in the pods that hold them)."""

    share: float
    kv_out_rps: float
    rps: float
    egress_gbytes_per_s: dict[tuple[str, int], float]


def region_pods(pods: list[PodContent] | None, region: str) -> list[PodContent]:
    """The pods of ``region`` in a plan's pod list (empty without one)."""
    return [p for p in (pods or []) if p.region == region]


def prefill_slices_in(p: PodContent, tier: str) -> int:
    """Prefill slices of ``tier`` in pod ``p`` (count)."""
    return sum(n for k, n in p.slices.items() if k.startswith(f"{tier}/prefill/"))


def decode_rates(ctx: Context, pools: list[Pool], tier: str, failover: bool) -> dict[str, float]:
    """Requests/s one decode slice of each shape of ``tier``'s decode pools takes at its
    operating point in the regime (failover or normal): tokens/s recomputed with the perf
    models at the pool's (batch cap, draft length), over the output tokens per request."""
    o = ctx.inst.workload.output_tokens
    out = {}
    for p in pools:
        if p.tier != tier or p.role != "decode":
            continue
        op = p.decode_failover if failover else p.decode_normal
        if op is not None:
            out[p.slice] = ctx.decode_op(tier, p.slice, op.batch_cap, op.draft_tokens).tokens_per_s / o
    return out


def kv_gbytes(ctx: Context, tier: str, own_rps: float, div_rps: float) -> float:
    """Mean KV of a prefilled request (GB): the tier's length mix for its own requests, the
    mix below the admission clamp for diverted ones (the clamp rejects the rest), weighted
    by the two rates."""
    key = ("dcn_kv_gbytes", tier)  # the two means do not depend on the rates: once per context and tier
    means = ctx._memo.get(key)
    if means is None:
        tm = ctx.tiers[tier]
        tok = np.asarray(tm.tokens, dtype=float)
        w = np.asarray(tm.shares, dtype=float)
        kv = kv_bytes_per_request(ctx.inst.model, tok) / 1e9
        own = float(np.dot(w / w.sum(), kv))
        clamp = ctx.inst.failover.admission_clamp
        keep = tok < clamp.min_input_tokens if clamp.enabled else np.ones_like(tok, dtype=bool)
        div = float(np.dot(w[keep] / w[keep].sum(), kv[keep])) if keep.any() else 0.0
        means = ctx._memo[key] = (own, div)
    own, div = means
    tot = max(own_rps, 0.0) + max(div_rps, 0.0)
    return (own * max(own_rps, 0.0) + div * max(div_rps, 0.0)) / tot if tot > 0 else own


def pod_rows(pods: list[PodContent], tier: str, rates: dict[str, float]) -> tuple:
    """What :func:`tier_flow` reads of each of ``pods`` for ``tier``: ((chip, pod index), its
    prefill slices of the tier, the requests/s its decode slices of the tier take (``rates``
    per slice of each shape, :func:`decode_rates`, summed in the pod's order), its slices by
    key), a tuple -- the same for every scenario of a regime, so a caller asking for many
    scenarios' flows builds it once."""
    pre, dec = f"{tier}/prefill/", f"{tier}/decode/"
    return tuple(((p.chip, p.pod), sum(n for k, n in p.slices.items() if k.startswith(pre)),
                  sum(rates.get(k.rsplit("/", 1)[1], 0.0) * n for k, n in p.slices.items() if k.startswith(dec)), p.slices) for p in pods)


def tier_flow(pods: list[PodContent], tier: str, rps: float, slices: int, warm_prefill: int, warm_shape: str | None,
              rates: dict[str, float], kv: float, rows: tuple | None = None) -> DcnFlow:
    """The DCN flow of one region-tier (see the module docstring).

    Args: pods: the region's pods; rps: requests/s the prefill pool serves; slices: its
    slices, warm ones joined included; warm_prefill / warm_shape: warm slices joining it and
    their shape; rates: req/s one decode slice of each shape takes (:func:`decode_rates`);
    kv: mean KV per request (GB, :func:`kv_gbytes`); rows: :func:`pod_rows` of ``pods``,
    ``tier`` and ``rates`` when the caller holds it (built here otherwise)."""
    if rps <= 0 or slices <= 0:
        return DcnFlow(0.0, 0.0, max(rps, 0.0), {})
    per = rps / slices
    out = 0.0
    egress: dict[tuple[str, int], float] = {}
    for key, P, cap, held in (rows if rows is not None else pod_rows(pods, tier, rates)):
        x = max(0.0, per * P - cap)
        w = min(warm_prefill, held.get(f"warm/{warm_shape}", 0)) if warm_shape else 0
        if x > 0 or w > 0:
            egress[key] = (x + per * w) * kv
        out += x
    out += per * warm_prefill
    return DcnFlow(min(out / rps, 1.0), out, rps, egress)
