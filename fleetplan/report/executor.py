"""Pluggable executors for sweeps: run independent tasks (JSON-able dicts) through a
module-level function and hand the results back in task order.

A sweep (``fleetplan sensitivity``, ``fleetplan levers``) is a list of re-solves of
modified instances; each task is a plain dict (the instance as data plus the solve
options) and each result a plain dict, so an engine that ships tasks elsewhere -- a
cluster queue, a batch system -- needs only to move JSON. Built in:

* ``local`` (default): a process pool (:class:`concurrent.futures.ProcessPoolExecutor`,
  forkserver start, so a worker never inherits the parent's threads), at most
  ``workers`` processes. The workers ignore SIGINT: on Ctrl-C (or a failing task) the
  caller drops the queued tasks and terminates the workers at once, so an interrupt
  never waits for a running solve.
* ``serial``: in this process, one task after another (tests, debugging, 1 core).
* ``ray``: Ray tasks, on a local cluster started for the run or an existing cluster of
  many machines (:mod:`fleetplan.report.ray_executor`; the optional extra
  ``fleetplan[ray]``, imported only when named).

Others plug in by name: ``--executor package.module:factory`` (``factory(workers=N)``
returns a :class:`SweepExecutor`), or an entry point in the group
``fleetplan.executors`` whose name is given.
"""

from __future__ import annotations

import importlib
import multiprocessing
import signal
import threading
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from importlib.metadata import entry_points

from fleetplan.errors import InputError, Problem
from fleetplan.report.executor_base import Result, SweepExecutor, Task, default_workers  # noqa: F401 -- re-exported

