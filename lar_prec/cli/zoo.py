"""``lar-prec zoo MANIFEST``: a model zoo on Dask, into the results store (docs/zoo.md). The
zoo package (and Dask) load only when the command runs, so ``lar-prec --help`` stays fast."""
from __future__ import annotations

import sys

import click

from lar_prec.cli.common import handle_errors, speed_options
from lar_prec.clisupport import check_junit_output, check_report_outputs
from lar_prec.errors import UsageError
from lar_prec.report.console import shown
from lar_prec.outputs import json_text


@click.command("zoo")
@click.argument("manifest", type=click.Path(path_type=str))
@click.option("--store", "store", metavar="URL", envvar="LAR_PREC_STORE", default=None,
              help="The results store every task is written into: an SQLite file (results.db, sqlite:///PATH) or "
                   "postgresql://USER@HOST:PORT/DB. [default: $LAR_PREC_STORE]")
@click.option("--scheduler", metavar="tcp://HOST:PORT", default=None,
              help="The Dask scheduler of a cluster to run on. [default: an embedded LocalCluster]")
@click.option("--connect-timeout", type=click.FloatRange(min=0, min_open=True), default=20.0, show_default=True,
              metavar="S", help="Seconds to reach --scheduler before giving up (exit 3).")
@click.option("--workers", type=click.IntRange(1, 1024), default=None, metavar="N",
              help="Worker processes of the embedded cluster (each runs one task at a time), besides one per "
                   "device. [default: one per core]")
@click.option("--out", type=click.Path(path_type=str), default=None,
              help="The zoo's folder (zoo.json, zoo.html; the tasks' analysis folders under tasks/, on each worker's "
                   "disk at this same path). [default: ./lar-prec-out/zoo-N]")
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Also write the zoo's JSON here ('-': stdout).")
@click.option("--html", "html_out", metavar="FILE", default=None, help="Also write the zoo's page here.")
@click.option("--junit", "junit", metavar="FILE", default=None,
              help="Also write JUnit XML here for CI: a test case per cell, failing on a divergence or a regression "
                   "with its numbers, an error for a task that did not finish.")
@click.option("--keep-dumps", is_flag=True, help="Keep the dumps of tasks that found nothing (default: removed on "
                                                 "the worker once the task's summary is made).")
@click.option("--resume/--again", "resume", default=True, show_default=True,
              help="--resume: run only the tasks the store holds no result of (a rerun of the same zoo resumes it); "
                   "--again: run every task again, each result a new sample.")
@speed_options("Rounds of timed runs (no dump) of each finished task: its plain default run and its options, on "
               "the worker's machine while no other task of a zoo runs there; 0: no timing, else 2 to 50.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@handle_errors
def zoo_cmd(manifest: str, store: str | None, scheduler: str | None, connect_timeout: float, workers: int | None, out: str | None,
            json_out: str | None, html_out: str | None, junit: str | None, keep_dumps: bool, resume: bool,
            speed_runs: int, quiet: bool) -> None:
    """Run a model zoo: every model x analysis x configuration x build x device of MANIFEST (TOML),
    each task one analysis on Dask, written into the store as it finishes.

    Tasks the store already holds are not run again (--again runs them all). Failed tasks are
    retried (the manifest's retries; a worker that dies is Dask's allowed-failures) and end
    with a row saying why. Writes zoo.json and zoo.html (the matrix coloured by verdict, each
    cell with output error, root, regressions against the store's history and a link to its
    analysis page). Each finished task is timed (--speed-runs) and its speed judged against the
    store's history on the same CPU model, threads and load_and_run, as check does. Exit code 0
    nothing found, 1 a divergence or a regression (of precision or speed), 2 a bad manifest,
    store or device no worker owns (before anything runs), 3 a task did not finish or the
    scheduler cannot be reached, 130 interrupted (what finished is in the store).
    """
    from lar_prec.outputs import atomic_write_text
    from lar_prec.report.html import write_html
    from lar_prec.report.zoo import zoo_lines
    from lar_prec.zoo.progress import ZooProgress
    from lar_prec.workflows.sweep.speed import check_speed_runs
    from lar_prec.zoo.run import run_zoo

    check_speed_runs(speed_runs)
    if not store:
        raise UsageError("no store named: give --store URL or set LAR_PREC_STORE (the zoo writes every task there)")
    check_report_outputs(json_out, html_out, [manifest], analysis_dir=out)
    check_junit_output(junit, [json_out, html_out], [manifest])
    with ZooProgress(not quiet) as progress:
        data = run_zoo(manifest, store=store, scheduler=scheduler, out=out, keep_dumps=keep_dumps, again=not resume,
                       workers=workers, progress=progress, connect_timeout=connect_timeout, speed_runs=speed_runs)
    if json_out != "-":
        for line in zoo_lines(data):
            click.echo(shown(line))
        if not quiet:
            click.echo(shown(f"zoo folder: {data['out']} (zoo.json, zoo.html, tasks/)"), err=True)
    text = json_text(data, default=str).rstrip("\n")
    if json_out == "-":
        click.echo(text)
    elif json_out:
        atomic_write_text(json_out, text + "\n", what="zoo JSON")
    if html_out:
        write_html(data, html_out, title=f"lar-prec zoo: {data['name']}")
    if junit:
        from lar_prec.report.junit import zoo_junit

        atomic_write_text(junit, zoo_junit(data), what="JUnit XML")
    sys.exit(data["exit_code"])
