"""Shared fixtures: the bundled instances and a ``tiny_instance(**overrides)`` factory."""

from __future__ import annotations

import atexit
import copy
import itertools
import os
import pickle
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
import typer.testing
import yaml

from fleetplan.instance.io import bundled_instance_path, load_instance, parse_instance

# ----------------------------------------------------------------------------- CLI runner plumbing

# The CLI tests read rich's output at one page width whoever runs them: 160 columns, the
# CLI's own width when stdout is not a terminal (fleetplan/cli/common.py), set before the
# CLI's consoles are made (at import). pytest-xdist's workers start with COLUMNS=80
# otherwise, and a caller's COLUMNS would wrap the lines the tests look for.
os.environ["COLUMNS"] = "160"

# Ctrl-C as a terminal sends it, whoever starts the run: a background job of a
# non-interactive shell (`pytest &` in a script, nohup) starts with SIGINT ignored, Python
# then installs no KeyboardInterrupt handler and the processes the tests start inherit the
# ignored signal -- the Ctrl-C tests (tests/regression/test_cpsat_interrupt.py,
# test_issue16_ctrl_c_start.py, the sweep's in tests/report/test_report_cli.py) then fail,
# one after a 300 s hang guard, which looks like a loaded machine and is not.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The candidate-table cache (fleetplan/tables/cache.py, store.py) never reads or
# writes the user's ~/.cache during the tests. Every test starts with an empty in-memory
# cache; on disk, the tests share one folder per run (the CLI processes they start inherit
# it), so the many solves of the same bundled instances read their tables instead of
# rebuilding them (~2 s of a Gemini solve's ~9 s of CPU). pytest-xdist's workers share it
# too: the run's first process (the controller, which loads this file before it starts the
# workers) makes the folder and removes it at exit, and the workers inherit its path
# (_TABLE_CACHE_ENV), so a table one worker built the other reads -- the store's writes are
# atomic and a piece is a pure function of its key (fleetplan/tables/store.py), so two
# processes writing one key write the same bytes. A test of the cache itself, or one that
# counts or patches the physics the tables call, is marked ``fresh_table_cache`` (module-wide
# where the whole file is about it) and gets an empty folder of its own (named by its
# process), so no such test sees another's tables, whatever ran before it. The folder set
# here, at import, serves the session- and module-scoped fixtures that build tables before
# the first test's own is set.
_TABLE_CACHE_ENV = "FLEETPLAN_TEST_TABLE_CACHE_ROOT"
if os.environ.get(_TABLE_CACHE_ENV) and Path(os.environ[_TABLE_CACHE_ENV]).is_dir():
    _TABLE_CACHE_ROOT = Path(os.environ[_TABLE_CACHE_ENV])  # the controller's, inherited by this worker
else:
    _TABLE_CACHE_ROOT = Path(tempfile.mkdtemp(prefix="fleetplan-test-tables-"))
    os.environ[_TABLE_CACHE_ENV] = str(_TABLE_CACHE_ROOT)
    atexit.register(shutil.rmtree, _TABLE_CACHE_ROOT, True)
os.environ["FLEETPLAN_CACHE_DIR"] = str(_TABLE_CACHE_ROOT / "shared")
os.environ.pop("FLEETPLAN_CACHE", None)  # a caller's FLEETPLAN_CACHE=0 would hide the cache from the tests of it
os.environ.pop("FLEETPLAN_CACHE_MAX_MB", None)
_TABLE_CACHE_TESTS = itertools.count()


def pytest_configure(config):
    config.addinivalue_line("markers", "fresh_table_cache: the test gets an empty table-cache folder of its own "
                                       "(tests of the cache, and tests that count or patch the physics the tables call)")


