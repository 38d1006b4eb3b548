"""fleetplan: capacity planning and placement for LLM serving fleets.

Physics is precomputed (:mod:`fleetplan.perf`), the optimiser only selects and counts
(:mod:`fleetplan.models`), and an independent checker re-proves every plan
(:mod:`fleetplan.results`).
"""

__version__ = "0.1.0"

from fleetplan.instance import Instance, load_instance  # noqa: E402

__all__ = ["__version__", "Instance", "load_instance", "solve", "Plan", "verify"]


def __getattr__(name: str):
    """``solve``, ``Plan`` and ``verify`` load the optimisation stack (Pyomo, HiGHS) on
    first use, so ``import fleetplan`` and ``fleetplan perf`` stay fast."""
    if name == "solve":
        from fleetplan.sizing import solve

        return solve
    if name == "Plan":
        from fleetplan.results.plan import Plan

        return Plan
    if name == "verify":
        from fleetplan.results.verify import verify

        return verify
    raise AttributeError(f"module 'fleetplan' has no attribute {name!r}")
