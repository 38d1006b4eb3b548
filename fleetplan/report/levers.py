"""The brief's cost levers (section 7), computed: each lever switched off and on, the
instance re-solved either way, and the levers ranked by the $/1M output tokens they
save.

Levers (the brief's order):

1. ``batch_infill`` -- sell the trough's idle capacity to the batch class. The same
   fleet, no re-solve: the plan's cost over interactive output tokens against its cost
   over interactive plus the batch output the idle trough capacity serves
   (:func:`fleetplan.results.loads.batch_infill_tokens_per_day`).
2. ``hit_rate_10``, ``hit_rate_20`` -- +10 and +20 points of prefix-cache hit rate.
3. ``decode_occupancy`` -- decode rides to the SLO knee (the instance's batch caps and
   knee margin) against a fixed safe batch (``--safe-batch``, the brief's 128; the knee
   still caps it where the knee is lower).
4. ``speculation`` -- speculative decoding behind the load-aware switch (only where it
   raises tokens/s at a legal operating point, so "below the knee") against none.
5. ``kv_fp8`` -- FP8 KV cache (1 byte per element) against BF16 (2 bytes).

Every number is a plan's: the lever's 'off' and 'on' are both solved (one of them is
usually the instance itself, whose plan is the one ``fleetplan solve`` writes) with
:func:`fleetplan.solve` and verified; each solve is deterministic and records how it
ended and its gap (:mod:`fleetplan.report.sweep`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from fleetplan import __version__
from fleetplan.instance.io import instance_hash
from fleetplan.instance.schema import Instance
from fleetplan.perf.speculation import class_acceptance_rate
from fleetplan.report import modify
from fleetplan.report.sensitivity import SWEEP_OPTIONS
from fleetplan.report.sweep import SolveSummary, compare, instance_data, make_task, run_solves, sweep_notes, sweep_options_doc
from fleetplan.results.baseline import SAFE_BATCH

__all__ = ["Lever", "LEVERS", "LeverRow", "LeversReport", "lever_variants", "lever_tasks", "run_levers", "LEVERS_SCHEMA_VERSION"]

LEVERS_SCHEMA_VERSION = 2


@dataclass(frozen=True)
class Lever:
    """A cost lever. ``variants(data, safe_batch)`` returns (off data, on data, off
    text, on text) -- None for the instance as given -- or a reason it does not apply
    (a str)."""

    id: str
    name: str
    mechanism: str
    variants: Callable[[dict, int], tuple | str]


def _infill(data, _b):
    if not any(c.get("sheddable") for c in data["workload"]["classes"].values()):
        return ("not applicable: the instance has no batch class (no traffic class with sheddable: true) to sell the trough's idle "
                "capacity to; add one to price this lever")
    return (None, None, "interactive output tokens only", "plus the batch class in the trough's idle capacity")


def _hit(points: float):
    def f(data, _b):
        try:
            on = modify.shift_hit_rate(data, points)
        except ValueError as e:
            return f"not applicable: {e}"
        h = data["workload"]["prefix_hit_rate"]
        return (None, on, f"hit rate {h:.0%}", f"hit rate {h + points:.0%}")
    return f


def _occupancy(data, safe):
    if data.get("serving", {}).get("mode", "auto") == "colocated":  # auto may run disaggregated pools
        return "not applicable: colocated replicas decode at the occupancy their load sets (no batch cap in the replica model)"
    caps = data["serving"]["batch_caps"]
    if max(caps) <= safe:
        return f"not applicable: the instance's largest batch cap ({max(caps)}) is already at or below the safe batch {safe}"
    margin = data["serving"].get("decode_knee_margin", 0.0)
    return (modify.fixed_batch(data, safe), None, f"fixed batch {safe} (or the knee, where lower)",
            f"ride to the knee (batch caps up to {max(caps)}, normal hours at {1 - margin:.0%} of the knee)")


def _speculation(data, _b):
    if data.get("serving", {}).get("mode", "auto") == "colocated":  # auto may run disaggregated pools
        return "not applicable: colocated replicas do not speculate in fleetplan's replica model"
    spec = data.get("speculation", {})
    thr = spec.get("alpha_threshold", 0.45)

    def best_rate(c: dict) -> float:  # the class's acceptance rate at its most favourable candidate k (the shortest)
        return max(class_acceptance_rate(c["spec_acceptance"], c.get("spec_acceptance_kind", "rate"), c.get("spec_acceptance_at_k"), k)
                   for k in spec.get("draft_tokens", [4]))

    if not any(best_rate(c) >= thr for c in data["workload"]["classes"].values()):
        return f"not applicable: no class's acceptance rate alpha reaches the switch threshold {thr:g} at any draft length"
    ks = ", ".join(str(k) for k in spec.get("draft_tokens", [4]))
    if spec.get("enabled", True):
        return (modify.set_speculation(data, False), None, "off", f"on where it pays (draft k in {ks})")
    return (None, modify.set_speculation(data, True), "off", f"on where it pays (draft k in {ks})")


def _kv(data, _b):
    b = float(data["model"]["bytes_per_kv_element"])
    off = None if b == 2.0 else modify.set_kv_bytes(data, 2.0)
    on = None if b == 1.0 else modify.set_kv_bytes(data, 1.0)
    return (off, on, "BF16 KV (2 bytes per element)", "FP8 KV (1 byte per element)")


LEVERS: list[Lever] = [
    Lever("batch_infill", "batch-API infill", "sell the trough's idle capacity (prefill TTFT budget and decode tokens/s left, hour by hour) "
          "to the batch class; same fleet, no re-solve", _infill),
    Lever("hit_rate_10", "prefix hit rate +10 points", "every prefix hit rate +0.10 (routing and cache keying); re-solved", _hit(0.10)),
    Lever("hit_rate_20", "prefix hit rate +20 points", "every prefix hit rate +0.20; re-solved", _hit(0.20)),
    Lever("decode_occupancy", "decode occupancy to the knee", "decode batch rides the measured batch -> TPOT curve to the SLO knee instead "
          "of a fixed safe batch; re-solved", _occupancy),
    Lever("speculation", "speculation below the knee", "speculative decoding where it raises tokens/s at an SLO-legal operating point, "
          "for the classes whose alpha reaches the threshold; re-solved", _speculation),
    Lever("kv_fp8", "FP8 KV", "KV cache in FP8 instead of BF16: half the KV bytes per token (more residents per slice, shorter decode steps, "
          "faster KV transfer); re-solved", _kv),
]


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LeverRow(_F):
    """One lever, off and on (USD per 1M output tokens at the daily mean unless named)."""

    id: str
    name: str
    mechanism: str
    applicable: bool
    rank: int | None = Field(description="1 = saves the most; null when not applicable or either side not verified.")
    off_label: str = ""
    on_label: str = ""
    off: SolveSummary | None = None
    on: SolveSummary | None = None
    off_usd_per_1m_output: float | None = None
    on_usd_per_1m_output: float | None = None
    delta_usd_per_1m_output: float | None = Field(None, description="on - off (negative: the lever saves).")
    delta_usd_per_1m_output_at_peak: float | None = Field(None, description="The same over the sum of regional peak output tokens (the brief's convention); null for batch infill, which sells the trough.")
    delta_chips: int | None = Field(None, description="Chips on - off.")
    delta_fleet_cost_per_hour_usd: float | None = None
    within_solver_gap: bool = Field(False, description="|delta $/h| is within the two solves' MIP gaps: the sign is not resolved.")
    comparable: bool = Field(True, description="Both sides have a plan and neither was stopped by the --time-limit guard; false: the "
                                               "saving is not reproducible and the lever is not ranked.")
    note: str = ""


class LeversReport(_F):
    schema_version: Literal[2] = LEVERS_SCHEMA_VERSION
    fleetplan_version: str
    instance_name: str
    instance_hash: str
    options: dict[str, float | str | int | None]
    base: SolveSummary
    rows: list[LeverRow] = Field(description="Ranked: the largest saving first; levers that do not apply or whose solves are not verified last.")
    notes: list[str]


def lever_variants(inst: Instance, safe_batch: int = SAFE_BATCH) -> tuple[dict, dict[str, tuple | str]]:
    """(the base data the solves start from: the instance as given, {lever id: (off, on,
    off text, on text) or a reason it does not apply})."""
    data = instance_data(inst)
    return data, {lv.id: lv.variants(data, safe_batch) for lv in LEVERS}


def run_levers(inst: Instance, executor, options: dict | None = None, safe_batch: int = SAFE_BATCH,
               progress: Callable[[str], None] | None = None, keep_inventory: bool = False) -> LeversReport:
    """Solve the instance and each lever's other side with ``executor``; the ranked report.

    Args: options: solve options (as :data:`fleetplan.report.sensitivity.SWEEP_OPTIONS`);
        safe_batch: the fixed decode batch of decode_occupancy's 'off' (requests per slice);
        keep_inventory: keep the instance's pods (see :func:`run_sensitivity`).
    """
    options = {**SWEEP_OPTIONS, **(options or {})}
    tasks = lever_tasks(inst, options, safe_batch, keep_inventory)
    variants = lever_variants(inst, safe_batch)[1]
    res = run_solves(tasks, executor, progress, inventory=instance_data(inst))
    base = res["base"]
    rows = []
    for lv in LEVERS:
        v = variants[lv.id]
        if isinstance(v, str):
            rows.append(LeverRow(id=lv.id, name=lv.name, mechanism=lv.mechanism, applicable=False, rank=None, note=v))
            continue
        off = res.get(f"{lv.id}:off", base.model_copy(update={"key": f"{lv.id}:off (the instance)"}))
        on = res.get(f"{lv.id}:on", base.model_copy(update={"key": f"{lv.id}:on (the instance)"}))
        if lv.id == "batch_infill":
            a, b = base.cost_per_1m_output_tokens_usd, base.cost_per_1m_output_tokens_with_infill_usd
            ok = base.status == "verified"
            rows.append(LeverRow(id=lv.id, name=lv.name, mechanism=lv.mechanism, applicable=True, rank=None, off_label=v[2], on_label=v[3],
                                 off=base, on=base, off_usd_per_1m_output=a, on_usd_per_1m_output=b,
                                 delta_usd_per_1m_output=round(b - a, 6) if (a is not None and b is not None) else None,
                                 delta_chips=0, delta_fleet_cost_per_hour_usd=0.0,
                                 note="" if ok else f"the instance's plan is {base.status}"))
            continue
        ok = off.status == on.status == "verified"
        d = lambda f: (round(getattr(on, f) - getattr(off, f), 6) if getattr(on, f) is not None and getattr(off, f) is not None else None)  # noqa: E731
        dh = d("fleet_cost_per_hour_usd")
        how = compare(off, on)
        note = ""
        if not ok:
            note = "; ".join(f"{side}: {s.status}" + (f" ({s.message})" if s.message else "") for side, s in (("off", off), ("on", on)) if s.status != "verified")
        cut = [f"{side}: cut at the time limit" + (f", {s.mip_gap:.2%} from its bound" if s.mip_gap is not None else "")
               for side, s in (("off", off), ("on", on)) if s.time_limited]
        if cut:
            note = "; ".join(filter(None, [note, "; ".join(cut) + ": not reproducible, not ranked"]))
        rows.append(LeverRow(id=lv.id, name=lv.name, mechanism=lv.mechanism, applicable=True, rank=None, off_label=v[2], on_label=v[3], off=off, on=on,
                             off_usd_per_1m_output=off.cost_per_1m_output_tokens_usd, on_usd_per_1m_output=on.cost_per_1m_output_tokens_usd,
                             delta_usd_per_1m_output=d("cost_per_1m_output_tokens_usd"),
                             delta_usd_per_1m_output_at_peak=d("cost_per_1m_output_tokens_at_peak_usd"),
                             delta_chips=on.chips - off.chips, delta_fleet_cost_per_hour_usd=dh,
                             within_solver_gap=bool(how == "within_gap" and dh is not None and abs(dh) > 1e-9),
                             comparable=how != "not_comparable", note=note))
    ranked = sorted([r for r in rows if r.applicable and r.delta_usd_per_1m_output is not None and not r.note],
                    key=lambda r: (r.delta_usd_per_1m_output, r.id))
    rest = [r for r in rows if r not in ranked]
    rows = [r.model_copy(update={"rank": i + 1}) for i, r in enumerate(ranked)] + rest
    points = {"base": base, **{k: v for k, v in res.items() if k != "base"}}
    notes = sweep_notes(options, points, keep_inventory)
    notes[0] += "; a saving within the two sides' gaps is marked: its sign is not resolved"
    notes.insert(1, "$/1M output tokens carry all fleet cost at the daily mean demand (the plan's headline); the brief's convention divides "
                    "by the sum of the regional peaks instead (its column)")
    return LeversReport(fleetplan_version=__version__, instance_name=inst.name, instance_hash=instance_hash(inst),
                        options={**sweep_options_doc(options, keep_inventory), "safe_batch": safe_batch}, base=base, rows=rows, notes=notes)


def lever_tasks(inst: Instance, options: dict, safe_batch: int = SAFE_BATCH, keep_inventory: bool = False) -> list[dict]:
    """The solve tasks of :func:`run_levers`: the instance as given ('base', never lifted) and
    each lever's side that is not the instance ('LEVER:off' / 'LEVER:on'); unless
    ``keep_inventory``, a side the pod inventory cannot serve is solved again with it
    lifted (:data:`modify.INVENTORY_LIFT`)."""
    data, variants = lever_variants(inst, safe_batch)
    tasks = [make_task("base", data, {**options, "lift_inventory": 0})]
    side_opts = {**options, "lift_inventory": 0 if keep_inventory else modify.INVENTORY_LIFT}
    for lid, v in variants.items():
        if isinstance(v, str):
            continue
        for side, d in (("off", v[0]), ("on", v[1])):
            if d is not None:
                tasks.append(make_task(f"{lid}:{side}", d, side_opts))
    return tasks
