"""The ``lar-prec`` command line: thin click commands over the library.

This package is the only place that imports click. Each command parses options, makes one library
call, renders the result and maps it to the exit codes of ``shared/design.md``:
0 no divergence, 1 divergence found, 2 usage or input error, 3 a load_and_run run failed,
4 internal error of lar-prec (traceback saved to a file), 130 interrupted.

``group`` holds the command group and ``main`` (re-exported here: ``lar_prec.cli:main`` is the
console script); ``common`` what the commands share; ``analysis``, ``compare``, ``precision`` and
``run`` the commands, by group.
"""
from lar_prec.cli.group import cli, main

__all__ = ["cli", "main"]
