"""What the commands of the ``lar-prec`` command line share: ``handle_errors`` (every way a
command ends mapped to the exit codes of ``shared/design.md``), the options of the analysis
commands and of remote runs, and the writers of a result (terminal, ``--json``, ``--html``)."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

import click

from lar_prec.clisupport import console
from lar_prec.errors import LarPrecError
from lar_prec.report.console import shown

F = TypeVar("F", bound=Callable[..., Any])


def _one_line(text: str) -> str:
    # messages carry paths and names from the user's files: control characters shown escaped
    return shown(" ".join(text.split("\n")[0].split()))


def lines_shown(text: str) -> str:
    return "\n".join(shown(line) for line in text.splitlines())


def _exit_interrupted() -> "None":
    click.echo("Error: interrupted (Ctrl-C)", err=True)
    sys.exit(130)


def _exit_internal(exc: BaseException) -> "None":
    """Exit 4 for a bug of lar-prec: one line, the traceback saved to a file named there.

    The file is ``$TMPDIR/lar-prec-crash-*.txt`` (outputs.save_crash_report): the only place
    known to be writable whatever failed. LAR_PREC_TRACEBACK=1 also prints the traceback.
    """
    from lar_prec.outputs import save_crash_report

    what = f"{type(exc).__name__}: {_one_line(str(exc))}".rstrip(": ")
    try:
        where = f"traceback saved to {save_crash_report(exc)}"
    except Exception as e:  # noqa: BLE001 (the disk may be what failed)
        where = f"the traceback could not be saved ({type(e).__name__}: {_one_line(str(e))})"
    if os.environ.get("LAR_PREC_TRACEBACK"):
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__)
    click.echo(shown(f"Error: internal error of lar-prec: {what}; {where}"), err=True)
    sys.exit(4)


def handle_errors(func: F) -> F:
    """Map every way a command can end to the exit codes of ``shared/design.md``.

    LarPrecError: ``Error: <one line>`` and its exit code (2 input, 3 a run failed, 130);
    Ctrl-C: 130; any other exception is a bug of lar-prec: exit 4, one line, the traceback
    saved to a file (never 0 or 1, which scripts read as a verdict). click's own exceptions
    (usage errors, --help) and sys.exit pass through.
    """
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except LarPrecError as exc:
            if exc.report is not None:  # the analysis finished, writing its report did not: verdict first
                from lar_prec.report.terminal import render_result

                render_result(exc.report, report_out())
            msg = _one_line(str(exc)) or type(exc).__name__
            click.echo(f"Error: {msg}", err=True)
            tail = getattr(exc, "stderr_tail", "")
            if tail:
                click.echo(lines_shown(tail.rstrip()), err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            _exit_interrupted()
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 (MemoryError too: no check named an input)
            _exit_internal(exc)

    return wrapper  # type: ignore[return-value]


def view() -> dict:
    """How the command's terminal output looks, from the options every command has (the
    group adds those a command does not declare itself: :func:`add_view_options`): ``wide``
    (every table column), ``explain`` (the threshold's rule in full), ``verbose``, ``quiet``."""
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta.get(_VIEW, {}) if ctx is not None else {}
    return {"wide": bool(meta.get("wide")), "explain": bool(meta.get("explain") or meta.get("verbose")),
            "verbose": bool(meta.get("verbose")), "quiet": bool(meta.get("quiet"))}


_VIEW = "lar_prec.view"


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta.setdefault(_VIEW, {})[param.name] = value
    if param.name == "verbose" and value:  # the package's log (what runs, what is skipped) on stderr
        import logging

        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("lar-prec: %(message)s"))
        log = logging.getLogger("lar_prec")
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    return value


