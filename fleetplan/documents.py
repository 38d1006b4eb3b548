"""Which fleetplan document a file holds, from its top-level keys.

A command given the wrong kind of file (a plan where an instance is read, a purchase plan
where a plan is read) says what the file is and which command reads it, instead of listing
every field the expected schema misses (``fleetplan perf plan.json`` once listed 26
missing fields, ``place`` given a purchase plan 61). The instance
reader (:mod:`fleetplan.instance.io`) and the CLI's JSON reader
(``fleetplan.cli.common.load_json_document``) share it.
"""

from __future__ import annotations

from typing import Any

#: Each kind, the keys that identify it (all present), and the command that writes it.
#: Checked in this order: the first match names the kind.
KINDS: tuple[tuple[str, frozenset[str], str], ...] = (
    ("purchase plan", frozenset({"purchase_hash", "order_sheet"}), "fleetplan purchase FILE -o purchase-plan.json"),
    ("plan", frozenset({"pools", "fleet"}), "fleetplan solve -o plan.json"),
    ("placement", frozenset({"slices", "pods"}), "fleetplan place PLAN -o placement.json"),
    ("controller document", frozenset({"failover_routing"}), "fleetplan export PLACEMENT --plan PLAN -o controller.json"),
    ("what-if report", frozenset({"events"}), "fleetplan whatif PLAN -o report.json"),
    ("simulation report", frozenset({"tiers", "arrivals"}), "fleetplan simulate PLAN -o report.json"),
    ("instance", frozenset({"model", "chips", "regions"}), "an instance YAML (docs/instance.md)"),
    ("purchase-planning file", frozenset({"base", "quarters"}), "a purchase-planning YAML (docs/purchase.md)"),
)

#: The overlay files: the section they hold, their allowed top-level keys and the option that takes them.
OVERLAYS: tuple[tuple[str, str, frozenset[str], str], ...] = (
    ("workload file", "workload", frozenset({"format", "source", "workload", "statistics"}), "fleetplan solve INSTANCE --workload FILE"),
    ("priors file", "priors", frozenset({"priors", "source", "fit"}), "fleetplan solve INSTANCE --priors FILE"),
)


def document_kind(data: Any) -> str | None:
    """The kind of fleetplan document ``data`` (a parsed JSON or YAML mapping) is: one of
    :data:`KINDS`' names or :data:`OVERLAYS`' ('workload file', 'priors file'); None
    when its top-level keys match none."""
    if not isinstance(data, dict):
        return None
    keys = {k for k in data if isinstance(k, str)}
    for kind, needs, _ in KINDS:
        if needs <= keys:
            return kind
    for kind, section, allowed, _ in OVERLAYS:
        if section in keys and keys <= allowed:
            return kind
    return None


def made_by(kind: str) -> str:
    """What writes (or takes) a document of ``kind``: a command line or a file description."""
    for name, _, how in KINDS:
        if name == kind:
            return how
    for name, _, _, how in OVERLAYS:
        if name == kind:
            return how
    raise KeyError(kind)
