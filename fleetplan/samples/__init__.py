"""Small public data shipped with fleetplan (package data), so that the documented
commands run on a plain install: a request trace with prefix hashes and a latency
profile. ``SOURCES.md`` beside this file gives each file's origin, the changes made and
its licence (the licence texts are beside it too).

A command that reads a trace or a profile takes ``sample:NAME`` for one of them
(:func:`resolve`); ``fleetplan samples`` lists them with their paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from fleetplan.errors import InputError, Problem

__all__ = ["Sample", "SAMPLES", "PREFIX", "sample_path", "resolve"]

#: What names a sample on the command line: ``sample:mooncake``.
PREFIX = "sample:"


@dataclass(frozen=True)
class Sample:
    """One shipped file: its name, file, what it is (``trace`` or ``profile``), the
    fleetplan format it is read as, a one-line description, its source and licence."""

    name: str
    file: str
    kind: str
    format: str
    description: str
    source: str
    licence: str
    licence_file: str


SAMPLES: dict[str, Sample] = {s.name: s for s in (
    Sample("mooncake", "mooncake-conversation-3000.jsonl.gz", "trace", "mooncake",
           "the first 3,000 requests (987 s) of the Mooncake FAST'25 conversation trace, with 512-token prefix-block hashes",
           "kvcache-ai/Mooncake FAST25-release/traces/conversation_trace.jsonl (Qin et al., FAST 2025)",
           "Apache-2.0", "LICENSE-Apache-2.0.txt"),
    Sample("splitwise", "splitwise-perf_model.csv", "profile", "splitwise",
           "measured prefill and decode times, Llama2-70B (TP 2/4/8) and BLOOM-176B (TP 8) on A100, H100, power-capped H100",
           "Mutinifni/splitwise-sim data/perf_model.csv (Patel et al., ISCA 2024)",
           "MIT", "LICENSE-MIT-splitwise-sim.txt"),
)}


def sample_path(name: str) -> Path:
    """Path of the shipped file of sample ``name``.

    Raises: :class:`InputError` naming the samples there are, for an unknown name."""
    s = SAMPLES.get(name)
    if s is None:
        raise InputError(PREFIX + name, [Problem(PREFIX + name, f"no such sample; the samples are {', '.join(PREFIX + n for n in SAMPLES)} "
                                                               "(`fleetplan samples` lists them).")])
    return Path(str(files("fleetplan.samples").joinpath(s.file)))


def resolve(arg: str) -> str:
    """A path as given, or the shipped file's path for ``sample:NAME``."""
    return str(sample_path(arg[len(PREFIX):])) if arg.startswith(PREFIX) else arg
