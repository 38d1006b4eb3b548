"""The Python API behind ``fleetplan.<name>``: the commands' work as functions that take
and return fleetplan's own documents (pydantic models), for notebooks and scripts.

Each function is the command's core without the terminal: the same checks (a plan is
re-checked against the instance it was solved for; bad input raises
:class:`~fleetplan.errors.InputError` naming the field, as the CLI's exit 2), the same
models, the same numbers. Nothing here prints or writes files. A page with a worked
example: ``docs/api.md``.

Instances are always checked: :func:`fleetplan.load_instance` (a YAML path or bundled
name) and :func:`fleetplan.parse_instance` (a mapping) run the schema and every
cross-field check and raise :class:`~fleetplan.errors.InstanceError` listing every
problem. A plan carries the instance it was solved for; every function that takes a plan
takes ``instance=None`` to use that one, or an Instance / YAML path / bundled name that
must hash to the plan's (:func:`fleetplan.results.verify.plan_instance`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from fleetplan.instance.schema import Instance

if TYPE_CHECKING:  # the optimisation stack loads on first use, not on import
    from fleetplan.report.executor import SweepExecutor
    from fleetplan.report.levers import LeversReport
    from fleetplan.report.render import Report
    from fleetplan.report.sensitivity import SensitivityReport
    from fleetplan.export.controller import ControllerExport
    from fleetplan.results.placement import Placement
    from fleetplan.results.plan import Plan
    from fleetplan.whatif.report import WhatIfReport
    from fleetplan.sim.report import SimReport

__all__ = ["load_plan", "plan_instance", "what_if", "place", "simulate", "build_report", "render_html", "sensitivity", "levers"]

InstanceLike = Instance | str | Path


def _instance(instance: InstanceLike) -> Instance:
    from fleetplan.instance.io import load_instance

    return instance if isinstance(instance, Instance) else load_instance(instance)


def load_plan(path: str | Path) -> "Plan":
    """Read a plan file written by ``fleetplan solve -o`` (or ``plan.model_dump_json()``).

    Returns: the :class:`~fleetplan.results.plan.Plan`.
    Raises: PlanError naming the file: missing, not JSON, or fields that do not validate
    (the message names each field and what it expects)."""
    import json

    from pydantic import ValidationError

    from fleetplan.errors import PlanError, Problem
    from fleetplan.instance.io import validation_problems
    from fleetplan.results.plan import Plan

    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8-sig"))
    except OSError as e:
        raise PlanError(str(p), [Problem("(file)", f"cannot read: {e.strerror or e}; give the plan JSON written by `fleetplan solve -o`.")]) from None
    except UnicodeDecodeError as e:
        raise PlanError(str(p), [Problem("(file)", f"not UTF-8 text (byte {e.start}); give the plan JSON written by `fleetplan solve -o`.")]) from None
    except json.JSONDecodeError as e:
        raise PlanError(str(p), [Problem("(file)", f"not a JSON plan: {e}.")]) from None
    try:
        return Plan.model_validate(data)
    except ValidationError as e:
        raise PlanError(str(p), validation_problems(e, reference="`fleetplan schema plan`")) from None


def plan_instance(plan: "Plan", instance: InstanceLike | None = None) -> Instance:
    """The instance ``plan`` was solved for (the one it carries, or ``instance``, checked
    to hash to the plan's). Raises PlanError / InstanceError (see
    :func:`fleetplan.results.verify.plan_instance`)."""
    from fleetplan.results.verify import plan_instance as _plan_instance

    return _plan_instance(plan, instance)


def _checked(plan: "Plan", instance: InstanceLike | None) -> Instance:
    """The plan's instance, and the plan checked to be one the what-if, the placement
    and the simulator can stand on (:func:`fleetplan.results.verify.check_plan_contents`)."""
    from fleetplan.results.verify import check_plan_contents

    inst = plan_instance(plan, instance)
    check_plan_contents(inst, plan)
    return inst


def what_if(plan: "Plan", lose: Iterable[str] = (), lose_pods: Iterable[str] = (), hour: int | str = "peak", phase: str = "both",
            routing: str = "optimise", controller: "ControllerExport | None" = None, instance: InstanceLike | None = None,
            progress: Callable[[str], None] | None = None, placement: "Placement | None" = None) -> "WhatIfReport":
    """``fleetplan whatif``: hold the plan's installed fleet, lose regions and/or pods at
    an hour, decide routing, the admission clamp, shedding and warm-pool slices
    (lexicographic: least residual, then fewest warm slices, least clamping, least
    shedding) and account for every slice with the perf models (``docs/whatif.md``).
    (Named ``what_if``: ``fleetplan.whatif`` is the module that does the work.)

    Args:
        lose: regions lost whole (two for N-2).
        lose_pods: pods lost inside surviving regions, 'REGION:N' or 'REGION:CHIP:N'.
        hour: 0-23 (UTC), 'peak' (the hour of the largest lost load) or 'all' (24 events per phase).
        phase: 'steady' (post-failover), 'transient' (the cache re-warm dip) or 'both'.
        routing: 'optimise' (the model routes), 'proportional' (shares fixed to the
            survivors' own load), 'plan' (the plan's failover shares held: what is
            deployed) or 'controller' (``controller``'s failover shares held).
        controller: a controller document (:class:`~fleetplan.export.controller.ControllerExport`,
            ``fleetplan export``), with routing 'controller'.
        placement: a placement of this plan sized with its pods (schema_version 2,
            ``fleetplan place``): each region-loss event then carries ``placement_dcn``, per
            surviving region x tier the share of requests (fraction) whose KV crosses the
            DCN by the placement's routing in that loss, beside its ceiling and the plan's
            prediction (``--placement``; docs/whatif.md).
    Returns: :class:`~fleetplan.whatif.report.WhatIfReport`; ``events`` has one
        :class:`~fleetplan.whatif.report.EventResult` per hour and phase (the transient
        first when both) with the routes (shares, req/s), per survivor the multipliers
        and per pool the slices needed, each mitigation in slices, the residual (req/s or
        output tokens/s) and the TTFT it leads to (ms).
    Raises: InputError naming the option (unknown region, hour outside 0-23, more pods
        than the plan has, routing shares that do not sum to 1, a placement of another
        plan or without its losses' routing ...); PlanError when the instance is not the
        plan's.
    """
    from fleetplan.errors import InputError, Problem
    from fleetplan.whatif import PHASES, parse_event, whatif

    inst = _checked(plan, instance)
    held = None
    if routing == "controller":
        if controller is None:
            raise InputError("routing", [Problem("controller", "routing='controller' holds a controller document's failover shares: pass "
                                                               "controller=ControllerExport (fleetplan export --format controller).")])
        held = [(x, s.to, s.tier, s.share) for x, shares in sorted(controller.failover_routing.items()) for s in shares]
    if phase not in (*PHASES, "both"):
        raise InputError("phase", [Problem("phase", f"{phase!r}; choose steady, transient or both.")])
    events = []
    for ph in (PHASES if phase == "both" else (phase,)):
        events += parse_event(inst, plan, list(lose), list(lose_pods), hour, ph, routing, held)
    return whatif(inst, plan, events, progress=progress, placement=placement)


def place(plan: "Plan", current: "Placement | None" = None, dcn_slack: float = 0.01, instance: InstanceLike | None = None,
          time_limit_s: float | None = 60.0) -> "Placement":
    """``fleetplan place``: every slice of the plan (warm slices too) into a pod (ICI
    domain) of its region and whole adjacent VMs, least KV traffic over the DCN first,
    then (with ``current``) fewest moves, then fewest pods (``docs/placement.md``). A plan
    sized with its pods (``plan.pods``) is placed as its pods say, improved only where no
    tier's DCN share rises in any scenario, with the routing of every region loss
    (``Placement.scenarios``, schema_version 2); ``dcn_slack`` does not apply to it.

    Args:
        current: the placement in force, of this plan or an earlier one of the same
            regions and pods; slices stay unless moving them lowers the DCN share by more
            than ``dcn_slack`` (fraction of the region's requests).
        time_limit_s: per placement stage (seconds of wall clock).
    Returns: :class:`~fleetplan.results.placement.Placement` (pods, slices with chips and
        VMs, prefill -> decode routing shares, DCN share as a fraction), re-checked by
        :func:`~fleetplan.results.placement.verify_placement`.
    Raises: InputError when ``current`` is of another fleet; PlacementInfeasible when the
        slices do not fit the pods that are up; RuntimeError when the independent check
        of the result fails (a bug).
    """
    from fleetplan.placement import place as _place
    from fleetplan.results.placement import verify_placement

    inst = _checked(plan, instance)
    pl = _place(inst, plan, current=current, dcn_slack=dcn_slack, time_limit_s=time_limit_s)
    bad = verify_placement(inst, plan, pl)
    if bad:
        raise RuntimeError("the independent placement check failed: " + "; ".join(f"{v.check} {v.where}: {v.message}" for v in bad[:10]))
    return pl


def simulate(plan: "Plan", region: str, tiers: Iterable[str] | None = None, scenario: str = "normal", duration_s: float = 600.0,
             warmup_s: float = 30.0, arrivals: str = "poisson", seed: int = 0, scale: float = 1.0, output_lengths: str = "fixed",
             router: str | None = None, placement: "Placement | str | None" = None, instance: InstanceLike | None = None,
             progress: Callable[[str, float], None] | None = None, kv_routing: str = "placement") -> "SimReport":
    """``fleetplan simulate``: run one region's pools of the plan request by request and
    decode step by decode step, and set every measured latency beside the plan's
    prediction and the closed-form model (``docs/validation.md``).

    Args:
        scenario: 'normal', a region loss 'lose:X@HH' at any hour 0-23 (one the plan does
            not list is built from the loads that hour, the plan's routing held and the
            what-if's mitigations), or 'sizing'.
        duration_s, warmup_s: simulated seconds measured, and before the window.
        arrivals: 'poisson', or 'trace:FILE' (azure, mooncake or csv; rescaled to the plan's rate).
        scale: fraction of the slices and load simulated, in (0, 1].
        router: how replicas and prefill slices are picked, 'least-work', 'round-robin',
            'random' or 'prefix-aware'; None (the default) the plan's (``plan.router``, else
            its instance's ``serving.router``).
        placement: a placement of this plan (KV over ICI inside a pod, DCN between pods), or
            'plan' for the plan's own pods (a plan sized with its pods; KV routed by the plan's
            rule); the DCN share and its TTFT cost are measured beside the plan's prediction.
        kv_routing: with a placement, 'placement' (its routing weights, the normal peak's in a
            region loss it has none for) or 'rule' (the plan's rule on the placed pods).
    Returns: :class:`~fleetplan.sim.report.SimReport`; per tier the counts, goodput
        (fraction) and per pool the metrics (TTFT, queue wait, TPOT, ITL in ms; busy
        fraction) with their 95% intervals, the plan's values and the ratios.
    Raises: InputError naming the option (unknown region, tier or scenario, scale outside
        (0, 1], fewer than one request in the window, a placement of another plan ...).
    """
    from fleetplan.errors import InputError
    from fleetplan.results.placement import plan_hash, verify_placement
    from fleetplan.sim.run import simulate as _simulate

    inst = _checked(plan, instance)
    if router is None:
        router = plan.router or inst.serving.router
    if placement == "plan":
        from fleetplan.errors import Problem
        from fleetplan.sim.dcn import plan_pods

        if plan.pods is None:
            raise InputError("placement", [Problem("placement", "'plan' simulates the plan's own pods; this plan was sized without them.")])
        placement = plan_pods(plan)
    elif placement is not None:
        from fleetplan.errors import Problem

        if placement.plan_hash != plan_hash(plan):
            raise InputError("placement", [Problem("plan_hash", "the placement was made for another plan; place this plan first.")])
        bad = verify_placement(inst, plan, placement)
        if bad:
            raise InputError("placement", [Problem(f"{v.check} {v.where}", v.message) for v in bad[:20]])
    return _simulate(inst, plan, region, list(tiers) if tiers else None, scenario, duration_s, warmup_s, arrivals, seed, scale, output_lengths,
                     router, placement, progress=progress, kv_routing=kv_routing)


def build_report(plan: "Plan", instance: InstanceLike | None = None, progress: Callable[[str], None] | None = None) -> "Report":
    """``fleetplan report``: the planner's page of the plan -- fleet, slice memory map,
    batch -> TPOT with the knee, TTFT vs utilisation, hourly load vs capacity, the
    region-loss cascade, cost per 1M tokens (``docs/reports.md``).

    Returns: :class:`~fleetplan.report.render.Report`: ``data`` (the numbers behind
        every figure, a pydantic document; ``fleetplan schema report``) and ``figures``
        ({name: PNG bytes}); :func:`render_html` makes the self-contained page.
    Raises: InputError when the independent verifier finds violations (the report draws
        only plans that verify); PlanError when the instance is not the plan's.
    """
    from fleetplan.errors import InputError, Problem
    from fleetplan.report.render import build_report as _build
    from fleetplan.results.verify import verify

    inst = plan_instance(plan, instance)
    broken = verify(inst, plan)
    if broken:
        raise InputError("plan", [Problem("(verify)", f"the independent verifier finds {len(broken)} violation(s); the report draws only "
                                                      "plans that verify: re-solve.")] + [Problem(f"{v.check} {v.where}", v.message) for v in broken[:20]])
    return _build(inst, plan, progress=progress)


def render_html(report: "Report") -> str:
    """The report as one self-contained HTML page (inline CSS, figures as PNG data URIs)."""
    from fleetplan.report.render import render_html as _render

    return _render(report)


def _sweep_options(mip_gap: float, time_limit_s: float) -> dict:
    from fleetplan.errors import InputError, Problem

    if not 0.0 <= mip_gap <= 1.0:
        raise InputError("mip_gap", [Problem("mip_gap", "a relative MIP gap in [0, 1] (fraction; 0.01 = 1%).", repr(mip_gap))])
    if not time_limit_s > 0:
        raise InputError("time_limit_s", [Problem("time_limit_s", "a positive wall-clock limit per solve (seconds).", repr(time_limit_s))])
    return {"solver": "highs", "mip_gap": mip_gap, "time_limit_s": time_limit_s, "threads": 1}


def _executor(executor: "str | SweepExecutor", workers: int | None, ray_address: str | None) -> "SweepExecutor":
    from fleetplan.report.executor import SweepExecutor, get_executor

    if isinstance(executor, SweepExecutor):
        if workers is not None or ray_address is not None:
            from fleetplan.errors import InputError, Problem

            raise InputError("executor", [Problem("executor", "an executor object is configured by itself: drop workers= and ray_address=.")])
        return executor
    return get_executor(executor, workers, ray_address)


def sensitivity(instance: InstanceLike, params: Iterable[str] | Mapping[str, tuple[float, float] | None] | None = None,
                executor: "str | SweepExecutor" = "local", workers: int | None = None, mip_gap: float = 0.01, time_limit_s: float = 300.0,
                keep_inventory: bool = False, progress: Callable[[str], None] | None = None,
                ray_address: str | None = None) -> "SensitivityReport":
    """``fleetplan sensitivity``: re-solve the instance at both ends of each prior's
    range, the rest held (a tornado; ``docs/reports.md``).

    Args:
        params: which priors and ranges, in each prior's unit (fractions as fractions):
            'NAME=LO:HI' or 'NAME' strings, or a mapping {NAME: (LO, HI)} (None: the
            default range). Names: mfu, bandwidth, hit_rate, alpha, output, input,
            decode_mfu, tpot_inflation (and their long names). Default: the first six.
        executor: 'local' (a process pool of ``workers``), 'serial' (this process), 'ray'
            (Ray tasks, ``pip install 'fleetplan[ray]'``; ``docs/ray.md``), a plug-in
            ('package.module:factory'), or a
            :class:`~fleetplan.report.executor.SweepExecutor` (e.g.
            ``RayExecutor(address="ray://head:10001", max_retries=5)``).
        ray_address: with 'ray': 'ray://HOST:PORT', 'HOST:PORT', 'auto' or 'local'; None:
            this process's Ray connection if it has one, else ``$RAY_ADDRESS``, else a
            local cluster of ``workers`` CPUs started for the call.
        mip_gap, time_limit_s: per solve (fraction; seconds of wall clock). Every solve is
            deterministic (the same points on any machine); the time limit is a guard: a
            solve it stops is marked ``time_limited`` (not reproducible, not compared).
        keep_inventory: keep the pod inventory for every point (one beyond it is a
            shortfall plan) instead of solving such a point again with 4x the pods
            (flagged). The base is the instance as given: the plan ``fleetplan solve``
            writes.
    Returns: :class:`~fleetplan.report.sensitivity.SensitivityReport`: the base solve and
        per prior a row (low and high ends: chips, $/1M output tokens, status), sorted by
        the swing in $/1M output tokens.
    Raises: InputError naming the parameter (unknown name, LO >= HI, outside the physical
        range) or the executor (unknown; with 'ray': Ray not installed, a cluster that
        cannot be reached, a worker running another fleetplan).
    """
    from fleetplan.report.sensitivity import parse_params, run_sensitivity
    from fleetplan.report.sweep import instance_data

    inst = _instance(instance)
    if isinstance(params, Mapping):
        specs = [k if v is None else f"{k}={float(v[0])!r}:{float(v[1])!r}" for k, v in params.items()]
    else:
        specs = list(params or [])
    ranges = parse_params(specs, instance_data(inst))
    return run_sensitivity(inst, ranges, _executor(executor, workers, ray_address), _sweep_options(mip_gap, time_limit_s), progress=progress,
                           keep_inventory=keep_inventory)


def levers(instance: InstanceLike, safe_batch: int = 128, executor: "str | SweepExecutor" = "local", workers: int | None = None,
           mip_gap: float = 0.01, time_limit_s: float = 300.0, keep_inventory: bool = False, progress: Callable[[str], None] | None = None,
           ray_address: str | None = None) -> "LeversReport":
    """``fleetplan levers``: the brief's cost levers (batch infill, +10/+20 points of hit
    rate, decode to the knee, speculation, FP8 KV), each re-solved off and on and ranked
    by the $/1M output tokens it saves.

    Args: safe_batch: the fixed decode batch the occupancy lever is measured against
        (requests per slice); the rest (executor, workers, ray_address ...) as
        :func:`sensitivity`.
    Returns: :class:`~fleetplan.report.levers.LeversReport` (rows ranked, each with both
        solves and the saving in USD per 1M output tokens).
    Raises: InputError naming the executor or a bad option.
    """
    from fleetplan.report.levers import run_levers

    inst = _instance(instance)
    return run_levers(inst, _executor(executor, workers, ray_address), _sweep_options(mip_gap, time_limit_s), safe_batch, progress=progress,
                      keep_inventory=keep_inventory)
