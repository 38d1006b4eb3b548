"""The verifier's SLO knee (results/evaluate.Context.decode_knee) is memoised by what it reads:
the instance without its regions, the tier, the slice, the draft length (issue 41: a purchase
plan's 30 quarter checks searched ~1,100 knees of 4,096 batches each, 7 s of the bundled
example's verification, for a handful of distinct ones)."""

from __future__ import annotations

from fleetplan.perf.pools import KNEE_SEARCH_MAX, decode_knee
from fleetplan.results import evaluate
from fleetplan.results.evaluate import Context


def _knees(ctx: Context) -> dict:
    return {(t, s.label, k): ctx.decode_knee(t, s.label, k) for t in ctx.tiers for s in _slices(ctx) for k in (0,)}


def _slices(ctx: Context):
    return [ctx.slice(f"{chip}x{n}") for chip, c in ctx.inst.chips.items() for n in c.slice_shapes]


def test_the_memo_gives_the_search_and_is_shared_by_demand_alone(tiny_instance, monkeypatch):
    monkeypatch.setattr(evaluate, "_KNEES", {})
    inst = tiny_instance()
    ctx = Context(inst)
    got = _knees(ctx)
    assert got and any(v > 0 for v in got.values())
    for (t, label, k), v in got.items():  # the value the search returns
        assert v == decode_knee(inst, ctx.tiers[t], ctx.slice(label), k, max_batch=KNEE_SEARCH_MAX)
    calls = []
    monkeypatch.setattr(evaluate, "decode_knee", lambda *a, **kw: calls.append(a) or 0)
    # another demand (regions' peaks): the same physics, every knee from the memo
    busier = tiny_instance(regions={r: {"peak_rps": 3 * float(reg.peak_rps)} for r, reg in inst.regions.items()})
    assert _knees(Context(busier)) == got and not calls
    # other physics (a slower chip): searched again
    slower = tiny_instance(chips={c: {"hbm_tbps": 0.5 * float(ch.hbm_tbps)} for c, ch in inst.chips.items()})
    _knees(Context(slower))
    assert len(calls) == len(got)
