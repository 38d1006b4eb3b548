"""Issue 41: the extraction and the verifier ask a region-tier's DCN flow for every scenario
and hour (~3,000 flows of the generated 10-region instance, ~0.5 s of CPU): the region's pods
as the flow reads them, its decode slices' rates and the tier's mean KV per request do not
change between them, so :func:`fleetplan.results.loads.dcn_of` computes them once per
context. The same flows to the bit as the code before (kept here as the reference)."""

from __future__ import annotations

import itertools

import fleetplan.results.dcn as dcn
from fleetplan.results.dcn import DcnFlow, decode_rates, region_pods
from fleetplan.results.evaluate import Context
from fleetplan.results.loads import dcn_of
from fleetplan.perf.roofline import kv_bytes_per_request

import numpy as np


def _reference(ctx, pods, pools, r, t, failover, own, div, slices, warm_prefill, warm_shape) -> DcnFlow:
    tm = ctx.tiers[t]
    tok, w = np.asarray(tm.tokens, dtype=float), np.asarray(tm.shares, dtype=float)
    kvr = kv_bytes_per_request(ctx.inst.model, tok) / 1e9
    m_own = float(np.dot(w / w.sum(), kvr))
    clamp = ctx.inst.failover.admission_clamp
    keep = tok < clamp.min_input_tokens if clamp.enabled else np.ones_like(tok, dtype=bool)
    m_div = float(np.dot(w[keep] / w[keep].sum(), kvr[keep])) if keep.any() else 0.0
    tot = max(own, 0.0) + max(div, 0.0)
    kv = (m_own * max(own, 0.0) + m_div * max(div, 0.0)) / tot if tot > 0 else m_own
    rates = decode_rates(ctx, [p for p in pools if p.region == r], t, failover)
    warm_shape = warm_shape if warm_prefill else None
    rps = own + div
    if rps <= 0 or slices <= 0:
        return DcnFlow(0.0, 0.0, max(rps, 0.0), {})
    per, out, egress = rps / slices, 0.0, {}
    for p in region_pods(pods, r):
        P = sum(n for k, n in p.slices.items() if k.startswith(f"{t}/prefill/"))
        cap = sum(rates.get(k.rsplit("/", 1)[1], 0.0) * n for k, n in p.slices.items() if k.startswith(f"{t}/decode/"))
        x = max(0.0, per * P - cap)
        wm = min(warm_prefill, p.slices.get(f"warm/{warm_shape}", 0)) if warm_shape else 0
        if x > 0 or wm > 0:
            egress[(p.chip, p.pod)] = (x + per * wm) * kv
        out += x
    out += per * warm_prefill
    return DcnFlow(min(out / rps, 1.0), out, rps, egress)


def test_the_flows_are_the_code_befores_and_the_pods_are_read_once_per_region_tier(solved, monkeypatch):
    inst, plan = solved("gemini-ironwood")
    assert plan.pods
    ctx = Context(inst)
    built = []
    real = dcn.pod_rows
    monkeypatch.setattr(dcn, "pod_rows", lambda pods, tier, rates: built.append(tier) or real(pods, tier, rates))
    regions, tiers = sorted(inst.regions), list(ctx.tiers)
    shapes = sorted({p.slice for p in plan.pools if p.role == "prefill"})
    asked = 0
    for r, t, fail in itertools.product(regions, tiers, (False, True)):
        for own, div, slices, warm in ((0.0, 0.0, 4, 0), (37.5, 0.0, 6, 0), (120.25, 33.0, 9, 2), (5.0, 1.0, 0, 0), (800.0, 400.0, 3, 1)):
            for shape in shapes[:2]:
                got = dcn_of(ctx, plan.pods, plan.pools, r, t, fail, own, div, slices, warm, shape)
                assert got == _reference(ctx, plan.pods, plan.pools, r, t, fail, own, div, slices, warm, shape)
                asked += 1
    assert asked > 100 and len(built) == len(regions) * len(tiers) * 2  # once per (region, tier, regime)
