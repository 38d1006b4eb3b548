"""The on-disk layer of the candidate-table cache: pieces of the tables kept across runs, so
a user who edits one number of an instance and solves again recomputes only the tables
that number reaches (interactive what-ifs; docs/cli.md, "The table cache").

Where: ``$FLEETPLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/fleetplan``, else
``~/.cache/fleetplan``; off with ``FLEETPLAN_CACHE=0`` (or ``off``, ``false``, ``no``) or a
command's ``--no-cache``. At most ``$FLEETPLAN_CACHE_MAX_MB`` megabytes (default
:data:`DEFAULT_MAX_MB`): past that the least recently used entries are removed. The bound is
checked by a scan of every entry at a process's first write (unless a process scanned in the
last :data:`_RESCAN_S` seconds: the stamp ``<root>/.size-checked``) and after every 4 MB it
writes, so writes between two checks may pass it for a while.

An entry is one piece (a decode table of a tier on a slice shape, a prefill service-time
profile, a capacity curve, a replica pool's rate search ...) under
``<root>/tables-<code>/<hh>/<rest of the key's digest>``: ``<code>`` is
:func:`code_fingerprint` -- the fleetplan version, a SHA-256 of every source file of
:mod:`fleetplan.perf`, :mod:`fleetplan.instance` and :mod:`fleetplan.tables` and the numpy, SciPy and Python versions --
so a change of the code that computes a table never meets an entry it did not write; the
digest is SHA-256 of that fingerprint and the piece's key (every input of the piece:
:func:`fleetplan.tables.cache.family_key` and the piece's own arguments).

Never trusted blindly: an entry holds a magic line, the digest of its key and a SHA-256 of
its payload; one that is truncated, corrupt, of another key or unreadable is a miss (removed,
and rebuilt by the caller). The payload is a pickle read by a restricted unpickler that only
builds numpy arrays, fleetplan's own dataclasses and plain containers -- never a function
call of an arbitrary global. Writes are atomic (a temporary file beside the entry, renamed:
:func:`fleetplan.tempfiles.sibling_temp`), so concurrent runs see a whole entry or none; two
runs writing one key write the same value (the pieces are pure functions of their key).
Every failure of the store (no space, a read-only home, a permission) degrades to computing
the tables, never to an error.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import math
import os
import pickle
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["DiskStore", "MISSING", "cache_root", "cache_enabled", "environment_problem", "unwritable_problem", "take_warnings", "code_fingerprint",
           "DEFAULT_MAX_MB", "MIN_MAX_MB", "ENV_DIR", "ENV_SWITCH", "ENV_MAX_MB"]

ENV_SWITCH = "FLEETPLAN_CACHE"  # 0/off/false/no: no cache (the CLI's --no-cache sets it)
ENV_DIR = "FLEETPLAN_CACHE_DIR"  # where the cache lives (default: $XDG_CACHE_HOME/fleetplan or ~/.cache/fleetplan)
ENV_MAX_MB = "FLEETPLAN_CACHE_MAX_MB"  # its size bound (MB)
#: the default size bound (MB = 10^6 bytes): a solve of a bundled instance from an empty folder writes
#: 0.06 MB (llama70b-h100) to 10.2 MB (gemini-ironwood) of entries (measured 2026-12-08, du -sb)
DEFAULT_MAX_MB = 256.0
#: the least size bound (MB) accepted: gemini-ironwood's largest piece is 0.16 MB, so a smaller
#: bound keeps a handful of pieces at most and each run's first write empties it (1e-9 was
#: taken: a cache in name only)
MIN_MAX_MB = 1.0
#: the bound is checked after a process has written this many bytes since its last check
_CHECK_EVERY_BYTES = 4 << 20
#: ... and at a process's first write, unless a process checked it (scanned every entry) in
#: the last this many seconds: a scan stats every entry -- ~0.12 s of CPU for the 7,200
#: files of a full 256 MB cache, which a warm solve of the bundled instance (3-4 s) paid on
#: every run for its one small write
_RESCAN_S = 600.0
#: the file beside the code versions' folders whose mtime says when the bound was last checked
_SCAN_STAMP = ".size-checked"
_MAGIC = b"fleetplan-table 1\n"
_OFF = {"0", "off", "false", "no"}
_ON = {"1", "on", "true", "yes", ""}  # "" (set but empty) is the default, on

#: what get() returns for a key the store does not hold (None is a value a piece may have)
MISSING = object()
#: what :meth:`DiskStore.from_env` found wrong with cache folders, not yet told (:func:`take_warnings`)
_UNTOLD: list[str] = []
#: the cache folders this process has probed (each once)
_PROBED: set[str] = set()


def take_warnings() -> list[str]:
    """The warnings about the table cache not yet told (each cache folder nothing can be stored
    in: :func:`unwritable_problem`), emptied: the CLI prints each once on stderr."""
    out = list(_UNTOLD)
    _UNTOLD.clear()
    return out


def cache_enabled() -> bool:
    """False when ``$FLEETPLAN_CACHE`` is 0, off, false or no (any case)."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in _OFF


