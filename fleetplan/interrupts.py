"""SIGTERM handled as Ctrl-C is: what ``timeout``, Kubernetes and systemd send
to stop a process.

The command line installs :func:`on_sigterm` at start (:func:`install`); from then on a
SIGTERM raises :class:`Terminated`, a KeyboardInterrupt, in the main thread, so it takes
every path Ctrl-C takes: the native solves stop (:func:`fleetplan.solvers.base.run_interruptible`
intercepts both signals while a solver thread runs), the atomic writes remove their
temporary files and leave an earlier output in place, each command prints its one-line
'interrupted' message. The command then exits with :func:`exit_status`: 143 (128 +
SIGTERM, what a shell reports for a process SIGTERM killed) after a SIGTERM, 130 (128 +
SIGINT) after a Ctrl-C. Which signal came is recorded here (:func:`received`), not in
the exception's type, so code that catches KeyboardInterrupt and raises a new one keeps
the exit status right.

This module imports nothing of fleetplan's: the core (the solvers) and the command line
both use it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

__all__ = ["Terminated", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "install", "on_sigterm", "note", "received", "cause",
           "exit_status", "stop_starting", "wraps_interrupt", "debug_pause", "DEBUG_PAUSE_ENV"]

#: Environment variable of the signal tests' pause hook (:func:`debug_pause`).
DEBUG_PAUSE_ENV = "FLEETPLAN_DEBUG_PAUSE"

#: 128 + SIGINT: the exit status after Ctrl-C.
EXIT_INTERRUPTED = 128 + int(signal.SIGINT)
#: 128 + SIGTERM: the exit status after SIGTERM (143 on Linux and macOS).
EXIT_TERMINATED = 128 + int(signal.SIGTERM)

_received: list[int] = []  # the signal numbers that interrupted this process, in order


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by a SIGTERM once :func:`install` has run: a
    KeyboardInterrupt, so every Ctrl-C path (cleanup, messages) takes it too."""


def note(signum: int) -> None:
    """Record that signal ``signum`` (SIGINT or SIGTERM) interrupted the process (for a
    handler that defers the exception, as :func:`fleetplan.solvers.base.run_interruptible`)."""
    _received.append(int(signum))


def on_sigterm(signum, _frame) -> None:
    """The SIGTERM handler :func:`install` sets: records the signal, raises :class:`Terminated`."""
    note(signum)
    raise Terminated


def install() -> bool:
    """Make SIGTERM raise :class:`Terminated` in the main thread (once, at the command's
    start). Returns False, changing nothing, outside the main thread or when SIGTERM is
    ignored (``nohup``-style parents that set SIG_IGN keep it ignored)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        return False
    signal.signal(signal.SIGTERM, on_sigterm)
    return True


def received() -> int | None:
    """The signal number that interrupted the process: SIGTERM if one came (it wins over a
    Ctrl-C before it), else SIGINT if a deferred Ctrl-C was recorded, else None."""
    if int(signal.SIGTERM) in _received:
        return int(signal.SIGTERM)
    return _received[-1] if _received else None


def cause() -> str:
    """'SIGTERM' or 'Ctrl-C': what stopped the command, for its 'interrupted' message."""
    return "SIGTERM" if received() == int(signal.SIGTERM) else "Ctrl-C"


def exit_status() -> int:
    """143 after a SIGTERM, else 130 (an interrupted command's exit status)."""
    return EXIT_TERMINATED if received() == int(signal.SIGTERM) else EXIT_INTERRUPTED


def stop_starting() -> None:
    """End a command line interrupted before its command ran (the command line's import,
    typer building it, click parsing the arguments): one line on stderr and
    :func:`exit_status` (130 after Ctrl-C, 143 after SIGTERM), no traceback.
    Raises SystemExit."""
    sys.stderr.write(f"interrupted while starting ({cause()}): no command ran, nothing was written\n")
    sys.stderr.flush()
    raise SystemExit(exit_status()) from None


def wraps_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a KeyboardInterrupt a library turned into another exception: one
    in its chain (``__cause__`` / ``__context__``), or pydantic_core's SchemaError naming
    it (the signal landed while pydantic built a model's schema)."""
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 32:
        if isinstance(e, KeyboardInterrupt):
            return True
        if type(e).__name__ == "SchemaError" and "KeyboardInterrupt" in str(e):
            return True
        e, seen = e.__cause__ or (None if e.__suppress_context__ else e.__context__), seen + 1
    return False


def debug_pause(point: str, detail: str = "") -> None:
    """The signal tests' hook (docs/cli.md, *Exit codes and signals*): when the environment
    variable ``FLEETPLAN_DEBUG_PAUSE`` equals ``point`` -- ``before-rename``: an output's
    temporary file (or an export's temporary directory) is written and not yet renamed
    into place -- print ``fleetplan: paused at POINT DETAIL`` on stderr and sleep (at most
    600 s), so a test can send a signal at a known point whatever the machine's load;
    ``purchase-build``: the purchase model's build, before its first node. Does nothing
    otherwise."""
    if os.environ.get(DEBUG_PAUSE_ENV) != point:
        return
    sys.stderr.write(f"fleetplan: paused at {point} {detail}\n")
    sys.stderr.flush()
    end = time.monotonic() + 600.0
    while time.monotonic() < end:
        time.sleep(0.05)
