"""A region loss at an hour the plan does not list (``simulate --scenario lose:X@HH``) is
built by the what-if (:func:`fleetplan.whatif.loss_scenario`) in the form of the plan's own
scenarios -- for a plan sized with its pods, with the DCN share of its pods on each
prefill record and that share's transfer in its TTFT, as the plan's listed scenarios."""

from __future__ import annotations


def test_a_loss_hour_the_plan_does_not_list_predicts_its_dcn_share(solved):
    """A region loss at an hour the plan does not list is built by the what-if; its prefill
    records carry the DCN share of the plan's pods, as the plan's own scenarios do."""
    from fleetplan.sim.setup import pick_scenario

    inst, plan = solved("gemini-ironwood")
    listed = {s.name for s in plan.scenarios}
    name = next(f"lose:us-west@{h:02d}" for h in range(24) if f"lose:us-west@{h:02d}" not in listed)
    sc, _ = pick_scenario(inst, plan, name, "us-east")
    assert all(p.dcn_share is not None for p in sc.pools if p.role == "prefill" and p.slices > 0)
