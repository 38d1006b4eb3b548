"""The joint step-prior fit (fleetplan.workload.stepfit, calibrate --terms physics): known
priors come back out of times made by the perf functions; what the points cannot tell
apart is held and said; the fit's predictions are the perf functions'."""

from __future__ import annotations

import pytest

from fleetplan.instance.schema import Priors
from fleetplan.perf.roofline import decode_step, kv_bytes_per_request, prefill_time_ms
from fleetplan.workload.calibrate import CSV_COLUMNS, calibrate, catalogue, load_profile, resolve_target
from fleetplan.workload.stepfit import StepPoint, fit_step_priors, predict_points, step_columns

TRUTH = dict(prefill_mfu=0.6, decode_mfu=0.45, hbm_bw_fraction=0.85, hbm_workspace_gb_per_chip=0, hbm_headroom_fraction=0,
             tpot_p99_inflation=1, attention_bw_fraction=0.5, attention_mfu=0.4, layer_overhead_us=20.0, collective_latency_us=8.0,
             collective_hop_latency_us=1.5, collective_bw_fraction=0.6, decode_step_overhead_ms=0.5, prefill_overhead_ms=2.0)
BASE = Priors(prefill_mfu=0.5, decode_mfu=0.5, hbm_bw_fraction=0.8, hbm_workspace_gb_per_chip=0, hbm_headroom_fraction=0, tpot_p99_inflation=1)
FREE = ["hbm_bw_fraction", "decode_mfu", "prefill_mfu", "attention_bw_fraction", "attention_mfu", "decode_step_overhead_ms",
        "prefill_overhead_ms", "collective_bw_fraction", "collective_latency_us", "layer_overhead_us", "collective_hop_latency_us"]


def _points(spec, chip, truth, tps=(1, 2, 8)):
    pts = []
    for tp in tps:
        sl = chip.slice(tp)
        for s in (512, 8192, 32768):
            pts.append(StepPoint("prefill", tp, 1, s, float(prefill_time_ms(spec, sl, truth, s))))
        for b in (1, 16, 256):
            for ctx in (512, 32768):
                pts.append(StepPoint("decode", tp, b, ctx, float(decode_step(spec, sl, truth, b, kv_bytes_per_request(spec, ctx)).step_ms)))
    return pts


@pytest.fixture(scope="module")
def two_models():
    models, chips = catalogue()
    chip = chips["h100-80gb"]
    truth = Priors(**TRUTH)
    out = []
    for name in ("Meta-Llama-3-8B", "Meta-Llama-3-70B"):
        spec = models[name].spec
        pts = _points(spec, chip, truth)
        out.append((spec, pts, step_columns(pts, spec, chip.slice, BASE)))
    return chip, truth, out


def test_every_step_prior_comes_back_from_two_models(two_models):
    chip, truth, groups = two_models
    pts = [p for _, ps, _ in groups for p in ps]
    cols = {k: __import__("numpy").concatenate([c[k] for _, _, c in groups]) for k in groups[0][2]}
    fit = fit_step_priors(pts, None, chip.slice, BASE, FREE, cols)
    assert not fit.not_identified
    for k in FREE:
        assert fit.values[k] == pytest.approx(getattr(truth, k), rel=2e-3, abs=2e-3), k
    assert abs(fit.rel_errors).max() < 1e-3


def test_one_model_cannot_tell_the_layer_overhead_from_the_step_overheads(two_models):
    chip, truth, groups = two_models
    spec, pts, cols = groups[1]
    fit = fit_step_priors(pts, spec, chip.slice, BASE, FREE, cols)
    assert "layer_overhead_us" in fit.not_identified and "collinear" in fit.not_identified["layer_overhead_us"]
    assert fit.priors.layer_overhead_us == BASE.layer_overhead_us  # held
    assert abs(fit.rel_errors).max() < 1e-3  # the step overheads absorb 80 layers x 20 us exactly


def test_without_one_chip_points_the_collective_latency_is_held(two_models):
    chip, truth, groups = two_models
    spec, _, _ = groups[1]
    pts = _points(spec, chip, truth, tps=(2, 8))
    fit = fit_step_priors(pts, spec, chip.slice, BASE, FREE)
    assert "collective_latency_us" in fit.not_identified
    assert fit.priors.collective_latency_us == BASE.collective_latency_us


