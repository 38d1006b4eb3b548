"""The rolling re-plan (``fleetplan purchase FILE --fix-orders PREVIOUS.json --now Q --path B``).

A planner re-plans every quarter: the orders already placed stand, demand has followed one
branch of the tree, and the question is again what to commit now. The input:

* ``PREVIOUS.json``: an earlier purchase plan (``fleetplan purchase -o``) of a file with the
  same quarters; its orders are read from its order sheet (the root's) and its contingency
  table (the later nodes'), and from its own fixed orders when it was a re-plan itself;
* ``now``: the current quarter (a label of the horizon): orders placed before it are fixed,
  the orders of ``now`` itself are the decision;
* ``path``: the branch demand has followed up to ``now``: the node label of the tree at
  ``now`` (branch names from the root joined by '/', as the plan's ``node`` fields;
  ``root`` or empty before the first branching).

The re-planned tree keeps the realised path's nodes before ``now`` (probability 1, their
orders fixed to the previous plan's: an order it did not place is fixed at 0) and the
subtree of the realised node at ``now``, each probability divided by that node's
(conditional on the history seen). Its expected cost therefore includes what the realised
quarters cost. Every inconsistency is an :class:`~fleetplan.errors.InputError` naming the
option or field (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetplan.errors import InputError, Problem
from fleetplan.instance.io import instance_hash
from fleetplan.purchase.io import PurchaseProblem
from fleetplan.purchase.result import INTEGRITY_FIELDS, PURCHASE_SCHEMA_VERSION, edited_fields, plan_digest
from fleetplan.purchase.schema import quarter_index
from fleetplan.purchase.tree import Node, Tree

__all__ = ["Replan", "intact_problems", "plan_replan", "previous_orders", "service_until"]


@dataclass(frozen=True)
class Replan:
    """A checked re-plan: ``tree`` the re-rooted tree, ``now_node`` its node at the current
    quarter, ``fixed[(n, r, k)]`` the pods of every order variable fixed (the new tree's node
    ids), ``now`` and ``path`` as given, ``previous_hash`` the previous plan's purchase hash,
    ``previous_plan_hash`` the digest of its content (:func:`fleetplan.purchase.result.plan_digest`)
    and ``same_file`` whether this purchase file is the one it was solved for (a re-forecast
    demand tree makes another)."""

    tree: Tree
    now_node: int
    fixed: dict[tuple[int, str, str], int]
    now: str
    path: str
    previous_hash: str
    previous_plan_hash: str = ""
    same_file: bool = True


def intact_problems(p: PurchaseProblem, doc: dict) -> list[Problem]:
    """What makes the previous plan ``doc`` not the one ``fleetplan purchase -o`` wrote for this
    file's base instance (empty when it is), each naming the field: a ``schema_version`` this
    code does not write, no ``integrity`` record, a field of
    :data:`~fleetplan.purchase.result.INTEGRITY_FIELDS` whose content no longer matches its
    digest (an order removed or moved, an edited hash), a ``base_instance_hash`` of another
    instance than ``p``'s base. The purchase file itself may differ (the demand re-forecast):
    the orders placed are checked against its supply by :func:`plan_replan`."""
    v = doc.get("schema_version")
    if isinstance(v, bool) or v != PURCHASE_SCHEMA_VERSION:
        return [Problem("--fix-orders", f"schema_version {v!r}: this fleetplan writes and reads purchase plans of schema_version "
                                        f"{PURCHASE_SCHEMA_VERSION} (a plan of another version, or an edited one, is not re-planned from; "
                                        "re-run `fleetplan purchase -o` on the file it was made from).", "schema_version")]
    rec = doc.get("integrity")
    if not isinstance(rec, dict) or set(rec) != set(INTEGRITY_FIELDS):
        return [Problem("--fix-orders", "integrity: the previous plan has no integrity record of its "
                                        f"{', '.join(INTEGRITY_FIELDS)} (edited, or not written by `fleetplan purchase -o`).", "integrity")]
    problems = [Problem("--fix-orders", f"{f}: the previous plan's {f} does not match its integrity record (integrity.{f}): it was edited after "
                                        "`fleetplan purchase -o` wrote it; a re-plan fixes the orders placed, so it starts only from the plan "
                                        "as written.", f) for f in edited_fields(doc)]
    if not problems and doc.get("base_instance_hash") != instance_hash(p.base):
        problems.append(Problem("--fix-orders", f"base_instance_hash: the previous plan was solved on another base instance than this file's "
                                                f"{p.base.name!r} (its fleets were sized for that one): re-plan with the base instance it was "
                                                "solved on.", "base_instance_hash"))
    return problems


def previous_orders(doc: dict) -> dict[tuple[str, str, str, str], int]:
    """(node label, order quarter, region, chip) -> pods of every order in a purchase plan
    document: the order sheet (node 'root'), the contingency table and its fixed orders."""
    rows = doc.get("order_sheet", []) + doc.get("contingency", []) + doc.get("fixed_orders", [])
    if any("pods" not in o for o in rows):
        raise KeyError("pods")
    got = _previous_field(doc, "pods")
    if len(got) != len(rows):  # an order row given twice (an edited plan): its pods were merged silently
        raise ValueError("an order (node, order quarter, region, chip) appears in more than one row")
    return {key: _whole(v) for key, v in got.items()}


def _whole(v) -> int:
    """An order's pods as written by `fleetplan purchase -o`: a JSON integer (an edited 1.9,
    true or "2" was taken as 1, 1 and 2). Raises ValueError otherwise."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"pods must be a whole number, got {v!r}")
    return v


