"""The ``lar-prec`` command group with every command attached, and ``main``, the console script
(``lar-prec`` and ``python -m lar_prec``): every way out becomes a documented exit code."""
from __future__ import annotations

import gc
import os
import sys
from typing import Any

import click

from lar_prec import __version__
from lar_prec.cli.analysis import devices_cmd, naive_vs_default_cmd, shake_cmd, sweep_cmd
from lar_prec.cli.common import add_view_options, handle_errors
from lar_prec.cli.compare import compare_cmd, tree_cmd
from lar_prec.cli.envs import bisect_cmd, diff_cmd
from lar_prec.cli.precision import mixed_cmd, quant_cmd
from lar_prec.cli.reduce import reduce_cmd
from lar_prec.cli.run import replay_cmd, run_cmd
from lar_prec.cli.schema import schema_cmd
from lar_prec.cli.store import baseline_group, check_cmd, history_cmd, store_group
from lar_prec.cli.triage import list_cmd, node_cmd
from lar_prec.cli.zoo import zoo_cmd


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


for _command in (naive_vs_default_cmd, shake_cmd, devices_cmd, sweep_cmd, run_cmd, compare_cmd, tree_cmd, list_cmd,
                 node_cmd, quant_cmd, mixed_cmd, replay_cmd, check_cmd, baseline_group, history_cmd, store_group, diff_cmd,
                 bisect_cmd, zoo_cmd, reduce_cmd, schema_cmd):
    add_view_options(_command)
    cli.add_command(_command)


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


#: commands that end with os._exit once their reports are written: each joins its threads,
#: reaps its runs and closes its device sessions itself (not zoo or store: Dask clusters and
#: database pools clean up in atexit handlers)
_OWN_EXIT = ("compare", "tree", "naive-vs-default", "shake", "sweep")


def main() -> None:
    """Console-script entry point."""
    from lar_prec.outputs import make_output_pipe_safe

    make_output_pipe_safe()
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command in _OWN_EXIT:
        if command in ("compare", "tree"):
            # these own the process and run their own workers: OpenBLAS's thread pool, started
            # when numpy is imported, only burns CPU there (measured: ~0.1 s less CPU, and the
            # 1 GB compare ~10% faster on 2 cores). Float32 dots give the same bits either way.
            # Not for commands that start load_and_run, whose environment must stay the user's.
            os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        # a comparison builds a few records per var (tens of thousands) and no cycles: the
        # collector's passes over them took a tenth of comparing 20,000 small vars, and even
        # rare ones (every 100,000 objects) 40 ms each; compare and tree of dumps run no
        # collection at all (their memory is the records they return; cycles are the few of an
        # error path). Not with --model: that builds and runs a model in this process.
        gc.freeze()
        if command in ("compare", "tree") and not any(a == "--model" or a.startswith("--model=") for a in sys.argv):
            gc.disable()
        else:
            gc.set_threshold(100_000, 50, 100)
        try:
            code = _run_cli()
        except SystemExit as e:
            if not (e.code is None or isinstance(e.code, int)):
                raise
            code = e.code or 0
        # the report is written, the runs reaped and the workers joined: skip tearing down
        # every module and object of a process that ends now (~40 ms of a 1 GB compare, 20-40 ms
        # of a naive-vs-default)
        import logging

        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    sys.exit(_run_cli())
