"""The purchase-planning file (pydantic v2, frozen, ``extra="forbid"``): ``fleetplan purchase FILE``.

A planner's quarterly buying question: a base instance (model, chips, regions, tiers,
SLOs, priors, failover policy -- what holds in every quarter), a horizon of quarters
with a discount rate, the pods installed at the start and when they retire, what can be
ordered (price, lead time, delivery cap, minimum order), a demand scenario tree and the
policy for unserved demand. Field ranges live here; relations between fields and with
the base instance (names that must exist, probabilities that sum to 1, lead times
within the horizon, retirements after the start) are checked by
:func:`fleetplan.purchase.io.check_purchase`. The JSON Schema is ``fleetplan schema
purchase``; ``docs/purchase.md`` describes the semantics.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BeforeValidator, Field

from fleetplan.instance.schema import _NB, MIN_OUTPUT_TOKENS, MIN_USD, Floored, LengthBucket, Name, NonNegInt, _Frozen

__all__ = [
    "QUARTER_PATTERN", "quarter_index", "Quarters", "InstalledGroup", "CapitalPrice", "CommittedPrice", "SupplyQuarter", "Supply",
    "WorkloadShift", "TreeNode", "DemandTree", "GrowthPath", "GrowthPaths", "Fan", "HardUnserved", "PricedUnserved", "CVaRRisk", "Burst",
    "Policy", "PurchaseFile",
]

#: A quarter label: a year and a quarter, ``2027Q1``.
QUARTER_PATTERN = r"^[0-9]{4}Q[1-4]$"
QuarterLabel = Annotated[str, Field(pattern=QUARTER_PATTERN)]
Multiplier = Annotated[float, _NB, Field(ge=0.0, le=1e6)]
Probability = Annotated[float, _NB, Field(ge=0.0, le=1.0)]
Pods = Annotated[int, _NB, Field(ge=0, le=1_000_000)]
Usd = Annotated[float, _NB, Field(ge=0.0, le=1e13)]

#: Most nodes a scenario tree may have, checked when the file is read (before anything is
#: built). The deterministic equivalent holds a sizing block per node: on the bundled
#: 30-node gemini-ironwood-2027 tree, ~2.5 MB a node built (70 -> 162 MB over the build, as
#: measured when this limit was set, 2026-12-03, commit c99cc10; not kept in a benchmark) and
#: ~20 MB a node at the solve's peak (the peaks 573 and 679 MB over 30 nodes:
#: docs/benchmarks-history.md, *Purchasing > Earlier runs*), so 200 nodes is ~4 GB at the
#: peak; the bundled tree is 30 nodes, the
#: benchmark trees at most 40. A 3-path tree branching in 7 of 8 quarters is 3,280 nodes
#: (2,187 scenarios): ~65 GB, and it was seen growing at 20 MB/s to 6.3 GB in 300 s
#: without printing anything. (It was 2,000, and for explicit trees only.)
MAX_TREE_NODES = 200
#: Per-node memory of the deterministic equivalent at the solve's peak (MB), for the message.
TREE_NODE_PEAK_MB = 20


def quarter_index(label: str) -> int:
    """Quarters since year 0 of a label ``YYYYQn`` (consecutive quarters differ by 1)."""
    return int(label[:4]) * 4 + int(label[5]) - 1


class Quarters(_Frozen):
    """The planning horizon: consecutive quarters and the discount rate."""

    labels: list[QuarterLabel] = Field(min_length=1, max_length=40, description="Consecutive quarter labels, YYYYQn (e.g. 2027Q1 ... 2028Q4).")
    discount_rate_per_year: Annotated[float, _NB, Field(ge=0.0, le=1.0)] = Field(
        0.0, description="Annual discount rate (fraction per year); a cost in quarter i (0 = the first) is weighted (1 + rate)^(-i/4).")


class InstalledGroup(_Frozen):
    """Pods of one chip type in one region in service at the start of the horizon."""

    region: Name = Field(description="Region of the base instance.")
    chip: Name = Field(description="Chip type of the base instance.")
    pods: Pods = Field(description="Pods in service at the start of the first quarter (count).")
    retires: QuarterLabel | None = Field(
        None, description="The quarter these pods leave service (end of lease or of life; not in service in it or after), YYYYQn; null: they serve the whole horizon.")


class CapitalPrice(_Frozen):
    """A pod bought outright: its price is paid in the quarter it is ordered."""

    kind: Literal["capital"]
    usd_per_pod: Usd = Field(description="Capital price of one pod, paid in the order quarter (USD per pod).")


class CommittedPrice(_Frozen):
    """A committed-use contract: a rate per chip-hour for a term, from delivery.

    Converted to USD per pod as rate x chips per pod x hours per quarter (2,191.5 h) x the
    discount factors of the term's quarters (paid quarterly from the delivery quarter, also
    past the horizon: the commitment is owed); the pods leave service when the term ends.
    """

    kind: Literal["committed"]
    usd_per_chip_hour: Usd = Field(description="Committed rate (USD per chip-hour), paid for every hour of the term.")
    term_quarters: Annotated[int, _NB, Field(ge=1, le=80)] = Field(description="Length of the commitment from delivery (quarters); the pods serve exactly this long.")


Price = Annotated[Union[CapitalPrice, CommittedPrice], Field(discriminator="kind")]


class SupplyQuarter(_Frozen):
    """Overrides of a supply entry for one quarter (each null field keeps the entry's value).

    ``orderable``, ``price``, ``lead_time_quarters`` and ``min_order_pods`` apply to orders
    placed in that quarter; ``max_pods_delivered`` to deliveries in that quarter.
    """

    orderable: bool | None = Field(None, description="Whether orders can be placed in this quarter.")
    price: Price | None = Field(None, description="Price of a pod ordered in this quarter.")
    lead_time_quarters: Annotated[int, _NB, Field(ge=0, le=40)] | None = Field(None, description="Lead time of an order placed in this quarter (quarters).")
    min_order_pods: Pods | None = Field(None, description="Smallest non-zero order in this quarter (pods).")
    max_pods_delivered: Pods | None = Field(None, description="Most pods delivered in this quarter (pods, summed over the entry's regions).")


class Supply(_Frozen):
    """What can be ordered of one chip type (in one region, or in every region)."""

    chip: Name = Field(description="Chip type of the base instance.")
    region: Name | None = Field(None, description="Region of the base instance; null: every region of the base instance.")
    price: Price = Field(description="Price of a pod (capital USD per pod, or committed USD per chip-hour over a term).")
    lead_time_quarters: Annotated[int, _NB, Field(ge=0, le=40)] = Field(
        description="Quarters from order to service: ordered in quarter q, in service from q + lead time (quarters).")
    max_pods_delivered_per_quarter: Pods = Field(description="Most pods delivered in one quarter, summed over the entry's regions (pods).")
    min_order_pods: Pods = Field(0, description="Smallest non-zero order per region (pods): an order is 0 or at least this many.")
    orderable: list[QuarterLabel] | None = Field(
        None, description="Quarters in which orders can be placed (YYYYQn); null: every quarter whose delivery falls within the horizon.")
    by_quarter: dict[QuarterLabel, SupplyQuarter] = Field(default_factory=dict, description="Per-quarter overrides, by quarter label.")


def _check_demand(v):
    """A demand multiplier (>= 0) or a mapping region -> multiplier, refused with one clear message."""
    vals = v.values() if isinstance(v, dict) else [v]
    for x in vals:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise ValueError("a demand is a number (multiplier of the base peak_rps, >= 0) or a mapping region -> number")
        if not (x >= 0.0) or x > 1e6:
            raise ValueError("a demand multiplier must be between 0 and 1e6 (fraction of the base peak_rps)")
    return v


RegionDemand = Annotated[Union[Multiplier, dict[Name, Multiplier]], BeforeValidator(_check_demand)]


class WorkloadShift(_Frozen):
    """A shift of the base instance's workload from a node on (a new product surface moves
    the input mix, the output length and the prefix hit rate together). Each field given
    replaces the base instance's ``workload`` field of the same name in the node's sizing
    block and in every descendant's, until a descendant gives its own; a null field keeps
    the value above. The node's instance is checked as a whole (the mix's shares sum to 1,
    every length fits a tier), the problem named at the node's ``workload`` field."""

    input_mix: list[LengthBucket] | None = Field(None, min_length=1, max_length=64, description="Input-length mix from this node on; shares sum to 1 (as workload.input_mix).")
    output_tokens: Floored(MIN_OUTPUT_TOKENS, 1e7) | None = Field(None, description="Mean output tokens per request from this node on (tokens).")
    prefix_hit_rate: Annotated[float, _NB, Field(ge=0.0, lt=1.0)] | None = Field(
        None, description="Prefix-cache hit rate from this node on (fraction of prompt tokens served from cache).")


