"""``fleetplan place``, ``export`` and ``diff`` from the command line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.export.controller import ControllerExport
from fleetplan.results.placement import Placement

runner = CliRunner()


@pytest.fixture(scope="module")
def files(tmp_path_factory, plan_file):
    d = tmp_path_factory.mktemp("pl")
    plan, pl = plan_file("gemini-ironwood"), d / "placement.json"  # `fleetplan solve -o`, once per run
    r = runner.invoke(app, ["place", str(plan), "-o", str(pl)])
    assert r.exit_code == 0, r.output
    return d, plan, pl


def test_place_export_diff(files, tmp_path):
    d, plan, pl = files
    placement = Placement.model_validate_json(pl.read_text())
    # the plan is sized with its pods (issue 20): its KV crossing the DCN within the 5% ceiling
    assert placement.method == "pods" and placement.schema_version == 2 and placement.dcn_share <= 0.05
    out = tmp_path / "c.json"
    r = runner.invoke(app, ["export", str(pl), "--plan", str(plan), "--format", "controller", "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = ControllerExport.model_validate_json(out.read_text())
    assert doc.plan_hash == placement.plan_hash
    r = runner.invoke(app, ["diff", str(pl), str(pl)])
    assert r.exit_code == 0 and "0 slices moved" in r.output


def test_colocated_json_is_clean(tmp_path, plan_file):
    plan = plan_file("llama70b-h100")  # `fleetplan solve llama70b-h100 -o`, once per run
    r = runner.invoke(app, ["place", str(plan), "--json"])
    assert r.exit_code == 0
    Placement.model_validate_json(r.output)  # nothing but the document on stdout
    # the GPU fleet for Kubernetes: one-node replicas (no topology label), no autoscaler
    # without a leading-signal threshold, said in a note
    (tmp_path / "p.json").write_text(r.output)
    r = runner.invoke(app, ["export", str(tmp_path / "p.json"), "--plan", str(plan), "--format", "all", "-o", str(tmp_path / "k8s")])
    assert r.exit_code == 0, r.output
    assert "no autoscaler" in r.output and not list((tmp_path / "k8s").glob("*/autoscaling.yaml"))
    import yaml

    lws = [o for f in (tmp_path / "k8s").glob("*/workloads.yaml") for o in yaml.safe_load_all(f.read_text()) if o]
    spec = lws[0]["spec"]["leaderWorkerTemplate"]
    assert spec["size"] == 1 and spec["workerTemplate"]["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert spec["workerTemplate"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": lws[0]["metadata"]["labels"]["fleetplan/shape"][5:]}


def test_export_rechecks_the_placement(files, tmp_path):
    d, plan, pl = files
    doc = json.loads(pl.read_text())
    doc["slices"][1]["first_chip"] = doc["slices"][0]["first_chip"]
    doc["slices"][1]["pod"] = doc["slices"][0]["pod"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = runner.invoke(app, ["export", str(bad), "--plan", str(plan), "-o", str(tmp_path / "c.json")])
    assert r.exit_code == 2 and "overlap" in r.output
    assert not (tmp_path / "c.json").exists()
    r = runner.invoke(app, ["place", str(plan), "--current", str(bad)])
    assert r.exit_code == 2 and "overlap" in r.output


def test_place_prints_the_dcn_share_per_tier_in_the_worst_region_loss(files):
    d, plan, pl = files
    placement = Placement.model_validate_json(pl.read_text())
    r = runner.invoke(app, ["place", str(plan)])
    assert r.exit_code == 0, r.output
    assert "worst region loss" in r.output and "does not price DCN traffic" not in r.output
    for x in placement.dcn:
        line = next(ln for ln in r.output.splitlines() if ln.strip().startswith(f"{x.region}/{x.tier} "))
        assert f"{x.worst_loss:.2%}" in line and x.worst_loss_scenario in line and "5.00%" in line
    assert "every tier within its ceiling at the normal peak and in every region loss" in r.output


def test_export_refuses_a_loss_routing_over_the_dcn_ceiling(files, tmp_path):
    """A hand-edited placement whose region-loss routing sends a tier's KV over the DCN
    (every pod's KV to the next pod with decode of the tier, in the worst loss): exit 2,
    nothing written."""
    d, plan, pl = files
    doc = json.loads(pl.read_text())
    sc = next(s for s in doc["scenarios"] if s["kind"] == "loss")
    region, tier = sc["tiers"][0]["region"], sc["tiers"][0]["tier"]
    rows = [w for w in sc["routing"] if (w["region"], w["tier"]) == (region, tier)]
    targets = sorted({w["to_pod"] for w in rows})
    for w in rows:
        w["to_pod"] = targets[(targets.index(w["to_pod"]) + 1) % len(targets)]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = runner.invoke(app, ["export", str(bad), "--plan", str(plan), "-o", str(tmp_path / "c.json")])
    assert r.exit_code == 2 and "dcn_share" in r.output and sc["scenario"] in r.output, r.output
    assert not (tmp_path / "c.json").exists()


def test_place_refuses_a_placement_the_checker_refuses(files, tmp_path, monkeypatch):
    """`fleetplan place` writes nothing and exits 3 when the independent check fails (a
    placer that routed a region loss's KV over the DCN, simulated)."""
    import fleetplan.placement

    d, plan, pl = files
    good = Placement.model_validate_json(pl.read_text())
    sc = next(s for s in good.scenarios if s.kind == "loss")
    rows = [w.model_copy(update={"to_pod": "nowhere/ironwood/99"}) if i == 0 else w for i, w in enumerate(sc.routing)]
    broken = good.model_copy(update={"scenarios": [s.model_copy(update={"routing": rows}) if s is sc else s for s in good.scenarios]})
    monkeypatch.setattr(fleetplan.placement, "place", lambda *a, **k: broken)
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["place", str(plan), "-o", str(out)])
    assert r.exit_code == 3 and "independent check found" in r.output and "routing" in r.output, r.output
    assert not out.exists()


def test_place_refuses_a_plan_whose_pods_do_not_hold_its_slices(files, tmp_path):
    d, plan, pl = files
    doc = json.loads(plan.read_text())
    pod = doc["pods"][0]
    key = next(k for k in pod["slices"] if "/prefill/" in k)
    pod["slices"][key] += 1
    edited = tmp_path / "plan.json"
    edited.write_text(json.dumps(doc))
    r = runner.invoke(app, ["place", str(edited), "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 2 and "pods[0]" in r.output and "the pools hold" in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("args,needle", [
    (["export", "{pl}", "--plan", "{plan}", "-i", "gemini-trillium"], "instance_hash"),
    (["export", "{plan}", "--plan", "{plan}"], "is a fleetplan plan, not a placement"),
    (["export", "{pl}", "--plan", "{plan}", "--format", "yaml"], "--format"),
    (["place", "{plan}", "-o", "{plan}"], "is the input file"),
    (["place", "{plan}", "--dcn-slack", "2"], "--dcn-slack"),
    (["diff", "{pl}", "{plan}"], "not a placement"),
])
def test_bad_input_exits_2(files, args, needle):
    d, plan, pl = files
    r = runner.invoke(app, [a.format(plan=plan, pl=pl) for a in args])
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output


def test_gemini_kubernetes_export(files, tmp_path):
    """The bundled Gemini placement as Kubernetes objects: every one valid against the
    published schemas (when the CRDs are at hand; one region's, the others are built by the
    same code), and read back slice for slice."""
    from collections import Counter

    import yaml

    from fleetplan.export.k8s import read_bundle
    from tests.k8s.validate import CRDS, problems

    d, plan, pl = files
    out = tmp_path / "k8s"
    r = runner.invoke(app, ["export", str(pl), "--plan", str(plan), "--format", "k8s", "-o", str(out)])
    assert r.exit_code == 0, r.output
    placement = Placement.model_validate_json(pl.read_text())
    assert read_bundle(out) == dict(Counter((s.region, s.tier, s.role, s.slice, s.pod) for s in placement.slices))
    if (CRDS / "README.md").is_file():
        objs = [o for f in sorted(out.glob("us-east/*.yaml")) if f.name != "kustomization.yaml"
                for o in yaml.load_all(f.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if o]
        assert {o["kind"] for o in objs} == {"Namespace", "LeaderWorkerSet", "InferencePool", "Service", "ConfigMap"}
        assert [p for o in objs for p in problems(o)] == []
