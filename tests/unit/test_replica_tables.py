"""The colocated candidate tables as array programs (issue 41) against the scalar code they
replace (tests/unit/reference_colocated.py, main's perf/colocated.py before the change):
the same closed forms, so the same numbers -- step times element for element, service
sums, states, latency percentiles, rates and the ModelData replica tables within 1e-9
relative (the sums over a prompt's chunks round in another order, a few ulps).

The instance: ``tests/regression/cases/azure-cdf-20-buckets.yaml``, the Azure conversation
CDF of ``shared/cases/azure-cdf-52-buckets.yaml`` re-bucketed to 20 buckets
(``benchmarks/bench_tables.py --write-case 20``), Llama-3-70B BF16 on H100, colocated."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

import fleetplan.tables.derived as derived
from fleetplan.instance.io import load_instance, parse_instance
from fleetplan.perf.colocated import (
    CHUNKED,
    PREFILL_FIRST,
    Schedule,
    ServiceKernel,
    colocated_latency,
    colocated_state,
    colocated_states,
    mixed_step,
    prompt_service_grid,
    prompt_types,
    replica_rates,
    tpot_exceeds,
    tpot_percentile_ms,
)
from fleetplan.perf.pools import PrefillSource, slice_specs, tier_mixes
from fleetplan.perf.roofline import decode_step
from tests.unit import reference_colocated as ref

pytestmark = pytest.mark.fresh_table_cache  # tests/conftest.py: its own empty table-cache folder

CASE = Path(__file__).resolve().parents[1] / "regression" / "cases" / "azure-cdf-20-buckets.yaml"
REL = 1e-9


def _rel(a: float, b: float) -> float:
    if a == b:
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b))


def _close(a, b, rel=REL) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and all(_rel(x, y) <= rel for x, y in zip(a.ravel(), b.ravel()))


def _azure(shapes: list[int] | None = None, **serving):
    """The instance, with ``serving`` fields and the H100's slice shapes replaced where given."""
    data = yaml.safe_load(CASE.read_text())
    data["serving"].update(serving)
    if shapes is not None:
        data["chips"]["h100"]["slice_shapes"] = shapes
    return parse_instance(data, "azure-cdf-20-buckets")


@pytest.fixture(scope="module")
def azure():
    """The 20-bucket instance, the h100x8 shape, its two tier mixes, the prompt types with a
    30% prefix-cache hit rate (cached tokens exercise the chunk contexts)."""
    inst = _azure()
    sl = [s for s in slice_specs(inst) if s.chips == 8][0]
    return inst, sl, tier_mixes(inst)


def test_the_kernel_is_mixed_step_and_decode_step_element_for_element(azure):
    """Every chunk the kernel prices is the float mixed_step gives for it, and its decode
    steps are decode_step's, bit for bit -- dense (the azure shape) and MoE with collectives
    (the bundled Gemini instance's slices)."""
    inst, sl, tms = azure
    cases = [(inst, sl, tms[0])]
    gem = load_instance("gemini-ironwood")
    cases += [(gem, s, tier_mixes(gem)[0]) for s in slice_specs(gem)[:2]]
    for inst_, sl_, tm in cases:
        pt = prompt_types(tm, [PrefillSource(1.0, 0.3)])
        kv, _ = tm.resident_kv(inst_)
        for chunk in (64, 512, 4096):
            k = ServiceKernel(inst_.model, sl_, inst_.priors, Schedule(CHUNKED, chunk), pt, kv)
            B = np.array([0.0, 1.0, 7.25, 40.0, 0.8 * chunk])
            cs = k.chunk_steps(B)
            T = pt.prompt_tokens.size
            for r in range(B.size * T):
                g, i = divmod(r, T)
                n = int(cs.counts[g, i])
                q = max(chunk - B[g], 1.0)
                j = np.arange(n, dtype=float)
                new = pt.prompt_tokens[i] - pt.cached_tokens[i]
                want = mixed_step(inst_.model, sl_, inst_.priors, B[g], kv, np.where(j < n - 1, q, new - q * (n - 1)),
                                  pt.cached_tokens[i] + j * q).step_ms
                assert want.tobytes() == cs.step_ms[cs.starts[r]:cs.starts[r] + n].tobytes()
            assert k.decode_ms(B).tobytes() == decode_step(inst_.model, sl_, inst_.priors, B, kv).step_ms.tobytes()


