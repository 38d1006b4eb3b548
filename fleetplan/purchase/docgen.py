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
                        [--fix-orders PREVIOUS.json --now QUARTER [--path BRANCH]] [--report DIR]
                        [--method ef|ph] [--risk expectation|cvar:ALPHA:WEIGHT] [--csv ORDERS.csv] [--scenarios]
mpiexec -n 2 fleetplan purchase FILE --method ph ...      # PH hub + Lagrangian bound spoke (3: + xhat spoke)
```

* `FILE`: the purchase-planning YAML (reference below; `fleetplan schema purchase` prints
  its JSON Schema). `base:` names the instance (a path relative to the file, or a bundled
  name) that holds in every quarter: model, chips, regions, tiers, SLOs, priors, failover
  policy and the chip-hour prices of what runs. The instance's `pods` are replaced by the
  file's `installed` and `supply` (the base must still be a valid instance on its own, so
  each of its regions lists some pod, whatever the count: 1 available pod will do). A relative `base` is looked for beside the file, then in
  the working directory, then among the bundled files (so a copy of a bundled purchase file
  keeps its `purchase/gemini-2027-base.yaml`).
* Output: the **order sheet** (what to commit now: the root node's orders, each with the
  quarter it is placed and delivered, region, chip, pods, its commitment -- a capital pod
  kept, or a committed term to its last quarter -- its price and discounted cost (PV), and
  **what needs it**, below), or, when it is empty, **why nothing is ordered now** (until
  which quarter the pods in service carry every scenario's fleet, which later order is
  needed first and when an order placed now would arrive: `nothing_to_order_why`); the
  **contingency table** (later orders per tree node: "if demand tracks `high` by 2027Q2,
  order ...", each with the probability of that branch and what needs it); per scenario x quarter
  the pods in service, chips running at the peak (`pools` plus `warm_pool`: they add up to
  `chips_running`), the fleet's USD/h (the same pools' chip-hours), the event-weighted shed
  cost (`shed_cost_per_hour_usd`; `run_cost_usd` = (fleet + shed) USD/h x 2,191.5 h,
  discounted), unserved demand and
  the **independent verifier's verdict** on that quarter's fleet at that quarter's demand,
  and the **value of planning under uncertainty** (RP, EEV, VSS, WS, EVPI, per-scenario
  regret, each with the MIP gap and an interval from the bounds).
* What needs an order (`needed`, read from the verified fleets, never assumed): the first
  quarter, in a scenario through the order's node and while the order is in service, whose
  fleet runs more chips of the order's chip in its region (slices and warm pool at the
  quarter's peak, as the verifier re-proved them) than the pods in service and the burst
  pods hold without the order -- the sizing model's pod constraint (`c_fleet_pod_chips`)
  read at that fleet -- with the most probable such scenario, its peak requests/s, the two
  chip counts, and the probability of the scenarios whose fleet ever runs on the order
  (`fleetplan/purchase/sheet.py`). An order no fleet runs on says so (slack within the MIP
  gap, or a minimum order).
* On the terminal the tables fit 100-160 columns and a screen or two: the order tables one
  line per order where the terminal is wide enough, two lines in five columns where it is
  not; the fleets one row per quarter over the scenarios (peak requests/s and the pods in
  service min..max, the chips running min / median / max, USD/h, how many fleets verified).
  The bundled example's `--no-value` output was 640 lines at 160 columns, 99 of them with
  cut cells (`us-central/ironwo…`); it is now 58 lines at 160 columns, 79 at 120 and 93 at
  100, nothing cut.
  `--scenarios` prints the full scenario x quarter x region table; `--json` and `--report`
  have every figure.
* `--csv ORDERS.csv`: also writes every order (commit now, fixed, contingent) as CSV for
  finance, atomically and only for a verified plan: status, node, branch probability, the
  quarters ordered and delivered, region, chip, pods, chips, commitment, in service until,
  price and discounted USD, and what needs it (`fleetplan.purchase.sheet.CSV_COLUMNS`).
* `-o` is written atomically, only when every quarter's fleet verifies, byte-identical for
  the same input and options (`fleetplan schema purchase-plan`) on any machine and under any
  load: every solve stops at its MIP gap, its proof or a work limit (branch-and-bound nodes),
  never at a share of the clock. `--time-limit` is an outer guard only: when it cuts a solve,
  the plan says so (`solve.clock_limited`, what it cut, and a note and warning beginning
  "NOT REPRODUCIBLE": another machine or load can then give another plan). `--json` prints it.
* `--time-limit` is wall-clock seconds of the whole command (the solves, the checks of every
  quarter and the exit: a reserve of 0.3 s a tree node plus 3 s, at most a fifth, is kept
  for what follows the tree's solve); `--mip-gap` the
  relative gap of each; `--no-value` skips the 2 + (scenarios) extra solves of EEV and WS.
* `--fix-orders PREVIOUS.json --now QUARTER --path BRANCH`: the rolling re-plan (below).
* `--method ef|ph`: the deterministic equivalent by HiGHS (default) or progressive hedging
  by mpi-sppy; `--risk expectation|cvar:ALPHA:WEIGHT` (fractions, or percentages: `cvar:90%:50%`) overrides `policy.risk` (both under
  "Risk, burst capacity and larger trees").
* `--report DIR`: also writes `DIR/report.md` and its figures `DIR/figures/{fan,orders,costs}.png`
  (each file atomically, only for a verified plan; below).
* `FILE` may be a bundled name: `fleetplan purchase gemini-ironwood-2027` (below).
* Exit codes: 0 a verified plan; 2 bad input (every problem named by its field path:
  probabilities that do not sum to 1 at a branching, a lead time past the horizon (the
  supply's, from the first quarter, or a `by_quarter` one, for an order placed in that
  quarter), an explicitly orderable quarter past the horizon, an unknown chip or region, a retirement at or before
  the start, a negative demand, branches that disagree on the quarters, a base instance
  that does not load); 3 no plan (with `policy.unserved: {kind: hard}`, some scenario
  cannot be served whatever is ordered: the message names the first quarter that cannot be
  served and the scenarios through it. Where the pod-floor decomposition runs (below) this
  is proven from its floors: the first quarter whose nodes' floors no orders reach, per node
  the floor out of reach ("needs at least 64 pods of ironwood in the three regions
  together, at most 50 can be in service then") and the pods it lacks. Elsewhere it is
  the (scenario, quarter, region) and requests/s the least-unserved orders leave unserved;
  a search the time limit cut names no quarter ("where is not proven"). Then the orders
  that would serve the whole tree with the delivery caps lifted, or that the lead times are
  the limit (after the floors' proof, that search -- a decomposition of the lifted tree --
  starts only with twice the decomposition's time left, else the message says it was not
  made); or no incumbent in the time limit) or a quarter's fleet the verifier refused. The
  plan's notes carry no wall times, so the file is the same bytes run after run.

## A worked example

Three quarters, one region at 20 requests/s of the tiny test model, two pods of two
chips installed; a pod costs 10,000 USD ordered in 2027Q1 and 30,000 USD in 2027Q2
(lead time one quarter); demand stays flat (p = 0.6) or grows 50% a quarter (p = 0.4).
The file is `benchmarks/purchase/worked-example.yaml` in the repository, its base the tiny
model's instance beside it (`tiny-base.yaml`): `fleetplan purchase
benchmarks/purchase/worked-example.yaml` plans it in a few seconds.

```yaml
base: tiny-base.yaml
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

