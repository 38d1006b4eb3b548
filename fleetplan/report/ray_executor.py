"""Sweeps on a Ray cluster (``--executor ray``): each solve a Ray task, on this machine or
on a cluster of many.

Every task is the sweep's own JSON-able dict (the modified instance as data and the
solve options, :func:`fleetplan.report.sweep.make_task`): it travels to a worker, is
validated and solved there by the same module-level function the local pool runs
(:func:`fleetplan.report.sweep.solve_task`), and only the plain result dict comes back.
No Pyomo model is ever pickled. Each task asks Ray for one CPU (``num_cpus=1``) and
solves with one HiGHS thread (the sweep's ``threads: 1``), so a node runs as many solves
at once as it has CPUs.

Where it runs (``address``, the CLI's ``--ray-address``):

* ``None``: the ``RAY_ADDRESS`` environment variable if set, else ``local``; in a
  process that is already connected (``ray.init`` called by the user, a notebook), that
  connection, which is left open afterwards.
* ``local``: a Ray cluster started on this machine for the run (``workers`` CPUs, no
  dashboard, usage statistics off unless ``RAY_USAGE_STATS_ENABLED`` says otherwise)
  and shut down after it, or when it fails to start (a :class:`RunError` naming Ray and
  what to do); a watchdog process (:mod:`fleetplan.report.ray_guard`) stops whatever of
  it Ray leaves, also when Ray ends this process itself (its raylet dying as the driver
  connects: exit 1 from Ray's C++, the watchdog's message after Ray's line).
* ``auto``: the cluster ``ray start`` runs on this machine (or ``RAY_ADDRESS``).
* ``ray://HOST:PORT`` (Ray Client, port 10001 by default) or ``HOST:PORT`` (the head's
  GCS port, from a machine inside the cluster's network).

Connecting is bounded by ``connect_timeout_s``: nothing listening at the address is
reported at once (a TCP probe), a head that does not answer after that timeout.

Fault tolerance: a task whose worker process or node dies is retried by Ray up to
``max_retries`` times (Ray's task retries on system failures); an exception raised by
the solve itself is not retried (a solve is deterministic) and stops the sweep, as with
the local pool. Ctrl-C (KeyboardInterrupt) cancels every task not finished
(``ray.cancel(force=True)``: a solve deep in HiGHS does not notice an interrupt, so its
worker is stopped) and re-raises.

Checks that a worker solved the task it was given with the code the caller runs: every
task carries the caller's :func:`worker_fingerprint` (fleetplan's version, a SHA-256 of
its source files, the HiGHS version) and a SHA-256 of the task document
(:func:`task_digest`). The worker recomputes both before solving and refuses a mismatch
(another fleetplan on that node gives other plans); its answer carries the digest of the
task it solved and of the result, which the caller checks again on arrival.

Raises (as :class:`~fleetplan.errors.InputError` naming ``--executor`` or
``--ray-address``, the CLI's exit 2): Ray not installed (``pip install
'fleetplan[ray]'``), an address that cannot be reached in time or that refuses this
driver's token authentication, a worker running another fleetplan; as
:class:`~fleetplan.errors.RunError` (an InputError, exit 2 too, but said as a run that
failed): a task lost more than ``max_retries`` times, a broken transfer.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import socket
import threading
import time
from typing import Any, Callable, Sequence

from fleetplan.errors import InputError, Problem, RunError
from fleetplan.report.executor_base import Result, SweepExecutor, Task, default_workers

__all__ = ["RayExecutor", "worker_fingerprint", "task_digest", "run_checked", "ray_installed", "INSTALL_HINT",
           "DEFAULT_CONNECT_TIMEOUT_S", "DEFAULT_MAX_RETRIES", "RAY_CLIENT_PORT"]

#: How to install the extra: from PyPI or a wheel, and in a clone (the README installs fleetplan with ``pip install -e .``).
INSTALL_HINT = "pip install 'fleetplan[ray]' (in a clone of fleetplan: pip install -e '.[ray]')"
#: Seconds to reach a cluster before giving up (the Ray Client's own retries take ~30 s, a
#: GCS address that does not answer blocks for minutes).
DEFAULT_CONNECT_TIMEOUT_S = 20.0
#: Retries of a task whose worker or node died (Ray's default for tasks).
DEFAULT_MAX_RETRIES = 3
#: The Ray Client server's port on the head node (``ray start --head`` serves it there).
RAY_CLIENT_PORT = 10001
#: Object store of a local cluster started for a sweep: tasks and results are documents
#: of kilobytes, so Ray's default (30% of the machine's memory) is not reserved.
LOCAL_OBJECT_STORE_BYTES = 128 * 2**20
#: How often the wait for finished tasks returns to Python (s), so Ctrl-C is handled promptly.
WAIT_SLICE_S = 0.5


def ray_installed() -> bool:
    """Whether the ``ray`` package can be imported (without importing it)."""
    return importlib.util.find_spec("ray") is not None


# ----------------------------------------------------------------------------- checks


def _canonical(obj: Any) -> bytes:
    # the same canonical JSON as the instance hash (fleetplan.instance.io): sorted keys, no spaces
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def task_digest(doc: Any) -> str:
    """SHA-256 (hex) of a task or result document's canonical JSON: equal on both sides of
    the wire exactly when the worker received (or returned) the same document."""
    return hashlib.sha256(_canonical(doc)).hexdigest()


@functools.lru_cache(maxsize=1)
def worker_fingerprint() -> dict[str, str]:
    """What a worker must share with the caller for its plans to be the caller's:
    ``fleetplan`` (the version), ``fleetplan_source_sha256`` (SHA-256 over the relative
    path and bytes of every ``.py`` and ``.yaml`` file of the installed package, the
    bundled instances aside: a task carries its instance whole), ``highspy`` (the MIP
    solver's version). Computed once per process (~10 ms)."""
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path

    import fleetplan

    root = Path(fleetplan.__file__).resolve().parent
    h = hashlib.sha256()
    files = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = Path(dirpath).relative_to(root)
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not (rel_dir == Path(".") and d == "instances"))
        files += [Path(dirpath) / f for f in filenames if f.endswith((".py", ".yaml"))]
    for f in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    try:
        highs = version("highspy")
    except PackageNotFoundError:
        highs = "not installed"
    return {"fleetplan": fleetplan.__version__, "fleetplan_source_sha256": h.hexdigest(), "highspy": highs}


