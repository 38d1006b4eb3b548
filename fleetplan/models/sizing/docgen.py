"""Assemble ``docs/formulation.md`` from the constraint families' docstrings.

``python -m fleetplan.models.sizing.docgen > docs/formulation.md``; a test checks the
file is current, so the mathematics on paper is the mathematics in the code.
"""

from __future__ import annotations

import inspect
import re

from fleetplan.models.sizing import build
from fleetplan.models.sizing.constraints import dcn, decode, fleet, mode, pods, prefill, replica, traffic, unserved, warm
from fleetplan.solvers import cpsat

FAMILIES = [
    ("Fleet, pods and cost", fleet, "add_fleet"),
    ("Traffic, routing, shedding, clamp", traffic, "add_traffic"),
    ("Warm pool", warm, "add_warm_use"),
    ("Decode capacity", decode, "add_decode_capacity"),
    ("Prefill TTFT", prefill, "add_prefill_ttft"),
    ("Colocated replicas", replica, "add_replica_capacity"),
    ("Serving mode (auto)", mode, "add_serving_mode"),
    ("Requests not served end to end", unserved, "add_unserved"),
    ("Pods (placement-aware sizing)", pods, "add_pods"),
    ("DCN share (placement-aware sizing)", dcn, "add_dcn"),
]

