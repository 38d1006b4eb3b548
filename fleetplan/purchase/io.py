"""Read a purchase-planning file, load its base instance and check everything against it.

:func:`load_purchase` returns a :class:`PurchaseProblem`: the validated file, the base
instance, the expanded scenario tree and the resolved supply (what may be ordered of
each chip in each region in each quarter, its lead time, price and caps). Every problem
is reported at once with its field path (:class:`PurchaseError`, exit code 2 on the
command line).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from importlib.resources import files
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fleetplan.errors import InputError, OptionError, Problem
from fleetplan.percent import fraction_text
from fleetplan.instance.io import (InstanceError, _read_yaml, bundled_instances, instance_files, load_instance_overlaid, resolve_instance_path,
                                   validation_problems)
from fleetplan.instance.schema import Instance
from fleetplan.purchase.schema import CapitalPrice, PurchaseFile, Supply, quarter_index
from fleetplan.purchase.tree import Tree, expand_demand

__all__ = ["PurchaseError", "PurchaseProblem", "OrderTerms", "HOURS_PER_QUARTER", "load_purchase", "parse_purchase", "discount", "with_risk"]

#: Hours in a quarter: a Julian year of 8,766 h over 4.
HOURS_PER_QUARTER = 8766.0 / 4.0


class PurchaseError(InputError):
    """The purchase-planning file is malformed or inconsistent with its base instance."""

    kind = "purchase file"


@dataclass(frozen=True)
class OrderTerms:
    """What an order of chip ``chip`` in ``region`` placed in quarter ``quarter`` (index)
    gets: in service from ``delivery`` for ``service_quarters`` quarters (None: for good),
    at ``cost_usd_per_pod`` (discounted to the first quarter; the full commitment), the
    undiscounted ``price_usd_per_pod``, and the smallest non-zero order ``min_order_pods``;
    ``entry`` is the supply entry's index (its delivery cap is shared by its regions)."""

    region: str
    chip: str
    quarter: int
    delivery: int
    service_quarters: int | None
    cost_usd_per_pod: float
    price_usd_per_pod: float
    min_order_pods: int
    entry: int


def discount(rate_per_year: float, quarter: int) -> float:
    """Discount factor of quarter ``quarter`` (0 = the first): (1 + rate)^(-quarter / 4)."""
    return (1.0 + rate_per_year) ** (-quarter / 4.0)


@dataclass(frozen=True)
class PurchaseProblem:
    """A checked purchase problem. ``installed[(r, k)][q]`` pods of the starting fleet in
    service in quarter q; ``orders`` every (order quarter, region, chip) that may be
    ordered; ``delivery_cap[(entry, q)]`` the most pods entry ``entry`` delivers in quarter q."""

    spec: PurchaseFile
    base: Instance
    tree: Tree
    labels: list[str]
    installed: dict[tuple[str, str], list[int]]
    orders: list[OrderTerms]
    delivery_cap: dict[tuple[int, int], int]
    notes: list[str]
    source: str
    files: tuple[str, ...] = ()  # what loading read besides the purchase file: the base instance and its includes

    def discount(self, q: int) -> float:
        return discount(self.spec.quarters.discount_rate_per_year, q)


def _entry_value(e: Supply, q_label: str, field: str):
    over = e.by_quarter.get(q_label)
    v = getattr(over, field, None) if over is not None else None
    return v if v is not None else getattr(e, {"max_pods_delivered": "max_pods_delivered_per_quarter"}.get(field, field))



def _known(problems: list, path: str, value: str, known: list[str], what: str) -> bool:
    """True when ``value`` is one of ``known``; otherwise records the problem at ``path``
    (naming what the base instance has) and returns False."""
    if value in known:
        return True
    problems.append(Problem(path, f"unknown {what}; the base instance has {known}.", value))
    return False

