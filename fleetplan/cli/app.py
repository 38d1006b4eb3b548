"""The ``fleetplan`` command line (typer). Exit codes: 0 ok, 2 invalid input, 3 infeasible
or no incumbent."""

from __future__ import annotations

import typer

from fleetplan import __version__
from fleetplan.cli.common import Command, Group
from fleetplan.cli.perf import perf_command
from fleetplan.cli.schema_cmd import schema_command
from fleetplan.cli.solve import solve_command
from fleetplan.cli.whatif import whatif_command
from fleetplan.cli.place import diff_command, export_command, place_command
from fleetplan.cli.workload import workload_app
from fleetplan.cli.calibrate import calibrate_command
from fleetplan.cli.drift import drift_command
from fleetplan.cli.simulate import simulate_command
from fleetplan.cli.report import levers_command, report_command, sensitivity_command
from fleetplan.cli.samples import samples_command
from fleetplan.cli.purchase import purchase_command

app = typer.Typer(
    name="fleetplan",
    help="Capacity planning for LLM serving fleets: size prefill/decode slices per region and context tier "
    "under TTFT/TPOT SLOs and N-1 failover at minimum cost per token.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=Group,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fleetplan {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """fleetplan: optimisation, not spreadsheets, for LLM serving fleets."""


app.command("solve", cls=Command)(solve_command)
app.command("perf", cls=Command)(perf_command)
app.command("schema", cls=Command)(schema_command)
app.command("whatif", cls=Command)(whatif_command)
app.command("place", cls=Command)(place_command)
app.command("export", cls=Command)(export_command)
app.command("diff", cls=Command)(diff_command)
app.add_typer(workload_app, name="workload")
app.command("calibrate", cls=Command)(calibrate_command)
app.command("drift", cls=Command)(drift_command)
app.command("simulate", cls=Command)(simulate_command)
app.command("report", cls=Command)(report_command)
app.command("sensitivity", cls=Command)(sensitivity_command)
app.command("levers", cls=Command)(levers_command)
app.command("samples", cls=Command)(samples_command)
app.command("purchase", cls=Command)(purchase_command)


#: Exit status when stdout is closed early (``fleetplan solve | head``): 128 + SIGPIPE,
#: what a shell reports for ``yes | head``, so ``set -o pipefail`` sees the output cut.
EXIT_PIPE_CLOSED = 141


class _StdoutClosed(BaseException):
    """Raised past click's handlers (which exit 1 on EPIPE) when stdout's reader is gone."""


class _PipeGuard:
    """sys.stdout for the console entry point: a write or flush to a closed pipe raises
    :class:`_StdoutClosed` instead of BrokenPipeError; everything else is the stream's."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise _StdoutClosed from None

    def flush(self):
        try:
            return self._stream.flush()
        except BrokenPipeError:
            raise _StdoutClosed from None

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main() -> None:
    """The ``fleetplan`` console entry point. A reader that closes stdout early (``| head``)
    ends the command quietly with exit status 141 (:data:`EXIT_PIPE_CLOSED`): no traceback,
    no 'Broken pipe' message; output files are written atomically, so none is left half done."""
    import os
    import sys

    from fleetplan import interrupts
    from fleetplan.cli.common import COMMAND_STARTED, EXIT_INTERRUPTED, route_library_logs
    from fleetplan.deadline import mark_process_command

    route_library_logs()  # no library writes to stdout, which may carry a --json document
    # pydantic looks for plugins (observability hooks) among every installed distribution's entry
    # points when the first model is built: ~0.04 s of every command's start-up here, for plugins a
    # command line has no use for (typer does the same for its own models); PYDANTIC_DISABLE_PLUGINS=""
    # in the environment keeps them (docs/cli.md, *Environment*)
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    interrupts.install()  # SIGTERM takes Ctrl-C's paths, exit 143 (already done by fleetplan.cli.entry; python -m fleetplan.cli.app)
    mark_process_command()  # --time-limit counts from process start (fleetplan.deadline)
    sys.stdout = _PipeGuard(sys.stdout)
    try:
        app()
    except KeyboardInterrupt:  # typer building the command line, before click's handlers (else a traceback)
        interrupts.stop_starting()
    except SystemExit as e:
        if not COMMAND_STARTED and e.code in (EXIT_INTERRUPTED, interrupts.exit_status()):
            interrupts.stop_starting()  # typer's argument parsing turns a Ctrl-C into a silent exit 130
        # a signal outside a command's own handling
        if interrupts.received() is not None and e.code != interrupts.exit_status():
            raise SystemExit(interrupts.exit_status()) from None
        raise
    except (_StdoutClosed, BrokenPipeError):
        # later flushes (the interpreter's at exit) must not fail again: point fd 1 at /dev/null
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())
        os.close(devnull)
        sys.stdout = sys.__stdout__
        raise SystemExit(EXIT_PIPE_CLOSED) from None


if __name__ == "__main__":  # pragma: no cover
    main()