class TreeNode(_Frozen):
    """A node of the demand tree: one quarter's demand after the history above it."""

    name: Name | None = Field(None, description="Branch name (scenario names join them with '/'); default b1, b2 ... by position.")
    quarter: QuarterLabel | None = Field(None, description="The node's quarter (optional; when given it must be the quarter at the node's depth).")
    probability: Probability | None = Field(
        None, description="Probability of this branch given its parent (fraction); siblings sum to 1; may be omitted for an only child or the root.")
    demand: RegionDemand = Field(description="Demand as a multiplier of the base instance's peak_rps: one number for every region, or one per region (fraction, >= 0).")
    workload: WorkloadShift | None = Field(None, description="A shift of the workload from this quarter on (inherited by the branches below unless they shift it again); null: as above.")
    children: list["TreeNode"] = Field(default_factory=list, max_length=100, description="The next quarter's branches (empty at the last quarter).")


class DemandTree(_Frozen):
    """An explicit scenario tree (the root is the first quarter)."""

    kind: Literal["tree"]
    root: TreeNode = Field(description="The first quarter's node.")


class GrowthPath(_Frozen):
    name: Name = Field(description="Path name (the scenario's name).")
    probability: Probability = Field(description="Probability of the path (fraction); the paths sum to 1.")
    growth_per_quarter: Annotated[float, _NB, Field(ge=-0.9, le=10.0)] = Field(description="Demand growth per quarter on this path (fraction: 0.1 = +10% a quarter).")
    workload: WorkloadShift | None = Field(None, description="A shift of the workload on this path, from the quarter it branches on (the last branching's path wins); null: as above.")


