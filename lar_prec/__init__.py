"""lar-prec: find where MegEngine inference loses precision.

Runs ``load_and_run`` under several configurations, dumps every operator's output, compares
the dumps and walks the variable graph to the root variable where divergence starts.

Importing this package imports neither megengine nor click: parsing, comparing and rooting
work on a machine that has only numpy and networkx.
"""
from __future__ import annotations

__version__ = "0.1.0"

from lar_prec.errors import (  # noqa: F401  (re-exported API)
    AnalysisInterrupted,
    DumpFolderError,
    DumpFormatError,
    LarPrecError,
    LoadAndRunNotFound,
    RunError,
    RunTimeout,
    UsageError,
)

# The public API, imported on first use: ``import lar_prec`` stays cheap (no numpy,
# networkx, rich, click or megengine), which keeps ``lar-prec --help`` fast.
_LAZY = {
    "naive_vs_default": "lar_prec.workflows",
    "shake": "lar_prec.workflows",
    "Analysis": "lar_prec.workflows",
    "sweep": "lar_prec.sweep",
    "SweepAnalysis": "lar_prec.sweep",
    "compare_folders": "lar_prec.compare",
    "compare_arrays": "lar_prec.compare",
    "Comparison": "lar_prec.compare",
    "VarDiff": "lar_prec.compare",
    "Threshold": "lar_prec.compare",
    "VarTree": "lar_prec.vartree",
    "Root": "lar_prec.vartree",
    "DumpFolder": "lar_prec.iodump",
    "read_binary_dump": "lar_prec.iodump",
    "write_binary_dump": "lar_prec.iodump",
    "read_text_dump": "lar_prec.iodump",
    "Report": "lar_prec.report",
    "run_once": "lar_prec.runner",
    "RunResult": "lar_prec.runner",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lar_prec' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    *_LAZY,
    "__version__",
    "LarPrecError",
    "UsageError",
    "DumpFormatError",
    "DumpFolderError",
    "RunError",
    "RunTimeout",
    "LoadAndRunNotFound",
    "AnalysisInterrupted",
]
