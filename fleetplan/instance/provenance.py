"""Whether a priors document was fitted for the instance it is laid over: a
physics source's ``source:`` block may state the chip, the model and the precision its data
measured (``fleetplan calibrate -o`` writes ``chip`` and ``model``; the bundled
``instances/sources/*.yaml`` also ``precision``). Each stated one is compared with the
instance: a chip by name (one of ``chips:``) or, for a name of calibrate's catalogue
(``fleetplan/workload/profile_specs.yaml``, aliases too), by its HBM bandwidth against each
of the instance's chips (within 10%: the same part under another name -- ``h100-80gb`` is
an ``h100`` -- whatever the serving dtype); a model by name or by the catalogue's shape
(layers, d_model, total parameters within 10%: Llama-2-70B's layers are a Llama-3-70B's);
the precision (bf16/fp16 = 2 bytes per weight, fp8/int8 = 1, fp4/int4 = 0.5) against
``model.bytes_per_weight``. A mismatch is a problem; a name neither the instance nor the
catalogue knows cannot be compared and is a note.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files
from typing import Any

import yaml

__all__ = ["source_mismatches", "PRECISION_BYTES"]

#: bytes per weight of the precisions a source states
PRECISION_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "fp4": 0.5, "int4": 0.5, "nvfp4": 0.5, "mxfp4": 0.5}
_REL = 0.10


@lru_cache(maxsize=1)
def _catalogue() -> tuple[dict, dict]:
    doc = yaml.safe_load(files("fleetplan.workload").joinpath("profile_specs.yaml").read_text(encoding="utf-8"))
    return doc.get("models", {}), doc.get("chips", {})


def _entry(name: str, entries: dict) -> dict | None:
    low = name.lower()
    return next((e for k, e in entries.items() if low == k.lower() or low in (a.lower() for a in e.get("aliases", ()))), None)


def _near(a: Any, b: Any) -> bool:
    try:
        return abs(float(a) / float(b) - 1.0) <= _REL
    except (TypeError, ValueError, ZeroDivisionError):
        return False


def source_mismatches(source: dict, data: dict) -> tuple[list[str], list[str]]:
    """(problems, notes), each a sentence, comparing a priors document's ``source`` block with
    the raw instance ``data`` (its ``model`` and ``chips``). Empty when nothing is stated or
    everything stated matches."""
    problems: list[str] = []
    notes: list[str] = []
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    chips = data.get("chips") if isinstance(data.get("chips"), dict) else {}
    models_cat, chips_cat = _catalogue()
    chip = source.get("chip")
    if isinstance(chip, str) and chip not in chips:
        cat = _entry(chip, chips_cat)
        if cat is None:
            notes.append(f"source.chip {chip!r} is neither a chip of this instance ({', '.join(chips)}) nor of calibrate's catalogue: "
                         "whether the document was fitted on this hardware cannot be checked")
        elif not any(isinstance(c, dict) and _near(cat.get("hbm_tbps"), c.get("hbm_tbps")) for c in chips.values()):
            have = ", ".join(f"{k} ({c.get('hbm_tbps')} TB/s)" for k, c in chips.items() if isinstance(c, dict))
            problems.append(f"the document was fitted on source.chip {chip!r} ({cat.get('hbm_tbps')} TB/s of HBM) and this instance's "
                            f"chips are {have}: efficiencies and overheads fitted on one chip do not hold on another")
    name = source.get("model")
    if isinstance(name, str) and name != model.get("name"):
        cat = _entry(name, models_cat)
        spec = cat.get("spec", {}) if cat else None
        if spec is None:
            notes.append(f"source.model {name!r} is neither this instance's model ({model.get('name')}) nor of calibrate's catalogue: "
                         "whether the document was fitted on this model's shape cannot be checked")
        elif not all(_near(spec.get(k), model.get(k)) for k in ("layers", "d_model", "total_params_b")):
            problems.append(f"the document was fitted on source.model {name!r} ({spec.get('layers')} layers, d_model {spec.get('d_model')}, "
                            f"{spec.get('total_params_b'):.4g}B parameters) and this instance serves {model.get('name')} "
                            f"({model.get('layers')} layers, d_model {model.get('d_model')}, {model.get('total_params_b')}B)")
    prec = source.get("precision")
    if isinstance(prec, str):
        b = PRECISION_BYTES.get(prec.lower())
        if b is None:
            notes.append(f"source.precision {prec!r} is not one of {', '.join(PRECISION_BYTES)}: not compared")
        elif model.get("bytes_per_weight") is not None and not _near(b, model.get("bytes_per_weight")):
            problems.append(f"the document was fitted at source.precision {prec} ({b:g} bytes per weight) and this instance's model has "
                            f"bytes_per_weight {model.get('bytes_per_weight')}")
    return problems, notes
