"""Discrete-event simulation of a plan's pools, to check the closed-form predictions.

:func:`simulate` runs one region's prefill and decode pools (or colocated replicas) of a
plan request by request and step by step -- arrivals, gateway, admission control,
prefill queue and slices, KV transfer, continuous batching with speculation -- and
reports every measured latency beside the plan's prediction and the model at the
simulated size (:mod:`fleetplan.sim.report`). :mod:`fleetplan.sim.sweep` traces the
TTFT-vs-utilisation curve. Pure numpy and heapq; see docs/validation.md for what it
measured on the bundled instances.
"""

from fleetplan.sim.report import SimReport
from fleetplan.sim.run import simulate

__all__ = ["simulate", "SimReport"]