class GrowthPaths(_Frozen):
    """Growth paths with probabilities. At each branching quarter every node splits into
    the paths (each with its probability, given the parent); from there until the next
    branching its demand grows at that path's rate per quarter. Before the first branching
    demand grows at the probability-weighted mean rate. With one branching in the second
    quarter (the default), path p's demand in quarter i is start x (1 + g_p)^i."""

    kind: Literal["growth_paths"]
    start: RegionDemand = Field(1.0, description="The first quarter's demand, a multiplier of the base peak_rps (one number, or per region).")
    paths: list[GrowthPath] = Field(min_length=1, max_length=100, description="The paths, with their probabilities and growth rates.")
    branch_at: list[QuarterLabel] | None = Field(
        None, max_length=10, description="Quarters in which the paths branch (YYYYQn, after the first quarter, ascending); null: the second quarter only. "
        "Two branchings of three paths give nine scenarios, named first/second.")


class Fan(_Frozen):
    """A fan of equally likely sampled paths branching after the first quarter.

    Path j's demand: m_0 = start, m_i = m_{i-1} (1 + g) exp(sigma z_ij - sigma^2 / 2), z
    standard normal from numpy's default_rng(seed) (mean growth g, log-volatility sigma per
    quarter; every region of a path moves together).
    """

    kind: Literal["fan"]
    start: RegionDemand = Field(1.0, description="The first quarter's demand, a multiplier of the base peak_rps (one number, or per region).")
    paths: Annotated[int, _NB, Field(ge=1, le=200)] = Field(description="Number of sampled paths (each of probability 1/paths).")
    growth_per_quarter: Annotated[float, _NB, Field(ge=-0.9, le=10.0)] = Field(description="Mean demand growth per quarter (fraction).")
    volatility_per_quarter: Annotated[float, _NB, Field(ge=0.0, le=2.0)] = Field(description="Standard deviation of the log growth per quarter (fraction).")
    seed: NonNegInt = Field(0, description="Random seed of the sample (same seed, same paths).")


Demand = Annotated[Union[DemandTree, GrowthPaths, Fan], Field(discriminator="kind")]


class HardUnserved(_Frozen):
    """Every request must be served within the SLOs in every scenario and quarter."""

    kind: Literal["hard"]


