"""The numbers the docs quote from plans, exports and studies are today's (issue 39 item 6:
the README kept a test count 10% short, docs/controller.md an export of a plan two physics
changes old, docs/reports.md studies of a 14,856-chip plan whose conclusion -- "HBM
bandwidth moves the fleet least" -- no longer held).

Generated passages sit between ``<!-- generated:KEY -->`` markers and are rendered by
:mod:`fleetplan.report.docnumbers` (``python -m fleetplan.report.docnumbers`` rewrites
them). These tests render every block from the session's plans and reports (the solves the
other tests share, tests/conftest.py) and compare; they check that the studies' JSON was
run against today's plan; and they keep the README's test count within 10% of the suite."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fleetplan.instance.io import bundled_instances, instance_hash, load_instance
from fleetplan.report import docnumbers as D
from fleetplan.report.docnumbers import plans, studies  # noqa: F401 -- registers the renderers
from tests.regression.pins import PINS

ROOT = Path(__file__).resolve().parents[2]
PINNED = json.loads(PINS.read_text())


def _slices(plan) -> dict[str, int]:
    return {f"{p.region}/{p.tier}/{p.role}/{p.slice}": p.slices for p in plan.pools}


def _not_the_pinned_incumbents(solved, names) -> list[str]:
    """Bundled instances whose solve here is not the pinned one (tests/regression/bundled_plans.json)."""
    return [n for n in names if _slices(solved(n)[1]) != PINNED[n]["slices"]]


def test_every_marker_has_a_renderer_and_every_renderer_a_marker():
    seen: dict[str, list[str]] = {}
    for path in D.doc_files(ROOT):
        for key, _ in D.blocks_in(path.read_text(encoding="utf-8")):
            seen.setdefault(key, []).append(str(path.relative_to(ROOT)))
    assert sorted(set(seen) - set(D.RENDERERS)) == [], "markers without a renderer in fleetplan/report/docnumbers"
    assert sorted(set(D.RENDERERS) - set(seen)) == [], "renderers whose block is in no doc"
    assert {k: v for k, v in seen.items() if len(v) > 1} == {}, "a block rendered twice: quote it once and point to it"


def test_marker_syntax_errors_are_named():
    with pytest.raises(ValueError, match="readme-tornado"):
        D.blocks_in("text <!-- generated:readme-tornado --> never closed")
    with pytest.raises(KeyError, match="no-such-key"):
        D.render_text("<!-- generated:no-such-key -->x<!-- /generated:no-such-key -->", D.Sources())


def test_a_block_keeps_its_form():
    """A block on lines of its own stays one; a phrase inside a line stays inline."""
    D.RENDERERS["t-form"] = lambda src: "NEW"
    try:
        text = "a <!-- generated:t-form -->old<!-- /generated:t-form --> b\n<!-- generated:t-form -->\nold\n<!-- /generated:t-form -->\n"
        assert D.render_text(text, D.Sources()) == ("a <!-- generated:t-form -->NEW<!-- /generated:t-form --> b\n"
                                                    "<!-- generated:t-form -->\nNEW\n<!-- /generated:t-form -->\n")
    finally:
        del D.RENDERERS["t-form"]


def test_generated_blocks_are_current(solved, bundled_reports):
    """Every generated block equals its rendering from today's solves (the session's), the
    Gemini plan's placement and export, `fleetplan perf` and the studies' JSON. The docs are
    rendered on the machine the regression pins are taken on; where HiGHS stops at another
    incumbent within the gap (another CPU or library build), the figures cannot match and the
    test says so and skips -- the pins' interval test still checks the plans there."""
    other = _not_the_pinned_incumbents(solved, bundled_instances())
    if other:
        pytest.skip(f"this machine's solve of {', '.join(other)} is not the pinned incumbent (tests/regression/bundled_plans.json), "
                    "so the docs' figures, rendered from the pinned plans, cannot match here")
    src = D.Sources(plan_fn=solved, report_fn=lambda name: bundled_reports[name].data)
    stale = D.stale_blocks(src, ROOT)
    assert stale == [], f"stale generated blocks: {stale}; run `{D.REFRESH}` (and commit the docs)"


@pytest.mark.parametrize("file", sorted(D.STUDIES))
def test_studies_were_run_on_todays_plan(file, solved):
    """The studies' JSON records the instance hash and the base plan it was run against: both
    must be today's (the pinned plan, and the session's solve where this machine reproduces
    it), or a physics change has moved the plan under the study and it must be re-run."""
    doc = json.loads((D.ROOT / "benchmarks" / "results" / file).read_text())
    name = doc.get("instance_name", doc.get("instance"))
    assert name == "gemini-ironwood"
    rerun = f"re-run `{D.STUDIES[file]}`, then `{D.REFRESH}`"
    assert "instance_hash" in doc and "base" in doc, f"{file} records no instance hash or base plan (written before issue 39): {rerun}"
    assert doc["instance_hash"] == instance_hash(load_instance(name)), f"{file} was run on another version of {name}: {rerun}"
    base = (doc["base"]["chips"], doc["base"]["fleet_cost_per_hour_usd"])
    pin = PINNED[name]
    assert base == (pin["chips"], pin["fleet_cost_per_hour_usd"]), f"{file}'s base {base} is not the pinned plan's: {rerun}"
    if not _not_the_pinned_incumbents(solved, [name]):
        c = solved(name)[1].cost
        assert base == (c.chips, c.fleet_cost_per_hour_usd), f"{file}'s base {base} is not today's solve's: {rerun}"


def _whole_default_suite(config) -> bool:
    """True when this run collected the suite as `pytest` does (testpaths, default marks, no
    selection), so the session's items are the suite; pytest-xdist's workers collect it all
    too (they are told which items to run, not given fewer)."""
    o = config.option
    if getattr(o, "keyword", "") or getattr(o, "lf", False) or getattr(o, "deselect", None) or getattr(o, "markexpr", "") != "not slow":
        return False
    args = [Path(a.split("::")[0]).resolve() for a in config.args]
    return bool(args) and all(a in (ROOT / "tests", ROOT) for a in args)


def test_readme_test_count_is_within_ten_percent_of_the_suite(request):
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    m = re.search(r"The suite is about ([\d,]+) tests", readme)
    assert m, "README: the sentence 'The suite is about N tests' is gone"
    stated = int(m.group(1).replace(",", ""))
    if not _whole_default_suite(request.config):
        pytest.skip("counts the suite only when `pytest` collects all of it (no paths, -k, -m or --lf)")
    collected = len(request.session.items)
    assert abs(collected - stated) <= 0.10 * stated, (
        f"README says about {stated:,} tests; pytest collected {collected:,}: update the README's figure (a round number)")


def test_the_certain_shortfall_quoted_in_cli_md_is_todays():
    """issue 39 newcomer trial 8: docs/cli.md's 'Time limits' quoted a hand-typed '1,557,934
    pods ... 398,830,984 chips' where solve printed 1,558,917 / 399,082,696. The phrase is a
    generated block now, rendered from the candidate tables (no solve): it is current."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    body = dict(D.blocks_in(text))["cli-shortfall-certain"]
    assert body == D.RENDERERS["cli-shortfall-certain"](D.Sources())
