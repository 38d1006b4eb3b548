"""fleetplan: capacity planning and placement for LLM serving fleets.

Physics is precomputed (:mod:`fleetplan.perf`), the optimiser only selects and counts
(:mod:`fleetplan.models`), and an independent checker re-proves every plan
(:mod:`fleetplan.results`).
"""

__version__ = "0.1.0"

from fleetplan.instance import Instance, load_instance  # noqa: E402

__all__ = ["__version__", "Instance", "load_instance"]
