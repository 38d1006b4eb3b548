"""The numbers ``fleetplan perf`` prints: memory maps, decode curves, prefill times,
sustained prefill rates, KV transfer times, speculation economics and, for colocated
instances, the per-replica load table. One JSON-able dict; keys in ``docs/cli.md``.
"""

from __future__ import annotations

import math

import numpy as np

from fleetplan import __version__
from fleetplan.instance.io import instance_hash
from fleetplan.instance.schema import Instance
from fleetplan.tables.cache import default_tables, rate_memos
from fleetplan.perf.pools import (
    KNEE_SEARCH_MAX,
    PrefillSource,
    TierMix,
    decode_knee,
    decode_table,
    longest_request_fit,
    slice_specs,
    tier_mixes,
    tier_slos,
)
from fleetplan.perf.colocated import schedules_of
from fleetplan.perf.robust import fit_under, rates_under
from fleetplan.perf.handoff import HANDOFF_PERCENTILE, handoff_holding_ms, handoff_prompt_tokens, handoff_reserve
from fleetplan.perf.roofline import (
    attention_ffn_crossover_tokens,
    blended_kv_bytes,
    decode_step,
    kv_bytes_per_request,
    kv_bytes_per_token,
    kv_transfer_ms,
    mix_moments,
    moe_param_split,
    prefill_breakdown,
    prefill_flops,
    slice_memory_map,
    sustained_prefill_tokens_per_s,
    weight_bytes_resident,
)
from fleetplan.perf.speculation import class_acceptance_rate, per_slot_efficiency, switch_off_batch, tokens_per_verify_step

__all__ = ["perf_summary", "blended_mix", "physics_side_by_side", "PREFILL_LENGTHS", "KV_TRANSFER_LENGTHS",
           "PHYSICS_DECODE_BATCHES", "PHYSICS_PREFILL_TOKENS"]

PREFILL_LENGTHS = (8192, 32768, 131072)
KV_TRANSFER_LENGTHS = (8192, 32768, 131072)


def blended_mix(inst: Instance) -> TierMix:
    """All buckets as one mixed pool (the brief's blended view, before stratification)."""
    w = inst.workload
    tok = np.array([b.tokens for b in w.input_mix], dtype=float)
    sh = np.array([b.share for b in w.input_mix], dtype=float)
    return TierMix("blended", tok, sh / sh.sum(), 1.0, w.prefix_hit_rate, w.output_tokens)


def _r(x: float, nd: int = 6) -> float:
    """Round to ``nd`` significant digits for stable, readable output."""
    if x is None or not math.isfinite(x) or x == 0:
        return x
    return float(f"{x:.{nd}g}")


def _decode_section(inst: Instance, tm: TierMix, sl) -> dict:
    ops = decode_table(inst, tm, sl)
    kv_mean, kv_std = tm.resident_kv(inst)
    mm = slice_memory_map(inst.model, sl, inst.priors)
    slos = tier_slos(inst, tm.name)
    knees = {"off": decode_knee(inst, tm, sl, 0, max_batch=KNEE_SEARCH_MAX)}
    if inst.speculation.enabled:
        for k in inst.speculation.draft_tokens:
            knees[f"k={k}"] = decode_knee(inst, tm, sl, k, max_batch=KNEE_SEARCH_MAX)
    points = []
    for o in ops:
        points.append({
            "batch": o.batch,
            "draft_tokens": o.draft_tokens,
            "step_ms": _r(o.step_ms),
            "tpot_p50_ms": _r(o.tpot_p50_ms),
            "tpot_ms": {f"p{p:g}": _r(v) for p, v in o.tpot_ms.items()},
            "tpot_prior_ms": {f"p{p:g}": _r(v) for p, v in o.tpot_prior_ms.items()},
            "tpot_kv_spread_ms": {f"p{p:g}": _r(v) for p, v in o.tpot_kv_spread_ms.items()},
            "itl_ms": {f"p{p:g}": _r(v) for p, v in o.itl_ms.items()},
            "tokens_per_s_per_slice": _r(o.tokens_per_s),
            "tokens_per_s_per_chip": _r(o.tokens_per_s / sl.chips),
            "kv_fit": o.kv_fit,
            "handoff_reserve_requests": o.handoff_requests,
            "handoff_reserve_gb": _r(o.handoff_gb),
            "handoff_fit": o.handoff_fit,
            "legal": o.legal,
            "speculating_classes": list(o.speculating_classes),
            "violations": list(o.violations),
        })
    return {
        "tier": tm.name,
        "slice": sl.label,
        "handoff": _handoff_section(inst, tm, sl, knees, kv_mean, mm.kv_pool_gb),
        "resident_kv_gb_mean": _r(kv_mean / 1e9),
        "resident_kv_gb_std": _r(kv_std / 1e9),
        "resident_capacity": mm.resident_capacity(kv_mean, inst.priors.kv_paging_slack),
        "slos": [s.model_dump() for s in slos],
        "knee_batch": knees,
        "points": points,
    }


