"""The ``lar-prec`` command line: thin click commands over the library.

This is the only module that imports click. Each command parses options, makes one library
call, renders the result and maps it to the exit codes of ``shared/design.md``:
0 no divergence, 1 divergence found, 2 usage or input error, 3 a load_and_run run failed.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, TypeVar

import click

from lar_prec import __version__
from lar_prec.errors import LarPrecError

F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(func: F) -> F:
    """Turn a LarPrecError into ``Error: <one line>`` on stderr and its documented exit code."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except LarPrecError as exc:
            msg = " ".join(str(exc).split("\n")[0].split()) or type(exc).__name__
            click.echo(f"Error: {msg}", err=True)
            tail = getattr(exc, "stderr_tail", "")
            if tail:
                click.echo(tail.rstrip(), err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from lar_prec.compare import kernel_state  # imports no numpy

        click.echo(f"lar-prec {__version__} (compare: {kernel_state()})")
        ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version (and whether compare runs its C kernel) and exit.")
def cli() -> None:
    """Find where MegEngine inference loses precision.

    Runs load_and_run under the reference kernels (MGB_USE_MEGDNN_DBG=2), the default
    kernels, --reproducible and repeated runs; dumps every operator's output; compares the
    dumps and names the root variable where the divergence starts.

    Exit codes: 0 no divergence, 1 divergence found, 2 usage or input error,
    3 a load_and_run run failed.
    """


# ---- commands are added below, one section per issue ----


# ---- workflow commands (naive-vs-default, shake) ----


def _console(stderr: bool = False):
    from rich.console import Console

    import shutil

    # Piped output gets a readable width instead of rich's 80 columns.
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else max(120, shutil.get_terminal_size((120, 24)).columns)
    return Console(stderr=stderr, soft_wrap=False, width=width)


class _Progress:
    """Rich progress bars on a terminal for runs and comparison; nothing otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self._bar = None
        self._tasks: dict = {}

    def __enter__(self) -> "_Progress":
        if self.enabled:
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                                 TimeElapsedColumn(), console=_console(stderr=True), transient=True)
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self._bar is None:
            return
        label = {"runs": "load_and_run runs", "compare": "comparing dumps"}.get(stage, stage)
        if stage not in self._tasks:
            self._tasks[stage] = self._bar.add_task(label, total=max(total, 1))
        self._bar.update(self._tasks[stage], completed=done, total=max(total, 1))


def _lar_flags(lar_args: tuple, trailing: tuple) -> tuple:
    from lar_prec.runner import split_lar_args

    return split_lar_args(lar_args) + tuple(trailing)


def _finish_analysis(analysis: Any, json_out: str | None, html_out: str | None, quiet: bool) -> None:
    """Render an Analysis: terminal report, --json, --html; exit with its code."""
    import shutil

    from lar_prec.report import render_terminal, write_json

    if json_out is not None:
        if json_out == "-":
            write_json(analysis.report, "-", stream=sys.stdout)
        else:
            write_json(analysis.report, json_out)
    if html_out is not None and analysis.html_path is not None:
        shutil.copyfile(analysis.html_path, html_out)
    if json_out != "-":
        render_terminal(analysis.report, _console())
    if not quiet:
        click.echo(f"analysis folder: {analysis.dir} (report.json, report.html, one folder per run)", err=True)
    sys.exit(analysis.exit_code)


_workflow_options = [
    click.option("--input", "inputs", multiple=True, metavar="SPEC",
                 help="name:file.npy | name:{1,3,8,8} (seeded random data) | name:[1,2,3]; repeat or join with ';'."),
    click.option("--threshold", default=None, metavar="auto|X",
                 help="max_err above which a var diverges: 'auto' (from the data, per dtype) or a number "
                      "(compare_binary_iodump -e X; 0 = bitwise)."),
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
]


def workflow_options(func: F) -> F:
    for opt in reversed(_workflow_options):
        func = opt(func)
    return func


@cli.command("naive-vs-default")
@click.argument("model", type=click.Path(path_type=str))
@click.argument("lar_flags", nargs=-1, type=click.UNPROCESSED, metavar="[-- LOAD_AND_RUN_FLAGS]")
@workflow_options
@click.option("--text-dump", is_flag=True, help="Also make a --io-dump run and use its dependency edges.")
@click.option("-j", "--jobs", type=click.IntRange(1, 16), default=1, show_default=True, help="Runs at once.")
@handle_errors
def naive_vs_default_cmd(model: str, lar_flags: tuple, inputs: tuple, threshold: str | None, out: str | None,
                         json_out: str | None, html_out: str | None, lar_path: str | None, timeout: float | None,
                         lar_args: tuple, seed: int, quiet: bool, text_dump: bool, jobs: int) -> None:
    """Which operator computes wrongly? Reference kernels against the default ones.

    Runs MODEL with MGB_USE_MEGDNN_DBG=2 (naive reference kernels) and with the default
    kernels, each in a fresh process with --bin-io-dump, compares every variable and names
    the root variables where the divergence starts. Exit code 0 no divergence, 1 divergence
    found, 2 usage or input error, 3 a load_and_run run failed.
    """
    from lar_prec.workflows import naive_vs_default

    with _Progress(not quiet) as progress:
        analysis = naive_vs_default(model, inputs, out=out, threshold=threshold or "auto", lar=lar_path,
                                    timeout=timeout, extra_flags=_lar_flags(lar_args, lar_flags),
                                    text_dump=text_dump, jobs=jobs, seed=seed, progress=progress)
    _finish_analysis(analysis, json_out, html_out, quiet)


@cli.command("shake")
@click.argument("model", type=click.Path(path_type=str))
@click.argument("lar_flags", nargs=-1, type=click.UNPROCESSED, metavar="[-- LOAD_AND_RUN_FLAGS]")
@workflow_options
@click.option("-n", "--repeat", type=click.IntRange(2, 1000), default=3, show_default=True, help="Runs of the configuration.")
@click.option("--config", "config_name", type=click.Choice(["default", "reproducible", "fast-run"]), default="default",
              show_default=True, help="Configuration repeated: default kernels, --reproducible, or --fast-run.")
@click.option("-j", "--jobs", type=click.IntRange(1, 16), default=1, show_default=True,
              help="Runs at once (concurrent runs disturb each other's fast-run timing).")
@click.option("--no-explain", is_flag=True, help="Do not rerun to find the cause of jitter.")
@handle_errors
def shake_cmd(model: str, lar_flags: tuple, inputs: tuple, threshold: str | None, out: str | None,
              json_out: str | None, html_out: str | None, lar_path: str | None, timeout: float | None,
              lar_args: tuple, seed: int, quiet: bool, repeat: int, config_name: str, jobs: int,
              no_explain: bool) -> None:
    """Does the output jitter from run to run, where does it start, and what removes it?

    Runs MODEL --repeat times with one configuration, each in a fresh process. Jitter is any
    difference from run 1 (bitwise by default); roots are the first variables that differ
    while their inputs are equal. When there is jitter, reruns with algorithm choices pinned
    by a --fast-run-algo-policy cache (fast-run) and with --reproducible tell the cause.
    Exit code 0 no jitter, 1 jitter found, 2 usage or input error, 3 a run failed.
    """
    from lar_prec.workflows import shake

    with _Progress(not quiet) as progress:
        analysis = shake(model, inputs, repeat=repeat, config=config_name, jobs=jobs, out=out,
                         threshold=0.0 if threshold is None else threshold, explain=not no_explain,
                         lar=lar_path, timeout=timeout, extra_flags=_lar_flags(lar_args, lar_flags), seed=seed,
                         progress=progress)
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
@handle_errors
def run_cmd(model: str, config_name: str, inputs: tuple, text_dump: bool, out: str | None, lar_path: str | None,
            timeout: float | None, lar_args: tuple, env_items: tuple, seed: int) -> None:
    """Run load_and_run once on MODEL and keep its dump and run.json.

    Prints the run folder. Exit code 0 when the run succeeded, 3 when load_and_run failed
    (crash, error, timeout: its stderr tail is shown and kept in the run folder), 2 for
    usage or input errors.
    """
    from lar_prec.runner import parse_env_assignments, run_single, split_lar_args

    result = run_single(model, inputs, config_name, out, lar=lar_path, text_dump=text_dump, timeout=timeout,
                        extra_flags=split_lar_args(lar_args), extra_env=parse_env_assignments(env_items), seed=seed)
    click.echo(str(result.dir))
    what = result.text_dump if result.text_dump is not None else result.dump_dir
    click.echo(f"ok: {result.config} run in {result.seconds:.2f} s; dump: {what}", err=True)


# ---- compare / tree commands ----


def _write_json(obj: Any, dest: str) -> None:
    """Write ``obj`` as JSON to the file ``dest`` or, for ``-``, to stdout."""
    from lar_prec.errors import UsageError

    if dest == "-":
        out = click.get_text_stream("stdout")
        _dump_json(obj, out)
        out.flush()
        return
    try:
        with open(dest, "w", encoding="utf-8") as f:
            _dump_json(obj, f)
    except OSError as e:
        raise UsageError(f"cannot write the JSON report to {dest}: {e.strerror or e}") from None


def _dump_json(obj: Any, out: Any) -> None:
    """A report dict as JSON, one top-level key and one list item (a var, a root) per line.

    Streamed item by item (no second copy of a report with tens of thousands of vars; a
    value may be an iterator, e.g. ``to_report_json(lazy_vars=True)``'s vars, made as they
    are written), and through json's C encoder, which ``indent`` would turn off: the
    pure-Python one took longer than comparing 20,000 small vars.
    """
    import json
    from collections.abc import Iterator

    enc = json.JSONEncoder(allow_nan=False).encode
    out.write("{")
    sep = "\n"
    for k, v in obj.items():
        out.write(sep + " " + enc(k) + ": ")
        sep = ",\n"
        if isinstance(v, (list, Iterator)):
            items = iter(v)
            first = next(items, _END)
            if first is _END:
                out.write("[]")
                continue
            out.write("[\n  " + enc(first))
            for x in items:
                out.write(",\n  " + enc(x))
            out.write("\n ]")
        else:
            out.write(enc(v))
    out.write("\n}\n")


_END = object()


@cli.command("compare")
@click.argument("dir_a", type=click.Path(path_type=str))
@click.argument("dir_b", type=click.Path(path_type=str))
@click.option("--threshold", default="auto", show_default=True, metavar="auto|X",
              help="max_err above which a var diverges: 'auto' (from the data, per dtype) or a number, "
                   "like compare_binary_iodump -e X; 0 means bitwise.")
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Write the JSON report (design.md schema); '-' for stdout.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "megengine"]), default="table", show_default=True,
              help="stdout: a summary table, one CSV row per var, or what compare_binary_iodump prints "
                   "(for accuracy_shake_var_tree and `lar-prec tree`).")
@click.option("--text-dump", type=click.Path(path_type=str), default=None, help="A --io-dump text file of the same model: adds its dependency edges.")
@click.option("-j", "--jobs", type=click.IntRange(1, 64), default=None,
              help="Worker processes for big dumps (default: one per CPU; dumps under 48 MB use one).")
@click.option("--all", "all_vars", is_flag=True, help="Table: list every var, not only those that are not ok.")
@handle_errors
def compare_cmd(dir_a: str, dir_b: str, threshold: str, json_out: str | None, fmt: str, text_dump: str | None,
                jobs: int | None, all_vars: bool) -> None:
    """Compare two --bin-io-dump folders and name the root variables.

    Exit code 0 when every var agrees within the threshold, 1 when any var diverges (or has
    NaN/Inf in other places, another shape or dtype, or exists on one side only), 2 on bad input.
    """
    from lar_prec.compare import megengine_text
    from lar_prec.report import render_csv, render_table, to_report_json
    from lar_prec.vartree import VarTree

    tree = VarTree.from_folders(dir_a, dir_b, threshold=threshold, text_dump=text_dump, jobs=jobs)
    if json_out is not None:
        _write_json(to_report_json(tree, command="compare", extra={"exit_code": int(tree.diverged)}, lazy_vars=True), json_out)
    if json_out != "-":
        if fmt == "csv":
            click.echo(render_csv(tree), nl=False)
        elif fmt == "megengine":
            for block in megengine_text(tree.comparison):  # type: ignore[arg-type]
                click.echo(block)
            missing = [d.id for d in tree.diffs if d.status == "missing"]
            if missing:
                click.echo(f"note: {len(missing)} var(s) dumped on one side only, not printed: {missing[:10]}", err=True)
        else:
            click.echo(render_table(tree, all_vars=all_vars), nl=False)
    sys.exit(1 if tree.diverged else 0)


@cli.command("tree")
@click.argument("diff_txt", type=click.Path(path_type=str))
@click.option("--json", "json_out", metavar="FILE|-", default=None, help="Write the JSON report; '-' for stdout.")
@handle_errors
def tree_cmd(diff_txt: str, json_out: str | None) -> None:
    """Roots of what `python -m megengine.tools.compare_binary_iodump` printed.

    Like accuracy_shake_var_tree, without its bugs: 'not finite' and 'shape mismatch'
    failures count, any file order works, vars without inputs can be roots. Exit code 0 when
    the text lists no failure, 1 when it does, 2 when it cannot be read.
    """
    from lar_prec.errors import DumpFormatError
    from lar_prec.report import to_report_json
    from lar_prec.megcompat import tree_from_megengine_diff

    tree, md = tree_from_megengine_diff(diff_txt)
    if md.crashed and not md.entries:
        raise DumpFormatError(diff_txt, None, "compare_binary_iodump failures", f"only a traceback ({md.crashed})")
    if json_out is not None:
        extra = {"exit_code": int(tree.diverged), "crashed": md.crashed, "source": diff_txt}
        _write_json(to_report_json(tree, command="tree", extra=extra), json_out)
    if json_out != "-":
        n = len(tree.diffs)
        kinds: dict[str, int] = {}
        for e in md.entries:
            kinds[e.kind] = kinds.get(e.kind, 0) + 1
        click.echo(f"{n} differing var(s) in {diff_txt}" + (" (" + ", ".join(f"{v} {k}" for k, v in kinds.items()) + ")" if kinds else ""))
        if md.crashed:
            click.echo(f"note: compare_binary_iodump stopped with {md.crashed}; later files were not compared", err=True)
        roots = tree.roots()
        if roots:
            click.echo(f"roots ({len(roots)}, most likely origin first):")
        for r in roots:
            click.echo(f"id:{r.id}  {r.status}  {r.opr_type}  {r.name}")
            click.echo(f"  {r.note}")
    sys.exit(1 if tree.diverged else 0)


def main() -> None:
    """Console-script entry point."""
    if len(sys.argv) > 1 and sys.argv[1] in ("compare", "tree"):
        # these own the process and run their own workers: OpenBLAS's thread pool, started
        # when numpy is imported, only burns CPU there (measured: ~0.1 s less CPU, and the
        # 1 GB compare ~10% faster on 2 cores). Float32 dots give the same bits either way.
        # Not for commands that start load_and_run, whose environment must stay the user's.
        import os

        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        try:
            cli(prog_name="lar-prec")
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                # the report is written and the workers joined: skip tearing down every
                # module and object of a process that ends now (~40 ms of a 1 GB compare)
                import logging

                logging.shutdown()
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except (OSError, ValueError):
                        pass
                os._exit(e.code or 0)
            raise
        return
    cli(prog_name="lar-prec")


if __name__ == "__main__":
    main()
