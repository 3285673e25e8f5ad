"""The results store's commands: ``check`` (an analysis against its history and a baseline),
``baseline update``, ``history`` and ``store add``. Each imports its workflow when it runs
(SQLAlchemy loads only then), so ``lar-prec --help`` stays fast. docs/history.md has the rule."""
from __future__ import annotations

import sys
from typing import Any

import click

from lar_prec.cli.common import handle_errors
from lar_prec.clisupport import check_junit_output, check_report_outputs
from lar_prec.errors import UsageError
from lar_prec.report.console import shown

_store = click.option("--store", "store", metavar="URL", envvar="LAR_PREC_STORE", default=None,
                      help="The results store: an SQLite file (results.db, sqlite:///PATH) or "
                           "postgresql://USER@HOST:PORT/DB. [default: $LAR_PREC_STORE]")


def _need(store: str | None) -> str:
    if not store:
        raise UsageError("no store named: give --store URL or set LAR_PREC_STORE")
    return store


def _emit(data: Any, json_out: str | None, lines: list) -> None:
    """The lines on stdout (unless the JSON goes there), then --json."""
    from lar_prec.outputs import atomic_write_text, json_text

    if json_out != "-":
        for line in lines:
            click.echo(shown(line))
    text = json_text(data, default=str)
    if json_out == "-":
        click.echo(text, nl=False)
    elif json_out:
        atomic_write_text(json_out, text, what="JSON result")


@click.command("check")
@click.argument("analysis_dir", required=False, type=click.Path(path_type=str))
@_store
@click.option("--baseline", metavar="FILE", default=None,
              help="Also compare with this baseline file (lar-prec baseline update): exit 1 on a regression and on "
                   "an improvement it does not record.")
@click.option("--since", metavar="RUN", default=None, help="Ignore the history before this run (a uid or its prefix).")
@click.option("--min-history", "min_history", type=click.IntRange(min=1), default=3, show_default=True, metavar="N",
              help="Past runs of the series needed before an operator (or its speed) is said to regress or improve.")
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Also write the JSON result here ('-': stdout).")
@click.option("--junit", "junit", metavar="FILE", default=None,
              help="Also write JUnit XML here for CI: a test case per regressed or improved operator (a regression "
                   "fails with its numbers), the run's history, its speed per option and the baseline.")
@handle_errors
def check_cmd(analysis_dir: str | None, store: str | None, baseline: str | None, since: str | None,
              min_history: int, json_out: str | None, junit: str | None) -> None:
    """Did any operator get worse? ANALYSIS_DIR (default: the store's newest run) against its history.

    Compares every operator with its own past in the store for the same model, input and
    configuration on the same kind of device: it regresses when its error leaves its band (the
    jitter shake measured, its floor, the spread of its past), improves when it drops below.
    Lists the regressed operators, the root among them first, with the run where each was last
    good (a sweep: each option on its own). Below --min-history past runs nothing regresses
    yet. An operator whose own repeated runs (one build) differ is named nondeterministic,
    with its spread, never a regression of itself. A run the zoo timed (or a sweep with
    --speed-runs) is also judged on its speed, per option, against the past timed on the same
    CPU model, threads and load_and_run: slower than that past's spread is a regression,
    faster is reported. Exit code 1 on a regression (or, with
    --baseline, an unrecorded improvement), 0 otherwise, 2 when the store or the folder
    cannot be read.
    """
    from lar_prec.report.history import checked_line, speed_lines
    from lar_prec.workflows.history.history import check

    check_report_outputs(json_out, None, [analysis_dir, baseline], make_parents=False)
    check_junit_output(junit, [json_out], [analysis_dir, baseline])
    res = check(_need(store), analysis_dir, baseline=baseline, since=since, min_history=min_history)
    lines = [checked_line(res["run"]), res["verdict"]]
    for v in res["regressed"] + res["improved"]:
        good = v["last_good"] or {}
        where = f"; last good {good.get('created')} ({good.get('build')})" if good else ""
        algo = f"; algorithm {v['algorithm_changed']}" if v["algorithm_changed"] else ""
        opt = f" under {v['option']}" if v.get("option") else ""
        lines.append(f"  {v['verdict']}{' ROOT' if v['root'] else ''} {v['name']} ({v['opr_type']}){opt}: "
                     f"{v['why']}{algo}{where}")
    lines += speed_lines(res["speed"])
    for n in res["nondeterministic"]:
        opt = f" under {n['option']}" if n["option"] else ""
        spread = "NaN/Inf in some runs" if n["nonfinite"] else f"spread {n['spread']:.3g}"
        lines.append(f"  nondeterministic{' SOURCE' if n['source'] else ''} {n['name']} ({n['opr_type']}){opt}: "
                     f"{spread} over {n['runs']} runs of {n['build']}")
    _emit(res, json_out, lines)
    if junit:
        from lar_prec.outputs import atomic_write_text
        from lar_prec.report.junit import check_junit

        atomic_write_text(junit, check_junit(res), what="JUnit XML")
    sys.exit(res["exit_code"])


@click.group("baseline")
def baseline_group() -> None:
    """The CI ratchet: a small text file, one line per model x configuration, to commit."""


@baseline_group.command("update")
@_store
@click.option("--baseline", metavar="FILE", required=True, help="The baseline file to write (kept lines of other models).")
@handle_errors
def baseline_update_cmd(store: str | None, baseline: str) -> None:
    """Write the newest run of every series of the store into the baseline file."""
    from lar_prec.workflows.history.history import update_baseline

    res = update_baseline(_need(store), baseline)
    click.echo(shown(f"wrote {res['file']}: {res['lines']} line(s), {res['changed']} changed"))


@click.command("history")
@_store
@click.option("--model", metavar="NAME|SHA256", default=None, help="The model (default: the store's newest run's).")
@click.option("--op", metavar="KEY|NAME", default=None,
              help="One operator over the whole history (default: the operators that moved most lately).")
@click.option("--diff", "diff", multiple=True, metavar="RUN", help="What changed between two runs: --diff A --diff B.")
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Also write the JSON here ('-': stdout).")
@click.option("--html", "html_out", metavar="FILE", default=None, help="Write the trend page here.")
@click.option("--wide", is_flag=True, help="Every run, operator and column in full (default: the newest 10, "
                                           "cut to 100 columns).")
@handle_errors
def history_cmd(store: str | None, model: str | None, op: str | None, diff: tuple, json_out: str | None,
                html_out: str | None, wide: bool) -> None:
    """Runs of a model over time, an operator's error over builds, where it first left its band,
    and what changed between two runs. Exit code 0, or 2 when the store cannot be read."""
    from lar_prec.report.history import history_lines
    from lar_prec.report.html import write_html
    from lar_prec.workflows.history.history import history

    check_report_outputs(json_out, html_out, [], make_parents=False)
    res = history(_need(store), model=model, op=op, diff=diff)
    lines = history_lines(res, op=op, wide=wide)
    _emit(res, json_out, lines)
    if html_out:
        write_html(res, html_out)
    sys.exit(0)


@click.group("store")
def store_group() -> None:
    """The results store itself."""


@store_group.command("add")
@click.argument("analysis_dir", type=click.Path(path_type=str))
@_store
@handle_errors
def store_add_cmd(analysis_dir: str, store: str | None) -> None:
    """Write an analysis folder already on disk into the store (e.g. after the store was full)."""
    from lar_prec.workflows.history.history import add_analysis

    res = add_analysis(_need(store), analysis_dir, argv=tuple(sys.argv))
    click.echo(shown(f"run {res['run'][:12]}: " + ("added" if res["added"] else res["why"])))
