"""The purchase plan document (``fleetplan purchase -o purchase.json``; ``fleetplan schema
purchase-plan``). Byte-identical for the same input and options: six significant digits,
sorted keys, no wall-clock time inside."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: the plan document's version: 2 added ``integrity`` (a previous plan given to
#: ``--fix-orders`` must be the one ``fleetplan purchase -o`` wrote)
PURCHASE_SCHEMA_VERSION = 2

#: the fields whose SHA-256 a plan records in ``integrity``: what it was solved for, its
#: decisions (the orders per tree node) and its fleets per scenario and quarter
INTEGRITY_FIELDS = ("name", "purchase_hash", "base_instance_hash", "quarters", "order_sheet", "contingency", "fixed_orders", "replan", "scenarios")

__all__ = ["PURCHASE_SCHEMA_VERSION", "INTEGRITY_FIELDS", "NOT_REPRODUCIBLE", "clock_note", "integrity_record", "edited_fields", "plan_digest", "BurstUse", "NeutralPlanFigures", "RiskFigures", "DecompositionFigures", "PodFloorFigures", "Order", "OrderNeed", "ContingentOrder", "PodsInService", "QuarterResult", "QuarterWarmPool", "ScenarioPlan", "SolveFigure", "ValueOfInformation", "PurchasePlan"]


class _F(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OrderNeed(_F):
    """What needs an order: the first quarter whose verified fleet, in a scenario through the
    order's node, runs on its pods -- the chips of its chip running in its region at that
    quarter's peak (slices and warm pool, as the independent verifier checked them) exceed what
    the pods in service hold without the order (fleetplan/purchase/sheet.py)."""

    quarter: str = Field(description="The first quarter a fleet runs on the order's pods.")
    scenario: str = Field(description="The most probable scenario whose fleet needs it then.")
    peak_rps: float = Field(description="That scenario's peak demand in the order's region then (requests/s).")
    chips_running: int = Field(description="Chips of the order's chip running in its region then (count).")
    chips_without: int = Field(description="Chips the pods in service (and burst pods) would hold there then without this order (count; below chips_running).")
    probability: float = Field(description="Probability of the scenarios through the order's node whose fleet runs on its pods in some quarter (fraction of the whole tree).")


class Order(_F):
    """An order placed in ``order_quarter``: ``pods`` of ``chip`` in ``region``, in service from ``delivery_quarter``."""

    region: str
    chip: str
    order_quarter: str
    delivery_quarter: str
    in_service_until: str | None = Field(description="Last quarter in service of a committed term (null: a capital buy, kept).")
    pods: int
    chips: int
    price_usd: float = Field(description="Undiscounted price of the order (USD): capital, or the committed term's total.")
    cost_usd: float = Field(description="Discounted cost of the order (USD, to the first quarter).")
    needed: OrderNeed | None = Field(None, description="What needs it (null: no verified fleet runs on its pods in the horizon -- slack within the MIP "
                                     "gap, a minimum order -- or not derived: the mean forecast's orders).")


class ContingentOrder(Order):
    """A later order, placed only if demand has followed the branch ``node`` names."""

    node: str = Field(description="The tree node (branch names from the root, '/'-joined): the demand seen when it is placed.")
    scenarios: list[str] = Field(description="The scenarios that pass through that node (all place the same order: non-anticipativity).")


class QuarterWarmPool(_F):
    """The warm pool of one region and slice shape in a quarter's fleet."""

    region: str
    slice: str = Field(description="Slice shape label, chip x chips.")
    slices: int
    chips: int
    cost_per_hour_usd: float = Field(description="Its chip-hours at the base prices (USD per hour).")


class PodsInService(_F):
    region: str
    chip: str
    pods: int
    chips: int
    chips_running: int = Field(description="Chips in slices and the warm pool at this quarter's peak, on the pods in service and any burst pods of the quarter (count; can exceed chips when burst pods run).")


class QuarterPool(_F):
    """One pool of a quarter's fleet: a (region, tier, role) runs one of these per slice
    shape (several when it mixes shapes and chip types: policy.mixed_shapes)."""

    region: str
    tier: str
    role: Literal["prefill", "decode", "replica"]
    slice: str = Field(description="Slice shape label, chip x chips.")
    slices: int
    chips: int
    cost_per_hour_usd: float = Field(description="Its chip-hours at the base prices (USD per hour).")


class BurstUse(_F):
    """On-demand pods rented for the quarter (policy.burst)."""

    region: str
    chip: str
    pods: int
    chips: int


