"""Fixtures of the report tests: a small two-region instance whose solves take a
fraction of a second (one slice shape, so slices are chips), and the bundled instances'
plans and reports, built once per session."""

from __future__ import annotations

import os

import pytest

from fleetplan.instance.io import bundled_instances, parse_instance
from tests.conftest import build_shared, run_dir, tiny_data

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


@pytest.fixture
def sweep_yaml(tmp_path, sweep_data):
    """The sweep instance as a YAML file, for the command line."""
    import yaml

    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(sweep_data))
    return p


@pytest.fixture(scope="session")
def bundled_plans(solved):
    """{name: (instance, plan)} for every bundled instance (the session's solves, tests/conftest.py)."""
    return {name: solved(name) for name in bundled_instances()}


@pytest.fixture(scope="session")
def bundled_report_builds(bundled_plans, tmp_path_factory) -> dict:
    """{name: (Report, {figure stem: layout problems})} for every bundled instance's plan,
    built once per run: pytest-xdist's workers share them through pickles in the run's
    directory (tests/conftest.py ``build_shared``). Each figure's text is measured
    (tests/report/layout.py) as the report's build saves it, laid out as its PNG shows it,
    rather than drawn a second time by the test of the layout."""
    import pickle

    from fleetplan.report.render import build_report
    from tests.report.layout import layout_problems

    def make(name, tmp):
        layouts = {}
        rep = build_report(*bundled_plans[name], on_figure=lambda stem, fig: layouts.__setitem__(stem, layout_problems(stem, fig)))
        tmp.write_bytes(pickle.dumps((rep, layouts)))

    d = run_dir(tmp_path_factory) / "reports"
    paths = {name: d / f"{name}.pickle" for name in bundled_plans}
    build_shared(paths, make)
    return {name: pickle.loads(p.read_bytes()) for name, p in paths.items()}


@pytest.fixture(scope="session")
def bundled_reports(bundled_report_builds):
    """{name: Report} (data and PNG figures) for every bundled instance's plan, built once per run."""
    return {name: rep for name, (rep, _layouts) in bundled_report_builds.items()}


@pytest.fixture(scope="session")
def bundled_layouts(bundled_report_builds):
    """{name: {figure stem: [layout problem, ...]}} of the bundled reports' figures as saved
    (tests/report/layout.py's rules; [] for a figure that keeps them)."""
    return {name: layouts for name, (_rep, layouts) in bundled_report_builds.items()}


def _runs_ray_tests(session) -> bool:
    hit = getattr(session, "_fleetplan_runs_ray", None)
    if hit is None:
        hit = session._fleetplan_runs_ray = any("ray_cluster" in getattr(item, "fixturenames", ()) for item in session.items)
    return hit


def pytest_runtest_setup(item):
    """When the run includes the Ray tests, start their local cluster in the background
    (tests/report/ray_cluster.py) as the first test of this folder starts: its startup
    overlaps the tests before them, and it is not up (its processes polling) through the
    rest of the suite; it stops after the Ray tests (their module-scoped fixture).

    Under pytest-xdist every worker collects every test but runs only the ones sent to
    it, so the Ray tests' fixture starts the cluster in the worker that runs them (the
    other worker keeps the second CPU busy meanwhile)."""
    if item.config.option.collectonly or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if _runs_ray_tests(item.session):
        from tests.report import ray_cluster

        ray_cluster.start_in_background()
