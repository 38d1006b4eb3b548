"""The table cache on a user's re-solves (issue 41, "interactive what-ifs"; not part of the tests).

    python benchmarks/bench_table_cache.py                          # gemini-ironwood, the Azure 52- and 200-bucket cases
    python benchmarks/bench_table_cache.py gemini-ironwood other.yaml
    FLEETPLAN_SHARED=/path/to/shared python benchmarks/bench_table_cache.py   # from a git worktree

Per instance, each command in a fresh process as a user runs it (``python -m fleetplan solve
X -o PLAN``), with ``FLEETPLAN_CACHE_DIR`` an empty temporary folder at the start:

1. ``--no-cache``: the reference (every table computed, nothing read or written);
2. cold: the first solve with the cache (computes every piece and writes it);
3. warm: the same solve again (every piece read from disk);
4. peak: one region's ``peak_rps`` x 1.1 (the first region in name order), after 2-3;
5. prior: ``priors.decode_mfu`` x 0.9 (of the base instance), after 2-4;

and the peak and prior variants once more with ``--no-cache``, as their references; then
``fleetplan perf X`` of the base instance three ways: with ``FLEETPLAN_CACHE=0``, with an
empty cache folder of its own (cold), and with the solves' folder (warm: it shares the
replica rate searches). The 200-bucket case is written by ``bench_tables.write_case``
(the same Azure CDF re-bucketed). Each row gives wall seconds (``time.perf_counter`` around ``subprocess.run``) and CPU seconds
(user + system of the child, ``resource.getrusage(RUSAGE_CHILDREN)``), the line ``solve``
prints about the cache, and whether the plan is byte for byte the reference's. A plan whose
pod stage a wall-clock budget cut (``solver.pod_stage_termination`` 'time_limit') may differ
under load whatever the cache; for those the comparison is made again through the API with
``SolveOptions(deterministic=True)`` (the pod stage's proof runs to the gap), with no cache
and with the warm cache. The machine is shared: CPU time is
the figure to trust; the 1-minute load average is printed before and after each instance.
docs/benchmarks.md records the numbers.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FLEETPLAN_SHARED") or next((p / "shared" for p in ROOT.parents if (p / "shared" / "cases").is_dir()),
                                                         ROOT.parent / "shared"))
DEFAULT = ["gemini-ironwood", str(SHARED / "cases" / "azure-cdf-52-buckets.yaml"), "azure-200"]


def _source(name: str) -> dict:
    if Path(name).exists():
        return yaml.safe_load(Path(name).read_text())
    sys.path.insert(0, str(ROOT))
    from fleetplan.instance.io import bundled_instance_path

    return yaml.safe_load(bundled_instance_path(name).read_text())


def _azure_200(work: Path) -> str:
    """The 200-bucket Azure case (benchmarks/bench_tables.py write_case), written under ``work``."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_tables

    return str(bench_tables.write_case(200, work / "azure-cdf-200-buckets.yaml", SHARED / "cases" / "azure-cdf-52-buckets.yaml"))


def _run(args: list[str], env: dict) -> tuple[float, float, str]:
    """(wall s, CPU s of the child, its stderr) of ``python -m fleetplan ARGS``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "fleetplan", *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"fleetplan {' '.join(args)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, r.stderr


def _deterministic(path: Path, env: dict) -> str:
    """The plan (JSON) of ``path`` solved with SolveOptions(deterministic=True) in a fresh process."""
    code = ("import sys, pyomo.environ; from fleetplan.instance.io import load_instance; from fleetplan.sizing import solve; "
            "from fleetplan.solvers.base import SolveOptions; "
            "sys.stdout.write(solve(load_instance(sys.argv[1]), SolveOptions(deterministic=True)).plan.model_dump_json())")
    return subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True, check=True).stdout


def _note(stderr: str) -> str:
    return next((line.strip() for line in stderr.splitlines() if line.startswith("candidate tables:")), "(no note)")


def _bench(name: str, work: Path) -> None:
    doc = _source(name)
    label = Path(name).stem
    region = sorted(doc["regions"])[0]
    variants = {"base": doc}
    peak = json.loads(json.dumps(doc))
    peak["regions"][region]["peak_rps"] = peak["regions"][region]["peak_rps"] * 1.1
    variants["peak"] = peak
    prior = json.loads(json.dumps(doc))
    prior["priors"]["decode_mfu"] = prior["priors"]["decode_mfu"] * 0.9
    variants["prior"] = prior
    paths = {}
    for k, v in variants.items():
        paths[k] = work / f"{label}-{k}.yaml"
        paths[k].write_text(yaml.safe_dump(v, sort_keys=False))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               FLEETPLAN_CACHE_DIR=str(work / f"cache-{label}"), FLEETPLAN_CACHE="1")
    print(f"\n{name}: load {os.getloadavg()[0]:.2f}; the peak variant: regions.{region}.peak_rps x 1.1; the prior: priors.decode_mfu x 0.9")
    refs = {}
    rows = [("base", "--no-cache"), ("base", "cold"), ("base", "warm"), ("peak", "warm"), ("prior", "warm"),
            ("peak", "--no-cache"), ("prior", "--no-cache")]
    out = []
    for variant, how in rows:
        plan = work / f"{label}-{variant}-{how.strip('-')}.json"
        args = ["solve", str(paths[variant]), "-o", str(plan)] + (["--no-cache"] if how == "--no-cache" else [])
        wall, cpu, err = _run(args, env)
        data = plan.read_bytes()
        if how == "--no-cache":
            refs[variant] = data
        cut = json.loads(data)["solver"].get("pod_stage_termination") == "time_limit"
        out.append((variant, how, wall, cpu, _note(err) if how != "--no-cache" else "-", data, cut))
        print(f"  {variant:5s} {how:10s} {wall:6.2f} s wall {cpu:6.2f} s CPU  {out[-1][4]}", flush=True)
    print("  plans byte for byte the --no-cache plan of the same instance:")
    cuts = {variant for variant, _, _, _, _, _, cut in out if cut}
    for variant, how, _, _, _, data, cut in out:
        if how != "--no-cache":
            same = data == refs[variant]
            print(f"    {variant} {how}: {'same' if same else 'DIFFERENT'}" + (" (a pod stage cut by its wall-clock budget)" if variant in cuts else ""))
    for variant in sorted(cuts):
        plain = _deterministic(paths[variant], dict(env, FLEETPLAN_CACHE="0"))
        cached = _deterministic(paths[variant], env)
        print(f"    {variant}, deterministic=True through the API: {'same' if plain == cached else 'DIFFERENT'} with and without the cache")
    for how, extra in (("FLEETPLAN_CACHE=0", {"FLEETPLAN_CACHE": "0"}), ("cold", {"FLEETPLAN_CACHE_DIR": str(work / f"perf-{label}")}),
                       ("warm", {})):
        wall, cpu, _ = _run(["perf", str(paths["base"])], dict(env, **extra))
        print(f"  perf  {how:17s} {wall:6.2f} s wall {cpu:6.2f} s CPU", flush=True)
    print(f"  load after: {os.getloadavg()[0]:.2f}")


def main() -> None:
    names = sys.argv[1:] or DEFAULT
    print(f"fleetplan from {ROOT}; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="bench-table-cache-") as tmp:
        for name in names:
            _bench(_azure_200(Path(tmp)) if name == "azure-200" else name, Path(tmp))


if __name__ == "__main__":
    main()
