"""Issue 41 (interactive what-ifs): the table cache keys each piece by its family's part of
the instance (fleetplan.tables.cache.family_key) -- the instance less what that family's
physics never reads (UNREAD). A field left out that the physics did read would serve a
stale table. So every field each family leaves out is changed here, one at a time, on an
instance that exercises it (long prompts past the context-parallel threshold, speculation,
a TTFT path, N-1 with an admission clamp, both serving modes, two slice shapes), and that
family's pieces -- computed by the functions the candidate tables call, with the same
arguments -- must come out bit for bit the same; and its key must not change, while the
key of a family that reads the field does (so the cache tells the two apart).
"""

from __future__ import annotations

import pickle

import pytest

from fleetplan.tables import derived, prefill
from fleetplan.instance.io import parse_instance
from fleetplan.tables.cache import UNREAD, family_key
from fleetplan.perf.colocated import replica_rates, schedules_of
from fleetplan.perf.pools import PrefillSource, longest_request_fit, prefill_profile, slice_specs, tier_mixes
from tests.conftest import tiny_data

pytestmark = pytest.mark.fresh_table_cache  # tests/conftest.py: its own empty table-cache folder

RICH = dict(
    chips={"acc": {"slice_shapes": [1, 2]}},
    workload={"input_mix": [{"share": 0.7, "tokens": 1500}, {"share": 0.3, "tokens": 24000}], "prefix_hit_rate": 0.3,
              "classes": {"std": {"share": 1.0, "spec_acceptance": 0.6,
                                  "slos": [{"metric": "ttft", "percentile": 99, "limit_ms": 4000},
                                           {"metric": "tpot", "percentile": 99, "limit_ms": 60}]}}},
    priors={"path_latency": [{"name": "gateway", "p50_ms": 4.0, "p99_ms": 12.0}], "context_parallel_min_tokens": 16384,
            "attention_mfu": 0.3, "kv_transfer_overlap": 0.2, "prefill_overhead_ms": 2.0, "decode_step_overhead_ms": 0.5},
    speculation={"enabled": True, "draft_tokens": [2, 4]},
    failover={"n_minus_1": True, "diverted_hit_rate": 0.1, "rewarm_hit_rate_factor": 0.8,
              "admission_clamp": {"enabled": True, "min_input_tokens": 20000}, "warm_pool": {"max_slices_per_region": 2}},
    serving={"mode": "auto", "chunk_tokens": [512], "decode_knee_margin": 0.1, "utilisation_headroom": 0.9},
)

#: one change of every field some family leaves out (dotted path -> new value), each a change
#: the physics would see if it read the field
CHANGES = {
    "priors.prefill_mfu": 0.25, "priors.prefill_overhead_ms": 9.0, "priors.prefill_chunk_tokens": 2048,
    "priors.context_parallel_min_tokens": 4096, "priors.context_parallel_efficiency": 0.6,
    "priors.path_latency": [{"name": "gateway", "p50_ms": 9.0, "p99_ms": 40.0}],
    "priors.decode_mfu": 0.2, "priors.decode_step_overhead_ms": 2.0, "priors.tpot_tail_method": "max",
    "speculation.enabled": False, "speculation.draft_tokens": [3], "speculation.draft_step_ms": 1.5, "speculation.alpha_threshold": 0.7,
    "failover.n_minus_1": False, "failover.diverted_hit_rate": 0.4, "failover.rewarm_hit_rate_factor": 0.5,
    "failover.size_for": "steady", "failover.admission_clamp": {"enabled": False, "min_input_tokens": 20000},
    "failover.warm_pool": {"min_slices_per_region": 1, "max_slices_per_region": 4}, "failover.event_weight": 0.01,
    "serving.mode": "colocated", "serving.batch_caps": [8, 64, 256], "serving.decode_knee_margin": 0.3,
    "serving.utilisation_headroom": 0.6, "serving.colocated_schedules": ["prefill-first"], "serving.chunk_tokens": [256, 1024],
    "serving.router": "round-robin", "serving.mixed_shapes": True,
    "placement.size_with_pods": False, "placement.dcn_share_max": 0.2,
    "workload.demand_margin": 0.3,
}


def _unread(family: str) -> list[str]:
    """The dotted fields of CHANGES that ``family`` leaves out of its key (its UNREAD, and the
    workload's demand margin, which no table reads)."""
    out = []
    for path in CHANGES:
        section, name = path.split(".", 1)
        rule = UNREAD[family].get(section)
        if rule is True or (rule is not None and name in rule) or path == "workload.demand_margin":
            out.append(path)
    return out


