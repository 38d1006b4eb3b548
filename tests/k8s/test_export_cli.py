"""``fleetplan export --format k8s|keda|prometheus|all`` from the command line: what it
writes and prints, and bad input (exit 2 naming what is wrong, nothing half-written, an
earlier export intact)."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.export.k8s import read_bundle
from tests.conftest import tiny_data
from tests.k8s.conftest import TWO_CHIP_PREFILL

runner = CliRunner()


def _export(f, *extra, out=None):
    args = ["export", str(f / "placement.json"), "--plan", str(f / "plan.json"), "-i", str(f / "small.yaml")]
    if out is not None:
        args += ["-o", str(out)]
    return runner.invoke(app, args + list(extra))


def _snapshot(d):
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_all_formats(small_files, small, tmp_path):
    inst, plan, pl = small
    out = tmp_path / "k8s"
    r = _export(small_files, "--format", "all", out=out)
    assert r.exit_code == 0, r.output
    assert "kubectl apply -k" in r.output and "fleetplan/ici-domain=" in r.output
    for reg in ("a", "b"):
        assert {p.name for p in (out / reg).iterdir()} == {"kustomization.yaml", "namespace.yaml", "workloads.yaml", "routing.yaml",
                                                           "autoscaling.yaml", "prometheus-rules.yaml"}
        kust = yaml.safe_load((out / reg / "kustomization.yaml").read_text())
        assert kust["resources"] == ["namespace.yaml", "workloads.yaml", "routing.yaml", "autoscaling.yaml"]
    assert yaml.safe_load((out / "kustomization.yaml").read_text())["resources"] == ["namespace.yaml"] + [
        f"{r}/{f}.yaml" for r in ("a", "b") for f in ("workloads", "routing", "autoscaling")]
    assert sum(read_bundle(out).values()) == len(pl.slices)
    # the same command again: the same bytes
    before = _snapshot(out)
    assert _export(small_files, "--format", "all", out=out).exit_code == 0
    assert _snapshot(out) == before


def test_one_format_at_a_time(small_files, tmp_path):
    r = _export(small_files, "--format", "prometheus", out=tmp_path / "p")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "p" / "a").iterdir()) == ["prometheus-rules.yaml"]
    assert not (tmp_path / "p" / "kustomization.yaml").exists()
    r = _export(small_files, "--format", "keda", "--scaler", "hpa", "--workload", "disaggregatedset", out=tmp_path / "h")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "h" / "a").iterdir()) == ["autoscaling.yaml", "kustomization.yaml", "namespace.yaml",
                                                                         "prometheus-adapter-rules.yaml"]
    kinds = {o["kind"] for o in yaml.safe_load_all((tmp_path / "h" / "a" / "autoscaling.yaml").read_text()) if o}
    assert kinds == {"HorizontalPodAutoscaler"}
    r = _export(small_files, "--format", "controller", "--engine", "vllm", "--namespace", "serving")
    assert r.exit_code == 0 and "--namespace applies only to the Kubernetes formats" in r.output


@pytest.mark.parametrize("args,needle", [
    (["--format", "all", "--engine", "tgi"], "--engine: unknown serving engine; known: vllm"),
    (["--format", "k8s", "--workload", "statefulset"], "--workload: give leaderworkerset or disaggregatedset"),
    (["--format", "keda", "--scaler", "vpa"], "--scaler: give keda or hpa"),
    (["--format", "k8s", "--ici-domain-label", "ici domain"], "--ici-domain-label: not a Kubernetes label key"),
    (["--format", "k8s", "--namespace", "Serving_NS"], "--namespace: not a Kubernetes namespace name"),
    (["--format", "yaml"], "--format: 'yaml'; give controller, k8s, keda, prometheus or all"),
])
def test_bad_options_exit_2(small_files, tmp_path, args, needle):
    out = tmp_path / "out"
    r = _export(small_files, *args, out=out)
    assert r.exit_code == 2, r.output
    assert needle in " ".join(r.output.split()) and "Traceback" not in r.output
    assert not out.exists() and [p for p in tmp_path.iterdir()] == []  # nothing written, no temporary left


def test_bad_outputs_exit_2(small_files, tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    r = _export(small_files, "--format", "k8s", out=f)
    assert r.exit_code == 2 and "-o: is a file, not a directory" in r.output and f.read_text() == "x"
    r = _export(small_files, "--format", "k8s")
    assert r.exit_code == 2 and "give it with -o DIR" in r.output
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("keep")
    r = _export(small_files, "--format", "k8s", out=mine)
    assert r.exit_code == 2 and "did not write" in r.output and _snapshot(mine) == {"keep.txt": b"keep"}
    r = _export(small_files, "--format", "k8s", out=small_files)  # the directory holding the inputs
    assert r.exit_code == 2 and "holds the input file" in r.output


def test_failed_export_leaves_the_earlier_one_intact(small_files, tmp_path):
    out = tmp_path / "k8s"
    assert _export(small_files, "--format", "all", out=out).exit_code == 0
    before = _snapshot(out)
    r = _export(small_files, "--format", "all", "--engine", "sglang", out=out)
    assert r.exit_code == 2 and _snapshot(out) == before


def test_placement_for_another_plan_exits_2(small_files, tmp_path):
    doc = json.loads((small_files / "plan.json").read_text())
    # still this instance's plan, its records intact (the export checks them first), but not the placed one
    doc["diagnostics"] = doc.get("diagnostics", []) + ["a note of another run"]
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    (tmp_path / "placement.json").write_text((small_files / "placement.json").read_text())
    (tmp_path / "small.yaml").write_text((small_files / "small.yaml").read_text())
    r = _export(tmp_path, "--format", "k8s", out=tmp_path / "k8s")
    assert r.exit_code == 2 and "plan_hash: the placement was made for another plan" in " ".join(r.output.split())
    assert not (tmp_path / "k8s").exists()


def test_shape_without_topology_exits_2_naming_the_field(tmp_path):
    """A chip block that lacks the topology string of a shape the placement uses."""
    data = tiny_data(chips={"acc": {"kubernetes": {"accelerator": "tpu-v6e-slice", "topologies": {1: "1x1"}, "chips_per_host": 1},
                                    "chips_per_vm": 1}}, workload=TWO_CHIP_PREFILL)
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(data))
    for cmd in (["solve", str(tmp_path / "small.yaml"), "-o", str(tmp_path / "plan.json")],
                ["place", str(tmp_path / "plan.json"), "-i", str(tmp_path / "small.yaml"), "-o", str(tmp_path / "placement.json")]):
        r = runner.invoke(app, cmd)
        assert r.exit_code == 0, r.output
    shapes = {s["slice"] for s in json.loads((tmp_path / "placement.json").read_text())["slices"]}
    assert "accx2" in shapes
    r = _export(tmp_path, "--format", "all", out=tmp_path / "k8s")
    assert r.exit_code == 2, r.output
    assert "chips.acc.kubernetes.topologies.2: missing" in " ".join(r.output.split())
    assert not (tmp_path / "k8s").exists()
    assert not any(p.name.startswith(".k8s") for p in tmp_path.iterdir())


def test_diff_against_what_is_deployed(small_files, tmp_path):
    out = tmp_path / "k8s"
    assert _export(small_files, "--format", "k8s", out=out).exit_code == 0
    r = runner.invoke(app, ["diff", str(out), str(small_files / "placement.json")])
    assert r.exit_code == 0 and "(the same placement)" in r.output and "0 groups change" in r.output
    doc = json.loads((small_files / "placement.json").read_text())
    s = next(x for x in doc["slices"] if x["role"] == "prefill")
    other = next(p["id"] for p in doc["pods"] if p["region"] == s["region"] and p["id"] != s["pod"])
    before_pod, s["pod"] = s["pod"], other
    (tmp_path / "moved.json").write_text(json.dumps(doc))
    r = runner.invoke(app, ["diff", str(out), str(tmp_path / "moved.json"), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["placement_hash"] != d["deployed_placement_hash"] and d["slices_deployed"] == d["slices_placed"]
    moved = {(c["pod"], c["deployed"] - c["placed"]) for c in d["changes"]}
    assert (before_pod, 1) in moved and len(d["changes"]) == 2
    r = runner.invoke(app, ["diff", str(small_files), str(small_files / "placement.json")])
    assert r.exit_code == 2 and "not a fleetplan export" in r.output


def test_one_part_never_deletes_the_others(small_files, tmp_path):
    """Regression (issue 21 trial, F6): `--format keda -o k8s` over an earlier `--format all`
    export deleted workloads.yaml and routing.yaml, and `fleetplan diff k8s` then found no
    workloads. A partial export over one holding more parts is refused, naming the files."""
    out = tmp_path / "k8s"
    assert _export(small_files, "--format", "all", out=out).exit_code == 0
    before = _snapshot(out)
    for fmt, kept in (("keda", ("workloads", "routing", "prometheus-rules")), ("k8s", ("autoscaling", "prometheus-rules")),
                      ("prometheus", ("workloads", "routing", "autoscaling"))):
        r = _export(small_files, "--format", fmt, out=out)
        text = " ".join(r.output.split())
        assert r.exit_code == 2, r.output
        assert all(f"{reg}/{f}.yaml" in text for reg in ("a", "b") for f in kept), text
        assert "export --format all" in text and "nothing was written" in text
        assert _snapshot(out) == before and [p.name for p in tmp_path.iterdir()] == ["k8s"]  # no temporary left
    r = runner.invoke(app, ["diff", str(out), str(small_files / "placement.json")])
    assert r.exit_code == 0 and "0 groups change" in r.output
    # the same parts again, or more, replace it
    assert _export(small_files, "--format", "all", "--scaler", "hpa", out=out).exit_code == 0
    assert (out / "a" / "prometheus-adapter-rules.yaml").is_file()
    assert _export(small_files, "--format", "all", out=out).exit_code == 0
    assert _snapshot(out) == before
    k = tmp_path / "k"
    assert _export(small_files, "--format", "keda", out=k).exit_code == 0
    assert _export(small_files, "--format", "keda", "--scaler", "hpa", out=k).exit_code == 0
    assert _export(small_files, "--format", "all", out=k).exit_code == 0 and _snapshot(k) == before


def test_routing_shares_carry_no_float_noise(small):
    """Regression (issue 21 trial, F9): the placement's normalisation can leave a share like
    0.2760600400000001; the endpoint picker's ConfigMap writes it as the placement rounds
    shares (9 decimal places)."""
    from fleetplan.export.k8s import ExportOptions, build_bundle

    inst, plan, pl = small
    w = pl.routing[0]
    noisy = pl.model_copy(update={"routing": [w.model_copy(update={"share": w.share + 1e-16 if w.share < 1 else 0.2760600400000001}),
                                              *pl.routing[1:]]})
    assert len(repr(noisy.routing[0].share).split(".")[1]) > 9
    objs = build_bundle(inst, plan, noisy, ExportOptions(formats=frozenset({"k8s"}))).objects
    shares = [x["share"] for rel, os_ in objs.items() if rel.endswith("routing.yaml") for o in os_ if o["kind"] == "ConfigMap"
              for x in yaml.safe_load(o["data"]["fleetplan-routing.yaml"])["kv_routing_weights"]]
    assert shares and all(len(repr(x).partition(".")[2]) <= 9 for x in shares), shares
    assert round(noisy.routing[0].share, 9) in shares


@pytest.mark.parametrize("fmt,where", [("all", "fleetplan.export.k8s.bundle.os.fsync"), ("all", "fleetplan.export.k8s.build_bundle"),
                                       ("controller", "fleetplan.cli.place.write_atomic")])
def test_ctrl_c_says_nothing_was_written(small_files, tmp_path, monkeypatch, fmt, where):
    """Regression (issue 21 trial, F9): Ctrl-C during `export` printed nothing. It now says
    nothing was written and the earlier output is intact (exit 130), as solve does."""
    out = tmp_path / ("k8s" if fmt == "all" else "doc.json")
    assert _export(small_files, "--format", fmt, out=out).exit_code == 0
    before = _snapshot(out) if out.is_dir() else out.read_bytes()
    calls = []

    def stop(*a, **k):
        calls.append(a)
        if len(calls) >= 2:  # a few files in
            raise KeyboardInterrupt

    monkeypatch.setattr(where, stop if where.endswith("fsync") else lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    r = _export(small_files, "--format", fmt, out=out)
    assert r.exit_code == 130, r.output
    text = " ".join(r.output.split())
    assert "interrupted (Ctrl-C): nothing written; the earlier" in text and f"in {out} is intact" in text, text
    assert (_snapshot(out) if out.is_dir() else out.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]  # no temporary left
    new = tmp_path / "new"
    r = _export(small_files, "--format", fmt, out=new)
    assert r.exit_code == 130 and "interrupted (Ctrl-C): nothing written." in " ".join(r.output.split()) and not new.exists()


def test_sigterm_with_the_new_tree_written_keeps_the_earlier_export(small_files, tmp_path):
    """Issue 16: SIGTERM (timeout, Kubernetes, systemd) once the new export's temporary
    directory is written and before it is renamed over the earlier export: exit 143, one
    line, the earlier export byte for byte, no temporary directory left. The child pauses
    there and says so (FLEETPLAN_DEBUG_PAUSE); the signal is sent then."""
    from tests.regression.test_issue16_sigterm import run_until_paused

    out = tmp_path / "k8s"
    assert _export(small_files, "--format", "all", out=out).exit_code == 0
    before = _snapshot(out)
    args = ["export", str(small_files / "placement.json"), "--plan", str(small_files / "plan.json"), "-i", str(small_files / "small.yaml"),
            "--format", "all", "-o", str(out)]
    r = run_until_paused(args, tmp_path)
    assert r.returncode == 143, r.stderr
    assert "interrupted (SIGTERM): nothing written; the earlier" in " ".join(r.stderr.split()) and "Traceback" not in r.stderr
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["k8s", "stderr.txt", "tmpdir"])  # no temporary left


def test_help_says_o_takes_a_directory_for_kubernetes():
    r = runner.invoke(app, ["export", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "FILE|DIR" in r.output


def test_ctrl_c_after_the_rename_says_it_was_written(small_files, tmp_path, monkeypatch):
    out = tmp_path / "k8s"
    assert _export(small_files, "--format", "k8s", out=out).exit_code == 0

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("fleetplan.export.k8s.bundle.shutil.rmtree", stop)  # while removing the earlier export
    r = _export(small_files, "--format", "all", out=out)
    assert r.exit_code == 130 and "after the export was written to" in " ".join(r.output.split()), r.output
    assert (out / "a" / "autoscaling.yaml").is_file()


def _export_colocated(plan_file, tmp_path):
    """The bundled colocated plan placed and exported (k8s part) under tmp_path/k; its plan file."""
    plan = plan_file("llama70b-h100")
    placed = tmp_path / "placement.json"
    assert runner.invoke(app, ["place", str(plan), "-o", str(placed)]).exit_code == 0
    r = runner.invoke(app, ["export", str(placed), "--plan", str(plan), "-o", str(tmp_path / "k"), "--format", "k8s"])
    assert r.exit_code == 0, r.output
    return plan


def test_colocated_routing_says_what_the_plan_assumes_of_the_picker(plan_file, tmp_path):
    """Issue 17 trial: the endpoint picker's ConfigMap of a colocated plan did not say which
    router the replicas' TTFT was sized for (least-work: one M/G/c prompt queue) nor the
    engine schedule; a picker that routes by prefix affinity alone queues more than the
    plan counts. The ConfigMap now carries both and why."""
    plan = _export_colocated(plan_file, tmp_path)
    docs = [d for d in yaml.safe_load_all((tmp_path / "k" / "us-central" / "routing.yaml").read_text()) if d]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    data = yaml.safe_load(cm["data"]["fleetplan-routing.yaml"])
    sched = next(p["schedule"] for p in json.loads(plan.read_text())["pools"] if p["role"] == "replica")
    assert data["router"] == "least-work" and data["replica_schedule"] == sched  # serving.router (issue 40; was replica_router)
    assert "G/G/c" in data["router_assumption"]


def test_colocated_replicas_pass_the_pickers_decode_filter(plan_file, tmp_path):
    """Regression (issue-17 trial): replica pods were labelled llm-d.ai/role:
    prefill-decode, which llm-d's decode-filter (first in the picker's profile, fail-closed)
    drops -- it keeps 'decode' and 'both' -- so no request reached a replica. They are now
    'both'; and each engine is told its slice's tensor parallelism."""
    _export_colocated(plan_file, tmp_path)
    docs = [d for d in yaml.safe_load_all((tmp_path / "k" / "us-central" / "workloads.yaml").read_text()) if d]
    groups = [d for d in docs if d["kind"] == "LeaderWorkerSet"]
    assert groups
    routing = (tmp_path / "k" / "us-central" / "routing.yaml").read_text()
    assert "decode-filter" in routing
    for g in groups:
        tpl = g["spec"]["leaderWorkerTemplate"]["workerTemplate"]
        role = tpl["metadata"]["labels"]["llm-d.ai/role"]
        assert role in ("decode", "both", "prefill")
        if g["metadata"]["labels"]["fleetplan/role"] == "replica":
            assert role == "both"
            chips = int(g["metadata"]["labels"]["fleetplan/shape"].rpartition("x")[2])
            assert f"--tensor-parallel-size={chips}" in tpl["spec"]["containers"][0]["args"]
