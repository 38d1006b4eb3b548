"""Errors fleetplan raises for bad input, each naming the field path, the value and the unit expected.

The CLI turns :class:`InputError` (and its subclasses) into a one-paragraph message per
problem and exit code 2, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Problem", "InputError", "InstanceError", "InconsistentInstanceError", "PlanError", "RunError"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input.

    Attributes:
        path: dotted field path, e.g. ``regions.us-east.hourly_load``.
        message: what is wrong and what is expected, with the unit.
        value: a short repr of the offending value ('' when not applicable).
    """

    path: str
    message: str
    value: str = ""

    def render(self) -> str:
        """One line: ``path: message Got: value.`` (line breaks from keys or values are escaped)."""
        got = f" Got: {self.value}." if self.value else ""
        where = self.path or "(top level)"
        return f"{where}: {self.message}{got}".replace("\r", "\\r").replace("\n", "\\n")


class InputError(Exception):
    """Invalid input. ``problems`` lists every problem found (at least one)."""

    kind = "input"

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.problems)
        head = f"invalid {self.kind} {self.source}: {n} problem{'s' if n != 1 else ''}"
        return head + "\n" + "\n".join(f"  - {p.render()}" for p in self.problems)


class InstanceError(InputError):
    """The instance file (YAML) is malformed or inconsistent."""

    kind = "instance"


class InconsistentInstanceError(InstanceError, ValueError):
    """An instance whose fields pass the schema but contradict each other (shares that do
    not sum to 1, unknown names, a model that fits no slice ...), raised by the
    :class:`~fleetplan.instance.schema.Instance` constructor. A ``ValueError`` too, so
    pydantic reports it as a ``ValidationError`` from ``Instance.model_validate``; the
    original error, with its ``problems``, is in ``errors()[0]["ctx"]["error"]``."""


class PlanError(InputError):
    """A plan file is malformed or does not belong to the given instance."""

    kind = "plan"


class RunError(InputError):
    """A run that could not finish for a reason outside its input: a sweep's task lost
    more times than the executor retries it (its worker or node died each time), a
    broken transfer of a task or result. Not an input error, so it is not rendered as
    one ('invalid input ... Got: ...'), but an :class:`InputError` still, for the exit
    code the command line gives it (2, docs/cli.md) and for callers that catch that.
    ``source`` names where it ran (``--executor ray``)."""

    kind = "run"

    def render(self) -> str:
        return f"the run failed ({self.source}): " + "\n".join(p.message.replace("\r", "\\r").replace("\n", "\\n")
                                                              for p in self.problems)


def short_repr(value: object, limit: int = 80) -> str:
    """A one-line repr of ``value`` cut to ``limit`` characters."""
    text = repr(value).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


class OptionError(InputError):
    """A command-line option's value is invalid (``source`` names the option):
    'invalid option --risk: 1 problem'."""

    kind = "option"
