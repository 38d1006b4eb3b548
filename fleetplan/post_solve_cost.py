"""Deprecated import path: moved to :mod:`fleetplan.sizing.post_solve_cost`; kept so old imports work."""

import warnings

warnings.warn("fleetplan.post_solve_cost is a deprecated import path: import fleetplan.sizing.post_solve_cost", DeprecationWarning, stacklevel=2)

from fleetplan.sizing.post_solve_cost import *  # noqa: F401,F403
from fleetplan.sizing.post_solve_cost import __all__  # noqa: F401