def _where() -> dict[str, Any]:
    """The worker's node (Ray node id and address), host name and process id: for
    messages, and to see how a sweep spread over the nodes."""
    import sys

    ip = node = "?"
    ray = sys.modules.get("ray")
    # outside a Ray worker (a direct call) there is no node; ask nothing that would start Ray
    if ray is not None and ray.is_initialized():
        try:
            ip = ray.util.get_node_ip_address()
            node = ray.get_runtime_context().get_node_id()
        except Exception:  # noqa: BLE001 -- only for a message
            pass
    return {"node_ip": ip, "node_id": node, "host": socket.gethostname(), "pid": os.getpid()}


def run_checked(fn: Callable[[Task], Result], task: Task, digest: str, expected: dict[str, str]) -> dict[str, Any]:
    """The body of every Ray task (module-level: Ray ships it by reference). Refuses a
    worker whose :func:`worker_fingerprint` is not ``expected`` and a task whose
    :func:`task_digest` is not ``digest``; otherwise ``fn(task)``.

    Returns: ``{"result", "task_sha256", "result_sha256", "where"}``, or ``{"refused":
    reason, "fingerprint", "where"}`` (never raises for a mismatch: the caller names the
    node and stops the sweep)."""
    fp = worker_fingerprint()
    where = _where()
    if fp != expected:
        return {"refused": "fingerprint", "fingerprint": fp, "where": where}
    got = task_digest(task)
    if got != digest:
        return {"refused": "task", "task_sha256": got, "fingerprint": fp, "where": where}
    result = fn(task)
    return {"result": result, "task_sha256": got, "result_sha256": task_digest(result), "where": where}


# ----------------------------------------------------------------------------- addresses


def _bad(option: str, msg: str, value: str = "") -> InputError:
    return InputError(option, [Problem(option, msg, value)])


#: The local cluster did not start (``ray.init`` raised): what happened and what to do.
_NOT_STARTED = ("the local Ray cluster did not start ({why}); what had started of it was stopped. Run the command again; if Ray fails "
                "the same way, run the sweep with --executor local (the same results on one machine) and see Ray's logs in the newest "
                "/tmp/ray/session_*/logs (raylet.out, gcs_server.out).")


