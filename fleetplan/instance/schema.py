"""The fleetplan instance schema (pydantic v2, frozen, ``extra="forbid"``).

Every numeric field carries its unit in its name (``hbm_gb``, ``hbm_tbps``,
``peak_tflops``, ``price_per_chip_hour_usd``, ``limit_ms`` ...) and in its description.
Conventions: GB = 1e9 bytes, TB/s = 1e12 bytes/s, GB/s = 1e9 bytes/s, TFLOP/s = 1e12
FLOP/s, parameters in billions (``*_params_b``), token counts in tokens, shares are
fractions in [0, 1].

Field-level ranges are enforced here; relations between fields (shares summing to 1,
names that must exist, a model that must fit some slice ...) are checked in
:mod:`fleetplan.instance.checks`, which the :class:`Instance` constructor runs too, so
``Instance.model_validate(data)`` refuses an inconsistent instance exactly as the
loader and the CLI do. The JSON Schema (``fleetplan schema``) and
``docs/instance.md`` are generated from these classes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

__all__ = [
    "Instance",
    "ModelSpec",
    "GQAAttention",
    "MLAAttention",
    "HybridAttention",
    "MoESpec",
    "ChipType",
    "KubernetesAccelerator",
    "NetworkSpec",
    "PodInventory",
    "Region",
    "LengthBucket",
    "SLO",
    "TrafficClass",
    "Tier",
    "Workload",
    "PathLatency",
    "Priors",
    "Speculation",
    "WarmPool",
    "AdmissionClamp",
    "FailoverPolicy",
    "Serving",
    "PlacementPolicy",
    "StepTimeScale",
    "SourceCovers",
    "PhysicsSource",
    "Physics",
]

# Generic caps keep every number far inside float and int64 range (the physics multiplies
# them); fields with a physical scale carry tighter caps of their own below.
BIG = 1e12


def _no_bool(v):
    """YAML's true/false must not pass for 1/0 in a numeric field."""
    if isinstance(v, bool):
        raise ValueError("expected a number, got a boolean (true/false)")
    return v


_NB = BeforeValidator(_no_bool)
Share = Annotated[float, _NB, Field(ge=0.0, le=1.0)]
NonNegFloat = Annotated[float, _NB, Field(ge=0.0, le=BIG)]
PosInt = Annotated[int, _NB, Field(gt=0, le=10**9)]
NonNegInt = Annotated[int, _NB, Field(ge=0, le=10**9)]
Bytes = Annotated[float, _NB, Field(ge=0.0625, le=16.0)]


def Floored(floor: float, top: float):
    """A positive figure between a physical ``floor`` and ``top`` (both inclusive).

    ``> 0`` let a denormal such as 1e-320 through, whose quotients in the candidate tables
    overflow to infinity (``peak_tflops: 1e-320`` crashed ``solve`` with an OverflowError).
    Each floor is orders of magnitude below any real part (1 GFLOP/s, 1 GB/s
    of HBM, 1 MB/s of ICI ...), so it refuses only what is not a measurement, and keeps every
    quotient of bounded figures finite."""
    return Annotated[float, _NB, Field(ge=floor, le=top)]


#: the floors, in the fields' own units
MIN_GFLOPS_TFLOPS = 1e-3      # TFLOP/s: 1 GFLOP/s
MIN_BANDWIDTH_TBPS = 1e-3     # TB/s: 1 GB/s
MIN_GBYTES_PER_S = 1e-3       # GB/s: 1 MB/s
MIN_GB = 1e-3                 # GB: 1 MB
MIN_PARAMS_B = 1e-6           # billions: 1,000 parameters
MIN_USD = 1e-6                # USD: a millionth of a dollar
MIN_MS = 1e-3                 # ms: 1 microsecond
MIN_OUTPUT_TOKENS = 1.0       # tokens: every request has its first token
MIN_SCV = 1e-4                # dimensionless: arrivals 100x more regular than Poisson's
Price = Floored(MIN_USD, BIG)
MAX_CHUNK_TOKENS = 1 << 20  # 1,048,576 tokens: above every public model's context window
#: a step-time multiplier: a tenth to ten times the fitted physics
TimeScale = Annotated[float, _NB, Field(ge=0.1, le=10.0)]


def _distinct(v: list) -> list:
    """A list of candidates must not repeat one (a repeated candidate is a typo, and it would
    double the model's columns for nothing)."""
    seen = [x for i, x in enumerate(v) if x in v[:i]]
    if seen:
        raise ValueError(f"{seen[0]} is given twice; list each candidate once")
    return v


ChunkTokens = Annotated[int, _NB, Field(gt=0, le=MAX_CHUNK_TOKENS)]
# Longest lists an instance may hold (docs/cli.md, input limits): generous for any real
# fleet, and a bound on the work a hostile file can cause (a list of 300,000 draft lengths
# or failover targets took a minute to refuse). Past one: exit 2 naming the field and the cap.
MAX_REGIONS = 5000
MAX_CHIP_TYPES = 64
MAX_SHAPES = 64
MAX_LENGTH_BUCKETS = 1000
MAX_CLASSES = 64
MAX_TIERS = 32
MAX_SLOS = 16
MAX_PATH_COMPONENTS = 64
MAX_DRAFT_LENGTHS = 32
MAX_BATCH_CAPS = 256
#: The largest decode batch cap (resident requests per slice): far above any serving
#: engine's batch (vLLM's max_num_seqs is 256 by default; the bundled plans' largest cap is
#: 512), and the decode tables and the speculation switch-off search build arrays of one
#: entry per batch up to the cap -- a cap of 1e9 asked for 7.45 GiB arrays and took 24 GB
#: before the OOM killer; 65,536 keeps them at a few MB.
MAX_BATCH_CAP = 65_536

Name = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True, allow_inf_nan=False)


# --------------------------------------------------------------------------- model