def add_view_options(command: click.Command) -> None:
    """``--wide``, ``--explain``, ``-v/--verbose`` and ``-q/--quiet`` on ``command`` (and each
    subcommand of a group), where it does not declare them itself; their values go to the
    context (:func:`view`), not to the command's function (its signature stays as it is)."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_view_options(sub)
        return
    names = {o for p in command.params for o in getattr(p, "opts", ())}
    for opts, name, help_ in (
            (["--wide"], "wide", "Every column of every table (default: the optional ones are left out to fit "
                                 "100 columns; the JSON has them all)."),
            (["--explain"], "explain", "Print the threshold's rule in full (default: one line; the JSON has it "
                                       "all)."),
            (["-v", "--verbose"], "verbose", "More detail on the terminal: --explain, and the log of what runs."),
            (["-q", "--quiet"], "quiet", "No progress or notes on stderr.")):
        if not names & set(opts):
            command.params.append(click.Option([*opts, name], is_flag=True, expose_value=False, callback=_remember,
                                               show_default=False, help=help_))
        else:  # the command's own (e.g. -q): its value still reaches view()
            for p in command.params:
                if set(getattr(p, "opts", ())) & set(opts) and p.callback is None:
                    p.callback = _remember


def report_out() -> Any:
    """Where the report's tables go: a rich console on a terminal (colour unless ``NO_COLOR``,
    wrapped to its width), plain aligned text into a pipe or file (no rich import: most of a
    small compare's start-up); tables keep to 100 columns unless ``--wide``."""
    from lar_prec.report.console import PlainOut, RichOut

    out = click.get_text_stream("stdout")
    v = view()
    if out.isatty():
        return RichOut(console(), wide=v["wide"], explain=v["explain"])
    return PlainOut(out, wide=v["wide"], explain=v["explain"])


def finish_analysis(analysis: Any, json_out: str | None, html_out: str | None, quiet: bool,
                    store: str | None = None) -> None:
    """Render an Analysis: terminal report first (the verdict survives a failing write),
    then --json and --html, each written atomically, then the store (``--store``); exit with its code."""
    from lar_prec.report.terminal import render_terminal

    if json_out != "-":
        render_terminal(analysis.report, report_out())
    if not quiet:
        click.echo(shown(f"analysis folder: {analysis.dir} (report.json, report.html, one folder per run)"),
                   err=True)
    write_outputs(analysis.report, json_out, html_out, (analysis.json_path, analysis.html_path))
    to_store(store, analysis.report)
    sys.exit(analysis.exit_code)


def to_store(store: str | None, result: Any, exit_code: int | None = None) -> None:
    """The finished analysis (a Report, or the JSON of quant/mixed) into the results store, after
    its outputs are written, when ``--store``/``LAR_PREC_STORE`` names one; without one nothing
    happens. A StoreError (exit 2) leaves nothing of it in the store and the analysis folder whole
    (``lar-prec store add DIR`` writes it later). Ends with one line on stderr naming the run
    stored (its uid prefix, what ``history``/``check``/``diff`` take), its operators and the store."""
    if store:
        # SQLAlchemy and the store load only when a store is named: every other run starts as before
        from lar_prec.workflows.history.history import stored_result

        done = stored_result(store, result, argv=tuple(sys.argv), exit_code=exit_code)
        click.echo(shown(f"stored run {done['uid'][:12]} ({done['operators']} operators) in {done['store']}"),
                   err=True)


def speed_options(runs_help: str, budget_help: str | None = None) -> Callable[[F], F]:
    """``--speed-runs R`` (and, with ``budget_help``, ``--speed-budget F``) of the commands that
    time what they ran: the same defaults (workflows/sweep/speed.py's DEFAULT_SPEED_RUNS and
    DEFAULT_SPEED_BUDGET) and the same parsing everywhere, each command's own help."""
    def deco(func: F) -> F:
        if budget_help is not None:
            func = click.option("--speed-budget", "speed_budget", default="0.15", show_default=True, metavar="F",
                                help=budget_help)(func)
        return click.option("--speed-runs", "speed_runs", type=int, default=3, show_default=True, metavar="R",
                            help=runs_help)(func)
    return deco


def store_option(func: F) -> F:
    """``--store URL`` (or ``LAR_PREC_STORE``): where an analysis command writes its summary."""
    return click.option("--store", "store", metavar="URL", envvar="LAR_PREC_STORE", default=None,
                        help="Also write this analysis' summary into a results store: an SQLite file "
                             "(results.db, sqlite:///PATH) or postgresql://USER@HOST:PORT/DB. "
                             "[default: $LAR_PREC_STORE; none]")(func)


def write_outputs(report: Any, json_out: str | None, html_out: str | None,
                  written: "tuple[Path | None, Path | None]" = (None, None)) -> None:
    """--json (a file, or stdout for '-') and --html of any command: the one JSON writer and
    the one page, both written atomically. ``written``: the analysis folder's report.json and
    report.html of this very report, copied rather than made again."""
    from lar_prec.outputs import atomic_write_text
    from lar_prec.report.model import write_json

    made_json = _made(written[0]) if json_out is not None else None
    made_html = _made(written[1]) if html_out is not None else None
    if json_out is not None:
        if made_json is None:
            write_json(report, json_out, stream=click.get_text_stream("stdout"))
        elif json_out == "-":
            out = click.get_text_stream("stdout")
            out.write(made_json)
            out.flush()
        else:
            Path(json_out).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(json_out, made_json, what="JSON report")
    if html_out is not None:
        if made_html is None:
            from lar_prec.report.html import write_html  # the page's module only for a page

            write_html(report, html_out)
        else:
            Path(html_out).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(html_out, made_html, what="HTML report")


def _made(path: "Path | None") -> "str | None":
    """The text of a report file the analysis wrote (None: none, or unreadable now)."""
    try:
        return path.read_text(encoding="utf-8") if path is not None else None
    except (OSError, UnicodeDecodeError):
        return None


def advice_outputs(data: dict, render: Any, json_out: str | None, html_out: str | None) -> None:
    """The terminal view (unless the JSON goes to stdout), --json and --html of a command whose
    result is its own JSON (``quant``, ``mixed``: no Report)."""
    from lar_prec.outputs import atomic_write_text, json_text
    from lar_prec.report.html import write_html

    if json_out != "-":  # the verdict first: it survives a failing write
        render(data, report_out())
    if html_out:
        write_html(data, html_out)
    if json_out == "-":
        click.echo(json_text(data), nl=False)
    elif json_out:
        atomic_write_text(json_out, json_text(data), what="JSON result")


_workflow_options = [
    click.option("--input", "inputs", multiple=True, metavar="SPEC",
                 help="name:file.npy | name:{1,3,8,8} (seeded random data) | name:[1,2,3] | "
                      "name:random[LOW,HIGH]@SEED (the model's shape); repeat or join with ';'. "
                      "Without --input every input gets seeded random data (random[-1,1], integers random[0,9])."),
    click.option("--threshold", default=None, metavar="auto|band|X",
                 help="'auto': roots by local error (each operator over its own noise floor) when it is "
                      "measured, else the dump-only rule; 'band': the dump-only rule (one band per dtype) "
                      "always; a number: max_err above which a var diverges (compare_binary_iodump -e X; "
                      "0 = bitwise)."),
    click.option("--no-local", is_flag=True,
                 help="Do not measure the local error of every operator (one more build and run of the model)."),
    click.option("--local-checks", is_flag=True,
                 help="Also run the local reference self-check and test-fed check (two more runs)."),
    click.option("--out", type=click.Path(path_type=str), default=None,
                 help="Analysis folder (runs, inputs, report.json, report.html); the previous analysis there is "
                      "replaced, any other non-empty folder refused. [default: ./lar-prec-out/<command>-N]"),
    click.option("--keep-previous", is_flag=True,
                 help="Keep the previous analysis of --out as OUT.prev (by default it is removed once the new "
                      "one is complete)."),
    click.option("--json", "json_out", metavar="FILE|-", default=None, help="Also write the JSON report here ('-': stdout)."),
    click.option("--html", "html_out", metavar="FILE", default=None, help="Also write the HTML report here."),
    click.option("--lar", "lar_path", metavar="PATH", default=None,
                 help="load_and_run to use ('bundled' for python -m lar_prec.lar). "
                      "[default: $LAR_PREC_LOAD_AND_RUN, load_and_run on PATH, bundled]"),
    click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
                 help="Kill a run (its whole process group) after S seconds."),
    click.option("--lar-args", "lar_args", multiple=True, metavar="FLAGS",
                 help="Extra load_and_run flags for every run, e.g. --lar-args '--multithread 2' "
                      "(or put them after --)."),
    click.option("--seed", type=int, default=0, show_default=True,
                 help="Seed of random inputs (each input's is SEED + its position, unless it says @SEED)."),
    click.option("-q", "--quiet", is_flag=True, help="No progress bars or folder note on stderr."),
    click.option("--keep-going", is_flag=True,
                 help="Make every run even after one failed (default: no run starts after a failure)."),
]


def workflow_options(func: F) -> F:
    for opt in reversed(_workflow_options):
        func = opt(func)
    return func


# ---- remote runs (issue 15): the same three options on run, naive-vs-default, shake ----

_remote_options = [
    click.option("--remote", "remote", metavar="ssh:[user@]host[:port]|adb[:serial]", default=None,
                 help="Run load_and_run on this device; --lar is then its path on the device "
                      "[default there: load_and_run on the device's PATH]."),
    click.option("--remote-dir", "remote_dir", metavar="DIR", default=None,
                 help="The device's working folder [default: ~/.cache/lar-prec over ssh, "
                      "/data/local/tmp/lar-prec over adb]."),
    click.option("--keep-remote", is_flag=True, help="Keep each run's folder on the device after pulling it."),
]


def remote_options(func: F) -> F:
    for opt in reversed(_remote_options):
        func = opt(func)
    return func


def remote_from_options(remote: str | None, lar_path: str | None, remote_dir: str | None, keep_remote: bool) -> Any:
    from lar_prec.run.device import remote_spec

    return remote_spec(remote, lar_path, remote_dir, keep_remote)