def _failed(msg: str) -> RunError:
    """The sweep could not finish on Ray (not an input error; exit 2 as docs/cli.md gives)."""
    return RunError("--executor ray", [Problem("--executor ray", msg)])


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of 'ray://HOST[:PORT]' or 'HOST:PORT' ([v6]:PORT for IPv6); None for
    'local' and 'auto'. Raises InputError naming --ray-address for anything else."""
    from urllib.parse import urlsplit

    if address in ("local", "auto"):
        return None
    usage = ("give ray://HOST:PORT (Ray Client, port 10001 by default), HOST:PORT (the head's GCS port), 'auto' (the cluster "
             "`ray start` runs on this machine) or 'local' (a cluster started for the run).")
    client = address.startswith("ray://")
    rest = address[len("ray://"):] if client else address
    if "://" in rest or "/" in rest.rstrip("/") or not rest.strip("/"):
        raise _bad("--ray-address", usage, repr(address))
    u = urlsplit("//" + rest.rstrip("/"))
    try:
        port = u.port
    except ValueError:
        raise _bad("--ray-address", "the port must be a number 1..65535; " + usage, repr(address)) from None
    if not u.hostname:
        raise _bad("--ray-address", "no host name; " + usage, repr(address))
    if port is None:
        if not client:
            raise _bad("--ray-address", "a GCS address needs its port (HOST:6379 by default); or give ray://HOST for the Ray Client.",
                       repr(address))
        port = RAY_CLIENT_PORT
    if port == 0:
        raise _bad("--ray-address", "the port must be a number 1..65535.", repr(address))
    return u.hostname, port


def _probe(address: str, host: str, port: int, timeout_s: float) -> None:
    """Raise InputError naming --ray-address when nothing accepts a TCP connection at
    host:port within ``timeout_s`` (a wrong host or port, a head that is down, a
    firewall), before Ray's own, much longer, retries."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except socket.gaierror as e:
        why = f"the host name {host!r} does not resolve ({e.strerror or e})"
    except (TimeoutError, socket.timeout):
        why = f"no answer from {host}:{port} within {timeout_s:g} s (a firewall, or a head that is down)"
    except OSError as e:
        why = f"{host}:{port} refuses connections ({e.strerror or e}): no Ray head listens there"
    raise _bad("--ray-address", f"cannot reach the Ray cluster: {why}. Start the head with `ray start --head` (Ray Client port "
                                f"{RAY_CLIENT_PORT}, GCS port 6379) or check --ray-address.", repr(address))


#: Where Ray reads a driver's token from, in its order of precedence (Ray's token authentication
#: docs): the token itself, a file it names, the default file.
TOKEN_ENV, TOKEN_PATH_ENV, DEFAULT_TOKEN_FILE = "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "~/.ray/auth_token"
#: A cheap unary call (method, serialized request) of each server a driver reaches first: the
#: GCS (HOST:PORT; an empty GetClusterIdRequest) and the Ray Client server (ray://; the
#: ClusterInfo PING its clients send first, ``type: PING`` = 6, which it answers itself).
_AUTH_PROBE = {False: ("/ray.rpc.NodeInfoGcsService/GetClusterId", b""), True: ("/ray.rpc.RayletDriver/ClusterInfo", b"\x08\x06")}


