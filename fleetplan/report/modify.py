"""Modified instances for the sweeps, built as data (``instance_data(inst)``) and
re-validated by :func:`fleetplan.instance.io.parse_instance` in the solve task.

Each function changes one input the way a planner means it and nothing else:

* :func:`set_hit_rate` -- the prefix-cache hit rate (fraction of prompt tokens); tiers
  with a hit rate of their own move by the same number of points.
* :func:`scale_alpha` -- every class's acceptance rate alpha times one factor, so the
  request-weighted mean alpha reaches the value asked (their ratios, and which side of
  ``alpha_threshold`` each class falls, move together).
* :func:`set_mean_input` -- the input mix stretched: every bucket's length, the tier
  bounds and the admission clamp's length times one factor, so each request keeps its
  tier and its side of the clamp while the mean input length reaches the value asked
  (a 3-bucket mix would otherwise jump tiers at a boundary).
* priors and ``output_tokens`` are set directly; the decode batch, speculation and KV
  precision levers replace ``serving.batch_caps``, ``speculation.enabled`` and
  ``model.bytes_per_kv_element``.

Errors: ValueError with a message naming the field, the value and the bound.
"""

from __future__ import annotations

import copy
import math

__all__ = ["set_prior", "set_hit_rate", "shift_hit_rate", "scale_alpha", "mean_alpha", "set_output_tokens", "set_mean_input",
           "mean_input_tokens", "fixed_batch", "set_speculation", "set_kv_bytes", "lift_inventory", "pods_over_inventory", "pods_at_inventory",
           "MAX_BUCKET_TOKENS", "INVENTORY_LIFT"]

MAX_BUCKET_TOKENS = 100_000_000  # the schema's cap on a bucket's length (tokens)
INVENTORY_LIFT = 4  # a sweep point the inventory cannot serve is solved again with this many times the instance's pods, per region and chip


def _copy(data: dict) -> dict:
    return copy.deepcopy(data)


def set_prior(data: dict, field: str, value: float) -> dict:
    """A copy of ``data`` with ``priors.<field> = value``."""
    out = _copy(data)
    out["priors"][field] = float(value)
    return out


def set_hit_rate(data: dict, value: float) -> dict:
    """A copy with ``workload.prefix_hit_rate = value`` (fraction) and every tier's own
    hit rate moved by the same points. Raises ValueError when a rate leaves [0, 1)."""
    base = float(data["workload"]["prefix_hit_rate"])
    return shift_hit_rate(data, float(value) - base)


def shift_hit_rate(data: dict, points: float) -> dict:
    """A copy with every prefix hit rate (the workload's and each tier's own) plus
    ``points`` (a fraction: 0.1 = 10 points). Raises ValueError outside [0, 1)."""
    out = _copy(data)
    w = out["workload"]
    new = float(w["prefix_hit_rate"]) + points
    if not 0.0 <= new < 1.0 - 1e-12:
        raise ValueError(f"workload.prefix_hit_rate would be {new:.4g}; a hit rate is a fraction in [0, 1)")
    w["prefix_hit_rate"] = round(new, 12)
    for t in w["tiers"]:
        if t.get("prefix_hit_rate") is not None:
            v = float(t["prefix_hit_rate"]) + points
            if not 0.0 <= v < 1.0 - 1e-12:
                raise ValueError(f"tier {t['name']}'s prefix_hit_rate would be {v:.4g}; a hit rate is a fraction in [0, 1)")
            t["prefix_hit_rate"] = round(v, 12)
    return out


def mean_alpha(data: dict) -> float:
    """Request-weighted mean acceptance rate alpha over the classes (fraction)."""
    cl = data["workload"]["classes"].values()
    return math.fsum(c["share"] * c["spec_acceptance"] for c in cl)


def scale_alpha(data: dict, value: float) -> dict:
    """A copy whose classes' acceptance rates are all scaled by value / mean alpha.
    Raises ValueError when the mean is 0 or a class would exceed 1."""
    out = _copy(data)
    m = mean_alpha(out)
    if m <= 0:
        raise ValueError("every class has acceptance rate alpha 0: there is nothing to scale")
    f = float(value) / m
    for name, c in out["workload"]["classes"].items():
        v = c["spec_acceptance"] * f
        if v > 1.0 + 1e-12:
            raise ValueError(f"class {name}'s acceptance rate alpha would be {v:.3g}; alpha is a fraction <= 1")
        c["spec_acceptance"] = min(round(v, 12), 1.0)
    return out