INTRO = r"""# The sizing model

`fleetplan solve` sizes a fleet with a mixed-integer linear program built in Pyomo
(`fleetplan/models/sizing/`) and solved by HiGHS (or, the same MPS export, OR-Tools
CP-SAT). Everything nonlinear -- roofline step times, prefill FLOPs with the quadratic
attention term, queueing percentiles, speculation -- is computed beforehand in
`fleetplan/perf/` and turned into candidate tables by `fleetplan/instance/derived.py`;
the model only selects and counts. Every plan is then re-checked by
`fleetplan/results/verify.py`, which recomputes each condition from the instance with
`fleetplan.perf` and never reads the model. This page is generated from the docstrings
of the functions that build each constraint family
(`python -m fleetplan.models.sizing.docgen`).

## Sets

| set | meaning |
|---|---|
| `REGIONS` (r, a, X) | regions; A(X) the regions that may absorb X (`failover_to`) |
| `TIERS` (t) | context-length tiers (buckets of the input mix by prompt length) |
| `ROLES` (rho) | `prefill`, `decode` (disaggregated) or `replica` (colocated); all three with `serving.mode: auto`, where a binary per region x tier picks the mode (`v_mode_disagg`, below) |
| `CONFIGS` (c) | slice shapes: chip type x chips per slice |
| `CHIPS` (k) | chip types |
| `SCHEDULES` (h) | colocated engine schedules: `prefill-first` and `chunked-C` for each token budget C of `serving.chunk_tokens` (those `serving.colocated_schedules` allows); `REPLICA_SCHEDULES` (r, t, c, h) the ones a replica pool may run (a positive rate, not dominated by another schedule) |
| `SCENARIOS` (s) | `normal` (every region at its own peak hour) and `lose:X@h` for each lost region X and each hour h whose load vector over X and A(X) no other hour dominates |
| `ACTIVE` (r, t, s) | the region-tiers a scenario constrains: all regions in `normal`, A(X) in `lose:X@h` |

Why two scenario kinds suffice: the fleet is fixed across hours and regions do not
interact in normal operation, so each region's own peak hour dominates its other normal
hours; in a loss of X only the absorbers' loads change, and a loss hour whose loads are
all at most another loss hour's is dominated for every routing (Pareto pruning). The
verifier still checks all 24 hours of every scenario.

## Parameters (from the candidate tables, units in the names)

| parameter | unit | source |
|---|---|---|
| `p_peak_rps[r]`, hourly multiplier l[r, h] | requests/s, fraction | instance: peak_rps x (1 + the region's demand margin) |
| tier share sigma_t | fraction of requests | input mix |
| `p_output_tokens` o | tokens/request | instance |
| `cap^dec[t, c, g]` | output tokens/s per slice | best legal decode operating point, regime g in {normal, failover} (`perf.pools.decode_table`; legal: the SLOs, and the batch's KV beside the reserve for handoffs in flight fits the page pool) |
| mean service S^q[t, c, g] | ms per request, source q in {own, div} | `perf.roofline.prefill_time_ms` over the tier's buckets at the regime's hit rates |
| A[n; t, c, g] | Erlangs | most work n slices carry with the TTFT percentile within its budget (`perf.queueing`, G/G/c: Erlang C with the Allen-Cunneen factor (C_a^2 + C_s^2)/2, C_a^2 = `workload.arrival_scv`, 1 = Poisson) |
| `cap^rep[t, c, h, g]`, n_ref[t, c, h] | requests/s per replica, replicas | `perf.colocated.ReplicaRates.rate(n_ref)` x utilisation headroom under schedule h in regime g; n_ref the fewest replicas the tier's smallest region needs under h |
| `p_price_per_slice_hour_usd[r, c]` | USD/h | chips x price per chip-hour (regional override) |
| kappa_t | fraction | share of a tier's diverted prompts the admission clamp rejects |
| beta | fraction | share of sheddable classes |
| M[r, t, rho, c], N^min | slices | data bounds: pods and the most demand a pool can see; the normal-peak minimum |

Decode regimes: `normal` caps the batch at (1 - `decode_knee_margin`) x the SLO knee
(and the largest batch cap), `failover` may ride to the knee -- the brief's "ride the
occupancy knee" mitigation. Speculation is part of the operating point: classes whose
acceptance rate alpha(k) at the point's draft length is below the threshold never draft;
the chosen point is the legal one with the most tokens/s. A class's alpha(k) comes from
what its instance number is (`spec_acceptance_kind`, `spec_acceptance_at_k`): a per-token
acceptance probability a, or a rate measured at K turned into that a, gives
alpha(k) k + 1 = (1 - a^(k+1)) / (1 - a) tokens per verify step (Leviathan et al. 2023;
`perf.speculation.class_acceptance_rate`); a rate with no K is read at every k.

A legal batch leaves room for the handoffs in flight (`perf.handoff`): a decode slice
allocates a request's whole prompt KV when its transfer from prefill starts and holds it
until the KV has landed, from the same page pool as the batch (vLLM's NIXL connector:
`WAITING_FOR_REMOTE_KVS`; SGLang's pre-allocation queue). Per slice at full load the
arrivals are lambda = tokens/s / o (Little's law: B residents each held o / (tokens/s / B));
a handoff holds its pages for T, the transfer of the tier's p99 prompt's KV (the tier's DCN
ceiling's share over the DCN); the number in flight is Poisson(lambda T) (M/G/infinity,
Palm), and the point reserves its p99 quantile x the p99 prompt's KV (with paging slack):
B x resident KV x (1 + slack) + reserve <= the KV page pool. lambda is the candidate's
own full-load rate, not the pool's (which depends on the count), so the rows stay linear and
a pool below full load holds fewer handoffs than reserved. Colocated replicas do not hand off.

Prefill queueing (`perf.queueing`, G/G/c by Allen-Cunneen): with a = lambda E[S] Erlangs on
c slices, the wait percentile is
t_p = max(0, ln(C(c, a) / (1 - p)) x (C_a^2 + C_s^2) / (2 (c / E[S] - lambda))), C(c, a)
Erlang C, C_s^2 the SCV of the prefill service time (from the length mix and hit rates),
C_a^2 the SCV of the arrivals within an hour (`workload.arrival_scv`, fitted from a trace
as the index of dispersion of counts at the queue's time scale, docs/workloads.md). The
mean wait is W_MMc x (C_a^2 + C_s^2)/2; C_a^2 = 1 is the M/G/c of earlier versions, number
for number.

## Variables

| variable | domain | meaning |
|---|---|---|
| `v_slices[r,t,rho,c]` | integer | slices of shape c in pool (r, t, rho) |
| `v_select[r,t,rho,c]` | binary | the pool's shape (one per pool; with `serving.mixed_shapes` any number for a decode or replica pool) |
| `v_warm_shape[r,t,rho,c]` | binary | with `serving.mixed_shapes`: the one shape of a mixed pool its warm slices join |
| `v_new_pods[r,k]` | integer | new pods bought |
| `v_warm[r,c]` | integer | warm-pool slices |
| `v_warm_use[r,t,rho,c,s]` | integer | warm slices joining a pool in a loss scenario |
| `v_replica_schedule[r,t,c,h]`, `v_replicas[r,t,c,h]`, `v_warm_replicas[r,t,c,h,s]` | binary, continuous, continuous | the engine schedule replica pool (r, t, c) runs (one per pool); its replicas and warm replicas under it (integral: one schedule per pool) |
| `v_route_bp[X,a,t]` | continuous, basis points | share of X's tier-t traffic sent to absorber a (hour-independent) |
| `v_serve_rps[r,t,c,q,s]` | continuous, requests/s | prefill requests of source q served on shape c |
| `v_shed_rps[r,t,q,s]` | continuous, requests/s | sheddable-class requests shed in a loss scenario |
| `v_short_prefill`, `v_short_decode`, `v_short_replica` | continuous | load left unserved within the SLOs (requests/s, output tokens/s, requests/s) |
| `v_unserved_rps[r,t,s]` | continuous, requests/s | requests not served end to end: the largest of the roles' shortfalls in request equivalents |

## Objective and the lexicographic shortfall

Minimise `obj_cost_per_hour_usd` = sum of `m.cost_terms`: chip-hours of every slice
and warm slice, new pods, and the event-weighted price of shedding. Every family
appends its own terms; the objective is written once, in `build.py`.

Shortfall is not priced. The driver (`fleetplan/sizing/driver.py`) first solves with every
shortfall variable fixed at zero. Only if that is infeasible (not enough inventory, an
SLO no slice shape meets) does it minimise `obj_shortfall_rps`: the requests not served
*end to end* (`v_unserved_rps`, the largest of a region-tier's prefill and decode
shortfalls in request equivalents, decode tokens divided by o -- a request needs both,
so prefill without decode or decode without prefill serves nothing), summed over the
scenarios. It then keeps served what that solve served, caps the sum at its minimum
(`c_shortfall_cap`) and minimises the cost, which trims each role to what the other
can pass on. A plan therefore never leaves load unserved to save money, and every
shortfall is reported per pool and scenario, with the requests not served end to end
per scenario (`unserved_rps`).

## Linearising the queueing curve: an iterated capacity cap

The TTFT constraint is nonlinear in the pool size: A[n] grows faster than n (bigger
pools run hotter at the same wait percentile, A[n] ~ n - beta sqrt(n)), i.e. A is
*convex* in n, which `fleetplan.models.sizing.constraints.prefill.nonconvex_curves`
checks for every curve built. For a convex sequence the chord through two consecutive
points (k, A_k), (k+1, A_{k+1}), extended, lies below every other point, so one chord
per pool-scenario is a safe linear restriction, exact at n = k and n = k + 1. The
driver places each chord at the pool's estimated size, solves, and -- when the chords'
remaining conservatism could save more than the MIP gap asked for
(`chord_slack_usd`) -- moves each used pool's chord to k = n* - 1 and solves again
from the previous solution. The final plan meets the exact Erlang C curve at its own
pool sizes, and the verifier re-checks it at every hour. The reported bound and gap
are those of the linearised model at its final chords.

The capacity curve of a failover regime is built for the least favourable traffic mix
routing can produce at that survivor: between none and all of the lost region's
traffic (eleven diverted shares), the smallest wait budget in units of
(C_a^2 + C_s^2)/2 x E[S]. Work is exact per source (own requests at the survivor's hit
rate, diverted ones cold and clamped), so any routing the model picks verifies.

## Valid inequalities and pruning ("tighter candidate tables")

* Decode and replica shapes another shape dominates (its chips divide the other's and as
  many slices carry at least as much at no more cost in every regime) are dropped.
* Slice-count bounds come from the pods that can exist and the most demand a pool can
  see; rate variables are bounded by each region's peak plus the largest region it
  absorbs -- no 1e9 anywhere.
* `c_fleet_min_slices`: a chosen shape has at least the slices the normal peak needs (with
  `serving.mixed_shapes`, for decode and replica pools only a replica shape's n_ref: one
  shape of a mixture may carry any part of the load).
* Region-loss scenarios: of a loss's 24 hours only those whose load vector (the lost
  region and its absorbers) no other hour dominates component-wise (exact: demand is
  monotone in those loads for any routing).

None of these cuts off an optimum. `tests/families/test_strengthening.py` solves the
model with all of them and without any (no `c_fleet_min_slices`, every shape, all 24
hours of every loss) to optimality (mip_gap 0) and requires the same objective to
1e-6: on generated tiny instances of 2-3 regions sharing one diurnal curve (hypothesis),
and, marked slow, on `benchmarks/generate.py`'s 3-region, 2-tier, 3-chip instance
scaled to 150 req/s. The speed of the generated 20-region instance (issue 19,
docs/benchmarks.md) comes from this model and the start below, not from a decomposed
solve: the model solved is always the whole one.

## The component start (a first incumbent, `--component-start`)

With the failover routing shares (`v_route_bp`) fixed, the regions no longer share a
row: a survivor's load in every loss scenario is a constant, and each region's pools,
pods and warm pool form a MIP of their own. The first HiGHS solve of a model of at least
2,000 integer variables (`fleetplan.sizing.COMPONENT_START_MIN_INTEGERS`; `--component-start
on|off` overrides) therefore starts from:

1. the LP relaxation, whose routing shares are kept;
2. the connected components of the model's rows and remaining columns (found on the
   constraint matrix, not assumed: one per region on the sizing model), each solved as
   a MIP to a 0.1% gap (`fleetplan.solvers.components.SUB_MIP_GAP`), the fixed columns'
   activity moved into the row bounds;
3. their union, feasible for the whole model by construction (every row lies in one
   component or holds only fixed columns, which the LP solution satisfies), offered to
   HiGHS as its incumbent (`setSolution`).

HiGHS then solves the whole model -- routing free again -- and proves its gap against
that incumbent; it keeps it or improves it. The start's cost is that of the LP's routing
with every region sized exactly for it (measured 0.4-1.2% above HiGHS's best bound on the
generated instances). Fix-and-optimise, relax-and-fix: Pochet and Wolsey, *Production
Planning by Mixed Integer Programming* (Springer, 2006), ch. 3.6. What the start did is
one of the plan's diagnostics. `tests/unit/test_component_start.py` checks a hand-built
two-region case against enumeration and the sizing solve with and without the start.

## Placement-aware sizing: the pod stage

With `placement.size_with_pods` (the default) and a tier that may run disaggregated, the
driver sizes twice (`fleetplan.sizing.pod_stage.size_with_pods`): the model above (the *plain* sizing:
routing, pools, a bound), then the same model with two more families, *pods* and *DCN
share* (below), that count every slice in a pod (ICI domain) and keep each tier's
prefill -> decode KV that crosses the DCN within its ceiling. The second solve keeps the
plain solution's failover routing fixed: with it a survivor's loads in every region loss
are constants and the DCN rows stay linear (with the routing free, the per-slice prefill
load lambda / n would multiply a routing share). The plain sizing's bound is a bound of
the placement-aware problem too (it only adds constraints), so a plan's `solver.bound` and
`solver.gap` are against it -- the placement's cost lies in that gap -- and
`solver.pod_stage_gap` is the pod stage's own proof with the routing fixed. What is known of
every placement before any is found enters the plain sizing already: a prefill shape that no
decode slice of its tier can share a pod with sends every request's KV over the DCN, so it
is sized with that TTFT composition in both solves (the prefill family, "Prefill shapes
whose KV always crosses the DCN"), and that cost is inside the bound.

With the routing fixed the regions share no row but the objective (each region's overage
has its own cap, `c_dcn_over_cap`), so every solve of the pod stage is *separable*: each
connected component of the constraint graph -- a region, small ones gathered -- is its own
HiGHS MIP, solved one per core (`fleetplan.solvers.components.solve_blocks`), and the
plan's objective and bound are the blocks' sums; a block with no incumbent is named.

The pod stage starts from a placed fleet: the same model with every prefill pool at the
plain solution's shape, at least its size and counted at its level (each kit's excess a
known number); per region its LP relaxation, then its MIP with the kits restricted to the
LP's and their neighbours (one slice more or fewer of prefill or decode), and every kit
where that is not within the gap asked for of the region's LP bound
(`fleetplan.sizing.pods`; a restricted MIP whose dual bound passes that gap after its root
stops there, its fleet the every-kit MIP's start). A placed fleet within the gap asked for of the plain sizing's
bound -- a bound of this problem too -- is the plan; otherwise the whole pod model is
solved from it, each region to a quarter of the gap or 1,000 branch-and-bound nodes (a work
limit, the same on any machine; none when `--mip-gap 0` asks for a proof). A
region with no placed start within the ceilings (typically a tier whose prefill slice fills
a pod, so all its KV crosses) is started again with its overage free, the other regions'
values held: its least overage (to a 1e-4 gap), that capped, then its cost; the whole model
then solves with those caps from there, each region with its kits restricted to its LP
relaxation's and its start's neighbourhood (to the gap or 1,000 branch-and-bound nodes;
the stage's bound the larger of the regions' every-kit LP bounds and the plain sizing's). Its
TTFT composition: each tier has DCN share levels -- where the percentile request's compute
+ exposed KV changes as a share of the requests pay the DCN transfer
(`perf.pools.dcn_levels`, exact breakpoints of the mixture) -- with a capacity curve each
(`c_prefill_ttft_dcn`, the prefill family's DCN level rows); a region-tier picks one and its
share is capped there in every scenario, so a tighter ceiling only removes levels and never
lowers the cost. When no fleet within the pods keeps every share within its ceiling and
serves everything, the pod stage minimises the KV over the ceilings first (an overage level,
every request's DCN transfer in the TTFT), then the cost; the plan names each tier over its
ceiling and why (`plan.dcn[].why`: no prefill + decode shape pair fits one pod, or the pods
and inventory). A region x tier with no overage in the least-overage fleet is then held
within its ceiling (its overage and overage level fixed at 0), so the cost stage cannot
move its region's overage onto it. Where a tier's own ceiling is above the overall one, the
region's share over all tiers may pass `placement.dcn_share_max` the same way, declared on
that tier's `why`. Lexicographic, so not monotone in the ceilings once an overage is
declared: what counts as over decides what is minimised first (the newcomer trial's
Gemini with 32-chip pods: the long tier's ceiling raised from 5% to 100% makes the region's
overall overage, not the tier's, the one minimised, and the plan 0.4% dearer); without an
overage a tighter ceiling never lowers the cost (the property test). A plan that leaves load unserved (no fleet serves everything) is not sized
with its pods (its diagnostics say so).

Exact: `tests/families/test_pods.py` enumerates every count and every pod content of small
instances (one region, two or three pods, one or two tiers, DCN ceilings 0-50%) with its
own feasibility check from the perf functions and the routing rule, and the solver
(`mip_gap` 0) matches it; a tighter ceiling never lowers the cost (hypothesis). Not exact,
and said: the routing is the plain sizing's; warm slices that join a prefill pool in a loss
count as crossing; a pod's DCN egress is split over its tiers by chips; a large pool's
level ladder is at most one step (1-2% of the pool) conservative; where a region's least
overage is found at the plain sizing's prefill pools (the per-region start above), the
overage is the least of those pools, not of every fleet.

## CP-SAT

""" + "\n".join(line.strip() if line.strip() else "" for line in (cpsat.__doc__ or "").splitlines()) + r"""

The same model, written once: `--solver cpsat` exports the Pyomo model to MPS and
solves it through OR-Tools' `model_builder` with the CP-SAT backend.

"""


def _markdown(doc: str) -> str:
    """reStructuredText math in docstrings -> Markdown: ``.. math::`` blocks become
    ```math fences (one equation per paragraph), :math:`x` becomes $x$."""
    out: list[str] = []
    lines = inspect.cleandoc(doc).splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == ".. math::":
            i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith("   ")):
                block.append(lines[i][3:] if lines[i].startswith("   ") else "")
                i += 1
            eqs = "\n".join(block).strip().split("\n\n")
            for eq in eqs:
                out += ["```math", eq.strip(), "```"]
            out.append("")
            continue
        out.append(re.sub(r":math:`([^`]*)`", r"$\1$", lines[i]))
        i += 1
    return "\n".join(out)


def render() -> str:
    parts = [INTRO, "## Constraint families\n"]
    for title, mod, fn in FAMILIES:
        parts.append(f"### {title} -- `{mod.__name__}.{fn}`\n")
        parts.append(_markdown(mod.__doc__ or "") + "\n")
    parts.append("## Assembly -- `fleetplan.models.sizing.build.build_sizing_model`\n")
    parts.append(_markdown(build.__doc__ or "") + "\n")
    return "\n".join(parts)


if __name__ == "__main__":  # pragma: no cover
    print(render(), end="")