def _handoff_section(inst: Instance, tm: TierMix, sl, knees: dict[str, int], kv_mean: float, pool_gb: float) -> dict:
    """The decode slice's KV at each SLO knee: the batch, the reserve for handoffs in flight
    (:mod:`fleetplan.perf.handoff`) and what is left of the page pool (GB)."""
    p = handoff_prompt_tokens(tm.tokens, tm.shares, HANDOFF_PERCENTILE)
    at_knee = {}
    for label, knee in knees.items():
        k = 0 if label == "off" else int(label.partition("=")[2])
        op = next((o for o in decode_table(inst, tm, sl, [knee], [k] if k else []) if o.draft_tokens == k), None) if knee > 0 else None
        if op is None:
            continue
        h = handoff_reserve(inst, tm.name, tm.tokens, tm.shares, tm.output_tokens, [op.tokens_per_s])
        batch_gb = knee * kv_mean * (1 + inst.priors.kv_paging_slack) / 1e9
        at_knee[label] = {"batch": knee, "batch_kv_gb": _r(batch_gb), "arrivals_rps_per_slice": _r(float(h.arrivals_rps[0])),
                          "mean_in_flight": _r(float(h.mean_in_flight[0])), "reserve_requests": int(h.requests[0]),
                          "reserve_gb": _r(float(h.gb[0])), "free_gb": _r(pool_gb - batch_gb - float(h.gb[0]))}
    return {"percentile": HANDOFF_PERCENTILE, "prompt_tokens": p, "holding_ms": _r(handoff_holding_ms(inst, tm.name, p)),
            "kv_per_request_gb": _r(float(kv_bytes_per_request(inst.model, p)) * (1 + inst.priors.kv_paging_slack) / 1e9),
            "dcn_share": inst.dcn_share_max_of(tm.name), "at_knee": at_knee}


def perf_summary(inst: Instance) -> dict:
    """Everything ``fleetplan perf`` shows, as one JSON-able dict (units in key names): the
    model and workload figures, then per tier, per slice shape (memory map, decode curves,
    prefill times, sustained prefill), the KV transfers, the speculation economics, the
    longest request's fit, the colocated replicas and the physics sources."""
    m = inst.model
    w = inst.workload
    tok = [b.tokens for b in w.input_mix]
    sh = [b.share for b in w.input_mix]
    mean_s, e_s2, p50 = mix_moments(tok, sh)
    shared, experts = moe_param_split(m)
    kv_in = blended_kv_bytes(m, tok, sh)
    out: dict = {
        "instance": inst.name,
        "instance_hash": instance_hash(inst),
        "fleetplan_version": __version__,
        "serving_mode": inst.serving.mode,
        "model": {
            "kv_bytes_per_token": kv_bytes_per_token(m),
            "kv_kib_per_token": _r(kv_bytes_per_token(m) / 1024),
            "weights_gb": _r(weight_bytes_resident(m) / 1e9),
            "shared_params_b": _r(shared / 1e9),
            "expert_params_b": _r(experts / 1e9),
            "attention_ffn_crossover_tokens": _r(attention_ffn_crossover_tokens(m)),
        },
        "workload": {
            "mean_input_tokens": _r(mean_s),
            "p50_input_tokens": p50,
            "mean_sq_input_tokens2": _r(e_s2),
            "mean_over_p50": _r(mean_s / p50),
            "blended_kv_gb_per_request": _r(kv_in / 1e9),
            "blended_kv_gb_per_request_with_slack": _r(kv_in * (1 + inst.priors.kv_paging_slack) / 1e9),
            "output_tokens": w.output_tokens,
            "prefix_hit_rate": w.prefix_hit_rate,
        },
        "tiers": [],
        "slices": [],
        "decode": [],
        "prefill_lengths": [],
        "prefill_sustained": [],
        "kv_transfer": [],
        "speculation": [],
        "longest_request_fit": [],
    }
    tms = tier_mixes(inst)
    out["tiers"] = [_tier_row(inst, tm) for tm in tms]
    blended = blended_mix(inst)
    for sl in slice_specs(inst):
        out["slices"].append(_slice_row(inst, sl, blended))
        if inst.serving.mode != "colocated":  # disaggregated, or auto (either mode may run)
            for tm in ([blended] if len(tms) > 1 else []) + tms:
                out["decode"].append(_decode_section(inst, tm, sl))
        out["prefill_lengths"] += [_prefill_length_row(inst, sl, s) for s in PREFILL_LENGTHS]
        out["prefill_sustained"].append(_prefill_sustained_row(inst, sl, tok, sh, mean_s, e_s2))
    out["kv_transfer"] = [_kv_transfer_row(inst, s) for s in KV_TRANSFER_LENGTHS]
    out["speculation"] = _speculation_rows(inst, tms)
    out["longest_request_fit"] = _fit_rows(inst, tms)
    if inst.serving.mode != "disaggregated":
        out["colocated"] = _colocated(inst, tms)
    if inst.physics is not None:
        out["physics"] = physics_side_by_side(inst)
    return out


