"""``fleetplan.workload.calibrate``: the catalogue, the readers' validation, the fit on
synthetic data (exact recovery), on Splitwise's A100/H100 measurements (sane values,
reproduction within a pinned error) and on Vidur's GEMM profiles, and one prediction
re-derived by hand.

The public profiles are read in place from the shared data directory (never copied into
the repository); the tests that need them skip when it is absent.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from fleetplan.instance.schema import Priors
from fleetplan.perf.roofline import decode_step, kv_bytes_per_request, prefill_time_ms
from fleetplan.workload.calibrate import (
    CSV_COLUMNS,
    Point,
    ProfileError,
    calibrate,
    catalogue,
    load_profile,
    predict_ms,
    resolve_target,
)

DATA = Path(os.environ.get("FLEETPLAN_DATA", "/work/shared/data"))
SPLITWISE = DATA / "splitwise-perf" / "perf_model.csv"
VIDUR = DATA / "vidur-profiling" / "compute"
needs_data = pytest.mark.skipif(not SPLITWISE.is_file(), reason=f"public profiles not found at {DATA} (set FLEETPLAN_DATA)")
needs_vidur = pytest.mark.skipif(not VIDUR.is_dir(), reason=f"Vidur profiles not found under {VIDUR} (set FLEETPLAN_DATA)")


@pytest.fixture(scope="module")
def splitwise():
    if not SPLITWISE.is_file():
        pytest.skip(f"public profiles not found at {DATA}")
    return load_profile(str(SPLITWISE))


# --------------------------------------------------------------------------- catalogue


def _params(L, d, q, kv, hd, ffn, vocab, gated, tied, biases):
    """Parameters from the architecture, written out independently of the catalogue."""
    attn = d * (q + 2 * kv) * hd + q * hd * d
    mlp = (3 if gated else 2) * d * ffn
    norms = (4 * d if biases else 2 * d)  # two norms per layer (weight, and bias for LayerNorm)
    bias = (q + 2 * kv) * hd + d + ffn + d if biases else 0
    emb = vocab * d * (1 if tied else 2)
    final = 2 * d if biases else d
    extra = 2 * d if biases else 0  # BLOOM's word_embeddings_layernorm
    return L * (attn + mlp + norms + bias) + emb + final + extra


@pytest.mark.parametrize("name,shape", [
    ("llama2-70b", (80, 8192, 64, 8, 128, 28672, 32000, True, False, False)),
    ("Llama-2-7b-hf", (32, 4096, 32, 32, 128, 11008, 32000, True, False, False)),
    ("Meta-Llama-3-8B", (32, 4096, 32, 8, 128, 14336, 128256, True, False, False)),
    ("Meta-Llama-3-70B", (80, 8192, 64, 8, 128, 28672, 128256, True, False, False)),
    ("bloom-176b", (70, 14336, 112, 112, 128, 57344, 250880, False, True, True)),
])
def test_catalogue_parameter_counts_follow_from_the_shapes(name, shape):
    m = catalogue()[0][name]
    assert m.spec.total_params_b * 1e9 == pytest.approx(_params(*shape), rel=1e-12)
    assert (m.spec.layers, m.spec.d_model, m.query_heads, m.spec.attention.kv_heads, m.spec.attention.head_dim, m.ffn_dim) == shape[:6]
    assert m.spec.bytes_per_weight == 2 and m.spec.bytes_per_kv_element == 2


def test_catalogue_chips_are_the_datasheet_peaks():
    chips = catalogue()[1]
    assert (chips["a100-80gb"].peak_tflops, chips["a100-80gb"].hbm_tbps, chips["a100-80gb"].hbm_gb) == (312, 2.039, 80)
    assert (chips["h100-80gb"].peak_tflops, chips["h100-80gb"].hbm_tbps, chips["h100-80gb"].hbm_gb) == (989, 3.35, 80)
    sl = chips["h100-80gb"].slice(4)
    assert (sl.chips, sl.peak_tflops, sl.hbm_tbps, sl.hbm_gb) == (4, 4 * 989, 4 * 3.35, 320)


# --------------------------------------------------------------------------- synthetic recovery


def _write(tmp_path, text, name="p.csv"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


def test_generic_csv_recovers_known_priors_exactly(tmp_path):
    """Times made by fleetplan's own roofline at known priors come back out of the fit."""
    models, chips = catalogue()
    m, c = models["llama2-70b"].spec, chips["h100-80gb"]
    truth = Priors(prefill_mfu=0.45, decode_mfu=0.3, hbm_bw_fraction=0.7, hbm_workspace_gb_per_chip=0, hbm_headroom_fraction=0,
                   tpot_p99_inflation=1, prefill_overhead_ms=12.0, decode_step_overhead_ms=5.0)
    lines = ["# synthetic: fleetplan roofline at known priors", ",".join(CSV_COLUMNS)]
    for tp in (4, 8):
        sl = c.slice(tp)
        for s, b in ((256, 1), (1024, 1), (4096, 1), (16384, 1), (512, 8), (2048, 4)):
            t = b * float(prefill_time_ms(m, sl, truth, s))
            lines.append(f"prefill,{tp},{b},{s},,{t!r}")
        for b, ctx in ((1, 600), (8, 600), (32, 2000), (128, 1200), (256, 800), (512, 600), (512, 3000)):
            t = float(decode_step(m, sl, truth, b, kv_bytes_per_request(m, ctx)).step_ms)
            lines.append(f"decode,{tp},{b},,{ctx},{t!r}")
    raw = load_profile(_write(tmp_path, "\n".join(lines) + "\n"))
    assert raw.format == "csv" and raw.rows == 26
    cal = calibrate(raw, resolve_target(raw, "llama2-70b", "h100-80gb"))
    for k in ("prefill_mfu", "decode_mfu", "hbm_bw_fraction", "prefill_overhead_ms", "decode_step_overhead_ms"):
        assert cal.priors[k] == pytest.approx(getattr(truth, k), rel=1e-3), k
    assert not cal.not_identified
    assert all(ph.max_rel_error < 1e-3 for ph in cal.phases)


