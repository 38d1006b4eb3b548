"""The evaluator under several physics sources (issue 40): every question of
:class:`fleetplan.results.evaluate.Context`, answered under each source the plan holds under
(:func:`fleetplan.instance.physics.held_sources`), the least favourable answer kept and named.

``Context(inst)`` returns a :class:`RobustContext` when ``inst`` holds its plan under more
than one source, so every reader of a plan -- the verifier, the plan's records and their
check, the what-if's accounting, the report -- evaluates it under all of them with no code
of its own. The rule, per question:

* a pool's latencies (:meth:`prefill`, :meth:`replica`) are one source's evaluation whole --
  the source under which the pool is furthest from its SLOs (the largest ratio of a
  percentile to its limit; an unstable source first) -- and the pool meets its SLOs only
  when it meets them under every source; the evaluation carries the source's name;
* a decode operating point (:meth:`decode_op`) is the source's with the least tokens/s,
  legal only when legal under every source (each violation names its source); the knee is
  the least of the sources' knees;
* the searches built on those predicates (the largest share of the load the SLOs allow, the
  least shortfall, the threshold checks) inherit them, so they hold under every source; the
  load growth a prefill pool absorbs is the least over the sources. A search asks only
  whether the SLOs hold (:meth:`RobustContext.prefill_meets_slo`,
  :meth:`RobustContext.replica_meets_slo`): the source that missed last is asked first and
  the first that misses ends the question (issue 41: the batch infill's 40-step search of a
  robust colocated plan rated every probe under every source).

Never imports :mod:`fleetplan.models` (the verifier's rule).
"""

from __future__ import annotations

import math
from dataclasses import replace

from fleetplan.instance.physics import held_instances
from fleetplan.instance.schema import Instance
from fleetplan.perf.pools import DecodeOp
from fleetplan.results.evaluate import Context, PrefillEval, ReplicaEval

__all__ = ["RobustContext", "tagged"]


def tagged(name: str, text: str) -> str:
    """``text`` (a finding) prefixed with the physics source it holds under."""
    return f"[physics source '{name}'] {text}"