## The bundled example: `gemini-ironwood-2027`

`fleetplan purchase gemini-ironwood-2027` (the file is `fleetplan/instances/gemini-ironwood-2027.yaml`,
its base `fleetplan/instances/purchase/gemini-2027-base.yaml`; `bundled_instances()` leaves
purchase files out). Eight quarters 2027Q1-2028Q4 at an 8%/year discount rate for the
Gemini-class MoE of `gemini-ironwood` (SLOs, N-1 failover over three regions) at half its
regional peaks, with the Trillium chip of `gemini-trillium` added (16-128-chip slices; the
HBM workspace prior is 3 GB per chip for both chips, between the two instances' 11.25 and
1.5: 11.25 GB leaves a 32 GB Trillium chip no room). Installed per region: 14 Ironwood pods
kept and 24 Trillium pods whose lease ends in 2027Q4. Ironwood is ordered on a 12-quarter
commitment at 1.50 USD per chip-hour (an assumed price: no public Ironwood commitment
price exists; about 10.1M USD per 256-chip pod over the term), delivered two quarters
after the order, at most 24 pods a quarter over the three regions, at least 2 pods an
order. Demand starts at 90% of the base peaks and follows three growth paths (low +2%,
mid +7%, high +15% a quarter; p = 0.3 / 0.5 / 0.2) branching in 2027Q4 and again in 2028Q3:
9 scenarios over 30 tree nodes, 41,562 variables (21,312 integer), 75,118 constraints (with the
48 pod floors the decomposition adds).

One node of it is a full Gemini-scale sizing model (about 1,400 variables, 700 integer, with
Ironwood and Trillium side by side in 2027Q1-Q3). Measured (docs/benchmarks.md, "Purchasing";
the date with each figure):

