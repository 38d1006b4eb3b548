"""Sizing: the fleet that serves the instance's demand within its SLOs at the least cost.

``solve(instance, options)`` (:mod:`fleetplan.sizing.driver`) builds the candidate tables and
the sizing model, solves it, refines the prefill TTFT chords, sizes the plan with its pods
where asked (:mod:`fleetplan.sizing.pods`), extracts the plan (:mod:`fleetplan.sizing.extract`)
and has the independent verifier re-prove it. The package's modules:

- ``driver``: :func:`solve`, :class:`SolveOutcome`, the sizing loop, the pod stage and the
  notes a plan carries about its solve;
- ``context``: :class:`~fleetplan.sizing.context.SolveContext`, what the stages of one solve share;
- ``pods``: the pod stage's placed start and proof on HiGHS's arrays;
- ``post_solve_cost``: the time kept at the end of a time limit to extract and verify a plan;
- ``rounding``: LP-guided rounding (``--rounding-start``);
- ``extract``: the Pyomo model's values -> :class:`~fleetplan.results.plan.Plan`;
- ``source_plans``: one plan per physics source and under which sources each holds.

This module re-exports what ``fleetplan.sizing`` (a single module before) exported.
"""

from fleetplan.sizing.driver import (COMPONENT_START_MIN_INTEGERS, CPSAT_PURPOSE, GAP_NOTE, LAST_STAGE_MARGIN_S, MAX_REFINEMENTS,
                                     NOT_REPRODUCIBLE, NOT_SIZED_WITH_PODS, POD_POST_SOLVE_RESERVE, POD_START_SHARE, PODS_PLAIN_SHARE,
                                     POST_SOLVE_RESERVE, SHORTFALL_POST_SOLVE_RESERVE, SHORTFALL_STAGE_SHARE, SolveOutcome, gap_note,
                                     not_reproducible_note, pods_apply, solve)

__all__ = ["solve", "SolveOutcome", "GAP_NOTE", "NOT_REPRODUCIBLE", "NOT_SIZED_WITH_PODS", "MAX_REFINEMENTS", "POST_SOLVE_RESERVE",
           "SHORTFALL_POST_SOLVE_RESERVE", "SHORTFALL_STAGE_SHARE", "COMPONENT_START_MIN_INTEGERS", "CPSAT_PURPOSE", "LAST_STAGE_MARGIN_S",
           "POD_POST_SOLVE_RESERVE", "POD_START_SHARE", "PODS_PLAIN_SHARE", "gap_note", "not_reproducible_note", "pods_apply"]
