"""What extracting and verifying a plan of an instance cost the last time it was solved,
kept beside the candidate tables, so that ``--time-limit`` keeps enough time for it.

Under a time limit the sizing stops its solver early enough to extract and verify the plan
by the deadline (:mod:`fleetplan.sizing`). It estimates that time from the table build's,
since verifying re-derives the physics the tables hold -- which holds when the tables were
computed, and fails when they come from the table cache: a warm re-solve builds its tables
in a fraction of the time its verification takes (the generated 20-region instance: tables
2 s warm, extraction and verification of its plan 8+ s of wall clock on a loaded machine),
so the reserve was too short and ``solve --time-limit 60`` wrote no plan at all.

Each completed extraction and verification therefore records its CPU seconds, per instance
(:func:`fleetplan.instance.io.instance_hash`) and kind of plan (sized with its pods or not),
in the table cache's disk store (and the process's memory); the next solve of the same
instance reads it (:func:`recorded`) and scales it by how much slower than its CPU time the
process runs now (:func:`slowdown`: wall over CPU seconds of its own table build and model
build, single-threaded work). Nothing is recorded with ``FLEETPLAN_CACHE=0``.
"""

from __future__ import annotations

import threading

from fleetplan.instance.schema import Instance

__all__ = ["recorded", "record", "record_cut", "slowdown", "reserve_basis", "MAX_SLOWDOWN", "POST_SOLVE_RESERVE", "POD_POST_SOLVE_RESERVE",
           "plain_reserve_s", "pod_reserve_s"]

#: Wall over CPU time is capped here: a process stalled on the disk or suspended reads as
#: slower than any load makes it, and the reserve should not swallow the whole limit for it.
MAX_SLOWDOWN = 8.0

_MEMORY: dict[tuple, float] = {}
_LOCK = threading.Lock()


def _key(inst: Instance, with_pods: bool) -> tuple:
    from fleetplan.instance.io import instance_hash

    return ("post_solve_cpu_s", instance_hash(inst), bool(with_pods))


def _disk():
    from fleetplan.tables.cache import default_tables

    tables = default_tables()
    return None if tables is None else tables.disk


def recorded(inst: Instance, with_pods: bool) -> float | None:
    """CPU seconds the last completed extraction and verification of a plan of ``inst``
    (sized with its pods or not) took, or None when none is recorded."""
    key = _key(inst, with_pods)
    with _LOCK:
        got = _MEMORY.get(key)
    if got is not None:
        return got
    disk = _disk()
    if disk is None:
        return None
    from fleetplan.tables.store import MISSING

    value = disk.get(key)
    if value is MISSING or not isinstance(value, float):
        return None
    with _LOCK:
        _MEMORY[key] = value
    return value


def record(inst: Instance, with_pods: bool, cpu_s: float) -> None:
    """Keep ``cpu_s`` (CPU seconds of a completed extraction and verification of a plan of
    ``inst``) for the next solve of it; best effort (a disk that cannot be written is left)."""
    key = _key(inst, with_pods)
    value = float(cpu_s)
    with _LOCK:
        _MEMORY[key] = value
    disk = _disk()
    if disk is not None:
        disk.put(key, value)


def slowdown(wall_s: float, cpu_s: float) -> float:
    """How many wall seconds a CPU second of single-threaded work takes now: ``wall_s`` over
    ``cpu_s`` of the same stretch, within [1, MAX_SLOWDOWN] (1 when the stretch is too short
    to read: under 50 ms of CPU)."""
    if cpu_s < 0.05:
        return 1.0
    return min(max(wall_s / cpu_s, 1.0), MAX_SLOWDOWN)


def record_cut(inst: Instance, with_pods: bool, cpu_s: float) -> None:
    """An extraction and verification the deadline cut after ``cpu_s`` of CPU costs more than
    that: twice it is kept (or what was kept before, if more) for the next solve's reserve."""
    record(inst, with_pods, max(recorded(inst, with_pods) or 0.0, 2.0 * cpu_s))


def reserve_basis(inst: Instance, tables_s: float, wall_s: float, cpu_s: float, pod_ratio: float) -> float:
    """Seconds the sizing's post-solve reserves are multiples of (its POST_SOLVE_RESERVE x for
    the plain plan, ``pod_ratio`` times that for a plan with its pods): the table build's
    ``tables_s``, or more when an earlier solve of ``inst`` recorded what its extraction and
    verification took, scaled by :func:`slowdown` (``wall_s`` over ``cpu_s`` of this solve's
    table and model build): at least the plain plan's cost (the plan with pods' when no plain
    one is recorded: it costs more), and 1/``pod_ratio`` of the plan with pods' (so its
    reserve keeps as much over its cost as the plain one's)."""
    plain, pods = recorded(inst, False), recorded(inst, True)
    est = max(plain if plain is not None else (pods or 0.0), (pods or 0.0) / pod_ratio)
    return max(tables_s, slowdown(wall_s, cpu_s) * est)


#: The solver stops this many times the table-building time (+ 0.2 s) before the deadline,
#: for extracting and verifying the plan: verification re-derives the tables' physics (the
#: bundled Gemini instance: tables 5.2 s, verification 5.5 s, as timed when the reserve was
#: set on 2026-12-02, commit 7f3f5c4 -- a spot check, not kept in any benchmark).
POST_SOLVE_RESERVE = 1.2
#: A plan sized with its pods: its extraction and verification are given this many times the table-building
#: time (+ 0.2 s) before the plain plan's reserve (POST_SOLVE_RESERVE) -- the generated 20-region plan's took
#: 2.8 x its tables (15.9 s for 5.7 s; 1.8 had left --time-limit 60 with no plan at all).
POD_POST_SOLVE_RESERVE = 3.0


def plain_reserve_s(basis: float) -> float:
    """Seconds kept at the end of the limit for extracting and verifying a plan sized without pods (``basis``: :func:`fleetplan.sizing.post_solve_cost.reserve_basis`, s)."""
    return POST_SOLVE_RESERVE * basis + 0.2


def pod_reserve_s(basis: float) -> float:
    """Seconds kept, before the plain plan's reserve, for extracting and verifying a plan sized with its pods."""
    return POD_POST_SOLVE_RESERVE * basis + 0.2
