"""Start-up and the brief's solve, end to end (issue 19; not part of the tests).

    python benchmarks/bench_startup.py              # 5 runs of each command, medians
    python benchmarks/bench_startup.py --runs 3
    python benchmarks/bench_startup.py --baseline /tmp/base   # A/B against another source tree
    python benchmarks/bench_startup.py --phases --runs 2 [--baseline /tmp/base]   # the brief's solve, CPU by phase

``--baseline TREE`` also times every command with ``PYTHONPATH=TREE`` (a tree holding
another commit's ``fleetplan/``, e.g. ``git archive 31b4052 fleetplan | tar -x -C
/tmp/base``), alternating the two run by run so both see the same machine load, and
prints both medians; the two solves' plans are compared byte for byte.

Each command runs as a user runs it, in a fresh process (``python -m fleetplan``, the
console entry point's code path), timed from process start to exit (wall seconds,
``time.perf_counter`` around ``subprocess.run``). The commands:

* ``import``: ``python -c "import fleetplan.cli.app"`` (the command line's import cost)
* ``--version``, ``--help``
* ``perf``: ``fleetplan perf gemini-ironwood`` (output to /dev/null)
* ``solve``: ``fleetplan solve gemini-ironwood -o PLAN`` (the brief's instance,
  docs/benchmarks.md; plan written to a temporary file; its cost is printed so a faster
  solve is seen to be the same plan)

The 1-minute load average (``os.getloadavg``) before and after is printed: the machine
is shared, and a load above 1 on 2 cores makes every number slower.

``--phases`` runs ``fleetplan solve gemini-ironwood -o PLAN`` (the CLI's entry point, in a
fresh process per run) with the named functions of :data:`PHASES` wrapped to add up their
CPU seconds (``time.process_time``: every thread of the process, so the pod stage's block
threads count) and prints them per run -- where the solve's CPU goes, which whole-process
timing under load does not tell. ``FLEETPLAN_CACHE`` is left as it is set (unset: the
table cache on, warm after the first run; ``FLEETPLAN_CACHE=0``: cold).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BRIEF = "gemini-ironwood"


def commands(plan: Path) -> list[tuple[str, list[str]]]:
    """(name, argv) of every timed command; ``plan`` is the solve's output path."""
    py = sys.executable
    return [
        ("import fleetplan.cli.app", [py, "-c", "import fleetplan.cli.app"]),
        ("fleetplan --version", [py, "-m", "fleetplan", "--version"]),
        ("fleetplan --help", [py, "-m", "fleetplan", "--help"]),
        (f"fleetplan perf {BRIEF}", [py, "-m", "fleetplan", "perf", BRIEF]),
        (f"fleetplan solve {BRIEF} -o PLAN", [py, "-m", "fleetplan", "solve", BRIEF, "-o", str(plan)]),
    ]


#: (module, function) wrapped by ``--phases``: the solve's phases, outermost call only
PHASES = [("fleetplan.sizing", "solve"), ("fleetplan.instance.derived", "build_model_data"), ("fleetplan.models.sizing", "build_sizing_model"),
          ("fleetplan.sizing.loop", "size_loop"), ("fleetplan.sizing.pod_stage", "size_with_pods"), ("fleetplan.solvers.persistent", "read_model"),
          ("fleetplan.solvers.components", "solve_blocks"), ("fleetplan.sizing.extract", "extract_plan"), ("fleetplan.results.verify", "verify"),
          ("fleetplan.results.margins", "pool_margins")]

_PHASE_RUNNER = """
import atexit, importlib, sys, time
t0 = time.process_time()
import fleetplan.cli.app
import fleetplan.sizing, fleetplan.sizing.loop, fleetplan.sizing.pod_stage, fleetplan.sizing.extract, fleetplan.results.verify, fleetplan.results.margins, fleetplan.solvers.persistent
acc = {"imports": time.process_time() - t0}
for modname, name in PHASES:
    mod = importlib.import_module(modname)
    f = getattr(mod, name, None)
    if f is None:
        continue
    def wrapped(*a, _f=f, _k=name, _d=[0], **kw):
        if _d[0]:
            return _f(*a, **kw)
        _d[0] += 1
        t = time.process_time()
        try:
            return _f(*a, **kw)
        finally:
            _d[0] -= 1
            acc[_k] = acc.get(_k, 0.0) + time.process_time() - t
    for mname, m in list(sys.modules.items()):  # every fleetplan module that imported it by name
        if mname.startswith("fleetplan") and getattr(m, name, None) is f:
            setattr(m, name, wrapped)
atexit.register(lambda: print("PHASES " + " ".join(f"{k}={v:.3f}" for k, v in {**acc, "total": time.process_time() - t0}.items()),
                              file=sys.stderr))
from fleetplan.cli.entry import main
sys.argv = ["fleetplan", "solve", BRIEF, "-o", PLAN]
main()
"""