def test_no_collective_term_on_one_chip_is_not_identified():
    models, chips = catalogue()
    spec, chip = models["Meta-Llama-3-8B"].spec, chips["h100-80gb"]
    pts = _points(spec, chip, Priors(**TRUTH), tps=(1,))
    fit = fit_step_priors(pts, spec, chip.slice, BASE, FREE)
    for k in ("collective_bw_fraction", "collective_latency_us", "collective_hop_latency_us"):
        assert "no point exercises" in fit.not_identified[k]


def test_predictions_are_the_perf_functions(two_models):
    chip, _, groups = two_models
    spec, pts, cols = groups[0]
    pr = Priors(**{**TRUTH, "hbm_bw_fraction": 0.7, "attention_mfu": 0.05, "collective_latency_us": 30.0})
    got = predict_points(cols, pts, pr)
    for p, g in zip(pts, got):
        sl = chip.slice(p.chips)
        want = (float(prefill_time_ms(spec, sl, pr, p.tokens)) if p.phase == "prefill"
                else float(decode_step(spec, sl, pr, p.batch, kv_bytes_per_request(spec, p.tokens)).step_ms))
        assert g == pytest.approx(want, rel=1e-12)


def test_auto_allreduce_columns_keep_the_min_exact():
    """With allreduce_algorithm auto the step takes the faster of one-shot and ring at each
    size; the fit's columns hold both, so its model equals the perf functions wherever the
    switch falls, and the fit recovers priors made with it."""
    models, chips = catalogue()
    spec, chip = models["Meta-Llama-3-70B"].spec, chips["h100-80gb"]
    base = BASE.model_copy(update={"allreduce_algorithm": "auto"})
    truth = Priors(**{**TRUTH, "allreduce_algorithm": "auto"})
    pts = _points(spec, chip, truth, tps=(1, 4, 8))
    cols = step_columns(pts, spec, chip.slice, base)
    for pr in (truth, truth.model_copy(update={"collective_latency_us": 60.0, "collective_bw_fraction": 0.2})):
        got = predict_points(cols, pts, pr)
        for p, g in zip(pts, got):
            sl = chip.slice(p.chips)
            want = (float(prefill_time_ms(spec, sl, pr, p.tokens)) if p.phase == "prefill"
                    else float(decode_step(spec, sl, pr, p.batch, kv_bytes_per_request(spec, p.tokens)).step_ms))
            assert g == pytest.approx(want, rel=1e-12)
    start = truth.model_copy(update={"hbm_bw_fraction": 0.5, "collective_bw_fraction": 0.9, "collective_latency_us": 30.0})
    fit = fit_step_priors(pts, spec, chip.slice, start, ["hbm_bw_fraction", "collective_bw_fraction", "collective_latency_us"], cols)
    assert fit.values["hbm_bw_fraction"] == pytest.approx(0.85, rel=1e-3)
    assert fit.values["collective_bw_fraction"] == pytest.approx(0.6, rel=1e-3)
    assert fit.values["collective_latency_us"] == pytest.approx(8.0, rel=1e-3)


def test_calibrate_terms_physics_writes_the_new_priors(tmp_path):
    models, chips = catalogue()
    m, c = models["Meta-Llama-3-70B"].spec, chips["h100-80gb"]
    truth = Priors(**TRUTH)
    lines = [",".join(CSV_COLUMNS)]
    for p in _points(m, c, truth, tps=(1, 4, 8)):
        lines.append(f"{p.phase},{p.chips},{p.batch},{p.tokens if p.phase == 'prefill' else ''},"
                     f"{p.tokens if p.phase == 'decode' else ''},{p.time_ms!r}")
    path = tmp_path / "steps.csv"
    path.write_text("\n".join(lines) + "\n")
    raw = load_profile(str(path))
    cal = calibrate(raw, resolve_target(raw, "Meta-Llama-3-70B", "h100-80gb"), terms="physics")
    for k in ("attention_bw_fraction", "attention_mfu", "collective_bw_fraction", "collective_latency_us", "hbm_bw_fraction"):
        assert cal.priors[k] == pytest.approx(getattr(truth, k), rel=2e-3), k
    assert "layer_overhead_us" in cal.not_identified  # one model
    assert all(ph.max_rel_error < 1e-3 for ph in cal.phases)
    Priors.model_validate({**cal.fitted.model_dump(), **cal.priors})
