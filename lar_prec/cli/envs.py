"""The commands on two environments: ``diff`` (the same model in two builds, devices, flag sets
or environments, each side against its own jitter) and ``bisect`` (the first build of an
ordered list whose output leaves the good end's band). Each imports its workflow when it runs,
so ``lar-prec --help`` stays fast."""
from __future__ import annotations

import os
import sys

import click

from lar_prec.cli.common import (advice_outputs, finish_analysis, handle_errors, report_out, store_option, to_store,
                                 write_outputs)
from lar_prec.clisupport import ProgressBars, check_report_outputs, input_paths, pass_through_flags
from lar_prec.errors import UsageError

_INPUT = click.option("--input", "inputs", multiple=True, metavar="SPEC",
                      help="name:file.npy | name:{1,3,8,8} (seeded random data) | name:[1,2,3] | name:random[LOW,HIGH]@SEED; "
                   "repeat or join with ';'. Without --input every input gets seeded random data.")
_REPEAT = click.option("-n", "--repeat", type=int, default=2, show_default=True,
                       help="Runs of each side (of the good end, for bisect): at least 2, its jitter is the band.")
_CONFIG = click.option("--config", "config_name", type=click.Choice(["default", "reproducible", "fast-run"]),
                       default="default", show_default=True, help="Configuration of every run.")
_COMMON = [
    click.option("--lar-args", "lar_args", multiple=True, metavar="FLAGS",
                 help="load_and_run flags for every run, e.g. --lar-args '--multithread 2' (or put them after --)."),
    click.option("--out", type=click.Path(path_type=str), default=None,
                 help="Analysis folder. [default: ./lar-prec-out/<command>-N]"),
    click.option("--json", "json_out", metavar="FILE|-", default=None, help="Also write the JSON result here ('-': stdout)."),
    click.option("--html", "html_out", metavar="FILE", default=None, help="Also write the HTML page here."),
    click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
                 help="Kill a run (its whole process group) after S seconds."),
    click.option("--seed", type=int, default=0, show_default=True, help="Seed of random data for shape-only inputs."),
    click.option("-q", "--quiet", is_flag=True, help="No progress on stderr."),
]


def _common(func):  # type: ignore[no-untyped-def]
    for opt in reversed(_COMMON):
        func = opt(func)
    return func


def _side_options(func):  # type: ignore[no-untyped-def]
    for s in ("b", "a"):
        side = s.upper()
        for opt in reversed([
            click.option(f"--{s}-lar", f"{s}_lar", metavar="PATH", default=None,
                         help=f"Side {side}'s load_and_run ('bundled'; with --{s}-remote its path on the device). "
                              "[default: $LAR_PREC_LOAD_AND_RUN, load_and_run on PATH, bundled]"),
            click.option(f"--{s}-remote", f"{s}_remote", metavar="ssh:[user@]host[:port]|adb[:serial]", default=None,
                         help=f"Run side {side} on this device [default: this machine]."),
            click.option(f"--{s}-flags", f"{s}_flags", multiple=True, metavar="FLAGS",
                         help=f"load_and_run flags of side {side} only, e.g. --{s}-flags '--enable-nchw44'."),
            click.option(f"--{s}-env", f"{s}_env", multiple=True, metavar="NAME=VALUE",
                         help=f"An environment variable of side {side}'s runs (-NAME removes it). Repeatable."),
        ]):
            func = opt(func)
    return func


def _side(name: str, lar: str | None, remote: str | None, flags: tuple, env: tuple):  # type: ignore[no-untyped-def]
    from lar_prec.run.argv import check_extra_flags, parse_env_assignments, split_lar_args
    from lar_prec.workflows.diff.sides import Side

    own = split_lar_args(flags)
    check_extra_flags(own)
    pass_through_flags((), own)  # a misspelt flag: exit 2 before anything runs
    return Side(name, lar=lar, remote=remote, flags=own, env=tuple(parse_env_assignments(env).items()))


@click.command("diff", context_settings={"ignore_unknown_options": True})
@click.argument("paths", nargs=-1, type=click.UNPROCESSED, metavar="MODEL | DIR_A DIR_B [-- LOAD_AND_RUN_FLAGS]")
@_INPUT
@_side_options
@_REPEAT
@_CONFIG
@_common
@click.option("--no-local", is_flag=True, help="Do not measure local error: neither each side against the naive "
                                               "reference (within rounding) nor B's operator on A's inputs at the "
                                               "root; outside jitter is then the last tier.")
