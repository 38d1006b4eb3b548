"""The placement's routing in a region loss, exported (issue 20): each region x tier's EPP
ConfigMap carries ``kv_routing_weights_on_loss`` and the controller document each tier's
``on_loss`` for every loss the region survives -- the placement's warm joins and weights,
the DCN share they give (recomputed here from the rows, not copied) -- and a placement
without scenario routing (schema_version 1) exports as before."""

from __future__ import annotations

import json

import pytest
import yaml

from fleetplan.export.k8s import ExportOptions, build_bundle
from fleetplan.export.k8s.common import label_value
from fleetplan.export.controller import ControllerExport, build_export
from tests.k8s.validate import needs_crds, problems

# the routing data of a version-1 placement; router, epp_picker and router_assumption: the router the plan was sized
# for (issue 40), in every pool's data since the picker is configured for it
V1_KEYS = {"region", "tier", "ici_domain_label", "kv_routing_weights", "failover_share_this_region_absorbs", "failover_routing",
           "router", "epp_picker", "router_assumption"}


def _routing_data(bundle) -> dict[tuple[str, str], dict]:
    out = {}
    for rel, objs in bundle.objects.items():
        for o in objs:
            if rel.endswith("routing.yaml") and o["kind"] == "ConfigMap":
                d = yaml.safe_load(o["data"]["fleetplan-routing.yaml"])
                out[(d["region"], d["tier"])] = d
    return out


def _share(rows) -> float:
    """Share of requests whose KV leaves its prefill ICI domain: cross-domain req/s over all."""
    tot = sum(r["rps_in_scenario"] for r in rows)
    return sum(r["rps_in_scenario"] for r in rows if r["from"] != r["to"]) / tot


@pytest.fixture(scope="module")
def k8s_bundle(small):
    inst, plan, pl = small
    return build_bundle(inst, plan, pl, ExportOptions(formats=frozenset({"k8s"})))


def test_configmaps_carry_every_survived_loss(small, k8s_bundle):
    inst, plan, pl = small
    assert pl.schema_version == 2
    data = _routing_data(k8s_bundle)
    ids = {s.id: s for s in pl.slices}
    checked = 0
    for (r, t), d in data.items():
        got = d["kv_routing_weights_on_loss"]
        want = [s for s in plan.scenarios if s.kind == "loss" and s.lost_region != r]
        assert list(got) == [s.name for s in want]  # every loss this region survives, in the plan's order
        for sc in want:
            e = got[sc.name]
            assert (e["lost_region"], e["hour_utc"]) == (sc.lost_region, sc.hour)
            # the warm slices that join, counted per ICI domain from the plan's record and the placement's slices
            rec = {(p.role, p.slice): p.warm_slices for p in sc.pools if (p.region, p.tier) == (r, t) and p.warm_slices}
            counted: dict[tuple, int] = {}
            for j in e["warm_joins"]:
                assert j["ici_domain"].startswith(f"{r}.") and j["slices"] >= 1
                counted[(j["role"], j["shape"])] = counted.get((j["role"], j["shape"]), 0) + j["slices"]
            assert counted == rec
            # the rows carry the scenario's load: per prefill domain lambda / n per slice (joined warm ones included)
            placed = next(s for s in pl.scenarios if s.scenario == sc.name)
            pre: dict[str, int] = {}
            for s in pl.slices:
                if (s.region, s.tier, s.role) == (r, t, "prefill"):
                    pre[label_value(s.pod)] = pre.get(label_value(s.pod), 0) + 1
            for w in placed.warm:
                if (w.region, w.tier, w.role) == (r, t, "prefill"):
                    pre[label_value(ids[w.slice_id].pod)] = pre.get(label_value(ids[w.slice_id].pod), 0) + 1
            lam = sum(w["rps_in_scenario"] for w in e["weights"])
            sent: dict[str, float] = {}
            for w in e["weights"]:
                sent[w["from"]] = sent.get(w["from"], 0.0) + w["rps_in_scenario"]
                assert len(repr(w["share"]).split(".")[-1]) <= 9  # rounded as the normal weights
            assert sent == pytest.approx({k: lam * n / sum(pre.values()) for k, n in pre.items()}, rel=1e-6)
            assert e["dcn_share"] == pytest.approx(_share(e["weights"]), abs=1e-8)
            checked += 1
    assert checked >= 8 and any(e["warm_joins"] for d in data.values() for e in d["kv_routing_weights_on_loss"].values())