def test_decode_mfu_left_out_when_no_point_is_compute_bound(tmp_path):
    models, chips = catalogue()
    m, c = models["llama2-70b"].spec, chips["a100-80gb"]
    truth = Priors(prefill_mfu=0.5, decode_mfu=0.5, hbm_bw_fraction=0.8, hbm_workspace_gb_per_chip=0, hbm_headroom_fraction=0,
                   tpot_p99_inflation=1, decode_step_overhead_ms=3.0)
    rows = [",".join(CSV_COLUMNS)]
    for b in (1, 2, 4, 8, 16):  # far below the ridge: every step is memory-bound
        rows.append(f"decode,8,{b},,1000,{float(decode_step(m, c.slice(8), truth, b, kv_bytes_per_request(m, 1000)).step_ms)!r}")
    cal = calibrate(load_profile(_write(tmp_path, "\n".join(rows))), resolve_target(load_profile(_write(tmp_path, "\n".join(rows))), "llama2-70b", "a100-80gb"))
    assert "decode_mfu" in cal.not_identified and "decode_mfu" not in cal.priors
    assert cal.priors["hbm_bw_fraction"] == pytest.approx(0.8, rel=1e-3)
    assert cal.priors["decode_step_overhead_ms"] == pytest.approx(3.0, rel=1e-3)


# --------------------------------------------------------------------------- Splitwise

# Measured with this code on the Splitwise llama2-70b rows (medians of the repetitions;
# docs/calibration.md has the table). Each bound is the measured error rounded up by about
# two percentage points, so a regression in the readers or the fit shows, and a change in
# the last digit of a solver does not. Columns: RMS and max relative error of prefill, of
# decode. The roofline does not describe all of the data (prefill at TP 8 scales worse
# than the peak FLOP/s; decode is nearly flat in TP), hence the large prefill bounds.
# Since the step model holds the TP all-reduces (issue 17; at the default NCCL DGX-H100
# priors for every chip), a100 x 2 measures 5.1% / 13.7% on prefill (the 128-token prompt,
# where the 32 ms per-request overhead the fit needs elsewhere overshoots): bound raised.
SPLITWISE_BOUNDS = {
    ("a100-80gb", (2,)): (0.06, 0.15, 0.08, 0.18),
    ("a100-80gb", (4,)): (0.15, 0.24, 0.05, 0.09),
    ("a100-80gb", (8,)): (0.20, 0.37, 0.05, 0.12),
    ("a100-80gb", (2, 4, 8)): (0.19, 0.49, 0.14, 0.26),
    ("h100-80gb", (2,)): (0.15, 0.30, 0.08, 0.26),
    ("h100-80gb", (4,)): (0.21, 0.44, 0.05, 0.11),
    ("h100-80gb", (8,)): (0.29, 0.60, 0.05, 0.11),
    ("h100-80gb", (2, 4, 8)): (0.27, 0.65, 0.14, 0.25),
}