def _token() -> str | None:
    """The token Ray would send from this process in token mode (RAY_AUTH_TOKEN, else the
    file RAY_AUTH_TOKEN_PATH names, else ~/.ray/auth_token), or None."""
    if os.environ.get(TOKEN_ENV, "").strip():
        return os.environ[TOKEN_ENV].strip()
    path = os.environ.get(TOKEN_PATH_ENV) or os.path.expanduser(DEFAULT_TOKEN_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _token_note() -> str:
    """'; a token file exists here: ~/.ray/auth_token' when one does (what `ray start` turns token authentication on with)."""
    return f"; a token file exists here: {DEFAULT_TOKEN_FILE}" if os.path.isfile(os.path.expanduser(DEFAULT_TOKEN_FILE)) else ""


def _check_auth(address: str, host: str, port: int, client: bool, timeout_s: float) -> None:
    """Raise InputError naming --ray-address, at once, when the cluster refuses this
    driver's authentication: a cluster with Ray's token authentication on (``ray start``
    turns it on by itself when it finds a token, e.g. the ``~/.ray/auth_token`` a local
    ``--executor ray`` run creates) and a driver without ``RAY_AUTH_MODE=token``, or with
    another token. Ray would retry for ever (``Unauthenticated: ... InvalidAuthToken``
    each second) and the connect end at the timeout as an unanswered head.

    One gRPC call to the server the driver reaches first (the GCS, or the Ray Client
    server), with the token Ray would send (none unless ``RAY_AUTH_MODE=token``); an
    answer other than UNAUTHENTICATED (or none, or no grpc) says nothing and the
    connect goes ahead."""
    try:
        import grpc
    except ImportError:
        return
    token_mode = os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "token"
    token = _token() if token_mode else None
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    channel = grpc.insecure_channel(target)
    try:
        method, request = _AUTH_PROBE[client]
        channel.unary_unary(method)(request, timeout=timeout_s, metadata=metadata)
        return
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.UNAUTHENTICATED:
            return
    except Exception:  # noqa: BLE001 -- the probe only helps the message; the connect decides
        return
    finally:
        channel.close()
    sources = (f"{TOKEN_ENV} (the token), {TOKEN_PATH_ENV} (a file holding it) or {DEFAULT_TOKEN_FILE}; `ray get-auth-token` on the "
               "head prints the cluster's")
    if not token_mode:
        why = (f"the Ray cluster has token authentication on and this driver sends no token (RAY_AUTH_MODE is not 'token' here). "
               f"`export RAY_AUTH_MODE=token` and give the cluster's token as {sources}{_token_note()}")
    elif token is None:
        why = f"the Ray cluster has token authentication on and RAY_AUTH_MODE=token here, but no token is set: give it as {sources}"
    else:
        why = (f"the Ray cluster refuses this driver's token (InvalidAuthToken): the one read here ({sources} -- the first set) "
               "is not the cluster's")
    raise _bad("--ray-address", why + " (docs/ray.md, A cluster of many machines).", repr(address))


# ----------------------------------------------------------------------------- executor


class RayExecutor(SweepExecutor):
    """Runs a sweep's tasks on Ray; see the module docstring.

    Args:
        workers: a local cluster's CPUs (count; default 2, or fewer cores); on an existing
            cluster at most this many tasks in flight (None: every task at once, Ray
            schedules one per free CPU).
        address: None, 'local', 'auto', 'ray://HOST:PORT' or 'HOST:PORT' (module docstring).
        connect_timeout_s: bound on reaching an existing cluster (seconds).
        max_retries: retries of a task whose worker or node died (count).
    Raises: InputError naming --ray-address (malformed address, bad timeout) or
        --executor (Ray not installed) -- at once, before any work.

    Each :meth:`map` connects (or starts the local cluster) and disconnects when the
    executor is not open; ``with RayExecutor(...) as ex:`` (or :meth:`open` /
    :meth:`close`) keeps one connection across several sweeps.
    """

    name = "ray"

    def __init__(self, workers: int | None = None, address: str | None = None, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 max_retries: int = DEFAULT_MAX_RETRIES):
        if not ray_installed():
            raise _bad("--executor", f"Ray is not installed in this environment; install the extra: {INSTALL_HINT} "
                                     "(the cluster's nodes need Ray and the same fleetplan too).", "'ray'")
        if not (connect_timeout_s > 0 and connect_timeout_s < float("inf")):
            raise _bad("--ray-connect-timeout", "a positive number of seconds.", repr(connect_timeout_s))
        if max_retries < 0:
            raise _bad("max_retries", "retries of a lost task: 0 or more (count).", repr(max_retries))
        self.requested_address = address
        self.address = (address or os.environ.get("RAY_ADDRESS") or "local").strip()
        _host_port(self.address)  # malformed: refused now
        self._explicit_workers = workers
        self.workers = max(1, int(workers if workers is not None else default_workers()))
        self.connect_timeout_s = float(connect_timeout_s)
        self.max_retries = int(max_retries)
        self._connected = False
        self._owns_connection = False
        self._guard = None  # the local cluster's watchdog (fleetplan.report.ray_guard), while one is up
        self.cluster_cpus: float | None = None
        #: per task of the last map, where it was solved ({node_ip, node_id, host, pid})
        self.where: list[dict | None] = []

    # -- connection

    @property
    def description(self) -> str:
        if not self._connected:
            return f"Ray ({self.address})"
        cpus = f"{self.cluster_cpus:g} CPUs" if self.cluster_cpus else "no CPUs yet (an autoscaler may add nodes)"
        if self.address == "local" and self._owns_connection:
            return f"Ray (a local cluster of {cpus})"
        n = self._in_flight_cap()
        cap = f", at most {n} solve{'' if n == 1 else 's'} at once" if n else ""
        where = "this process's Ray connection" if not self._owns_connection else f"Ray at {self.address}"
        return f"{where} ({cpus}{cap})"

    def _in_flight_cap(self) -> int | None:
        if self.address == "local" and self._owns_connection:
            return None  # the cluster has exactly `workers` CPUs
        return self._explicit_workers

    def open(self) -> None:
        """Connect (or start the local cluster). Idempotent. Raises InputError (exit 2)."""
        if self._connected:
            return
        # Ray replaces builtins.print in the driver (for its tqdm bars) the first time it
        # relays a worker's message, e.g. a lost worker's: not in a planner's process
        os.environ.setdefault("RAY_TQDM_PATCH_PRINT", "0")
        import ray

        # ray.init replaces the process's SIGTERM handling: the command line's is put back
        with contextlib.nullcontext() if ray.is_initialized() else _keep_sigterm_handler():
            self._open(ray)
        try:
            self.cluster_cpus = float(ray.cluster_resources().get("CPU", 0.0))
        except Exception:  # noqa: BLE001 -- only for the description
            self.cluster_cpus = None

    def _open(self, ray) -> None:
        if ray.is_initialized():
            if self.requested_address is not None:
                raise _bad("--ray-address", "this process is already connected to Ray (ray.init was called): pass address=None to use "
                                            "that connection, or call ray.shutdown() first.", repr(self.requested_address))
            self._connected, self._owns_connection = True, False
        elif self.address == "local":
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            # Ray (2.59+) turns token authentication on for a new local cluster and, the mode
            # being unset, warns so on every run: the cluster is this run's own, its token
            # Ray's (~/.ray/auth_token; docs/ray.md) -- the warning is dropped
            setup = logging.getLogger("ray._private.authentication.authentication_token_setup")
            setup.addFilter(_TOKEN_AUTH_NOTE)
            from fleetplan.report.ray_guard import LocalClusterGuard

            self._guard = LocalClusterGuard.start()
            try:
                ray.init(address="local", num_cpus=self.workers, include_dashboard=False, log_to_driver=False,
                         object_store_memory=LOCAL_OBJECT_STORE_BYTES, logging_level=logging.WARNING)
            except BaseException as e:  # Ctrl-C too: what started of the cluster is stopped before anything else
                self._stop_local(ray)
                if isinstance(e, Exception):
                    raise _failed(_NOT_STARTED.format(why=f"{type(e).__name__}: {' '.join(str(e).split())[:400]}")) from None
                raise
            finally:
                setup.removeFilter(_TOKEN_AUTH_NOTE)
            self._guard.scan()  # every process of the cluster recorded before the sweep
            self._connected, self._owns_connection = True, True
        else:
            start = time.monotonic()
            hp = _host_port(self.address)
            if hp is not None:
                _probe(self.address, *hp, min(self.connect_timeout_s, 10.0))
                _check_auth(self.address, *hp, self.address.startswith("ray://"), min(self.connect_timeout_s, 10.0))
            self._connect_bounded(ray, max(0.1, self.connect_timeout_s - (time.monotonic() - start)))
            self._connected, self._owns_connection = True, True

    def _connect_bounded(self, ray, timeout_s: float) -> None:
        """ray.init(address) in a helper thread, abandoned after connect_timeout_s (Ray's
        own connect can block for minutes on a GCS port that does not answer)."""
        box: dict[str, BaseException | bool] = {}
        _quiet(True)  # until close(): the Ray Client server's copy of the note comes later

        def go() -> None:
            try:
                ray.init(address=self.address, log_to_driver=False, logging_level=logging.WARNING)
                box["ok"] = True
            except BaseException as e:  # noqa: BLE001 -- handed to the caller
                box["error"] = e

        t = threading.Thread(target=go, name="fleetplan-ray-connect", daemon=True)
        t.start()
        t.join(timeout_s)
        if t.is_alive() or "error" in box:
            _quiet(False)
        if t.is_alive():
            raise _bad("--ray-address", f"the Ray cluster did not answer within {self.connect_timeout_s:g} s (--ray-connect-timeout): "
                                        "is it a Ray head (Ray Client port 10001, GCS port 6379) of the same Ray version, and does this "
                                        "driver have the cluster's token authentication (RAY_AUTH_MODE=token and its token, when the "
                                        f"cluster has it on{_token_note()})?",
                       repr(self.address))
        err = box.get("error")
        if isinstance(err, BaseException):
            hint = " (the Ray Client needs `ray[client]`: " + INSTALL_HINT + ")" if isinstance(err, ModuleNotFoundError) else ""
            raise _bad("--ray-address", f"cannot connect to the Ray cluster: {type(err).__name__}: {str(err).strip()[:400]}{hint}",
                       repr(self.address)) from None

    def close(self) -> None:
        """Disconnect (a local cluster started for the run is stopped, and its watchdog
        stops what Ray left of it); a connection the process already had is left open."""
        if self._connected and self._owns_connection:
            import ray

            if self._guard is not None:
                self._stop_local(ray)
            else:
                ray.shutdown()
            _quiet(False)
        self._connected = self._owns_connection = False

    def _stop_local(self, ray) -> None:
        """Shut the local cluster down (also one ``ray.init`` left half started) and have the
        watchdog stop what is left of it."""
        try:
            ray.shutdown()
        except Exception:  # noqa: BLE001 -- a cluster that never started: nothing of Ray's to shut
            pass
        finally:
            guard, self._guard = self._guard, None
            if guard is not None:
                guard.finish()

    # -- the sweep

    def map(self, fn, tasks: Sequence[Task], on_done=None) -> list[Result]:
        opened_here = not self._connected
        self.open()
        try:
            return self._run(fn, tasks, on_done)
        finally:
            if opened_here:
                self.close()

    def _run(self, fn, tasks, on_done) -> list[Result]:
        import ray

        expected = worker_fingerprint()
        digests = [task_digest(t) for t in tasks]
        remote = ray.remote(run_checked)
        results: list[Result | None] = [None] * len(tasks)
        self.where = [None] * len(tasks)
        cap = self._in_flight_cap() or len(tasks)
        pending: dict[Any, int] = {}
        nxt = 0

        def submit() -> None:
            nonlocal nxt
            while nxt < len(tasks) and len(pending) < cap:
                i = nxt
                key = str(tasks[i].get("key", i)) if isinstance(tasks[i], dict) else str(i)
                ref = remote.options(num_cpus=1, max_retries=self.max_retries, retry_exceptions=False,
                                     name=f"fleetplan:{key}"[:200]).remote(fn, tasks[i], digests[i], expected)
                pending[ref] = i
                nxt += 1

        try:
            submit()
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_SLICE_S)
                for ref in ready:
                    i = pending.pop(ref)
                    out = self._get(ray, ref, tasks[i])
                    results[i] = self._check(out, tasks[i], digests[i], expected)
                    self.where[i] = out.get("where")
                    if on_done is not None:
                        on_done(i, results[i])
                submit()
        except BaseException:
            _cancel(ray, list(pending))
            raise
        return results  # type: ignore[return-value]

    def _get(self, ray, ref, task) -> dict:
        from ray.exceptions import RayTaskError

        lost = tuple(getattr(ray.exceptions, n) for n in ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError",
                                                          "LocalRayletDiedError", "ObjectLostError") if hasattr(ray.exceptions, n))
        try:
            return ray.get(ref)
        except RayTaskError as e:
            # the solve itself raised: the same exception as the local pool's (Ray's error is also an instance of the cause)
            cause = getattr(e, "cause", None)
            raise (cause if isinstance(cause, BaseException) else e) from None
        except lost as e:
            key = task.get("key", "?") if isinstance(task, dict) else "?"
            raise _failed(f"the task {key!r} was lost {self.max_retries + 1} time(s) (its worker or node died: "
                          f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}); Ray retried it "
                          f"{self.max_retries} time(s). A node running out of memory (a solve of a large instance holds "
                          "hundreds of MB) or being preempted does this; see the Ray logs of the node.") from None

    @staticmethod
    def _check(out: dict, task, digest: str, expected: dict) -> Result:
        key = task.get("key", "?") if isinstance(task, dict) else "?"
        where = out.get("where", {})
        node = f"node {where.get('node_ip', '?')} ({where.get('host', '?')}, pid {where.get('pid', '?')})"
        if out.get("refused") == "fingerprint":
            fp = out.get("fingerprint", {})
            diff = "; ".join(f"{k}: worker {fp.get(k)!s}, here {v}" for k, v in expected.items() if fp.get(k) != v)
            raise _bad("--executor", f"a Ray worker on {node} runs another fleetplan than this one ({diff}): its plans could differ. Install "
                                     f"the same fleetplan (the same version, wheel or commit, and HiGHS) on every node of the cluster; "
                                     "the check compares the version and a SHA-256 of the package's source files.", "'ray'")
        if out.get("refused") == "task" or out.get("task_sha256") != digest:
            raise _failed(f"the Ray worker on {node} received another task than the one sent for {key!r} "
                          "(SHA-256 of the task document differs): the transfer is broken.")
        result = out["result"]
        if task_digest(result) != out.get("result_sha256"):
            raise _failed(f"the result of {key!r} from {node} does not match the SHA-256 the worker computed: the transfer is "
                          "broken.")
        return result


