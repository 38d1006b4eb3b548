"""Issue 40 trial B, item 2: a physics source fitted on another chip or model is refused.

/tmp/trial40-out/brk/a100src.yaml held a priors document whose ``source.chip`` is a100-80gb
(Splitwise's A100 profile of Llama-2-70B) as a source of the H100 instance, and ``fleetplan
perf`` exited 0. A document stating a chip, model or precision that is not the instance's
(by name, or by the catalogue's numbers for a catalogue name) is exit 2 naming
``physics.sources.N.include``; a name neither the instance nor the catalogue knows is a note."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.errors import InstanceError
from fleetplan.instance.io import bundled_instance_path, load_instance_overlaid

runner = CliRunner()
BF16 = "llama70b-h100-bf16-p99"


def _instance_with_source(tmp_path, source: dict) -> str:
    src = bundled_instance_path(BF16)
    data = yaml.safe_load(src.read_text())
    for s in data["physics"]["sources"]:
        s["include"] = str(src.parent / s["include"])
    doc = yaml.safe_load((src.parent / "sources" / "h100-bf16-vidur.yaml").read_text())
    doc["source"] = source
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(doc))
    data["physics"]["sources"][1]["include"] = str(tmp_path / "other.yaml")
    p = tmp_path / "inst.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(p)


def _problems(path):
    try:
        load_instance_overlaid(path)
    except InstanceError as e:
        return e.problems
    return []


def test_a_source_fitted_on_an_a100_is_refused(tmp_path):
    path = _instance_with_source(tmp_path, {"model": "llama2-70b", "chip": "a100-80gb", "specs_from": "catalogue"})
    probs = _problems(path)
    assert [p.path for p in probs] == ["physics.sources.1.include"]  # failed before: loaded, perf exit 0
    assert "a100-80gb" in probs[0].message and "h100" in probs[0].message and "source.chip" in probs[0].message
    r = runner.invoke(app, ["perf", path])
    assert r.exit_code == 2 and "physics.sources.1.include" in r.output


def test_another_model_and_precision_are_refused(tmp_path):
    probs = _problems(_instance_with_source(tmp_path, {"model": "bloom-176b", "chip": "h100", "precision": "fp8"}))
    msg = " ".join(p.message for p in probs)
    assert "source.model" in msg and "bloom-176b" in msg and "source.precision" in msg and "fp8" in msg


def test_catalogue_names_of_the_same_hardware_and_the_bundled_sources_are_accepted(tmp_path):
    # a calibration on the catalogue's h100-80gb of Llama-2-70B's layers is this instance's chip and shape
    assert _problems(_instance_with_source(tmp_path, {"model": "llama2-70b", "chip": "h100-80gb", "precision": "bf16"})) == []
    inst, overlays = load_instance_overlaid(BF16)
    assert not any(n for o in overlays for n in o.notes)


def test_an_unknown_chip_name_is_a_note(tmp_path):
    inst, overlays = load_instance_overlaid(_instance_with_source(tmp_path, {"chip": "my-gpu-rack-7"}))
    notes = " ".join(n for o in overlays for n in o.notes)
    assert "physics.sources.1" in notes and "my-gpu-rack-7" in notes
