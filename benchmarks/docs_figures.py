"""Regenerate the figures the README and docs/reports.md show (docs/figures/*.png) and the
JSON documents they are drawn from (benchmarks/results/gemini_*.json).

    python benchmarks/docs_figures.py          # 8 min 15 s on 2 shared cores, load 6-8 (2026-12-07)

The figures are the commands' own (fleetplan report / levers / sensitivity on the
bundled gemini-ironwood), saved as 256-colour PNGs to keep the repository small. The JSON
documents record the instance's hash and the base plan they were run against;
tests/report/test_docs_numbers.py fails when either is not today's, and then this script
and ``python -m fleetplan.report.docnumbers`` (which renders the docs' numbers from the
JSON) are due.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
FIG = ROOT / "docs" / "figures"
RES = ROOT / "benchmarks" / "results"


def save(png: bytes, name: str) -> None:
    im = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buf = io.BytesIO()
    im.save(buf, format="PNG", optimize=True)
    (FIG / name).write_bytes(buf.getvalue())
    print(f"{name}: {len(buf.getvalue()) / 1024:.0f} KB")


def main() -> None:
    import pyomo.environ  # noqa: F401

    from fleetplan.instance.io import load_instance
    from fleetplan.report import figures as F
    from fleetplan.report.executor import get_executor
    from fleetplan.report.levers import run_levers
    from fleetplan.report.render import build_report
    from fleetplan.report.sensitivity import parse_params, run_sensitivity
    from fleetplan.report.sweep import instance_data
    from fleetplan.sizing import solve

    FIG.mkdir(parents=True, exist_ok=True)
    inst = load_instance("gemini-ironwood")
    rep = build_report(inst, solve(inst).plan)
    for stem in ("decode-tpot", "ttft-utilisation", "region-loss-cascade", "cost-per-token", "memory-map", "hourly-capacity"):
        save(rep.figures[stem], f"gemini-{stem}.png")
    ex = get_executor("local", 2)
    lev = run_levers(inst, ex)
    (RES / "gemini_levers.json").write_text(json.dumps(lev.model_dump(mode="json"), indent=1, sort_keys=True) + "\n")
    save(F.to_bytes(F.fig_levers(lev)), "gemini-levers.png")
    sens = run_sensitivity(inst, parse_params(None, instance_data(inst)), ex)
    (RES / "gemini_sensitivity.json").write_text(json.dumps(sens.model_dump(mode="json"), indent=1, sort_keys=True) + "\n")
    save(F.to_bytes(F.fig_tornado(sens)), "gemini-tornado.png")


if __name__ == "__main__":
    main()