* `fleetplan purchase gemini-ironwood-2027 --no-value -o plan.json` (the pod-floor
  decomposition, "Solving a Gemini-scale tree" below): a **verified** plan of expected
  discounted cost **488,928,000 USD** with a proven lower bound of 484,569,000 USD (**gap
  0.89%**): one master solve, 108 node-block solves (48 pod floors where they can bind, 30
  run-cost floors, 30 node fleets of which 7 needed a solve). The same bytes on every run, at
  load averages from 3.6 to 10 (five runs, 2026-12-07): every block solve stops at its gap,
  its proof or its node limit (issue 41; before, each had 30 s of wall clock, and under load
  the plan moved: one run ordered 3 pods now at 488,481,000 USD, two runs at load 5-6 differed
  in the last digits). The whole command took 46.1 s of CPU at load 3.6 (48.7 s of wall) and
  52-56 s at load 5-10, where the code before issue 41 took 86-87 s (2026-12-07, a shared
  2-core machine). Order sheet: nothing to commit in 2027Q1
  (the installed 14 Ironwood + 24 Trillium pods a region serve through 2027Q3, and an order
  placed in 2027Q2 arrives in 2027Q4, the quarter the Trillium lease ends); the contingency
  table orders 7 / 7 / 8 Ironwood pods (us-central / us-east / us-west; 22 of the 24 the
  delivery cap allows) in 2027Q2 and 5 / 2 / 4 in 2027Q3 on every path, so 21-22 Ironwood
  pods a region are in service in 2027Q4; then per branch (on `high` 2-5 pods a region in each
  of 2027Q4, 2028Q1 and 2028Q2; on `mid` 3-4 in 2028Q1-Q2; on `low` 3 in us-east in 2028Q2).
  Re-run on 2026-12-07 at main c9228b1 (after issue 39's decode handoff reserve; the 2-core
  machine shared, load average 9-10: 11 min of wall, 132 s of CPU): a verified plan of
  488,870,000 USD, bound 483,836,000 (1.03%: 8 node fleet solves ended at their 30 s clock
  under that load) and the same orders -- nothing now, 7 / 7 / 8 and 5 / 2 / 4 Ironwood pods
  in 2027Q2 and 2027Q3 on every path.
* Before the decomposition, HiGHS on the deterministic equivalent from the snapshot start
  (`--time-limit 300`, 2026-12-03, quiet): a verified plan of 498,041,000 USD, bound
  478,055,000 (**4.0% gap**), 317 s of wall, 673 MB. The decomposition's plan is 1.9%
  cheaper and its bound 1.4% higher.