class QuarterResult(_F):
    """One scenario's quarter: the fleet in service, what runs, its cost, the unserved
    demand and the independent verifier's verdict on it."""

    quarter: str
    node: str
    demand_multiplier: dict[str, float] = Field(description="Demand per region as a multiplier of the base peak_rps.")
    peak_rps: dict[str, float] = Field(description="The quarter's peak demand per region (requests/s).")
    pods_in_service: list[PodsInService]
    pools: list[QuarterPool] = Field(default_factory=list, description="Chips per pool at this quarter's peak, as the verified plan of the quarter runs them (the warm pool is in warm_pool).")
    warm_pool: list[QuarterWarmPool] = Field(default_factory=list, description="Warm (weight-loaded, traffic-less) slices kept per region for a region loss: in chips_running and fleet_cost_per_hour_usd, not in pools.")
    utilisation: float | None = Field(description="Chips running at the peak over chips in service plus the burst chips of the quarter (fraction; null without chips).")
    fleet_cost_per_hour_usd: float = Field(description="Chip-hours of what runs at the base prices: pools and warm pool (USD per hour).")
    shed_cost_per_hour_usd: float = Field(0.0, description="The event-weighted price of the sheddable tokens shed in region losses, as the sizing objective charges it: "
                                          "failover.event_weight / losses x batch_shed_cost_per_1m_tokens_usd x tokens/h shed (USD per hour).")
    run_cost_usd: float = Field(description="(fleet_cost_per_hour_usd + shed_cost_per_hour_usd) x hours_per_quarter, discounted to the first quarter (USD).")
    order_cost_usd: float = Field(description="Orders placed in this quarter, discounted (USD).")
    unserved_rps: float = Field(description="Requests/s not served end to end at the normal peak (every region up; requests/s).")
    unserved_in_region_loss_rps: float = Field(0.0, description="The most requests/s not served end to end in one region-loss scenario of the quarter (N-1; requests/s). The loss scenarios exclude one another: not summed. Priced at failover.event_weight / (loss scenarios) of the normal peak's weight, as the sizing objective weighs them.")
    unserved_cost_usd: float = Field(description="Priced unserved demand for the quarter, discounted (USD).")
    burst: list[BurstUse] = Field(default_factory=list, description="On-demand pods rented this quarter, on top of the pods in service.")
    burst_cost_usd: float = Field(0.0, description="Their premium for the quarter's hours, discounted (USD); their chip-hours are in run_cost_usd.")
    plan_status: Literal["verified", "shortfall", "violations"] = Field(description="The verifier's verdict on this quarter's fleet at this quarter's demand.")
    violations: list[str] = Field(description="What the verifier found (empty when verified).")


class ScenarioPlan(_F):
    name: str
    probability: float
    cost_usd: float = Field(description="Discounted cost on this scenario (orders, chip-hours, unserved) (USD).")
    wait_and_see_usd: float | None = Field(description="The best cost with this scenario known in advance (USD; null when not computed).")
    regret_usd: float | None = Field(description="cost_usd - wait_and_see_usd (USD).")
    quarters: list[QuarterResult]


class PodFloorFigures(_F):
    """What the pod-floor decomposition (docs/purchase.md, fleetplan/purchase/floors.py) did
    for a tree: its plan and proven lower bound, and the work."""

    complete: bool = Field(description="It found a plan of the tree (every node's fleet at the master's pods).")
    upper_usd: float | None = Field(description="Its plan's expected cost (USD).")
    lower_usd: float | None = Field(description="Its proven lower bound of the tree's optimum (USD).")
    gap: float | None = Field(description="(upper - lower) / upper (fraction).")
    proven: bool = Field(description="Every cut is valid (False after a no-good cut on a node whose fleet solve ended without a fleet or a proof: lower_usd is the last bound before it).")
    node_solves: int = Field(description="Per-node snapshot solves: floors, run floors and fleets (count).")
    master_solves: int
    nogood_cuts: int
    cost_cuts: int
    floors: int = Field(description="Pod floors kept on the tree as valid inequalities (count).")
    stopped: str | None = Field(description="What stopped it short of a plan within the gap, in words (null when it reached the gap).")