def check_purchase(spec: PurchaseFile, base: Instance) -> tuple[dict, list[OrderTerms], dict, list[str], list[Problem]]:
    """The cross-field checks and the resolved inventory and supply (see :class:`PurchaseProblem`)."""
    problems: list[Problem] = []
    notes: list[str] = []
    labels = spec.quarters.labels
    nq = len(labels)
    idx = [quarter_index(q) for q in labels]
    for i in range(1, nq):
        if idx[i] != idx[i - 1] + 1:
            problems.append(Problem(f"quarters.labels.{i}", f"quarters must be consecutive: {labels[i - 1]} is followed by {_label(idx[i - 1] + 1)}.", labels[i]))
    regions, chips = sorted(base.regions), sorted(base.chips)
    installed: dict[tuple[str, str], list[int]] = {(r, k): [0] * nq for r in regions for k in chips}
    for i, g in enumerate(spec.installed):
        p = f"installed.{i}"
        ok = _known(problems, f"{p}.region", g.region, regions, "region") & _known(problems, f"{p}.chip", g.chip, chips, "chip type")
        end = nq
        if g.retires is not None:
            end = quarter_index(g.retires) - idx[0]
            if end <= 0:
                problems.append(Problem(f"{p}.retires", f"the retirement is at or before the start of the horizon ({labels[0]}): these pods would never "
                                                        "serve; drop the group or give a later quarter (YYYYQn).", g.retires))
                ok = False
        if ok:
            for q in range(min(end, nq)):
                installed[(g.region, g.chip)][q] += g.pods
    orders: list[OrderTerms] = []
    caps: dict[tuple[int, int], int] = {}
    covered: dict[tuple[str, str], int] = {}
    rate = spec.quarters.discount_rate_per_year
    for i, e in enumerate(spec.supply):
        p = f"supply.{i}"
        bad = not (_known(problems, f"{p}.chip", e.chip, chips, "chip type")
                   & (e.region is None or _known(problems, f"{p}.region", e.region, regions, "region")))
        for q in e.by_quarter:
            if q not in labels:
                problems.append(Problem(f"{p}.by_quarter.{q}", f"not a quarter of the horizon ({_horizon(labels)}).", q))
                bad = True
        for j, q in enumerate(e.orderable or []):
            if q not in labels:
                problems.append(Problem(f"{p}.orderable.{j}", f"not a quarter of the horizon ({_horizon(labels)}).", q))
                bad = True
        if e.lead_time_quarters >= nq:
            problems.append(Problem(f"{p}.lead_time_quarters", f"the lead time is past the horizon: an order placed in {labels[0]} arrives in "
                                                               f"{_label(idx[0] + e.lead_time_quarters)}, after {labels[-1]} (quarters; at most {nq - 1}).",
                                    str(e.lead_time_quarters)))
            bad = True
        if bad:
            continue
        regs = [e.region] if e.region is not None else regions
        for r in regs:
            if (r, e.chip) in covered:
                problems.append(Problem(p, f"{e.chip} in {r} is already offered by supply.{covered[(r, e.chip)]}; give one entry per chip and region.", ""))
                bad = True
            covered[(r, e.chip)] = i
        if bad:
            continue
        for q in range(nq):
            caps[(i, q)] = _entry_value(e, labels[q], "max_pods_delivered")
            allowed = _entry_value(e, labels[q], "orderable")
            if allowed is None or isinstance(allowed, list):
                allowed = True if e.orderable is None else labels[q] in e.orderable
            if not allowed:
                continue
            lead = _entry_value(e, labels[q], "lead_time_quarters")
            if q + lead >= nq:
                explicit = (e.orderable is not None and labels[q] in e.orderable) or (labels[q] in e.by_quarter and e.by_quarter[labels[q]].orderable)
                if labels[q] in e.by_quarter and e.by_quarter[labels[q]].lead_time_quarters is not None:
                    # the quarter's own lead time: refused like the supply-level value (exit 2), not accepted and ignored
                    problems.append(Problem(f"{p}.by_quarter.{labels[q]}.lead_time_quarters",
                                            f"the lead time is past the horizon: an order placed in {labels[q]} arrives in {_label(idx[q] + lead)}, "
                                            f"after {labels[-1]} (quarters; at most {nq - 1 - q} for an order placed in {labels[q]}).", str(lead)))
                elif explicit:
                    problems.append(Problem(f"{p}.orderable", f"an order placed in {labels[q]} with a lead time of {lead} quarters arrives in "
                                                              f"{_label(idx[q] + lead)}, past the horizon's last quarter {labels[-1]}.", labels[q]))
                continue
            price = _entry_value(e, labels[q], "price")
            if isinstance(price, CapitalPrice):
                unit = price.usd_per_pod
                cost = unit * discount(rate, q)
                service = None
            else:
                per_quarter = price.usd_per_chip_hour * base.chips[e.chip].chips_per_pod * HOURS_PER_QUARTER
                unit = per_quarter * price.term_quarters
                cost = per_quarter * math.fsum(discount(rate, q + lead + j) for j in range(price.term_quarters))
                service = price.term_quarters
            for r in regs:
                orders.append(OrderTerms(r, e.chip, q, q + lead, service, cost, unit, _entry_value(e, labels[q], "min_order_pods"), i))
        late = [labels[q] for q in range(nq) if q + _entry_value(e, labels[q], "lead_time_quarters") >= nq]
        if late and e.orderable is None:
            notes.append(f"supply.{i} ({e.chip}): orders in {', '.join(late)} would arrive after {labels[-1]}, so they are not offered")
    return installed, orders, caps, notes, problems


