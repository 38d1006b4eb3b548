"""``fleetplan calibrate --format llm-inference-bench`` (issue 40): end-to-end static batches
fitted as sums of the roofline's steps (fleetplan.workload.e2e).

* the model: a row's prediction is the perf functions' own prefill plus every decode step,
  summed one by one (the mean-context shortcut is exact, not an approximation);
* known priors come back out of latencies made by that model on LLM-Inference-Bench's grid;
* the real rows (Llama-3-70B on 4 x H100, vLLM and TensorRT-LLM, tests/data/calibration/)
  fit with the error stated in docs/calibration.md;
* bad input names the line, the column and the unit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fleetplan.perf.roofline import decode_step, kv_bytes_per_request, prefill_time_ms
from fleetplan.workload.calibrate import ProfileError, catalogue, resolve_target
from fleetplan.workload.e2e import E2ERow, fit_e2e, load_llm_inference_bench, static_batch_ms

DATA = Path(__file__).resolve().parents[1] / "data" / "calibration"
LIB_70B = DATA / "lib_llama3_70b_h100x4.csv"
HEADER = "Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency,Throughput"


def _target(raw, instance=None):
    return resolve_target(raw, "Meta-Llama-3-70B", "h100-80gb", instance, None)


def test_a_row_is_its_prefill_plus_every_decode_step_one_by_one():
    models, chips = catalogue()
    spec, chip = models["Meta-Llama-3-70B"].spec, chips["h100-80gb"]
    raw = load_llm_inference_bench(str(LIB_70B))
    pr = _target(raw).base.model_copy(update={"hbm_bw_fraction": 0.7, "attention_bw_fraction": 0.45, "prefill_mfu": 0.5,
                                               "decode_step_overhead_ms": 0.8, "prefill_overhead_ms": 1.5})
    sl = chip.slice(4)
    for b, s in ((1, 128), (16, 256), (64, 128)):
        row = E2ERow("e2e", 4, b, s, s, 0.0, (0,))
        by_step = b * float(prefill_time_ms(spec, sl, pr, s)) + sum(
            float(decode_step(spec, sl, pr, b, kv_bytes_per_request(spec, s + j)).step_ms) for j in range(1, s))
        assert static_batch_ms(spec, chip, pr, [row])[0] == pytest.approx(by_step, rel=1e-12)


def test_known_priors_come_back_from_static_batches(tmp_path):
    """Latencies made by the model at known priors on the benchmark's grid (input = output
    128-2,048 tokens, batch 1-64, TP 4) are fitted back to 0.1%."""
    models, chips = catalogue()
    spec, chip = models["Meta-Llama-3-70B"].spec, chips["h100-80gb"]
    raw = load_llm_inference_bench(str(LIB_70B))
    truth = _target(raw).base.model_copy(update={"hbm_bw_fraction": 0.72, "attention_bw_fraction": 0.45, "prefill_mfu": 0.55})
    rows = [E2ERow("e2e", 4, b, s, s, 0.0, (0,)) for s in (128, 256, 512, 1024, 2048) for b in (1, 16, 32, 64)]
    lat = static_batch_ms(spec, chip, truth, rows)
    f = tmp_path / "synthetic.csv"
    f.write_text(HEADER + "\n" + "".join(f"Nvidia H100 GPU,4,vLLM,meta-llama/Meta-Llama-3-70B,{r.input_tokens},{r.batch},{float(t) / 1e3!r},1\n"
                                         for r, t in zip(rows, lat)))
    raw = load_llm_inference_bench(str(f))
    cal = fit_e2e(raw, _target(raw), [4], "vLLM", free=("hbm_bw_fraction", "attention_bw_fraction", "prefill_mfu"))
    for k in ("hbm_bw_fraction", "attention_bw_fraction", "prefill_mfu"):
        assert cal.priors[k] == pytest.approx(getattr(truth, k), rel=1e-3), k
    assert max(abs(p.rel_error) for p in cal.points) < 1e-4


@pytest.mark.parametrize("framework, rms, worst, kv_bw, overhead", [("vLLM", 0.049, 0.091, 0.291, 5.84), ("TensorRT-LLM", 0.048, 0.098, 0.389, 5.33)])
def test_real_llm_inference_bench_rows_fit_with_the_stated_error(framework, rms, worst, kv_bw, overhead):
    """docs/calibration.md's table: Llama-3-70B on 4 x H100, 20 rows per engine, fitted on the
    bundled BF16 instance's priors (its prefill, collectives and per-layer overhead held); RMS
    and worst relative error of the latencies as stated there."""
    raw = load_llm_inference_bench(str(LIB_70B))
    cal = fit_e2e(raw, _target(raw, "llama70b-h100-bf16-p99"), [4], framework)
    (ph,) = cal.phases
    assert ph.points == 20 and ph.r2 > 0.99
    assert ph.rms_rel_error == pytest.approx(rms, abs=0.002)
    assert ph.max_rel_error == pytest.approx(worst, abs=0.002)
    assert cal.priors["attention_bw_fraction"] == pytest.approx(kv_bw, abs=0.002)
    assert cal.priors["decode_step_overhead_ms"] == pytest.approx(overhead, abs=0.02)
    # the weight read and the per-step constant trade (one weight size): the bandwidth sits at its bound
    assert cal.priors["hbm_bw_fraction"] == 1.0 and any(v.name == "hbm_bw_fraction" and v.bound for v in cal.values)
    # latencies alone do not identify the prefill (held: the instance's), and every decode step
    # up to batch 64 is memory-bound (no MFU learnt)
    for name in ("prefill_mfu", "prefill_overhead_ms", "decode_mfu"):
        assert name in cal.not_identified and name not in cal.priors


def test_several_engines_need_a_framework_and_an_unknown_one_is_named():
    raw = load_llm_inference_bench(str(LIB_70B))
    with pytest.raises(ProfileError, match="--framework.*TensorRT-LLM, vLLM"):
        fit_e2e(raw, _target(raw), [4], None)
    with pytest.raises(ProfileError, match="no rows for framework 'llama.cpp'"):
        fit_e2e(raw, _target(raw), [4], "llama.cpp")


def test_the_ttft_file_reads_as_batch_prefills():
    raw = load_llm_inference_bench(str(DATA / "lib_ttft_h100x1.csv"))
    assert raw.rows == 6 and raw.tps == (1,)
    assert {r[5] for r in raw.records} == {"ttft"}
    line, model, hw, chips, fw, kind, s, n, b, t = raw.records[0]
    assert (model, hw, chips, fw, s, n, b) == ("meta-llama/Llama-2-7b-hf", "Nvidia H100 GPU", 1, "vLLM", 1024, 1, 16)
    assert t == pytest.approx(421.6477160962919)  # seconds -> ms
    target = resolve_target(raw, "Meta-Llama-3-8B", "h100-80gb", None, None)
    with pytest.raises(ProfileError, match="1 measurements for"):  # one row per model and engine: too few to fit alone
        fit_e2e(raw, target, None, "vLLM")


@pytest.mark.parametrize("row, where", [
    ("Nvidia H100 GPU,4,vLLM,meta-llama/Meta-Llama-3-70B,128,1,-2.3,1", "line 2, column Latency"),
    ("Nvidia H100 GPU,four,vLLM,meta-llama/Meta-Llama-3-70B,128,1,2.3,1", "line 2, column Num of Hardware"),
    ("Nvidia H100 GPU,4,vLLM,meta-llama/Meta-Llama-3-70B,128.5,1,2.3,1", "line 2, column Input Output Length"),
    (",4,vLLM,meta-llama/Meta-Llama-3-70B,128,1,2.3,1", "line 2, column Hardware"),
])
def test_bad_rows_name_the_line_and_column(tmp_path, row, where):
    f = tmp_path / "bad.csv"
    f.write_text(HEADER + "\n" + row + "\n")
    with pytest.raises(ProfileError) as e:
        load_llm_inference_bench(str(f))
    assert where in e.value.render()


def test_a_missing_column_is_named(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("Hardware,Num of Hardware,Framework,Model,Input Output Length,Throughput\nx,4,vLLM,m,128,1\n")
    with pytest.raises(ProfileError, match="missing columns Batch Size, Latency"):
        load_llm_inference_bench(str(f))


def test_a_row_faster_than_the_roofline_is_excluded(tmp_path):
    lines = [f"Nvidia H100 GPU,4,vLLM,meta-llama/Meta-Llama-3-70B,{s},{b},{t},1" for s, b, t in
             ((128, 1, 2.46), (256, 1, 4.88), (512, 1, 9.82), (1024, 1, 19.6), (128, 16, 2.75), (256, 16, 5.6), (512, 64, 0.01))]
    f = tmp_path / "fast.csv"
    f.write_text(HEADER + "\n" + "\n".join(lines) + "\n")
    raw = load_llm_inference_bench(str(f))
    cal = fit_e2e(raw, _target(raw), [4], "vLLM", free=("hbm_bw_fraction", "attention_bw_fraction"))
    assert [(e.batch, e.prompt_tokens) for e in cal.excluded] == [(64, 512.0)]
    assert np.isfinite([p.predicted_ms for p in cal.points]).all() and len(cal.points) == 6
