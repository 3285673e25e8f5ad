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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lar-prec")
def cli() -> None:
    """Find where MegEngine inference loses precision.

    Runs load_and_run under the reference kernels (MGB_USE_MEGDNN_DBG=2), the default
    kernels, --reproducible and repeated runs; dumps every operator's output; compares the
    dumps and names the root variable where the divergence starts.

    Exit codes: 0 no divergence, 1 divergence found, 2 usage or input error,
    3 a load_and_run run failed.
    """


# ---- commands are added below, one section per issue ----


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="lar-prec")


if __name__ == "__main__":
    main()
