"""The greedy online placer: holds a placement and applies events in milliseconds.

Events: add a slice (region, tier, role, shape), remove a slice, pod down (its slices
re-placed in the region's other pods), pod up. A slice goes to the best pod by KV
balance, then fit: a prefill slice where its tier's decode capacity most exceeds the
prefill load already there, a decode slice where the prefill load most exceeds the
decode capacity, then the pod left fullest (already-used pods first: free chips stay in
whole pods). Inside a pod it takes the first aligned block of chips (whole adjacent
VMs). After each event the prefill -> decode routing weights of the region-tiers it
touched are recomputed with OR-Tools' min-cost flow (in-pod KV costs 0, KV over the DCN
costs 1, unserved load costs more than any DCN route). An event that cannot be placed
is refused with a reason and leaves the placement as it was; the placer never
over-fills a pod or loses a slice (checked by :meth:`OnlinePlacer.check`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fleetplan.placement.document import Placement, PlacedSlice, PodSlots, RouteWeight, vm_range

__all__ = ["OnlinePlacer", "EventResult"]

SCALE = 1000  # min-cost flow works in integers: milli-requests/s


@dataclass
class EventResult:
    """What an event did: ``ok`` False means refused (``reason`` says why) and nothing changed."""

    ok: bool
    reason: str = ""
    slice_id: str | None = None
    moved: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # pod_down(force=True): slices that fit nowhere


@dataclass
class _Pod:
    id: str
    region: str
    chip: str
    chips: int
    vm: int
    up: bool
    used: int = 0  # bitmask of occupied chips
    chips_used: int = 0
    slices: set[str] = field(default_factory=set)


@dataclass
class _Slice:
    id: str
    region: str
    tier: str | None
    role: str
    shape: str
    chips: int
    pod: str
    first: int


def _align(n: int, pod_chips: int, vm: int) -> int:
    return n if (n & (n - 1)) == 0 and pod_chips % n == 0 else max(1, min(vm, n))


class OnlinePlacer:
    """Greedy placer over a :class:`Placement` (see the module docstring)."""

    def __init__(self, placement: Placement):
        self.base = placement
        self.pods: dict[str, _Pod] = {}
        self.by_region: dict[str, list[_Pod]] = {}
        for p in placement.pods:
            pod = _Pod(p.id, p.region, p.chip, p.chips, p.chips_per_vm, p.up)
            self.pods[p.id] = pod
            self.by_region.setdefault(p.region, []).append(pod)
        self.slices: dict[str, _Slice] = {}
        self.demand = {(d.region, d.tier): d for d in placement.demand}
        # per (region, tier, pod): prefill slices and decode capacity (req/s)
        self.n_prefill: dict[tuple[str, str], int] = {}
        self.pre_in: dict[tuple[str, str, str], int] = {}
        self.dec_in: dict[tuple[str, str, str], float] = {}
        self._next: dict[tuple, int] = {}
        for s in placement.slices:
            self._put(_Slice(s.id, s.region, s.tier, s.role, s.slice, s.chips, s.pod, s.first_chip))
            key = s.id.rsplit("/", 1)[0]
            self._next[key] = max(self._next.get(key, 0), int(s.id.rsplit("/", 1)[1]) + 1)
        self.prefill_target: dict[tuple[str, str], int] = {}  # expected prefill slices (placing a plan from scratch)
        self.weights: dict[tuple[str, str], list[tuple[str, str, float, float]]] = {}
        for (r, t) in self.demand:
            self._route(r, t)

    # ------------------------------------------------------------------ bookkeeping
    def _dec_rate(self, r: str, t: str | None, shape: str) -> float:
        d = self.demand.get((r, t))
        if d is None or not d.decode_rps_per_slice:
            return 0.0
        return d.decode_rps_per_slice.get(shape, min(d.decode_rps_per_slice.values()))

    def _put(self, s: _Slice) -> None:
        pod = self.pods[s.pod]
        pod.used |= ((1 << s.chips) - 1) << s.first
        pod.chips_used += s.chips
        pod.slices.add(s.id)
        self.slices[s.id] = s
        if s.role == "prefill":
            self.n_prefill[(s.region, s.tier)] = self.n_prefill.get((s.region, s.tier), 0) + 1
            k = (s.region, s.tier, s.pod)
            self.pre_in[k] = self.pre_in.get(k, 0) + 1
        elif s.role == "decode":
            k = (s.region, s.tier, s.pod)
            self.dec_in[k] = self.dec_in.get(k, 0.0) + self._dec_rate(s.region, s.tier, s.shape)

    def _take(self, sid: str) -> _Slice:
        s = self.slices.pop(sid)
        pod = self.pods[s.pod]
        pod.used &= ~(((1 << s.chips) - 1) << s.first)
        pod.chips_used -= s.chips
        pod.slices.discard(sid)
        if s.role == "prefill":
            self.n_prefill[(s.region, s.tier)] -= 1
            self.pre_in[(s.region, s.tier, s.pod)] -= 1
        elif s.role == "decode":
            self.dec_in[(s.region, s.tier, s.pod)] -= self._dec_rate(s.region, s.tier, s.shape)
        return s

    def _block(self, pod: _Pod, n: int) -> int | None:
        a = _align(n, pod.chips, pod.vm)
        mask = (1 << n) - 1
        used = pod.used
        for off in range(0, pod.chips - n + 1, a):
            if not (used >> off) & mask:
                return off
        return None

    def _best(self, region: str, tier: str | None, role: str, shape: str, exclude: str | None = None) -> tuple[_Pod, int] | None:
        chip, _, n_txt = shape.rpartition("x")
        n = int(n_txt)
        d = self.demand.get((region, tier))
        n_pre = max(self.n_prefill.get((region, tier), 0), self.prefill_target.get((region, tier), 0), 1)
        per_pre = d.rps / n_pre if d is not None else 0.0
        best = None
        for pod in self.by_region.get(region, []):
            if not pod.up or pod.chip != chip or pod.id == exclude or pod.chips - pod.chips_used < n:
                continue
            off = self._block(pod, n)
            if off is None:
                continue
            key = (region, tier, pod.id)
            if role == "prefill":
                kv = self.dec_in.get(key, 0.0) - per_pre * (self.pre_in.get(key, 0) + 1)
            elif role == "decode":
                kv = per_pre * self.pre_in.get(key, 0) - self.dec_in.get(key, 0.0)
            else:
                kv = 0.0
            free_after = pod.chips - pod.chips_used - n
            score = (-max(min(kv, 1e18), -1e18) if role in ("prefill", "decode") else 0.0, pod.chips_used == 0, free_after, pod.id)
            if best is None or score < best[0]:
                best = (score, pod, off)
        if best is None:
            return None
        return best[1], self._snug(best[1], n, best[2])

    def _snug(self, pod: _Pod, n: int, first: int) -> int:
        """Among the pod's free aligned blocks of n chips, the one inside the most occupied
        aligned block of 4n chips (buddy-style: keeps large aligned blocks whole for the
        large shapes that come later)."""
        a = _align(n, pod.chips, pod.vm)
        mask = (1 << n) - 1
        big = min(4 * n, pod.chips)
        bmask = (1 << big) - 1
        best, best_fill = first, -1
        for off in range(0, pod.chips - n + 1, a):
            if (pod.used >> off) & mask:
                continue
            base = (off // big) * big
            fill = bin((pod.used >> base) & bmask).count("1")
            if fill > best_fill:
                best, best_fill = off, fill
        return best

    # ------------------------------------------------------------------ routing
    def _route(self, r: str, t: str | None) -> None:
        """Min-cost flow of the region-tier's prefill load to its decode capacity."""
        if t is None or (r, t) not in self.demand:
            return
        d = self.demand[(r, t)]
        n_pre = self.n_prefill.get((r, t), 0)
        pods = [p.id for p in self.by_region.get(r, [])]
        load = {j: d.rps / n_pre * self.pre_in.get((r, t, j), 0) if n_pre else 0.0 for j in pods}
        cap = {j: self.dec_in.get((r, t, j), 0.0) for j in pods}
        src = [j for j in pods if load[j] > 0]
        dst = [j for j in pods if cap[j] > 0]
        if not src:
            self.weights[(r, t)] = []
            return
        from ortools.graph.python import min_cost_flow

        S, T, H = 0, 1, 2
        pid = {j: 3 + k for k, j in enumerate(src)}
        did = {j: 3 + len(src) + k for k, j in enumerate(dst)}
        li = {j: int(round(load[j] * SCALE)) for j in src}
        ci = {j: int(round(cap[j] * SCALE)) for j in dst}
        total = sum(li.values())
        tails, heads, caps, costs = [], [], [], []

        def arc(a, b, c, w):
            tails.append(a), heads.append(b), caps.append(c), costs.append(w)
            return len(tails) - 1

        a_local, a_out, a_in = {}, {}, {}
        for j in src:
            arc(S, pid[j], li[j], 0)
            if j in did:
                a_local[j] = arc(pid[j], did[j], li[j], 0)
            a_out[j] = arc(pid[j], H, li[j], 1)
        for j in dst:
            a_in[j] = arc(H, did[j], ci[j], 0)
            arc(did[j], T, ci[j], 0)
        arc(S, T, total, 10 * (len(pods) + 1))  # unserved: dearer than any DCN route
        f = min_cost_flow.SimpleMinCostFlow()
        arcs = f.add_arcs_with_capacity_and_unit_cost(np.array(tails), np.array(heads), np.array(caps), np.array(costs))
        f.set_nodes_supplies(np.array([S, T]), np.array([total, -total]))
        if f.solve() != f.OPTIMAL:  # pragma: no cover - always feasible through the unserved arc
            raise RuntimeError("min-cost flow failed")
        flow = f.flows(arcs)
        inn = {j: float(flow[a_in[j]]) for j in dst}
        tot_in = sum(inn.values())
        rows = []
        for j in src:
            parts = {}
            if j in a_local and flow[a_local[j]] > 0:
                parts[j] = float(flow[a_local[j]])
            o = float(flow[a_out[j]])
            if o > 0 and tot_in > 0:
                for k, v in inn.items():
                    if v > 0:
                        parts[k] = parts.get(k, 0.0) + o * v / tot_in
            s = sum(parts.values())
            for k in sorted(parts):
                rows.append((j, k, parts[k] / s, parts[k] / s * load[j]))
        self.weights[(r, t)] = rows

    # ------------------------------------------------------------------ events
    def add_slice(self, region: str, tier: str | None, role: str, shape: str) -> EventResult:
        """Place a new slice; refused when no up pod of the region has an aligned free block."""
        if region not in self.by_region:
            return EventResult(False, f"unknown region {region!r}")
        if role not in ("prefill", "decode", "replica", "warm"):
            return EventResult(False, f"unknown role {role!r}")
        if role != "warm" and (region, tier) not in self.demand:
            tiers = sorted({t for (r, t) in self.demand if r == region and t is not None})
            return EventResult(False, f"unknown tier {tier!r} in {region}; tiers are {', '.join(tiers)}")
        chip, _, n_txt = shape.rpartition("x")
        vms = {p.chip: p.vm for p in self.by_region[region]}
        if chip not in vms or not (n_txt.isascii() and n_txt.isdigit()) or n_txt != str(int(n_txt)) or int(n_txt) < 1:
            return EventResult(False, f"shape {shape!r} is not CHIPxN with a chip of {region} ({', '.join(sorted(vms))})")
        n = int(n_txt)
        allowed = self.base.slice_shapes.get(chip)
        if allowed and n not in allowed:
            return EventResult(False, f"the instance allows {chip} slices of {', '.join(map(str, allowed))} chips, not {n}")
        if n % vms[chip] and vms[chip] % n:
            return EventResult(False, f"a {n}-chip slice cannot occupy whole {vms[chip]}-chip VMs")
        if n < vms[chip]:
            return EventResult(False, f"a {n}-chip slice is smaller than a {vms[chip]}-chip VM; slices occupy whole VMs")
        got = self._best(region, tier, role, shape)
        if got is None:
            return EventResult(False, f"no up pod in {region} has {shape.rpartition('x')[2]} free aligned chips of {shape.rpartition('x')[0]}")
        pod, off = got
        key = f"{region}/{tier}/{role}" if role != "warm" else f"{region}/warm/{shape}"  # ids are unique per prefix
        no = self._next.get(key, 0)
        while f"{key}/{no:04d}" in self.slices:
            no += 1
        self._next[key] = no + 1
        sid = f"{key}/{no:04d}"
        self._put(_Slice(sid, region, tier, role, shape, int(shape.rpartition("x")[2]), pod.id, off))
        self._route(region, tier)
        return EventResult(True, slice_id=sid)

    def remove_slice(self, slice_id: str) -> EventResult:
        if slice_id not in self.slices:
            return EventResult(False, f"no slice {slice_id!r}")
        s = self._take(slice_id)
        self._route(s.region, s.tier)
        return EventResult(True, slice_id=slice_id)

    def pod_down(self, pod_id: str, force: bool = False) -> EventResult:
        """Take a pod out and re-place its slices in the region's other up pods. When they
        do not all fit: refused, nothing changes -- or, with ``force`` (a real outage, the
        pod is gone whatever we decide), the slices that fit are re-placed and the rest are
        removed and listed in ``EventResult.lost``."""
        pod = self.pods.get(pod_id)
        if pod is None:
            return EventResult(False, f"no pod {pod_id!r}")
        if not pod.up:
            return EventResult(False, f"pod {pod_id} is already down")
        victims = sorted(pod.slices, key=lambda i: (-self.slices[i].chips, i))
        pod.up = False
        done: list[tuple[_Slice, _Slice]] = []
        lost: list[str] = []
        for sid in victims:
            old = self._take(sid)
            got = self._best(old.region, old.tier, old.role, old.shape, exclude=pod_id)
            if got is None and force:
                lost.append(old.id)
                continue
            if got is None:
                # roll back: every moved slice returns to where it was
                for new, orig in reversed(done):
                    self._take(new.id)
                    self._put(orig)
                self._put(old)
                pod.up = True
                return EventResult(False, f"pod {pod_id} down refused: slice {sid} ({old.shape}) fits in no other up pod of {old.region}")
            p2, off = got
            new = _Slice(old.id, old.region, old.tier, old.role, old.shape, old.chips, p2.id, off)
            self._put(new)
            done.append((new, old))
        for t in {s.tier for s, _ in done} | {t for (r, t) in self.demand if r == pod.region}:
            self._route(pod.region, t)
        return EventResult(True, reason=(f"{len(lost)} slice(s) fit nowhere and were removed" if lost else ""),
                           moved=[s.id for s, _ in done], lost=lost)

    def pod_up(self, pod_id: str) -> EventResult:
        pod = self.pods.get(pod_id)
        if pod is None:
            return EventResult(False, f"no pod {pod_id!r}")
        if pod.up:
            return EventResult(False, f"pod {pod_id} is already up")
        pod.up = True
        return EventResult(True)

    # ------------------------------------------------------------------ views
    def dcn_share(self) -> float:
        tot = cross = 0.0
        for rows in self.weights.values():
            for a, b, _, rps in rows:
                tot += rps
                cross += rps if a != b else 0.0
        return cross / tot if tot > 0 else 0.0

    def check(self) -> list[str]:
        """Invariants: no pod over its chips, no overlap, no slice on a down pod, every
        slice in exactly one pod, routing shares summing to 1. Returns what fails."""
        bad = []
        seen: dict[str, str] = {}
        for pod in self.pods.values():
            mask, chips = 0, 0
            for sid in pod.slices:
                s = self.slices.get(sid)
                if s is None:
                    bad.append(f"{pod.id} lists unknown slice {sid}")
                    continue
                if sid in seen:
                    bad.append(f"{sid} in {seen[sid]} and {pod.id}")
                seen[sid] = pod.id
                m = ((1 << s.chips) - 1) << s.first
                if mask & m:
                    bad.append(f"{sid} overlaps another slice in {pod.id}")
                mask |= m
                chips += s.chips
                if s.first < 0 or s.first + s.chips > pod.chips:
                    bad.append(f"{sid} leaves {pod.id}")
                if not pod.up:
                    bad.append(f"{sid} on down pod {pod.id}")
            if chips > pod.chips or chips != pod.chips_used or mask != pod.used:
                bad.append(f"{pod.id}: {chips} chips of slices, bookkeeping says {pod.chips_used} (capacity {pod.chips})")
        for sid in self.slices:
            if sid not in seen:
                bad.append(f"{sid} is in no pod")
        for key, rows in self.weights.items():
            sums: dict[str, float] = {}
            for a, _, sh, _ in rows:
                sums[a] = sums.get(a, 0.0) + sh
            bad += [f"{key}: shares of {a} sum to {v}" for a, v in sums.items() if abs(v - 1.0) > 1e-6]
        return bad

    def to_placement(self) -> Placement:
        """The current state as a :class:`Placement` (method 'greedy'; schema_version 1: no
        scenario routing, which the online placer does not keep)."""
        from fleetplan.placement.summary import fragmented_free_chips

        pods = [PodSlots(id=p.id, region=p.region, chip=p.chip, chips=p.chips, chips_per_vm=p.vm, up=p.up, chips_used=p.chips_used)
                for p in sorted(self.pods.values(), key=lambda p: p.id)]
        slices = []
        for s in sorted(self.slices.values(), key=lambda s: s.id):
            vm = self.pods[s.pod].vm
            slices.append(PlacedSlice(id=s.id, region=s.region, tier=s.tier, role=s.role, slice=s.shape, chips=s.chips, pod=s.pod,
                                      first_chip=s.first, vms=[f"{s.pod}/vm-{v:03d}" for v in vm_range(s.first, s.chips, vm)]))
        routing, by_tier = [], {}
        for (r, t), rows in sorted(self.weights.items()):
            tot = sum(x[3] for x in rows)
            by_tier[f"{r}/{t}"] = (sum(x[3] for x in rows if x[0] != x[1]) / tot) if tot > 0 else 0.0
            routing += [RouteWeight(region=r, tier=t, from_pod=a, to_pod=b, share=sh, rps=rps) for a, b, sh, rps in rows]
        # the instance's largest slice shape per chip type (the placement's slice_shapes), as `place` and the
        # independent check measure it; the largest placed shape for a placement that lists none
        largest = {k: max(v) for k, v in self.base.slice_shapes.items() if v}
        for s in slices:
            chip = s.slice.rpartition("x")[0]
            if chip not in self.base.slice_shapes:
                largest[chip] = max(largest.get(chip, 0), s.chips)
        return self.base.model_copy(update={
            "method": "greedy", "pods": pods, "slices": slices, "routing": routing, "dcn_share": self.dcn_share(),
            "dcn_share_by_tier": by_tier, "pods_used": sum(1 for p in pods if p.chips_used > 0),
            "fragmented_free_chips": fragmented_free_chips(pods, slices, largest), "moves": None, "notes": [],
            # the scenario routing of a placement of a plan sized with its pods is the placer's
            # (fleetplan.placement.pods), not kept up by events: a greedy placement carries none
            "schema_version": 1, "scenarios": None, "dcn": None,
        })

    @classmethod
    def empty(cls, placement: Placement) -> "OnlinePlacer":
        """A placer over the placement's pods with no slices (to place a plan greedily)."""
        bare = placement.model_copy(update={"slices": [], "routing": [],
                                            "pods": [p.model_copy(update={"chips_used": 0, "up": True}) for p in placement.pods]})
        return cls(bare)


