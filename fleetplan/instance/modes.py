"""Serving modes and the pool roles each one runs (no dependencies beyond the schema).

``serving.mode`` is 'disaggregated' (prefill and decode pools), 'colocated' (replicas
that interleave both phases) or 'auto' (the sizing model picks one of the two per region
x tier; the plan records the choice in ``Plan.serving_modes``). Readers of a plan take
the mode of a region x tier from the plan (:func:`fleetplan.results.modes.plan_modes`),
never from the instance's global field.
"""

from __future__ import annotations

__all__ = ["AUTO", "COLOCATED", "DISAGGREGATED", "MODES", "ROLES_OF", "mode_of_role", "fixed_mode", "candidate_modes", "MIXABLE_ROLES"]

AUTO = "auto"
DISAGGREGATED = "disaggregated"
COLOCATED = "colocated"
MODES = (DISAGGREGATED, COLOCATED)
#: the pool roles of each serving mode, first the role that meets a request first
ROLES_OF: dict[str, tuple[str, ...]] = {DISAGGREGATED: ("prefill", "decode"), COLOCATED: ("replica",)}
#: Roles whose pool may mix slice shapes with ``serving.mixed_shapes`` (capacity linear per
#: shape); a prefill pool is one Erlang C queue of identical servers and stays one shape.
MIXABLE_ROLES: tuple[str, ...] = ("decode", "replica")


def mode_of_role(role: str) -> str:
    """The serving mode a pool role belongs to ('prefill'/'decode' -> disaggregated,
    'replica' -> colocated). Raises KeyError for another role."""
    return {"prefill": DISAGGREGATED, "decode": DISAGGREGATED, "replica": COLOCATED}[role]


def fixed_mode(inst) -> str | None:
    """The instance's serving mode when it is fixed, None for 'auto'."""
    return None if inst.serving.mode == AUTO else inst.serving.mode


def candidate_modes(inst) -> tuple[str, ...]:
    """The serving modes the sizing model may choose among for ``inst``."""
    m = fixed_mode(inst)
    return MODES if m is None else (m,)