def test_prompt_service_grid_matches_the_scalar_code(azure):
    """S, n, Delta, d at a search grid, one fractional batch and b = 0, prefill-first and two
    chunk budgets: within 1e-12; with ``padded_sums`` (the rate search's upper end) the
    scalar code's floats exactly."""
    inst, sl, tms = azure
    for tm in tms:
        pt = prompt_types(tm, [PrefillSource(0.7, 0.0), PrefillSource(0.3, 0.3)])
        kv, _ = tm.resident_kv(inst)
        for sch in (Schedule(PREFILL_FIRST), Schedule(CHUNKED, 256), Schedule(CHUNKED, 2048)):
            for B in (np.linspace(0.0, 200.0, 129), np.array([17.3]), np.zeros(1)):
                want = ref.prompt_service_grid(inst.model, sl, inst.priors, sch, pt, B, kv)
                got = prompt_service_grid(inst.model, sl, inst.priors, sch, pt, B, kv)
                assert all(_close(x, y, 1e-12) for x, y in zip(got, want))
                exact = ServiceKernel(inst.model, sl, inst.priors, sch, pt, kv).grid(B, padded_sums=True)
                assert all(x.tobytes() == y.tobytes() for x, y in zip(exact, want))


def _pairs(inst, sl, tm, schedules):
    """(new ReplicaRates, reference ReplicaRates) of the tier on the shape under each schedule."""
    src = [PrefillSource(1.0, tm.hit_rate)]
    return [(replica_rates(inst, tm, sl, src, sch), ref.replica_rates(inst, tm, sl, src, sch)) for sch in schedules]


def test_states_and_latencies_match_the_scalar_code(azure):
    """colocated_state and colocated_latency (TTFT bound and estimate, wait, TPOT over the
    geometric answers' mixture, ITL) at loads across the stable range, least-work and
    random routing: within 1e-9 of the scalar code."""
    inst, sl, tms = azure
    pcts = [50.0, 95.0, 99.0]  # the path's percentiles replica_rates keeps
    for tm in tms:
        for new, old in _pairs(inst, sl, tm, [Schedule(PREFILL_FIRST), Schedule(CHUNKED, 512)]):
            top = old.top
            assert new.top == top  # the rate search's ends and steps: the same floats
            for lam in (0.0, 0.2 * top, 0.7 * top, top, 1.3 * top):
                a, b = new.state(lam), old.state(lam)
                assert (a.stable, a.reason) == (b.stable, b.reason)
                for f in ("prefill_share", "sequences_decoding", "step_ms", "tpot_ms", "service_ms", "delta_ms", "steps"):
                    assert _close(getattr(a, f), getattr(b, f)), (lam, f)
                # bursty arrivals under least-work; Poisson under random (issue 40: a random split of a bursty
                # stream is burstier per replica than Poisson but less than the stream, QNA's splitting rule, which
                # the scalar code did not have -- tests/unit/test_routers.py checks it)
                for router, ca2 in (("least-work", 2.0), ("random", 1.0)):
                    la = colocated_latency(inst.model, sl, inst.priors, a, 6, router, new.o, new.kv, pcts, new.comps, new.path_pct,
                                           ca2=ca2, output_lengths="geometric")
                    lb = ref.colocated_latency(inst.model, sl, inst.priors, b, 6, router, old.o, old.kv, pcts, old.comps, old.path_pct,
                                               ca2=ca2, output_lengths="geometric")
                    for f in ("ttft_ms", "ttft_estimate_ms", "wait_ms", "tpot_ms", "itl_ms"):
                        assert _close([getattr(la, f)[p] for p in pcts], [getattr(lb, f)[p] for p in pcts]), (lam, router, f)


