"""``fleetplan schema``: the JSON Schema of instance files (and, later, of plans)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.markup import escape

from fleetplan.cli.common import EXIT_INPUT, err_console, print_json, write_atomic, input_errors


def _schemas() -> dict:
    from fleetplan.instance.schema import Instance

    out = {"instance": Instance}
    try:
        from fleetplan.results.plan import Plan

        out["plan"] = Plan
    except ImportError:  # pragma: no cover - plan module arrives with the solver
        pass
    from fleetplan.results.whatif import WhatIfReport

    out["whatif"] = WhatIfReport
    from fleetplan.results.export import ControllerExport
    from fleetplan.results.placement import Placement

    out["placement"] = Placement
    out["controller"] = ControllerExport
    return out


def schema_command(
    which: Annotated[str, typer.Argument(help="Which schema: instance, plan, whatif, placement or controller.")] = "instance",
    output: Annotated[Optional[str], typer.Option("-o", "--output", help="Write to this file (atomically) instead of stdout.")] = None,
) -> None:
    """Print the JSON Schema of an instance file (or of a plan)."""
    schemas = _schemas()
    if which not in schemas:
        err_console.print(f"[bold red]error:[/] unknown schema {escape(repr(which))}; choose one of: {', '.join(sorted(schemas))}.")
        raise typer.Exit(EXIT_INPUT)
    doc = schemas[which].model_json_schema()
    if output:
        from fleetplan.cli.common import dumps_json

        with input_errors():
            write_atomic(output, dumps_json(doc))
    else:
        print_json(doc)