def _changed(base: dict, path: str):
    section, name = path.split(".", 1)
    doc = pickle.loads(pickle.dumps(base))
    doc[section][name] = CHANGES[path]
    return parse_instance(doc, "changed")


@pytest.fixture(scope="module")
def base_doc() -> dict:
    return parse_instance(tiny_data(**RICH), "rich").model_dump(mode="json")


@pytest.fixture(scope="module")
def base(base_doc):
    inst = parse_instance(base_doc, "rich")
    d = derived.build_model_data(inst, tables=False)
    mixes = {t: derived._regime_mixes(d, t) for t in d.TIERS}
    return inst, mixes


def _decode_pieces(inst) -> list:
    """What the decode family's memo computes per (tier, shape): the KV fit and both regimes'
    operating points (derived._decode_candidates)."""
    out = []
    for tm in tier_mixes(inst):
        for sl in slice_specs(inst):
            knees = None
            out.append(longest_request_fit(inst, tm, sl, "decode"))
            for regime in (derived.NORMAL, derived.FAILOVER):
                best, knees = derived.best_decode_op(inst, tm, sl, regime, knees)
                out.append((best, knees))
    return out


def _prefill_pieces(inst, mixes) -> list:
    """What the prefill family's memos compute for the base build's traffic mixes: the KV fit,
    the p99 probe and the physics (service times, least favourable profile, wait budget), the
    latter also at a DCN share (placement-aware sizing's levels)."""
    out = []
    for tm in tier_mixes(inst):
        slo = prefill._ttft_slo(inst, tm.name)
        for sl in slice_specs(inst):
            out.append(longest_request_fit(inst, tm, sl, "prefill"))
            for _, regime_mixes in mixes[tm.name]:
                out.append([prefill_profile(inst, tm, sl, [x for x in m.values() if x.weight > 0], [99.0]).mean_ms for m in regime_mixes])
                for dcn in (0.0, 0.3):
                    out.append(prefill._prefill_physics(inst, tm, sl, regime_mixes, slo, slo.percentile, dcn))
    return out


def _replica_pieces(inst, schedules) -> list:
    """What the replica family's rate searches give for the base instance's schedules: the top
    rate and the rates of pools of 1, 3 and 8 (each search fresh, in that order)."""
    out = []
    for tm in tier_mixes(inst):
        for sl in slice_specs(inst):
            out.append(longest_request_fit(inst, tm, sl, "replica"))
            for src in ([PrefillSource(1.0, tm.hit_rate)], [PrefillSource(0.6, tm.hit_rate), PrefillSource(0.4, 0.1, 20000)]):
                for sch in schedules:
                    rr = replica_rates(inst, tm, sl, src, sch)
                    out.append((rr.top, rr.rate(1), rr.rate(3), rr.rate(8)))
    return out


def _pieces(family: str, inst, mixes, schedules) -> bytes:
    got = {"decode": lambda: _decode_pieces(inst), "prefill": lambda: _prefill_pieces(inst, mixes),
           "replica": lambda: _replica_pieces(inst, schedules)}[family]()
    return pickle.dumps(got)


@pytest.mark.parametrize("family", sorted(UNREAD))
def test_a_family_does_not_read_what_its_key_leaves_out(family, base, base_doc):
    inst, mixes = base
    schedules = schedules_of(inst)
    want = _pieces(family, inst, mixes, schedules)
    unread = _unread(family)
    assert len(unread) >= 6, unread
    for path in unread:
        other = _changed(base_doc, path)
        assert family_key(other, family) == family_key(inst, family), path
        assert _pieces(family, other, mixes, schedules) == want, f"{family} reads {path}"


def test_a_family_that_reads_a_field_has_it_in_its_key(base, base_doc):
    """The fields the issue names: a region's peak is in no family's key (it reaches the
    pieces through their arguments), priors.decode_mfu in the decode and replica keys only,
    priors.prefill_mfu in the prefill and replica keys only -- and each does move the tables
    of the families whose key holds it."""
    inst, mixes = base
    schedules = schedules_of(inst)
    peak = pickle.loads(pickle.dumps(base_doc))
    peak["regions"]["a"]["peak_rps"] = 35.0
    assert all(family_key(parse_instance(peak, "peak"), f) == family_key(inst, f) for f in UNREAD)
    for path, readers in (("priors.decode_mfu", {"decode", "replica"}), ("priors.prefill_mfu", {"prefill", "replica"})):
        other = _changed(base_doc, path)
        moved = {f for f in UNREAD if family_key(other, f) != family_key(inst, f)}
        assert moved == readers, path
        for f in readers:
            assert _pieces(f, other, mixes, schedules) != _pieces(f, inst, mixes, schedules), (path, f)
