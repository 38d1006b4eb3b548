"""Issue 17 newcomer trial, finding 4: a plan sized for `serving.replica_router: random`
(M/G/1 per replica) was simulated with the least-work router by default, so `simulate`
printed TTFT p99 at 0.32 of the plan -- a red ratio that only said the two used different
routing. The default router is now the one the plan was sized for (issue 40: every
router of `serving.router`, the field's name now)."""

from __future__ import annotations

import pyomo.environ  # noqa: F401 -- before SciPy, as the CLI does
import pytest
from typer.testing import CliRunner

import fleetplan.sim.run as sim_run
from fleetplan.cli.app import app
from fleetplan.cli.common import dumps_json
from fleetplan.instance.io import load_instance
from fleetplan.sizing import solve


class _Seen(Exception):
    pass


@pytest.mark.parametrize("router", ["random", "least-work", "round-robin", "prefix-aware"])
def test_simulate_defaults_to_the_plans_router(tmp_path, monkeypatch, router):
    inst = load_instance("llama70b-h100-fp8-p99")
    inst = type(inst).model_validate({**inst.model_dump(mode="json"),
                                      "serving": {**inst.serving.model_dump(mode="json"), "router": router}})
    plan = solve(inst).plan
    path = tmp_path / "plan.json"
    path.write_text(dumps_json(plan.model_dump(mode="json")))
    seen = {}

    def fake(*args, **kwargs):
        seen["router"] = args[11] if len(args) > 11 else kwargs.get("router")
        raise _Seen

    monkeypatch.setattr(sim_run, "simulate", fake)
    r = CliRunner().invoke(app, ["simulate", str(path), "-r", "us-central", "--duration", "10"])
    assert isinstance(r.exception, _Seen), r.output
    assert seen["router"] == router