def cache_root() -> Path:
    """The cache's folder: ``$FLEETPLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/fleetplan``, else
    ``~/.cache/fleetplan`` (made on the first write)."""
    own = os.environ.get(ENV_DIR, "").strip()  # a stray space had made a folder " /tmp/x" in the working directory
    if own:
        return Path(own).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "fleetplan"


def _max_mb() -> tuple[float, str | None]:
    """``$FLEETPLAN_CACHE_MAX_MB`` (MB) and what is wrong with it: (the bound, None) for a
    finite number of at least :data:`MIN_MAX_MB` or none set (the default), else (the default, the problem)."""
    raw = os.environ.get(ENV_MAX_MB)
    if raw is None or not raw.strip():
        return DEFAULT_MAX_MB, None
    try:
        mb = float(raw)
    except ValueError:
        mb = math.nan
    if math.isfinite(mb) and mb >= MIN_MAX_MB:
        return mb, None
    return DEFAULT_MAX_MB, (f"{ENV_MAX_MB}={raw!r}: expected the table cache's size bound in megabytes (MB), a number of at least "
                            f"{MIN_MAX_MB:g} MB (default {DEFAULT_MAX_MB:g}; one piece of a table is up to 0.16 MB, so a smaller bound "
                            f"would empty the cache at every run); {ENV_SWITCH}=0 turns the cache off")


def _switch_problem() -> str | None:
    """What is wrong with ``$FLEETPLAN_CACHE``, or None: it takes 1, on, true, yes (on, the
    default) or 0, off, false, no (off), any case; "abc" or "2" had meant "on" silently."""
    raw = os.environ.get(ENV_SWITCH)
    if raw is None or raw.strip().lower() in _ON | _OFF:
        return None
    return (f"{ENV_SWITCH}={raw!r}: expected 1, on, true or yes (the table cache on, the default) or 0, off, false or no "
            "(off, as a command's --no-cache), in any case")


def unwritable_problem(root: Path) -> str | None:
    """Why nothing can be stored under the cache folder ``root``, or None: it (and the folders
    above it) is made and a temporary file written and removed there -- the store's own first
    write does the same. A folder under a file or in /proc had turned every write into a
    silent miss ("0 of 10 pieces reused" at every run)."""
    import tempfile

    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".probe-", dir=root)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        what = f"{ENV_DIR}={os.environ[ENV_DIR]!r}" if os.environ.get(ENV_DIR) else f"the table cache's folder {str(root)!r}"
        return (f"{what}: nothing can be stored there ({e.strerror or e}), so every run computes its candidate tables afresh; "
                f"set {ENV_DIR} to a folder you can write, or {ENV_SWITCH}=0 to turn the cache off")
    return None


def environment_problem() -> str | None:
    """What is wrong with the table cache's environment variables, for the CLI to refuse
    (exit 2) before any work, or None: ``$FLEETPLAN_CACHE`` not one of its values
    (:func:`_switch_problem`; the Python API takes any other as on), ``$FLEETPLAN_CACHE_MAX_MB``
    not a finite number of at least :data:`MIN_MAX_MB` megabytes (the Python API takes the
    default for it), or ``$FLEETPLAN_CACHE_DIR``
    naming something that is not a folder. Nothing is checked with the cache off
    (``$FLEETPLAN_CACHE`` = 0)."""
    problem = _switch_problem()
    if problem is not None or not cache_enabled():
        return problem
    problem = _max_mb()[1]
    if problem is not None:
        return problem
    own = os.environ.get(ENV_DIR, "").strip()
    if own:
        root = Path(own).expanduser()
        if root.exists() and not root.is_dir():
            return (f"{ENV_DIR}={own!r}: expected a folder for the table cache (made on the first write), "
                    f"found a file; {ENV_SWITCH}=0 turns the cache off")
    return None


def _max_bytes() -> int:
    return int(_max_mb()[0] * 1e6)


_FINGERPRINT: str | None = None


