"""The load sweep (``fleetplan simulate --sweep-load``): a growing queue is flagged, the
simulated SLO crossing comes only from points that measured a stationary queue, the notes
say when the window or the scale should not be read at face value, the crossings are in
the JSON within its schema, and --png takes a .png or .svg path or nothing is run.

On the llama plan: colocated replicas, whose decode takes a share of their time, so
their prefill queue saturates below 100% offered -- a real overload to find, in short
windows. The model curves of a colocated sweep are the colocated model the plan is sized
and verified with (the pool's schedule, its router), not a prefill-only M/G/1."""

from __future__ import annotations

from dataclasses import replace

import json
import math
import os

import numpy as np
import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.sim.sweep import Sweep, SweepPoint, SweepReport, load_sweep, measured_capacity, queue_growth, sweep_crossings

runner = CliRunner()


@pytest.fixture(scope="module")
def llama(plan_file):
    return plan_file("llama70b-h100")


@pytest.fixture(scope="module")
def replicas(llama):
    from fleetplan.cli.common import plan_and_instance
    from fleetplan.sim.setup import tier_setups

    pl, inst = plan_and_instance(str(llama), None)
    su = tier_setups(inst, pl, "us-central", None, "normal", 1.0)[0]
    assert su.mode == "colocated"
    # the sweep's utilisation scale is a prefill-first replica's (lambda x its whole prefill):
    # sweep the plan's replicas under that schedule
    return inst, replace(su, replica=su.replica[:5] + ("prefill-first",))


# ----------------------------------------------------------------------------- saturation


