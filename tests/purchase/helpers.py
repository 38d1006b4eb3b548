"""Tiny purchase problems: one region, one chip of 2-chip pods, colocated or disaggregated."""

from __future__ import annotations

import copy

import yaml

from tests.conftest import tiny_data

FLAT = [1.0] * 24


def base_data(mode: str = "disaggregated") -> dict:
    """The tiny instance with one region 'a' (20 requests/s) and pods of 2 chips, sized without
    its pods as a purchase plan sizes each quarter (so the tests' snapshot solves are like for like)."""
    d = tiny_data(regions={"a": {"peak_rps": 20, "hourly_load": FLAT, "pods": {"acc": {"installed": 1, "available_new": 0}}, "failover_to": []}},
                  serving={"mode": mode}, chips={"acc": {"chips_per_pod": 2}}, placement={"size_with_pods": False})
    del d["regions"]["b"]
    return d


def write_base(tmp_path, mode: str = "disaggregated") -> str:
    p = tmp_path / f"base-{mode}.yaml"
    p.write_text(yaml.safe_dump(base_data(mode)))
    return str(p)


def two_paths(base: str, **over) -> dict:
    """Three quarters, 2 installed pods, capital pods at 10,000 USD now and 30,000 USD in
    2027Q2, lead time 1; demand flat (p 0.6) or +50% a quarter (p 0.4)."""
    doc = {
        "base": base,
        "quarters": {"labels": ["2027Q1", "2027Q2", "2027Q3"], "discount_rate_per_year": 0.0},
        "installed": [{"region": "a", "chip": "acc", "pods": 2}],
        "supply": [{"chip": "acc", "price": {"kind": "capital", "usd_per_pod": 10000}, "lead_time_quarters": 1,
                    "max_pods_delivered_per_quarter": 4, "by_quarter": {"2027Q2": {"price": {"kind": "capital", "usd_per_pod": 30000}}}}],
        "demand": {"kind": "growth_paths", "paths": [{"name": "low", "probability": 0.6, "growth_per_quarter": 0.0},
                                                     {"name": "high", "probability": 0.4, "growth_per_quarter": 0.5}]},
    }
    for k, v in over.items():
        doc[k] = copy.deepcopy(v)
    return doc
