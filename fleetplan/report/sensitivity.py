"""Sensitivity of the plan to the priors: re-solve at the low and high end of each
prior's range and keep chips, slices and $/1M output tokens (a tornado chart).

The brief (section 2) gives every constant +-2x error bars and names the load-bearing
ones: prefill MFU, achieved HBM bandwidth, prefix-cache hit rate, speculation
acceptance alpha, and the traffic's lengths. Each parameter is changed alone on the
instance as data (:mod:`fleetplan.report.modify`) and solved by
:func:`fleetplan.solve`; a point that cannot meet its SLOs (shortfall) or does not
validate is reported as such, not dropped.

The base is the instance as given, solved as ``fleetplan solve`` solves it: the plan it
writes. Every solve is deterministic (:mod:`fleetplan.report.sweep`): a point records how
its solve ended and the gap it reached, one the --time-limit guard stopped is flagged,
and each end is compared with the base (:func:`fleetplan.report.sweep.compare`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from fleetplan import __version__
from fleetplan.errors import InputError, Problem
from fleetplan.percent import fraction_text
from fleetplan.instance.io import instance_hash
from fleetplan.instance.schema import Instance
from fleetplan.report import modify
from fleetplan.report.sweep import Comparison, SolveSummary, compare, instance_data, make_task, run_solves, sweep_notes, sweep_options_doc

__all__ = ["Param", "PARAMS", "DEFAULT_PARAMS", "ParamRange", "parse_params", "SensitivityRow", "HitRateSlices",
           "SensitivityReport", "sensitivity_tasks", "run_sensitivity", "SENSITIVITY_SCHEMA_VERSION", "SWEEP_OPTIONS"]

SENSITIVITY_SCHEMA_VERSION = 2
#: Solve options of every sweep point unless given: `fleetplan solve`'s defaults (the
#: same MIP gap and thread; its time limit as each solve's guard), so the base is the
#: plan `fleetplan solve` writes.
SWEEP_OPTIONS = {"solver": "highs", "mip_gap": 0.01, "time_limit_s": 300.0, "threads": 1}


@dataclass(frozen=True)
class Param:
    """A prior the sweep can move.

    Attributes: name (canonical, the schema's field name), aliases (accepted on the
    command line), label (for people), unit ('fraction', 'tokens' or 'ratio'), lo/hi
    the physical bounds (inclusive unless hi_open), base(data) the instance's value,
    default(data) the default (low, high) range, apply(data, value) the modified data,
    inapplicable(data) a reason the parameter moves nothing here (or None).
    """

    name: str
    aliases: tuple[str, ...]
    label: str
    unit: Literal["fraction", "tokens", "ratio"]
    lo: float
    hi: float
    hi_open: bool
    base: Callable[[dict], float]
    default: Callable[[dict], tuple[float, float]]
    apply: Callable[[dict, float], dict]
    expected: str
    inapplicable: Callable[[dict], str | None] = lambda d: None

    def fmt(self, v: float) -> str:
        if self.unit == "fraction":
            return f"{v:.0%}" if abs(v * 100 - round(v * 100)) < 1e-9 else f"{v:.1%}"
        if self.unit == "tokens":
            return f"{v:,.0f}"
        return f"{v:.3g}"


def _clip(p_lo: float, p_hi: float, hi_open: bool) -> Callable[[float], float]:
    top = p_hi - 0.01 if hi_open else p_hi
    return lambda v: min(max(v, p_lo), top)


def _rel(lo_f: float, hi_f: float, p_lo: float, p_hi: float, hi_open: bool = False):
    c = _clip(p_lo, p_hi, hi_open)
    return lambda b: (c(b * lo_f), c(b * hi_f))


def _pts(d: float, p_lo: float, p_hi: float, hi_open: bool = False):
    c = _clip(p_lo, p_hi, hi_open)
    return lambda b: (c(round(b - d, 12)), c(round(b + d, 12)))


def _prior(field: str):
    return lambda data: float(data["priors"][field])


def _alpha_range(data: dict) -> tuple[float, float]:
    m = modify.mean_alpha(data)
    top = max(c["spec_acceptance"] for c in data["workload"]["classes"].values())
    hi = min(m * 1.4, m / top if top > 0 else m)  # no class above alpha = 1
    return m * 0.6, hi


def _no_speculation(data: dict) -> str | None:
    if data.get("serving", {}).get("mode", "auto") == "colocated":  # auto may run disaggregated pools
        return "colocated replicas do not speculate in fleetplan's replica model"
    if not data.get("speculation", {}).get("enabled", True):
        return "speculation is off in this instance (speculation.enabled: false)"
    return None


PARAMS: dict[str, Param] = {p.name: p for p in [
    Param("prefill_mfu", ("mfu",), "prefill MFU", "fraction", 0.001, 1.0, False, _prior("prefill_mfu"),
          lambda d: _rel(0.5, 1.25, 0.001, 1.0)(_prior("prefill_mfu")(d)),
          lambda d, v: modify.set_prior(d, "prefill_mfu", v), "a fraction of peak TFLOP/s, 0.001 to 1 (e.g. mfu=0.2:0.5)"),
    Param("hbm_bw_fraction", ("bandwidth", "bw"), "achieved HBM bandwidth", "fraction", 0.001, 1.0, False, _prior("hbm_bw_fraction"),
          lambda d: _pts(0.10, 0.001, 1.0)(_prior("hbm_bw_fraction")(d)),
          lambda d, v: modify.set_prior(d, "hbm_bw_fraction", v), "a fraction of HBM TB/s, 0.001 to 1 (e.g. bandwidth=0.5:0.7)"),
    Param("prefix_hit_rate", ("hit_rate", "hit"), "prefix-cache hit rate", "fraction", 0.0, 1.0, True,
          lambda d: float(d["workload"]["prefix_hit_rate"]),
          lambda d: _pts(0.10, 0.0, 1.0, True)(float(d["workload"]["prefix_hit_rate"])),
          modify.set_hit_rate, "a fraction of prompt tokens, 0 to below 1 (e.g. hit_rate=0.5:0.7)"),
    Param("spec_acceptance", ("alpha",), "acceptance rate alpha (request-weighted mean)", "fraction", 0.0, 1.0, False, modify.mean_alpha,
          _alpha_range, modify.scale_alpha, "the classes' request-weighted mean acceptance rate, a fraction 0 to 1 (e.g. alpha=0.3:0.7)",
          _no_speculation),
    Param("output_tokens", ("output",), "output length", "tokens", 1.0, 1e7, False, lambda d: float(d["workload"]["output_tokens"]),
          lambda d: _rel(0.5, 2.0, 1.0, 1e7)(float(d["workload"]["output_tokens"])),
          modify.set_output_tokens, "mean output tokens per request (every request emits at least its first token), "
          "1 to 1e7, in tokens, not a multiplier (e.g. output=150:600)"),
    Param("mean_input_tokens", ("input",), "mean input length", "tokens", 1.0, float(modify.MAX_BUCKET_TOKENS), False, modify.mean_input_tokens,
          lambda d: _rel(0.75, 1.5, 1.0, float(modify.MAX_BUCKET_TOKENS))(modify.mean_input_tokens(d)),
          modify.set_mean_input, "mean prompt tokens per request, 1 to 1e8; the mix is stretched (e.g. input=8000:16000)"),
    Param("decode_mfu", (), "decode MFU", "fraction", 0.001, 1.0, False, _prior("decode_mfu"),
          lambda d: _rel(0.5, 1.25, 0.001, 1.0)(_prior("decode_mfu")(d)),
          lambda d, v: modify.set_prior(d, "decode_mfu", v), "a fraction of peak TFLOP/s, 0.001 to 1"),
    Param("tpot_p99_inflation", ("tpot_inflation",), "p99/p50 decode step inflation", "ratio", 1.0, 100.0, False, _prior("tpot_p99_inflation"),
          lambda d: (1 + (_prior("tpot_p99_inflation")(d) - 1) * 0.5, 1 + (_prior("tpot_p99_inflation")(d) - 1) * 1.5),
          lambda d, v: modify.set_prior(d, "tpot_p99_inflation", v), "a ratio, 1 to 100 (e.g. tpot_inflation=1.3:1.9)"),
]}

#: The priors the issue names, in its order, run when no --param is given.
DEFAULT_PARAMS = ("prefill_mfu", "hbm_bw_fraction", "prefix_hit_rate", "spec_acceptance", "output_tokens", "mean_input_tokens")

_ALIASES = {a: p.name for p in PARAMS.values() for a in (p.name, *p.aliases)}
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_SPEC = re.compile(rf"^(?P<name>[A-Za-z_][A-Za-z0-9_\-]*)(?:=(?P<lo>{_NUM}%?):(?P<hi>{_NUM}%?))?$")  # a fraction may be written 20%


@dataclass(frozen=True)
class ParamRange:
    param: Param
    low: float
    high: float
    from_default: bool


def _names_text() -> str:
    return ", ".join(f"{p.name} ({'/'.join(p.aliases)})" if p.aliases else p.name for p in PARAMS.values())


def parse_params(specs: list[str] | None, data: dict) -> list[ParamRange]:
    """Parse ``--param NAME[=LO:HI]`` options against the instance ``data``.

    No specs: the six default priors at their default ranges. A name alone takes its
    default range. Raises InputError naming --param: unknown name, malformed range,
    LO >= HI, values outside the physical bounds (with the unit), a name given twice.
    """
    probs: list[Problem] = []
    out: list[ParamRange] = []
    seen: set[str] = set()
    if not specs:
        specs = list(DEFAULT_PARAMS)
    for spec in specs:
        s = spec.strip().replace(" ", "")
        m = _SPEC.match(s)
        if m is None:
            name = s.split("=", 1)[0]
            if name.replace("-", "_").lower() in _ALIASES and "=" in s:
                p = PARAMS[_ALIASES[name.replace("-", "_").lower()]]
                probs.append(Problem("--param", f"{spec!r}: the range must be NAME=LO:HI with two numbers, LO below HI; {p.label} is {p.expected}."))
            else:
                probs.append(Problem("--param", f"{spec!r} is not NAME or NAME=LO:HI; names: {_names_text()}."))
            continue
        key = m["name"].replace("-", "_").lower()
        if key not in _ALIASES:
            probs.append(Problem("--param", f"unknown parameter {m['name']!r}; names: {_names_text()}."))
            continue
        p = PARAMS[_ALIASES[key]]
        if p.name in seen:
            probs.append(Problem("--param", f"{p.name} given twice."))
            continue
        seen.add(p.name)
        if m["lo"] is None:
            lo, hi = p.default(data)
            out.append(ParamRange(p, float(lo), float(hi), True))
            continue
        (lo, lo_pct), (hi, hi_pct) = fraction_text(m["lo"]), fraction_text(m["hi"])
        if (lo_pct or hi_pct) and p.unit != "fraction":
            probs.append(Problem("--param", f"{spec!r}: a percentage is a fraction, and {p.label} is not one: it is {p.expected}."))
            continue
        bad = []
        if not (math.isfinite(lo) and math.isfinite(hi)):
            bad.append("both ends must be finite numbers")
        elif lo >= hi:
            bad.append(f"LO ({m['lo']}) must be below HI ({m['hi']})")
        top = f"below {p.hi:g}" if p.hi_open else f"at most {p.hi:g}"
        for v, txt in ((lo, m["lo"]), (hi, m["hi"])):
            if math.isfinite(v) and (v < p.lo or v > p.hi or (p.hi_open and v >= p.hi)):
                bad.append(f"{txt} is outside the physical range (at least {p.lo:g}, {top})")
        if bad:
            probs.append(Problem("--param", f"{spec!r}: {'; '.join(bad)}. {p.label} is {p.expected}."))
            continue
        out.append(ParamRange(p, lo, hi, False))
    if probs:
        raise InputError("--param", probs)
    # a value may be legal alone and still not build an instance (a tier's own hit rate
    # past 1, a class's alpha past 1, a bucket past 1e8 tokens): say so now, naming --param
    for r in out:
        if r.param.inapplicable(data):
            continue
        for v in (r.low, r.high):
            try:
                r.param.apply(data, v)
            except ValueError as e:
                probs.append(Problem("--param", f"{r.param.name}={r.low:g}:{r.high:g}: {e}. {r.param.label} is {r.param.expected}."))
    if probs:
        raise InputError("--param", probs)
    return out


# ----------------------------------------------------------------------------- report


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SensitivityRow(_F):
    """One prior moved alone: the plan at the low and the high end of its range."""

    param: str = Field(description="Canonical name (the schema field).")
    label: str
    unit: str = Field(description="'fraction', 'tokens' or 'ratio'.")
    base_value: float
    low_value: float
    high_value: float
    default_range: bool = Field(description="The range is the default one (no LO:HI given).")
    applicable: bool = Field(True, description="False when the parameter moves nothing in this instance (no solve; see note).")
    low: SolveSummary
    high: SolveSummary
    low_vs_base: Comparison = Field(description="The low end's fleet cost against the base's (fleetplan.report.sweep.compare): "
                                                "'resolved', 'within_gap' (the two solves' gaps allow the difference: its sign is not "
                                                "known), 'not_comparable' (a side has no plan or was stopped by the time limit).")
    high_vs_base: Comparison = Field(description="The same for the high end.")
    note: str = Field("", description="Why the parameter moves nothing here, or a caveat.")


class HitRateSlices(_F):
    """The brief's "every 10 points of hit rate is ~120 prefill slices", computed: the
    prefill fleet at the low and high hit rate of the sweep, per 10 points."""

    low_hit_rate: float
    high_hit_rate: float
    prefill_slices_per_10_points: float = Field(description="Prefill slices saved per 10 points (count, slices of any shape).")
    prefill_chips_per_10_points: float = Field(description="Prefill chips saved per 10 points (count).")
    smallest_shape_chips: int = Field(description="Chips of the instance's smallest slice shape (the brief's 8-chip slice on Ironwood).")
    smallest_shape_slices_per_10_points: float = Field(description="Prefill chips saved per 10 points over the smallest shape's chips (slice equivalents).")
    fleet_chips_per_10_points: float = Field(description="Chips of the whole fleet (warm pool included) saved per 10 points (count): robust to the solver trading prefill slices for warm slices.")
    fleet_cost_per_hour_usd_per_10_points: float | None = Field(description="Fleet $/h saved per 10 points (USD/h).")
    cost_per_1m_output_tokens_usd_per_10_points: float | None = Field(description="$/1M output tokens saved per 10 points (USD, daily mean basis).")
    both_verified: bool


class SensitivityReport(_F):
    schema_version: Literal[2] = SENSITIVITY_SCHEMA_VERSION
    fleetplan_version: str
    instance_name: str
    instance_hash: str
    options: dict[str, float | str | int | None]
    base: SolveSummary
    rows: list[SensitivityRow] = Field(description="Sorted by the swing in $/1M output tokens, largest first.")
    hit_rate_slices: HitRateSlices | None = Field(description="Present when the prefix hit rate was swept on a disaggregated instance.")
    notes: list[str]


def sensitivity_tasks(inst: Instance, ranges: list[ParamRange], options: dict, keep_inventory: bool = False) -> tuple[list[dict], dict]:
    """The solve tasks of a sweep: the base instance as given and each range end (ends
    equal to the base value reuse the base solve); unless ``keep_inventory``, an end the
    instance's pod inventory cannot serve is solved again with it lifted
    (:data:`modify.INVENTORY_LIFT`; the base never is). Returns (tasks, {key: (param,
    'low'/'high')})."""
    data = instance_data(inst)
    tasks = [make_task("base", data, {**options, "lift_inventory": 0})]
    options = {**options, "lift_inventory": 0 if keep_inventory else modify.INVENTORY_LIFT}
    where = {}
    for r in ranges:
        if r.param.inapplicable(data):
            continue
        b = r.param.base(data)
        for end, v in (("low", r.low), ("high", r.high)):
            if abs(v - b) <= 1e-12 * max(abs(b), 1.0):
                continue
            key = f"{r.param.name}={v:.6g}"
            if key not in where:
                tasks.append(make_task(key, r.param.apply(data, v), options))
            where[key] = (r.param.name, end)
    return tasks, where


def _per10(lo_val, hi_val, lo: SolveSummary, hi: SolveSummary, smallest: int) -> HitRateSlices:
    k = 0.10 / (hi_val - lo_val)
    dcost = None
    if lo.cost_per_1m_output_tokens_usd is not None and hi.cost_per_1m_output_tokens_usd is not None:
        dcost = (lo.cost_per_1m_output_tokens_usd - hi.cost_per_1m_output_tokens_usd) * k
    dchips = (lo.prefill_chips - hi.prefill_chips) * k
    dfleet = (lo.fleet_cost_per_hour_usd - hi.fleet_cost_per_hour_usd) * k if (lo.fleet_cost_per_hour_usd is not None and hi.fleet_cost_per_hour_usd is not None) else None
    return HitRateSlices(fleet_chips_per_10_points=round((lo.chips - hi.chips) * k, 6),
                         fleet_cost_per_hour_usd_per_10_points=round(dfleet, 6) if dfleet is not None else None,low_hit_rate=lo_val, high_hit_rate=hi_val, prefill_slices_per_10_points=round((lo.prefill_slices - hi.prefill_slices) * k, 6),
                         prefill_chips_per_10_points=round(dchips, 6), smallest_shape_chips=smallest,
                         smallest_shape_slices_per_10_points=round(dchips / smallest, 6),
                         cost_per_1m_output_tokens_usd_per_10_points=round(dcost, 6) if dcost is not None else None,
                         both_verified=lo.status == hi.status == "verified")


def run_sensitivity(inst: Instance, ranges: list[ParamRange], executor, options: dict | None = None,
                    progress: Callable[[str], None] | None = None, keep_inventory: bool = False) -> SensitivityReport:
    """Solve the base instance and every range end with ``executor``; the report.

    Args: options: solve options (``mip_gap``, ``time_limit_s`` -- the guard per solve,
        seconds --, ``solver``, ``threads``; :data:`SWEEP_OPTIONS` by default).
        keep_inventory: keep the instance's pod inventory for every point (points beyond
        it come back as shortfall) instead of solving those again with it lifted
        (flagged). The base is always the instance as given.
    """
    options = {**SWEEP_OPTIONS, **(options or {})}
    data = instance_data(inst)
    tasks, where = sensitivity_tasks(inst, ranges, options, keep_inventory)
    res = run_solves(tasks, executor, progress, inventory=data)
    base = res["base"]
    rows = []
    for r in ranges:
        b = r.param.base(data)
        note = r.param.inapplicable(data) or ""
        ends, vs = {}, {}
        for end, v in (("low", r.low), ("high", r.high)):
            key = f"{r.param.name}={v:.6g}"
            solved = key in res and not note
            ends[end] = res[key].model_copy(update={"key": key}) if solved else base.model_copy(update={"key": key})
            vs[end] = compare(ends[end], base) if solved else "resolved"  # no solve of its own: the base plan itself
        if not note and any(abs(v - b) <= 1e-12 * max(abs(b), 1.0) for v in (r.low, r.high)):
            note = f"one end is the instance's own value ({r.param.fmt(b)}): that end is the base plan"
        applicable = not r.param.inapplicable(data)
        rows.append(SensitivityRow(param=r.param.name, label=r.param.label, unit=r.param.unit, base_value=round(b, 9), low_value=round(r.low, 9),
                                   high_value=round(r.high, 9), default_range=r.from_default, applicable=applicable, low=ends["low"],
                                   high=ends["high"], low_vs_base=vs["low"], high_vs_base=vs["high"], note=note))

    def swing(row: SensitivityRow) -> float:
        a, c = row.low.cost_per_1m_output_tokens_usd, row.high.cost_per_1m_output_tokens_usd
        return abs((a or 0.0) - (c or 0.0))

    rows.sort(key=lambda x: (-swing(x), x.param))
    hit = None
    hr = next((x for x in rows if x.param == "prefix_hit_rate"), None)
    if hr is not None and inst.serving.mode != "colocated":
        smallest = min(min(c.slice_shapes) for c in inst.chips.values())
        hit = _per10(hr.low_value, hr.high_value, hr.low, hr.high, smallest)
    label = {s.key: f"{row.param}={getattr(row, e + '_value'):g}" for row in rows if row.applicable for e in ("low", "high")
             for s in (getattr(row, e),) if s.key in res}
    points = {"base": base, **{label[k]: res[k] for k in label}}
    notes = sweep_notes(options, points, keep_inventory)
    loose = [f"{label[s.key]} ({_why_unresolved(getattr(row, e + '_vs_base'), s, base)})" for row in rows for e in ("low", "high")
             for s in (getattr(row, e),) if s.key in label and getattr(row, e + "_vs_base") != "resolved"]
    if loose:
        notes.append("ends not resolved against the base (the tornado's direction there is not known): " + "; ".join(loose))
    bad = [f"{row.param}={getattr(row, e + '_value'):g}: {getattr(row, e).status}" for row in rows for e in ("low", "high")
           if getattr(row, e).status != "verified"]
    if bad:
        notes.append("points that do not meet their SLOs or do not validate are kept and marked: " + "; ".join(bad))
    return SensitivityReport(fleetplan_version=__version__, instance_name=inst.name, instance_hash=instance_hash(inst),
                             options=sweep_options_doc(options, keep_inventory), base=base, rows=rows, hit_rate_slices=hit, notes=notes)


def _why_unresolved(how: str, s: SolveSummary, base: SolveSummary) -> str:
    if how == "not_comparable":
        return ("stopped by the time limit: not comparable" if s.time_limited or base.time_limited else f"{s.status}: no plan to compare")
    d = abs((s.fleet_cost_per_hour_usd or 0.0) - (base.fleet_cost_per_hour_usd or 0.0))
    allow = sum((x.mip_gap or 0.0) * (x.fleet_cost_per_hour_usd or 0.0) for x in (s, base))
    return f"|difference| {d:,.0f} $/h, within the {allow:,.0f} $/h the two gaps allow"
