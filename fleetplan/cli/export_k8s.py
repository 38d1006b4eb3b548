"""``fleetplan export --format k8s|keda|prometheus|all``: the placed fleet as Kubernetes
manifests, autoscalers and Prometheus rules, written to a directory atomically."""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.markup import escape
from rich.table import Table

import typer

from fleetplan import interrupts
from fleetplan.cli.common import console, err_console
from fleetplan.errors import InputError, Problem

FORMATS = {"k8s": {"k8s"}, "keda": {"keda"}, "prometheus": {"prometheus"}, "all": {"k8s", "keda", "prometheus"}}


def kubernetes_options(fmt: str, output: str | None, inputs: tuple[str, ...], **options):
    """The export options and output directory, checked before any file is read. Raises
    InputError (exit 2) for a missing, file or input-holding -o, or an unusable option."""
    from fleetplan.export.k8s import ExportOptions

    if output is None or not str(output).strip() or str(output) == "-":
        raise InputError("-o", [Problem("-o", f"--format {fmt} writes a directory of manifests: give it with -o DIR.")])
    target = Path(output)
    if target.exists() and not target.is_dir():
        raise InputError(output, [Problem("-o", "is a file, not a directory; give a directory for the export (it is created).")])
    for src in inputs:
        if src and Path(src).exists() and target.exists() and Path(src).resolve().is_relative_to(target.resolve()):
            raise InputError(output, [Problem("-o", f"holds the input file {src}, which replacing the directory would delete; "
                                                    "write the export elsewhere.")])
    opts = ExportOptions(formats=frozenset(FORMATS[fmt]), **options)
    opts.check()
    return opts, target


def interrupted(target: Path | str | None, what: str) -> typer.Exit:
    """Say that Ctrl-C or SIGTERM stopped the export before anything was written (the write is
    atomic, so an earlier ``what`` at ``target`` is intact) and return the exit status (130 after Ctrl-C, 143 after SIGTERM)."""
    t = Path(target) if target else None
    kept = f"; the earlier {what} in {escape(str(t))} is intact" if t is not None and t.exists() else ""
    err_console.print(f"[bold yellow]interrupted[/] ({interrupts.cause()}): nothing written{kept}.")
    return typer.Exit(interrupts.exit_status())


def export_kubernetes(inst, plan, placed, opts, target: Path) -> None:
    """Build every object first (all checks), then write the directory. Raises InputError
    (exit 2, nothing written) for instance data the export needs and lacks; Ctrl-C ends
    it with exit 130 and a line saying what is in ``target``."""
    from fleetplan.export.k8s import build_bundle, write_bundle
    from fleetplan.export.k8s.bundle import WrittenThenInterrupted

    bundle = build_bundle(inst, plan, placed, opts)
    try:
        write_bundle(bundle, target)
    except WrittenThenInterrupted:
        err_console.print(f"[bold yellow]interrupted[/] ({interrupts.cause()}) after the export was written to {escape(str(target))}.")
        raise typer.Exit(interrupts.exit_status()) from None
    _summary(bundle, target, opts)


def _summary(bundle, target: Path, opts) -> None:
    from fleetplan.export.k8s.bundle import region_objects

    output = str(target)  # Path drops a trailing '/'
    tab = Table(title=f"Kubernetes export in {escape(output)}", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    tab.add_column("region")
    tab.add_column("objects")
    tab.add_column("slices (groups x replicas)", justify="right")
    for r, (kinds, slices) in region_objects(bundle).items():
        tab.add_row(r, ", ".join(f"{n} {k}" for k, n in kinds.items()), str(slices) if slices else "")
    console.print(tab)
    if "k8s" in opts.formats or "keda" in opts.formats:
        console.print(f"apply each region to its cluster: [bold]kubectl apply -k {escape(output)}/REGION[/] (set the model server image "
                      f"in {escape(output)}/REGION/kustomization.yaml first; docs/controller.md lists what else you supply)")
    if "k8s" in opts.formats:
        console.print(f"label each placement pod's nodes: {escape(opts.ici_domain_label)}=<region>.<chip>.<NN> (the pod id with '.' for '/')")
    for n in bundle.notes:
        err_console.print(f"[yellow]note:[/] {escape(n)}")