@needs_data
@pytest.mark.parametrize("chip,tps", list(SPLITWISE_BOUNDS))
def test_splitwise_llama2_70b_fit_is_sane_and_reproduces_the_times(splitwise, chip, tps):
    cal = calibrate(splitwise, resolve_target(splitwise, "llama2-70b", chip), list(tps))
    pri = cal.priors
    assert 0 < pri["prefill_mfu"] <= 1 and 0 < pri["hbm_bw_fraction"] <= 1
    assert pri["prefill_overhead_ms"] >= 0 and pri["decode_step_overhead_ms"] >= 0
    assert 0 < pri.get("decode_mfu", 1.0) <= 1
    Priors.model_validate({**cal.fitted.model_dump(), **pri})  # inside the schema's ranges
    assert cal.tps == tps
    stats = {ph.phase: ph for ph in cal.phases}
    rms_p, max_p, rms_d, max_d = SPLITWISE_BOUNDS[(chip, tps)]
    assert stats["prefill"].rms_rel_error <= rms_p and stats["prefill"].max_rel_error <= max_p
    assert stats["decode"].rms_rel_error <= rms_d and stats["decode"].max_rel_error <= max_d
    assert stats["prefill"].r2 > 0.94  # prefill grows 20x over the grid; the fit follows it
    # The report's predictions are fleetplan's perf functions at the written priors.
    models, chips = catalogue()
    for p in cal.points:
        pt = Point(p.phase, p.tp, p.batch, p.prompt_tokens, p.context_tokens, p.measured_ms, (p.line,), "")
        assert predict_ms([pt], models["llama2-70b"].spec, chips[chip], cal.fitted)[0] == pytest.approx(p.predicted_ms, rel=1e-12)


# The medians printed in the data README (section 4), an independent source: prefill ms at
# prompt 512 / 2048 / 8192 (batch 1) and decode ms per step at batch 1 / 16 / 64 (prompt
# 512, 128 output tokens, so the residents hold 512 + 64 tokens on average).
README_MEDIANS = {
    ("a100-80gb", 2): ((196.9, 688.1, 2990.2), (54.9, 65.5, 67.2)),
    ("a100-80gb", 4): ((127.0, 403.3, 2278.5), (45.0, 48.5, 72.9)),
    ("a100-80gb", 8): ((94.3, 274.2, 1549.8), (44.9, 50.4, 71.6)),
    ("h100-80gb", 2): ((83.8, 310.3, 1339.8), (37.0, 42.0, 42.3)),
    ("h100-80gb", 4): ((59.6, 200.7, 953.6), (29.7, 32.8, 52.4)),
    ("h100-80gb", 8): ((53.4, 136.8, 844.9), (29.8, 34.2, 50.2)),
}
# Max relative error against those medians, measured per-TP fit: a100 4.4/17.2/25.9% prefill,
# 9.1/7.1/9.4% decode; h100 15.1/23.2/35.0% prefill, 7.4/8.8/6.3% decode. Pinned a little above.
README_BOUNDS = {("a100-80gb", 2): (0.06, 0.11), ("a100-80gb", 4): (0.19, 0.09), ("a100-80gb", 8): (0.28, 0.11),
                 ("h100-80gb", 2): (0.17, 0.09), ("h100-80gb", 4): (0.25, 0.10), ("h100-80gb", 8): (0.37, 0.08)}


@needs_data
@pytest.mark.parametrize("chip,tp", list(README_MEDIANS))
def test_fitted_priors_reproduce_the_published_medians(splitwise, chip, tp):
    cal = calibrate(splitwise, resolve_target(splitwise, "llama2-70b", chip), [tp])
    models, chips = catalogue()
    m, sl = models["llama2-70b"].spec, chips[chip].slice(tp)
    pri = cal.fitted
    pre, dec = README_MEDIANS[(chip, tp)]
    bound_p, bound_d = README_BOUNDS[(chip, tp)]
    for s, meas in zip((512, 2048, 8192), pre):
        assert abs(float(prefill_time_ms(m, sl, pri, s)) / meas - 1) <= bound_p, (s, meas)
    for b, meas in zip((1, 16, 64), dec):
        if tp == 2 and b == 64:
            continue  # the batch-64 run at TP 2 did not run as one batch (its prefill beats the roofline): excluded
        pred = float(decode_step(m, sl, pri, b, kv_bytes_per_request(m, 576)).step_ms)
        assert abs(pred / meas - 1) <= bound_d, (b, meas, pred)


