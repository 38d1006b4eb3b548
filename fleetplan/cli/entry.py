"""The ``fleetplan`` console entry point (``[project.scripts]`` and ``python -m fleetplan``).

A Ctrl-C while the command line is still importing (about 0.15 s: typer, rich and the
command modules, which import their own stacks only when they run), before any command
runs, ends with exit status 130 (:data:`fleetplan.cli.common.EXIT_INTERRUPTED`, repeated
here so this module imports nothing of fleetplan's before the guard) and one line on
stderr, not a traceback. The package's ``__init__`` is lazy, so only this module's own
few lines run unguarded.

SIGTERM (``timeout``, Kubernetes, systemd) is made to take the same paths as Ctrl-C
first of all (:func:`fleetplan.interrupts.install`; it imports only ``signal`` and
``threading``): it then ends the command with exit status 143 (128 + SIGTERM) and one
line, outputs written atomically or not at all (docs/cli.md, *Exit codes*).

Once the command has ended, the process ends at once (:func:`_exit_now`): the ``atexit``
handlers run (temporary files removed, logs flushed), stdout and stderr are flushed, and
the interpreter's own teardown -- freeing every object the command built, one by one: 0.8 s
after a 3 s ``solve`` of the bundled instance, 3.4 s after the generated 20-region instance's,
on a loaded machine -- is skipped, since the operating system reclaims the memory anyway;
``--time-limit`` is a wall-clock limit on the process (newcomer trial: exit ~1 s after the
last message).
"""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as fleetplan.cli.common


def main() -> None:
    """Import the command line and run it (:func:`fleetplan.cli.app.main`), then end the
    process at once (:func:`_exit_now`); a KeyboardInterrupt (Ctrl-C, or SIGTERM once the
    handler is in) during the import exits 130 (143 after SIGTERM) with "interrupted while
    starting"."""
    from fleetplan import interrupts

    interrupts.install()
    try:
        from fleetplan.cli.app import main as run
    except KeyboardInterrupt:
        interrupts.stop_starting()
    try:
        run()
    except SystemExit as e:
        _exit_now(e.code)
    _exit_now(0)


def _exit_now(code) -> None:
    """End the process with ``code`` (a :class:`SystemExit` code: None is 0, an int itself,
    anything else printed on stderr and 1, as the interpreter does) without its teardown:
    the ``atexit`` handlers run and stdout/stderr are flushed first. With a thread other than
    the main one still running (not a daemon) the interpreter's own exit is taken instead, so
    that it is joined as usual."""
    import atexit
    import os
    import threading

    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        raise SystemExit(code)
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()  # what the interpreter runs first at exit (CPython; the handlers are unregistered as they run)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe: nothing more can be written (app.main has said so)
            pass
    os._exit(status & 0xFF)