class GQAAttention(_Frozen):
    """Grouped-query (or multi-head, when ``kv_heads`` equals the query heads) attention.

    KV bytes per token = 2 (K and V) x layers x kv_heads x head_dim x bytes_per_kv_element.
    """

    kind: Literal["gqa", "mha"] = Field(description="'gqa' or 'mha' (MHA is GQA with kv_heads = query heads).")
    kv_heads: PosInt = Field(description="Key/value heads per layer (count).")
    head_dim: PosInt = Field(description="Dimension of one attention head (elements).")


class MLAAttention(_Frozen):
    """Multi-head latent attention (DeepSeek-V2): one compressed latent plus a RoPE key per layer.

    KV bytes per token = layers x (kv_latent_rank + rope_dim) x bytes_per_kv_element.
    """

    kind: Literal["mla"] = Field(description="'mla'.")
    kv_latent_rank: PosInt = Field(description="Rank of the compressed KV latent (elements per layer per token).")
    rope_dim: NonNegInt = Field(description="Decoupled RoPE key dimension (elements per layer per token).")


class HybridAttention(_Frozen):
    """A model that mixes full-attention layers with sliding-window and/or linear-attention layers.

    Full layers store KV for every token of the context; sliding-window layers store at
    most ``window_tokens`` tokens; linear-attention (recurrent-state) layers store a
    fixed state per request, independent of length.
    """

    kind: Literal["hybrid"] = Field(description="'hybrid'.")
    kv_heads: PosInt = Field(description="KV heads per full or sliding-window layer (count).")
    head_dim: PosInt = Field(description="Head dimension of those layers (elements).")
    full_attention_layers: NonNegInt = Field(description="Layers with full causal attention (count).")
    sliding_window_layers: NonNegInt = Field(0, description="Layers with sliding-window attention (count).")
    window_tokens: NonNegInt = Field(0, description="Sliding-window length (tokens); KV kept per request is min(context, window).")
    linear_attention_layers: NonNegInt = Field(0, description="Linear-attention / recurrent layers (count).")
    linear_state_bytes_per_layer: NonNegInt = Field(
        0, description="Recurrent state per request per linear-attention layer (bytes)."
    )


Attention = Annotated[Union[GQAAttention, MLAAttention, HybridAttention], Field(discriminator="kind")]


class MoESpec(_Frozen):
    """Mixture-of-experts shape. Expert parameters are derived from total/active params:
    shared = (active - total * k/N) / (1 - k/N), experts = total - shared."""

    experts: PosInt = Field(description="Routed experts per MoE layer, N (count).")
    experts_per_token: PosInt = Field(description="Experts each token is routed to, k (count).")


class ModelSpec(_Frozen):
    """The served model: sizes, numeric formats and the attention layout that sets KV bytes."""

    name: Name = Field(description="Model name (free text identifier).")
    total_params_b: Floored(MIN_PARAMS_B, 1e5) = Field(description="Total parameters (billions); all of them are resident in HBM.")
    active_params_b: Floored(MIN_PARAMS_B, 1e5) = Field(description="Parameters active per token (billions); 2 x this is the FLOP/token of the dense part.")
    layers: Annotated[int, _NB, Field(gt=0, le=100_000)] = Field(description="Transformer layers, L (count).")
    d_model: Annotated[int, _NB, Field(gt=0, le=1_000_000)] = Field(description="Hidden size, d_model (elements); sets the causal-attention FLOP term 2 L d_model s^2.")
    bytes_per_weight: Bytes = Field(description="Bytes per weight at the serving format (1 for FP8/int8, 2 for BF16).")
    bytes_per_kv_element: Bytes = Field(description="Bytes per KV-cache element (1 for FP8 KV, 2 for BF16 KV).")
    attention: Attention = Field(description="Attention layout; sets KV bytes per token.")
    moe: MoESpec | None = Field(None, description="MoE shape; omit for a dense model.")


# --------------------------------------------------------------------------- hardware