@contextlib.contextmanager
def _keep_sigterm_handler():
    """Put back, after ``ray.init``, the SIGTERM handler this process had before it (the
    command line's :func:`fleetplan.interrupts.on_sigterm`, or one of the caller's own).

    ``ray.init`` sets a Python SIGTERM handler of its own (``sys.exit``), and the driver's
    core worker then installs a native crash handler for SIGTERM (absl's failure signal
    handler): a SIGTERM during the sweep printed a native stack dump and aborted (exit
    134) instead of taking the Ctrl-C path (the tasks cancelled, ``interrupted
    (SIGTERM)``, exit 143). ``signal.signal`` re-installs the handler at the C level too,
    so it wins over both. A process that had no Python handler of its own (SIG_DFL, or
    SIGTERM ignored) keeps what Ray sets; outside the main thread nothing can be changed.
    A SIGTERM that Ray's own handler turned into ``SystemExit(15)`` while ``ray.init`` ran
    is raised as that handler's interrupt instead."""
    import signal

    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    ours = main and callable(before)
    try:
        yield
    except SystemExit as e:
        if ours and e.code == int(signal.SIGTERM):
            signal.signal(signal.SIGTERM, before)
            before(int(signal.SIGTERM), None)  # fleetplan's handler raises Terminated (a KeyboardInterrupt)
        raise
    finally:
        if ours:
            signal.signal(signal.SIGTERM, before)


