"""The commands that read a finished analysis and run nothing: ``list`` (triage its vars by
cosine, status, operator type, name) and ``node`` (one var and its neighbourhood). Each imports
its workflow when it runs."""
from __future__ import annotations

import json
import sys

import click

from lar_prec.cli.common import handle_errors, report_out

_REPORT = click.argument("report", type=click.Path(path_type=str), metavar="REPORT|DIR")
_JSON = click.option("--json", "json_out", metavar="FILE|-", default=None, help="Write the result as JSON; '-' for stdout.")


def _write(data: dict, json_out: str | None) -> None:
    if json_out is None:
        return
    from lar_prec.outputs import atomic_write_text

    text = json.dumps(data, indent=1, allow_nan=False) + "\n"
    if json_out == "-":
        click.echo(text, nl=False)
    else:
        atomic_write_text(json_out, text, what="JSON result")


@click.command("list")
@_REPORT
@click.option("--cosine-below", type=float, default=None, metavar="C",
              help="Vars whose cosine similarity is below C (precision_tool's vcs -c 0.98).")
@click.option("--status", "statuses", multiple=True, metavar="STATUS",
              help="Vars of this status (ok, index_equivalent, divergent, nonfinite, shape_mismatch, "
                   "dtype_mismatch, missing); repeat for several.")
@click.option("--not-ok", is_flag=True, help="Vars that do not agree (any status but ok and index_equivalent).")
@click.option("--opr-type", "opr_types", multiple=True, metavar="GLOB",
              help="Vars whose operator type matches, e.g. 'Conv*'; repeat for several.")
@click.option("--name", "names", multiple=True, metavar="GLOB", help="Vars whose name matches; repeat for several.")
@click.option("--sort", type=click.Choice(["exec", "error", "cosine"]), default="exec", show_default=True,
              help="Execution order, largest error first, or smallest cosine first.")
@click.option("--top", type=click.IntRange(1), default=50, show_default=True, help="Rows shown in the terminal.")
@_JSON
@handle_errors
def list_cmd(report: str, cosine_below: float | None, statuses: tuple, not_ok: bool, opr_types: tuple,
             names: tuple, sort: str, top: int, json_out: str | None) -> None:
    """The vars of a report (report.json, or an analysis folder) that pass every filter given,
    with their statistics: a big model triaged without running anything.

    Exit code 0, 2 when the report cannot be read.
    """
    from lar_prec.report.triage import render_listing
    from lar_prec.workflows.triage.triage import list_vars, load_report

    listing = list_vars(load_report(report), cosine_below=cosine_below, statuses=statuses, opr_types=opr_types,
                        names=names, not_ok=not_ok, sort=sort)
    if json_out != "-":
        render_listing(listing, report_out(), top)
    _write(listing.to_json(), json_out)
    sys.exit(0)


@click.command("node")
@_REPORT
@click.argument("var", metavar="VAR")
@click.option("--depth", type=click.IntRange(1, 32), default=1, show_default=True,
              help="How far to go up the inputs and down the consumers.")
@_JSON
@handle_errors
def node_cmd(report: str, var: str, depth: int, json_out: str | None) -> None:
    """One var (its id or exact name) of a report: its operator, its inputs and consumers to
    --depth, each with its status, error statistics and local error where measured.

    Exit code 0, 2 when the report cannot be read or has no such var.
    """
    from lar_prec.report.triage import render_node
    from lar_prec.workflows.triage.triage import load_report, node_view

    view = node_view(load_report(report), var, depth)
    if json_out != "-":
        render_node(view, report_out())
    _write(view.to_json(), json_out)
    sys.exit(0)