* The value of information, `fleetplan purchase gemini-ironwood-2027 --time-limit 2400 -o
  plan.json` (2026-12-07: 469 s of CPU, 812 MB; 1,445 s of wall at load 5-15). The mean
  forecast (one 8-node path, 397,402,000 USD, 0.96% gap; its decomposition stops at its 20
  master solves) commits 4 / 5 / 6 Ironwood pods (us-central / us-east / us-west) in 2027Q1;
  with those fixed and every later order re-optimised on the tree, EEV = **487,728,000 USD**
  (0.13% gap), 1,199,921 USD below the recourse solve's plan (488,928,128, which stopped at
  its 0.89% gap). That plan of the tree is then **the answer** -- its root orders and every
  later order, every fleet re-checked by the verifier, with the recourse solve's bound
  (484,569,000: 0.65% gap), and a note says so (tests/purchase/test_purchase_adopt_eev.py).
  **So the order sheet differs with and without `--no-value`**: with the value solves it says
  commit 4 / 5 / 6 Ironwood pods now (delivered 2027Q3), and 3 / 2 / 2 rather than 7 / 7 / 8
  in 2027Q2; without them, nothing now. The two plans are 0.25% apart, within either's gap: at
  a 1% gap the solver does not decide between ordering those pods in 2027Q1 or 2027Q2, and a
  planner who must commit should run the value solves (or a smaller `--mip-gap`) before
  placing the 2027Q1 order. VSS is then **0, in [-655,351, +3,159,570]** by the bounds: at
  these gaps the value of the stochastic solution is not distinguishable from zero. What the
  mean-forecast plan gets wrong here is therefore small: its root order (15 pods in 2027Q1,
  where the recourse plan orders nothing until 2027Q2) costs at most 3.2M USD more than the
  optimum of the tree and possibly nothing. (Before issue 41 the mean forecast's node fleets
  could end by their 30 s clock, so its root orders depended on the machine: 4 pods in us-east
  on 2026-12-04, 3 in us-central on a slower machine, both with VSS 0; every solve now ends by
  its work, so they are the same on any machine.) Wait-and-see WS = 395,386,000 USD (the 9
  paths at 0.65-1.0% gaps), **EVPI = 92,342,700 USD, in [89,183,100, 95,985,900]**: knowing
  the path would save about 19% of the cost. The regrets (`scenarios[].regret_usd`) say
  where: 134-183M USD on the scenarios whose second branch is low (low/low, mid/low,
  high/low), 86-111M on the mid ones and -0.8-5.9M on the high ones (high/high's -837,930 USD:
  its wait-and-see solve stopped at its 0.65% gap above the tree plan's cost on that path) --
  the pods committed two quarters ahead of the 2028Q3 branching (and of 2027Q4 before it) so
  that a high branch is served, which the low and mid branches then pay for over their
  12-quarter terms.
* **Issue 41's target (a 1% gap in under 30 s of CPU on 2 cores, end to end)**: not met. Since
  the prefill pools are sized against the p99 of the TTFT sum (the tail merge) the blocks are
  harder: on 2026-12-07 evening the command took 58.6-63.5 s of CPU in four runs (main 66.9-71.8 s
  alternated with them, load 2.4-8, the machine never quiet; 42 s of wall at best) to a verified plan of 484,527,000 USD with a bound of
  480,542,000 (0.82%; main's plan that day orders the same pods, its 2027Q1-Q2 fleets 11-18 USD/h dearer). Most of
  the HiGHS time is the probability-1 root chain (2027Q1-Q3, Ironwood and Trillium side by side),
  whose LP relaxation mixes each prefill pool's slice shapes; docs/benchmarks.md, "Purchasing >
  Issue 41", has the profile. The earlier target (1% in under 60 s) was met at 38-44 s of wall
  on 2026-12-04's machine.

## The demand tree

`demand` takes three forms. `kind: tree` gives the nodes explicitly (the root is the
first quarter; each node's `children` are the next quarter's branches, each with its
probability given the parent). The one-liners: `kind: growth_paths` -- named paths with
probabilities and a growth rate per quarter, branching after the first quarter; and
`kind: fan` -- N equally likely paths sampled from a mean growth rate and a volatility
with a fixed seed. Demand is a multiplier of the base instance's `peak_rps`, one number
for every region or one per region. A branch of probability 0 is not planned for (it
weighs nothing in the expected cost). Scenario names join the branch names with `/`.

A node (`kind: tree`) or a growth path (`kind: growth_paths`, from each quarter it branches
on) may also **shift the workload**: `workload: {input_mix: [...], output_tokens: N,
prefix_hit_rate: x}`, any of the three; each replaces the base instance's field in that
node's sizing block and in its descendants' until one shifts it again (a new product
surface that moves all three from a quarter on). Each shifted workload is checked with the
base instance as a whole at load time (shares sum to 1, every length fits a tier), the
problem named at the node's `workload` field (exit 2). The mean forecast of EEV uses the
expected workload of each quarter: the mixture of the nodes' input mixes and the means of
their output lengths and hit rates, each node weighted by its probability x its demand.

## The rolling re-plan (`--fix-orders`)

A planner re-plans every quarter, with what was ordered standing and one branch of the
tree realised. `fleetplan purchase FILE --fix-orders PREVIOUS.json --now 2027Q2 --path high`:

* `PREVIOUS.json` is an earlier plan (`-o`) of a file with the same quarters (the demand
  tree may have been re-forecast: only the realised path must be one of the previous
  plan's branches); its orders are read from its order sheet and contingency table (and,
  for a re-plan of a re-plan, its fixed orders);
* `--now` is the current quarter: every order placed before it, at the nodes of the
  realised path, is fixed to the previous plan's (an order it did not place is fixed at 0);
  the orders of `--now` itself are the decision, printed as the order sheet;
* `--path` is the tree node demand has reached at `--now` (its branch names from the root
  joined by `/`, as the plan's `node` fields; may be omitted before the first branching).

The tree is re-rooted: the realised path's earlier quarters (probability 1) and the
subtree below the realised node, each probability divided by that node's. The plan's
expected cost includes the realised quarters' costs; its `fixed_orders` list what was
fixed and `replan` records `now`, `path`, the previous plan's purchase-file hash
(`previous_purchase_hash`) and the digest of its content (`previous_plan_hash`: SHA-256 of
its `integrity` record). No EEV or wait-and-see figures are computed for a re-plan.

The previous plan must be the one `fleetplan purchase -o` wrote: every plan (schema_version
2) carries `integrity`, the SHA-256 of each of `name`, `purchase_hash`, `base_instance_hash`,
`quarters`, `order_sheet`, `contingency`, `fixed_orders`, `replan` and `scenarios` as written
(canonical JSON), and `--fix-orders` refuses, naming the field, a plan whose content no
longer matches it (an emptied order sheet, an order moved to a later quarter, an edited
hash: the re-plan would fix orders never placed), a plan of another `schema_version` or
without the record, and a plan solved on another base instance than the file's
(`base_instance_hash`). The purchase file itself may have changed since (a re-forecast
demand tree, a new quote for later quarters): the orders already placed are checked
against its supply (delivery quarter, price, terms, minimum order, delivery cap), and the
re-plan's notes say the file differs. A digest is an integrity record, not a signature:
it catches an edit, not a forger who recomputes it.

Refused with exit 2 naming the option:
`--now` or `--path` without `--fix-orders`, `--fix-orders` without `--now`, a file that is
not a purchase plan, not intact (above) or has other quarters (`--fix-orders`), a quarter outside the horizon
(`--now`), a node the tree or the previous plan does not have at `--now` (`--path`, listing
the nodes there), an earlier order the file does not offer (`--fix-orders`). A fixed order
that leaves some branch unservable (the hard policy) is exit 3.

A re-plan keeps the file's `policy.risk` (or `--risk`) and `policy.burst`: the CVaR is
taken over the re-rooted tree's scenarios at their conditional probabilities, and burst
pods are chosen in every quarter of the re-rooted tree, the realised ones included (their
costs are part of the expected cost). With `--method ph` the fixed orders are fixed in
every scenario's path model as well as in the evaluation of PH's incumbent.

## The purchase report (`--report DIR`)

`report.md` (the order sheet, the contingency table, the value figures) and three PNGs
(matplotlib, the report's deterministic style): `fan.png`, per region, the demand fan (the
quarter's peak requests/s: every scenario's path, the band from the lowest to the highest,
the expectation) against the capacity in service (chips in service, right axis: the band
over the scenarios and the expectation; chips running at the peak dashed); `orders.png`,
the pods ordered per order quarter, expected over the tree and stacked by region x chip,
the whiskers the fewest and most any scenario orders then; `costs.png`, each scenario's
discounted cost (sorted, with its probability), the expected cost and the wait-and-see
costs when computed.

## Solving a Gemini-scale tree

The deterministic equivalent holds one sizing block per node (about 1,400 variables and
700 integers each at Gemini scale, 41,562 and 21,312 for the bundled example's 30 nodes).
HiGHS's bound on it is weak -- the LP relaxation lets fractional slices need fractional pods,
and the orders are most of the cost -- so with the bundled example it ended at a 4.0% gap
after 300 s. With at least 2,000 integer variables, the hard unserved policy and no burst,
the driver first runs the **pod-floor decomposition**
(`fleetplan/purchase/floors.py`; a logic-based Benders decomposition, Hooker and Ottosson,
Math. Programming 96, 2003):

1. *Floors.* For every node, the node's run-cost floor (its cheapest fleet with the most
   pods it can have); and for every orderable chip and every set of all regions or all but
   one, the fewest pods any fleet serving the node within its SLOs can have there (the
   block alone with the other pods at their most, a MIP whose proven bound is rounded
   up) -- at the nodes where they can bind (`floor_nodes`): not where the pods in service
   are fixed (nothing ordered is in service yet), nor at a node that another of its quarter
   with the same orders in service (so the same pods in every plan: a branching closer
   than the lead time) and at least its demand in every region dominates. The bundled
   example: 12 of the 30 nodes, 48 pod-floor solves. The pod floors are valid inequalities
   of the tree (`c_purchase_floor`, kept in the model).
2. *Master.* The tree's own orders, inventory, delivery caps and minimum orders (the same
   variables and constraints, the blocks switched off) with the floors, minimising the
   expected discounted orders plus each node's run cost theta_n (at least its floor) --
   with a CVaR objective, (1 - w) E + w CVaR of the scenarios' costs so built (every
   scenario cost is non-decreasing in each theta_n, so the floors and cuts bound it too).
3. *Nodes.* Each node's block at the master's pods in service: its cheapest fleet, prefill
   chords refined until the exact queueing curves hold; the solve starts from the cheapest
   fleet the block has found at other pods that fits in these (under that fleet's chords). No fleet: a **no-good cut** (one of
   the node's orderable pods must exceed the master's). A fleet whose proven run cost beta
   is above the floor: a **cost cut**, theta_n >= beta unless one of its pods exceeds the
   master's. Then back to 2, until the best plan found is within the MIP gap of the
   master's bound.

The master's bound is a lower bound of the tree's optimum (every plan meets every floor and
every cut) -- of the tree with its prefill chords: a chord lies below the convex capacity curve,
so the floors and cuts are bounds of the blocks under their chords, exact where the chords sit at
the optimum's pool sizes (docs/benchmarks.md, "Purchasing > Issue 41"); the plan is a plan of the tree, with every node's fleet solved by the sizing
families. Within the gap, HiGHS is not run on the whole tree; otherwise (or when the
decomposition stops: a node fleet neither found nor proven absent within 1,000
branch-and-bound nodes) HiGHS solves the tree from the best
plan, with the floors, and the larger of the two bounds is reported; when HiGHS finds no
plan in the time left, the decomposition's plan stands with its gap. The decomposition may
use the whole time limit (HiGHS finds no plan of the bundled tree in the time a share of
it would leave), less what the quarter checks and the end of the command need (0.3 s a
tree node plus 3 s, at most a fifth of the limit: `--time-limit 90` ends at 67 s with the
plan of the default run; 60 ends at 55 s without one; measured 2026-12-03). The node blocks are kept in HiGHS between solves (written once:
`fleetplan/solvers/persistent.py`) and solved on one thread per core. Each block solve
stops at its MIP gap (1e-4 for a pod floor, the command's for a cost solve), its proof or
a node limit (5,000 branch-and-bound nodes for a pod floor, 1,000 for a run-cost floor or
node fleet: `FLOOR_MAX_NODES`, `COST_MAX_NODES`; a node fleet with no fleet found in its first 200
nodes ends there, `FLEET_GIVE_UP_NODES`, and a run-cost floor whose gap closes by less than 1% of
itself in 200 nodes, `RUN_FLOOR_STALL_NODES`; the floor solves run without HiGHS's root
reduced-cost heuristic, `FLOOR_HIGHS_OPTIONS`: a third of their CPU on the bundled example), never at a share of the clock, so the
floors, the fleets and the plan are the same on any machine and under any load; the time
limit only guards the whole, and a plan whose solves it cut says so (`solve.clock_limited`,
a "NOT REPRODUCIBLE" note and a warning). A fleet the run-cost floor's fleet fits in
(the pods its slices and warm pool need) is that fleet, without a solve. The plan's notes say
what the decomposition did. Where it does not apply (priced unserved demand, burst
capacity) the driver first solves the *restricted* tree by it -- every
request served, no burst pod, the expected cost as the objective, within half the time
left (`fleetplan/purchase/hardstart.py`) -- and offers its plan to HiGHS as the start: it
is a plan of the tree too (shortfall and burst at 0; a CVaR's eta and excesses follow from
the scenario costs), and it is kept when HiGHS ends with nothing better; a note says which.
On the bundled example with `unserved: {kind: priced, usd_per_1m_tokens: 50}` and
`--time-limit 120` HiGHS from the snapshot start ended at 6,175M USD (a 97% gap); from the
restricted plan (488.8M) it reaches 193.8M at an 11.3% gap in 115 s (it sheds some peak
demand in five quarters and provisions less failover capacity, whose shortfall the policy
prices at the event weight). With `--risk cvar:0.9:0.5` HiGHS from the snapshot start
ended at 1,170M on the risk objective (a 51.8% gap); from the restricted plan at 575.9M
(the expectation plan, 2.0% from HiGHS's bound) after the whole 600 s default limit; since
issue 39 the decomposition solves the CVaR tree itself (below, "Risk"). When
the restricted tree has no plan in its time (demand no orders can serve: where pricing it
matters most), HiGHS gets a plan built from per-node snapshot solves instead
(`fleetplan/purchase/start.py`): each node's block at the most pods it can have, a pod
priced at its per-hour order cost, the orders made non-anticipative (the order placed at a
node is the largest shortfall over its subtree in its delivery quarter).
`tests/purchase/test_purchase_floors.py` checks the decomposition against the exact
deterministic equivalent on small trees (the same optimum; the bound below it), with cost
and no-good cuts taking several rounds.

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

## Mixed pools: an installed older chip beside a newer one

Purchasing is where an installed older chip and a newer one serve the same tier side by
side, so `policy.mixed_shapes` is on by default: every quarter's decode pool and colocated
replica pool may run several slice shapes and chip types (it sets the base instance's
`serving.mixed_shapes`; `false` keeps the snapshot's one shape per pool). The mixture is
priced honestly, by the sizing families unchanged: each shape runs at its own operating
point and SLO-limited rate (a decode slice at its own batch cap and TPOT; a replica at the
rate the candidate table gives its shape), and the router gives each shape load in
proportion to its capacity, so every shape -- the slowest included -- meets the tier's
SLO. A replica shape is its own least-work sub-pool: where its rate assumes a pool of
n_ref replicas it keeps at least n_ref (with `serving.router: random` and Poisson arrivals,
M/G/1 per replica, any count is safe). Prefill stays one shape per pool: its TTFT is an Erlang C queue of
identical servers (docs/formulation.md, the prefill family). Each quarter's result lists
the chips per pool (`scenarios[].quarters[].pools`, one row per shape, in `--json` and
the report's table; the CLI's full table, `--scenarios`, sums them per role), and the verifier re-checks each quarter's mixed
fleet by summing the shapes' capacities from the instance alone.

The field case that motivated it (issue 18; `tests/purchase/test_purchase_mixed.py` and
`tests/families/test_mixed_shapes.py`, with the optimum found by enumeration): demand of
9 units; one newer chip (standing for the field case's L20, worth 2 units: the
physics gives it 8.09 requests/s per replica against the older chip's 4.01, a ratio of
2.02) at 1.8 USD/h and eight older ones (the A10, worth 1) at 1 USD/h. The optimum is
**1 newer + 7 older at 8.8 USD/h**; one shape per pool needs 9 older (9 USD/h; 5 newer
cost the same) and with 1 newer and 8 older available has **no plan**. As a two-quarter
purchase tree (8 older pods installed, the newer chip orderable one pod a quarter at 1,000
USD, no lead time): the plan orders one newer pod now and runs 1 + 7 in both quarters
(expected cost 1,000 + 2 x 2,191.5 h x 8.8 USD/h = 39,570.4 USD); with
`mixed_shapes: false` the tree has no plan (exit 3, naming the quarter and the 5 newer
pods that would have served it one shape).

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

A risk term is compared with what the expectation alone orders (`fleetplan/purchase/risk.py`):
the driver first solves the **risk-neutral plan** (the same tree, `policy.risk: expectation`,
within half the time left), then the risk objective from it -- the pod-floor decomposition's
first incumbent, its floors and node fleets already found, so a master bound within the
MIP gap of the neutral plan's risk objective ends the solve there; where the decomposition
does not apply, HiGHS's start. `risk.neutral` gives the neutral plan's expected cost, its
CVaR at the same alpha, its value of the risk objective, its solve and how many orders (tree
node x region x chip) the risk term changed; the headline says either "the CVaR term
changed no order: this is the risk-neutral plan, whose CVaR_0.9 is already ... USD" or how
many it changed and what that did to the expected cost and the CVaR. The issue-39
reproduction, `fleetplan purchase gemini-ironwood-2027 --no-value --risk cvar:0.9:0.5`,
ran 10 minutes (HiGHS on the tree to the default limit) and returned the neutral orders
without saying so; now (2-core machine at a load of 8-9 from other work): 3 min 19 s of wall,
75.5 s of CPU -- the neutral plan by the decomposition, then one master solve of the risk
objective whose bound (571.6M) is within 0.75% of the neutral plan's 575.9M: the CVaR term
changed no order, the neutral plan's CVaR_0.9 is 663.1M USD.

**Priced unserved demand.** `policy.unserved: {kind: priced, usd_per_1m_tokens: P}` lets a
quarter leave requests unserved at P USD per 1M tokens (prompt + output) for every hour of
the quarter. A quarter whose pods cannot carry its peak then serves what they can and sheds
the rest: the sizing families' pool minimum (`c_fleet_min_slices`, the slices that carry a
pool's whole peak) is switched off in every node block, since a node's tables are built
with the horizon's most pods and the snapshot's rule that drops it where the pods are too
few cannot see the node's own. Before, such a quarter served nothing at all: 2 pods of the
tiny model at 40 requests/s left all 40 unserved; now 6.13, as `fleetplan solve` finds with
the same 2 pods (tests/purchase/test_purchase_priced_partial.py; the hard tree's exit 3
names the same 6.13). The headline says "verified, with unserved demand" when a verified
quarter leaves some unserved.

**Burst capacity.** `policy.burst` rents on-demand pods for one quarter, at most
`max_pods_per_quarter` per entry, at a premium per chip-hour for all the quarter's hours
on top of the chip-hours of what runs. The sizing block of the quarter uses them like
pods in service; each scenario x quarter reports `burst` (pods, chips) and
`burst_cost_usd`, and the verifier checks the fleet with them counted as installed.

**Tree size.** A tree is at most 200 nodes (`MAX_TREE_NODES`, checked when the file is
read: 3 paths branching in 7 of 8 quarters are 3,280 nodes and 2,187 scenarios, refused
with exit 2 naming `demand.branch_at`). Each node holds a sizing model, ~20 MB at the
solve's peak at Gemini scale, so the cap is ~4 GB; docs/cli.md, *Input limits*.

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
Gemini-scale base 22 nodes, 25,374 variables found no incumbent in 900 s before the
snapshot-built start (with it, the bundled example's plan above). Progressive
hedging on the 27-leaf tiny tree (`mpiexec -n 2`, Lagrangian spoke) returns a plan 0.14%
above the EF's optimum with a proven gap of 8.6%, in 5x the EF's time: on small nodes the
EF is the better method. PH pays when the EF's tree is too large but a scenario's path is
still solvable; on the mid base PH gave no result in 32 minutes (its path subproblems are
~10,000 variables each); on the Gemini-scale exploration tree (later found
infeasible at its root, docs/benchmarks.md) an 8-quarter path alone had no incumbent in
150 s, so PH could not start there either (not shown past that point: the missing piece
is a first incumbent per path). The snapshot-built start goes to the EF solves only:
PH's scenario subproblems are solved by mpi-sppy without it, while the evaluation of
PH's incumbent on the whole tree (`solve_tree`, its consensus orders fixed) gets it like
any tree of at least 2,000 free integers. With `--fix-orders`, PH fixes the previous
plan's orders in every scenario subproblem through the same `fix_node_orders` as the
EF's re-plan.

**`--time-limit` under PH.** PH gets 60% of the time left (`PH_TIME_SHARE`); the rest is
the evaluation of its incumbent on the tree. mpi-sppy checks its own time limit only at the
top of an iteration, so an mpi-sppy extension (`fleetplan.purchase.ph._deadline_extension`)
sets each subproblem solve's HiGHS `time_limit` to the time left shared over the solves
left in that iteration's loop, and PH's time limit to the deadline after iteration 0; in one
process the scenario builds stop at the deadline too. On the bundled example
`--method ph --time-limit 30` took 70 s (iteration 0's nine 5 s subproblem limits) and now
ends in 21.5 s, `--time-limit 60` in 33.2 s, both with no plan ("9 scenario subproblem
solve(s) stopped at their share of the time left without a solution"); `--time-limit 300`
ends in 224 s with a verified plan at a 42.75% gap (one PH iteration in 173 s; the pod-floor decomposition of the EF reaches
0.86% in 40 s there, so it stays the method for this tree; 2026-12-04). A PH result above `--mip-gap`
reports `ph_converged` (its orders agree across the scenarios; the gap is its bound's) or
`ph_stopped` (by its iterations or the clock), not `optimal`; the pod-floor note of a PH run
is of the tree with PH's orders fixed, not a bound of the tree. Under a time limit PH's
subproblem solves each have a share of the time left, so how far it gets depends on the
machine: such a plan says it is not reproducible (`solve.clock_limited`).

"""

VALUE = r"""

## The value of the stochastic solution

"""

LEFT = r"""
## Not modelled yet

Said plainly, so nobody reads the plan for more than it is:

* mixed pools (above) cover decode and colocated replicas only: a prefill pool stays one
  shape, and `fleetplan whatif` (with the report's region-loss cascade and the
  simulator's loss hours a plan does not list) refuses a plan whose pools mix shapes;
  the simulator runs a mixed decode pool but not a mixed replica pool;
* the pods' DCN share (issue 20): `fleetplan solve` counts every slice in a pod and keeps
  each tier's KV crossing the DCN within its ceiling; the purchase model sizes each node's
  fleet without the pods (the pod families need the failover routing fixed, which a
  purchase node does not have), so it may buy fewer chips and pods than a placement-aware
  `fleetplan solve` of the same quarter needs (that sizing needs 0.5% more chips on the
  bundled Gemini instance and 5% more on Trillium: docs/gemini-vs-brief.md);
* the CVaR is one measure over the leaves, not nested per quarter;
* progressive hedging is weak on the Gemini-scale tree: the bundled example with
  `--method ph --time-limit 300` reaches a verified plan at a 42.75% gap (one PH iteration),
  where the pod-floor decomposition of the deterministic equivalent reaches 0.86-0.89%; PH has no
  per-path warm start, and its subproblems do not refine the prefill chords (its incumbent's
  evaluation on the whole tree does);
* the bundled example's 1% gap in under 60 s holds with 16-22 s to spare on 2026-12-04's
  2-core machine and took 59-76 s on 2026-12-03's (docs/benchmarks.md): on a slow or busy
  2-core machine it is at its edge;
* the purchase report is `fleetplan purchase --report DIR`, not part of `fleetplan report`.

## File reference

"""


def render() -> str:
    """The full text of docs/purchase.md."""
    out = [INTRO, _markdown(inspect.getdoc(model)), RISK, _markdown(inspect.getdoc(ph)), VALUE, " ".join(inspect.getdoc(ValueOfInformation).split()), "\n", LEFT]
    out.append("\n".join(class_tables([S.PurchaseFile, S.Quarters, S.InstalledGroup, S.Supply, S.SupplyQuarter, S.CapitalPrice, S.CommittedPrice,
                                       S.DemandTree, S.TreeNode, S.WorkloadShift, S.GrowthPaths, S.GrowthPath, S.Fan, S.Policy, S.HardUnserved,
                                       S.PricedUnserved, S.CVaRRisk, S.Burst])))
    return "".join(out)


if __name__ == "__main__":  # pragma: no cover
    print(render(), end="")
