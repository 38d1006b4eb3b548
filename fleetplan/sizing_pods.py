"""Deprecated import path: moved to :mod:`fleetplan.sizing.pods`; kept so old imports work."""

import warnings

warnings.warn("fleetplan.sizing_pods is a deprecated import path: import fleetplan.sizing.pods", DeprecationWarning, stacklevel=2)

from fleetplan.sizing.pods import *  # noqa: F401,F403
from fleetplan.sizing.pods import __all__  # noqa: F401
