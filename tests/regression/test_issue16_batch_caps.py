"""Issue 16 newcomer trial S1: `serving.batch_caps: [1000000000]` (the schema allowed 1e9)
on the Gemini instance with `solve --time-limit 3` ran 182 s to 24 GB and the OOM killer
(the speculation switch-off search and the step physics build one array entry per batch
up to the cap); under a memory limit it was a traceback. A cap is now at most
MAX_BATCH_CAP residents per slice, refused with exit 2 naming the field."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.instance.schema import MAX_BATCH_CAP

runner = CliRunner()


def test_a_batch_cap_past_the_bound_is_refused_naming_the_field(tmp_path, gemini_data):
    data = dict(gemini_data)
    data["serving"] = {**data.get("serving", {}), "batch_caps": [64, 1_000_000_000]}
    (tmp_path / "bc.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    r = runner.invoke(app, ["solve", str(tmp_path / "bc.yaml"), "--time-limit", "3"])
    text = " ".join(r.stderr.split())
    assert r.exit_code == 2, r.output
    assert "serving.batch_caps" in text and f"{MAX_BATCH_CAP}" in text.replace(",", ""), text


def test_the_largest_allowed_cap_is_accepted(tmp_path, gemini_data):
    from fleetplan.instance.io import parse_instance

    data = dict(gemini_data)
    data["serving"] = {**data.get("serving", {}), "batch_caps": [64, MAX_BATCH_CAP]}
    assert max(parse_instance(data, "bc").serving.batch_caps) == MAX_BATCH_CAP
