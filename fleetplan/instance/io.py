"""Load instances from YAML (``yaml.safe_load`` semantics, duplicate keys rejected), turn
every validation failure into a :class:`~fleetplan.errors.Problem` naming the field path,
the value and the unit, and hash instances for plans to carry.
"""

from __future__ import annotations

import hashlib
import json
import re
import types
import typing
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, Union

import yaml
from pydantic import BaseModel, ValidationError

from fleetplan.errors import InconsistentInstanceError, InstanceError, Problem, short_repr
from fleetplan.instance.schema import MAX_REGIONS, Instance, Priors, Tier, Workload

__all__ = [
    "load_instance",
    "load_instance_overlaid",
    "read_overlay",
    "apply_overlay_block",
    "Overlay",
    "parse_instance",
    "instance_hash",
    "instance_document",
    "bundled_instances",
    "bundled_instance_path",
    "resolve_instance_path",
    "DEFAULT_INSTANCE",
    "validation_problems",
    "require_valid",
]

DEFAULT_INSTANCE = "gemini-ironwood"
MAX_FILE_BYTES = 16 * 1024 * 1024


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys (plain safe_load keeps the last)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, "unhashable mapping key", key_node.start_mark)
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first defined earlier in the same mapping)", key_node.start_mark
            )
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

#: Most YAML aliases (``*name``) a file may use: anchors are handy, but nested aliases
#: expand geometrically (the "billion laughs"), and validation walks the expansion.
MAX_ALIASES = 32


#: Most items of one YAML list or mapping: above every list the schema allows (regions and
#: failover_to <= MAX_REGIONS); checked while the file is parsed, since the pure-Python
#: parser spends a minute on a 300,000-item list before the schema could refuse it.
MAX_YAML_ITEMS = MAX_REGIONS


def _compose_node(self, parent, index):
    if parent is not None and len(parent.value) >= MAX_YAML_ITEMS:
        kind = "list" if isinstance(parent, yaml.nodes.SequenceNode) else "mapping"
        raise yaml.composer.ComposerError(None, None, f"a {kind} of more than {MAX_YAML_ITEMS:,} items (from line {parent.start_mark.line + 1}); "
                                          "no list or mapping of an instance is that long (docs/cli.md, input limits)", self.peek_event().start_mark)
    if self.check_event(yaml.events.AliasEvent):
        self._fleetplan_aliases = getattr(self, "_fleetplan_aliases", 0) + 1
        if self._fleetplan_aliases > MAX_ALIASES:
            raise yaml.composer.ComposerError(None, None, f"more than {MAX_ALIASES} YAML aliases (*name): refused, nested aliases "
                                              "expand without bound", self.peek_event().start_mark)
    return yaml.composer.Composer.compose_node(self, parent, index)


_UniqueKeyLoader.compose_node = _compose_node