def _tier_row(inst: Instance, tm) -> dict:
    """A tier's share of the requests, mean prompt (tokens), prefix hit rate and SLOs."""
    return {
        "name": tm.name,
        "request_share": _r(tm.tier_share),
        "mean_input_tokens": _r(tm.mean_tokens),
        "prefix_hit_rate": tm.hit_rate,
        "slos": [s.model_dump() for s in tier_slos(inst, tm.name)],
    }


def _slice_row(inst: Instance, sl, blended) -> dict:
    """A slice shape's chips, HBM (GB, TB/s), peak TFLOP/s and memory map (GB), and the
    residents of the blended mix it holds."""
    mm = slice_memory_map(inst.model, sl, inst.priors)
    return {
        "slice": sl.label,
        "chip": sl.chip,
        "chips": sl.chips,
        "hbm_gb": _r(sl.hbm_gb),
        "hbm_tbps": _r(sl.hbm_tbps),
        "peak_tflops": _r(sl.peak_tflops),
        "dtype_native": inst.chips[sl.chip].dtype_native,
        "memory_map_gb": {
            "weights": _r(mm.weights_gb),
            "workspace": _r(mm.workspace_gb),
            "headroom": _r(mm.headroom_gb),
            "kv_pool": _r(mm.kv_pool_gb),
        },
        "resident_capacity_blended": mm.resident_capacity(blended.resident_kv(inst)[0], inst.priors.kv_paging_slack),
    }


def _prefill_length_row(inst: Instance, sl, s: int) -> dict:
    """The prefill of an ``s``-token prompt on slice ``sl``: FLOPs (PFLOP) and times (ms) by term."""
    m = inst.model
    ffn, attn = prefill_flops(m, s, 0)
    pb = prefill_breakdown(m, sl, inst.priors, s, 0)
    return {
        "slice": sl.label,
        "prompt_tokens": s,
        "ffn_pflop": _r(float(ffn) / 1e15),
        "attention_pflop": _r(float(attn) / 1e15),
        "ffn_ms": _r(float(pb.gemm_ms)),
        "attention_ms": _r(float(pb.attention_ms)),
        "comm_ms": _r(float(pb.comm_ms)),
        "context_parallel": int(pb.context_parallel),
        "total_ms": _r(float(pb.total_ms)),
    }