def set_output_tokens(data: dict, value: float) -> dict:
    out = _copy(data)
    out["workload"]["output_tokens"] = float(value)
    return out


def mean_input_tokens(data: dict) -> float:
    """Mean prompt length of the input mix (tokens)."""
    return math.fsum(b["share"] * b["tokens"] for b in data["workload"]["input_mix"])


def set_mean_input(data: dict, value: float) -> dict:
    """A copy with the input mix stretched so its mean is ``value`` tokens (lengths are
    whole tokens, so the mean reached is within rounding); tier bounds and the
    admission clamp length stretch with it. Raises ValueError when a bucket would be
    under 1 or over 1e8 tokens."""
    out = _copy(data)
    f = float(value) / mean_input_tokens(out)
    w = out["workload"]
    for b in w["input_mix"]:
        n = int(round(b["tokens"] * f))
        if n < 1 or n > MAX_BUCKET_TOKENS:
            raise ValueError(f"a {b['tokens']:,}-token bucket would become {b['tokens'] * f:,.0f} tokens; lengths are 1 to {MAX_BUCKET_TOKENS:,} tokens")
        b["tokens"] = n
    for t in w["tiers"]:
        if t.get("max_input_tokens") is not None:
            t["max_input_tokens"] = max(1, int(round(t["max_input_tokens"] * f)))
    clamp = out.get("failover", {}).get("admission_clamp")
    if clamp is not None and clamp.get("min_input_tokens") is not None:
        clamp["min_input_tokens"] = max(1, int(round(clamp["min_input_tokens"] * f)))
    return out


def fixed_batch(data: dict, batch: int) -> dict:
    """A copy whose decode slices run one fixed batch cap (``serving.batch_caps =
    [batch]``): the SLO knee still caps it where the knee is lower."""
    out = _copy(data)
    out["serving"]["batch_caps"] = [int(batch)]
    return out


def set_speculation(data: dict, enabled: bool) -> dict:
    out = _copy(data)
    out.setdefault("speculation", {})["enabled"] = bool(enabled)
    return out


def set_kv_bytes(data: dict, nbytes: float) -> dict:
    """A copy with ``model.bytes_per_kv_element = nbytes`` (1 = FP8/int8 KV, 2 = BF16 KV)."""
    out = _copy(data)
    out["model"]["bytes_per_kv_element"] = float(nbytes)
    return out


def lift_inventory(data: dict, factor: int = INVENTORY_LIFT) -> dict:
    """A copy whose every region may commit ``factor`` x its pods (installed + new) of
    each chip type it has: for a sweep point the instance's inventory cannot serve, what
    the prior *needs* rather than what this quarter's inventory holds (flagged by
    :func:`pods_over_inventory`)."""
    out = _copy(data)
    for reg in out["regions"].values():
        for inv in reg["pods"].values():
            total = int(inv.get("installed", 0)) + int(inv.get("available_new", 0))
            inv["available_new"] = max(int(inv.get("available_new", 0)), factor * total - int(inv.get("installed", 0)))
    return out


def _allowed(data: dict, region: str, chip: str) -> int:
    inv = data["regions"].get(region, {}).get("pods", {}).get(chip)
    return (int(inv.get("installed", 0)) + int(inv.get("available_new", 0))) if inv else 0


def pods_at_inventory(data: dict, pods: dict[str, int]) -> list[str]:
    """Regions whose plan commits every pod of a chip type the instance ``data`` allows
    (``pods``: {'region/chip': pods in the plan}): where more pods could serve more.
    Returns lines like 'us-east ironwood: all 60 pods'."""
    out = []
    for key, n in sorted(pods.items()):
        r, _, k = key.partition("/")
        can = _allowed(data, r, k)
        if can > 0 and n >= can:
            out.append(f"{r} {k}: all {can} pods")
    return out


def pods_over_inventory(data: dict, pods: dict[str, int]) -> list[str]:
    """Regions whose plan commits more pods than the instance ``data`` allows.
    ``pods``: {'region/chip': pods in the plan}. Returns lines like 'us-east ironwood:
    38 pods, the instance allows 30'."""
    out = []
    for key, n in sorted(pods.items()):
        r, _, k = key.partition("/")
        can = _allowed(data, r, k)
        if n > can:
            out.append(f"{r} {k}: {n} pods, the instance allows {can}")
    return out
