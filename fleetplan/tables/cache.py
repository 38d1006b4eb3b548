"""The candidate-table cache: pieces of the tables kept between builds of instances that
share their inputs -- the nodes of a purchase tree, the points of a sweep, a
notebook's re-solves, and, on disk, the next ``fleetplan solve`` of an instance one number
of which was edited (an interactive what-if).

Which piece reads what. :func:`fleetplan.tables.derived.build_model_data` computes, per
tier t and slice shape c:

============================  ==========================================================  =======================
piece                         inputs (its key)                                            family
============================  ==========================================================  =======================
decode operating points       t, c, the instance as the decode physics reads it           ``decode``
prefill fit, probe, physics   t, c, the traffic mixes (every weight, hit rate, clamp),    ``prefill``
                              the DCN share; the instance as prefill physics reads it
capacity curve A(0..n) of     the prefill piece's key and serving.router (the longest     ``prefill``
the TTFT sum                  points asked for)
replica rate search           t, c, the exact prompt sources, the schedule; the           ``replica``
                              instance as colocated physics reads it
============================  ==========================================================  =======================

A family's part of the instance is :func:`family_key`: the instance's canonical JSON
without ``regions`` (demand, pods, prices, hourly loads), its name and description, the
workload's ``demand_margin``, and the fields of :data:`UNREAD` -- the parts that family's
physics never reads (``tests/unit/test_table_keys.py`` changes each of them on the bundled
instances and checks that family's tables do not move). So a region's ``peak_rps``
reaches the prefill pieces only through the failover mixes' diverted shares and the
curves' lengths, both in the keys exactly; ``priors.decode_mfu`` reaches the decode and
replica pieces, not the prefill ones nor the curves. Equal keys mean equal inputs, and the
value under a key is the value the uncached build computes -- not an approximation.

A prefill candidate's curve is the TTFT percentile of the sum's
(:func:`fleetplan.perf.ttft_tail.capacity_curve_of_sum`): a convex envelope, so not
a prefix of a longer one, but the envelope of points that are
(:func:`fleetplan.perf.ttft_tail.sum_curve_points` bisects every pool size on its own). The
points are the prefill piece (``prefill._sum_curve``, :meth:`TableCache.points`: the longest
asked for, extended by the pool sizes past it when the tables ask for the curve again,
longer -- ``prefill.extend_prefill`` -- and sliced for a shorter one); the envelope is taken
at every request.
The single-queue wait curves A(n) (:func:`fleetplan.tables.prefill.workload_capacity_curve`,
counted as family ``curve``; a solve's candidates no longer ask for them) depend on the
scaled wait budget, the percentile and their length n_max; nodes of other demand ask for
the same curve at other lengths. The bisection that computes them
(:func:`fleetplan.perf.queueing.max_arrival_rate`) runs the same fixed number of steps
for every server count independently (element-wise float64 operations only), so A(0..n)
is a prefix of A(0..N) for N >= n, bit for bit; :meth:`TableCache.curve` keeps the
longest curve per (budget, percentile) and slices it, or extends it from its last point
(``tests/unit/test_table_cache.py`` checks the prefix property on this machine's numpy,
and the purchase tests compare the whole model built with and without the cache).

A replica pool's rate search (:class:`fleetplan.perf.replica_rates.ReplicaRates`) gives
rate(n) from a bisection between the rates of the pool sizes searched before; what it
shares is a :class:`~fleetplan.perf.replica_rates.RateMemo` -- the rate of n *for a given
bracket*, the top rate and the prompts' fixed service -- each a pure function of its key,
so a build with other pool sizes (another peak) reuses what its searches meet again and
computes the rest exactly as without the cache.

The process's default cache (:func:`default_tables`, what ``build_model_data`` uses when
not given one) keeps pieces in memory (the least recently used past
:data:`MEMORY_ENTRIES` go) and on disk (:mod:`fleetplan.tables.store`: location,
size bound, the code fingerprint in every key, corrupt entries ignored);
``FLEETPLAN_CACHE=0`` or a command's ``--no-cache`` turns both off.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleetplan.instance.physics import physics_key
from fleetplan.instance.schema import Instance
from fleetplan.tables.store import MISSING, DiskStore, cache_enabled, cache_root

__all__ = ["TableCache", "TableStats", "physics_key", "family_key", "default_tables", "reset_default_tables", "rate_memo", "rate_memos", "UNREAD",
           "FAMILIES", "MEMORY_ENTRIES"]

#: pieces the default cache keeps in memory (least recently used beyond go; the disk keeps them)
MEMORY_ENTRIES = 8192

#: parts of the instance no table reads: labels, and the demand (which reaches the tables
#: only through the keys' own arguments: traffic mixes, curve lengths, pool sizes)
_NO_TABLE = {"name": True, "description": True, "regions": True, "workload": {"demand_margin"}}

#: per family, the parts of the instance its physics never reads (beyond :data:`_NO_TABLE`),
#: as a pydantic ``exclude``; each is checked by tests/unit/test_table_keys.py
UNREAD: dict[str, dict] = {
    # decode operating points: the decode step, speculation, KV fit with the handoff reserve --
    # no prefill compute, no TTFT path, no failover policy (the failover regime rides to the knee)
    "decode": {
        "priors": {"prefill_mfu", "prefill_overhead_ms", "prefill_chunk_tokens", "context_parallel_min_tokens",
                   "context_parallel_efficiency", "path_latency"},
        "failover": True,
        "serving": {"mode", "utilisation_headroom", "colocated_schedules", "chunk_tokens", "router", "mixed_shapes"},
        "placement": {"size_with_pods"},
    },
    # prefill service times, profiles and wait budgets: the prompt pass and the KV transfer -- no
    # decode step, no speculation, no decode or colocated serving options; the traffic mixes and
    # the DCN share are in the keys (so is the failover policy's effect: the mixes' hit rates)
    "prefill": {
        "priors": {"decode_mfu", "decode_step_overhead_ms", "tpot_tail_method"},
        "speculation": True,
        "failover": True,
        "serving": True,
        "placement": True,
    },
    # colocated replicas' rate searches: the prompt sources and the schedule are in the keys
    "replica": {
        "failover": True,
        "serving": {"mode", "batch_caps", "decode_knee_margin", "utilisation_headroom", "colocated_schedules", "chunk_tokens",
                    "mixed_shapes"},
        "placement": True,
    },
}
FAMILIES = tuple(UNREAD)


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        if k not in out or v is True or out[k] is True:
            out[k] = True if (v is True or out.get(k) is True) else v
        else:
            out[k] = set(out[k]) | set(v)
    return out


_EXCLUDE = {f: _merge(_NO_TABLE, u) for f, u in UNREAD.items()}
_KEYS: OrderedDict = OrderedDict()  # id(inst) -> (inst, {family: key}): the instance is held, so its id is not reused
_KEYS_LOCK = threading.Lock()


def family_key(inst: Instance, family: str) -> str:
    """What ``family``'s tables (``decode``, ``prefill``, ``replica``) read of ``inst``: its
    canonical JSON without the parts no table reads and the family's :data:`UNREAD`
    (computed once per instance object). Raises KeyError for an unknown family."""
    with _KEYS_LOCK:
        got = _KEYS.get(id(inst))
        if got is not None and got[0] is inst:
            _KEYS.move_to_end(id(inst))
            keys = got[1]
        else:
            keys = {}
            _KEYS[id(inst)] = (inst, keys)
            if len(_KEYS) > 16:
                _KEYS.popitem(last=False)
        if family not in keys:
            keys[family] = _family_key(inst, family)
        return keys[family]


def _family_key(inst: Instance, family: str) -> str:
    """:func:`family_key` computed. An instance with a ``physics:`` block is read through its
    held sources only (:func:`fleetplan.instance.physics.held_instances`: the instance with a
    source's priors and no physics block), so its key is theirs, in order, each with its
    name: a held source's prior edited changes it, an unheld source's does not, and which
    sources ``hold: slowest`` picks is in it (the reference step time reads priors a family
    may leave out)."""
    if inst.physics is None:
        return f"{family}:" + inst.model_dump_json(exclude=_EXCLUDE[family])
    from fleetplan.instance.physics import held_instances

    return f"{family}:held:" + "|".join(f"{name}={_family_key(si, family)}" for name, si in held_instances(inst))


@dataclass
class TableStats:
    """Pieces a window of builds asked for (:meth:`TableCache.counting`), each counted once,
    by where it came from: ``memory`` (an earlier build in this process), ``disk`` (an
    earlier run), ``computed`` (here); ``extended``: of the reused, the shared pieces (a
    replica rate search's :class:`~fleetplan.perf.replica_rates.RateMemo`) the window's
    builds added to (searches of pool sizes not met before), known when the window closes;
    ``by_family``: family ('decode', 'prefill', 'replica', 'curve', or 'other' for a key of
    no family) -> {source: count}, 'extended' included."""

    memory: int = 0
    disk: int = 0
    computed: int = 0
    extended: int = 0  # of the reused: shared pieces (rate searches' memos) this window added to
    by_family: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def reused(self) -> int:
        return self.memory + self.disk

    @property
    def total(self) -> int:
        return self.reused + self.computed


class TableCache:
    """Memo of candidate-table pieces for ModelData builds that share their inputs.

    ``memo(key, compute)`` returns the value stored under ``key`` (any hashable with a
    deterministic ``repr``; callers put :func:`family_key` first) -- from memory, else from
    ``disk`` (a :class:`~fleetplan.tables.store.DiskStore`, or None) -- or stores
    ``compute()``. ``shared(key, factory)`` returns a mutable piece (a rate search's
    :class:`~fleetplan.perf.replica_rates.RateMemo`) that builds extend; :meth:`flush`
    writes the ones that changed to disk. ``curve(tau, percentile, n_max, compute)``
    returns A(0..n_max) (Erlangs, shape (n_max + 1,), a fresh copy) from the longest curve
    of that (scaled budget, percentile) held, calling ``compute(N)`` (a curve of N + 1
    points, N >= n_max, at least twice the held length so a growing sequence of requests
    costs few computations; ``compute(N, prefix)`` when a shorter curve is held, which it
    may extend) when it is too short. ``hits`` / ``misses`` count lookups (a disk read is a
    hit); ``max_entries`` bounds the memory (least recently used go first). Thread-safe and
    picklable (plain data, and the disk store's folder).
    """

    def __init__(self, disk: DiskStore | None = None, max_entries: int | None = None):
        self._memo: OrderedDict[Hashable, Any] = OrderedDict()
        self._curves: OrderedDict[tuple[float, float], np.ndarray] = OrderedDict()
        self._shared: dict[Hashable, Any] = {}  # key -> mutable piece, written by flush() when changed
        self.disk = disk
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._window: dict[Hashable, str] | None = None
        self._stats: TableStats | None = None
        self._watched: list = []
        self._lock = threading.RLock()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_lock")
        state["_window"] = state["_stats"] = None
        state["_watched"] = []
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ bookkeeping
    def _note(self, key: Hashable, source: str, family: str | None = None, value: Any = None) -> None:
        """Count ``key`` once in the open window, by where it came from (and its family:
        the prefix of its first element, a :func:`family_key`, unless given); a reused shared
        ``value`` is watched for growth until the window closes."""
        if self._window is not None and key not in self._window:
            self._window[key] = source
            setattr(self._stats, source, getattr(self._stats, source) + 1)
            family = family or _family_of(key)
            counts = self._stats.by_family.setdefault(family, {})
            counts[source] = counts.get(source, 0) + 1
            if value is not None and source != "computed":
                self._watched.append((family, value, _size(value)))

    @contextmanager
    def counting(self) -> Iterator[TableStats]:
        """Count the pieces asked for inside the ``with`` block (:class:`TableStats`, filled
        as they are asked for); a piece computed in the block and asked for again is counted
        once, as computed."""
        with self._lock:
            outer = (self._window, self._stats, self._watched)
            self._window, self._stats, self._watched = {}, TableStats(), []
            stats, watched = self._stats, self._watched
        try:
            yield stats
        finally:
            with self._lock:
                self._window, self._stats, self._watched = outer
            for family, value, size in watched:
                if _size(value) > size:
                    stats.extended += 1
                    counts = stats.by_family.setdefault(family, {})
                    counts["extended"] = counts.get("extended", 0) + 1

    def _keep(self, store: OrderedDict, key: Hashable, value: Any) -> None:
        store[key] = value
        store.move_to_end(key)
        if self.max_entries is not None:
            while len(store) > self.max_entries:
                store.popitem(last=False)

    # ------------------------------------------------------------------ pieces
    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._memo:
                self._memo.move_to_end(key)
                self.hits += 1
                self._note(key, "memory")
                return self._memo[key]
        if self.disk is not None:
            value = self.disk.get(("memo", key))
            if value is not MISSING:
                with self._lock:
                    self.hits += 1
                    self._note(key, "disk")
                    self._keep(self._memo, key, value)
                return value
        value = compute()
        with self._lock:
            self.misses += 1
            self._note(key, "computed")
            self._keep(self._memo, key, value)
        if self.disk is not None:
            self.disk.put(("memo", key), value)
        return value

    def shared(self, key: Hashable, factory: Callable[[], Any]) -> Any:
        """The mutable piece under ``key`` (from memory, disk, or ``factory()``); it must have
        a boolean ``changed`` attribute, set by whoever extends it, which :meth:`flush` reads."""
        with self._lock:
            got = self._shared.get(key)
            if got is not None:
                self.hits += 1
                self._note(key, "memory", value=got)
                return got
        value = self.disk.get(("shared", key)) if self.disk is not None else MISSING
        with self._lock:
            if value is MISSING:
                value = factory()
                # written at the next flush even if no build extends it (a MinRates part whose
                # check always held): the next run then reads it rather than count it computed
                value.changed = True
                self.misses += 1
                self._note(key, "computed")
            else:
                value.changed = False
                self.hits += 1
                self._note(key, "disk", value=value)
            self._shared[key] = value
            if self.max_entries is not None and len(self._shared) > self.max_entries:
                old = next(iter(self._shared))
                self._flush_one(old, self._shared.pop(old))
        return value

    def _flush_one(self, key: Hashable, value: Any) -> None:
        if self.disk is not None and getattr(value, "changed", False):
            value.changed = False
            if not self.disk.put(("shared", key), value):
                value.changed = True

    def flush(self) -> None:
        """Write the shared pieces that changed since they were read or written to disk (a
        no-op without a disk)."""
        if self.disk is None:
            return
        with self._lock:
            items = list(self._shared.items())
        for key, value in items:
            self._flush_one(key, value)

    def curve(self, tau_scaled: float, percentile: float, n_max: int, compute: Callable[..., np.ndarray]) -> np.ndarray:
        key = (tau_scaled, percentile)
        with self._lock:
            got = self._curves.get(key)
        source = "memory"
        if got is None and self.disk is not None:
            loaded = self.disk.get(("curve", tau_scaled, percentile))
            if isinstance(loaded, np.ndarray) and loaded.ndim == 1 and loaded.dtype == np.float64 and len(loaded) >= 1:
                got, source = loaded, "disk"
                with self._lock:
                    self._keep(self._curves, key, got)
        if got is None or len(got) <= n_max:
            size = n_max if got is None else max(n_max, 2 * (len(got) - 1))
            new = compute(size) if got is None else compute(size, got)
            if len(new) != size + 1:
                raise ValueError(f"a capacity curve of {size} slices has {len(new)} points, not {size + 1}")
            got = np.array(new, dtype=float)
            got.flags.writeable = False
            with self._lock:
                self.misses += 1
                self._note(key, "computed", "curve")
                self._keep(self._curves, key, got)
            if self.disk is not None:
                self.disk.put(("curve", tau_scaled, percentile), got)
        else:
            with self._lock:
                self.hits += 1
                self._note(key, source, "curve")
        return got[: n_max + 1].copy()

    def points(self, key: Hashable, n_max: int, compute: Callable[[int, int], np.ndarray]) -> np.ndarray:
        """Points 0..``n_max`` (shape (n_max + 1,), a fresh copy) of a sequence every point of
        which is computed on its own, so that a shorter one is a prefix of a longer one bit for
        bit (:func:`fleetplan.perf.ttft_tail.sum_curve_points`): the longest computed is kept
        under ``key`` (in memory and on disk), a shorter request is a slice of it and a longer
        one computes only the points past it, up to at least twice the held length (as
        :meth:`curve` grows: a computation has a fixed cost -- a TTFT-sum curve's bisection
        ~3 ms, ~8 us a point -- and the purchase tree's nodes ask a curve again a little
        longer at each node), ``compute(start, N)`` returning points start..N. Counted once
        per window under ``key``: where it was found, or computed
        when any point was (as :meth:`curve` counts a curve it extends). Raises ValueError
        when ``compute`` returns another number of points."""
        with self._lock:
            got = self._memo.get(key)
            if got is not None:
                self._memo.move_to_end(key)
        source = "memory"
        if got is None and self.disk is not None:
            loaded = self.disk.get(("points", key))
            if isinstance(loaded, np.ndarray) and loaded.ndim == 1 and loaded.dtype == np.float64 and len(loaded) >= 1:
                got, source = loaded, "disk"
        start = 0 if got is None else len(got)
        if start <= n_max:
            size = n_max if got is None else max(n_max, 2 * (start - 1))
            new = np.asarray(compute(start, size), dtype=float)
            if len(new) != size + 1 - start:
                raise ValueError(f"points {start}..{size} of a sequence came back as {len(new)} points")
            got = new if got is None else np.concatenate([got, new])
            got.flags.writeable = False
            if self.disk is not None:
                self.disk.put(("points", key), got)
        with self._lock:
            self._keep(self._memo, key, got)
            if start <= n_max:
                self.misses += 1
                self._note(key, "computed")
            else:
                self.hits += 1
                self._note(key, source)
        return got[: n_max + 1].copy()

    def __len__(self) -> int:
        return len(self._memo) + len(self._curves) + len(self._shared)


def rate_memo(tables: TableCache | None, inst: Instance, tier: str, config: str, sources, schedule: str):
    """The :class:`~fleetplan.perf.replica_rates.RateMemo` ``tables`` shares for a replica rate
    search of ``tier`` on slice shape ``config`` fed by ``sources`` (PrefillSource list, exact)
    under ``schedule`` (its label); None without a cache. One key for the candidate tables and
    ``fleetplan perf``, so each reuses the other's searches."""
    if tables is None:
        return None
    from fleetplan.perf.replica_rates import RateMemo

    return tables.shared((family_key(inst, "replica"), "replica", tier, config, tuple(sources), schedule), RateMemo)


def rate_memos(tables: TableCache | None, insts, tier: str, config: str, sources, schedule: str) -> list | None:
    """:func:`rate_memo` of each instance of ``insts`` (one per held physics source:
    :func:`fleetplan.instance.physics.held_slowest_first`) -- each keyed by its own source's
    priors, so editing one source's prior recomputes that source's searches only; None
    without a cache (:func:`fleetplan.perf.robust.rates_under`'s ``memos``)."""
    if tables is None:
        return None
    return [rate_memo(tables, si, tier, config, sources, schedule) for si in insts]


def _family_of(key: Hashable) -> str:
    """The family of a piece's key: the prefix of its first element (a :func:`family_key`), or 'other'."""
    head = key[0] if isinstance(key, tuple) and key else None
    family = head.split(":", 1)[0] if isinstance(head, str) else None
    return family if family in UNREAD else "other"


def _size(value: Any) -> int:
    """How much a shared piece holds (its ``size``), to tell a window that added to it."""
    return int(getattr(value, "size", 0))


_DEFAULT: dict[str, Any] = {}  # "cache" -> the default TableCache, "where" -> the cache folder it was made for
_DEFAULT_LOCK = threading.Lock()


def default_tables() -> TableCache | None:
    """The process's table cache (in memory, and on disk under
    :func:`~fleetplan.tables.store.cache_root` unless the code cannot be
    fingerprinted), or None when ``FLEETPLAN_CACHE`` turns caching off. Made on first use,
    and again when ``FLEETPLAN_CACHE_DIR`` (or what it defaults to) changes."""
    if not cache_enabled():
        return None
    where = str(cache_root())
    with _DEFAULT_LOCK:
        got = _DEFAULT.get("cache")
        if got is None or _DEFAULT.get("where") != where:
            got = TableCache(DiskStore.from_env(), max_entries=MEMORY_ENTRIES)
            _DEFAULT.update(cache=got, where=where)
        return got


def reset_default_tables() -> None:
    """Forget the process's table cache (the next :func:`default_tables` makes a new one; the
    disk is untouched)."""
    with _DEFAULT_LOCK:
        old = _DEFAULT.pop("cache", None)
        _DEFAULT.pop("where", None)
    if old is not None:
        old.flush()
