"""Instance variants used for comparisons (the instance itself is frozen; these return
validated copies)."""

from __future__ import annotations

from fleetplan.instance.io import parse_instance
from fleetplan.instance.schema import Instance

__all__ = ["merge_tiers", "with_updates"]


def merge_tiers(inst: Instance) -> Instance:
    """The same instance with every context tier merged into one mixed pool per region
    (tier 'all', the classes' SLOs, the workload's hit rate) -- the brief's "mix at small
    scale" alternative to stratification. Tier-specific SLO overrides and hit rates are
    dropped (they have no meaning in a mixed pool)."""
    data = inst.model_dump(mode="json")
    data["name"] = f"{inst.name}-unstratified"
    data["workload"]["tiers"] = [{"name": "all", "max_input_tokens": None}]
    return parse_instance(data, f"{inst.name} (tiers merged)")


def with_updates(inst: Instance, updates: dict) -> Instance:
    """A validated copy with dotted-path updates, e.g. {"workload.output_tokens": 400}.
    Raises InstanceError when the result is invalid."""
    data = inst.model_dump(mode="json")
    for path, value in updates.items():
        cur = data
        keys = path.split(".")
        for k in keys[:-1]:
            cur = cur[int(k)] if isinstance(cur, list) else cur[k]
        last = keys[-1]
        if isinstance(cur, list):
            cur[int(last)] = value
        else:
            cur[last] = value
    return parse_instance(data, f"{inst.name} (modified)")
