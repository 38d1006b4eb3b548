"""Measurements in the wrong unit, from another model, or mislabelled (issue 40 newcomer trial):
``fleetplan calibrate`` and ``fleetplan drift`` refuse them (exit 2) naming the field and the
unit they expect, and never write an empty priors document over an earlier one.

The inputs are the shipped synthetic fixtures (tests/data/calibration/, made by fleetplan's own
model) with one thing broken the way the trial broke it: the Prometheus histograms with their
bounds and sums x1000 (milliseconds in *_seconds series), the benchmark's *_ms keys /1000
(seconds), LLM-Inference-Bench's Latency x1000 (ms), the benchmark's model_id another model's.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app

runner = CliRunner()
DATA = Path(__file__).resolve().parents[1] / "data" / "calibration"
NAME = "llama70b-h100-bf16-p99"
PROM_OPTS = ["--instance", NAME, "--slice", "h100x4", "--schedule", "chunked-512"]
_SECONDS = re.compile(r'^(vllm:\w+_seconds_(?:bucket|sum)\{[^}]*?)(le="([^"]+)")?([^}]*\}) (\S+)$')


def _in_ms(text: str) -> str:
    """A text scrape with every *_seconds histogram's bounds and sums x1000 (milliseconds)."""
    out = []
    for ln in text.splitlines():
        m = _SECONDS.match(ln)
        if m:
            head, le, le_v, tail, v = m.groups()
            if le and le_v != "+Inf":
                le = f'le="{float(le_v) * 1000:g}"'
            if "_sum{" in head:
                v = repr(float(v) * 1000)
            ln = f"{head}{le or ''}{tail} {v}"
        out.append(ln)
    return "\n".join(out) + "\n"


@pytest.fixture()
def ms_scrapes(tmp_path):
    for part in ("before", "after"):
        (tmp_path / f"{part}.prom").write_text(_in_ms((DATA / f"prom_synthetic_{part}.prom").read_text()))
    return tmp_path


def _keep(tmp_path) -> Path:
    keep = tmp_path / "keep.yaml"
    keep.write_text("priors: {hbm_bw_fraction: 0.8}\n")
    return keep


def test_prometheus_histograms_in_milliseconds_are_refused_by_calibrate(ms_scrapes, tmp_path):
    """Before: exit 0, RMS ln error 7.26, and an empty `priors: {}` written over -o."""
    keep = _keep(tmp_path)
    r = runner.invoke(app, ["calibrate", str(ms_scrapes / "after.prom"), "--baseline", str(ms_scrapes / "before.prom"),
                            "--window", "3600", *PROM_OPTS, "-o", str(keep)])
    out = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert "vllm:inter_token_latency_seconds_sum" in out and "seconds" in out and "milliseconds" in out
    assert keep.read_text() == "priors: {hbm_bw_fraction: 0.8}\n"


def test_prometheus_histograms_in_milliseconds_are_refused_by_drift(ms_scrapes, tmp_path):
    """Before: exit 0 'the plan holds' beside a measured TTFT p99 of 811,274 ms."""
    plan = tmp_path / "plan.json"
    assert runner.invoke(app, ["solve", NAME, "--no-source-plans", "-o", str(plan)]).exit_code == 0
    r = runner.invoke(app, ["drift", str(plan), "--metrics", str(ms_scrapes / "after.prom"), "--baseline",
                            str(ms_scrapes / "before.prom"), "--window", "3600"])
    out = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert "vllm:inter_token_latency_seconds_sum" in out and "seconds" in out and "the plan holds" not in out


def _rewrite_csv(src: Path, dst: Path, column: str, factor: float) -> None:
    rows = list(csv.reader(io.StringIO(src.read_text())))
    i = rows[0].index(column)
    for r in rows[1:]:
        r[i] = repr(float(r[i]) * factor)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    dst.write_text(buf.getvalue())


def test_llm_inference_bench_latency_in_milliseconds_is_refused(tmp_path):
    """Before: exit 0 with hbm_bw_fraction 0.001 and decode_step_overhead_ms 12,046 written."""
    bad = tmp_path / "lib_ms.csv"
    _rewrite_csv(DATA / "lib_llama3_70b_h100x4.csv", bad, "Latency", 1000.0)
    keep = _keep(tmp_path)
    r = runner.invoke(app, ["calibrate", str(bad), "--instance", NAME, "--framework", "vLLM", "-o", str(keep)])
    out = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert "Latency" in out and "seconds" in out and "line " in out
    assert keep.read_text() == "priors: {hbm_bw_fraction: 0.8}\n"
    # the real file passes
    assert runner.invoke(app, ["calibrate", str(DATA / "lib_llama3_70b_h100x4.csv"), "--instance", NAME, "--framework", "vLLM"]).exit_code == 0


