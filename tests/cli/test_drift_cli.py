"""``fleetplan drift PLAN --metrics FILE`` (issue 40), on the bundled 70B BF16 plan with its
defaults (llama70b-h100-bf16-p99: held under all four physics sources, round robin, 7 x TP4
replicas, chunked prefill, p99 TPOT <= 50 ms; the LLM-Inference-Bench vLLM source binds it,
TPOT step-time margin 1.05x) against synthetic deployments whose metrics fleetplan's own
model made (fleetplan.workload.synthetic), at 80% of the plan's peak, with step times
scaled from the binding source's -- the step times the plan was sized to:

* step times 1.3x the plan's (both phases): drift names the decode (and prefill) step time
  as moved by 1.3x, says the TPOT margin is spent, exit 3 -- the acceptance case;
* decode steps alone 1.04x (inside the plan's TPOT margin): the decode moved, the prefill
  did not, and the plan still holds;
* the plan's own step times: nothing moved, the plan holds, exit 0;
* bad input: exit 2, the labels or option named, nothing written.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml
from typer.testing import CliRunner

from fleetplan.api import load_plan
from fleetplan.cli.app import app
from fleetplan.instance.physics import physics_instance
from fleetplan.instance.schema import Priors
from fleetplan.results.verify import plan_instance
from fleetplan.workload.loadfit import ObservedPool, fit_scaled_priors, phase_scaled_priors
from fleetplan.workload.synthetic import expected_engines, exposition, pool_labels, range_export

runner = CliRunner()
NAME = "llama70b-h100-bf16-p99"


@pytest.fixture(scope="module")
def default_plan(tmp_path_factory):
    """The bundled 70B BF16 plan with its defaults (7 x TP4 under every bundled source)."""
    path = tmp_path_factory.mktemp("drift-plan") / "plan.json"
    r = runner.invoke(app, ["solve", NAME, "--no-source-plans", "-o", str(path)])
    assert r.exit_code == 0, r.output
    return path


def plan_priors(path) -> tuple[str, Priors]:
    """(name, priors) of the source the plan records as binding its one pool."""
    plan = load_plan(str(path))
    (b,) = plan.physics.binding
    return b.source, physics_instance(plan_instance(plan), b.source).priors


@pytest.fixture(scope="module")
def deployment(default_plan, tmp_path_factory):
    """Factory: (plan path, metrics dir) of a deployment of the 70B plan at 16 requests/s (80%
    of its peak) whose step times are the plan's binding source's scaled by (prefill, decode)."""
    path = default_plan
    plan = load_plan(str(path))
    inst = plan_instance(plan)
    _, base = plan_priors(path)
    (pool,) = plan.pools
    made = {}

    def get(prefill: float, decode: float, form: str = "text"):
        key = (prefill, decode, form)
        if key not in made:
            spec = ObservedPool(f"{pool.region}/{pool.tier}/{pool.role}", "replica", pool.tier, pool.slice, pool.slices, 16.0, (),
                                schedule=pool.schedule)
            eng = expected_engines(inst, spec, phase_scaled_priors(base, prefill, decode), 3600.0, pool_labels(spec.name))
            d = tmp_path_factory.mktemp("deploy")
            if form == "text":
                (d / "before.prom").write_text(exposition(eng, 0.0))
                (d / "after.prom").write_text(exposition(eng, 1.0))
                args = ["--metrics", str(d / "after.prom"), "--baseline", str(d / "before.prom"), "--window", "3600"]
            else:
                (d / "range.json").write_text(range_export(eng, 1_750_000_000.0, 3600.0))
                args = ["--metrics", str(d / "range.json")]
            made[key] = (str(path), args, d)
        return made[key]

    return get


def _run(path, args, *more):
    return runner.invoke(app, ["drift", path, *args, *more])


def test_step_times_1_3x_name_the_decode_and_spend_the_tpot_margin(deployment):
    path, args, _ = deployment(1.3, 1.3)
    r = _run(path, args)
    assert r.exit_code == 3, r.output
    out = " ".join(r.output.split())
    assert "decode step time: 1.30" in out and "moved" in out
    assert "TPOT p99 <= 50 ms" in out and "margin spent" in out
    assert "the plan no longer holds" in out
    name, _ = plan_priors(path)
    assert f"physics source {name}'s, the held source that binds the measured pools" in out  # the plan's priors are said
    doc = json.loads(_run(path, args, "--json").stdout)
    assert doc["verdict"]["holds"] is False and doc["verdict"]["exit_code"] == 3
    moved = {m["phase"]: m for m in doc["verdict"]["moved"]}
    assert moved["decode"]["moved"] and moved["decode"]["step_time_ratio"] == pytest.approx(1.3, rel=0.02)
    tpot = next(s for s in doc["slos"] if s["metric"] == "tpot")
    # 1.3x puts the replicas past saturation at the sizing load: an infinite p99, "inf" in the JSON (it was null), "unstable" in the table
    assert tpot["spent"] and not tpot["holds"] and tpot["refit_ms"] == "inf" and tpot["plan_ms"] < 50.0
    assert "unstable" in out
    # the plan's own recorded margin under its binding source (solve's margins column): 1.05x
    recorded = next(m for m in load_plan(path).margins if m.metric == "tpot")
    assert tpot["step_time_margin"] == pytest.approx(recorded.step_time_margin) and tpot["step_time_margin"] < 1.3
    assert any(v["check"] == "replica_slo" for v in doc["verdict"]["violations"])


def test_decode_alone_moves_the_decode_and_the_plan_holds(deployment):
    """Decode steps alone 1.05x the binding source's (the plan's TPOT step-time margin for both
    phases together): the decode moved, the prefill did not, the TPOT margin is not spent."""
    path, args, _ = deployment(1.0, 1.05, "range")
    r = _run(path, args, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    moved = {m["phase"]: m for m in doc["verdict"]["moved"]}
    assert moved["decode"]["moved"] and not moved["prefill"]["moved"]
    assert moved["decode"]["step_time_ratio"] == pytest.approx(1.05, rel=0.01)
    assert all(s["holds"] for s in doc["slos"])


def test_at_the_plans_own_priors_the_plan_holds(deployment, tmp_path):
    path, args, _ = deployment(1.0, 1.0)
    out = tmp_path / "refit.yaml"
    r = _run(path, args, "-o", str(out))
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "the plan holds" in text and "unchanged" in text and "margin spent" not in text
    doc = yaml.safe_load(out.read_text())
    _, base = plan_priors(path)
    fitted = Priors.model_validate({**base.model_dump(), **doc["priors"]})  # a valid overlay
    assert fitted.hbm_bw_fraction == pytest.approx(base.hbm_bw_fraction, rel=0.01)
    assert doc["fit"]["multipliers"]["decode"]["value"] == pytest.approx(1.0, abs=0.01)


def test_measured_p99s_are_set_beside_the_plans_at_the_measured_load(deployment):
    path, args, _ = deployment(1.0, 1.0)
    doc = json.loads(_run(path, args, "--json").stdout)
    (pool,) = doc["pools"]
    assert pool["rate_rps"]["measured"] == pytest.approx(16.0) and pool["rate_rps"]["plan_normal_peak"] == pytest.approx(20.0)
    assert pool["replicas"] == {"plan": 7, "measured": 7}
    assert pool["running_per_replica"]["measured"] == pytest.approx(pool["running_per_replica"]["plan"], rel=1e-3)
    ttft = pool["p99_ms"]["ttft"]
    lo, hi = ttft["bucket"]
    assert lo <= ttft["measured"] <= hi and lo <= ttft["plan"] <= hi  # the histogram bounds the truth, not its interpolation
    assert pool["mean_ms"]["itl"]["measured"] == pytest.approx(pool["mean_ms"]["itl"]["plan"], rel=1e-3)


def test_metrics_for_a_pool_the_plan_does_not_have_exit_2(deployment, tmp_path):
    path, args, d = deployment(1.0, 1.0)
    text = (d / "after.prom").read_text().replace('fleetplan_region="us-central"', 'fleetplan_region="eu-west"')
    bad = tmp_path / "after.prom"
    bad.write_text(text)
    r = _run(path, ["--metrics", str(bad), "--window", "3600"])
    assert r.exit_code == 2 and "eu-west/all/replica" in r.output and "us-central/all/replica" in r.output


def test_scrapes_without_a_window_exit_2_and_nothing_is_written(deployment, tmp_path):
    path, args, d = deployment(1.0, 1.0)
    out = tmp_path / "refit.yaml"
    r = _run(path, ["--metrics", str(d / "after.prom"), "--baseline", str(d / "before.prom"), "-o", str(out)])
    assert r.exit_code == 2 and "--window" in r.output
    assert not out.exists()
    r = _run(path, args, "--window", "0")
    assert r.exit_code == 2 and "--window" in r.output


def test_a_disaggregated_plan_fits_prefill_and_decode_pools_apart(tmp_path):
    """The tiny two-region disaggregated instance (tests/conftest.py): metrics for region a's
    prefill pool (TTFT histograms) and decode pool (TPOT and ITL histograms) made with the
    decode steps 1.25x and the prefill as planned; drift fits the two phases apart from the
    two roles, and region b, unmeasured, is judged with the same refitted priors."""
    from tests.conftest import tiny_data

    inst_file = tmp_path / "tiny.yaml"
    inst_file.write_text(yaml.safe_dump(tiny_data()))
    plan_path = tmp_path / "plan.json"
    r = runner.invoke(app, ["solve", str(inst_file), "-o", str(plan_path)])
    assert r.exit_code == 0, r.output
    plan = load_plan(str(plan_path))
    inst = plan_instance(plan)
    truth = phase_scaled_priors(inst.priors, 1.0, 1.25)
    eng = []
    for p in plan.pools:
        if p.region != "a":
            continue
        op = p.decode_normal
        spec = ObservedPool(f"{p.region}/{p.tier}/{p.role}", p.role, p.tier, p.slice, p.slices, 16.0, (),
                            batch_cap=op.batch_cap if op else None, draft_tokens=op.draft_tokens if op else 0)
        eng += expected_engines(inst, spec, truth, 1800.0, pool_labels(spec.name))
    metrics = tmp_path / "range.json"
    metrics.write_text(range_export(eng, 1_750_000_000.0, 1800.0))
    r = runner.invoke(app, ["drift", str(plan_path), "--metrics", str(metrics), "--json"])
    assert r.exit_code in (0, 3), r.output
    doc = json.loads(r.stdout)
    assert {p["pool"] for p in doc["pools"]} == {"a/all/prefill", "a/all/decode"}
    assert set(doc["unmeasured_pools"]) == {"b/all/decode", "b/all/prefill"}
    mult = doc["fit"]["multipliers"]
    assert mult["decode"]["value"] == pytest.approx(1.25, rel=0.05) and mult["prefill"]["value"] == pytest.approx(1.0, rel=0.05)
    roles = {p["pool"]: set(p["p99_ms"]) for p in doc["pools"]}
    assert roles == {"a/all/prefill": {"ttft"}, "a/all/decode": {"tpot", "itl"}}
    assert (r.exit_code == 3) == (not doc["verdict"]["holds"])


def test_the_plans_own_slos_hold_at_every_pools_sizing_scenario(solved):
    """Under the plan's own priors each pool's SLOs hold at the scenario that sizes it -- the
    margins' starting point. On the Gemini plan the sizing scenarios are region losses that
    shed the batch class: the load is the admitted one (a prefill pool read the arrivals before
    shedding and its TTFT as infinite)."""
    from fleetplan.workload.drift import _sizing, _slo_values

    inst, plan = solved("gemini-ironwood")
    seen_loss = False
    for pool in plan.pools:
        name, pl, failover = _sizing(plan, pool)
        seen_loss |= failover and pl.shed_rps > 0
        for (metric, pct), (v, lim) in _slo_values(inst, pool, pl, failover).items():
            assert v <= lim * (1 + 1e-6), (pool.region, pool.tier, pool.role, name, metric, v, lim)
    assert seen_loss


def test_decode_faster_than_the_sources_peak_is_fitted_not_pushed_into_the_prefill(default_plan, tmp_path):
    """Regression (issue 40 trial): the binding source (llm-inference-bench-vllm) already has
    hbm_bw_fraction 1.0, so a decode multiplier below 1 cannot be reached by its efficiencies.
    The fit was capped at 1x there ('decode 1.000x unchanged (an efficiency reaches 1)') and the
    misfit moved into the prefill (0.87x for a true 1.15x). A deployment at prefill 1.15x,
    decode 0.92x of the binding source (valid priors: the decode through decode_time_scale):
    both recovered, and the note says which prior carries the decode."""
    plan = load_plan(str(default_plan))
    (pool,) = plan.pools
    _, base = plan_priors(default_plan)
    spec = ObservedPool(f"{pool.region}/{pool.tier}/{pool.role}", "replica", pool.tier, pool.slice, pool.slices, 16.0, (),
                        schedule=pool.schedule)
    eng = expected_engines(plan_instance(plan), spec, fit_scaled_priors(base, 1.15, 0.92), 3600.0, pool_labels(spec.name))
    (tmp_path / "b.prom").write_text(exposition(eng, 0.0))
    (tmp_path / "a.prom").write_text(exposition(eng, 1.0))
    r = _run(str(default_plan), ["--metrics", str(tmp_path / "a.prom"), "--baseline", str(tmp_path / "b.prom"), "--window", "3600"],
             "--json")
    assert r.exit_code in (0, 3), r.output
    doc = json.loads(r.stdout)
    mult = doc["fit"]["multipliers"]
    assert mult["decode"]["value"] == pytest.approx(0.92, rel=0.01) and mult["decode"]["bound"] is None
    assert mult["prefill"]["value"] == pytest.approx(1.15, rel=0.01)
    moved = {m["phase"]: m for m in doc["verdict"]["moved"]}
    assert moved["decode"]["moved"] and moved["prefill"]["moved"] and moved["prefill"]["step_time_ratio"] > 1.05
    assert doc["priors"]["decode_time_scale"] == pytest.approx(0.92, rel=0.01)
    assert any("decode_time_scale" in n for n in doc["fit"]["notes"])


def test_another_sources_step_times_1_3x_move_both_phases(default_plan, tmp_path):
    """Regression (issue 40 trial): a deployment running AIConfigurator's step times x1.3,
    against the binding source's priors: drift said 'prefill 1.033x unchanged' and 'decode
    multiplier: no measured statistic responds' although TPOT and ITL means are measured."""
    from fleetplan.instance.physics import held_instances

    plan = load_plan(str(default_plan))
    (pool,) = plan.pools
    si = dict(held_instances(plan_instance(plan)))["aiconfigurator-trtllm"]
    spec = ObservedPool(f"{pool.region}/{pool.tier}/{pool.role}", "replica", pool.tier, pool.slice, pool.slices, 16.0, (),
                        schedule=pool.schedule)
    eng = expected_engines(si, spec, phase_scaled_priors(si.priors, 1.3, 1.3), 3600.0, pool_labels(spec.name))
    (tmp_path / "b.prom").write_text(exposition(eng, 0.0))
    (tmp_path / "a.prom").write_text(exposition(eng, 1.0))
    r = _run(str(default_plan), ["--metrics", str(tmp_path / "a.prom"), "--baseline", str(tmp_path / "b.prom"), "--window", "3600"],
             "--json")
    doc = json.loads(r.stdout)
    assert doc["fit"]["multipliers"]["decode"]["identified"], doc["fit"]["multipliers"]
    assert "decode multiplier" not in doc["fit"]["not_identified"]
    rows = {(s["metric"], s["stat"]): s for s in doc["fit"]["statistics"]}
    for key in (("tpot", "mean"), ("itl", "mean"), ("ttft", "mean")):
        assert rows[key]["fit_ms"] == pytest.approx(rows[key]["measured_ms"], rel=0.03), key


