"""``fleetplan schema``: the JSON Schema of instance files, plans, what-if reports, placements, controller documents and simulation reports."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.markup import escape

from fleetplan.cli.common import EXIT_INPUT, err_console, print_json, write_atomic, input_errors


def _schemas() -> dict:
    from fleetplan.instance.schema import Instance
    from fleetplan.export.controller import ControllerExport
    from fleetplan.results.placement import Placement
    from fleetplan.results.plan import Plan
    from fleetplan.report.data import ReportData
    from fleetplan.report.levers import LeversReport
    from fleetplan.report.sensitivity import SensitivityReport
    from fleetplan.whatif.report import WhatIfReport
    from fleetplan.sim.report import SimReport
    from fleetplan.sim.sweep import SweepReport
    from fleetplan.purchase.result import PurchasePlan
    from fleetplan.purchase.schema import PurchaseFile

    return {"instance": Instance, "plan": Plan, "whatif": WhatIfReport, "placement": Placement, "controller": ControllerExport,
            "simulation": SimReport, "sweep": SweepReport, "report": ReportData, "sensitivity": SensitivityReport, "levers": LeversReport,
            "purchase": PurchaseFile, "purchase-plan": PurchasePlan}


def schema_command(
    which: Annotated[str, typer.Argument(help="Which schema: instance, plan, whatif, placement, controller, simulation, sweep, report, sensitivity, levers, purchase (the purchase-planning file) or purchase-plan.")] = "instance",
    output: Annotated[Optional[str], typer.Option("-o", "--output", help="Write to this file (atomically) instead of stdout.")] = None,
) -> None:
    """Print the JSON Schema of an instance file, a plan, a what-if report, a placement, a controller document, a simulation report, the --json of report, sensitivity or levers, a purchase-planning file or a purchase plan."""
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
