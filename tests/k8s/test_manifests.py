"""The Kubernetes export's objects: valid against the published schemas (and refused when
broken), every CRD CEL rule evaluated, the placement read back exactly, deterministic
bytes, labels tying each manifest to its plan, autoscaler bounds from the plan's N-1 needs
and thresholds from the controller document."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import yaml

from fleetplan.errors import InputError, InstanceError
from fleetplan.instance.io import parse_instance
from fleetplan.export.k8s import ExportOptions, build_bundle, read_bundle, write_bundle
from fleetplan.export.k8s.bundle import MARKER
from fleetplan.results.evaluate import Context
from fleetplan.export.controller import build_export
from fleetplan.results.placement import placement_hash, plan_hash
from tests.k8s.conftest import KUBE, small_data
from tests.k8s.validate import CRD_FILES, cel_failures, count_cel_rules, crd, needs_crds, problems

VARIANTS = {
    "lws-keda": dict(workload="leaderworkerset", scaler="keda"),
    "ds-keda": dict(workload="disaggregatedset", scaler="keda"),
    "lws-hpa": dict(workload="leaderworkerset", scaler="hpa"),
}


def _single_host(inst):
    """The instance with 2-chip hosts: every slice is one pod (no exclusive topology, a
    DisaggregatedSet placement policy)."""
    chip = inst.chips["acc"]
    k = chip.kubernetes.model_copy(update={"chips_per_host": 2})
    return inst.model_copy(update={"chips": {"acc": chip.model_copy(update={"kubernetes": k})}})


@pytest.fixture(scope="module")
def bundles(small):
    inst, plan, pl = small
    out = {name: build_bundle(inst, plan, pl, ExportOptions(**kw)) for name, kw in VARIANTS.items()}
    out["ds-single-host"] = build_bundle(_single_host(inst), plan, pl, ExportOptions(workload="disaggregatedset"))
    # without autoscalers the roles keep static replicas (the CEL rule then applies to them)
    out["ds-static"] = build_bundle(inst, plan, pl, ExportOptions(workload="disaggregatedset", formats=frozenset({"k8s"})))
    return out


def _objects(b):
    return [o for objs in b.objects.values() for o in objs]


def test_small_plan_exercises_the_export(small, bundles):
    """The small plan has what the export must handle: multi-host slices, pools spread over
    pods, pods with a prefill but no decode slice, warm slices, speculation, N-1 routing."""
    inst, plan, pl = small
    kinds = Counter(o["kind"] for o in _objects(bundles["ds-keda"]))
    assert kinds["DisaggregatedSet"] >= 2 and kinds["LeaderWorkerSet"] >= 4 and kinds["ScaledObject"] >= 6
    lws = [o for o in _objects(bundles["lws-keda"]) if o["kind"] == "LeaderWorkerSet"]
    assert any(o["spec"]["leaderWorkerTemplate"]["size"] == 2 for o in lws)  # a 2-chip slice on 1-chip hosts
    assert any(o["metadata"]["labels"]["fleetplan/role"] == "warm" for o in lws)
    assert any(p.speculation is not None for p in plan.pools) and plan.routing
    assert Counter(o["kind"] for o in _objects(bundles["lws-hpa"]))["HorizontalPodAutoscaler"] >= 6


@needs_crds
@pytest.mark.parametrize("variant", sorted(VARIANTS) + ["ds-single-host", "ds-static"])
def test_every_object_validates(bundles, variant):
    bad = [p for o in _objects(bundles[variant]) for p in problems(o)]
    assert bad == []


@needs_crds
def test_every_cel_rule_is_evaluated_on_an_exported_object(bundles):
    """The CRDs hold four CEL rules (KEDA min <= max; InferencePool unique ports, a Service
    picker with a port; DisaggregatedSet replicas all zero or all positive for its static
    roles); each sits on a value some exported object has, so each was evaluated above."""
    seen: set[str] = set()
    total = 0
    kinds = {(o["apiVersion"].rpartition("/")[0], o["kind"]) for b in bundles.values() for o in _objects(b)}
    for g, k in CRD_FILES:
        total += count_cel_rules(crd(g, k)[1])

    def walk(schema, value):
        for r in schema.get("x-kubernetes-validations", []):
            seen.add(r["rule"])
        if isinstance(value, dict):
            for key, v in value.items():
                sub = schema.get("properties", {}).get(key)
                if sub is not None:
                    walk(sub, v)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for v in value:
                walk(schema["items"], v)

    for b in bundles.values():
        for o in _objects(b):
            key = (o["apiVersion"].rpartition("/")[0], o["kind"])
            if key in CRD_FILES:
                walk(crd(*key)[1], o)
    assert total == 4 and len(seen) == 4, seen
    assert ("leaderworkerset.x-k8s.io", "LeaderWorkerSet") in kinds


@needs_crds
def test_broken_fields_are_refused(bundles):
    objs = _objects(bundles["ds-keda"]) + _objects(bundles["lws-hpa"])
    first = {o["kind"]: o for o in reversed(objs)}

    def broken(kind, edit):
        o = copy.deepcopy(first[kind])
        edit(o)
        return problems(o)

    assert any("is not of type 'integer'" in p for p in broken("LeaderWorkerSet", lambda o: o["spec"].update(replicas="3")))
    assert any("Additional properties" in p for p in broken("LeaderWorkerSet", lambda o: o["spec"].update(replica=3)))
    assert any("Additional properties" in p for p in broken(
        "LeaderWorkerSet", lambda o: o["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0].update(gpu=1)))
    assert any("label value" in p for p in broken("LeaderWorkerSet", lambda o: o["metadata"]["labels"].update({"fleetplan/tier": "a/b"})))
    assert any("is not of type 'integer'" in p for p in broken("DisaggregatedSet", lambda o: o["spec"]["roles"][0]["spec"].update(replicas="2")))
    assert any("all non-External roles" in p for p in broken("DisaggregatedSet", lambda o: [
        r.pop("scaling", None) for r in o["spec"]["roles"]] and o["spec"]["roles"][0]["spec"].update(replicas=0)))
    assert any("less than or equal to maxReplicaCount" in p for p in broken(
        "ScaledObject", lambda o: o["spec"].update(minReplicaCount=o["spec"]["maxReplicaCount"] + 1)))
    assert any("Additional properties" in p for p in broken("ScaledObject", lambda o: o["spec"].update(maxReplicas=3)))
    assert any("port number must be unique" in p for p in broken(
        "InferencePool", lambda o: o["spec"].update(targetPorts=[{"number": 8000}, {"number": 8000}])))
    assert any("port is required" in p for p in broken("InferencePool", lambda o: o["spec"]["endpointPickerRef"].pop("port")))
    assert broken("ConfigMap", lambda o: o["data"].update({"x": 1}))
    assert broken("Service", lambda o: o["spec"].update(portz=[]))
    assert broken("HorizontalPodAutoscaler", lambda o: o["spec"].update(maxReplicas="3"))


def test_cel_check_refuses_what_it_should():
    """The CEL evaluation itself: a rule false on a value is reported, true is not."""
    schema = {"type": "object", "x-kubernetes-validations": [{"rule": "self.a <= self.b", "message": "a <= b"}],
              "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    assert cel_failures(schema, {"a": 1, "b": 2}) == []
    assert cel_failures(schema, {"a": 3, "b": 2}) == [".: a <= b"]


@pytest.mark.parametrize("variant", ["lws-keda", "ds-keda"])
def test_round_trip_gives_the_placement(small, bundles, variant, tmp_path):
    inst, plan, pl = small
    out = write_bundle(bundles[variant], tmp_path / "k8s")
    got = read_bundle(out)
    assert got == dict(Counter((s.region, s.tier, s.role, s.slice, s.pod) for s in pl.slices))
    assert sum(got.values()) == sum(p.slices for p in plan.pools) + sum(w.slices for w in plan.warm_pool)
    for f in plan.fleet:
        chips = sum(n * int(k[3].rpartition("x")[2]) for k, n in got.items() if k[0] == f.region)
        assert chips == f.chips_in_slices + f.chips_in_warm_pool


def test_bytes_are_deterministic_and_exports_replace_atomically(small, bundles, tmp_path):
    inst, plan, pl = small
    again = build_bundle(inst, plan, pl, ExportOptions(**VARIANTS["lws-keda"]))
    assert again.files == bundles["lws-keda"].files
    a = write_bundle(again, tmp_path / "a")
    assert (a / MARKER).is_file() and (a / "a" / "kustomization.yaml").is_file()
    (a / "a" / "stale.yaml").write_text("left from an earlier export\n")
    write_bundle(bundles["ds-keda"], a)  # an earlier export is replaced whole
    assert not (a / "a" / "stale.yaml").exists()
    assert (a / "a" / "workloads.yaml").read_text() == bundles["ds-keda"].files["a/workloads.yaml"]
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="did not write"):
        write_bundle(again, foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"
    with pytest.raises(InputError, match="is a file"):
        write_bundle(again, foreign / "notes.txt")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left behind


def test_every_manifest_carries_its_plan(small, bundles):
    inst, plan, pl = small
    ph, lh = plan_hash(plan), placement_hash(pl)
    for o in _objects(bundles["ds-keda"]):
        md = o["metadata"]
        assert md["labels"]["fleetplan/plan-hash"] == ph[:16] and md["labels"]["fleetplan/placement-hash"] == lh[:16]
        assert md["labels"]["fleetplan/version"] == plan.fleetplan_version
        assert md["annotations"]["fleetplan/plan-hash"] == ph and md["annotations"]["fleetplan/placement-hash"] == lh
        assert md["annotations"]["fleetplan/instance-hash"] == plan.instance_hash
    for rel, text in bundles["ds-keda"].files.items():
        if rel.endswith(".yaml"):
            assert ph[:16] in text.splitlines()[1], rel
    # the pods' labels hold no hash: a re-plan that keeps a group does not roll its pods
    lws = next(o for o in _objects(bundles["lws-keda"]) if o["kind"] == "LeaderWorkerSet")
    assert not any("hash" in k for k in lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"])


def test_groups_are_pinned_and_shaped_from_the_chip_block(small, bundles):
    inst, plan, pl = small
    for o in _objects(bundles["lws-keda"]):
        if o["kind"] != "LeaderWorkerSet":
            continue
        tpl = o["spec"]["leaderWorkerTemplate"]
        chips = int(o["metadata"]["labels"]["fleetplan/shape"].rpartition("x")[2])
        assert tpl["size"] == chips  # 1-chip hosts
        ns = tpl["workerTemplate"]["spec"]["nodeSelector"]
        assert ns == {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice", "cloud.google.com/gke-tpu-topology": KUBE["topologies"][chips]}
        res = tpl["workerTemplate"]["spec"]["containers"][0]["resources"]["limits"]
        assert res == {"google.com/tpu": "1"}
        exclusive = o["metadata"]["annotations"].get("leaderworkerset.sigs.k8s.io/exclusive-topology")
        assert exclusive == ("cloud.google.com/gke-nodepool" if chips > 1 else None)
        pod = o["metadata"]["annotations"]["fleetplan/pod"]
        term = tpl["workerTemplate"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["nodeSelectorTerms"] == [{"matchExpressions": [{"key": "fleetplan/ici-domain", "operator": "In",
                                                                    "values": [pod.replace("/", ".")]}]}]
    pools = [o for o in _objects(bundles["lws-keda"]) if o["kind"] == "InferencePool"]
    assert {o["metadata"]["name"] for o in pools} == {"a-all", "b-all"}
    for o in pools:  # the tier's serving leaders: no warm pod, no worker of a multi-host slice
        assert o["spec"]["selector"]["matchLabels"] == {"fleetplan/region": o["metadata"]["labels"]["fleetplan/region"], "fleetplan/tier": "all",
                                                        "fleetplan/traffic": "on", "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    single = [o for o in _objects(bundles["ds-single-host"]) if o["kind"] == "DisaggregatedSet"]
    assert single and all(o["spec"]["placementPolicy"] == {"type": "ExclusiveSlice", "topology": "fleetplan/ici-domain"} for o in single)
    # the DisaggregatedSet webhook refuses a placement policy beside LWS's exclusive topology
    assert not any("leaderworkerset.sigs.k8s.io/exclusive-topology" in r["metadata"]["annotations"] for o in single for r in o["spec"]["roles"])
    multi = [o for o in _objects(bundles["ds-keda"]) if o["kind"] == "DisaggregatedSet"]
    # a multi-host role keeps LWS's exclusive topology, which the DisaggregatedSet webhook refuses beside a placement policy
    assert all("placementPolicy" not in o["spec"] for o in multi)
    assert all(r["scaling"] == {"mode": "External"} and r["name"] in ("prefill", "decode") for o in multi for r in o["spec"]["roles"])
    static = [o for o in _objects(bundles["ds-static"]) if o["kind"] == "DisaggregatedSet"]
    assert static and all("scaling" not in r and r["spec"]["replicas"] > 0 for o in static for r in o["spec"]["roles"])


def test_autoscaler_bounds_hold_failover_at_every_hour(small, bundles):
    """Per group: 1 <= min <= hourly floor <= max, the cron windows carry the floors above
    min. Per pool: the groups' ceilings add up to the sizing scenario's slices, their floors
    to at least the pool's need, and that need is the fewest slices that meet the TTFT SLO
    at the hour's worst N-1 load (checked with the evaluator at need and need - 1)."""
    from fleetplan.export.k8s.scaling import pool_floors, sizing_slices

    inst, plan, pl = small
    ctx = Context(inst)
    objs = [o for o in _objects(bundles["lws-keda"]) if o["kind"] == "ScaledObject"]
    by_pool: dict[tuple, list[dict]] = {}
    for o in objs:
        floors = [int(x) for x in o["metadata"]["annotations"]["fleetplan/hourly-floors"].split(",")]
        s = o["spec"]
        assert 1 <= s["minReplicaCount"] == min(floors) and max(floors) <= s["maxReplicaCount"]
        for t in s["triggers"]:
            if t["type"] == "cron":
                h0, h1 = int(t["metadata"]["start"].split()[1]), int(t["metadata"]["end"].split()[1]) or 24
                assert t["metadata"]["timezone"] == "Etc/UTC" and all(floors[h] == int(t["metadata"]["desiredReplicas"]) for h in range(h0, h1))
        above = {h for t in s["triggers"] if t["type"] == "cron"
                 for h in range(int(t["metadata"]["start"].split()[1]), int(t["metadata"]["end"].split()[1]) or 24)}
        assert above == {h for h, f in enumerate(floors) if f > s["minReplicaCount"]}
        lab = o["metadata"]["labels"]
        by_pool.setdefault((lab["fleetplan/region"], lab["fleetplan/tier"], lab["fleetplan/role"]), []).append((o, floors))
    prefill_checked = 0
    for pool in plan.pools:
        groups = by_pool[(pool.region, pool.tier, pool.role)]
        assert sum(o["spec"]["maxReplicaCount"] for o, _ in groups) == sizing_slices(plan, pool)
        need = pool_floors(inst, plan, ctx, pool)
        assert all(sum(f[h] for _, f in groups) >= need[h] for h in range(24))
        if pool.role != "prefill":
            continue
        tm = ctx.tiers[pool.tier]
        for h in range(24):
            own = inst.regions[pool.region].peak_rps * inst.regions[pool.region].hourly_load[h] * tm.tier_share
            loads = [(own, 0.0, False)] + [(own, inst.regions[rt.lost].peak_rps * inst.regions[rt.lost].hourly_load[h] * tm.tier_share * rt.share,
                                            True) for rt in plan.routing if rt.to == pool.region and rt.tier == pool.tier]
            n = need[h]
            assert all(ctx.prefill(pool.tier, pool.slice, n, o, d, f).meets_slo for o, d, f in loads) or n == pool.slices
            if 1 < n < pool.slices:
                assert not all(ctx.prefill(pool.tier, pool.slice, n - 1, o, d, f).meets_slo for o, d, f in loads)
                prefill_checked += 1
    assert prefill_checked > 0


