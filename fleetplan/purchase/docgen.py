"""Assemble ``docs/purchase.md`` from the purchase model's docstrings and the file schema.

``python -m fleetplan.purchase.docgen > docs/purchase.md``; a test checks the file is
current, so the formulation on paper is the one in the code (as docs/formulation.md).
"""

from __future__ import annotations

import inspect

from fleetplan.instance.docgen import class_tables
from fleetplan.models.sizing.docgen import _markdown
from fleetplan.purchase import model, ph, schema as S
from fleetplan.purchase.result import ValueOfInformation

INTRO = r"""# Quarterly purchasing: `fleetplan purchase`

`fleetplan solve` answers "what fleet serves this day's demand". A planner buying
capacity once a quarter asks something else: **what do we commit to now**, when pods
ordered today arrive quarters from now, demand may grow slowly or fast, the installed
fleet retires and nothing bought can be returned. `fleetplan purchase FILE` answers it
over a demand scenario tree with a multi-stage stochastic mixed-integer program, solved
as one deterministic equivalent by HiGHS. Every quarter of every scenario contains the
sizing model itself -- the same constraint families as `fleetplan solve`, built by the
same code (SLOs through the candidate tables, N-1 in the Pareto-maximal hours, warm
pool, shed, clamp) -- reading its pods from the inventory.

```
fleetplan purchase FILE [-o purchase.json] [--json] [--time-limit S] [--mip-gap G] [--no-value]
                   [--method ef|ph] [--risk expectation|cvar:ALPHA:WEIGHT]
mpiexec -n 2 fleetplan purchase FILE --method ph ...      # PH hub + Lagrangian bound spoke (3: + xhat spoke)
```

* `FILE`: the purchase-planning YAML (reference below; `fleetplan schema purchase` prints
  its JSON Schema). `base:` names the instance (a path relative to the file, or a bundled
  name) that holds in every quarter: model, chips, regions, tiers, SLOs, priors, failover
  policy and the chip-hour prices of what runs. The instance's `pods` are replaced by the
  file's `installed` and `supply`.
* Output: the **order sheet** (what to commit now: the root node's orders by region x chip,
  delivery quarter, price and discounted cost), the **contingency table** (later orders
  per tree node: "if demand tracks `high` by 2027Q2, order ..."), per scenario x quarter
  the pods in service, chips running at the peak, the fleet's USD/h, unserved demand and
  the **independent verifier's verdict** on that quarter's fleet at that quarter's demand,
  and the **value of planning under uncertainty** (RP, EEV, VSS, WS, EVPI, per-scenario
  regret, each with the MIP gap and an interval from the bounds).
* `-o` is written atomically, only when every quarter's fleet verifies, byte-identical for
  the same input and options (`fleetplan schema purchase-plan`). `--json` prints it.
* `--time-limit` is wall-clock seconds for all the solves together; `--mip-gap` the
  relative gap of each; `--no-value` skips the 2 + (scenarios) extra solves of EEV and WS.
* Exit codes: 0 a verified plan; 2 bad input (every problem named by its field path:
  probabilities that do not sum to 1 at a branching, a lead time or an explicitly
  orderable quarter past the horizon, an unknown chip or region, a retirement at or before
  the start, a negative demand, branches that disagree on the quarters, a base instance
  that does not load); 3 no plan (with `policy.unserved: {kind: hard}`, some scenario
  cannot be served whatever is ordered: the message names each such scenario's first
  quarter and region with the requests/s left unserved by the least-unserved orders, and
  the orders that would serve the whole tree with the delivery caps lifted, or says that
  the lead times are the limit; or no incumbent in the time limit) or a quarter's fleet the
  verifier refused.

## A worked example

Three quarters, one region at 20 requests/s of the tiny test model, two pods of two
chips installed; a pod costs 10,000 USD ordered in 2027Q1 and 30,000 USD in 2027Q2
(lead time one quarter); demand stays flat (p = 0.6) or grows 50% a quarter (p = 0.4):

```yaml
base: base.yaml
quarters: {labels: [2027Q1, 2027Q2, 2027Q3], discount_rate_per_year: 0.0}
installed:
  - {region: a, chip: acc, pods: 2}
supply:
  - chip: acc
    price: {kind: capital, usd_per_pod: 10000}
    lead_time_quarters: 1
    max_pods_delivered_per_quarter: 4
    by_quarter: {2027Q2: {price: {kind: capital, usd_per_pod: 30000}}}
demand:
  kind: growth_paths
  paths:
    - {name: low, probability: 0.6, growth_per_quarter: 0.0}
    - {name: high, probability: 0.4, growth_per_quarter: 0.5}
```

The high path reaches 45 requests/s in 2027Q3, which needs a third pod. The stochastic
plan orders it now (10,000 USD). The mean forecast (30 requests/s in 2027Q3, served by the
two pods) orders nothing now, so on the high path the pod is bought in 2027Q2 at 30,000:
**VSS = 0.4 x 30,000 - 10,000 = 2,000 USD**. Knowing the future would save the idle pod of
the low path: **EVPI = 0.6 x 10,000 = 6,000 USD**, the low path's regret. Both figures
are computed, not asserted (`tests/purchase/test_purchase_model.py` checks them, and the
optimum against a brute-force enumeration of the orders with a snapshot solve per
quarter).

## The demand tree

`demand` takes three forms. `kind: tree` gives the nodes explicitly (the root is the
first quarter; each node's `children` are the next quarter's branches, each with its
probability given the parent). The one-liners: `kind: growth_paths` -- named paths with
probabilities and a growth rate per quarter, branching after the first quarter; and
`kind: fan` -- N equally likely paths sampled from a mean growth rate and a volatility
with a fixed seed. Demand is a multiplier of the base instance's `peak_rps`, one number
for every region or one per region. A branch of probability 0 is not planned for (it
weighs nothing in the expected cost). Scenario names join the branch names with `/`.

## Supply and prices

A supply entry offers one chip in one region (or in every region) with a price, a lead
time (ordered in quarter q, in service from q + L), a delivery cap per quarter (summed
over the entry's regions), a minimum order and the quarters it may be ordered in;
`by_quarter` overrides any of them for one quarter. Prices are either **capital** (USD
per pod, paid in the order quarter; the pod serves to the end of the horizon) or
**committed** (USD per chip-hour over a term of quarters from delivery, converted to USD
per pod as rate x chips per pod x 2,191.5 h x the discount factors of the term's quarters;
the pods leave service when the term ends). There is no salvage value: a price or a
commitment counts in full also past the horizon. The chips that run are also charged at
the base instance's chip-hour prices (the operating cost; set them to what running a pod
you own costs).

## The model

"""