class _DropMessage(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


#: Ray warns that it sets no SIGTERM handler when ray.init runs outside the main thread, as
#: the bounded connect does on purpose (the handler the process had is put back anyway,
#: :func:`_keep_sigterm_handler`). The driver logs it (``ray._private.worker``); through the
#: Ray Client the server's own ray.init logs it too, relayed to the driver's
#: ``ray.util.client.logsclient`` logger some time after the connect returned.
_NO_SIGTERM_NOTE = _DropMessage("SIGTERM handler is not set")
_NOISY_LOGGERS = ("ray._private.worker", "ray.util.client.logsclient")
#: Ray's warning, on every new local cluster with RAY_AUTH_MODE unset, that it turned token authentication on.
_TOKEN_AUTH_NOTE = _DropMessage("Token authentication is enabled for this Ray cluster")


def _quiet(on: bool) -> None:
    """Drop (or stop dropping) Ray's note about the SIGTERM handler (:data:`_NO_SIGTERM_NOTE`)."""
    for name in _NOISY_LOGGERS:
        (logging.getLogger(name).addFilter if on else logging.getLogger(name).removeFilter)(_NO_SIGTERM_NOTE)


def _cancel(ray, refs: list) -> None:
    """Cancel unfinished tasks; ``force=True`` stops a worker inside a solve (HiGHS does
    not notice an interrupt). A second Ctrl-C while this runs is ignored (it is quick)."""
    import signal

    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        for ref in refs:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 -- a task finished or lost meanwhile
                pass
    finally:
        if main and old is not None:
            signal.signal(signal.SIGINT, old)