@needs_data
def test_one_prediction_by_hand(splitwise):
    """a100-80gb x 8, llama2-70b: the roofline arithmetic written out, at the fitted priors."""
    cal = calibrate(splitwise, resolve_target(splitwise, "llama2-70b", "a100-80gb"), [8])
    mfu, o_p = cal.priors["prefill_mfu"], cal.priors["prefill_overhead_ms"]
    bw, mfu_d, o_d = cal.priors["hbm_bw_fraction"], cal.priors["decode_mfu"], cal.priors["decode_step_overhead_ms"]
    A = 68.976648192e9           # parameters (llama2-70b, all active)
    L, d = 80, 8192              # layers, d_model
    peak = 8 * 312e12            # FLOP/s, 8 A100s at BF16 dense
    hbm = 8 * 2.039e12           # bytes/s
    # the TP-8 all-reduces at the default (NCCL DGX-H100) collective priors: two per layer of
    # tokens x d x 2 bytes, ring over 8 GPUs at 300 GB/s x 0.730 (NVLink 3 per direction)
    def allreduces_ms(tokens):
        return 2 * L * (18.26 + 14 * 0.789 + 1.75 * tokens * d * 2 / (300e9 * 0.730) * 1e6) / 1e3

    # prefill of one 2048-token prompt: (2 A s + 2 L d s^2) FLOP at peak x MFU, the all-reduces, the overhead
    s = 2048
    flops = 2 * A * s + 2 * L * d * s * s  # 2.8253e14 + 5.4976e12 FLOP
    by_hand = flops / (peak * mfu) * 1e3 + allreduces_ms(s) + o_p
    got = next(p for p in cal.points if p.phase == "prefill" and p.prompt_tokens == 2048 and p.batch == 1)
    assert got.predicted_ms == pytest.approx(by_hand, rel=1e-12)
    # a batch of 16 prompts of 512 tokens is 16 requests' work and 16 overheads
    by_hand16 = 16 * ((2 * A * 512 + 2 * L * d * 512**2) / (peak * mfu) * 1e3 + allreduces_ms(512) + o_p)
    got16 = next(p for p in cal.points if p.phase == "prefill" and p.batch == 16)
    assert got16.predicted_ms == pytest.approx(by_hand16, rel=1e-12)
    # decode step with 16 residents: weights (2 bytes each) at hbm x bw or 2 A B at peak x decode
    # MFU, whichever is larger, plus 16 x KV of their context at hbm x bw, the all-reduces of 16
    # tokens and the overhead
    dp = next(p for p in cal.points if p.phase == "decode" and p.batch == 16)
    kv_per_token = 2 * L * 8 * 128 * 2   # K and V x layers x kv_heads x head_dim x 2 bytes = 327,680 bytes
    w_ms = A * 2 / (hbm * bw) * 1e3
    kv_ms = 16 * dp.context_tokens * kv_per_token / (hbm * bw) * 1e3
    comp_ms = 2 * A * 16 / (peak * mfu_d) * 1e3
    assert dp.predicted_ms == pytest.approx(max(w_ms, comp_ms) + kv_ms + allreduces_ms(16) + o_d, rel=1e-12)
    # the residents' context: prompt 512 + half of the 128 tokens generated
    assert dp.context_tokens == pytest.approx(512 + 64, abs=1)


@needs_data
def test_runs_beating_the_roofline_are_excluded_whole(splitwise):
    cal = calibrate(splitwise, resolve_target(splitwise, "llama2-70b", "a100-80gb"), [2])
    ex = {(e.phase, e.tp, e.batch, e.prompt_tokens) for e in cal.excluded}
    # prompt_time 794 ms for 64 x 512 tokens would need 9x the peak FLOP/s of two A100s
    assert ex == {("prefill", 2, 64, 512.0), ("decode", 2, 64, 512.0)}
    bad = next(e for e in cal.excluded if e.phase == "prefill")
    assert bad.measured_ms < bad.floor_ms
    assert not any(p.batch == 64 for p in cal.points)


@needs_data
def test_pcap_selects_its_own_rows_and_documents_the_shared_token_time(splitwise):
    cal = calibrate(splitwise, resolve_target(splitwise, "llama2-70b", "h100-80gb-pcap"), [8])
    ref = calibrate(splitwise, resolve_target(splitwise, "llama2-70b", "h100-80gb"), [8])
    assert cal.priors["prefill_mfu"] < ref.priors["prefill_mfu"]  # the power cap slows prefill
    assert cal.priors["hbm_bw_fraction"] == ref.priors["hbm_bw_fraction"]  # same token_time column
    assert any("power-capped" in n for n in cal.notes)


