"""Deprecated import path: moved to :mod:`fleetplan.sizing.pods`; kept so old imports work."""

from fleetplan.sizing.pods import *  # noqa: F401,F403
from fleetplan.sizing.pods import __all__  # noqa: F401