__all__ = ["SweepExecutor", "SerialExecutor", "LocalPoolExecutor", "get_executor", "default_workers", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "fleetplan.executors"


class SerialExecutor(SweepExecutor):
    """Every task in this process, in order."""

    name = "serial"

    def __init__(self, workers: int = 1):
        self.workers = 1

    def map(self, fn, tasks, on_done=None):
        out = []
        for i, t in enumerate(tasks):
            r = fn(t)
            out.append(r)
            if on_done is not None:
                on_done(i, r)
        return out


#: Modules the forkserver imports before forking workers (Pyomo before SciPy, as the CLI does).
PRELOAD = ("pyomo.environ", "fleetplan.sizing", "fleetplan.report.sweep")


def _warm_worker() -> None:
    """Process-pool initializer: ignore SIGINT (Ctrl-C reaches the whole process group;
    the parent alone decides, and terminates the workers), and import the optimisation
    stack once per worker (a no-op when the forkserver preloaded it), not once per task."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import pyomo.environ  # noqa: F401

    import fleetplan.sizing  # noqa: F401


class LocalPoolExecutor(SweepExecutor):
    """A local process pool of at most ``workers`` processes (forkserver start). One
    worker is still a separate process (so Ctrl-C never waits for a solve running in
    this one); a single task runs here."""

    name = "local"

    def __init__(self, workers: int | None = None):
        self.workers = max(1, int(workers if workers is not None else default_workers()))

    def map(self, fn, tasks, on_done=None):
        if len(tasks) <= 1:
            return SerialExecutor().map(fn, tasks, on_done)
        methods = multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        if ctx.get_start_method() == "forkserver":
            # the server imports the optimisation stack once; workers fork from it with it loaded
            ctx.set_forkserver_preload(list(PRELOAD))
        results: list[Result | None] = [None] * len(tasks)
        pool = ProcessPoolExecutor(max_workers=min(self.workers, len(tasks)), mp_context=ctx, initializer=_warm_worker)
        try:
            # the forkserver and the workers start as the tasks are submitted, each importing the
            # optimisation stack; a Ctrl-C reaching them then (the whole process group gets it)
            # printed a KeyboardInterrupt traceback from the forkserver's preload after
            # 'interrupted'. They start with SIGINT blocked (a process inherits the mask of the
            # thread that starts it, through exec), so only this process decides; a Ctrl-C in
            # the meantime is delivered here as the mask is restored
            held = _block_sigint()
            try:
                futures = {pool.submit(fn, t): i for i, t in enumerate(tasks)}
            finally:
                _restore_sigmask(held)
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in sorted(done, key=lambda f: futures[f]):
                    i = futures[f]
                    results[i] = f.result()
                    if on_done is not None:
                        on_done(i, results[i])
        except BaseException:
            # a failed task or Ctrl-C: drop the queued tasks and stop the running ones now
            _stop_pool(pool)
            raise
        pool.shutdown(wait=True)
        return results  # type: ignore[return-value]


def _block_sigint():
    """Block SIGINT in this thread (the main thread only: elsewhere it is not delivered) and
    return the mask to restore, or None when nothing was changed."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def _restore_sigmask(old) -> None:
    if old is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _stop_pool(pool: ProcessPoolExecutor, grace_s: float = 2.0) -> None:
    """Cancel a pool's queued tasks and terminate its workers (SIGTERM, then SIGKILL
    after ``grace_s``) without waiting for the tasks they run, then wait (at most
    ``grace_s``) for the pool's manager thread to release its pipes. A second Ctrl-C
    while this runs is ignored (it takes at most 3 ``grace_s``); the caller's handler is
    back before it returns.

    The last wait is not cosmetic: CPython's exit hook for process pools
    (``concurrent.futures.process._python_exit``) writes to each manager thread's wake-up
    pipe without the lock the manager thread closes it under, so a manager still tearing
    down when the interpreter exits races it and can print ``OSError: [Errno 9] Bad file
    descriptor`` after "interrupted" (seen about once in twenty Ctrl-Cs); a manager that
    has finished has marked its pipe closed and the hook skips it."""
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        procs = list((getattr(pool, "_processes", None) or {}).values())
        manager = getattr(pool, "_executor_manager_thread", None)
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(grace_s)
            if p.is_alive():
                p.kill()
                p.join(grace_s)
        if manager is not None and manager is not threading.current_thread():
            manager.join(grace_s)
    finally:
        if main and old is not None:
            signal.signal(signal.SIGINT, old)


def _takes_workers(factory) -> bool | None:
    """Whether ``factory`` accepts a ``workers=`` keyword (None: its signature is unknown)."""
    import inspect

    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return None
    return any(p.kind == p.VAR_KEYWORD or (p.name == "workers" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
               for p in sig.parameters.values())


def get_executor(spec: str = "local", workers: int | None = None, ray_address: str | None = None,
                 ray_connect_timeout_s: float | None = None) -> SweepExecutor:
    """The executor named by ``spec``: 'local', 'serial', 'ray', an entry point of the
    group ``fleetplan.executors``, or 'package.module:factory'.

    ``ray_address`` and ``ray_connect_timeout_s`` (seconds) are for 'ray' only
    (:class:`fleetplan.report.ray_executor.RayExecutor`; Ray is not imported here).

    Raises: InputError naming --executor (unknown name, an empty module or factory
    name, import failure, something that is not a factory taking ``workers=``, a
    factory that raises or does not return a SweepExecutor; 'ray' when Ray is not
    installed), --workers (below 1) or --ray-address (given for another executor, or
    malformed). The factory is called only when its signature takes ``workers`` (or
    cannot be read).
    """
    if workers is not None and workers < 1:
        raise InputError("--workers", [Problem("--workers", "at least 1 worker process (count).", str(workers))])
    if spec != "ray" and (ray_address is not None or ray_connect_timeout_s is not None):
        opt = "--ray-address" if ray_address is not None else "--ray-connect-timeout"
        raise InputError(opt, [Problem(opt, f"applies to --executor ray only (the executor is {spec!r}).",
                                       repr(ray_address if ray_address is not None else ray_connect_timeout_s))])
    if spec == "ray":
        from fleetplan.report.ray_executor import DEFAULT_CONNECT_TIMEOUT_S, RayExecutor

        return RayExecutor(workers, ray_address,
                           DEFAULT_CONNECT_TIMEOUT_S if ray_connect_timeout_s is None else ray_connect_timeout_s)
    if spec == "local":
        return LocalPoolExecutor(workers)
    if spec == "serial":
        return SerialExecutor()
    usage = (f"give 'local' (a process pool), 'serial', 'ray' (a Ray cluster), an entry point of '{ENTRY_POINT_GROUP}' or 'package.module:factory', "
             "where factory(workers=N) returns a fleetplan.report.executor.SweepExecutor")

    def bad(msg: str) -> InputError:
        return InputError("--executor", [Problem("--executor", f"{msg}; {usage}.", repr(spec))])

    factory = None
    eps = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == spec]
    if eps:
        try:
            factory = eps[0].load()
        except Exception as e:  # noqa: BLE001 -- a plug-in's import can fail any way
            raise bad(f"cannot load the entry point {eps[0].value!r}: {type(e).__name__}: {e}") from None
    elif ":" in spec:
        mod, _, attr = spec.partition(":")
        mod, attr = mod.strip(), attr.strip()
        if not mod or not attr:
            raise bad("no module name before the ':'" if not mod else "no factory name after the ':'")
        try:
            module = importlib.import_module(mod)
        except Exception as e:  # noqa: BLE001 -- ImportError, or whatever the module raises on import
            raise bad(f"cannot import module {mod!r}: {type(e).__name__}: {e}") from None
        factory = getattr(module, attr, None)
        if factory is None:
            raise bad(f"module {mod!r} has no attribute {attr!r}")
    if factory is None:
        raise bad("unknown executor")
    if not callable(factory):
        raise bad(f"{spec} is a {type(factory).__name__}, not a factory")
    if _takes_workers(factory) is False:
        raise bad(f"{spec} does not take workers=N, so it is not an executor factory")
    n = workers if workers is not None else default_workers()
    try:
        ex = factory(workers=n)
    except Exception as e:  # noqa: BLE001 -- the plug-in's own failure, reported as bad input
        raise bad(f"the factory {spec}(workers={n}) failed: {type(e).__name__}: {e}") from None
    if not isinstance(ex, SweepExecutor):
        raise bad(f"{spec}(workers={n}) returned {type(ex).__name__}, not a fleetplan.report.executor.SweepExecutor")
    return ex
