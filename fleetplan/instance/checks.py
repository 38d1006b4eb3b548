"""Cross-field checks of an instance: relations pydantic's field validators cannot see.

``check_instance(inst)`` returns every problem found (empty for a good instance); the
loader raises :class:`fleetplan.errors.InstanceError` with all of them at once, so a
user fixes a file in one pass. Every validated :class:`~fleetplan.instance.schema.Instance`
runs it: this module registers it in :data:`fleetplan.instance.schema.CROSS_FIELD_CHECKS`
when imported (the package imports it). The physics is imported where a check uses it, so
reading the package stays as light as the schema.
"""

from __future__ import annotations

import math

from fleetplan.errors import Problem
from fleetplan.instance.schema import CROSS_FIELD_CHECKS, HybridAttention, Instance

__all__ = ["check_instance", "SHARE_TOLERANCE"]

SHARE_TOLERANCE = 1e-6


def _shares(path: str, shares: list[float], what: str) -> list[Problem]:
    total = math.fsum(shares)
    if abs(total - 1.0) > SHARE_TOLERANCE:
        return [Problem(path, f"{what} shares must sum to 1 (fractions of requests); they sum to {total:.6g}.", str(shares))]
    return []


def _model(inst: Instance) -> list[Problem]:
    from fleetplan.perf.roofline import moe_param_split

    m = inst.model
    out: list[Problem] = []
    if m.active_params_b > m.total_params_b:
        out.append(Problem("model.active_params_b", f"active parameters cannot exceed total_params_b ({m.total_params_b} billion).", str(m.active_params_b)))
    if m.moe is None and abs(m.active_params_b - m.total_params_b) > 1e-9 * m.total_params_b:
        out.append(Problem("model.active_params_b", "a dense model (no 'moe' block) has active_params_b equal to total_params_b (billions); add a 'moe' block for a mixture of experts.", str(m.active_params_b)))
    if m.moe is not None:
        if m.moe.experts_per_token > m.moe.experts:
            out.append(Problem("model.moe.experts_per_token", f"cannot exceed moe.experts ({m.moe.experts}) (count).", str(m.moe.experts_per_token)))
        elif not out:
            try:
                moe_param_split(m)
            except ValueError as e:
                out.append(Problem("model.active_params_b", str(e) + ". Lower experts_per_token or raise active_params_b.", str(m.active_params_b)))
    a = m.attention
    if isinstance(a, HybridAttention):
        n = a.full_attention_layers + a.sliding_window_layers + a.linear_attention_layers
        if n != m.layers:
            out.append(Problem("model.attention", f"full + sliding-window + linear-attention layers must equal model.layers ({m.layers}); they sum to {n}."))
        if a.sliding_window_layers > 0 and a.window_tokens == 0:
            out.append(Problem("model.attention.window_tokens", "sliding-window layers need window_tokens > 0 (tokens).", "0"))
        if a.linear_attention_layers > 0 and a.linear_state_bytes_per_layer == 0:
            out.append(Problem("model.attention.linear_state_bytes_per_layer", "linear-attention layers need a state size > 0 (bytes per request per layer).", "0"))
    return out


def _chips(inst: Instance) -> list[Problem]:
    out: list[Problem] = []
    for name, c in inst.chips.items():
        for i, s in enumerate(c.slice_shapes):
            p = f"chips.{name}.slice_shapes.{i}"
            if s % c.chips_per_vm:
                out.append(Problem(p, f"a slice is built of whole VMs: chips per slice must be a multiple of chips_per_vm ({c.chips_per_vm}).", str(s)))
            if s > c.chips_per_pod:
                out.append(Problem(p, f"a slice never spans pods: chips per slice must be <= chips_per_pod ({c.chips_per_pod}).", str(s)))
        if len(set(c.slice_shapes)) != len(c.slice_shapes):
            out.append(Problem(f"chips.{name}.slice_shapes", "slice shapes must be distinct (chips per slice).", str(c.slice_shapes)))
        if c.chips_per_pod % c.chips_per_vm:
            out.append(Problem(f"chips.{name}.chips_per_pod", f"a pod holds whole VMs: must be a multiple of chips_per_vm ({c.chips_per_vm}).", str(c.chips_per_pod)))
        if c.kubernetes is not None:
            out += _kubernetes(name, c)
    return out


