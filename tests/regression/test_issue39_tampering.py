"""Issue 39, items 7, 8 and 10: a plan or placement edited after it was written is refused
(exit 2, the edited field named, nothing written) by every command that reads it.

* item 7: ``dcn[].sized_for`` was rebuilt from itself (x10 passed every reader, and a value
  above the ceiling declares an overage);
* item 10: recorded predictions were compared to three significant digits (x1.01 passed
  every reader; ``growth_absorbed`` was compared as 1 + g, so x2 passed) while the cost
  arithmetic was held to six (``cost_per_1m_output_tokens_usd`` x1.0001 was refused);
* item 8: four placement summary fields were not checked at all, so the export vouched
  (placement hash label) for an edited file;

and ``export`` did not check the plan's records at all (a placement whose ``plan_hash``
was made to match an edited plan was exported)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.placement.document import plan_hash
from fleetplan.results.plan import Plan

runner = CliRunner()


def _walk(doc, path: str):
    """(container, key) of the leaf at a dotted path with [i] indices ('a[0].b.c')."""
    keys = [int(k) if k.isdigit() else k for k in re.findall(r"[^.\[\]]+", path)]
    node = doc
    for k in keys[:-1]:
        node = node[k]
    return node, keys[-1]


def _first(doc, key: str, ok) -> str:
    """The path of the first scenario pool record whose ``key`` satisfies ``ok``."""
    for i, s in enumerate(doc["scenarios"]):
        for j, p in enumerate(s["pools"]):
            if ok(p):
                return f"scenarios[{i}].pools[{j}].{key}"
    raise AssertionError(f"no pool record with a usable {key}")


def _smallest_growth(doc) -> str:
    """The pool record whose growth_absorbed is the smallest positive one: where 1 + g
    hid a doubling."""
    g, i, j = min((p["growth_absorbed"], i, j) for i, s in enumerate(doc["scenarios"]) for j, p in enumerate(s["pools"])
                  if isinstance(p.get("growth_absorbed"), float) and 0 < p["growth_absorbed"] < 1)
    return f"scenarios[{i}].pools[{j}].growth_absorbed"


def _short_tier(doc) -> str:
    """The dcn record of a tier with a level below its ceiling (Gemini's short tier: 1%)."""
    return next(f"dcn[{i}].sized_for" for i, x in enumerate(doc["dcn"]) if x["tier"] == "short")


def times(k):
    return lambda v: v * k


#: case -> (the path of the field in the plan, its edit); each is a field the issue names,
#: with its edit, and for item 7 the two edits that move sized_for to another level
PLAN_EDITS = {
    "sized_for x10": (lambda d: "dcn[0].sized_for", times(10.0)),
    # the overage level where the pods keep every share within the ceiling: a declaration the plan does not make
    "sized_for set to 1": (lambda d: "dcn[0].sized_for", lambda v: 1.0),
    # a lower level of the tier (1%), below the shares its pods send in a region loss
    "sized_for set to the level 0.01": (_short_tier, lambda v: 0.01),
    "ttft_estimate_ms.p50 x1.01": (lambda d: _first(d, "ttft_estimate_ms.p50", lambda p: p.get("ttft_estimate_ms")), times(1.01)),
    "diverted_rps x1.01": (lambda d: _first(d, "diverted_rps", lambda p: p["role"] == "prefill" and p["diverted_rps"] > 0), times(1.01)),
    "occupancy x1.01": (lambda d: _first(d, "occupancy", lambda p: p["role"] == "decode" and p.get("occupancy")), times(1.01)),
    "dcn_egress_gbytes_per_s x1.01": (lambda d: next(f"pods[{i}].dcn_egress_gbytes_per_s" for i, p in enumerate(d["pods"])
                                                     if p["dcn_egress_gbytes_per_s"] > 0), times(1.01)),
    "cost_per_1m_input_tokens_usd x1.01": (lambda d: "cost.cost_per_1m_input_tokens_usd", times(1.01)),
    "growth_absorbed x2": (_smallest_growth, times(2.0)),
    # refused before the fix too: the one rule holds it and the others alike
    "cost_per_1m_output_tokens_usd x1.0001": (lambda d: "cost.cost_per_1m_output_tokens_usd", times(1.0001)),
}

READERS = ("whatif", "place", "report", "simulate", "export-controller", "export-k8s", "export-keda")

#: every edit through the reader that checked nothing (export) and a fast one (whatif); the
#: field of item 7 and one of item 10 through every reader
PLAN_CASES = sorted({(c, r) for c in PLAN_EDITS for r in ("whatif", "export-controller")}
                    | {(c, r) for c in ("sized_for x10", "occupancy x1.01") for r in READERS})


@pytest.fixture(scope="module")
def placed(plan_file, tmp_path_factory):
    """name -> (plan JSON, placement JSON) for a plan sized with its pods (Gemini: a
    placement of schema_version 2) and one sized without (Llama, colocated: the placement
    model's, schema_version 1)."""
    d = tmp_path_factory.mktemp("issue39")
    out = {}
    for name in ("gemini-ironwood", "llama70b-h100"):
        path = d / f"{name}.placement.json"
        r = runner.invoke(app, ["place", str(plan_file(name)), "-o", str(path)])
        assert r.exit_code == 0, r.output
        out[name] = (json.loads(plan_file(name).read_text()), json.loads(path.read_text()))
    return out


def _args(reader: str, plan, placement, region: str, out) -> list[str]:
    if reader.startswith("export-"):
        return ["export", str(placement), "--plan", str(plan), "--format", reader.split("-")[1], "-o", str(out)]
    return {"whatif": ["whatif", str(plan), "--lose", region, "--json"],
            "place": ["place", str(plan), "-o", str(out)],
            "report": ["report", str(plan), "-o", str(out)],
            "simulate": ["simulate", str(plan), "--region", region, "--duration", "2", "--warmup", "1", "--scale", "0.05",
                         "-o", str(out)]}[reader]


@pytest.mark.parametrize("case,reader", PLAN_CASES)
def test_an_edited_plan_record_is_refused_by_every_reader(placed, tmp_path, case, reader):
    doc, placement = (json.loads(json.dumps(x)) for x in placed["gemini-ironwood"])
    find, edit = PLAN_EDITS[case]
    field = find(doc)
    node, key = _walk(doc, field)
    node[key] = edit(node[key])
    plan = tmp_path / "edited.json"
    plan.write_text(json.dumps(doc))
    # the export's placement made to match the edited plan (its plan_hash), as a careless or
    # hostile edit of both files would: the plan's own records must refuse it
    placement["plan_hash"] = plan_hash(Plan.model_validate(doc))
    pfile = tmp_path / "placement.json"
    pfile.write_text(json.dumps(placement))
    out = tmp_path / ("out" if reader.startswith("export-k") else "out.html" if reader == "report" else "out.json")
    r = runner.invoke(app, _args(reader, plan, pfile, doc["pools"][0]["region"], out))
    assert r.exit_code == 2, f"{case} through {reader}: exit {r.exit_code}\n{r.output[-3000:]}"
    assert field in r.output and "Traceback" not in r.output, r.output[-3000:]
    assert not out.exists()


#: case -> (edit of the placement document, the field the refusal must name)
def _bump_share(pl):
    """+2 points on a tier's share (a colocated fleet lists none: one is added)."""
    d = pl["demand"][0]
    k = sorted(pl["dcn_share_by_tier"])[0] if pl["dcn_share_by_tier"] else f"{d['region']}/{d['tier']}"
    pl["dcn_share_by_tier"][k] = pl["dcn_share_by_tier"].get(k, 0.0) + 0.02
    return "dcn_share_by_tier"


def _double_demand(pl):
    pl["demand"][0]["rps"] *= 2
    return "demand[0].rps"


def _less(key):
    def edit(pl):
        pl[key] -= 1
        return key
    return edit


PLACEMENT_EDITS = {"dcn_share_by_tier +0.02": _bump_share, "demand[].rps x2": _double_demand,
                   "pods_used -1": _less("pods_used"), "fragmented_free_chips -1": _less("fragmented_free_chips")}
PLACEMENT_CASES = [("gemini-ironwood", c, f) for c in PLACEMENT_EDITS for f in ("controller", "k8s", "keda")] + \
                  [("llama70b-h100", c, "controller") for c in PLACEMENT_EDITS]


@pytest.mark.parametrize("name,case,fmt", PLACEMENT_CASES)
def test_an_edited_placement_summary_is_refused_by_the_export(placed, tmp_path, name, case, fmt):
    doc, placement = (json.loads(json.dumps(x)) for x in placed[name])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    field = PLACEMENT_EDITS[case](placement)
    pfile = tmp_path / "placement.json"
    pfile.write_text(json.dumps(placement))
    out = tmp_path / ("out" if fmt != "controller" else "out.json")
    r = runner.invoke(app, _args(f"export-{fmt}", plan, pfile, "", out))
    assert r.exit_code == 2, f"{case} ({name}, {fmt}): exit {r.exit_code}\n{r.output[-3000:]}"
    assert field in r.output and "Traceback" not in r.output, r.output[-3000:]
    assert not out.exists()


@pytest.mark.parametrize("name", ["gemini-ironwood", "llama70b-h100"])
def test_the_unedited_plan_and_placement_export(placed, tmp_path, name):
    """The control: the same files unedited export (exit 0) in every format."""
    doc, placement = placed[name]
    plan, pfile = tmp_path / "plan.json", tmp_path / "placement.json"
    plan.write_text(json.dumps(doc))
    pfile.write_text(json.dumps(placement))
    for fmt in ("controller", "k8s", "keda"):
        r = runner.invoke(app, _args(f"export-{fmt}", plan, pfile, "", tmp_path / fmt))
        assert r.exit_code == 0, r.output[-3000:]
