"""The kustomizations of an export build: each region's (``kubectl apply -k DIR/REGION`` on
its cluster) and the top-level one (every region on one cluster). Kustomize refuses a
resource id -- (API group, kind, namespace, name) -- added twice; the tree is walked here
the way kustomize accumulates it (a directory is its kustomization, a file its objects),
and with ``kubectl kustomize`` / ``kustomize build`` where either is on PATH."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fleetplan.export.k8s import ExportOptions, build_bundle, write_bundle

KUBECTL, KUSTOMIZE = shutil.which("kubectl"), shutil.which("kustomize")


def _ids(root: Path) -> list[tuple[str, str, str, str]]:
    """Resource ids a kustomization directory accumulates, in order, duplicates kept."""
    k = yaml.safe_load((root / "kustomization.yaml").read_text())
    out = []
    for res in k.get("resources", []):
        p = (root / res).resolve()
        if p.is_dir():
            out += _ids(p)
            continue
        assert p.is_relative_to(root.resolve()), f"{root}: file {res} is outside the kustomization root (kustomize refuses it)"
        for o in yaml.safe_load_all(p.read_text()):
            if o:
                group = o["apiVersion"].rpartition("/")[0]
                out.append((group, o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]))
    return out


@pytest.fixture(scope="module", params=["all", "keda"])
def exported(request, small, tmp_path_factory):
    inst, plan, pl = small
    formats = {"all": {"k8s", "keda", "prometheus"}, "keda": {"keda"}}[request.param]
    return write_bundle(build_bundle(inst, plan, pl, ExportOptions(formats=frozenset(formats))), tmp_path_factory.mktemp("kz") / "k8s")


def test_no_resource_id_is_added_twice(exported):
    d = exported
    regions = sorted(p.parent for p in d.glob("*/kustomization.yaml"))
    assert [r.name for r in regions] == ["a", "b"]
    every = []
    for r in regions:
        ids = _ids(r)
        assert len(ids) == len(set(ids)), f"{r.name}: {ids}"
        assert ("", "Namespace", "", "fleetplan") in ids  # a region's cluster gets its namespace
        every += [i for i in ids if i[1] != "Namespace"]
    top = _ids(d)
    assert len(top) == len(set(top)), sorted(i for i in top if top.count(i) > 1)
    # the top level holds every region's objects, the namespace once
    assert sorted(i for i in top if i[1] != "Namespace") == sorted(every)
    assert [i for i in top if i[1] == "Namespace"] == [("", "Namespace", "", "fleetplan")]


def test_the_top_level_sets_the_image_too(exported):
    top = yaml.safe_load((exported / "kustomization.yaml").read_text())
    assert [i["name"] for i in top["images"]] == ["fleetplan-model-server"]


@pytest.mark.skipif(KUBECTL is None and KUSTOMIZE is None, reason="neither kubectl nor kustomize on PATH: the tree walk above stands in")
def test_kustomize_builds_every_level(exported):
    cmd = [KUSTOMIZE, "build"] if KUSTOMIZE else [KUBECTL, "kustomize"]
    for d in [exported, *sorted(p.parent for p in exported.glob("*/kustomization.yaml"))]:
        r = subprocess.run([*cmd, str(d)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        objs = [o for o in yaml.safe_load_all(r.stdout) if o]
        assert sum(o["kind"] == "Namespace" for o in objs) == 1
        assert all(c["image"] == "fleetplan-model-server:set-me" for o in objs if o["kind"] == "LeaderWorkerSet"
                   for c in o["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"])
