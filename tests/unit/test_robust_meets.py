"""RobustContext's 'do the SLOs hold' (issue 41): the searches that ask only that -- the
batch infill's capacity, a prefill pool's load growth, the largest share the SLOs allow --
get all() of the held sources' answers, asked source by source from the one that missed last
and ended at the first miss, instead of every source's evaluation at every probe."""

from __future__ import annotations

from fleetplan.results.evaluate import Context
from fleetplan.results.evaluate import RobustContext


def test_meets_slo_is_every_sources_answer_and_asks_the_last_miss_first(solved):
    inst, plan = solved("llama70b-h100-bf16-p99")  # four held sources, colocated
    pool = next(p for p in plan.pools if p.role == "replica")
    peak = inst.sized_peak_rps(pool.region)
    ctx = Context(inst)
    assert isinstance(ctx, RobustContext) and len(ctx.parts) == 4
    asked: list[str] = []
    for name, part in ctx.parts:
        real = part.replica
        part.replica = lambda *a, _r=real, _n=name, **k: asked.append(_n) or _r(*a, **k)
    last_miss = None
    misses = 0
    for scale in (0.5, 1.0, 6.0, 40.0, 1.5, 80.0, 0.25, 20.0):
        lam = peak * scale
        asked.clear()
        got = ctx.replica_meets_slo(pool.tier, pool.slice, pool.slices, lam, 0.0, False, pool.schedule)
        whole = Context(inst).replica(pool.tier, pool.slice, pool.slices, lam, 0.0, False, pool.schedule)
        each = {n: c.replica(pool.tier, pool.slice, pool.slices, lam, 0.0, False, pool.schedule).meets_slo for n, c in ctx.parts}
        assert got == whole.meets_slo == all(each.values()), scale
        if got:  # every source asked, once
            assert sorted(asked[: len(ctx.parts)]) == sorted(n for n, _ in ctx.parts), (scale, asked)
        else:  # ended at its first miss, after asking first the source that missed last
            misses += 1
            probe = asked[: asked.index(next(n for n in asked if not each[n])) + 1]
            assert not each[probe[-1]] and all(each[n] for n in probe[:-1]), (scale, probe)
            if last_miss is not None:
                assert probe[0] == last_miss, (scale, probe, last_miss)
            last_miss = probe[-1]
    assert misses >= 2 and misses < 8  # the loads span both answers