@pytest.fixture(autouse=True)
def _isolated_table_cache(monkeypatch, request):
    """An empty in-memory table cache for every test (:func:`fleetplan.tables.cache.reset_default_tables`)
    and the run's shared folder on disk, or a fresh folder of its own for a test marked
    ``fresh_table_cache``."""
    own = request.node.get_closest_marker("fresh_table_cache") is not None
    folder = _TABLE_CACHE_ROOT / (f"test-{os.getpid()}-{next(_TABLE_CACHE_TESTS)}" if own else "shared")
    monkeypatch.setenv("FLEETPLAN_CACHE_DIR", str(folder))
    monkeypatch.setenv("FLEETPLAN_CACHE", "1")  # on; and undone after the test (an in-process `solve --no-cache` sets it to 0)
    from fleetplan.tables.cache import reset_default_tables

    reset_default_tables()
    yield
    reset_default_tables()

_CLICK_COMMANDS: dict[int, tuple] = {}
_build_click_command = typer.testing._get_command


def _click_command(app):
    """The click command of a typer app, built once per app per session.

    ``typer.testing.CliRunner.invoke`` rebuilds the whole click tree from the app's
    function signatures on every call (~0.1-0.2 s for fleetplan's app, several hundred
    calls a run); a click command is reusable -- each invocation makes its own Context --
    so the tests share one. The entry point (``fleetplan.cli.app:main``) builds it once
    per process anyway."""
    hit = _CLICK_COMMANDS.get(id(app))
    if hit is None or hit[0] is not app:
        hit = _CLICK_COMMANDS[id(app)] = (app, _build_click_command(app))
    return hit[1]


typer.testing._get_command = _click_command

def _deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        # a dict with a "kind" (a discriminated union member) replaces, never merges
        if isinstance(v, dict) and isinstance(out.get(k), dict) and "kind" not in v:
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


FLAT = [1.0] * 24

TINY = {
    "name": "tiny",
    "model": {
        "name": "tiny-dense",
        "total_params_b": 8,
        "active_params_b": 8,
        "layers": 32,
        "d_model": 4096,
        "bytes_per_weight": 1,
        "bytes_per_kv_element": 1,
        "attention": {"kind": "gqa", "kv_heads": 8, "head_dim": 128},
    },
    "chips": {
        "acc": {
            "hbm_gb": 80, "hbm_tbps": 3.0, "peak_tflops": 1000, "ici_gbytes_per_s": 400, "chips_per_vm": 1,
            "chips_per_pod": 8, "slice_shapes": [1, 2], "price_per_chip_hour_usd": 2.0,
        }
    },
    "network": {"kv_ici_gbytes_per_s_per_slice": 100, "dcn_gbytes_per_s_per_slice": 25},
    "regions": {
        "a": {"peak_rps": 20, "hourly_load": FLAT, "pods": {"acc": {"installed": 0, "available_new": 10}}, "failover_to": ["b"]},
        "b": {"peak_rps": 20, "hourly_load": FLAT, "pods": {"acc": {"installed": 0, "available_new": 10}}, "failover_to": ["a"]},
    },
    "workload": {
        "input_mix": [{"share": 1.0, "tokens": 2000}],
        "output_tokens": 200,
        "prefix_hit_rate": 0.0,
        "classes": {"std": {"share": 1.0, "slos": [{"metric": "ttft", "percentile": 99, "limit_ms": 1000},
                                                    {"metric": "tpot", "percentile": 99, "limit_ms": 50}],
                            "spec_acceptance": 0.5}},
        "tiers": [{"name": "all", "max_input_tokens": None}],
    },
    "priors": {
        "prefill_mfu": 0.4, "decode_mfu": 0.4, "hbm_bw_fraction": 0.6, "hbm_workspace_gb_per_chip": 4,
        "hbm_headroom_fraction": 0.05, "tpot_p99_inflation": 1.5,
    },
    "speculation": {"enabled": False},
    "failover": {"n_minus_1": False},
    "serving": {"mode": "disaggregated"},
}


def tiny_data(**overrides) -> dict:
    """The tiny instance as a dict, with nested ``overrides`` deep-merged in."""
    return _deep_merge(TINY, overrides)


@pytest.fixture
def tiny_instance():
    """Factory: ``tiny_instance(**overrides)`` -> a validated Instance."""

    def make(**overrides):
        return parse_instance(tiny_data(**overrides), "tiny")

    return make


@pytest.fixture(scope="session")
def gemini():
    return load_instance("gemini-ironwood")


