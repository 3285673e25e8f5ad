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

__all__ = [
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
