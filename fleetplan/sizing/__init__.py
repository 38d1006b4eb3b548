"""Sizing: the fleet that serves the instance's demand within its SLOs at the least cost.

``solve(instance, options)`` (:mod:`fleetplan.sizing.driver`) builds the candidate tables and
the sizing model, solves it, refines the prefill TTFT chords, sizes the plan with its pods
where asked (:mod:`fleetplan.sizing.pods`), extracts the plan (:mod:`fleetplan.sizing.extract`)
and has the independent verifier re-prove it. The package's modules:

- ``driver``: :func:`solve` and :class:`SolveOutcome` -- the steps of one solve (tables and
  model, the plain sizing, the pod stage, extraction and verification, the fallback to the
  plain plan) and the notes a plan carries about its solve;
- ``context``: :class:`~fleetplan.sizing.context.SolveContext`, what the stages of one solve share;
- ``loop``: the sizing loop (every shortfall at zero or the least shortfall first; the prefill
  chords refined);
- ``pod_stage``: placement-aware sizing, the sizing model again with its pods;
- ``pods``: the pod stage's placed start and proof on HiGHS's arrays;
- ``post_solve_cost``: the time kept at the end of a time limit to extract and verify a plan;
- ``rounding``: LP-guided rounding (``--rounding-start``);
- ``extract``: the Pyomo model's values -> :class:`~fleetplan.results.plan.Plan`;
- ``source_plans``: one plan per physics source and under which sources each holds.

This module re-exports what ``fleetplan.sizing`` (a single module before) exported.
"""

from fleetplan.sizing.driver import (CPSAT_PURPOSE, GAP_NOTE, NOT_REPRODUCIBLE, NOT_SIZED_WITH_PODS, PODS_PLAIN_SHARE, SolveOutcome,
                                     gap_note, not_reproducible_note, pods_apply, solve)
from fleetplan.sizing.loop import (COMPONENT_START_MIN_INTEGERS, LAST_STAGE_MARGIN_S, MAX_REFINEMENTS, SHORTFALL_POST_SOLVE_RESERVE,
                                   SHORTFALL_STAGE_SHARE)
from fleetplan.sizing.pod_stage import POD_START_SHARE
from fleetplan.sizing.post_solve_cost import POD_POST_SOLVE_RESERVE, POST_SOLVE_RESERVE

__all__ = ["solve", "SolveOutcome", "GAP_NOTE", "NOT_REPRODUCIBLE", "NOT_SIZED_WITH_PODS", "MAX_REFINEMENTS", "POST_SOLVE_RESERVE",
           "SHORTFALL_POST_SOLVE_RESERVE", "SHORTFALL_STAGE_SHARE", "COMPONENT_START_MIN_INTEGERS", "CPSAT_PURPOSE", "LAST_STAGE_MARGIN_S",
           "POD_POST_SOLVE_RESERVE", "POD_START_SHARE", "PODS_PLAIN_SHARE", "gap_note", "not_reproducible_note", "pods_apply"]
