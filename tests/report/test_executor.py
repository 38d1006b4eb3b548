"""The sweep executors: order of results, the process pool agrees with the serial run
(solves are deterministic), plug-ins by import path, and bad --executor/--workers."""

from __future__ import annotations

import pytest

from fleetplan.errors import InputError
from fleetplan.report import modify
from fleetplan.report.executor import LocalPoolExecutor, SerialExecutor, SweepExecutor, get_executor
from fleetplan.report.sweep import make_task, run_solves, solve_task


def _square(task: dict) -> dict:
    return {"key": task["key"], "value": task["x"] ** 2}


def _boom(task: dict) -> dict:
    if task["x"] == 1:
        raise ValueError("task 1 failed")
    return _square(task)


class Recording(SerialExecutor):
    """A plug-in executor (what a cluster engine would subclass): records what it ran."""

    name = "recording"
    ran: list = []

    def map(self, fn, tasks, on_done=None):
        Recording.ran.extend(t["key"] for t in tasks)
        return super().map(fn, tasks, on_done)


def make_recording(workers: int = 1) -> SweepExecutor:
    return Recording()


def make_wrong(workers: int = 1):
    return object()


def test_serial_keeps_task_order_and_reports_each():
    seen = []
    out = SerialExecutor().map(_square, [{"key": str(i), "x": i} for i in range(5)], lambda i, r: seen.append((i, r["value"])))
    assert [r["value"] for r in out] == [0, 1, 4, 9, 16]
    assert seen == [(0, 0), (1, 1), (2, 4), (3, 9), (4, 16)]


def test_process_pool_solves_agree_with_serial(sweep_data):
    """Two workers return the same summaries, in task order, as one process: each
    solve is deterministic, so parallelism changes nothing but the wall time."""
    tasks = [make_task(f"mfu={v}", modify.set_prior(sweep_data, "prefill_mfu", v), {"mip_gap": 0.0}) for v in (0.3, 0.4, 0.5)]
    done = []
    pool = LocalPoolExecutor(2).map(solve_task, tasks, lambda i, r: done.append(i))
    serial = SerialExecutor().map(solve_task, tasks)
    strip = lambda rs: [{k: v for k, v in r.items() if k != "wall_s"} for r in rs]  # noqa: E731
    assert strip(pool) == strip(serial)
    assert sorted(done) == [0, 1, 2]
    assert [r["key"] for r in pool] == ["mfu=0.3", "mfu=0.4", "mfu=0.5"]


def test_a_failing_task_stops_the_pool():
    with pytest.raises(ValueError, match="task 1 failed"):
        LocalPoolExecutor(2).map(_boom, [{"key": str(i), "x": i} for i in range(4)])


def test_plugin_by_import_path_runs_the_sweep(sweep_data):
    ex = get_executor("tests.report.test_executor:make_recording", 1)
    Recording.ran.clear()
    res = run_solves([make_task("base", sweep_data, {"mip_gap": 0.0})], ex)
    assert Recording.ran == ["base"] and res["base"].status == "verified"


def make_failing(workers: int = 1):
    raise RuntimeError("no cluster here")


@pytest.mark.parametrize("spec,workers,needle", [
    ("nope", None, "unknown executor"),
    ("no.such.module:factory", None, "cannot import module 'no.such.module'"),
    ("tests.report.test_executor:missing", None, "has no attribute 'missing'"),
    ("tests.report.test_executor:make_wrong", None, "not a fleetplan.report.executor.SweepExecutor"),
    ("local", 0, "--workers"),
    # each of these was a traceback (exit 1): an empty name, callables that are not factories, a factory that raises
    (":", None, "no module name before the ':'"),
    ("json:", None, "no factory name after the ':'"),
    ("os:system", None, "does not take workers=N"),
    ("builtins:print", None, "does not take workers=N"),
    ("json:dumps", None, "failed: TypeError"),
    ("json:__doc__", None, "is a str, not a factory"),
    ("tests.report.test_executor:make_failing", None, "failed: RuntimeError: no cluster here"),
])
def test_bad_executor_named(spec, workers, needle):
    with pytest.raises(InputError) as e:
        get_executor(spec, workers)
    text = e.value.render()
    assert needle in text, text
    assert ("--workers" if workers == 0 else "--executor") in text


def test_a_factory_that_cannot_take_workers_is_never_called(monkeypatch):
    import os

    called = []
    monkeypatch.setattr(os, "system", lambda command: called.append(command))
    with pytest.raises(InputError, match="does not take workers=N"):
        get_executor("os:system", 2)
    assert called == []


def test_defaults():
    assert get_executor("local").workers in (1, 2)
    assert get_executor("serial").workers == 1


# ----------------------------------------------------------------------------- --executor ray, without a cluster
# (the cluster tests are tests/report/test_ray.py, skipped when Ray is not installed)


def test_ray_not_installed_is_a_clear_exit_2(monkeypatch, tmp_path):
    """Without the extra, --executor ray says how to install it (exit 2, nothing solved)."""
    import yaml
    from typer.testing import CliRunner

    from fleetplan.cli.app import app
    from fleetplan.report import ray_executor
    from tests.conftest import tiny_data
    from tests.report.conftest import SWEEP

    monkeypatch.setattr(ray_executor, "ray_installed", lambda: False)
    with pytest.raises(InputError) as e:
        get_executor("ray", 2)
    assert "pip install 'fleetplan[ray]'" in e.value.render() and "--executor" in e.value.render()
    assert "pip install -e '.[ray]'" in e.value.render()  # a clone, as the README installs it
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(tiny_data(**SWEEP)))
    chart = tmp_path / "t.png"
    r = CliRunner().invoke(app, ["sensitivity", str(p), "-p", "mfu=0.3:0.5", "--executor", "ray", "-o", str(chart)])
    assert r.exit_code == 2, r.output
    assert "pip install 'fleetplan[ray]'" in r.output.replace("\n", "") and not chart.exists()
    assert "pip install -e '.[ray]'" in r.output.replace("\n", "")