def _lindley(rho: float, n: int, seed: int, start_wait: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """An M/M/1 queue by Lindley's recursion (mean service 1): waits and arrival times."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rho, n)
    svc = rng.exponential(1.0, n)
    w = np.empty(n)
    w[0] = start_wait
    for i in range(1, n):
        w[i] = max(w[i - 1] + svc[i - 1] - gaps[i], 0.0)
    return w, np.cumsum(gaps)


def test_queue_growth_tells_a_stable_queue_from_an_overloaded_one():
    """M/M/1 at 70% started in its stationary regime (a long run's tail) is not flagged in
    any of 40 windows; at 110% (grows by 10% of the window's length in wait) in every one."""
    stable = 0
    for seed in range(40):
        w, t = _lindley(0.7, 40_000, seed)
        w, t = w[20_000:], t[20_000:]  # the first half warms it up: 20,000 services >> its relaxation time (~140)
        stable += queue_growth(w, t, 1.0)[3]
    assert stable <= 1
    for seed in range(10):
        w, t = _lindley(1.1, 5_000, seed)
        first, last, tstat, grew = queue_growth(w, t, 1.0)
        assert grew and last > first and tstat > 0


def test_an_overloaded_replica_pool_is_saturated_and_a_light_one_is_stationary(replicas):
    inst, su = replicas
    sw = load_sweep(inst, su, [], utilisations=(0.5, 0.95), duration_s=60, warmup_s=30)
    light, heavy = sw.points
    # the pool served well below the work that arrived in the window: its backlog grew
    assert heavy.arrived_utilisation > heavy.utilisation + 0.05
    assert heavy.saturated and heavy.wait_last_ms > 2 * heavy.wait_first_ms
    assert light.stationary and not light.saturated and abs(light.arrived_utilisation - light.utilisation) < 0.02
    cap = measured_capacity(sw.points)
    assert cap is not None and cap[0] < 0.95  # replicas also decode: their prefill capacity is below 100%
    assert heavy.overloaded and not light.overloaded


# ----------------------------------------------------------------------------- the crossing


def _pt(u: float, ttft: float, settled: bool = True, saturated: bool = False, overloaded: bool = False) -> SweepPoint:
    return SweepPoint(u, u, u, saturated, 1.0, ttft, None, ttft / 2, None, ttft, ttft, ttft, ttft / 2, ttft / 2, settled=settled, overloaded=overloaded)


def _sim(points, limit=1000.0):
    g = np.linspace(0.02, 0.995, 50)
    sw = Sweep("r", "t", "prefill", "s", 8, 99.0, limit, 1.0, points, g, g * 0, g * 0, g * 0, g * 0, g * 0, [])
    return next(c for c in sweep_crossings(sw) if c.curve == "simulation")


def test_a_colocated_sweep_draws_the_model_the_verifier_uses(llama):
    """Regression: the sweep's model curves for colocated replicas were a prefill-only M/G/1
    of whole prompts, whatever the pool's schedule; the plan is sized and verified with the
    colocated model (perf.colocated: its chunked schedule, decode steps, least-work M/G/c).
    Checked against the verifier's evaluator (results.evaluate.Context.replica)."""
    from fleetplan.cli.common import plan_and_instance
    from fleetplan.results.evaluate import Context
    from fleetplan.sim.setup import tier_setups

    pl, inst = plan_and_instance(str(llama), None)
    su = tier_setups(inst, pl, "us-central", None, "normal", 1.0)[0]
    sched, n = su.replica[5], su.replica[3]
    assert sched.startswith("chunked-") and n > 1
    sw = load_sweep(inst, su, [], utilisations=(0.3, 0.6), duration_s=5.0, warmup_s=1.0)
    assert sw.schedule == sched
    ctx = Context(inst)
    pct = sw.percentile
    for p in sw.points:
        ev = ctx.replica(su.tier, su.replica[0], n, p.rps, 0.0, False, sched)
        assert p.bound_ttft_ms == pytest.approx(ev.ttft_ms[pct], rel=1e-6)
        assert p.model_ttft_ms == pytest.approx(ev.ttft_estimate_ms[pct], rel=1e-6)
        assert math.isnan(p.mmc_ttft_ms)  # no M/M analogue for a colocated replica
        # the replicas' TPOT rises with their load: the sweep shows it beside the model's (issue-17 trial: it showed none)
        tp = min((x for c in su.classes for x in c.slos if x[0] == "tpot"), key=lambda x: x[2])[1]
        assert sw.tpot_percentile == tp
        assert p.model_tpot_ms == pytest.approx(ev.tpot_ms[tp], rel=1e-6)
        assert 0.0 < p.tpot_ms < math.inf and p.tpot_ci is not None  # measured (a 5 s window: too short to compare)
    assert sw.points[1].model_tpot_ms > sw.points[0].model_tpot_ms
    # the TPOT SLO can bind first: the sweep says where each curve crosses it (issue-17 trial: only TTFT's was said)
    from fleetplan.sim.sweep import tpot_crossing

    line = tpot_crossing(sw)
    assert line is not None and line.startswith(f"TPOT p{sw.tpot_percentile:g} <= ") and "simulation" in line


def test_the_crossing_is_interpolated_only_between_adjacent_stationary_points():
    c = _sim([_pt(0.5, 100), _pt(0.7, 600), _pt(0.9, 1400)])
    assert (c.lower, c.upper) == (0.7, 0.9) and 0.7 < c.utilisation < 0.9
    # a point between that did not settle measured a lower bound: it cannot place the crossing
    c = _sim([_pt(0.5, 100), _pt(0.7, 600, settled=False), _pt(0.9, 1400)])
    assert (c.lower, c.upper, c.utilisation) == (0.5, 0.9, None)
    # one that did not settle but measured above the limit is above it (a queue that starts empty only fills)
    c = _sim([_pt(0.5, 100), _pt(0.7, 1200, settled=False), _pt(0.9, 5000)])
    assert (c.lower, c.upper, c.utilisation) == (0.5, 0.7, None)
    # an overloaded point is above it whatever its window measured; a saturated one under it cannot say
    c = _sim([_pt(0.5, 100), _pt(0.7, 300, saturated=True), _pt(0.8, 400, overloaded=True)])
    assert (c.lower, c.upper, c.utilisation) == (0.5, 0.8, None)
    c = _sim([_pt(0.5, 100), _pt(0.9, 300, settled=False)])
    assert (c.lower, c.upper, c.utilisation) == (0.5, None, None)


def test_the_simulated_crossing_does_not_come_from_an_unsettled_point_and_windows_agree(replicas):
    """A 20 s window is too short for the points near saturation to settle: the crossing is
    not interpolated from them, only bracketed by a stationary point under the limit and a
    point known above it (or left open above), and the brackets of a 20 s and a 60 s window
    overlap (the old interpolation moved by 13 points of utilisation between the two)."""
    inst, su = replicas
    us = (0.5, 0.7, 0.8, 0.85, 0.9, 0.99)
    brackets = []
    for d in (20, 60):
        sw = load_sweep(inst, su, [], utilisations=us, duration_s=d, warmup_s=30)
        c = next(x for x in sw.crossings if x.curve == "simulation")
        by_u = {p.target_utilisation: p for p in sw.points}
        assert c.lower is not None
        lo = by_u[c.lower]
        assert lo.stationary and lo.ttft_ms <= sw.limit_ms
        above = [p for p in sw.points if p.target_utilisation > c.lower and (c.upper is None or p.target_utilisation < c.upper)]
        assert not any(p.stationary for p in above)  # nothing between the ends could say
        if c.upper is None:
            assert all(p.ttft_ms <= sw.limit_ms and not p.overloaded for p in above)
        else:
            hi = by_u[c.upper]
            assert hi.overloaded or hi.ttft_ms > sw.limit_ms
        if c.utilisation is not None:
            assert c.upper is not None and by_u[c.upper].stationary and not above
        if d == 20:
            assert not any(p.settled for p in sw.points if p.target_utilisation >= 0.9)
            assert c.utilisation is None
        brackets.append((c.lower, c.upper if c.upper is not None else 1.0))
    (a0, a1), (b0, b1) = brackets
    assert max(a0, b0) < min(a1, b1)


# ----------------------------------------------------------------------------- notes, JSON, schema


def test_notes_crossings_and_rounding_in_the_json_and_the_schema(llama, tmp_path):
    import jsonschema

    out, fig = tmp_path / "sweep.json", tmp_path / "sweep.svg"
    r = runner.invoke(app, ["simulate", str(llama), "-r", "us-central", "--sweep-load", "--duration", "20", "--scale", "0.5", "--png", str(fig),
                            "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    SweepReport.model_validate(doc)
    jsonschema.validate(doc, SweepReport.model_json_schema())
    s = runner.invoke(app, ["schema", "sweep"])
    assert s.exit_code == 0
    jsonschema.validate(doc, json.loads(s.output))
    sw = doc["sweeps"][0]
    assert sw["slices"] == 2 and sw["slices_planned"] == 4  # 4 replicas x scale 0.5
    # notes: every point a longer window could settle says how long; those at or above capacity (or saturated) say none can
    unsettled = [p for p in sw["points"] if not p["settled"]]
    fixable = [p for p in unsettled if not (p["saturated"] or p["overloaded"] or p["near_capacity"])]
    hopeless = [p for p in unsettled if p not in fixable]
    assert unsettled
    assert all(any(f"({p['target_utilisation']:.2%} offered) relaxes in about" in n for n in sw["notes"]) for p in fixable)
    assert not any(f"({p['target_utilisation']:.2%} offered) relaxes in about" in n for p in hopeless for n in sw["notes"])
    assert any("2 of the plan's 4 replicas" in n for n in sw["notes"])
    assert r.output.count("note:") >= len(sw["notes"])
    # crossings: each curve; least-work routing pools the prompts over the replicas (M/G/c), so the plan's
    # 4 replicas reach the SLO at a higher load per replica than the 2 simulated
    cs = {c["curve"]: c for c in sw["crossings"]}
    assert set(cs) == {"bound", "bound full scale", "model", "simulation"}
    assert cs["bound full scale"]["slices"] == 4 and cs["bound"]["slices"] == 2
    assert sw["router"] == "least-work" and sw["schedule"].startswith("chunked-")
    assert cs["bound full scale"]["utilisation"] > cs["bound"]["utilisation"] + 1e-3
    assert "the bound at the 2 replicas simulated" in r.output.lower() and "the plan's bound at its 4 replicas" in r.output.lower()
    # floats to 6 significant digits, as the simulation report
    floats = []

    def walk(x):
        if isinstance(x, float):
            floats.append(x)
        elif isinstance(x, dict):
            for k, v in x.items():
                if k not in ("duration_s", "warmup_s", "scale"):
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(doc["sweeps"])
    assert floats and all(not math.isfinite(x) or x == float(f"{x:.6g}") for x in floats)
    assert fig.read_bytes().lstrip().startswith(b"<?xml") and b"<svg" in fig.read_bytes()


@pytest.mark.parametrize("png,needle", [("", "give a file path"), ("out.jpg", ".svg"), ("out.txt", ".png or .svg"), ("out", "no suffix")])
def test_a_bad_png_path_is_exit_2_and_nothing_is_written(llama, png, needle, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["simulate", str(llama), "-r", "us-central", "--sweep-load", "--duration", "5", "--png", png, "-o", "rep.json"])
    assert r.exit_code == 2, r.output
    assert "--png" in r.output and needle in r.output and "Traceback" not in r.output
    assert os.listdir(tmp_path) == []
