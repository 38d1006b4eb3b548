"""Issue 39 item 11: a denormal chip figure (``peak_tflops``, ``hbm_tbps`` or
``ici_gbytes_per_s`` = 1e-320) passed the schema's ``> 0`` and crashed ``solve`` with
``OverflowError: cannot convert float infinity to integer`` in
``tables/derived.py`` (``_estimate_slices``), exit 1. Every positive chip, model,
network, workload and price figure now has a physical lower bound in the schema (1 GFLOP/s,
1 GB/s of HBM, 1 MB/s of ICI ...): a value below it is exit 2 naming the field and its
unit; the candidate tables refuse a service time that is not finite."""

from __future__ import annotations

import math

import numpy as np

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from fleetplan.cli.app import app
from fleetplan.errors import InputError
from fleetplan.instance.io import parse_instance
from tests.conftest import tiny_data

runner = CliRunner()

#: (dotted path, the physical floor, words of the field's unit in the message)
FLOORS = [
    ("chips.acc.peak_tflops", 1e-3, "TFLOP/s"),
    ("chips.acc.hbm_tbps", 1e-3, "TB/s"),
    ("chips.acc.ici_gbytes_per_s", 1e-3, "GB/s"),
    ("chips.acc.hbm_gb", 1e-3, "GB"),
    ("chips.acc.price_per_chip_hour_usd", 1e-6, "USD"),
    ("chips.acc.pod_dcn_egress_gbytes_per_s", 1e-3, "GB/s"),
    ("model.total_params_b", 1e-6, "billions"),
    ("model.active_params_b", 1e-6, "billions"),
    ("network.kv_ici_gbytes_per_s_per_slice", 1e-3, "GB/s"),
    ("network.dcn_gbytes_per_s_per_slice", 1e-3, "GB/s"),
    ("workload.output_tokens", 1.0, "tokens"),
    ("workload.arrival_scv", 1e-4, "dimensionless"),
    ("workload.classes.std.slos.0.limit_ms", 1e-3, "milliseconds"),
    ("regions.a.price_per_chip_hour_usd.acc", 1e-6, "USD"),
    ("failover.prefix_cache_gb_per_prefill_chip", 1e-3, "GB"),
]


def _with(path: str, value: float) -> dict:
    data = tiny_data(failover={"n_minus_1": True})
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node.setdefault(k, {})
    node[keys[-1]] = value
    return data


@pytest.mark.parametrize("field", ["peak_tflops", "hbm_tbps", "ici_gbytes_per_s"])
def test_a_denormal_chip_figure_is_exit_2_naming_the_field_and_unit(tmp_path, field):
    """The issue's reproduction: exit 1 with an OverflowError before."""
    f = tmp_path / "inst.yaml"
    f.write_text(yaml.safe_dump(_with(f"chips.acc.{field}", 1e-320)), encoding="utf-8")
    r = runner.invoke(app, ["solve", str(f), "--time-limit", "60"])
    text = " ".join(r.stderr.split())
    assert r.exit_code == 2, r.output
    assert f"chips.acc.{field}" in text and "greater than or equal to 0.001" in text, text
    assert {"peak_tflops": "TFLOP/s", "hbm_tbps": "TB/s", "ici_gbytes_per_s": "GB/s"}[field] in text, text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FLOORS), st.floats(min_value=0.0, max_value=1.0, exclude_min=True, exclude_max=True, allow_subnormal=True))
def test_every_figure_below_its_physical_floor_is_refused_by_name(case, frac):
    """Any positive value below the floor -- denormals (5e-324 ...) included -- is refused,
    naming the dotted field and its unit."""
    path, floor, unit = case
    value = floor * frac
    if value <= 0.0 or value >= floor:  # the product underflowed to 0 or rounded up to the floor
        return
    with pytest.raises(InputError) as e:
        parse_instance(_with(path, value), "fuzz")
    text = e.value.render()
    assert path in text and unit in text, text


@pytest.mark.parametrize("path,floor,unit", FLOORS)
def test_the_floor_itself_passes_the_bound(path, floor, unit):
    """The floor is a value the field takes (a 1 MB HBM chip then fails the weights' fit,
    a cross-field check, not the bound)."""
    data = _with(path, floor)
    if path.startswith("model."):
        data["model"].update(total_params_b=floor, active_params_b=floor)
    try:
        parse_instance(data, "floor")
    except InputError as e:
        assert not [p for p in e.problems if p.path == path and "greater than" in p.message], e.render()


def test_the_lowest_chip_figures_give_finite_candidate_tables():
    """At the floors (a 1 GFLOP/s, 1 GB/s, 1 MB/s ICI chip) the candidate tables hold
    finite numbers: no infinity reaches an integer conversion (the instance cannot serve
    its load: no candidate fits the SLOs, which is the solver's to report, not a crash)."""
    from fleetplan.tables.derived import build_model_data

    data = tiny_data()
    data["chips"]["acc"].update(peak_tflops=1e-3, hbm_tbps=1e-3, ici_gbytes_per_s=1e-3)
    d = build_model_data(parse_instance(data, "slowest"))
    assert d.prefill and d.decode
    for cand in d.prefill.values():
        assert all(math.isfinite(v) for v in cand.service_ms.values()) and all(math.isfinite(v) for v in cand.capacity_erlangs)
    for cand in d.decode.values():
        assert math.isfinite(cand.tokens_per_s)


def test_a_service_time_that_is_not_finite_is_an_input_error():
    """The guard where the tables divide by the chip's figures: an infinite service time
    (the schema's floors keep it from happening) names the slice and the figures."""
    from fleetplan.tables.derived import build_model_data, _estimate_slices

    d = build_model_data(parse_instance(tiny_data(), "tiny"))
    t = next(iter(d.tiers))
    c = next(iter(d.slices))
    with pytest.raises(InputError) as e:
        _estimate_slices(d, t, c, 10.0, math.inf)
    text = e.value.render()
    assert "peak_tflops" in text and "hbm_tbps" in text and c in text, text


@settings(max_examples=80, deadline=None)
@given(st.floats(min_value=0.0, max_value=1e3), st.floats(min_value=5e-324, max_value=1e-3, allow_subnormal=True),
       st.floats(min_value=0.0, max_value=100.0))
def test_a_path_component_of_a_denormal_spread_is_a_distribution(p50, spread, other_spread):
    """``priors.path_latency`` p99_ms a denormal above p50_ms (0 and 1e-320: an IndexError in
    the path-sum convolution, exit 1, found by the fuzzing of this item): the sum of the
    components is a distribution, its mass 1 and its support finite, beside another
    component or alone."""
    from fleetplan.perf.queueing import path_sum_distribution

    for comps in ([(p50, p50 + spread)], [(p50, p50 + spread), (20.0, 20.0 + other_spread)]):
        x, pmf = path_sum_distribution(comps)
        assert x.size == pmf.size >= 1 and np.all(np.isfinite(x)) and np.all(pmf >= 0), comps
        assert abs(pmf.sum() - 1.0) < 1e-9, comps
        assert x.min() >= 0.0 and x.max() <= 20.0 + other_spread * 10 + p50 + 1.0, comps


def test_a_denormal_path_latency_spread_solves(tmp_path):
    data = tiny_data()
    data["priors"]["path_latency"] = [{"name": "gateway", "p50_ms": 0.0, "p99_ms": 1e-320}]
    f = tmp_path / "inst.yaml"
    f.write_text(yaml.safe_dump(data), encoding="utf-8")
    r = runner.invoke(app, ["solve", str(f), "--time-limit", "60"])
    assert r.exit_code == 0, r.output