def greedy_place(plan, pods_from: Placement) -> tuple[OnlinePlacer, list[str]]:
    """Place a plan from scratch with the online placer, one slice at a time: warm slices
    first, then each region-tier (largest shapes first) with prefill and decode interleaved
    in proportion, decode leading.
    ``pods_from`` gives the pods and demand (any placement of the same plan). Returns the
    placer and the refusals (empty: everything placed)."""
    g = OnlinePlacer.empty(pods_from)
    g.prefill_target = {(p.region, p.tier): p.slices for p in plan.pools if p.role == "prefill"}
    refused: list[str] = []
    groups: dict[tuple, dict[str, object]] = {}
    for p in plan.pools:
        groups.setdefault((p.region, p.tier), {})[p.role] = p
    warm = {}
    for w in plan.warm_pool:
        if w.slices > 0:
            warm.setdefault(w.region, []).append(w)

    def interleaved(region):
        """warm first; then tier by tier (largest shapes first), prefill and decode in
        proportion, decode leading, so prefill lands where decode capacity waits"""
        out = [(region, None, "warm", w.slice) for w in sorted(warm.get(region, []), key=lambda w: (-w.chips // w.slices, w.slice))
               for _ in range(w.slices)]
        keys = sorted((k for k in groups if k[0] == region), key=lambda k: (-max(p.chips_per_slice for p in groups[k].values()), k))
        for key in keys:
            pools = groups[key]
            if "replica" in pools:
                out += [(region, key[1], "replica", pools["replica"].slice)] * pools["replica"].slices
                continue
            pre, dec = pools.get("prefill"), pools.get("decode")
            n_p, n_d = (pre.slices if pre else 0), (dec.slices if dec else 0)
            i = j = 0
            while i < n_p or j < n_d:
                if j < n_d and (i >= n_p or j * n_p <= i * n_d):
                    out.append((region, key[1], "decode", dec.slice))
                    j += 1
                else:
                    out.append((region, key[1], "prefill", pre.slice))
                    i += 1
        return out

    def by_size(seq):
        """largest shapes first: aligned first-fit then packs whatever fits the chips"""
        rank = {"decode": 0, "replica": 0, "prefill": 1, "warm": 2}
        return sorted(seq, key=lambda x: (-int(x[3].rpartition("x")[2]), rank[x[2]]))

    for region in sorted({k[0] for k in groups} | set(warm)):
        seq = interleaved(region)
        placed, bad = [], []
        for r, t, role, shape in seq:
            res = g.add_slice(r, t, role, shape)
            (placed if res.ok else bad).append(res.slice_id if res.ok else res.reason)
        if bad:  # the interleaved order splintered the aligned blocks: redo the region largest-first
            for sid in placed:
                g.remove_slice(sid)
            g._next = {k: v for k, v in g._next.items() if not k.startswith(region + "/")}  # ids restart at 0000
            for r, t, role, shape in by_size(seq):
                res = g.add_slice(r, t, role, shape)
                if not res.ok:
                    refused.append(res.reason)
    g.prefill_target = {}
    for (r, t) in g.demand:
        g._route(r, t)
    return g, refused