class PricedUnserved(_Frozen):
    """Unserved demand is allowed at a price per 1M tokens it would have served (prompt + output)."""

    kind: Literal["priced"]
    usd_per_1m_tokens: Floored(MIN_USD, 1e6) = Field(description="Price of demand not served (USD per 1M tokens, prompt and output).")


class CVaRRisk(_Frozen):
    """A mean-CVaR objective over the scenarios' discounted costs C_s:
    (1 - weight) E[C] + weight CVaR_alpha(C), CVaR_alpha the mean of the worst (1 - alpha)
    tail of the scenario costs, linearised as min over eta of eta + E[(C - eta)+] / (1 - alpha)
    (Rockafellar and Uryasev, "Optimization of conditional value-at-risk", J. Risk 2(3), 2000).
    The convex combination is the mean-risk form of Shapiro, Dentcheva and Ruszczynski,
    Lectures on Stochastic Programming (2nd ed., 2014), sec. 6.2: weight 0 is the
    expectation, weight 1 the CVaR alone. The CVaR is of the total cost of a scenario
    (one measure over the leaves, not nested quarter by quarter)."""

    kind: Literal["cvar"]
    alpha: Annotated[float, _NB, Field(ge=0.0, lt=1.0)] = Field(description="CVaR level (fraction): the worst 1 - alpha of the probability mass is averaged; 0.9 = the worst 10%.")
    weight: Annotated[float, _NB, Field(ge=0.0, le=1.0)] = Field(description="Weight of the CVaR in (1 - weight) E + weight CVaR (fraction).")


class Burst(_Frozen):
    """On-demand capacity: pods rented for one quarter at a premium, on top of what is in service.

    A burst pod serves the quarter it is rented in (the sizing block of that quarter may
    use it like a pod in service) and is paid for every hour of the quarter: each of its
    chips costs the base instance's price per chip-hour when it runs (as every chip does)
    plus ``premium_usd_per_chip_hour`` whether it runs or not.
    """

    chip: Name = Field(description="Chip type of the base instance.")
    region: Name | None = Field(None, description="Region of the base instance; null: every region (the cap is shared).")
    premium_usd_per_chip_hour: Usd = Field(description="On-demand premium over the base chip-hour price (USD per chip-hour), paid for all the quarter's hours.")
    max_pods_per_quarter: Pods = Field(description="Most burst pods rented in one quarter, summed over the entry's regions (pods).")


class Policy(_Frozen):
    unserved: Annotated[Union[HardUnserved, PricedUnserved], Field(discriminator="kind")] = Field(
        default_factory=lambda: HardUnserved(kind="hard"), description="Unserved demand: forbidden (hard, the default) or priced.")
    risk: Union[Literal["expectation"], CVaRRisk] = Field(
        "expectation", description="Risk measure of the objective: the expected discounted cost (expectation), or {kind: cvar, alpha, weight}.")
    burst: list[Burst] = Field(default_factory=list, max_length=1000, description="On-demand capacity per chip (and region), rented per quarter.")
    mixed_shapes: bool = Field(
        True, description="Let each quarter's decode and replica pools mix slice shapes and chip types (the base instance's "
                          "serving.mixed_shapes, replaced): an installed older chip and a newer one serve a tier side by side, "
                          "each at its own operating point (docs/purchase.md, 'Mixed pools'). false: one shape per pool, as the "
                          "snapshot's default.")


class PurchaseFile(_Frozen):
    """A purchase-planning problem (``fleetplan purchase``)."""

    name: Name = Field("purchase", description="Name of the plan.")
    description: str = Field("", max_length=4000, description="Free text: where the numbers come from.")
    base: str = Field(min_length=1, max_length=4096, description="Base instance: a YAML path (relative to this file) or a bundled instance name.")
    quarters: Quarters = Field(description="The horizon and the discount rate.")
    installed: list[InstalledGroup] = Field(default_factory=list, max_length=1000, description="Pods in service at the start; replaces the base instance's pods.")
    supply: list[Supply] = Field(default_factory=list, max_length=1000, description="What can be ordered; the base instance's available_new is not used.")
    demand: Demand = Field(description="The demand scenario tree.")
    policy: Policy = Field(default_factory=Policy, description="Unserved demand and risk.")
