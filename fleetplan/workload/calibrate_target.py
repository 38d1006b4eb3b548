"""What a calibration fits against: the catalogue of models and chips a measured profile may
name (:func:`catalogue`), the model and chip resolved from the profile and the options
(:func:`resolve_target`, :class:`Target`), and the measured points selected for the fit
(:func:`select_points`, :class:`Point`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from typing import Iterable, Sequence

import yaml

from fleetplan.errors import Problem
from fleetplan.instance.schema import ChipType, GQAAttention, ModelSpec, Priors
from fleetplan.perf.roofline import SliceSpec
from fleetplan.workload.profiles import ProfileError, RawProfile


@dataclass(frozen=True)
class ChipPeaks:
    """Per-chip peaks of a profiled accelerator (datasheet numbers; sources in profile_specs.yaml).

    Attributes: name, hbm_gb (GB), hbm_tbps (TB/s), peak_tflops (TFLOP/s, 16-bit dense),
    ici_gbytes_per_s (GB/s per chip), aliases (names the profiles use).
    """

    name: str
    hbm_gb: float
    hbm_tbps: float
    peak_tflops: float
    ici_gbytes_per_s: float
    aliases: tuple[str, ...] = ()

    def slice(self, chips: int) -> SliceSpec:
        """``chips`` of these joined as one slice: the same arithmetic as :meth:`SliceSpec.of`."""
        return SliceSpec(self.name, chips, self.hbm_gb * chips, self.hbm_tbps * chips, self.peak_tflops * chips, self.ici_gbytes_per_s)

    @classmethod
    def of(cls, name: str, chip: ChipType) -> "ChipPeaks":
        return cls(name, chip.hbm_gb, chip.hbm_tbps, chip.peak_tflops, chip.ici_gbytes_per_s)


@dataclass(frozen=True)
class CatalogueModel:
    """A profiled model: its :class:`ModelSpec` plus the GEMM shapes Vidur profiles.

    query_heads / ffn_dim / gated_mlp are None when unknown (a model from an instance).
    """

    spec: ModelSpec
    aliases: tuple[str, ...] = ()
    query_heads: int | None = None
    ffn_dim: int | None = None
    gated_mlp: bool | None = None

    @property
    def name(self) -> str:
        return self.spec.name


@lru_cache(maxsize=1)
def catalogue() -> tuple[dict[str, CatalogueModel], dict[str, ChipPeaks]]:
    """The built-in catalogue (``fleetplan/workload/profile_specs.yaml``): models and chips by name."""
    text = files("fleetplan.workload").joinpath("profile_specs.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    models = {
        k: CatalogueModel(ModelSpec.model_validate(v["spec"]), tuple(v.get("aliases", ())), v.get("query_heads"), v.get("ffn_dim"), v.get("gated_mlp"))
        for k, v in data["models"].items()
    }
    chips = {
        k: ChipPeaks(k, float(v["hbm_gb"]), float(v["hbm_tbps"]), float(v["peak_tflops"]), float(v["ici_gbytes_per_s"]), tuple(v.get("aliases", ())))
        for k, v in data["chips"].items()
    }
    return models, chips


def _names(entry_name: str, aliases: Iterable[str]) -> set[str]:
    return {entry_name.lower(), *(a.lower() for a in aliases)}


def _lookup(name: str, entries: dict, what: str, option: str):
    for key, e in entries.items():
        if name.lower() in _names(key, e.aliases):
            return e
    known = ", ".join(sorted(entries))
    raise ProfileError(option, [Problem(option, f"unknown {what} {name!r}; the catalogue knows: {known} "
                                                "(or take the model and chip from an instance with --instance).")])


@dataclass(frozen=True)
class Point:
    """One fitted point: the median of repeated measurements of one configuration.

    Attributes:
        phase: ``prefill`` (t = batch x per-request prefill), ``decode`` (one step) or
            ``gemm`` (Vidur: the layer GEMMs over ``batch`` tokens, whole model).
        tp: chips in the slice. batch: prompts (prefill), residents (decode) or tokens (gemm).
        prompt_tokens: tokens per prompt (prefill; decode: the residents' prompt; gemm: 0).
        context_tokens: mean KV context per resident (decode; else 0) (tokens).
        time_ms: median measured time (ms). lines: the profile lines merged (sorted).
        group: points of one group are excluded together (one Splitwise grid run).
    """

    phase: str
    tp: int
    batch: int
    prompt_tokens: float
    context_tokens: float
    time_ms: float
    lines: tuple[int, ...]
    group: str


@dataclass(frozen=True)
class Target:
    """What the profile is fitted against: the model, the chip and the base priors.

    ``base`` supplies every prior the fit does not replace (and the held value of one the
    data do not identify). ``profile_model`` / ``profile_chip``: the names selected in the
    profile (None: the profile does not name them). ``source``: catalogue or instance.
    """

    model: CatalogueModel
    chip: ChipPeaks
    base: Priors
    profile_model: str | None
    profile_chip: str | None
    source: str


#: Neutral base priors for catalogue targets: the roofline at peak, no overheads. Only
#: the fields a fit holds (decode_mfu when not identified) reach the predictions.
_NEUTRAL = dict(prefill_mfu=1.0, decode_mfu=1.0, hbm_bw_fraction=1.0, hbm_workspace_gb_per_chip=0.0,
                hbm_headroom_fraction=0.0, tpot_p99_inflation=1.0)


def _pick(raw_names: Sequence[str], wanted: str | None, aliases: set[str], what: str, option: str, source: str) -> str | None:
    """The profile's own name for the wanted model/chip (matching catalogue aliases too)."""
    if not raw_names:
        return None
    if wanted is None and not aliases:
        if len(raw_names) == 1:
            return raw_names[0]
        raise ProfileError(source, [Problem(option, f"the profile holds several {what}s ({', '.join(raw_names)}); choose one with {option}.")])
    want = set(aliases) | ({wanted.lower()} if wanted else set())
    hits = [n for n in raw_names if n.lower() in want]
    if not hits:
        raise ProfileError(source, [Problem(option, f"the profile has no rows for {what} {wanted or sorted(aliases)[0]!r}; "
                                                    f"it holds: {', '.join(raw_names)}.")])
    return hits[0]


def resolve_target(raw: RawProfile, model: str | None = None, chip: str | None = None,
                   instance: str | None = None, instance_chip: str | None = None) -> Target:
    """The model, chip and base priors to fit, and the profile rows to select.

    Without ``instance``: ``model`` and ``chip`` name catalogue entries (or their aliases;
    when omitted, the one model / chip the profile holds). With ``instance``: the model,
    the chip type ``instance_chip`` (default: the instance's only chip type) and the base
    priors come from the instance; ``model`` / ``chip`` then only select profile rows.

    Raises: :class:`ProfileError` (or InstanceError) for unknown names, a profile without
    rows for them, or a Vidur file whose model shape differs from the model's.
    """
    cat_models, cat_chips = catalogue()
    src = raw.path
    if instance is None:
        if model is None:
            if not raw.models:
                raise ProfileError(src, [Problem("--model", f"the profile does not name its model; give --model (catalogue: {', '.join(sorted(cat_models))}).")])
            if len(raw.models) > 1:
                raise ProfileError(src, [Problem("--model", f"the profile holds several models ({', '.join(raw.models)}); choose one with --model.")])
            model = raw.models[0]
        if chip is None:
            if not raw.chips:
                raise ProfileError(src, [Problem("--chip", f"the profile does not name its chip; give --chip (catalogue: {', '.join(sorted(cat_chips))}).")])
            if len(raw.chips) > 1:
                raise ProfileError(src, [Problem("--chip", f"the profile holds several chips ({', '.join(raw.chips)}); choose one with --chip.")])
            chip = raw.chips[0]
        m = _lookup(model, cat_models, "model", "--model")
        c = _lookup(chip, cat_chips, "chip", "--chip")
        pm = _pick(raw.models, model, _names(m.name, m.aliases), "model", "--model", src)
        pc = _pick(raw.chips, chip, _names(c.name, c.aliases), "chip", "--chip", src)
        target = Target(m, c, Priors(**_NEUTRAL), pm, pc, "catalogue")
    else:
        from fleetplan.instance.io import load_instance

        inst = load_instance(instance)
        if instance_chip is None:
            if len(inst.chips) != 1:
                raise ProfileError(src, [Problem("--instance-chip", f"the instance has several chip types ({', '.join(sorted(inst.chips))}); choose one.")])
            instance_chip = next(iter(inst.chips))
        if instance_chip not in inst.chips:
            raise ProfileError(src, [Problem("--instance-chip", f"unknown chip type {instance_chip!r}; the instance has {', '.join(sorted(inst.chips))}.")])
        m_alias = next((e for k, e in cat_models.items() if model and model.lower() in _names(k, e.aliases)), None)
        c_alias = next((e for k, e in cat_chips.items() if chip and chip.lower() in _names(k, e.aliases)), None)
        pm = _pick(raw.models, model, _names(m_alias.name, m_alias.aliases) if m_alias else set(), "model", "--model", src)
        pc = _pick(raw.chips, chip, _names(c_alias.name, c_alias.aliases) if c_alias else set(), "chip", "--chip", src)
        _check_same_hardware(src, inst, instance_chip, m_alias, c_alias, pm, pc)
        target = Target(CatalogueModel(inst.model), ChipPeaks.of(instance_chip, inst.chips[instance_chip]), inst.priors, pm, pc,
                        f"instance {inst.name}")
    if raw.format == "vidur":
        _check_vidur_dims(raw, target)
    return target


def _check_same_hardware(src: str, inst, instance_chip: str, m_alias, c_alias, pm, pc) -> None:
    """Refuse to fit one model's (or chip's) measured times to another's roofline: the
    profile's model (catalogue entry) must have the instance model's layers and about its
    parameters (within 25%), the chip about its HBM bandwidth (within 25%; peak FLOP/s
    differ legitimately by dtype)."""
    bad = []
    if m_alias is not None:
        a, b = m_alias.spec.total_params_b, inst.model.total_params_b
        if m_alias.spec.layers != inst.model.layers or not 0.8 <= a / b <= 1.25:
            bad.append(f"the profile measured {pm} ({a:g} B parameters, {m_alias.spec.layers} layers) but {inst.name} serves "
                       f"{inst.model.name} ({b:g} B, {inst.model.layers} layers)")
    if c_alias is not None:
        a, b = c_alias.hbm_tbps, inst.chips[instance_chip].hbm_tbps
        if not 0.8 <= a / b <= 1.25:
            bad.append(f"the profile ran on {pc} ({a:g} TB/s HBM) but the instance's chip {instance_chip} has {b:g} TB/s")
    if bad:
        raise ProfileError(src, [Problem("--instance", "; ".join(bad) + ": the fit would book one model's or chip's times against "
                                         "another's FLOPs and bytes. Calibrate with --model/--chip (the catalogue) and overlay "
                                         "the fitted priors on the instance with `fleetplan solve --priors`.")])


def _check_vidur_dims(raw: RawProfile, t: Target) -> None:
    d = raw.dims
    m = t.model
    want = {"n_embd": m.spec.d_model, "n_head": m.query_heads, "n_expanded_embd": m.ffn_dim, "use_gated_mlp": m.gated_mlp}
    if isinstance(m.spec.attention, GQAAttention):
        want["n_kv_head"] = m.spec.attention.kv_heads
        if m.query_heads is None:
            want["n_head"] = d.get("n_embd", 0) // m.spec.attention.head_dim if m.spec.attention.head_dim else None
    bad = [f"{k} {d.get(k)} (model {v})" for k, v in want.items() if v is not None and d.get(k) != v]
    if bad:
        raise ProfileError(raw.path, [Problem("(model)", f"the profile's model shape differs from {m.name}'s: {'; '.join(bad)}. "
                                                         "Is this the mlp.csv of another model?")])


def select_points(raw: RawProfile, target: Target, tps: Sequence[int] | None = None) -> list[Point]:
    """The fitted points of the selection: medians of repeated rows, per configuration.

    Splitwise: prefill points per (tp, prompt_size, batch_size) -- every row that ran that
    prefill, whatever its token_size; decode points per grid point (tp, prompt, batch,
    token_size), the residents' mean context c = prompt_size + n/2 where n is the number
    of tokens generated, n = min(token_size, (e2e_time - prompt_time) / token_time + 1)
    from the medians (with token_size >= 1024 the runs stop early: e2e_time shows 320-870
    tokens generated, not token_size). Vidur: per (tp, num_tokens), time = layers x the sum
    of the four GEMM medians. csv: per (phase, chips, batch, prompt, context).

    Raises: :class:`ProfileError` when the selection is empty or a requested tp is absent.
    """
    recs = raw.records
    if raw.format in ("splitwise", "csv"):
        recs = [r for r in recs if (target.profile_model is None or r[1] == target.profile_model)
                and (target.profile_chip is None or r[2] == target.profile_chip)]
    present = sorted({r[1] if raw.format == "vidur" else r[3] for r in recs})
    if tps:
        missing = [t for t in tps if t not in present]
        if missing:
            raise ProfileError(raw.path, [Problem("--tp", f"no rows with tensor parallelism {', '.join(map(str, missing))} for "
                                                          f"{target.profile_model or target.model.name} on {target.profile_chip or target.chip.name}; "
                                                          f"the profile has {', '.join(map(str, present)) or 'none'}.")])
        keep = set(tps)
        recs = [r for r in recs if (r[1] if raw.format == "vidur" else r[3]) in keep]
    if not recs:
        raise ProfileError(raw.path, [Problem("(selection)", "no rows selected for "
                                                             f"{target.profile_model or target.model.name} on {target.profile_chip or target.chip.name}.")])
    med = statistics.median
    pts: list[Point] = []
    if raw.format == "splitwise":
        pre: dict = {}
        dec: dict = {}
        for (line, _m, _h, tp, prompt, batch, tokens, pt, tt, e2e) in recs:
            pre.setdefault((tp, prompt, batch), []).append((line, pt))
            dec.setdefault((tp, prompt, batch, tokens), []).append((line, pt, tt, e2e))
        for (tp, prompt, batch), v in sorted(pre.items()):
            pts.append(Point("prefill", tp, batch, float(prompt), 0.0, med(x[1] for x in v), tuple(sorted(x[0] for x in v)),
                             f"{tp}/{prompt}/{batch}"))
        for (tp, prompt, batch, tokens), v in sorted(dec.items()):
            pt, tt, e2e = med(x[1] for x in v), med(x[2] for x in v), med(x[3] for x in v)
            n = min(float(tokens), max(1.0, (e2e - pt) / tt + 1.0))
            pts.append(Point("decode", tp, batch, float(prompt), prompt + n / 2.0, tt, tuple(sorted(x[0] for x in v)),
                             f"{tp}/{prompt}/{batch}"))
    elif raw.format == "vidur":
        layers = target.model.spec.layers
        g: dict = {}
        for (line, tp, tokens, gemm_ms) in recs:
            g.setdefault((tp, tokens), []).append((line, gemm_ms))
        for (tp, tokens), v in sorted(g.items()):
            pts.append(Point("gemm", tp, tokens, 0.0, 0.0, layers * med(x[1] for x in v), tuple(sorted(x[0] for x in v)), f"{tp}/{tokens}"))
    else:
        g = {}
        for (line, _m, _c, chips, phase, batch, prompt, ctx, t) in recs:
            g.setdefault((phase, chips, batch, prompt, ctx), []).append((line, t))
        for (phase, chips, batch, prompt, ctx), v in sorted(g.items()):
            pts.append(Point(phase, chips, batch, prompt, ctx, med(x[1] for x in v), tuple(sorted(x[0] for x in v)),
                             f"{phase}/{chips}/{batch}/{prompt}/{ctx}"))
    return pts