def code_fingerprint() -> str | None:
    """SHA-256 (hex) of what the tables' values depend on besides their inputs: the fleetplan
    version, every ``.py`` file of :mod:`fleetplan.perf`, :mod:`fleetplan.instance` and :mod:`fleetplan.tables` (name
    and bytes), and the numpy, SciPy and Python versions and the machine. None when a source
    file cannot be read (an install without sources): the store is then off. Computed once
    per process."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        import platform

        import numpy

        import fleetplan

        from fleetplan.imports import scipy_special

        h = hashlib.sha256()
        scipy_special()  # the tables need it anyway; a bare `import scipy` would set off Pyomo's hook (fleetplan/imports.py)
        scipy_version = getattr(sys.modules.get("scipy"), "__version__", "-")
        h.update(f"fleetplan {fleetplan.__version__}\nnumpy {numpy.__version__}\nscipy {scipy_version}\n"
                 f"python {sys.version}\n{platform.machine()}\n".encode())
        base = Path(fleetplan.__file__).parent
        files = sorted(p for sub in ("perf", "instance", "tables") for p in (base / sub).glob("*.py"))
        if not files:
            return None
        try:
            for p in files:
                h.update(f"{p.parent.name}/{p.name}\n".encode())
                h.update(p.read_bytes())
        except OSError:
            return None
        _FINGERPRINT = h.hexdigest()
    return _FINGERPRINT


# ----------------------------------------------------------------------------- the restricted unpickler

#: the globals a payload may name besides fleetplan's dataclasses: numpy's array and scalar
#: reconstructors (numpy 1 and 2 spell the module differently)
_NUMPY_GLOBALS = {
    (mod, name)
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray", "numpy.core.numeric", "numpy._core.numeric")
    for name in ("_reconstruct", "scalar", "_frombuffer")
} | {("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.dtypes", "Float64DType"), ("numpy.dtypes", "Int64DType"),
     ("numpy.dtypes", "BoolDType"), ("builtins", "frozenset"), ("builtins", "set"), ("builtins", "slice")}
_OWN_PACKAGES = ("fleetplan.perf.", "fleetplan.instance.", "fleetplan.tables.")


class _Unpickler(pickle.Unpickler):
    """Builds numpy arrays and scalars, plain containers and the dataclasses (and named
    tuples) of :mod:`fleetplan.perf`, :mod:`fleetplan.instance` and :mod:`fleetplan.tables`; any other global is an
    error (the entry is then a miss)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _NUMPY_GLOBALS:
            return super().find_class(module, name)
        if module.startswith(_OWN_PACKAGES) and module in sys.modules:
            obj = getattr(sys.modules[module], name, None)
            if isinstance(obj, type) and (dataclasses.is_dataclass(obj) or (issubclass(obj, tuple) and hasattr(obj, "_fields"))):
                return obj
        raise pickle.UnpicklingError(f"a table entry may not name {module}.{name}")


def _digest(fingerprint: str, key: Any) -> str:
    return hashlib.sha256(f"{fingerprint}\n{key!r}".encode()).hexdigest()