def check_burst(spec: PurchaseFile, base: Instance) -> list[Problem]:
    """``policy.burst``: known chips and regions, one entry per (chip, region)."""
    problems: list[Problem] = []
    regions, chips = sorted(base.regions), sorted(base.chips)
    covered: dict[tuple[str, str], int] = {}
    for i, b in enumerate(spec.policy.burst):
        p = f"policy.burst.{i}"
        if not (_known(problems, f"{p}.chip", b.chip, chips, "chip type") & (b.region is None or _known(problems, f"{p}.region", b.region, regions, "region"))):
            continue
        for r in ([b.region] if b.region is not None else regions):
            if (r, b.chip) in covered:
                problems.append(Problem(p, f"burst {b.chip} in {r} is already offered by policy.burst.{covered[(r, b.chip)]}; give one entry per chip and region.", ""))
            covered[(r, b.chip)] = i
    return problems


def _label(i: int) -> str:
    return f"{i // 4:04d}Q{i % 4 + 1}"


#: pydantic puts a discriminated union's tag in an error's location (demand.tree.root ...): the file has no such key
_TAGS = {"demand": ("tree", "growth_paths", "fan"), "price": ("capital", "committed"), "unserved": ("hard", "priced")}


def _without_tags(problems: list[Problem]) -> list[Problem]:
    out = []
    for p in problems:
        parts = p.path.split(".")
        keep = [x for i, x in enumerate(parts) if not (i > 0 and x in _TAGS.get(parts[i - 1], ()))]
        out.append(Problem(".".join(keep), p.message, p.value))
    return out


def _workload_problems(base: Instance, tree: Tree) -> list[Problem]:
    """Each distinct workload shift of the tree applied to the base instance and checked as
    a whole instance (shares sum to 1, every input length fits a tier ...), a problem named
    at the node's ``workload`` field."""
    from fleetplan.instance.io import parse_instance

    out, seen = [], set()
    for n in tree.nodes:
        key = repr(sorted(n.workload.items()))
        if not n.workload or key in seen:
            continue
        seen.add(key)
        data = base.model_dump(mode="python", round_trip=True)
        data["workload"].update(n.workload)
        try:
            parse_instance(data, "shifted workload")
        except InstanceError as e:
            out += [Problem(n.workload_source, f"the shifted workload is not valid with the base instance: {p.render()}", "") for p in e.problems]
    return out


def _demand_problems(base: Instance, tree: Tree, labels: list[str]) -> list[Problem]:
    """The largest demand of each region over the tree (its multiplier x the base instance's
    ``peak_rps``) checked against the instance's own bounds on ``peak_rps``, a problem named at
    ``demand`` (a growth path compounding to 2.4e9 requests/s was a traceback at the model
    build, exit 1)."""
    from fleetplan.instance.io import parse_instance

    idle = [n for n in tree.nodes if not any(base.regions[r].peak_rps * n.demand[r] > 0 for r in base.regions)]
    if idle:  # as an instance needs some traffic: a quarter with none has no fleet to verify (it ran 1 chip the verifier refused)
        n = idle[0]
        return [Problem("demand", f"node {n.label} ({labels[n.quarter]}) has no demand in any region (every multiplier x peak_rps is 0; {len(idle)} node(s) so): "
                        "a quarter needs some traffic in at least one region (a region with none of its own may have 0).", "0 requests/s")]
    most = {r: max(n.demand[r] for n in tree.nodes) for r in base.regions}
    data = base.model_dump(mode="python", round_trip=True)
    for r, reg in data["regions"].items():
        reg["peak_rps"] = base.regions[r].peak_rps * most[r]
    try:
        parse_instance(data, "the tree's largest demand")
    except InstanceError as e:
        return [Problem("demand", f"the tree's largest demand (multiplier {most[r]:.6g} x the base's {base.regions[r].peak_rps:g} requests/s in "
                        f"region {r}) is not a valid peak_rps: {p.message}", f"{base.regions[r].peak_rps * most[r]:.6g} requests/s")
                for p in e.problems for r in [_region_of(p.path, most)] if r is not None] or \
            [Problem("demand", f"the tree's largest demand is not valid with the base instance: {p.render()}", "") for p in e.problems]
    return []


def _region_of(path: str, regions: dict) -> str | None:
    parts = path.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "regions" and parts[1] in regions else None


