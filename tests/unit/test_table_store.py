"""The on-disk table cache (fleetplan.tables.store, issue 41): entries round-trip
bit for bit; a corrupt, truncated, foreign or malicious entry is a miss (removed, rebuilt by
the caller), never an error or a wrong value; the size bound removes the least recently
used entries; the code's fingerprint is in every key; concurrent writers and readers of one
key see the whole value or none; the environment decides where it lives and whether it is on."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time
from pathlib import Path

import numpy as np
import pytest

from fleetplan.tables import store as tablestore
from fleetplan.tables.cache import TableCache, default_tables
from fleetplan.tables.store import MISSING, DiskStore, cache_enabled, cache_root, code_fingerprint
from fleetplan.perf.pools import PrefillSource
from fleetplan.perf.replica_rates import RateMemo

pytestmark = pytest.mark.fresh_table_cache  # tests/conftest.py: its own empty table-cache folder

FP = "f" * 64


def _store(tmp_path, **kw) -> DiskStore:
    return DiskStore(tmp_path / "cache", FP, **kw)


def _entry(store: DiskStore, key) -> Path:
    return store._path(key)[0]


def test_an_entry_round_trips_bit_for_bit(tmp_path):
    s = _store(tmp_path)
    value = ({"own": 12.5}, np.array([0.0, 0.1 + 0.2, 1e-300, np.nextafter(1.0, 2.0)]), PrefillSource(0.3, 0.1, 20000),
             RateMemo(top=3.25, rates={(2, 0.5, 3.25): 1.0 / 3.0}))
    assert s.get(("k", 1.5)) is MISSING
    assert s.put(("k", 1.5), value)
    got = s.get(("k", 1.5))
    assert got[0] == value[0] and got[2] == value[2] and got[3] == value[3]
    assert got[1].tobytes() == value[1].tobytes() and got[1].dtype == np.float64
    assert (s.reads, s.writes, s.rejected) == (1, 1, 0)
    assert s.get(("k", 1.5000000000000002)) is MISSING  # another key: every bit of a float counts


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty", "other-key"])
def test_a_damaged_entry_is_a_miss_and_is_removed(tmp_path, damage):
    s = _store(tmp_path)
    s.put("key", np.arange(1000.0))
    path = _entry(s, "key")
    blob = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(blob[: len(blob) // 2])
    elif damage == "flip":
        path.write_bytes(blob[:-10] + bytes([blob[-10] ^ 1]) + blob[-9:])
    elif damage == "garbage":
        path.write_bytes(os.urandom(len(blob)))
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # a whole, valid entry of another key copied over this one
        s.put("other", np.arange(5.0))
        path.write_bytes(_entry(s, "other").read_bytes())
    assert s.get("key") is MISSING
    assert s.rejected == 1 and not path.exists()
    assert s.put("key", np.arange(1000.0)) and np.array_equal(s.get("key"), np.arange(1000.0))  # rebuilt


class _Boom:
    def __reduce__(self):
        return (os.system, ("echo pwned > boom.txt",))


def test_an_entry_that_names_a_foreign_global_is_refused(tmp_path, monkeypatch):
    """A well-formed entry (right key digest, right checksum) whose pickle calls os.system:
    the restricted unpickler refuses it -- a miss, nothing run."""
    monkeypatch.chdir(tmp_path)
    s = _store(tmp_path)
    s.put("key", 1.0)
    path, digest = s._path("key")
    payload = pickle.dumps(_Boom())
    import hashlib

    path.write_bytes(tablestore._MAGIC + digest.encode() + b"\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    assert s.get("key") is MISSING and s.rejected == 1
    assert not (tmp_path / "boom.txt").exists()


def test_the_code_fingerprint_is_in_every_key(tmp_path):
    a, b = DiskStore(tmp_path, "a" * 64), DiskStore(tmp_path, "b" * 64)
    a.put("key", 1.0)
    assert b.get("key") is MISSING and a.get("key") == 1.0
    fp = code_fingerprint()
    assert fp is not None and len(fp) == 64 and fp == code_fingerprint()


def test_the_fingerprint_reads_every_source_of_perf_and_instance(monkeypatch, tmp_path):
    """A change of any byte of a perf/ or instance/ source changes the fingerprint."""
    import fleetplan

    real = Path(fleetplan.__file__).parent
    fake = tmp_path / "fleetplan"
    for sub in ("perf", "instance"):
        (fake / sub).mkdir(parents=True)
        for p in (real / sub).glob("*.py"):
            (fake / sub / p.name).write_bytes(p.read_bytes())
    (fake / "__init__.py").write_text("")
    monkeypatch.setattr(fleetplan, "__file__", str(fake / "__init__.py"))
    monkeypatch.setattr(tablestore, "_FINGERPRINT", None)
    first = code_fingerprint()
    monkeypatch.setattr(tablestore, "_FINGERPRINT", None)
    q = fake / "perf" / "queueing.py"
    q.write_text(q.read_text() + "\n# a comment\n")
    assert code_fingerprint() != first
    monkeypatch.setattr(tablestore, "_FINGERPRINT", None)
    for p in (fake / "perf").glob("*.py"):
        p.unlink()
    for p in (fake / "instance").glob("*.py"):
        p.unlink()
    assert code_fingerprint() is None  # no sources to fingerprint: the store is off


def test_the_size_bound_removes_the_least_recently_used(tmp_path):
    s = _store(tmp_path, max_bytes=10**9)
    for i in range(6):
        s.put(("k", i), np.zeros(2000))  # ~16 KB each
        os.utime(_entry(s, ("k", i)), (1000.0 + i, 1000.0 + i))
    s.get(("k", 0))  # used now: the newest
    size = s.size_bytes()
    s.max_bytes = int(size * 0.6)
    removed = s.evict()
    left = [i for i in range(6) if _entry(s, ("k", i)).exists()]
    assert removed >= 2 and s.size_bytes() <= s.max_bytes * 0.9 + 1
    assert 0 in left and left == [0] + list(range(6 - len(left) + 1, 6))  # the oldest unused went first


def test_a_write_past_the_bound_evicts(tmp_path, monkeypatch):
    monkeypatch.setattr(tablestore, "_RESCAN_S", 0.0)  # no process checked lately
    s = _store(tmp_path, max_bytes=60_000)
    for i in range(12):
        s.put(("k", i), np.zeros(2000))
        s._checked_once = False  # check at every write (the store checks once per 4 MB written)
    assert s.size_bytes() <= 60_000 and s.get(("k", 11)) is not MISSING


def _hammer(root: str, fp: str, worker: int, out) -> None:
    s = DiskStore(Path(root), fp)
    seen = set()
    for i in range(150):
        key = ("shared", i % 5)
        value = np.full(3000, float(i % 5))
        if (i + worker) % 2:
            s.put(key, value)
        got = s.get(key)
        if got is not MISSING:
            seen.add(bool(np.array_equal(got, value)))
    out.put(sorted(seen))


def test_concurrent_writers_and_readers_see_whole_values(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(str(tmp_path), FP, w, out)) for w in range(3)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert all(r == [True] for r in results), results
    assert not [p for p in (tmp_path / f"tables-{FP[:16]}").rglob(".*")]  # no temporary file left behind


def test_an_unwritable_cache_degrades_to_computing(tmp_path):
    """A cache folder that cannot be made (here: under a file, which fails for root too): no
    entry written, nothing read, the pieces computed."""
    (tmp_path / "a-file").write_text("")
    s = DiskStore(tmp_path / "a-file" / "cache", FP)
    assert s.put("key", 1.0) is False and s.get("key") is MISSING
    t = TableCache(s)
    assert t.memo("key", lambda: 2.0) == 2.0 and t.misses == 1
    assert s.evict() == 0 and s.size_bytes() == 0


def test_where_the_cache_lives_and_how_it_is_turned_off(monkeypatch, tmp_path):
    monkeypatch.delenv("FLEETPLAN_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "fleetplan"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "fleetplan"
    monkeypatch.setenv("FLEETPLAN_CACHE_DIR", str(tmp_path / "own"))
    assert cache_root() == tmp_path / "own"
    assert default_tables().disk.root == tmp_path / "own"
    for off in ("0", "off", "False", "no"):
        monkeypatch.setenv("FLEETPLAN_CACHE", off)
        assert not cache_enabled() and default_tables() is None and DiskStore.from_env() is None
    monkeypatch.setenv("FLEETPLAN_CACHE", "1")
    assert cache_enabled() and default_tables() is not None


def test_the_shared_pieces_are_written_when_they_change(tmp_path):
    s = _store(tmp_path)
    t = TableCache(s)
    memo = t.shared(("rates", 1), RateMemo)
    assert memo.rates == {} and t.misses == 1
    memo.rates[(1, 0.1, 2.0)] = 1.5
    memo.changed = True
    t.flush()
    assert not memo.changed and s.writes == 1
    t.flush()
    assert s.writes == 1  # unchanged since: not written again
    again = TableCache(s).shared(("rates", 1), RateMemo)
    assert again.rates == {(1, 0.1, 2.0): 1.5} and not again.changed


def test_the_default_cache_is_remade_when_its_folder_changes(monkeypatch, tmp_path):
    monkeypatch.setenv("FLEETPLAN_CACHE_DIR", str(tmp_path / "one"))
    one = default_tables()
    assert default_tables() is one
    monkeypatch.setenv("FLEETPLAN_CACHE_DIR", str(tmp_path / "two"))
    two = default_tables()
    assert two is not one and two.disk.root == tmp_path / "two"


def test_a_curve_read_from_disk_is_extended_exactly(tmp_path):
    """A capacity curve on disk shorter than asked is extended from its last point, bit for
    bit the curve computed afresh (the prefix property, tests/unit/test_table_cache.py)."""
    from fleetplan.tables.prefill import _capacity_curve_uncached, workload_capacity_curve

    s = _store(tmp_path)
    workload_capacity_curve(80.0, 30.0, 0.7, 99.0, 40, 1.4, TableCache(s))
    fresh = TableCache(s)
    got = workload_capacity_curve(80.0, 30.0, 0.7, 99.0, 150, 1.4, fresh)
    tau = round(80.0 / 30.0 * 2.0 / (1.4 + 0.7), 9)
    assert got.tobytes() == _capacity_curve_uncached(tau, 99.0, 150).tobytes()
    assert fresh.hits == 0 and fresh.misses == 1 and s.reads == 1  # read, then extended: counted computed


def test_the_cache_is_picklable(tmp_path):
    t = TableCache(_store(tmp_path))
    t.memo("k", lambda: 1.0)
    u = pickle.loads(pickle.dumps(t))
    assert u.memo("k", lambda: 2.0) == 1.0 and u.disk.root == t.disk.root


def test_last_use_is_refreshed_on_read(tmp_path):
    s = _store(tmp_path)
    s.put("k", 1.0)
    os.utime(_entry(s, "k"), (1000.0, 1000.0))
    s.get("k")
    assert _entry(s, "k").stat().st_mtime > time.time() - 60


def _count_scans(monkeypatch) -> list:
    scans = []
    real = DiskStore.entries
    monkeypatch.setattr(DiskStore, "entries", lambda self: scans.append(1) or real(self))
    return scans


def test_a_process_first_write_skips_the_scan_another_made_lately(tmp_path, monkeypatch):
    """The size bound's scan stats every entry (7,200 files of a full 256 MB cache: ~0.12 s
    of CPU): a process's first write makes it only when no process has in the last
    _RESCAN_S seconds (the stamp beside the entries); past 4 MB written it scans anyway."""
    scans = _count_scans(monkeypatch)
    first = _store(tmp_path)
    first.put(("k", 0), np.zeros(10))  # no stamp yet: scans, and leaves the stamp
    assert len(scans) == 1
    second = _store(tmp_path)  # the next command, a moment later
    second.put(("k", 1), np.zeros(10))
    second.put(("k", 2), np.zeros(10))
    assert len(scans) == 1 and second.get(("k", 1)) is not MISSING
    second._unchecked = tablestore._CHECK_EVERY_BYTES  # this process has written 4 MB since: checked again
    second.put(("k", 3), np.zeros(10))
    assert len(scans) == 2


def test_a_stale_or_missing_stamp_means_a_scan(tmp_path, monkeypatch):
    scans = _count_scans(monkeypatch)
    _store(tmp_path).put(("k", 0), np.zeros(10))
    stamp = tmp_path / "cache" / tablestore._SCAN_STAMP
    old = time.time() - tablestore._RESCAN_S - 5
    os.utime(stamp, (old, old))
    _store(tmp_path).put(("k", 1), np.zeros(10))
    assert len(scans) == 2 and stamp.stat().st_mtime > old + 1  # the scan renewed the stamp
    stamp.unlink()
    _store(tmp_path).put(("k", 2), np.zeros(10))
    assert len(scans) == 3
    assert _store(tmp_path).size_bytes() == sum(size for _, size, _ in _store(tmp_path).entries())  # the stamp is no entry


def test_a_fresh_stamp_does_not_hide_a_cache_over_its_bound_for_long(tmp_path, monkeypatch):
    """Writes of other processes within the window may pass the bound; the next scan (a
    process past 4 MB, or the first write after the window) brings it back under."""
    s = _store(tmp_path, max_bytes=60_000)
    for i in range(12):
        s.put(("k", i), np.zeros(2000))  # ~16 KB each: past the bound after the first scan
    assert s.size_bytes() > 60_000
    stamp = tmp_path / "cache" / tablestore._SCAN_STAMP
    old = time.time() - tablestore._RESCAN_S - 5
    os.utime(stamp, (old, old))
    _store(tmp_path, max_bytes=60_000).put(("k", 12), np.zeros(2000))
    assert s.size_bytes() <= 60_000
