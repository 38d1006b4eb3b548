"""``--executor ray`` on a real local Ray cluster of two worker CPUs, started once for the
session: the same sweep gives the same document as the local process pool; a lost worker
is retried; a worker running another fleetplan is refused; Ctrl-C cancels what is still
running; a cluster that cannot be reached is a clear exit 2, at once or within the
connect timeout. Skipped, with the reason, when Ray is not installed (``pip install -e
'.[test,ray]'``; ``.ci/run`` installs it)."""

from __future__ import annotations

import builtins
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[test,ray]' runs the Ray executor tests (.ci/run does)")

from typer.testing import CliRunner  # noqa: E402

from fleetplan.cli.app import app  # noqa: E402
from fleetplan.errors import InputError  # noqa: E402
from fleetplan.report import ray_executor  # noqa: E402
from fleetplan.report.executor import get_executor  # noqa: E402
from fleetplan.report.ray_executor import RayExecutor  # noqa: E402
from tests.report import ray_tasks  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
_PRINT = builtins.print


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray cluster of two CPUs (two worker processes) for these tests, started
    in the background as the first test of tests/report ran (tests/report/conftest.py;
    here, when none did); shut down, and its session files removed, after the last of
    them. Yields its timings (s)."""
    from tests.report import ray_cluster as cluster

    try:
        yield cluster.wait()
    finally:
        cluster.shutdown()


def test_the_same_sweep_gives_the_same_document_as_the_local_pool(ray_cluster, sweep_yaml):
    """`fleetplan sensitivity --executor ray` (this process's Ray connection: the
    session's cluster) prints byte for byte the JSON `--executor local` prints: every
    solve ran in a Ray worker from the task document alone, and came back checked."""
    runner = CliRunner()
    args = ["sensitivity", str(sweep_yaml), "-p", "mfu=0.3:0.5", "--json", "--workers", "2"]
    r_ray = runner.invoke(app, args + ["--executor", "ray"])
    assert r_ray.exit_code == 0, r_ray.output
    r_local = runner.invoke(app, args + ["--executor", "local"])
    assert r_local.exit_code == 0, r_local.output
    assert r_ray.stdout == r_local.stdout
    doc = json.loads(r_ray.stdout)
    assert doc["base"]["status"] == "verified" and doc["rows"][0]["low"]["chips"] != doc["rows"][0]["high"]["chips"]
    assert "3 solves on this process's Ray connection (2 CPUs, at most 2 solves at once)" in r_ray.stderr
    assert ray.is_initialized()  # a connection the process had is left open


def test_where_the_solves_ran_and_progress(ray_cluster, sweep_data):
    """Each task is solved in a worker process (not here), reported as it finishes,
    and returned in task order."""
    from fleetplan.report import modify
    from fleetplan.report.sweep import make_task, solve_task

    tasks = [make_task(f"mfu={v}", modify.set_prior(sweep_data, "prefill_mfu", v), {"mip_gap": 0.0}) for v in (0.3, 0.4)]
    done = []
    with RayExecutor() as ex:
        out = ex.map(solve_task, tasks, lambda i, r: done.append((i, r["key"])))
    assert [r["key"] for r in out] == ["mfu=0.3", "mfu=0.4"] and sorted(done) == [(0, "mfu=0.3"), (1, "mfu=0.4")]
    assert all(w["pid"] != os.getpid() and w["node_id"] == ray.get_runtime_context().get_node_id() for w in ex.where)


def test_a_worker_with_another_fleetplan_is_refused(ray_cluster, monkeypatch):
    """The caller's fingerprint travels with every task; a worker whose own differs
    (here: the caller claims another version) refuses, and the sweep stops naming the
    node and what differs."""
    real = ray_executor.worker_fingerprint()
    monkeypatch.setattr(ray_executor, "worker_fingerprint", lambda: {**real, "fleetplan": "0.0.1"})
    with pytest.raises(InputError) as e:
        RayExecutor().map(ray_tasks.echo, [{"key": "a"}])
    text = e.value.render()
    assert "runs another fleetplan" in text and "fleetplan: worker 0.1.0, here 0.0.1" in text.replace(real["fleetplan"], "0.1.0")
    assert "node " in text


def test_a_lost_worker_is_retried_and_a_task_lost_past_its_retries_is_named(ray_cluster, tmp_path):
    ok = RayExecutor(max_retries=1).map(ray_tasks.crash_once, [{"key": "k", "marker": str(tmp_path / "a")}])
    assert ok == [{"key": "k", "attempts": 2}] and (tmp_path / "a").exists()
    with pytest.raises(InputError) as e:
        RayExecutor(max_retries=0).map(ray_tasks.crash_once, [{"key": "mfu=0.3", "marker": str(tmp_path / "b")}])
    text = e.value.render()
    assert "'mfu=0.3' was lost 1 time(s)" in text and "--executor ray" in text
    # a run that failed, not bad input: no 'invalid input ... Got: 'ray''
    assert text.startswith("the run failed (--executor ray): the task 'mfu=0.3'") and "invalid" not in text and "Got:" not in text
    # Ray relayed the lost worker's message without replacing this process's print
    assert builtins.print is _PRINT


def test_rays_messages_about_a_lost_worker_stay_off_stdout(ray_cluster, sweep_yaml, tmp_path, monkeypatch):
    """`fleetplan sensitivity --json --executor ray` where a worker dies mid-sweep (its
    first task kills its own worker, as `kill -9` of a `ray::` process does): Ray retries
    the task, and the driver prints its messages about it ("(raylet) A worker died ...",
    "Task run_checked failed. There are 3 retries remaining ...", ANSI coloured) from a
    background thread on sys.stdout whatever log_to_driver says. They go to stderr; stdout
    is the JSON alone. The retry waits until Ray has printed both its messages, so they
    surely come before the JSON."""
    import functools

    from fleetplan.report import sweep

    printed = []
    real = ray._private.worker.print_to_stdstream

    said: set[str] = set()

    def seen(data, *a, **kw):
        real(data, *a, **kw)
        lines = data.get("lines", [])
        if any("retries remaining" in line for line in lines):
            printed.append(data)
            said.add("retry")
        if any("A worker died" in line for line in lines):
            said.add("raylet")
        # release the retry once Ray has printed both its messages (the raylet's came after the
        # executor had closed under load, and this process's shared cluster -- unlike a command's
        # own, shut down when closed -- still printed it, on stdout; the retry's own wait, 60 s,
        # bounds a run where the raylet says nothing)
        if said == {"retry", "raylet"}:
            (tmp_path / "release").touch()

    monkeypatch.setattr(ray._private.worker, "print_to_stdstream", seen)
    monkeypatch.setattr(sweep, "solve_task", functools.partial(ray_tasks.crash_first_then_solve, marker_dir=str(tmp_path)))
    r = CliRunner().invoke(app, ["sensitivity", str(sweep_yaml), "-p", "mfu=0.3:0.5", "--json", "--executor", "ray"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "crashed").exists() and printed, "the worker was not lost, or Ray printed nothing about it"
    doc = json.loads(r.stdout)  # was: Ray's lines ahead of the JSON
    assert doc["base"]["status"] == "verified"
    # (where the message went besides stdout -- the runner's stderr, or the process's own when
    # Ray's print thread resolved the stream another way -- varied with the tests run before
    # this one in the full suite; stdout's being the JSON alone is the property)
    assert "retries remaining" not in r.stdout


def test_the_progress_line_counts_one_solve_in_the_singular(ray_cluster):
    with RayExecutor(workers=1) as ex:
        assert ex.description.endswith("(2 CPUs, at most 1 solve at once)"), ex.description
    with RayExecutor(workers=2) as ex:
        assert ex.description.endswith("at most 2 solves at once)")


def test_rays_notes_are_dropped_while_connected(ray_cluster, monkeypatch):
    """Ray's note that it set no SIGTERM handler (ray.init outside the main thread, as the
    bounded connect runs it) reaches a Ray Client driver through the client's log stream
    (the logger ray.util.client.logsclient) after the connect returned: it is dropped
    while the executor is connected, and only it. The connect to ray:// is stood in for
    (ray.init returns at once; no Ray Client server in the tests)."""
    import logging

    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: None)
    monkeypatch.setattr(ray, "shutdown", lambda: None)  # the session's connection stays
    monkeypatch.setattr(ray_executor, "_probe", lambda *a: None)
    monkeypatch.setattr(ray_executor, "_check_auth", lambda *a: None, raising=False)
    stream = logging.getLogger("ray.util.client.logsclient")
    keep = Keep(level=logging.DEBUG)
    stream.addHandler(keep)
    try:
        ex = RayExecutor(address="ray://127.0.0.1:10001")
        ex.open()
        stream.warning("SIGTERM handler is not set because current thread is not the main thread.")
        stream.warning("something else")
        ex.close()
        stream.warning("SIGTERM handler is not set: after close")
    finally:
        stream.removeHandler(keep)
    assert seen == ["something else", "SIGTERM handler is not set: after close"]


def test_a_local_cluster_does_not_warn_of_its_token_authentication(ray_cluster, monkeypatch):
    """Ray 2.59+ turns token authentication on for a new local cluster and, RAY_AUTH_MODE
    being unset, warns 'Token authentication is enabled for this Ray cluster ...' on every
    run: a local cluster started for the run drops that warning (and only it). ray.init
    is stood in for (one local cluster per session): it logs the warning as Ray does."""
    import logging

    setup = logging.getLogger("ray._private.authentication.authentication_token_setup")
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    def fake_init(**kw):
        setup.warning("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out.")
        setup.warning("something else")
        raise RuntimeError("not started in this test")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)  # a failed start is shut down: not the session's connection
    keep = Keep(level=logging.DEBUG)
    setup.addHandler(keep)
    try:
        with pytest.raises(InputError, match="the local Ray cluster did not start .RuntimeError: not started in this test"):
            RayExecutor(address="local").open()
        setup.warning("Token authentication is enabled for this Ray cluster: outside the executor")
    finally:
        setup.removeHandler(keep)
    assert seen == ["something else", "Token authentication is enabled for this Ray cluster: outside the executor"]


# ----------------------------------------------------------------------------- addresses (no cluster)


@pytest.mark.parametrize("address,needle", [
    ("head", "a GCS address needs its port"),
    ("http://head:10001", "give ray://HOST:PORT"),
    ("ray://head:port", "the port must be a number"),
    ("ray://:10001", "no host name"),
])
def test_a_malformed_address_is_named(address, needle):
    with pytest.raises(InputError) as e:
        get_executor("ray", 2, address)
    assert needle in e.value.render() and "--ray-address" in e.value.render()


def test_an_explicit_address_in_a_connected_process_is_refused(ray_cluster):
    with pytest.raises(InputError, match="already connected to Ray"):
        RayExecutor(address="ray://127.0.0.1:10001").open()


def test_an_unreachable_cluster_is_exit_2_within_the_timeout(sweep_yaml):
    """In a process of its own (this one is connected to the session's cluster): a port
    nobody listens on is refused at once by the TCP probe; a listener that never speaks
    Ray's protocol is given up after --ray-connect-timeout, not Ray's minutes."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    code = ("import sys\n"
            "from fleetplan.report.executor import get_executor\n"
            "from fleetplan.errors import InputError\n"
            "for a in sys.argv[1:]:\n"
            "    try:\n"
            "        get_executor('ray', 2, a, 0.5).open()\n"
            "        print('CONNECTED', a)\n"
            "    except InputError as e:\n"
            "        print(e.render().replace(chr(10), ' '))\n")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    try:
        p = subprocess.run([sys.executable, "-c", code, f"ray://127.0.0.1:{closed_port}", f"127.0.0.1:{silent.getsockname()[1]}"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    finally:
        silent.close()
    lines = [x for x in p.stdout.splitlines() if x.strip()]
    assert len(lines) == 2, p.stdout + p.stderr
    assert "refuses connections" in lines[0] and "--ray-address" in lines[0]
    assert "did not answer within 0.5 s (--ray-connect-timeout)" in lines[1]


@pytest.mark.parametrize("auth_env,needle", [
    ({}, "has token authentication on and this driver sends no token"),
    ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "not-the-clusters-token"}, "refuses this driver's token"),
])
def test_a_cluster_that_refuses_the_drivers_authentication_is_named_at_once(ray_cluster, auth_env, needle):
    """A driver (a process of its own) reaching the session's cluster -- token
    authentication on, Ray's default for a local cluster since 2.59, as on a `ray start`
    head that found ~/.ray/auth_token -- by its GCS address without RAY_AUTH_MODE=token, or
    with another token: Ray retried for ever (`Unauthenticated ... InvalidAuthToken`
    each second) and the connect ended as 'did not answer within 20 s: is it a Ray head
    ...'. Now the refusal is named, with the fix, before Ray is asked to connect."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        pytest.skip("the session's cluster runs without token authentication (RAY_AUTH_MODE is not 'token')")
    gcs = ray.get_runtime_context().gcs_address
    code = ("import sys\n"
            "from fleetplan.report.executor import get_executor\n"
            "from fleetplan.errors import InputError\n"
            "try:\n"
            "    get_executor('ray', 2, sys.argv[1], 20.0).open()\n"
            "    print('CONNECTED')\n"
            "except InputError as e:\n"
            "    print(e.render().replace(chr(10), ' '))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    env.update(auth_env, RAY_USAGE_STATS_ENABLED="0")
    p = subprocess.run([sys.executable, "-c", code, gcs], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert needle in p.stdout and "--ray-address" in p.stdout, p.stdout + p.stderr[-2000:]
    assert "RAY_AUTH_TOKEN" in p.stdout and "ray get-auth-token" in p.stdout
    if not auth_env:
        assert "export RAY_AUTH_MODE=token" in p.stdout


# ----------------------------------------------------------------------------- last: it stops both workers


def test_sigterm_during_a_ray_sweep_is_handled_as_on_the_local_pool(ray_cluster, sweep_yaml, tmp_path):
    """`fleetplan levers --executor ray` (a process of its own, connected to the session's
    cluster by its GCS address, so ray.init runs in it) and SIGTERM while a solve runs:
    ray.init had replaced the process's SIGTERM handling (a native stack dump, exit 134);
    now it is the local executor's: the solves cancelled, `interrupted (SIGTERM)`, exit
    143. The solve (deaf to interrupts, two minutes) writes its pid when it starts: the
    signal is sent then, whatever the machine's load."""
    pids = tmp_path / "pids"
    pids.mkdir()
    gcs = ray.get_runtime_context().gcs_address
    code = ("import functools, sys\n"
            "from fleetplan.report import sweep\n"
            "from tests.report import ray_tasks\n"
            f"sweep.solve_task = functools.partial(ray_tasks.stubborn_solve, pid_dir={str(pids)!r})\n"
            "from fleetplan.cli.entry import main\n"
            f"sys.argv = ['fleetplan', 'levers', {str(sweep_yaml)!r}, '--executor', 'ray', '--ray-address', {gcs!r}, '--workers', '1']\n"
            "main()\n")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}  # RAY_AUTH_MODE as this process's (Ray set it for the session's cluster)
    env.pop("RAY_ADDRESS", None)
    p = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(pids.iterdir()) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.poll() is None, "the sweep ended before its first solve started: " + p.stderr.read()
        assert list(pids.iterdir()), "no solve started within 120 s"
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 143, err[-3000:]
    assert "interrupted (SIGTERM)" in err and "nothing written" in err
    assert "SIGTERM received" not in err and out == ""
    worker = int(next(pids.iterdir()).name)
    deadline = time.monotonic() + 60
    while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{worker}").exists(), "the solve running at the SIGTERM was not stopped"


def test_ctrl_c_cancels_the_running_and_queued_tasks(ray_cluster, tmp_path):
    """KeyboardInterrupt while two solves that ignore interrupts run and a third waits:
    the map re-raises it at once (long before the two-minute tasks could finish) and the
    workers running them are stopped (ray.cancel(force=True)), so the cluster is free."""
    pids = tmp_path / "pids"
    pids.mkdir()
    tasks = [{"key": str(i), "pid_dir": str(pids)} for i in range(3)]

    def interrupt_when_both_run():
        deadline = time.monotonic() + 60
        while len(list(pids.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_both_run, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        RayExecutor().map(ray_tasks.stubborn, tasks)
    assert time.monotonic() - t0 < 110  # the tasks sleep 120 s: the map did not wait for them
    started = [int(p.name) for p in pids.iterdir()]
    assert len(started) == 2

    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    deadline = time.monotonic() + 60
    while any(alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in started), "the workers running the cancelled solves were not stopped"
