"""lar-prec: find where MegEngine inference loses precision.

Runs ``load_and_run`` under several configurations, dumps every operator's output, compares
the dumps and walks the variable graph to the root variable where divergence starts.

Importing this package imports neither megengine nor click: parsing, comparing and rooting
work on a machine that has only numpy and networkx.
"""
from __future__ import annotations

__version__ = "0.1.0"

from lar_prec.errors import (
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
# networkx, rich, click or megengine), which keeps ``lar-prec --help`` fast. No name here is
# also a module of this package, so a name always gives the function or class it says (a
# submodule imported later would otherwise replace the package attribute).
_LAZY = {
    "naive_vs_default": "lar_prec.workflows.naive_vs_default.naive_vs_default",
    "shake": "lar_prec.workflows.shake.shake",
    "sweep": "lar_prec.workflows.sweep.sweep",
    "diff": "lar_prec.workflows.diff.diff",
    "bisect": "lar_prec.workflows.bisect.bisect",
    "reduce": "lar_prec.workflows.reduce.reduce",
    "parse_targets": "lar_prec.workflows.devices.devices",
    "Analysis": "lar_prec.workflows.common.analysis",
    "SweepAnalysis": "lar_prec.workflows.sweep.sweep",
    "RemoteSpec": "lar_prec.run.device",
    "compare_folders": "lar_prec.compare.folders",
    "compare_arrays": "lar_prec.compare.arrays",
    "Comparison": "lar_prec.compare.records",
    "VarDiff": "lar_prec.compare.records",
    "Threshold": "lar_prec.compare.threshold",
    "VarTree": "lar_prec.diagnosis.tree",
    "Root": "lar_prec.diagnosis.tree",
    "DumpFolder": "lar_prec.dumps.folder",
    "read_binary_dump": "lar_prec.dumps.binary",
    "write_binary_dump": "lar_prec.dumps.binary",
    "read_text_dump": "lar_prec.dumps.textdump",
    "Report": "lar_prec.report.model",
    "run_once": "lar_prec.run.once",
    "RunResult": "lar_prec.run.record",
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
