"""How a plan moves between two instances, and which input moved it.

``fleetplan solve NEW --compare BASE`` solves both, then re-solves BASE with each
changed input group alone taken from NEW (one at a time). A group's "alone" delta is
the plan's move when only that input changes; the difference between the sum of the
alone deltas and the joint move is the interaction (inputs that compound, such as a
longer mix and a lower hit rate both loading prefill).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from fleetplan.errors import InputError
from fleetplan.instance.io import parse_instance
from fleetplan.instance.schema import Instance

__all__ = ["PlanFigures", "figures", "changed_inputs", "input_groups", "Attribution", "attribute"]


@dataclass(frozen=True)
class PlanFigures:
    """The figures a comparison reports (chips, pods, USD/h, USD per 1M tokens)."""

    status: str
    chips: int
    pods: int
    prefill_slices: int
    decode_slices: int
    replicas: int
    cost_per_hour_usd: float
    usd_per_1m_output: float | None  # None: withheld by the plan (it does not serve all the demand)
    usd_per_1m_blended: float | None


def figures(plan) -> PlanFigures:
    """:class:`PlanFigures` of a :class:`~fleetplan.results.plan.Plan`."""
    def n(role):
        return sum(p.slices for p in plan.pools if p.role == role)
    c = plan.cost
    return PlanFigures(plan.status, c.chips, sum(f.pods_total for f in plan.fleet), n("prefill"), n("decode"), n("replica"),
                       c.fleet_cost_per_hour_usd, c.cost_per_1m_output_tokens_usd, c.cost_per_1m_tokens_blended_usd)


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def _same_tiers(a: Any, b: Any) -> bool:
    return (isinstance(a, list) and isinstance(b, list) and len(a) == len(b)
            and all((x.get("name"), x.get("max_input_tokens")) == (y.get("name"), y.get("max_input_tokens")) for x, y in zip(a, b)))


def changed_inputs(base: Instance, new: Instance) -> dict[str, tuple[Any, Any]]:
    """Dotted paths whose values differ (lists compared whole, except the tiers of two
    instances with the same tier names and bounds: those per tier and field, as
    ``workload.tiers.<index>.<field>``), with (base, new) values. The name and
    description are not inputs and are skipped."""
    a, b = _flatten(base.model_dump(mode="json")), _flatten(new.model_dump(mode="json"))
    out = {}
    for k in sorted(set(a) | set(b)):
        if k in ("name", "description"):
            continue
        if a.get(k) != b.get(k):
            if k == "workload.tiers" and _same_tiers(a[k], b[k]):
                for i, (x, y) in enumerate(zip(a[k], b[k])):
                    out.update({f"{k}.{i}.{f}": (x.get(f), y.get(f)) for f in sorted(set(x) | set(y)) if x.get(f) != y.get(f)})
                continue
            out[k] = (a.get(k), b.get(k))
    return out


#: Fields that change together: tiers a fitted mix leaves empty are dropped with it.
_JOINED = {"workload.tiers": "workload.input_mix"}
#: Sections whose fields are inputs of their own; other sections (regions, chips, model ...) count whole.
_BY_FIELD = ("workload", "priors", "serving", "speculation", "failover")


def _key(path: str) -> list[str]:
    """The instance key a changed path belongs to: section.field, or the section; a
    per-tier path (``workload.tiers.<index>.<field>``) is its own key."""
    parts = path.split(".")
    if parts[:2] == ["workload", "tiers"] and len(parts) == 4:
        return parts
    return parts[:2] if parts[0] in _BY_FIELD and len(parts) >= 2 else parts[:1]


def _group_of(path: str) -> str:
    """A tier's own prefix hit rate moves with the pooled one (one input: the hit rate);
    any other per-tier field belongs to the tiers, which move with the input mix."""
    parts = path.split(".")
    if parts[:2] == ["workload", "tiers"] and len(parts) == 4:
        return "workload.prefix_hit_rate" if parts[3] == "prefix_hit_rate" else _JOINED["workload.tiers"]
    key = ".".join(_key(path))
    return _JOINED.get(key, key)


def input_groups(changes: dict[str, tuple[Any, Any]]) -> dict[str, list[str]]:
    """Changed paths grouped into inputs a planner names: each workload field (the
    tiers with the input mix; each tier's own prefix hit rate with the pooled one),
    each prior, each serving, speculation and failover field, and other sections
    (regions, chips, model ...) whole."""
    groups: dict[str, list[str]] = {}
    for path in changes:
        groups.setdefault(_group_of(path), []).append(path)
    return groups


def describe(changes: dict[str, tuple[Any, Any]], paths: list[str], tier_names: list[str] | None = None) -> str:
    """A short 'base -> new' for a group (the mix by its mean and bucket count; a
    per-tier field by the tier's name from ``tier_names``, else its index)."""
    if "workload.input_mix" in paths:
        a, b = changes["workload.input_mix"]
        extra = "; tiers " + ", ".join(_tier_names(changes[p][0]) + " -> " + _tier_names(changes[p][1]) for p in paths if p == "workload.tiers")
        return f"{_mix(a)} -> {_mix(b)}" + (extra if "workload.tiers" in paths else "")
    if paths and all(p == "workload.prefix_hit_rate" or p.endswith(".prefix_hit_rate") for p in paths):
        return "; ".join(f"{_rate_where(p, tier_names)} {_short(changes[p][0])} -> {_short(changes[p][1])}" for p in paths)
    if len(paths) == 1:
        a, b = changes[paths[0]]
        if paths[0] == "workload.input_mix":
            return f"{_mix(a)} -> {_mix(b)}"
        return f"{_short(a)} -> {_short(b)}"
    return f"{len(paths)} fields"


def _rate_where(path: str, tier_names: list[str] | None) -> str:
    if path == "workload.prefix_hit_rate":
        return "pooled"
    i = int(path.split(".")[2])
    return f"tier {tier_names[i] if tier_names and i < len(tier_names) else i}"


def _mix(mix) -> str:
    if not isinstance(mix, list):
        return str(mix)
    mean = sum(b["share"] * b["tokens"] for b in mix)
    return f"{len(mix)} buckets, mean {mean:,.0f} tokens"


def _tier_names(tiers) -> str:
    return "/".join(str(t.get("name")) for t in tiers) if isinstance(tiers, list) else str(tiers)


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    text = str(v)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass
class Attribution:
    """One input group applied alone to the base: its plan figures, or why it could not
    be solved alone (an input that is invalid without another, e.g. a tier list without its mix)."""

    group: str
    paths: list[str]
    description: str
    figures: PlanFigures | None = None
    error: str | None = None
    gap: float | None = field(default=None)

    def to_dict(self) -> dict:
        """JSON-ready: input, paths, change, error, gap and the plan figures (or null)."""
        return {"input": self.group, "paths": self.paths, "change": self.description, "error": self.error, "gap": self.gap,
                "figures": asdict(self.figures) if self.figures else None}


def _with_group(base: Instance, new: Instance, paths: list[str], group: str) -> Instance:
    data = base.model_dump(mode="json")
    src = new.model_dump(mode="json")
    for keys in {tuple(_key(p)): None for p in paths}:
        cur_d, cur_s = data, src
        for k in keys[:-1]:
            k = int(k) if isinstance(cur_d, list) else k
            cur_d, cur_s = cur_d[k], cur_s[k]
        if keys[-1] in cur_s:
            cur_d[keys[-1]] = cur_s[keys[-1]]
        else:
            cur_d.pop(keys[-1], None)
    return parse_instance(data, f"{base.name} with {group} from {new.name}")


def attribute(base: Instance, new: Instance, solve_plan: Callable[[Instance], Any], progress: Callable[[str], None] | None = None) -> list[Attribution]:
    """Solve ``base`` with each changed input group of ``new`` alone.

    Args: solve_plan: instance -> plan (or None when the solver found none).
    Returns: one :class:`Attribution` per group, in the order of :func:`input_groups`.
    """
    changes = changed_inputs(base, new)
    out = []
    for group, paths in input_groups(changes).items():
        at = Attribution(group, paths, describe(changes, paths, [t.name for t in new.workload.tiers]))
        if progress:
            progress(f"re-solving the base with {group} alone")
        try:
            inst = _with_group(base, new, paths, group)
        except InputError as e:
            at.error = "not valid alone: " + "; ".join(p.render() for p in e.problems[:2])
            out.append(at)
            continue
        plan = solve_plan(inst)
        if plan is None:
            at.error = "no plan (solver)"
        else:
            at.figures = figures(plan)
            at.gap = plan.solver.gap
        out.append(at)
    return out
