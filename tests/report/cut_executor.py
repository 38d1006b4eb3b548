"""A plug-in executor for the tests of points the --time-limit guard stops: every task is
really solved (in this process, one after another), and the named points come back as a
solve the guard stopped would -- termination 'time_limit', ``time_limited`` set and the
gap it had reached -- which no test can produce on purpose without depending on the
machine's speed. ``$FLEETPLAN_TEST_CUT`` names them for the command line:
``KEY:GAP[,KEY:GAP]`` (a key may hold ':', as 'kv_fp8:off' does; the gap is the last)."""

from __future__ import annotations

import os

from fleetplan.report.executor import SerialExecutor

ENV = "FLEETPLAN_TEST_CUT"


class CutExecutor(SerialExecutor):
    name = "cut"

    def __init__(self, cut: dict[str, float]):
        super().__init__()
        self.cut = dict(cut)

    def map(self, fn, tasks, on_done=None):
        def cut_fn(task):
            r = fn(task)
            if task["key"] in self.cut:
                r = {**r, "termination": "time_limit", "time_limited": True, "mip_gap": self.cut[task["key"]]}
            return r

        return super().map(cut_fn, tasks, on_done)


def factory(workers: int = 1) -> CutExecutor:
    spec = os.environ.get(ENV, "")
    cut = {}
    for item in filter(None, spec.split(",")):
        key, _, gap = item.rpartition(":")
        cut[key] = float(gap)
    return CutExecutor(cut)
