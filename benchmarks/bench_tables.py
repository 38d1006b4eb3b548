"""The candidate tables on a measured length distribution (issue 41; not part of the tests).

    python benchmarks/bench_tables.py                       # 3 runs of each command, this tree
    python benchmarks/bench_tables.py --baseline /tmp/base  # A/B against another source tree
    python benchmarks/bench_tables.py --tree /tmp/base --runs 1   # another source tree alone
    python benchmarks/bench_tables.py --write-case 200 /tmp/azure-cdf-200-buckets.yaml
    FLEETPLAN_SHARED=/path/to/shared python benchmarks/bench_tables.py   # from a git worktree

The instances: ``../shared/cases/azure-cdf-52-buckets.yaml`` (the Azure conversation
trace's input-length CDF as 52 buckets, 200 req/s, Llama-3-70B BF16 on H100, colocated,
two tiers), the same CDF re-bucketed to 200 buckets (:func:`rebucket`; everything else the
case's), and the bundled ``gemini-ironwood`` (disaggregated, the brief's instance).

The CDF. The case's buckets come in fours of equal share: each interval of a
piecewise-linear CDF on the edges :data:`AZURE_EDGES` (tokens; the interval 6,554-9,830
holds no request) split at the midpoints of four equal-probability parts, rounded to
whole tokens. :func:`azure_cdf` reads the intervals' probabilities back from the case and
checks that re-bucketing them four to an interval gives the case's 52 buckets exactly;
:func:`rebucket` splits the same intervals into N buckets in all: floor(N / 13) each and
one more for the intervals with the largest probability until N are placed (the
largest-remainder rule on a uniform split), each sub-bucket at its midpoint.

Each command runs in a fresh process as a user runs it (``python -m fleetplan perf X``,
``python -m fleetplan solve X -o PLAN``), timed from process start to exit: wall seconds
(``time.perf_counter`` around ``subprocess.run``) and CPU seconds (user + system of the
child, ``resource.getrusage(RUSAGE_CHILDREN)``), medians over ``--runs``. With
``--baseline TREE`` every command also runs with ``PYTHONPATH=TREE`` (a tree holding
another commit's ``fleetplan/``: ``git archive main | tar -x -C /tmp/base``), alternating
the two run by run, and the two solves' plans are compared byte for byte. The machine is
shared: CPU time is the figure to trust under load; the 1-minute load average before and
after is printed. docs/benchmarks.md records the numbers.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: ``../shared`` from the project's root (``FLEETPLAN_SHARED`` elsewhere, e.g. from a git worktree)
CASE = Path(os.environ.get("FLEETPLAN_SHARED", ROOT.parent / "shared")) / "cases" / "azure-cdf-52-buckets.yaml"
#: the CDF's knots (tokens): multiples of 51.2 = 1024 / 20
AZURE_EDGES = tuple(x * 1024 for x in (0, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.2, 1.6, 2.4, 3.2, 4.8, 6.4, 9.6, 12.8))


def _buckets(lo: float, hi: float, p: float, n: int) -> list[dict]:
    """``n`` buckets of probability p / n at the midpoints of n equal parts of [lo, hi] (tokens, rounded half up)."""
    return [{"share": p / n, "tokens": int(math.floor(lo + (hi - lo) * (k + 0.5) / n + 0.5))} for k in range(n)]


def azure_cdf(case: Path = CASE) -> list[tuple[float, float, float]]:
    """(lo, hi, probability) of each CDF interval with requests (tokens, tokens, fraction),
    read back from the case's buckets (four per interval). Raises ValueError when four
    buckets per interval do not give the case's buckets back."""
    mix = yaml.safe_load(case.read_text())["workload"]["input_mix"]
    out = []
    for lo, hi in zip(AZURE_EDGES[:-1], AZURE_EDGES[1:]):
        inside = [b for b in mix if lo < b["tokens"] <= hi]
        if inside:
            out.append((lo, hi, sum(b["share"] for b in inside)))
    again = [b for lo, hi, p in out for b in _buckets(lo, hi, p, 4)]
    if [b["tokens"] for b in again] != [b["tokens"] for b in mix] or any(
            abs(a["share"] - b["share"]) > 1e-12 for a, b in zip(again, mix)):
        raise ValueError(f"{case}: its buckets are not four quantile midpoints per interval of AZURE_EDGES")
    return out