@click.option("--remote-dir", "remote_dir", metavar="DIR", default=None, help="The devices' working folder.")
@click.option("--keep-remote", is_flag=True, help="Keep each run's folder on the device after pulling it.")
@store_option
@handle_errors
def diff_cmd(paths: tuple, inputs: tuple, a_lar: str | None, a_remote: str | None, a_flags: tuple, a_env: tuple,
             b_lar: str | None, b_remote: str | None, b_flags: tuple, b_env: tuple, repeat: int, config_name: str,
             lar_args: tuple, out: str | None, json_out: str | None, html_out: str | None, timeout: float | None,
             seed: int, quiet: bool, no_local: bool, remote_dir: str | None, keep_remote: bool,
             store: str | None = None) -> None:
    """Two environments disagree: is it more than each varies by itself, and where does it start?

    Runs MODEL on side A and side B (--a-lar/--b-lar builds, --a-remote/--b-remote devices,
    --a-flags/--b-flags, --a-env/--b-env), each --repeat times to measure its own jitter, and
    judges every operator: equal, within jitter (no more than the two sides vary by
    themselves), within rounding (more, but each side within the operator's bound of the
    naive reference, by local error: a kernel change, both correct), outside (a precision
    change), or nonfinite. The first operator outside is the root, with its local error on
    A's inputs, the side the float64 oracle finds nearer, and whether B's wrong value is the
    same bits in each of its runs. Or give two analysis folders made before (DIR_A DIR_B:
    shake, diff sides), or two store runs with --store: no runs. Exit code 0 nothing outside
    (or the two sides are the same), 1 an operator outside, 2 usage or input error, 3 a run
    failed.
    """
    sides_given = any((a_lar, a_remote, a_flags, a_env, b_lar, b_remote, b_flags, b_env))
    # MODEL or DIR_A DIR_B first, then load_and_run flags (their values too: --multithread 2)
    cut = next((k for k, p in enumerate(paths) if p.startswith("-")), len(paths))
    names, trailing = list(paths[:cut]), tuple(paths[cut:])
    if len(names) == 2:
        if inputs or sides_given or trailing or lar_args:
            raise UsageError("diff DIR_A DIR_B compares two analyses made before and runs nothing: --input, --a-*/"
                             "--b-* and load_and_run flags belong to diff MODEL")
        _diff_made(names, store, out, json_out, html_out, quiet)
        return
    if len(names) != 1:
        raise UsageError(f"diff takes MODEL (and --input, --a-*/--b-*) or two analysis folders DIR_A DIR_B, "
                         f"got {len(names)} path(s)")
    from lar_prec.workflows.diff.diff import diff
    from lar_prec.workflows.diff.sides import identical_sides

    model = names[0]
    shared = pass_through_flags(lar_args, trailing)
    a, b = _side("a", a_lar, a_remote, a_flags, a_env), _side("b", b_lar, b_remote, b_flags, b_env)
    same = identical_sides(a, b)
    if same:  # nothing can differ: said, and no divergence
        click.echo(f"Nothing to diff: {same}")
        sys.exit(0)
    check_report_outputs(json_out, html_out, input_paths(model, inputs, None), analysis_dir=out)
    with ProgressBars(not quiet) as progress:
        analysis = diff(model, inputs, a, b, repeat=repeat, config=config_name, extra_flags=shared, out=out,
                        remote_dir=remote_dir, keep_remote=keep_remote, timeout=timeout, seed=seed,
                        local=not no_local, progress=progress)
    finish_analysis(analysis, json_out, html_out, quiet, store)


