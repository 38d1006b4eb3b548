"""The sizing model: how many slices of which shape per region x tier x role, under
TTFT/TPOT SLOs in every scenario, at minimum cost. Built by :func:`build.build_sizing_model`."""

from fleetplan.models.sizing.build import build_sizing_model

__all__ = ["build_sizing_model"]