def rebucket(n: int, case: Path = CASE) -> list[dict]:
    """The case's CDF as ``n`` buckets (module docstring): a workload.input_mix list."""
    cdf = azure_cdf(case)
    if n < len(cdf):
        raise ValueError(f"need at least {len(cdf)} buckets (one per CDF interval), got {n}")
    per = [n // len(cdf)] * len(cdf)
    for j in sorted(range(len(cdf)), key=lambda j: -cdf[j][2])[: n - sum(per)]:
        per[j] += 1
    mix = [b for (lo, hi, p), k in zip(cdf, per) for b in _buckets(lo, hi, p, k)]
    if len({b["tokens"] for b in mix}) != len(mix):
        raise ValueError(f"{n} buckets round two midpoints to the same token count")
    return mix


def write_case(n: int, path: Path, case: Path = CASE) -> Path:
    """The case with its input mix re-bucketed to ``n`` buckets, as YAML at ``path``."""
    data = yaml.safe_load(case.read_text())
    data["name"] = f"azure-cdf-{n}-buckets"
    data["description"] = (f"{case.name} with the same Azure conversation CDF re-bucketed to {n} buckets "
                           f"(benchmarks/bench_tables.py rebucket); everything else the case's")
    data["workload"]["input_mix"] = rebucket(n, case)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def time_once(argv: list[str], tree: str | None = None) -> tuple[float, float]:
    """(wall s, CPU s) of one run of ``argv`` (stdout and stderr discarded), with
    ``PYTHONPATH=tree`` if given; raises RuntimeError unless it exits 0."""
    env = dict(os.environ, PYTHONPATH=tree) if tree else dict(os.environ, PYTHONPATH=str(ROOT))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # cwd "/": `python -m` puts the working directory first on sys.path
    r = subprocess.run(argv, env=env, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", default=None, help="another source tree to time with PYTHONPATH=TREE, alternating")
    ap.add_argument("--tree", default=None, help="time this source tree (PYTHONPATH=TREE) instead of the script's own")
    ap.add_argument("--write-case", nargs=2, metavar=("N", "PATH"), help="write the N-bucket instance to PATH and exit")
    args = ap.parse_args()
    if args.write_case:
        print(write_case(int(args.write_case[0]), Path(args.write_case[1])))
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench_tables_"))
    instances = [("azure-cdf-52", str(CASE)), ("azure-cdf-200", str(write_case(200, tmp / "azure-cdf-200-buckets.yaml"))),
                 ("gemini-ironwood", "gemini-ironwood")]
    trees = [(args.tree or "this tree", args.tree)] + ([("baseline", args.baseline)] if args.baseline else [])
    py = sys.executable
    print(f"load average (1 min) before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs; {args.runs} runs each; plans in {tmp}")
    for name, inst in instances:
        for cmd in ("perf", "solve"):
            got = {label: [] for label, _ in trees}
            for run in range(args.runs):
                for label, tree in trees:
                    plan = tmp / f"{name}-{label}.json".replace("/", "_")
                    argv = [py, "-m", "fleetplan", cmd, inst] + (["-o", str(plan)] if cmd == "solve" else [])
                    got[label].append(time_once(argv, tree))
            line = [f"{cmd} {name}:"]
            for label, xs in got.items():
                line.append(f"{label} {statistics.median(w for w, _ in xs):.2f} s wall / {statistics.median(c for _, c in xs):.2f} s CPU")
            if cmd == "solve" and args.baseline:
                same = (tmp / f"{name}-{trees[0][0]}.json".replace("/", "_")).read_bytes() == (tmp / f"{name}-baseline.json").read_bytes()
                line.append("plans byte-identical" if same else "PLANS DIFFER")
            print("  ".join(line), flush=True)
    print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    import os

    os.environ.setdefault("FLEETPLAN_CACHE", "0")  # time the computation, not the table cache (issue 41); FLEETPLAN_CACHE=1 opts in
    main()
