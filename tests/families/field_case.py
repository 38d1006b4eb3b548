"""The field case of issue 18's mixed-pool item as a small instance, shared by the snapshot
and the purchase tests: one region, one tier, colocated replicas on two chip types.

``older`` stands for the A10 (a 24 GB chip, 0.6 TB/s, 125 TFLOPS; 1 USD per chip-hour) and
``newer`` for the L20 of the field case: twice the bandwidth, FLOPs and memory at 1.8 USD
per chip-hour. The worth of a replica is what the physics gives (its SLO-limited rate,
``ReplicaCandidate.rps_per_replica``), not a number set here; the tests check that the
newer chip is worth between 2 and 3 of the older (the field case's 'worth 2'). The
gateway spreads requests at random (``replica_router: random``): each replica is its own
M/G/1 queue, so a replica's rate holds for any pool size and any mixture of shapes.
Demand is 9 units (9 x the older replica's rate, less a hair for rounding); the field
case's inventory is 1 newer and 8 older one-chip pods.
"""

from __future__ import annotations

import itertools

from fleetplan.tables.derived import NORMAL, build_model_data
from fleetplan.instance.io import parse_instance
from tests.conftest import tiny_data

FLAT = [1.0] * 24
PRICE = {"older": 1.0, "newer": 1.8}  # USD per chip-hour: the field case's 1 and 1.8 $/h per replica


def _chip(hbm_gb: float, tbps: float, tflops: float, price: float) -> dict:
    return {"hbm_gb": hbm_gb, "hbm_tbps": tbps, "peak_tflops": tflops, "ici_gbytes_per_s": 64, "chips_per_vm": 1, "chips_per_pod": 1,
            "slice_shapes": [1], "price_per_chip_hour_usd": price}


def field_data(peak_rps: float, newer: int = 1, older: int = 8, mixed: bool = True) -> dict:
    d = tiny_data(serving={"mode": "colocated", "replica_router": "random", "mixed_shapes": mixed, "colocated_schedules": ["prefill-first"]})
    d["chips"] = {"older": _chip(24, 0.6, 125, PRICE["older"]), "newer": _chip(48, 1.2, 250, PRICE["newer"])}
    d["workload"]["input_mix"] = [{"share": 1.0, "tokens": 500}]
    d["workload"]["classes"]["std"]["slos"] = [{"metric": "ttft", "percentile": 99, "limit_ms": 2000},
                                               {"metric": "tpot", "percentile": 99, "limit_ms": 100}]
    d["regions"] = {"a": {"peak_rps": peak_rps, "hourly_load": FLAT, "failover_to": [],
                          "pods": {"older": {"installed": 0, "available_new": older}, "newer": {"installed": 0, "available_new": newer}}}}
    return d


def field_instance(peak_rps: float, **kw):
    return parse_instance(field_data(peak_rps, **kw), "field-case")


def replica_rates() -> dict[str, float]:
    """Requests/s per replica of each chip in normal operation (the candidate tables)."""
    d = build_model_data(field_instance(1.0, newer=20, older=20))
    return {k: d.replica_cand("all", f"{k}x1", "prefill-first", (NORMAL,)).rps_per_replica for k in ("older", "newer")}


def brute_force(rates: dict[str, float], demand_rps: float, most: dict[str, int], mixed: bool) -> tuple[float, dict[str, int]] | None:
    """Cheapest (USD/h, replicas per chip) that carries ``demand_rps`` within ``most``
    replicas per chip, by enumeration; one chip only when not ``mixed``. None: no fleet."""
    best = None
    for n in itertools.product(*(range(most[k] + 1) for k in sorted(most))):
        cnt = dict(zip(sorted(most), n))
        if not mixed and sum(1 for v in cnt.values() if v) > 1:
            continue
        if sum(rates[k] * v for k, v in cnt.items()) < demand_rps:
            continue
        cost = sum(PRICE[k] * v for k, v in cnt.items())
        if best is None or cost < best[0] - 1e-9:
            best = (cost, cnt)
    return best
