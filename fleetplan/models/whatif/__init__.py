"""The what-if model: the installed fleet held fixed, operations re-optimised after a loss."""

from fleetplan.models.whatif.build import WhatIfData, WhatIfPool, build_whatif_model

__all__ = ["WhatIfData", "WhatIfPool", "build_whatif_model"]
