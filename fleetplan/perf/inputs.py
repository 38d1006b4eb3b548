"""The inputs the physics reads, named in perf/ itself.

The physics (``fleetplan.perf``) is plain data in, numbers out, and sits below the instance
package: it imports nothing of ``fleetplan.instance``. Its functions take the instance's
parts -- the model, a chip type, the priors, an SLO, the whole instance -- and read their
attributes; the names below are what perf/'s type hints call those parts. In practice each is
the validated pydantic object of ``fleetplan.instance.schema`` of the same name, but any object
with the attributes works (a test double, a ``model_copy``).

* :class:`GQALayout`, :class:`MLALayout`, :class:`HybridLayout`: the three attention layouts,
  told apart by their ``kind`` field (the schema's discriminator: ``gqa``/``mha``, ``mla``,
  ``hybrid``), which is how :mod:`fleetplan.perf.roofline` dispatches on them.
* :class:`ModelSpec`, :class:`MoESpec`, :class:`ChipType`, :class:`SLO`: Protocols listing
  every attribute the physics reads (units as in the schema: parameters in billions, bytes,
  GB, TB/s, TFLOP/s, GB/s, ms).
* :data:`Priors` and :data:`Instance`: documented aliases. The physics reads dozens of
  their fields (MFUs, bandwidth efficiencies, overheads, the workload, the tiers, the
  serving options); a Protocol repeating them all would be a second copy of the schema, so
  the alias names the schema class it stands for and the schema's field descriptions are the
  reference (docs/instance.md).
"""

from __future__ import annotations

from typing import Any, Protocol, TypeAlias, Union

__all__ = ["GQALayout", "MLALayout", "HybridLayout", "Attention", "MoESpec", "ModelSpec", "ChipType", "SLO", "Priors",
           "Instance", "GQA_KINDS", "MLA_KIND", "HYBRID_KIND"]

#: ``kind`` values of the attention layouts (the schema's discriminator field)
GQA_KINDS = ("gqa", "mha")
MLA_KIND = "mla"
HYBRID_KIND = "hybrid"


class GQALayout(Protocol):
    """Grouped-query (or multi-head) attention: ``kind`` 'gqa' or 'mha'."""

    kind: str
    kv_heads: int  # key/value heads per layer (count)
    head_dim: int  # elements per head


class MLALayout(Protocol):
    """Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434): ``kind`` 'mla'."""

    kind: str
    kv_latent_rank: int  # elements per layer per token
    rope_dim: int  # elements per layer per token


class HybridLayout(Protocol):
    """Full, sliding-window and linear-attention layers: ``kind`` 'hybrid'."""

    kind: str
    kv_heads: int  # per full or sliding-window layer (count)
    head_dim: int  # elements
    full_attention_layers: int
    sliding_window_layers: int
    window_tokens: int  # tokens of KV kept per request by a sliding-window layer
    linear_attention_layers: int
    linear_state_bytes_per_layer: int  # bytes per request


Attention: TypeAlias = Union[GQALayout, MLALayout, HybridLayout]


class MoESpec(Protocol):
    """A mixture-of-experts shape."""

    experts: int  # routed experts per MoE layer, N
    experts_per_token: int  # k


class ModelSpec(Protocol):
    """The served model (``fleetplan.instance.schema.ModelSpec``)."""

    name: str
    total_params_b: float  # billions, all resident in HBM
    active_params_b: float  # billions active per token
    layers: int
    d_model: int  # elements
    bytes_per_weight: float  # bytes
    bytes_per_kv_element: float  # bytes
    attention: Attention
    moe: MoESpec | None

    def model_dump_json(self, **kwargs: Any) -> str: ...


class ChipType(Protocol):
    """One chip type (``fleetplan.instance.schema.ChipType``)."""

    hbm_gb: float  # GB (1e9 bytes) per chip
    hbm_tbps: float  # TB/s per chip
    peak_tflops: float  # dense TFLOP/s per chip
    ici_gbytes_per_s: float  # GB/s per chip


class SLO(Protocol):
    """One latency objective of a tier (``fleetplan.instance.schema.SLO``)."""

    metric: str  # 'ttft', 'tpot' or 'itl'
    percentile: float  # 50 <= p < 100
    limit_ms: float  # ms


#: The instance's priors: ``fleetplan.instance.schema.Priors`` (MFUs, achieved bandwidths,
#: per-layer overheads, step-time scales, tail methods, ...; docs/instance.md, ``priors``).
Priors: TypeAlias = Any

#: A whole validated instance: ``fleetplan.instance.schema.Instance`` (model, chips, tiers,
#: workload, serving, priors, regions; docs/instance.md).
Instance: TypeAlias = Any
