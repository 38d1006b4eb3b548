"""Issue 16 (found on the generated 5-region plan, `whatif p.json --lose r00`): a tier
whose every prompt is at or above the admission clamp (clamp_share 1) made
``split_sources`` divide the below-clamp diverted rate by 1 - clamp_share = 0
(ZeroDivisionError in `prepare`, which probes each source with a unit rate). No prompt is
below the clamp there, so that source carries nothing and is left out; the diverted
prompts are all in 'div_long'."""

from __future__ import annotations

from fleetplan.perf.pools import PrefillSource, split_sources


def test_no_below_clamp_source_when_every_prompt_is_clamped():
    assert split_sources({"div": 1.0}, 0.5, 0.1, 4000, 1.0) == []
    # the shares summed in float land a hair above or below 1: never a negative or huge weight
    for kappa in (1.0 + 2e-16, 1.0 - 2e-16):
        got = split_sources({"own": 2.0, "div": 1e-6, "div_long": 3.0}, 0.5, 0.1, 4000, kappa)
        assert got == [PrefillSource(2.0, 0.5), PrefillSource(3.0 / kappa, 0.1, None, 4000)]


def test_a_partial_clamp_still_scales_each_part_back_to_its_source_rate():
    # 1 req/s below the clamp is 75% of the diverted prompts: 4/3 req/s before the filter;
    # 0.5 req/s at or above it is 25%: 2 req/s before the filter (hand-worked)
    got = split_sources({"div": 1.0, "div_long": 0.5}, 0.5, 0.1, 4000, 0.25)
    assert got == [PrefillSource(1.0 / 0.75, 0.1, 4000), PrefillSource(2.0, 0.1, None, 4000)]
