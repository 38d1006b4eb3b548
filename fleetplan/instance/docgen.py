"""Generate ``docs/instance.md`` from the schema, so the reference cannot drift from the code.

Run ``python -m fleetplan.instance.docgen > docs/instance.md``; a test checks the file is
current.
"""

from __future__ import annotations

import typing

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from fleetplan.instance import schema as S

_ORDER = [
    S.Instance, S.ModelSpec, S.GQAAttention, S.MLAAttention, S.HybridAttention, S.MoESpec, S.ChipType, S.KubernetesAccelerator, S.NetworkSpec,
    S.Region, S.PodInventory, S.Workload, S.LengthBucket, S.TrafficClass, S.SLO, S.Tier, S.Priors, S.PathLatency,
    S.Speculation, S.FailoverPolicy, S.WarmPool, S.AdmissionClamp, S.Serving, S.PlacementPolicy,
    S.Physics, S.PhysicsSource, S.StepTimeScale, S.SourceCovers,
]

_PREAMBLE = """# Instance file reference

An instance is one YAML file (read with `yaml.safe_load` semantics; duplicate keys are an
error). Units are in the field names and below: GB = 1e9 bytes, TB/s = 1e12 bytes/s,
GB/s = 1e9 bytes/s, TFLOP/s = 1e12 FLOP/s, parameters in billions (`*_params_b`), times in
milliseconds (`*_ms`), prices in US dollars (`*_usd`), shares are fractions in [0, 1].
Unknown fields are rejected (a misspelt key is an error, not a silent default).

Besides the per-field ranges below, `fleetplan` checks across fields: shares of the input
mix and of the classes sum to 1; tiers ascend and every bucket falls in a tier; every
region's largest hourly multiplier is 1.0; chip and region names referenced anywhere
exist; slice shapes are whole VMs and fit a pod; the model fits at least one slice with
room for the KV of one longest request; N-1 needs two regions and a failover partner
for each; an MoE shape is possible (active >= total x k / N).

The bundled examples are in `instances/` (`gemini-ironwood.yaml` is the brief's
scenario; `gemini-ironwood-mooncake.yaml` the same scenario on a workload fitted from a
real trace; `llama70b-h100-bf16-p99.yaml` and `llama70b-h100-fp8-p99.yaml` issue 17's GPU
scenario, docs/gpu-scenario.md). `fleetplan schema instance` prints the JSON Schema. This page is generated
by `python -m fleetplan.instance.docgen` from `fleetplan/instance/schema.py`.

## Overlays: `include:`, `--workload`, `--priors`

Measured inputs replace assumed ones without editing the instance. A top-level
`include: {workload: FILE, priors: FILE}` (paths relative to the directory of the
instance path as given; through a symlink, the link's directory) applies
the `workload:` block of a file written by `fleetplan workload fit -o` and the `priors:`
block of a file written by `fleetplan calibrate -o`: each key in the block replaces that
field of the instance's section, every other field stays. `fleetplan solve --workload
FILE --priors FILE` applies the same files after the includes. A fitted mix that leaves a
tier without a bucket drops that tier (said on stderr); a mix fitted with other tier
bounds than the instance's is flagged. Plans record the hash of the overlaid instance, so
later commands (`whatif`, `place`) need the same instance: prefer `include:` for a plan
you will keep. `docs/workloads.md` and `docs/calibration.md` describe the two files.

On an instance with a `physics:` block (below) every source lays its own priors over the
instance's, so a priors file would reach no source whose fit sets the same fields.
`--priors FILE` is a calibration of your own engine: the plan holds under the instance's
priors with FILE laid over, alone -- the physics block is dropped, a note on stderr names
the sources no longer held, and `--physics` is refused with it (as `fleetplan drift` plans
on a refit alone). To hold the plan under FILE and the sources both, add FILE as a source
(`physics.sources: [{name: mine, include: FILE}, ...]`). An `include: {priors: FILE}` in
such an instance changes the base the sources overlay; when the base is not a source
(`include_base: false`) and every source sets some of FILE's fields, those fields would
reach nothing: exit 2 naming `include.priors`.

One key merges instead of replacing: a workload file's `tiers:` is a list of
`{max_input_tokens: TOKENS or null, prefix_hit_rate: FRACTION}` (what `workload fit`
measures per tier), and each entry sets its fields on the instance's tier with that
bound; the instance keeps its tiers, their names and SLO overrides. An entry whose bound
no tier has is not applied (a note says so), and a tier no entry names drops its own
`prefix_hit_rate` for the file's pooled one.

## Physics with a stated spread: `physics:`

Two published measurements of the same kernels on the same chip can disagree by more than a
plan's margin (docs/validation.md, "Physics sources side by side"). A `physics:` block lists
the sources of the step physics a plan must hold under: each is the instance's `priors:`
with the source's fields laid over -- a `fleetplan calibrate -o` document (`include:`, path
relative to the instance file; the bundled ones are `instances/sources/*.yaml`), fields
given inline (`priors:`), fields kept at the instance's value (`instance_priors:`, for a
prior the source identifies weakly) -- and optionally a plain range, `step_time_scale:
{prefill: X, decode: Y}`, multiplied onto the priors' `prefill_time_scale` and
`decode_time_scale`. `hold:` says which sources the plan holds under: `all` (the default:
every candidate is legal only where its SLOs hold under each source, at the least capacity
of any), `slowest`, or one source's name; `fleetplan solve --physics` overrides it. The
instance's own priors are a source named `instance` unless `include_base: false`. The
loader reads every `include:` into its source (`included:` records the file's path and
SHA-256), so a plan carries the numbers, not a path. An included document's `source:`
block is checked against the instance where it states what it was fitted on: a `chip`
that is not one of `chips:` (or, for a name of calibrate's catalogue, whose HBM bandwidth
is within 10% of none of them), a `model` that is not `model.name` (or a catalogue model
whose layers, d_model and parameters are not within 10%), or a `precision` whose bytes per
weight are not `model.bytes_per_weight` is exit 2 naming `physics.sources.N.include`; a name
neither knows is a note on stderr. Without the block the instance has one
source, its own priors, and plans are what they were. docs/architecture.md says how the
candidate tables, the verifier and the margins use the sources.

```yaml
physics:
  hold: all
  include_base: false          # the priors above are the first source's
  sources:
    - {name: aiconfigurator-trtllm, include: sources/h100-bf16-aiconfigurator.yaml}
    - {name: vidur-vllm, include: sources/h100-bf16-vidur.yaml}
    - {name: plain-range, step_time_scale: {prefill: 1.0, decode: 1.3}}
```
"""


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType")):
        parts = [a for a in args if a is not type(None)]
        name = " or ".join(_type_name(a) for a in parts)
        return name + (" or null" if len(parts) < len(args) else "")
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        key = "int" if _type_name(args[0]) == "int" else "name"
        return f"map {key} -> {_type_name(args[1])}"
    if origin is typing.Literal:
        return " / ".join(f"`{a}`" for a in args)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    return getattr(tp, "__name__", str(tp))


