"""Give up a HiGHS MIP solve that has found no feasible solution in a set number of
branch-and-bound nodes -- a work limit on the search for a first incumbent.

HiGHS's ``mip_max_nodes`` ends a solve at a node count whether or not it has a solution.
A caller that needs an incumbent and a proven gap from the same solve (the purchase
decomposition's node fleets, :mod:`fleetplan.purchase.floors`) wants a long search when a
solution is in hand (to close the gap) and a short one when none is (a fleet that the
heuristics and the first hundreds of nodes do not find is rarely found later: the bundled
gemini-ironwood-2027's two fleets without one ran their 1,000 nodes, 5-8 s of CPU each, to
no solution). :class:`GiveUp` stops the solve through HiGHS's MIP interrupt callback once
``nodes`` nodes are explored and no primal solution exists. The check reads only the node
count and whether a solution exists, so the cut is the same on any machine and under any
load; a solve that finds a solution before the count is not touched (the same search, node
for node, the same result).

With ``stall`` it also stops a solve that has a solution once the gap has not closed by
:data:`STALL_SHARE` of itself (the dual bound up, or the incumbent down) over the last
``stall`` nodes: a search whose bound has stopped moving (the bundled tree's 2027Q2 run-cost
floor: 5,270.58 USD/h at node 121, 5,270.90 at node 1,000, its fleet 5,349.05 since the root).
Node counts and bounds only, so also a work rule.

One :class:`GiveUp` per ``highspy.Highs``, attached before its first solve and armed (or
not) at the start of every solve on it: HiGHS keeps a callback's interrupt flag from one
run to the next, so without the reset at the first callback of each run a solve after one
that was given up would end at once.
"""

from __future__ import annotations

import math

__all__ = ["GiveUp", "STALL_SHARE"]

#: the share of the gap a stalled search must close within its ``stall`` nodes to go on
STALL_SHARE = 0.01


class GiveUp:
    """A MIP-interrupt rule on ``h`` (a ``highspy.Highs``): armed with :meth:`start`
    (``nodes`` None: never gives up), :attr:`fired` tells after the run whether it stopped
    the solve (HiGHS then reports the run as interrupted by the user)."""

    def __init__(self, h) -> None:
        import highspy

        self._mip = highspy.cb.HighsCallbackType.kCallbackMipInterrupt
        self.nodes: int | None = None
        self.stall: int | None = None
        self._mark = None
        self.fired = False
        self._fresh = False
        # subscribed before the user-interrupt handler (Ctrl-C, highspy's HandleUserInterrupt) that the solve
        # adds: that one fires after this and sets the flag again whenever a stop was asked for
        h.cbSimplexInterrupt += self._event
        h.cbMipInterrupt += self._event

    def start(self, nodes: int | None, stall: int | None = None) -> None:
        """Arm for the next run: give up after ``nodes`` nodes without a solution (None: never),
        and after ``stall`` nodes in which the gap closed by less than :data:`STALL_SHARE` of
        itself (None: never)."""
        self.nodes = nodes
        self.stall = stall
        self._mark = None  # (node count, dual bound, primal bound) when the gap last closed by STALL_SHARE
        self.fired = False
        self._fresh = True

    def _event(self, e) -> None:
        if self._fresh:  # the first callback of a run: clear the flag the previous run may have left set
            self._fresh = False
            e.interrupt(False)
        if e.callback_type != self._mip:
            return
        out = e.data_out
        if self.nodes is not None and out.mip_node_count >= self.nodes and not math.isfinite(out.mip_primal_bound):
            self.fired = True
            e.interrupt()
        elif self.stall is not None and math.isfinite(out.mip_primal_bound) and math.isfinite(out.mip_dual_bound):
            k, lo, up = out.mip_node_count, out.mip_dual_bound, out.mip_primal_bound
            if self._mark is None:
                self._mark = (k, lo, up)
                return
            k0, lo0, up0 = self._mark
            if (lo - lo0) + (up0 - up) >= STALL_SHARE * (up0 - lo0):
                self._mark = (k, lo, up)
            elif k - k0 >= self.stall:
                self.fired = True
                e.interrupt()
