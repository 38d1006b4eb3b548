"""Issue 16, row 13: ``model.attention.head_dim: 99999999`` was reported only as "chips:
the model does not fit any slice". The problem now names the dominant term of the slice
memory map, the model fields that set it (with units), and the field that alone would make
the model fit, with the largest value that does. Tiny instance: 80 GB chips in 1- and
2-chip slices, one 2,200-token request (2,000 in + 200 out)."""

from __future__ import annotations

import pytest

from fleetplan.errors import InstanceError
from fleetplan.instance.io import parse_instance
from tests.conftest import tiny_data


def _problems(**over):
    with pytest.raises(InstanceError) as e:
        parse_instance(tiny_data(**over), "tiny")
    return e.value.problems


def test_a_huge_head_dim_is_named_with_the_kv_it_implies():
    (p,) = _problems(model={"attention": {"kind": "gqa", "kv_heads": 8, "head_dim": 99_999_999}})
    assert p.path == "model.attention.head_dim" and p.value == "99999999"
    assert "does not fit any slice" in p.message
    assert "The largest term is the KV" in p.message and "bytes per token" in p.message
    for f in ("model.layers = 32 layers", "model.attention.kv_heads = 8 heads",
              "model.attention.head_dim = 99999999 elements", "model.bytes_per_kv_element = 1 bytes per element"):
        assert f in p.message
    # By hand: the 2-chip slice has 160 GB HBM - 8 GB weights - 8 GB workspace - 8 GB
    # headroom (5%) = 136 GB for KV; one request holds 2 x 32 x 8 x head_dim x 1 B x 2,200
    # tokens (kv_paging_slack 0 by default) -- so head_dim <= 136e9 / (512 x 2,200).
    limit = int(136e9 / (512 * 2200))
    assert f"model.attention.head_dim at most {limit} elements" in p.message
    assert "model.layers at most" not in p.message  # 32 layers cannot shrink ~800-fold


def test_too_many_weights_name_the_weight_fields_not_the_kv():
    (p,) = _problems(model={"total_params_b": 500, "active_params_b": 500})
    assert p.path == "chips"  # either weight field alone would fit: no single field to blame
    assert "The largest term is the weights (model.total_params_b = 500 billion parameters" in p.message
    assert "model.total_params_b at most" in p.message and "model.bytes_per_weight at most" in p.message
