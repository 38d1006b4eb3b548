"""The physics: block as users write it (issue 40): the bundled H100 70B instances load with
every bundled source, a source whose data measured no prefill says so."""

from __future__ import annotations

import pytest

from fleetplan.instance.io import load_instance
from fleetplan.instance.physics import held_sources


@pytest.mark.parametrize("name,n", [("llama70b-h100-bf16-p99", 4), ("llama70b-h100-fp8-p99", 1)])
def test_the_bundled_70b_instances_load_with_every_source_held(name, n):
    inst = load_instance(name)
    assert [s.name for s in held_sources(inst)][:1] == ["aiconfigurator-trtllm"]
    assert len(held_sources(inst)) == n


def test_a_source_that_measured_no_prefill_is_outside_its_data_at_every_prefill():
    """The end-to-end sources hold their prefill at the instance's (calibrate's fit_e2e:
    static batches do not identify it) and state covers.prefill_tokens_max 0 -- the
    schema rejected 0 (the bundled BF16 instance did not load)."""
    from fleetplan.perf.summary import _covers

    inst = load_instance("llama70b-h100-bf16-p99")
    src = next(s for s in held_sources(inst) if s.name == "llm-inference-bench-vllm")
    assert src.covers.prefill_tokens_max == 0
    assert not _covers(src.covers, 4, "prefill", 1, 512)
    assert _covers(src.covers, 4, "decode", 16, 1024)