def parse_purchase(data: Any, source: str = "<data>", base_dir: Path | None = None) -> PurchaseProblem:
    """Validate a mapping (as read from YAML) into a :class:`PurchaseProblem`.

    ``base`` is read relative to ``base_dir`` when that file exists, else as a path or a
    bundled instance name. Raises: :class:`PurchaseError` listing every problem (the
    base instance's own problems under ``base``).
    """
    if not isinstance(data, dict):
        raise PurchaseError(source, [Problem("", "the purchase file must be a YAML mapping (key: value) at the top level.")])
    try:
        spec = PurchaseFile.model_validate(data)
    except ValidationError as e:
        raise PurchaseError(source, _without_tags(validation_problems(e, reference="docs/purchase.md", root=PurchaseFile))) from None
    path = _base_path(spec.base, base_dir)
    if path is None:
        where = (f"relative to the purchase file's directory ({base_dir.resolve()}), " if base_dir is not None else "") + "the working directory and the bundled files"
        raise PurchaseError(source, [Problem("base", f"no such base instance: {spec.base!r} (looked {where}). Give a YAML instance path "
                                             "(relative to the purchase file) or a bundled name: " + ", ".join(bundled_instances() + bundled_bases())
                                             + ".", spec.base)])
    try:
        base, overlays = load_instance_overlaid(path)
    except InstanceError as e:
        raise PurchaseError(source, [Problem("base", f"the base instance {spec.base!r} is not usable: {p.render()}") for p in e.problems]) from None
    if base.serving.mixed_shapes != spec.policy.mixed_shapes:  # the policy decides for every quarter (validated: a bool)
        base = base.model_copy(update={"serving": base.serving.model_copy(update={"mixed_shapes": spec.policy.mixed_shapes})})
    if base.placement.size_with_pods:
        # a purchase plan buys pods and sizes each quarter's fleet without placing it in them (placement-aware
        # sizing is `fleetplan solve`'s; docs/purchase.md, 'Not modelled yet'): its quarters are checked as such
        base = base.model_copy(update={"placement": base.placement.model_copy(update={"size_with_pods": False})})
    installed, orders, caps, notes, problems = check_purchase(spec, base)
    problems += check_burst(spec, base)
    tree, tree_problems = expand_demand(spec.demand, spec.quarters.labels, sorted(base.regions))
    problems += tree_problems
    if tree is not None:
        problems += _workload_problems(base, tree) + _demand_problems(base, tree, list(spec.quarters.labels))
    if problems:
        raise PurchaseError(source, problems)
    assert tree is not None
    dropped = _zero_probability(spec.demand)
    if dropped:
        notes.append(f"demand: {', '.join(dropped)} ha{'s' if len(dropped) == 1 else 've'} probability 0 and {'is' if len(dropped) == 1 else 'are'} "
                     "not planned for (no weight in the expected cost); give a branch a probability to hedge against it")
    return PurchaseProblem(spec, base, tree, list(spec.quarters.labels), installed, orders, caps, notes, source,
                           instance_files(path, base, overlays))


def _zero_probability(demand) -> list[str]:
    """The growth paths or tree branches of probability 0 (named as in the file: a path's name,
    a branch's name or its field path), which the tree leaves out."""
    from fleetplan.purchase.schema import DemandTree, GrowthPaths

    if isinstance(demand, GrowthPaths):
        return [f"path {x.name!r}" for x in demand.paths if x.probability == 0]
    out: list[str] = []
    if isinstance(demand, DemandTree):
        stack = [(demand.root, "demand.root")]
        while stack:
            node, where = stack.pop()
            for i, k in enumerate(node.children):
                if len(node.children) > 1 and k.probability == 0:
                    out.append(f"branch {k.name!r}" if k.name else f"branch {where}.children.{i}")
                else:
                    stack.append((k, f"{where}.children.{i}"))
    return sorted(out)


def _horizon(labels: list[str]) -> str:
    """The horizon's quarters in words: every label when there are few (a horizon with a gap,
    2027Q1, 2027Q3, 2027Q4, is not '2027Q1 .. 2027Q4'), else the first and the last."""
    return ", ".join(labels) if len(labels) <= 12 else f"{labels[0]} .. {labels[-1]}"


def bundled_bases() -> list[str]:
    """The base instances shipped for the bundled purchase files (``instances/purchase/*.yaml``),
    named as a purchase file's ``base`` gives them (``purchase/gemini-2027-base.yaml``)."""
    root = files("fleetplan.instances").joinpath("purchase")
    return sorted(f"purchase/{p.name}" for p in root.iterdir() if p.name.endswith(".yaml"))


