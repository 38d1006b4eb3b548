"""Quarterly purchasing under uncertain demand (``fleetplan purchase``, docs/purchase.md):
the purchase-planning file, its scenario tree, the deterministic-equivalent model built
from the sizing families, the driver (RP, EEV/VSS, wait-and-see/EVPI) and the plan document."""