def _kubernetes(name: str, c) -> list[Problem]:
    """The chip block's Kubernetes data against its slice shapes: a multi-host slice is
    whole hosts and a host is one VM; each topology string names a slice shape and its
    dimensions multiply to that shape's chips."""
    k = c.kubernetes
    p = f"chips.{name}.kubernetes"
    out: list[Problem] = []
    for s in c.slice_shapes:
        if s > k.chips_per_host:
            if s % k.chips_per_host:
                out.append(Problem(f"{p}.chips_per_host", f"a {s}-chip slice spans whole hosts: chips per slice must be a multiple of "
                                                         "chips_per_host (chips per node).", str(k.chips_per_host)))
            elif k.chips_per_host != c.chips_per_vm:
                out.append(Problem(f"{p}.chips_per_host", f"a {s}-chip slice spans several hosts, one per VM: chips_per_host must equal "
                                                         f"chips_per_vm ({c.chips_per_vm}) (chips per node).", str(k.chips_per_host)))
    for s, topo in sorted(k.topologies.items()):
        if s not in c.slice_shapes:
            out.append(Problem(f"{p}.topologies.{s}", f"is not a slice shape of this chip type (slice_shapes: {sorted(c.slice_shapes)} chips).", topo))
            continue
        n = math.prod(int(d) for d in topo.split("x"))
        if n != s:
            out.append(Problem(f"{p}.topologies.{s}", f"the topology's dimensions multiply to {n} chips, not the slice's {s}.", topo))
    if k.topology_label is None and k.topologies:
        out.append(Problem(f"{p}.topologies", "topology strings need a topology_label to be selected by (set it, or drop the topologies).",
                           str(dict(k.topologies))))
    return out


# The fields that set the memory one request needs on a slice, with their units: what
# ``_fit`` names when the model does not fit. (path inside the model, unit, integer?)
_WEIGHT_FIELDS = (("total_params_b", "billion parameters", False), ("bytes_per_weight", "bytes per weight", False))
_KV_FIELDS = {
    "gqa": (("layers", "layers", True), ("attention.kv_heads", "heads", True), ("attention.head_dim", "elements", True),
            ("bytes_per_kv_element", "bytes per element", False)),
    "mla": (("layers", "layers", True), ("attention.kv_latent_rank", "elements", True), ("attention.rope_dim", "elements", True),
            ("bytes_per_kv_element", "bytes per element", False)),
    "hybrid": (("attention.full_attention_layers", "layers", True), ("attention.sliding_window_layers", "layers", True),
               ("attention.window_tokens", "tokens", True), ("attention.linear_attention_layers", "layers", True),
               ("attention.linear_state_bytes_per_layer", "bytes", True), ("attention.kv_heads", "heads", True),
               ("attention.head_dim", "elements", True), ("bytes_per_kv_element", "bytes per element", False)),
}
_KV_FIELDS["mha"] = _KV_FIELDS["gqa"]


def _field_min(model_cls, name: str, integer: bool) -> float:
    """The smallest value the schema allows for a numeric field: its ``ge``; above a ``gt``,
    the next integer for an int field and a millionth more for a float one."""
    lo = 0.0
    for c in model_cls.model_fields[name].metadata:
        if getattr(c, "ge", None) is not None:
            lo = float(c.ge)
        elif getattr(c, "gt", None) is not None:
            lo = float(c.gt) + 1.0 if integer else float(c.gt) + 1e-6
    return lo


def _with(m, dotted: str, v):
    """The model with one (possibly nested) field replaced (no validation: a what-if only)."""
    if dotted.startswith("attention."):
        return m.model_copy(update={"attention": m.attention.model_copy(update={dotted.split(".", 1)[1]: v})})
    return m.model_copy(update={dotted: v})


def _num(v) -> str:
    """A field value as the user wrote it: integers in full, floats to 4 significant digits."""
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else f"{v:.4g}"


def _get(m, dotted: str):
    return getattr(m.attention, dotted.split(".", 1)[1]) if dotted.startswith("attention.") else getattr(m, dotted)