RISK = r"""

## Risk, burst capacity and larger trees

**Risk.** `policy.risk: {kind: cvar, alpha: A, weight: W}` or `--risk cvar:A:W` minimises
(1 - W) E[C] + W CVaR_A[C] over the scenarios' total discounted costs C (the formula
under "The model"; W = 0 is the expectation, W = 1 the CVaR alone, the mean of the worst
1 - A of the probability mass). The plan then reports `risk`: the objective, the plan's
expected cost and its CVaR, both recomputed from the scenario costs; `expected_cost_usd`
stays the expectation. VSS and EVPI are then figures of the risk-weighted objective
(a wait-and-see path has one scenario: its risk-weighted cost is its cost). It is one
CVaR over the leaves, not a nested (time-consistent) one per quarter.

**Burst capacity.** `policy.burst` rents on-demand pods for one quarter, at most
`max_pods_per_quarter` per entry, at a premium per chip-hour for all the quarter's hours
on top of the chip-hours of what runs. The sizing block of the quarter uses them like
pods in service; each scenario x quarter reports `burst` (pods, chips) and
`burst_cost_usd`, and the verifier checks the fleet with them counted as installed.

**Larger trees: `--method ph`.** Needs the `stochastic` extra (`pip install
'fleetplan[stochastic]'`: mpi-sppy, mpi4py and the `mpich` wheel, whose `mpiexec` lands
in the environment's `bin/`). Without mpiexec it runs the PH hub in one process (bound:
the trivial, wait-and-see one); `mpiexec -n 2` adds mpi-sppy's Lagrangian bound spoke,
`-n 3` also its xhat-shuffle inner-bound spoke. The mean forecast and the wait-and-see
paths are still solved as EFs (one path each); the EEV is a second PH run with the root
fixed. `decomposition` in the plan gives the iterations, the bound, the incumbent and
the gap. PH's scenario subproblems use the initial (conservative) prefill chords; the
chords are refined only in the final evaluation of the incumbent on the whole tree, so
the bound is of the unrefined model.

**Where the deterministic equivalent stops being practical** (docs/benchmarks.md, 2
shared cores): at the size of the nodes more than of the tree. On the tiny base (one
region, one chip) the EF of a 27-leaf, 40-node tree has 573 variables and solves in 22 s
wall (5 s CPU); on a mid-size base (three regions with N-1, two tiers, two chips: about
2,500 variables a node) 10 nodes, 24,651 variables take 584 s wall (168 s CPU); on the
Gemini-scale base 22 nodes, 25,374 variables find no incumbent in 900 s. Progressive
hedging on the 27-leaf tiny tree (`mpiexec -n 2`, Lagrangian spoke) returns a plan 0.14%
above the EF's optimum with a proven gap of 8.6%, in 5x the EF's time: on small nodes the
EF is the better method. PH pays when the EF's tree is too large but a scenario's path is
still solvable; on the mid base PH gave no result in 32 minutes (its path subproblems are
~10,000 variables each; mpi-sppy checks `--time-limit` only between iterations, so a run
can overshoot it by a subproblem solve); on the Gemini-scale base an 8-quarter path alone has no incumbent in
150 s, so PH cannot start there either (not shown past that point: the missing piece
is a first incumbent per path).

"""

