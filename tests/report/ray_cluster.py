"""The Ray tests' one local cluster (two CPUs), started in a background thread as the
first test of tests/report starts in a run that includes the Ray tests
(``pytest_runtest_setup`` in this folder's conftest; under pytest-xdist, by their
fixture in the worker that runs them), so its startup -- several seconds of Ray's own
processes starting, mostly waiting -- overlaps the tests before them; it stops after
the Ray tests (the idle cluster uses ~7% of a core). ``wait()`` is the fixture's: it
joins the start, and the two worker processes have each solved a tiny instance by then
(one warm-up task each)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time

_state: dict = {}


def _warm() -> int:
    """One tiny solve in a worker process: its first solve pays for the imports and the
    solver's first load (~3 s on a loaded machine), here in the background rather than in
    the first test."""
    from fleetplan.report.sweep import make_task, solve_task
    from tests.conftest import tiny_data
    from tests.report.conftest import SWEEP

    assert solve_task(make_task("warm-up", tiny_data(**SWEEP), {}))["status"] == "verified"
    time.sleep(0.2)  # both warm-up tasks hold a CPU at once: one per worker process
    return os.getpid()


def _start() -> None:
    import ray

    from fleetplan.report.ray_executor import LOCAL_OBJECT_STORE_BYTES

    t0 = time.perf_counter()
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                 logging_level=logging.WARNING, _temp_dir=_state["tmp"])
        _state["startup_s"] = time.perf_counter() - t0
        warm = ray.remote(num_cpus=1)(_warm)
        _state["warm_pids"] = ray.get([warm.remote() for _ in range(2)])
        _state["ready_s"] = time.perf_counter() - t0
    except BaseException as e:  # noqa: BLE001 -- handed to the fixture
        _state["error"] = e
    finally:
        _state["ready"].set()
    # Ray's processes die with the *thread* that started them (Linux PR_SET_PDEATHSIG is
    # per thread): this one lives until shutdown()
    _state["stop"].wait()


def start_in_background() -> None:
    """Start the cluster once (no-op when started, or when Ray is not installed).
    Ray's session files go to a short temporary directory (its sockets live there);
    usage statistics are off for the run."""
    import importlib.util

    if "thread" in _state or importlib.util.find_spec("ray") is None:
        return
    _state["env"] = {k: os.environ.get(k) for k in ("RAY_USAGE_STATS_ENABLED", "RAY_TQDM_PATCH_PRINT")}
    # before Ray's processes start (they inherit it); and Ray is not to replace builtins.print
    # in this process when it relays a worker's message (as the executor also asks)
    os.environ.update({"RAY_USAGE_STATS_ENABLED": "0", "RAY_TQDM_PATCH_PRINT": "0"})
    _state["tmp"] = tempfile.mkdtemp(prefix="fpray-")
    _state["ready"], _state["stop"] = threading.Event(), threading.Event()
    _state["thread"] = threading.Thread(target=_start, name="ray-test-cluster", daemon=True)
    _state["thread"].start()


def wait() -> dict:
    """Join the start (starting it now if the conftest hook did not); raise what it
    raised. Returns {startup_s, ready_s, warm_pids, waited_s}."""
    start_in_background()
    t0 = time.perf_counter()
    _state["ready"].wait()
    if "error" in _state:
        raise _state["error"]
    return {k: _state[k] for k in ("startup_s", "ready_s", "warm_pids")} | {"waited_s": time.perf_counter() - t0}


def shutdown() -> None:
    import ray

    if "thread" not in _state:
        return
    _state["ready"].wait()
    ray.shutdown()
    _state["stop"].set()
    _state["thread"].join()
    for k, v in _state["env"].items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    shutil.rmtree(_state["tmp"], ignore_errors=True)
    _state.clear()
