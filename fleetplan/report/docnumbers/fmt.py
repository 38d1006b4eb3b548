"""Number formats of the generated documentation (the CLI's: thousands separators, units)."""

from __future__ import annotations

from collections.abc import Iterable


def n(x: float) -> str:
    """A count or a whole quantity with thousands separators: 22752 -> '22,752'."""
    return f"{x:,.0f}"


def usd(x: float | None, digits: int = 3) -> str:
    """Dollars with ``digits`` decimals ('3.160'); '--' for a withheld figure."""
    return "--" if x is None else f"{x:,.{digits}f}"


def pct(x: float, digits: int = 0) -> str:
    """A fraction as a percentage: 0.6 -> '60%'."""
    return f"{100 * x:.{digits}f}%"


def span(values: Iterable[float], fmt=n, sep: str = "-") -> str:
    """'lo-hi' of ``values`` in ``fmt``, or the one value when they are all equal."""
    v = sorted(values)
    a, b = fmt(v[0]), fmt(v[-1])
    return a if a == b else f"{a}{sep}{b}"


def hours(hs: Iterable[int]) -> str:
    """Hours of the day as ranges: [0, 1, 2, 3, 14] -> '00-03 and 14'."""
    hs = sorted(set(hs))
    runs: list[list[int]] = []
    for h in hs:
        if runs and h == runs[-1][-1] + 1:
            runs[-1].append(h)
        else:
            runs.append([h])
    parts = [f"{r[0]:02d}" if len(r) == 1 else f"{r[0]:02d}-{r[-1]:02d}" for r in runs]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def words(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)