class DiskStore:
    """Entries on disk under ``root`` (see the module docstring). ``get(key)`` returns the
    value or :data:`MISSING`; ``put(key, value)`` writes it (best effort). ``key`` is any
    value whose ``repr`` is deterministic and names every input (tuples of str, float, int,
    None and fleetplan dataclasses). Counters: ``reads`` (entries read), ``writes``,
    ``rejected`` (entries found corrupt or of another key, removed)."""

    def __init__(self, root: Path, fingerprint: str, max_bytes: int | None = None):
        self.root = Path(root)
        self.fingerprint = fingerprint
        self.folder = self.root / f"tables-{fingerprint[:16]}"
        self.max_bytes = _max_bytes() if max_bytes is None else int(max_bytes)
        self.reads = self.writes = self.rejected = 0
        self._unchecked = 0  # bytes written since the size bound was last checked
        self._written = 0  # bytes this store has written (this process)
        self._told_small = False
        self._checked_once = False
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_lock")
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls) -> "DiskStore | None":
        """The store the environment asks for, or None when it is off or the code cannot be
        fingerprinted. The first call for a folder checks that entries can be written there
        (:func:`unwritable_problem`; the warning waits in :func:`take_warnings`)."""
        if not cache_enabled():
            return None
        fp = code_fingerprint()
        if fp is None:
            return None
        root = cache_root()
        if str(root) not in _PROBED:  # nothing can be stored there: said once (take_warnings); the store still reads and computes
            _PROBED.add(str(root))
            problem = unwritable_problem(root)
            if problem is not None:
                _UNTOLD.append(problem)
        return cls(root, fp)

    def _path(self, key: Any) -> tuple[Path, str]:
        d = _digest(self.fingerprint, key)
        return self.folder / d[:2] / d[2:], d

    def get(self, key: Any) -> Any:
        path, digest = self._path(key)
        try:
            blob = path.read_bytes()
        except OSError:
            return MISSING
        value = self._decode(blob, digest)
        if value is MISSING:
            self.rejected += 1
            try:
                path.unlink()
            except OSError:
                pass
            return MISSING
        self.reads += 1
        try:
            os.utime(path)  # least recently used goes first
        except OSError:
            pass
        return value

    @staticmethod
    def _decode(blob: bytes, digest: str) -> Any:
        head = len(_MAGIC) + 64 + 1 + 64 + 1
        if len(blob) < head or not blob.startswith(_MAGIC):
            return MISSING
        key_digest = blob[len(_MAGIC):len(_MAGIC) + 64].decode("ascii", "replace")
        sums = blob[len(_MAGIC) + 65:head - 1].decode("ascii", "replace")
        payload = blob[head:]
        if key_digest != digest or hashlib.sha256(payload).hexdigest() != sums:
            return MISSING
        try:
            return _Unpickler(io.BytesIO(payload)).load()
        except Exception:  # noqa: BLE001 - any failure to read an entry makes it a miss
            return MISSING

    def put(self, key: Any, value: Any) -> bool:
        """Write ``value`` under ``key`` atomically; False (and nothing written) when it cannot
        be pickled or the folder takes no file."""
        from fleetplan.tempfiles import sibling_temp

        path, digest = self._path(key)
        try:
            payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - an unpicklable piece is simply not kept
            return False
        blob = _MAGIC + digest.encode() + b"\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = sibling_temp(path)
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
            tmp = None
        except OSError:
            return False
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
        self.writes += 1
        with self._lock:
            self._unchecked += len(blob)
            self._written += len(blob)
            due = self._unchecked >= _CHECK_EVERY_BYTES or (not self._checked_once and not self._checked_lately())
            self._checked_once = True
            if due:
                self._unchecked = 0
        if due:
            self.evict()
        return True

    def _checked_lately(self) -> bool:
        """Whether a process checked the size bound (:meth:`evict`) in the last
        :data:`_RESCAN_S` seconds (the stamp's mtime)."""
        import time

        try:
            return 0.0 <= time.time() - (self.root / _SCAN_STAMP).stat().st_mtime < _RESCAN_S
        except OSError:
            return False

    def entries(self) -> list[tuple[float, int, Path]]:
        """(last use, bytes, path) of every entry under the root (every code version's),
        oldest first; temporary files of writers in progress are left out."""
        out = []
        try:
            tops = [e for e in os.scandir(self.root) if e.name.startswith("tables-") and e.is_dir(follow_symlinks=False)]
        except OSError:
            return out
        for top in tops:
            try:
                shards = [e for e in os.scandir(top.path) if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for shard in shards:
                try:
                    for e in os.scandir(shard.path):
                        if e.name.startswith("."):
                            continue
                        try:
                            st = e.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        out.append((st.st_mtime, st.st_size, Path(e.path)))
                except OSError:
                    continue
        out.sort(key=lambda x: (x[0], str(x[2])))
        return out

    def size_bytes(self) -> int:
        """Bytes held by every entry under the root."""
        return sum(size for _, size, _ in self.entries())

    def evict(self) -> int:
        """Remove the least recently used entries until the cache holds at most ``max_bytes``
        (to 90% of it, so the next runs do not evict again at once); returns how many were
        removed. A concurrent run's removal of the same entry is not an error. Renews the
        stamp that spares the next processes' first writes the scan (:data:`_RESCAN_S`)."""
        entries = self.entries()
        try:
            (self.root / _SCAN_STAMP).touch()
        except OSError:
            pass
        total = sum(size for _, size, _ in entries)
        if total <= self.max_bytes:
            return 0
        goal = int(self.max_bytes * 0.9)
        removed = 0
        for _, size, path in entries:
            if total <= goal:
                break
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError:
                continue
            total -= size
            removed += 1
        if removed and self._written > self.max_bytes and not self._told_small:
            # one command's own tables pass the bound: every run evicts what the last one kept (a 1 MB bound and
            # gemini-ironwood's 10.2 MB had emptied the cache at each run without a word)
            self._told_small = True
            _UNTOLD.append(f"{ENV_MAX_MB}: this command had written {self._written / 1e6:.1f} MB of candidate tables when the bound was "
                           f"checked, more than the table cache's bound of {self.max_bytes / 1e6:g} MB, so a run may remove what earlier runs kept "
                           f"(fewer pieces reused, down to none); raise it "
                           f"(default {DEFAULT_MAX_MB:g})")
        return removed
