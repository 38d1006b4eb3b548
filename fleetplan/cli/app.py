"""The ``fleetplan`` command line (typer). Exit codes: 0 ok, 2 invalid input, 3 infeasible
or no incumbent."""

from __future__ import annotations

import typer

from fleetplan import __version__
from fleetplan.cli.perf import perf_command
from fleetplan.cli.schema_cmd import schema_command
from fleetplan.cli.solve import solve_command
from fleetplan.cli.whatif import whatif_command
from fleetplan.cli.place import diff_command, export_command, place_command
from fleetplan.cli.workload import workload_app
from fleetplan.cli.calibrate import calibrate_command
from fleetplan.cli.simulate import simulate_command
from fleetplan.cli.report import levers_command, report_command, sensitivity_command
from fleetplan.cli.samples import samples_command

app = typer.Typer(
    name="fleetplan",
    help="Capacity planning for LLM serving fleets: size prefill/decode slices per region and context tier "
    "under TTFT/TPOT SLOs and N-1 failover at minimum cost per token.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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


app.command("solve")(solve_command)
app.command("perf")(perf_command)
app.command("schema")(schema_command)
app.command("whatif")(whatif_command)
app.command("place")(place_command)
app.command("export")(export_command)
app.command("diff")(diff_command)
app.add_typer(workload_app, name="workload")
app.command("calibrate")(calibrate_command)
app.command("simulate")(simulate_command)
app.command("report")(report_command)
app.command("sensitivity")(sensitivity_command)
app.command("levers")(levers_command)
app.command("samples")(samples_command)


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
