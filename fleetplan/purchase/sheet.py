"""The order sheet as a planner reads it: per order when it is placed and
delivered, where, how many, on what commitment, the probability of the branch it hedges and
what needs it; why nothing is ordered now; the scenario x quarter fleets summarised per
quarter; the orders as CSV for finance.

"What needs an order" is read from the verified fleets, never assumed: the first quarter,
in a scenario through the order's tree node and while the order is in service, whose fleet
runs more chips of the order's chip in its region than the pods in service (and the burst
pods of the quarter) hold without the order -- the sizing model's pod constraint
(``c_fleet_pod_chips``: chips in slices and the warm pool <= chips per pod x pods), read at
the fleet the independent verifier re-proved. Everything here reads the plan document's
models (:mod:`fleetplan.purchase.result`) only; the CLI (``fleetplan purchase``), the report
(``--report``) and ``--csv`` print what it returns.
"""

from __future__ import annotations

import csv
import io
import statistics

from fleetplan.purchase.result import ContingentOrder, Order, OrderNeed, PurchasePlan, RiskFigures, ScenarioPlan
from fleetplan.results.precision import r6

__all__ = ["order_need", "nothing_to_order_why", "node_probability", "commitment", "need_words", "neutral_words", "quarter_summary", "CSV_COLUMNS", "orders_csv"]


def _index(labels: list[str], q: str) -> int:
    """Position of a quarter label (YYYYQn) relative to the horizon's first, past its end too."""
    y, n = q.split("Q")
    y0, n0 = labels[0].split("Q")
    return (int(y) - int(y0)) * 4 + int(n) - int(n0)


def order_need(order: Order, through: list[str], scenarios: list[ScenarioPlan], labels: list[str]) -> OrderNeed | None:
    """What needs ``order`` (module docstring): the first quarter and the most probable of the
    scenarios ``through`` its node (names) whose verified fleet then runs on its pods, or None
    when none does in the horizon. ``scenarios``: the plan's, with their quarters' pods in
    service, chips running and burst pods; ``labels`` the horizon's quarters."""
    if order.pods <= 0:
        return None
    per_pod = order.chips // order.pods
    first = _index(labels, order.delivery_quarter)
    last = len(labels) - 1 if order.in_service_until is None else min(len(labels) - 1, _index(labels, order.in_service_until))
    hits = []  # (quarter index, -probability, scenario, quarter result, running, without)
    used = 0.0
    for sc in scenarios:
        if sc.name not in through:
            continue
        hit = None
        for i, q in enumerate(sc.quarters):
            if not first <= i <= last:
                continue
            row = next((r for r in q.pods_in_service if r.region == order.region and r.chip == order.chip), None)
            if row is None:
                continue
            burst = sum(b.pods for b in q.burst if b.region == order.region and b.chip == order.chip)
            without = (row.pods + burst - order.pods) * per_pod
            if row.chips_running > without:
                hit = (i, -sc.probability, sc.name, q, row.chips_running, without)
                break
        if hit is not None:
            hits.append(hit)
            used += sc.probability
    if not hits:
        return None
    i, _p, name, q, running, without = min(hits)
    return OrderNeed(quarter=labels[i], scenario=name, peak_rps=q.peak_rps.get(order.region, 0.0), chips_running=running, chips_without=max(without, 0),
                     probability=r6(min(used, 1.0)))


def node_probability(order: Order, plan: PurchasePlan) -> float:
    """The probability of the branch an order is placed on: the scenarios through its node
    (a contingent or fixed order's ``scenarios``; the order sheet's: every scenario of the plan,
    1 -- a re-plan's probabilities are conditional on the path seen)."""
    names = order.scenarios if isinstance(order, ContingentOrder) else [s.name for s in plan.scenarios]
    return min(1.0, sum(s.probability for s in plan.scenarios if s.name in names))


def nothing_to_order_why(now: str, offered_now: list[tuple[str, str, str]], contingency: list[ContingentOrder], labels: list[str]) -> str:
    """Why the order sheet is empty, in words. ``now``: the decision quarter; ``offered_now``:
    (region, chip, delivery quarter) of every order the supply offers then; ``contingency``: the
    later orders with their :class:`OrderNeed` (:func:`order_need`)."""
    if not offered_now:
        return (f"nothing to order now: the supply offers no order in {now} (its orderable quarters, or lead times that would deliver "
                f"past {labels[-1]})")
    soonest = min(offered_now, key=lambda o: _index(labels, o[2]))[2]
    later = [o for o in contingency if o.needed is not None]
    if not later:
        return (f"nothing to order now: the pods in service (installed and already ordered) carry every scenario's verified fleet to "
                f"the end of the horizon ({labels[-1]}); an order placed in {now} would arrive in {soonest} at the earliest")
    o = min(later, key=lambda x: (_index(labels, x.needed.quarter), -x.needed.probability, x.node, x.region, x.chip))
    n = o.needed
    i = _index(labels, n.quarter)
    covered = f"through {labels[i - 1]}" if i > 0 else "in no quarter"
    branch = "on every path" if o.node == "root" else f"if demand tracks {o.node}"
    return (f"nothing to order now: the pods in service (installed and already ordered) carry every scenario's verified fleet {covered}; "
            f"the first fleet that runs on a later order's pods is {n.scenario}'s in {n.quarter} ({o.region}: {n.chips_running:,} {o.chip} chips "
            f"running, {n.chips_without:,} without it), met by {o.pods} pod{'s' if o.pods != 1 else ''} ordered in {o.order_quarter} {branch} "
            f"and delivered in {o.delivery_quarter}; an order placed in {now} would arrive in {soonest} at the earliest")