class SolveFigure(_F):
    """One solve: its objective (the incumbent), the best bound and the relative MIP gap."""

    objective_usd: float | None
    bound_usd: float | None
    gap: float | None
    termination: str = Field(description="optimal (the bound meets the incumbent), gap_reached (stopped at --mip-gap), time_limit, infeasible, ...; with --method ph, above --mip-gap: ph_converged (PH's orders agree across the scenarios within its convergence threshold; the gap is its bound's) or ph_stopped (by its iterations or the clock); ph_no_bound (no valid bound).")
    solves: int = Field(description="HiGHS runs on the whole tree (prefill chords are refined between them); 0 when the pod-floor decomposition's plan was within the gap (pod_floors; its wall time is in the plan's notes).")
    pod_floors: PodFloorFigures | None = Field(None, description="The pod-floor decomposition, when it ran for this tree. When the plan is the mean-forecast orders' re-optimised plan (EEV, adopted because it was cheaper: the notes say so), this and solves are the recourse solve's, which proved bound_usd; its upper_usd is then the recourse solve's plan, above objective_usd.")
    clock_limited: str | None = Field(None, description="What the wall-clock limit (--time-limit) cut on the way to this figure, in words; null when every solve ended by its own MIP gap, proof or work limit (branch-and-bound nodes), so the same input and options give the same figure, byte for byte, on any machine and under any load. When set, a faster or less loaded machine, or a longer --time-limit, can give another plan (the plan's notes say so).")


class ValueOfInformation(_F):
    """The value of planning under uncertainty, computed (Birge and Louveaux, Introduction
    to Stochastic Programming, ch. 4): RP the recourse problem's expected cost; EEV the
    expected cost when the mean-forecast plan's first-quarter orders are fixed and the
    later orders adapt; VSS = EEV - RP; WS = sum_s p_s WS_s (each scenario solved with
    perfect foresight); EVPI = RP - WS. The intervals use the bounds: the true values lie
    within them whatever the MIP gaps."""

    rp: SolveFigure
    mean_forecast: SolveFigure
    eev: SolveFigure | None = Field(description="Null when the mean-forecast orders leave the tree infeasible (hard policy): VSS is unbounded.")
    eev_feasible: bool
    vss_usd: float | None
    vss_interval_usd: tuple[float, float] | None
    wait_and_see: dict[str, SolveFigure]
    ws_usd: float | None
    evpi_usd: float | None
    evpi_interval_usd: tuple[float, float] | None
    mean_forecast_root_orders: list[Order]


class NeutralPlanFigures(_F):
    """The risk-neutral plan of the same tree (the expected cost alone as the objective), beside
    a CVaR plan: its figures recomputed from its scenarios' costs (fleetplan/purchase/risk.py)."""

    expected_cost_usd: float = Field(description="Its expected discounted cost (USD).")
    cvar_usd: float = Field(description="Its CVaR_alpha at the risk plan's alpha: the CVaR it has without a risk term (USD).")
    objective_usd: float = Field(description="Its value of the risk plan's objective, (1 - weight) E + weight CVaR_alpha (USD).")
    orders_changed: int = Field(description="Orders (tree node x region x chip) where the risk plan orders another number of pods (count).")
    same_orders: bool = Field(description="The risk term changed no order: the risk plan's orders are this plan's.")
    solve: SolveFigure = Field(description="Its solve: objective (its expected cost), bound, gap, termination.")


class RiskFigures(_F):
    """The plan under ``policy.risk`` cvar: the objective it minimised, (1 - weight) E + weight
    CVaR_alpha, and the plan's expectation and CVaR, both computed from the scenarios'
    costs (the CVaR by Rockafellar and Uryasev's minimum over eta, not read from the model)."""

    measure: Literal["cvar"]
    alpha: float
    weight: float
    objective_usd: float
    expected_cost_usd: float
    cvar_usd: float
    neutral: NeutralPlanFigures | None = Field(None, description="The risk-neutral plan of the same tree, for comparison: its expectation and "
                                               "CVaR and whether the risk term changed any order (null when it was not found in its time).")


class DecompositionFigures(_F):
    """Progressive hedging by mpi-sppy (--method ph): the incumbent (the consensus orders
    fixed in the whole tree and solved), mpi-sppy's best outer bound and the gap."""

    method: Literal["ph"]
    incumbent_from: str = Field(description="Which PH point gave the orders: the rounded consensus xbar, or the orders its scenarios agree on with the rest re-optimised.")
    iterations: int | None
    convergence: float | None = Field(description="mpi-sppy's convergence metric at the end (mean |x - xbar| over the nonants).")
    outer_bound_usd: float | None = Field(description="Best lower bound: PH's trivial (wait-and-see) bound or the Lagrangian spoke's (USD).")
    mpisppy_inner_bound_usd: float | None = Field(description="The xhat spoke's best inner bound, when it ran (USD, on the unrefined chords).")
    incumbent_usd: float | None
    gap: float | None = Field(description="(incumbent - outer bound) / incumbent (fraction).")
    cylinders: list[str]
    processes: int
    ph_seconds: float
    max_iterations: int
    rho_fraction: float
    convthresh: float


#: how a plan's note begins when the wall clock cut one of its solves (SolveFigure.clock_limited)
NOT_REPRODUCIBLE = "NOT REPRODUCIBLE"


