"""What a time-limited solve's notes say is true of the stage that was cut (newcomer trial).

A generated 5-region instance under `solve --time-limit 20`: the time passed while the pod
stage's tables were built, so the plan is the plain sizing's, whose own HiGHS solve had
stopped at its time limit 64.36% above its bound. The plan said "the HiGHS solve of the pod
stage stopped at the time limit before any bound on the cost was proved ... unknown" (the
pod stage never solved; the gap was known), and "NOT REPRODUCIBLE: ... (the other notes say
which)" where no note said which."""

from __future__ import annotations

from fleetplan import sizing
from fleetplan.results.plan import SolverInfo
from fleetplan.solvers.base import SolveOptions


def _info(**kw) -> SolverInfo:
    base = dict(solver="highs", termination="time_limit", objective=152679.0, bound=54420.0, gap=0.643565, iterations=1,
                variables=10003, integer_variables=3793, constraints=12634, pod_stage_termination="time_limit", pod_stage_gap=None)
    return SolverInfo.model_construct(**{**base, **kw})


def test_a_plan_without_its_pods_gets_the_plain_sizings_gap():
    note = sizing.gap_note(_info(), SolveOptions(mip_gap=0.01), with_pods=False)
    assert note is not None and note.startswith(sizing.GAP_NOTE)
    assert "a gap of 64.36% (its cost 180.56% above its best bound)" in note and "pod stage" not in note and "unknown" not in note
    assert "may cost up to 180.56% more than the cheapest fleet" in note  # 152,679 / 54,420 - 1, not the relative gap
    # a plan sized with its pods keeps the pod stage's own gap
    staged = sizing.gap_note(_info(pod_stage_gap=None), SolveOptions(mip_gap=0.01), with_pods=True)
    assert "of the pod stage" in staged and "unknown" in staged


def test_the_not_reproducible_note_names_what_was_stopped():
    note = sizing.not_reproducible_note(["the pod stage before it ran (its tables or its start)", "the pod stage before it ran (its tables or its start)"])
    assert note.startswith(sizing.NOT_REPRODUCIBLE) and "other notes" not in note
    assert note.count("the pod stage before it ran") == 1
