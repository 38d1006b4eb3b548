"""Issue 39 items 1-2: a sweep's base is the plan `fleetplan solve` writes for the
instance; every point records how its solve ended and the gap it reached, a point the
--time-limit guard stopped is flagged, and differences within the solves' gaps are marked
as not resolved; a point does not depend on the machine's load (no wall-clock budget
inside a sweep's solve)."""

from __future__ import annotations


def test_a_solve_stopped_by_a_wall_clock_budget_says_so(sweep_instance, monkeypatch):
    """SolveOutcome.time_limited: True when a wall-clock budget stopped some stage (here
    the pod stage's proof budget, zeroed), False for the same solve without it."""
    import fleetplan.sizing as sizing
    from fleetplan.solvers.base import SolveOptions

    monkeypatch.setattr(sizing, "POD_PROOF_MIN_S", 0.0)
    monkeypatch.setattr(sizing, "POD_PROOF_FACTOR", 0.0)
    assert sizing.solve(sweep_instance, SolveOptions()).time_limited
    assert not sizing.solve(sweep_instance, SolveOptions(deterministic=True)).time_limited