@pytest.fixture(scope="session")
def gemini_data() -> dict:
    return yaml.safe_load(bundled_instance_path("gemini-ironwood").read_text())


def run_dir(tmp_path_factory) -> Path:
    """The temporary directory of this test run, shared by pytest-xdist's workers (each
    worker's basetemp is a folder in it); the session's basetemp without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _once(path: Path, make, wait: bool = True) -> bool:
    """Run ``make(tmp)`` and move ``tmp`` to ``path`` unless ``path`` exists, under a file
    lock: the first process of the run to ask builds it, the others wait and read it.
    With ``wait`` False, return False at once when another process holds the lock (it is
    building ``path``); True when ``path`` exists on return."""
    from filelock import FileLock, Timeout

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path) + ".lock")
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except Timeout:
        return False
    try:
        if not path.exists():
            tmp = path.with_name(path.name + ".part")
            make(tmp)
            tmp.replace(path)
    finally:
        lock.release()
    return True


def build_shared(paths: dict, make) -> None:
    """``make(key, tmp)`` for every ``key: path`` of ``paths`` not built yet by any process
    of the run (:func:`_once`): first those no other process is building, then waiting
    for the rest, so two xdist workers that need the same set build half each."""
    left = [k for k in paths if not _once(paths[k], lambda tmp, k=k: make(k, tmp), wait=False)]
    for k in left:
        _once(paths[k], lambda tmp, k=k: make(k, tmp))


@pytest.fixture(scope="session")
def solved(tmp_path_factory):
    """Factory: ``solved(name)`` -> (instance, plan) of ``solve(load_instance(name))`` for a
    bundled instance at the default options, solved once per test run and shared by every
    module that needs that plan (a plan is a frozen pydantic model: no test can change it
    for the next). Under pytest-xdist the workers share it too: the first to ask solves
    and pickles the plan into the run's directory (bit-for-bit the same floats), the
    others load it."""
    d = run_dir(tmp_path_factory) / "solved"
    done: dict = {}

    def make(name: str, path: Path) -> None:
        import pyomo.environ  # noqa: F401 -- before SciPy, as the CLI does

        from fleetplan.sizing import solve

        path.write_bytes(pickle.dumps(solve(load_instance(name)).plan))

    def get(name: str = "gemini-ironwood"):
        if name not in done:
            f = d / f"{name}.pickle"
            _once(f, lambda tmp: make(name, tmp))
            done[name] = (load_instance(name), pickle.loads(f.read_bytes()))
        return done[name]

    return get


@pytest.fixture(scope="session")
def plan_file(tmp_path_factory, solved):
    """Factory: ``plan_file(name)`` -> the path of a file holding the bytes `fleetplan solve
    NAME -o` writes for a bundled instance, written once per test run (shared by
    pytest-xdist's workers; read it; copy it to edit it).

    The command writes the plan of ``solve(instance, SolveOptions(time_limit_s=T))`` at its
    default ``--time-limit`` T, whose only trace in the plan is ``options.time_limit_s``
    (a limit that does not bind changes no number): so the file is the session's solve
    (``solved``) with T recorded, serialised as the command does, instead of a second solve
    of the same instance. tests/cli/test_solve_cli.py checks the bytes against the command
    run in this process (llama70b-h100) and in a process of its own (gemini-ironwood)."""
    import inspect

    from fleetplan.cli.common import dumps_json
    from fleetplan.cli.solve import solve_command

    default_limit = inspect.signature(solve_command).parameters["time_limit"].default
    d = run_dir(tmp_path_factory) / "plans"
    done: dict = {}

    def make(name: str, path: Path) -> None:
        plan = solved(name)[1]
        as_cli = plan.model_copy(update={"options": {**plan.options, "time_limit_s": default_limit}})
        path.write_bytes(dumps_json(as_cli.model_dump(mode="json")).encode("utf-8"))  # as write_atomic writes it

    def get(name: str = "gemini-ironwood"):
        if name not in done:
            p = d / f"{name}.json"
            _once(p, lambda tmp: make(name, tmp))
            done[name] = p
        return done[name]

    return get
