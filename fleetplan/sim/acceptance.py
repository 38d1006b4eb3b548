"""Speculative acceptance, random but reproducible: the drafts request r accepts at its m-th
decode step are a pure function of (seed, r, m) -- a SplitMix64 hash turned into a uniform u,
and A = min(k, floor(ln u / ln p)) accepted drafts, so P(A >= a) = p^a (drafts accepted until
the first rejection, per-token probability p; Leviathan et al., ICML 2023). Every token's
timestamp can therefore be rebuilt after the run (:meth:`fleetplan.sim.batch.DecodeLog.token_times_ms`)
without storing a token. The same hash draws the routers' uniforms (:mod:`fleetplan.sim.engine`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["uniform_hash", "accepted_drafts", "log_acceptance"]

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_G = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


def uniform_hash(seed: int, ids: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Uniforms in (0, 1), one per (id, m) pair, a pure function of (seed, id, m):
    SplitMix64 (Steele, Lea & Flood, OOPSLA 2014) of seed x golden + id x C1 + m. Arrays
    of non-negative int64 broadcast together; returns float64."""
    with np.errstate(over="ignore"):
        return _uniform_hash(seed, np.ascontiguousarray(ids, dtype=np.int64), np.ascontiguousarray(m, dtype=np.int64))


def _uniform_hash(seed: int, ids: np.ndarray, m: np.ndarray) -> np.ndarray:
    # int64 arrays reinterpreted as uint64 (no copy); the caller silences overflow warnings
    return _mix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * _G + ids.view(np.uint64) * _C1 + m.view(np.uint64) + _G)


def _hash_base(seed: int, ids: np.ndarray) -> np.ndarray:
    """seed x golden + id x C1 + golden (uint64, mod 2^64): :func:`_uniform_hash` of (seed,
    id, m) is :func:`_mix` of this plus m, bit for bit (addition mod 2^64 is associative), so
    a decode slice keeps it per resident and adds the step count. The caller silences
    overflow warnings."""
    return ids.view(np.uint64) * _C1 + (np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * _G + _G)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser of uint64 ``x`` (modified in place) as uniforms in (0, 1)."""
    x ^= x >> _S30
    x *= _C1
    x ^= x >> _S27
    x *= _C2
    x ^= x >> _S31
    return ((x >> _S11).astype(np.float64) + 0.5) * (1.0 / 9007199254740992.0)


def accepted_drafts(u: np.ndarray, log_p: np.ndarray, k: int) -> np.ndarray:
    """Drafts accepted for uniforms ``u`` and per-token log acceptance probabilities
    ``log_p`` (<= 0): min(k, floor(ln u / ln p)), so P(A >= a) = p^a. int64."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _accepted(u, log_p, k)


def log_acceptance(p: np.ndarray | float) -> np.ndarray:
    """ln p for per-token acceptance probabilities p in [0, 1], kept strictly negative
    (p = 1 gives -1e-300, so ln u / ln p is +inf: every draft accepted; p = 0 gives -inf,
    so none is)."""
    with np.errstate(divide="ignore"):
        return np.minimum(np.log(np.asarray(p, dtype=float)), -1e-300)


def _accepted(u: np.ndarray, log_p: np.ndarray, k: int) -> np.ndarray:
    a = np.log(u) / log_p
    np.minimum(a, k, out=a)
    return a.astype(np.int64)  # floor for non-negative a