def test_thresholds_are_the_controller_documents(small, bundles):
    inst, plan, pl = small
    doc = build_export(inst, plan, pl)
    th = {(r.region, t.tier): t for r in doc.regions for t in r.thresholds}
    for o in _objects(bundles["lws-keda"]):
        if o["kind"] != "ScaledObject":
            continue
        lab = o["metadata"]["labels"]
        t = th[(lab["fleetplan/region"], lab["fleetplan/tier"])]
        got = {tr["name"]: float(tr["metadata"]["threshold"]) for tr in o["spec"]["triggers"] if tr["type"] == "prometheus"}
        if lab["fleetplan/role"] == "prefill":
            assert got == {"prefill-queue-wait-p95-ms": pytest.approx(t.prefill_queue_wait_p95_ms, rel=1e-5)}
        else:
            assert got == {"decode-demand": t.decode_occupancy_knee, "decode-kv-usage-max": pytest.approx(1 - t.kv_headroom_floor, rel=1e-5)}
    hpa = [o for o in _objects(bundles["lws-hpa"]) if o["kind"] == "HorizontalPodAutoscaler"]
    assert all(m["external"]["metric"]["selector"] == {"matchLabels": {"fleetplan_unit": o["metadata"]["name"]}}
               for o in hpa for m in o["spec"]["metrics"])


