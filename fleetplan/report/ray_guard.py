"""A watchdog for the local Ray cluster ``--executor ray`` starts for a run: no process of
that cluster outlives the command, and a driver Ray ended says why.

Ray ends its driver process from C++ (``_exit(1)``, after one log line such as
``core_worker_process.cc: Failed to register worker to Raylet``) when the cluster's raylet
dies while the driver registers with it: no Python code runs after that -- no message of
fleetplan's, no ``ray.shutdown()`` -- and the raylet's agents (``ray::DashboardAgent``,
``ray::RuntimeEnvAgent``), orphaned, lived on for up to a minute. So
the driver starts this guard, a small process of its own session, before ``ray.init``:

* while the cluster is up the guard records, every :data:`SCAN_S` seconds and whenever
  the driver asks (:meth:`LocalClusterGuard.scan`), the driver's descendants that are
  Ray's (an executable or script under a ``ray/`` directory, a ``ray::`` process title),
  each with its start time, so a pid reused later is never taken for one of them;
* when the driver has shut the cluster down (:meth:`LocalClusterGuard.finish`, after
  ``ray.shutdown()``), it stops what is left of those processes (SIGTERM, then SIGKILL
  after :data:`GRACE_S`) and exits; the driver waits for it;
* when the driver ends without saying so (its pipe closes: Ray ended it, or a kill -9),
  it prints :func:`orphan_message` on the command's stderr and stops the processes the
  same way.

Linux only (``/proc``); elsewhere the guard records nothing and only prints the message.
The guard needs the standard library alone: it runs as ``python -I -S ray_guard.py
DRIVER_PID`` (isolated, no site packages: it starts in tens of milliseconds and finds
this file wherever fleetplan is imported from).
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time

__all__ = ["LocalClusterGuard", "orphan_message", "ray_processes", "SCAN_S", "GRACE_S"]

#: Seconds between two records of the driver's Ray processes.
SCAN_S = 0.2
#: Seconds a Ray process has to end after SIGTERM before SIGKILL.
GRACE_S = 2.0
#: A Ray process: an executable or script under a ``ray/`` directory, or a ``ray::`` title.
_RAY = re.compile(r"(^|[/\s])ray(/|::)")


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start time in clock ticks, state) of ``pid`` from /proc, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = s[s.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[19]), fields[0]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return kids
    for name in names:
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                kids.setdefault(st[0], []).append(int(name))
    return kids


def ray_processes(roots: list[int], skip: set[int] = frozenset()) -> dict[int, tuple[int, str]]:
    """{pid: (start time, command line)} of the Ray processes among the descendants of
    ``roots``, read from /proc ({} where there is none); ``skip`` and their descendants
    (another cluster's workers) are left out."""
    kids, out, todo = _children(), {}, list(roots)
    while todo:
        for pid in kids.get(todo.pop(), []):
            if pid in skip:
                continue
            todo.append(pid)
            cmd = _cmdline(pid)
            st = _stat(pid)
            if st is not None and st[2] != "Z" and _RAY.search(cmd):
                out[pid] = (st[1], cmd)
    return out


def _alive(pid: int, start: int) -> bool:
    """Whether ``pid`` is still the process that started at ``start`` (and not a zombie)."""
    st = _stat(pid)
    return st is not None and st[1] == start and st[2] != "Z"


def _stop(procs: dict[int, tuple[int, str]]) -> int:
    """SIGTERM every recorded process still alive, SIGKILL those alive after GRACE_S; the number stopped."""
    live = {p: s for p, (s, _) in procs.items() if _alive(p, s)}
    for p in live:
        try:
            os.kill(p, signal.SIGTERM)
        except OSError:
            pass
    end = time.monotonic() + GRACE_S
    while time.monotonic() < end and any(_alive(p, s) for p, s in live.items()):
        time.sleep(0.05)
    for p, s in live.items():
        if _alive(p, s):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
    return len(live)


def _session_dir(procs: dict[int, tuple[int, str]]) -> str | None:
    for _, cmd in procs.values():
        m = re.search(r"--session[-_]dir[= ](\S+)", cmd)
        if m:
            return m.group(1)
    return None


def orphan_message(driver: int, stopped: int, session: str | None) -> str:
    """What the guard prints when the driver ended without shutting its cluster down."""
    logs = f"{session}/logs" if session else "the newest /tmp/ray/session_*/logs"
    return (f"error: the run failed (--executor ray): fleetplan (pid {driver}) ended while the local Ray cluster it had started was up, "
            "without shutting it down: Ray ends its driver (exit 1) when the cluster's raylet dies while the driver connects to it -- "
            "Ray's own line above says so, e.g. 'Failed to register worker to Raylet' -- and a kill -9 ends it the same way. "
            f"{stopped} Ray process(es) it had started were stopped. Run the command again; if Ray fails the same way, run the sweep "
            f"with --executor local (the same results on one machine) and see Ray's logs in {logs} (raylet.out, raylet.err).\n")


def _guard(driver: int) -> int:
    """The guard's loop (this process): record, then clean up when told to or orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle; it then says 'done'
    me = os.getpid()
    before = set(ray_processes([driver], {me}))  # a cluster the driver already had is not this one's
    sys.stdout.write("ready\n")  # the driver starts its cluster after this: its processes are not taken for another's
    sys.stdout.flush()
    procs: dict[int, tuple[int, str]] = {}
    buf = b""
    fd = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([fd], [], [], SCAN_S)
        procs.update(ray_processes([driver], before | {me}))
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:  # the driver is gone without 'done'
            procs.update(ray_processes(list(procs), before | {me}))  # what the orphaned raylet had started
            sys.stderr.write(orphan_message(driver, _stop(procs), _session_dir(procs)))
            sys.stderr.flush()
            return 1
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line == b"scan":
                sys.stdout.write(f"scanned {len(procs)}\n")
                sys.stdout.flush()
            elif line == b"done":
                os.close(2)  # nothing more to say: a pipe reading the command's stderr is not held open
                procs.update(ray_processes(list(procs), before | {me}))
                _stop(procs)
                return 0


class LocalClusterGuard:
    """The driver's side of the guard (module docstring). ``start()`` before ``ray.init``;
    ``finish()`` after ``ray.shutdown()`` (or when ``ray.init`` failed): it waits, at
    most ``GRACE_S`` + 3 s, for the guard to stop what Ray left. Never raises: a guard
    that cannot start leaves the run as it was without one."""

    def __init__(self, proc: subprocess.Popen | None):
        self.proc = proc

    @classmethod
    def start(cls) -> "LocalClusterGuard":
        """Start the guard and wait until it is ready (it has noted the Ray processes the
        driver already had, which are not this cluster's)."""
        try:
            proc = subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid())], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=None, close_fds=True, start_new_session=True)
            if proc.stdout.readline() != b"ready\n":
                proc.kill()
                proc.wait()
                proc = None
        except OSError:
            proc = None
        return cls(proc)

    def scan(self) -> int | None:
        """Have the guard record the driver's Ray processes now; how many it has recorded."""
        if self.proc is None:
            return None
        try:
            self.proc.stdin.write(b"scan\n")
            self.proc.stdin.flush()
            return int(self.proc.stdout.readline().split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def finish(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        try:
            proc.stdin.write(b"done\n")
            proc.stdin.close()
            proc.wait(timeout=GRACE_S + 3.0)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for f in (proc.stdout,):
            try:
                f.close()
            except OSError:
                pass


if __name__ == "__main__":  # pragma: no cover - the guard process (tests/report/test_ray_start.py runs it)
    sys.exit(_guard(int(sys.argv[1])))