def test_a_benchmark_with_its_ms_keys_in_seconds_is_refused(tmp_path):
    """Before: TPOT 0.032 ms accepted, multipliers at their bounds, peak-efficiency priors written."""
    doc = json.loads((DATA / "vllm_bench_synthetic.json").read_text())
    for k in [k for k in doc if k.endswith("_ms") and isinstance(doc[k], (int, float))]:
        doc[k] = doc[k] / 1000.0
    bad = tmp_path / "b_seconds.json"
    bad.write_text(json.dumps(doc))
    keep = _keep(tmp_path)
    r = runner.invoke(app, ["calibrate", str(bad), *PROM_OPTS, "-o", str(keep)])
    out = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert re.search(r"(mean|median|p\d+)_(ttft|tpot|itl)_ms", out) and "milliseconds" in out
    assert keep.read_text() == "priors: {hbm_bw_fraction: 0.8}\n"


def test_metrics_under_other_names_say_the_names_expected(tmp_path):
    """Before: calibrate said only 'no measured statistic to fit'."""
    for part in ("before", "after"):
        text = (DATA / f"prom_synthetic_{part}.prom").read_text()
        (tmp_path / f"{part}.prom").write_text(text.replace("vllm:time_to_first_token_seconds", "vllm:ttft_seconds")
                                               .replace("vllm:inter_token_latency_seconds", "vllm:itl_seconds")
                                               .replace("vllm:request_time_per_output_token_seconds", "vllm:tpot_seconds"))
    r = runner.invoke(app, ["calibrate", str(tmp_path / "after.prom"), "--baseline", str(tmp_path / "before.prom"), "--window", "3600",
                            *PROM_OPTS])
    out = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    for name in ("vllm:time_to_first_token_seconds", "vllm:request_time_per_output_token_seconds", "vllm:inter_token_latency_seconds"):
        assert name in out


def test_swapped_scrapes_ask_whether_baseline_is_the_earlier(tmp_path):
    """Before: 'no request finished in the window'."""
    r = runner.invoke(app, ["calibrate", str(DATA / "prom_synthetic_before.prom"), "--baseline", str(DATA / "prom_synthetic_after.prom"),
                            "--window", "3600", *PROM_OPTS])
    out = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert "went down" in out and "is --baseline" in out and "earlier scrape" in out


def _bench_as(tmp_path, model_id) -> Path:
    doc = json.loads((DATA / "vllm_bench_synthetic.json").read_text())
    doc["model_id"] = model_id
    out = tmp_path / "bench.json"
    out.write_text(json.dumps(doc))
    return out


def test_a_benchmark_of_another_model_is_refused_naming_model_id(tmp_path):
    """Before: an 8B model's benchmark fitted to the 70B instance, exit 0, no word of it."""
    bench = _bench_as(tmp_path, "meta-llama/Llama-3.1-8B-Instruct")
    r = runner.invoke(app, ["calibrate", str(bench), *PROM_OPTS])
    out = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert "model_id" in out and "Llama-3.1-8B-Instruct" in out and "--model" in out
    # a catalogue name of another model, and --model naming the served model, are held the same way
    r = runner.invoke(app, ["calibrate", str(_bench_as(tmp_path, "meta-llama/Meta-Llama-3-8B")), *PROM_OPTS])
    assert r.exit_code == 2 and "model_id" in r.output
    r = runner.invoke(app, ["calibrate", str(bench), *PROM_OPTS, "--model", "Meta-Llama-3-70B"])
    assert r.exit_code == 0, r.output


def test_a_benchmark_model_id_that_says_nothing_is_noted(tmp_path):
    r = runner.invoke(app, ["calibrate", str(_bench_as(tmp_path, "my-finetune")), *PROM_OPTS, "--json"])
    assert r.exit_code == 0, r.output
    assert any("my-finetune" in n and "not checked" in n for n in json.loads(r.stdout)["fit"]["notes"])