def phases_once(plan: Path, tree: str | None = None) -> dict[str, float]:
    """CPU seconds by phase of one ``fleetplan solve`` of the brief's instance (``--phases``)."""
    code = f"PHASES = {PHASES!r}\nBRIEF = {BRIEF!r}\nPLAN = {str(plan)!r}\n" + _PHASE_RUNNER
    env = dict(os.environ, PYTHONPATH=tree) if tree else None
    r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd="/")
    if r.returncode != 0:
        raise RuntimeError(f"the phased solve exited {r.returncode}: {r.stderr.decode()[-2000:]}")
    line = next(x for x in r.stderr.decode().splitlines() if x.startswith("PHASES "))
    return {k: float(v) for k, v in (kv.split("=") for kv in line.split()[1:])}


def time_once(argv: list[str], tree: str | None = None) -> float:
    """Wall seconds of one run of ``argv`` (stdout and stderr discarded), with
    ``PYTHONPATH=tree`` if given; raises ``RuntimeError`` if the command does not exit 0."""
    env = dict(os.environ, PYTHONPATH=tree) if tree else None
    t0 = time.perf_counter()
    # cwd: the root directory, so `python -m` / `-c` (which put the working directory
    # first on sys.path) import the installed or PYTHONPATH fleetplan, not a checkout's
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd="/")
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.decode()[-2000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs of each command (the median is reported)")
    ap.add_argument("--only", default=None, help="time only the commands whose name contains this")
    ap.add_argument("--baseline", default=None, help="a source tree with another fleetplan/ to time beside this one")
    ap.add_argument("--phases", action="store_true", help="the brief's solve, CPU seconds by phase (see the module docstring)")
    args = ap.parse_args()
    if args.phases:
        with tempfile.TemporaryDirectory() as td:
            print(f"load average (1 min) before: {os.getloadavg()[0]:.2f}; FLEETPLAN_CACHE={os.environ.get('FLEETPLAN_CACHE', '(unset: on)')}")
            for i in range(args.runs):
                for tree in ([args.baseline] if args.baseline else []) + [None]:
                    got = phases_once(Path(td) / f"plan-{i}-{'base' if tree else 'this'}.json", tree)
                    print(f"{tree or 'this tree'} run {i + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in got.items()), flush=True)
            print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}")
        return
    with tempfile.TemporaryDirectory() as td:
        plan = Path(td) / "plan.json"
        base_plan = Path(td) / "base-plan.json"
        load0 = os.getloadavg()[0]
        print(f"load average (1 min) before: {load0:.2f}; {os.cpu_count()} CPUs; {args.runs} runs each")
        if args.baseline:
            print(f"| command | median s, {args.baseline} | median s, this tree | runs s (baseline / this) |")
            print("|---|---|---|---|")
        else:
            print("| command | median s | runs s |")
            print("|---|---|---|")
        for (name, argv), (_, base_argv) in zip(commands(plan), commands(base_plan)):
            if args.only and args.only not in name:
                continue
            runs, base = [], []
            for _ in range(args.runs):
                if args.baseline:
                    base.append(time_once(base_argv, args.baseline))
                runs.append(time_once(argv))
            if args.baseline:
                print(f"| `{name}` | {statistics.median(base):.2f} | {statistics.median(runs):.2f} | "
                      f"{', '.join(f'{r:.2f}' for r in base)} / {', '.join(f'{r:.2f}' for r in runs)} |", flush=True)
            else:
                print(f"| `{name}` | {statistics.median(runs):.2f} | {', '.join(f'{r:.2f}' for r in runs)} |", flush=True)
        if plan.exists():
            p = json.loads(plan.read_text())
            c = p["cost"]
            print(f"plan: {p['status']}, fleet {c['fleet_cost_per_hour_usd']:,.0f} USD/h, {c['chips']:,} chips, "
                  f"objective {p['solver']['objective']:,.1f} USD/h")
            if base_plan.exists():
                print("baseline plan byte-identical: " + ("yes" if base_plan.read_bytes() == plan.read_bytes() else "NO"))
        print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    import os

    if "--phases" not in sys.argv:
        os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    main()
