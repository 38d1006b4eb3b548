"""``fleetplan samples``: the public data shipped with fleetplan, and where it is."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from fleetplan.cli.common import console, print_json


def samples_command(
    json_out: Annotated[bool, typer.Option("--json", help="Print the list as JSON.")] = False,
) -> None:
    """List the sample trace and profile shipped with fleetplan: name them as sample:NAME (e.g. fleetplan workload fit sample:mooncake)."""
    from fleetplan.samples import PREFIX, SAMPLES, sample_path

    rows = [{"name": PREFIX + s.name, "kind": s.kind, "format": s.format, "path": str(sample_path(s.name)), "description": s.description,
             "source": s.source, "licence": s.licence, "licence_file": str(sample_path(s.name).with_name(s.licence_file))}
            for s in SAMPLES.values()]
    if json_out:
        print_json({"samples": rows, "sources": str(sample_path(next(iter(SAMPLES))).with_name("SOURCES.md"))})
        return
    t = Table(title="Samples shipped with fleetplan (name them as sample:NAME)", title_justify="left")
    for c in ("name", "kind", "format", "what", "source", "licence", "path"):
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(r["name"], r["kind"], r["format"], escape(r["description"]), escape(r["source"]), r["licence"], escape(r["path"]))
    console.print(t)
    console.print(f"Origins, changes and licence texts: {escape(rows[0]['path'].rsplit('/', 1)[0])}/SOURCES.md. Try: "
                  "fleetplan workload fit sample:mooncake; fleetplan calibrate sample:splitwise --model llama2-70b --chip a100-80gb --tp 8")
