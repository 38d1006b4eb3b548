"""The exports configure the router the plan assumed (issue 40): the endpoint picker's
scorer per ``serving.router``, every object still valid against the published schemas,
the controller document's ``router``, and a note where the picker cannot express the
router (round robin: the Gateway API inference extension registers max-score-picker,
random-picker and weighted-random-picker, no round robin)."""

from __future__ import annotations

import pytest
import yaml

from fleetplan.instance.io import parse_instance
from fleetplan.export.k8s import ExportOptions, build_bundle
from fleetplan.perf.queueing import ROUTERS
from fleetplan.export.controller import build_export
from tests.k8s.conftest import small_data
from tests.k8s.validate import needs_crds, problems

#: what the prefill (disaggregated) profile must pick by under each router: its picker and its highest-weighted scorer
PICKS = {"least-work": ("max-score-picker", "queue-scorer"), "round-robin": ("max-score-picker", "queue-scorer"),
         "random": ("random-picker", None), "prefix-aware": ("max-score-picker", "prefix-cache-scorer")}


@pytest.fixture(scope="module")
def exported():
    """Per router: (instance, plan, placement, bundle) of the small disaggregated instance
    (at the tiny instance's 1 s TTFT: the small one's 60 ms leaves a random split's slices
    almost no queue and the inventory falls short) sized for that router and placed."""
    from fleetplan.placement import place
    from fleetplan.sizing import solve

    out = {}
    for r in ROUTERS:
        data = small_data(workload={})
        data["serving"] = {**data["serving"], "router": r}
        inst = parse_instance(data, f"small-{r}")
        plan = solve(inst).plan
        assert plan.status == "verified" and (plan.router or "least-work") == r  # least-work, the default, is not written
        pl = place(inst, plan)
        out[r] = (inst, plan, pl, build_bundle(inst, plan, pl, ExportOptions(formats=frozenset({"k8s"}))))
    return out


def _configmaps(bundle):
    return [o for objs in bundle.objects.values() for o in objs if o["kind"] == "ConfigMap"]


@pytest.mark.parametrize("router", ROUTERS)
def test_the_picker_is_configured_for_the_plans_router(exported, router):
    """Each region-tier's EndpointPickerConfig: the prefill profile picks by the router's
    scorer (least-work and its round-robin stand-in: queue-scorer first; prefix-aware:
    prefix-cache-scorer first, llm-d's default weights; random: random-picker); the decode
    profile keeps the load scorers and the prefix-cache-scorer pd-profile-handler needs in
    both profiles; every plugin a profile references is declared; the routing data names
    the plan's router and the picker's form of it."""
    _, plan, _, bundle = exported[router]
    cms = _configmaps(bundle)
    assert cms
    for cm in cms:
        cfg = yaml.safe_load(cm["data"]["epp-config.yaml"])
        data = yaml.safe_load(cm["data"]["fleetplan-routing.yaml"])
        assert data["router"] == router and data["epp_picker"] == ("least-work" if router == "round-robin" else router)
        profiles = {p["name"]: p["plugins"] for p in cfg["schedulingProfiles"]}
        declared = {p["type"] for p in cfg["plugins"]}
        assert {x["pluginRef"] for ps in profiles.values() for x in ps} <= declared
        picker, top = PICKS[router]
        pre = profiles["prefill"]
        assert pre[-1] == {"pluginRef": picker}
        scored = [x for x in pre if "weight" in x]
        if top is not None:
            assert max(scored, key=lambda x: x["weight"])["pluginRef"] == top
        for prof in profiles.values():
            assert any(x["pluginRef"] == "prefix-cache-scorer" for x in prof)  # pd-profile-handler's requirement
        assert profiles["decode"][-1] == {"pluginRef": "max-score-picker"}


@needs_crds
@pytest.mark.parametrize("router", ROUTERS)
def test_every_object_validates_under_every_router(exported, router):
    bundle = exported[router][3]
    assert [p for objs in bundle.objects.values() for o in objs for p in problems(o)] == []


def test_the_export_says_where_the_picker_cannot_express_the_router(exported):
    """Round robin has no picker in the endpoint picker: the export says so, what it
    configured instead and why the plan still holds; the other routers need no note."""
    for r in ROUTERS:
        notes = " ".join(exported[r][3].notes)
        if r == "round-robin":
            assert "cannot express" in notes and "random-picker" in notes and "IPVS" in notes and "queue no more" in notes
        else:
            assert "cannot express" not in notes


@pytest.mark.parametrize("router", ROUTERS)
def test_the_controller_document_carries_the_router(exported, router):
    inst, plan, pl, _ = exported[router]
    doc = build_export(inst, plan, pl)
    assert doc.router == router and doc.model_dump(mode="json")["router"] == router


def test_a_colocated_export_picks_replicas_by_the_router():
    """Colocated replicas: one profile after decode-filter -- least-work's load scorers, or
    random-picker alone for a random split."""
    from fleetplan.export.k8s.routing import epp_config

    lw = epp_config(False, "least-work")["schedulingProfiles"][0]["plugins"]
    assert [x["pluginRef"] for x in lw] == ["decode-filter", "queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer", "max-score-picker"]
    assert lw[1]["weight"] == 2
    rnd = epp_config(False, "random")
    assert [x["pluginRef"] for x in rnd["schedulingProfiles"][0]["plugins"]] == ["decode-filter", "random-picker"]
    assert [p["type"] for p in rnd["plugins"]] == ["decode-filter", "random-picker", "single-profile-handler"]
    assert epp_config(False, "round-robin") == epp_config(False, "least-work")
