"""Per-test CPU time, a pytest plugin: ``pytest -p tests.cpuprof`` (the project root on
``PYTHONPATH``, as the helpers run it; ``--cpuprof-top N``, ``--cpuprof-out FILE``).

CPU time, not wall: the suite's machine is shared, and a test's wall time measures the
load as much as the test. Each test's figure is ``getrusage`` user + system seconds of
its process over its setup, call and teardown (so a module- or session-scoped fixture
counts in the first test that asks for it), plus those of the child processes it
waited for (``RUSAGE_CHILDREN``: the CLI's subprocess runs). Processes a test starts and
does not reap (a Ray cluster) are not counted.

Under pytest-xdist each worker measures its own tests and sends them to the controller
(``workeroutput``), which prints, at the end of the run: each worker's CPU (its tests,
and the whole process including start-up and collection -- the busiest worker sets the
wall time, ``--dist loadscope`` keeping a module on one worker), the files by CPU with
their worker, and the slowest tests. ``--cpuprof-out`` writes the same as JSON.
Measurement only: nothing here is asserted.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict

import pytest


def _cpu() -> float:
    """User + system seconds of this process and its reaped children."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


class CpuProf:
    def __init__(self, config):
        self.config = config
        self.tests: list[list] = []  # [nodeid, cpu s, wall s]
        self.workers: dict[str, dict] = {}
        self.cpu0 = _cpu()
        self.wall0 = time.monotonic()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        c0, w0 = _cpu(), time.monotonic()
        yield
        self.tests.append([item.nodeid, _cpu() - c0, time.monotonic() - w0])

    def _own(self) -> dict:
        return {"tests": self.tests, "process_cpu_s": _cpu() - self.cpu0,
                "process_wall_s": time.monotonic() - self.wall0}

    def pytest_sessionfinish(self, session):
        if hasattr(self.config, "workerinput"):  # an xdist worker: send to the controller
            self.config.workeroutput["cpuprof"] = json.dumps(self._own())

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        out = getattr(node, "workeroutput", {}).get("cpuprof")
        if out:
            self.workers[node.gateway.id] = json.loads(out)

    def pytest_terminal_summary(self, terminalreporter):
        if hasattr(self.config, "workerinput"):
            return
        workers = self.workers or {"main": self._own()}
        top = self.config.getoption("cpuprof_top")
        tr = terminalreporter
        tr.section("CPU per worker and test (getrusage user+sys, s)")
        files: dict[str, list] = defaultdict(lambda: [0.0, 0, set()])
        tests = []
        for w, d in sorted(workers.items()):
            total = sum(t[1] for t in d["tests"])
            tr.write_line(f"{w}: tests {total:7.1f} s CPU ({len(d['tests'])} tests), process "
                          f"{d['process_cpu_s']:7.1f} s CPU, {d['process_wall_s']:7.1f} s wall")
            for nodeid, cpu, wall in d["tests"]:
                f = files[nodeid.split("::")[0]]
                f[0] += cpu
                f[1] += 1
                f[2].add(w)
                tests.append((cpu, wall, w, nodeid))
        tr.write_line(f"all: tests {sum(t[0] for t in tests):7.1f} s CPU")
        tr.write_line(f"-- files by CPU (top {top}) --")
        for name, (cpu, n, ws) in sorted(files.items(), key=lambda kv: -kv[1][0])[:top]:
            tr.write_line(f"{cpu:7.1f} s  {n:4d} tests  {','.join(sorted(ws)):8s} {name}")
        tr.write_line(f"-- tests by CPU (top {top}) --")
        for cpu, wall, w, nodeid in sorted(tests, reverse=True)[:top]:
            tr.write_line(f"{cpu:7.1f} s CPU {wall:7.1f} s wall  {w:5s} {nodeid}")
        out = self.config.getoption("cpuprof_out")
        if out:
            with open(out + ".part", "w") as fh:
                json.dump(workers, fh)
            os.replace(out + ".part", out)


def pytest_addoption(parser):
    g = parser.getgroup("cpuprof")
    g.addoption("--cpuprof-top", type=int, default=40, help="files and tests to list (default 40)")
    g.addoption("--cpuprof-out", default=None, help="write every test's CPU to this JSON file")


def pytest_configure(config):
    config.pluginmanager.register(CpuProf(config), "cpuprof-collector")