def test_export_names_missing_kubernetes_data(small):
    inst, plan, pl = small
    chip = inst.chips["acc"]
    bare = inst.model_copy(update={"chips": {"acc": chip.model_copy(update={"kubernetes": None})}})
    with pytest.raises(InputError) as e:
        build_bundle(bare, plan, pl, ExportOptions())
    assert [p.path for p in e.value.problems] == ["chips.acc.kubernetes"]
    no_topo = chip.kubernetes.model_copy(update={"topologies": {1: "1x1"}})
    partial = inst.model_copy(update={"chips": {"acc": chip.model_copy(update={"kubernetes": no_topo})}})
    with pytest.raises(InputError) as e:
        build_bundle(partial, plan, pl, ExportOptions())
    assert [p.path for p in e.value.problems] == ["chips.acc.kubernetes.topologies.2"]
    with pytest.raises(InputError, match="--engine"):
        build_bundle(inst, plan, pl, ExportOptions(engine="tgi"))
    other = plan.model_copy(update={"pools": plan.pools[1:]})
    with pytest.raises(InputError, match="another plan"):
        build_bundle(inst, other, pl, ExportOptions())


@pytest.mark.parametrize("kube,path,needle", [
    ({**KUBE, "topologies": {1: "1x1", 2: "2x2"}}, "chips.acc.kubernetes.topologies.2", "multiply to 4"),
    ({**KUBE, "topologies": {1: "1x1", 2: "1x2", 4: "2x2"}}, "chips.acc.kubernetes.topologies.4", "not a slice shape"),
    ({**KUBE, "chips_per_host": 3}, "chips.acc.kubernetes.chips_per_host", "multiple of chips_per_host"),
    ({**KUBE, "topology_label": None}, "chips.acc.kubernetes.topologies", "need a topology_label"),
    ({**KUBE, "accelerator": "tpu v6e"}, "chips.acc.kubernetes.accelerator", ""),
])
def test_instance_checks_the_chip_block(kube, path, needle):
    data = small_data()
    data["chips"]["acc"]["kubernetes"] = kube
    data["chips"]["acc"]["slice_shapes"] = [1, 2, 4] if kube["chips_per_host"] == 3 else [1, 2]
    with pytest.raises(InstanceError) as e:
        parse_instance(data, "small")
    assert any(p.path == path and needle in p.message for p in e.value.problems), e.value.render()