def _constraints(field) -> str:
    out = []
    unit = "chars" if field.annotation is str or "str" in str(field.annotation) else "items"
    for m in field.metadata:
        for attr, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("min_length", f"min {unit}"), ("max_length", f"max {unit}")):
            v = getattr(m, attr, None)
            if v is not None:
                out.append(f"{sym} {v}")
    # constraints carried inside an Annotated alias
    tp = field.annotation
    if typing.get_origin(tp) is typing.Annotated:
        for m in typing.get_args(tp)[1:]:
            for attr, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
                v = getattr(m, attr, None)
                if v is not None:
                    out.append(f"{sym} {v}")
    return ", ".join(dict.fromkeys(out))


def _default(field) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        try:
            v = field.default_factory()
        except TypeError:
            return "(default)"
        if isinstance(v, BaseModel):
            return "(defaults)"
        return f"`{v}`"
    if field.default is PydanticUndefined:
        return "required"
    return f"`{field.default}`" if field.default is not None else "`null`"


def render_instance_doc() -> str:
    return "\n".join([_PREAMBLE] + class_tables(_ORDER))


def class_tables(classes) -> list[str]:
    """Markdown lines: for each pydantic class a heading, its docstring and a table of its
    fields (type, range, default, description with the unit). Also used by docs/purchase.md."""
    lines = []
    for cls in classes:
        lines.append(f"## {cls.__name__}\n")
        doc = (cls.__doc__ or "").strip()
        if doc:
            lines.append(" ".join(doc.split()) + "\n")
        lines.append("| field | type | range | default | meaning (unit) |")
        lines.append("|---|---|---|---|---|")
        for name, f in cls.model_fields.items():
            desc = (f.description or "").replace("|", "\\|")
            lines.append(f"| `{name}` | {_type_name(f.annotation)} | {_constraints(f)} | {_default(f)} | {desc} |")
        lines.append("")
    return lines


if __name__ == "__main__":  # pragma: no cover
    print(render_instance_doc(), end="")
