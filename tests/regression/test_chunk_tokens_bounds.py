"""Issue 17 newcomer trial: ``serving.chunk_tokens`` took any list of positive integers up
to 10^9 -- ``[512, 512]`` (a typo that doubles the chunked schedule's columns) and
``[100000000]`` (a token budget no engine step has) both solved. Each now exits 2 naming
the field and the bound; the CLI's message says which value is wrong."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app

BASE = Path(__file__).resolve().parents[2] / "fleetplan" / "instances" / "llama70b-h100-bf16-p99.yaml"


@pytest.mark.parametrize("chunks, said", [
    ([512, 512], "512 is given twice"),
    ([512, 100_000_000], "less than or equal to 1048576"),
])
def test_chunk_tokens_repeated_or_huge_is_exit_2_naming_the_field(tmp_path, chunks, said):
    doc = yaml.safe_load(BASE.read_text())
    doc.setdefault("serving", {})["chunk_tokens"] = chunks
    shutil.copytree(BASE.parent / "sources", tmp_path / "sources")  # its physics sources' include: paths are relative to it
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(doc))
    res = CliRunner().invoke(app, ["solve", str(path)])
    assert res.exit_code == 2, res.output
    out = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert "serving.chunk_tokens" in out and said in out


def test_distinct_chunk_budgets_up_to_the_bound_still_load():
    from fleetplan.instance.schema import MAX_CHUNK_TOKENS, Serving

    s = Serving(chunk_tokens=[256, MAX_CHUNK_TOKENS])
    assert s.chunk_tokens == [256, MAX_CHUNK_TOKENS]