@needs_data
def test_same_input_same_document(splitwise):
    t = resolve_target(splitwise, "llama2-70b", "h100-80gb")
    assert calibrate(splitwise, t).document() == calibrate(splitwise, t).document()


# --------------------------------------------------------------------------- Vidur


@needs_vidur
@pytest.mark.parametrize("hw,model", [("a100", "Llama-2-70b-hf"), ("h100", "Llama-2-70b-hf"), ("a100", "Meta-Llama-3-8B")])
def test_vidur_fits_gemm_efficiency_and_weight_bandwidth(hw, model):
    path = VIDUR / hw / "meta-llama" / model / "mlp.csv"
    raw = load_profile(str(path))
    assert raw.format == "vidur"
    cal = calibrate(raw, resolve_target(raw))  # model and chip from the path
    assert set(cal.priors) == {"prefill_mfu", "hbm_bw_fraction"}
    assert 0.5 < cal.priors["prefill_mfu"] <= 1 and 0.5 < cal.priors["hbm_bw_fraction"] <= 1
    assert {"prefill_overhead_ms", "decode_step_overhead_ms", "decode_mfu"} <= set(cal.not_identified)
    stats = {ph.phase: ph for ph in cal.phases}
    # measured on these three: compute-bound R^2 0.994-0.999, RMS 6.4-11.5%; memory-bound
    # RMS 14.8-16.8%, max 32-49% (the worst points are the steps of GEMMs just above 128
    # tokens, tile/wave quantisation the roofline does not have). Pinned a little above.
    assert stats["compute-bound"].r2 > 0.99 and stats["compute-bound"].rms_rel_error < 0.13
    assert stats["memory-bound"].rms_rel_error < 0.19 and stats["memory-bound"].max_rel_error < 0.52
    assert cal.tps == (1, 2, 4, 8)


@needs_vidur
def test_vidur_rejects_another_models_profile(tmp_path):
    src = VIDUR / "a100" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv"
    with pytest.raises(ProfileError, match="no rows for model 'Meta-Llama-3-70B'; it holds: Llama-2-7b-hf"):
        resolve_target(load_profile(str(src)), "Meta-Llama-3-70B", "a100-80gb")  # the path names the model
    renamed = tmp_path / "profile.csv"  # outside Vidur's layout: only the shape columns can tell
    renamed.write_bytes(src.read_bytes())
    raw = load_profile(str(renamed))
    with pytest.raises(ProfileError, match="model shape differs from Meta-Llama-3-70B's: n_embd 4096 \\(model 8192\\)"):
        resolve_target(raw, "Meta-Llama-3-70B", "a100-80gb")
    assert resolve_target(raw, "Llama-2-7b-hf", "a100-80gb").model.name == "Llama-2-7b-hf"


# --------------------------------------------------------------------------- validation

SW_HEADER = "model,hardware,prompt_size,batch_size,token_size,peak_power,average_power,prompt_time,token_time,e2e_time,tensor_parallel"
SW_ROW = "llama2-70b,a100-80gb,512,1,128,1.0,0.7,196.2,54.8,7168.9,2"


