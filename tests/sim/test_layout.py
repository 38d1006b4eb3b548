"""The simulator's modules: the metric rows live in sim/metrics.py (run.py was past the
house's ~800 lines), and the names callers import from sim/run.py still resolve there."""

from __future__ import annotations

from pathlib import Path

import fleetplan.sim.metrics as metrics
import fleetplan.sim.run as run

SIM = Path(run.__file__).parent


def test_run_re_exports_the_measuring_names():
    for name in ("measure_tier", "prefill_model", "replica_model", "path_components", "settling_note", "MIN_RATIO_MS", "_row", "_ci",
                 "_decoded", "_secs"):
        assert getattr(run, name) is getattr(metrics, name), name


def test_no_simulator_module_grows_past_the_house_limit():
    for f in ("run.py", "metrics.py", "setup.py", "dcn.py"):
        p = SIM / f
        if p.exists():
            assert len(p.read_text().splitlines()) <= 800, f
