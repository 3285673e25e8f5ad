"""``lar-prec schema``: the JSON Schema of report.json, generated from the report's records
(``report/schema.py``), for CI and other tools to validate against; ``--check FILE`` validates
a report with it."""
from __future__ import annotations

import sys

import click

from lar_prec.cli.common import handle_errors
from lar_prec.errors import UsageError
from lar_prec.outputs import json_text
from lar_prec.report.console import shown


@click.command("schema")
@click.option("--check", "check", metavar="REPORT", default=None,
              help="Validate this report.json (or an analysis folder's) against the schema instead: exit 0 when it "
                   "conforms, 2 with the first mismatches when it does not.")
@handle_errors
def schema_cmd(check: str | None) -> None:
    """Print the JSON Schema (draft 2020-12) of report.json (lar-prec.report/1) on stdout.

    Generated from the records that write the report (every key of vars[] and roots[] with its
    type and meaning), with the schema's own "version". Exit code 0, or 2 for --check of a
    report that does not conform or cannot be read."""
    from pathlib import Path

    from lar_prec.inputspec import read_json_file
    from lar_prec.report.schema import report_schema, schema_errors

    schema = report_schema()
    if check is None:
        click.echo(json_text(schema), nl=False)
        sys.exit(0)
    path = Path(check) / "report.json" if Path(check).is_dir() else Path(check)
    errs = schema_errors(read_json_file(path, what="report JSON", limit=None), schema, limit=3)
    if errs:
        raise UsageError(f"{path} does not conform to {schema['$id']}: {'; '.join(errs)}")
    click.echo(shown(f"{path} conforms to {schema['$id']} (schema version {schema['version']})"))
    sys.exit(0)
