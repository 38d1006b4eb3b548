"""Fixtures of the report tests: a small two-region instance whose solves take a
fraction of a second (one slice shape, so slices are chips), and the bundled instances'
plans and reports, built once per session."""

from __future__ import annotations

import pytest

from fleetplan.instance.io import bundled_instances, load_instance, parse_instance
from tests.conftest import tiny_data

#: Two regions at 200 and 150 req/s of 2,000-token prompts: prefill pools of tens of
#: slices (queueing economies of scale matter), decode pools of a few.
SWEEP = dict(regions={"a": {"peak_rps": 200}, "b": {"peak_rps": 150}}, chips={"acc": {"slice_shapes": [1]}})


@pytest.fixture
def sweep_data():
    """The sweep instance as data (a fresh copy)."""
    return tiny_data(**SWEEP)


@pytest.fixture
def sweep_instance(sweep_data):
    return parse_instance(sweep_data, "sweep")


@pytest.fixture(scope="session")
def bundled_plans():
    """{name: (instance, plan)} for every bundled instance."""
    import pyomo.environ  # noqa: F401

    from fleetplan.sizing import solve

    out = {}
    for name in bundled_instances():
        inst = load_instance(name)
        out[name] = (inst, solve(inst).plan)
    return out


@pytest.fixture(scope="session")
def bundled_reports(bundled_plans):
    """{name: Report} (data and PNG figures) for every bundled instance's plan."""
    from fleetplan.report.render import build_report

    return {name: build_report(inst, plan) for name, (inst, plan) in bundled_plans.items()}


def pytest_collection_finish(session):
    """When the run includes the Ray tests, start their local cluster now, in the
    background (tests/report/ray_cluster.py): its startup overlaps the tests before them."""
    if session.config.option.collectonly:
        return
    if any("ray_cluster" in getattr(item, "fixturenames", ()) for item in session.items):
        from tests.report import ray_cluster

        ray_cluster.start_in_background()