def _base_path(base: str, base_dir: Path | None) -> Path | None:
    """Where ``base`` is: relative to the purchase file's directory, as given (the working
    directory or absolute), a bundled instance name, or a bundled file by its relative path
    (``purchase/gemini-2027-base.yaml`` from a copy of a bundled purchase file); None when
    none exists."""
    p = Path(base)
    if base_dir is not None and not p.is_absolute() and (base_dir / p).exists():
        return base_dir / p
    found = resolve_instance_path(base)
    if found.exists():
        return found
    if not p.is_absolute():
        bundled = Path(str(files("fleetplan.instances").joinpath(base)))
        if bundled.is_file():
            return bundled
    return None


def load_purchase(path: str | Path) -> PurchaseProblem:
    """Load a purchase-planning YAML file (safe YAML, duplicate keys refused).

    Raises: :class:`PurchaseError` naming every problem (file, YAML, schema, cross-field,
    the base instance). A bare name that is no file is looked up among the bundled files
    (``gemini-ironwood-2027``).
    """
    from fleetplan.documents import document_kind
    from fleetplan.instance.io import bundled_instance_path

    p = Path(path)
    if not p.exists() and p.parent == Path(".") and p.suffix in ("", ".yaml"):
        if bundled_instance_path(p.name).exists():
            p = bundled_instance_path(p.name)
    if not p.exists():  # the instance reader's message lists bundled instances, which are not purchase files
        raise PurchaseError(str(p), [Problem("(file)", "no such file. Give a purchase-planning YAML path or a bundled purchase file: "
                                             + ", ".join(bundled_purchases()) + " (docs/purchase.md; `fleetplan schema purchase`).", str(path))])
    try:
        data = _read_yaml(p)
    except InstanceError as e:
        raise PurchaseError(str(p), e.problems) from None
    kind = document_kind(data)
    if kind not in (None, "instance", "purchase-planning file"):  # a plan, a purchase plan ...: say so, not every field it lacks
        raise PurchaseError(str(p), [Problem("(file)", f"is a fleetplan {kind}, not a purchase-planning file: give the YAML that names a base "
                                             "instance and adds quarters, installed, supply and demand (docs/purchase.md).", str(path))])
    if isinstance(data, dict) and "quarters" not in data and {"model", "chips", "regions"} <= set(data):
        # an instance given where a purchase file is expected: say so instead of a dozen schema errors
        raise PurchaseError(str(p), [Problem("(file)", "this is an instance (model, chips, regions), not a purchase-planning file: a purchase "
                                             "file names an instance as its base (base: ...) and adds quarters, installed, supply and demand "
                                             "(docs/purchase.md); for a single snapshot use `fleetplan solve`.", str(path))])
    return parse_purchase(data, str(p), p.parent)


def bundled_purchases() -> list[str]:
    """Names of the purchase-planning files shipped with fleetplan (``instances/*.yaml`` with
    a top-level ``quarters:``), as ``fleetplan purchase NAME`` takes them."""
    from fleetplan.instance.io import _is_purchase_file

    root = files("fleetplan.instances")
    return sorted(x.name[:-5] for x in root.iterdir() if x.name.endswith(".yaml") and _is_purchase_file(x.read_text()))


def with_risk(p: PurchaseProblem, text: str) -> PurchaseProblem:
    """``p`` with ``policy.risk`` replaced by the command line's ``--risk``: ``expectation``
    or ``cvar:ALPHA:WEIGHT`` (ALPHA in [0, 1), WEIGHT in [0, 1], fractions; see
    :class:`fleetplan.purchase.schema.CVaRRisk`). Raises :class:`fleetplan.errors.OptionError` naming --risk."""
    from fleetplan.purchase.schema import CVaRRisk

    t = text.strip().lower()
    if t == "expectation":
        risk = "expectation"
    else:
        parts = t.split(":")
        try:
            if len(parts) != 3 or parts[0] != "cvar":
                raise ValueError
            risk = CVaRRisk(kind="cvar", alpha=fraction_text(parts[1])[0], weight=fraction_text(parts[2])[0])  # 0.9 or 90%
        except (ValueError, ValidationError):
            raise OptionError("--risk", [Problem("--risk", "expected 'expectation' or 'cvar:ALPHA:WEIGHT' with ALPHA in [0, 1) (the CVaR level, "
                                                             "fraction: 0.9 or 90% = the worst 10%) and WEIGHT in [0, 1] (fraction of the objective on the CVaR: 0.5 or 50%)", text)]) from None
    spec = p.spec.model_copy(update={"policy": p.spec.policy.model_copy(update={"risk": risk})})
    return replace(p, spec=spec)