# Kubernetes syntax (apimachinery validation): a label value is at most 63 characters,
# alphanumeric at both ends; a label key or extended resource name is an optional DNS
# subdomain prefix and '/', then such a name.
LabelValue = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")]
LabelKey = Annotated[str, Field(min_length=1, max_length=317,
                                pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")]
Topology = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[1-9][0-9]*(x[1-9][0-9]*)*$")]


class KubernetesAccelerator(_Frozen):
    """How the chip type appears on Kubernetes nodes (GKE): the node labels a workload selects,
    the extended resource its pods request, and the topology string of each slice shape.
    Read only by `fleetplan export --format k8s`; an instance without it solves and places
    as before, and the export names the field it misses."""

    accelerator_label: LabelKey = Field(
        "cloud.google.com/gke-tpu-accelerator",
        description="Node label naming the accelerator type (GKE TPU: cloud.google.com/gke-tpu-accelerator; GKE GPU: cloud.google.com/gke-accelerator).")
    accelerator: LabelValue = Field(description="Value of accelerator_label on this chip type's nodes (e.g. tpu7x, tpu-v6e-slice, nvidia-h100-80gb).")
    topology_label: LabelKey | None = Field(
        "cloud.google.com/gke-tpu-topology",
        description="Node label carrying the slice topology (null: nodes carry none, e.g. GPUs).")
    topologies: dict[Annotated[int, _NB, Field(gt=0, le=1_000_000)], Topology] = Field(
        default_factory=dict,
        description="Slice size (chips per slice) -> topology string of such a slice's nodes (e.g. 8: 2x2x2; the product of its "
        "dimensions is the chips); every exported slice shape needs one when topology_label is set.")
    resource: LabelKey = Field("google.com/tpu", description="Extended resource a pod requests for its chips (google.com/tpu, nvidia.com/gpu).")
    chips_per_host: Annotated[int, _NB, Field(gt=0, le=1_000_000)] = Field(
        description="Chips one node (host) exposes as that resource (count). A slice of more chips spans chips / chips_per_host hosts, "
        "one pod on each, and each host is one of the chip type's VMs (chips_per_vm must then equal it); a smaller slice is one pod "
        "requesting its own chips.")
    slice_topology_label: LabelKey | None = Field(
        "cloud.google.com/gke-nodepool",
        description="Node label with one value per multi-host slice (GKE TPU: the node pool); the export makes it the LeaderWorkerSet "
        "exclusive topology so a slice's hosts never straddle two (null: no such label).")


class ChipType(_Frozen):
    """An accelerator type, its pods (ICI domains) and the slice shapes it may be cut into."""

    hbm_gb: Floored(MIN_GB, 1e5) = Field(description="HBM per chip (GB = 1e9 bytes).")
    hbm_tbps: Floored(MIN_BANDWIDTH_TBPS, 1e3) = Field(description="HBM bandwidth per chip (TB/s = 1e12 bytes/s).")
    peak_tflops: Floored(MIN_GFLOPS_TFLOPS, 1e6) = Field(description="Peak dense TFLOP/s per chip at the serving dtype (1e12 FLOP/s).")
    dtype_native: bool = Field(
        True,
        description="Whether the serving dtype runs natively; false means peak_tflops is the fallback path's figure "
        "(e.g. int8 AQT on a chip without FP8) and is reported as such.",
    )
    ici_gbytes_per_s: Floored(MIN_GBYTES_PER_S, 1e6) = Field(description="ICI bandwidth per chip (GB/s = 1e9 bytes/s, not gigabits).")
    chips_per_vm: Annotated[int, _NB, Field(gt=0, le=1_000_000)] = Field(description="Chips per VM (the unit slices are built from).")
    chips_per_pod: Annotated[int, _NB, Field(gt=0, le=1_000_000)] = Field(description="Chips per pod / ICI domain; a slice never spans pods.")
    slice_shapes: list[Annotated[int, _NB, Field(gt=0, le=1_000_000)]] = Field(min_length=1, max_length=MAX_SHAPES, description="Allowed slice sizes (chips per slice), each a multiple of chips_per_vm.")
    price_per_chip_hour_usd: Floored(MIN_USD, 1e6) = Field(description="Default price per chip-hour (USD); regions may override.")
    new_pod_cost_per_hour_usd: NonNegFloat = Field(
        0.0, description="Amortised cost of committing a new pod (USD per pod-hour), on top of chip-hours."
    )
    kubernetes: KubernetesAccelerator | None = Field(
        None, description="Node labels, device resource and topology strings for the Kubernetes export (null: not exportable to Kubernetes)."
    )
    pod_dcn_egress_gbytes_per_s: Floored(MIN_GBYTES_PER_S, 1e9) | None = Field(
        None, description="DCN egress of one pod (GB/s = 1e9 bytes/s, not gigabits): the most prefill->decode KV bytes per second "
        "the pod's hosts may send to other pods, in any scenario; the sizing keeps every pod's cross-pod KV within it. Null: "
        "network.dcn_gbytes_per_s_per_slice (the brief's 'few hundred GB/s per slice', s4) times the slices of the chip type's "
        "smallest shape the pod holds -- every slice sending at that rate at once.")

    def pod_egress_gbytes_per_s(self, dcn_gbytes_per_s_per_slice: float) -> float:
        """This chip type's per-pod DCN egress (GB/s): :attr:`pod_dcn_egress_gbytes_per_s`, or
        its default, ``dcn_gbytes_per_s_per_slice`` x (chips_per_pod // the smallest slice shape)."""
        if self.pod_dcn_egress_gbytes_per_s is not None:
            return float(self.pod_dcn_egress_gbytes_per_s)
        return float(dcn_gbytes_per_s_per_slice) * (self.chips_per_pod // min(self.slice_shapes))


class NetworkSpec(_Frozen):
    """Effective KV-transfer bandwidths between a prefill slice and a decode slice."""

    kv_ici_gbytes_per_s_per_slice: Floored(MIN_GBYTES_PER_S, 1e7) = Field(description="Effective KV-transfer bandwidth inside a pod over ICI, per slice pair (GB/s = 1e9 bytes/s, not gigabits).")
    dcn_gbytes_per_s_per_slice: Floored(MIN_GBYTES_PER_S, 1e7) = Field(description="Effective KV-transfer bandwidth between pods over the DCN, per slice pair (GB/s = 1e9 bytes/s, not gigabits).")


class PodInventory(_Frozen):
    """Pods of one chip type in one region."""

    installed: NonNegInt = Field(0, description="Pods already installed (free to keep) (count).")
    available_new: NonNegInt = Field(0, description="New pods that can be had this quarter (count).")


class Region(_Frozen):
    """A serving region: its demand, prices, pod inventory and failover partners."""

    peak_rps: Annotated[float, _NB, Field(ge=0.0, le=1e9)] = Field(
        description="Peak request rate of this region (requests/s); 0 for a region with no traffic of its own (a failover site), as long as another region has some."
    )
    hourly_load: list[Annotated[float, _NB, Field(ge=0.0, le=1.0)]] = Field(
        min_length=24, max_length=24, description="24 hourly load multipliers (fraction of peak_rps, hour 0..23 UTC); the largest must be 1.0."
    )
    price_per_chip_hour_usd: dict[Name, Price] = Field(
        default_factory=dict, description="Per-chip-type price overrides in this region (USD per chip-hour)."
    )
    pods: dict[Name, PodInventory] = Field(min_length=1, max_length=MAX_CHIP_TYPES, description="Pod inventory per chip type.")
    failover_to: list[Name] = Field(default_factory=list, max_length=MAX_REGIONS, description="Regions that may absorb this region's traffic when it is lost.")
    demand_margin: Annotated[float, _NB, Field(ge=0.0, le=10.0)] | None = Field(
        None, description="This region's forecast-error margin, replacing workload.demand_margin (fraction: 0.2 = size for 120% of the forecast); null: the workload's."
    )


# --------------------------------------------------------------------------- workload


class LengthBucket(_Frozen):
    """One bucket of the input-length mix."""

    share: Share = Field(description="Share of requests in this bucket (fraction).")
    tokens: Annotated[int, _NB, Field(gt=0, le=100_000_000)] = Field(description="Input (prompt) length of requests in this bucket (tokens).")


class SLO(_Frozen):
    """A latency objective that names its metric and percentile.

    ``ttft``: time to first token. ``tpot``: per-request mean time per output token
    after the first. ``itl``: the per-step inter-token gap. Tools that leave this
    implicit disagree by about a third on the same fleet.
    """

    metric: Literal["ttft", "tpot", "itl"] = Field(description="'ttft', 'tpot' (per-request mean after the first token) or 'itl' (per-step gap).")
    percentile: Annotated[float, _NB, Field(ge=50.0, lt=100.0)] = Field(description="Percentile the limit applies to (50 <= p < 100).")
    limit_ms: Floored(MIN_MS, 1e9) = Field(description="Limit (milliseconds).")


class TrafficClass(_Frozen):
    """A priority class (interactive / standard / batch ...)."""

    share: Share = Field(description="Share of requests in this class (fraction).")
    slos: list[SLO] = Field(default_factory=list, max_length=MAX_SLOS, description="Latency objectives of this class; empty for a scavenger class.")
    sheddable: bool = Field(False, description="May be shed first when capacity is short (the batch class).")
    spec_acceptance: Share = Field(
        description="Speculative-decoding acceptance (fraction); what the number is says spec_acceptance_kind: the acceptance rate "
        "alpha (mean accepted draft tokens / draft tokens, what vLLM reports) measured at draft length spec_acceptance_at_k, or "
        "the per-token acceptance probability of Leviathan et al. 2023."
    )
    spec_acceptance_kind: Literal["rate", "per_token"] = Field(
        "rate", description="'rate': spec_acceptance is the acceptance rate alpha at draft length spec_acceptance_at_k; 'per_token': "
        "it is the probability a that each draft token is accepted (drafts stop at the first rejection), and a verify step at "
        "any k yields (1 - a^(k+1)) / (1 - a) tokens. A rate measured at K is turned into that a, so every k gets its own rate."
    )
    spec_acceptance_at_k: PosInt | None = Field(
        None, description="The draft length (tokens) at which the acceptance rate was measured (kind 'rate'). Null: the same rate "
        "at every draft length, which overstates longer drafts (alpha 0.7 measured at k = 2 is 0.57 at k = 4, not 0.7: "
        "3.26 tokens per verify step, not 3.8); give the k it was measured at."
    )


class Tier(_Frozen):
    """A context-length tier served by its own prefill and decode pools."""

    name: Name = Field(description="Tier name (e.g. short, long, ultra).")
    max_input_tokens: PosInt | None = Field(
        description="Upper bound of input length in this tier (tokens, inclusive); null for the last, unbounded tier."
    )
    slo_overrides: list[SLO] = Field(
        max_length=MAX_SLOS,
        default_factory=list, description="SLOs replacing the classes' SLO of the same metric in this tier (the stratified SLO)."
    )
    prefix_hit_rate: Share | None = Field(None, description="Tier-specific prefix-cache hit rate (fraction of prompt tokens); default the workload's.")
    dcn_share_max: Share | None = Field(
        None, description="Largest share of this tier's requests whose prefill->decode KV crosses the DCN (fraction), at the normal "
        "peak and in every region-loss scenario; null: placement.dcn_share_max.")


class Workload(_Frozen):
    """What the fleet serves: length mix, outputs, cache hits, classes and tiers."""

    input_mix: list[LengthBucket] = Field(min_length=1, max_length=MAX_LENGTH_BUCKETS, description="Input-length mix; shares sum to 1.")
    output_tokens: Floored(MIN_OUTPUT_TOKENS, 1e7) = Field(description="Mean output tokens per request (tokens).")
    output_length_distribution: Literal["fixed", "geometric"] = Field(
        "fixed",
        description="How answer lengths spread around output_tokens: 'fixed' (every answer the mean) or 'geometric' (mean "
                    "output_tokens, as chat traces' long tail; the simulator's --output-lengths geometric). Enters the colocated "
                    "replicas' TPOT tail (a short answer averages few token gaps, so one stall weighs more); disaggregated decode "
                    "slots are sized at a full batch either way.")
    prefix_hit_rate: Annotated[float, _NB, Field(ge=0.0, lt=1.0)] = Field(
        description="Prefix-cache hit rate (fraction of prompt tokens served from cache)."
    )
    classes: dict[Name, TrafficClass] = Field(min_length=1, max_length=MAX_CLASSES, description="Traffic classes; shares sum to 1.")
    tiers: list[Tier] = Field(min_length=1, max_length=MAX_TIERS, description="Context-length tiers, ascending by max_input_tokens; the last may be unbounded.")
    arrival_scv: Floored(MIN_SCV, 1e4) = Field(
        1.0,
        description="Burstiness of arrivals within an hour (dimensionless, squared coefficient of variation of inter-arrival times "
        "within an hour; 1 = Poisson, the default): the C_a^2 of the prefill queues' G/G/c waits (Allen-Cunneen, "
        "W = W_MMc x (C_a^2 + C_s^2) / 2). The hourly_load profile carries the rate's change from hour to hour, so this is the "
        "variability left inside a stationary stretch: `fleetplan workload fit` estimates it as the index of dispersion of "
        "counts at the queue's time scale, with the rate's drift removed (docs/workloads.md). One value for every region and tier.",
    )
    demand_margin: Annotated[float, _NB, Field(ge=0.0, le=10.0)] = Field(
        0.0,
        description="Forecast-error margin of every region (fraction: 0.1 = size for 110% of the forecast): each pool is sized, and verified, "
        "for (1 + margin) x its region's peak_rps x hourly load, own and diverted traffic alike, in every hour and scenario; cost per "
        "token stays at the forecast. Default 0: the fleet is sized to the forecast exactly (the plan says so, and reports per pool "
        "the load growth it absorbs before an SLO breaks). Regions may set their own (regions.*.demand_margin).",
    )


# --------------------------------------------------------------------------- priors & policy


class PathLatency(_Frozen):
    """A fixed component of the TTFT path (gateway, router, first-token egress ...)."""

    name: Name = Field(description="Component name.")
    p50_ms: NonNegFloat = Field(description="Median latency (ms).")
    p99_ms: NonNegFloat = Field(description="99th-percentile latency (ms); other percentiles follow a shifted exponential through p50 and p99.")


class Priors(_Frozen):
    """Efficiency priors: assumed until replaced by measurement (the brief's section 2 ledger)."""

    prefill_mfu: Annotated[float, _NB, Field(ge=0.001, le=1.0)] = Field(description="Prefill model-FLOP utilisation (fraction of peak_tflops).")
    decode_mfu: Annotated[float, _NB, Field(ge=0.001, le=1.0)] = Field(description="Compute efficiency of decode and verify steps (fraction of peak_tflops).")
    hbm_bw_fraction: Annotated[float, _NB, Field(ge=0.001, le=1.0)] = Field(description="Achieved HBM bandwidth in decode (fraction of hbm_tbps).")
    hbm_workspace_gb_per_chip: NonNegFloat = Field(description="HBM reserved for activations, collectives and compile buffers (GB per chip).")
    hbm_headroom_fraction: Annotated[float, _NB, Field(ge=0.0, lt=1.0)] = Field(description="HBM kept free as paging slack / OOM guard (fraction of slice HBM).")
    kv_paging_slack: Annotated[float, _NB, Field(ge=0.0, le=1.0)] = Field(
        0.0, description="Extra KV pages held per request for fragmentation (fraction of its KV bytes); counted in capacity, not streamed."
    )
    tpot_p99_inflation: Annotated[float, _NB, Field(ge=1.0, le=100.0)] = Field(description="Prior ratio of p99 to p50 decode step time (dimensionless, >= 1).")
    tpot_tail_method: Literal["prior", "kv_spread", "max"] = Field(
        "max", description="How the TPOT/ITL tail is derived: the prior inflation, the physics (the spread of resident KV in the tier; for TPOT also the spread of speculative acceptance over a request's tokens), or the larger."
    )
    decode_step_overhead_ms: NonNegFloat = Field(0.0, description="Fixed per decode step overhead (ms).")
    prefill_overhead_ms: NonNegFloat = Field(0.0, description="Fixed per prefill request overhead (ms).")
    kv_transfer_overlap: Share = Field(0.0, description="Fraction of the prefill->decode KV transfer hidden behind prefill compute (layer-wise streaming).")
    prefill_chunk_tokens: PosInt = Field(8192, description="Chunk size of a disaggregated prefill slice's chunked prefill (tokens; "
                                                           "the simulator's chunks, the exported engines' max-num-batched-tokens for "
                                                           "prefill slices and prefill-first replicas). Colocated replicas' chunked "
                                                           "schedule takes its token budgets from serving.chunk_tokens instead.")
    path_latency: list[PathLatency] = Field(default_factory=list, max_length=MAX_PATH_COMPONENTS, description="Fixed TTFT path components (added to every TTFT).")
    # ---- step physics beyond the roofline: attention, per-layer overhead, collectives
    attention_mfu: Annotated[float, _NB, Field(ge=0.001, le=1.0)] | None = Field(
        None, description="Compute efficiency of the attention kernels (fraction of peak_tflops), apart from the GEMMs' MFU; "
        "null: prefill_mfu in prefill, decode_mfu in decode.")
    attention_bw_fraction: Annotated[float, _NB, Field(ge=0.001, le=1.0)] | None = Field(
        None, description="Achieved HBM bandwidth of decode attention's KV reads and writes (fraction of hbm_tbps), apart from "
        "the weight reads' hbm_bw_fraction; null: hbm_bw_fraction.")
    layer_overhead_us: Annotated[float, _NB, Field(ge=0.0, le=1e6)] = Field(
        0.0, description="Fixed time per layer per forward pass (microseconds): kernel launches and tails, norms and small ops "
        "that do not shrink with the slice; charged to every decode/verify step and every prefill (pass or chunk).")
    collective_bytes_per_element: Bytes = Field(
        2.0, description="Bytes per activation element in tensor-parallel all-reduces, MoE dispatch/combine (2 for BF16 activations).")
    allreduce_algorithm: Literal["ring", "tree", "one_shot", "auto"] = Field(
        "ring", description="All-reduce algorithm: 'ring' (2(n-1) latency steps) or 'tree' (2 ceil(log2 n) steps; "
        "Rabenseifner), both moving 2(n-1)/n of the message per chip; 'one_shot' (one step, (n-1) x the message: "
        "TensorRT-LLM's small-message kernel); 'auto' (the faster of one_shot and ring at each message size, as "
        "TensorRT-LLM and NCCL choose).")
    collective_bw_fraction: Annotated[float, _NB, Field(ge=0.001, le=1.0)] = Field(
        0.730, description="Achieved all-reduce bus bandwidth (fraction of the chip's ici_gbytes_per_s). Default: NCCL all-reduce "
        "on DGX-H100, fitted (benchmarks/fit_collectives.py).")
    collective_latency_us: Annotated[float, _NB, Field(ge=0.0, le=1e6)] = Field(
        18.26, description="Fixed latency of one all-reduce (microseconds): launch and synchronisation. Default: NCCL on DGX-H100, fitted.")
    collective_hop_latency_us: Annotated[float, _NB, Field(ge=0.0, le=1e5)] = Field(
        0.789, description="Latency per collective step (microseconds; a ring all-reduce on n chips has 2(n-1) steps). "
        "Default: NCCL on DGX-H100, fitted.")
    all_to_all_bw_fraction: Annotated[float, _NB, Field(ge=0.001, le=1.0)] = Field(
        0.794, description="Achieved bandwidth of all-to-all and point-to-point transfers (MoE dispatch/combine, ring-attention "
        "KV passes; fraction of ici_gbytes_per_s). Default: NCCL send/recv on DGX-H100, fitted.")
    all_to_all_latency_us: Annotated[float, _NB, Field(ge=0.0, le=1e6)] = Field(
        6.80, description="Fixed latency of one all-to-all or point-to-point transfer (microseconds). Default: NCCL send/recv on DGX-H100, fitted.")
    context_parallel_min_tokens: PosInt | None = Field(
        None, description="Prompts with at least this many uncached tokens prefill context-parallel (ring attention) across "
        "tensor-parallel groups that each hold the weights, when that is faster than tensor parallel across the whole slice "
        "(tokens); null: every prompt prefills tensor-parallel across the slice.")
    context_parallel_efficiency: Annotated[float, _NB, Field(ge=0.001, le=1.0)] = Field(
        0.93, description="Attention efficiency kept under context parallelism (fraction; load balance of causal blocks). "
        "Default: 93% parallelisation efficiency of Yang et al., MLSys 2025 (arXiv 2411.01783).")
    # ---- a stated spread of the physics: a source is a Priors, a plain range is its two scales
    prefill_time_scale: TimeScale = Field(
        1.0, description="Multiplier on every prefill time the step priors above give (dimensionless, 0.1 to 10; 1 = as fitted): "
        "whole prefills, a prefill slice's chunks, the per-request prefill overhead; in a colocated mixed step the token-weighted "
        "mean of this and decode_time_scale. A physics source's plain range (physics.sources[].step_time_scale) and the "
        "plan's step-time margins set it.")
    decode_time_scale: TimeScale = Field(
        1.0, description="Multiplier on every decode step time the step priors above give (dimensionless, 0.1 to 10; 1 = as "
        "fitted): decode and speculative verify steps (their draft steps too), the decode part of a colocated mixed step.")


class Speculation(_Frozen):
    """Speculative decoding: the candidate draft lengths and the switch policy."""

    enabled: bool = Field(True, description="Whether speculation may be planned at all.")
    draft_tokens: list[PosInt] = Field(default_factory=lambda: [4], max_length=MAX_DRAFT_LENGTHS, description="Candidate draft lengths k (tokens).")
    draft_step_ms: NonNegFloat = Field(0.5, description="Time of one sequential draft step (ms); k of them precede each verify step.")
    alpha_threshold: Share = Field(0.45, description="Classes whose acceptance rate alpha at the draft length planned is below this do not speculate there (fraction).")


class WarmPool(_Frozen):
    """Weight-loaded, traffic-less slices per region, assignable to any pool in a failover."""

    min_slices_per_region: NonNegInt = Field(0, description="Warm slices every region keeps for bursts (count).")
    max_slices_per_region: NonNegInt = Field(0, description="Most warm slices a region may hold (count).")


class AdmissionClamp(_Frozen):
    """Admission clamp for uncached long prompts in a failover (the brief's stratified SLO)."""

    enabled: bool = Field(False, description="Whether diverted (cold-cache) prompts at or above min_input_tokens are clamped in a failover.")
    min_input_tokens: PosInt = Field(131072, description="Prompts at or above this length are clamped when uncached (tokens).")


class FailoverPolicy(_Frozen):
    """Region-loss (N-1) policy: what a survivor sees and which mitigations it may use."""

    n_minus_1: bool = Field(True, description="Size the fleet so any single region may be lost in any hour.")
    diverted_hit_rate: Share = Field(0.0, description="Prefix-cache hit rate of traffic diverted to a survivor (fraction; cold cache).")
    rewarm_hit_rate_factor: Share = Field(
        1.0, description="During cache re-warm every hit rate at a survivor is multiplied by this (fraction; 1 = no dip)."
    )
    size_for: Literal["transient", "steady"] = Field(
        "transient", description="Size prefill for the re-warm transient or the post-failover steady state."
    )
    warm_pool: WarmPool = Field(default_factory=WarmPool, description="Warm pool.")
    admission_clamp: AdmissionClamp = Field(default_factory=AdmissionClamp, description="Admission clamp.")
    batch_shed_cost_per_1m_tokens_usd: NonNegFloat = Field(
        0.0, description="Price of shedding sheddable-class tokens in a failover scenario (USD per 1M tokens shed)."
    )
    clamp_cost_per_1k_requests_usd: NonNegFloat = Field(
        0.0, description="Price of clamping uncached long prompts in a failover scenario (USD per 1,000 requests); reported, the clamp is a rule."
    )
    prefix_cache_gb_per_prefill_chip: Floored(MIN_GB, BIG) | None = Field(
        None,
        description="Prefix-cache capacity per prefill chip, HBM and host memory together (GB); sets the re-warm time of `fleetplan whatif` (null: not estimated).",
    )
    event_weight: Annotated[float, _NB, Field(ge=0.0, le=1.0)] = Field(
        0.001, description="Fraction of hours spent in a region-loss event (about 9 h a year at 0.001); weighs mitigation prices against fleet cost per hour."
    )


class Serving(_Frozen):
    """How the model is served: disaggregated pools, colocated replicas, or the cheaper of
    the two per region x tier (the optimiser decides)."""

    mode: Literal["auto", "disaggregated", "colocated"] = Field(
        "auto", description="'auto' (the default: per region x tier the sizing model picks disaggregated prefill/decode pools or colocated "
                            "replicas, whichever is cheaper within the SLOs; the plan records the choice), 'disaggregated' (prefill and "
                            "decode pools everywhere) or 'colocated' (replicas everywhere).")
    batch_caps: list[Annotated[int, _NB, Field(gt=0, le=MAX_BATCH_CAP)]] = Field(
        max_length=MAX_BATCH_CAPS,
        default_factory=lambda: [8, 16, 32, 64, 96, 128, 192, 256, 320, 384, 448, 512],
        description=f"Candidate decode batch caps (resident requests per slice), each at most {MAX_BATCH_CAP:,}.",
    )
    decode_knee_margin: Annotated[float, _NB, Field(ge=0.0, lt=1.0)] = Field(
        0.0, description="In normal hours decode runs at most (1 - margin) x the SLO knee batch; failovers may ride to the knee (fraction)."
    )
    utilisation_headroom: Annotated[float, _NB, Field(ge=0.05, le=1.0)] = Field(
        1.0, description="Colocated mode: replicas run at most this fraction of their SLO-limited rate (fraction)."
    )
    colocated_schedules: list[Literal["prefill-first", "chunked"]] = Field(
        default_factory=lambda: ["prefill-first", "chunked"], min_length=1, max_length=2,
        description="Colocated mode: the engine schedules the optimiser may pick per replica pool (region x tier x slice shape): 'prefill-first' "
                    "(whole prompts before decode steps) and 'chunked' (Sarathi-style mixed steps within a token budget).",
    )
    chunk_tokens: Annotated[list[ChunkTokens], AfterValidator(_distinct)] = Field(
        default_factory=lambda: [256, 512, 1024, 2048], min_length=1, max_length=16,
        description="Colocated mode, chunked schedule: candidate token budgets per engine step (tokens; vLLM's "
                    "max_num_batched_tokens: the residents' decode tokens first, the rest a chunk of the head prompt); each "
                    "at most 1,048,576, none repeated.",
    )
    router: Literal["least-work", "round-robin", "random", "prefix-aware"] = Field(
        "least-work", description="How the gateway spreads a pool's requests over its colocated replicas or disaggregated prefill "
                                  "slices; the plan is sized for it and records it: 'least-work' (to the one that can start the "
                                  "prefill first: one FCFS queue, M/G/c), 'round-robin' (every c-th request to each: Erlang-c "
                                  "arrivals, a G/G/1 per server with C_a^2 / c), 'random' (a Poisson split: an M/G/1 per server) or "
                                  "'prefix-aware' (affinity by the prompt's first block: queued as 'random', the tier's prefix hit "
                                  "rate). `replica_router` is accepted as its old name.",
    )
    mixed_shapes: bool = Field(
        False, description="Let a region x tier's decode pool and its colocated replica pool mix slice shapes and chip types (several "
                           "pools of one role, each shape at its own operating point and SLO-limited rate; a replica shape's pool is "
                           "still held to the size its least-work rate assumes). Prefill stays one shape per pool (its Erlang C "
                           "queue is of identical servers). Off by default for `fleetplan solve`: with the bundled inventories one "
                           "shape per pool is as cheap and solves faster; turn it on when inventory binds (an installed older chip "
                           "beside a newer one). `fleetplan purchase` turns it on (policy.mixed_shapes).",
    )

    @model_validator(mode="before")
    @classmethod
    def _replica_router_alias(cls, data):
        """``serving.replica_router`` (the field's name before routers other than least-work and
        random) is read as ``router``; both given and different is an error naming both."""
        if isinstance(data, dict) and "replica_router" in data:
            data = dict(data)
            old = data.pop("replica_router")
            if "router" in data and data["router"] != old:
                raise ValueError(f"the old name serving.replica_router ({old!r}) and serving.router ({data['router']!r}) disagree: give one")
            data.setdefault("router", old)
        return data

    @property
    def replica_router(self) -> str:
        """``router`` under its old name (least-work | round-robin | random | prefix-aware)."""
        return self.router


class PlacementPolicy(_Frozen):
    """Placement-aware sizing: the sizing counts slices per pod (ICI domain), so a request's
    prefill and decode share a pod by construction and the KV that crosses the DCN is bounded
    (the brief, s4-s5: 'the router picks a (prefill, decode) pair inside one ICI domain; DCN
    transfer is the fallback ... alert if >5% of requests')."""

    size_with_pods: bool = Field(
        True, description="Size with the pods: count every slice per pod, keep each tier's prefill->decode KV within its DCN share "
        "and every pod's DCN egress within its capacity in every scenario, and compose TTFT with the DCN transfer the sized share "
        "pays. False: size without the pods (fleetplan place then minimises the DCN share of the sized fleet, unbounded).")
    dcn_share_max: Share = Field(
        0.05, description="Largest share of requests whose prefill->decode KV crosses the DCN (fraction), for every tier that sets "
        "none of its own and over all tiers, at the normal peak and in every region-loss scenario. Default 0.05: the brief's "
        "pager threshold (s5, 'DCN KV-transfer share > 5% of requests').")


# --------------------------------------------------------------------------- physics sources


class StepTimeScale(_Frozen):
    """A plain range: multipliers on the step times of the instance's own priors, per phase."""

    prefill: TimeScale = Field(1.0, description="Multiplier on every prefill time (dimensionless, 0.1 to 10; sets the source's "
                                                "priors.prefill_time_scale to the instance's times this).")
    decode: TimeScale = Field(1.0, description="Multiplier on every decode and verify step (dimensionless, 0.1 to 10; sets the "
                                               "source's priors.decode_time_scale to the instance's times this).")


class SourceCovers(_Frozen):
    """The cells a source's data cover (what its fit saw): outside them its priors extrapolate."""

    tensor_parallel: list[PosInt] = Field(default_factory=list, max_length=MAX_SHAPES, description="Slice sizes (chips, tensor-parallel degree) "
                                          "its data measured; empty: not stated.")
    decode_batch_max: PosInt | None = Field(None, description="Largest decode batch its data measured (requests).")
    decode_context_max_tokens: PosInt | None = Field(None, description="Longest decode context its data measured (tokens).")
    prefill_tokens_max: NonNegInt | None = Field(None, description="Longest prefill its data measured (tokens); 0: its data "
                                                 "measured no prefill (an end-to-end fit that held it).")


SourceName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9-]*$")]


class PhysicsSource(_Frozen):
    """One measured (or assumed) version of the step physics: the instance's priors with this
    source's fields laid over -- a ``fleetplan calibrate -o`` document (``include``), fields
    given here (``priors``), and optionally a plain per-phase step-time scale."""

    name: SourceName = Field(description="Source name ([a-z0-9-], unique; 'instance' is the instance's own priors).")
    description: str = Field("", max_length=4000, description="What the source is (data, engine, cells); default the included file's "
                                                             "source.description.")
    include: str | None = Field(None, max_length=4096, description="A priors document written by `fleetplan calibrate -o` (or "
                                "instances/sources/*.yaml), path relative to the instance file: its priors: block is laid over the "
                                "instance's priors. Read by the loader (load_instance), which copies the block into `priors` (under "
                                "the fields given there) and the file's path and SHA-256 into `included`, so an instance and the plans "
                                "that embed it carry the source's numbers, not a path.")
    included: dict[str, str] | None = Field(None, description="Set by the loader: {path, sha256} of the file `include` named "
                                            "(provenance; never read again).")
    priors: dict[Name, Any] = Field(
        default_factory=dict, max_length=64,
        description="Priors fields this source sets (a partial priors block, in the fields' own units), laid over the instance's "
        "priors; with `include`, the file's block under these.")
    instance_priors: list[Name] = Field(default_factory=list, max_length=64, description="Priors fields kept at the instance's own "
                                        "value whatever `include` and `priors` say: a prior this source's data identify weakly (the "
                                        "bundled end-to-end sources' prefill_mfu).")
    step_time_scale: StepTimeScale | None = Field(None, description="Multipliers on the step times (a plain range, or on top of "
                                                  "the fields above): they multiply the source's prefill_time_scale and decode_time_scale.")
    covers: SourceCovers | None = Field(None, description="The cells the source's data cover (default the included file's "
                                        "source.covers); `fleetplan perf` marks its step times outside them. The plan holds under "
                                        "the source everywhere (outside its cells, its priors' extrapolation).")


class Physics(_Frozen):
    """Physics with a stated spread (issue 40): the sources of the step physics the plan is sized
    and verified under. Without this block the physics is one source, the instance's own
    priors, named 'instance'."""

    hold: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9-]*$")] = Field(
        "all", description="Which sources the plan must hold under: 'all' (every source: each candidate is legal only where its SLOs "
        "hold under every one, at the least capacity of any), 'slowest' (the source with the largest decode step at batch 64 plus "
        "prefill of the mean prompt on the first chip's first slice shape), or a source's name. `fleetplan solve --physics` "
        "overrides it.")
    include_base: bool = Field(True, description="Whether the instance's own priors are a source too, named 'instance' (false when "
                                                 "they are one of the listed sources already, as in the bundled instances).")
    sources: list[PhysicsSource] = Field(min_length=1, max_length=16, description="The sources (at most 16).")


