"""Where fleetplan keeps its temporary files, and how a killed run's leftovers go away.

Two places, both named so a later run can tell whose they are (docs/cli.md, "Temporary
files"):

* **Beside an output**, for atomic writes (a temporary file renamed over the output is
  atomic only within one file system, so it must live in the output's folder):
  ``.NAME.fleetplan-HOST-PID-XXXXXXXX.tmp`` (``.probe`` for the writability check before
  the work, and, for a ``k8s export`` directory, ``.tmp``/``.old`` directories).
  :func:`sibling_temp` sweeps the folder first: every such entry whose writer, the
  process ``PID`` on this ``HOST``, is gone is removed -- except an ``.old`` directory
  whose export is missing (a kill between the two renames of an export), which is put
  back in place.
* **Under $TMPDIR**, one directory per process, ``fleetplan-HOST-PID-XXXXXXXX``, for the
  solvers' MPS exports and HiGHS logs (:func:`process_temp_dir`): removed when the process
  exits (normally, by an exception or Ctrl-C), and swept by the next process that makes
  one when its writer is gone (kill -9, SIGTERM, a crash of the interpreter).

"Gone" is: no process has that PID, or the process that has it started after the entry
was last modified (the PID was reused; Linux, from ``/proc``). An entry of a live writer,
or of another host (a folder shared over the network), is never touched.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

__all__ = ["sibling_temp", "sibling_temp_dir", "process_temp_dir", "sweep_stale", "temp_tag"]

_HOST = re.sub(r"[^A-Za-z0-9]", "", socket.gethostname())[:32] or "host"
# .NAME.fleetplan-HOST-PID-RANDOM.KIND (mkstemp's random part: [a-z0-9_])
_SIBLING = re.compile(r"^\.(?P<name>.+)\.fleetplan-(?P<host>[A-Za-z0-9]+)-(?P<pid>\d+)-[a-z0-9_]+\.(?P<kind>tmp|probe|old)$")
_PROCESS_DIR = re.compile(r"^fleetplan-(?P<host>[A-Za-z0-9]+)-(?P<pid>\d+)-[a-z0-9_]+$")
_mine: dict[int, Path] = {}  # pid -> this process's directory under $TMPDIR


def temp_tag() -> str:
    """``fleetplan-HOST-PID-``: the part of a temporary name that says who wrote it."""
    return f"fleetplan-{_HOST}-{os.getpid()}-"


def _started_after(pid: int, mtime: float) -> bool:
    """True when process ``pid`` started after ``mtime`` (seconds since the epoch): the
    PID was reused. Linux only (``/proc``); False where that cannot be told."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime, after 'pid (comm)'
        btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
        return btime + ticks / os.sysconf("SC_CLK_TCK") > mtime + 1.0  # btime has 1 s resolution
    except (OSError, ValueError, IndexError, StopIteration):
        return False


def _gone(host: str, pid: int, mtime: float) -> bool:
    """The writer of an entry tagged (host, pid) and last modified at ``mtime`` is gone."""
    if host != _HOST:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OSError):
        pass  # alive (another user's process, or a signal we may not send)
    return _started_after(pid, mtime)


def _remove(p: Path) -> None:
    try:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    except FileNotFoundError:
        pass


def sweep_stale(folder: str | Path) -> list[Path]:
    """Remove the temporary entries a gone fleetplan process left in ``folder`` (see the
    module docstring); returns what was removed or put back. Best effort: an entry that
    cannot be removed (permissions, a race with another sweeper) is left."""
    folder = Path(folder)
    out: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return out
    for e in entries:
        m = _SIBLING.match(e.name)
        if m is None:
            continue
        try:
            if not _gone(m["host"], int(m["pid"]), e.stat(follow_symlinks=False).st_mtime):
                continue
            p = folder / e.name
            target = folder / m["name"]
            if m["kind"] == "old" and not os.path.lexists(target):
                os.replace(p, target)  # killed between an export's two renames: the earlier export back
            else:
                _remove(p)
            out.append(p)
        except OSError:
            continue
    return out


def sibling_temp(path: str | Path, suffix: str = ".tmp") -> tuple[int, str]:
    """A new temporary file beside ``path`` (``.NAME.fleetplan-HOST-PID-XXXXXXXX.tmp``),
    after sweeping the folder's stale ones; returns ``(fd, temp path)`` as
    :func:`tempfile.mkstemp` does. Raises OSError when the folder takes no new file."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    sweep_stale(parent)
    return tempfile.mkstemp(prefix=f".{p.name}.{temp_tag()}", suffix=suffix, dir=parent)


def sibling_temp_dir(path: str | Path, suffix: str = ".tmp") -> Path:
    """A new temporary directory beside ``path``, named and swept as :func:`sibling_temp`.
    Raises OSError when the folder takes no new entry."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    sweep_stale(parent)
    return Path(tempfile.mkdtemp(prefix=f".{p.name}.{temp_tag()}", suffix=suffix, dir=parent))


def _cleanup(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)


def process_temp_dir() -> Path:
    """This process's directory under $TMPDIR (``fleetplan-HOST-PID-XXXXXXXX``), made on
    first use after sweeping the stale ones of gone processes, removed at exit (also in a
    multiprocessing worker, which skips ``atexit``). A forked child gets its own."""
    pid = os.getpid()
    d = _mine.get(pid)
    if d is not None and d.is_dir():
        return d
    root = Path(tempfile.gettempdir())
    try:
        for e in os.scandir(root):
            m = _PROCESS_DIR.match(e.name)
            if m and e.is_dir(follow_symlinks=False) and _gone(m["host"], int(m["pid"]), e.stat(follow_symlinks=False).st_mtime):
                shutil.rmtree(root / e.name, ignore_errors=True)
    except OSError:
        pass
    d = Path(tempfile.mkdtemp(prefix=temp_tag(), dir=root))
    _mine[pid] = d
    atexit.register(_cleanup, d)
    from multiprocessing import util

    util.Finalize(None, _cleanup, args=(d,), exitpriority=0)
    return d