def test_multi_host_slices_need_one_vm_per_host():
    data = small_data()
    data["chips"]["acc"].update(chips_per_vm=2, slice_shapes=[2, 4], chips_per_pod=8)
    data["chips"]["acc"]["kubernetes"] = {**KUBE, "topologies": {2: "1x2", 4: "2x2"}}
    with pytest.raises(InstanceError) as e:
        parse_instance(data, "small")
    assert any(p.path == "chips.acc.kubernetes.chips_per_host" and "equal chips_per_vm (2)" in p.message for p in e.value.problems)


def test_yaml_is_plain(bundles):
    """Every file parses back to the objects it was written from, with no anchors or aliases
    (a shared Python object would be dumped as one) and no tags."""
    for b in bundles.values():
        for rel, objs in b.objects.items():
            text = b.files[rel]
            assert [o for o in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if o is not None] == objs
            assert "&id" not in text and "*id" not in text and "!!" not in text, rel


def test_names_that_kubernetes_refuses_exit_with_the_field(small):
    """A tier name that is no label value, or two groups that would share a name once
    lower-cased, are refused before anything is built."""
    from fleetplan.export.k8s.workloads import placement_units

    inst, plan, pl = small
    bad_tier = pl.model_copy(update={"slices": [s.model_copy(update={"tier": "all_"}) if s.tier else s for s in pl.slices]})
    with pytest.raises(InputError) as e:
        placement_units(inst, bad_tier)
    assert any(p.path == "workload.tiers.all_" and "not a Kubernetes label value" in p.message for p in e.value.problems)
    s0 = next(s for s in pl.slices if s.tier)
    twin = s0.model_copy(update={"tier": "ALL", "id": s0.id.replace("/all/", "/ALL/")})
    with pytest.raises(InputError, match="would both be named"):
        placement_units(inst, pl.model_copy(update={"slices": [*pl.slices, twin]}))


