"""Issue 39 item 12: ``--time-limit`` is a wall-clock limit over the whole command, so every
loop before the solve must look at the deadline often enough that the command stops within
about a second of it. The colocated candidate tables did not: one (tier, shape, schedule)
step of ``_replica_candidates`` -- dozens of rate searches, each a bisection over the
replicas' state and latency -- ran between two checks (11 s on gemini-ironwood-mooncake
without its serving block, ``solve --time-limit 3``).

No assertion here reads a wall clock: the deadline module's clock is replaced by a counter
of the physics evaluations (the rate searches' array programs: the replicas' states, their
TPOT and ITL checks and their own-compute percentiles, each over a few rates at once), so
"the deadline passed" happens after a known amount of work, whatever the machine's load.
"""

from __future__ import annotations

import pytest

import fleetplan.deadline as deadline
import fleetplan.perf.replica_rates as replica_rates
from fleetplan.deadline import TimeLimitReached, deadline_scope
from fleetplan.tables.derived import build_model_data
from fleetplan.instance.io import parse_instance
from tests.conftest import tiny_data
from tests.families.test_replica_schedule import SCHEDULES

pytestmark = pytest.mark.fresh_table_cache  # tests/conftest.py: its own empty table-cache folder


class _WorkClock:
    """The deadline module's clock, in physics evaluations done so far (one 'second' each)."""

    def __init__(self, monkeypatch):
        self.evals = 0
        self.reads: list[int] = []
        for name in ("colocated_states", "tpot_exceeds", "itl_ms", "own_compute_percentiles"):
            real = getattr(replica_rates, name)

            def counted(*a, _real=real, **k):
                self.evals += 1
                return _real(*a, **k)

            monkeypatch.setattr(replica_rates, name, counted)
        monkeypatch.setattr(deadline, "time", self)

    def monotonic(self) -> float:  # what deadline.check reads, once per call
        self.reads.append(self.evals)
        return float(self.evals)


@pytest.fixture(scope="module")
def colocated_inst():
    return parse_instance(tiny_data(**SCHEDULES), "schedules")


def test_the_replica_rate_searches_check_the_deadline_at_every_step(colocated_inst, monkeypatch):
    clock = _WorkClock(monkeypatch)
    with deadline_scope(1e12):  # never passes: only count the work between two checks
        build_model_data(colocated_inst)
    assert clock.evals > 50  # the rate searches did run (about a hundred array programs)
    gaps = [b - a for a, b in zip([0, *clock.reads], [*clock.reads, clock.evals])]
    # a check of a few rates is one states program and one SLO program: at most a few between checks
    # (before: a whole (tier, shape, schedule) step -- every rate search of it -- between two)
    assert max(gaps) <= 4, max(gaps)


def test_a_deadline_inside_a_rate_search_stops_the_tables_at_once(colocated_inst, monkeypatch):
    clock = _WorkClock(monkeypatch)
    with deadline_scope(60.0), pytest.raises(TimeLimitReached) as e:
        build_model_data(colocated_inst)
    assert e.value.phase == "building the candidate tables"  # the enclosing phase, named by the physics' own checks
    assert 60 <= clock.evals <= 64, clock.evals


def test_place_checks_the_plan_within_its_time_limit(tmp_path, monkeypatch):
    """``place --time-limit 1`` on a 20-region plan took 5.8 s: the plan's checks (its records
    rebuilt from the instance) ran before the first deadline check. They run inside the
    deadline now: a limit already spent stops there, before any placement model is built."""
    import time

    from typer.testing import CliRunner

    import fleetplan.placement as placement
    from fleetplan.cli.app import app
    from tests.regression.test_issue16_place_time_limit import _plan

    import fleetplan.results.records as records

    plan = _plan(tmp_path)
    (tmp_path / "pl.json").write_text("earlier", encoding="utf-8")

    class Clock:  # the deadline module's clock: 100 s later once the plan's checks begin (a slow machine, a large plan)
        late = 0.0

        def monotonic(self):
            return time.monotonic() + self.late

    clock = Clock()
    monkeypatch.setattr(deadline, "time", clock)
    real = records.check_plan_contents

    def slow(*a, **k):
        clock.late = 100.0
        return real(*a, **k)

    monkeypatch.setattr(records, "check_plan_contents", slow)

    def never(*a, **k):
        raise AssertionError("the placement ran after the time limit had passed in the plan's checks")

    monkeypatch.setattr(placement, "place", never)
    r = CliRunner().invoke(app, ["place", str(plan), "--time-limit", "5", "-o", str(tmp_path / "pl.json")])
    text = " ".join(r.stderr.split())
    assert r.exit_code == 3, r.output
    assert "no placement: the time limit passed while checking the plan against its instance" in text, text
    assert "--time-limit 5 s of wall clock from the command's start" in text and "left as it was" in text, text
    assert (tmp_path / "pl.json").read_text() == "earlier"
