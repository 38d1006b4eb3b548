"""A physics source whose data measured no prefill states ``covers.prefill_tokens_max: 0``
(benchmarks/physics_sources.py writes it for the LLM-Inference-Bench fits, whose prefill is
held: end-to-end rows do not identify it). The schema required a positive count, so the
bundled 70B BF16 instance, which includes those sources, did not load on main (361571d,
d777e66): "physics.sources.2.covers.prefill_tokens_max: Input should be greater than 0"."""

from fleetplan.instance.io import load_instance
from fleetplan.instance.physics import sources
from fleetplan.tables.summary import _covers


def test_the_70b_bf16_instance_loads_with_sources_that_measured_no_prefill():
    inst = load_instance("llama70b-h100-bf16-p99")
    by_name = {s.name: s for s in sources(inst)}
    held_prefill = [n for n, s in by_name.items() if s.covers is not None and s.covers.prefill_tokens_max == 0]
    assert held_prefill == ["llm-inference-bench-vllm", "llm-inference-bench-trtllm"]
    cov = by_name["llm-inference-bench-vllm"].covers
    # no prefill cell lies within data that measured none; its decode cells still do
    assert not _covers(cov, 4, "prefill", 1, 1)
    assert _covers(cov, 4, "decode", 8, 1024)
