"""``fleetplan simulate`` from the command line: the tables, JSON, atomic byte-identical
output, the load sweep's figure, and bad input (exit 2, the option named, nothing
overwritten)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.sim.report import SimReport

runner = CliRunner()
FAST = ["--scale", "0.05", "--duration", "4", "--warmup", "1"]


@pytest.fixture(scope="module")
def gemini_plan_file(plan_file):
    return plan_file("gemini-ironwood")


def test_tables_name_every_pool_and_the_ratios(gemini_plan_file):
    plan = json.loads(gemini_plan_file.read_text())
    pre = next(p for p in plan["pools"] if p["region"] == "us-west" and p["tier"] == "short" and p["role"] == "prefill")
    n = max(1, int(0.05 * pre["slices"] + 0.5))
    r = runner.invoke(app, ["simulate", str(gemini_plan_file), "--region", "us-west", *FAST])
    assert r.exit_code == 0, r.output
    for text in ("us-west short", "us-west long", f"prefill: {n} x {pre['slice']} (of {pre['slices']} planned)", "decode:", "TTFT p99", "TPOT p99",
                 "ITL p99", "Goodput", "plan bound", "sim/plan", "sim/model", "scale 0.05:"):
        assert text in r.output, text


def test_json_and_output_file_are_the_report_and_deterministic(gemini_plan_file, tmp_path):
    out = tmp_path / "sim.json"
    args = ["simulate", str(gemini_plan_file), "--region", "us-east", "--tier", "long", *FAST, "--seed", "7", "--json", "-o", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    rep = SimReport.model_validate_json(r.stdout)  # the document alone on stdout (stderr: a line per phase)
    assert [t.tier for t in rep.tiers] == ["long"] and rep.seed == 7
    first = out.read_bytes()
    assert json.loads(first) == json.loads(r.stdout)
    assert runner.invoke(app, args).exit_code == 0
    assert out.read_bytes() == first


def test_sweep_writes_a_figure(gemini_plan_file, tmp_path):
    import matplotlib.image as mpimg

    png = tmp_path / "sweep.png"
    r = runner.invoke(app, ["simulate", str(gemini_plan_file), "--region", "us-east", "--tier", "long", "--sweep-load", "--duration", "6", "--warmup", "1",
                            "--scale", "0.2", "--png", str(png)])
    assert r.exit_code == 0, r.output
    assert "TTFT and queue wait p99 vs utilisation" in r.output and "SLO: TTFT p99 <= 800 ms" in r.output
    img = mpimg.imread(str(png))
    assert img.shape[0] > 300 and img.shape[1] > 800


@pytest.mark.parametrize("args,needle", [
    (["--region", "mars"], "--region"),
    (["--region", "us-east", "--tier", "huge"], "--tier"),
    (["--region", "us-east", "--scenario", "lose:us-east@01"], "loses us-east itself"),
    (["--region", "us-east", "--scenario", "tomorrow"], "--scenario"),
    (["--region", "us-east", "--scale", "0"], "--scale"),
    (["--region", "us-east", "--scale", "1.5"], "--scale"),
    (["--region", "us-east", "--duration", "0"], "--duration"),
    (["--region", "us-east", "--duration", "nan"], "--duration"),
    (["--region", "us-east", "--warmup", "-1"], "--warmup"),
    (["--region", "us-east", "--arrivals", "bursty"], "--arrivals"),
    (["--region", "us-east", "--arrivals", "trace:/no/such/trace.csv"], "no such file"),
    (["--region", "us-east", "--output-lengths", "long"], "--output-lengths"),
    (["--region", "us-east", "--router", "nearest"], "--router"),
    (["--region", "us-east", "--png", "x.png"], "--sweep-load"),
    (["--region", "us-east", "-i", "gemini-trillium"], "instance_hash"),
    (["--region", "us-east", "--duration", "1e9"], "--scale"),
    (["--region", "us-east", "--trace-format", "azure"], "--trace-format"),
    (["--region", "us-east", "--scale", "1e-9", "--duration", "1"], "fewer than one request"),
    (["--region", "us-east", "--arrivals", "trace:/dev/null"], "not a regular file"),
    (["--region", "us-east", "--sweep-load", "--png", "/tmp"], "--png"),
])
def test_bad_input_exits_2_and_names_the_option(gemini_plan_file, args, needle):
    r = runner.invoke(app, ["simulate", str(gemini_plan_file), *args])
    assert r.exit_code == 2, r.output
    assert needle in r.output


def test_a_placement_must_be_of_this_plan(gemini_plan_file, tmp_path):
    r = runner.invoke(app, ["simulate", str(gemini_plan_file), "--region", "us-east", "--placement", str(gemini_plan_file)])
    assert r.exit_code == 2 and "not a placement" in r.output


def test_failed_run_leaves_earlier_output_intact(gemini_plan_file, tmp_path):
    out = tmp_path / "keep.json"
    out.write_text("earlier\n")
    r = runner.invoke(app, ["simulate", str(gemini_plan_file), "--region", "mars", "-o", str(out)])
    assert r.exit_code == 2 and out.read_text() == "earlier\n"
    r = runner.invoke(app, ["simulate", str(gemini_plan_file), "--region", "us-east", "-o", str(gemini_plan_file)])
    assert r.exit_code == 2 and "input file" in r.output


def test_figure_and_report_must_be_different_files(gemini_plan_file, tmp_path):
    same = tmp_path / "same.json"
    r = runner.invoke(app, ["simulate", str(gemini_plan_file), "-r", "us-east", "--sweep-load", "--png", str(same), "-o", str(same)])
    assert r.exit_code == 2 and "--png file" in r.output and not same.exists()


def test_placement_needs_full_scale(gemini_plan_file, tmp_path):
    pl = tmp_path / "placement.json"
    assert runner.invoke(app, ["place", str(gemini_plan_file), "-o", str(pl)]).exit_code == 0
    r = runner.invoke(app, ["simulate", str(gemini_plan_file), "-r", "us-east", "--placement", str(pl), "--scale", "0.1"])
    assert r.exit_code == 2 and "needs --scale 1" in r.output


@pytest.mark.parametrize("field,value", [("arrivals_rps", float("nan")), ("arrivals_rps", 0.0), ("shed_rps", -1.0)])
def test_edited_plan_loads_are_refused(gemini_plan_file, tmp_path, field, value):
    doc = json.loads(gemini_plan_file.read_text())
    for p in doc["scenarios"][0]["pools"]:
        if p["region"] == "us-east" and p["tier"] == "long":
            p[field] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc).replace("NaN", "NaN"))
    r = runner.invoke(app, ["simulate", str(bad), "-r", "us-east", "-t", "long", *FAST])
    assert r.exit_code == 2, r.output
    assert ("arrivals_rps" in r.output or "shed_rps" in r.output or "no traffic" in r.output)


def test_a_sparse_trace_is_refused_at_once(gemini_plan_file, tmp_path):
    tr = tmp_path / "sparse.csv"
    tr.write_text("timestamp_s,input_tokens,output_tokens\n0,100,10\n1,100,10\n1000000000,100,10\n")
    r = runner.invoke(app, ["simulate", str(gemini_plan_file), "-r", "us-east", "--arrivals", f"trace:{tr}", *FAST])
    assert r.exit_code == 2 and "denser trace" in r.output


def test_sweep_json_is_its_schema_and_too_long_a_sweep_is_refused_at_once(gemini_plan_file, tmp_path):
    import jsonschema

    from fleetplan.sim.sweep import SweepReport

    png = tmp_path / "s.png"
    r = runner.invoke(app, ["simulate", str(gemini_plan_file), "-r", "us-east", "-t", "long", "--sweep-load", "--duration", "4", "--warmup", "1",
                            "--scale", "0.1", "--png", str(png), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    SweepReport.model_validate(doc)
    jsonschema.validate(doc, SweepReport.model_json_schema())
    assert all(p["ttft_ci95"] is None or p["ttft_ci95"][0] >= 0 for p in doc["sweeps"][0]["points"])
    r = runner.invoke(app, ["simulate", str(gemini_plan_file), "-r", "us-east", "--sweep-load", "--duration", "1e7", "--png", str(png)])
    assert r.exit_code == 2 and "--duration" in r.output and "Traceback" not in r.output


def test_an_overloaded_scaled_pool_says_so_and_its_json_keeps_inf_within_the_schema(gemini_plan_file, tmp_path):
    """Rounding a loss scenario's prefill pool to a few slices can push it past 100%:
    the note says OVERLOADED, the model's queue is infinite and the JSON writes "inf",
    which the published schema allows."""
    import jsonschema

    plan = json.loads(gemini_plan_file.read_text())
    sc = next(s["name"] for s in plan["scenarios"] if s["kind"] == "loss" and s["lost_region"] != "us-east")
    hit = None
    for scale in ("0.07", "0.09", "0.11", "0.13", "0.15", "0.19", "0.21", "0.23"):
        r = runner.invoke(app, ["simulate", str(gemini_plan_file), "-r", "us-east", "-t", "short", "--scenario", sc, "--scale", scale, "--duration", "3",
                                "--warmup", "1", "--json"])
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        if any("OVERLOADED -- prefill" in n for t in doc["tiers"] for n in t["notes"]):
            hit = doc
            break
    assert hit is not None, "no scale rounded the pool past 100%"
    jsonschema.validate(hit, SimReport.model_json_schema())
    vals = [m["model"] for t in hit["tiers"] for p in t["pools"] for m in p["metrics"]]
    assert "inf" in vals


def test_replica_sweep_names_the_routers_queue_not_mg1(plan_file, tmp_path):
    """Issue 17 trial: the replica sweep's columns and footnote said "M/G/1 wait per replica
    (the arrivals split at random ...)" for a least-work pool, whose model queues the prompts
    M/G/c over the replicas. The table now names the pool's schedule and router and the
    column the router's queue."""
    plan = plan_file("llama70b-h100-bf16-p99")
    r = runner.invoke(app, ["simulate", str(plan), "--region", "us-central", "--sweep-load", "--duration", "4", "--warmup", "1",
                            "--png", str(tmp_path / "s.png")])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    # (the header cells wrap at the console's width: "M/G/c" heads the router's column)
    assert "least-work routing" in text and "M/G/c" in text and "M/G/1 per replica" not in text.split("queue: steady")[0]
    assert "sim TPOT" in text and "TPOT p99: the SLO-class requests' simulated TPOT" in text
    assert "M/G/1 wait per replica (the arrivals split at random" not in text