def _unwrap(tp: Any) -> list[Any]:
    """Candidate classes/types behind Optional / Annotated / Union."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (Union, types.UnionType):
        out = []
        for a in typing.get_args(tp):
            if a is not type(None):
                out.extend(_unwrap(a))
        return out
    return [tp]


def _describe(loc: tuple, root: type[BaseModel] = Instance) -> str:
    """The schema description of the field at ``loc`` of ``root`` (it carries the unit), or ''."""
    current: list[Any] = [root]
    description = ""
    for part in loc:
        nxt: list[Any] = []
        for tp in current:
            for cand in _unwrap(tp):
                origin = typing.get_origin(cand)
                if isinstance(cand, type) and issubclass(cand, BaseModel):
                    if isinstance(part, str) and part in cand.model_fields:
                        f = cand.model_fields[part]
                        description = f.description or description
                        nxt.append(f.annotation)
                    elif isinstance(part, str):  # discriminator tag of a union member
                        kind = cand.model_fields.get("kind")
                        if kind is not None and part in typing.get_args(_unwrap(kind.annotation)[0]):
                            nxt.append(cand)
                elif origin is dict:
                    nxt.append(typing.get_args(cand)[1])
                elif origin is list:
                    if isinstance(part, int):
                        nxt.append(typing.get_args(cand)[0])
        if not nxt:
            return description
        current = nxt
    return description


#: Fields renamed since fleetplan 0.1 (old key -> new key): an old file gets a migration
#: message instead of "unknown field" plus "required field is missing".
RENAMED_FIELDS = {
    "ici_gbps": "ici_gbytes_per_s",
    "kv_ici_gbps_per_slice": "kv_ici_gbytes_per_s_per_slice",
    "dcn_gbps_per_slice": "dcn_gbytes_per_s_per_slice",
}


def validation_problems(err: ValidationError, prefix: tuple = (), reference: str = "docs/instance.md",
                        root: type[BaseModel] = Instance) -> list[Problem]:
    """Problems from a pydantic ``ValidationError`` of the document class ``root`` (the
    instance unless told), each with the field's unit; an
    unknown field points to ``reference`` (the schema of the document being read); a
    field renamed since 0.1 (:data:`RENAMED_FIELDS`) says what it is called now."""
    out = []
    errors = err.errors(include_url=False)
    renamed_at = {(tuple(e["loc"][:-1]), RENAMED_FIELDS[e["loc"][-1]]) for e in errors
                  if e["type"] == "extra_forbidden" and e["loc"] and e["loc"][-1] in RENAMED_FIELDS}
    for e in errors:
        if e["type"] == "missing" and e["loc"] and (tuple(e["loc"][:-1]), e["loc"][-1]) in renamed_at:
            continue  # reported once, as the old key's rename
        loc = prefix + tuple(e["loc"])
        path = ".".join(str(p) for p in loc)
        kind = e["type"]
        # An unknown field has no description of its own ('' rather than its parent's).
        desc = "" if kind == "extra_forbidden" else _describe(tuple(e["loc"]), root)
        msg = e["msg"].removeprefix("Value error, ")
        if kind == "missing":
            msg = "required field is missing"
        elif kind == "extra_forbidden" and e["loc"] and e["loc"][-1] in RENAMED_FIELDS:
            new = RENAMED_FIELDS[e["loc"][-1]]
            msg = (f"renamed to '{new}' (the value is unchanged: GB/s = 1e9 bytes/s, never gigabits/s); rename the key in the file"
                   f" -- see {reference}")
            desc = ""
        elif kind == "extra_forbidden":
            msg = f"unknown field (not in the schema; check the spelling -- see {reference})"
        elif kind == "union_tag_invalid":
            msg = msg.replace("Input tag", "attention kind")
        text = msg[0].upper() + msg[1:] if msg else msg
        if desc:
            text += f". Expected: {desc}"
        elif not text.endswith("."):
            text += "."
        value = "" if kind == "missing" else short_repr(e.get("input"))
        out.append(Problem(path, text if text.endswith(".") else text + ".", value))
    return out


_ITEM = re.compile(r"^(?P<head>.*?)\.(?P<lo>\d+)(?:\.\.(?P<hi>\d+))?$")


def _collapse_list_items(problems: list[Problem]) -> list[Problem]:
    """One problem for a run of list elements failing the same way (24 bad hourly values
    read as one line naming the index range, not 24 lines)."""
    out: list[Problem] = []
    for p in problems:
        cur = _ITEM.match(p.path)
        prev = _ITEM.match(out[-1].path) if out else None
        if cur and prev and cur["hi"] is None and prev["head"] == cur["head"] and out[-1].message == p.message \
                and int(cur["lo"]) == int(prev["hi"] or prev["lo"]) + 1:
            value = out[-1].value if out[-1].value == p.value else ""
            out[-1] = Problem(f"{cur['head']}.{prev['lo']}..{cur['lo']}", p.message, value)
            continue
        out.append(p)
    return out


def parse_instance(data: Any, source: str = "<data>") -> Instance:
    """Validate a Python mapping (as read from YAML) into an :class:`Instance`.

    Raises: :class:`InstanceError` listing every problem (schema and cross-field).
    """
    if data is None:
        raise InstanceError(source, [Problem("", "the instance is empty; it must be a YAML mapping (key: value) at the top level.")])
    if not isinstance(data, dict):
        raise InstanceError(source, [Problem("", f"the instance must be a YAML mapping (key: value) at the top level, got {type(data).__name__}.")])
    try:
        # the constructor runs the schema and then, on a schema-valid instance, the cross-field checks
        return Instance.model_validate(data)
    except ValidationError as e:
        inconsistent = _inconsistency(e)
        if inconsistent is not None:
            raise InstanceError(source, inconsistent.problems) from None
        raise InstanceError(source, _collapse_list_items(validation_problems(e))) from None


def _inconsistency(err: ValidationError) -> InconsistentInstanceError | None:
    """The cross-field error the Instance constructor raised inside ``err``, if that is what it is."""
    for e in err.errors(include_url=False):
        cause = (e.get("ctx") or {}).get("error")
        if isinstance(cause, InconsistentInstanceError):
            return cause
    return None


def require_valid(inst: Instance, source: str | None = None) -> None:
    """Raise :class:`InstanceError` unless ``inst`` passes the schema and the cross-field
    checks. An Instance built by ``model_copy(update=...)`` or ``model_construct`` skipped
    both (pydantic validates only on construction); :func:`fleetplan.solve` and
    :func:`fleetplan.verify` call this so such an instance is refused, not planned.
    About a millisecond (the instance is dumped and validated again)."""
    parse_instance(inst.model_dump(mode="python", round_trip=True), source or repr(inst.name))


def _read_text(path: Path) -> str:
    source = str(path)
    if not path.exists():
        raise InstanceError(source, [Problem("(file)", "no such file. Give a YAML instance path or a bundled name: " + ", ".join(bundled_instances()) + ".")])
    if path.is_dir():
        raise InstanceError(source, [Problem("(file)", "is a directory, not a YAML instance file.")])
    if not path.is_file():
        raise InstanceError(source, [Problem("(file)", "is not a regular file (a device, pipe or socket); give a YAML file.")])
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InstanceError(source, [Problem("(file)", f"file is {size} bytes; an instance is at most {MAX_FILE_BYTES} bytes.")])
        raw = path.read_bytes()
    except OSError as e:
        raise InstanceError(source, [Problem("(file)", f"cannot read: {e.strerror}.")]) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InstanceError(source, [Problem("(file)", f"not UTF-8 text (byte {e.start}).")]) from None


def _read_yaml(p: Path) -> Any:
    text = _read_text(p)
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # SafeLoader subclass: safe_load semantics
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(unknown position)"
        what = " ".join((getattr(e, "problem", None) or str(e)).split())
        raise InstanceError(str(p), [Problem("(yaml)", f"YAML syntax error at {where}: {what}.")]) from None
    except RecursionError:
        raise InstanceError(str(p), [Problem("(yaml)", "the YAML nests too deeply to read.")]) from None
    except (ValueError, KeyError, TypeError, OverflowError) as e:  # a tagged or implicit scalar its constructor rejects
        raise InstanceError(str(p), [Problem(
            "(yaml)", "a YAML value cannot be converted (check dates, numbers over 4300 digits and !!tagged values): "
            f"{' '.join(str(e).split())}."
        )]) from None


#: Sections an overlay file may replace, and the schema class whose fields it may set.
OVERLAY_SECTIONS = {"workload": Workload, "priors": Priors}
#: Top-level keys of the overlay files (what `workload fit -o` and `calibrate -o` write).
OVERLAY_KEYS = {"workload": ("format", "source", "workload", "statistics"), "priors": ("priors", "source", "fit")}


def read_overlay(path: str | Path, section: str) -> tuple[dict, dict]:
    """Read an overlay file: a YAML mapping with a ``section`` block (``workload:`` as
    written by ``fleetplan workload fit``, ``priors:`` as written by ``fleetplan
    calibrate``) whose keys are fields of that section of the instance schema.

    Returns: (the block's fields, the file's ``source`` mapping or {}).
    Raises: InstanceError naming the file and the key (missing file, no such block,
    unknown field).
    """
    p = Path(path)
    if p.is_dir() or not p.exists():
        raise InstanceError(str(p), [Problem("(file)", f"no such {section} file" + (" (it is a directory)" if p.is_dir() else "") + ".")])
    data = _read_yaml(p)
    cls = OVERLAY_SECTIONS[section]
    other = next((o for o in OVERLAY_SECTIONS if o != section), "")
    if isinstance(data, dict) and not isinstance(data.get(section), dict) and isinstance(data.get(other), dict):
        raise InstanceError(str(p), [Problem(section, f"this is a {other} file (it has '{other}:', no '{section}:'); pass it with --{other}.")])
    if not isinstance(data, dict) or not isinstance(data.get(section), dict):
        raise InstanceError(str(p), [Problem(section, f"a {section} file needs a '{section}:' mapping of {cls.__name__} fields "
                                                      f"(write one with `fleetplan {'workload fit' if section == 'workload' else 'calibrate'} -o`).")])
    if not data[section]:
        raise InstanceError(str(p), [Problem(section, f"the '{section}:' block is empty: it would change nothing.")])
    extra = [k for k in data if k not in OVERLAY_KEYS[section]]
    if extra:
        raise InstanceError(str(p), [Problem(str(k), f"unknown top-level key in a {section} file; it holds "
                                                    f"{', '.join(OVERLAY_KEYS[section])}.") for k in extra])
    block = data[section]
    unknown = [k for k in block if k not in cls.model_fields]
    if unknown:
        raise InstanceError(str(p), [Problem(f"{section}.{k}", f"unknown {section} field; the fields are "
                                                               f"{', '.join(cls.model_fields)} (docs/instance.md).") for k in unknown])
    if section == "workload" and "tiers" in block:
        _check_tier_entries(str(p), block["tiers"])
    source = data.get("source") if isinstance(data.get("source"), dict) else {}
    return dict(block), source


#: Fields a workload file's ``tiers:`` entry may set on the instance's tier of the same bound.
TIER_ENTRY_FIELDS = tuple(k for k in Tier.model_fields if k not in ("name", "max_input_tokens"))


def _check_tier_entries(path: str, entries: Any) -> None:
    """A workload file's ``tiers:`` is a list of mappings, each naming an instance tier by
    its ``max_input_tokens`` (null: the unbounded last tier) and setting some of
    :data:`TIER_ENTRY_FIELDS`. Raises InstanceError naming the entry."""
    what = ("in a workload file, tiers: is a list of {max_input_tokens: TOKENS or null, prefix_hit_rate: FRACTION}: each entry sets "
            "fields of the instance's tier with that bound (the instance keeps its tiers, names and SLOs)")
    if not isinstance(entries, list) or not entries:
        raise InstanceError(path, [Problem("workload.tiers", what + ".", short_repr(entries))])
    probs = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or "max_input_tokens" not in e:
            probs.append(Problem(f"workload.tiers.{i}", what + "; this entry names no max_input_tokens.", short_repr(e)))
            continue
        bad = [k for k in e if k != "max_input_tokens" and k not in TIER_ENTRY_FIELDS]
        for k in bad:
            probs.append(Problem(f"workload.tiers.{i}.{k}", f"a workload file's tier entry may set {', '.join(TIER_ENTRY_FIELDS)} "
                                                            "(a tier is renamed or re-bounded in the instance itself)."))
    if probs:
        raise InstanceError(path, probs)


@dataclass(frozen=True)
class Overlay:
    """An overlay applied to an instance: its section, file, the fields it set and its ``source``."""

    section: str
    path: str
    fields: tuple[str, ...]
    source: dict
    notes: tuple[str, ...] = ()


def _drop_empty_tiers(workload: dict) -> list[str]:
    """Remove the tiers a fitted input mix leaves without a bucket (a trace with no long
    prompt empties the long tier); the last kept tier becomes unbounded. Returns notes."""
    tiers, mix = workload.get("tiers"), workload.get("input_mix")
    if not isinstance(tiers, list) or not isinstance(mix, list) or not all(isinstance(t, dict) for t in tiers):
        return []
    try:
        lengths = [float(b["tokens"]) for b in mix]
        bounds = [float("inf") if t.get("max_input_tokens") is None else float(t["max_input_tokens"]) for t in tiers]
    except (KeyError, TypeError, ValueError):
        return []  # malformed: let the schema name the problem
    keep, lo = [], 0.0
    for t, hi in zip(tiers, bounds):
        if any(lo < x <= hi for x in lengths):
            keep.append(t)
        lo = hi
    if not keep or len(keep) == len(tiers):
        return []
    dropped = [str(t.get("name")) for t in tiers if t not in keep]
    notes = [f"the fitted input mix has no request in tier(s) {', '.join(dropped)}: dropped from this instance."]
    if keep[-1] is not tiers[-1] and keep[-1].get("max_input_tokens") is not None:
        notes.append(f"tier '{keep[-1].get('name')}' is now the last tier and unbounded (it was <= {keep[-1]['max_input_tokens']} tokens).")
        keep[-1] = {**keep[-1], "max_input_tokens": None}
    workload["tiers"] = keep
    return notes


def _merge_tier_entries(workload: dict, entries: list, pooled_rate_given: bool) -> list[str]:
    """Set the fields of each ``tiers:`` entry of a workload file on the instance's tier
    with the same ``max_input_tokens`` (in place). An entry whose bound no tier has is
    not applied (a note says so); when the file also gives the pooled prefix_hit_rate, an
    instance tier no entry matched drops its own prefix_hit_rate (an assumption the
    measured pooled rate replaces). Returns notes."""
    tiers = workload.get("tiers")
    if not isinstance(tiers, list) or not all(isinstance(t, dict) for t in tiers):
        return []  # malformed: let the schema name the problem
    bounds = [t.get("max_input_tokens") for t in tiers]
    out, matched = [], set()
    for e in entries:
        i = next((j for j, b in enumerate(bounds) if b == e["max_input_tokens"]), None)
        fields = {k: v for k, v in e.items() if k != "max_input_tokens"}
        if i is None:
            out.append(f"the workload file's tier bounded at {e['max_input_tokens'] if e['max_input_tokens'] is not None else 'no limit (unbounded)'} "
                       f"matches no tier of the instance (max_input_tokens {bounds}): its {', '.join(fields)} not applied.")
            continue
        matched.add(i)
        tiers[i] = {**tiers[i], **fields}
    for i, t in enumerate(tiers):
        if i not in matched and pooled_rate_given and t.get("prefix_hit_rate") is not None:
            out.append(f"tier '{t.get('name')}' drops its own prefix_hit_rate {t['prefix_hit_rate']}: the workload file measures the pooled "
                       "rate and none for this tier's bounds, so the tier takes the pooled rate.")
            tiers[i] = {k: v for k, v in t.items() if k != "prefix_hit_rate"}
    workload["tiers"] = tiers
    return out


def apply_overlay_block(data: dict, section: str, block: dict, source: dict | None = None) -> list[str]:
    """Apply an overlay block to raw instance data in place: ``block``'s fields replace
    those of ``data[section]``. A workload block with an input mix drops the tiers it
    leaves empty; ``source`` (the overlay file's provenance) lets mismatched tier bounds
    and priors fitted for another model or chip be flagged. Returns notes (text)."""
    source = source or {}
    base = data.get(section)
    entries = block.get("tiers") if section == "workload" else None
    if entries is not None:
        block = {k: v for k, v in block.items() if k != "tiers"}
    data[section] = {**(base if isinstance(base, dict) else {}), **block}
    notes: list[str] = []
    if entries is not None:
        notes += _merge_tier_entries(data[section], entries, "prefix_hit_rate" in block)
    if section == "workload" and "input_mix" in block:
        fitted = source.get("tier_bounds_tokens")
        tiers = data[section].get("tiers")
        if isinstance(fitted, list) and isinstance(tiers, list):
            mine = [t.get("max_input_tokens") if isinstance(t, dict) else None for t in tiers]
            if {b for b in mine if b is not None} - {b for b in fitted if b is not None}:
                notes.append(f"the mix was fitted with tier bounds {fitted} (tokens) but the instance's tiers are {mine}: a bucket may "
                             "straddle a tier boundary; re-fit with --tiers matching the instance.")
        notes += _drop_empty_tiers(data[section])
    if section == "priors" and source.get("model"):
        model = data.get("model", {}).get("name") if isinstance(data.get("model"), dict) else None
        chips = list(data.get("chips", {})) if isinstance(data.get("chips"), dict) else []
        tp = source.get("tensor_parallel")
        tp_text = "/".join(map(str, tp)) if isinstance(tp, list) else str(tp or "")
        fitted_for = f"{source.get('profile_model') or source.get('model')} on {source.get('profile_chip') or source.get('chip')}" + (f" x {tp_text}" if tp_text else "")
        if source.get("model") != model or source.get("chip") not in chips:
            notes.append(f"these priors were fitted for {fitted_for}; this instance serves {model} on {', '.join(chips)}: efficiencies "
                          "carry over between models and chips only roughly, and fixed overheads hardly at all.")
    return notes


def _apply_overlay(data: dict, section: str, path: Path, applied: list[Overlay]) -> None:
    block, source = read_overlay(path, section)
    notes = apply_overlay_block(data, section, block, source)
    applied.append(Overlay(section, str(path), tuple(block), source, tuple(notes)))


def _refuse_other_documents(data: Any, p: Path) -> None:
    """Say what the file is when it is another fleetplan document (a plan, a placement, a
    purchase plan or file, a workload or priors file), instead of every instance field it
    lacks (:func:`fleetplan.documents.document_kind`). Raises InstanceError naming the file."""
    from fleetplan.documents import OVERLAYS, document_kind, made_by

    kind = document_kind(data)
    if kind is None or kind == "instance":
        return
    if kind in {name for name, *_ in OVERLAYS}:
        how = f"it overlays an instance: `{made_by(kind)}`, or the instance's include:"
    elif kind == "purchase-planning file":
        how = "`fleetplan purchase` reads it; its base: names the instance"
    else:
        how = f"it is written by `{made_by(kind)}`" + ("; the instance a plan was solved for is in its 'instance' field" if kind == "plan" else "")
    raise InstanceError(str(p), [Problem("(file)", f"is a fleetplan {kind}, not an instance; give an instance YAML (docs/instance.md) or a "
                                                   f"bundled name ({how}).")])


def load_instance_overlaid(path: str | Path, workload: str | Path | None = None, priors: str | Path | None = None) -> tuple[Instance, list[Overlay]]:
    """Load an instance, apply its ``include:`` overlays and then the given ones.

    An instance may hold ``include: {workload: FILE, priors: FILE}`` (paths relative to
    the instance file): the ``workload:`` / ``priors:`` block of each file replaces the
    fields it names in the instance's section. ``workload`` and ``priors`` given here
    (``fleetplan solve --workload/--priors``) are applied after the includes.

    Returns: (the validated instance, the overlays applied in order).
    Raises: InstanceError naming every problem (file, YAML, overlay, schema, cross-field).
    """
    p = resolve_instance_path(path)
    data = _read_yaml(p)
    _refuse_other_documents(data, p)
    applied: list[Overlay] = []
    if isinstance(data, dict) and "include" in data:
        inc = data.pop("include")
        if not isinstance(inc, dict) or not inc or any(k not in OVERLAY_SECTIONS for k in inc) or not all(isinstance(v, str) and v.strip() for v in inc.values()):
            raise InstanceError(str(p), [Problem("include", "expected a mapping {workload: FILE, priors: FILE} of file paths "
                                                            "(relative to the instance file).", short_repr(inc))])
        for section, rel in inc.items():
            _apply_overlay(data, section, (p.parent / rel) if not Path(rel).is_absolute() else Path(rel), applied)
    included = list(applied)
    for section, extra in (("workload", workload), ("priors", priors)):
        if extra is not None:
            if not isinstance(data, dict):
                break
            _apply_overlay(data, section, Path(extra), applied)
            if section == "priors" and isinstance(data.get("physics"), dict):
                _priors_alone(data, applied)
    if isinstance(data, dict) and isinstance(data.get("physics"), dict):
        _resolve_physics_includes(data["physics"], p, data, applied)
        _check_priors_include_reaches_a_source(data["physics"], included, p)
    source = str(p) + "".join(f" + {o.section} {o.path}" for o in applied)
    return parse_instance(data, source), applied


#: how the note of an overlay that dropped the instance's physics block begins (:func:`_priors_alone`)
PRIORS_ALONE = "--priors: the plan holds under your priors alone"


def _priors_alone(data: dict, applied: list[Overlay]) -> None:
    """``--priors FILE`` on an instance with a ``physics:`` block: FILE is a calibration of the
    user's own engine, so the plan holds under the instance's priors with FILE laid over,
    alone -- the physics block is dropped (in place) and a note on the last overlay says so.
    Kept, every source would lay its own priors over FILE's (the bundled sources set every
    step prior) and the plan would hold under none of FILE's numbers. ``drift`` treats a
    refit the same way (:func:`fleetplan.workload.drift`)."""
    physics = data.pop("physics")
    srcs = physics.get("sources") if isinstance(physics.get("sources"), list) else []
    names = [str(s.get("name")) for s in srcs if isinstance(s, dict)]
    n = len(names) + (1 if physics.get("include_base", True) is not False else 0)
    o = applied[-1]
    note = (f"{PRIORS_ALONE} (the instance's priors with {o.path} laid over); the instance's "
            f"{n} physics source{'s' if n != 1 else ''} ({', '.join(names)}) {'are' if n != 1 else 'is'} not held -- add the file as a "
            "source in physics.sources (include: FILE) to hold both.")
    applied[-1] = Overlay(o.section, o.path, o.fields, o.source, (*o.notes, note))


def _check_priors_include_reaches_a_source(physics: dict, included: list[Overlay], instance_path: Path) -> None:
    """An ``include: {priors: FILE}`` changes the instance's own priors, which each physics
    source overlays with its own; fields of FILE that every source sets (and does not keep at
    the instance's value, ``instance_priors``) reach no source the plan holds under when the
    base is not a source itself (``include_base: false``). Such an include is refused rather
    than silently ignored, as an empty overlay is.

    Raises: InstanceError naming ``include.priors``, the masked fields and the two fixes."""
    inc = next((o for o in included if o.section == "priors"), None)
    srcs = physics.get("sources")
    if inc is None or physics.get("include_base", True) is not False or not isinstance(srcs, list) or not srcs:
        return
    if not all(isinstance(s, dict) for s in srcs):
        return  # the schema names the problem
    masked = [f for f in inc.fields if all(isinstance(s.get("priors"), dict) and f in s["priors"]
                                           and f not in (s.get("instance_priors") or ()) for s in srcs)]
    if masked:
        raise InstanceError(str(instance_path), [Problem(
            "include.priors", f"{', '.join(masked)} of {inc.path} reach no physics source: every source in physics.sources sets "
            f"{'them' if len(masked) > 1 else 'it'} over the instance's priors and the base is not a source (include_base: false). "
            "To hold the plan under the file too, add it as a source (physics.sources: - name: NAME, include: FILE); to plan on it "
            "alone, drop the physics: block (or pass it with `fleetplan solve --priors FILE`).", short_repr(inc.path))])


def _resolve_physics_includes(physics: dict, instance_path: Path, data: dict, applied: list[Overlay]) -> None:
    """Read every ``physics.sources[].include`` (a priors document, path relative to the
    instance file) into its source, in place: the file's ``priors:`` block under the
    source's own ``priors:`` fields, ``included: {path, sha256}``, and the file's
    ``source.description`` / ``source.covers`` where the source gives none. A source already
    carrying ``included`` (an embedded instance) is left as it is.

    The file's ``source:`` block is compared with the instance (``data``) by
    :func:`fleetplan.instance.provenance.source_mismatches`: a chip, model or precision that
    is not the instance's is a problem; a name that cannot be compared a note, appended to
    ``applied`` as an Overlay of section 'physics'.

    Raises: InstanceError naming ``physics.sources.N.include`` and the file's problem."""
    from fleetplan.instance.provenance import source_mismatches
    from fleetplan.instance.schema import SourceCovers

    srcs = physics.get("sources")
    if not isinstance(srcs, list):
        return  # the schema names the problem
    for i, src in enumerate(srcs):
        if not isinstance(src, dict) or not isinstance(src.get("include"), str) or src.get("included") is not None:
            continue
        rel = src["include"]
        path = (instance_path.parent / rel) if not Path(rel).is_absolute() else Path(rel)
        try:
            block, source = read_overlay(path, "priors")
        except InstanceError as e:
            raise InstanceError(str(instance_path), [Problem(f"physics.sources.{i}.include", f"{e.source}: {pr.path}: {pr.message}", rel)
                                                     for pr in e.problems]) from None
        bad, notes = source_mismatches(source, data)
        if bad:
            raise InstanceError(str(instance_path), [Problem(f"physics.sources.{i}.include", f"{rel}: {b}; fit the source on this "
                                                             "instance's chip and model (`fleetplan calibrate --instance`).", rel)
                                                     for b in bad])
        if notes:
            applied.append(Overlay("physics", str(path), (), source, tuple(f"physics.sources.{i} ({src.get('name')}): {n}." for n in notes)))
        own = src.get("priors")
        src["priors"] = {**block, **(own if isinstance(own, dict) else {})}
        src["included"] = {"path": rel, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
        if not src.get("description") and isinstance(source.get("description"), str):
            src["description"] = " ".join(source["description"].split())
        covers = source.get("covers")
        if "covers" not in src and isinstance(covers, dict):
            src["covers"] = {k: v for k, v in covers.items() if k in SourceCovers.model_fields}


def instance_files(path: str | Path, inst: Instance, overlays: list[Overlay] | tuple = ()) -> tuple[str, ...]:
    """Every file loading the instance at ``path`` read: the instance file, its overlays
    (``include:`` and the command's --workload/--priors, as :func:`load_instance_overlaid`
    returns them) and each ``physics.sources[].include`` (relative to the instance file).
    A command refuses to write its output over any of them (``check_output_path``)."""
    p = resolve_instance_path(path)
    out = [str(p), *(o.path for o in overlays)]
    for s in (inst.physics.sources if inst.physics is not None else ()):
        rel = (s.included or {}).get("path")
        if rel:
            out.append(str(p.parent / rel) if not Path(rel).is_absolute() else rel)
    return tuple(out)


def load_instance(path: str | Path) -> Instance:
    """Load and validate an instance from a YAML file or a bundled instance name
    (with its ``include:`` overlays applied; see :func:`load_instance_overlaid`).

    Args: path: a file path, or the name of a bundled instance (e.g. ``gemini-ironwood``).
    Returns: a frozen :class:`Instance`.
    Raises: :class:`InstanceError` naming every problem (file, YAML syntax, schema, cross-field).
    """
    return load_instance_overlaid(path)[0]


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


#: Fields added with a default that reproduces the behaviour from before they existed:
#: left out of the hash while at that default, so a plan solved before the field was added
#: still loads against its instance (a plan carries its instance's hash). (path, default).
HASH_NEUTRAL_DEFAULTS: tuple[tuple[tuple[str, ...], Any], ...] = (
    (("workload", "arrival_scv"), 1.0),
    (("workload", "classes", "*", "spec_acceptance_kind"), "rate"),
    (("workload", "classes", "*", "spec_acceptance_at_k"), None),
    (("serving", "mixed_shapes"), False),
    # placement-aware sizing: the defaults add fields, not content
    (("placement",), {"size_with_pods": True, "dcn_share_max": 0.05}),
    (("workload", "tiers", "*", "dcn_share_max"), None),
    (("chips", "*", "pod_dcn_egress_gbytes_per_s"), None),
    # physics with a stated spread: no block is one source, the instance's priors as fitted
    (("priors", "prefill_time_scale"), 1.0),
    (("priors", "decode_time_scale"), 1.0),
    (("physics",), None),
)

#: Fields added since plans embedded their instance (``Plan.instance``) whose default changes
#: nothing: left out of the embedded copy at that default, so a plan of an instance that does
#: not use them is written byte for byte as before they existed (a subset of
#: :data:`HASH_NEUTRAL_DEFAULTS`).
EMBED_NEUTRAL_DEFAULTS: tuple[tuple[tuple[str, ...], Any], ...] = HASH_NEUTRAL_DEFAULTS[-3:]


#: The routers ``serving.replica_router`` (``serving.router``'s older name) could
#: name: an instance with one of them hashes under the old name (:func:`instance_hash`).
OLD_ROUTERS = ("least-work", "random")


def _drop_default(node: Any, path: tuple[str, ...], default: Any) -> None:
    """Delete ``path`` from nested dicts when it holds ``default`` ('*' matches every key, or
    every item of a list)."""
    if not path:
        return
    head, rest = path[0], path[1:]
    if isinstance(node, list):
        if head == "*":
            for item in node:
                _drop_default(item, rest, default)
        return
    if not isinstance(node, dict):
        return
    keys = list(node) if head == "*" else [head]
    for k in keys:
        if k not in node:
            continue
        if rest:
            _drop_default(node[k], rest, default)
        elif node[k] == default:
            del node[k]


def _old_router_name(data: dict) -> None:
    """Write ``serving.router`` of a dumped instance under its old name, ``replica_router``,
    when it holds one of that field's values (:data:`OLD_ROUTERS`): an instance hashes and is
    embedded in a plan as before the rename, so plans solved then still load against their
    instances and a plan of an instance that leaves the router alone keeps its bytes."""
    serving = data.get("serving")
    if isinstance(serving, dict) and serving.get("router") in OLD_ROUTERS:
        serving["replica_router"] = serving.pop("router")


def instance_hash(inst: Instance) -> str:
    """SHA-256 (hex) of the instance's canonical JSON; equal for equal content, whatever
    the YAML formatting. Fields of :data:`HASH_NEUTRAL_DEFAULTS` at their default are left
    out (they change nothing)."""
    data = inst.model_dump(mode="json")
    for path, default in HASH_NEUTRAL_DEFAULTS:
        _drop_default(data, path, default)
    _old_router_name(data)
    return hashlib.sha256(_canonical(data)).hexdigest()


def instance_document(inst: Instance) -> dict:
    """``inst`` as the JSON mapping a plan embeds (``Plan.instance``): its ``model_dump(mode="json")``
    without the fields of :data:`EMBED_NEUTRAL_DEFAULTS` at their default. Parsing it gives
    ``inst`` back (the left-out fields take their defaults)."""
    data = inst.model_dump(mode="json")
    for path, default in EMBED_NEUTRAL_DEFAULTS:
        _drop_default(data, path, default)
    _old_router_name(data)
    return data


def bundled_instances() -> list[str]:
    """Names of the instances shipped with fleetplan (``instances/*.yaml``; a purchase-planning
    file there, one with a top-level ``quarters:`` key, is not an instance and is left out)."""
    root = files("fleetplan.instances")
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".yaml") and not _is_purchase_file(p.read_text()))


def _is_purchase_file(text: str) -> bool:
    """A bundled YAML is a purchase-planning file when a line starts with ``quarters:``."""
    return any(line.startswith("quarters:") for line in text.splitlines())


def bundled_instance_path(name: str) -> Path:
    """Path of a bundled instance by name (with or without ``.yaml``)."""
    stem = name[:-5] if name.endswith(".yaml") else name
    return Path(str(files("fleetplan.instances").joinpath(stem + ".yaml")))


def resolve_instance_path(path: str | Path) -> Path:
    """A path as given if it exists, else a bundled instance of that name, else the path."""
    p = Path(path)
    if p.exists():
        return p
    if p.parent == Path(".") and (p.suffix in ("", ".yaml")):
        b = bundled_instance_path(p.name)
        if b.exists():
            return b
    return p
