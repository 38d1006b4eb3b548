"""Deprecated import path: moved to :mod:`fleetplan.sizing.post_solve_cost`; kept so old imports work."""

from fleetplan.sizing.post_solve_cost import *  # noqa: F401,F403
from fleetplan.sizing.post_solve_cost import __all__  # noqa: F401