def test_ray_options_belong_to_the_ray_executor():
    with pytest.raises(InputError, match="applies to --executor ray only"):
        get_executor("local", 2, "ray://head:10001")
    with pytest.raises(InputError, match="--ray-connect-timeout"):
        get_executor("serial", None, None, 5.0)


def test_the_default_install_never_imports_ray():
    """import fleetplan, the CLI and the executors (the Ray one too, even constructed)
    load no Ray: only a sweep run with --executor ray does."""
    import subprocess
    import sys

    code = ("import sys, fleetplan, fleetplan.cli.app, fleetplan.report.ray_executor as r\n"
            "from fleetplan.report.executor import get_executor\n"
            "get_executor('serial'); get_executor('local', 2)\n"
            "if r.ray_installed(): get_executor('ray', 2, 'ray://head:10001')\n"
            "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_ray_task_checks_the_worker_and_the_task_before_solving():
    """run_checked (the body of every Ray task, here called directly): a worker whose
    fingerprint is not the caller's, or a task whose SHA-256 is not the one sent, is
    refused without running the task; otherwise the answer carries the digests of the
    task and of the result."""
    from fleetplan.report.ray_executor import run_checked, task_digest, worker_fingerprint

    ran = []

    def fn(task):
        ran.append(task["key"])
        return {"key": task["key"], "value": task["x"] ** 2}

    task = {"key": "a", "x": 3}
    fp = worker_fingerprint()
    assert set(fp) == {"fleetplan", "fleetplan_source_sha256", "highspy"} and len(fp["fleetplan_source_sha256"]) == 64
    other = run_checked(fn, task, task_digest(task), {**fp, "highspy": "0.0"})
    assert other["refused"] == "fingerprint" and other["fingerprint"] == fp and ran == []
    wrong = run_checked(fn, task, task_digest({**task, "x": 4}), fp)
    assert wrong["refused"] == "task" and ran == []
    ok = run_checked(fn, task, task_digest(task), fp)
    assert ok["result"] == {"key": "a", "value": 9} and ok["task_sha256"] == task_digest(task)
    assert ok["result_sha256"] == task_digest({"key": "a", "value": 9}) and ran == ["a"]
    # the digest is of the document's content, not of its key order
    assert task_digest({"x": 3, "key": "a"}) == task_digest(task)


def _sleep_marked(marker: str) -> None:
    import time
    from pathlib import Path

    Path(marker).touch()
    time.sleep(600)


def test_a_stopped_pool_leaves_no_manager_thread_for_the_exit_hook_to_race(tmp_path):
    """Regression (a Ctrl-C of a sweep now and then ended in 'OSError: [Errno 9] Bad file
    descriptor' after 'interrupted'): CPython's exit hook writes to every live pool manager's
    wake-up pipe without the lock the manager closes it under, so _stop_pool returns only
    when the manager thread has finished (its pipe marked closed, which the hook skips)."""
    import concurrent.futures.process as cfp
    import multiprocessing
    import time
    from concurrent.futures import ProcessPoolExecutor

    from fleetplan.report.executor import _stop_pool

    pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("fork"))
    markers = [tmp_path / f"started{i}" for i in range(2)]
    for m in markers:
        pool.submit(_sleep_marked, str(m))
    guard = time.monotonic() + 120  # a hang guard only
    while not all(m.exists() for m in markers) and time.monotonic() < guard:
        time.sleep(0.02)
    manager = pool._executor_manager_thread
    wakeup = cfp._threads_wakeups[manager]
    _stop_pool(pool)
    assert not manager.is_alive()
    assert wakeup._closed  # the exit hook's "if not self._closed" skips it


def test_the_forkserver_and_workers_start_with_sigint_blocked(tmp_path):
    """Regression (newcomer trial: 3 of 15 Ctrl-Cs of `fleetplan sensitivity` 2-3 s in printed a
    KeyboardInterrupt traceback from the forkserver importing Pyomo, after 'interrupted'): the
    forkserver (and the workers it forks) inherit a blocked SIGINT; the caller's mask is back
    after the submissions. In a fresh process: the forkserver is one per process."""
    import subprocess
    import sys

    code = (
        "import multiprocessing.forkserver as fs, signal\n"
        "from fleetplan.report.executor import LocalPoolExecutor\n"
        "print(LocalPoolExecutor(2).map(dict, [{'a': 1}, {'a': 2}]))\n"
        "pid = fs._forkserver._forkserver_pid\n"
        "blk = next(l for l in open(f'/proc/{pid}/status') if l.startswith('SigBlk:')).split()[1]\n"
        "print('forkserver', int(blk, 16) >> (signal.SIGINT - 1) & 1)\n"
        "print('here', signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "[{'a': 1}, {'a': 2}]" in out.stdout
    assert "forkserver 1" in out.stdout and "here False" in out.stdout, out.stdout
