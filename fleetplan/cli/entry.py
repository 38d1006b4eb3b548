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
"""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as fleetplan.cli.common


def main() -> None:
    """Import the command line and run it (:func:`fleetplan.cli.app.main`); a
    KeyboardInterrupt (Ctrl-C, or SIGTERM once the handler is in) during the import exits
    130 (143 after SIGTERM) with "interrupted while starting"."""
    from fleetplan import interrupts

    interrupts.install()
    try:
        from fleetplan.cli.app import main as run
    except KeyboardInterrupt:
        interrupts.stop_starting()
    run()
