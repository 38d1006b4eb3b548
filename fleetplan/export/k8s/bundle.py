"""The Kubernetes export as files: :func:`build_bundle` turns a verified placement into the
manifests of every region (in memory, every check done first), :func:`write_bundle` writes
them to a directory atomically (a temporary directory renamed into place), and
:func:`read_bundle` reads a written directory back into slices per pod.

Layout (one directory per region, deterministic names and bytes)::

    DIR/kustomization.yaml              every region (one cluster holding them all): the
                                        regions' files and DIR/namespace.yaml, not their
                                        kustomizations (kustomize refuses the namespace twice)
    DIR/namespace.yaml
    DIR/<region>/kustomization.yaml     kubectl apply -k DIR/<region> on the region's cluster
    DIR/<region>/namespace.yaml
    DIR/<region>/workloads.yaml         LeaderWorkerSets / DisaggregatedSets, warm groups
    DIR/<region>/routing.yaml           InferencePools, endpoint-picker Services and ConfigMaps
    DIR/<region>/autoscaling.yaml       KEDA ScaledObjects (or HPAs with --scaler hpa)
    DIR/<region>/prometheus-rules.yaml  a Prometheus rule file (not a Kubernetes object)
    DIR/<region>/prometheus-adapter-rules.yaml   with --scaler hpa: prometheus-adapter externalRules
"""

from __future__ import annotations

from collections import Counter
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fleetplan import interrupts
from fleetplan import __version__
from fleetplan.errors import InputError, Problem
from fleetplan.instance.schema import Instance
from fleetplan.export.k8s import alerts, routing, scaling, workloads
from fleetplan.export.k8s.common import LABEL, ExportOptions, Unit, hash_annotations, hash_labels, meta
from fleetplan.export.k8s.engines import ENGINES
from fleetplan.results.evaluate import Context
from fleetplan.export.controller import build_export
from fleetplan.results.placement import Placement, placement_hash, plan_hash
from fleetplan.results.plan import Plan
from fleetplan.tempfiles import sibling_temp_dir

__all__ = ["Bundle", "WrittenThenInterrupted", "PART_FILES", "lost_files", "build_bundle", "write_bundle", "read_bundle", "deployed_diff", "MARKER", "dump_yaml", "check_chips"]

MARKER = ".fleetplan-export"  # names the directory as an export fleetplan may replace