def test_containers_serve_at_the_plans_precision(small):
    """An FP8 plan's step times assume 1-byte weights and KV: its engine must be told
    (``--quantization=fp8``, ``--kv-cache-dtype=fp8``), or it serves the BF16 checkpoint at
    twice the bytes the plan was sized for (issue-17 trial: the FP8 export had no flag)."""
    from fleetplan.export.k8s.engines import ENGINES

    inst, plan, pl = small

    def args(i):
        b = build_bundle(i, plan, pl, ExportOptions(workload="leaderworkerset", formats=frozenset({"k8s"})))
        sets = [o["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"]
                for o in _objects(b) if o["kind"] == "LeaderWorkerSet"]
        assert sets
        return sets, b.notes

    def with_bytes(w, kv):
        return inst.model_copy(update={"model": inst.model.model_copy(update={"bytes_per_weight": w, "bytes_per_kv_element": kv})})

    sets, notes = args(with_bytes(1, 1))
    assert all("--quantization=fp8" in a and "--kv-cache-dtype=fp8" in a and not any(x.startswith("--dtype") for x in a) for a in sets)
    sets, notes = args(with_bytes(2, 2))
    assert all("--dtype=bfloat16" in a and "--kv-cache-dtype=auto" in a and "--quantization=fp8" not in a for a in sets)
    assert not any("bytes_per" in n for n in notes)
    sets, notes = args(with_bytes(0.5, 1))  # INT4 weights: no flag selects them, a note says so
    assert all("--kv-cache-dtype=fp8" in a and not any(x.startswith(("--quantization", "--dtype")) for x in a) for a in sets)
    assert any("model.bytes_per_weight is 0.5 B" in n for n in notes)
    assert ENGINES["vllm"].precision_args(1, 2) == (["--quantization=fp8", "--kv-cache-dtype=auto"], [])
