"""A newcomer's trial: a plan whose header said "stopped at the MIP gap asked for" carried
"NOT REPRODUCIBLE: the --time-limit guard stopped a solver run at its share of the time limit
(HiGHS or CP-SAT stopped on the clock)" -- naming neither the solver nor which of its solves
the clock stopped, so the two read as a contradiction. The note now counts the solves the
clock stopped among the solver's own and says the header is the last solve's."""

from __future__ import annotations

from fleetplan.solvers.base import SolveOptions, SolveResult
from fleetplan.solvers.recorded import Recorded


def _result(term: str) -> SolveResult:
    return SolveResult(term, term, True, 1.0, 1.0, 0.0, 0.1, "highs", "")


def test_the_note_counts_the_solves_the_clock_stopped():
    runs = iter(["time_limit", "gap_reached", "gap_reached"])
    rec = Recorded(lambda m, opts, **kw: _result(next(runs)))
    for _ in range(3):
        rec(None, SolveOptions(solver="highs"))
    assert rec.stopped
    text = rec.cut_text()
    assert text.startswith("1 of the 3 HiGHS solve(s) on the clock") and "the last solve's termination" in text
    assert "HiGHS or CP-SAT" not in text


def test_a_pod_stage_block_cut_counts_as_a_stop():
    rec = Recorded(lambda m, opts, **kw: _result("optimal"))
    rec(None, SolveOptions(solver="highs"))
    assert not rec.stopped
    rec.stopped = True  # sizing_pods: a block the guard cut
    assert rec.stopped and rec.cut_text().startswith("1 of the 1 HiGHS")
