"""Which kind of measurement a file holds, from its first bytes (``fleetplan calibrate
--format auto``): the measurements of loaded engines -- an LLM-Inference-Bench CSV, a vLLM
serving-benchmark JSON, a Prometheus text scrape or range-query export -- or None, for the
latency profiles :func:`fleetplan.workload.calibrate.load_profile` detects itself."""

from __future__ import annotations

from pathlib import Path

__all__ = ["MEASUREMENT_FORMATS", "detect"]

MEASUREMENT_FORMATS = ("llm-inference-bench", "vllm-bench", "prometheus")


def detect(path: str) -> str | None:
    """``llm-inference-bench``, ``vllm-bench``, ``prometheus`` or None (another format, or a
    file that cannot be read: the profile reader then says what is wrong with it)."""
    p = Path(path)
    if not p.is_file():
        return None
    with p.open("rb") as f:
        head = f.read(65536).decode("utf-8", errors="replace").lstrip("\ufeff")
    lead = head.lstrip()
    if lead.startswith("["):
        return "prometheus"
    if lead.startswith("{"):
        if '"resultType"' in head or '"status"' in head[:200]:
            return "prometheus"
        return "vllm-bench" if '"request_rate"' in head or '"completed"' in head else None
    for line in head.splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith(("# HELP", "# TYPE", "vllm:")):
            return "prometheus"
        if s.startswith("#"):
            continue
        return "llm-inference-bench" if "Num of Hardware" in s else None
    return None
