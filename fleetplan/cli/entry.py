"""The ``fleetplan`` console entry point (``[project.scripts]`` and ``python -m fleetplan``).

A Ctrl-C while the command line is still importing (about a second: typer, rich,
pydantic, numpy, every command module), before any command runs, ends with exit status
130 (:data:`fleetplan.cli.common.EXIT_INTERRUPTED`, repeated here so this module imports
nothing of fleetplan's before the guard) and one line on stderr, not a traceback. The
package's ``__init__`` is lazy, so only this module's own few lines run unguarded.
"""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as fleetplan.cli.common


def main() -> None:
    """Import the command line and run it (:func:`fleetplan.cli.app.main`); a
    KeyboardInterrupt during the import exits 130 with "interrupted while starting"."""
    try:
        from fleetplan.cli.app import main as run
    except KeyboardInterrupt:
        sys.stderr.write("interrupted while starting: no command ran, nothing was written\n")
        sys.stderr.flush()
        raise SystemExit(EXIT_INTERRUPTED) from None
    run()
