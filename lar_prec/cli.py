"""The ``lar-prec`` command line: thin click commands over the library.

This is the only module that imports click. Each command parses options, makes one library
call, renders the result and maps it to the exit codes of ``shared/design.md``:
0 no divergence, 1 divergence found, 2 usage or input error, 3 a load_and_run run failed,
4 internal error of lar-prec (traceback saved to a file), 130 interrupted.
"""
from __future__ import annotations

import gc
import os
import sys
from typing import Any, Callable, TypeVar

import click

from lar_prec import __version__
from lar_prec.clisupport import ProgressBars, check_report_outputs, console, input_paths, pass_through_flags
from lar_prec.errors import LarPrecError, UsageError
from lar_prec.report.console import shown

F = TypeVar("F", bound=Callable[..., Any])


def _one_line(text: str) -> str:
    # messages carry paths and names from the user's files: control characters shown escaped
    return shown(" ".join(text.split("\n")[0].split()))


def _lines_shown(text: str) -> str:
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

                render_result(exc.report, _report_out())
            msg = _one_line(str(exc)) or type(exc).__name__
            click.echo(f"Error: {msg}", err=True)
            tail = getattr(exc, "stderr_tail", "")
            if tail:
                click.echo(_lines_shown(tail.rstrip()), err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            _exit_interrupted()
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 (MemoryError too: no check named an input)
            _exit_internal(exc)

    return wrapper  # type: ignore[return-value]


class _Group(click.Group):
    """The command group: the same error mapping as handle_errors around every command,
    so a command or group code that forgets it still never turns a crash into 1."""

    def invoke(self, ctx: click.Context) -> Any:
        return handle_errors(super().invoke)(ctx)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from lar_prec.compare.engine.scan import kernel_state

        click.echo(f"lar-prec {__version__} (compare: {kernel_state()})")
        ctx.exit()


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version (and whether compare runs its C kernel) and exit.")
def cli() -> None:
    """Find where MegEngine inference loses precision.

    Runs load_and_run under the reference kernels (MGB_USE_MEGDNN_DBG=2), the default
    kernels, --reproducible and repeated runs; dumps every operator's output; compares the
    dumps and names the root variable where the divergence starts.

    Exit codes: 0 no divergence, 1 divergence found, 2 usage or input error,
    3 a load_and_run run failed, 4 internal error of lar-prec (the traceback is saved to a
    file whose path is printed), 130 interrupted. A closed stdout or stderr pipe ends
    that output silently and keeps the verdict's code.
    """


# ---- commands are added below, one section per issue ----


# ---- workflow commands (naive-vs-default, shake) ----


def _report_out() -> Any:
    """Where the report's tables go: a rich console on a terminal (colour, wrapped to its
    width), plain aligned text into a pipe or file (no rich import: most of a small compare's
    start-up)."""
    out = click.get_text_stream("stdout")
    return console() if out.isatty() else out


def _finish_analysis(analysis: Any, json_out: str | None, html_out: str | None, quiet: bool) -> None:
    """Render an Analysis: terminal report first (the verdict survives a failing write),
    then --json and --html, each written atomically; exit with its code."""
    from lar_prec.report.terminal import render_terminal

    if json_out != "-":
        render_terminal(analysis.report, _report_out())
    if not quiet:
        click.echo(shown(f"analysis folder: {analysis.dir} (report.json, report.html, one folder per run)"),
                   err=True)
    _write_outputs(analysis.report, json_out, html_out)
    sys.exit(analysis.exit_code)


_workflow_options = [
    click.option("--input", "inputs", multiple=True, metavar="SPEC",
                 help="name:file.npy | name:{1,3,8,8} (seeded random data) | name:[1,2,3]; repeat or join with ';'."),
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
                 help="Analysis folder (runs, inputs, report.json, report.html); a non-empty one gets a new "
                      "numbered subfolder. [default: ./lar-prec-out/<command>-N]"),
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
    click.option("--seed", type=int, default=0, show_default=True, help="Seed of random data for shape-only inputs."),
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


def _remote_spec(remote: str | None, lar_path: str | None, remote_dir: str | None, keep_remote: bool) -> Any:
    from lar_prec.run.device import remote_spec

    return remote_spec(remote, lar_path, remote_dir, keep_remote)


@cli.command("naive-vs-default", context_settings={"ignore_unknown_options": True})
@click.argument("model", type=click.Path(path_type=str))
@click.argument("lar_flags", nargs=-1, type=click.UNPROCESSED, metavar="[-- LOAD_AND_RUN_FLAGS]")
@workflow_options
@click.option("--text-dump", is_flag=True, help="Also make a --io-dump run and use its dependency edges.")
@click.option("-j", "--jobs", type=click.IntRange(1, 16), default=1, show_default=True, help="Runs at once.")
@remote_options
@handle_errors
def naive_vs_default_cmd(model: str, lar_flags: tuple, inputs: tuple, threshold: str | None, out: str | None,
                         json_out: str | None, html_out: str | None, lar_path: str | None, timeout: float | None,
                         lar_args: tuple, seed: int, quiet: bool, keep_going: bool, no_local: bool,
                         local_checks: bool, text_dump: bool, jobs: int, remote: str | None, remote_dir: str | None,
                         keep_remote: bool) -> None:
    """Which operator computes wrongly? Reference kernels against the default ones.

    Runs MODEL with MGB_USE_MEGDNN_DBG=2 (naive reference kernels) and with the default
    kernels, each in a fresh process with --bin-io-dump, compares every variable and names
    the root variables where the divergence starts. Exit code 0 no divergence, 1 divergence
    found, 2 usage or input error, 3 a load_and_run run failed.
    """
    from lar_prec.workflows.naive_vs_default import naive_vs_default

    spec = _remote_spec(remote, lar_path, remote_dir, keep_remote)
    check_report_outputs(json_out, html_out, input_paths(model, inputs, None if spec else lar_path),
                         analysis_dir=out)
    with ProgressBars(not quiet, "naive-vs-default") as progress:
        analysis = naive_vs_default(model, inputs, out=out, threshold=threshold or "auto", lar=lar_path,
                                    timeout=timeout, extra_flags=pass_through_flags(lar_args, lar_flags),
                                    text_dump=text_dump, jobs=jobs, seed=seed, progress=progress,
                                    keep_going=keep_going, remote=spec, local=not no_local,
                                    local_checks=local_checks)
    _finish_analysis(analysis, json_out, html_out, quiet)


@cli.command("shake", context_settings={"ignore_unknown_options": True})
@click.argument("model", type=click.Path(path_type=str))
@click.argument("lar_flags", nargs=-1, type=click.UNPROCESSED, metavar="[-- LOAD_AND_RUN_FLAGS]")
@workflow_options
@click.option("-n", "--repeat", type=click.IntRange(2, 1000), default=3, show_default=True, help="Runs of the configuration.")
@click.option("--config", "config_name", type=click.Choice(["default", "reproducible", "fast-run"]), default="default",
              show_default=True, help="Configuration repeated: default kernels, --reproducible, or --fast-run.")
@click.option("-j", "--jobs", type=click.IntRange(1, 16), default=1, show_default=True,
              help="Runs at once (concurrent runs disturb each other's fast-run timing).")
@click.option("--no-explain", is_flag=True, help="Do not rerun to find the cause of jitter.")
@click.option("--keep-all", is_flag=True,
              help="Keep every run's whole dump (default: run 1 whole, later runs only the vars that differ from it).")
@click.option("--threads", "threads", default=None, metavar="N,M,...",
              help="Threads mode: the same input under each --multithread count (e.g. 1,2,4), against 1 thread.")
@click.option("--batch-positions", "batch_positions", type=click.IntRange(2, 64), default=None, metavar="N",
              help="Batch mode: the input alone, then at each position of a batch of N; the same sample must "
                   "give the same output wherever it sits.")
@click.option("--observer", is_flag=True,
              help="Also run once without --bin-io-dump (outputs only): do the dumps perturb the run?")
@remote_options
@handle_errors
def shake_cmd(model: str, lar_flags: tuple, inputs: tuple, threshold: str | None, out: str | None,
              json_out: str | None, html_out: str | None, lar_path: str | None, timeout: float | None,
              lar_args: tuple, seed: int, quiet: bool, keep_going: bool, no_local: bool, local_checks: bool,
              repeat: int, config_name: str, jobs: int, no_explain: bool, keep_all: bool, threads: str | None,
              batch_positions: int | None, observer: bool, remote: str | None, remote_dir: str | None,
              keep_remote: bool) -> None:
    """Does the output jitter from run to run, where does it start, and what removes it?

    Runs MODEL --repeat times with one configuration, each in a fresh process. Jitter is any
    difference from run 1 (bitwise by default); roots are the first variables that differ
    while their inputs are equal, each with a cause (docs/jitter-causes.md): the algorithm
    each run chose (fast-run runs write their own --fast-run-algo-policy cache), a
    non-deterministic kernel (confirmed by pinned and --reproducible reruns), the thread
    count (--threads) or the batch position (--batch-positions). Runs after the first keep
    only the vars that differ from run 1 (--keep-all keeps every dump).
    Exit code 0 no jitter, 1 jitter found, 2 usage or input error, 3 a run failed.
    """
    from lar_prec.workflows.shake import shake

    spec = _remote_spec(remote, lar_path, remote_dir, keep_remote)
    check_report_outputs(json_out, html_out, input_paths(model, inputs, None if spec else lar_path),
                         analysis_dir=out)
    with ProgressBars(not quiet, "shake") as progress:
        analysis = shake(model, inputs, repeat=repeat, config=config_name, jobs=jobs, out=out,
                         threshold=0.0 if threshold is None else threshold, explain=not no_explain,
                         lar=lar_path, timeout=timeout, extra_flags=pass_through_flags(lar_args, lar_flags), seed=seed,
                         progress=progress, keep_going=keep_going, remote=spec, local=not no_local,
                         local_checks=local_checks, keep_all=keep_all, threads=threads,
                         batch_positions=batch_positions, observer=observer)
    _finish_analysis(analysis, json_out, html_out, quiet)


# ---- devices (issue 15) ----


@cli.command("devices")
@click.argument("model", type=click.Path(path_type=str))
@click.argument("lar_flags", nargs=-1, type=click.UNPROCESSED, metavar="[-- LOAD_AND_RUN_FLAGS]")
@workflow_options
@click.option("--remote", "remotes", multiple=True, metavar="TARGET[=LAR]",
              help="A device: ssh:[user@]host[:port] or adb[:serial], optionally =PATH of its load_and_run "
                   "(else --lar, else load_and_run on its PATH). Repeatable.")
@click.option("--local", "local", is_flag=True, help="Also run on this machine (load_and_run from "
              "$LAR_PREC_LOAD_AND_RUN, PATH or bundled).")
@click.option("--reference", default="local", show_default=True, metavar="TARGET",
              help="Whose naive run (MGB_USE_MEGDNN_DBG=2) is the reference: 'local' or a --remote target.")
@click.option("--config", "config_name", type=click.Choice(["naive", "default", "reproducible", "fast-run"]),
              default="default", show_default=True, help="Configuration run on every target.")
@click.option("--remote-dir", "remote_dir", metavar="DIR", default=None, help="The devices' working folder.")
@click.option("--keep-remote", is_flag=True, help="Keep each run's folder on the devices after pulling it.")
@handle_errors
def devices_cmd(model: str, lar_flags: tuple, inputs: tuple, threshold: str | None, out: str | None,
                json_out: str | None, html_out: str | None, lar_path: str | None, timeout: float | None,
                lar_args: tuple, seed: int, quiet: bool, keep_going: bool, no_local: bool, local_checks: bool,
                remotes: tuple, local: bool, reference: str, config_name: str, remote_dir: str | None,
                keep_remote: bool) -> None:
    """Does MODEL compute the same on several devices? One configuration on every target.

    Runs --config on each target in parallel (one worker per target), compares each with the
    naive run of --reference (default: this machine), and reports per target the final-output
    error and the root; the HTML page adds a target-by-variable table. Targets whose graphs
    differ pair vars by name. Exit code 0 every target agrees, 1 one diverges, 2 usage or
    input error, 3 a run or a device failed.
    """
    from lar_prec.workflows.devices import devices, parse_targets

    if local_checks:  # --no-local is accepted (nothing to turn off): devices measures no local error
        raise UsageError("devices does not measure local error; --local-checks applies to naive-vs-default, "
                         "shake and compare --model")

    targets = parse_targets(remotes, local=local, lar=lar_path, remote_dir=remote_dir, keep_remote=keep_remote)
    check_report_outputs(json_out, html_out, input_paths(model, inputs, None), analysis_dir=out)
    with ProgressBars(not quiet, "devices") as progress:
        analysis = devices(model, inputs, targets, reference=reference, config=config_name, out=out,
                           # without --remote, --lar can only name this machine's binary (a missing one is
                           # exit 2); with --remote it is the devices' path, and --local runs the usual lookup
                           threshold=threshold or "auto", lar=lar_path if not remotes else None, timeout=timeout,
                           extra_flags=pass_through_flags(lar_args, lar_flags), seed=seed, progress=progress)
    _finish_analysis(analysis, json_out, html_out, quiet)


@cli.command("sweep", context_settings={"ignore_unknown_options": True})
@click.argument("model", type=click.Path(path_type=str))
@click.argument("lar_flags", nargs=-1, type=click.UNPROCESSED, metavar="[-- LOAD_AND_RUN_FLAGS]")
@click.option("--input", "inputs", multiple=True, metavar="SPEC",
              help="name:file.npy | name:{1,3,8,8} (seeded random data) | name:[1,2,3]; repeat or join with ';'.")
@click.option("--options", "options", default=None, metavar="LIST",
              help="Options to try, comma-separated (e.g. nhwcd4,ioc16,weight-preprocess). "
                   "[default: the layouts of this CPU, ioc16, io16xc32, conv-bias fusions, weight-preprocess, "
                   "fuse-preprocess, const-shape, record-comp-seq]")
@click.option("-j", "--jobs", type=click.IntRange(1, 16), default=1, show_default=True, help="Runs at once.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=120.0, show_default=True,
              metavar="S", help="Seconds per run; a run still going is killed and its option reported as hung.")
@click.option("--out", type=click.Path(path_type=str), default=None,
              help="Analysis folder. [default: ./lar-prec-out/sweep-N]")
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Also write the JSON report here ('-': stdout).")
@click.option("--html", "html_out", metavar="FILE", default=None, help="Also write the HTML report here.")
@click.option("--lar", "lar_path", metavar="PATH", default=None,
              help="load_and_run to use ('bundled' for python -m lar_prec.lar).")
@click.option("--lar-args", "lar_args", multiple=True, metavar="FLAGS",
              help="Extra load_and_run flags for every run, the reference too.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of random data for shape-only inputs.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars or folder note on stderr.")
@click.option("--no-local", is_flag=True,
              help="Do not measure the local error of every operator under each option (one build of the "
                   "layerwise model, one run of it per option).")
@remote_options
@handle_errors
def sweep_cmd(model: str, lar_flags: tuple, inputs: tuple, options: str | None, jobs: int, timeout: float,
              out: str | None, json_out: str | None, html_out: str | None, lar_path: str | None, lar_args: tuple,
              seed: int, quiet: bool, no_local: bool, remote: str | None, remote_dir: str | None,
              keep_remote: bool) -> None:
    """Which load_and_run optimisation option changes the result, and where?

    Runs MODEL once with the naive kernels on the plain graph (the reference), then with the
    default kernels under each option that applies, each in its own process with --timeout.
    Each option's dump is paired with the reference by var name, brought back to NCHW and
    compared; an option that diverges is rerun with the naive kernels to tell "a kernel is
    wrong under this option" from "the option changes the math". Unless --no-local, the
    layerwise model is built once and run under each option on the reference's values: an
    operator whose local error exceeds its floor is the option's root. Exit code 0 no option
    diverges, 1 an option diverges, crashes or hangs, 2 usage or input error, 3 the
    reference run failed.
    """
    from lar_prec.workflows.sweep_options import parse_options
    from lar_prec.workflows.sweep import sweep

    parse_options(options)  # a bad name fails before anything runs
    spec = _remote_spec(remote, lar_path, remote_dir, keep_remote)
    check_report_outputs(json_out, html_out, input_paths(model, inputs, None if spec else lar_path),
                         analysis_dir=out)
    with ProgressBars(not quiet, "sweep") as progress:
        analysis = sweep(model, inputs, options=options, out=out, lar=lar_path, timeout=timeout,
                         extra_flags=pass_through_flags(lar_args, lar_flags), jobs=jobs, seed=seed, progress=progress,
                         remote=spec, local=not no_local)
    _finish_analysis(analysis, json_out, html_out, quiet)


# ---- run commands ----


@cli.command("run")
@click.argument("model", type=click.Path(path_type=str))
@click.option("--config", "config_name", type=click.Choice(["naive", "default", "reproducible", "fast-run"]),
              default="default", show_default=True,
              help="naive: MGB_USE_MEGDNN_DBG=2 --cpu; reproducible: --reproducible; fast-run: --fast-run.")
@click.option("--input", "inputs", multiple=True, metavar="SPEC",
              help="name:file.npy | name:{1,3,8,8} (seeded random) | name:[1,2,3]; repeat or join with ';'.")
@click.option("--text-dump", is_flag=True, help="--io-dump a text file instead of --bin-io-dump (its own run).")
@click.option("--out", type=click.Path(path_type=str), default=None,
              help="Analysis folder; an existing non-empty one gets a new numbered subfolder. "
                   "[default: ./lar-prec-out/run-N]")
@click.option("--lar", "lar_path", metavar="PATH", default=None,
              help="load_and_run to use ('bundled' for python -m lar_prec.lar). "
                   "[default: $LAR_PREC_LOAD_AND_RUN, load_and_run on PATH, bundled]")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Kill the run (its whole process group) after S seconds.")
@click.option("--lar-args", "lar_args", multiple=True, metavar="FLAGS",
              help="Extra load_and_run flags, e.g. --lar-args '--multithread 2'.")
@click.option("--env", "env_items", multiple=True, metavar="NAME=VALUE",
              help="Extra environment for the run (-NAME removes a variable).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of random data for shape-only inputs.")
@remote_options
@handle_errors
def run_cmd(model: str, config_name: str, inputs: tuple, text_dump: bool, out: str | None, lar_path: str | None,
            timeout: float | None, lar_args: tuple, env_items: tuple, seed: int, remote: str | None,
            remote_dir: str | None, keep_remote: bool) -> None:
    """Run load_and_run once on MODEL and keep its dump and run.json.

    Prints the run folder. Exit code 0 when the run succeeded, 3 when load_and_run failed
    (crash, error, timeout: its stderr tail is shown and kept in the run folder), 2 for
    usage or input errors.
    """
    from lar_prec.run.argv import parse_env_assignments, split_lar_args
    from lar_prec.run.once import run_single

    result = run_single(model, inputs, config_name, out, lar=lar_path, text_dump=text_dump, timeout=timeout,
                        extra_flags=split_lar_args(lar_args), extra_env=parse_env_assignments(env_items), seed=seed,
                        remote=_remote_spec(remote, lar_path, remote_dir, keep_remote))
    click.echo(shown(str(result.dir)))
    what = result.text_dump if result.text_dump is not None else result.dump_dir
    click.echo(shown(f"ok: {result.config} run in {result.seconds:.2f} s; dump: {what}"), err=True)


# ---- compare / tree commands ----


def _write_outputs(report: Any, json_out: str | None, html_out: str | None) -> None:
    """--json (a file, or stdout for '-') and --html of any command: the one JSON writer and
    the one page, both written atomically."""
    from lar_prec.report.html import write_html
    from lar_prec.report.model import write_json

    if json_out is not None:
        write_json(report, json_out, stream=click.get_text_stream("stdout"))
    if html_out is not None:
        write_html(report, html_out)


@cli.command("compare")
@click.argument("dir_a", type=click.Path(path_type=str))
@click.argument("dir_b", type=click.Path(path_type=str))
@click.option("--threshold", default="auto", show_default=True, metavar="auto|band|X",
              help="max_err above which a var diverges: 'auto' (from the data, per dtype; with --model, roots "
                   "by local error), 'band' (the dump-only rule even with --model) or a number, "
                   "like compare_binary_iodump -e X; 0 means bitwise.")
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Write the JSON report (design.md schema); '-' for stdout.")
@click.option("--html", "html_out", metavar="FILE", default=None, help="Write the HTML report (one offline file).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "megengine"]), default="table", show_default=True,
              help="stdout: the summary tables, one CSV row per var, or what compare_binary_iodump prints "
                   "(for accuracy_shake_var_tree and `lar-prec tree`).")
@click.option("--text-dump", type=click.Path(path_type=str), default=None, help="A --io-dump text file of the same model: adds its dependency edges.")
@click.option("-j", "--jobs", type=click.IntRange(1, 64), default=None,
              help="Worker processes for big dumps (default: one per CPU; dumps under 48 MB use one).")
@click.option("--all", "all_vars", is_flag=True, help="Table: list vars in execution order, ok ones too, not the most divergent.")
@click.option("--pair", "pair", type=click.Choice(["auto", "id", "name"]), default="auto", show_default=True,
              help="How vars of A and B are matched: by var id (two runs of one graph), by var name (graphs "
                   "rewritten by different load_and_run options; B's transformed layouts are brought back to "
                   "NCHW), or auto: id when both folders come from the same graph, else name.")
@click.option("--model", "model", type=click.Path(path_type=str), default=None,
              help="The model the B side ran (A is the reference): adds the local error of every operator and "
                   "roots by it (--threshold auto), with a repro folder per root.")
@click.option("--config", "local_config", type=click.Choice(["default", "reproducible", "fast-run", "naive"]),
              default="default", show_default=True, help="With --model: the configuration B ran under.")
@click.option("--out", "local_out", type=click.Path(path_type=str), default=None,
              help="With --model: folder for the local analysis and repros. [default: ./lar-prec-out/compare-N]")
@click.option("--no-local", is_flag=True, help="With --model: do not measure local error.")
@click.option("--local-checks", is_flag=True, help="With --model: also run the two extra local checks.")
@click.option("--fast-run-algo-policy", "algo_policy", type=click.Path(path_type=str), default=None, metavar="CACHE",
              help="With --model: the algorithm cache B's fast-run wrote (load_and_run --fast-run-algo-policy); "
                   "the layerwise run replays B's algorithm choices.")
@click.option("--lar", "lar_path", metavar="PATH", default=None,
              help="With --model: the load_and_run B ran, for the layerwise run ('bundled' for python -m "
                   "lar_prec.lar). [default: bundled]")
@handle_errors
def compare_cmd(dir_a: str, dir_b: str, threshold: str, json_out: str | None, html_out: str | None, fmt: str,
                text_dump: str | None, jobs: int | None, all_vars: bool, pair: str, model: str | None,
                local_config: str, local_out: str | None, no_local: bool, local_checks: bool,
                algo_policy: str | None, lar_path: str | None) -> None:
    """Compare two --bin-io-dump folders and name the root variables.

    Exit code 0 when every var agrees within the threshold, 1 when any var diverges (or has
    NaN/Inf in other places, another shape or dtype, or exists on one side only), 2 on bad input.
    """
    from lar_prec.report.model import exit_code
    from lar_prec.report.terminal import render_csv, render_terminal
    from lar_prec.workflows.compare import check_model_options, compare_dumps

    check_model_options(model, algo_policy=algo_policy, lar=lar_path)
    check_report_outputs(json_out, html_out, [dir_a, dir_b, text_dump, algo_policy,
                                              lar_path if lar_path != "bundled" else None], make_parents=False,
                         analysis_dir=local_out)
    compare_kw = dict(threshold=threshold, text_dump=text_dump, jobs=jobs, pairing=pair, paths=bool(html_out))
    if model:
        # the layerwise machinery loads only when it runs: a dump-only compare starts ~40 ms sooner
        from lar_prec.workflows.compare_local import compare_with_model

        found = compare_with_model(dir_a, dir_b, model, config=local_config, out=local_out, local=not no_local,
                                   local_checks=local_checks, algo_policy=algo_policy, lar=lar_path, **compare_kw)
    else:
        found = compare_dumps(dir_a, dir_b, **compare_kw)
    tree, report = found.tree, found.report
    if json_out != "-":
        if fmt == "csv":
            click.echo(render_csv(report), nl=False)
        elif fmt == "megengine":
            from lar_prec.diagnosis.megcompat import megengine_text

            for block in megengine_text(tree.comparison):  # type: ignore[arg-type]
                click.echo(_lines_shown(block))
            missing = [d.id for d in tree.diffs if d.status == "missing"]
            if missing:
                click.echo(f"note: {len(missing)} var(s) dumped on one side only, not printed: {missing[:10]}", err=True)
        else:
            render_terminal(report, _report_out(), all_vars=all_vars)
    _write_outputs(report, json_out, html_out)  # after the table: a failing write keeps the verdict shown
    sys.exit(exit_code(report))


@cli.command("tree")
@click.argument("diff_txt", type=click.Path(path_type=str))
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Write the JSON report; '-' for stdout.")
@click.option("--html", "html_out", metavar="FILE", default=None, help="Write the HTML report (one offline file).")
@handle_errors
def tree_cmd(diff_txt: str, json_out: str | None, html_out: str | None) -> None:
    """Roots of what `python -m megengine.tools.compare_binary_iodump` printed.

    Like accuracy_shake_var_tree, without its bugs: 'not finite' and 'shape mismatch'
    failures count, any file order works, vars without inputs can be roots. Exit code 0 when
    the text lists no failure, 1 when it does, 2 when it cannot be read.
    """
    from lar_prec.report.model import exit_code
    from lar_prec.report.terminal import render_terminal
    from lar_prec.workflows.tree import tree_report

    check_report_outputs(json_out, html_out, [diff_txt], make_parents=False)
    report = tree_report(diff_txt)
    if json_out != "-":
        render_terminal(report, _report_out())
    _write_outputs(report, json_out, html_out)
    sys.exit(exit_code(report))


# ---------------------------------------------------------------- quant and mixed (issue 23)
def _advice_outputs(data: dict, render: Any, json_out: str | None, html_out: str | None) -> None:
    """The terminal view (unless the JSON goes to stdout), --json and --html of a command whose
    result is its own JSON (``quant``, ``mixed``: no Report)."""
    from lar_prec.outputs import atomic_write_text, json_text
    from lar_prec.report.html import write_html

    if json_out != "-":  # the verdict first: it survives a failing write
        render(data, _report_out())
    if html_out:
        write_html(data, html_out)
    if json_out == "-":
        click.echo(json_text(data), nl=False)
    elif json_out:
        atomic_write_text(json_out, json_text(data), what="JSON result")



@cli.command("quant")
@click.argument("float_model", type=click.Path(path_type=str))
@click.argument("quant_model", type=click.Path(path_type=str))
@click.option("--input", "inputs", multiple=True, metavar="SPEC", help="Inputs, as for naive-vs-default.")
@click.option("--out", default=None, metavar="DIR", help="Parent folder of the analysis folder.")
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Write the JSON result; '-' for stdout.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Kill a run after S seconds.")
@click.option("--html", "html_out", metavar="FILE", default=None, help="Also write the HTML page here.")
@click.option("--lar", "lar_path", metavar="PATH", default=None, help="The load_and_run to use. [default: bundled]")
@handle_errors
def quant_cmd(float_model: str, quant_model: str, inputs: tuple, out: str | None, json_out: str | None,
              html_out: str | None, timeout: float | None, lar_path: str | None) -> None:
    """Per-layer error of QUANT_MODEL (int8) against FLOAT_MODEL, worst first.

    Exit code 1 when some layer should stay in float (local SNR far below the others), 0 when none.
    """
    from lar_prec.report.quant import render_quant_terminal
    from lar_prec.workflows.quant import quant_analysis

    check_report_outputs(json_out, html_out, input_paths(float_model, inputs, lar_path) + [quant_model])
    res = quant_analysis(float_model, quant_model, list(inputs), out=out, lar=lar_path, timeout=timeout)
    data = res.to_json()
    _advice_outputs(data, render_quant_terminal, json_out, html_out)
    sys.exit(1 if data["keep_in_float"] else 0)
# ---------------------------------------------------------------- end quant


# ---------------------------------------------------------------- mixed (issue 23)
@cli.command("mixed")
@click.argument("model", type=click.Path(path_type=str))
@click.option("--input", "inputs", multiple=True, metavar="SPEC", help="Inputs, as for naive-vs-default.")
@click.option("--option", "option", type=click.Choice(["ioc16", "io16xc32"]), default="ioc16", show_default=True,
              help="The float16 option to deploy with.")
@click.option("--tolerance", type=click.FloatRange(min=0), default=None, metavar="E",
              help="Largest MegEngine error (|a-b|/max(|a|,|b|,1)) allowed on every output against the naive "
                   "float32 reference. [default: 4 float16 units, 2^-8]")
@click.option("--out", default=None, metavar="DIR", help="Parent folder of the analysis folder.")
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Write the JSON result; '-' for stdout.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Kill a run after S seconds.")
@click.option("--lar", "lar_path", metavar="PATH", default=None, help="The load_and_run to use. [default: bundled]")
@click.option("--html", "html_out", metavar="FILE", default=None, help="Also write the HTML page here.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@handle_errors
def mixed_cmd(model: str, inputs: tuple, option: str, tolerance: float | None, out: str | None,
              json_out: str | None, html_out: str | None, timeout: float | None, lar_path: str | None,
              quiet: bool) -> None:
    """Which operators of MODEL to keep in float32 under --enable-ioc16 / --enable-io16xc32, verified.

    Proposes the operators whose local error under the option exceeds their float16 floor,
    writes a model with them in float32 and the rest in float16, runs it and widens the list
    until every output is within --tolerance of the naive float32 reference. Writes the
    keep-list (keep.json), the mixed model (mixed-N.mge) and mixed.json in the analysis folder.

    Exit code 0 when the option alone is within tolerance, 1 when operators must be kept in float32.
    """
    from lar_prec.report.mixed import render_mixed_terminal
    from lar_prec.workflows.mixed import DEFAULT_TOLERANCE, mixed_analysis

    check_report_outputs(json_out, html_out, input_paths(model, inputs, lar_path), analysis_dir=out)
    say = None if quiet else (lambda msg: click.echo(f"lar-prec mixed: {msg}", err=True))
    res = mixed_analysis(model, list(inputs), option=option,
                         tolerance=DEFAULT_TOLERANCE if tolerance is None else tolerance, out=out, lar=lar_path,
                         timeout=timeout, progress=say)
    _advice_outputs(res.to_json(), render_mixed_terminal, json_out, html_out)
    sys.exit(1 if res.needs_float32 else 0)
# ---------------------------------------------------------------- end mixed


@cli.command("replay")
@click.argument("repro_dir", type=click.Path(path_type=str))
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Kill a run after S seconds. [default: 600]")
@click.option("--lar", "lar_path", metavar="PATH", default=None,
              help="The load_and_run whose output is in question (the test side). [default: bundled]")
@handle_errors
def replay_cmd(repro_dir: str, timeout: float | None, lar_path: str | None) -> None:
    """Run a repro folder (repro-<id>/ of an analysis) again and say whether it reproduces.

    Runs the one-operator model under the test and the reference configuration, each in a
    fresh load_and_run (the test side's: --lar), on the recorded inputs. Exit code 1 when the
    divergence is reproduced (the test output is the recorded one bit for bit, or at least
    half the recorded error away from the reference: "not bit for bit"), 0 when it is not,
    2 for a folder that is not a repro, 3 when a run failed.
    """
    from lar_prec.diagnosis.local import DEFAULT_TIMEOUT
    from lar_prec.diagnosis.replay import replay, replay_verdict

    code, line = replay_verdict(replay(repro_dir, timeout=timeout or DEFAULT_TIMEOUT, lar=lar_path))
    click.echo(line)
    sys.exit(code)


def _run_cli() -> int:
    """Run the command group; every way out becomes a documented exit code.

    click's standalone mode would print "Aborted!" and exit 1 for a Ctrl-C outside a command
    (while parsing); here it is 130 like inside one (handle_errors).
    """
    try:
        rv = cli.main(prog_name="lar-prec", standalone_mode=False)
    except click.exceptions.ClickException as e:
        e.show()
        return e.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("Error: interrupted (Ctrl-C)", err=True)
        return 130
    return rv if isinstance(rv, int) else 0


def main() -> None:
    """Console-script entry point."""
    from lar_prec.outputs import make_output_pipe_safe

    make_output_pipe_safe()
    if len(sys.argv) > 1 and sys.argv[1] in ("compare", "tree"):
        # these own the process and run their own workers: OpenBLAS's thread pool, started
        # when numpy is imported, only burns CPU there (measured: ~0.1 s less CPU, and the
        # 1 GB compare ~10% faster on 2 cores). Float32 dots give the same bits either way.
        # Not for commands that start load_and_run, whose environment must stay the user's.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        # a comparison builds a few records per var (tens of thousands) and no cycles: the
        # collector's passes over them took a tenth of comparing 20,000 small vars
        gc.freeze()
        gc.set_threshold(100_000, 50, 100)
        try:
            code = _run_cli()
        except SystemExit as e:
            if not (e.code is None or isinstance(e.code, int)):
                raise
            code = e.code or 0
        # the report is written and the workers joined: skip tearing down every module and
        # object of a process that ends now (~40 ms of a 1 GB compare)
        import logging

        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    sys.exit(_run_cli())


if __name__ == "__main__":
    main()