def _prefill_sustained_row(inst: Instance, sl, tok: list, sh: list, mean_s: float, e_s2: float) -> dict:
    """Sustained prefill tokens/s of slice ``sl`` (FLOP-only, at the mean length, over the
    mix, with prefix hits, with every term) and why the figures differ."""
    m, w = inst.model, inst.workload
    base = sustained_prefill_tokens_per_s(m, sl, inst.priors, tok, sh, 0.0)
    hit = sustained_prefill_tokens_per_s(m, sl, inst.priors, tok, sh, w.prefix_hit_rate)
    return {
        "slice": sl.label,
        "ffn_only_tokens_per_s": _r(base["ffn_only"]),
        "at_mean_length_tokens_per_s": _r(base["at_mean_length"]),
        "over_mix_tokens_per_s": _r(base["over_mix"]),
        "over_mix_with_hits_tokens_per_s": _r(hit["over_mix"]),
        "at_mean_length_all_terms_tokens_per_s": _r(base["at_mean_length_all_terms"]),
        "why": (
            f"the FLOP-only figures leave out the rest of a prefill pass (tensor-parallel all-reduces, overheads, weight "
            f"reads): with them a prompt of the mean length computes {base['at_mean_length_all_terms']:,.0f} tokens/s, "
            f"{base['at_mean_length_all_terms'] / base['at_mean_length']:.0%} of the FLOP-only rate; attention FLOPs grow with "
            f"s^2 and E[s^2] = {e_s2:.3g} tokens^2 is {e_s2 / mean_s**2:.2f}x E[s]^2, so over the mix the rate is "
            f"{base['over_mix'] / base['at_mean_length_all_terms']:.0%} of that "
            f"({base['over_mix'] / base['at_mean_length']:.0%} of the FLOP-only at-mean-length rate)"
            + (
                f"; with a {w.prefix_hit_rate:.0%} prefix hit rate each new token also attends over the cached prefix "
                f"(2 L d (s^2 - c^2) per request), which brings the over-the-mix rate down to "
                f"{hit['over_mix'] / base['at_mean_length']:.0%} of the at-mean-length rate"
                if w.prefix_hit_rate > 0 else ""
            )
            + ". Size fleets on the over-the-mix figure."
        ),
    }


def _kv_transfer_row(inst: Instance, s: int) -> dict:
    """The KV of an ``s``-token context (GB) and its transfer over the ICI and the DCN (ms)."""
    kv = float(kv_bytes_per_request(inst.model, s))
    return {
        "context_tokens": s,
        "kv_gb": _r(kv / 1e9),
        "ici_ms": _r(float(kv_transfer_ms(kv, inst.network.kv_ici_gbytes_per_s_per_slice))),
        "ici_exposed_ms": _r(float(kv_transfer_ms(kv, inst.network.kv_ici_gbytes_per_s_per_slice)) * (1 - inst.priors.kv_transfer_overlap)),
        "dcn_ms": _r(float(kv_transfer_ms(kv, inst.network.dcn_gbytes_per_s_per_slice))),
    }


def _speculation_rows(inst: Instance, tms: list) -> list[dict]:
    """Per slice, tier, draft length k and class: the acceptance rate, whether it speculates,
    tokens per verify step, slot efficiency and the switch-off batch (none when speculation
    is off or the serving is colocated)."""
    out: list[dict] = []
    if not (inst.speculation.enabled and inst.serving.mode != "colocated"):
        return out
    m, w = inst.model, inst.workload
    for sl in slice_specs(inst):
        for tm in tms:
            kv_mean, _ = tm.resident_kv(inst)
            for k in inst.speculation.draft_tokens:
                for q, c in sorted(w.classes.items()):
                    a = class_acceptance_rate(c.spec_acceptance, c.spec_acceptance_kind, c.spec_acceptance_at_k, k)
                    off = switch_off_batch(m, sl, inst.priors, kv_mean, k, a, inst.speculation.draft_step_ms, max_batch=KNEE_SEARCH_MAX)
                    out.append({
                        "slice": sl.label,
                        "tier": tm.name,
                        "draft_tokens": k,
                        "class": q,
                        "alpha": a,
                        "speculates": a >= inst.speculation.alpha_threshold,
                        "tokens_per_verify_step": _r(float(tokens_per_verify_step(a, k))),
                        "slot_efficiency": _r(float(per_slot_efficiency(a, k))),
                        "switch_off_batch": off,
                    })
    return out


def _fit_rows(inst: Instance, tms: list) -> list[dict]:
    """Per tier, slice and role the serving mode runs: whether the tier's longest request's
    KV (GB) fits the slice's KV pool (GB), and why not."""
    out: list[dict] = []
    roles = {"disaggregated": ("prefill", "decode"), "colocated": ("replica",)}.get(inst.serving.mode, ("prefill", "decode", "replica"))
    for tm in tms:
        for sl in slice_specs(inst):
            for role in roles:
                f = longest_request_fit(inst, tm, sl, role)
                out.append({
                    "tier": tm.name, "slice": sl.label, "role": role, "prompt_tokens": f.prompt_tokens, "context_tokens": f.context_tokens,
                    "kv_need_gb": _r(f.need_gb), "kv_pool_gb": _r(f.pool_gb), "fits": f.fits, "reason": f.reason,
                })
    return out


#: the cells ``fleetplan perf`` sets each physics source's step times side by side on
PHYSICS_DECODE_BATCHES = (1, 8, 32, 64, 128, 256)
PHYSICS_PREFILL_TOKENS = (512, 2048, 8192, 32768)


