"""The physics sources and the margins of a plan, as ``fleetplan solve`` prints them:
the sources the plan holds under and the one binding each pool, each pool's margins (a column
of the latencies table) and what holding under several sources costs beside each single
source's plan."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from fleetplan.cli.common import console

if TYPE_CHECKING:
    from fleetplan.sizing.source_plans import SourcePlan
    from fleetplan.results.plan import Plan, SloMargin

__all__ = ["margin_text", "least_margins", "plan_margins", "render_physics", "render_source_plans", "MARGIN_LEGEND"]

MARGIN_LEGEND = ("margins: xS / xL per SLO = the step-time multiplier (every prefill and decode step at once) and the load multiplier "
                 "at which the SLO breaks at the pool's load in that scenario (>= x10 / >= x100: not reached in the search)")


def _x(v: float | None, top: float) -> str:
    """A margin to three significant digits, rounded down as it is stored (never overstated)."""
    if v is None:
        return "-"
    if v >= top:
        return f">=x{top:g}"
    from fleetplan.results.precision import floor_digits

    return f"x{floor_digits(v, 3):#.3g}"


def margin_text(margins: list[SloMargin] | None, region: str, tier: str, role: str, scenario: str) -> str:
    """'TTFT p99 x1.31 / x1.35; TPOT p99 x1.28 / x1.42' for one pool in one scenario ('-' when
    none), '(under SOURCE)' after it when one source gives every margin shown, else each margin
    followed by its own source ('x1.05 (vidur-vllm) / x1.08 (llm-inference-bench-vllm)')."""
    rows = [m for m in margins or [] if (m.region, m.tier, m.role, m.scenario) == (region, tier, role, scenario)]
    if not rows:
        return "-"
    load_src = [(m.load_source or m.source) if m.load_margin is not None else None for m in rows]
    srcs = {m.source for m in rows if m.source and m.step_time_margin is not None} | {s for s in load_src if s}
    if len(srcs) <= 1:
        parts = [f"{m.metric.upper()} p{m.percentile:g} {_x(m.step_time_margin, 10.0)} / {_x(m.load_margin, 100.0)}" for m in rows]
        return "; ".join(parts) + (f" (under {next(iter(srcs))})" if srcs else "")

    def tag(v: str, src: str | None) -> str:
        return f"{v} ({src})" if src and v != "-" else v

    return "; ".join(f"{m.metric.upper()} p{m.percentile:g} {tag(_x(m.step_time_margin, 10.0), m.source)} / "
                     f"{tag(_x(m.load_margin, 100.0), ls)}" for m, ls in zip(rows, load_src))


def plan_margins(inst, plan: Plan):
    """The plan's margins (a physics instance's plan records them), else computed by the
    evaluator (results/margins.py); None for a plan without predictions."""
    if plan.margins is not None:
        return plan.margins
    if not plan.scenarios or all(pl.withheld for sc in plan.scenarios for pl in sc.pools):
        return None
    from fleetplan.results.margins import pool_margins

    return pool_margins(inst, plan.pools, plan.scenarios)


def least_margins(margins: list[SloMargin] | None, region: str, tier: str, role: str) -> str:
    """'x1.25 / x1.28': a pool's least step-time and load margins over its SLOs and scenarios ('-' when none)."""
    rows = [m for m in margins or [] if (m.region, m.tier, m.role) == (region, tier, role)]
    if not rows:
        return "-"
    steps = [m.step_time_margin for m in rows if m.step_time_margin is not None]
    loads = [m.load_margin for m in rows if m.load_margin is not None]
    return f"{_x(min(steps) if steps else None, 10.0)} / {_x(min(loads) if loads else None, 100.0)}"


def render_physics(plan: Plan) -> None:
    """The plan's physics sources (held or not, reference step, origin) and the source binding
    each pool; nothing for a plan of one source."""
    ph = plan.physics
    if ph is None:
        return
    t = Table(title=f"Physics sources (physics.hold: {ph.hold}): the plan is sized and verified under every held one", title_justify="left")
    for c in ("source", "held", "decode step @64 + prefill of the mean prompt, ms", "from", "binds"):
        t.add_column(c, justify="right" if c.startswith("decode") else "left", overflow="fold")
    for s in ph.sources:
        binds = [f"{b.role}[{b.region},{b.tier}] ({b.scenario})" for b in ph.binding if b.source == s.name]
        t.add_row(s.name, "yes" if s.held else "no", f"{s.reference_step_ms:,.1f}", escape(s.origin), escape(", ".join(binds)) or "-")
    console.print(t)


def render_source_plans(rows: list[SourcePlan], why_none: dict[str, str] | None = None) -> None:
    """What it costs: the robust plan beside each single source's plan, chips, $/h and $ per 1M
    output tokens, and the sources each plan holds and breaks under. ``why_none``: hold ->
    why its solve gave no plan (the time limit), printed in place of a bare 'no plan'."""
    t = Table(title="What holding under the sources costs: the plan solved for each single source, checked under every source",
              title_justify="left")
    for c in ("plan held under", "chips", "$/h", "$/1M output tokens", "holds under", "breaks under (first check failed)"):
        t.add_column(c, justify="right" if c in ("chips", "$/h", "$/1M output tokens") else "left", overflow="fold")
    for i, r in enumerate(rows):
        name = f"{r.hold} (this plan)" if i == 0 else r.hold
        if r.plan is None:
            t.add_row(escape(name), "-", "-", "-", "-", escape((why_none or {}).get(r.hold, "no plan")))
            continue
        c = r.plan.cost
        per = "withheld" if c.cost_per_1m_output_tokens_usd is None else f"{c.cost_per_1m_output_tokens_usd:.3f}"
        t.add_row(escape(name), f"{c.chips:,}", f"{c.fleet_cost_per_hour_usd:,.0f}", per, escape(", ".join(r.holds)) or "none",
                  escape(", ".join(f"{n} ({msg[1:msg.index(']')]})" for n, msg in r.breaks)) or "-")
    console.print(t)
    for r in rows:
        if r.breaks:
            n, msg = r.breaks[0]
            console.print(f"  the {escape(r.hold)} plan under {escape(n)}: {escape(msg)}", soft_wrap=True)