def test_a_batch_of_states_is_each_state_alone(azure):
    """colocated_states (the rate searches' passes over 15 rates) gives each rate the state
    colocated_state gives alone, bit for bit, whatever rates share the batch and whatever
    the grid memo holds: a rate search's answer cannot depend on the order it evaluated in."""
    inst, sl, tms = azure
    for sch in (Schedule(PREFILL_FIRST), Schedule(CHUNKED, 256), Schedule(CHUNKED, 2048)):
        rr = replica_rates(inst, tms[0], sl, [PrefillSource(1.0, 0.0)], sch)
        lams = list(np.random.default_rng(41).uniform(0.0, 1.3, 25) * rr.top) + [0.0]
        many = colocated_states(*rr.args, sch, rr.prompts, lams, rr.o, rr.kv, rr.cap, grid_memo={}, kernel=rr.tables.kernel)
        for lam, a in zip(lams, many):
            b = colocated_state(*rr.args, sch, rr.prompts, lam, rr.o, rr.kv, rr.cap, grid_memo={})
            assert (a.stable, a.reason, a.sequences_decoding, a.step_ms, a.tpot_ms, a.prefill_share) == \
                   (b.stable, b.reason, b.sequences_decoding, b.step_ms, b.tpot_ms, b.prefill_share)
            assert all(x.tobytes() == y.tobytes() for x, y in ((a.service_ms, b.service_ms), (a.delta_ms, b.delta_ms), (a.steps, b.steps)))


def test_tpot_exceeds_is_the_percentile_above_the_limit(azure):
    """tpot_exceeds decides a TPOT SLO as tpot_percentile_ms > limit does, without the
    quantile's bisection: at limits just either side of the percentile, below and past its
    bisection bracket, for fixed and geometric answers; the percentile itself within 1e-9
    of the scalar code (whose normal tail is math.erf). And for several states at once, each
    as alone."""
    inst, sl, tms = azure
    tm = tms[0]
    new, old = _pairs(inst, sl, tm, [Schedule(CHUNKED, 512)])[0]
    st = new.state(0.8 * new.top)
    kv = new.kv
    for lengths in ("fixed", "geometric"):
        for p, ca2, router in ((99.0, 1.0, "least-work"), (90.0, 2.5, "random"), (50.0, 1.0, "least-work")):
            q = tpot_percentile_ms(inst.model, sl, inst.priors, st, new.o, kv, p, ca2, router, lengths)
            assert _rel(q, ref.tpot_percentile_ms(inst.model, sl, inst.priors, st, new.o, kv, p, ca2, router, lengths)) <= REL
            for limit in (0.0, q * (1 - 1e-6), q * (1 + 1e-6), 10 * q, 1e9):
                assert tpot_exceeds(inst.model, sl, inst.priors, [st], new.o, kv, p, limit, ca2, router, lengths)[0] == (q > limit)
            many = [new.state(x * new.top) for x in (0.0, 0.3, 0.8, 1.0, 1.5)]
            qs = [tpot_percentile_ms(inst.model, sl, inst.priors, s, new.o, kv, p, ca2, router, lengths) for s in many]
            assert list(tpot_exceeds(inst.model, sl, inst.priors, many, new.o, kv, p, q * (1 + 1e-7), ca2, router, lengths)) == [
                x > q * (1 + 1e-7) for x in qs]


def test_replica_rates_match_the_scalar_code(azure):
    """ReplicaRates: the largest rate per replica for pools of several sizes (least-work
    pooling, bracketed by the rates found before) and the fewest replicas for a demand, a
    tier under a chunked schedule and one under prefill-first: the scalar code's answers."""
    inst, sl, tms = azure
    for tm, sch in ((tms[0], Schedule(CHUNKED, 2048)), (tms[1], Schedule(PREFILL_FIRST))):
        for new, old in _pairs(inst, sl, tm, [sch]):
            for n in (1, 3, 2, 8, 20):
                assert _rel(new.rate(n), old.rate(n)) <= REL, n
            demand = 40.0 * tm.tier_share
            assert new.replicas_for(demand, 0.85) == old.replicas_for(demand, 0.85)


