"""A fraction as a planner writes it: ``0.05`` or ``5%`` (once ``--mip-gap 5%`` was
read, ``--risk cvar:90%:0.5`` and ``sensitivity --param mfu=20%:50%`` refused). Shared by
the command line's fraction options and the option texts the core parses (``--risk``,
``--param``); it imports nothing."""

from __future__ import annotations


def fraction_text(text: str) -> tuple[float, bool]:
    """``text`` as a number, a trailing '%' divided by 100: ``'5%'`` -> (0.05, True),
    ``'0.05'`` -> (0.05, False). Returns (value, whether it was a percentage); the range
    is the caller's to check. Raises ValueError when it is not a number."""
    t = str(text).strip()
    if t.endswith("%"):
        return float(t[:-1].strip()) / 100.0, True
    return float(t), False
