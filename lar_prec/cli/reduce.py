"""``lar-prec reduce``: the smallest model that still fails the way an analysis found. Imports its
workflow when it runs, so ``lar-prec --help`` stays fast."""
from __future__ import annotations

import sys

import click

from lar_prec.cli.common import advice_outputs, handle_errors
from lar_prec.clisupport import check_report_outputs


@click.command("reduce")
@click.argument("analysis_dir", type=click.Path(path_type=str))
@click.option("--option", default=None, metavar="NAME",
              help="A sweep's option whose failure to reduce. [default: the worst option that diverges, crashes "
                   "or hangs]")
@click.option("--root", default=None, metavar="VAR",
              help="The root to start from, by var id or name. [default: the analysis' first root]")
@click.option("--out", type=click.Path(path_type=str), default=None,
              help="Folder of the reduced model (a previous one there is replaced, any other non-empty folder refused). "
                   "[default: ./lar-prec-out/reduce-N]")
@click.option("--lar", "lar_path", metavar="PATH", default=None,
              help="The load_and_run to run the parts with: the one the analysis ran. [default: bundled]")
@click.option("--model", default=None, metavar="PATH", type=click.Path(path_type=str),
              help="The model the analysis ran, when it is no longer where its report says.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Kill a build or run after S seconds. [default: 600]")
@click.option("--max-runs", type=click.IntRange(min=1), default=100, show_default=True, metavar="N",
              help="Stop after N runs and hand over the smallest part that failed the same way so far.")
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Also write reduce.json here ('-': stdout).")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@handle_errors
def reduce_cmd(analysis_dir: str, option: str | None, root: str | None, out: str | None, lar_path: str | None,
               model: str | None, timeout: float | None, max_runs: int, json_out: str | None, quiet: bool) -> None:
    """The smallest part of the model that still fails the way ANALYSIS_DIR found.

    ANALYSIS_DIR is the folder of a naive-vs-default, sweep (--option), shake or diff analysis.
    The whole model must still fail that way first (same root operator, error over k x its
    floor with k half the finding's margin, same class: wrong value, NaN, crash, stall,
    jitter); then parts fed with the reference's values where they are cut are bisected from
    the outputs back and from the inputs forward, and operators removed in chunks then one by
    one, keeping a part only when it fails the same way. Writes the reduced model.mge, its inputs, its naive
    outputs and reduce.json into --out, a folder `lar-prec replay` runs.

    Exit code 1 when the reduced model fails the same way (0 in the rare case the part handed
    over no longer does: said why), 2 when the finding does not reproduce here (or usage and
    input errors), 3 when a build or run failed otherwise than a part may.
    """
    from lar_prec.diagnosis.local import DEFAULT_TIMEOUT
    from lar_prec.report.reduce import render_reduce_terminal
    from lar_prec.workflows.reduce.reduce import reduce

    check_report_outputs(json_out, None, [p for p in (model, lar_path, f"{analysis_dir}/report.json") if p])
    say = None if quiet else (lambda msg: click.echo(f"lar-prec reduce: {msg}", err=True))
    res = reduce(analysis_dir, option=option, root=root, out=out, lar=lar_path, model=model,
                 timeout=timeout or DEFAULT_TIMEOUT, max_runs=max_runs, progress=say)
    advice_outputs(res.data, render_reduce_terminal, json_out, None)
    sys.exit(res.exit_code)