class Instance(_Frozen):
    """A complete fleetplan instance.

    Constructing one (`Instance.model_validate(data)` or `Instance(**fields)`) runs the
    field checks and then the cross-field checks (fleetplan.instance.checks): an
    inconsistent instance raises a pydantic `ValidationError` whose error wraps
    `fleetplan.errors.InconsistentInstanceError`, with every problem's field path, value
    and unit (`errors()[0]["ctx"]["error"].problems`). `model_copy(update=...)` skips
    validation (pydantic's rule), so `fleetplan.solve` and `fleetplan.verify` re-check
    the instance they are given.
    """

    name: Name = Field(description="Instance name.")
    description: str = Field("", max_length=4000, description="Free text: where the numbers come from.")
    model: ModelSpec = Field(description="The served model.")
    chips: dict[Name, ChipType] = Field(min_length=1, max_length=MAX_CHIP_TYPES, description="Chip types by name.")
    network: NetworkSpec = Field(description="KV-transfer bandwidths.")
    regions: dict[Name, Region] = Field(min_length=1, max_length=MAX_REGIONS, description="Regions by name.")
    workload: Workload = Field(description="Workload.")
    priors: Priors = Field(description="Efficiency priors.")
    speculation: Speculation = Field(default_factory=Speculation, description="Speculative decoding.")
    failover: FailoverPolicy = Field(default_factory=FailoverPolicy, description="Failover policy.")
    serving: Serving = Field(default_factory=Serving, description="Serving mode.")
    placement: PlacementPolicy = Field(default_factory=PlacementPolicy, description="Placement-aware sizing and the DCN share.")
    physics: Physics | None = Field(None, description="Physics sources the plan holds under (null: one source, the priors above).")

    def demand_margin_of(self, region: str) -> float:
        """The forecast-error margin of ``region``: its own, else the workload's (fraction)."""
        m = self.regions[region].demand_margin
        return self.workload.demand_margin if m is None else m

    def dcn_share_max_of(self, tier: str) -> float:
        """The DCN share ceiling of ``tier`` (fraction of its requests): its own, else placement.dcn_share_max."""
        own = next((t.dcn_share_max for t in self.workload.tiers if t.name == tier), None)
        return self.placement.dcn_share_max if own is None else float(own)

    def sized_peak_rps(self, region: str) -> float:
        """The peak ``region`` is sized and verified for: peak_rps x (1 + its demand margin) (requests/s)."""
        return self.regions[region].peak_rps * (1.0 + self.demand_margin_of(region))

    @model_validator(mode="after")
    def _consistent(self) -> "Instance":
        """The cross-field checks (:data:`CROSS_FIELD_CHECKS`: fleetplan.instance.checks),
        every problem at once."""
        from fleetplan.errors import InconsistentInstanceError

        if not CROSS_FIELD_CHECKS:
            raise RuntimeError("the instance's cross-field checks are not registered (fleetplan.instance.checks not imported)")
        problems = [p for check in CROSS_FIELD_CHECKS for p in check(self)]
        if problems:
            raise InconsistentInstanceError(repr(self.name), problems)
        return self


#: The cross-field checks every validated :class:`Instance` runs (each ``Instance -> [Problem]``):
#: :func:`fleetplan.instance.checks.check_instance` registers itself here when it is imported,
#: and the package (``fleetplan/instance/__init__.py``) imports it, so it is in place before any
#: instance is read. The schema is the bottom of the package: the checks read it (and call the
#: physics), it does not import them.
CROSS_FIELD_CHECKS: list[Callable[[Instance], list]] = []
