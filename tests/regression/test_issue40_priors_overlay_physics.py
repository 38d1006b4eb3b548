"""Issue 40 trial B, item 1: ``solve --priors FILE`` on an instance with a ``physics:`` block.

Each physics source lays its own priors over the instance's, so before the fix the file's
fields reached no held source of the bundled BF16 instance (every source sets
decode_step_overhead_ms): 'priors from FILE: decode_step_overhead_ms, prefill_mfu' was printed
and the plan was sized on the sources' numbers. ``--priors`` is a calibration of the user's own
engine: the plan holds under the instance's priors with FILE laid over, alone (as ``drift``
treats a refit), and a note says the bundled sources are not held. An ``include: {priors:
FILE}`` whose fields every source overrides changes nothing any source plans on: refused,
naming ``include.priors`` and the two ways to say what was meant."""

from __future__ import annotations

import yaml

from fleetplan.cli.app import app
from fleetplan.errors import InstanceError
from fleetplan.instance.io import bundled_instance_path, load_instance_overlaid
from fleetplan.instance.physics import held_sources, sources
from typer.testing import CliRunner

SLOW = {"priors": {"decode_step_overhead_ms": 20.0, "prefill_mfu": 0.3}}
BF16 = "llama70b-h100-bf16-p99"
runner = CliRunner()


def _slow(tmp_path):
    p = tmp_path / "slow_priors.yaml"
    p.write_text(yaml.safe_dump(SLOW))
    return p


def test_priors_option_plans_on_the_file_alone(tmp_path):
    inst, overlays = load_instance_overlaid(BF16, priors=_slow(tmp_path))
    held = held_sources(inst)
    assert [s.name for s in held] == ["instance"]  # failed before: the four bundled sources, none with the file's numbers
    for s in sources(inst):
        assert s.priors.decode_step_overhead_ms == 20.0 and s.priors.prefill_mfu == 0.3
    assert inst.physics is None
    note = " ".join(overlays[-1].notes)
    assert "--priors: the plan holds under your priors alone" in note
    assert "the instance's 4 physics sources" in note and "physics.sources" in note


def test_priors_option_with_physics_option_is_refused(tmp_path):
    r = runner.invoke(app, ["solve", BF16, "--priors", str(_slow(tmp_path)), "--physics", "vidur-vllm"])
    assert r.exit_code == 2, r.output
    assert "--physics" in r.output and "--priors" in r.output


def _instance_with_priors_include(tmp_path, include_base: bool) -> str:
    src = bundled_instance_path(BF16)
    data = yaml.safe_load(src.read_text())
    for s in data["physics"]["sources"]:
        s["include"] = str(src.parent / s["include"])
    data["physics"]["include_base"] = include_base
    data["include"] = {"priors": str(_slow(tmp_path))}
    p = tmp_path / "inst.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(p)


def test_an_include_every_source_overrides_is_refused(tmp_path):
    try:
        load_instance_overlaid(_instance_with_priors_include(tmp_path, include_base=False))
    except InstanceError as e:
        [pr] = e.problems
        assert pr.path == "include.priors"  # failed before: loaded, the file's fields reached no source
        assert "decode_step_overhead_ms" in pr.message and "physics.sources" in pr.message
        assert "prefill_mfu" not in pr.message  # two sources keep prefill_mfu at the instance's value: it reaches them
    else:
        raise AssertionError("an include whose fields every physics source overrides was accepted")


def test_an_include_the_base_source_takes_is_accepted(tmp_path):
    inst, _ = load_instance_overlaid(_instance_with_priors_include(tmp_path, include_base=True))
    base = next(s for s in sources(inst) if s.name == "instance")
    assert base.priors.decode_step_overhead_ms == 20.0 and base.held