def _fit(inst: Instance) -> list[Problem]:
    """The model must fit at least one slice shape with room for one request of the largest bucket.

    When it does not, the message names the dominant term of the slice memory map
    (weights, workspace, headroom or the KV of one request), the fields that set it, and
    each model field that alone would make the model fit, with the largest value that
    does (found by bisection on :func:`kv_bytes_per_request` and :func:`slice_memory_map`,
    both monotone in every such field).
    """
    from fleetplan.perf.roofline import SliceSpec, kv_bytes_per_request, kv_bytes_per_token, slice_memory_map

    m = inst.model
    longest = max(b.tokens for b in inst.workload.input_mix) + inst.workload.output_tokens
    slack = 1 + inst.priors.kv_paging_slack
    slices = [(name, s, SliceSpec.of(name, c, s)) for name, c in inst.chips.items() for s in c.slice_shapes]

    def room(model) -> float:
        """Largest KV pool over the slice shapes (GB) less one longest request's KV (GB)."""
        pool = max(slice_memory_map(model, sl, inst.priors).kv_pool_gb for _, _, sl in slices)
        return pool - float(kv_bytes_per_request(model, longest)) * slack / 1e9

    if room(m) >= 0:
        return []
    need_kv = float(kv_bytes_per_request(m, longest)) * slack / 1e9
    best = max(slices, key=lambda t: slice_memory_map(m, t[2], inst.priors).kv_pool_gb)
    name, s, sl = best
    mm = slice_memory_map(m, sl, inst.priors)

    def fields(group, sep=", "):
        return sep.join(f"model.{f} = {_num(_get(m, f))} {u}" for f, u, _ in group)

    kv_group = _KV_FIELDS[m.attention.kind]
    pr = inst.priors
    terms = {
        "weights": (mm.weights_gb, f"the weights ({fields(_WEIGHT_FIELDS, ' x ')})"),
        "workspace": (mm.workspace_gb, f"the workspace (priors.hbm_workspace_gb_per_chip = {_num(pr.hbm_workspace_gb_per_chip)} GB per chip "
                                       f"x {s} chips)"),
        "headroom": (mm.headroom_gb, f"the headroom (priors.hbm_headroom_fraction = {_num(pr.hbm_headroom_fraction)} of slice HBM)"),
        "kv": (need_kv, f"the KV, {_num(kv_bytes_per_token(m))} bytes per token ({fields(kv_group)})"),
    }
    dominant = max(terms, key=lambda k: terms[k][0])
    # Each model field that alone would make the model fit, with the largest value that does.
    fixes: list[tuple[str, float, str]] = []
    for f, unit, integer in _WEIGHT_FIELDS + kv_group:
        cur = float(_get(m, f))
        owner = type(m.attention) if f.startswith("attention.") else type(m)
        lo = _field_min(owner, f.split(".")[-1], integer)
        if integer:
            lo_v = int(lo)
            if lo_v >= cur or room(_with(m, f, lo_v)) < 0:
                continue
            hi_v = int(cur)  # does not fit; lo_v fits
            while hi_v - lo_v > 1:
                mid = (lo_v + hi_v) // 2
                lo_v, hi_v = (mid, hi_v) if room(_with(m, f, mid)) >= 0 else (lo_v, mid)
            fixes.append((f"model.{f}", lo_v, unit))
        else:
            lo_f = lo
            if lo_f >= cur or room(_with(m, f, lo_f)) < 0:
                continue
            hi_f = cur
            for _ in range(60):
                mid = (lo_f + hi_f) / 2
                lo_f, hi_f = (mid, hi_f) if room(_with(m, f, mid)) >= 0 else (lo_f, mid)
            fixes.append((f"model.{f}", lo_f, unit))
    alone = "; ".join(f"{p} at most {_num(v)} {u}" for p, v, u in fixes)
    advice = (f"Any one of these alone would fit: {alone}." if fixes else
              "No single model field fits alone.") + " Or add a larger slice shape or a chip with more HBM."
    msg = (f"the model does not fit any slice: on the roomiest slice ({name} x {s} chips, {mm.total_gb:.0f} GB HBM) "
           f"{mm.weights_gb:.0f} GB of weights + {mm.workspace_gb:.0f} GB workspace + {mm.headroom_gb:.0f} GB headroom leave "
           f"{mm.kv_pool_gb:.1f} GB for KV, but one {longest:.0f}-token request needs {need_kv:.1f} GB of KV. "
           f"The largest term is {terms[dominant][1]}. {advice}")
    # The path is the one model field to change when there is exactly one; else the slices.
    if len(fixes) == 1:
        path = fixes[0][0]
        return [Problem(path, msg, _num(_get(m, path.split('.', 1)[1])))]
    return [Problem("chips", msg)]