class RobustContext(Context):
    """:class:`Context` under every held physics source (see the module docstring).
    ``parts`` are (source name, that source's :class:`Context`), in the instance's order."""

    def __init__(self, inst: Instance):
        super().__init__(inst)
        self.parts: list[tuple[str, Context]] = [(name, Context(si)) for name, si in held_instances(inst)]
        self._missed: dict[tuple, int] = {}  # per pool, the source that missed its SLOs last (:meth:`_all_meet`)

    # ------------------------------------------------------------ prefill
    def _prefill_worst(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                       dcn_share: float = 0.0) -> tuple[int, list[PrefillEval]]:
        key = ("robust-prefill", t, slice_label, slices, own_rps, div_rps, failover, dcn_share)
        if key not in self._memo:
            evs = [c.prefill(t, slice_label, slices, own_rps, div_rps, failover, dcn_share) for _, c in self.parts]
            self._memo[key] = (max(range(len(evs)), key=lambda i: (_prefill_ratio(evs[i]), -i)), evs)
        return self._memo[key]

    def prefill(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                dcn_share: float = 0.0) -> PrefillEval:
        """The prefill pool under the source furthest from its TTFT SLOs, meeting them only
        when every source does (``source`` names it)."""
        i, evs = self._prefill_worst(t, slice_label, slices, own_rps, div_rps, failover, dcn_share)
        return replace(evs[i], meets_slo=all(e.meets_slo for e in evs), source=self.parts[i][0])

    def prefill_meets_slo(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                          dcn_share: float = 0.0) -> bool:
        """Whether the pool meets its TTFT SLOs under every source (:meth:`prefill`'s
        ``meets_slo``), stopping at the first source that misses (:meth:`_all_meet`) -- a
        search that asks only this (the load growth, the largest share allowed) does not rate
        the pool under the sources after it."""
        key = ("robust-prefill", t, slice_label, slices, own_rps, div_rps, failover, dcn_share)
        if key in self._memo:
            _, evs = self._memo[key]
            return all(e.meets_slo for e in evs)
        return self._all_meet(("prefill", t, slice_label, failover),
                              lambda c: c.prefill(t, slice_label, slices, own_rps, div_rps, failover, dcn_share).meets_slo)

    def ttft_estimate(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                      percentiles: list[float] | None = None, dcn_share: float = 0.0) -> dict[float, float]:
        """The TTFT estimate under the source :meth:`prefill` names for the same load."""
        i, _ = self._prefill_worst(t, slice_label, slices, own_rps, div_rps, failover, dcn_share)
        return self.parts[i][1].ttft_estimate(t, slice_label, slices, own_rps, div_rps, failover, percentiles, dcn_share)

    def prefill_growth(self, t: str, slice_label: str, slices: int, own_rps: float, div_rps: float, failover: bool,
                       g_max: float | None = None, dcn_share: float = 0.0) -> float:
        """The least load growth any source's pool absorbs."""
        return min(c.prefill_growth(t, slice_label, slices, own_rps, div_rps, failover, g_max, dcn_share) for _, c in self.parts)

    # ------------------------------------------------------------ decode
    def decode_op(self, t: str, slice_label: str, batch: int, draft_tokens: int) -> DecodeOp:
        """The operating point under the source with the least tokens/s, legal only when legal
        under every source (each violation names its source)."""
        key = ("robust", t, slice_label, batch, draft_tokens)
        if key not in self._ops:
            ops = [c.decode_op(t, slice_label, batch, draft_tokens) for _, c in self.parts]
            i = min(range(len(ops)), key=lambda j: (ops[j].tokens_per_s, j))
            names = [n for n, _ in self.parts]
            hand = next((tagged(n, o.handoff_violation) for n, o in zip(names, ops) if o.handoff_violation), "")
            viol = tuple(tagged(n, v) for n, o in zip(names, ops) for v in o.violations)
            self._ops[key] = replace(ops[i], legal=all(o.legal for o in ops), kv_fit=all(o.kv_fit for o in ops),
                                     handoff_fit=all(o.handoff_fit for o in ops), violations=viol, handoff_violation=hand,
                                     source=names[i])
        return self._ops[key]

    def decode_knee(self, t: str, slice_label: str, draft_tokens: int) -> int:
        """The least SLO knee of the sources."""
        return min(c.decode_knee(t, slice_label, draft_tokens) for _, c in self.parts)

    def decode_at_load(self, t: str, slice_label: str, batch: int, draft_tokens: int, rps_per_slice: float):
        """The slice at that load under the source :meth:`decode_op` names."""
        name = self.decode_op(t, slice_label, batch, draft_tokens).source
        return dict(self.parts)[name].decode_at_load(t, slice_label, batch, draft_tokens, rps_per_slice)

    # ------------------------------------------------------------ colocated
    def replica(self, t: str, slice_label: str, replicas: int, own_rps: float, div_rps: float, failover: bool,
                schedule: str | None = None, router: str | None = None) -> ReplicaEval:
        """The replicas under the source furthest from their SLOs (an unstable one first),
        stable and meeting them only when every source is."""
        key = ("robust-replica", t, slice_label, replicas, own_rps, div_rps, failover, schedule, router)
        if key not in self._memo:
            evs = [c.replica(t, slice_label, replicas, own_rps, div_rps, failover, schedule, router) for _, c in self.parts]
            i = max(range(len(evs)), key=lambda j: (self._replica_ratio(t, evs[j]), -j))
            self._memo[key] = replace(evs[i], meets_slo=all(e.meets_slo for e in evs), stable=all(e.stable for e in evs),
                                      source=self.parts[i][0])
        return self._memo[key]

    def replica_meets_slo(self, t: str, slice_label: str, replicas: int, own_rps: float, div_rps: float, failover: bool,
                          schedule: str | None = None, router: str | None = None) -> bool:
        """Whether the replicas are stable and meet their SLOs under every source
        (:meth:`replica`'s ``meets_slo``), stopping at the first source that misses."""
        key = ("robust-replica", t, slice_label, replicas, own_rps, div_rps, failover, schedule, router)
        if key in self._memo:
            return self._memo[key].meets_slo
        return self._all_meet(("replica", t, slice_label, failover, schedule, router),
                              lambda c: c.replica(t, slice_label, replicas, own_rps, div_rps, failover, schedule, router).meets_slo)

    def _all_meet(self, pool: tuple, meets) -> bool:
        """Whether ``meets(context)`` holds under every source: the source that missed last for
        this ``pool`` is asked first (a search's failing probes then cost one source's
        evaluation), the first that misses ends it -- the same answer in any order."""
        first = self._missed.get(pool, 0)
        for i in [first] + [j for j in range(len(self.parts)) if j != first]:
            if not meets(self.parts[i][1]):
                self._missed[pool] = i
                return False
        return True

    def _replica_ratio(self, t: str, ev: ReplicaEval) -> float:
        """How far the replicas are from their SLOs: the largest percentile / limit (inf when unstable)."""
        if not ev.stable:
            return math.inf
        got = {"ttft": ev.ttft_ms, "tpot": ev.tpot_ms, "itl": ev.itl_ms}
        return max([got[s.metric].get(s.percentile, math.inf) / s.limit_ms for s in self.slos[t]] or [0.0])


def _prefill_ratio(ev: PrefillEval) -> float:
    """How far a prefill pool is from its TTFT SLOs: the largest percentile / limit (its p99
    over 1 s without one)."""
    if ev.slo_limit_ms:
        return max(ev.ttft_ms[p] / lim for p, lim in ev.slo_limit_ms.items())
    return ev.ttft_ms.get(99.0, 0.0) / 1e3