def _previous_field(doc: dict, name: str) -> dict[tuple[str, str, str, str], object]:
    """(node label, order quarter, region, chip) -> field ``name`` of each order of a purchase
    plan document, where the order has it."""
    out: dict[tuple[str, str, str, str], object] = {}
    sheet_node = (doc.get("replan") or {}).get("path", "root")  # a re-plan's order sheet is its realised node's
    for o in doc.get("order_sheet", []):
        if name in o:
            out[(sheet_node, o["order_quarter"], o["region"], o["chip"])] = o[name]
    for o in doc.get("contingency", []) + doc.get("fixed_orders", []):
        if name in o:
            out[(o["node"], o["order_quarter"], o["region"], o["chip"])] = o[name]
    return out


def service_until(labels: list[str], t) -> str | None:
    """The last quarter in service of an order on terms ``t`` (a label, past the horizon too),
    or None when it is kept for good: the plan's ``in_service_until`` ('2028Q4' + 7 quarters -> '2030Q3')."""
    if t.service_quarters is None:
        return None
    i = quarter_index(labels[0]) + t.delivery + t.service_quarters - 1
    return f"{i // 4}Q{i % 4 + 1}"


def _label(path: tuple[str, ...]) -> str:
    return "/".join(path) or "root"


def plan_replan(p: PurchaseProblem, doc: dict, now: str, path: str | None, source: str) -> Replan:
    """Check the re-plan inputs against the purchase problem ``p`` and re-root its tree.

    Args:
        doc: the previous purchase plan (parsed JSON); ``source`` its file name for messages.
        now: the current quarter label; path: the realised node label at ``now``.
    Raises: :class:`InputError` naming ``--fix-orders`` (not a purchase plan, not intact:
        :func:`intact_problems`, other quarters, an order the file does not offer), ``--now`` (not a quarter of the
        horizon) or ``--path`` (no such node at ``now``, in the file's tree or the
        previous plan's); also for an earlier order that is negative, is delivered in another
        quarter than this file's lead time gives, or is above this file's delivery cap.
    """
    problems: list[Problem] = []
    if not isinstance(doc, dict) or not isinstance(doc.get("quarters"), list) or "order_sheet" not in doc or "scenarios" not in doc:
        raise InputError(source, [Problem("--fix-orders", "not a purchase plan (a JSON file written by `fleetplan purchase -o`).", source)])
    intact = intact_problems(p, doc)
    if intact:
        raise InputError(source, intact)
    if doc["quarters"] != p.labels:
        raise InputError(source, [Problem("--fix-orders", f"the previous plan's quarters {doc['quarters'][0]}..{doc['quarters'][-1]} "
                                                           f"({len(doc['quarters'])}) are not this file's {p.labels[0]}..{p.labels[-1]} ({len(p.labels)}): "
                                                           "re-plan with the same horizon.", "quarters")])
    if now not in p.labels:
        raise InputError("--now", [Problem("--now", f"not a quarter of the horizon ({p.labels[0]} .. {p.labels[-1]}, YYYYQn).", now)])
    q_now = p.labels.index(now)
    tree = p.tree
    at = [n for n in tree.nodes if n.quarter == q_now]
    want = (path or "root").strip("/") or "root"
    match = [n for n in at if n.label == want]
    if not match:
        if path is None and len(at) == 1:
            match = at
        else:
            raise InputError("--path", [Problem("--path", f"no node of the demand tree in {now} is {want!r}; the nodes then are "
                                                          f"{sorted(n.label for n in at)} (branch names from the root joined by '/').", path or "")])
    real = match[0]
    chain = tree.ancestors_or_self(real.id)
    prev_nodes = {(q["quarter"], q["node"]) for s in doc["scenarios"] for q in s["quarters"]}
    for a in chain[:-1]:
        key = (p.labels[tree.nodes[a].quarter], tree.nodes[a].label)
        if key not in prev_nodes:
            problems.append(Problem("--path", f"the previous plan has no node {key[1]!r} in {key[0]}: it was made on another tree "
                                              "(the realised path must be one of its branches).", want))
    try:
        orders = previous_orders(doc)
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(source, [Problem("--fix-orders", f"an order of the previous plan is not readable ({e}): a purchase plan's orders carry "
                                                          "node, order_quarter, region, chip and whole pods.", source)]) from None
    delivered = {key: v for key, v in _previous_field(doc, "delivery_quarter").items() if v}
    prices = {key: float(v) for key, v in _previous_field(doc, "price_usd").items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    untils = _previous_field(doc, "in_service_until")
    was_now = (doc.get("replan") or {}).get("now")
    if was_now in p.labels and p.labels.index(was_now) > q_now:
        # its orders before its own --now are fixed in it, and an earlier --now would leave them free again
        raise InputError("--now", [Problem("--now", f"the previous plan is a re-plan at {was_now}: a re-plan from it is at {was_now} or later "
                                                    "(the orders placed up to then are fixed in it).", now)])
    terms = {(t.quarter, t.region, t.chip): t for t in p.orders}
    before = {tree.nodes[a].label for a in chain[:-1]}
    per_cap: dict = {}
    for (node, oq, r, k), pods in sorted(orders.items()):
        if not (node in before and oq in p.labels and p.labels.index(oq) < q_now and pods != 0):
            continue
        where = f"{node}:{oq}:{r}:{k}"
        t = terms.get((p.labels.index(oq), r, k))
        if pods < 0:
            problems.append(Problem("--fix-orders", f"the previous plan orders {pods} {k} pods in {r} in {oq} (node {node}): an order is a whole "
                                                    "number of pods, at least 0 (was the file edited?).", where))
        elif t is None:
            problems.append(Problem("--fix-orders", f"the previous plan ordered {pods} {k} pods in {r} in {oq} (node {node}), which this file "
                                                    "does not offer then (supply): fix the file or the plan.", where))
        else:
            was = delivered.get((node, oq, r, k))
            now_at = p.labels[t.delivery] if t.delivery < len(p.labels) else None
            if was is not None and now_at is not None and was != now_at:
                problems.append(Problem("--fix-orders", f"the previous plan's order of {pods} {k} pods in {r} placed in {oq} (node {node}) is "
                                                        f"delivered in {was}; this file's supply delivers an order of {oq} in {now_at} (its lead "
                                                        "time changed): an order placed does not move -- re-plan with the supply it was placed "
                                                        "under.", where))
            paid = prices.get((node, oq, r, k))
            if paid is not None and abs(paid - pods * t.price_usd_per_pod) > 1e-5 * max(1.0, paid):
                problems.append(Problem("--fix-orders", f"the previous plan's order of {pods} {k} pods in {r} placed in {oq} (node {node}) records "
                                                        f"{paid:,.0f} USD ({paid / pods:,.0f} per pod); this file prices a pod at {t.price_usd_per_pod:,.0f} "
                                                        "USD: the supply's price changed, or the plan was edited -- an order placed keeps its price; "
                                                        "re-plan with the supply it was placed under.", where))
            key = (node, oq, r, k)
            if key in untils and untils[key] != service_until(p.labels, t):
                # the same total on other terms (a longer commitment at a lower rate, a capital pod made a commitment) moved when it leaves
                def said(u):
                    return "kept for good" if u is None else f"in service until {u}"

                problems.append(Problem("--fix-orders", f"the previous plan's order of {pods} {k} pods in {r} placed in {oq} (node {node}) is "
                                                        f"{said(untils[key])}; on this file's terms it would be {said(service_until(p.labels, t))} (the "
                                                        "price's kind or term changed): an order placed keeps its terms -- re-plan with the supply "
                                                        "it was placed under.", where))
            if 0 < pods < t.min_order_pods:
                problems.append(Problem("--fix-orders", f"the previous plan's order of {pods} {k} pods in {r} placed in {oq} (node {node}) is below "
                                                        f"this file's minimum order of {t.min_order_pods} pods (min_order_pods): fix the file or the plan.",
                                        where))
            per_cap[(t.entry, t.delivery)] = per_cap.get((t.entry, t.delivery), 0) + pods
            cap = p.delivery_cap[(t.entry, t.delivery)]
            if per_cap[(t.entry, t.delivery)] > cap:
                problems.append(Problem("--fix-orders", f"the previous plan's orders delivered in {now_at} of supply.{t.entry} ({k}) come to "
                                                        f"{per_cap[(t.entry, t.delivery)]} pods on the realised path, above this file's delivery cap of "
                                                        f"{cap} then (max_pods_delivered_per_quarter): fix the file or the plan.", where))
    if problems:
        raise InputError(source, problems)
    # the re-rooted tree: the realised chain, then the subtree of the realised node
    keep = list(chain)
    frontier = [real.id]
    while frontier:
        nxt = []
        for n in frontier:
            kids = tree.children(n)
            keep += kids
            nxt += kids
        frontier = nxt
    keep = sorted(set(keep), key=lambda n: (tree.nodes[n].quarter, n))
    new_id = {old: i for i, old in enumerate(keep)}
    pr = real.probability
    nodes = []
    for old in keep:
        o = tree.nodes[old]
        prob = 1.0 if o.quarter <= q_now else o.probability / pr
        nodes.append(Node(new_id[old], o.quarter, None if o.parent is None else new_id[o.parent], prob, o.demand, o.path, o.workload, o.workload_source))
    scen = {s: [new_id[n] for n in ids] for s, ids in tree.scenarios.items() if real.id in ids}
    fixed: dict[tuple[int, str, str], int] = {}
    for a in chain[:-1]:
        na = tree.nodes[a]
        for t in p.orders:
            if t.quarter == na.quarter:
                fixed[(new_id[a], t.region, t.chip)] = orders.get((na.label, p.labels[na.quarter], t.region, t.chip), 0)
    return Replan(Tree(nodes, scen), new_id[real.id], fixed, now, real.label, str(doc.get("purchase_hash", "")), plan_digest(doc),
                  doc.get("purchase_hash") == instance_hash(p.spec))
