"""Every bundled instance's outputs, written and hashed, so that a change meant to move code
only (no behaviour) can be checked byte for byte against the tree before it.

``python benchmarks/snapshot_outputs.py OUT_DIR`` runs, for each sizing instance under
``instances/``: ``perf --json``, ``solve -o plan.json`` (and ``--json``), ``place -o
placement.json``, ``export --format controller``, ``export --format k8s`` (a directory),
``whatif --lose`` of the first region at the peak (``--json``, and with the placement where
it routes region losses) and
``simulate`` of the first region at a small scale (``--json``); and ``purchase --no-value``
of ``instances/gemini-ironwood-2027.yaml``. It writes ``OUT_DIR/manifest.json`` (relative
path -> SHA-256) beside the files. ``--compare OTHER_DIR`` then lists every file whose bytes
differ (exit 1) or that one side lacks.

Timing lines are not part of these documents (the plan records the solver's status and gap,
not its seconds) except the what-if report's ``solve_s``, written as null here, so two runs of
one tree give the same manifest; the text tables
printed by ``solve`` are not compared (they state seconds).

Takes ~4-6 min on 2 cores (the purchase plan ~1 min).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZING = ["llama70b-h100.yaml", "llama70b-h100-bf16-p99.yaml", "llama70b-h100-fp8-p99.yaml", "gemini-ironwood.yaml",
          "gemini-trillium.yaml", "gemini-ironwood-mooncake.yaml"]
PURCHASE = "gemini-ironwood-2027.yaml"


def _run(args: list[str], out: Path | None = None, ok: tuple[int, ...] = (0, 3)) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    p = subprocess.run([sys.executable, "-m", "fleetplan", *args], capture_output=True, text=True, env=env, cwd=ROOT)
    if p.returncode not in ok:
        raise SystemExit(f"fleetplan {' '.join(args)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    if out is not None and p.returncode in (0, 3):
        # the what-if report states each re-optimisation's solver seconds: not part of the comparison
        out.write_text(re.sub(r'"solve_s": [0-9.eE+-]+', '"solve_s": null', p.stdout))
    return p.returncode


def _first_region(inst: Path) -> str:
    import yaml

    data = yaml.safe_load(inst.read_text())
    return next(iter(data["regions"]))


def snapshot(out: Path) -> dict[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    for name in SIZING:
        inst = ROOT / "instances" / name
        d = out / name.removesuffix(".yaml")
        d.mkdir(exist_ok=True)
        print(f"{name} ...", flush=True)
        _run(["perf", str(inst), "--json"], d / "perf.json")
        _run(["solve", str(inst), "-o", str(d / "plan.json"), "--json"], d / "solve.json")
        _run(["place", str(d / "plan.json"), "-i", str(inst), "-o", str(d / "placement.json")])
        _run(["export", str(d / "placement.json"), "-i", str(inst), "--plan", str(d / "plan.json"), "--format", "controller", "-o", str(d / "controller.json")])
        _run(["export", str(d / "placement.json"), "-i", str(inst), "--plan", str(d / "plan.json"), "--format", "k8s", "-o", str(d / "k8s")])
        region = _first_region(inst)
        _run(["whatif", str(d / "plan.json"), "-i", str(inst), "--lose", region, "--json"], d / "whatif.json",
             ok=(0, 2, 3))  # 2: a one-region instance has nothing to lose
        # with the placement where it routes the region losses (a plan sized with its pods; exit 2 otherwise)
        _run(["whatif", str(d / "plan.json"), "-i", str(inst), "--lose", region, "--placement", str(d / "placement.json"),
              "--json"], d / "whatif-placement.json", ok=(0, 2, 3))
        _run(["simulate", str(d / "plan.json"), "-i", str(inst), "--region", region, "--json", "--seed", "1",
              "--duration", "20", "--scale", "0.1"], d / "simulate.json")
    print(f"{PURCHASE} ...", flush=True)
    _run(["purchase", str(ROOT / "instances" / PURCHASE), "--no-value", "-o", str(out / "purchase.json")])
    manifest = {str(f.relative_to(out)): hashlib.sha256(f.read_bytes()).hexdigest()
                for f in sorted(out.rglob("*")) if f.is_file() and f.name != "manifest.json"}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def compare(a: Path, b: Path) -> int:
    ma = json.loads((a / "manifest.json").read_text())
    mb = json.loads((b / "manifest.json").read_text())
    bad = [k for k in sorted(set(ma) | set(mb)) if ma.get(k) != mb.get(k)]
    for k in bad:
        print(f"differs: {k} ({'missing in ' + str(b) if k not in mb else 'missing in ' + str(a) if k not in ma else 'bytes'})")
    print(f"{len(set(ma) | set(mb)) - len(bad)} of {len(set(ma) | set(mb))} files identical")
    return 1 if bad else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--compare", type=Path, help="a snapshot directory to compare OUT with (no run)")
    a = ap.parse_args()
    if a.compare:
        raise SystemExit(compare(a.out, a.compare))
    m = snapshot(a.out)
    print(f"{len(m)} files -> {a.out / 'manifest.json'}")


if __name__ == "__main__":
    main()