VALUE = r"""

## The value of the stochastic solution

"""

LEFT = r"""
## Not modelled yet

Said plainly, so nobody reads the plan for more than it is:

* one slice shape per pool (the snapshot model's rule): a pool does not yet mix an
  installed older chip with a newer one;
* no shifts of the input mix, output length or prefix hit rate per node (demand is a
  rate multiplier); the CVaR is one measure over the leaves, not nested per quarter;
* progressive hedging is measured on small trees only (docs/benchmarks.md): on a
  Gemini-scale base neither the EF nor PH has been run to a plan on 2 cores; PH's
  subproblems do not refine the prefill chords; no rolling re-plan (`--fix-orders`);
* no bundled Gemini example: on the 2-core machine a Gemini-scale tree of 22 nodes (25,374
  variables) found no incumbent in 900 s (docs/benchmarks.md, with the exploration files in
  `benchmarks/purchase/`); the deterministic equivalent is practical for small instances
  or few nodes, and needs a snapshot-built first incumbent or a decomposition beyond that;
* no fan chart in `fleetplan report`.

## File reference

"""


def render() -> str:
    """The full text of docs/purchase.md."""
    out = [INTRO, _markdown(inspect.getdoc(model)), RISK, _markdown(inspect.getdoc(ph)), VALUE, " ".join(inspect.getdoc(ValueOfInformation).split()), "\n", LEFT]
    out.append("\n".join(class_tables([S.PurchaseFile, S.Quarters, S.InstalledGroup, S.Supply, S.SupplyQuarter, S.CapitalPrice, S.CommittedPrice,
                                       S.DemandTree, S.TreeNode, S.GrowthPaths, S.GrowthPath, S.Fan, S.Policy, S.HardUnserved, S.PricedUnserved, S.CVaRRisk, S.Burst])))
    return "".join(out)


if __name__ == "__main__":  # pragma: no cover
    print(render(), end="")