def physics_side_by_side(inst: Instance) -> dict:
    """Each physics source's step times side by side, per slice shape: the decode
    step at a few batches (the blended mix's mean prompt plus half the answer in context) and
    the prefill of one prompt at a few lengths, under every source of the instance (held or
    not), the spread (max / min over the sources, and over those whose data cover the cell),
    and where a cell lies outside a source's data (``SourceCovers``). ms."""
    from fleetplan.instance.physics import sources

    srcs = sources(inst)
    blended = blended_mix(inst)
    ctx = blended.mean_tokens + inst.workload.output_tokens / 2.0
    kv = float(kv_bytes_per_request(inst.model, ctx))
    rows = []
    for sl in slice_specs(inst):
        cells = [("decode", b, ctx) for b in PHYSICS_DECODE_BATCHES] + [("prefill", 1, s) for s in PHYSICS_PREFILL_TOKENS]
        for phase, batch, tokens in cells:
            ms, inside = {}, {}
            for src in srcs:
                if phase == "decode":
                    ms[src.name] = _r(float(decode_step(inst.model, sl, src.priors, batch, kv).step_ms))
                else:
                    ms[src.name] = _r(float(prefill_breakdown(inst.model, sl, src.priors, tokens, 0).total_ms))
                inside[src.name] = _covers(src.covers, sl.chips, phase, batch, tokens)
            vals = list(ms.values())
            cov = [v for n, v in ms.items() if inside[n]]
            rows.append({"slice": sl.label, "phase": phase, "batch": batch, "tokens": _r(tokens), "step_ms": ms,
                         "outside_data": sorted(n for n, ok in inside.items() if not ok),
                         "spread": _r(max(vals) / min(vals)), "spread_in_data": _r(max(cov) / min(cov)) if len(cov) > 1 else None})
    return {"hold": inst.physics.hold, "held": [s.name for s in srcs if s.held],
            "sources": [{"name": s.name, "held": s.held, "origin": s.origin, "description": s.description} for s in srcs],
            "context_tokens": _r(ctx), "cells": rows}


def _covers(cov, chips: int, phase: str, batch: int, tokens: float) -> bool:
    """Whether a cell lies inside a source's data (True when the source states none)."""
    if cov is None:
        return True
    if cov.tensor_parallel and chips not in cov.tensor_parallel:
        return False
    if phase == "decode":
        return (cov.decode_batch_max is None or batch <= cov.decode_batch_max) and \
            (cov.decode_context_max_tokens is None or tokens <= cov.decode_context_max_tokens)
    return cov.prefill_tokens_max is None or tokens <= cov.prefill_tokens_max


def _colocated(inst: Instance, tms: list[TierMix]) -> list[dict]:
    """Per (tier, shape): every schedule the instance allows (:func:`fleetplan.perf.colocated.schedules_of`)
    rated by the model sizing uses (:class:`fleetplan.perf.colocated.ReplicaRates`: the
    schedule's step physics, the occupancy-distribution TPOT tail, TTFT with the pool's
    prompts queued under ``serving.router``), the replicas each region's sized peak
    needs, and the load table of the schedule that needs the fewest replicas in all. The
    rate searches share the table cache's memos with the candidate tables (the same
    numbers, each held source's its own: :func:`fleetplan.tables.cache.rate_memos`)."""
    head = inst.serving.utilisation_headroom
    tables = default_tables()
    try:
        return _colocated_rows(inst, tms, head, tables)
    finally:
        if tables is not None:
            tables.flush()