#: The least request rate a (region, tier) may carry at its peak, short of none (requests/s):
#: below it the sizing's rows cannot tell the demand from none within the solver's tolerances
#: (newcomer trial, the Azure case's 'long' tier: at 2.4e-11 req/s no chip and 'verified', at
#: 2.4e-8 and 2.4e-7 plans the verifier refused, at 2.4e-6 a verified plan): ten times the last.
MIN_TIER_PEAK_RPS = 1e-5


def _bucket_tiers(inst: Instance) -> list[str | None]:
    """The tier of each input-mix bucket (the first whose max_input_tokens holds its tokens;
    None past the last bounded tier), in the mix's order."""
    tiers = inst.workload.tiers
    return [next((t.name for t in tiers if t.max_input_tokens is None or b.tokens <= t.max_input_tokens), None)
            for b in inst.workload.input_mix]


def _tier_shares(inst: Instance) -> dict[str, float]:
    """Each tier's share of the input mix (fraction): the buckets in its token range."""
    shares = {t.name: 0.0 for t in inst.workload.tiers}
    for b, t in zip(inst.workload.input_mix, _bucket_tiers(inst)):
        if t is not None:
            shares[t] += b.share
    return shares


def _regions(inst: Instance) -> list[Problem]:
    out: list[Problem] = []
    names = set(inst.regions)
    if all(reg.peak_rps == 0 for reg in inst.regions.values()):
        out.append(Problem("regions", "every region has peak_rps 0: there is no traffic to size a fleet for (requests/s); give at least one "
                                      "region its peak rate.", ""))
    shares = {t: x for t, x in _tier_shares(inst).items() if x > 0}
    if shares:
        tier, least = min(shares.items(), key=lambda kv: kv[1])
        for r, reg in inst.regions.items():
            if 0 < reg.peak_rps * least < MIN_TIER_PEAK_RPS:
                out.append(Problem(f"regions.{r}.peak_rps", f"at this peak tier '{tier}' carries {reg.peak_rps * least:.3g} requests/s (peak_rps x its "
                                   f"{least:.4g} share of the input mix), under {MIN_TIER_PEAK_RPS:g} requests/s (0.036 an hour), which the "
                                   "sizing cannot tell from no traffic within its solver's tolerances; give 0 (no traffic of its own) or a peak of "
                                   f"at least {MIN_TIER_PEAK_RPS / least:.3g} requests/s.", f"{reg.peak_rps:g}"))
    for r, reg in inst.regions.items():
        peak = max(reg.hourly_load)
        if abs(peak - 1.0) > 1e-9:
            out.append(Problem(f"regions.{r}.hourly_load", f"hourly multipliers are fractions of peak_rps, so the largest must be 1.0; it is {peak:.6g}.", ""))
        for c in reg.pods:
            if c not in inst.chips:
                out.append(Problem(f"regions.{r}.pods.{c}", f"unknown chip type; known: {sorted(inst.chips)}.", c))
        for c in reg.price_per_chip_hour_usd:
            if c not in inst.chips:
                out.append(Problem(f"regions.{r}.price_per_chip_hour_usd.{c}", f"unknown chip type; known: {sorted(inst.chips)}.", c))
        if sum(p.installed + p.available_new for p in reg.pods.values()) == 0:
            out.append(Problem(f"regions.{r}.pods", "the region has no pod, installed or available_new (count).", ""))
        for i, t in enumerate(reg.failover_to):
            if t not in names:
                out.append(Problem(f"regions.{r}.failover_to.{i}", f"unknown region; known: {sorted(names)}.", t))
            elif t == r:
                out.append(Problem(f"regions.{r}.failover_to.{i}", "a region cannot absorb its own traffic.", t))
        if len(set(reg.failover_to)) != len(reg.failover_to):
            out.append(Problem(f"regions.{r}.failover_to", "names must be distinct.", str(reg.failover_to)))
        if inst.failover.n_minus_1 and len(names) > 1 and not reg.failover_to:
            out.append(Problem(f"regions.{r}.failover_to", "failover.n_minus_1 is on but no region may absorb this one's traffic; list at least one, or set n_minus_1: false.", "[]"))
    if inst.failover.n_minus_1 and len(names) < 2:
        out.append(Problem("failover.n_minus_1", "N-1 needs at least two regions; set n_minus_1: false for a single-region instance.", "true"))
    return out


