"""The renderers of the docs' generated blocks by KEY (``<!-- generated:KEY -->``): filled
by :func:`block` as :mod:`fleetplan.report.docnumbers.plans` and ``.studies`` are imported,
read by :mod:`fleetplan.report.docnumbers`."""

from __future__ import annotations

from typing import Callable

#: KEY -> renderer(Sources) -> Markdown (no leading or trailing newline).
RENDERERS: dict[str, Callable[..., str]] = {}


def block(key: str):
    """Register ``fn(src: Sources) -> str`` as the renderer of ``<!-- generated:key -->``."""

    def put(fn):
        if key in RENDERERS:
            raise ValueError(f"two renderers for generated:{key}")
        RENDERERS[key] = fn
        return fn

    return put
