"""Serialisation helpers shared by the result models."""

from __future__ import annotations

__all__ = ["omit_none"]


def omit_none(out, *keys: str):
    """``out`` (a model's serialised dict, from a ``model_serializer(mode="wrap")``'s
    handler) without those of ``keys`` whose value is None: a field added later is left out
    where unset, so a document without it is written byte for byte as before the field
    existed. Anything but a dict is returned as it is."""
    if isinstance(out, dict):
        for k in keys:
            if k in out and out[k] is None:
                out.pop(k)
    return out