def _workload(inst: Instance) -> list[Problem]:
    w = inst.workload
    out = _shares("workload.input_mix", [b.share for b in w.input_mix], "input-mix")
    out += _shares("workload.classes", [c.share for c in w.classes.values()], "traffic-class")
    if len({b.tokens for b in w.input_mix}) != len(w.input_mix):
        out.append(Problem("workload.input_mix", "bucket token lengths must be distinct (tokens).", str([b.tokens for b in w.input_mix])))
    names = [t.name for t in w.tiers]
    if len(set(names)) != len(names):
        out.append(Problem("workload.tiers", "tier names must be distinct.", str(names)))
    bounds = [t.max_input_tokens for t in w.tiers]
    for i, b in enumerate(bounds[:-1]):
        if b is None:
            out.append(Problem(f"workload.tiers.{i}.max_input_tokens", "only the last tier may be unbounded (null).", "null"))
    finite = [b for b in bounds if b is not None]
    if finite != sorted(finite) or len(set(finite)) != len(finite):
        out.append(Problem("workload.tiers", "tiers must be in strictly ascending order of max_input_tokens (tokens).", str(bounds)))
    top = bounds[-1]
    for i, b in enumerate(w.input_mix):
        if top is not None and b.tokens > top:
            out.append(Problem(f"workload.input_mix.{i}.tokens", f"longer than the last tier's max_input_tokens ({top}); add an unbounded tier (max_input_tokens: null).", str(b.tokens)))
    if not out:
        used = set(_bucket_tiers(inst))
        for i, t in enumerate(w.tiers):
            if t.name not in used:
                out.append(Problem(f"workload.tiers.{i}", f"tier '{t.name}' receives no bucket of the input mix; remove it or add a bucket in its range.", t.name))
    for q, c in w.classes.items():
        metrics = [(s.metric, s.percentile) for s in c.slos]
        if len(set(m for m, _ in metrics)) != len(metrics):
            out.append(Problem(f"workload.classes.{q}.slos", "at most one SLO per metric (ttft, tpot, itl) per class.", str(metrics)))
        if c.spec_acceptance_kind == "per_token" and c.spec_acceptance_at_k is not None:
            out.append(Problem(f"workload.classes.{q}.spec_acceptance_at_k", "a per-token acceptance probability holds at every draft "
                               "length; spec_acceptance_at_k (tokens) goes with spec_acceptance_kind: rate. Remove one of them.",
                               str(c.spec_acceptance_at_k)))
    for i, t in enumerate(w.tiers):
        ms = [s.metric for s in t.slo_overrides]
        if len(set(ms)) != len(ms):
            out.append(Problem(f"workload.tiers.{i}.slo_overrides", "at most one override per metric.", str(ms)))
    if not any(c.slos for c in w.classes.values()):
        out.append(Problem("workload.classes", "no class has an SLO: there is nothing to size against.", ""))
    return out


def _slos_reachable(inst: Instance) -> list[Problem]:
    """A TTFT limit at or below the fixed path latency at its percentile can never hold."""
    from fleetplan.perf.queueing import path_latency_ms

    out = []
    sources = [(f"workload.classes.{q}.slos", c.slos) for q, c in inst.workload.classes.items()]
    sources += [(f"workload.tiers.{i}.slo_overrides", t.slo_overrides) for i, t in enumerate(inst.workload.tiers)]
    for path, slos in sources:
        for j, s in enumerate(slos):
            if s.metric != "ttft":
                continue
            fixed = float(sum(path_latency_ms(p.p50_ms, p.p99_ms, s.percentile) for p in inst.priors.path_latency))
            if s.limit_ms <= fixed:
                out.append(Problem(f"{path}.{j}.limit_ms", f"a TTFT p{s.percentile:g} of {s.limit_ms:g} ms cannot hold: the fixed path "
                                   f"latency (priors.path_latency) alone is {fixed:.1f} ms at that percentile (ms).", str(s.limit_ms)))
    return out