def test_the_dcn_alert_covers_the_planned_share_of_every_region_loss(small):
    """Regression: FleetplanKVOverDCN's threshold came from the normal peak's placed share
    alone, so a tier over its ceiling whose planned region loss routes more (here a/all: 58.8%
    in a loss against a 58.3% threshold) would page through every such loss as planned. The
    threshold now covers the placement's share in every scenario of the plan."""
    import re

    inst, plan, pl = small
    b = build_bundle(inst, plan, pl, ExportOptions(formats=frozenset({"prometheus"})))
    found = {}
    for text in b.files.values():
        doc = yaml.safe_load(text)
        for g in (doc or {}).get("groups", []) if isinstance(doc, dict) else []:
            for rule in g["rules"]:
                if rule.get("alert") == "FleetplanKVOverDCN":
                    m = re.search(r'fleetplan_region="([^"]+)".*fleetplan_tier="([^"]+)".*> ([0-9.e-]+)$', rule["expr"])
                    found[(m.group(1), m.group(2))] = float(m.group(3))
    assert found
    raised = [x for x in pl.dcn if x.worst_loss is not None and x.worst_loss > x.normal + 1e-6 and x.worst_loss > x.dcn_share_max]
    assert raised  # the case the regression is about exists in this instance
    for x in pl.dcn:
        if (x.region, x.tier) in found and x.worst_loss is not None:
            assert found[(x.region, x.tier)] >= x.worst_loss - 1e-9, (x.region, x.tier)


@needs_crds
def test_routing_objects_still_validate(k8s_bundle):
    objs = [o for rel, os_ in k8s_bundle.objects.items() if rel.endswith("routing.yaml") for o in os_]
    assert objs and [p for o in objs for p in problems(o)] == []


def test_controller_document_carries_the_loss_routing(small):
    jsonschema = pytest.importorskip("jsonschema")
    from pathlib import Path

    inst, plan, pl = small
    doc = build_export(inst, plan, pl).model_dump(mode="json")
    published = json.loads((Path(__file__).resolve().parents[2] / "docs" / "controller-schema.json").read_text())
    jsonschema.validate(doc, published)
    assert ControllerExport.model_validate_json(json.dumps(doc)).model_dump(mode="json") == doc
    assert doc["schema_version"] == 2
    for reg in doc["regions"]:
        r = reg["region"]
        for tr in reg["routing"]:
            want = [s for s in pl.scenarios if s.kind == "loss" and s.lost_region != r]
            assert [x["scenario"] for x in tr["on_loss"]] == [s.scenario for s in want]
            for x, sc in zip(tr["on_loss"], want):
                assert x["weights"] == [{"from_pod": w.from_pod, "to_pod": w.to_pod, "share": w.share} for w in sc.routing
                                        if (w.region, w.tier) == (r, tr["tier"])]
                assert sorted(j["slice_id"] for j in x["warm_joins"]) == sorted(w.slice_id for w in sc.warm if (w.region, w.tier) == (r, tr["tier"]))
                rows = [w for w in sc.routing if (w.region, w.tier) == (r, tr["tier"])]
                assert x["dcn_share"] == pytest.approx(sum(w.rps for w in rows if w.from_pod != w.to_pod) / sum(w.rps for w in rows), abs=1e-8)


@pytest.fixture(scope="module")
def v1(small):
    """The small plan sized without its pods and its placement (the placement model:
    schema_version 1)."""
    from fleetplan.placement import place

    inst, plan, _ = small
    plan1 = plan.model_copy(update={"pods": None, "dcn": None})
    pl1 = place(inst, plan1)
    assert pl1.schema_version == 1 and pl1.scenarios is None
    return inst, plan1, pl1


def test_a_version_1_placement_exports_as_before(v1):
    inst, plan, pl = v1
    data = _routing_data(build_bundle(inst, plan, pl, ExportOptions(formats=frozenset({"k8s"}))))
    assert data and all(set(d) == V1_KEYS for d in data.values())
    doc = build_export(inst, plan, pl)
    out = doc.model_dump(mode="json")
    assert out["schema_version"] == 1 and all(set(tr) == {"tier", "weights"} for reg in out["regions"] for tr in reg["routing"])
    assert ControllerExport.model_validate_json(json.dumps(out)) == doc