def dump_yaml(docs: list[dict]) -> str:
    """Deterministic multi-document YAML (sorted keys, block style, no line folding)."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when PyYAML has it: the same bytes for these plain scalars
    return yaml.dump_all(docs, Dumper=dumper, sort_keys=True, default_flow_style=False, width=1_000_000, explicit_start=True)


@dataclass
class Bundle:
    """The files of an export (relative path -> text) and notes for the user."""

    files: dict[str, str]
    notes: list[str] = field(default_factory=list)
    objects: dict[str, list[dict]] = field(default_factory=dict)  # relative path -> its Kubernetes objects
    formats: frozenset[str] = frozenset()  # the parts written (k8s, keda, prometheus); empty: those its files show



def region_objects(bundle: Bundle) -> dict[str, tuple[dict[str, int], int]]:
    """Per region directory of ``bundle``: the count of its objects by kind (a
    Prometheus rule file counted as "Prometheus rule file"; it is not a Kubernetes object)
    and the slices its groups hold (LeaderWorkerSet replicas, DisaggregatedSet roles'
    replicas). What `fleetplan export` prints and docs/controller.md quotes."""
    out = {}
    for r in sorted({rel.split("/", 1)[0] for rel in bundle.files if "/" in rel}):
        kinds: Counter = Counter()
        slices = 0
        for rel, objs in bundle.objects.items():
            if rel.startswith(r + "/"):
                for o in objs:
                    kinds[o["kind"]] += 1
                    if o["kind"] == "LeaderWorkerSet":
                        slices += o["spec"]["replicas"]
                    elif o["kind"] == "DisaggregatedSet":
                        slices += sum(ro["spec"]["replicas"] for ro in o["spec"]["roles"])
        if f"{r}/prometheus-rules.yaml" in bundle.files:
            kinds["Prometheus rule file"] += 1
        out[r] = (dict(sorted(kinds.items())), slices)
    return out

# the file of each part of an export (the other files -- namespace, kustomizations, the marker -- every part rewrites)
PART_FILES = {"workloads.yaml": "k8s", "routing.yaml": "k8s", "autoscaling.yaml": "keda", "prometheus-adapter-rules.yaml": "keda",
              "prometheus-rules.yaml": "prometheus"}


def lost_files(target: str | Path, formats: frozenset[str]) -> list[str]:
    """Files of the earlier export in ``target`` (relative paths, sorted) that an export of
    only ``formats`` would delete: those of a part (:data:`PART_FILES`) it does not write."""
    t = Path(target)
    if not (t / MARKER).is_file():
        return []
    return sorted(str(p.relative_to(t)) for p in t.glob("*/*") if p.is_file() and PART_FILES.get(p.name, "") not in {"", *formats})


def check_chips(inst: Instance, units: list[Unit]) -> None:
    """Every exported slice shape has the Kubernetes data it needs in its chip block.
    Raises InputError naming the missing field (chips.<chip>.kubernetes[.topologies.<chips>])."""
    bad: list[Problem] = []
    for chip, n in sorted({(u.chip, u.chips) for u in units}):
        k = inst.chips[chip].kubernetes
        if k is None:
            bad.append(Problem(f"chips.{chip}.kubernetes", "missing: the Kubernetes export needs the chip's node labels, device resource "
                                                           "and topology strings (docs/instance.md, KubernetesAccelerator)."))
        elif k.topology_label is not None and n not in k.topologies:
            bad.append(Problem(f"chips.{chip}.kubernetes.topologies.{n}", f"missing: the placement has {n}-chip {chip} slices, whose node "
                                                                         f"topology string ({k.topology_label}) the export must select."))
    if bad:
        raise InputError("the instance", list(dict.fromkeys(bad)))


def _header(what: str, plan_h: str, pl_h: str) -> str:
    return (f"# {what}\n# Written by fleetplan {__version__} from plan {plan_h[:16]} and placement {pl_h[:16]}: re-export "
            "rather than edit (fleetplan export ... --format k8s).\n")


def build_bundle(inst: Instance, plan: Plan, pl: Placement, opts: ExportOptions) -> Bundle:
    """The export's files for a verified placement of ``plan`` (see the module docstring).

    Raises InputError (nothing written) when: the placement was made for another plan;
    an option is unusable; a chip block lacks the Kubernetes data of an exported shape; a
    name or label value derived from the instance is not valid Kubernetes syntax."""
    opts.check()
    if pl.plan_hash != plan_hash(plan):
        raise InputError("the placement", [Problem("plan_hash", "the placement was made for another plan (its plan_hash differs).")])
    engine = ENGINES[opts.engine]
    units = workloads.placement_units(inst, pl)
    check_chips(inst, units)
    doc = build_export(inst, plan, pl)
    ph, lh = plan_hash(plan), placement_hash(pl)
    tie = (hash_labels(ph, lh), hash_annotations(inst.name, plan.instance_hash, ph, lh))
    ctx = Context(inst)
    want = opts.formats
    disagg = opts.workload == "disaggregatedset"
    external = disagg and "keda" in want
    bounds, notes = scaling.unit_bounds(inst, plan, ctx, units) if "keda" in want else ({}, [])
    if "k8s" in want:
        notes += engine.precision_args(inst.model.bytes_per_weight, inst.model.bytes_per_kv_element)[1]
        epp = routing.epp_note(plan.router or inst.serving.router)
        if epp is not None:
            notes.append(epp)
        pf = sorted({f"{p.region}/{p.tier}" for p in plan.pools if p.role == "replica" and p.schedule == "prefill-first"})
        if pf:
            notes.append(f"prefill-first replicas ({', '.join(pf)}) run --no-enable-chunked-prefill --max-num-batched-tokens="
                         f"{inst.priors.prefill_chunk_tokens}: {engine.name} refuses to start when that is below the served "
                         "--max-model-len (a whole prompt must fit one step), so set --max-model-len at or below it in your patch, or "
                         "raise priors.prefill_chunk_tokens to the context you serve (docs/controller.md)")
    files: dict[str, str] = {}
    objects: dict[str, list[dict]] = {}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": meta(opts.namespace, None, tie)}
    images = [{"name": workloads.IMAGE, "newName": workloads.IMAGE, "newTag": "set-me"}]
    top: list[str] = []  # the top-level kustomization's resources: every region's files but its namespace
    for reg in doc.regions:
        r = reg.region
        rus = [u for u in units if u.region == r]
        if not rus:
            continue
        th = {t.tier: t for t in reg.thresholds}
        tiers: dict[str, set[str]] = {}
        for u in rus:
            if u.tier is not None:
                tiers.setdefault(u.tier, set()).add(u.role)
        res: list[str] = []
        # the share the placement plans: at the normal peak, and (a version-2 placement) in its worst region loss -- an alert
        # threshold below a planned loss's share would page through every such loss
        planned_dcn = {t: pl.dcn_share_by_tier.get(f"{r}/{t}", 0.0) for t in tiers}
        worst_loss = {x.tier: x for x in pl.dcn or [] if x.region == r and x.tier in tiers and x.worst_loss is not None}
        for t, x in worst_loss.items():
            planned_dcn[t] = max(planned_dcn[t], x.worst_loss)
        choice = ("declared by the plan sized with its pods: plan.dcn[].why" if pl.dcn is not None else
                  "a sizing choice: placement-aware sizing would change it")
        for t in sorted(tiers):
            c = th[t].dcn_share_ceiling if t in th else None
            if c is not None and "decode" in tiers[t] and planned_dcn[t] > c:
                at = "" if planned_dcn[t] <= pl.dcn_share_by_tier.get(f"{r}/{t}", 0.0) else f" in {worst_loss[t].worst_loss_scenario}"
                notes.append(f"{r}/{t}: the placement routes {planned_dcn[t]:.1%} of the tier's KV transfers over the DCN{at}, above the "
                             f"{c:.0%} ceiling ({choice}); FleetplanKVOverDCN fires above "
                             f"{alerts.dcn_alert_threshold(planned_dcn[t], c):.1%} (planned + {alerts.DCN_SHARE_TOLERANCE * 100:g} points), "
                             "i.e. when the router pairs worse than planned")

        def put(name: str, objs: list[dict], what: str) -> None:
            objects[f"{r}/{name}"] = objs
            files[f"{r}/{name}"] = _header(what, ph, lh) + dump_yaml(objs)
            res.append(name)

        if want & {"k8s", "keda"}:
            put("namespace.yaml", [namespace], "Namespace")
        # groups as scaled: (unit, name of its pods' unit label, scale target is a DisaggregatedSet role)
        scaled: list[tuple[Unit, str, bool]] = []
        work: list[dict] = []
        if disagg:
            pd, rest = workloads.disaggregated_units(rus)
            for key in sorted(pd):
                work.append(workloads.disaggregatedset(inst, plan, key, pd[key], opts, engine, tie, external))
                rn = workloads.role_names(pd[key])
                ds = workloads.ds_name(*key)
                scaled += [(u, f"{ds}-{rn[id(u)]}", True) for u in pd[key]]
        else:
            rest = rus
        work += [workloads.leaderworkerset(inst, plan, u, opts, engine, tie) for u in rest]
        scaled += [(u, u.name, False) for u in rest if u.role != "warm"]
        if "k8s" in want:
            put("workloads.yaml", work, "Workloads: one group per slice, pinned to its ICI domain")
            rout: list[dict] = []
            for t in sorted(tiers):
                dis = "replica" not in tiers[t]
                data = routing.routing_data(r, t, pl, reg, plan, opts) | routing.router_assumption(inst, plan, r, t)
                rout += [routing.inference_pool(r, t, opts, engine, tie), routing.epp_service(r, t, opts, tie),
                         routing.epp_configmap(r, t, dis, data, opts, tie, data["router"])]
            put("routing.yaml", rout, "Routing: InferencePools and their endpoint pickers")
        if "keda" in want:
            make = scaling.scaled_object if opts.scaler == "keda" else scaling.hpa
            auto = []
            for u, name, is_ds in sorted(scaled, key=lambda x: x[1]):
                b = bounds[u.name]
                o = make(u, name, b, scaling.unit_signals(u, th.get(u.tier), engine, opts.namespace, name), opts, tie, is_ds)
                if o is None:
                    notes.append(f"{r}/{u.tier} {u.role} group {name}: no autoscaler (the controller document has no leading-signal "
                                 f"threshold for {u.role} pools); it stays at its {u.slices} planned slices")
                else:
                    auto.append(o)
            if auto:
                put("autoscaling.yaml", auto, "Autoscaling on the brief's section 5 signals; floors from the plan's N-1 needs")
            if opts.scaler == "hpa":
                files[f"{r}/prometheus-adapter-rules.yaml"] = _header("prometheus-adapter externalRules for the HPAs", ph, lh) + \
                    dump_yaml([scaling.adapter_rules()])
        if "prometheus" in want:
            spec_tiers = {p.tier for p in plan.pools if p.region == r and p.speculation is not None and p.speculation.draft_tokens > 0}
            warm = [u.name for u in rus if u.role == "warm"]
            ttft = {t: next((s.limit_ms for s in ctx.ttft_slo(t)), 0.0) for t in tiers}
            rules = alerts.rule_file(reg, tiers, spec_tiers & set(tiers), warm, opts, engine, ph, ttft, planned_dcn)
            files[f"{r}/prometheus-rules.yaml"] = _header("Prometheus rules: the brief's section 5 signals and alerts", ph, lh) + \
                dump_yaml([rules])
        if res:
            kust = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": res, "images": images}
            top += [f"{r}/{name}" for name in res if name != "namespace.yaml"]
            files[f"{r}/kustomization.yaml"] = _header(
                f"Region {r}: kubectl apply -k on its cluster. Set the model server image first: "
                f"kustomize edit set image {workloads.IMAGE}=IMAGE:TAG", ph, lh) + dump_yaml([kust])
    if top:
        # the regions' files, not their kustomizations: each of those creates the namespace,
        # and kustomize refuses a resource id added twice
        files["namespace.yaml"] = _header("Namespace", ph, lh) + dump_yaml([namespace])
        files["kustomization.yaml"] = _header(
            "Every region, for a cluster that holds them all (else apply each region's directory to its own cluster). It lists "
            "the regions' files, not their kustomizations (each creates the namespace): set the image and patches here too.",
            ph, lh) + dump_yaml([{"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                                  "resources": ["namespace.yaml"] + top, "images": images}])
    files[MARKER] = f"fleetplan {__version__} export of plan {ph} placement {lh}\n"
    return Bundle(files=files, notes=notes, objects=objects, formats=frozenset(want))


def write_bundle(bundle: Bundle, target: str | Path) -> Path:
    """Write the bundle to directory ``target`` atomically: every file goes to a temporary
    directory beside it (fsynced), which is then renamed to ``target``. An existing
    ``target`` is replaced only when it is empty or an earlier fleetplan export (it holds
    the marker file); it stays intact if the write fails.

    An export of some parts only (``--format keda``) never replaces one that holds other
    parts: the parts refer to each other (autoscalers target the workloads by name and kind,
    DisaggregatedSet roles are External only when their scalers are written beside them,
    every part shares the namespace), so keeping files from another export would mix
    plans or options. Export every part (``--format all``: for the same plan and options
    the other parts come out byte-identical) or write elsewhere.

    Raises InputError for a target that is a file, a non-empty directory fleetplan did
    not write, an earlier export with parts this one would delete (naming their files),
    or a parent that does not exist or is not writable."""
    t = Path(target)
    if t.exists() and not t.is_dir():
        raise InputError(str(t), [Problem("-o", "is a file, not a directory; give a directory for the export (it is created).")])
    if t.is_dir() and any(t.iterdir()) and not (t / MARKER).is_file():
        raise InputError(str(t), [Problem("-o", f"is a directory fleetplan did not write (no {MARKER}); give a new or empty directory "
                                                "(an earlier export is replaced).")])
    formats = bundle.formats or frozenset(PART_FILES[Path(rel).name] for rel in bundle.files if Path(rel).name in PART_FILES)
    lost = lost_files(t, formats)
    if lost:
        parts = sorted({PART_FILES[Path(rel).name] for rel in lost})
        shown = ", ".join(lost[:12]) + (f" and {len(lost) - 12} more" if len(lost) > 12 else "")
        raise InputError(str(t), [Problem("--format", f"the earlier export here holds the {' and '.join(parts)} part"
                                                      f"{'s' if len(parts) > 1 else ''} ({shown}), which writing only "
                                                      f"{', '.join(sorted(formats))} would delete: export --format all to refresh "
                                                      "every part together (for the same plan and options the other files come out "
                                                      "byte-identical), or give another -o directory; nothing was written.")])
    parent = t.parent if str(t.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(str(t), [Problem("-o", f"directory {parent} does not exist.")])
    try:
        tmp = sibling_temp_dir(t)
    except OSError as e:
        raise InputError(str(t), [Problem("-o", f"cannot write in {parent}: {e.strerror}.")]) from None
    old = None
    try:
        for rel, text in sorted(bundle.files.items()):
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        interrupts.debug_pause("before-rename", str(t))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; give it a plain mkdir's mode
        if t.exists():
            old = sibling_temp_dir(t, suffix=".old")
            os.rmdir(old)
            os.replace(t, old)
        os.replace(tmp, t)
    except BaseException:
        if old is not None and not t.exists():
            os.replace(old, t)  # put the earlier export back
            old = None
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        try:
            shutil.rmtree(old, ignore_errors=True)
        except KeyboardInterrupt:
            raise WrittenThenInterrupted(str(t)) from None
    return t


class WrittenThenInterrupted(KeyboardInterrupt):
    """Ctrl-C after :func:`write_bundle` renamed the new export into place (while it
    removed the earlier one, a hidden ``.<name>.*.old`` directory beside it): the export
    is complete."""


def read_bundle(target: str | Path) -> dict[tuple[str, str | None, str, str, str], int]:
    """Slices per (region, tier, role, shape, pod) in an export directory, read back from
    its workload manifests: each LeaderWorkerSet's (or DisaggregatedSet role's) replicas,
    its pod from the ``fleetplan/pod`` annotation, checked against the node-affinity value
    the pods are pinned to. Raises ValueError for a manifest that does not hold together."""
    from fleetplan.export.k8s.common import label_value

    out: dict[tuple, int] = {}
    for f in sorted(Path(target).glob("*/workloads.yaml")):
        for obj in yaml.load_all(f.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if obj is None:
                continue
            if obj["kind"] == "LeaderWorkerSet":
                groups = [(obj["metadata"], obj["spec"])]
            elif obj["kind"] == "DisaggregatedSet":
                groups = [(ro["metadata"], ro["spec"]) for ro in obj["spec"]["roles"]]
            else:
                continue
            for md, spec in groups:
                tpl = spec["leaderWorkerTemplate"]["workerTemplate"]
                lab = tpl["metadata"]["labels"]
                pod = md["annotations"][f"{LABEL}pod"]
                terms = tpl["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                values = [v for term in terms for e in term["matchExpressions"] for v in e["values"]]
                if values != [label_value(pod)]:
                    raise ValueError(f"{f}: {md.get('name', '?')} is annotated with pod {pod} but pinned to {values}")
                role = lab[f"{LABEL}role"]
                key = (lab[f"{LABEL}region"], lab.get(f"{LABEL}tier"), role, lab[f"{LABEL}shape"], pod)
                out[key] = out.get(key, 0) + int(spec["replicas"])
    return out


def deployed_diff(target: str | Path, pl: Placement) -> dict:
    """What applying an export of placement ``pl`` changes against the export in directory
    ``target`` (what is deployed): the groups (pool x pod) whose slice count differs, and
    the plan and placement hashes on both sides. Raises InputError when ``target`` is not a
    fleetplan export or its manifests do not hold together."""
    import re
    from collections import Counter

    t = Path(target)
    m = re.match(r"^fleetplan \S+ export of plan ([0-9a-f]{64}) placement ([0-9a-f]{64})$", (t / MARKER).read_text().strip()) \
        if (t / MARKER).is_file() else None
    if m is None:
        raise InputError(str(t), [Problem("(directory)", f"not a fleetplan export (no {MARKER}); give the directory "
                                                         "`fleetplan export ... --format k8s -o DIR` wrote.")])
    try:
        deployed = read_bundle(t)
    except (ValueError, KeyError, TypeError, yaml.YAMLError) as e:
        raise InputError(str(t), [Problem("(manifests)", f"do not read back as a fleetplan export: {e}.")]) from None
    if not deployed:
        raise InputError(str(t), [Problem("(manifests)", "no workloads (export it with --format k8s or all).")])
    placed = Counter((s.region, s.tier, s.role, s.slice, s.pod) for s in pl.slices)
    changes = [{"region": k[0], "tier": k[1], "role": k[2], "shape": k[3], "pod": k[4], "deployed": deployed.get(k, 0), "placed": placed.get(k, 0)}
               for k in sorted(set(deployed) | set(placed), key=lambda k: tuple("" if x is None else x for x in k))
               if deployed.get(k, 0) != placed.get(k, 0)]
    return {"deployed_plan_hash": m.group(1), "deployed_placement_hash": m.group(2), "plan_hash": pl.plan_hash,
            "placement_hash": placement_hash(pl), "slices_deployed": sum(deployed.values()), "slices_placed": sum(placed.values()),
            "changes": changes}