def _diff_made(names: list, store: str | None, out: str | None, json_out: str | None, html_out: str | None,
               quiet: bool) -> None:
    """``diff DIR_A DIR_B``: two analysis folders, or two runs of the store (by uid)."""
    from lar_prec.report.terminal import render_terminal
    from lar_prec.workflows.diff.diff import diff_folders, store_run_folders

    if store and not all(os.path.isdir(n) for n in names):
        names = store_run_folders(store, names)
    if os.path.realpath(names[0]) == os.path.realpath(names[1]):
        click.echo(f"Nothing to diff: {names[0]} is given as both sides")
        sys.exit(0)
    check_report_outputs(json_out, html_out, names, analysis_dir=out)
    analysis = diff_folders(names[0], names[1], out=out)
    if json_out != "-":
        render_terminal(analysis.report, report_out())
    if not quiet:
        click.echo(f"analysis folder: {analysis.dir} (report.json, report.html)", err=True)
    write_outputs(analysis.report, json_out, html_out)
    to_store(store, analysis.report)
    sys.exit(analysis.exit_code)


@click.command("bisect", context_settings={"ignore_unknown_options": True})
@click.argument("model", type=click.Path(path_type=str))
@click.argument("lar_flags", nargs=-1, type=click.UNPROCESSED, metavar="[-- LOAD_AND_RUN_FLAGS]")
@_INPUT
@click.option("--builds", required=True, metavar="DIR|PATH,PATH,...",
              help="The builds, oldest first: a folder of load_and_run programs (sorted by name, numbers as "
                   "numbers) or paths joined by commas.")
@click.option("--good", required=True, metavar="BUILD", help="A build that is good: its index (1-based), path or name.")
@click.option("--bad", required=True, metavar="BUILD", help="A later build that is bad: its index, path or name.")
@click.option("--operator", default=None, metavar="NAME|KEY|ID",
              help="Bad means this variable leaves the good end's band [default: any model output does].")
@click.option("--env", "env_items", multiple=True, metavar="NAME=VALUE",
              help="An environment variable of every run (-NAME removes it). Repeatable.")
@_REPEAT
@_CONFIG
@_common
@click.option("--store", "store", metavar="URL", envvar="LAR_PREC_STORE", default=None,
              help="Cache every build's result in this results store (an SQLite file or postgresql://...): "
                   "a second bisect reuses them. [default: $LAR_PREC_STORE; none]")
@click.option("--no-local", is_flag=True, help="Bad is outside the good end's band, rounding not judged (no naive "
                                               "reference, no layerwise runs).")
@handle_errors
def bisect_cmd(model: str, lar_flags: tuple, inputs: tuple, builds: str, good: str, bad: str, operator: str | None,
               env_items: tuple, repeat: int, config_name: str, lar_args: tuple, out: str | None,
               json_out: str | None, html_out: str | None, timeout: float | None, seed: int, quiet: bool,
               store: str | None, no_local: bool) -> None:
    """Since which build did precision change? Bisect an ordered list of load_and_run builds.

    Runs the good end --repeat times (its jitter is the band) and the bad end once; the bad
    end must be bad. Then each step runs the build that halves the rest: a build is bad when
    a model output (or --operator) is outside rounding (outside the good end's band, and the
    good end or the build out of an operator's bound of the naive reference, by local
    error), skipped when it cannot load the model or crashes. A bad build runs once more: is
    its wrong value the same bits? Names the first bad build and the root operator in it, in
    at most ceil(log2 N) + 2 analyses for N builds. Exit code 0 the bad end is not bad
    (within the band or within rounding), 1 a first bad build found, 2 usage or input
    error, 3 an end cannot run.
    """
    from lar_prec.report.envs import render_bisect_terminal
    from lar_prec.run.argv import parse_env_assignments
    from lar_prec.workflows.bisect.bisect import bisect

    check_report_outputs(json_out, html_out, input_paths(model, inputs, None), analysis_dir=out)
    env = parse_env_assignments(env_items)

    def said(e: dict) -> None:
        if not quiet:
            click.echo(f"build #{e['index']} {e['build']}: {e['verdict']}"
                       f"{' (from the store)' if e.get('source') == 'store' else ''}: {e.get('why', '')}", err=True)

    data = bisect(model, inputs, builds, good, bad, operator=operator, repeat=repeat, config=config_name,
                  extra_flags=pass_through_flags(lar_args, lar_flags), env=env, out=out, store=store, timeout=timeout,
                  seed=seed, on_build=said, local=not no_local)
    advice_outputs(data, render_bisect_terminal, json_out, html_out)
    sys.exit(int(data["exit_code"]))
