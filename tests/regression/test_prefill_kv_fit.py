"""Issue 15 item 2: prefill slices that cannot hold the prompt's KV.

``long-tier-prefill-kv.yaml``: a 31B dense model with 983,040 B/token of KV on H100
(TP 2/4/8), tiers up to 32K / 128K / 256K. The 128K and 256K tiers' prefill went on TP2
slices whose KV pool is 78 GB while their prompts need 128.8 and 257.7 GB, and the plan
verified: the candidate tables only asked for a KV pool > 0, the verifier nothing.
Chunked prefill (priors.prefill_chunk_tokens) does not lower the need: each chunk
attends over the KV of the chunks before it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetplan.instance.io import load_instance
from fleetplan.perf.pools import tier_mixes
from fleetplan.perf.roofline import SliceSpec, kv_bytes_per_request, slice_memory_map
from fleetplan.tables.summary import perf_summary
from fleetplan.results.verify import verify
from fleetplan.sizing import solve

CASE = Path(__file__).parent / "cases" / "long-tier-prefill-kv.yaml"


@pytest.fixture(scope="module")
def case():
    inst = load_instance(CASE)
    return inst, solve(inst).plan


def test_the_prompts_kv_in_gb():
    from fleetplan.perf.pools import longest_request_fit

    inst = load_instance(CASE)
    tms = {t.name: t for t in tier_mixes(inst)}
    tp2 = SliceSpec.of("h100", inst.chips["h100"], 2)
    # 983,040 B/token: 2 (K, V) x 60 layers x 16 KV heads x 256 x 2 bytes
    f = longest_request_fit(inst, tms["t128k"], tp2, "prefill")
    assert f.need_gb == pytest.approx(131071 * 983040 / 1e9) and round(f.need_gb, 1) == 128.8
    assert f.pool_gb == pytest.approx(160 - 62 - 4 - 16) and not f.fits
    assert round(longest_request_fit(inst, tms["t256k"], tp2, "prefill").need_gb, 1) == 257.7
    assert longest_request_fit(inst, tms["t32k"], tp2, "prefill").fits


def test_no_prefill_on_a_slice_that_cannot_hold_the_prompt(case):
    inst, plan = case
    assert plan.status == "verified"
    pools = {(p.tier, p.role): p.slice for p in plan.pools}
    assert pools[("t128k", "prefill")] in ("h100x4", "h100x8")
    assert pools[("t256k", "prefill")] == "h100x8"
    longest = {t.name: float(max(t.tokens)) for t in tier_mixes(inst)}
    for p in plan.pools:  # the pool's KV page pool holds its tier's longest prompt
        sl = SliceSpec.of("h100", inst.chips["h100"], p.chips_per_slice)
        assert float(kv_bytes_per_request(inst.model, longest[p.tier])) / 1e9 <= slice_memory_map(inst.model, sl, inst.priors).kv_pool_gb
    notes = " ".join(plan.diagnostics)
    assert "the 't128k' tier's longest prompt (131,071 tokens) needs 128.8 GB of KV, but h100x2 leaves 78.0 GB" in notes
    assert "so h100x4 cannot serve this tier's prefill" in notes  # the 256K tier on TP4: 218 GB < 257.7 GB


def test_the_verifier_refuses_such_a_slice_on_its_own(case):
    inst, plan = case
    pools = []
    for p in plan.pools:
        if (p.tier, p.role) == ("t128k", "prefill"):
            p = p.model_copy(update={"slice": "h100x2", "chips_per_slice": 2, "chips": 2 * p.slices})
        pools.append(p)
    v = [x for x in verify(inst, plan.model_copy(update={"pools": pools})) if x.check == "kv_fit"]
    assert [x.where for x in v] == ["prefill[r1,t128k]"]
    assert "needs 128.8 GB of KV" in v[0].message


def test_perf_says_why_a_shape_is_excluded():
    fits = perf_summary(load_instance(CASE))["longest_request_fit"]
    out = {(r["tier"], r["role"], r["slice"]) for r in fits if not r["fits"]}
    assert ("t128k", "prefill", "h100x2") in out and ("t256k", "prefill", "h100x4") in out
    assert ("t128k", "prefill", "h100x4") not in out
    assert all(r["reason"] for r in fits if not r["fits"]) and all(not r["reason"] for r in fits if r["fits"])
