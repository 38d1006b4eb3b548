"""Issue 17 newcomer trial, finding 1: `fleetplan whatif PLAN --lose-pods us-central:1` on
the BF16 GPU-scenario plan (6 x h100x4, chunked prefill at 512 tokens, least-work routing)
said "need own 7" for the normal hour the plan serves with 6 (and that simulates at 100%
goodput): the what-if priced replicas prefill-first, each an M/G/1 queue on its own, instead
of the plan's schedule over a least-work pool. It now takes the pool's schedule from the plan
and the pooled rate (perf.colocated.ReplicaRates.replicas_for), so the normal-hour need is the
plan's count."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from fleetplan.cli.app import app


def _replica_accounts(x):
    if isinstance(x, dict):
        if "need_normal" in x and x.get("role") == "replica":
            yield x
            return
        for v in x.values():
            yield from _replica_accounts(v)
    elif isinstance(x, list):
        for v in x:
            yield from _replica_accounts(v)


def test_whatif_prices_replicas_with_the_plans_schedule(plan_file):
    path = plan_file("llama70b-h100-bf16-p99")
    plan = json.loads(open(path).read())
    (pool,) = [p for p in plan["pools"] if p["role"] == "replica"]
    assert pool["schedule"].startswith("chunked-")
    r = CliRunner().invoke(app, ["whatif", str(path), "--lose-pods", "us-central:1", "--json"])
    assert r.exit_code in (0, 3), r.output
    accounts = list(_replica_accounts(json.loads(r.stdout)))
    assert accounts
    for acc in accounts:
        assert acc["need_normal"] == pool["slices"], acc