def _replica_tables(inst, monkeypatch, rates) -> tuple[dict, dict]:
    """build_model_data's (replica, replica_region) tables with ``rates`` as the rate search
    (``fleetplan.perf.replica_rates.replica_rates``, which the tables reach through
    :func:`fleetplan.perf.robust.rates_under` since issue 40; no cache, so no memo)."""
    import fleetplan.perf.replica_rates as rr_mod

    with monkeypatch.context() as m:
        m.setattr(rr_mod, "replica_rates", lambda *a, memo=None, **k: rates(*a, **k))
        d = derived.build_model_data(inst, tables=False)  # no table cache: each build runs its own searches
    return d.replica, d.replica_region


def _same_tables(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key, x in a.items():
        y = b[key]
        assert (x.schedule, x.min_replicas) == (y.schedule, y.min_replicas), key
        assert _rel(x.rps_per_replica, y.rps_per_replica) <= REL and _rel(x.rps_floor, y.rps_floor) <= REL, key


def test_model_data_replica_tables_match_the_scalar_code(monkeypatch):
    """The ModelData replica candidates (rate per replica, n_ref, floor) of the 20-bucket
    instance, one shape, prefill-first and one chunk budget: the scalar code's tables."""
    inst = _azure([8], chunk_tokens=[512])
    new, old = _replica_tables(inst, monkeypatch, replica_rates), _replica_tables(inst, monkeypatch, ref.replica_rates)
    assert len(new[0]) == 4  # two tiers x two schedules, one regime
    _same_tables(new[0], old[0])
    _same_tables(new[1], old[1])


@pytest.mark.slow
def test_model_data_replica_tables_match_the_scalar_code_in_full(monkeypatch):
    """The same on the whole 20-bucket instance: both shapes, every schedule (a minute of the scalar code)."""
    inst = _azure()
    new, old = _replica_tables(inst, monkeypatch, replica_rates), _replica_tables(inst, monkeypatch, ref.replica_rates)
    _same_tables(new[0], old[0])
    _same_tables(new[1], old[1])


_NO_MASKED_ARRAYS = """
import sys
import numpy as np
from tests.unit.test_replica_tables import _azure
from fleetplan.perf.colocated import CHUNKED, Schedule, colocated_states, replica_rates
from fleetplan.perf.pools import PrefillSource, slice_specs, tier_mixes
inst = _azure()
sl = [s for s in slice_specs(inst) if s.chips == 8][0]
rr = replica_rates(inst, tier_mixes(inst)[0], sl, [PrefillSource(1.0, 0.0)], Schedule(CHUNKED, 256))
lams = list(np.linspace(0.05, 0.95, 15) * rr.top)
sts = colocated_states(*rr.args, rr.schedule, rr.prompts, lams, rr.o, rr.kv, rr.cap, grid_memo={}, kernel=rr.tables.kernel)
refined = sum(0 < st.sequences_decoding < rr.cap for st in sts)
print(refined, "numpy.ma" in sys.modules)
"""


def test_a_pass_of_states_loads_no_masked_arrays():
    """Issue 41 (``fleetplan perf`` of the Azure case cold, < 1 s of CPU): the refinement
    brackets of a pass of states are picked without ``np.unique``, whose first call
    (``np.ma.is_masked``) imports numpy.ma -- ~0.02-0.04 s of CPU of a command that uses no
    masked array. Fails before: numpy.ma loaded by the first pass that refines a bracket."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", _NO_MASKED_ARRAYS], capture_output=True, text=True, timeout=120, cwd=root,
                       env={**__import__("os").environ, "PYTHONPATH": str(root), "FLEETPLAN_CACHE": "0"})
    assert r.returncode == 0, r.stderr
    refined, masked = r.stdout.split()
    assert int(refined) > 0  # the pass did refine brackets
    assert masked == "False"