@pytest.mark.parametrize("text,needles", [
    ("", ["line 1", "empty"]),
    (SW_HEADER + "\n", ["line 2", "no data rows"]),
    (SW_HEADER.replace(",token_time", "") + "\n" + SW_ROW.replace(",54.8", "") + "\n", ["line 1", "missing column token_time"]),
    (SW_HEADER + "\n" + SW_ROW + "\n" + SW_ROW.replace("196.2", "-3.5") + "\n", ["line 3, column prompt_time", "negative", "ms"]),
    (SW_HEADER + "\n" + SW_ROW.replace(",1,128", ",0,128") + "\n", ["line 2, column batch_size", "zero"]),
    (SW_HEADER + "\n" + SW_ROW.replace("54.8", "fast") + "\n", ["line 2, column token_time", "not a number", "ms per decode iteration"]),
    (SW_HEADER + "\n" + SW_ROW.replace("54.8", "nan") + "\n", ["line 2, column token_time", "finite"]),
    (SW_HEADER + "\n" + SW_ROW.replace(",2", ",2.5") + "\n", ["line 2, column tensor_parallel", "whole number"]),
    (SW_HEADER + "\n" + SW_ROW + "\n\n" + '{"model": "llama2-70b", "prompt_time": 196.2}' + "\n", ["line 4", "JSON line"]),
    (SW_HEADER + "\n" + SW_ROW + "\n" + ",".join(CSV_COLUMNS) + "\n", ["line 3", "csv header line in the middle"]),
    (SW_HEADER + "\n" + SW_ROW + "\n" + SW_ROW.rsplit(",", 3)[0] + "\n", ["line 3", "8 fields, but the header has 11"]),
    ('{"phase": "prefill"}\n', ["line 1", "JSON line"]),
    ("a,b,c\n1,2,3\n", ["line 1", "not the header of a known profile format"]),
    (",".join(CSV_COLUMNS) + "\nprefill,8,1,512,100,90\n", ["line 2, column context_tokens", "prefill row"]),
    (",".join(CSV_COLUMNS) + "\nverify,8,1,512,,90\n", ["line 2, column phase", "prefill or decode"]),
    (",".join(CSV_COLUMNS) + ",time_s\nprefill,8,1,512,,90,0.09\n", ["line 1", "unknown column time_s"]),
    (",".join(CSV_COLUMNS) + "\ndecode,8,16,,,30\n", ["line 2, column context_tokens", "missing value", "tokens"]),
])
def test_bad_profiles_name_the_line_and_column(tmp_path, text, needles):
    with pytest.raises(ProfileError) as e:
        load_profile(_write(tmp_path, text))
    msg = e.value.render()
    assert msg.startswith("invalid profile ")
    for n in needles:
        assert n in msg, (n, msg)


def test_wrong_format_option_is_named(tmp_path):
    with pytest.raises(ProfileError, match="this is a splitwise profile header, not vidur; use --format splitwise"):
        load_profile(_write(tmp_path, SW_HEADER + "\n" + SW_ROW + "\n"), "vidur")


def test_many_bad_rows_are_counted_after_twenty(tmp_path):
    text = SW_HEADER + "\n" + "\n".join(SW_ROW.replace("196.2", "-1") for _ in range(30)) + "\n"
    with pytest.raises(ProfileError) as e:
        load_profile(_write(tmp_path, text))
    assert len(e.value.problems) == 21 and "and 10 more problems" in e.value.problems[-1].message


def test_comment_lines_keep_the_file_line_numbers(tmp_path):
    text = "# source: my bench\n# second comment\n" + ",".join(CSV_COLUMNS) + "\nprefill,8,1,512,,90\nprefill,8,1,-5,,90\n"
    with pytest.raises(ProfileError, match="line 5, column prompt_tokens"):
        load_profile(_write(tmp_path, text))


def test_unknown_model_and_tp_are_input_errors(tmp_path):
    raw = load_profile(_write(tmp_path, SW_HEADER + "\n" + SW_ROW + "\n"))
    with pytest.raises(ProfileError, match="unknown model 'gpt-9'"):
        resolve_target(raw, "gpt-9", "a100-80gb")
    with pytest.raises(ProfileError, match="no rows for model 'bloom-176b'"):
        resolve_target(raw, "bloom-176b", "a100-80gb")
    t = resolve_target(raw, "llama2-70b", "a100-80gb")
    with pytest.raises(ProfileError, match="no rows with tensor parallelism 4"):
        calibrate(raw, t, [4])
    with pytest.raises(ProfileError, match="at least 3"):
        calibrate(raw, t)  # one prefill point cannot fit two parameters


def test_every_fittable_value_rounds_into_the_schema():
    from fleetplan.workload.calibrate import _round_prior

    assert _round_prior("prefill_mfu", 0.00049) == 0.001 and _round_prior("hbm_bw_fraction", 1.00004) == 1.0
    assert _round_prior("decode_step_overhead_ms", -1e-12) == 0.0
    assert math.isclose(_round_prior("prefill_overhead_ms", 35.6444), 35.644)
    assert np.isfinite(_round_prior("decode_mfu", 0.148))


def test_non_utf8_names_the_line(tmp_path):
    p = tmp_path / "p.csv"
    p.write_bytes((",".join(CSV_COLUMNS) + "\nprefill,8,1,512,,90\nprefill,8,1,1024,,1\xff0\n").encode("latin-1"))
    with pytest.raises(ProfileError, match="line 3: not UTF-8 text"):
        load_profile(str(p))