def clock_note(solve: SolveFigure, value: ValueOfInformation | None) -> str | None:
    """The plan's note when the time limit cut a solve of its tree (``solve``) or of its value
    figures (``value``: the mean forecast, EEV, each wait-and-see path): what it cut, and that
    another machine, load or --time-limit can then give another plan; None when it cut none."""
    cut = [solve.clock_limited] if solve.clock_limited else []
    if value is not None:
        figs = [("the mean forecast", value.mean_forecast), ("EEV", value.eev)] + [(f"wait-and-see {s}", f) for s, f in sorted(value.wait_and_see.items())]
        cut += [f"{what}: {f.clock_limited}" for what, f in figs if f is not None and f.clock_limited]
    if not cut:
        return None
    return (f"{NOT_REPRODUCIBLE}: the time limit cut " + "; ".join(cut) + " -- those solves would have gone on to their own MIP gap, proof "
            "or work limit, so another machine, another load or another --time-limit can give another plan for the same input; "
            "with the time to finish them the plan is the same, byte for byte, everywhere (raise --time-limit)")


class PurchasePlan(_F):
    schema_version: Literal[2] = PURCHASE_SCHEMA_VERSION
    fleetplan_version: str
    name: str
    purchase_hash: str = Field(description="SHA-256 of the purchase file's canonical content.")
    base_instance: str
    base_instance_hash: str
    quarters: list[str]
    hours_per_quarter: float
    discount_rate_per_year: float
    unserved_policy: str
    status: Literal["verified", "violations"] = Field(description="verified: every (scenario, quarter) fleet passed the independent verifier.")
    expected_cost_usd: float
    solve: SolveFigure | None = Field(None, description="The recourse problem's solve: incumbent, bound, gap, termination (as value.rp, also with --no-value).")
    order_sheet: list[Order] = Field(description="What to commit now: the root node's orders (a re-plan's: the realised node's).")
    nothing_to_order_why: str | None = Field(None, description="With an empty order sheet: why nothing is ordered now, in words (what carries the "
                                             "fleets until when, and when the first later order is needed); null otherwise.")
    contingency: list[ContingentOrder] = Field(description="Later orders, per tree node.")
    fixed_orders: list[ContingentOrder] = Field(default_factory=list, description="A re-plan's earlier orders, fixed from the previous plan (empty otherwise).")
    replan: dict[str, str] | None = Field(None, description="A re-plan's inputs: now (the current quarter), path (the realised node), previous_purchase_hash; null otherwise.")
    scenarios: list[ScenarioPlan]
    value: ValueOfInformation | None
    risk: RiskFigures | None = Field(None, description="With policy.risk cvar: the objective, the expectation and the CVaR of the plan.")
    decomposition: DecompositionFigures | None = Field(None, description="With --method ph: the decomposition's bound and gap.")
    model_size: dict[str, int]
    options: dict[str, float | int | str | None]
    notes: list[str]
    integrity: dict[str, str] = Field(default_factory=dict, description="SHA-256 (hex) of each of the fields "
                                      + ", ".join(INTEGRITY_FIELDS) + " as written (canonical JSON: sorted keys, no spaces): "
                                      "--fix-orders refuses a plan whose content no longer matches it (an order removed or moved "
                                      "after it was written), naming the field.")

    def sealed(self) -> "PurchasePlan":
        """This plan with its ``integrity`` record computed from its content."""
        return self.model_copy(update={"integrity": integrity_record(self.model_dump(mode="json"))})


def _sha256(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()).hexdigest()


def integrity_record(doc: dict) -> dict[str, str]:
    """field -> SHA-256 (hex) of its canonical JSON, for each of :data:`INTEGRITY_FIELDS` of the
    plan document ``doc`` (as ``model_dump(mode="json")`` gives it or ``json.loads`` reads it back:
    the same values, so the same digests). A field missing from ``doc`` hashes as null."""
    return {f: _sha256(doc.get(f)) for f in INTEGRITY_FIELDS}


def edited_fields(doc: dict) -> list[str]:
    """The fields of :data:`INTEGRITY_FIELDS` whose content in the plan document ``doc`` no
    longer matches its ``integrity`` record (all of them when it has none)."""
    rec = doc.get("integrity") if isinstance(doc.get("integrity"), dict) else {}
    now = integrity_record(doc)
    return [f for f in INTEGRITY_FIELDS if rec.get(f) != now[f]]


def plan_digest(doc: dict) -> str:
    """SHA-256 (hex) of a plan document's integrity record: one digest naming the plan's content
    (a re-plan records its previous plan's, ``replan.previous_plan_hash``)."""
    return _sha256(integrity_record(doc))
