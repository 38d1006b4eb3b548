"""Physics with a stated spread: the sources of the step physics an instance's plan
is sized and verified under.

A source is just a :class:`~fleetplan.instance.schema.Priors`: the instance's own priors with
the source's fields laid over (the ``priors:`` block of a ``fleetplan calibrate -o`` document,
the same overlay ``solve --priors`` applies), some fields kept at the instance's value
(``instance_priors``), and a plain per-phase step-time scale multiplied onto the two scale
fields (``prefill_time_scale``, ``decode_time_scale``). Without a ``physics:`` block an instance
has one source, its own priors, named ``instance`` -- and every function here returns the
instance itself for it, so the single-source path is the code as it was.

``held`` sources are those the plan must hold under (``physics.hold``): all of them, the
slowest, or one by name. The candidate tables (:mod:`fleetplan.tables.derived`) and the
evaluator (:mod:`fleetplan.results.evaluate`) take every held source's instance
(:func:`held_instances`) and keep the least favourable answer.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from fleetplan.instance.schema import Instance, PhysicsSource, Priors, SourceCovers
from fleetplan.perf.roofline import SliceSpec, decode_step, kv_bytes_per_request, prefill_time_ms

__all__ = ["BASE", "physics_key", "Source", "source_priors", "sources", "held_sources", "held_instances", "with_priors", "with_hold",
           "slowest", "reference_time_ms", "priors_hash", "robust", "source_instance", "held_slowest_first",
           "physics_instance", "default_source"]

#: the name of the instance's own priors as a source
BASE = "instance"
#: hold values that are not a source's name
HOLD_ALL, HOLD_SLOWEST = "all", "slowest"


@dataclass(frozen=True)
class Source:
    """One source of the step physics: ``priors`` (the instance's with the source's fields and
    scales laid over), whether the plan holds under it, what its data cover and where it came
    from ('instance', 'inline', or the included file's path)."""

    name: str
    description: str
    priors: Priors
    held: bool
    covers: SourceCovers | None = None
    origin: str = BASE


def source_priors(inst: Instance, src: PhysicsSource) -> Priors:
    """The priors of ``src``: the instance's priors, the source's ``priors`` fields over them,
    ``instance_priors`` fields back at the instance's values, then the source's
    ``step_time_scale`` multiplied onto the two scale fields (dimensionless).

    Raises: pydantic ``ValidationError`` when a field is unknown or out of its range (the
    instance's cross-field checks report it under ``physics.sources.N``)."""
    base = inst.priors.model_dump(mode="python")
    data = {**base, **src.priors}
    for f in src.instance_priors:
        if f in base:
            data[f] = base[f]
    if src.step_time_scale is not None:
        data["prefill_time_scale"] = float(data.get("prefill_time_scale", 1.0)) * src.step_time_scale.prefill
        data["decode_time_scale"] = float(data.get("decode_time_scale", 1.0)) * src.step_time_scale.decode
    return Priors.model_validate(data)


def with_priors(inst: Instance, priors: Priors) -> Instance:
    """``inst`` with ``priors`` as its one physics: its priors replaced and no physics block (a
    ``model_copy``: not validated again -- the priors are a validated :class:`Priors`;
    ``inst`` itself when they are its own and it has no physics block). Everything computed
    from the result is single-source."""
    if priors is inst.priors and inst.physics is None:
        return inst
    return inst.model_copy(update={"priors": priors, "physics": None})


def physics_key(inst: Instance) -> str:
    """What the candidate tables' physics reads of ``inst``: its canonical JSON without
    ``regions`` (demand, pods, prices, hourly loads) and without the name and description
    (labels): the key the candidate tables (:mod:`fleetplan.tables.cache`) and the
    verifier's knee memo (:mod:`fleetplan.results.evaluate`) keep physics under. Raises nothing."""
    return inst.model_dump_json(exclude={"regions", "name", "description"})


def reference_time_ms(inst: Instance, priors: Priors) -> float:
    """The step time ``hold: slowest`` ranks sources by (ms): a decode step at batch 64 with
    the mean prompt plus half the answer in context, plus the prefill of the mean prompt,
    on the instance's first chip type at its first slice shape (the order of the file)."""
    chip_name, chip = next(iter(inst.chips.items()))
    sl = SliceSpec.of(chip_name, chip, chip.slice_shapes[0])
    mix = inst.workload.input_mix
    mean = sum(b.share * b.tokens for b in mix) / max(sum(b.share for b in mix), 1e-12)
    kv = float(kv_bytes_per_request(inst.model, mean + inst.workload.output_tokens / 2.0))
    return float(decode_step(inst.model, sl, priors, 64, kv).step_ms) + float(prefill_time_ms(inst.model, sl, priors, mean))


_MEMO: dict[int, tuple[Instance, list[Source]]] = {}
_MEMO_MAX = 64


def sources(inst: Instance) -> list[Source]:
    """Every source of ``inst``, held or not, in order: 'instance' first (without a physics
    block, or with ``include_base``), then ``physics.sources``. Raises ValidationError as
    :func:`source_priors` (an instance that passed its checks does not)."""
    ph = inst.physics
    if ph is None:
        return [Source(BASE, "the instance's own priors", inst.priors, True)]
    got = _MEMO.get(id(inst))
    if got is not None and got[0] is inst:
        return got[1]
    out: list[Source] = []
    if ph.include_base:
        out.append(Source(BASE, "the instance's own priors", inst.priors, False))
    for s in ph.sources:
        origin = (s.included or {}).get("path") or s.include or "inline"
        out.append(Source(s.name, s.description, source_priors(inst, s), False, s.covers, origin))
    if ph.hold == HOLD_ALL:
        held = {s.name for s in out}
    elif ph.hold == HOLD_SLOWEST:
        held = {slowest(inst, out).name}
    else:
        held = {ph.hold}
    out = [Source(s.name, s.description, s.priors, s.name in held, s.covers, s.origin) for s in out]
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.pop(next(iter(_MEMO)))
    _MEMO[id(inst)] = (inst, out)
    return out


def slowest(inst: Instance, srcs: list[Source]) -> Source:
    """The source of ``srcs`` with the largest :func:`reference_time_ms` (the first on a tie)."""
    times = [reference_time_ms(inst, s.priors) for s in srcs]
    return srcs[max(range(len(srcs)), key=lambda i: (times[i], -i))]


def held_sources(inst: Instance) -> list[Source]:
    """The sources the plan holds under (at least one), in :func:`sources` order."""
    return [s for s in sources(inst) if s.held]


def source_instance(inst: Instance, src: Source) -> Instance:
    """``inst`` with the source's priors (``inst`` itself for its own priors)."""
    return with_priors(inst, src.priors)


def physics_instance(inst: Instance, name: str | None = None) -> Instance:
    """``inst`` with source ``name``'s priors as its one physics (no physics block); ``name``
    None or 'instance': its own priors. What the simulator runs with (``simulate --physics``).

    'instance' is a name only where the instance's own priors are a source (no physics
    block, or ``include_base``); with ``include_base: false`` they are not held and the name
    is refused, as ``solve --physics instance`` is.

    Raises: InstanceError naming ``--physics`` when no source has that name."""
    if name is None or (name == BASE and inst.physics is None):
        return with_priors(inst, inst.priors)
    got = next((s for s in sources(inst) if s.name == name), None)
    if got is None:
        from fleetplan.errors import InstanceError, Problem

        names = [s.name for s in sources(inst)]
        why = (" ('instance', the instance's own priors, is not one: physics.include_base is false)" if name == BASE else "")
        raise InstanceError(inst.name, [Problem("--physics", f"names no physics source of this instance{why}; its sources are "
                                                             f"{', '.join(names)}.", name)])
    return with_priors(inst, got.priors)


def default_source(inst: Instance, plan, region: str | None = None) -> str:
    """The source a run of ``plan`` takes by default (``simulate`` without ``--physics``): the
    held source binding the most of ``region``'s pools (all pools when None) in
    ``plan.physics.binding`` -- the step times the plan was sized to there -- the first of them
    on a tie; without bindings the slowest held source; 'instance' without a physics block."""
    if inst.physics is None:
        return BASE
    binding = list(getattr(getattr(plan, "physics", None), "binding", None) or [])
    here = [b.source for b in binding if region is None or b.region == region] or [b.source for b in binding]
    held = {s.name for s in held_sources(inst)}
    here = [n for n in here if n in held]
    if here:
        return max(here, key=lambda n: (here.count(n), -here.index(n)))
    return held_slowest_first(inst)[0][0]


def held_instances(inst: Instance) -> list[tuple[str, Instance]]:
    """(name, instance with that source's priors) of every held source; ``[('instance', inst)]``
    without a physics block."""
    return [(s.name, source_instance(inst, s)) for s in held_sources(inst)]


def held_slowest_first(inst: Instance) -> list[tuple[str, Instance]]:
    """:func:`held_instances` ordered by :func:`reference_time_ms`, the slowest first (ties in
    the instance's order): the order the replica rate searches take them in
    (:class:`fleetplan.perf.robust.MinRates` searches the first)."""
    srcs = held_instances(inst)
    if len(srcs) == 1:
        return srcs
    t = {name: reference_time_ms(si, si.priors) for name, si in srcs}
    return sorted(srcs, key=lambda x: -t[x[0]])


def robust(inst: Instance) -> bool:
    """True when the plan holds under more than one source (the tables and the evaluator
    then take the least favourable answer of several)."""
    return inst.physics is not None and len(held_sources(inst)) > 1


def with_hold(inst: Instance, hold: str) -> Instance:
    """``inst`` with ``physics.hold`` = ``hold`` ('all', 'slowest' or a source name), validated.

    Raises: InstanceError naming ``physics.hold`` (an unknown source, or an instance without
    a physics block: then only 'instance' and 'all' are accepted, and change nothing)."""
    from fleetplan.errors import InstanceError, Problem
    from fleetplan.instance.io import parse_instance

    if inst.physics is None:
        if hold in (BASE, HOLD_ALL, HOLD_SLOWEST):
            return inst
        raise InstanceError(inst.name, [Problem("physics.hold", f"the instance has no physics: block, so its only source is "
                                                                f"'{BASE}' (its own priors); '{hold}' names none.", hold)])
    data = inst.model_dump(mode="python", round_trip=True)
    data["physics"]["hold"] = hold
    return parse_instance(data, inst.name)


def priors_hash(priors: Priors) -> str:
    """SHA-256 (hex, first 16 digits) of the priors' canonical JSON: what a plan records to
    say which numbers a source stood for."""
    doc = json.dumps(priors.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(doc.encode()).hexdigest()[:16]