def _colocated_rows(inst: Instance, tms: list[TierMix], head: float, tables) -> list[dict]:
    from fleetplan.instance.physics import held_instances, held_slowest_first

    order = held_slowest_first(inst)
    held = [si for _, si in order]
    rows = []
    for tm in tms:
        slos = {s.metric: s for s in tier_slos(inst, tm.name)}
        tp_pct = slos["tpot"].percentile if "tpot" in slos else 99.0
        tt_pct = slos["ttft"].percentile if "ttft" in slos else 99.0
        pcts = sorted({tp_pct, tt_pct, 50.0})
        peaks = {r: inst.sized_peak_rps(r) * tm.tier_share for r in sorted(inst.regions)}
        for sl in slice_specs(inst):
            kv_mean, _ = tm.resident_kv(inst)
            cap = slice_memory_map(inst.model, sl, inst.priors).resident_capacity(kv_mean, inst.priors.kv_paging_slack)
            fit = fit_under(held_instances(inst), tm, sl, "replica")
            options = []
            for sch in schedules_of(inst):
                src = [PrefillSource(1.0, tm.hit_rate)]
                rr = rates_under(held, tm, sl, src, sch, rate_memos(tables, held, tm.name, sl.label, src, sch.label))
                need = {r: (rr.replicas_for(lam, head) if fit.fits else None) for r, lam in peaks.items()}
                ok = all(n is not None for n in need.values())
                options.append((sch, rr, need, ok))
            feasible = [o for o in options if o[3]]
            # ties on replicas broken by the rate per replica in the pool the largest region needs
            # (the pooled least-work rate the sizing uses), not by one replica alone
            best = min(feasible, key=lambda o: (sum(o[2].values()), -o[1].rate(max(max(o[2].values()), 1)))) if feasible else None
            sched_rows = [{
                "schedule": sch.label,
                "rps_per_replica_alone": _r(rr.rate(1)) if fit.fits else 0.0,
                "replicas_by_region": need,
                "replicas_needed": sum(need.values()) if ok else None,
                "chosen": best is not None and sch == best[0],
                "fewest_replicas": best is not None and ok and sum(need.values()) == sum(best[2].values()),
            } for sch, rr, need, ok in options]
            table, cost_in, cost_out, under = [], None, None, None
            if best is not None:
                sch, rr, need, _ = best
                big = max(peaks, key=lambda r: (need[r], peaks[r]))
                n_big = max(need[big], 1)
                lam_max = rr.rate(n_big)
                if hasattr(rr, "part_at"):  # several held sources: the load table under the one that binds
                    under = order[rr.bound_at(n_big)][0]
                    rr = rr.part_at(n_big)
                for frac in (0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25):
                    lam = lam_max * frac
                    st, lat = rr.latency(lam, n_big, pcts, estimate=False)
                    met = st.stable and all({"ttft": lat.ttft_ms, "tpot": lat.tpot_ms, "itl": lat.itl_ms}[s.metric][s.percentile] <= s.limit_ms * (1 + 1e-6)
                                            for s in slos.values())
                    table.append({
                        "rps": _r(lam),
                        "prefill_share": _r(st.prefill_share) if st.stable else None,
                        "sequences_decoding": _r(st.sequences_decoding) if st.stable else None,
                        "effective_tpot_ms": _r(st.tpot_ms) if st.stable else None,
                        f"tpot_p{tp_pct:g}_ms": _r(lat.tpot_ms[tp_pct]) if st.stable else None,
                        f"ttft_p{tt_pct:g}_ms": _r(lat.ttft_ms[tt_pct]) if st.stable else None,
                        f"itl_p{tp_pct:g}_ms": _r(lat.itl_ms[tp_pct]) if st.stable else None,
                        "stable": st.stable,
                        "over_slo": not met,
                        "reason": st.reason,
                    })
                n_all = sum(need.values())
                if n_all:
                    lam = sum(peaks.values()) / n_all
                    st = rr.state(lam)
                    price = min(inst.regions[r].price_per_chip_hour_usd.get(sl.chip, inst.chips[sl.chip].price_per_chip_hour_usd) for r in inst.regions)
                    per_h = price * sl.chips
                    if st.stable and lam > 0:
                        cost_in = per_h * st.prefill_share / (lam * tm.mean_tokens * 3600) * 1e6
                        cost_out = per_h * (1 - st.prefill_share) / (lam * tm.output_tokens * 3600) * 1e6
            rows.append({
                "tier": tm.name,
                "slice": sl.label,
                "router": inst.serving.router,
                "kv_capacity_requests": cap,
                "fits": fit.fits,
                "reason": fit.reason,
                "utilisation_headroom": head,
                "peak_rps_by_region": {r: _r(v) for r, v in peaks.items()},
                "peak_rps": _r(sum(peaks.values())),
                "schedule": best[0].label if best else None,
                "max_rps_per_replica": _r(best[1].rate(max(max(best[2].values()), 1))) if best else 0.0,
                "load_table_replicas": max(max(best[2].values()), 1) if best else None,
                "load_table_source": under,
                "replicas_needed": sum(best[2].values()) if best else None,
                "schedules": sched_rows,
                "cost_per_1m_input_tokens_usd": _r(cost_in) if cost_in is not None else None,
                "cost_per_1m_output_tokens_usd": _r(cost_out) if cost_out is not None else None,
                "load_table": table,
            })
    return rows