def commitment(order: Order, labels: list[str]) -> str:
    """The order's commitment in words: a capital buy kept, or a committed term to its last quarter."""
    if order.in_service_until is None:
        return "capital, kept"
    term = _index(labels, order.in_service_until) - _index(labels, order.delivery_quarter) + 1
    return f"{term}-quarter term to {order.in_service_until}"


def need_words(order: Order) -> str:
    """What needs an order, in one short cell: '2027Q3 high (p 0.4): 6 > 4 chips' -- the first
    quarter, the scenario, the probability of the scenarios that ever run on it, and the chips
    running against those the pods hold without it."""
    n = order.needed
    if n is None:
        return "no fleet runs on it in the horizon"
    return f"{n.quarter} {n.scenario} (p {n.probability:.3g}): {n.chips_running:,} > {n.chips_without:,} chips"


def _span(values: list[float], fmt: str = "{:,.0f}") -> str:
    lo, hi = min(values), max(values)
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)}..{fmt.format(hi)}"


def quarter_summary(plan: PurchasePlan) -> list[dict[str, str]]:
    """One row per quarter over the scenarios (each scenario once, its fleet in that quarter), as
    column -> text: the peak demand summed over the regions (min..max, requests/s), the pods in service per chip
    summed over the regions (min..max), the chips running at the peak (min / median / max), the
    fleet's USD/h (min..max), the most unserved requests/s (peak; worst region loss) and how
    many fleets the verifier passed. The full table is the plan's ``scenarios`` (--json) or
    ``fleetplan purchase --scenarios``."""
    rows = []
    chips = sorted({r.chip for s in plan.scenarios for q in s.quarters for r in q.pods_in_service})
    for i, label in enumerate(plan.quarters):
        qs = [s.quarters[i] for s in plan.scenarios if i < len(s.quarters)]
        if not qs:
            continue
        pods = ", ".join(f"{k} {_span([sum(r.pods for r in q.pods_in_service if r.chip == k) for q in qs])}" for k in chips) or "0"
        running = [sum(r.chips_running for r in q.pods_in_service) for q in qs]
        med = statistics.median(running)
        unserved = max(q.unserved_rps for q in qs)
        lost = max(q.unserved_in_region_loss_rps for q in qs)
        ok = sum(1 for q in qs if q.plan_status != "violations")
        rows.append({
            "quarter": label,
            "peak rps": _span([sum(q.peak_rps.values()) for q in qs]),
            "pods in service": pods,
            "chips running": f"{min(running):,} / {med:,.0f} / {max(running):,}",
            "USD/h": _span([q.fleet_cost_per_hour_usd for q in qs]),
            "unserved rps (peak; loss)": f"{unserved:,.4g}" + (f"; {lost:,.4g}" if lost > 1e-6 else ""),
            "verified": f"{ok}/{len(qs)}",
        })
    return rows


#: the columns of ``fleetplan purchase --csv`` (one row per order: the order sheet's, the fixed and the contingent ones)
CSV_COLUMNS = ("status", "node", "branch_probability", "order_quarter", "delivery_quarter", "region", "chip", "pods", "chips", "commitment",
               "in_service_until", "price_usd", "discounted_usd", "needed_quarter", "needed_scenario", "needed_peak_rps", "needed_chips_running",
               "needed_chips_without", "needed_probability")


def orders_csv(plan: PurchasePlan) -> str:
    """The plan's orders as CSV text (:data:`CSV_COLUMNS`; RFC 4180 quoting, '\\n' line ends):
    status 'commit now' (the order sheet), 'fixed' (a re-plan's earlier orders) or 'contingent'
    (later, if demand tracks the node); USD undiscounted (the order's price: capital, or the
    committed term's total) and discounted to the first quarter; the need as :class:`OrderNeed`
    (empty when no fleet runs on the order)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    sheet_node = plan.replan["path"] if plan.replan else "root"
    rows = [("commit now", o) for o in plan.order_sheet] + [("fixed", o) for o in plan.fixed_orders] + [("contingent", o) for o in plan.contingency]
    for status, o in rows:
        n = o.needed
        w.writerow([status, getattr(o, "node", sheet_node), f"{node_probability(o, plan):.6g}", o.order_quarter, o.delivery_quarter, o.region, o.chip,
                    o.pods, o.chips, commitment(o, plan.quarters), o.in_service_until or "", f"{o.price_usd:.2f}", f"{o.cost_usd:.2f}",
                    *(["", "", "", "", "", ""] if n is None else
                      [n.quarter, n.scenario, f"{n.peak_rps:.6g}", n.chips_running, n.chips_without, f"{n.probability:.6g}"])])
    return buf.getvalue()


def neutral_words(r: RiskFigures) -> str | None:
    """The risk plan against the risk-neutral plan in one line (the CLI's headline and the
    report's), from ``r.neutral``; None when it was not compared (the plan's notes say why)."""
    n = r.neutral
    if n is None:
        return None
    a = f"{r.alpha:.10g}"
    if n.same_orders:
        return (f"the CVaR term changed no order: this is the risk-neutral plan, whose CVaR_{a} is already {n.cvar_usd:,.0f} USD "
                f"(expected cost {n.expected_cost_usd:,.0f} USD)")
    return (f"the CVaR term changed {n.orders_changed} order{'s' if n.orders_changed != 1 else ''} (tree node x region x chip) from the "
            f"risk-neutral plan's: expected cost {n.expected_cost_usd:,.0f} -> {r.expected_cost_usd:,.0f} USD "
            f"({r.expected_cost_usd - n.expected_cost_usd:+,.0f}), CVaR_{a} {n.cvar_usd:,.0f} -> {r.cvar_usd:,.0f} USD "
            f"({r.cvar_usd - n.cvar_usd:+,.0f})")
