"""The physics: block as users write it (issue 40): the bundled H100 70B instances load with
every bundled source held (tests/regression/test_issue40_covers_no_prefill.py: the sources
that measured no prefill)."""

from __future__ import annotations

import pytest

from fleetplan.instance.io import load_instance
from fleetplan.instance.physics import held_sources


@pytest.mark.parametrize("name,n", [("llama70b-h100-bf16-p99", 4), ("llama70b-h100-fp8-p99", 1)])
def test_the_bundled_70b_instances_load_with_every_source_held(name, n):
    inst = load_instance(name)
    assert [s.name for s in held_sources(inst)][:1] == ["aiconfigurator-trtllm"]
    assert len(held_sources(inst)) == n

