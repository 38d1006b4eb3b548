"""Deprecated import path: moved to :mod:`fleetplan.tables.cache`; kept so old imports work
(docs/benchmarks.md names it). Re-exports the public names; import from :mod:`fleetplan.tables.cache` instead."""

import warnings

warnings.warn("fleetplan.instance.tables is a deprecated import path: import fleetplan.tables.cache", DeprecationWarning, stacklevel=2)

from fleetplan.tables.cache import (  # noqa: F401
    TableCache,
    TableStats,
    physics_key,
    family_key,
    default_tables,
    reset_default_tables,
    rate_memo,
    rate_memos,
    UNREAD,
    FAMILIES,
    MEMORY_ENTRIES,
)

__all__ = ["TableCache", "TableStats", "physics_key", "family_key", "default_tables", "reset_default_tables", "rate_memo", "rate_memos", "UNREAD", "FAMILIES", "MEMORY_ENTRIES"]
