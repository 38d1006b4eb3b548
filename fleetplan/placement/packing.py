"""Packing slices into a pod (ICI domain): aligned first-fit, and the error a placement
raises when a plan's slices do not fit the pods that are up. Shared by the placement of a
plan (:mod:`fleetplan.placement.driver`) and of a plan sized with its pods
(:mod:`fleetplan.placement.pods`)."""

from __future__ import annotations

__all__ = ["PlacementInfeasible", "allocate"]


class PlacementInfeasible(Exception):
    """The plan's slices do not fit the pods that are up."""


def allocate(pod_chips: int, chips_per_vm: int, sizes: list[int], taken: list[tuple[int, int]] | None = None) -> list[int] | None:
    """Aligned first-fit: chip offsets for slices of ``sizes`` chips in a pod of
    ``pod_chips`` (largest first; a power-of-two slice at a multiple of its size, others at
    a VM boundary), around the spans ``taken`` (first chip, chips). Returns offsets in the
    order of ``sizes``, or None when they do not fit."""
    free = [True] * pod_chips
    for a, n in taken or []:
        for c in range(a, a + n):
            free[c] = False
    out: list[int | None] = [None] * len(sizes)
    for k in sorted(range(len(sizes)), key=lambda k: -sizes[k]):
        n = sizes[k]
        align = n if (n & (n - 1)) == 0 and pod_chips % n == 0 else max(1, min(chips_per_vm, n))
        for off in range(0, pod_chips - n + 1, align):
            if all(free[off:off + n]):
                for c in range(off, off + n):
                    free[c] = False
                out[k] = off
                break
        else:
            return None
    return out  # type: ignore[return-value]
