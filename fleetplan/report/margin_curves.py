"""The data of the report's margins figure (the figure: :mod:`fleetplan.report.margins_figure`):
per pool and SLO, in the pool's sizing scenario, the SLO's percentile over its limit at
step-time multipliers m of the instance's own priors (:data:`SCALES`; its
``prefill_time_scale`` and ``decode_time_scale`` both times m), from the evaluator only
(:mod:`fleetplan.results.margins`'s pool test at the plan's recorded loads), the m at which
it crosses the limit, and each physics source's place on that scale. Its own module so that
the report's data (:mod:`fleetplan.report.data`) and the figure both import it, neither
the other.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SCALES", "MarginCurve", "margin_curves"]

#: the step-time multipliers the curves are evaluated at
SCALES = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.75, 2.0)

class MarginCurve(BaseModel):
    """One SLO of one pool against a multiplier on every step time
    (:func:`margin_curves`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    region: str
    tier: str
    role: str
    scenario: str = Field(description="The pool's sizing scenario.")
    metric: str
    percentile: float
    limit_ms: float
    scale: list[float] = Field(description="Multipliers on every step time of the instance's own priors (dimensionless).")
    ratio: list[float | None] = Field(description="The SLO's percentile over its limit at each multiplier (null: no steady state, "
                                                  "or a decode pool's tokens/s short of its load).")
    crossing: float | None = Field(description="The multiplier of the instance's priors at which the SLO breaks (the margins' search, "
                                               "results.margins.margin_search: 4 significant digits, rounded down; null: it holds or "
                                               "fails over the whole drawn scale).")
    sources: dict[str, float | None] = Field(description="Where each physics source sits on the scale: the multiplier of the instance's "
                                              "priors at which the curve reaches the source's own percentile at the pool's load "
                                              "(dimensionless; null: off the scale drawn).")
    source_ratio: dict[str, float | None] = Field(default_factory=dict, description="Each source's own percentile at the pool's load "
                                                  "over the limit (null: no steady state, or a decode pool's tokens/s short of its "
                                                  "load).")
    plan_margin: float | None = Field(description="The plan's step-time margin of this SLO (the least over its held sources).")



def _on_curve(scale, ratio, r: float | None) -> float | None:
    """The multiplier at which the curve (``scale``, ``ratio``: rising) reaches ``r``, linear
    between its points; None off the scale (or for None)."""
    if r is None:
        return None
    pts = [(m, x) for m, x in zip(scale, ratio) if x is not None]
    for (m0, r0), (m1, r1) in zip(pts, pts[1:]):
        if r0 <= r <= r1 and r1 > r0:
            return m0 + (r - r0) / (r1 - r0) * (m1 - m0)
    return None


def margin_curves(inst, plan) -> list:
    """:class:`MarginCurve` of every pool's SLOs in its sizing scenario (the normal peak
    when none is recorded), from the plan's records and the evaluator; [] for a plan
    without predictions."""
    from fleetplan.instance.physics import physics_instance, sources
    from fleetplan.results.evaluate import Context
    from fleetplan.results.loads import sizing_records
    from fleetplan.results.margins import _METRICS, STEP_RANGE, _Pool, margin_search, pool_margins, scaled_instance

    if not plan.scenarios or all(pl.withheld for sc in plan.scenarios for pl in sc.pools):
        return []
    base = physics_instance(inst)  # the instance's own priors, one source
    ctxs = {m: Context(scaled_instance(base, m)) for m in SCALES}  # grows with the crossings' searches
    margins = plan.margins if plan.margins is not None else pool_margins(inst, plan.pools, plan.scenarios)
    srcs = sources(inst)
    src_ctx = {x.name: Context(physics_instance(inst, x.name)) for x in srcs}
    sized = sizing_records(plan.scenarios)
    by_name = {sc.name: sc for sc in plan.scenarios}
    normal = next((sc for sc in plan.scenarios if sc.kind == "normal"), None)
    out = []
    for key in sorted({(p.region, p.tier, p.role) for p in plan.pools}):
        sn, rec = sized.get(key, ("normal", None))
        sc = by_name.get(sn) or normal
        if rec is None and sc is not None:
            rec = next((x for x in sc.pools if (x.region, x.tier, x.role) == key), None)
        if rec is None or rec.slices <= 0 or rec.slice is None:
            continue
        pool_obj = _Pool(plan.pools, rec, sc.kind == "loss")
        values = {m: pool_obj.values(c, 1.0) for m, c in ctxs.items()}

        def _value(m: float, slo, pool_obj=pool_obj) -> float:
            if m not in ctxs:
                ctxs[m] = Context(scaled_instance(base, m))
            return pool_obj.values(ctxs[m], 1.0).get((slo.metric, slo.percentile), math.inf)

        if any(v is None for v in values.values()):
            continue
        own = {x.name: pool_obj.values(src_ctx[x.name], 1.0) for x in srcs}
        for s in ctxs[1.0].slos[key[1]]:
            if s.metric not in _METRICS[key[2]]:
                continue
            ratio = [None if not math.isfinite(values[m][(s.metric, s.percentile)]) else values[m][(s.metric, s.percentile)] / s.limit_ms
                     for m in SCALES]
            cross = None
            if any(r is not None and r <= 1.0 for r in ratio) and any(r is None or r > 1.0 for r in ratio):
                # the multiplier itself, by the margins' search (the grid only draws the curve)
                cross = margin_search(lambda m, s=s: _value(m, s) <= s.limit_ms * (1 + 1e-6) + 1e-6, *STEP_RANGE)
            mine = {n: (None if not math.isfinite(v[(s.metric, s.percentile)]) else v[(s.metric, s.percentile)] / s.limit_ms)
                    for n, v in own.items()}
            pm = [m.step_time_margin for m in margins or [] if (m.region, m.tier, m.role, m.scenario, m.metric, m.percentile)
                  == (*key, sn, s.metric, s.percentile)]
            out.append(MarginCurve(region=key[0], tier=key[1], role=key[2], scenario=sn, metric=s.metric, percentile=s.percentile,
                                   limit_ms=s.limit_ms, scale=list(SCALES), ratio=[None if r is None else round(r, 6) for r in ratio],
                                   crossing=cross,
                                   sources={n: (None if (m := _on_curve(SCALES, ratio, r)) is None else round(m, 4)) for n, r in mine.items()},
                                   source_ratio={n: None if r is None else round(r, 6) for n, r in mine.items()},
                                   plan_margin=pm[0] if pm else None))
    return out