def _policy(inst: Instance) -> list[Problem]:
    out: list[Problem] = []
    wp = inst.failover.warm_pool
    if wp.min_slices_per_region > wp.max_slices_per_region:
        out.append(Problem("failover.warm_pool.min_slices_per_region", f"cannot exceed max_slices_per_region ({wp.max_slices_per_region}) (count).", str(wp.min_slices_per_region)))
    caps = inst.serving.batch_caps
    if caps != sorted(set(caps)):
        out.append(Problem("serving.batch_caps", "batch caps must be strictly ascending (requests per slice).", str(caps)))
    ks = inst.speculation.draft_tokens
    if len(set(ks)) != len(ks) or not ks:
        out.append(Problem("speculation.draft_tokens", "draft lengths must be distinct and at least one (tokens).", str(ks)))
    for i, p in enumerate(inst.priors.path_latency):
        if p.p99_ms < p.p50_ms:
            out.append(Problem(f"priors.path_latency.{i}.p99_ms", f"p99 cannot be below p50 ({p.p50_ms} ms).", str(p.p99_ms)))
    return out


def _physics(inst: Instance) -> list[Problem]:
    """The physics sources: unique names ('instance' is the instance's own priors while
    include_base), includes resolved by the loader, priors fields that exist and, laid over
    the instance's, stay in their ranges; ``hold`` names 'all', 'slowest' or a source."""
    from pydantic import ValidationError

    from fleetplan.instance.io import validation_problems
    from fleetplan.instance.physics import BASE, HOLD_ALL, HOLD_SLOWEST, source_priors
    from fleetplan.instance.schema import Priors

    ph = inst.physics
    if ph is None:
        return []
    out: list[Problem] = []
    names = [BASE] if ph.include_base else []
    fields = set(Priors.model_fields)
    for i, s in enumerate(ph.sources):
        p = f"physics.sources.{i}"
        if s.name in names:
            why = ("the instance's own priors (physics.include_base is true; rename the source or set include_base false)"
                   if s.name == BASE else "another source's name")
            out.append(Problem(f"{p}.name", f"'{s.name}' is {why}; source names are unique.", s.name))
        names.append(s.name)
        if s.include is not None and s.included is None:
            out.append(Problem(f"{p}.include", "an include is read by the instance loader (fleetplan.load_instance, the CLI), which "
                                              "copies the file's priors into the source; this instance was built from data with the "
                                              "include unread: load it from its file, or give the fields under priors:.", s.include))
        if not s.priors and s.step_time_scale is None and s.include is None:
            out.append(Problem(p, "a source sets something: include: FILE, priors: {FIELD: VALUE}, or step_time_scale: {prefill, decode}."))
        if "path_latency" in s.priors:
            out.append(Problem(f"{p}.priors.path_latency", "a physics source sets step priors; the TTFT path (gateway, router) is the "
                                                          "deployment's, not the kernels': set it in the instance's priors."))
        bad = [k for k in list(s.priors) + list(s.instance_priors) if k not in fields]
        for k in bad:
            where = "priors" if k in s.priors else "instance_priors"
            out.append(Problem(f"{p}.{where}.{k}" if where == "priors" else f"{p}.instance_priors", f"'{k}' is not a priors field; "
                               f"the fields are {', '.join(Priors.model_fields)} (docs/instance.md).", k))
        if bad:
            continue
        try:
            source_priors(inst, s)
        except ValidationError as e:
            for pr in validation_problems(e, root=Priors):
                field = pr.path.split(".")[0]
                if field in ("prefill_time_scale", "decode_time_scale") and s.step_time_scale is not None and field not in s.priors:
                    where = f"{p}.step_time_scale.{field.split('_')[0]}"
                    msg = (f"laid over the instance's priors.{field} it gives {pr.value}, outside 0.1 to 10 (dimensionless): " + pr.message)
                    out.append(Problem(where, msg, pr.value))
                else:
                    out.append(Problem(f"{p}.priors.{pr.path}", pr.message, pr.value))
    if ph.hold not in (HOLD_ALL, HOLD_SLOWEST) and ph.hold not in names:
        out.append(Problem("physics.hold", f"names no source; expected 'all', 'slowest' or one of {', '.join(names)}.", ph.hold))
    return out


def check_instance(inst: Instance) -> list[Problem]:
    """All cross-field problems of ``inst`` (empty when it is consistent)."""
    out = _model(inst) + _chips(inst) + _regions(inst) + _workload(inst) + _policy(inst) + _physics(inst)
    if not out:
        out += _slos_reachable(inst)
    if not out:
        out += _fit(inst)
    return out


CROSS_FIELD_CHECKS.append(check_instance)
