"""The public traces under ../shared/data (read in place, never copied into the repo).

Tests that need them are skipped, with the reason, when the directory is absent."""

from __future__ import annotations

import os
from itertools import islice
from pathlib import Path

import pytest

def _data_dir() -> Path:
    """FLEETPLAN_SHARED_DATA, else ../shared/data beside the checkout, else /work/shared/data."""
    if os.environ.get("FLEETPLAN_SHARED_DATA"):
        return Path(os.environ["FLEETPLAN_SHARED_DATA"])
    for cand in (Path(__file__).resolve().parents[3] / "shared" / "data", Path("/work/shared/data")):
        if cand.is_dir():
            return cand
    return Path(__file__).resolve().parents[3] / "shared" / "data"


DATA = _data_dir()
AZURE_CONV = DATA / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
AZURE_CODE = DATA / "azure-llm-2023" / "AzureLLMInferenceTrace_code.csv"
MOONCAKE = DATA / "mooncake" / "conversation_trace.jsonl"
SERVEGEN = DATA / "servegen"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"public data not found at {path} (set FLEETPLAN_SHARED_DATA to the shared/data directory)")
    return path


def head(path: Path, lines: int, dest: Path) -> Path:
    """The first ``lines`` lines of a real file (header included), written to ``dest``:
    a small slice to recompute statistics on, made at test time."""
    with open(need(path), encoding="utf-8") as f:
        dest.write_text("".join(islice(f, lines)), encoding="utf-8")
    return dest