def test_a_measured_p99_over_the_slo_breaks_the_plan_whatever_the_fit_says(default_plan, tmp_path):
    """Regression (issue 40 trial): drift said 'the plan holds' beside a measured TTFT p99 far
    over the SLO. A deployment at the plan's own step times whose slowest 3% of first tokens
    took 2.5-5 s (a tail the pool model does not make, so the fit barely moves): the measured
    p99 lies wholly over the 1 s SLO, and drift says the SLO is broken, exit 3."""
    from fleetplan.workload.prometheus import TTFT

    plan = load_plan(str(default_plan))
    (pool,) = plan.pools
    _, base = plan_priors(default_plan)
    spec = ObservedPool(f"{pool.region}/{pool.tier}/{pool.role}", "replica", pool.tier, pool.slice, pool.slices, 16.0, (),
                        schedule=pool.schedule)
    eng = expected_engines(plan_instance(plan), spec, base, 3600.0, pool_labels(spec.name))
    for e in eng:
        h = e.histograms[TTFT]
        e.histograms[TTFT] = dataclasses.replace(h, cumulative=tuple(min(c, 0.97 * h.count) if b < 5.0 else c
                                                                     for b, c in zip(h.bounds, h.cumulative)))
    (tmp_path / "a.prom").write_text(exposition(eng, 1.0))
    r = _run(str(default_plan), ["--metrics", str(tmp_path / "a.prom"), "--window", "3600"], "--json")
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    assert not doc["verdict"]["holds"]
    (v,) = [v for v in doc["verdict"]["violations"] if v["check"] == "measured_slo"]
    assert v["where"] == spec.name and "TTFT p99" in v["message"] and "1000 ms" in v["message"]
